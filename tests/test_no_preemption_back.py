"""No preemption whose victim could preempt its preemptor right back (``Contract.no_preemption_back``).

Kueue's rules let two workloads take turns when one preemption takes several victims of one
queue (kueue#14543, "FairSharing: infinite preemption loop"): fair sharing's LessThanInitialShare
takes the last ones against the queue's share with the first still in, so the first, back alone,
finds its queue below the preemptor's share; borrowWithinCohort takes whole workloads from a
borrowing queue until it borrows no more, so the first, back, fits its queue's nominal quota and
reclaims it. Each turn throws away the work of both. Under the switch (the contract reader sets it)
such a set of victims is passed over and the preemptor waits for work to end.
"""

from __future__ import annotations

import msgspec
import pytest

from builders import LogBuilder, cluster_queue, contract, decide_pure, node, workload
from gangway.events import catalogue as ev
from gangway.events.reasons import ReasonCode
from gangway.read.explain import explain
from gangway.services.preemption.policy import decide_preemption
from gangway.sim import Simulation
from test_properties import preemption_cycles


def wl(name: str, queue: str, gpus: int, priority: int = 0, runtime_s: int = 3600):
    return workload(name).queue(queue).priority(priority).pod_set("main", gpus=gpus).runtime_s(runtime_s).obj()


def fair_sharing(guard: bool) -> LogBuilder:
    """a and c (4 GPUs nominal each) share 8 GPUs under fair sharing; c runs 3 + 4 + 1 GPUs
    (borrowing 4 of a's); p (5 GPUs) waits in a. Taking c2 (1) and then c1 (4) makes room, the
    last by LessThanInitialShare (a's share 125 < c's 250 before it); then c2, back alone, fits
    c's nominal quota: its share 0 is no more than a's without p."""
    c = contract(cluster_queue("a").cohort("all").gpus(4), cluster_queue("c").cohort("all").gpus(4)).fair_sharing()
    log = LogBuilder().configure(msgspec.structs.replace(c.obj(), no_preemption_back=guard)).nodes(node("n0").gpus(8))
    log.running(wl("c0", "c", 3), wl("c1", "c", 4), wl("c2", "c", 1))
    return log.queue(wl("p", "a", 5, runtime_s=600))


def borrow_within_cohort(guard: bool) -> LogBuilder:
    """a (4 GPUs nominal, borrowWithinCohort LowerPriority) runs 2; b (4, reclaimWithinCohort Any)
    runs v2 (4), v3 (1, priority 100) and, last, v1 (1): it borrows 2. p (priority 100, 5 GPUs)
    must borrow: v1, then v2 (b still borrows once v1 is gone) make room; then v1, back alone,
    fits b's nominal quota and reclaims it from a."""
    c = contract(cluster_queue("a").cohort("all").gpus(4).borrow_within_cohort("LowerPriority"),
                 cluster_queue("b").cohort("all").gpus(4).preemption(reclaim="Any"))
    log = LogBuilder().configure(msgspec.structs.replace(c.obj(), no_preemption_back=guard)).nodes(node("n0").gpus(8))
    log.running(wl("a-run", "a", 2, priority=100), wl("v2", "b", 4), wl("v3", "b", 1, priority=100))
    log.advance(60_000).running(wl("v1", "b", 1))
    return log.queue(wl("p", "a", 5, priority=100, runtime_s=600))


def orders(sim: Simulation) -> list[tuple[str, str, ReasonCode]]:
    return [(e.data.preemptor, e.data.workload, e.data.reason_code) for e in sim.log if isinstance(e.data, ev.EvictionOrdered)]


@pytest.mark.parametrize("scenario, first, back", [
    (fair_sharing, ["c2", "c1"], ReasonCode.FAIR_SHARING),
    (borrow_within_cohort, ["v1", "v2"], ReasonCode.RECLAIM_WITHIN_COHORT),
], ids=["fair-sharing", "borrow-within-cohort"])
def test_kueues_choice_takes_turns_and_the_switch_waits_instead(scenario, first, back):
    # Kueue's choice (a contract recorded before the switch): p takes both, and the first comes back for it
    log = scenario(False)
    assert sorted(d.workload for d in decide_pure(decide_preemption, log.state)) == sorted(first)
    sim = Simulation(state=log.state)
    sim.run(until_ms=sim.now_ms + 300_000)
    taken = orders(sim)
    assert (first[0], "p", back) in taken
    assert preemption_cycles(log.envelopes + sim.log) != []
    # the switch: no victim set that turns back; p waits for c's (b's) work to end, and runs
    log = scenario(True)
    assert decide_pure(decide_preemption, log.state) == []
    sim = Simulation(state=log.state)
    sim.run(until_ms=sim.now_ms + 300_000)
    assert orders(sim) == [] and sim.state.workloads["p"].phase == "pending"
    sim.run(until_ms=sim.now_ms + 4_000_000)
    assert sim.state.workloads["p"].phase == "finished"


def test_a_single_victim_that_could_not_come_back_is_still_taken():
    """The switch passes over only sets that turn back: of c's 1 + 4 + 1 GPUs, c1 (4) is taken for
    p (4 GPUs, within a's nominal quota: a borrows nothing then, so nobody can take from it), as
    Kueue takes it."""
    log = fair_sharing(True)
    small = LogBuilder().configure(log.state.contract).nodes(node("n0").gpus(8))
    small.running(wl("c0", "c", 1), wl("c1", "c", 4), wl("c2", "c", 1)).queue(wl("p", "a", 4))
    assert [d.workload for d in decide_pure(decide_preemption, small.state)] == ["c1"]


def test_explain_says_which_victim_would_come_back():
    lines = explain(fair_sharing(True).envelopes, "p", forecast=False)
    assert lines[-1] == ("no preemption for it: taking c2, c1 would make room, but c2, back in c, could preempt it at "
                         "once: it waits for work to end instead (the contract's no_preemption_back)")
    assert not any(line.startswith("no preemption") for line in explain(fair_sharing(False).envelopes, "p", forecast=False))
