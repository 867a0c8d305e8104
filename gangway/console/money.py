"""The money panel's figures: allocated and busy GPU-hours per team over time, and their price.

One small seam, ``money_view``, so the panel can later read invoices instead: today it derives
everything from the log, as accounting does —

- *allocated*: a workload holds GPUs from its placement until it finishes, is evicted or loses its
  node (the fold's ``HOLDS_NODES`` phases);
- *busy*: the part of it the pods actually ran (accounting's intervals, from ``WorkloadRunning``;
  ``services/accounting/policy.py``) — what the ledger bills;
- *spend*: the list cost of what accounting charges (the busy intervals, every priced resource
  of them at the contract's prices: ``Interval.cost_micros``), as ``gangway showback`` counts it,
  when the contract has prices.

``Usage`` collects the intervals incrementally while the console folds the log (one step per event).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gangway.events import catalogue as ev
from gangway.events.resources import GPU, total_request
from gangway.events.state import HOLDS_NODES, State, WorkloadState
from gangway.services.accounting.policy import Interval, open_allocations, usage_effects

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


@dataclass
class Usage:
    """Allocated and busy GPU intervals per team, collected as the log is folded."""

    allocated: list[Span] = field(default_factory=list)
    busy: list[Span] = field(default_factory=list)
    #: Accounting's charges (the busy intervals, priced), for the spend.
    charges: list[Interval] = field(default_factory=list)
    #: Workloads holding GPUs now: name → since (ms).
    holding: dict[str, int] = field(default_factory=dict)

    def before(self, state: State, env: ev.Envelope) -> None:
        """Call with the state *before* ``env`` is folded (accounting's own effects)."""
        for iv in usage_effects(state, env):
            self.busy.append(Span(iv.team, iv.workload, iv.start_ms, iv.end_ms, iv.gpu_milli))
            self.charges.append(iv)

    def after(self, state: State, env: ev.Envelope, touched: list[str]) -> None:
        """Call once ``env`` is folded, with the workloads it may have changed."""
        for name in touched:
            wl = state.workloads.get(name)
            if wl is None:
                continue
            held = wl.phase in HOLDS_NODES
            if held and name not in self.holding:
                self.holding[name] = env.time_ms
            elif not held and name in self.holding:
                since = self.holding.pop(name)
                self.allocated.append(Span(wl.spec.namespace, name, since, env.time_ms, _gpus(wl)))


def _gpus(wl: WorkloadState) -> int:
    return total_request(wl.spec.pod_sets).get(GPU, 0)


def money_view(usage: Usage, state: State, now_ms: int | None = None) -> dict:
    """Per team: allocated and busy GPU-hours and spend so far, and the cumulative series over time.

    The seam of the money panel: everything it shows comes from this one function."""
    now = state.time_ms if now_ms is None else now_ms
    allocated = list(usage.allocated)
    for name, since in usage.holding.items():
        wl = state.workloads[name]
        allocated.append(Span(wl.spec.namespace, name, since, max(now, since), _gpus(wl)))
    running = open_allocations(state, now)
    busy = list(usage.busy) + [Span(iv.team, iv.workload, iv.start_ms, iv.end_ms, iv.gpu_milli) for iv in running]
    charges = usage.charges + running
    teams = sorted({s.team for s in allocated} | {s.team for s in busy})
    start = min((s.start_ms for s in allocated + busy), default=now)
    step = max(60_000, -(-(now - start) // BUCKETS_MAX)) if now > start else 60_000
    times = list(range(start, now + step, step)) if now > start else [now]
    currency = state.contract.currency if state.contract is not None else ""
    priced = any(c.prices for c in charges)
    rows = []
    for team in teams:
        mine = [s for s in allocated if s.team == team]
        costs = [c for c in charges if c.team == team]
        rows.append({
            "team": team,
            "allocated_gpu_hours": _gpu_hours(mine, now),
            "busy_gpu_hours": _gpu_hours([s for s in busy if s.team == team], now),
            "spend": _spend(costs, now) if priced else None,
            "series": [_gpu_hours(mine, t) for t in times],
            "spend_series": [_spend(costs, t) for t in times] if priced else [],
        })
    return {"currency": currency if priced else "", "times_ms": times, "teams": rows, "source": "log"}


def _gpu_ms(span: Span, until_ms: int) -> int:
    """GPU-milli × ms of a span up to ``until_ms``."""
    return span.gpu_milli * max(0, min(span.end_ms, until_ms) - span.start_ms)


def _gpu_hours(spans: list[Span], until_ms: int) -> float:
    return round(sum(_gpu_ms(s, until_ms) for s in spans) / 1000 / HOUR_MS, 3)


def _spend(charges: list[Interval], until_ms: int) -> float:
    """The list cost of ``charges`` up to ``until_ms``, in the currency (as showback sums it)."""
    return round(sum(c.cost_micros(None, until_ms) for c in charges) / 1e6, 2)
