"""The contract platform operators publish: queues, quotas, cohorts and priorities.

These are the parsed, canonical forms of Kueue's objects (ResourceFlavor, ClusterQueue, Cohort,
LocalQueue, WorkloadPriorityClass). They travel on the log inside ConfigApplied, so a replay always
decides under the contract that was in force. Quantities are integer milli units (see quantity.py).
"""

from __future__ import annotations

from typing import Literal

import msgspec

WithinClusterQueue = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
ReclaimWithinCohort = Literal["Never", "LowerPriority", "Any"]
QueueingStrategy = Literal["BestEffortFIFO", "StrictFIFO"]
BorrowWithinCohortPolicy = Literal["Never", "LowerPriority"]
#: Kueue's flavor fungibility: stop at the first flavor that fits this way, or try the next one.
WhenCanBorrow = Literal["MayStopSearch", "TryNextFlavor"]
WhenCanPreempt = Literal["MayStopSearch", "TryNextFlavor"]
FairSharingStrategy = Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
#: Weights and shares are in thousandths (1000 = 1.0), as quantities are.
WEIGHT_ONE = 1000


class Quota(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    nominal: int
    #: How much more than ``nominal`` this queue may borrow from its cohort (None: no limit).
    borrowing_limit: int | None = None
    #: How much of ``nominal`` this queue lends to its cohort (None: all of it).
    lending_limit: int | None = None


class FlavorQuotas(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    flavor: str
    resources: dict[str, Quota]


class BorrowWithinCohort(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """May a preemptor that borrows preempt other queues' workloads (below a threshold)?"""

    policy: BorrowWithinCohortPolicy = "Never"
    #: Only workloads of at most this priority may be preempted this way (None: lower than the preemptor).
    max_priority_threshold: int | None = None


class Preemption(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    within_cluster_queue: WithinClusterQueue = "Never"
    reclaim_within_cohort: ReclaimWithinCohort = "Never"
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort()


class FlavorFungibility(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    when_can_borrow: WhenCanBorrow = "MayStopSearch"
    when_can_preempt: WhenCanPreempt = "TryNextFlavor"


class ClusterQueue(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    flavors: list[FlavorQuotas]
    cohort: str | None = None
    preemption: Preemption = Preemption()
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    #: Fair-sharing weight in thousandths: a queue of weight 2000 is entitled to twice the share.
    fair_weight: int = WEIGHT_ONE

    def quota(self, resource: str) -> Quota | None:
        """The queue's quota for one resource, summed over its flavors (None: not covered)."""
        found = [f.resources[resource] for f in self.flavors if resource in f.resources]
        if not found:
            return None
        if len(found) == 1:
            return found[0]
        return Quota(
            nominal=sum(q.nominal for q in found),
            borrowing_limit=_sum_limits(q.borrowing_limit for q in found),
            lending_limit=_sum_limits(q.lending_limit for q in found),
        )


def _sum_limits(limits) -> int | None:
    total = 0
    for limit in limits:
        if limit is None:
            return None
        total += limit
    return total


class Cohort(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A node of the cohort tree: its own quota (lent to its members) and its parent."""

    name: str
    parent: str | None = None
    flavors: list[FlavorQuotas] = []
    fair_weight: int = WEIGHT_ONE


class LocalQueue(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    namespace: str
    name: str
    cluster_queue: str


class PriorityClass(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    value: int
    #: gangway extension: how long an evicted pod of this class has between SIGTERM and SIGKILL.
    grace_ms: int | None = None
    #: gangway extension: a workload of this class runs at least this long before it may be preempted.
    min_runtime_ms: int | None = None


class ResourceFlavor(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    node_labels: dict[str, str] = {}
    #: How much one unit of a resource of this flavor counts in fair shares (thousandths; an H100
    #: GPU may weigh 3000 beside a T4's 500). Resources not listed weigh 1000.
    resource_weights: dict[str, int] = {}
    #: Kueue's ``spec.topologyName``: the Topology whose levels shape this flavor's nodes (None: no
    #: Topology; a pod set's topology request then names a node label directly).
    topology_name: str | None = None


class Topology(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Kueue's Topology: node label keys, coarsest level first (``kubernetes.io/hostname`` last if at all)."""

    name: str
    levels: list[str]


class FairSharing(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Kueue's fair sharing (Configuration.fairSharing), with gangway's usage-decay option."""

    enable: bool = False
    preemption_strategies: list[FairSharingStrategy] = msgspec.field(
        default_factory=lambda: ["LessThanOrEqualToFinalShare", "LessThanInitialShare"])
    #: When set, shares count past usage too, halving every this many ms (Slurm's PriorityDecayHalfLife).
    usage_half_life_ms: int | None = None


class Price(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one unit of a flavor's resource costs per hour, in millionths of ``currency``."""

    flavor: str
    resource: str
    per_hour_micros: int


class Contract(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    flavors: list[ResourceFlavor] = []
    cluster_queues: list[ClusterQueue] = []
    local_queues: list[LocalQueue] = []
    priority_classes: list[PriorityClass] = []
    cohorts: list[Cohort] = []
    #: Priority of a workload that names no class and of a class nobody defined as default.
    default_priority: int = 0
    #: Grace period for evictions when the priority class gives none.
    default_grace_ms: int = 30_000
    fair_sharing: FairSharing = FairSharing()
    #: Among otherwise equal preemption candidates, evict the one that loses least work.
    checkpoint_aware: bool = True
    prices: list[Price] = []
    currency: str = "USD"
    topologies: list[Topology] = []

    def cluster_queue(self, name: str) -> ClusterQueue | None:
        for cq in self.cluster_queues:
            if cq.name == name:
                return cq
        return None

    def local_queue(self, namespace: str, name: str) -> LocalQueue | None:
        for lq in self.local_queues:
            if lq.namespace == namespace and lq.name == name:
                return lq
        return None

    def priority_class(self, name: str) -> PriorityClass | None:
        for pc in self.priority_classes:
            if pc.name == name:
                return pc
        return None
