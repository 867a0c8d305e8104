"""Billing (pure): periods on the log's clock, the books of a whole log, invoices and the figures.

``Books`` folds a log beside the state: every charge that ends (``policy.usage_effects``), the
GPU capacity of each flavor over time (for the idle cluster cost), and — once the log's clock is
``settle_ms`` past the end of a billing period — the cut of that period: one ``InvoiceIssued`` per
team, derived from the charges known at that offset (running work clipped at the period's end).
The same log always gives the same invoices, with the same ids: the accounting service issues
them, ``gangway replay`` and ``gangway invoice`` derive them again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import msgspec

from gangway.events import catalogue as ev
from gangway.events import money
from gangway.events.money import period_bounds, period_of
from gangway.events.codec import format_time, structured_line
from gangway.events.contract import Billing, Contract
from gangway.events.fold import apply
from gangway.events.resources import GPU
from gangway.events.state import State
from gangway.services.accounting.policy import Interval, clipped, open_allocations, usage_effects

MILLI_GPU_MS_PER_HOUR = 1000 * money.MS_PER_HOUR


# --- capacity (for the idle cluster cost) --------------------------------------------------------


def node_flavor(contract: Contract | None, labels: dict[str, str]) -> str:
    """The flavor a node's GPUs belong to: the first flavor (by name) whose labels it carries;
    a flavor selecting no labels takes the nodes no labelled flavor took."""
    if contract is None or not contract.flavors:
        return ""
    plain = ""
    for flavor in sorted(contract.flavors, key=lambda f: f.name):
        if flavor.node_labels and flavor.node_labels.items() <= labels.items():
            return flavor.name
        if not flavor.node_labels and not plain:
            plain = flavor.name
    return plain


def capacity(state: State) -> dict[str, int]:
    """GPU milli per flavor on the state's nodes."""
    return _summed(_node_part(state.contract, node) for node in state.nodes.values())


def _node_part(contract: Contract | None, node) -> tuple[str, int]:
    """A node's part of the capacity: (its GPUs' flavor, GPU milli)."""
    return node_flavor(contract, node.labels), node.allocatable.get(GPU, 0)


def _summed(parts) -> dict[str, int]:
    out: dict[str, int] = {}
    for flavor, gpus in parts:
        if gpus:
            out[flavor] = out.get(flavor, 0) + gpus
    return out


def capacity_ms(changes: list[tuple[int, dict[str, int]]], start_ms: int, end_ms: int) -> dict[str, int]:
    """GPU milli-ms per flavor over [start, end), from the change points (time, capacity from then on)."""
    out: dict[str, int] = {}
    for i, (t, cap) in enumerate(changes):
        until = changes[i + 1][0] if i + 1 < len(changes) else end_ms
        a, b = max(t, start_ms), min(until, end_ms)
        if b > a:
            for flavor, milli in cap.items():
                out[flavor] = out.get(flavor, 0) + milli * (b - a)
    return out


# --- invoices -------------------------------------------------------------------------------------


def invoice_id(log_id: str, team: str, period: str) -> str:
    """Deterministic: the same log, team and period always give the same id."""
    digest = hashlib.sha256(f"{log_id}\n{team}\n{period}".encode()).hexdigest()[:16]
    return f"inv-{period}-{team}-{digest}"


