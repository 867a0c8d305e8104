"""The fold: what every event does to the state, and what it must not do.

Tables of cases with sentence names. Each builds a log of real envelopes with ``LogBuilder``,
applies one more event, and compares the exact outcome.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from builders import (
    REDELIVERY_FIELDS, START_MS, LogBuilder, cluster_queue, config_event, contract, fold, node, state_bytes, summary,
    workload,
)
from gangway.events import catalogue as ev
from gangway.events.fold import apply, copy_state, restored
from gangway.events.state import NO_RUNTIME
from gangway.events.reasons import C
from gangway.events.resources import GPU

CONTRACT = contract(
    cluster_queue("a").cohort("all").gpus(8, borrowing=4),
    cluster_queue("b").cohort("all").gpus(8),
    cluster_queue("solo").gpus(8),
).obj()


def base() -> LogBuilder:
    """Contract in force; two empty nodes of 8 GPUs."""
    return LogBuilder().configure(CONTRACT).nodes(node("n1").gpus(8), node("n2").gpus(8))


W4 = workload("w").queue("a").gpus(4)
GANG = workload("g").queue("a").pod_set("workers", count=2, gpus=6)
GANG_B = workload("g").queue("b").pod_set("workers", count=2, gpus=6)


def eviction(name: str = "w", preemptor: str = "p", grace_ms: int = 0) -> Callable[[LogBuilder], ev.EvictionOrdered]:
    """An eviction order decided on the log's newest state."""
    return lambda log: ev.EvictionOrdered(workload=name, preemptor=preemptor, based_on=log.offset, grace_ms=grace_ms)


def _admission_of(log: LogBuilder, name: str) -> ev.WorkloadAdmitted:
    return next(e.data for e in log.envelopes if isinstance(e.data, ev.WorkloadAdmitted) and e.data.workload == name)


# --- every event type's effect ------------------------------------------------------------------

Setup = Callable[[], LogBuilder]
MakeEvent = Callable[[LogBuilder], object]

