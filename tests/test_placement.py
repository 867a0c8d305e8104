"""Placement policy: a gang lands whole on free capacity, best fit first, ties by node name.

Each case folds a log of admitted workloads and runs ``decide_placement``; the table gives the
placements made, in order, as {workload: [(pod set, node, count), ...]}.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from builders import LogBuilder, cluster_queue, contract, decide_pure, node, workload
from gangway.events import catalogue as ev
from gangway.events.reasons import ReasonCode
from gangway.events.resources import GPU
from gangway.services.placement.policy import as_free, decide_placement, place_gang

Setup = Callable[[], LogBuilder]
CONTRACT = contract(cluster_queue("q").gpus(1000).cpu(10_000).memory_gi(100_000),
                    cluster_queue("b").gpus(1000).cpu(10_000).memory_gi(100_000))


def cluster(*nodes) -> LogBuilder:
    return LogBuilder().configure(CONTRACT).nodes(*nodes)


def gpu_nodes(*gpus: int) -> LogBuilder:
    return cluster(*(node(f"n{i + 1}").gpus(g).cpu(64).memory_gi(512) for i, g in enumerate(gpus)))


def wl(name: str, gpus: float = 0, pods: int = 1, cpu: float = 0, memory_gi: float = 0, queue: str = "q"):
    return workload(name).queue(queue).pod_set("main", count=pods, gpus=gpus, cpu=cpu, memory_gi=memory_gi)


CASES: list[tuple[str, Setup, dict[str, list[tuple[str, str, int]]]]] = [
    ("best fit fills a partly used node first when no bigger shape was seen",
     lambda: gpu_nodes(8, 8).running(wl("x", 2, pods=2), on=[("main", "n2", 2)]).admitted(wl("w", 2)),
     {"w": [("main", "n2", 1)]}),
    ("a single GPU pod keeps a partly used node's room whole for a bigger shape seen before",
     lambda: gpu_nodes(8, 8).running(wl("x", 4), on=[("main", "n2", 1)]).admitted(wl("w", 2)),
     {"w": [("main", "n1", 1)]}),
    ("best fit prefers the node with the least room that still fits",
     lambda: gpu_nodes(8, 8, 8).running(wl("x", 6), on=[("main", "n1", 1)]).running(wl("y", 4), on=[("main", "n2", 1)])
     .admitted(wl("w", 3)),
     {"w": [("main", "n2", 1)]}),
    ("ties break by node name",
     lambda: gpu_nodes(8, 8, 8).admitted(wl("w", 2)),
     {"w": [("main", "n1", 1)]}),
    ("pods of a pod set fill one node before the next",
     lambda: gpu_nodes(8, 8).admitted(wl("w", 2, pods=4)),
     {"w": [("main", "n1", 4)]}),
    ("a gang spreads over nodes when it must",
     lambda: gpu_nodes(8, 8).admitted(wl("w", 6, pods=2)),
     {"w": [("main", "n1", 1), ("main", "n2", 1)]}),
    ("a gang that does not fit entirely is not placed at all",
     lambda: gpu_nodes(8, 8).admitted(wl("w", 8, pods=3)),
     {}),
    ("a gang that does not fit waits, and the next one is placed",
     lambda: gpu_nodes(8, 8).admitted(wl("big", 8, pods=3), wl("small", 8)),
     {"small": [("main", "n1", 1)]}),
    ("earlier admissions are placed first and take their room",
     lambda: gpu_nodes(8).admitted(wl("first", 6), wl("second", 4)),
     {"first": [("main", "n1", 1)]}),
    ("several workloads are placed in one cycle on what the previous ones left",
     lambda: gpu_nodes(8, 8).admitted(wl("w1", 4), wl("w2", 6), wl("w3", 4)),
     {"w1": [("main", "n1", 1)], "w2": [("main", "n2", 1)], "w3": [("main", "n1", 1)]}),
    ("every pod set of a gang is placed",
     lambda: gpu_nodes(8, 8).admitted(workload("w").queue("q").pod_set("driver", 1, cpu=8)
                                      .pod_set("workers", 2, gpus=8)),
     {"w": [("driver", "n1", 1), ("workers", "n1", 1), ("workers", "n2", 1)]}),
    ("pod sets are placed in order, each on what the previous left",
     lambda: gpu_nodes(8, 4).admitted(workload("w").queue("q").pod_set("a", 1, gpus=4).pod_set("b", 1, gpus=8)),
     {"w": [("a", "n2", 1), ("b", "n1", 1)]}),
    ("a pod set that does not fit after the others leaves the whole gang unplaced",
     lambda: gpu_nodes(8).admitted(workload("w").queue("q").pod_set("a", 1, gpus=4).pod_set("b", 1, gpus=8)),
     {}),
    ("cpu counts as well as GPUs",
     lambda: cluster(node("n1").gpus(8).cpu(4), node("n2").gpus(8).cpu(64)).admitted(wl("w", 1, cpu=8)),
     {"w": [("main", "n2", 1)]}),
    ("memory counts as well as GPUs",
     lambda: cluster(node("n1").gpus(8).cpu(64).memory_gi(64), node("n2").gpus(8).cpu(64).memory_gi(512))
     .admitted(wl("w", 1, memory_gi=128)),
     {"w": [("main", "n2", 1)]}),
    ("a node lacking a resource the pod asks for is not used",
     lambda: cluster(node("n1").gpus(8), node("n2").gpus(8).cpu(8)).admitted(wl("w", 1, cpu=1)),
     {"w": [("main", "n2", 1)]}),
    ("nodes without GPUs are not used for GPU pods",
     lambda: cluster(node("cpu-only").cpu(256).memory_gi(1024), node("gpu").gpus(8).cpu(64).memory_gi(512))
     .admitted(wl("w", 1, cpu=2)),
     {"w": [("main", "gpu", 1)]}),
    ("CPU pods best-fit by free CPU",
     lambda: cluster(node("big").cpu(64), node("small").cpu(16)).admitted(wl("w", cpu=8)),
     {"w": [("main", "small", 1)]}),
    ("pods asking for nothing (BestEffort) all go to the first node: nothing bounds them",
     lambda: gpu_nodes(8, 8).admitted(workload("w").queue("q").pod_set("main", 3)),
     {"w": [("main", "n1", 3)]}),
    ("pending, placed and running workloads are left alone",
     lambda: gpu_nodes(8, 8).running(wl("r", 2)).admitted(wl("a", 2)).place("a").queue(wl("p", 2)),
     {}),
    ("the room a preemptor waits for while its victims exit is kept for it",
     lambda: gpu_nodes(8, 4).running(wl("victim", 4), on=[("main", "n1", 1)])
     .queue(workload("preemptor").queue("q").priority(10).gpus(8)).order_eviction("victim", "preemptor")
     .admitted(wl("w", 4, queue="b")),
     {"w": [("main", "n2", 1)]}),
    ("resources held by an evicting workload are not free",
     lambda: gpu_nodes(8).running(wl("v", 6)).order_eviction("v", "x").admitted(wl("w", 4, queue="b")),
     {}),
]


@pytest.mark.parametrize(("setup", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_placement(setup: Setup, expected: dict):
    state = setup().state
    decisions = decide_pure(decide_placement, state)
    got = {d.workload: [(a.pod_set, a.node, a.count) for a in d.assignments] for d in decisions}
    assert got == expected
    assert list(got) == list(expected)
    assert all(d.based_on == state.offset for d in decisions)


def test_placement_decision_names_its_nodes():
    log = gpu_nodes(8, 8).admitted(wl("w", 6, pods=2))
    assert decide_pure(decide_placement, log.state) == [ev.PlacementDecided(
        workload="w", assignments=[ev.PodAssignment(pod_set="main", node="n1", count=1, gpus=[0, 1, 2, 3, 4, 5]),
                                   ev.PodAssignment(pod_set="main", node="n2", count=1, gpus=[0, 1, 2, 3, 4, 5])],
        based_on=log.offset, reason="best fit on 2 node(s): n1, n2",
        reason_code=ReasonCode.BEST_FIT, reason_params={"node_count": 2, "nodes": "n1, n2"},
        fragmentation=ev.Fragmentation(gpus_free=4, largest_island=2, largest_node=2, largest_rack=0,
                                       largest_block=0, fits={"1": 4, "2": 2, "4": 0, "8": 0}),
    )]


def test_every_placement_of_a_cycle_holds_when_folded_in_order():
    log = gpu_nodes(8, 8, 4).admitted(wl("w1", 4), wl("w2", 2, pods=3), wl("w3", 4), wl("w4", 4))
    decisions = decide_pure(decide_placement, log.state)
    for d in decisions:
        log.add(d)
    assert (log.state.superseded, len(decisions)) == (0, 4)
    assert {n: s.free[GPU] for n, s in log.state.nodes.items()} == {"n1": 2000, "n2": 0, "n3": 0}


def test_place_gang_leaves_free_untouched_when_the_gang_does_not_fit():
    free = as_free({"n1": {GPU: 8000}, "n2": {GPU: 2000}})
    pod_sets = [ev.PodSet(name="a", count=1, resources={GPU: 4000}),
                ev.PodSet(name="b", count=1, resources={GPU: 8000})]
    assert place_gang(free, pod_sets) is None
    assert free == as_free({"n1": {GPU: 8000}, "n2": {GPU: 2000}})


def test_place_gang_takes_what_it_places():
    free = as_free({"n1": {GPU: 8000}, "n2": {GPU: 4000}})
    assignments = place_gang(free, [ev.PodSet(name="a", count=3, resources={GPU: 4000})])
    assert [(a.node, a.count) for a in assignments] == [("n2", 1), ("n1", 2)]
    assert free == as_free({"n1": {GPU: 0}, "n2": {GPU: 0}})


def test_a_pod_without_gpus_keeps_off_the_cpu_that_free_gpus_need():
    log = cluster(node("gpu").gpus(8).cpu(16).memory_gi(512), node("cpu").cpu(64).memory_gi(512)).admitted(wl("w", cpu=8))
    [d] = decide_pure(decide_placement, log.state)
    assert [a.node for a in d.assignments] == ["cpu"]
