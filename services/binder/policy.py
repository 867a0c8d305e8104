"""Binder policy for the simulated cluster (pure): what the cluster reports, given the time.

The simulated cluster binds a placed gang at once (WorkloadBound, then WorkloadRunning), runs it
for its declared runtime (``runtime_ms``; ``default_runtime_ms`` when it declares none), and lets an
evicted pod use its whole grace period before it is gone (WorkloadEvicted). Reports about the end
of something carry the moment it happened in cluster time — start + runtime, or order + grace —
so accounting and replays are exact whatever the binder's wake-up jitter.
"""

from __future__ import annotations

import hashlib

import msgspec

from gangway.events.catalogue import (
    ClockTicked, NodeObserved, NodeRemoved, WorkloadBound, WorkloadEvicted, WorkloadFinished, WorkloadRunning,
)
from gangway.events.resources import index_of
from gangway.events.state import State, WorkloadState

DEFAULT_RUNTIME_MS = 600_000
#: A report: (event id, cluster time of what it reports, event).
Report = tuple[str, int, object]


def finish_at(wl: WorkloadState, default_runtime_ms: int) -> int | None:
    if wl.phase not in ("running", "evicting") or wl.started_ms is None:
        return None
    runtime = wl.spec.runtime_ms if wl.spec.runtime_ms is not None else default_runtime_ms
    return wl.started_ms + runtime


def evict_at(wl: WorkloadState) -> int | None:
    if wl.phase != "evicting" or wl.eviction is None or wl.eviction_ms is None:
        return None
    return wl.eviction_ms + wl.eviction.grace_ms


def rule_deadlines(state: State) -> list[tuple[int, str]]:
    """Future moments at which a time-based rule changes what may be decided, while anyone waits.

    Today: the end of a running workload's minimum runtime (it becomes preemptible).
    """
    if not state.pending or state.contract is None:
        return []
    idx = index_of(state.contract)
    found = []
    for name in state.active:
        wl = state.workloads[name]
        minimum = idx.min_runtime_ms(wl.spec.priority_class)
        if minimum and wl.phase == "running" and wl.started_ms is not None:
            end = wl.started_ms + minimum
            if end > state.time_ms:
                found.append((end, f"minimum runtime of {name} ends"))
    return sorted(found)


def due_reports(state: State, now_ms: int, default_runtime_ms: int = DEFAULT_RUNTIME_MS) -> list[Report]:
    """Everything the simulated cluster has to report at ``now_ms``, in a deterministic order."""
    reports: list[Report] = []
    due = [(t, why) for t, why in rule_deadlines(state) if t <= now_ms]
    if due:  # one tick at the latest deadline passed covers them all
        t = due[-1][0]
        reports.append((f"tick/{t}", t, ClockTicked(reason="; ".join(why for _, why in due))))
    for name in state.active:
        wl = state.workloads[name]
        key = f"{name}/{wl.attempt}"
        if wl.phase == "placed":
            reports.append((f"bound/{key}", now_ms, WorkloadBound(workload=name, attempt=wl.attempt)))
            reports.append((f"running/{key}", now_ms, WorkloadRunning(workload=name, attempt=wl.attempt)))
            continue
        if wl.phase == "bound":
            reports.append((f"running/{key}", now_ms, WorkloadRunning(workload=name, attempt=wl.attempt)))
            continue
        end, gone = finish_at(wl, default_runtime_ms), evict_at(wl)
        if end is not None and end <= now_ms and (gone is None or end <= gone):
            reports.append((f"finished/{key}", end, WorkloadFinished(workload=name, attempt=wl.attempt)))
        elif gone is not None and gone <= now_ms:
            reports.append((f"evicted/{key}", gone, WorkloadEvicted(
                workload=name, attempt=wl.attempt, preemptor=wl.eviction.preemptor,
                reason=f"preempted by {wl.eviction.preemptor} after a {wl.eviction.grace_ms} ms grace period",
            )))
    return reports


def next_due_ms(state: State, default_runtime_ms: int = DEFAULT_RUNTIME_MS) -> int | None:
    """The earliest cluster time at which something will be due (None: nothing scheduled)."""
    times = [t for t, _ in rule_deadlines(state)[:1]]
    for name in state.active:
        wl = state.workloads[name]
        for t in (finish_at(wl, default_runtime_ms), evict_at(wl)):
            if t is not None:
                times.append(t)
    return min(times) if times else None


def node_digest(node: NodeObserved) -> str:
    return hashlib.sha256(msgspec.json.encode(node)).hexdigest()[:12]


def node_sync(state: State, observed: list[NodeObserved], now_ms: int) -> list[Report]:
    """Reports that make the log's nodes equal to the cluster's: new or changed, and removed."""
    reports: list[Report] = []
    seen = set()
    for node in sorted(observed, key=lambda n: n.node):
        seen.add(node.node)
        known = state.nodes.get(node.node)
        if known is None or (known.allocatable, known.labels, known.islands) != (node.allocatable, node.labels, node.islands):
            reports.append((f"node/{node.node}/{node_digest(node)}", now_ms, node))
    for name in sorted(set(state.nodes) - seen):
        reports.append((f"node-removed/{name}/{state.offset}", now_ms, NodeRemoved(node=name)))
    return reports