EFFECTS: list[tuple[str, Setup, MakeEvent, dict]] = [
    ("a queued workload waits in its queue",
     base, lambda log: W4.obj(),
     {"phases": {"w": "pending"}, "pending": ["w"], "active": [], "usage_gpus": {}}),
    ("a workload queued again under a new id is kept once, as first queued",
     lambda: base().queue(W4), lambda log: workload("w").queue("b").gpus(8).obj(),
     {"phases": {"w": "pending"}, "pending": ["w"], "ignored": 1}),
    ("an admission within nominal quota takes the quota",
     lambda: base().queue(W4), lambda log: log.admission("w"),
     {"phases": {"w": "admitted"}, "pending": [], "active": ["w"], "usage_gpus": {"a": 4}, "decisions": 1}),
    ("an admission above nominal in a cohort records the borrow",
     lambda: base().queue(workload("w").queue("a").gpus(12)), lambda log: log.admission("w"),
     {"phases": {"w": "admitted"}, "active": ["w"], "usage_gpus": {"a": 12}, "decisions": 1}),
    ("a placement takes the gang's resources on its nodes",
     lambda: base().queue(GANG).admit("g"),
     lambda log: log.placement("g", [("workers", "n1", 1), ("workers", "n2", 1)]),
     {"phases": {"g": "placed"}, "free_gpus": {"n1": 2, "n2": 2}, "usage_gpus": {"a": 12}, "decisions": 2}),
    ("a bound report moves a placed workload to bound",
     lambda: base().queue(W4).admit("w").place("w"), lambda log: ev.WorkloadBound(workload="w", attempt=0),
     {"phases": {"w": "bound"}, "free_gpus": {"n1": 4, "n2": 8}}),
    ("a running report moves a bound workload to running",
     lambda: base().queue(W4).admit("w").place("w").add(ev.WorkloadBound(workload="w", attempt=0)),
     lambda log: ev.WorkloadRunning(workload="w", attempt=0),
     {"phases": {"w": "running"}, "free_gpus": {"n1": 4, "n2": 8}, "usage_gpus": {"a": 4}}),
    ("a finished report releases the nodes and the quota",
     lambda: base().running(W4), lambda log: ev.WorkloadFinished(workload="w", attempt=0),
     {"phases": {"w": "finished"}, "active": [], "pending": [], "usage_gpus": {}, "free_gpus": {"n1": 8, "n2": 8}}),
    ("a failed workload finishes too",
     lambda: base().running(W4), lambda log: ev.WorkloadFinished(workload="w", attempt=0, succeeded=False),
     {"phases": {"w": "finished"}, "active": [], "usage_gpus": {}, "free_gpus": {"n1": 8, "n2": 8}}),
    ("an eviction order starts the grace period of a running workload, which keeps what it holds",
     lambda: base().running(W4), eviction(grace_ms=5),
     {"phases": {"w": "evicting"}, "active": ["w"], "usage_gpus": {"a": 4}, "free_gpus": {"n1": 4, "n2": 8},
      "decisions": 3}),
    ("an eviction order requeues an admitted workload at once",
     lambda: base().queue(W4).admit("w"), eviction(grace_ms=5),
     {"phases": {"w": "pending"}, "pending": ["w"], "active": [], "usage_gpus": {}, "decisions": 2}),
    ("an eviction report requeues the workload and frees its quota and nodes",
     lambda: base().running(W4).order_eviction("w", "p"),
     lambda log: ev.WorkloadEvicted(workload="w", attempt=0, preemptor="p"),
     {"phases": {"w": "pending"}, "pending": ["w"], "active": [], "usage_gpus": {}, "free_gpus": {"n1": 8, "n2": 8}}),
    ("an unannounced eviction (a lost node, a kubectl drain) requeues a running workload",
     lambda: base().running(W4), lambda log: ev.WorkloadEvicted(workload="w", attempt=0, reason="drained"),
     {"phases": {"w": "pending"}, "pending": ["w"], "active": [], "usage_gpus": {}, "free_gpus": {"n1": 8, "n2": 8}}),
    ("a new node is all free",
     base, lambda log: node("n3").gpus(4).cpu(32).obj(),
     {"free_gpus": {"n1": 8, "n2": 8, "n3": 4}}),
    ("a node observed again with running work keeps its used resources",
     lambda: base().running(W4, on=[("main", "n1", 1)]), lambda log: node("n1").gpus(16).obj(),
     {"phases": {"w": "running"}, "free_gpus": {"n1": 12, "n2": 8}, "usage_gpus": {"a": 4}}),
    ("a node observed again with an evicting workload keeps its used resources",
     lambda: base().running(W4, on=[("main", "n1", 1)]).order_eviction("w", "p"), lambda log: node("n1").gpus(8).obj(),
     {"phases": {"w": "evicting"}, "free_gpus": {"n1": 4, "n2": 8}}),
    ("a removed node requeues the gang on it and frees its quota and its other nodes",
     lambda: base().queue(GANG).admit("g").place("g", [("workers", "n1", 1), ("workers", "n2", 1)]).bind("g"),
     lambda log: ev.NodeRemoved(node="n1"),
     {"phases": {"g": "pending"}, "pending": ["g"], "active": [], "usage_gpus": {}, "free_gpus": {"n2": 8}}),
    ("a removed node leaves the workloads on other nodes alone",
     lambda: base().running(W4, on=[("main", "n2", 1)]), lambda log: ev.NodeRemoved(node="n1"),
     {"phases": {"w": "running"}, "active": ["w"], "usage_gpus": {"a": 4}, "free_gpus": {"n2": 4}}),
    ("a removed node leaves admitted, unplaced workloads admitted",
     lambda: base().queue(W4).admit("w"), lambda log: ev.NodeRemoved(node="n1"),
     {"phases": {"w": "admitted"}, "active": ["w"], "usage_gpus": {"a": 4}, "free_gpus": {"n2": 8}}),
    ("removing an unknown node is ignored",
     base, lambda log: ev.NodeRemoved(node="n9"),
     {"free_gpus": {"n1": 8, "n2": 8}, "ignored": 1}),
    ("a job rejection on the log changes no workload",
     base, lambda log: ev.JobRejected(job_id="j", reason="bad_quantity", message="no", original=b"x"),
     {"phases": {}, "pending": [], "ignored": 0}),
]


@pytest.mark.parametrize(("setup", "make", "expected"), [c[1:] for c in EFFECTS], ids=[c[0] for c in EFFECTS])
def test_event_effect(setup: Setup, make: MakeEvent, expected: dict):
    log = setup()
    before = summary(log.state)
    log.add(make(log))
    after = summary(log.state)
    assert {k: after[k] for k in expected} == {k: expected[k] for k in expected}
    for counter in ("decisions", "superseded", "ignored"):
        if counter not in expected:
            is_decision = isinstance(log.envelopes[-1].data, ev.DECISION_TYPES)
            wanted = before[counter] + (1 if counter == "decisions" and is_decision else 0)
            assert after[counter] == wanted, counter
    assert log.state.offset == log.offset and log.state.last_id == log.envelopes[-1].id


