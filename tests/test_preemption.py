"""Preemption policy: Kueue's documented cases as a table (pkg/scheduler/preemption tests).

Each case folds a log into a state, runs ``decide_preemption``, and compares the exact eviction
orders as (victim, preemptor) pairs in the order issued. Every case checks that deciding left the
state byte-for-byte unchanged (Kueue's "snapshot is unchanged afterwards").
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from builders import LogBuilder, cluster_queue, contract, decide_pure, node, workload
from gangway.events import catalogue as ev
from gangway.events.reasons import ReasonCode
from gangway.events.resources import GPU
from gangway.services.preemption.policy import decide_preemption
from gangway.sim import Simulation

Setup = Callable[[], LogBuilder]


def wl(name: str, queue: str, gpus: float, pods: int = 1, priority: int = 0,
       pc: str | None = None) -> ev.WorkloadQueued:
    return workload(name).queue(queue).priority(priority, pc).pod_set("main", count=pods, gpus=gpus).obj()


def standalone(within: str = "LowerPriority", gpus: int = 8, node_gpus: tuple[int, ...] = (8,)) -> LogBuilder:
    """One ClusterQueue "q" outside any cohort, nodes of the given sizes."""
    log = LogBuilder().configure(
        contract(cluster_queue("q").gpus(gpus).preemption(within=within)).priority_class("batch", 0, grace_ms=5_000))
    return log.nodes(*(node(f"n{i + 1}").gpus(g) for i, g in enumerate(node_gpus)))


def cohort(reclaim: str = "Any", within: str = "Never", borrowing_within: str = "Never") -> LogBuilder:
    """c1 reclaims with ``reclaim`` (and preempts inside itself with ``within``); c2 borrows.

    Both have 8 GPUs nominal in cohort "all"; "other" is an 8-GPU queue in another cohort. Nodes:
    two of 8 GPUs and one of 8 for the other cohort's work.
    """
    return LogBuilder().configure(contract(
        cluster_queue("c1").cohort("all").gpus(8).preemption(within=within, reclaim=reclaim),
        cluster_queue("c2").cohort("all").gpus(8).preemption(within=borrowing_within),
        cluster_queue("other").cohort("elsewhere").gpus(8).preemption(reclaim="Any"),
    )).nodes(node("n1").gpus(8), node("n2").gpus(8))


def three_running(within: str = "LowerPriority") -> LogBuilder:
    """A full 8-GPU queue: low (priority -1, 2 GPUs), mid (0, 2), high (1, 4)."""
    return standalone(within).running(wl("low", "q", 2, priority=-1), wl("mid", "q", 2, priority=0),
                                      wl("high", "q", 4, priority=1))


def borrowed_cohort(reclaim: str = "Any", within: str = "Never") -> LogBuilder:
    """c2 runs b1 and b2 (priority 10, admitted in that order) and borrows 4; c1 runs a1 (4 GPUs)."""
    return (cohort(reclaim, within)
            .running(wl("b1", "c2", 8, priority=10), wl("b2", "c2", 4, priority=10), wl("a1", "c1", 4)))


CASES: list[tuple[str, Setup, list[tuple[str, str]]]] = [
    # withinClusterQueue
    ("LowerPriority: preempt the lowest priority in the same queue",
     lambda: three_running().queue(wl("p", "q", 2, priority=1)),
     [("low", "p")]),
    ("LowerPriority: preempt several, lowest priority first",
     lambda: three_running().queue(wl("p", "q", 4, priority=1)),
     [("low", "p"), ("mid", "p")]),
    ("LowerPriority: nothing of lower priority, no preemption",
     lambda: three_running().queue(wl("p", "q", 2, priority=-1)),
     []),
    ("LowerPriority: not enough of lower priority, no preemption at all",
     lambda: three_running().queue(wl("p", "q", 6, priority=1)),
     []),
    ("LowerPriority: an equal priority is not preempted, newer or not",
     lambda: standalone().queue(wl("p", "q", 8, priority=0)).running(wl("newer", "q", 8, priority=0)),
     []),
    ("LowerOrNewerEqualPriority: preempt a newer workload of equal priority",
     lambda: standalone("LowerOrNewerEqualPriority").queue(wl("p", "q", 8, priority=0))
     .running(wl("newer", "q", 8, priority=0)),
     [("newer", "p")]),
    ("LowerOrNewerEqualPriority: an older workload of equal priority stays",
     lambda: standalone("LowerOrNewerEqualPriority").running(wl("older", "q", 8, priority=0))
     .queue(wl("p", "q", 8, priority=0)),
     []),
    ("LowerOrNewerEqualPriority: lower priority goes before newer equal priority",
     lambda: standalone("LowerOrNewerEqualPriority").queue(wl("p", "q", 4, priority=0))
     .running(wl("newer", "q", 4, priority=0), wl("lower", "q", 4, priority=-1)),
     [("lower", "p")]),
    ("Never: no preemption within the queue",
     lambda: three_running("Never").queue(wl("p", "q", 2, priority=100)),
     []),
    ("most recently admitted first among equal priorities",
     lambda: standalone().running(wl("first", "q", 4), wl("second", "q", 2), wl("third", "q", 2))
     .queue(wl("p", "q", 2, priority=1)),
     [("third", "p")]),
    ("minimal set: a victim the preemptor can do without is dropped",
     lambda: standalone().running(wl("tiny", "q", 1, priority=0), wl("half", "q", 4, priority=1),
                                  wl("rest", "q", 3, priority=5))
     .queue(wl("p", "q", 4, priority=2)),
     [("half", "p")]),
    ("no preemption when the workload fits anyway",
     lambda: standalone().running(wl("low", "q", 4, priority=-1)).queue(wl("p", "q", 4, priority=1)),
     []),
    ("a victim is a whole workload: a gang across nodes is ordered out once, whole",
     lambda: standalone(gpus=16, node_gpus=(8, 8)).running(wl("gang", "q", 4, pods=2, priority=0),
                                                           wl("big", "q", 8, priority=5))
     .queue(wl("p", "q", 2, priority=1)),
     [("gang", "p")]),
    ("preempts for room on the nodes, not only for quota",
     lambda: standalone(gpus=64).running(wl("low", "q", 8, priority=0)).queue(wl("p", "q", 4, priority=1)),
     [("low", "p")]),
    ("a victim whose eviction frees no room on a usable node is not taken",
     lambda: standalone(gpus=64, node_gpus=(8, 4))
     .running(wl("small-node", "q", 4, priority=-5), on=[("main", "n2", 1)])
     .running(wl("big-node", "q", 8, priority=0), on=[("main", "n1", 1)])
     .queue(wl("p", "q", 8, priority=1)),
     [("big-node", "p")]),
    # reclaimWithinCohort
    ("reclaimWithinCohort Any: reclaim from a borrowing queue, most recently admitted first",
     lambda: borrowed_cohort("Any").queue(wl("p", "c1", 4, priority=0)),
     [("b2", "p")]),
    ("reclaimWithinCohort LowerPriority: borrowers of higher priority are not reclaimed",
     lambda: borrowed_cohort("LowerPriority").queue(wl("p", "c1", 4, priority=0)),
     []),
    ("reclaimWithinCohort LowerPriority: borrowers of lower priority are reclaimed",
     lambda: borrowed_cohort("LowerPriority").queue(wl("p", "c1", 4, priority=20)),
     [("b2", "p")]),
    ("reclaimWithinCohort Never: no reclaim",
     lambda: borrowed_cohort("Never").queue(wl("p", "c1", 4, priority=100)),
     []),
    ("reclaim takes from a queue only while it borrows",
     lambda: cohort("Any").running(wl("b1", "c2", 8), wl("a1", "c1", 4), wl("a2", "c1", 4)).queue(wl("p", "c1", 4)),
     []),
    ("borrowing workloads of other queues go before lower priority ones of the own queue",
     lambda: cohort("Any", within="LowerPriority")
     .running(wl("b1", "c2", 8, priority=10), wl("b2", "c2", 4, priority=10), wl("own", "c1", 4, priority=-5))
     .queue(wl("p", "c1", 4, priority=0)),
     [("b2", "p")]),
    ("no cross-queue reclaim for a preemptor that would itself borrow",
     lambda: borrowed_cohort("Any").queue(wl("p", "c1", 6, pods=2, priority=100)),
     []),
    ("a queue in another cohort is never reclaimed from",
     lambda: cohort("Any").nodes(node("n3").gpus(8))
     .running(wl("x1", "other", 8), wl("x2", "other", 8), wl("b1", "c2", 8), wl("a1", "c1", 4))
     .queue(wl("p", "c1", 4, priority=100)),
     []),
    # in flight and within one cycle
    ("a preemptor with victims in flight gets no new ones",
     lambda: three_running().queue(wl("p", "q", 4, priority=1)).order_eviction("low", "p"),
     []),
    ("a workload already being evicted is not ordered out again",
     lambda: standalone().running(wl("low", "q", 2, priority=-1), wl("mid", "q", 2, priority=0),
                                  wl("mid2", "q", 4, priority=0))
     .queue(wl("p", "q", 2, priority=1), wl("p2", "q", 2, priority=1)).order_eviction("low", "p"),
     [("mid2", "p2")]),
    ("each victim is ordered out once per cycle, for the first preemptor in queue order",
     lambda: standalone().running(wl("v", "q", 4, priority=0), wl("w", "q", 4, priority=1))
     .queue(wl("p2", "q", 4, priority=4), wl("p1", "q", 4, priority=5)),
     [("v", "p1"), ("w", "p2")]),
    ("a later preemptor of a cycle sees the room taken by an earlier one",
     lambda: standalone().running(wl("v", "q", 4, priority=0), wl("w", "q", 4, priority=9))
     .queue(wl("p1", "q", 4, priority=5), wl("p2", "q", 4, priority=5)),
     [("v", "p1")]),
]


@pytest.mark.parametrize(("setup", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_preemption(setup: Setup, expected: list[tuple[str, str]]):
    state = setup().state
    orders = decide_pure(decide_preemption, state)
    assert [(o.workload, o.preemptor) for o in orders] == expected
    assert all(o.based_on == state.offset for o in orders)


def test_eviction_order_carries_grace_period_of_the_victims_class_the_rule_and_the_work_lost():
    log = standalone().running(wl("v", "q", 8, priority=0, pc="batch")).queue(wl("p", "q", 8, priority=1))
    started = log.state.workloads["v"].started_ms
    assert decide_pure(decide_preemption, log.state) == [ev.EvictionOrdered(
        workload="v", preemptor="p", based_on=log.offset, grace_ms=5_000,
        reason="withinClusterQueue LowerPriority: priority 0 < 1 of p",
        reason_code=ReasonCode.WITHIN_QUEUE_LOWER_PRIORITY,
        reason_params={"policy": "LowerPriority", "priority": 1, "victim_priority": 0, "preemptor": "p"},
        work_lost_ms=log.state.time_ms - started, flavors={GPU: "default"},
    )]
    assert log.state.time_ms - started > 0


def test_a_minimum_runtime_delays_a_preemption_and_never_sends_it_to_higher_priority_work():
    """"low" (priority 10) is protected by its class's 900 s minimum runtime; "mid" (priority 100)
    could go instead — it does not: "high" waits for the protection to end, then takes low's room."""
    log = LogBuilder().configure(
        contract(cluster_queue("q").gpus(12).preemption(within="LowerPriority"))
        .priority_class("low", 10, grace_ms=10_000, min_runtime_ms=900_000).priority_class("mid", 100))
    log.nodes(node("n1").gpus(6), node("n2").gpus(6))
    log.running(wl("mid", "q", 6, priority=100, pc="mid"))
    log.advance(300_000).running(wl("low", "q", 6, priority=10, pc="low"))
    log.advance(700_000).queue(wl("high", "q", 6, priority=1000))
    assert decide_pure(decide_preemption, log.state) == []
    log.advance(200_000).add(ev.ClockTicked(reason="minimum runtime of low ends"))
    assert [(o.workload, o.preemptor) for o in decide_pure(decide_preemption, log.state)] == [("low", "high")]


