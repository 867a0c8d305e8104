"""Binder policy for the simulated cluster (pure): what the cluster reports, given the time.

The simulated cluster binds a placed gang at once (WorkloadBound, then WorkloadRunning) — a
hand-over once the work it takes over has ended, in the same report that says so — runs it
for its declared runtime (``runtime_ms``; ``default_runtime_ms`` when it declares none), and lets an
evicted pod use its whole grace period before it is gone (WorkloadEvicted). Reports about the end
of something carry the moment it happened in cluster time — start + runtime, or order + grace —
so accounting and replays are exact whatever the binder's wake-up jitter.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import msgspec

from gangway.events import money
from gangway.events.catalogue import (
    CheckpointSaved, ClockTicked, EvictionOrdered, GpuSample, GpuTelemetry, NodeObserved, NodeRemoved, WorkloadBound,
    WorkloadEvicted, WorkloadFinished, WorkloadProgress, WorkloadRunning, WorkloadWithdrawn,
)
from gangway.events.codec import format_time
from gangway.events.reasons import DEACTIVATING_CODES, C, reason
from gangway.events.resources import index_of
from gangway.events.state import State, WorkloadState, execution_deadline, handing_over
from gangway.services.admission.snapshot import hand_over_lapses

DEFAULT_RUNTIME_MS = 600_000
#: A job's utilisation profile (annotations copied to its labels): its GPUs' SM activity (0-1),
#: GPU utilisation (0-1), framebuffer used (MiB), tokens processed per second and how often it
#: saves a checkpoint (seconds). A workload with a profile reports every ``TELEMETRY_EVERY_MS``.
SM_ACTIVE = "gangway.io/sm-active"
GPU_UTIL = "gangway.io/gpu-util"
FB_USED = "gangway.io/fb-used-mib"
TOKENS_PER_S = "gangway.io/tokens-per-second"
CHECKPOINT_S = "gangway.io/checkpoint-seconds"
PROFILE = (SM_ACTIVE, GPU_UTIL, FB_USED, TOKENS_PER_S, CHECKPOINT_S)
TELEMETRY_EVERY_MS = 60_000
#: At most this many sample times are reported per workload in one call (a binder far behind catches up).
CATCH_UP_MAX = 240
#: A report: (event id, cluster time of what it reports, event).
Report = tuple[str, int, object]


@dataclass(frozen=True)
class RequeueBackoff:
    """How a gang whose bind failed is requeued (Kueue's ``requeuingStrategy``, without its jitter so
    that the log says it exactly): the n-th failed bind in a row keeps it out of admission for
    ``base_s * 2^(n-1)`` seconds, at most ``max_s``; after ``limit`` failed binds in a row it is
    deactivated (0: never)."""

    base_s: float = 10.0
    max_s: float = 3600.0
    limit: int = 8

    def after(self, failures: int) -> int | None:
        """Milliseconds to wait after the ``failures``-th failed bind in a row (None: deactivate)."""
        if self.limit and failures >= self.limit:
            return None
        return int(min(self.max_s, self.base_s * 2 ** max(0, min(failures - 1, 60))) * 1000)


def bind_failed(wl: WorkloadState, now_ms: int, why: str, backoff: RequeueBackoff) -> WorkloadEvicted:
    """The report of a gang that did not bind whole: requeued with its backoff, or deactivated."""
    failures = wl.bind_failures + 1
    wait = backoff.after(failures)
    if wait is None:
        said = reason(C.BIND_FAILURES_EXCEEDED, failures=failures, limit=backoff.limit, last_error=why)
        return WorkloadEvicted(workload=wl.spec.workload, attempt=wl.attempt, reason=said.message,
                               bind_failures=failures, reason_code=said.code, reason_params=said.params)
    retry = now_ms + wait
    said = reason(C.BIND_BACKOFF, failures=failures, retry_at=format_time(retry))
    return WorkloadEvicted(workload=wl.spec.workload, attempt=wl.attempt, reason=why, bind_failures=failures,
                           retry_after_ms=retry, reason_code=said.code, reason_params=said.params)


def finish_at(wl: WorkloadState, default_runtime_ms: int) -> int | None:
    if wl.phase not in ("running", "evicting") or wl.started_ms is None:
        return None
    runtime = wl.spec.runtime_ms if wl.spec.runtime_ms is not None else default_runtime_ms
    return wl.started_ms + runtime


def evict_at(wl: WorkloadState) -> int | None:
    if wl.phase != "evicting" or wl.eviction is None or wl.eviction_ms is None:
        return None
    return wl.eviction_ms + wl.eviction.grace_ms


def deactivating(order: EvictionOrdered, said: str) -> dict:
    """A ``WorkloadEvicted``'s reason for the eviction ``order`` carried out: ``said``, or, when the
    order deactivates the workload (``DEACTIVATING_CODES``), the order's own reason and code."""
    if order.reason_code in DEACTIVATING_CODES:
        return {"reason": order.reason, "reason_code": order.reason_code, "reason_params": order.reason_params}
    return {"reason": said}