def test_queued_workload_records_its_queue_position_and_time():
    log = base().queue(W4)
    wl = log.state.workloads["w"]
    assert (wl.seq, wl.queued_ms, wl.attempt) == (log.offset, log.envelopes[-1].time_ms, 0)


def test_admission_is_kept_on_the_workload_with_its_borrowing():
    log = base().queue(workload("w").queue("a").gpus(12)).admit("w")
    admitted_at = log.envelopes[-1]
    wl = log.state.workloads["w"]
    assert wl.admission == admitted_at.data
    assert (wl.admission_id, wl.admitted_ms) == (admitted_at.id, admitted_at.time_ms)
    assert wl.admission.borrowed == {GPU: 4000}


def test_an_admission_that_borrows_less_by_the_time_it_is_folded_holds():
    """Work of the queue ended between the decision and its fold: it borrows less than it said."""
    log = base().running(workload("x").queue("a").gpus(4)).queue(workload("w").queue("a").gpus(8))
    decision = log.admission("w")
    assert decision.borrowed == {GPU: 4000}
    log.finish("x").add(decision)
    assert log.phase("w") == "admitted" and log.state.workloads["w"].superseded is None


def test_an_admission_that_lands_after_its_queue_was_stopped_is_superseded():
    """Decided before a contract stopped the queue (stopPolicy), folded after it: the log says the
    stop first, so nothing new is admitted from the queue."""
    log = base().queue(W4)
    decision = log.admission("w")
    stopped = msgspec.structs.replace(CONTRACT, cluster_queues=[
        msgspec.structs.replace(cq, stop_policy="Hold") if cq.name == "a" else cq for cq in CONTRACT.cluster_queues])
    log.configure(stopped).add(decision)
    wl = log.state.workloads["w"]
    assert log.phase("w") == "pending" and wl.superseded_code == C.QUEUE_STOPPED
    assert wl.superseded.endswith(": ClusterQueue a is stopped (stopPolicy Hold): it admits nothing until its stopPolicy is None again")


def test_running_records_its_start_time():
    log = base().queue(W4).admit("w").place("w").bind("w")
    assert log.state.workloads["w"].started_ms == log.envelopes[-1].time_ms


def test_eviction_requeues_with_the_next_attempt_at_the_back_of_the_queue():
    log = base().running(W4).order_eviction("w", "p").evicted("w")
    wl = log.state.workloads["w"]
    assert (wl.attempt, wl.seq, wl.queued_ms) == (1, log.offset, log.envelopes[-1].time_ms)
    assert (wl.admission, wl.placement, wl.eviction, wl.started_ms) == (None, None, None, None)


def test_config_applied_puts_the_contract_in_force():
    log = LogBuilder()
    event = config_event(CONTRACT)
    log.add(event)
    assert (log.state.contract, log.state.contract_digest) == (CONTRACT, event.digest)


def test_cluster_time_never_goes_back():
    log = base()
    newest = log.state.time_ms
    log.add(W4.obj(), at_ms=newest - 60_000)
    assert log.state.time_ms == newest


# --- a decision that no longer holds is superseded and changes nothing else ----------------------

