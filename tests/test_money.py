"""Money: charges per attempt, prices in force, telemetry, the idle-GPU hunt and invoices from the log."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from gangway.events import catalogue as ev
from gangway.events.resources import GPU
from gangway.services.accounting.billing import books_of, invoices, period_bounds, period_of, share_out
from gangway.services.accounting.ledger import Ledger
from gangway.services.accounting.policy import open_allocations
from gangway.services.audit.replay import verify
from gangway.services.submission.telemetry import decide_telemetry
from money_story import HOUR, PRICE, START_MS, night
import test_accounting
from test_accounting import NODES, Log


#: The ledger tests run on SQLite and, when it answers, PostgreSQL.
db_url = test_accounting.db_url


@pytest.fixture(scope="module")
def story():
    sim = night()
    return sim, books_of(sim.log)


def test_every_charge_carries_what_billing_needs(story) -> None:
    _, books = story
    first = books.charges[0]
    assert (first.workload, first.attempt, first.outcome) == ("research/notebook", 0, "evicted")
    assert (first.team, first.cluster_queue, first.local_queue) == ("research", "research", "default")
    assert first.flavors == {GPU: "h100", "cpu": "h100"} and first.prices == {GPU: PRICE, "cpu": 10_000}
    assert first.placement and first.placement[0].endswith(":0,1,2,3,4,5,6,7")
    assert first.contract_digest and first.currency == "EUR"
    assert first.work_lost_ms == HOUR, "no checkpoint: all it ran until the eviction order is lost"
    hours = first.duration_ms / HOUR
    assert first.cost_micros() == round(8 * 2.10e6 * hours + 96 * 1e4 * hours)


def test_busy_gpu_time_follows_the_profile(story) -> None:
    _, books = story
    ratio = {(c.workload, c.attempt): c.busy_milli_ms / c.gpu_milli_ms for c in books.charges}
    assert ratio[("research/train", 0)] == pytest.approx(0.8)
    assert ratio[("research/notebook", 0)] == pytest.approx(0.04)


def test_useful_tokens_are_those_that_finished_or_were_saved(story) -> None:
    _, books = story
    train = next(c for c in books.charges if c.workload == "research/train")
    assert train.useful_tokens == train.tokens == 1000 * 4 * 3600


def test_the_idle_borrower_is_flagged_and_evicted_first_naming_the_rule(story) -> None:
    sim, _ = story
    flags = [e for e in sim.log if isinstance(e.data, ev.WorkloadIdle)]
    assert flags and flags[0].data.workload == "research/notebook" and flags[0].data.sm_active == 40
    assert flags[0].time_ms - START_MS >= 30 * 60_000
    (order, *_) = [e.data for e in sim.log if isinstance(e.data, ev.EvictionOrdered)]
    assert order.workload == "research/notebook"
    assert "idle first: SM active below 10 % for 30 min (SM active 4 %" in order.reason
    assert verify(sim.log).ok, "the auditor re-derives the idle flags like any decision"


def test_invoices_are_cut_at_the_period_end_and_add_up(story) -> None:
    sim, books = story
    # November is cut in the night; December when the binder's billing tick passes its end (only
    # research ran in December).
    assert {(i.team, i.period) for i in books.issued} == {("batch", "2026-11"), ("research", "2026-11"),
                                                          ("research", "2026-12")}
    assert any(isinstance(e.data, ev.ClockTicked) and e.data.reason == "billing period 2026-12 ends" for e in sim.log)
    start, end = period_bounds("2026-11")
    for inv in [i for i in books.issued if i.period == "2026-11"]:
        assert inv.billed_cost_micros == sum(line.billed_cost_micros for line in inv.lines)
        assert inv.list_cost_micros - inv.credits_micros + inv.idle_cost_micros == inv.billed_cost_micros
        assert all(start <= line.start_ms <= line.end_ms <= end for line in inv.lines)
    research = next(i for i in books.issued if i.team == "research" and i.period == "2026-11")
    # The notebook's first attempt ran an hour and lost it all: credited.
    assert research.credits_micros == 8 * PRICE + 96 * 10_000
    # research/train runs 21:00-01:00: three of its hours are November's.
    train = [line for line in research.lines if line.workload == "research/train" and line.resource == GPU]
    assert sum(line.quantity for line in train) == 8000 * 3 * HOUR


def test_idle_cluster_cost_is_shared_out_the_chosen_way() -> None:
    def idle(way: str) -> dict[str, int]:
        return {i.team: i.idle_cost_micros for i in books_of(night(idle_cost=way).log).issued if i.period == "2026-11"}
    weighted, even, apart = idle("weighted"), idle("even"), idle("apart")
    assert sum(weighted.values()) == sum(even.values()) > 0
    assert even["batch"] == even["research"] and weighted["research"] > weighted["batch"]
    assert set(apart.values()) == {0}
    assert share_out(10, {"a": 1, "b": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}


def test_replaying_the_log_gives_the_identical_invoices(story) -> None:
    sim, books = story
    again = books_of(list(sim.log))
    assert msgspec.json.encode(again.issued) == msgspec.json.encode(books.issued)
    assert len({i.invoice_id for i in books.issued}) == len(books.issued)
    other_log = books_of(sim.log, log_id="another-log")
    assert {i.invoice_id for i in other_log.issued}.isdisjoint({i.invoice_id for i in books.issued})


def test_a_price_change_mid_run_splits_the_charge() -> None:
    change = START_MS + 2 * HOUR
    books = books_of(night(price_change_at_ms=change, new_price=4_200_000).log)
    train = [c for c in books.charges if c.workload == "research/train"]
    assert [(c.segment, c.outcome, c.prices[GPU]) for c in train] == [(0, "repriced", PRICE), (1, "finished", 4_200_000)]
    assert train[0].end_ms == train[1].start_ms >= change
    hours = [c.duration_ms / HOUR for c in train]
    assert train[0].cost_micros() + train[1].cost_micros() == round(8 * (2.1e6 * hours[0] + 4.2e6 * hours[1])
                                                                   + 96 * 1e4 * sum(hours))
    assert sum(c.busy_milli_ms for c in train) == pytest.approx(0.8 * 8000 * 4 * HOUR)


def test_partial_admission_is_billed_for_what_was_admitted() -> None:
    log = Log().setup(NODES)
    pod_set = ev.PodSet(name="main", count=4, resources={GPU: 2000, "cpu": 4000}, min_count=2)
    log.add(ev.WorkloadQueued(workload="g", namespace="team-a", queue="main", cluster_queue="cq-main",
                              priority_class=None, priority=0, kind="Job", pod_sets=[pod_set]), 0)
    usage = {GPU: 4000, "cpu": 8000}
    log.add(ev.WorkloadAdmitted(workload="g", cluster_queue="cq-main", usage=usage, borrowed={},
                                based_on=log.state.offset, counts={"main": 2}), 0)
    log.place("g", {"node-a": 2}).bind("g").run("g", 1_000).finish("g", 3_601_000)
    (charge,) = log.intervals
    assert (charge.gpu_milli, charge.resources) == (4000, {GPU: 4000, "cpu": 8000})


def test_running_work_accrues_before_it_ends(story) -> None:
    sim, _ = story
    mid = books_of(sim.log[:300])
    running = open_allocations(mid.state, mid.state.time_ms)
    assert {c.workload for c in running} >= {"research/train"}
    train = next(c for c in running if c.workload == "research/train")
    assert train.outcome == "open" and train.end_ms == mid.state.time_ms and train.cost_micros() > 0


def test_the_ledger_keeps_charges_running_work_and_invoices(db_url, story) -> None:
    sim, books = story
    ledger = Ledger(db_url)
    mid = books_of(sim.log[:300], log_id="L")
    ledger.record("L", 299, mid.charges, open_allocations(mid.state, mid.state.time_ms), sim.log[299].id)
    assert ledger.last_id("L") == sim.log[299].id
    got = ledger.charges("L")
    assert got == mid.charges + open_allocations(mid.state, mid.state.time_ms)
    ledger.record("L", len(sim.log) - 1, [c for c in books.charges if c.offset > 299], [], sim.log[-1].id)
    assert ledger.charges("L") == books.charges
    assert all(ledger.record_invoice(i) for i in books.issued)
    assert not any(ledger.record_invoice(i) for i in books.issued), "issuing again changes nothing"
    assert ledger.invoices(books.log_id, "2026-11") == sorted([i for i in books.issued if i.period == "2026-11"],
                                                              key=lambda i: i.team)
    ledger.close()


def test_periods_on_the_calendar() -> None:
    assert period_of("monthly", START_MS) == "2026-11" and period_of("daily", START_MS) == "2026-11-30"
    assert period_of("weekly", START_MS) == "2026-W49" and period_of("hourly", START_MS) == "2026-11-30T21"
    assert period_bounds("2026-02")[1] - period_bounds("2026-02")[0] == 28 * 24 * HOUR
    with pytest.raises(ValueError):
        period_bounds("November")
    assert invoices([], [], None, "2026-11", "L", 0) == []


# --- telemetry in: DCGM terms, progress, and bad records kept whole ---------------------------------

def test_dcgm_json_becomes_gpu_telemetry_and_bad_figures_are_rejected(story) -> None:
    sim, _ = story
    state = books_of(sim.log[:50]).state
    good = (b'{"node": "n0", "gpus": [{"gpu": 0, "DCGM_FI_PROF_SM_ACTIVE": 0.31, "DCGM_FI_DEV_GPU_UTIL": 64,'
            b' "DCGM_FI_DEV_FB_USED": 30512}]}')
    event = decide_telemetry(good, b"n0", [], state, "gangway.telemetry/0/1")
    assert event == ev.GpuTelemetry(node="n0", samples=[ev.GpuSample(gpu=0, sm_active=310, gpu_util=64, fb_used_mib=30512)])
    progress = decide_telemetry(b'{"workload": "research/train", "step": 9, "tokens": 12000}', None, [], state, "t/0/2")
    assert progress == ev.WorkloadProgress(workload="research/train", step=9, tokens=12000)
    for bad, why in [
        (b'{"node": "n0", "gpus": [{"gpu": 0, "DCGM_FI_PROF_SM_ACTIVE": 1.7}]}', "within 0-1"),
        (b'{"node": "nope", "gpus": [{"gpu": 0, "DCGM_FI_PROF_SM_ACTIVE": 0.1}]}', "not a known node"),
        (b'{"node": "n0", "gpus": [{"gpu": 99, "DCGM_FI_PROF_SM_ACTIVE": 0.1}]}', "GPU 99 of 'n0', which has"),
        (b'{"node": "n0", "gpus": [{"gpu": 0}]}', "missing"),
        (b'{"workload": "research/ghost", "tokens": 5}', "not a known workload"),
        (b'{"workload": "research/train", "tokens": -5}', "zero or more"),
    ]:
        rejected = decide_telemetry(bad, b"key", [("h", b"v")], state, "gangway.telemetry/0/7")
        assert isinstance(rejected, ev.JobRejected), bad
        assert why in rejected.message and rejected.original == bad and rejected.original_key == b"key"
        assert rejected.original_headers == [("h", b"v")]


# --- the ledger's log identity -----------------------------------------------------------------------

async def test_a_new_log_never_inherits_an_old_logs_position(tmp_path) -> None:
    from gangway.services.accounting.billing import log_identity
    from gangway.services.accounting.service import AccountingService

    url, log = f"sqlite:///{tmp_path}/ledger.db", night().log

    async def feed(envs) -> AccountingService:
        service = AccountingService("127.0.0.1:9", url, tmp_path)
        service.was_active = True
        for env in envs:
            service.fold(env)
        await service.on_folded()
        service.ledger.close()
        return service

    first = await feed(log[:200])
    assert first.log_id == log_identity(log[0]) and Ledger(url).position(first.log_id) == 199
    # A restarted embedded broker: its first event is appended at another time, so another identity.
    moved = [msgspec.structs.replace(e, time_ms=e.time_ms + 1) for e in log[:1]] + log[1:50]
    assert log_identity(moved[0]) != first.log_id
    # The same first event to the millisecond, then another history: told apart at the position.
    twin = log[:100] + [msgspec.structs.replace(e, id=f"other-{e.id}") for e in log[100:300]]
    second = await feed(twin)
    assert second.log_id != first.log_id and second.log_id.startswith(first.log_id + "~")
    ledger = Ledger(url)
    assert ledger.position(second.log_id) == 299 and ledger.position(first.log_id) == 199
    assert len(ledger.charges(second.log_id, running_too=False)) == len(
        [c for c in books_of(twin).charges]), "the new log's charges are all written, from offset 0"
    ledger.close()


async def test_the_ledger_is_written_at_most_once_a_second_and_at_stop(tmp_path) -> None:
    """Under a stream of fetched batches the ledger is written once a second, not after each batch
    (each write rewrites every running charge), and the loop wakes up in time to write the rest."""
    from gangway.services.accounting import service as accounting

    url, log = f"sqlite:///{tmp_path}/ledger.db", night().log
    service = accounting.AccountingService("127.0.0.1:9", url, tmp_path)
    service.was_active = True
    for env in log[:200]:
        service.fold(env)
    await service.on_folded()
    assert Ledger(url).position(service.log_id) == 199
    for env in log[200:300]:
        service.fold(env)
    await service.on_folded()
    assert Ledger(url).position(service.log_id) == 199, "a second batch within the second waits"
    assert 0 < service.wake_in_s(service.state) <= accounting.LEDGER_WRITE_EVERY_S
    service.written_at -= accounting.LEDGER_WRITE_EVERY_S
    assert service.wake_in_s(service.state) == 0
    await service.on_folded()
    assert Ledger(url).position(service.log_id) == 299
    for env in log[300:310]:
        service.fold(env)
    await service.on_folded(force=True)  # what the service's stop does
    assert Ledger(url).position(service.log_id) == 309
    service.ledger.close()


# --- the contract's money fields ------------------------------------------------------------------

POLICY = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
---
apiVersion: gangway.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: default}
spec:
  prices:
    currency: EUR
    perHour:
    - {flavor: h100, resource: nvidia.com/gpu, price: PRICE}
  billing: BILLING
  idleRule: IDLE
"""


