"""No preemption by proxy (``Contract.no_proxy_preemption``, with ``no_preemption_back``).

Kueue's pairwise proof that two workloads never take turns preempting each other under fair
sharing says nothing of three: a small, low-priority workload of a queue takes another queue's
workload for fair sharing (its small share allows it); a bigger, higher-priority workload waiting
in the same queue then preempts it there (``withinClusterQueue: LowerPriority``) and takes its
place, which puts the queue above its fair share; and the first victim, back, takes that one for
fair sharing. Round and round, three workloads' work lost each time. The property tests found it
(random seeds, 32x their examples): tests/data/proxy-preemption.jsonl is that run up to the moment
before its first order. Under the switch (the contract reader sets it) a preemption whose
preemptor would be replaced so is not made: the room goes to nobody the cohort's rules did not
grant it to, and the preemptor waits for work to end.
"""

from __future__ import annotations

import collections
from pathlib import Path

import msgspec
import pytest

from builders import LogBuilder, cluster_queue, contract, decide_pure, fold_file, node, workload
from gangway.events import catalogue as ev
from gangway.events.state import State
from gangway.read.explain import explain
from gangway.services.preemption.policy import decide_preemption
from gangway.sim import Simulation

LOG = Path(__file__).parent / "data" / "proxy-preemption.jsonl"


def found(switch: bool) -> State:
    return fold_file(LOG, no_proxy_preemption=switch)


def orders(log: list[ev.Envelope]) -> collections.Counter:
    return collections.Counter((e.data.preemptor, e.data.workload) for e in log if isinstance(e.data, ev.EvictionOrdered))


def test_the_run_the_property_tests_found_settles_with_the_switch():
    sim = Simulation(state=found(True))
    sim.run(until_ms=sim.now_ms + 3_600_000, rounds_max=2_000)
    assert max(orders(sim.log).values()) == 1  # nobody ordered out twice by the same preemptor
    # a contract recorded before the switch: w19 takes w22, w14 and w12 take w19's place, w22 takes them
    sim = Simulation(state=found(False))
    with pytest.raises(RuntimeError, match="did not settle"):
        sim.run(until_ms=sim.now_ms + 3_600_000, rounds_max=400)
    taken = orders(sim.log)
    assert taken[("w19", "w22")] >= 50 and taken[("w14", "w19")] >= 20 and taken[("w22", "w14")] >= 20


def wl(name: str, queue: str, gpus: int, priority: int = 0):
    return workload(name).queue(queue).priority(priority).pod_set("main", gpus=gpus).runtime_s(3600).obj()


def three(switch: bool) -> LogBuilder:
    """a and c (4 GPUs nominal each; c preempts within itself by priority) share 8 GPUs under fair
    sharing; a runs w22 (6: borrowing 2).
    In c wait w14 (priority 100, 7 GPUs: it would borrow 3, more than a does, so fair sharing does
    not let it take w22) and w19 (3 GPUs: within c's nominal quota, so it may take w22). Once w19
    is in, w14 may preempt it within c, and w22, back, may take w14 (a would borrow 2, less than
    c's 3)."""
    c = contract(cluster_queue("a").cohort("all").gpus(4),
                 cluster_queue("c").cohort("all").gpus(4).preemption(within="LowerPriority")).fair_sharing()
    log = LogBuilder().configure(msgspec.structs.replace(c.obj(), no_preemption_back=True, no_proxy_preemption=switch))
    log.nodes(node("n0").gpus(8)).running(wl("w22", "a", 6))
    return log.queue(wl("w14", "c", 7, priority=100), wl("w19", "c", 3))


def test_a_preemptor_that_a_waiting_workload_of_its_queue_would_replace_waits():
    assert [(d.workload, d.preemptor) for d in decide_pure(decide_preemption, three(False).state)] == [("w22", "w19")]
    sim = Simulation(state=three(False).state)
    sim.run(until_ms=sim.now_ms + 600_000)  # (each turn waits out a 30 s grace period)
    taken = orders(sim.log)
    assert min(taken[("w19", "w22")], taken[("w14", "w19")], taken[("w22", "w14")]) >= 5
    # the switch: no order; w19 and w14 wait for w22 to end, then run
    assert decide_pure(decide_preemption, three(True).state) == []
    sim = Simulation(state=three(True).state)
    sim.run(until_ms=sim.now_ms + 600_000)
    assert not orders(sim.log) and sim.state.workloads["w22"].phase == "running"


def test_explain_names_the_workload_that_would_take_its_place():
    lines = explain(three(True).envelopes, "w19", forecast=False)
    assert lines[-1] == ("no preemption for it: taking w22 would make room, but w14, waiting ahead of it in c, could "
                         "take its place at once, and w22, back in a, could then preempt w14: it waits for work to end "
                         "instead (the contract's no_proxy_preemption)")


def undone(switch: bool) -> LogBuilder:
    """A stranger's case: llm (8 GPUs nominal, may borrow 4; borrowWithinCohort up to priority 100)
    and vision (8 nominal, lends at most 4; reclaims from anyone, preempts within itself by priority)
    share 16 GPUs in cohort all (under company, as the stranger's contract had it). llm's big (priority 500, 12 GPUs) runs, borrowing 4. In vision wait p1 (priority
    1, 12 GPUs: it would borrow 4, so it reclaims nothing) and p0 (priority 0, 6 GPUs: within
    vision's nominal quota, so it may reclaim big's room). No state of the three is one Kueue's
    rules leave alone: p0 takes big, p1 takes p0 and borrows, big takes p1 by borrowWithinCohort."""
    c = contract(cluster_queue("llm").cohort("all").gpus(8, borrowing=4).preemption(
                     within="LowerPriority", reclaim="LowerPriority").borrow_within_cohort(max_priority=100),
                 cluster_queue("vision").cohort("all").gpus(8, lending=4).preemption(
                     within="LowerOrNewerEqualPriority", reclaim="Any"),
                 cluster_queue("etl").cohort("company").cpu(64)).cohort("all", parent="company")
    log = LogBuilder().configure(msgspec.structs.replace(c.obj(), no_preemption_back=True, no_proxy_preemption=True,
                                                         no_preemption_undone=switch))
    log.nodes(node("n0").gpus(16)).running(wl("big", "llm", 12, priority=500))
    return log.queue(wl("p1", "vision", 12, priority=1), wl("p0", "vision", 6))


def test_a_preemption_a_waiting_workload_of_another_queue_would_undo_at_once_is_not_made():
    sim = Simulation(state=undone(False).state)
    sim.run(until_ms=sim.now_ms + 600_000)  # (each turn waits out a 30 s grace period)
    taken = orders(sim.log)
    assert min(taken[("p0", "big")], taken[("p1", "p0")], taken[("big", "p1")]) >= 3
    # the switch: p0 reclaims vision's nominal quota from big, once; p1 does not take p0's place
    # (big could take it back at once): it waits for work to end, and so does big
    log = undone(True)
    sim = Simulation(state=log.state)
    sim.run(until_ms=sim.now_ms + 600_000)
    assert orders(sim.log) == {("p0", "big"): 1}
    assert [sim.state.workloads[n].phase for n in ("p0", "p1", "big")] == ["running", "pending", "pending"]
    lines = explain(log.envelopes + sim.log, "p1", forecast=False)
    assert lines[-1] == ("no preemption for it: taking p0 would make room, but big, waiting in llm, could then preempt "
                         "it at once: it waits for work to end instead (the contract's no_preemption_undone)")
