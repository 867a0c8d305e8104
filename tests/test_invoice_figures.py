"""Invoices as people and programs read them (an outside tester's report, strangerB): idle GPUs
charged only for time the log has passed, quantities in the unit their price is per, printed parts
that add up, periods and teams checked, attempts counted from 1 as `explain` counts them."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import msgspec
import pytest
from rich.console import Console

from gangway.cli import main
from gangway.contract.kueue import check_file
from gangway.events import catalogue as ev
from gangway.events.contract import Billing, ClusterQueue, Contract, FlavorQuotas, Price, Quota
from gangway.events.money import GIB, period_bounds
from gangway.events.resources import GPU
from gangway.read import money
from gangway.read.describe import describe
from gangway.read.logfile import write_export
from gangway.services.accounting.billing import books_of, invoices
from gangway.services.accounting.policy import Interval
from money_story import HOUR, START_MS, night

DEC = period_bounds("2026-12")[0]


@pytest.fixture(scope="module")
def night_log(tmp_path_factory):
    sim = night()
    path = tmp_path_factory.mktemp("figures") / "night.jsonl"
    write_export(sim.log, str(path))
    return path, sim.log


@pytest.fixture(scope="module")
def early_december(tmp_path_factory):
    """The night cut at 01:30 on December 1st: December is running, a draft."""
    log = [e for e in night().log if e.time_ms < DEC + 90 * 60_000]
    path = tmp_path_factory.mktemp("figures") / "early.jsonl"
    write_export(log, str(path))
    return path, books_of(log)


def _out(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


# --- #4: idle GPUs only up to the log's clock, only while nodes exist ------------------------------


def test_a_draft_charges_idle_gpus_only_up_to_the_logs_clock(early_december, capsys) -> None:
    path, books = early_december
    now = books.state.time_ms
    assert DEC < now < DEC + 2 * HOUR
    rc, out, _ = _out(capsys, ["invoice", "--period", "2026-12", "--log", str(path), "--format", "json"])
    assert rc == 0
    idle = [line for inv in json.loads(out) for line in inv["lines"] if line["kind"] == "idle"]
    assert idle and all(line["end_ms"] == now for line in idle)
    # 24 GPUs for at most the 1.5 hours December has had on this log's clock, not 31 days.
    assert sum(Decimal(line["quantity"]) for line in idle) <= Decimal(24 * (now - DEC)) / HOUR
    # The day the log began in: idle from the nodes' arrival (21:00), not from midnight.
    day = invoices(books.known(), books.changes, books.state.contract, "2026-11-30", books.log_id, books.state.offset,
                   now_ms=now)
    idle = [line for inv in day for line in inv.lines if line.kind == "idle"]
    assert idle and sum(line.quantity for line in idle) <= 24_000 * (period_bounds("2026-12")[0] - START_MS)


# --- #5, #10, #19: lines as read: units, rounding, attempts -----------------------------------------


def _charge(**kw) -> Interval:
    base = dict(workload="research/train", attempt=0, team="research", cluster_queue="research",
                priority_class=None, start_ms=DEC, end_ms=DEC + HOUR, gpu_milli=1000, cpu_milli=0, outcome="finished",
                offset=1, flavors={GPU: "h100", "memory": "h100"},
                resources={GPU: 1000, "memory": 1000 * 10 * GIB + 2_000 * GIB // 3}, prices={GPU: 2_100_000,
                                                                                                "memory": 1_500})
    return Interval(**{**base, **kw})


def _contract() -> Contract:
    queue = ClusterQueue(name="research", flavors=[FlavorQuotas(flavor="h100", resources={
        GPU: Quota(nominal=8000), "memory": Quota(nominal=1000 * 1024 * GIB)})])
    return Contract(cluster_queues=[queue], currency="EUR",
                    prices=[Price(flavor="h100", resource=GPU, per_hour_micros=2_100_000),
                            Price(flavor="h100", resource="memory", per_hour_micros=1_500)],
                    billing=Billing(period="hourly", credit_preemption_waste=True))


def _hour_invoices(period: str = "2026-12-01T00") -> list[ev.InvoiceIssued]:
    start = period_bounds(period)[0]
    charges = [
        _charge(start_ms=start, end_ms=start + 13 * 60_000 + 7),
        _charge(workload="research/notebook", attempt=1, start_ms=start + 60_000, end_ms=start + 47 * 60_000 + 11,
                outcome="evicted", work_lost_ms=19 * 60_000 + 3),
        _charge(workload="batch/sweep", team="batch", cluster_queue="batch", start_ms=start + 5 * 60_000,
                end_ms=start + 35 * 60_000 + 1),
    ]
    return invoices(charges, [(start - HOUR, {"h100": 8000})], _contract(), period, "log", 9)


def test_csv_and_json_state_quantities_in_the_unit_the_price_is_per() -> None:
    issued = _hour_invoices()
    rows = list(csv.DictReader(io.StringIO(money.invoices_csv(issued))))
    assert {r["unit"] for r in rows if r["resource"] == "memory"} == {"GiB-Hour"}
    for r in rows:
        # quantity × unit price is the list cost, to the rounding of six decimals
        product = Decimal(r["quantity"]) * Decimal(r["unit_price"])
        assert abs(product - Decimal(r["list_cost"])) <= Decimal("0.000001") * (1 + Decimal(r["unit_price"])), r
    idle = [r for r in rows if r["kind"] == "idle"]
    assert idle and all(Decimal(r["quantity"]) > 0 and Decimal(r["unit_price"]) > 0 for r in idle)
    assert all(r["unit"] == "GPU-Hour" for r in idle)
    data = json.loads(money.invoices_json(issued))
    for inv in data:
        for line in inv["lines"]:
            assert isinstance(line["quantity"], str) and line["unit"]
            ints = [v for v in line.values() if isinstance(v, int)]
            assert all(abs(v) < 2 ** 63 for v in ints), line
    memory = next(line for inv in data for line in inv["lines"] if line["resource"] == "memory")
    assert Decimal(memory["quantity"]) < 1000, "GiB-hours, not byte-hours"


def test_printed_parts_add_up_line_by_line_rounded_to_the_cent(tmp_path) -> None:
    issued = _hour_invoices() + _hour_invoices("2026-12-01T01")
    for inv in issued:
        assert all(line.billed_cost_micros % 10_000 == 0 for line in inv.lines), "billed in cents"
        shown = [money.money(x) for x in (inv.list_cost_micros, inv.credits_micros, inv.idle_cost_micros,
                                          inv.billed_cost_micros)]
        assert shown[0] - shown[1] + shown[2] == shown[3], shown
        assert sum(money.money(line.billed_cost_micros) for line in inv.lines) == shown[3]
    focus = list(csv.DictReader(io.StringIO(money.focus_csv(issued))))
    assert sum(Decimal(r["BilledCost"]) for r in focus) == sum(money.money(i.billed_cost_micros) for i in issued)
    assert all(Decimal(r["BilledCost"]) == Decimal(r["BilledCost"]).quantize(Decimal("0.01")) for r in focus)


def test_a_currency_without_cents_bills_whole_units() -> None:
    from gangway.events.money import to_minor_unit
    assert to_minor_unit(4_225_000, "EUR") == 4_230_000 and to_minor_unit(-4_225_000, "EUR") == -4_230_000
    assert to_minor_unit(1_499_999, "JPY") == 1_000_000 and to_minor_unit(1_500_000, "JPY") == 2_000_000


def test_attempts_count_from_one_as_explain_counts_them(night_log, capsys) -> None:
    path, _ = night_log
    rc, out, _ = _out(capsys, ["invoice", "--period", "2026-11", "--team", "research", "--log", str(path),
                               "--format", "csv"])
    rows = [r for r in csv.DictReader(io.StringIO(out)) if r["workload"] == "research/notebook"]
    assert {r["attempt"] for r in rows if r["kind"] == "usage"} == {"1", "2"}
    assert all("attempt 0" not in r["description"] for r in rows)
    rc, out, _ = _out(capsys, ["invoice", "--period", "2026-11", "--team", "research", "--log", str(path),
                               "--format", "json"])
    assert {line["attempt"] for inv in json.loads(out) for line in inv["lines"]
            if line["workload"] == "research/notebook"} == {1, 2}
    rc, out, _ = _out(capsys, ["export", "focus", "--period", "2026-11", "--log", str(path)])
    ids = {r["ResourceId"] for r in csv.DictReader(io.StringIO(out))}
    assert {"research/notebook#1", "research/notebook#2"} <= ids and "research/notebook#0" not in ids
    rc, out, _ = _out(capsys, ["explain", "research/notebook", "--log", str(path), "--no-forecast"])
    assert "attempt 1" in out and "attempt 2" in out


# --- #11: prices nothing is charged at, a currency left out, periods with nothing in them ----------


def test_config_validate_warns_about_a_stray_price_and_a_missing_currency(tmp_path) -> None:
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "gangway" / "demo" / "contract.yaml").read_text()
    assert "resource: nvidia.com/gpu, price" in text and "currency:" in text
    typo = tmp_path / "typo.yaml"
    typo.write_text(text.replace("resource: nvidia.com/gpu, price", "resource: nvidia.com/gpus, price"))
    problems, warnings = check_file(typo)
    assert not problems
    assert any("nvidia.com/gpus" in w and "did you mean nvidia.com/gpu?" in w for w in warnings), warnings
    bare = tmp_path / "bare.yaml"
    bare.write_text("\n".join(line for line in text.splitlines() if "currency:" not in line))
    problems, warnings = check_file(bare)
    assert not problems and any("USD" in w and "currency" in w for w in warnings), warnings
    assert check_file(Path(__file__).resolve().parents[1] / "gangway" / "demo" / "contract.yaml") == ([], [])


def test_a_period_with_nothing_in_it_says_why_not_that_it_is_not_cut(night_log, tmp_path, capsys) -> None:
    path, log = night_log
    rc, out, _ = _out(capsys, ["invoice", "--period", "2026-10", "--log", str(path)])
    assert rc == 0 and "not cut yet" not in out and "ended before this log began" in " ".join(out.split())
    from gangway.contract import contract_digest
    stray = [e if not isinstance(e.data, ev.ConfigApplied) else ev.Envelope(
        id=e.id, source=e.source, time_ms=e.time_ms, offset=e.offset,
        data=ev.ConfigApplied(contract=_typo(e.data.contract), digest=contract_digest(_typo(e.data.contract))))
        for e in log]  # (applied with the typo: its digest is the typo's)
    typo_log = tmp_path / "typo.jsonl"
    write_export(stray, str(typo_log))
    rc, out, err = _out(capsys, ["invoice", "--period", "2026-11", "--log", str(typo_log)])
    assert rc == 0 and "not cut yet" not in out
    assert "nothing in it was invoiced" in " ".join(out.split())
    assert "prices nothing its queues use" in err and "nvidia.com/gpus" in err


def _typo(contract: Contract) -> Contract:
    import msgspec
    return msgspec.structs.replace(contract, prices=[
        msgspec.structs.replace(p, resource=p.resource + "s") for p in contract.prices])


# --- #12: showback's wasteful runs within the period ---------------------------------------------------


def test_showback_period_restricts_the_wasteful_runs(night_log, capsys) -> None:
    path, log = night_log
    rc, out, _ = _out(capsys, ["showback", "--period", "2026-10", "--log", str(path)])
    assert rc == 0 and "research/" not in out and "batch/" not in out and "is outside the log" in out
    books = books_of(log)
    start, end = period_bounds("2026-12")
    runs = money.run_figures(books.known(), books.state, start, end)
    assert {r.workload for r in runs} == {"research/train", "research/notebook"}  # batch/sweep ran in November
    teams = money.team_figures(books.known(), start, end)
    assert sum(r.list_cost_micros for r in runs) == sum(t.list_cost_micros for t in teams)


def test_showback_says_a_run_was_flagged_idle_only_in_a_window_its_flag_was_in_force(night_log) -> None:
    """The notebook runs from 21:00, is flagged idle at 21:31 and evicted at 22:00:30; it runs again
    from 23:00:30 and is flagged again at 23:31:30. "flagged idle" said yes for any window it ran in
    (whole-run: any flag it ever had); it now says so only where a flag was in force."""
    _, log = night_log
    books = books_of(log)
    notebook = "research/notebook"
    assert [(s[0], s[1], (s[2] - START_MS) // 30_000, (s[3] - START_MS) // 30_000) for s in books.idle_spans] == [
        (notebook, 0, 62, 121), (notebook, 1, 303, 721)]  # (half minutes from 21:00)

    def flagged(from_min: int, to_min: int) -> bool | None:
        runs = money.run_figures(books.known(), books.state, START_MS + from_min * 60_000, START_MS + to_min * 60_000,
                                 books.idle_spans)
        return next((r.idle_flagged for r in runs if r.workload == notebook), None)

    assert flagged(0, 30) is False  # running, not flagged yet
    assert flagged(40, 50) is True
    assert flagged(70, 110) is None  # back in its queue: not a run of the window
    assert flagged(125, 150) is False  # its second attempt, not flagged yet
    assert flagged(200, 210) is True
    over_all = money.run_figures(books.known(), books.state, idle_spans=books.idle_spans)
    assert {r.workload for r in over_all if r.idle_flagged} == {notebook} == {
        r.workload for r in money.run_figures(books.known(), books.state) if r.idle_flagged}  # no window: as before


# --- #13: periods written without leading zeros ---------------------------------------------------------


def test_a_period_without_leading_zeros_is_the_same_period(night_log, capsys) -> None:
    from gangway.events.money import normal_period
    path, _ = night_log
    assert normal_period("2026-12-3T3") == "2026-12-03T03" and normal_period("2026-W5") == "2026-W05"
    assert normal_period("2026-1") == "2026-01"
    # (the contract cuts months: the month the log ends in, a draft, is told as 2027-01 either way)
    padded = _out(capsys, ["invoice", "--period", "2027-01", "--log", str(path), "--format", "json"])
    bare = _out(capsys, ["invoice", "--period", "2027-1", "--log", str(path), "--format", "json"])
    assert bare == padded and "2027-01" in padded[2] and "2027-1 " not in padded[2]
    padded = _out(capsys, ["export", "focus", "--period", "2027-01", "--log", str(path)])
    bare = _out(capsys, ["export", "focus", "--period", "2027-1", "--log", str(path)])
    assert bare == padded
    with pytest.raises(SystemExit, match="is not a billing period"):
        main(["showback", "--period", "2026-12-03T25", "--log", str(path)])


# --- #20: an unknown team, the idle flag's time, the table at 80 columns ----------------------------------


def test_an_unknown_team_is_refused_with_the_teams_there_are(night_log) -> None:
    path, _ = night_log
    with pytest.raises(SystemExit, match=r"unknown team 'nosuchteam'.*batch, research"):
        main(["invoice", "--period", "2026-11", "--team", "nosuchteam", "--log", str(path)])


def test_the_idle_flag_says_since_when_as_a_time(night_log) -> None:
    _, log = night_log
    flag = next(e for e in log if isinstance(e.data, ev.WorkloadIdle))
    words = describe(flag)
    assert "t=" not in words and "2026-11-30T21:" in words, words
    from gangway.events.fold import apply
    from gangway.events.state import State
    from gangway.read.reports import status_tables
    state = State()
    for env in log[:log.index(flag) + 1]:
        apply(state, env)
    console = Console(width=200, record=True)
    for table in status_tables(state):
        console.print(table)
    text = console.export_text()
    assert "research/notebook" in text and "2026-11-30T21:" in text and str(flag.data.since_ms) not in text


def test_the_invoice_table_keeps_periods_apart_at_80_columns() -> None:
    issued = _hour_invoices() + _hour_invoices("2026-12-01T01")
    console = Console(width=80, record=True, force_terminal=False)
    console.print(money.invoices_table(issued))
    text = console.export_text()
    assert text.count("2026-12-01T00") == 2 and text.count("2026-12-01T01") == 2, text
    for inv in issued:
        assert inv.invoice_id[-8:] in text


def test_idle_gpus_are_priced_by_the_contract_in_force_in_each_stretch_of_the_period() -> None:
    """A price raised half way through the hour (1.00 → 3.00 a GPU-hour; a stranger's case): under
    ``Contract.idle_priced_in_force`` the idle GPUs of each half are priced as usage is, one idle
    line a stretch; a contract recorded before the field prices them all at the price at the cut."""
    start, end = period_bounds("2026-12-06T01")
    def contract(price: int, switch: bool = True) -> Contract:
        return Contract(prices=[Price(flavor="f", resource=GPU, per_hour_micros=price)], currency="EUR",
                        billing=Billing(period="hourly"), idle_priced_in_force=switch)
    half = start + HOUR // 2
    charge = Interval(workload="w", attempt=0, team="t", cluster_queue="q", priority_class=None, start_ms=start,
                      end_ms=end, gpu_milli=2000, cpu_milli=0, outcome="finished", offset=5, flavors={GPU: "f"},
                      resources={GPU: 2000},
                      prices={GPU: 1_000_000}, currency="EUR")
    for switch, expected in ((True, [(start, half, 1_000_000, 3_000_000), (half, end, 3_000_000, 9_000_000)]),
                             (False, [(start, end, 3_000_000, 18_000_000)])):
        [bill] = invoices([charge], [(start, {"f": 8000})], contract(3_000_000, switch), "2026-12-06T01", "log", 9,
                          contracts=[(start - 60_000, contract(1_000_000, switch)), (half, contract(3_000_000, switch))])
        idle = [(line.start_ms, line.end_ms, line.unit_price_micros, line.list_cost_micros)
                for line in bill.lines if line.kind == "idle"]
        assert idle == expected, switch  # 6 idle GPUs: 3 GPU-hours at 1.00 and 3 at 3.00, or 6 at 3.00


def test_invoices_as_data_without_a_period_every_one_issued_and_a_header_even_when_empty(night_log, capsys) -> None:
    """A stranger's test: --format csv|json without --period printed the text summary; a CSV of no
    line printed nothing, not even its header; a carried credit's line said quantity 0 in "-Hour"."""
    path, log = night_log
    issued = books_of(log).issued
    rc, out, _ = _out(capsys, ["invoice", "--log", str(path), "--format", "csv"])
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and {r["invoice_id"] for r in rows} == {i.invoice_id for i in issued if i.lines}
    rc, out, _ = _out(capsys, ["invoice", "--log", str(path), "--format", "json"])
    assert rc == 0 and [i["invoice_id"] for i in json.loads(out)] == [i.invoice_id for i in issued]
    assert money.invoices_csv([]).splitlines() == [",".join(money.INVOICE_COLUMNS)]
    carried = ev.InvoiceLine(kind="carried", workload="", attempt=0, cluster_queue="", flavor="", resource="",
                             start_ms=0, end_ms=1, quantity=0, unit_price_micros=0, list_cost_micros=5_220_000,
                             billed_cost_micros=5_220_000, description="credit carried from earlier periods")
    [row] = money.invoice_rows([msgspec.structs.replace(issued[0], lines=[carried])])
    assert (row["quantity"], row["unit"], row["unit_price"], row["billed_cost"]) == ("", "", "", "5.220000")


def test_a_currency_change_while_the_running_period_has_charges_is_refused(early_december) -> None:
    """An invoice is in one currency: a contract switching EUR to USD mid-period relabelled what was
    accrued (a stranger's test). `config apply` refuses it while the period running has charges."""
    from gangway.cli import _keeps_currency
    _, books = early_december
    state = books.state
    assert state.contract.currency == "EUR" and state.contract.prices
    dollars = msgspec.structs.replace(state.contract, currency="USD")
    with pytest.raises(SystemExit, match="changes the currency from EUR to USD while billing period 2026-12 has "
                                         "charges"):
        _keeps_currency(state, dollars, "usd.yaml")
    _keeps_currency(state, msgspec.structs.replace(state.contract, default_grace_ms=1), "same.yaml")  # no change