def _policy(price='"2.10"', billing="{period: daily, settleSeconds: 30, idleCost: even, creditPreemptionWaste: true}",
            idle='{smActiveBelow: "0.15", forSeconds: 900, preemptFirst: true}'):
    from gangway.contract.kueue import load_contract
    return load_contract(POLICY.replace("PRICE", price).replace("BILLING", billing).replace("IDLE", idle), "p.yaml")


def test_prices_billing_and_the_idle_rule_are_read_exactly() -> None:
    from gangway.events.contract import Billing, IdleRule
    c = _policy()
    assert c.price_of("h100", GPU) == 2_100_000 and c.currency == "EUR"
    assert c.billing == Billing(period="daily", settle_ms=30_000, idle_cost="even", credit_preemption_waste=True)
    assert c.idle_rule == IdleRule(sm_active_below=150, for_ms=900_000, preempt_first=True)
    assert _policy(price='"0.000001"').price_of("h100", GPU) == 1, "a millionth is the smallest price"
    assert _policy(price="2.1").price_of("h100", GPU) == 2_100_000, "YAML numbers are read as decimals"


@pytest.mark.parametrize("field, bad, why", [
    ("price", '"2.1234567"', "more than 6 decimals"),
    ("price", '"-1"', "zero or more"),
    ("price", '"two"', "not a decimal price"),
    ("price", '"99999999999999999999999"', "is more than 1,000,000 an hour"),
    ("billing", "{period: fortnightly}", "not one of monthly, weekly, daily, hourly"),
    ("billing", "{idleCost: split}", "not one of weighted, even, apart"),
    ("idle", '{smActiveBelow: "1.5"}', "above 1"),
    ("idle", "{smActiveBelow: 0.1, forSeconds: 0}", "out of range"),
])
def test_bad_money_fields_are_errors_naming_the_field(field: str, bad: str, why: str) -> None:
    from gangway.contract.kueue import ConfigError
    with pytest.raises(ConfigError) as exc:
        _policy(**{field: bad})
    assert why in str(exc.value), str(exc.value)


