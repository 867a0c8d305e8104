"""Preemption rules beyond Kueue's basic ones: borrowWithinCohort, checkpoints, minimum runtime, ticks.

And the incident story of issue 3, in the pure core (the real-services version is in
tests/integration/test_stories_on_the_stack.py).
"""

from __future__ import annotations

import pytest

from builders import LogBuilder, cluster_queue, contract, decide_pure, node, workload
from gangway.events.reasons import ReasonCode
from gangway.events import catalogue as ev
from gangway.services.binder.policy import due_reports, next_due_ms, rule_deadlines
from gangway.services.admission.victims import work_lost_ms
from gangway.services.preemption.policy import decide_preemption
from gangway.services.submission.telemetry import decide_telemetry
from gangway.sim import Simulation


def wl(name: str, queue: str, gpus: float, priority: int = 0, pods: int = 1, pc: str | None = None):
    return workload(name).queue(queue).priority(priority, pc).pod_set("main", count=pods, gpus=gpus).obj()


def victims(log: LogBuilder) -> list[str]:
    return sorted(o.workload for o in decide_pure(decide_preemption, log.state))


# --- borrowWithinCohort ---------------------------------------------------------------------------


def borrowing_cohort(max_priority: int | None = None) -> LogBuilder:
    """a (4 nominal, may preempt while borrowing), b (4) and an idle c (8) share cohort "all" (16 GPUs
    of quota, 24 on nodes); b holds 12: b0 and b1 (4 GPUs each) and mid (2) at priority 5, low (2) at 0."""
    a = cluster_queue("a").cohort("all").gpus(4).borrow_within_cohort("LowerPriority", max_priority)
    log = LogBuilder().configure(contract(a, cluster_queue("b").cohort("all").gpus(4),
                                          cluster_queue("c").cohort("all").gpus(8)))
    log.nodes(node("n1").gpus(8), node("n2").gpus(8), node("n3").gpus(8))
    return log.running(wl("b0", "b", 4, priority=5), wl("b1", "b", 4, priority=5),
                       wl("low", "b", 2, priority=0), wl("mid", "b", 2, priority=5))


def test_borrow_within_cohort_preempts_lower_priority_work_of_a_borrowing_queue():
    log = borrowing_cohort().queue(wl("p", "a", 6, priority=10))  # 2 above a's nominal: it must borrow
    orders = decide_pure(decide_preemption, log.state)
    assert [o.workload for o in orders] == ["low"]  # 4 are free; the lowest priority makes the 2 more
    assert orders[0].reason_code == ReasonCode.BORROW_WITHIN_COHORT
    assert orders[0].reason.startswith("borrowWithinCohort LowerPriority")


def test_borrow_within_cohort_spares_priorities_above_the_threshold():
    log = borrowing_cohort(max_priority=-1).queue(wl("p", "a", 6, priority=10))
    assert victims(log) == []


def test_without_borrow_within_cohort_a_borrowing_preemptor_waits():
    log = LogBuilder().configure(contract(cluster_queue("a").cohort("all").gpus(4).preemption(reclaim="Any"),
                                          cluster_queue("b").cohort("all").gpus(4), cluster_queue("c").cohort("all").gpus(8)))
    log.nodes(node("n1").gpus(8), node("n2").gpus(8), node("n3").gpus(8))
    log.running(wl("b0", "b", 4), wl("b1", "b", 4), wl("low", "b", 2), wl("mid", "b", 2))
    log.queue(wl("p", "a", 6, priority=10))
    assert victims(log) == []