STALE: list[tuple[str, Setup, MakeEvent, str]] = [
    ("an admission over nominal quota of a queue without cohort",
     lambda: base().queue(workload("w").queue("solo").gpus(4)).running(workload("x").queue("solo").gpus(6)),
     lambda log: log.admission("w"), "over nominal quota 8 of solo"),
    ("an admission beyond the borrowing limit",
     lambda: base().queue(workload("w").queue("a").gpus(4)).running(workload("x").queue("a").pod_set(count=2, gpus=5)),
     lambda log: msgspec.structs.replace(log.admission("w"), borrowed={GPU: 4000}), "borrowing limit 4 of a"),
    ("an admission when the cohort has nothing left to lend",
     lambda: base().queue(workload("w").queue("a").gpus(2)).running(
         workload("x").queue("a").gpus(8), workload("y").queue("b").gpus(8)),
     lambda log: msgspec.structs.replace(log.admission("w"), borrowed={GPU: 2000}), "a needs to borrow 2 beyond its own free quota, and cohort all has 0 left to lend it"),
    ("an admission of a workload already admitted",
     lambda: base().queue(W4).admit("w"), lambda log: log.admission("w"), "workload is admitted, not pending"),
    ("an admission of a workload that finished",
     lambda: base().running(W4).finish("w"),
     lambda log: msgspec.structs.replace(_admission_of(log, "w"), based_on=log.offset), "workload is finished"),
    ("an admission of an unknown workload",
     base,
     lambda log: ev.WorkloadAdmitted(workload="ghost", cluster_queue="a", usage={GPU: 1000}, borrowed={}, based_on=2),
     "unknown workload"),
    ("an admission to another ClusterQueue than the workload's",
     lambda: base().queue(W4), lambda log: msgspec.structs.replace(log.admission("w"), cluster_queue="b"),
     "workload belongs to a"),
    ("an admission whose usage differs from the request",
     lambda: base().queue(W4), lambda log: msgspec.structs.replace(log.admission("w"), usage={GPU: 1000}),
     "usage differs"),
    ("an admission whose borrowing differs from the quota in force",
     lambda: base().queue(workload("w").queue("a").gpus(12)),
     lambda log: msgspec.structs.replace(log.admission("w"), borrowed={}), "borrowing differs"),
    ("an admission before any contract is in force",
     lambda: LogBuilder().queue(W4),
     lambda log: ev.WorkloadAdmitted(workload="w", cluster_queue="a", usage={GPU: 4000}, borrowed={}, based_on=0),
     "no contract has been applied"),
    ("a placement on a node now full",
     lambda: base().queue(W4).admit("w").running(workload("x").queue("b").gpus(6), on=[("main", "n1", 1)]),
     lambda log: log.placement("w", [("main", "n1", 1)]), "1 pod(s) of main no longer fit on n1"),
    ("a placement on a node that is gone",
     lambda: base().queue(W4).admit("w").add(ev.NodeRemoved(node="n1")),
     lambda log: log.placement("w", [("main", "n1", 1)]), "node n1 is gone"),
    ("a placement of part of a gang",
     lambda: base().queue(GANG).admit("g"),
     lambda log: log.placement("g", [("workers", "n1", 1)]), "pod set workers: 1 of 2 pods placed"),
    ("a placement putting two pods of a gang on a node with room for one",
     lambda: base().queue(GANG).admit("g"),
     lambda log: log.placement("g", [("workers", "n1", 1), ("workers", "n1", 1)]), "no longer fit on n1"),
    ("a placement naming a pod set the workload does not have",
     lambda: base().queue(W4).admit("w"),
     lambda log: log.placement("w", [("main", "n1", 1), ("other", "n2", 1)]), "no pod set other"),
    ("a placement of an empty assignment",
     lambda: base().queue(W4).admit("w"),
     lambda log: log.placement("w", [("main", "n1", 1), ("main", "n2", 0)]), "empty assignment"),
    ("a placement of a workload not admitted",
     lambda: base().queue(W4), lambda log: log.placement("w", [("main", "n1", 1)]),
     "workload is pending, not admitted"),
    ("a placement of a workload already placed",
     lambda: base().queue(W4).admit("w").place("w", [("main", "n1", 1)]),
     lambda log: log.placement("w", [("main", "n2", 1)]), "workload is placed, not admitted"),
    ("an admission decided before the workload re-entered its queue",
     lambda: base().running(W4).evicted("w"),
     lambda log: msgspec.structs.replace(log.admission("w"), based_on=log.offset - 1),
     "before the workload (re)entered its queue"),
    ("a placement decided before the admission in force",
     lambda: base().queue(W4).admit("w").order_eviction("w", "p").admit("w"),
     lambda log: msgspec.structs.replace(log.placement("w"), based_on=log.offset - 1),
     "before the admission in force"),
    ("an eviction decided before the admission in force",
     lambda: base().queue(W4).admit("w").order_eviction("w", "p").admit("w"),
     lambda log: ev.EvictionOrdered(workload="w", preemptor="q", based_on=log.offset - 1, grace_ms=0),
     "before the admission in force"),
    ("an eviction of a finished workload",
     lambda: base().running(W4).finish("w"),
     eviction(), "workload is finished"),
    ("an eviction of a pending workload",
     lambda: base().queue(W4),
     eviction(), "workload is pending"),
    ("an eviction of a workload already being evicted",
     lambda: base().running(W4).order_eviction("w", "p"),
     eviction(preemptor="q"), "workload is evicting"),
    ("an eviction of an unknown workload",
     base, eviction("ghost"), "workload is unknown"),
]