def test_status_shows_the_idle_flags_in_force(story) -> None:
    from rich.console import Console

    from gangway.read.reports import status_tables
    sim, _ = story
    at = next(e.offset for e in sim.log if isinstance(e.data, ev.WorkloadIdle))
    state = books_of(sim.log[: at + 1]).state
    console = Console(width=200, record=True)
    for table in status_tables(state):
        console.print(table)
    text = console.export_text()
    assert "Idle GPUs (the contract's idle rule)" in text and "research/notebook" in text and "4 %" in text


def test_status_lists_every_configured_queue_even_one_nothing_was_ever_submitted_to() -> None:
    from rich.console import Console

    from gangway.contract import load_contract_file
    from gangway.read.reports import status_tables
    from gangway.sim import Simulation
    sim = Simulation()
    sim.configure(load_contract_file(Path(__file__).resolve().parents[1] / "gangway" / "demo" / "contract.yaml"))
    console = Console(width=200, record=True)
    console.print(status_tables(sim.state)[0])
    rows = [line.split("│")[1].strip() for line in console.export_text().splitlines() if line.startswith("│")]
    assert rows == ["batch", "research", "serving"]


def test_team_figures_set_cost_against_busy_time(story) -> None:
    from gangway.read.money import run_figures, team_figures
    _, books = story
    research = next(t for t in team_figures(books.charges) if t.team == "research")
    charges = [c for c in books.charges if c.team == "research"]
    assert research.allocated_gpu_milli_ms == sum(c.gpu_milli_ms for c in charges)
    assert research.busy_gpu_milli_ms == sum(c.busy_milli_ms for c in charges)
    assert research.list_cost_micros == sum(c.cost_micros() for c in charges)
    assert research.cost_per_busy_gpu_hour_micros == research.list_cost_micros * 3_600_000_000 // research.busy_gpu_milli_ms
    assert research.waste_micros == 8 * PRICE + 96 * 10_000
    assert research.useful_tokens == 1000 * 4 * 3600
    runs = run_figures(books.charges, books.state)
    assert runs[0].workload == "research/notebook" and runs[0].idle_flagged and runs[0].attempts == 2


