"""Admission policy: quota per ClusterQueue, cohorts, all-or-nothing, priority then FIFO.

Each case folds a log into a state and runs ``decide_admission`` on it; the table gives, in order,
the workloads admitted and what each borrows (whole GPUs). Every case also checks that deciding
left the state byte-for-byte as it was.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from builders import LogBuilder, cluster_queue, contract, decide_pure, node, workload
from gangway.events import catalogue as ev
from gangway.events.reasons import ReasonCode
from gangway.events.resources import GPU
from gangway.services.admission.policy import decide_admission

Setup = Callable[[], LogBuilder]


def two_teams(a_gpus=8, b_gpus=8, a_borrowing=None, b_lending=None, strict_a=False) -> LogBuilder:
    """Queues a and b in cohort "all" (ordinary: nominal only), plus "solo" outside any cohort."""
    a = cluster_queue("a").cohort("all").gpus(a_gpus, borrowing=a_borrowing).cpu(1000).memory_gi(10_000)
    if strict_a:
        a.strict_fifo()
    return LogBuilder().configure(contract(
        a, cluster_queue("b").cohort("all").gpus(b_gpus, lending=b_lending),
        cluster_queue("solo").gpus(8), cluster_queue("strict").gpus(8).strict_fifo(),
    ))


def nodes(*gpus: int) -> Callable[[LogBuilder], LogBuilder]:
    return lambda log: log.nodes(*(node(f"n{i + 1}").gpus(g).cpu(64).memory_gi(512) for i, g in enumerate(gpus)))


def with_nodes(log: LogBuilder, *gpus: int) -> LogBuilder:
    return nodes(*gpus)(log)


def wl(name: str, queue: str, gpus: float, pods: int = 1, priority: int = 0) -> ev.WorkloadQueued:
    return workload(name).queue(queue).priority(priority).pod_set("main", count=pods, gpus=gpus).obj()


CASES: list[tuple[str, Setup, list[tuple[str, float]]]] = [
    ("admits a workload within nominal quota",
     lambda: with_nodes(two_teams(), 8).queue(wl("w", "a", 4)),
     [("w", 0)]),
    ("a workload over nominal quota without a cohort waits",
     lambda: with_nodes(two_teams(), 8, 8).queue(wl("w", "solo", 4, pods=3)),
     []),
    ("a workload exactly at nominal quota is admitted",
     lambda: with_nodes(two_teams(), 8).queue(wl("w", "solo", 8)),
     [("w", 0)]),
    ("borrows what its cohort leaves unused",
     lambda: with_nodes(two_teams(), 8, 8).queue(wl("w", "a", 6, pods=2)),
     [("w", 4)]),
    ("borrows up to its borrowing limit",
     lambda: with_nodes(two_teams(a_borrowing=2), 8, 8).queue(wl("w", "a", 5, pods=2)),
     [("w", 2)]),
    ("does not borrow beyond its borrowing limit",
     lambda: with_nodes(two_teams(a_borrowing=2), 8, 8).queue(wl("w", "a", 6, pods=2)),
     []),
    ("borrows only the part above nominal quota",
     lambda: with_nodes(two_teams(), 8, 8).running(wl("x", "a", 6)).queue(wl("w", "a", 4)),
     [("w", 2)]),
    ("borrows no more than the lending limit of its cohort's other queue",
     lambda: with_nodes(two_teams(b_lending=2), 8, 8).queue(wl("w", "a", 6, pods=2)),
     []),
    ("borrows up to the lending limit of its cohort's other queue",
     lambda: with_nodes(two_teams(b_lending=2), 8, 8).queue(wl("w", "a", 5, pods=2)),
     [("w", 2)]),
    ("the part a queue does not lend stays its own",
     lambda: with_nodes(two_teams(b_lending=2), 8, 8).running(wl("w", "a", 5, pods=2)).queue(wl("v", "b", 3, pods=2)),
     [("v", 0)]),
    ("cannot borrow what another queue of the cohort uses",
     lambda: with_nodes(two_teams(), 8, 8, 8).running(wl("x", "b", 6)).queue(wl("w", "a", 6, pods=2)),
     []),
    ("all or nothing across pod sets: the second pod set is over quota",
     lambda: with_nodes(two_teams(), 8, 8).queue(
         workload("w").queue("solo").pod_set("driver", 1, gpus=4).pod_set("workers", 2, gpus=4).obj()),
     []),
    ("all or nothing across pod sets: the second pod set has nowhere to go",
     lambda: with_nodes(two_teams(), 8).queue(
         workload("w").queue("a").pod_set("driver", 1, gpus=4).pod_set("workers", 1, gpus=6).obj()),
     []),
    ("every pod set of a gang that fits is admitted together",
     lambda: with_nodes(two_teams(), 8).queue(
         workload("w").queue("a").pod_set("driver", 1, cpu=4).pod_set("workers", 2, gpus=4).obj()),
     [("w", 0)]),
    ("higher priority goes first",
     lambda: with_nodes(two_teams(), 8).queue(wl("lo", "solo", 8), wl("hi", "solo", 8, priority=10)),
     [("hi", 0)]),
    ("first come first served among equal priorities",
     lambda: with_nodes(two_teams(), 8).queue(wl("first", "solo", 8), wl("second", "solo", 8)),
     [("first", 0)]),
    ("many are admitted in one cycle, in priority then arrival order",
     lambda: with_nodes(two_teams(), 8).queue(
         wl("w1", "solo", 2), wl("w2", "solo", 2, priority=5), wl("w3", "solo", 2)),
     [("w2", 0), ("w1", 0), ("w3", 0)]),
    ("BestEffortFIFO: a head that does not fit lets the next one in",
     lambda: with_nodes(two_teams(), 8, 8).queue(wl("big", "solo", 8, pods=2), wl("small", "solo", 2)),
     [("small", 0)]),
    ("StrictFIFO: a head that does not fit blocks its queue",
     lambda: with_nodes(two_teams(), 8, 8).running(wl("r", "strict", 4), on=[("main", "n1", 1)])
     .queue(wl("big", "strict", 8), wl("small", "strict", 2)),
     []),
    ("StrictFIFO: a blocked head blocks only its own queue",
     lambda: with_nodes(two_teams(), 8, 8, 8).running(wl("r", "strict", 4), on=[("main", "n1", 1)]).queue(
         wl("big", "strict", 8), wl("small", "strict", 2), wl("other", "solo", 2)),
     [("other", 0)]),
    ("StrictFIFO: a head its quota can never hold is set aside",
     lambda: with_nodes(two_teams(), 8, 8).queue(wl("big", "strict", 8, pods=2), wl("small", "strict", 2)),
     [("small", 0)]),
    ("StrictFIFO: a head with no placement blocks its queue too",
     lambda: with_nodes(two_teams(), 8, 8).running(wl("x", "solo", 4), on=[("main", "n1", 1)])
     .running(wl("y", "solo", 4), on=[("main", "n2", 1)]).queue(wl("big", "strict", 8), wl("small", "strict", 2)),
     []),
    ("StrictFIFO: a head too big for every node even when empty is set aside (never placeable)",
     lambda: with_nodes(two_teams(), 4, 4).queue(wl("big", "strict", 8), wl("small", "strict", 2)),
     [("small", 0)]),
    ("a queue that fits its nominal goes before a borrower of higher priority",
     lambda: with_nodes(two_teams(a_gpus=4, b_gpus=4), 8).queue(wl("hi", "b", 8, priority=100), wl("lo", "a", 4)),
     [("lo", 0)]),
    ("a borrower is admitted after the nominal ones when room is left",
     lambda: with_nodes(two_teams(a_gpus=4, b_gpus=4), 8, 8).queue(wl("hi", "b", 6, priority=100), wl("lo", "a", 2)),
     [("lo", 0), ("hi", 2)]),
    ("no admission without a placement on free capacity, however much quota is left",
     lambda: with_nodes(LogBuilder().configure(contract(cluster_queue("big").gpus(64))), 8)
     .running(wl("x", "big", 6)).queue(wl("w", "big", 4)),
     []),
    ("no admission when free GPUs are spread too thin for one pod",
     lambda: with_nodes(two_teams(), 8, 8).running(wl("x", "b", 4), on=[("main", "n1", 1)])
     .running(wl("y", "b", 4), on=[("main", "n2", 1)]).queue(wl("w", "a", 8)),
     []),
    ("admitted gangs not yet placed keep their room",
     lambda: with_nodes(two_teams(), 8).queue(wl("first", "a", 8)).admit("first").queue(wl("w", "b", 4)),
     []),
    ("placed gangs hold their nodes",
     lambda: with_nodes(two_teams(), 8).queue(wl("first", "a", 8)).admit("first").place("first").queue(wl("w", "b", 4)),
     []),
    ("a preemptor waiting for its victims keeps its room",
     lambda: with_nodes(two_teams(), 8).running(wl("victim", "solo", 4, priority=0))
     .queue(wl("preemptor", "solo", 8, priority=10), wl("other", "b", 4, priority=5))
     .order_eviction("victim", "preemptor"),
     []),
    ("without a preemption in flight the same room is anyone's",
     lambda: with_nodes(two_teams(), 8).running(wl("victim", "solo", 4, priority=0))
     .queue(wl("preemptor", "solo", 8, priority=10), wl("other", "b", 4, priority=5)),
     [("other", 0)]),
    ("a preemptor waiting for its victims keeps its quota",
     lambda: with_nodes(two_teams(), 8, 8).running(wl("victim", "solo", 4, priority=0))
     .queue(wl("preemptor", "solo", 4, pods=2, priority=10), wl("other", "solo", 4, priority=5))
     .order_eviction("victim", "preemptor"),
     []),
    ("a preemptor in a cohort waiting for its victims keeps its room from a queue that fits nominal",
     lambda: with_nodes(two_teams(), 8).running(wl("victim", "a", 4, priority=0))
     .queue(wl("preemptor", "a", 8, priority=10), wl("other", "b", 4, priority=5))
     .order_eviction("victim", "preemptor"),
     []),
    ("StrictFIFO: a head that must borrow is not overtaken by its own queue",
     lambda: with_nodes(two_teams(a_gpus=4, b_gpus=4, strict_a=True), 16).queue(
         wl("head", "a", 8, priority=10), wl("behind", "a", 4, priority=0)),
     [("head", 4)]),
    ("within one queue priority beats fitting nominal",
     lambda: with_nodes(two_teams(a_gpus=4, b_gpus=4), 16).queue(wl("hi", "a", 8, priority=10), wl("lo", "a", 4)),
     [("hi", 4)]),
    ("a queue's nominal quota lent to a borrower of its cohort is not admitted twice (reclaim instead)",
     lambda: with_nodes(two_teams(), 8, 8, 8, 8).running(wl("borrower", "b", 6, pods=2)).queue(wl("w", "a", 8)),
     []),
    ("within nominal quota and the cohort's room: admitted beside a borrower",
     lambda: with_nodes(two_teams(), 8, 8, 8, 8).running(wl("borrower", "b", 6, pods=2)).queue(wl("w", "a", 4)),
     [("w", 0)]),
    ("a workload of an unknown ClusterQueue waits",
     lambda: with_nodes(two_teams(), 8).queue(wl("w", "nowhere", 1)),
     []),
    ("a workload asking for a resource its queue has no quota for waits",
     lambda: with_nodes(two_teams(), 8).queue(workload("w").queue("solo").pod_set("main", 1, gpus=1, cpu=1).obj()),
     []),
    ("finished workloads give their quota and nodes back",
     lambda: with_nodes(two_teams(), 8).running(wl("x", "solo", 8)).finish("x").queue(wl("w", "solo", 8)),
     [("w", 0)]),
    ("cpu and memory count against quota as GPUs do",
     lambda: with_nodes(two_teams(), 8).queue(
         workload("w").queue("a").pod_set("main", 1, cpu=32, memory_gi=256).obj(),
         workload("v").queue("a").pod_set("main", 1, cpu=32, memory_gi=257).obj()),
     [("w", 0)]),
]


@pytest.mark.parametrize(("setup", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_admission(setup: Setup, expected: list[tuple[str, float]]):
    state = setup().state
    decisions = decide_pure(decide_admission, state)
    assert [(d.workload, d.borrowed.get(GPU, 0) / 1000) for d in decisions] == expected
    for d in decisions:
        assert d.based_on == state.offset
        assert set(d.borrowed) <= {GPU}


def test_admission_decision_carries_its_usage_borrowing_basis_and_reason():
    log = with_nodes(two_teams(), 8, 8).queue(wl("w", "a", 6, pods=2))
    [decision] = decide_pure(decide_admission, log.state)
    assert decision == ev.WorkloadAdmitted(
        workload="w", cluster_queue="a", usage={GPU: 12_000}, borrowed={GPU: 4_000}, based_on=log.offset,
        reason="fits a by borrowing from its cohort (4 nvidia.com/gpu)", flavors={GPU: "default"},
        reason_code=ReasonCode.FITS_BORROWING, reason_params={"cluster_queue": "a", "borrowed": "4 nvidia.com/gpu"},
    )


def test_admission_within_nominal_says_so():
    log = with_nodes(two_teams(), 8).queue(wl("w", "a", 4))
    [decision] = decide_pure(decide_admission, log.state)
    assert decision.reason == "fits nominal quota of a"
    assert (decision.reason_code, decision.reason_params) == (ReasonCode.FITS_NOMINAL, {"cluster_queue": "a"})


def test_no_contract_no_admission():
    log = with_nodes(LogBuilder(), 8).queue(wl("w", "a", 4))
    assert decide_pure(decide_admission, log.state) == []


def test_every_admission_of_a_cycle_holds_when_folded_in_order():
    log = with_nodes(two_teams(), 8, 8, 8).queue(
        wl("w1", "a", 4), wl("w2", "b", 4), wl("w3", "a", 4), wl("w4", "b", 4), wl("w5", "a", 2))
    decisions = decide_pure(decide_admission, log.state)
    assert [d.workload for d in decisions] == ["w1", "w2", "w3", "w4"]
    for d in decisions:
        log.add(d)
    assert log.state.superseded == 0 and log.state.decisions == 4


# --- known defects ------------------------------------------------------------------------------


def test_admissions_beside_a_preemptor_waiting_for_its_victims_hold_when_folded():
    """The victims still hold their quota in the fold until they exit: nobody else may count on it."""
    log = two_teams().nodes(node("n1").gpus(8).cpu(2048))
    log.running(workload("victim").queue("a").priority(0).pod_set("main", 1, gpus=6, cpu=600).obj())
    log.queue(workload("preemptor").queue("a").priority(10).pod_set("main", 1, gpus=4).obj(),
              workload("w").queue("a").priority(0).pod_set("main", 1, cpu=500).obj())
    log.order_eviction("victim", "preemptor")
    decisions = decide_pure(decide_admission, log.state)
    for d in decisions:
        log.add(d)
    assert log.state.superseded == 0, [wl.superseded for wl in log.state.workloads.values() if wl.superseded]


def test_a_cohort_exhausted_reason_counts_the_queues_own_free_quota_apart():
    """a (8 GPUs, 5 of them in use) asks for 8 more; b uses all of its 8: a must borrow 5 beyond the 3
    of its own still free, and the cohort has none left to lend (it said 8 to borrow, and a's own 3
    as the cohort's to lend)."""
    from gangway.read.explain import pending_report
    log = with_nodes(two_teams(), 8, 8, 8)
    log.running(wl("mine", "a", 5), on=[("main", "n1", 1)]).running(wl("theirs", "b", 8), on=[("main", "n2", 1)])
    log.queue(wl("more", "a", 8))
    report = pending_report(log.state, forecast=False)["more"]
    assert report.code == ReasonCode.COHORT_EXHAUSTED
    assert report.reason.startswith("nvidia.com/gpu (default): a needs to borrow 5 beyond its own free quota, "
                                    "and cohort all has 0 left to lend it"), report.reason
