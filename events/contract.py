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
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
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


SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
#: The label every Kubernetes namespace carries, with its own name as the value.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


class LabelRequirement(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    key: str
    operator: SelectorOperator
    values: list[str] = []

    def matches(self, labels: dict[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        found = self.key in labels and labels[self.key] in self.values
        return found if self.operator == "In" else not found


class LabelSelector(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A Kubernetes label selector: every matchLabels pair and every requirement must hold
    ({} selects everything)."""

    match_labels: dict[str, str] = {}
    match_expressions: list[LabelRequirement] = []

    def matches(self, labels: dict[str, str]) -> bool:
        return (all(labels.get(k) == v for k, v in self.match_labels.items())
                and all(req.matches(labels) for req in self.match_expressions))


class Namespace(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A Kubernetes Namespace named in the contract file, for its labels (namespaceSelector)."""

    name: str
    labels: dict[str, str] = {}


class ClusterQueue(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    flavors: list[FlavorQuotas]
    cohort: str | None = None
    #: Which namespaces may use this queue (Kueue's namespaceSelector); None: the field was left out,
    #: which gangway reads as every namespace (Kueue itself then admits from none).
    namespace_selector: LabelSelector | None = None
    preemption: Preemption = Preemption()
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    #: Fair-sharing weight in thousandths: a queue of weight 2000 is entitled to twice the share.
    fair_weight: int = WEIGHT_ONE
    #: Kueue's stopPolicy: Hold admits nothing new; HoldAndDrain evicts what it admitted too.
    stop_policy: StopPolicy = "None"

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
    #: Kueue's stopPolicy, for this LocalQueue's workloads only (as ClusterQueue.stop_policy).
    stop_policy: StopPolicy = "None"


class PriorityClass(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    value: int
    #: gangway extension: how long an evicted pod of this class has between SIGTERM and SIGKILL.
    grace_ms: int | None = None
    #: gangway extension: a workload of this class runs at least this long before it may be preempted.
    min_runtime_ms: int | None = None


class Taint(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A node's taint that keeps new pods off it unless they tolerate it (NoSchedule, NoExecute)."""

    key: str
    effect: str
    value: str = ""

    def __str__(self) -> str:
        """As kubectl writes it: ``key=value:effect`` (``key:effect`` without a value)."""
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


#: Taint effects Kubernetes accepts.
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
#: The effects that keep a pod off a node it does not tolerate (PreferNoSchedule only discourages).
KEEPS_OFF = ("NoSchedule", "NoExecute")


class Toleration(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A pod's toleration, as Kubernetes writes it (``operator`` Equal or Exists; ``effect`` "" : any)."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' rule: the effects agree (or the toleration names none), and the key and value
        match (Exists: the key only; an empty key with Exists tolerates every taint)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


class TolerationError(ValueError):
    """A toleration or a taint as written is wrong: ``field`` (key, operator, value, effect; "" for the
    whole) and why."""

    def __init__(self, field: str, why: str):
        super().__init__(why)
        self.field, self.why = field, why


def toleration_of(item) -> Toleration:
    """A toleration from its Kubernetes fields (``tolerationSeconds`` does not matter to placing);
    raises TolerationError."""
    fields = _string_fields(item, ("key", "operator", "value", "effect"))
    operator = fields.get("operator", "Equal")
    if operator not in ("Equal", "Exists"):
        raise TolerationError("operator", f"{operator!r} is neither Equal nor Exists")
    if operator == "Exists" and fields.get("value"):
        raise TolerationError("value", "must be empty when the operator is Exists")
    if operator == "Equal" and not fields.get("key"):
        raise TolerationError("key", "missing (only operator Exists may leave the key out)")
    if fields.get("effect", "") not in ("", *TAINT_EFFECTS):
        raise TolerationError("effect", f"{fields['effect']!r} is not NoSchedule, PreferNoSchedule or NoExecute")
    return Toleration(key=fields.get("key", ""), operator=operator, value=fields.get("value", ""),
                      effect=fields.get("effect", ""))


def taint_of(item) -> Taint:
    """A taint from its Kubernetes fields (a Node's ``spec.taints``, a ResourceFlavor's
    ``spec.nodeTaints``; ``timeAdded`` does not matter to placing); raises TolerationError."""
    fields = _string_fields(item, ("key", "value", "effect"))
    if not fields.get("key"):
        raise TolerationError("key", "missing")
    if fields.get("effect") not in TAINT_EFFECTS:
        raise TolerationError("effect", f"{fields.get('effect')!r} is not one of {', '.join(TAINT_EFFECTS)}")
    return Taint(key=fields["key"], effect=fields["effect"], value=fields.get("value", ""))


def _string_fields(item, keys: tuple[str, ...]) -> dict[str, str]:
    """The ``keys`` a mapping of Kubernetes fields sets (None: not set), each a string; raises
    TolerationError naming the first that is not (the field "" when ``item`` is no mapping)."""
    if not isinstance(item, dict):
        raise TolerationError("", f"must be a mapping, not {_type_of(item)}")
    fields = {k: item[k] for k in keys if item.get(k) is not None}
    for key, text in fields.items():
        if not isinstance(text, str):
            raise TolerationError(key, f"must be a string, not {_type_of(text)}")
    return fields


def _type_of(value) -> str:
    return "nothing" if value is None else type(value).__name__


class ResourceFlavor(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    node_labels: dict[str, str] = {}
    #: How much one unit of a resource of this flavor counts in fair shares (thousandths; an H100
    #: GPU may weigh 3000 beside a T4's 500). Resources not listed weigh 1000.
    resource_weights: dict[str, int] = {}
    #: Kueue's ``spec.topologyName``: the Topology whose levels shape this flavor's nodes (None: no
    #: Topology; a pod set's topology request then names a node label directly).
    topology_name: str | None = None
    #: Kueue's ``spec.tolerations``: the pods of a workload admitted with this flavor tolerate these
    #: too (the binder adds them to its pod templates, as Kueue does), so a tainted pool is one flavor.
    tolerations: list[Toleration] = []
    #: Kueue's ``spec.nodeTaints``: the taints this flavor's nodes carry (NoSchedule, NoExecute; a
    #: PreferNoSchedule one keeps no pod off). As Kueue's flavor assigner, a workload is not assigned
    #: this flavor when a pod set of it, with the flavor's tolerations, does not tolerate one of them.
    node_taints: list[Taint] = []

    @property
    def keeping_off(self) -> list[Taint]:
        """Its node taints that keep off the pods not tolerating them (not PreferNoSchedule)."""
        return [t for t in self.node_taints if t.effect in KEEPS_OFF]


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


#: How a billing period is cut (calendar, UTC): a month, an ISO week, a day or an hour.
BillingPeriod = Literal["monthly", "weekly", "daily", "hourly"]
#: OpenCost's ways of sharing the cost of GPUs nobody held: by each team's cost, evenly, or kept apart.
IdleCostSharing = Literal["weighted", "even", "apart"]


class Billing(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """gangway extension: when invoices are cut and what they carry."""

    period: BillingPeriod = "monthly"
    #: The period is cut at the first event this long past its end (late reports get in first).
    settle_ms: int = 600_000
    idle_cost: IdleCostSharing = "weighted"
    #: Credit the work lost to preemption (its list cost) on the victim team's invoice.
    credit_preemption_waste: bool = False


class IdleRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """gangway extension: a workload whose SMs stay below ``sm_active_below`` (thousandths) for
    ``for_ms`` is flagged idle; with ``preempt_first`` idle borrowers are the first victims."""

    sm_active_below: int = 100
    for_ms: int = 1_800_000
    preempt_first: bool = False

    def words(self) -> str:
        return f"SM active below {self.sm_active_below / 10:g} % for {self.for_ms / 60_000:g} min"


class PodsReady(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Kueue's ``waitForPodsReady``, from its Configuration in the contract file (its defaults when
    enabled): the Kubernetes binder rolls back a bound gang whose pods are not all running
    ``timeout_ms`` after its admission, and a running gang short of a pod for ``recovery_timeout_ms``
    (None: never), and requeues it after ``backoff_base_ms`` × 2^(n−1) (at most ``backoff_max_ms``,
    no jitter, so the log says it exactly) for its n-th failure in a row; at the ``backoff_limit``-th
    in a row it is deactivated instead (Kueue's backoffLimitCount + 1: that many requeues, then
    deactivated; 0: never, Kueue's null). The binder's flags, given, win."""

    timeout_ms: int = 300_000
    recovery_timeout_ms: int | None = None
    backoff_base_ms: int = 60_000
    backoff_max_ms: int = 3_600_000
    backoff_limit: int = 0
    #: Kueue's ``requeuingStrategy.timestamp: Creation``: a gang rolled back goes back where it
    #: was in its queue (False, Kueue's ``Eviction``: behind the work queued before its eviction).
    requeue_from_creation: bool = False


class Backfill(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """gangway extension: how admission keeps room for work that waits, a platform team's trade
    between the priorities. ``quota_holds_per_tree``: how many workloads kept out by quota alone
    have quota held for them in one quota tree each cycle (from the highest priority, then the
    oldest; work of lower priority may use held quota only if it ends before the hold starts —
    Slurm's ``bf_max_job_test``); 0 holds none (Kueue's BestEffortFIFO: whatever fits goes).
    ``hand_over_within_ms``: a workload kept out by quota alone is admitted to take over the quota
    of running work expected to end within this long; 0 turns hand-overs off."""

    #: 8: with one, a second gang of the first one's priority had nothing kept for it — in Kueue's
    #: baseline work of lower priority took each bit of quota freed before the first one started,
    #: the large gangs fell behind one another and their waits grew for the rest of the run.
    quota_holds_per_tree: int = 8
    #: 100 ms: the turnover a hand-over saves (admission's round trip) was 60-100 ms on this
    #: machine in Kueue's baseline; for this long the quota taken over is counted twice.
    hand_over_within_ms: int = 100


class PodPriorityClass(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A Kubernetes PriorityClass (``scheduling.k8s.io/v1``): the priority of a job whose pod template
    names it (``priorityClassName``) and that carries no WorkloadPriorityClass label, as in Kueue."""

    name: str
    value: int
    #: Kubernetes' ``globalDefault``: the priority of jobs that name no class at all.
    global_default: bool = False


class Contract(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    flavors: list[ResourceFlavor] = []
    cluster_queues: list[ClusterQueue] = []
    local_queues: list[LocalQueue] = []
    priority_classes: list[PriorityClass] = []
    #: Kubernetes PriorityClasses, which Kueue falls back to (a WorkloadPriorityClass label wins).
    pod_priority_classes: list[PodPriorityClass] = []
    cohorts: list[Cohort] = []
    #: Priority of a workload that names no class.
    default_priority: int = 0
    #: The contract does not say one (no SchedulingPolicy ``defaultPriority``, no ``globalDefault``
    #: PriorityClass in it): the cluster's ``globalDefault`` PriorityClass gives it, as in
    #: Kubernetes and Kueue (``default_priority`` without one).
    default_priority_from_cluster: bool = False
    #: Grace period for evictions when the priority class gives none.
    default_grace_ms: int = 30_000
    fair_sharing: FairSharing = FairSharing()
    #: Among otherwise equal preemption candidates, evict the one that loses least work.
    checkpoint_aware: bool = True
    prices: list[Price] = []
    currency: str = "USD"
    #: Namespace objects of the contract file (their labels); every namespace also has the label
    #: ``kubernetes.io/metadata.name: <name>``, declared or not.
    namespaces: list[Namespace] = []

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        declared = next((ns.labels for ns in self.namespaces if ns.name == namespace), {})
        return {**declared, NAMESPACE_NAME_LABEL: namespace}

    def selects_namespace(self, cluster_queue: "ClusterQueue", namespace: str) -> bool:
        """Kueue's namespaceSelector: may workloads of ``namespace`` use ``cluster_queue``?"""
        selector = cluster_queue.namespace_selector
        return selector is None or selector.matches(self.namespace_labels(namespace))

    billing: Billing = Billing()
    idle_rule: IdleRule | None = None

    def price_of(self, flavor: str, resource: str) -> int | None:
        """Price of one unit-hour of a flavor's resource, in millionths of ``currency`` (None: unpriced)."""
        for price in self.prices:
            if price.flavor == flavor and price.resource == resource:
                return price.per_hour_micros
        return None

    topologies: list[Topology] = []
    backfill: Backfill = Backfill()
    #: Kueue's waitForPodsReady (None: the binder's flags and defaults)
    pods_ready: PodsReady | None = None
    #: Where a workload ordered out (preempted, drained by a stop policy) goes back in its queue:
    #: True, where it was (Kueue's queue order: by creation, so ahead of the work queued after
    #: it); False (contracts written before the field), behind that work, as if queued at its
    #: eviction. A gang the binder rolled back (its pods not ready in time, a failed bind, its
    #: node gone) goes from its eviction either way, unless ``pods_ready.requeue_from_creation``.
    requeue_in_place: bool = False
    #: A pod set with both a topology request and preferred node affinity goes to the domain (rack,
    #: block…) its preferences weigh most, then the least roomy (True); False (contracts written
    #: before the field): the least roomy, its preferences ordering only the nodes inside it.
    preferred_domains: bool = False
    #: gangway extension (SchedulingPolicy ``priorityAging``), against starvation: in the order in
    #: which waiting work is admitted, a workload's priority rises one point for each this many ms
    #: it has waited, so one of priority p never waits behind one of priority q > p queued more
    #: than (q - p) x this after it. Who may preempt whom stays by priority alone. 0 (contracts
    #: written before the field, and the default): strict priority, as in Kueue.
    aging_ms_per_point: int = 0
    #: A workload defragmentation moved goes first in the admission cycles after its eviction, behind
    #: the gang it was moved for, until it is admitted again (True): its move was planned on it being
    #: placed again at once, so work waiting ahead of it in its queue, or queued since, must not take
    #: the quota or the room it gave up. False (contracts written before the field): it waits in its
    #: queue like a preempted workload, and such work could take them (a "move" became a wait).
    moved_first: bool = False
    #: No preemption is made after which one of its victims, back alone in its queue, could preempt
    #: its preemptor at once (True): under Kueue's rules that happens when several victims of one
    #: queue go — fair sharing's LessThanInitialShare leaving that queue below the preemptor's
    #: share (kueue#14543), or borrowWithinCohort leaving it under its nominal quota so that a
    #: victim reclaims — and two workloads lose their work to end where they began. The preemptor
    #: waits instead, for other victims or for work to end. False (contracts written before the
    #: field): Kueue's choice.
    no_preemption_back: bool = False
    #: The placer keeps a waiting preemptor's room where it will be once the gangs admitted before
    #: and not yet placed are placed (True), as admission's snapshot finds it. False (contracts
    #: written before the field): on free capacity as it is, so the room kept could be room those
    #: gangs then took, and a gang admitted into the preemptor's real room was preempted again at
    #: each of its returns (a livelock the property tests found).
    preemptor_room_after_admitted: bool = False
    #: With ``no_preemption_back``, no preemption is made either whose preemptor a workload waiting
    #: ahead of it in its own queue could preempt at once (``withinClusterQueue``) and replace,
    #: where one of the victims, back, could preempt that workload (True): the room the cohort's
    #: rules granted the preemptor would go to one they did not grant it to, and three workloads
    #: took turns (a fair-sharing preemption, a preemption within the queue, a fair-sharing one
    #: back; found by the property tests). False (contracts written before the field): each step
    #: as Kueue's rules allow it.
    no_proxy_preemption: bool = False
    #: Under ``moved_first``, a workload others were moved for goes ahead of them even if it was
    #: moved itself, for another gang, before (True). False (contracts written before the field):
    #: it went among the moved, biggest first, so one moved for it could go back into the room it
    #: waits for, and be moved again at each cycle (a livelock the property tests found).
    gang_before_its_moved: bool = False
    #: With ``no_preemption_back``, no preemption is made either whose preemptor, once in, a
    #: workload waiting in another queue of its cohort tree could preempt at once by that queue's
    #: rules (True): where three workloads leave Kueue's rules no state alone — one reclaims its
    #: queue's nominal quota, a higher-priority one of its queue preempts it and borrows, a third
    #: preempts that one by borrowWithinCohort, the first reclaims again — the preemption that
    #: makes the borrower is not made, and its preemptor waits for work to end. False (contracts
    #: written before the field): each step as Kueue's rules allow it.
    no_preemption_undone: bool = False
    #: Quota held for a workload (backfill on quota) keeps out a preemptor ranked after it as it
    #: keeps out an admission, and a workload that can preempt for its room now has its quota held
    #: from now (True): work ranked after it neither backfills room its victims are about to give
    #: it nor preempts its way into the quota held for it. False (contracts written before the
    #: field): a preemption took held quota (a stranger's case: m preempted a backfilled job and
    #: took the quota held for h, and h then preempted m, 570 s of m's work lost), and a job
    #: backfilled into room a preemptor was about to take was preempted at once.
    holds_against_preemption: bool = False
    #: The work a preempted attempt lost, credited under ``billing.creditPreemptionWaste``, runs
    #: from its last checkpoint (or start) to its eviction (True): a checkpoint saved in the grace
    #: period counts, and so does the work done after the order. False (contracts written before
    #: the field): the work lost when the eviction was ordered (a job that checkpointed in its grace
    #: period was credited work it kept; one that did not, short of the grace period's work).
    credit_lost_at_exit: bool = False
    #: A gang asking for a topology level, where the contract defines Topologies, counts a flavor
    #: naming none as one that can never take it (True): it is told so, forecast never, and a
    #: StrictFIFO queue sets it aside. False (contracts written before the field): such a flavor
    #: whose nodes could hold the gang made it wait as ``no_flavor_room``, forever.
    untopological_flavor_never: bool = False
    #: A billing period's idle GPUs are priced, stretch by stretch, by the contract in force then
    #: (True): a price changed during the period splits its idle lines there, as it splits usage.
    #: False (contracts written before the field): all of them at the price in force at the cut (a
    #: rise near a month's end repriced the whole month's idle GPUs).
    idle_priced_in_force: bool = False
    #: A GPU pod that may use several GPU models keeps off a model whose free GPUs are down to what
    #: the pods that may use only it will need — its share of the queued GPU demand times the
    #: cluster's free GPUs (True; placement's ``_reserve_deficits``). False (contracts written
    #: before the field): the fragmentation score alone, which drew such pods to the model the
    #: fewest restricted pods may use, until those pods found it full.
    model_reserve: bool = False

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


#: What a contract written today says of the fields a contract recorded before them decodes False
#: (each keeps that log's decisions as they were made): the contract reader and Kueue's scenarios
#: set them all.
WRITTEN_NOW: dict[str, bool] = {
    "requeue_in_place": True,  # Kueue's queue order
    "preferred_domains": True,
    "moved_first": True,
    "no_preemption_back": True,
    "preemptor_room_after_admitted": True,
    "no_proxy_preemption": True,
    "gang_before_its_moved": True,
    "model_reserve": True,
    "no_preemption_undone": True,
    "holds_against_preemption": True,
    "credit_lost_at_exit": True,
    "untopological_flavor_never": True,
    "idle_priced_in_force": True,
}


#: The contract's fields in the order they were added to it, each decoding to its default in a
#: contract recorded before it (and encoding it, so that contract's digest today is not the one it
#: was applied with: ``gangway.contract.digest_matches`` tries it with the newest left out). A new
#: field of the contract goes last here.
ADDED_LATER: tuple[str, ...] = (
    "backfill", "pods_ready", "requeue_in_place", "preferred_domains", "aging_ms_per_point", "moved_first",
    "no_preemption_back", "preemptor_room_after_admitted", "model_reserve", "no_proxy_preemption",
    "gang_before_its_moved", "no_preemption_undone", "holds_against_preemption", "credit_lost_at_exit",
    "untopological_flavor_never", "idle_priced_in_force",
)
