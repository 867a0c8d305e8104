"""The money side, as people read it: figures per team and per run, invoices as tables, JSON and
CSV, a FinOps FOCUS export and the showback report (charts embedded in HTML).

Everything here is derived from charges (``services/accounting/policy.Interval``) — from the
ledger, or from a log replayed through ``billing.books_of`` — so the figures an auditor derives
from the log are the figures the ledger shows. Money is integer millionths; ``Decimal`` only
when printed. The pure functions (``team_figures``, ``run_figures``, ``spend_over_time``,
``idle_workloads``) are the read API other views (the console) build on.
"""

from __future__ import annotations

import base64
import csv
import html
import io
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal

import msgspec

from gangway.events import catalogue as ev
from gangway.events.money import minor_digits, unit_hours, unit_of
from gangway.events.state import State
from gangway.services.accounting.billing import MILLI_GPU_MS_PER_HOUR, Books, clipped, idle_in_force
from gangway.services.accounting.policy import Interval

MICROS = Decimal(1_000_000)


def money(micros: int, places: int = 2) -> Decimal:
    """Millionths to a Decimal rounded to ``places`` half up, as the invoices' six-decimal amounts
    are (4.225 shows as 4.23), for printing."""
    return (Decimal(micros) / MICROS).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def hours(milli_ms: int) -> Decimal:
    return (Decimal(milli_ms) / MILLI_GPU_MS_PER_HOUR).quantize(Decimal("0.001"))


@dataclass
class TeamFigures:
    team: str
    allocated_gpu_milli_ms: int = 0
    #: SM-active-weighted GPU time of the charges that had GPU telemetry, and their allocated time.
    busy_gpu_milli_ms: int = 0
    sampled_gpu_milli_ms: int = 0
    list_cost_micros: int = 0
    #: List cost of the charges that had GPU telemetry (what busy GPU time is set against).
    sampled_cost_micros: int = 0
    waste_micros: int = 0
    tokens: int = 0
    useful_tokens: int = 0
    workloads: int = 0

    @property
    def busy_ratio(self) -> float | None:
        return self.busy_gpu_milli_ms / self.sampled_gpu_milli_ms if self.sampled_gpu_milli_ms else None

    @property
    def cost_per_busy_gpu_hour_micros(self) -> int | None:
        """List cost of the sampled charges over their busy GPU-hours (None: nothing busy)."""
        if not self.busy_gpu_milli_ms:
            return None
        return self.sampled_cost_micros * MILLI_GPU_MS_PER_HOUR // self.busy_gpu_milli_ms

    @property
    def cost_per_million_tokens_micros(self) -> int | None:
        return self.list_cost_micros * 1_000_000 // self.useful_tokens if self.useful_tokens else None


@dataclass
class RunFigures:
    """A training run: every attempt of one workload."""

    workload: str
    team: str
    attempts: int
    allocated_gpu_milli_ms: int
    busy_gpu_milli_ms: int
    sampled: bool
    list_cost_micros: int
    #: The part of the cost spent on work lost to preemption or with a lost node.
    waste_micros: int
    useful_tokens: int
    idle_flagged: bool = False

    @property
    def busy_ratio(self) -> float | None:
        return self.busy_gpu_milli_ms / self.allocated_gpu_milli_ms if self.sampled and self.allocated_gpu_milli_ms else None


def _window(charges: list[Interval], start_ms: int | None, end_ms: int | None) -> list[tuple[Interval, int]]:
    """Each charge with its duration inside the window (charges outside left out)."""
    out = []
    for c in charges:
        d = clipped(c, start_ms, end_ms)
        if d > 0 or (start_ms is None and end_ms is None):
            out.append((c, d))
    return out


def _share(c: Interval, d: int, value: int) -> int:
    """``value`` (accrued over the whole charge) scaled to ``d`` of its duration."""
    return value if d == c.duration_ms or not c.duration_ms else value * d // c.duration_ms


