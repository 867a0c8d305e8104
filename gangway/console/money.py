"""The money panel's figures: allocated and busy GPU-hours per team over time, and their price.

One small seam, ``money_view``, so the panel can later read invoices instead: today it derives
everything from the log, as accounting does —

- *allocated*: a workload holds GPUs from its placement until it finishes, is evicted or loses its
  node (the fold's ``HOLDS_NODES`` phases);
- *busy*: the part of it the pods actually ran (accounting's intervals, from ``WorkloadRunning``;
  ``services/accounting/policy.py``) — what the ledger bills;
- *spend*: allocated GPU-hours times the contract's price per GPU-hour of the flavor the workload
  was admitted on (``SchedulingPolicy.prices``), when the contract has one.

``Usage`` collects the intervals incrementally while the console folds the log (one step per event).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gangway.events import catalogue as ev
from gangway.events.resources import GPU, total_request
from gangway.events.state import HOLDS_NODES, State, WorkloadState
from gangway.services.accounting.policy import open_allocations, usage_effects

HOUR_MS = 3_600_000
#: At most this many points per series on the chart.
BUCKETS_MAX = 60


@dataclass
class Span:
    team: str
    workload: str
    start_ms: int
    end_ms: int
    gpu_milli: int
    #: Price of one GPU-hour in millionths of the contract's currency (0: no price).
    price_micros: int = 0


@dataclass
class Usage:
    """Allocated and busy GPU intervals per team, collected as the log is folded."""

    allocated: list[Span] = field(default_factory=list)
    busy: list[Span] = field(default_factory=list)
    #: Workloads holding GPUs now: name → (since ms, price).
    holding: dict[str, tuple[int, int]] = field(default_factory=dict)

    def before(self, state: State, env: ev.Envelope) -> None:
        """Call with the state *before* ``env`` is folded (accounting's own effects)."""
        for iv in usage_effects(state, env):
            self.busy.append(Span(iv.team, iv.workload, iv.start_ms, iv.end_ms, iv.gpu_milli))

    def after(self, state: State, env: ev.Envelope, touched: list[str]) -> None:
        """Call once ``env`` is folded, with the workloads it may have changed."""
        for name in touched:
            wl = state.workloads.get(name)
            if wl is None:
                continue
            held = wl.phase in HOLDS_NODES
            if held and name not in self.holding:
                self.holding[name] = (env.time_ms, _price(state, wl))
            elif not held and name in self.holding:
                since, price = self.holding.pop(name)
                self.allocated.append(Span(wl.spec.namespace, name, since, env.time_ms, _gpus(wl), price))


def _gpus(wl: WorkloadState) -> int:
    return total_request(wl.spec.pod_sets).get(GPU, 0)


def _price(state: State, wl: WorkloadState) -> int:
    """Price per GPU-hour (micros) of the flavor its GPUs were admitted on."""
    if state.contract is None or wl.admission is None:
        return 0
    flavor = wl.admission.flavors.get(GPU)
    if flavor is None:
        cq = state.contract.cluster_queue(wl.spec.cluster_queue)
        flavor = next((f.flavor for f in cq.flavors if GPU in f.resources), None) if cq else None
    return next((p.per_hour_micros for p in state.contract.prices if p.flavor == flavor and p.resource == GPU), 0)


def money_view(usage: Usage, state: State, now_ms: int | None = None) -> dict:
    """Per team: allocated and busy GPU-hours and spend so far, and the cumulative series over time.

    The seam of the money panel: everything it shows comes from this one function."""
    now = state.time_ms if now_ms is None else now_ms
    allocated = list(usage.allocated)
    for name, (since, price) in usage.holding.items():
        wl = state.workloads[name]
        allocated.append(Span(wl.spec.namespace, name, since, max(now, since), _gpus(wl), price))
    busy = list(usage.busy) + [Span(iv.team, iv.workload, iv.start_ms, iv.end_ms, iv.gpu_milli)
                               for iv in open_allocations(state, now)]
    teams = sorted({s.team for s in allocated} | {s.team for s in busy})
    start = min((s.start_ms for s in allocated + busy), default=now)
    step = max(60_000, -(-(now - start) // BUCKETS_MAX)) if now > start else 60_000
    times = list(range(start, now + step, step)) if now > start else [now]
    currency = state.contract.currency if state.contract is not None else ""
    priced = any(s.price_micros for s in allocated)
    rows = []
    for team in teams:
        mine = [s for s in allocated if s.team == team]
        rows.append({
            "team": team,
            "allocated_gpu_hours": _gpu_hours(mine, now),
            "busy_gpu_hours": _gpu_hours([s for s in busy if s.team == team], now),
            "spend": round(sum(_gpu_ms(s, now) * s.price_micros for s in mine) / HOUR_MS / 1e9, 2) if priced else None,
            "series": [_gpu_hours(mine, t) for t in times],
            "spend_series": [round(sum(_gpu_ms(s, t) * s.price_micros for s in mine) / HOUR_MS / 1e9, 2)
                             for t in times] if priced else [],
        })
    return {"currency": currency if priced else "", "times_ms": times, "teams": rows, "source": "log"}


def _gpu_ms(span: Span, until_ms: int) -> int:
    """GPU-milli × ms of a span up to ``until_ms``."""
    return span.gpu_milli * max(0, min(span.end_ms, until_ms) - span.start_ms)


def _gpu_hours(spans: list[Span], until_ms: int) -> float:
    return round(sum(_gpu_ms(s, until_ms) for s in spans) / 1000 / HOUR_MS, 3)