def test_eviction_order_without_a_class_gets_the_default_grace_period():
    log = standalone().running(wl("v", "q", 8, priority=0)).queue(wl("p", "q", 8, priority=1))
    [order] = decide_pure(decide_preemption, log.state)
    assert order.grace_ms == 30_000


def test_reclaim_order_says_which_queue_borrowed():
    log = borrowed_cohort("Any").queue(wl("p", "c1", 4))
    [order] = decide_pure(decide_preemption, log.state)
    assert order.reason == "reclaimWithinCohort Any: c2 is borrowing and c1 reclaims its nominal quota for p"


def test_no_contract_no_preemption():
    log = LogBuilder().nodes(node("n1").gpus(8)).queue(wl("p", "q", 2))
    assert decide_pure(decide_preemption, log.state) == []


def test_preemption_then_exit_admits_the_preemptor():
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(8).preemption(within="LowerPriority")).obj())
    sim.add_nodes([node("n1").gpus(8).obj()])
    sim.submit(wl("v", "q", 8, priority=0))
    sim.run(until_ms=sim.now_ms + 1000)
    sim.submit(wl("p", "q", 8, priority=1))
    sim.run(until_ms=sim.now_ms + 60_000)
    exits = [e.id for e in sim.log if isinstance(e.data, ev.EvictionOrdered | ev.WorkloadEvicted)]
    assert [i.split("/")[0] + "/" + i.split("/")[1] for i in exits] == ["evict/v", "evicted/v"]
    assert sim.state.workloads["p"].phase == "running"
    assert sim.state.workloads["v"].phase == "pending"