def _lines(charges: list[Interval], start: int, end: int, billing: Billing, currency: str) -> list[ev.InvoiceLine]:
    """Usage lines (and credits) of ``charges`` in [start, end). A line's list cost is exact (its
    quantity × unit price, to the millionth); what it bills is that rounded once to the currency's
    minor unit, and an invoice's totals are sums of what its lines bill."""
    lines = []
    for c in charges:
        duration = clipped(c, start, end)
        for resource, price in sorted(c.prices.items()):
            qty = c.resources.get(resource, 0) * duration
            if duration <= 0 or qty <= 0:
                continue
            cost = money.cost_micros(resource, qty, price)
            lines.append(ev.InvoiceLine(
                kind="usage", workload=c.workload, attempt=c.attempt, cluster_queue=c.cluster_queue,
                flavor=c.flavors.get(resource, ""), resource=resource, start_ms=max(c.start_ms, start),
                end_ms=min(c.end_ms, end), quantity=qty, unit_price_micros=price, list_cost_micros=cost,
                billed_cost_micros=money.to_minor_unit(cost, currency), contract_digest=c.contract_digest,
                local_queue=c.local_queue, priority_class=c.priority_class,
                description=f"{c.outcome} attempt {c.attempt + 1} part {c.segment + 1}",
            ))
        if billing.credit_preemption_waste and c.waste_ms and c.outcome in ("evicted", "node_lost") and start <= c.end_ms < end:
            for resource, price in sorted(c.prices.items()):
                qty = c.resources.get(resource, 0) * c.waste_ms
                if qty <= 0:
                    continue
                cost = money.cost_micros(resource, qty, price)
                lines.append(ev.InvoiceLine(
                    kind="credit", workload=c.workload, attempt=c.attempt, cluster_queue=c.cluster_queue,
                    flavor=c.flavors.get(resource, ""), resource=resource, start_ms=c.end_ms - c.waste_ms,
                    end_ms=c.end_ms, quantity=qty, unit_price_micros=price, list_cost_micros=-cost,
                    billed_cost_micros=money.to_minor_unit(-cost, currency), contract_digest=c.contract_digest,
                    local_queue=c.local_queue, priority_class=c.priority_class,
                    description=f"{'preemption' if c.outcome == 'evicted' else 'node-loss'} waste: "
                                f"{c.waste_ms} ms of work lost",
                ))
    return lines


def idle_cost(charges: list[Interval], changes: list[tuple[int, dict[str, int]]], contract: Contract | None,
              start: int, end: int) -> dict[str, tuple[int, int]]:
    """Per flavor: (idle GPU milli-ms, its list cost) over [start, end) — GPUs no workload held.
    Capacity counts only while nodes exist (from the first change point) and up to ``end``: pass
    the log's clock as ``end`` for a period still running, never a time the log has not reached."""
    held: dict[str, int] = {}
    for c in charges:
        flavor = c.flavors.get(GPU, "")
        held[flavor] = held.get(flavor, 0) + c.gpu_milli * clipped(c, start, end)
    out = {}
    for flavor, cap in sorted(capacity_ms(changes, start, end).items()):
        idle = max(0, cap - held.get(flavor, 0))
        price = contract.price_of(flavor, GPU) if contract is not None else None
        out[flavor] = (idle, money.cost_micros(GPU, idle, price) if price else 0)
    return out


def idle_in_force(charges: list[Interval], changes: list[tuple[int, dict[str, int]]], contract: Contract | None,
                  contracts: list[tuple[int, Contract]], start: int, end: int) -> dict[str, tuple[int, int]]:
    """``idle_cost`` over [start, end), each stretch priced as the invoices price it (``_stretches``)."""
    out: dict[str, tuple[int, int]] = {}
    for (a, b), priced_by in _stretches(contract, contracts, start, end):
        for flavor, (gpu, cost) in idle_cost(charges, changes, priced_by, a, b).items():
            was = out.get(flavor, (0, 0))
            out[flavor] = (was[0] + gpu, was[1] + cost)
    return out


def _stretches(contract: Contract | None, contracts: list[tuple[int, Contract]], start: int,
               end: int) -> list[tuple[tuple[int, int], Contract | None]]:
    """The stretches of [start, end) and the contract pricing each one's idle GPUs: the whole span
    by ``contract``, unless it says ``idle_priced_in_force`` — then each contract of ``contracts``
    (time, in force from then on) for its part of the span."""
    if contract is None or not contract.idle_priced_in_force or not contracts:
        return [((start, end), contract)]
    out = []
    for i, (t, c) in enumerate(contracts):
        a, b = max(t, start), min(contracts[i + 1][0] if i + 1 < len(contracts) else end, end)
        if b > a:
            out.append(((a, b), c))
    return out or [((start, end), contract)]


