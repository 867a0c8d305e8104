"""The state every service folds from the log (mutable structs, serialisable for snapshots)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import msgspec

from gangway.events.catalogue import (
    EvictionOrdered, PlacementDecided, Taint, WorkloadAdmitted, WorkloadIdle, WorkloadQueued,
)
from gangway.events.contract import Contract
from gangway.events.freeindex import FreeIndex
from gangway.events.reasons import ReasonCode
from gangway.events.resources import GPU, Resources, assignment_use

Phase = Literal["pending", "admitted", "placed", "bound", "running", "evicting", "finished"]
#: Phases in which a workload holds quota (and, from "placed" on, node resources).
HOLDS_QUOTA = ("admitted", "placed", "bound", "running", "evicting")
HOLDS_NODES = ("placed", "bound", "running", "evicting")
#: Phases from which the fold accepts the binder's end reports.
FINISH_FROM = ("bound", "running", "evicting")
EVICT_FROM = ("placed", "bound", "running", "evicting")
#: The phases an eviction order (EvictionOrdered) moves a workload from.
ORDER_OUT_FROM = ("admitted", "placed", "bound", "running")


def shape_of(spec: WorkloadQueued) -> str:
    """A workload's ClusterQueue and the shape of its pod sets (count, min count, per-pod resources, the
    nodes it may use: node selector, tolerations and affinity, the nodes it prefers, and its topology request), as text:
    whatever decides where a gang fits, so gangs of one shape fit or fail alike."""
    sets = ";".join(f"{ps.count}x" + ("" if ps.min_count is None else f"(min {ps.min_count})")
                    + ",".join(f"{k}={v}" for k, v in sorted(ps.resources.items()))
                    + (f"@{sorted(ps.node_selector.items())}{ps.tolerations}{ps.node_affinity}"
                       if ps.node_selector or ps.tolerations or ps.node_affinity else "")
                    + (f"~{ps.preferred_affinity}" if ps.preferred_affinity else "")
                    + (f"^{_topology_text(ps.topology)}" if ps.topology is not None else "") for ps in spec.pod_sets)
    return f"{spec.cluster_queue}|{sets}"


def _topology_text(t) -> str:
    return f"{t.required or ''},{t.preferred or ''},{t.slice_required or ''},{t.slice_size or ''}"


#: A workload that declares no runtime, in ``State.pending_runtimes``: it never ends in time.
NO_RUNTIME = 2**63 - 1


def runtime_key(wl: "WorkloadState") -> int:
    """A workload's declared runtime (``NO_RUNTIME`` without one): backfill tells gangs of one shape apart by it."""
    return wl.spec.runtime_ms if wl.spec.runtime_ms is not None else NO_RUNTIME


def execution_deadline(wl: "WorkloadState") -> int | None:
    """When an admitted workload uses up its maximum execution time (Kueue's: admitted time, all
    its attempts counted); None without one, or while it is not admitted."""
    if wl.spec.max_execution_ms is None or wl.admitted_ms is None:
        return None
    return wl.admitted_ms + wl.spec.max_execution_ms - wl.executed_ms


#: Node label naming a node's GPU model (NVIDIA GPU feature discovery); a ResourceFlavor that
#: selects it restricts its workloads to that model.
GPU_MODEL_LABEL = "nvidia.com/gpu.product"
#: The learned pod-shape mix forgets: a pod queued this long ago weighs half as much as one queued now.
POD_SHAPES_HALF_LIFE_MS = 24 * 3_600_000
#: One pod queued at ``pod_shapes_ms`` counts this much in ``State.pod_shapes``.
POD_SHAPE_UNIT = 1000
#: Past this many half-lives since ``pod_shapes_ms`` the counts are brought to the present.
_RESCALE_HALF_LIVES = 16


def pod_shape_key(resources: dict[str, int], models: tuple[str, ...] = ()) -> str:
    """``"cpu/memory/gpu"`` in milli (``"…/model|model"`` when only those GPU models may take it)."""
    key = f"{resources.get('cpu', 0)}/{resources.get('memory', 0)}/{resources.get('nvidia.com/gpu', 0)}"
    return f"{key}/{'|'.join(models)}" if models else key