@pytest.mark.parametrize(("setup", "make", "why"), [c[1:] for c in STALE], ids=[c[0] for c in STALE])
def test_stale_decision_is_superseded_and_changes_nothing_else(setup: Setup, make: MakeEvent, why: str):
    log = setup()
    before = copy_state(log.state)
    decision = make(log)
    log.add(decision, event_id="stale-decision")
    after = log.state
    assert after.superseded == before.superseded + 1
    assert after.decisions == before.decisions
    target = after.workloads.get(decision.workload)
    if target is not None:
        assert target.superseded.startswith("admission stale-decision: ") or target.superseded.startswith(
            ("placement stale-decision: ", "eviction stale-decision: "))
        assert why in target.superseded, target.superseded
        assert target.decided[-1] == "stale-decision", "the fold remembers the id: a copy is ignored"
        assert target.superseded_code is not None
        target.superseded = before.workloads[decision.workload].superseded
        target.superseded_code = before.workloads[decision.workload].superseded_code
        target.decided = before.workloads[decision.workload].decided
    fields = REDELIVERY_FIELDS + ("superseded", "time_ms")
    assert state_bytes(after, fields) == state_bytes(before, fields)


def test_a_decision_that_holds_clears_the_note_of_an_earlier_superseded_one():
    log = base().queue(workload("w").queue("a").gpus(12))
    log.add(msgspec.structs.replace(log.admission("w"), borrowed={}))
    assert log.state.workloads["w"].superseded
    log.admit("w")
    assert log.state.workloads["w"].superseded is None


def assert_unchanged(after, before) -> None:
    """Nothing but the fold's position and its count of ignored events moved (readable diff first)."""
    readable = lambda s: {k: v for k, v in summary(s).items() if k != "ignored"}  # noqa: E731
    assert readable(after) == readable(before)
    assert state_bytes(after, REDELIVERY_FIELDS) == state_bytes(before, REDELIVERY_FIELDS)


# --- re-delivered events change nothing ---------------------------------------------------------


def scenario() -> LogBuilder:
    """Every event type, in a plausible order (offsets noted for the redelivery table)."""
    return (base()
            .add(ev.JobSubmitted(job_id="j", namespace="ns", queue="a",
                                 pod_sets=[ev.PodSetRequest(name="main", count=1, resources={GPU: 4})]))
            .queue(W4, GANG_B)
            .add(ev.WorkloadMoved(workload="g", from_queue="b", queue="a", cluster_queue="a", reason="label changed"))
            .admit("w").place("w", [("main", "n1", 1)])
            .add(ev.WorkloadBound(workload="w", attempt=0)).add(ev.WorkloadRunning(workload="w", attempt=0))
            .add(ev.GpuTelemetry(node="n1", samples=[ev.GpuSample(gpu=0, sm_active=50, gpu_util=7)]))
            .add(ev.WorkloadProgress(workload="w", step=90, tokens=9000))
            .add(ev.CheckpointSaved(workload="w", step=100)).add(ev.ClockTicked(reason="minimum runtime"))
            .add(ev.WorkloadIdle(workload="w", attempt=0, based_on=6, rule="SM active below 10 % for 30 min",
                                 sm_active=50, since_ms=0, gpu_milli=4000))
            .admit("g")
            .order_eviction("w", "g").evicted("w")
            .place("g", [("workers", "n1", 1), ("workers", "n2", 1)]).bind("g")
            .add(ev.JobRejected(job_id="k", reason="bad_quantity", message="no", original=b"x"))
            .nodes(node("n3").gpus(8))
            .admit("w").place("w", [("main", "n3", 1)]).bind("w")
            .add(ev.JobWithdrawn(job_id="w", namespace="ns", reason="not needed"))
            .add(ev.JobMoved(job_id="w", namespace="ns", queue="spare"))
            .add(ev.PriorityClassObserved(name="team-high", value=500))
            .add(ev.WithdrawalRequested(workload="w", reason="withdrawn by its producer: not needed"))
            .finish("g").add(ev.WorkloadWithdrawn(workload="w", reason="Job deleted")).add(ev.NodeRemoved(node="n3"))
            .add(ev.ClusterReconciled(kind="Job", namespace="ns", name="w", uid="u", reason="resumed",
                                      reason_code=C.RESUMED_WITHOUT_PLACEMENT, workload="w"))
            .add(ev.InvoiceIssued(invoice_id="i", team="ns", period="2026-11", period_start_ms=0, period_end_ms=1,
                                  currency="EUR", lines=[], list_cost_micros=0, credits_micros=0, idle_cost_micros=0,
                                  billed_cost_micros=0, log_id="l", cut_offset=0)))


SCENARIO = scenario()


@pytest.mark.parametrize("offset", range(len(SCENARIO.envelopes)),
                         ids=[f"{i}-{type(e.data).__name__}" for i, e in enumerate(SCENARIO.envelopes)])