def test_a_queue_below_nominal_reclaims_what_it_lent_and_evicts_its_own_lower_priority_work_together():
    """Kueue's getTargets: a (8 nominal) uses 4 (alo, priority 1), b (8) uses 12 (b1 8 at priority 50,
    b2 4 at 10), borrowing 4; x (8, priority 100) fits a's nominal once b2 goes back and alo leaves.
    With a's usage plus x over the nominal, reclaiming was not tried (borrowWithinCohort is Never)."""
    log = LogBuilder().configure(contract(
        cluster_queue("a").cohort("org").gpus(8).preemption(reclaim="Any", within="LowerPriority"),
        cluster_queue("b").cohort("org").gpus(8).preemption(reclaim="Any", within="LowerPriority")))
    log.nodes(node("n0").gpus(8), node("n1").gpus(8))
    log.running(wl("b1", "b", 8, priority=50), wl("b2", "b", 4, priority=10), wl("alo", "a", 4, priority=1))
    orders = decide_pure(decide_preemption, log.queue(wl("x", "a", 8, priority=100)).state)
    assert sorted((o.workload, o.reason_code) for o in orders) == [
        ("alo", ReasonCode.WITHIN_QUEUE_LOWER_PRIORITY), ("b2", ReasonCode.RECLAIM_WITHIN_COHORT)]


def test_reclaiming_stops_at_the_nominal_quota_a_preemptor_that_must_borrow_waits():
    """a uses 4 of its 8 and x asks 10: reclaiming b's loan cannot make x fit a's nominal, and a may
    not preempt to borrow (borrowWithinCohort Never): nobody is ordered out."""
    log = LogBuilder().configure(contract(
        cluster_queue("a").cohort("org").gpus(8).preemption(reclaim="Any", within="LowerPriority"),
        cluster_queue("b").cohort("org").gpus(8)))
    log.nodes(node("n0").gpus(8), node("n1").gpus(8))
    log.running(wl("b1", "b", 8, priority=50), wl("b2", "b", 4, priority=10), wl("alo", "a", 4, priority=1))
    assert victims(log.queue(wl("x", "a", 5, priority=100, pods=2))) == []


def test_a_queue_reclaims_from_outside_the_lowest_cohort_whose_own_quota_holds_it():
    """Cohort left (4 GPUs of its own) holds a (4): x (8) fits left's subtree, not a's nominal, so
    b of cohort right (no quota) gives back what it borrowed — Kueue's hierarchical reclaim."""
    log = LogBuilder().configure(contract(
        cluster_queue("a").cohort("left").gpus(4).preemption(reclaim="Any"),
        cluster_queue("b").cohort("right").gpus(0).preemption(reclaim="Any"))
        .cohort("root").cohort("left", parent="root", gpus=4).cohort("right", parent="root"))
    log.nodes(node("n0").gpus(8))
    log.running(wl("b1", "b", 8, priority=50))
    orders = decide_pure(decide_preemption, log.queue(wl("x", "a", 8)).state)
    assert [(o.workload, o.reason_code) for o in orders] == [("b1", ReasonCode.RECLAIM_WITHIN_COHORT)]
    # what left's own quota cannot hold is borrowing: not reclaimed (borrowWithinCohort is Never)
    assert victims(LogBuilder().configure(contract(
        cluster_queue("a").cohort("left").gpus(4).preemption(reclaim="Any"),
        cluster_queue("b").cohort("right").gpus(8).preemption(reclaim="Any"))
        .cohort("root").cohort("left", parent="root", gpus=2).cohort("right", parent="root"))
        .nodes(node("n0").gpus(8), node("n1").gpus(8)).running(wl("b1", "b", 8, priority=50), wl("b2", "b", 8))
        .queue(wl("x", "a", 8))) == []


# --- checkpoints and minimum runtime ---------------------------------------------------------------


def checkpointed_queue(checkpoint_aware: bool = True, min_runtime_ms: int | None = None) -> LogBuilder:
    """Queue q (8 GPUs): "old" started first, "new" 100 s later; "old" checkpointed 10 s ago."""
    c = (contract(cluster_queue("q").gpus(8).preemption(within="LowerPriority"))
         .priority_class("batch", 0, grace_ms=5_000, min_runtime_ms=min_runtime_ms).checkpoint_aware(checkpoint_aware))
    log = LogBuilder().configure(c).nodes(node("n1").gpus(8))
    log.running(wl("old", "q", 4, pc="batch"))
    log.advance(100_000).running(wl("new", "q", 4, pc="batch"))
    log.advance(40_000).add(ev.CheckpointSaved(workload="old"))
    return log.advance(10_000)


