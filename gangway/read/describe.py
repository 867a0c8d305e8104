"""Events in words: the one describer behind ``gangway log``, the demo's timeline and ``gangway explain``.

``describe(env)`` is a line of the log; ``describe(env, about=workload)`` is a line of one workload's
story (its own events without its name, and the evictions ordered to make room for it). Reasons are
read from their codes where the event has them: the sentence is rendered from the code and its
parameters (``reasons.sentence``), the recorded one only for an event written before codes.
"""

from __future__ import annotations

from gangway.events import catalogue as ev
from gangway.events.codec import format_time
from gangway.events.quantity import format_milli
from gangway.events.reasons import DEACTIVATING_CODES, C, sentence
from gangway.events.resources import GPU, total_request


def gpus(pod_sets) -> str:
    return format_milli(total_request(pod_sets).get(GPU, 0))


def gpus_said(milli: int) -> str:
    """GPUs in words: "1 GPU", "8 GPUs", "500m GPU"."""
    return f"{format_milli(milli)} GPU{'s' if milli > 1000 or milli == 0 else ''}"


def _rule(d: ev.EvictionOrdered) -> str:
    """The eviction's rule: its sentence, then its code when the event has one."""
    return f"{sentence(d)} [{d.reason_code}]" if d.reason_code is not None else d.reason


def _terms(d: ev.EvictionOrdered) -> str:
    return f"{_rule(d)}; grace period {d.grace_ms / 1000:g} s; work lost {d.work_lost_ms / 1000:g} s"


def _own(d, superseded: str | None, islands: bool = True) -> str:
    """What happened to the event's workload, said without its name ('' for other events). A
    placement's largest free NVLink island is said only when ``islands`` (some node declares them:
    on a cluster with none, every node counts as one island and the figure means nothing)."""
    if isinstance(d, ev.WorkloadQueued):
        return (f"queued in {d.cluster_queue} (LocalQueue {d.namespace}/{d.queue}, priority {d.priority}, "
                f"{gpus_said(total_request(d.pod_sets).get(GPU, 0))})")
    if isinstance(d, (ev.WorkloadAdmitted, ev.PlacementDecided)) and superseded is not None:
        return f"{'admission' if isinstance(d, ev.WorkloadAdmitted) else 'placement'} superseded: {superseded}"
    if isinstance(d, ev.WorkloadAdmitted) and d.kept is not None:
        nodes = ", ".join(d.kept.nodes[:8]) + (" …" if len(d.kept.nodes) > 8 else "")
        return (f"admitted: {sentence(d)}; expected to run past {format_time(d.kept.start_ms)}, when {d.kept.workload} "
                f"can start on {nodes}: placed off the room kept for it there")
    if isinstance(d, ev.WorkloadAdmitted):
        return f"admitted: {sentence(d)}"
    if isinstance(d, ev.PlacementDecided):
        after = f"; largest free island {d.fragmentation.largest_island}" if d.fragmentation and islands else ""
        return f"placed: {sentence(d)}{after}"
    if isinstance(d, ev.EvictionOrdered) and superseded is not None:
        return f"eviction by {d.preemptor} superseded: {superseded}"
    if isinstance(d, ev.EvictionOrdered) and d.reason_code == C.QUEUE_DRAINED:
        return f"drained: {_terms(d)}"
    if isinstance(d, ev.EvictionOrdered) and d.reason_code == C.MAX_EXECUTION_TIME_EXCEEDED:
        return f"ordered out: {_terms(d)}"
    if isinstance(d, ev.EvictionOrdered):
        return f"preempted by {d.preemptor}: {_terms(d)}"
    if isinstance(d, ev.WorkloadEvicted) and d.reason_code in DEACTIVATING_CODES:
        return f"evicted (attempt {d.attempt + 1}): {sentence(d)} [{d.reason_code}]"
    if isinstance(d, ev.WorkloadEvicted):
        backoff = ""
        if d.retry_after_ms:
            backoff = (f"; admissible again at {format_time(d.retry_after_ms)} ({d.bind_failures} failed bind(s) "
                       f"in a row) [{d.reason_code}]")
        return f"evicted (attempt {d.attempt + 1}){': ' + d.reason if d.reason else ''}; back in its queue{backoff}"
    if isinstance(d, ev.ClusterReconciled):
        return f"reconciled with the cluster [{d.reason_code}]: {sentence(d)}" + (f"; {d.action}" if d.action else "")
    if isinstance(d, (ev.WorkloadBound, ev.WorkloadRunning)):
        return f"{'bound' if isinstance(d, ev.WorkloadBound) else 'running'} (attempt {d.attempt + 1})"
    if isinstance(d, ev.WorkloadFinished):
        return f"finished (attempt {d.attempt + 1}){'' if d.succeeded else ', failed'}"
    if isinstance(d, ev.WorkloadIdle):
        return f"flagged idle{' (superseded: ' + superseded + ')' if superseded else ''}: {idle_reason(d)}"
    if isinstance(d, ev.CheckpointSaved):
        return "checkpoint saved" + (f" at step {d.step}" if d.step is not None else "")
    if isinstance(d, ev.WorkloadWithdrawn):
        return "withdrawn" + (f": {d.reason}" if d.reason else "")
    if isinstance(d, ev.WithdrawalRequested):
        return f"withdrawal requested: {d.reason}"
    if isinstance(d, ev.WorkloadMoved):
        return (f"moved from queue {d.from_queue} to {d.queue} (ClusterQueue {d.cluster_queue})"
                + (f" (superseded: {superseded})" if superseded else "") + (f": {d.reason}" if d.reason else ""))
    return ""