def rule_deadlines(state: State) -> list[tuple[int, str]]:
    """Future moments at which a time-based rule changes what may be decided, while anyone waits.

    Today: the moment a hand-over not started yet lapses (the work it waits for is late past its
    grace period: preemption orders it out), the moment an admitted workload uses up its maximum
    execution time (preemption orders it out, whoever waits), the end of a running workload's
    minimum runtime (it becomes preemptible), the moment one that declared its runtime is late by more than its grace
    period (preemption stops waiting for it to end, ``defrag.protected``), and the end of a pending
    workload's requeue backoff after a failed bind (it may be admitted again).
    """
    if state.contract is None:
        return []
    idx = index_of(state.contract)
    found = []
    for name in state.active:
        wl = state.workloads[name]
        lapse, deadline = hand_over_lapses(state, idx, wl), execution_deadline(wl)
        if lapse is not None and lapse[0] > state.time_ms:
            found.append((lapse[0], f"the hand-over of {name} lapses"))
        if deadline is not None and deadline > state.time_ms:
            found.append((deadline, f"the maximum execution time of {name} ends"))
    if not state.pending:
        return sorted(found)
    found += [(t, f"requeue backoff of {name} ends") for name, t in state.backing_off.items() if t > state.time_ms]
    for name in state.active:
        wl = state.workloads[name]
        minimum = idx.min_runtime_ms(wl.spec.priority_class)
        if wl.phase != "running" or wl.started_ms is None:
            continue
        if minimum and wl.started_ms + minimum > state.time_ms:
            found.append((wl.started_ms + minimum, f"minimum runtime of {name} ends"))
        if wl.spec.runtime_ms is not None:
            late = wl.started_ms + wl.spec.runtime_ms + idx.grace_ms(wl.spec.priority_class) + 1
            if late > state.time_ms:
                found.append((late, f"{name} is late by more than its grace period"))
    return sorted(found)


def due_reports(state: State, now_ms: int, default_runtime_ms: int = DEFAULT_RUNTIME_MS) -> list[Report]:
    """Everything the simulated cluster has to report at ``now_ms``, in a deterministic order."""
    reports: list[Report] = telemetry_reports(state, now_ms, default_runtime_ms)
    billing = money.billing_deadline(state)
    if billing is not None and billing[0] <= now_ms:
        reports.append((f"tick/billing/{billing[0]}", billing[0], ClockTicked(reason=billing[1])))
    due = [(t, why) for t, why in rule_deadlines(state) if t <= now_ms]
    if due:  # one tick at the latest deadline passed covers them all
        t = due[-1][0]
        reports.append((f"tick/{t}", t, ClockTicked(reason="; ".join(why for _, why in due))))
    gone: set[str] = set()  # what this report says has ended
    successors: list[WorkloadState] = []
    for name in state.active:
        wl = state.workloads[name]
        key = f"{name}/{wl.attempt}"
        if wl.withdrawing is not None:  # taken back by its producer: its pods stop at once
            reports.append((f"withdrawn/{key}", now_ms, WorkloadWithdrawn(workload=name, reason=wl.withdrawing)))
            gone.add(name)
            continue
        if wl.phase == "placed":
            if wl.admission.after:  # a hand-over: after the ends this report tells, if they are all there
                successors.append(wl)
                continue
            reports.extend(_start(wl, now_ms))
            continue
        if wl.phase == "bound":
            reports.append((f"running/{key}", now_ms, WorkloadRunning(workload=name, attempt=wl.attempt)))
            continue
        end, leaves = finish_at(wl, default_runtime_ms), evict_at(wl)
        if end is not None and end <= now_ms and (leaves is None or end <= leaves):
            reports.append((f"finished/{key}", end, WorkloadFinished(workload=name, attempt=wl.attempt)))
            gone.add(name)
        elif leaves is not None and leaves <= now_ms:
            reports.append((f"evicted/{key}", leaves, WorkloadEvicted(
                workload=name, attempt=wl.attempt, preemptor=wl.eviction.preemptor,
                **deactivating(wl.eviction,
                               f"{wl.eviction.ordered_by()} after a {wl.eviction.grace_ms} ms grace period"),
            )))
            gone.add(name)
    for wl in successors:
        if all(name in gone for name in handing_over(state, wl)):
            reports.extend(_start(wl, now_ms))
    return reports


def _start(wl: WorkloadState, now_ms: int) -> list[Report]:
    """A placed gang's pods bound and running."""
    key, name = f"{wl.spec.workload}/{wl.attempt}", wl.spec.workload
    return [(f"bound/{key}", now_ms, WorkloadBound(workload=name, attempt=wl.attempt)),
            (f"running/{key}", now_ms, WorkloadRunning(workload=name, attempt=wl.attempt))]