def test_within_the_settle_time_past_a_periods_end_the_period_settling_is_the_one_that_ended():
    """The demo waits for the cut of the period the binder ticks for (``billing_deadline``): in the
    settle time past an hour's end, that is the hour that ended, not the one the clock is in."""
    from gangway.events.contract import Billing
    from gangway.events.money import settling_period
    from gangway.events.state import State
    hour_start = START_MS - START_MS % HOUR + HOUR
    contract = msgspec.structs.replace(night().state.contract, billing=Billing(period="hourly", settle_ms=60_000))
    ended = period_of("hourly", hour_start - 1)
    for time_ms, expected in ((hour_start + 59_999, ended), (hour_start - 1, ended),
                              (hour_start + 60_000, period_of("hourly", hour_start))):
        state = State(contract=contract, time_ms=time_ms)
        period, cut_at = settling_period(state)
        assert period == expected and cut_at == period_bounds(period)[1] + 60_000


def test_the_period_of_the_last_finish_is_the_one_the_demo_waits_for_even_once_it_is_cut():
    """Once the binder's tick for a period's cut is on the log, the clock stands exactly at the cut:
    the period settling is then the next hour, which nothing ticks on an idle cluster (the demo
    waited for it until its timeout). The period of the last finish stays the one cut."""
    from gangway.events.contract import Billing
    from gangway.events.money import last_finish_period, settling_period
    sim = night()
    contract = msgspec.structs.replace(sim.state.contract, billing=Billing(period="hourly", settle_ms=60_000))
    state = msgspec.structs.replace(sim.state, contract=contract)
    last = max(wl.finished_ms for wl in state.workloads.values() if wl.finished_ms is not None)
    period = period_of("hourly", last)
    cut = period_bounds(period)[1] + 60_000
    state.time_ms = cut  # the tick for the cut
    assert last_finish_period(state) == (period, cut)
    assert settling_period(state)[0] != period  # (what the demo waited for before)