def test_redelivered_event_changes_nothing(offset: int):
    log = LogBuilder()
    for env in SCENARIO.envelopes[: offset + 1]:
        log.append(env)
    before = copy_state(log.state)
    log.redeliver(offset)
    assert_unchanged(log.state, before)


def test_scenario_covers_every_event_type():
    assert {type(e.data) for e in SCENARIO.envelopes} == set(ev.EVENT_TYPES)


REDELIVERY_BUGS: list[tuple[str, Callable[[], tuple[LogBuilder, int]]]] = [
    ("an admission re-delivered after its workload was evicted and requeued",
     lambda: _late(lambda log: log.queue(W4).admit("w"),
                   lambda log: log.place("w").bind("w").order_eviction("w", "p").evicted("w"))),
    ("a placement re-delivered after its workload was requeued and admitted again",
     lambda: _late(lambda log: log.queue(W4).admit("w").place("w"),
                   lambda log: log.bind("w").order_eviction("w", "p").evicted("w").admit("w"))),
    ("an eviction order re-delivered after its workload was admitted and started again",
     lambda: _late(lambda log: log.running(W4).order_eviction("w", "p"),
                   lambda log: log.evicted("w").admit("w").place("w").bind("w"))),
    ("an eviction order re-delivered at once after it requeued an admitted workload",
     lambda: _late(lambda log: log.queue(W4).admit("w").order_eviction("w", "p"), lambda log: log)),
    ("a superseded admission re-delivered at once",
     lambda: _superseded_then(lambda log: log)),
    ("a superseded admission re-delivered after the quota it lacked was freed",
     lambda: _superseded_then(lambda log: log.finish("x"))),
]


def _superseded_then(then: Callable[[LogBuilder], LogBuilder]) -> tuple[LogBuilder, int]:
    """An admission of w lands when x holds the queue's whole quota, and is superseded."""
    log = base().running(workload("x").queue("solo").gpus(8)).queue(workload("w").queue("solo").gpus(4))
    log.admit("w")
    assert log.state.workloads["w"].superseded
    offset = log.offset
    return then(log), offset


def _late(first: Callable[[LogBuilder], LogBuilder],
          then: Callable[[LogBuilder], LogBuilder]) -> tuple[LogBuilder, int]:
    log = first(base())
    offset = log.offset
    return then(log), offset


@pytest.mark.parametrize("make", [c[1] for c in REDELIVERY_BUGS], ids=[c[0] for c in REDELIVERY_BUGS])
def test_decision_redelivered_changes_nothing(make):
    log, offset = make()
    before = copy_state(log.state)
    log.redeliver(offset)
    assert_unchanged(log.state, before)


# --- stale binder reports are ignored -----------------------------------------------------------

REPORTS: list[tuple[str, Setup, object]] = [
    ("bound about an earlier attempt", lambda: base().running(W4).evicted("w").admit("w").place("w"),
     ev.WorkloadBound(workload="w", attempt=0)),
    ("running about an earlier attempt", lambda: base().running(W4).evicted("w").admit("w").place("w")
     .add(ev.WorkloadBound(workload="w", attempt=1)), ev.WorkloadRunning(workload="w", attempt=0)),
    ("finished about an earlier attempt", lambda: base().running(W4).evicted("w").admit("w").place("w").bind("w"),
     ev.WorkloadFinished(workload="w", attempt=0)),
    ("evicted about an earlier attempt", lambda: base().running(W4).evicted("w").admit("w").place("w").bind("w"),
     ev.WorkloadEvicted(workload="w", attempt=0)),
    ("finished about a later attempt", lambda: base().running(W4), ev.WorkloadFinished(workload="w", attempt=1)),
    ("bound about a running workload", lambda: base().running(W4), ev.WorkloadBound(workload="w", attempt=0)),
    ("running about a placed workload not yet bound", lambda: base().queue(W4).admit("w").place("w"),
     ev.WorkloadRunning(workload="w", attempt=0)),
    ("finished about an admitted workload never placed", lambda: base().queue(W4).admit("w"),
     ev.WorkloadFinished(workload="w", attempt=0)),
    ("evicted about an admitted workload never placed", lambda: base().queue(W4).admit("w"),
     ev.WorkloadEvicted(workload="w", attempt=0)),
    ("evicted about a finished workload", lambda: base().running(W4).finish("w"),
     ev.WorkloadEvicted(workload="w", attempt=0)),
    ("finished about a pending workload", lambda: base().queue(W4), ev.WorkloadFinished(workload="w", attempt=0)),
    ("bound about an unknown workload", base, ev.WorkloadBound(workload="ghost", attempt=0)),
]