def test_checkpoint_aware_preemption_evicts_the_one_that_loses_least_work():
    log = checkpointed_queue().queue(wl("p", "q", 4, priority=10))
    [order] = decide_pure(decide_preemption, log.state)
    assert order.workload == "old"  # checkpointed 10 s ago, where "new" would lose its 50 s
    assert order.work_lost_ms == work_lost_ms(log.state.workloads["old"], log.state.time_ms) > 0


def test_without_checkpoint_awareness_the_most_recently_admitted_goes_first():
    log = checkpointed_queue(checkpoint_aware=False).queue(wl("p", "q", 4, priority=10))
    assert victims(log) == ["new"]


def test_a_checkpoint_of_an_earlier_attempt_does_not_count():
    log = checkpointed_queue()
    log.order_eviction("old", "x", grace_ms=0).evicted("old")
    assert log.state.workloads["old"].checkpoint_ms is None


def test_a_workload_within_its_minimum_runtime_is_not_preempted():
    log = checkpointed_queue(min_runtime_ms=600_000).queue(wl("p", "q", 4, priority=10))
    assert victims(log) == []


def test_once_its_minimum_runtime_has_passed_it_may_be_preempted():
    log = checkpointed_queue(min_runtime_ms=60_000).queue(wl("p", "q", 4, priority=10))
    assert victims(log) == ["old"]  # "new" has run 50 s of its 60


def declared_runtime_queue(ran_ms: int, runtime_ms: int | None = 60_000) -> LogBuilder:
    """Queue q (8 GPUs, grace 5 s): "v" declared ``runtime_ms`` and has run ``ran_ms``; "p" waits."""
    c = contract(cluster_queue("q").gpus(8).preemption(within="LowerPriority")).priority_class("batch", 0, grace_ms=5_000)
    log = LogBuilder(step_ms=0).configure(c).nodes(node("n1").gpus(8))
    declared = workload("v").queue("q").priority(0, "batch").pod_set("main", count=1, gpus=8)
    log.running(declared.runtime_ms(runtime_ms) if runtime_ms is not None else declared)
    return log.at(log.state.workloads["v"].started_ms + ran_ms).queue(wl("p", "q", 8, priority=10))


def test_a_workload_expected_to_end_within_its_grace_period_is_waited_for_not_evicted():
    assert victims(declared_runtime_queue(ran_ms=56_000)) == []  # ends in 4 s; an eviction gives it 5


def test_a_workload_expected_to_run_longer_than_its_grace_period_is_evicted():
    assert victims(declared_runtime_queue(ran_ms=54_000)) == ["v"]  # 6 s to go
    assert victims(declared_runtime_queue(ran_ms=54_000, runtime_ms=None)) == ["v"]  # no runtime declared


@pytest.mark.parametrize("ran_ms, walks", [(56_000, False), (54_000, True)])
def test_preemption_walks_the_queue_only_while_some_admitted_workload_is_unprotected(monkeypatch, ran_ms, walks):
    """Every workload holding quota protected (here: ending within its grace period): no rule could
    find a victim, so the admission cycle is not walked at all; one unprotected: it is."""
    from gangway.services.preemption import policy
    log = declared_runtime_queue(ran_ms=ran_ms)
    walked = []
    monkeypatch.setattr(policy, "admission_cycle", lambda *args: walked.append(1) or iter(()))
    assert decide_preemption(log.state) == []
    assert bool(walked) is walks


def test_a_workload_late_by_more_than_a_grace_period_is_no_longer_waited_for():
    assert victims(declared_runtime_queue(ran_ms=64_000)) == []  # 4 s late: still believed
    assert victims(declared_runtime_queue(ran_ms=66_000)) == ["v"]  # 6 s late


def test_the_moment_a_workload_is_late_by_more_than_its_grace_period_is_a_rule_deadline():
    """On a real cluster a workload may overrun its declared runtime: the binder ticks then (the
    simulated one reports it finished at its runtime instead)."""
    log = declared_runtime_queue(ran_ms=64_000)
    assert victims(log) == []
    late = log.state.workloads["v"].started_ms + 60_000 + 5_000 + 1
    assert rule_deadlines(log.state) == [(late, "v is late by more than its grace period")]
    log.add(ev.ClockTicked(reason="v is late by more than its grace period"), at_ms=late)
    assert victims(log) == ["v"]


