"""Charges derived from the log — pure: no clock, no I/O, integer milli units and millionths of money.

A *charge* (``Interval``) is one attempt of a workload holding its nodes — or the part of it
between two price changes. It ends when the fold really ends the attempt: ``WorkloadFinished`` or
``WorkloadEvicted`` about the current attempt while it holds nodes, or ``NodeRemoved`` of a node
it runs on (the fold requeues it), or ``WorkloadWithdrawn``; and a ``ConfigApplied`` that changes the attempt's prices ends
the charge so far (outcome ``repriced``) and starts a new one at the new prices. Stale reports (an
older attempt) and re-deliveries end nothing and cost nothing.

Each charge carries what billing needs: team, ClusterQueue, LocalQueue, priority class, the flavor
of each resource, the nodes and GPU indexes, the resources *admitted* (partial admission pays for
the pods it got), start, end, outcome, work lost to preemption or with a lost node, the contract version in force and
the price of each resource per unit-hour. Utilisation rides along: busy GPU time (SM-active
weighted, ``events/money.py``), tokens processed and tokens that ended in a checkpoint or a
completed run.

Start: the time of ``WorkloadRunning`` (or of the price change that split it). End: the time of
the ending event; an end earlier than the start gives a zero-length charge, never a negative one.
Running work accrues: ``open_allocations`` gives the charges still open, up to a given time.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from gangway.events import catalogue as ev
from gangway.events import money
from gangway.events.fold import repriced
from gangway.events.resources import GPU
from gangway.events.state import EVICT_FROM, FINISH_FROM, HOLDS_NODES, State, WorkloadState

CPU = "cpu"
Outcome = Literal["finished", "failed", "evicted", "node_lost", "withdrawn", "repriced", "open"]


class Interval(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One charge: an attempt's admitted resources held from ``start_ms`` to ``end_ms``."""

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
    #: Which part of the attempt (0, then 1, 2… after each price change).
    segment: int = 0
    local_queue: str = ""
    #: Resource → the flavor it was admitted in.
    flavors: dict[str, str] = {}
    #: Per assignment: "node:gpu,gpu" (the GPU indexes held; "node:" when it holds none).
    placement: list[str] = []
    #: The resources admitted (milli units; memory in milli-bytes).
    resources: dict[str, int] = {}
    #: Resource → price per unit-hour (GiB-hour for memory) in millionths of ``currency``; unpriced ones absent.
    prices: dict[str, int] = {}
    currency: str = ""
    contract_digest: str = ""
    #: SM-active-weighted GPU time (milli-GPU-ms) and whether any GPU sample came in.
    busy_milli_ms: int = 0
    sampled: bool = False
    tokens: int = 0
    useful_tokens: int = 0
    #: Work lost when the attempt was preempted or lost its node (time since start or checkpoint).
    work_lost_ms: int = 0

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms

    @property
    def gpu_milli_ms(self) -> int:
        return self.gpu_milli * self.duration_ms

    @property
    def cpu_milli_ms(self) -> int:
        return self.cpu_milli * self.duration_ms

    def cost_micros(self, start_ms: int | None = None, end_ms: int | None = None) -> int:
        """List cost of the charge (or of its part inside [start_ms, end_ms))."""
        duration = clipped(self, start_ms, end_ms)
        return sum(money.cost_micros(r, self.resources.get(r, 0) * duration, p) for r, p in sorted(self.prices.items()))

    @property
    def waste_ms(self) -> int:
        return min(self.work_lost_ms, self.duration_ms)

    @property
    def waste_micros(self) -> int:
        """List cost of the work lost to preemption or with a lost node (priced as the end of the charge)."""
        return sum(money.cost_micros(r, self.resources.get(r, 0) * self.waste_ms, p) for r, p in sorted(self.prices.items()))


def clipped(iv: Interval, start_ms: int | None, end_ms: int | None) -> int:
    """Duration of the part of ``iv`` inside [start_ms, end_ms) (None: unbounded)."""
    start = iv.start_ms if start_ms is None else max(iv.start_ms, start_ms)
    end = iv.end_ms if end_ms is None else min(iv.end_ms, end_ms)
    return max(0, end - start)


def usage_effects(before: State, env: ev.Envelope) -> list[Interval]:
    """The charges ``env`` ends, given the state *before* it is folded."""
    data = env.data
    if isinstance(data, ev.WorkloadFinished):
        return _ended(before, env, data.workload, data.attempt, FINISH_FROM, "finished" if data.succeeded else "failed")
    if isinstance(data, ev.WorkloadEvicted):
        return _ended(before, env, data.workload, data.attempt, EVICT_FROM, _eviction_outcome(before, data.workload))
    if isinstance(data, ev.NodeRemoved):
        return _node_lost(before, env, data.node)
    if isinstance(data, ev.ConfigApplied):
        return [_interval(before, wl, env.time_ms, "repriced", env.offset) for wl in repriced(before, data.contract)]
    if isinstance(data, ev.WorkloadWithdrawn):
        wl = before.workloads.get(data.workload)
        return _ended(before, env, data.workload, wl.attempt, HOLDS_NODES, "withdrawn") if wl is not None else []
    return []