def team_figures(charges: list[Interval], start_ms: int | None = None, end_ms: int | None = None) -> list[TeamFigures]:
    """Per team: allocated vs busy GPU time, list cost, effective cost per busy GPU-hour,
    preemption waste and cost per useful token (over a window, or everything)."""
    teams: dict[str, TeamFigures] = {}
    seen: dict[str, set] = {}
    for c, d in _window(charges, start_ms, end_ms):
        t = teams.setdefault(c.team, TeamFigures(c.team))
        t.allocated_gpu_milli_ms += c.gpu_milli * d
        cost = c.cost_micros(start_ms, end_ms)
        if c.sampled:
            t.sampled_gpu_milli_ms += c.gpu_milli * d
            t.busy_gpu_milli_ms += _share(c, d, c.busy_milli_ms)
            t.sampled_cost_micros += cost
        t.list_cost_micros += cost
        if start_ms is None or start_ms <= c.end_ms <= (end_ms if end_ms is not None else c.end_ms):
            t.waste_micros += c.waste_micros
            t.tokens += c.tokens
            t.useful_tokens += c.useful_tokens
        seen.setdefault(c.team, set()).add(c.workload)
    for team, names in seen.items():
        teams[team].workloads = len(names)
    return [teams[t] for t in sorted(teams)]


def run_figures(charges: list[Interval], state: State | None = None, start_ms: int | None = None,
                end_ms: int | None = None, idle_spans: list[list] | None = None) -> list[RunFigures]:
    """Per run (workload), most wasteful first: cost, waste, busy ratio, useful tokens (over a
    window, as ``team_figures`` counts it: the part of each charge inside it; or everything).
    Flagged idle: with ``idle_spans`` (``Books.idle_spans``), a flag in force inside the window;
    without, any flag the state's workload ever had."""
    runs: dict[str, RunFigures] = {}
    attempts: dict[str, set] = {}
    for c, d in _window(charges, start_ms, end_ms):
        r = runs.setdefault(c.workload, RunFigures(c.workload, c.team, 0, 0, 0, False, 0, 0, 0))
        r.allocated_gpu_milli_ms += c.gpu_milli * d
        r.busy_gpu_milli_ms += _share(c, d, c.busy_milli_ms)
        r.sampled = r.sampled or c.sampled
        r.list_cost_micros += c.cost_micros(start_ms, end_ms)
        if start_ms is None or start_ms <= c.end_ms <= (end_ms if end_ms is not None else c.end_ms):
            r.waste_micros += c.waste_micros
            r.useful_tokens += c.useful_tokens
        attempts.setdefault(c.workload, set()).add(c.attempt)
    if idle_spans is not None:
        flagged = {name for name, _, since, until in idle_spans
                   if (end_ms is None or since < end_ms) and (start_ms is None or until is None or until > start_ms)}
    else:
        flagged = set(idle_workloads_ever(state)) if state is not None else set()
    for name, r in runs.items():
        r.attempts = len(attempts[name])
        r.idle_flagged = name in flagged
    return sorted(runs.values(), key=lambda r: (-_wasted(r), r.workload))


def _wasted(r: RunFigures) -> int:
    """Money spent on nothing: preemption waste plus the idle part of the GPU time (list price)."""
    idle = 0
    if r.busy_ratio is not None and r.allocated_gpu_milli_ms:
        idle = int(r.list_cost_micros * (1 - r.busy_ratio))
    return r.waste_micros + idle