def count_pod_shape(state: "State", key: str, pods: int, time_ms: int) -> None:
    """Count ``pods`` of a shape queued at ``time_ms`` into the decaying mix (integer, deterministic):
    each weighs ``POD_SHAPE_UNIT`` × 2^((time − pod_shapes_ms) / half-life), so older pods weigh
    exponentially less; now and then every count is brought to the present (the ratio is kept)."""
    age = max(0, time_ms - state.pod_shapes_ms)
    if age > _RESCALE_HALF_LIVES * POD_SHAPES_HALF_LIFE_MS or not state.pod_shapes:
        halves = age / POD_SHAPES_HALF_LIFE_MS
        state.pod_shapes = {} if halves > 64 else {
            k: v for k, c in state.pod_shapes.items() if (v := round(c / 2.0 ** halves)) > 0}
        state.pod_shapes_ms, age = time_ms, 0
    grow = POD_SHAPE_UNIT * pods if age == 0 else round(POD_SHAPE_UNIT * pods * 2.0 ** (age / POD_SHAPES_HALF_LIFE_MS))
    state.pod_shapes[key] = state.pod_shapes.get(key, 0) + grow


def pod_shape_counts(pod_shapes: dict[str, int], pod_shapes_ms: int, now_ms: int) -> dict[str, float]:
    """Pods per shape key, each counted as 2^(−its age / half-life) as of ``now_ms``."""
    scale = POD_SHAPE_UNIT * 2.0 ** min(1000.0, max(0, now_ms - pod_shapes_ms) / POD_SHAPES_HALF_LIFE_MS)
    return {k: v / scale for k, v in pod_shapes.items()}


class NodeState(msgspec.Struct):
    name: str
    allocatable: dict[str, int]
    labels: dict[str, str]
    free: dict[str, int]
    #: Free milli per GPU (index order) and the NVLink islands (``events/gpus.py``).
    gpus: list[int] = []
    islands: list[int] = []
    taints: list[Taint] = []


class WorkloadState(msgspec.Struct):
    spec: WorkloadQueued
    phase: Phase
    #: Offset and cluster time that order it in its queue (the FIFO tie-break): when it was queued,
    #: or when it went back to its queue if it did not keep its place there (``fold._keeps_place``).
    seq: int
    queued_ms: int
    #: The whole gang's request (sum over pod sets), computed once when queued.
    request: dict[str, int] = {}
    #: Its ClusterQueue and the shape of its pod sets (``shape_of``): gangs of one shape in one
    #: queue fit or fail alike. Computed once when queued ("" in snapshots older than the field).
    shape: str = ""
    #: Number of times it was evicted; binder reports name the attempt they are about.
    attempt: int = 0
    admission: WorkloadAdmitted | None = None
    admission_id: str | None = None
    admitted_ms: int | None = None
    #: Offset of the admission in force: placements and evictions decided before it are stale.
    admitted_at: int | None = None
    placement: PlacementDecided | None = None
    placement_id: str | None = None
    #: GPU indexes each assignment of the placement holds (as named, or as the fold chose them).
    placement_gpus: list[list[int]] = []
    started_ms: int | None = None
    eviction: EvictionOrdered | None = None
    eviction_id: str | None = None
    eviction_ms: int | None = None
    #: When it last went back to its queue (None: never): what it has waited since.
    requeued_ms: int | None = None
    finished_ms: int | None = None
    #: Victims were ordered out for this workload: it goes first until it is admitted, so the
    #: room made for it is never taken by the very workloads that were evicted (no cycles).
    nominated: bool = False
    #: The flavors its victims' room was made in (``EvictionOrdered.flavors``): tried first.
    nominated_flavors: dict[str, str] = {}
    #: The gang defragmentation moved it for, while it waits nominated to be placed again
    #: (``Contract.moved_first``): it goes after the nominated preemptors, the gang among them.
    moved_for: str | None = None
    #: Ids of every decision about this workload folded so far (applied or superseded): a
    #: decision delivered again, however late, changes nothing.
    decided: list[str] = []
    #: The most recent decision about this workload that did not hold where it landed, and why.
    superseded: str | None = None
    #: Its reason as data (``events/reasons.py``).
    superseded_code: ReasonCode | None = None
    #: Cluster time of its last checkpoint in the current attempt (None: none saved).
    checkpoint_ms: int | None = None
    #: The step of that checkpoint (None: none counted, or it gave no step); a later one below it is ignored.
    checkpoint_step: int | None = None
    #: Every eviction it suffered: (preemptor, reason, work lost ms), for ``gangway explain``.
    evictions: list[tuple[str, str, int]] = []
    # --- money (``events/money.py``); all of it is about the current attempt ---------------------
    #: Start of the current charge when a price change split the attempt (None: ``started_ms``),
    #: and how many times it was split.
    charged_from_ms: int | None = None
    segment: int = 0
    #: Per GPU held ("node/index"): its last SM activity (thousandths) and when it was sampled.
    gpu_sm: dict[str, int] = {}
    gpu_seen_ms: dict[str, int] = {}
    #: Busy milli-GPU-ms of the current charge up to the last samples.
    busy_milli_ms: int = 0
    #: Since when its mean SM activity is below the contract's idle rule (None: it is not).
    low_since_ms: int | None = None
    #: The idle flag in force (the idle-GPU hunt), cleared when its SMs get busy again.
    idle: WorkloadIdle | None = None
    #: Tokens processed by this attempt, and how many of them a checkpoint saved.
    tokens: int = 0
    tokens_saved: int = 0
    #: Why it was withdrawn (None: it was not); a withdrawn workload is "finished" and never runs.
    withdrawn: str | None = None
    #: Where its last move to another LocalQueue came from (``WorkloadMoved.submission``; "": never
    #: moved): a submission record at or before it is one already decided.
    moved_by: str = ""
    #: Its producer took it back while it held quota or nodes (``WithdrawalRequested``): the binder
    #: stops its pods and reports ``WorkloadWithdrawn``; it is never queued again meanwhile.
    withdrawing: str | None = None
    #: Failed binds in a row (the last rollback's count) and the cluster time before which admission
    #: leaves it alone (its requeue backoff; 0: none).
    bind_failures: int = 0
    retry_after_ms: int = 0
    #: Why it was deactivated (too many failed binds, its maximum execution time used up): it is
    #: "finished" and never runs again; and the reason's code.
    deactivated: str | None = None
    deactivated_code: ReasonCode | None = None
    #: How long its earlier attempts were admitted (Kueue's accumulated execution time).
    executed_ms: int = 0