def test_no_invoice_bills_below_zero_a_credit_beyond_it_is_carried_to_the_next():
    """Work billed in November and preempted early in December, all of it lost: December's credit
    (11 GPU-hours) is more than its usage (1). December bills 0 and carries the rest; a period
    without charges carries it on; January takes it off as far as January bills, and carries what
    is left again. Every invoice adds up: list − credits + idle + carried = billed."""
    from gangway.events.contract import Billing, Contract
    from gangway.services.accounting.policy import Interval
    contract = Contract(currency="EUR", billing=Billing(credit_preemption_waste=True))
    nov, dec = period_bounds("2026-11"), period_bounds("2026-12")
    jan, feb = period_bounds("2027-01"), period_bounds("2027-02")

    def charge(workload: str, start: int, end: int, lost_ms: int = 0, outcome: str = "finished") -> Interval:
        return Interval(workload=workload, attempt=0, team="t", cluster_queue="q", priority_class=None, start_ms=start,
                        end_ms=end, gpu_milli=1000, cpu_milli=0, outcome=outcome, offset=1, flavors={GPU: "f"},
                        resources={GPU: 1000}, prices={GPU: PRICE}, currency="EUR", work_lost_ms=lost_ms)
    evicted = charge("t/long", nov[1] - 10 * HOUR, dec[0] + HOUR, lost_ms=11 * HOUR, outcome="evicted")
    later = charge("t/next", jan[0], jan[0] + 4 * HOUR)
    carried: dict[str, int] = {}

    def cut(period: str) -> ev.InvoiceIssued | None:
        found = invoices([evicted, later], [], contract, period, "log", 0, carried=carried)
        for inv in found:
            assert inv.list_cost_micros - inv.credits_micros + inv.idle_cost_micros + inv.carried_micros == \
                inv.billed_cost_micros == sum(line.billed_cost_micros for line in inv.lines) >= 0
        return found[0] if found else None
    november = cut("2026-11")
    assert (november.billed_cost_micros, november.carried_micros) == (10 * PRICE, 0) and carried == {}
    december = cut("2026-12")
    assert (december.list_cost_micros, december.credits_micros) == (PRICE, 11 * PRICE)
    assert (december.billed_cost_micros, december.carried_micros) == (0, 10 * PRICE) and carried == {"t": 10 * PRICE}
    [line] = [line for line in december.lines if line.kind == "carried"]
    assert (line.billed_cost_micros, line.description) == (10 * PRICE, "credit carried to the next period")
    january = cut("2027-01")
    assert (january.list_cost_micros, january.carried_micros, january.billed_cost_micros) == (4 * PRICE, -4 * PRICE, 0)
    assert carried == {"t": 6 * PRICE}
    assert cut("2027-02") is None and carried == {"t": 6 * PRICE}  # (nothing to bill: carried on)
    assert feb[0] == jan[1]
    # A draft does not spend the credit it shows: the books' carry is passed as a copy (gangway invoice).
    draft = invoices([later], [], contract, "2027-01", "log", 0, carried=dict(carried))[0]
    assert draft.billed_cost_micros == 0 and carried == {"t": 6 * PRICE}