def test_a_borrower_does_not_evict_the_same_victim_forever():
    sim = Simulation()
    sim.configure(contract(cluster_queue("a").cohort("all").gpus(4).preemption(within="LowerPriority"),
                           cluster_queue("b").cohort("all").gpus(4)).obj())
    sim.add_nodes([node("n1").gpus(16).obj()])
    sim.submit(wl("hi", "a", 8, priority=10))
    sim.submit(wl("lo", "a", 4, priority=0))
    try:
        sim.run(rounds_max=200)
    except RuntimeError as exc:
        pytest.fail(f"{exc}: {sum(isinstance(e.data, ev.EvictionOrdered) for e in sim.log)} evictions of lo")
    evictions = [e.data.workload for e in sim.log if isinstance(e.data, ev.EvictionOrdered)]
    assert len(evictions) <= 1
    assert sim.state.workloads["hi"].phase == "finished"


def test_victims_in_flight_are_not_counted_twice():
    log = standalone().running(wl("a", "q", 2, priority=-1), wl("b", "q", 2, priority=-1),
                               wl("c", "q", 2, priority=0), wl("d", "q", 2, priority=9))
    log.queue(wl("p", "q", 2, priority=5), wl("p2", "q", 2, priority=5)).order_eviction("a", "p")
    assert [(o.workload, o.preemptor) for o in decide_pure(decide_preemption, log.state)] == [("b", "p2")]


