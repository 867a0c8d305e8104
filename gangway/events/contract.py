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


class Quota(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    nominal: int
    #: How much more than ``nominal`` this queue may borrow from its cohort (None: no limit).
    borrowing_limit: int | None = None
    #: How much of ``nominal`` this queue lends to its cohort (None: all of it).
    lending_limit: int | None = None


class FlavorQuotas(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    flavor: str
    resources: dict[str, Quota]


class Preemption(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    within_cluster_queue: WithinClusterQueue = "Never"
    reclaim_within_cohort: ReclaimWithinCohort = "Never"


class ClusterQueue(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    flavors: list[FlavorQuotas]
    cohort: str | None = None
    preemption: Preemption = Preemption()
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"

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


class LocalQueue(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    namespace: str
    name: str
    cluster_queue: str


class PriorityClass(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    value: int
    #: gangway extension: how long an evicted pod of this class has between SIGTERM and SIGKILL.
    grace_ms: int | None = None


class ResourceFlavor(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    node_labels: dict[str, str] = {}


class Contract(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    flavors: list[ResourceFlavor] = []
    cluster_queues: list[ClusterQueue] = []
    local_queues: list[LocalQueue] = []
    priority_classes: list[PriorityClass] = []
    #: Priority of a workload that names no class and of a class nobody defined as default.
    default_priority: int = 0
    #: Grace period for evictions when the priority class gives none.
    default_grace_ms: int = 30_000

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