def open_allocations(state: State, now_ms: int) -> list[Interval]:
    """Charges so far of the workloads running at ``now_ms`` (outcome ``open``), sorted by workload."""
    out = []
    for name in sorted(state.active):
        wl = state.workloads[name]
        if wl.phase in HOLDS_NODES and wl.started_ms is not None:
            out.append(_interval(state, wl, max(now_ms, _charge_start(wl)), "open", state.offset))
    return out


def _ended(
    before: State, env: ev.Envelope, workload: str, attempt: int, allowed: tuple[str, ...], outcome: Outcome
) -> list[Interval]:
    wl = before.workloads.get(workload)
    if wl is None or wl.attempt != attempt or wl.phase not in allowed:
        return []
    return [_interval(before, wl, env.time_ms, outcome, env.offset)]


def _node_lost(before: State, env: ev.Envelope, node: str) -> list[Interval]:
    if node not in before.nodes and node not in before.unavailable:
        return []
    out = []
    for name in sorted(before.active):
        wl = before.workloads[name]
        if _runs_on(wl, node):
            out.append(_interval(before, wl, env.time_ms, "node_lost", env.offset))
    return out


def _eviction_outcome(before: State, workload: str) -> Outcome:
    """An eviction nobody ordered of a workload placed on a node taken out of service (cordoned for a
    drain, not ready): its work was lost with that node, not to preemption nor to its team's doing."""
    wl = before.workloads.get(workload)
    if wl is not None and wl.eviction is None and wl.placement is not None \
            and any(a.node in before.unavailable for a in wl.placement.assignments):
        return "node_lost"
    return "evicted"


def _runs_on(wl: WorkloadState, node: str) -> bool:
    if wl.phase not in HOLDS_NODES or wl.placement is None:
        return False
    return any(a.node == node for a in wl.placement.assignments)


def _charge_start(wl: WorkloadState) -> int:
    return wl.charged_from_ms if wl.charged_from_ms is not None else wl.started_ms


def _lost_ms(wl: WorkloadState, outcome: Outcome, end_ms: int, at_exit: bool = False) -> int:
    """The work an attempt lost that is not its team's doing: to an eviction gangway ordered
    (preemption), or with a node that left under it. A requeue nobody ordered — the binder's rollback
    of a gang that did not run whole, its own pods failing — costs the team its work, as a crash does.
    An eviction's loss is from the attempt's last checkpoint (or start) to its end (``at_exit``:
    ``Contract.credit_lost_at_exit``), a checkpoint saved in the grace period counted and the work
    after the order too; without it, the figure the order gave, when it was made."""
    if outcome == "evicted" and not at_exit:
        return wl.eviction.work_lost_ms if wl.eviction is not None else 0
    if outcome in ("evicted", "node_lost") and wl.started_ms is not None:
        return max(0, end_ms - max(wl.started_ms, wl.checkpoint_ms or 0))
    return 0


def _interval(state: State, wl: WorkloadState, end_ms: int, outcome: Outcome, offset: int) -> Interval:
    start_ms = end_ms if wl.started_ms is None else min(_charge_start(wl), end_ms)
    request = money.admitted_request(wl)
    placement = []
    if wl.placement is not None:
        for i, a in enumerate(wl.placement.assignments):
            indexes = wl.placement_gpus[i] if i < len(wl.placement_gpus) else []
            placement.append(f"{a.node}:{','.join(str(g) for g in indexes)}")
    last = outcome not in ("repriced", "open")
    contract = state.contract
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
        segment=wl.segment,
        local_queue=wl.spec.queue,
        flavors=money.flavors_of(contract, wl),
        placement=placement,
        resources=request,
        prices=money.prices_of(contract, wl),
        currency=contract.currency if contract is not None else "",
        contract_digest=state.contract_digest,
        busy_milli_ms=money.busy_until(wl, end_ms) if wl.started_ms is not None else 0,
        sampled=bool(wl.gpu_sm),
        tokens=wl.tokens if outcome != "repriced" else 0,
        useful_tokens=(wl.tokens if outcome == "finished" else wl.tokens_saved) if last or outcome == "open" else 0,
        work_lost_ms=_lost_ms(wl, outcome, end_ms, contract is not None and contract.credit_lost_at_exit) if last else 0,
    )
