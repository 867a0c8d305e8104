"""Usage intervals derived from the log — pure: no clock, no I/O, integer milli units.

An *allocation* is one attempt of a workload holding its nodes. It ends when the fold really ends
it: ``WorkloadFinished`` or ``WorkloadEvicted`` about the workload's current attempt while it holds
nodes, ``NodeRemoved`` of a node it runs on (the fold requeues it), or ``WorkloadWithdrawn``. Stale reports (an older
attempt) and re-deliveries (a workload already finished or requeued) end nothing and cost nothing.

Start of the billed interval: the time of ``WorkloadRunning`` (``WorkloadState.started_ms``), the
moment the binder saw the pods run. The state does not record when the pods were bound, so time
spent placed or bound but not yet running (image pulls, scheduling) is not billed; an allocation
that ends before it ever ran yields a zero-length interval (start = end), kept so every ended
attempt has a row. End: the time of the ending event; an end earlier than the start (reports with
skewed clocks) also gives a zero-length interval, never a negative one.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from gangway.events import catalogue as ev
from gangway.events.resources import GPU, total_request
from gangway.events.state import EVICT_FROM, FINISH_FROM, HOLDS_NODES, State, WorkloadState

CPU = "cpu"
Outcome = Literal["finished", "evicted", "node_lost", "withdrawn", "open"]


class Interval(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One allocation's usage: ``gpu_milli`` GPUs (milli units) held from ``start_ms`` to ``end_ms``."""

    workload: str
    attempt: int
    team: str
    cluster_queue: str
    priority_class: str | None
    start_ms: int
    end_ms: int
    gpu_milli: int
    cpu_milli: int
    outcome: Outcome
    #: Log offset of the event that ended it (for open allocations: the state's offset).
    offset: int

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms

    @property
    def gpu_milli_ms(self) -> int:
        return self.gpu_milli * self.duration_ms

    @property
    def cpu_milli_ms(self) -> int:
        return self.cpu_milli * self.duration_ms


def usage_effects(before: State, env: ev.Envelope) -> list[Interval]:
    """The allocations ``env`` ends, given the state *before* it is folded."""
    data = env.data
    if isinstance(data, ev.WorkloadFinished):
        return _ended(before, env, data.workload, data.attempt, FINISH_FROM, "finished")
    if isinstance(data, ev.WorkloadEvicted):
        return _ended(before, env, data.workload, data.attempt, EVICT_FROM, "evicted")
    if isinstance(data, ev.NodeRemoved):
        return _node_lost(before, env, data.node)
    if isinstance(data, ev.WorkloadWithdrawn):
        wl = before.workloads.get(data.workload)
        return _ended(before, env, data.workload, wl.attempt, HOLDS_NODES, "withdrawn") if wl is not None else []
    return []


def open_allocations(state: State, now_ms: int) -> list[Interval]:
    """Usage so far of the workloads running at ``now_ms`` (outcome ``open``), sorted by workload."""
    out = []
    for name in sorted(state.active):
        wl = state.workloads[name]
        if wl.phase in HOLDS_NODES and wl.started_ms is not None:
            out.append(_interval(wl, max(now_ms, wl.started_ms), "open", state.offset))
    return out


def _ended(
    before: State, env: ev.Envelope, workload: str, attempt: int, allowed: tuple[str, ...], outcome: Outcome
) -> list[Interval]:
    wl = before.workloads.get(workload)
    if wl is None or wl.attempt != attempt or wl.phase not in allowed:
        return []
    return [_interval(wl, env.time_ms, outcome, env.offset)]


def _node_lost(before: State, env: ev.Envelope, node: str) -> list[Interval]:
    if node not in before.nodes and node not in before.unavailable:
        return []
    out = []
    for name in sorted(before.active):
        wl = before.workloads[name]
        if _runs_on(wl, node):
            out.append(_interval(wl, env.time_ms, "node_lost", env.offset))
    return out


def _runs_on(wl: WorkloadState, node: str) -> bool:
    if wl.phase not in HOLDS_NODES or wl.placement is None:
        return False
    return any(a.node == node for a in wl.placement.assignments)


def _interval(wl: WorkloadState, end_ms: int, outcome: Outcome, offset: int) -> Interval:
    start_ms = end_ms if wl.started_ms is None else min(wl.started_ms, end_ms)
    request = total_request(wl.spec.pod_sets)
    return Interval(
        workload=wl.spec.workload,
        attempt=wl.attempt,
        team=wl.spec.namespace,
        cluster_queue=wl.spec.cluster_queue,
        priority_class=wl.spec.priority_class,
        start_ms=start_ms,
        end_ms=end_ms,
        gpu_milli=request.get(GPU, 0),
        cpu_milli=request.get(CPU, 0),
        outcome=outcome,
        offset=offset,
    )