@pytest.mark.parametrize(("setup", "report"), [c[1:] for c in REPORTS], ids=[c[0] for c in REPORTS])
def test_stale_binder_report_is_ignored(setup: Setup, report):
    log = setup()
    before = copy_state(log.state)
    log.add(report, at_ms=log.now_ms)
    assert log.state.ignored == before.ignored + 1
    assert_unchanged(log.state, before)


def test_fold_helper_gives_events_offsets_ids_and_times():
    state = fold([config_event(CONTRACT), node("n1").gpus(8).obj(), ("queued/w", W4.obj())])
    assert (state.offset, state.last_id, state.time_ms) == (2, "queued/w", START_MS + 3000)
    assert (state.workloads["w"].seq, list(state.pending)) == (2, ["w"])


def test_apply_returns_the_state_it_updated():
    state = base().state
    env = ev.Envelope(id="x", source="t", time_ms=0, data=W4.obj(), offset=state.offset + 1)
    assert apply(state, env) is state


def test_a_state_restored_from_a_snapshot_gets_its_shapes_and_pending_counts_computed_again():
    """A snapshot written by an older version keeps that version's shapes (before, a topology request was
    not part of one): ``restored`` computes them and the counts by shape again, as a fold from the log's
    start has them."""
    required = ev.TopologyRequest(required="example.com/rack")
    log = base().queue(workload("a").queue("a").pod_set(count=2, gpus=4, topology=required).obj()) \
        .queue(workload("b").queue("a").pod_set(count=2, gpus=4).obj())
    fresh = log.state
    old = copy_state(fresh)
    for wl in old.workloads.values():  # what the older version wrote: both of one shape
        wl.shape = wl.shape.split("^")[0]
    old.pending_shapes = {old.workloads["a"].shape: 2}
    old.pending_runtimes = {old.workloads["a"].shape: {NO_RUNTIME: 2}}
    back = restored(msgspec.msgpack.decode(msgspec.msgpack.encode(old), type=type(old)))
    assert back.workloads["a"].shape != back.workloads["b"].shape
    assert state_bytes(back) == state_bytes(fresh)


# --- which checkpoints count -----------------------------------------------------------------------


def test_a_checkpoint_counts_only_for_the_running_attempt_with_a_step_that_does_not_go_backwards():
    """A checkpoint saves the attempt's work (preemption's and the invoice's loss) only while the
    workload runs, and only with a step of zero or more that is not below the last one that counted:
    one for a pending workload, a negative step or a step going backwards is ignored."""
    log = base().queue(W4)
    log.add(ev.CheckpointSaved(workload="w", step=99_999_999))  # pending: it saved nothing
    assert log.state.workloads["w"].checkpoint_ms is None
    log.admit("w").place("w", [("main", "n1", 1)]).bind("w")
    started = log.state.workloads["w"].started_ms
    assert log.state.workloads["w"].checkpoint_ms is None  # (the pending one did not carry over)
    log.add(ev.CheckpointSaved(workload="w", step=-5))
    assert log.state.workloads["w"].checkpoint_ms is None
    log.add(ev.CheckpointSaved(workload="w", step=1200))
    counted = log.state.workloads["w"].checkpoint_ms
    assert counted is not None and counted > started and log.state.workloads["w"].checkpoint_step == 1200
    ignored = log.state.ignored
    log.add(ev.CheckpointSaved(workload="w", step=1100))  # backwards: not later work saved
    assert (log.state.workloads["w"].checkpoint_ms, log.state.ignored) == (counted, ignored + 1)
    log.add(ev.CheckpointSaved(workload="w", step=1200))  # the same step again counts (a later save of it)
    assert log.state.workloads["w"].checkpoint_ms > counted
    log.order_eviction("w", "p").evicted("w").admit("w").place("w", [("main", "n2", 1)]).bind("w")
    assert (log.state.workloads["w"].checkpoint_ms, log.state.workloads["w"].checkpoint_step) == (None, None)
    log.add(ev.CheckpointSaved(workload="w", step=10))  # a new attempt starts its steps again
    assert log.state.workloads["w"].checkpoint_step == 10


# --- a producer takes its job back ----------------------------------------------------------------


def withdrawal(name: str = "w") -> ev.WithdrawalRequested:
    return ev.WithdrawalRequested(workload=name, reason="withdrawn by its producer (ci): not needed")


