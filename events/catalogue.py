"""The event catalogue: every fact the services exchange, as frozen msgspec structs.

An event is the *data* of a CloudEvent; its envelope (id, source, time, position in the log) is an
``Envelope``. The CloudEvents type of each event is ``io.gangway.<noun>.<verb-past>.v1`` and is
listed in ``EVENT_TYPES``. Quantities are integer milli units; times are integer milliseconds of
cluster time since the Unix epoch.
"""

from __future__ import annotations

from typing import Literal, Union

import msgspec

from gangway.events.contract import Contract

JobKind = Literal["Job", "JobSet", "PyTorchJob"]


class _Event(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=False, gc=False):
    """Base of every event type."""


class TopologyRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """Kueue's TAS annotations for one pod set (level names are node label keys)."""

    required: str | None = None
    preferred: str | None = None
    slice_required: str | None = None
    slice_size: int | None = None


# --- producers' input -------------------------------------------------------------------------


class PodSetRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A pod set as a producer writes it: resources are Kubernetes quantities (``"16Gi"``, 8)."""

    name: str
    count: int
    resources: dict[str, Union[str, int, float]]
    topology: TopologyRequest | None = None
    min_count: int | None = None


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


RejectionReason = Literal[
    "not_utf8", "oversized", "malformed_json", "malformed_yaml", "malformed_cloudevent",
    "wrong_event_type", "missing_field", "invalid_field", "bad_quantity", "absurd_quantity",
    "unknown_queue", "unknown_priority_class", "duplicate_job", "no_config", "no_quota", "internal_error",
    # A topology request no node of the cluster can ever satisfy (a level no node carries).
    "topology_unsatisfiable",
]


class JobRejected(_Event, frozen=True):
    """Bad input, kept whole: the reason, a precise message and the original record."""

    job_id: str
    reason: RejectionReason
    message: str
    original: bytes
    original_key: bytes | None = None
    #: The record's headers in their order, repeats kept.
    original_headers: list[tuple[str, bytes]] = []
    submission: str = ""


# --- decisions (they carry based_on: the log offset of the state they were decided from) -------


class WorkloadAdmitted(_Event, frozen=True):
    workload: str
    cluster_queue: str
    #: Quota the workload holds while admitted, per resource.
    usage: dict[str, int]
    #: Part of ``usage`` above the queue's nominal quota, borrowed from its cohort.
    borrowed: dict[str, int]
    based_on: int
    reason: str = ""
    #: The ResourceFlavor whose quota (and nodes) each resource uses ({}: each resource's first).
    flavors: dict[str, str] = {}
    #: Pods admitted per pod set when fewer than requested (partial admission down to min_count).
    counts: dict[str, int] = {}


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
    #: The cluster's fragmentation once this placement (and those before it in its cycle) holds.
    fragmentation: Fragmentation | None = None


class EvictionOrdered(_Event, frozen=True):
    workload: str
    preemptor: str
    based_on: int
    grace_ms: int
    reason: str = ""
    #: Work the victim loses: time run since it started or last saved a checkpoint, at the order.
    work_lost_ms: int = 0


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


class WorkloadEvicted(_Event, frozen=True):
    workload: str
    attempt: int
    preemptor: str | None = None
    reason: str = ""


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


class NodeRemoved(_Event, frozen=True):
    node: str


class ConfigApplied(_Event, frozen=True):
    contract: Contract
    #: sha256 of the canonical contract, so equal contracts are one version.
    digest: str
    source: str = ""


Event = Union[
    JobSubmitted, WorkloadQueued, JobRejected, WorkloadAdmitted, PlacementDecided,
    EvictionOrdered, WorkloadBound, WorkloadRunning, WorkloadFinished, WorkloadEvicted,
    NodeObserved, NodeRemoved, ConfigApplied, CheckpointSaved, ClockTicked,
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
        return getattr(self.data, "workload", None) or getattr(self.data, "job_id", None) or getattr(self.data, "node", None)