def test_the_invoice_table_shows_carried_credit_when_an_invoice_has_some():
    from rich.console import Console

    from gangway.read import money as read_money
    plain = ev.InvoiceIssued(invoice_id="inv-2026-12-t-0123456789abcdef", team="t", period="2026-12",
                             period_start_ms=0, period_end_ms=1, currency="EUR", lines=[], list_cost_micros=2_000_000,
                             credits_micros=22_000_000, idle_cost_micros=0, billed_cost_micros=0, log_id="l",
                             cut_offset=0, carried_micros=20_000_000)

    def shown(*issued) -> str:
        console = Console(width=120, record=True)
        console.print(read_money.invoices_table(list(issued)))
        return console.export_text()
    assert "carried" in shown(plain) and " 20.00 " in shown(plain)
    assert "carried" not in shown(msgspec.structs.replace(plain, carried_micros=0))


def test_gpu_figures_and_progress_are_said_in_words_on_the_log() -> None:
    """`gangway log` and the console's stream said only "GpuTelemetry" of most of a busy log's lines
    (a stranger's test); a job's progress is no line of its story (it would drown it)."""
    from gangway.read.describe import describe
    figures = ev.Envelope(id="g", source="gangway/submission", time_ms=0, data=ev.GpuTelemetry(
        node="n0", samples=[ev.GpuSample(gpu=0, sm_active=812), ev.GpuSample(gpu=1, sm_active=0)]))
    assert describe(figures) == "GPU figures of node n0, SM active by GPU: 0: 81.2 %, 1: 0 %"
    progress = ev.Envelope(id="p", source="gangway/submission", time_ms=0,
                           data=ev.WorkloadProgress(workload="research/train", step=9, tokens=12000))
    assert describe(progress) == "research/train progress: step 9, 12,000 tokens"
    assert describe(progress, about="research/train") == ""