def test_a_preemptor_gets_the_room_before_its_victims_can_take_it_back():
    """Found by the property test: queue b's head borrows and cannot be placed, which once deferred
    all of b behind c's borrower; b's within-nominal workload reclaimed the borrower's room, the
    borrower took it back first, and the two evicted each other forever. A preemptor is now
    *nominated* once its victims are ordered out and goes first until admitted."""
    sim = Simulation()
    sim.configure(contract(
        cluster_queue("a").cohort("lab").gpus(16),
        cluster_queue("b").cohort("lab").gpus(16).preemption(within="LowerPriority", reclaim="Any"),
        cluster_queue("c").cohort("lab").gpus(4, borrowing=4),
    ).obj())
    sim.add_nodes([node("n4").gpus(8).obj()])
    # b's head: within quota by borrowing, but no node can hold its 4-GPU pods alongside w9
    sim.submit(workload("w3").queue("b").priority(200).pod_set(count=5, gpus=4).obj())
    sim.submit(workload("w9").queue("c").priority(100).pod_set(count=3, gpus=2).runtime_s(3600).obj())
    sim.run(until_ms=sim.now_ms + 60_000)
    assert sim.state.workloads["w9"].phase == "running"
    sim.submit(workload("w18").queue("b").priority(0).pod_set(count=3, gpus=2).runtime_s(600).obj())
    sim.run(until_ms=sim.now_ms + 30 * 60_000, rounds_max=500)
    evictions = [e.data for e in sim.log if isinstance(e.data, ev.EvictionOrdered)]
    assert [(o.workload, o.preemptor) for o in evictions] == [("w9", "w18")]
    admitted = [e.data.workload for e in sim.log if isinstance(e.data, ev.WorkloadAdmitted)]
    assert admitted == ["w9", "w18", "w9"], "w18 first into the room it reclaimed, then w9 again"