def test_a_waiting_job_withdrawn_leaves_its_queue_at_once():
    log = base().queue(W4, GANG_B).add(withdrawal())
    wl = log.state.workloads["w"]
    assert (wl.phase, wl.withdrawn, wl.finished_ms) == ("finished", withdrawal().reason, log.envelopes[-1].time_ms)
    assert list(log.state.pending) == ["g"] and summary(log.state)["usage_gpus"] == {}


def test_a_running_job_withdrawn_holds_its_gpus_until_the_binder_says_its_pods_are_gone():
    log = base().running(W4).add(withdrawal())
    wl = log.state.workloads["w"]
    assert (wl.phase, wl.withdrawing, wl.withdrawn) == ("running", withdrawal().reason, None)
    assert summary(log.state)["free_gpus"]["n1"] == 4
    log.add(ev.WorkloadWithdrawn(workload="w", reason=wl.withdrawing))
    assert (wl.phase, wl.withdrawn) == ("finished", withdrawal().reason)
    assert summary(log.state)["free_gpus"] == {"n1": 8, "n2": 8} and summary(log.state)["usage_gpus"] == {}


def test_a_job_withdrawn_while_it_is_evicted_is_not_queued_again():
    log = base().running(W4).order_eviction("w", "p").add(withdrawal()).evicted("w")
    wl = log.state.workloads["w"]
    assert (wl.phase, wl.withdrawn, wl.attempt) == ("finished", withdrawal().reason, 0)
    assert not log.state.pending and summary(log.state)["free_gpus"] == {"n1": 8, "n2": 8}


def test_a_withdrawal_of_a_finished_job_or_a_second_one_changes_nothing():
    log = base().running(W4).add(withdrawal())
    ignored = log.state.ignored
    log.add(withdrawal())
    assert log.state.ignored == ignored + 1 and log.state.workloads["w"].phase == "running"
    log.add(ev.WorkloadWithdrawn(workload="w")).add(withdrawal())
    assert log.state.ignored == ignored + 2


# --- a waiting workload moves to another LocalQueue -------------------------------------------------

MOVES = contract(
    cluster_queue("a").cohort("all").gpus(8, borrowing=4),
    cluster_queue("b").cohort("all").gpus(8),
).local_queue("a2", "a").obj()


def moved(name: str = "g", queue: str = "a", cq: str = "a", was: str = "b") -> ev.WorkloadMoved:
    return ev.WorkloadMoved(workload=name, from_queue=was, queue=queue, cluster_queue=cq, reason="label changed",
                            submission="gangway.submissions/0/9")


def test_a_waiting_workload_moved_waits_in_the_new_queue_in_the_place_its_priority_and_age_give_it():
    older = workload("g").queue("b").priority(5).pod_set("workers", count=2, gpus=6)
    log = (LogBuilder().configure(MOVES).nodes(node("n1").gpus(8))
           .queue(older, workload("x").queue("a").priority(5).gpus(4), workload("y").queue("a").priority(9).gpus(4)))
    log.add(moved())
    g = log.state.workloads["g"]
    assert (g.spec.queue, g.spec.cluster_queue, g.moved_by, g.phase) == ("a", "a", "gangway.submissions/0/9", "pending")
    assert [key[-1] for key in log.state.pending_order["a"]] == ["y", "g", "x"]  # (priority, then queued first)
    assert log.state.pending_order["b"] == []
    log.add(moved(queue="a2", was="a"))  # another LocalQueue of the same ClusterQueue
    assert (g.spec.queue, g.spec.cluster_queue) == ("a2", "a") and len(log.state.pending_order["a"]) == 3


@pytest.mark.parametrize(("setup", "code"), [
    (lambda: LogBuilder().configure(MOVES).nodes(node("n1").gpus(8)).queue(workload("g").queue("b").gpus(4)).admit("g"),
     C.WORKLOAD_MOVED_ON),
    (lambda: LogBuilder().configure(MOVES).queue(workload("g").queue("b").gpus(4)).configure(
        contract(cluster_queue("b").gpus(8)).obj()), C.LOCAL_QUEUE_GONE),
], ids=["admitted: it keeps its queue", "the LocalQueue left the contract"])
def test_a_move_that_no_longer_holds_is_superseded_and_changes_nothing_else(setup, code):
    log = setup()
    before = summary(log.state)
    queue = log.state.workloads["g"].spec.queue
    log.add(moved())
    assert log.state.workloads["g"].superseded_code == code and log.state.workloads["g"].spec.queue == queue
    assert summary(log.state) == {**before, "superseded": before["superseded"] + 1}
