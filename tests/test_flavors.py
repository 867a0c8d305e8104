"""Flavor assignment, fungibility, partial admission and reservations (admission policy).

Each case folds a log and runs ``decide_admission`` on it (checking it left the state untouched);
the tables give what was admitted and in which flavor.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from builders import LogBuilder, cluster_queue, contract, decide_pure, line_of, node, workload
from gangway.events import catalogue as ev
from gangway.events.resources import GPU
from gangway.events.resources import index_of
from gangway.services.admission.policy import admission_cycle, admissions_placed, decide_admission
from gangway.services.placement.policy import decide_placement
from gangway.services.preemption.policy import decide_preemption
from gangway.sim import Simulation

A100 = {"gpu-model": "a100"}
H100 = {"gpu-model": "h100"}


def two_flavors(h100: float = 8, a100: float = 8, cohort: bool = False, within: str = "Never",
                **fungibility: str) -> LogBuilder:
    """Queue "q": flavor h100 then a100 (GPUs), each on its own labelled 8-GPU nodes; ``within`` is
    its withinClusterQueue preemption.

    With ``cohort``, queue "lender" in the same cohort has 8 of each to lend.
    """
    q = (cluster_queue("q").flavor("h100").gpus(h100).flavor("a100").gpus(a100).fungibility(**fungibility)
         .preemption(within=within))
    queues = [q]
    if cohort:
        q.cohort("all")
        queues.append(cluster_queue("lender").cohort("all").flavor("h100").gpus(8).flavor("a100").gpus(8))
    c = contract(*queues).flavor_labels("h100", H100).flavor_labels("a100", A100)
    log = LogBuilder().configure(c)
    for i in range(2):
        log.nodes(node(f"h{i}").gpus(8).label("gpu-model", "h100"), node(f"a{i}").gpus(8).label("gpu-model", "a100"))
    return log


def wl(name: str, gpus: float, pods: int = 1, queue: str = "q", min_count: int | None = None,
       runtime_s: float | None = None, priority: int = 0) -> ev.WorkloadQueued:
    b = workload(name).queue(queue).priority(priority).pod_set("main", count=pods, gpus=gpus)
    spec = b.obj()
    if min_count is not None:
        spec = ev.WorkloadQueued(**{**_fields(spec), "pod_sets": [
            ev.PodSet(name="main", count=pods, resources={GPU: int(gpus * 1000)}, min_count=min_count)]})
    if runtime_s is not None:
        spec = ev.WorkloadQueued(**{**_fields(spec), "runtime_ms": int(runtime_s * 1000)})
    return spec


def _fields(spec) -> dict:
    return {f: getattr(spec, f) for f in spec.__struct_fields__}


def admitted(log: LogBuilder) -> list[tuple[str, str, dict[str, int]]]:
    """(workload, its flavors, pods per pod set when partial) for each admission decided."""
    return [(d.workload, ",".join(sorted(set(d.flavors.values()))), d.counts)
            for d in decide_pure(decide_admission, log.state)]


CASES: list[tuple[str, Callable[[], LogBuilder], list]] = [
    ("the first flavor in list order when both fit",
     lambda: two_flavors().queue(wl("w", 4)),
     [("w", "h100", {})]),
    ("the next flavor when the first has no quota left",
     lambda: two_flavors(h100=4).queue(wl("w", 8)),
     [("w", "a100", {})]),
    ("two workloads spill over into the second flavor in one cycle",
     lambda: two_flavors(h100=8).queue(wl("w1", 8), wl("w2", 8)),
     [("w1", "h100", {}), ("w2", "a100", {})]),
    ("whenCanBorrow MayStopSearch: borrow in the first flavor rather than look further",
     lambda: two_flavors(h100=4, a100=8, cohort=True).queue(wl("w", 8)),
     [("w", "h100", {})]),
    ("whenCanBorrow TryNextFlavor: a later flavor that fits without borrowing wins",
     lambda: two_flavors(h100=4, a100=8, cohort=True, when_can_borrow="TryNextFlavor").queue(wl("w", 8)),
     [("w", "a100", {})]),
    ("whenCanBorrow TryNextFlavor still borrows when no flavor fits without",
     lambda: two_flavors(h100=4, a100=4, cohort=True, when_can_borrow="TryNextFlavor").queue(wl("w", 8)),
     [("w", "h100", {})]),
    ("a gang no flavor's nodes can ever hold does not block the workloads behind it",
     lambda: two_flavors(h100=32, a100=32).queue(wl("huge", 8, pods=3), wl("w", 8)),
     [("w", "h100", {})]),
    ("a flavor whose nodes are full is passed over for one with room",
     lambda: two_flavors(h100=24, a100=8).running(wl("big", 8, pods=2)).queue(wl("w", 8)),
     [("w", "a100", {})]),
    ("partial admission: as many pods as fit, down to min_count",
     lambda: two_flavors(h100=8, a100=0).queue(wl("w", 2, pods=8, min_count=2)),
     [("w", "h100", {"main": 4})]),
    ("partial admission never goes below min_count",
     lambda: two_flavors(h100=2, a100=0).queue(wl("w", 2, pods=8, min_count=2)),
     []),
    ("a gang without min_count is all or nothing",
     lambda: two_flavors(h100=8, a100=0).queue(wl("w", 2, pods=8)),
     []),
    # Kueue's preemption oracle: whenCanPreempt Preempt stops only where someone may be preempted,
    # and fewer pods are admitted only where preemption could not make room for all of them.
    ("whenCanPreempt MayStopSearch: a flavor where nobody may be preempted is passed over",
     lambda: two_flavors(when_can_preempt="MayStopSearch", within="LowerPriority")
     .running(wl("high", 8, priority=10), on=[("main", "h0", 1)]).queue(wl("w", 8, priority=5)),
     [("w", "a100", {})]),
    ("whenCanPreempt MayStopSearch: a flavor where nobody may ever be preempted (Never) is passed over",
     lambda: two_flavors(when_can_preempt="MayStopSearch")
     .running(wl("low", 8), on=[("main", "h0", 1)]).queue(wl("w", 8, priority=5)),
     [("w", "a100", {})]),
    ("whenCanPreempt MayStopSearch: the search stops where preemption would make room",
     lambda: two_flavors(when_can_preempt="MayStopSearch", within="LowerPriority")
     .running(wl("low", 8), on=[("main", "h0", 1)]).queue(wl("w", 8, priority=5)),
     []),
    ("partial admission waits for a preemption that makes room for every pod",
     lambda: two_flavors(h100=8, a100=0, within="LowerPriority")
     .running(wl("low", 4), on=[("main", "h0", 1)]).queue(wl("w", 2, pods=4, min_count=2, priority=5)),
     []),
    ("partial admission where nobody may be preempted",
     lambda: two_flavors(h100=8, a100=0, within="LowerPriority")
     .running(wl("high", 4, priority=10), on=[("main", "h0", 1)]).queue(wl("w", 2, pods=4, min_count=2, priority=5)),
     [("w", "h100", {"main": 2})]),
]


@pytest.mark.parametrize("name, setup, expected", CASES, ids=[c[0] for c in CASES])
def test_flavor_assignment(name, setup, expected):
    assert admitted(setup()) == expected


def test_a_gang_that_waits_for_preemption_rather_than_run_with_fewer_pods_gets_it():
    log = two_flavors(h100=8, a100=0, within="LowerPriority").running(wl("low", 4), on=[("main", "h0", 1)])
    log.queue(wl("w", 2, pods=4, min_count=2, priority=5))
    assert [(o.workload, o.preemptor) for o in decide_pure(decide_preemption, log.state)] == [("low", "w")]


def test_a_preemptor_whose_victims_are_leaving_waits_for_their_room_not_for_another_flavor():
    log = two_flavors(when_can_preempt="MayStopSearch", within="LowerPriority")
    log.running(wl("low", 8), on=[("main", "h0", 1)]).queue(wl("w", 8, priority=5))
    [order] = decide_pure(decide_preemption, log.state)
    log.add(order)
    assert log.phase("low") == "evicting"
    assert admitted(log) == []  # (the oracle finds nobody left to preempt in h100: w is owed that room)


def test_the_first_admission_of_a_multi_flavor_queue_says_which_flavor():
    [decision] = decide_pure(decide_admission, two_flavors(h100=4).queue(wl("w", 8)).state)
    assert decision.flavors == {GPU: "a100"}
    assert decision.reason == "fits nominal quota of q; flavor a100"


def test_placement_uses_only_the_nodes_of_the_admitted_flavor():
    log = two_flavors(h100=0, a100=16).queue(wl("w", 4, pods=2))
    log.add(decide_pure(decide_admission, log.state)[0])
    [placement] = decide_pure(decide_placement, log.state)
    assert {a.node for a in placement.assignments} <= {"a0", "a1"}


def test_a_placement_on_another_flavors_node_is_superseded():
    log = two_flavors(h100=0, a100=16).queue(wl("w", 4))
    log.add(decide_pure(decide_admission, log.state)[0])
    log.place("w", [("main", "h0", 1)])
    assert log.phase("w") == "admitted"
    assert "does not have the admitted flavors' labels" in log.state.workloads["w"].superseded


def test_a_partially_admitted_gang_is_placed_with_the_admitted_count():
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(8)).obj())
    sim.add_nodes([node("n1").gpus(8).obj()])
    sim.submit(wl("w", 2, pods=8, min_count=2))
    sim.run(until_ms=sim.now_ms + 1000)
    w = sim.state.workloads["w"]
    assert w.phase == "running" and w.admission.counts == {"main": 4}
    assert sum(a.count for a in w.placement.assignments) == 4


def test_a_queue_that_borrows_in_its_second_flavor_waits_for_the_borrowers_pass():
    """Both would borrow from the cohort and only one fits: the higher priority goes first, though
    the other's queue lists first a flavor that cannot hold it (it borrows in the next one, so it
    is a borrower: it does not go with the queues that fit their own quota)."""
    train = cluster_queue("train").cohort("all").flavor("h100").gpus(8)
    lender = cluster_queue("lender").cohort("all").flavor("h100").gpus(8)
    adhoc = cluster_queue("adhoc").cohort("all").flavor("t4").gpus(2).flavor("h100").gpus(0)
    log = LogBuilder().configure(contract(train, lender, adhoc).flavor_labels("h100", H100)
                                 .flavor_labels("t4", {"gpu-model": "t4"}))
    log.nodes(node("h0").gpus(8).label("gpu-model", "h100"), node("h1").gpus(8).label("gpu-model", "h100"),
              node("t0").gpus(2).label("gpu-model", "t4"))
    log.queue(wl("big", 6, pods=2, queue="train", priority=100), wl("low", 6, pods=2, queue="adhoc", priority=10))
    assert admitted(log) == [("big", "h100", {})]


def test_a_preemptor_is_admitted_in_the_flavor_its_victims_made_room_in():
    """q's h100 is full and it may borrow by preempting (whenCanPreempt: Preempt stops the search at
    h100): "other", borrowing h100 at a lower priority, is ordered out. Once it has left, h100 fits
    by borrowing and a100 without — whenCanBorrow: TryNextFlavor alone would take a100 and the
    eviction would have been for nothing. The preemptor goes where its room was made (kueue#1332)."""
    q = (cluster_queue("q").cohort("all").flavor("h100").gpus(8).flavor("a100").gpus(8)
         .fungibility("TryNextFlavor", "MayStopSearch").borrow_within_cohort("LowerPriority")
         .preemption(within="LowerPriority", reclaim="Any"))
    lender = cluster_queue("lender").cohort("all").flavor("h100").gpus(8)
    other = cluster_queue("other").cohort("all").flavor("h100").gpus(0)
    sim = Simulation()
    sim.configure(contract(q, lender, other).flavor_labels("h100", H100).flavor_labels("a100", A100).obj())
    sim.add_nodes([node(f"h{i}").gpus(8).label("gpu-model", "h100").obj() for i in range(2)]
                  + [node(f"a{i}").gpus(8).label("gpu-model", "a100").obj() for i in range(2)])
    sim.submit(workload("mine").queue("q").gpus(8).runtime_s(3600).obj())
    sim.submit(workload("borrower").queue("other").priority(0).gpus(8).runtime_s(3600).obj())
    sim.run(until_ms=sim.now_ms + 60_000)
    assert sim.state.workloads["borrower"].phase == "running"
    sim.submit(workload("urgent").queue("q").priority(100).gpus(4).runtime_s(600).obj())
    sim.run(until_ms=sim.now_ms + 120_000)
    urgent = sim.state.workloads["urgent"]
    assert sim.state.workloads["borrower"].evictions and urgent.admission.flavors == {GPU: "h100"}


# --- reservations and backfill ------------------------------------------------------------------


def reserved_cluster() -> LogBuilder:
    """One queue with 32 GPUs on 4 nodes; 3 nodes busy with work that ends at +100 s, +200 s, +300 s."""
    log = LogBuilder().configure(contract(cluster_queue("q").gpus(64)))
    log.nodes(*(node(f"n{i}").gpus(8) for i in range(4)))
    for i, runtime in enumerate((100, 200, 300)):
        log.running(wl(f"busy{i}", 8, runtime_s=runtime), on=[("main", f"n{i}", 1)])
    return log


def test_a_big_gang_blocked_by_capacity_gets_the_nodes_that_free_soonest():
    log = reserved_cluster().queue(wl("big", 8, pods=2, priority=10), wl("small", 4))
    outcomes = {o.wl.spec.workload: o for o, _ in admission_cycle(log.state, index_of(log.state.contract))}
    start, nodes = outcomes["big"].reserved
    assert nodes == ["n0", "n3"] and start == log.state.workloads["busy0"].started_ms + 100_000
    assert "nodes reserved for it" in outcomes["big"].why
    assert outcomes["small"].admission is None  # the free node is kept for the gang


def test_backfill_a_job_that_ends_before_the_reservation_starts():
    log = reserved_cluster().queue(wl("big", 8, pods=2, priority=10), wl("quick", 4, runtime_s=50),
                                   wl("slow", 4, runtime_s=500))
    assert admitted(log) == [("quick", "default", {})]


def test_a_job_admitted_beside_a_reservation_is_placed_off_the_reserved_nodes():
    """Admission keeps n0 and n2 for the gang (they free soonest), so a long job fits only n1: it
    must land there, though best fit alone would take n2 (4 GPUs free, an exact fit) and hold
    the gang back past its expected start. The placement service places it alike."""
    log = LogBuilder().configure(contract(cluster_queue("q").gpus(64)))
    log.nodes(*(node(f"n{i}").gpus(8) for i in range(3)))
    log.running(wl("a", 8, runtime_s=100), on=[("main", "n0", 1)])
    log.running(wl("b", 2, runtime_s=1000), on=[("main", "n1", 1)])
    log.running(wl("c", 4, runtime_s=50), on=[("main", "n2", 1)])
    log.queue(wl("big", 8, pods=2, priority=10), wl("long", 4, runtime_s=5000))
    admission, placement = decide_pure(lambda state: list(admissions_placed(state)), log.state)
    assert admission.workload == "long"
    assert (admission.kept.workload, admission.kept.nodes) == ("big", ["n0", "n2"])
    assert [a.node for a in placement.assignments] == ["n1"]
    log.add(admission, event_id=f"admit/long/{log.offset}")
    assert [[a.node for a in p.assignments] for p in decide_placement(log.state)] == [["n1"]]
    # Once the gang is admitted, nothing is kept for it any more.
    log.admit("big")
    assert [[a.node for a in p.assignments] for p in decide_placement(log.state)][0] == ["n2"]


def test_without_a_blocked_gang_small_jobs_use_the_free_node():
    log = reserved_cluster().queue(wl("small", 4), wl("small2", 4))
    assert [w for w, _, _ in admitted(log)] == ["small", "small2"]


# --- a gang only a busy flavor can take ----------------------------------------------------------


@pytest.mark.parametrize("big_quota, told", [(16, "over_nominal_quota"), (32, "reservation_held")])
def test_a_gang_only_a_busy_flavor_can_take_waits_for_it_and_is_never_called_never_placeable(big_quota, told):
    """Flavors big (2 nodes × 8 GPUs) then small (4 × 4): a gang of 2 × 8 GPUs fits only big, which
    `busy` holds (its quota when big has 16 GPUs of quota, its nodes when it has 32). It waits for big
    with a forecast; small's "no node could ever hold it" is not what it is told, so it keeps its
    reservation and its place in a StrictFIFO queue."""
    import msgspec

    from gangway.read.explain import explain
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").flavor("big").gpus(big_quota).flavor("small").gpus(16))
                  .flavor_labels("big", {"pool": "big"}).flavor_labels("small", {"pool": "small"}).obj())
    sim.add_nodes([node(f"b{i}").gpus(8).label("pool", "big").obj() for i in range(2)]
                  + [node(f"s{i}").gpus(4).label("pool", "small").obj() for i in range(4)])
    for name in ("busy", "next"):
        sim.submit(msgspec.structs.replace(workload(name).queue("q").gpus(8, pods=2).obj(), runtime_ms=600_000))
        sim.run(until_ms=sim.now_ms + 1000, rounds_max=50)
    assert sim.state.workloads["next"].phase == "pending"
    lines = explain(sim.log, "next")
    assert line_of(lines, "now pending").startswith(f"now pending ({told})"), lines  # on the old code: no_matching_nodes
    assert line_of(lines, "estimated start").startswith("estimated start: 20") and "in 59" in line_of(lines, "estimated"), lines
    sim.run(until_ms=sim.now_ms + 700_000, rounds_max=500)
    assert {a.node for a in sim.state.workloads["next"].placement.assignments} == {"b0", "b1"}