class State(msgspec.Struct):
    #: Offset of the last event folded (-1: none yet).
    offset: int = -1
    #: Id of that event, so a snapshot can check it still matches the log it resumes from.
    last_id: str = ""
    #: Cluster time: the newest event time seen (never goes back).
    time_ms: int = 0
    contract: Contract | None = None
    contract_digest: str = ""
    nodes: dict[str, NodeState] = {}
    #: Nodes that take no new pods (cordoned, NotReady…) → why. They are not in ``nodes`` (nothing
    #: new is placed there); what runs on them keeps its placement until it ends or they are removed.
    unavailable: dict[str, str] = {}
    #: Bumped whenever a node appears, changes or goes (caches of node sets key on it).
    node_epoch: int = 0
    #: The cluster's Kubernetes PriorityClasses (``PriorityClassObserved``): name → value.
    cluster_priority_classes: dict[str, int] = {}
    #: The one of them marked ``globalDefault`` ("" when none is).
    cluster_default_class: str = ""
    #: Whole GPUs free per island, node, rack and block, kept by the fold (``events/freeindex.py``).
    free_index: FreeIndex = msgspec.field(default_factory=FreeIndex)
    #: Pods queued so far per shape (``pod_shape_key``), decaying with a half-life on the log's
    #: clock (``count_pod_shape``): the mix placement scores against.
    pod_shapes: dict[str, int] = {}
    #: The time the counts of ``pod_shapes`` are relative to.
    pod_shapes_ms: int = 0
    workloads: dict[str, WorkloadState] = {}
    #: Workloads waiting for admission, in arrival order (values unused).
    pending: dict[str, None] = {}
    #: How many pending workloads there are of each shape (``WorkloadState.shape``), and of each
    #: shape by declared runtime (``runtime_key``): a cycle that saw every shape fail — while room
    #: is kept for a gang, each shape's soonest-ending workload — can stop early.
    pending_shapes: dict[str, int] = {}
    pending_runtimes: dict[str, dict[int, int]] = {}
    #: Pending workloads requeued with a backoff after a failed bind → the cluster time before which
    #: admission leaves them alone (kept until they leave the queue; the time may have passed).
    backing_off: dict[str, int] = {}
    #: The pending workloads of each ClusterQueue in queue order, kept sorted by the fold:
    #: (rank, queued_ms, seq, name) — highest priority first (aged: ``rank``), then oldest (``queue_key``).
    #: A cycle merges these instead of sorting every pending workload.
    pending_order: dict[str, list[tuple[int, int, int, str]]] = {}
    #: Pending workloads victims were ordered out for (``WorkloadState.nominated``).
    nominated: dict[str, None] = {}
    #: Workloads holding quota (admitted until finished or evicted), in admission order.
    active: dict[str, None] = {}
    #: Phase indexes, so a cycle need not walk every active workload: admitted gangs waiting for
    #: a placement (admission order), and workloads ordered out but not gone yet.
    unplaced: dict[str, None] = {}
    leaving: dict[str, None] = {}
    #: Quota in use per ClusterQueue and flavor-resource (``"<flavor>:<resource>"``).
    usage: dict[str, dict[str, int]] = {}
    #: Per Cohort, what its members use above their guaranteed quota (Kueue's cohort usage).
    cohort_usage: dict[str, dict[str, int]] = {}
    #: Usage-based fair share (decay.py): each queue's decayed average usage, and when it was updated.
    usage_average: dict[str, dict[str, int]] = {}
    usage_average_ms: dict[str, int] = {}
    #: Decisions applied, and decisions that no longer held where they landed.
    decisions: int = 0
    superseded: int = 0
    #: Events ignored as re-deliveries or stale reports.
    ignored: int = 0

    def __post_init__(self) -> None:
        # A snapshot written before the queue-order index: derive it (and the nominated ones).
        if len(self.pending) != sum(len(q) for q in self.pending_order.values()):
            self.pending_order, self.nominated = {}, {}
            aging = aging_of(self.contract)
            for name in self.pending:
                wl = self.workloads[name]
                self.pending_order.setdefault(wl.spec.cluster_queue, []).append(queue_key(wl, aging))
                if wl.nominated:
                    self.nominated[name] = None
            for q in self.pending_order.values():
                q.sort()


