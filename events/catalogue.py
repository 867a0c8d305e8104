"""The event catalogue: every fact the services exchange, as frozen msgspec structs.

An event is the *data* of a CloudEvent; its envelope (id, source, time, position in the log) is an
``Envelope``. The CloudEvents type of each event is ``io.gangway.<noun>.<verb-past>.v1`` and is
listed in ``EVENT_TYPES``. Quantities are integer milli units; times are integer milliseconds of
cluster time since the Unix epoch.
"""

from __future__ import annotations

from typing import Literal, Union

import msgspec

from gangway.events import gpus
from gangway.events.contract import Contract, Taint, Toleration, TolerationError, toleration_of  # noqa: F401 (re-exported)
from gangway.events.reasons import Param, ReasonCode

#: The Kubernetes kinds a job may be (``kubeflow.TRAINING_KINDS`` are the last six; a test keeps them alike).
JobKind = Literal["Job", "JobSet", "PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "MPIJob", "RayJob"]


class _Event(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=False, gc=False):
    """Base of every event type."""


class TopologyRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """Kueue's TAS annotations for one pod set (level names are node label keys)."""

    required: str | None = None
    preferred: str | None = None
    slice_required: str | None = None
    slice_size: int | None = None


class NodeSelectorRequirement(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """One requirement of a node affinity term, as Kubernetes writes it (on a label, or on the
    node's name for a ``matchFields`` requirement)."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = []

    def matches(self, value: str | None) -> bool:
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        try:  # Gt, Lt: integers
            have, bound = int(value), int(self.values[0])  # type: ignore[arg-type]
        except (TypeError, ValueError, IndexError):
            return False
        return have > bound if op == "Gt" else have < bound


class NodeSelectorTerm(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A term of required node affinity: all its requirements hold (an empty term matches no node)."""

    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeSelectorRequirement] = []

    def matches(self, name: str, labels: dict[str, str]) -> bool:
        if not self.match_expressions and not self.match_fields:
            return False
        return all(r.matches(labels.get(r.key)) for r in self.match_expressions) and all(
            r.matches(name if r.key == "metadata.name" else None) for r in self.match_fields)


#: The weights Kubernetes takes for a preferred node affinity term.
PREFERRED_WEIGHTS = range(1, 101)


class PreferredSchedulingTerm(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A term of preferred node affinity (``preferredDuringSchedulingIgnoredDuringExecution``): a
    node matching ``preference`` weighs ``weight`` (``PREFERRED_WEIGHTS``) more."""

    weight: int
    preference: NodeSelectorTerm


def preference(terms: list[PreferredSchedulingTerm], name: str, labels: dict[str, str]) -> int:
    """How much a pod with these preferred terms prefers the node ``name``: the weights of the
    terms it matches, summed (as kube-scheduler's NodeAffinity score)."""
    return sum(t.weight for t in terms if t.preference.matches(name, labels))


def admits(labels: dict[str, str], taints: list[Taint], node_selector: dict[str, str],
           tolerations: list[Toleration], name: str = "", affinity: list[NodeSelectorTerm] = ()) -> bool:
    """May a pod with ``node_selector``, required node ``affinity`` (terms: any one holds) and
    ``tolerations`` go to the node ``name`` with ``labels`` and ``taints``?"""
    for key, value in node_selector.items():
        if labels.get(key) != value:
            return False
    if affinity and not any(term.matches(name, labels) for term in affinity):
        return False
    return all(any(t.tolerates(taint) for t in tolerations) for taint in taints)


# --- producers' input -------------------------------------------------------------------------


class PodSetRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A pod set as a producer writes it: resources are Kubernetes quantities (``"16Gi"``, 8)."""

    name: str
    count: int
    resources: dict[str, Union[str, int, float]]
    topology: TopologyRequest | None = None
    min_count: int | None = None
    #: The pod template's nodeSelector, required node affinity and tolerations: the only nodes its
    #: pods may go to.
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    node_affinity: list[NodeSelectorTerm] = []
    #: Its preferred node affinity: the nodes its pods try first.
    preferred_affinity: list[PreferredSchedulingTerm] = []
    #: The pod template's ``priorityClassName`` (a Kubernetes PriorityClass): a job without the
    #: WorkloadPriorityClass label has the priority of its first pod set's, as in Kueue.
    priority_class_name: str | None = None


#: The label of a job made from a Kubernetes object: the object's uid (the binder's intake sets it;
#: it maps workload ↔ object and is the intake's idempotency key).
UID_LABEL = "gangway.io/uid"
#: The annotations the binder sets on the objects it manages and on their pods' templates (which
#: workload and attempt), and per pod the GPU indexes its placement gave it.
WORKLOAD_ANNOTATION = "gangway.io/workload"
ATTEMPT_ANNOTATION = "gangway.io/attempt"
GPUS_ANNOTATION = "gangway.io/gpu-indexes"
#: Every label and annotation gangway itself writes on Kubernetes objects.
KEYS_WRITTEN = frozenset({UID_LABEL, WORKLOAD_ANNOTATION, ATTEMPT_ANNOTATION, GPUS_ANNOTATION})


class JobSubmitted(_Event, frozen=True):
    """A producer asks for a job to run (topic ``gangway.submissions``)."""

    job_id: str
    namespace: str
    queue: str
    pod_sets: list[PodSetRequest]
    kind: JobKind = "Job"
    priority_class: str | None = None
    runtime_seconds: float | None = None
    labels: dict[str, str] = {}


# --- submission --------------------------------------------------------------------------------


class PodSet(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A validated pod set: per-pod resources in integer milli units."""

    name: str
    count: int
    resources: dict[str, int]
    topology: TopologyRequest | None = None
    min_count: int | None = None
    #: Its pods go only to nodes with these labels, matching one term of its required node affinity
    #: (when it has any), whose taints they tolerate all.
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    node_affinity: list[NodeSelectorTerm] = []
    #: Of the nodes it may use, its pods go first to those its preferred node affinity weighs most
    #: (``preference``), then best fit.
    preferred_affinity: list[PreferredSchedulingTerm] = []


class WorkloadQueued(_Event, frozen=True):
    """A valid job became a workload waiting in its queue."""

    workload: str
    namespace: str
    queue: str
    cluster_queue: str
    priority_class: str | None
    priority: int
    kind: JobKind
    pod_sets: list[PodSet]
    runtime_ms: int | None = None
    labels: dict[str, str] = {}
    #: Where the submission came from: ``topic/partition/offset`` of the original record.
    submission: str = ""
    #: The CloudEvent it was submitted as, ``"<source> <id>"`` (empty for a plain JSON job): a
    #: later record of the same CloudEvent is a re-delivery, not a second job.
    submitted_as: str = ""
    #: Kueue's maximum execution time (label ``kueue.x-k8s.io/max-exec-time-seconds``): once it has
    #: been admitted this long, all its attempts counted, it is ordered out and deactivated.
    max_execution_ms: int | None = None


RejectionReason = Literal[
    "not_utf8", "oversized", "malformed_json", "malformed_yaml", "malformed_cloudevent",
    "wrong_event_type", "missing_field", "invalid_field", "bad_quantity", "absurd_quantity",
    "unknown_queue", "unknown_priority_class", "duplicate_job", "no_config", "no_quota", "internal_error",
    "not_entitled", "namespace_not_selected",
    # A topology request no node of the cluster can ever satisfy (a level no node carries).
    "topology_unsatisfiable",
    # A withdrawal of a job the log does not hold; of one made from a Kubernetes object (delete the object).
    "unknown_job", "kubernetes_object",
]


class JobRejected(_Event, frozen=True):
    """Bad input, kept whole: the reason, a precise message and the original record."""

    job_id: str
    reason: RejectionReason
    message: str
    original: bytes
    #: The namespace the record names ('' when it names none that could be read): a job id is
    #: unique only within its namespace.
    namespace: str = ""
    original_key: bytes | None = None
    #: The record's headers in their order, repeats kept.
    original_headers: list[tuple[str, bytes]] = []
    submission: str = ""


# --- decisions (they carry based_on: the log offset of the state they were decided from) -------


class KeptRoom(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Nodes admission keeps for a gang blocked by capacity alone (EASY backfill): from ``start_ms``,
    when the workloads on them are expected to have ended, the gang takes them (its pod sets on its
    ``flavors``). A workload admitted while they are kept, and not expected to end before then, is
    placed so that it leaves the gang that room (``WorkloadAdmitted.kept``)."""

    workload: str
    start_ms: int
    nodes: list[str]
    flavors: dict[str, str] = {}


class WorkloadAdmitted(_Event, frozen=True):
    workload: str
    cluster_queue: str
    #: Quota the workload holds while admitted, per resource.
    usage: dict[str, int]
    #: Part of ``usage`` above the queue's nominal quota, borrowed from its cohort.
    borrowed: dict[str, int]
    based_on: int
    reason: str = ""
    #: The reason as data (``events/reasons.py``): ``reason`` is the sentence rendered from them.
    #: None in records written before reasons were codes.
    reason_code: ReasonCode | None = None
    reason_params: dict[str, Param] = {}
    #: The ResourceFlavor whose quota (and nodes) each resource uses ({}: each resource's first).
    flavors: dict[str, str] = {}
    #: Pods admitted per pod set when fewer than requested (partial admission down to min_count).
    counts: dict[str, int] = {}
    #: The room kept for another gang when this workload was admitted, which its placement must
    #: leave alone (None: none was kept, or this workload ends before that gang can start).
    kept: KeptRoom | None = None
    #: Running workloads whose quota this admission takes over when they end (a hand-over): it was
    #: checked against the quota with theirs given back, and its pods start only once every one of
    #: them is gone ([]: at once). See DESIGN.md, "Hand-over".
    after: list[str] = []


class PodAssignment(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """``count`` pods of pod set ``pod_set`` go to ``node``; ``gpus`` names the GPU indexes they
    take (per pod: its whole GPUs, then the one it shares; see ``events/gpus.py``), empty when the
    pods take no GPU or the placement predates GPU indexes (the fold then chooses them)."""

    pod_set: str
    node: str
    count: int
    gpus: list[int] = []


class Fragmentation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How fragmented the free GPUs are (whole GPUs only): the largest room free in one piece at
    each level, and how many pods of each common shape (k whole GPUs inside one NVLink island) fit."""

    gpus_free: int
    largest_island: int
    largest_node: int
    largest_rack: int
    largest_block: int
    #: Shape ("1", "2", "4", "8" GPUs in one island) → how many such pods still fit.
    fits: dict[str, int]


class PlacementDecided(_Event, frozen=True):
    workload: str
    assignments: list[PodAssignment]
    based_on: int
    reason: str = ""
    #: The reason as data (``events/reasons.py``): ``reason`` is the sentence rendered from them.
    #: None in records written before reasons were codes.
    reason_code: ReasonCode | None = None
    reason_params: dict[str, Param] = {}
    #: The cluster's fragmentation once this placement (and those before it in its cycle) holds.
    fragmentation: Fragmentation | None = None
    #: Decided with the workload's admission, by the admission service, and written right after it
    #: in the same append: ``based_on`` is the admission's, when the workload was still pending. It
    #: holds while the admission in force is the one decided there. (False: the placement service's,
    #: based on a state in which the workload was admitted.)
    with_admission: bool = False


class EvictionOrdered(_Event, frozen=True):
    workload: str
    preemptor: str
    based_on: int
    grace_ms: int
    reason: str = ""
    #: The reason as data (``events/reasons.py``): ``reason`` is the sentence rendered from them.
    #: None in records written before reasons were codes.
    reason_code: ReasonCode | None = None
    reason_params: dict[str, Param] = {}
    #: Work the victim loses: time run since it started or last saved a checkpoint, at the order.
    work_lost_ms: int = 0
    #: The flavors (resource → ResourceFlavor) whose room the eviction makes: the preemptor is
    #: admitted in them first, not in another flavor that happens to fit by then (as Kueue since
    #: kueue#1332); {} in records written before.
    flavors: dict[str, str] = {}

    def ordered_by(self) -> str:
        """Who ordered it out, in words: ``preempted by <preemptor>``, or for a queue stopped with
        HoldAndDrain (``preemptor`` names the queue) ``drained by <queue>'s stopPolicy``, or for a
        workload that used up its maximum execution time ``deactivated for its maximum execution time``."""
        if self.reason_code == ReasonCode.QUEUE_DRAINED:
            return f"drained by {self.preemptor}'s stopPolicy"
        if self.reason_code == ReasonCode.MAX_EXECUTION_TIME_EXCEEDED:
            return "deactivated for its maximum execution time"
        return f"preempted by {self.preemptor}"


# --- what the cluster did (the binder reports) --------------------------------------------------


class WorkloadBound(_Event, frozen=True):
    workload: str
    attempt: int


class WorkloadRunning(_Event, frozen=True):
    workload: str
    attempt: int


class WorkloadFinished(_Event, frozen=True):
    workload: str
    attempt: int
    succeeded: bool = True
    #: What the cluster said (a Job's condition reason and message, a lost pod), when it said anything.
    reason: str = ""


class WorkloadEvicted(_Event, frozen=True):
    workload: str
    attempt: int
    preemptor: str | None = None
    reason: str = ""
    #: A gang that did not bind whole (rolled back) is requeued with a backoff: how many of its
    #: binds in a row failed, counting this one (0: not a failed bind), and the cluster time before
    #: which admission leaves it alone (0: none). ``reason_code`` says which: ``bind_backoff``, or
    #: ``bind_failures_exceeded`` when it is deactivated (it never runs again). An eviction ordered
    #: for its maximum execution time carries that order's code, reason and parameters
    #: (``max_execution_time_exceeded``): it is deactivated too.
    bind_failures: int = 0
    retry_after_ms: int = 0
    reason_code: ReasonCode | None = None
    reason_params: dict[str, Param] = {}


class CheckpointSaved(_Event, frozen=True):
    """A workload saved its progress (telemetry, copied onto the log by submission)."""

    workload: str
    #: Cluster time the checkpoint was taken (0: when the event was appended).
    saved_ms: int = 0
    step: int | None = None


class ClockTicked(_Event, frozen=True):
    """Time passed with nothing else to report: a rule that depends on time may now decide."""

    reason: str = ""


class NodeObserved(_Event, frozen=True):
    node: str
    allocatable: dict[str, int]
    labels: dict[str, str] = {}
    #: NVLink islands, sizes in GPU index order (``[4, 4]``: GPUs 0-3 and 4-7); empty: PCIe only.
    islands: list[int] = []
    #: Why the node takes no new pods ("" : it does): cordoned, NotReady, a node.kubernetes.io taint.
    #: What already runs there keeps running and keeps its resources.
    unavailable: str = ""
    #: Its other NoSchedule/NoExecute taints: only pods that tolerate them all go there.
    taints: list[Taint] = []
    #: What pods gangway does not manage hold there (a Deployment's, a DaemonSet's, a Job without a
    #: queue label), already taken out of ``allocatable``: gangway places nothing in that room.
    held_by_others: dict[str, int] = {}

    def __post_init__(self) -> None:
        # Each GPU is an entry of its own in the fold: a count beyond any node's (a crafted log's) is
        # refused as the record is read, never given a list that long.
        if self.allocatable.get(gpus.RESOURCE, 0) > gpus.MAX_PER_NODE * gpus.WHOLE:
            raise ValueError(f"allocatable {gpus.RESOURCE} is {self.allocatable[gpus.RESOURCE]} milli: "
                             f"at most {gpus.MAX_PER_NODE} GPUs on one node")


class NodeRemoved(_Event, frozen=True):
    node: str


class PriorityClassObserved(_Event, frozen=True):
    """A Kubernetes PriorityClass (``scheduling.k8s.io/v1``) of the cluster, as the binder sees it
    (``gone``: deleted): a job whose pod template names it (``priorityClassName``) takes its value,
    as Kueue reads the cluster's classes — unless the contract publishes a class of that name, which
    wins (the contract is the rules)."""

    name: str
    value: int
    global_default: bool = False
    gone: bool = False


class ConfigApplied(_Event, frozen=True):
    contract: Contract
    #: sha256 of the canonical contract, so equal contracts are one version.
    digest: str
    source: str = ""


class WorkloadWithdrawn(_Event, frozen=True):
    """The job was taken back (its Kubernetes object deleted): whatever it waited for or held — its
    place in the queue, quota, nodes — is released, and it never runs again."""

    workload: str
    reason: str = ""


class WorkloadMoved(_Event, frozen=True):
    """A waiting workload goes to another LocalQueue of its namespace (its Kubernetes object's
    ``kueue.x-k8s.io/queue-name`` label changed): it waits there in the place its priority and age
    give it, as Kueue moves a suspended Job's Workload. A move holds only while the workload waits
    (the fold); one admitted keeps its queue until it ends or waits again."""

    workload: str
    #: The LocalQueue it leaves and the one it goes to (in its namespace), and the ClusterQueue that
    #: one pointed at when the move was decided (the fold follows the LocalQueue, as at queueing).
    from_queue: str
    queue: str
    cluster_queue: str
    reason: str = ""
    #: Where the request came from (``topic/partition/offset``) and its CloudEvent (``source id``).
    submission: str = ""
    requested_as: str = ""


class ClusterReconciled(_Event, frozen=True):
    """What the binder found when it compared the cluster with the log (at start, after a lost watch,
    on every pass): an object resumed or pods on nodes without a placement on the log, or pods of a
    placement gone. Kubernetes is the truth about what runs: this records the finding and what was
    done about it. It changes no scheduling state (a finding that does — a placement whose pods
    vanished — is followed by its own WorkloadEvicted)."""

    #: The Kubernetes object: kind, namespace, name and uid.
    kind: str
    namespace: str
    name: str
    uid: str
    reason: str
    reason_code: ReasonCode
    reason_params: dict[str, Param] = {}
    #: The workload the object is (None: the log has none for it) and its attempt then.
    workload: str | None = None
    attempt: int | None = None
    #: The pods found (names) and the nodes they were on.
    pods: list[str] = []
    nodes: list[str] = []
    #: What the binder did ("suspended again, 2 pod(s) deleted").
    action: str = ""


class JobWithdrawn(_Event, frozen=True):
    """A producer takes back a job it submitted (topic ``gangway.submissions``, as a CloudEvent:
    `gangway withdraw`), whether it waits or runs."""

    job_id: str
    namespace: str
    reason: str = ""


class JobMoved(_Event, frozen=True):
    """A producer sends a job it submitted, still waiting, to another LocalQueue of its namespace
    (topic ``gangway.submissions``, as a CloudEvent: `gangway move`) — what changing a Kubernetes
    object's ``kueue.x-k8s.io/queue-name`` label does for a job that is one. The submission service
    checks it as a new job's queue is checked and appends a ``WorkloadMoved``."""

    job_id: str
    namespace: str
    queue: str
    reason: str = ""


class WithdrawalRequested(_Event, frozen=True):
    """The submission service accepted a ``JobWithdrawn``: a workload still in its queue leaves it at
    once (the fold); one holding quota or nodes is stopped by the binder, which reports
    ``WorkloadWithdrawn`` once its pods are gone."""

    workload: str
    reason: str
    #: Where the request came from (``topic/partition/offset``) and its CloudEvent (``source id``).
    submission: str = ""
    requested_as: str = ""


Event = Union[
    JobSubmitted, WorkloadQueued, JobRejected, WorkloadAdmitted, PlacementDecided,
    EvictionOrdered, WorkloadBound, WorkloadRunning, WorkloadFinished, WorkloadEvicted,
    NodeObserved, NodeRemoved, ConfigApplied, CheckpointSaved, ClockTicked, WorkloadWithdrawn, ClusterReconciled,
    JobWithdrawn, WithdrawalRequested, WorkloadMoved, JobMoved, PriorityClassObserved,
]
Decision = Union[WorkloadAdmitted, PlacementDecided, EvictionOrdered]

#: CloudEvents type of every event, in catalogue order.
EVENT_TYPES: dict[type, str] = {
    JobSubmitted: "io.gangway.job.submitted.v1",
    WorkloadQueued: "io.gangway.workload.queued.v1",
    JobRejected: "io.gangway.job.rejected.v1",
    WorkloadAdmitted: "io.gangway.workload.admitted.v1",
    PlacementDecided: "io.gangway.placement.decided.v1",
    EvictionOrdered: "io.gangway.eviction.ordered.v1",
    WorkloadBound: "io.gangway.workload.bound.v1",
    WorkloadRunning: "io.gangway.workload.running.v1",
    WorkloadFinished: "io.gangway.workload.finished.v1",
    WorkloadEvicted: "io.gangway.workload.evicted.v1",
    NodeObserved: "io.gangway.node.observed.v1",
    NodeRemoved: "io.gangway.node.removed.v1",
    ConfigApplied: "io.gangway.config.applied.v1",
    CheckpointSaved: "io.gangway.checkpoint.saved.v1",
    ClockTicked: "io.gangway.clock.ticked.v1",
    WorkloadWithdrawn: "io.gangway.workload.withdrawn.v1",
    ClusterReconciled: "io.gangway.cluster.reconciled.v1",
    JobWithdrawn: "io.gangway.job.withdrawn.v1",
    WithdrawalRequested: "io.gangway.withdrawal.requested.v1",
    WorkloadMoved: "io.gangway.workload.moved.v1",
    JobMoved: "io.gangway.job.moved.v1",
    PriorityClassObserved: "io.gangway.priorityclass.observed.v1",
}
TYPES_BY_NAME: dict[str, type] = {name: cls for cls, name in EVENT_TYPES.items()}
DECISION_TYPES = (WorkloadAdmitted, PlacementDecided, EvictionOrdered)


class Envelope(msgspec.Struct, frozen=True, gc=False):
    """One event with its CloudEvents attributes and, once appended, its offset in the log."""

    id: str
    source: str
    time_ms: int
    data: Event
    offset: int = -1

    @property
    def type(self) -> str:
        return EVENT_TYPES[type(self.data)]

    def subject(self) -> str | None:
        return (getattr(self.data, "workload", None) or getattr(self.data, "job_id", None)
                or getattr(self.data, "node", None) or getattr(self.data, "team", None))


# --- money: utilisation, progress, the idle-GPU hunt and invoices (issue 12) --------------------


class GpuSample(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """One GPU's figures in DCGM's terms, over the sampling interval that ends at the sample."""

    #: GPU index on its node (DCGM's ``gpu`` label).
    gpu: int
    #: DCGM_FI_PROF_SM_ACTIVE in thousandths (0.3 → 300): the share of time SMs had work.
    sm_active: int
    #: DCGM_FI_DEV_GPU_UTIL in percent (0-100).
    gpu_util: int = 0
    #: DCGM_FI_DEV_FB_USED: framebuffer memory used, MiB.
    fb_used_mib: int = 0
    #: The workload the exporter says uses this GPU (``namespace/job`` from its pod labels), if it says.
    workload: str | None = None


class GpuTelemetry(_Event, frozen=True):
    """What a node's GPUs did (dcgm-exporter, or the simulated cluster), copied onto the log."""

    node: str
    samples: list[GpuSample]
    #: Cluster time the samples were taken (0: when the event was appended).
    observed_ms: int = 0


class WorkloadProgress(_Event, frozen=True):
    """How far a workload's current attempt got: steps and tokens processed since it started."""

    workload: str
    step: int | None = None
    tokens: int = 0
    observed_ms: int = 0


class WorkloadIdle(_Event, frozen=True):
    """The idle-GPU hunt (a decision of accounting): a workload holds GPUs its SMs barely use."""

    workload: str
    attempt: int
    based_on: int
    #: The contract's rule in words ("SM active below 10 % for 30 min").
    rule: str
    #: Mean SM activity over its GPUs at the last samples (thousandths) and since when it was low.
    sm_active: int
    since_ms: int
    #: GPUs it holds (milli).
    gpu_milli: int
    reason: str = ""


class InvoiceLine(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """One line: a workload attempt's use of one flavor-resource in the period (or a credit, an idle
    cost, or a credit carried between periods: ``carried``, no workload, its quantity 0).

    ``quantity`` is milli-units × ms (8 GPUs for an hour: 8000 × 3,600,000; memory in milli-bytes);
    money is in millionths of the invoice currency; ``unit_price`` is per unit-hour (GiB-hour for
    memory). ``list_cost`` is quantity × unit price (negative on a credit); ``billed_cost`` is it
    rounded once to the currency's minor unit. ``attempt`` counts from 0 (people read it + 1)."""

    kind: Literal["usage", "credit", "idle", "carried"]
    workload: str
    attempt: int
    cluster_queue: str
    flavor: str
    resource: str
    start_ms: int
    end_ms: int
    quantity: int
    unit_price_micros: int
    list_cost_micros: int
    billed_cost_micros: int
    contract_digest: str = ""
    local_queue: str = ""
    priority_class: str | None = None
    description: str = ""


class InvoiceIssued(_Event, frozen=True):
    """A team's invoice for one billing period (topic ``gangway.invoices``, key: the team)."""

    invoice_id: str
    team: str
    period: str
    period_start_ms: int
    period_end_ms: int
    currency: str
    lines: list[InvoiceLine]
    #: Sums of what the lines bill (usage, credits as a positive amount, idle shares, carried
    #: credit, all): in the currency's minor unit, so list − credits + idle + carried = billed holds
    #: as printed.
    list_cost_micros: int
    credits_micros: int
    idle_cost_micros: int
    billed_cost_micros: int
    #: The log it was derived from and the offset at which the period was cut.
    log_id: str
    cut_offset: int
    #: Credit carried between periods, so that no invoice bills below zero: negative where credit
    #: left over from earlier periods is taken off this one, positive where what this one's credits
    #: leave below zero is carried to the team's next invoice.
    carried_micros: int = 0


MONEY_EVENTS = {
    GpuTelemetry: "io.gangway.gpu.sampled.v1",
    WorkloadProgress: "io.gangway.progress.reported.v1",
    WorkloadIdle: "io.gangway.idle.flagged.v1",
    InvoiceIssued: "io.gangway.invoice.issued.v1",
}
Event = Union[Event, GpuTelemetry, WorkloadProgress, WorkloadIdle, InvoiceIssued]
Decision = Union[Decision, WorkloadIdle]
EVENT_TYPES.update(MONEY_EVENTS)
TYPES_BY_NAME.update({name: cls for cls, name in MONEY_EVENTS.items()})
DECISION_TYPES = (*DECISION_TYPES, WorkloadIdle)