def test_a_gang_no_flavor_could_ever_take_is_told_its_first_flavors_reason():
    """Flavor big has zones of 2 nodes × 8 GPUs, small no zone label at all. A gang of 3 × 8 GPUs
    requiring one zone fits neither, ever: it is told big's reason (no zone holds 3 of its pods),
    not small's ("no node carries the label"), also while big's quota is taken (only small is tried)."""
    import msgspec

    from gangway.events.catalogue import TopologyRequest
    from gangway.read.explain import explain
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").flavor("big").gpus(32).flavor("small").gpus(32))
                  .flavor_labels("big", {"pool": "big"}).flavor_labels("small", {"pool": "small"}).obj())
    sim.add_nodes([node(f"b{i}").gpus(8).label("pool", "big").label("zone", f"z{i // 2}").obj() for i in range(4)]
                  + [node(f"s{i}").gpus(8).label("pool", "small").obj() for i in range(4)])
    sim.submit(msgspec.structs.replace(workload("busy").queue("q").gpus(8, pods=2).obj(), runtime_ms=600_000))
    sim.run(until_ms=sim.now_ms + 1000, rounds_max=50)
    wide = workload("wide").queue("q").gpus(8, pods=3).obj()
    sets = [msgspec.structs.replace(ps, topology=TopologyRequest(required="zone")) for ps in wide.pod_sets]
    sim.submit(msgspec.structs.replace(wide, pod_sets=sets))
    sim.run(until_ms=sim.now_ms + 1000, rounds_max=50)
    told = line_of(explain(sim.log, "wide"), "now pending")
    assert told.startswith("now pending (topology_unsatisfiable)") and "zone=z0, holds 2" in told, told