def next_due_ms(state: State, default_runtime_ms: int = DEFAULT_RUNTIME_MS) -> int | None:
    """The earliest cluster time at which something will be due (None: nothing scheduled)."""
    times = [t for t, _ in rule_deadlines(state)[:1]]
    billing = money.billing_deadline(state)
    if billing is not None:
        times.append(billing[0])
    for name in state.active:
        wl = state.workloads[name]
        for t in (finish_at(wl, default_runtime_ms), evict_at(wl), _next_sample(wl, default_runtime_ms)):
            if t is not None:
                times.append(t)
    return min(times) if times else None


def _profile(wl: WorkloadState) -> dict[str, float] | None:
    labels = wl.spec.labels
    if not any(key in labels for key in PROFILE):
        return None
    out = {}
    for key in PROFILE:
        try:
            out[key] = float(labels.get(key, "0"))
        except ValueError:
            out[key] = 0.0
    return out


def _last_sample(wl: WorkloadState) -> int:
    return max(wl.gpu_seen_ms.values(), default=wl.started_ms)


def _ends(wl: WorkloadState, default_runtime_ms: int) -> int:
    ends = [t for t in (finish_at(wl, default_runtime_ms), evict_at(wl)) if t is not None]
    return min(ends)


def _next_sample(wl: WorkloadState, default_runtime_ms: int) -> int | None:
    if wl.phase not in ("running", "evicting") or wl.started_ms is None or _profile(wl) is None:
        return None
    if not money.held_gpus(wl):
        return None
    t = _last_sample(wl) + TELEMETRY_EVERY_MS
    return t if t <= _ends(wl, default_runtime_ms) else None


def telemetry_reports(state: State, now_ms: int, default_runtime_ms: int = DEFAULT_RUNTIME_MS) -> list[Report]:
    """The simulated cluster's dcgm-exporter: for every running workload with a profile, GPU
    figures per node (and progress, and checkpoints) at each sample time up to ``now_ms``."""
    reports: list[Report] = []
    for name in state.active:
        wl = state.workloads[name]
        profile = _profile(wl)
        if profile is None or wl.phase not in ("running", "evicting") or wl.started_ms is None:
            continue
        until = min(now_ms, _ends(wl, default_runtime_ms))
        t = _last_sample(wl) + TELEMETRY_EVERY_MS
        per_node: dict[str, list[int]] = {}
        for node, index in money.held_gpus(wl):
            per_node.setdefault(node, []).append(index)
        if not per_node:
            continue
        sm = round(min(max(profile[SM_ACTIVE], 0.0), 1.0) * 1000)
        util = round(min(max(profile[GPU_UTIL] or profile[SM_ACTIVE], 0.0), 1.0) * 100)
        every = int(profile[CHECKPOINT_S] * 1000)
        for _ in range(CATCH_UP_MAX):
            if t > until:
                break
            key = f"{name}/{wl.attempt}/{t}"
            for node in sorted(per_node):
                samples = [GpuSample(gpu=g, sm_active=sm, gpu_util=util, fb_used_mib=int(profile[FB_USED]), workload=name)
                           for g in sorted(per_node[node])]
                reports.append((f"gpu/{node}/{key}", t, GpuTelemetry(node=node, samples=samples, observed_ms=t)))
            if profile[TOKENS_PER_S] > 0:
                tokens = int(profile[TOKENS_PER_S] * (t - wl.started_ms) / 1000)
                reports.append((f"progress/{key}", t, WorkloadProgress(workload=name, tokens=tokens, observed_ms=t)))
            if every > 0 and (t - wl.started_ms) // every > (t - TELEMETRY_EVERY_MS - wl.started_ms) // every:
                saved = wl.started_ms + (t - wl.started_ms) // every * every
                reports.append((f"checkpoint/{key}", t, CheckpointSaved(workload=name, saved_ms=saved)))
            t += TELEMETRY_EVERY_MS
    return reports


def node_digest(node: NodeObserved) -> str:
    return hashlib.sha256(msgspec.json.encode(node)).hexdigest()[:12]


def node_sync(state: State, observed: list[NodeObserved], now_ms: int) -> list[Report]:
    """Reports that make the log's nodes equal to the cluster's: new or changed, and removed."""
    reports: list[Report] = []
    seen = set()
    for node in sorted(observed, key=lambda n: n.node):
        seen.add(node.node)
        known = state.nodes.get(node.node)
        if known is None or (known.allocatable, known.labels, known.islands, known.taints) != (
                node.allocatable, node.labels, node.islands, node.taints):
            reports.append((f"node/{node.node}/{node_digest(node)}", now_ms, node))
    for name in sorted(set(state.nodes) - seen):
        reports.append((f"node-removed/{name}/{state.offset}", now_ms, NodeRemoved(node=name)))
    return reports