def test_the_binder_ticks_when_a_minimum_runtime_ends_while_someone_waits():
    log = checkpointed_queue(min_runtime_ms=600_000).queue(wl("p", "q", 4, priority=10))
    ends = log.state.workloads["old"].started_ms + 600_000
    assert next_due_ms(log.state, 10**12) == ends
    [(event_id, at, tick)] = due_reports(log.state, ends, 10**12)
    assert (event_id, at, type(tick)) == (f"tick/{ends}", ends, ev.ClockTicked)
    log.add(tick, event_id=event_id, at_ms=at)
    assert victims(log) == ["old"]
    assert due_reports(log.state, ends, 10**12) == []  # the tick is not reported twice


# --- checkpoints from telemetry ---------------------------------------------------------------------


def test_a_checkpoint_on_telemetry_becomes_a_checkpoint_on_the_log():
    state = checkpointed_queue().state
    data = b'{"workload": "old", "step": 1200}'
    assert decide_telemetry(data, b"old", [], state, "gangway.telemetry/0/3") == ev.CheckpointSaved(
        workload="old", step=1200)


def test_a_bad_telemetry_record_is_rejected_whole():
    state = checkpointed_queue().state
    for value, reason in ((b'{"workload": "nobody"}', "invalid_field"), (b"\xff", "malformed_json"),
                          (b'{"step": 3}', "invalid_field")):
        rejected = decide_telemetry(value, b"k", [("x", b"1")], state, "gangway.telemetry/0/9")
        assert isinstance(rejected, ev.JobRejected) and rejected.reason == reason, value
        assert (rejected.original, rejected.original_key, rejected.original_headers) == (value, b"k", [("x", b"1")])


# --- the incident -------------------------------------------------------------------------------------


def incident() -> Simulation:
    """64 GPUs in one cohort: serving 32, research 24, batch 8 (best effort). At night batch borrows
    until it holds 40 GPUs (ten 4-GPU sweeps, admitted one after another) while serving runs 16."""
    sim = Simulation()
    queues = [cluster_queue("serving").cohort("all").gpus(32).preemption("LowerPriority", "Any"),
              cluster_queue("research").cohort("all").gpus(24).preemption("LowerPriority", "Any"),
              cluster_queue("batch").cohort("all").gpus(8)]
    sim.configure(contract(*queues).priority_class("production", 1000).priority_class("best-effort", 0).obj())
    sim.add_nodes([node(f"n{i}").gpus(8).obj() for i in range(8)])
    sim.submit(wl("serve-0", "serving", 8, priority=1000, pods=2))
    sim.run(until_ms=sim.now_ms + 1)
    for i in range(10):
        sim.submit(wl(f"sweep-{i}", "batch", 4))
        sim.run(until_ms=sim.now_ms + 1000)
    return sim


def test_the_incident_serving_reclaims_exactly_8_gpus_of_the_newest_borrowed_work():
    sim = incident()
    running = {n for n, w in sim.state.workloads.items() if w.phase == "running"}
    assert running == {"serve-0", *(f"sweep-{i}" for i in range(10))}
    start = len(sim.log)
    sim.submit(wl("serve-1", "serving", 8, priority=1000, pods=2))
    sim.run(until_ms=sim.now_ms + 120_000)
    orders = [e.data for e in sim.log[start:] if isinstance(e.data, ev.EvictionOrdered)]
    assert [o.workload for o in orders] == ["sweep-9", "sweep-8"]  # 8 GPUs, newest first, no more
    assert all("reclaimWithinCohort Any: batch is borrowing" in o.reason for o in orders)
    assert sim.state.workloads["serve-1"].phase == "running"
    assert {n for n, w in sim.state.workloads.items() if w.phase == "pending"} == {"sweep-8", "sweep-9"}