def queue_key(wl: WorkloadState, aging_ms: int = 0) -> tuple[int, int, int, str]:
    """A pending workload's place in its queue: its rank (``rank``), then oldest (``seq``, the
    offset at which it entered, breaks ties: keys are unique)."""
    return (rank(wl, aging_ms), wl.queued_ms, wl.seq, wl.spec.workload)


def rank(wl: WorkloadState, aging_ms: int = 0) -> int:
    """Where a waiting workload stands in the admission order, lowest first: minus its priority;
    with the contract's ``aging_ms_per_point`` (``aging_ms``), its queueing time minus its priority
    that many ms a point — the same order at any moment as its priority plus one point for each
    ``aging_ms`` waited, so the keys never change while it waits."""
    return wl.queued_ms - wl.spec.priority * aging_ms if aging_ms else -wl.spec.priority


def aging_of(contract: Contract | None) -> int:
    """The contract's ``aging_ms_per_point`` (0: none, or no contract yet)."""
    return contract.aging_ms_per_point if contract is not None else 0


def node_holdings(wl: WorkloadState) -> Iterator[tuple[str, Resources, list[int], int]]:
    """What a workload holding nodes holds there, assignment by assignment: (node, resources, GPU
    indexes, GPU milli per pod). Nothing for one that holds no node."""
    if wl.placement is None or wl.phase not in HOLDS_NODES:
        return
    gpu_per_pod = {ps.name: ps.resources.get(GPU, 0) for ps in wl.spec.pod_sets}
    held = wl.placement_gpus or [[] for _ in wl.placement.assignments]
    for (node, used), a, indexes in zip(assignment_use(wl.spec.pod_sets, wl.placement.assignments),
                                        wl.placement.assignments, held):
        yield node, used, indexes, gpu_per_pod[a.pod_set]


def waits_to_take_over(wl: WorkloadState) -> bool:
    """Is ``wl`` a hand-over (``WorkloadAdmitted.after``) that has not started, nor been ordered out?"""
    return wl.phase in ("admitted", "placed") and wl.eviction is None and bool(wl.admission.after)


def handing_over(state: State, wl: WorkloadState) -> list[str]:
    """The workloads an admitted one takes over from (``WorkloadAdmitted.after``) that are still
    there: its pods start once there are none."""
    after = wl.admission.after if wl.admission is not None else ()
    return [name for name in after if name in state.active] if after else []