def share_out(total: int, weights: dict[str, int]) -> dict[str, int]:
    """``total`` split by weights, in integers that add up exactly (largest remainder, then name)."""
    teams = sorted(t for t, w in weights.items() if w > 0)
    whole = sum(weights[t] for t in teams)
    if not teams or total <= 0:
        return {}
    parts = {t: total * weights[t] // whole for t in teams}
    rest = total - sum(parts.values())
    for t in sorted(teams, key=lambda t: (-(total * weights[t] % whole), t))[:rest]:
        parts[t] += 1
    return parts


def _billed(lines: list[ev.InvoiceLine], kind: str) -> int:
    return sum(line.billed_cost_micros for line in lines if line.kind == kind)


def invoices(charges: list[Interval], changes: list[tuple[int, dict[str, int]]], contract: Contract | None,
             period: str, log_id: str, cut_offset: int, team: str | None = None,
             now_ms: int | None = None, carried: dict[str, int] | None = None,
             contracts: list[tuple[int, Contract]] = ()) -> list[ev.InvoiceIssued]:
    """Every team's invoice for ``period`` (``charges``: closed and open ones, as known at the cut).

    ``now_ms``: the log's clock, for a draft of a period still running (idle capacity counts up to
    it). Each line bills its list cost rounded once to the currency's minor unit; the invoice's
    list, credits, idle share and billed amounts are sums of its lines' billed amounts, so they add
    up as printed (list − credits + idle + carried = billed). ``carried``: each team's credit left
    over from earlier periods (micros, updated in place: ``carry``). ``contracts``: (time, contract
    in force from then on); under ``Contract.idle_priced_in_force`` the idle GPUs of each stretch
    of the period are priced by the contract in force then, one idle line per flavor and stretch
    (else all of them by ``contract``, the one in force at the cut)."""
    start, end = period_bounds(period)
    # Idle capacity is charged for the time the log's clock has passed, never for the future.
    accrued_end = end if now_ms is None else max(start, min(end, now_ms))
    billing = contract.billing if contract is not None else Billing()
    currency = contract.currency if contract is not None else "USD"
    by_team: dict[str, list[ev.InvoiceLine]] = {}
    for c in sorted(charges, key=lambda c: (c.team, c.workload, c.attempt, c.segment)):
        lines = _lines([c], start, end, billing, currency)
        if lines:
            by_team.setdefault(c.team, []).extend(lines)
    if billing.idle_cost == "weighted":
        weights = {t: sum(line.list_cost_micros for line in lines if line.kind == "usage") for t, lines in by_team.items()}
    elif billing.idle_cost == "even":
        weights = {t: 1 for t in by_team}
    else:
        weights = {}
    for (a, b), priced_by in _stretches(contract, contracts, start, accrued_end):
        for flavor, (idle_gpu, _) in idle_cost(charges, changes, priced_by, a, b).items():
            price = priced_by.price_of(flavor, GPU) if priced_by is not None else None
            if not price:
                continue
            for name, qty in share_out(idle_gpu, weights).items():
                if qty <= 0:
                    continue
                cost = money.cost_micros(GPU, qty, price)
                by_team[name].append(ev.InvoiceLine(
                    kind="idle", workload="", attempt=0, cluster_queue="", flavor=flavor, resource=GPU, start_ms=a,
                    end_ms=b, quantity=qty, unit_price_micros=price, list_cost_micros=cost,
                    billed_cost_micros=money.to_minor_unit(cost, currency),
                    description=f"share of idle cluster GPUs ({billing.idle_cost})"))
    out = []
    for name, lines in sorted(by_team.items()):
        if team is not None and name != team:
            continue
        if carried is not None:
            lines = carry(lines, carried, name, start, end)
        out.append(ev.InvoiceIssued(
            invoice_id=invoice_id(log_id, name, period), team=name, period=period, period_start_ms=start,
            period_end_ms=end, currency=currency, lines=lines, list_cost_micros=_billed(lines, "usage"),
            credits_micros=-_billed(lines, "credit"), idle_cost_micros=_billed(lines, "idle"),
            billed_cost_micros=sum(line.billed_cost_micros for line in lines), log_id=log_id, cut_offset=cut_offset,
            carried_micros=_billed(lines, "carried"),
        ))
    return out


def carry(lines: list[ev.InvoiceLine], carried: dict[str, int], team: str, start: int,
          end: int) -> list[ev.InvoiceLine]:
    """No invoice bills below zero: credit left from the team's earlier periods (``carried``) is
    taken off this one as far as it bills, and what its own credits leave below zero is carried to
    the team's next invoice (``carried`` updated). A period without charges carries it on."""
    brought = carried.pop(team, 0)
    total = sum(line.billed_cost_micros for line in lines)
    taken = min(brought, max(total, 0))
    below = max(taken - total, 0)  # (what its own credits leave below zero: then nothing was taken)
    out = list(lines)
    if taken:
        out.append(_carried_line(-taken, start, end, "credit carried from earlier periods"))
    if below:
        out.append(_carried_line(below, start, end, "credit carried to the next period"))
    if brought - taken + below:
        carried[team] = brought - taken + below
    return out


def _carried_line(micros: int, start: int, end: int, description: str) -> ev.InvoiceLine:
    return ev.InvoiceLine(kind="carried", workload="", attempt=0, cluster_queue="", flavor="", resource="",
                          start_ms=start, end_ms=end, quantity=0, unit_price_micros=0, list_cost_micros=micros,
                          billed_cost_micros=micros, description=description)


# --- the books of a log -----------------------------------------------------------------------------


@dataclass
class Books:
    """A log's charges, capacity and invoices, folded event by event (call ``step`` with each)."""

    log_id: str = ""
    state: State = field(default_factory=State)
    charges: list[Interval] = field(default_factory=list)
    #: (time, GPU milli per flavor from then on), appended when the nodes or the contract change.
    changes: list[tuple[int, dict[str, int]]] = field(default_factory=list)
    #: (time, the contract in force from then on), appended at each ConfigApplied.
    contracts: list[tuple[int, Contract]] = field(default_factory=list)
    #: The next period to cut ("" until the first event), and the invoices cut so far.
    next_period: str = ""
    issued: list[ev.InvoiceIssued] = field(default_factory=list)
    #: Each team's credit carried to its next invoice (micros): no invoice bills below zero.
    carried: dict[str, int] = field(default_factory=dict)
    #: The time of the log's first event (None before it): no period ending earlier has any charge.
    first_ms: int | None = None
    #: (next_period, its end in ms): computed once per period.
    _bounds: tuple[str, int] = ("", 0)
    #: The capacity now, each node's part of it (flavor, GPU milli), and the contract its flavors
    #: were read from: a node observed or removed changes its own part (a cluster's first thousands
    #: of NodeObserved summed every node again each, quadratic); a new contract recounts them all.
    _capacity: dict[str, int] = field(default_factory=dict)
    _node_parts: dict[str, tuple[str, int]] = field(default_factory=dict)
    _capacity_of: object = None
    #: Each idle flag's time in force: [workload, attempt, from ms, until ms (None: still in force)],
    #: so a report over a period says which runs were flagged idle in it.
    idle_spans: list[list] = field(default_factory=list)
    #: The spans still in force, by workload.
    _flagged: dict[str, list] = field(default_factory=dict)

    def step(self, env: ev.Envelope, state: State | None = None) -> list[ev.InvoiceIssued]:
        """Fold ``env`` (into ``state`` if given, else the books' own); returns invoices it cuts."""
        own = state is None
        state = self.state if own else state
        self.charges.extend(usage_effects(state, env))
        if own:
            apply(state, env)
        return self.after(state, env)

    def after(self, state: State, env: ev.Envelope) -> list[ev.InvoiceIssued]:
        """What follows once ``env`` is folded into ``state``: capacity, and the periods to cut."""
        if self.first_ms is None:
            self.first_ms = env.time_ms
        if isinstance(env.data, ev.WorkloadIdle) or self._flagged:
            self._idle_spans(state, env)
        if isinstance(env.data, ev.ConfigApplied) and state.contract is not None:
            self.contracts.append((env.time_ms, state.contract))
        if isinstance(env.data, (ev.NodeObserved, ev.NodeRemoved, ev.ConfigApplied)):
            cap = self._capacity_after(state, env.data)
            if not self.changes or self.changes[-1][1] != cap:
                self.changes.append((env.time_ms, cap))
        if state.contract is None:
            return []
        billing = state.contract.billing
        if not self.next_period:
            self.next_period = period_of(billing.period, state.time_ms)
        if self._bounds[0] != self.next_period:
            self._bounds = (self.next_period, period_bounds(self.next_period)[1])
        if state.time_ms < self._bounds[1] + billing.settle_ms:
            return []
        if state.time_ms - self._bounds[1] > PERIODS_AT_ONCE_MAX * _SHORTEST_MS[billing.period]:
            raise ClockJump(f"offset {env.offset}: the log's clock jumps to {format_time(state.time_ms)}, past more "
                            f"than {PERIODS_AT_ONCE_MAX:,} billing periods from {self.next_period}: a record's time "
                            "edited? (nothing is billed over such a jump)")
        cut = []
        while True:
            start, end = period_bounds(self.next_period)
            if state.time_ms < end + billing.settle_ms:
                break
            charges = self.charges + open_allocations(state, end)
            cut.extend(invoices(charges, self.changes, state.contract, self.next_period, self.log_id, env.offset,
                                carried=self.carried, contracts=self.contracts))
            self.next_period = period_of(billing.period, end)
        self.issued.extend(cut)
        return cut

    def _idle_spans(self, state: State, env: ev.Envelope) -> None:
        """A flag the fold took opens a span; one no longer in force (the SMs got busy again —
        telemetry —, or the attempt ended) is closed at this event's time."""
        data = env.data
        if isinstance(data, ev.WorkloadIdle):
            wl = state.workloads.get(data.workload)
            if wl is not None and wl.idle is data and data.workload not in self._flagged:
                span = self._flagged[data.workload] = [data.workload, data.attempt, env.time_ms, None]
                self.idle_spans.append(span)
            return
        if not isinstance(data, ev.GpuTelemetry) and getattr(data, "workload", None) not in self._flagged:
            return
        for name, span in list(self._flagged.items()):
            wl = state.workloads.get(name)
            if wl is None or wl.idle is None or wl.attempt != span[1] or wl.phase not in ("running", "evicting"):
                span[3] = env.time_ms
                del self._flagged[name]

    def _capacity_after(self, state: State, data) -> dict[str, int]:
        """``capacity(state)``, kept up to date node by node."""
        if state.contract is not self._capacity_of or isinstance(data, ev.ConfigApplied):
            self._capacity_of = state.contract
            self._node_parts = {name: _node_part(state.contract, node) for name, node in state.nodes.items()}
            self._capacity = _summed(self._node_parts.values())
            return dict(self._capacity)
        flavor, gpus = self._node_parts.pop(data.node, ("", 0))
        if gpus:
            self._capacity[flavor] -= gpus
            if not self._capacity[flavor]:
                del self._capacity[flavor]
        node = state.nodes.get(data.node)
        if node is not None:
            flavor, gpus = self._node_parts[data.node] = _node_part(state.contract, node)
            if gpus:
                self._capacity[flavor] = self._capacity.get(flavor, 0) + gpus
        return dict(self._capacity)

    def known(self, now_ms: int | None = None) -> list[Interval]:
        """Every charge so far, the open ones accrued up to ``now_ms`` (default: the log's time)."""
        return self.charges + open_allocations(self.state, self.state.time_ms if now_ms is None else now_ms)


#: The most billing periods one event may close (a year of hours is 8,760): a clock that leaps past
#: more is a record's time gone wrong (year 9999 on one line cut periods for minutes on end).
PERIODS_AT_ONCE_MAX = 100_000


#: The shortest period of each kind, in ms (a month: 28 days).
_SHORTEST_MS = {"hourly": 3_600_000, "daily": 86_400_000, "weekly": 7 * 86_400_000, "monthly": 28 * 86_400_000}


class ClockJump(ValueError):
    """An event moves the log's clock past more billing periods than any stack runs through at once."""


def books_of(envelopes, log_id: str | None = None) -> Books:
    """The books of a whole log (the auditor's way: derive everything again)."""
    envs = list(envelopes)
    books = Books(log_id=log_id if log_id is not None else (log_identity(envs[0]) if envs else ""))
    for env in envs:
        books.step(env)
    return books


def log_identity(first: ev.Envelope, topic: str = "gangway.log", partition: int = 0) -> str:
    """A log's identity: its topic, partition and a digest of its whole first event (id, source,
    time and content). A restarted embedded broker starts a new log whose first event is appended
    at another time, so it gets a new identity even when that event's id repeats."""
    digest = hashlib.sha256(structured_line(msgspec.structs.replace(first, offset=0))).hexdigest()[:24]
    return f"{topic}/{partition}/{digest}"