def idle_reason(flag: ev.WorkloadIdle) -> str:
    """An idle flag's reason, from its figures, with its time as a time. (The sentence recorded in
    the flag says "since t=<ms> ms"; it stays as written, since the auditor compares it.)"""
    return f"{flag.rule}: SM active {flag.sm_active / 10:g} % since {format_time(flag.since_ms)}"


def declares_islands(nodes) -> bool:
    """Does some node (``State.nodes``' values) declare NVLink islands (``gangway.io/nvlink-islands``)?"""
    return any(node.islands for node in nodes)


class IslandWatch:
    """Which nodes declare NVLink islands, for a reader going through the log event by event:
    ``see(env)`` takes each event in log order and says whether some node declares them now — as
    ``declares_islands`` of the folded state's nodes says (a node taking nothing new is not one)."""

    def __init__(self):
        self.nodes: set[str] = set()

    def see(self, env: ev.Envelope) -> bool:
        d = env.data
        if isinstance(d, ev.NodeObserved):
            (self.nodes.add if d.islands and not d.unavailable else self.nodes.discard)(d.node)
        elif isinstance(d, ev.NodeRemoved):
            self.nodes.discard(d.node)
        return bool(self.nodes)


def describe(env: ev.Envelope, about: str | None = None, superseded: str | None = None, islands: bool = True) -> str:
    """The event in one line of words; with ``about``, as a line of that workload's story ('' when the
    event is not part of it). ``superseded``: why the event's decision did not hold, if it did not.
    ``islands``: does some node declare NVLink islands (else a placement does not say the largest free one)?"""
    d = env.data
    workload = getattr(d, "workload", None)
    if about is not None:
        if isinstance(d, ev.EvictionOrdered) and d.preemptor == about and workload != about:
            return f"{workload} ordered out to make room for it: {_rule(d)}"
        return _own(d, superseded, islands) if workload == about else ""
    if isinstance(d, ev.EvictionOrdered) and superseded is None:
        return f"{workload} ordered out for {d.preemptor}: {_terms(d)}"
    if workload is not None:
        said = _own(d, superseded, islands)
        if said:
            return f"{workload} {said}"
    if isinstance(d, ev.NodeObserved):
        others = d.held_by_others.get(GPU, 0)
        return f"node {d.node} observed: {gpus_said(d.allocatable.get(GPU, 0))}" + (
            f" (besides {gpus_said(others)} held by pods gangway does not manage)" if others else "")
    if isinstance(d, ev.NodeRemoved):
        return f"node {d.node} removed"
    if isinstance(d, ev.PriorityClassObserved):
        return (f"Kubernetes PriorityClass {d.name} deleted" if d.gone else
                f"Kubernetes PriorityClass {d.name} observed: {d.value}" + (" (globalDefault)" if d.global_default else ""))
    if isinstance(d, ev.ConfigApplied):
        c = d.contract
        return f"contract {d.digest[:12]} applied: {len(c.cluster_queues)} ClusterQueues, {len(c.local_queues)} LocalQueues"
    if isinstance(d, ev.JobRejected):
        return f"{d.namespace + '/' if d.namespace else ''}{d.job_id or '?'} rejected ({d.reason}): {d.message}"
    if isinstance(d, ev.JobSubmitted):
        return f"{d.namespace}/{d.job_id} submitted to {d.queue}"
    if isinstance(d, ev.JobWithdrawn):
        return f"{d.namespace}/{d.job_id} withdrawn by its producer" + (f": {d.reason}" if d.reason else "")
    if isinstance(d, ev.JobMoved):
        return f"{d.namespace}/{d.job_id} sent to queue {d.queue} by its producer" + (f": {d.reason}" if d.reason else "")
    if isinstance(d, ev.ClusterReconciled):
        return (f"{d.kind} {d.namespace}/{d.name} reconciled with the cluster [{d.reason_code}]: {sentence(d)}"
                + (f"; {d.action}" if d.action else ""))
    if isinstance(d, ev.ClockTicked):
        return f"clock ticked{': ' + d.reason if d.reason else ''}"
    if isinstance(d, ev.WorkloadProgress):  # (not a line of the workload's story: it would drown it)
        return f"{d.workload} progress: " + ", ".join([*([f"step {d.step}"] if d.step is not None else []),
                                                       f"{d.tokens:,} tokens"])
    if isinstance(d, ev.GpuTelemetry):
        said = ", ".join(f"{s.gpu}: {s.sm_active / 10:g} %" for s in d.samples[:8]) + (" …" if len(d.samples) > 8 else "")
        return f"GPU figures of node {d.node}, SM active by GPU: {said}"
    return type(d).__name__