def spend_over_time(charges: list[Interval], start_ms: int, end_ms: int, step_ms: int) -> dict[str, list[int]]:
    """Per team, list cost (millionths) in each step of [start, end): the spend-over-time series."""
    steps = max(1, -(-(end_ms - start_ms) // step_ms))
    out: dict[str, list[int]] = {}
    for c in charges:
        series = out.setdefault(c.team, [0] * steps)
        first = max(0, (c.start_ms - start_ms) // step_ms)
        last = min(steps - 1, (max(c.end_ms - 1, c.start_ms) - start_ms) // step_ms)
        for i in range(first, last + 1):
            a = start_ms + i * step_ms
            series[i] += c.cost_micros(a, a + step_ms)
    return dict(sorted(out.items()))


def idle_workloads(state: State) -> list[ev.WorkloadIdle]:
    """The idle flags in force (the idle-GPU hunt), by workload."""
    return [wl.idle for _, wl in sorted(state.workloads.items()) if wl.idle is not None]


def idle_workloads_ever(state: State) -> list[str]:
    return [name for name, wl in sorted(state.workloads.items())
            if wl.idle is not None or any(d.startswith("idle/") for d in wl.decided)]


# --- invoices ------------------------------------------------------------------------------------


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def line_quantity(line: ev.InvoiceLine) -> tuple[Decimal, str]:
    """A line's quantity in the unit its price is per (GPU-Hour, GiB-Hour for memory…), to six
    decimals, and that unit: quantity × unit price is the line's list cost (a credit's quantity is
    negative, as its list cost is)."""
    qty = unit_hours(line.resource, line.quantity)
    amount = (Decimal(qty.numerator) / Decimal(qty.denominator)).quantize(Decimal("0.000001"))
    return (-amount if line.kind == "credit" else amount), unit_of(line.resource)


def _attempt(line: ev.InvoiceLine) -> int | None:
    """The attempt as ``explain`` and ``log`` number it (from 1); None on an idle share."""
    return line.attempt + 1 if line.workload else None


#: The columns of ``invoice_rows`` (an invoice CSV without a line still has its header).
INVOICE_COLUMNS = ("invoice_id", "team", "period", "kind", "workload", "attempt", "cluster_queue", "flavor",
                   "resource", "start", "end", "quantity", "unit", "unit_price", "list_cost", "billed_cost",
                   "currency", "description")


def invoice_rows(invoices: list[ev.InvoiceIssued]) -> list[dict]:
    """One CSV row per line: quantity in ``unit`` and unit price per that unit, so quantity ×
    unit_price = list_cost (to the rounding of six decimals); billed_cost is in the minor unit. A
    line of credit carried between periods is an amount only: no quantity, unit or unit price."""
    rows = []
    for inv in invoices:
        for line in inv.lines:
            qty, unit = line_quantity(line) if line.kind != "carried" else ("", "")
            attempt = _attempt(line)
            rows.append({
                "invoice_id": inv.invoice_id, "team": inv.team, "period": inv.period, "kind": line.kind,
                "workload": line.workload, "attempt": "" if attempt is None else attempt,
                "cluster_queue": line.cluster_queue, "flavor": line.flavor, "resource": line.resource,
                "start": _iso(line.start_ms), "end": _iso(line.end_ms), "quantity": str(qty), "unit": unit,
                "unit_price": str(money(line.unit_price_micros, 6)) if line.kind != "carried" else "",
                "list_cost": str(money(line.list_cost_micros, 6)),
                "billed_cost": str(money(line.billed_cost_micros, 6)), "currency": inv.currency,
                "description": line.description,
            })
    return rows


def invoice_dict(inv: ev.InvoiceIssued) -> dict:
    """An invoice as ``--format json`` gives it: the ``InvoiceIssued`` event, but each line's
    quantity a decimal string in its ``unit`` (a memory line's milli-byte-ms overflow 64 bits) and
    its attempt counted from 1 (null on an idle share)."""
    out = msgspec.to_builtins(inv)
    for line, row in zip(inv.lines, out["lines"]):
        qty, unit = line_quantity(line) if line.kind != "carried" else ("", "")
        row["quantity"], row["unit"], row["attempt"] = str(qty), unit, _attempt(line)
    return out


def invoices_json(invoices: list[ev.InvoiceIssued]) -> str:
    return msgspec.json.format(msgspec.json.encode([invoice_dict(inv) for inv in invoices]), indent=2).decode()


def invoices_csv(invoices: list[ev.InvoiceIssued]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=INVOICE_COLUMNS)
    writer.writeheader()
    writer.writerows(invoice_rows(invoices))
    return out.getvalue()


def invoices_table(invoices: list[ev.InvoiceIssued]):
    from rich.table import Table
    currency = invoices[0].currency if invoices else ""
    table = Table(title=f"invoices ({currency})" if currency else "invoices", show_edge=False, pad_edge=False)
    places = minor_digits(currency)  # (the currency's minor unit: 3 decimals for BHD, none for JPY)
    # (credit carried between periods: a column only when some invoice has it)
    carried = any(inv.carried_micros for inv in invoices)
    columns = [col for col in ("period", "team", "lines", "list", "credits", "idle", "carried", "billed", "invoice id")
               if col != "carried" or carried]
    rows = [[{"period": inv.period, "team": inv.team, "lines": str(len(inv.lines)),
              "list": str(money(inv.list_cost_micros, places)), "credits": _credit(money(inv.credits_micros, places)),
              "idle": str(money(inv.idle_cost_micros, places)), "carried": str(money(inv.carried_micros, places)),
              "billed": str(money(inv.billed_cost_micros, places)), "invoice id": "…" + inv.invoice_id[-8:]}[col]
             for col in columns] for inv in invoices]
    # Figures, periods and teams never shrink (hour 03 and hour 04 stay apart at 80 columns); the
    # id, whose period and team are in their own columns, shows the end of its digest, folded if need be.
    for i, col in enumerate(columns):
        last = col == "invoice id"
        table.add_column(col, justify="left" if col in ("period", "team") or last else "right",
                         no_wrap=not last, overflow="fold" if last else "ellipsis",
                         min_width=None if last else max((len(r[i]) for r in rows), default=len(col)))
    for row in rows:
        table.add_row(*row)
    return table


def _credit(amount: Decimal) -> str:
    """A credit as a deduction ("-1.20"), and none as "0.00", not "-0.00"."""
    return f"-{amount}" if amount else str(amount)


def figures_table(figures: list[TeamFigures], currency: str):
    from rich.table import Table
    table = Table(title=f"money per team (list prices, {currency})")
    places = minor_digits(currency)
    for col in ("team", "GPU-h", "busy GPU-h", "busy", "cost", "per busy GPU-h", "preempt. waste", "per M tokens"):
        table.add_column(col, justify="left" if col == "team" else "right")
    for f in figures:
        ratio = "—" if f.busy_ratio is None else f"{f.busy_ratio:.0%}"
        per_busy = f.cost_per_busy_gpu_hour_micros
        per_tok = f.cost_per_million_tokens_micros
        table.add_row(f.team, f"{f.allocated_gpu_milli_ms / MILLI_GPU_MS_PER_HOUR:.2f}",
                      f"{f.busy_gpu_milli_ms / MILLI_GPU_MS_PER_HOUR:.2f}", ratio, str(money(f.list_cost_micros, places)),
                      "—" if per_busy is None else str(money(per_busy, places)), str(money(f.waste_micros, places)),
                      "—" if per_tok is None else str(money(per_tok, 4)))
    return table


# --- FOCUS 1.0 -------------------------------------------------------------------------------------

#: FOCUS 1.0's columns (mandatory ones and the conditional ones that apply), in the spec's order.
FOCUS_COLUMNS = (
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription",
    "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory",
    "CommitmentDiscountId", "CommitmentDiscountName", "CommitmentDiscountStatus", "CommitmentDiscountType",
    "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice", "EffectiveCost",
    "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory", "PricingQuantity", "PricingUnit",
    "ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType",
    "ServiceCategory", "ServiceName", "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
)
#: The same columns under the names of FOCUS 1.0's release candidate, which the reference
#: validator's "1.0" rule set (focus-validator 1.0.0) still checks; written too, so both read it.
FOCUS_RC_ALIASES = {"InvoiceIssuer": "InvoiceIssuerName", "Provider": "ProviderName", "Publisher": "PublisherName",
                    "ResourceID": "ResourceId", "ChargeType": "ChargeCategory"}


def focus_rows(invoices: list[ev.InvoiceIssued], account: str = "gangway") -> list[dict]:
    """One FOCUS row per invoice line: usage, credits (ChargeCategory Credit), idle shares and
    credit carried between periods (Adjustment)."""
    rows = []
    for inv in invoices:
        for line in inv.lines:
            qty, unit = line_quantity(line)
            category = {"usage": "Usage", "credit": "Credit", "idle": "Usage", "carried": "Adjustment"}[line.kind]
            # With a unit price, ListUnitPrice × PricingQuantity is the ListCost, and ContractedCost
            # (no negotiated discount: the list price); a row without one (a credit, credit carried)
            # has both match its BilledCost, as FOCUS 1.0 says of a charge unrelated to others.
            priced = category == "Usage" and bool(line.quantity)
            billed = money(line.billed_cost_micros, 6)
            listed = money(line.list_cost_micros, 6) if priced else billed
            resource_id, resource_name, resource_type = _focus_resource(line, inv.team)
            rows.append({
                "AvailabilityZone": "", "BilledCost": str(billed), "BillingAccountId": account,
                "BillingAccountName": account, "BillingCurrency": inv.currency,
                "BillingPeriodEnd": _iso(inv.period_end_ms), "BillingPeriodStart": _iso(inv.period_start_ms),
                "ChargeCategory": category, "ChargeClass": "", "ChargeDescription": line.description or line.kind,
                "ChargeFrequency": "Usage-Based", "ChargePeriodEnd": _iso(line.end_ms),
                "ChargePeriodStart": _iso(line.start_ms), "CommitmentDiscountCategory": "",
                "CommitmentDiscountId": "", "CommitmentDiscountName": "", "CommitmentDiscountStatus": "",
                "CommitmentDiscountType": "",
                "ConsumedQuantity": str(qty) if category == "Usage" and line.quantity else "",
                "ConsumedUnit": unit if category == "Usage" and line.quantity else "",
                "ContractedCost": str(listed),
                "ContractedUnitPrice": str(money(line.unit_price_micros, 6)) if category == "Usage" and line.quantity else "",
                "EffectiveCost": str(billed), "InvoiceIssuerName": "gangway", "ListCost": str(listed),
                "ListUnitPrice": str(money(line.unit_price_micros, 6)) if category == "Usage" and line.quantity else "",
                "PricingCategory": "Standard" if category == "Usage" and line.quantity else "",
                "PricingQuantity": str(qty) if category == "Usage" and line.quantity else "",
                "PricingUnit": unit if category == "Usage" and line.quantity else "",
                "ProviderName": "gangway", "PublisherName": "gangway", "RegionId": "", "RegionName": "",
                "ResourceId": resource_id, "ResourceName": resource_name, "ResourceType": resource_type,
                "ServiceCategory": "Compute", "ServiceName": "GPU batch scheduling",
                "SkuId": f"{line.flavor}/{line.resource}", "SkuPriceId": f"{line.flavor}/{line.resource}@{line.unit_price_micros}",
                "SubAccountId": inv.team, "SubAccountName": inv.team,
                "Tags": msgspec.json.encode({"gangway.io/cluster-queue": line.cluster_queue,
                                             "gangway.io/local-queue": line.local_queue,
                                             "gangway.io/priority-class": line.priority_class or "",
                                             "gangway.io/invoice": inv.invoice_id}).decode(),
            })
            rows[-1].update({alias: rows[-1][name] for alias, name in FOCUS_RC_ALIASES.items()})
    return rows


def _focus_resource(line: ev.InvoiceLine, team: str) -> tuple[str, str, str]:
    """A FOCUS row's ResourceId, ResourceName and ResourceType: the workload attempt, the team's
    credit carried between periods, or the idle cluster GPUs of a flavor."""
    if line.workload:
        return f"{line.workload}#{_attempt(line)}", line.workload, "Workload"
    if line.kind == "carried":
        return f"carried/{team}", "credit carried between periods", "Credit balance"
    return f"idle/{line.flavor or 'cluster'}", "idle cluster GPUs", "Idle capacity"


def focus_csv(invoices: list[ev.InvoiceIssued]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[*FOCUS_COLUMNS, *FOCUS_RC_ALIASES], lineterminator="\n")
    writer.writeheader()
    writer.writerows(focus_rows(invoices))
    return out.getvalue()


# --- showback -----------------------------------------------------------------------------------------


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def showback_html(books: Books, start_ms: int, end_ms: int, step_ms: int, title: str = "gangway showback") -> str:
    """Per-team spend over time, allocated vs busy GPU-hours, idle GPUs and the most wasteful
    runs: charts (PNG, embedded) and the tables beside them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charges = books.known(end_ms)
    currency = books.state.contract.currency if books.state.contract else ""
    teams = team_figures(charges, start_ms, end_ms)
    runs = run_figures(charges, books.state, start_ms, end_ms, books.idle_spans)
    series = spend_over_time(charges, start_ms, end_ms, step_ms)
    charts = []
    fig, ax = plt.subplots(figsize=(7, 3))
    xs = [(start_ms + i * step_ms - start_ms) / 3_600_000 for i in range(len(next(iter(series.values()), [])))]
    bottom = [0.0] * len(xs)
    for team, values in series.items():
        ys = [v / 1e6 for v in values]
        ax.bar(xs, ys, width=step_ms / 3_600_000 * 0.9, bottom=bottom, label=team, align="edge")
        bottom = [b + y for b, y in zip(bottom, ys)]
    ax.set_xlabel("hours since start"), ax.set_ylabel(currency), ax.set_title("spend per team over time")
    ax.legend(fontsize=8)
    charts.append(("spend over time", _png(fig)))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 3))
    names = [t.team for t in teams]
    ax.bar([i - 0.2 for i in range(len(names))], [t.allocated_gpu_milli_ms / MILLI_GPU_MS_PER_HOUR for t in teams],
           width=0.4, label="allocated")
    ax.bar([i + 0.2 for i in range(len(names))], [t.busy_gpu_milli_ms / MILLI_GPU_MS_PER_HOUR for t in teams],
           width=0.4, label="busy (SM active)")
    ax.set_xticks(range(len(names)), names), ax.set_ylabel("GPU-hours"), ax.set_title("allocated vs busy GPU-hours")
    ax.legend(fontsize=8)
    charts.append(("allocated vs busy", _png(fig)))
    plt.close(fig)
    idle = idle_in_force(charges, books.changes, books.state.contract, books.contracts, start_ms, end_ms)

    def table(head: list[str], rows: list[list]) -> str:
        th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        trs = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><tr>{th}</tr>{trs}</table>"

    team_rows = [[t.team, hours(t.allocated_gpu_milli_ms), hours(t.busy_gpu_milli_ms),
                  "—" if t.busy_ratio is None else f"{t.busy_ratio:.0%}", money(t.list_cost_micros),
                  "—" if t.cost_per_busy_gpu_hour_micros is None else money(t.cost_per_busy_gpu_hour_micros),
                  money(t.waste_micros)] for t in teams]
    run_rows = [[r.workload, r.attempts, hours(r.allocated_gpu_milli_ms), "—" if r.busy_ratio is None else f"{r.busy_ratio:.0%}",
                 money(r.list_cost_micros), money(r.waste_micros), "yes" if r.idle_flagged else ""] for r in runs[:10]]
    idle_rows = [[f or "(default)", hours(gpu), money(cost)] for f, (gpu, cost) in idle.items()]
    flags = [[f.workload, f.rule, f"{f.sm_active / 10:g} %", _iso(f.since_ms)] for f in idle_workloads(books.state)]
    body = [f"<h1>{html.escape(title)}</h1>",
            f"<p>{_iso(start_ms)} to {_iso(end_ms)}; list prices in {html.escape(currency)}.</p>"]
    for name, uri in charts:
        body.append(f'<h2>{html.escape(name)}</h2><img alt="{html.escape(name)}" src="{uri}">')
    body.append("<h2>teams</h2>" + table(["team", "GPU-h allocated", "GPU-h busy", "busy", "cost", "per busy GPU-h",
                                          "preemption waste"], team_rows))
    body.append("<h2>idle GPUs (nobody held them)</h2>" + table(["flavor", "GPU-hours", "cost"], idle_rows))
    body.append("<h2>flagged idle now</h2>" + table(["workload", "rule", "SM active", "since"], flags))
    body.append("<h2>most wasteful runs</h2>" + table(["run", "attempts", "GPU-h", "busy", "cost", "preemption waste",
                                                        "flagged idle"], run_rows))
    style = "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{style}</style></head><body>{''.join(body)}</body></html>"


def figures_dict(figures: list[TeamFigures]) -> list[dict]:
    return [asdict(f) | {"busy_ratio": f.busy_ratio} for f in figures]
