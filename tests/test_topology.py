"""Topology-aware placement: required and preferred levels, slices, NVLink islands, GPU by GPU.

Each case folds a log of admitted workloads and runs ``decide_placement``; the table gives the
placements made as {workload: [(pod set, node, count, GPU indexes), ...]}.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from builders import LogBuilder, cluster_queue, contract, decide_pure, node, workload
from gangway.events import catalogue as ev
from gangway.events import freeindex
from gangway.events.resources import GPU
from gangway.services.binder.cluster import ClusterFileError, load_nodes
from gangway.services.placement.policy import as_free, decide_placement, free_capacity, place_gang
from gangway.services.placement.topology import BLOCK, HOSTNAME, ISLAND, RACK, domains, fallbacks

Setup = Callable[[], LogBuilder]
CONTRACT = contract(cluster_queue("q").gpus(10_000).cpu(100_000).memory_gi(100_000))
ALL8 = list(range(8))


def cluster(*nodes) -> LogBuilder:
    return LogBuilder().configure(CONTRACT).nodes(*nodes)


def racks(*layout: tuple[str, str, int], islands: tuple[int, ...] = (8,)) -> LogBuilder:
    """Nodes n1, n2, … of 8 GPUs: ``layout`` lists (block, rack, nodes in it)."""
    nodes, i = [], 0
    for block, rack, count in layout:
        for _ in range(count):
            i += 1
            nodes.append(node(f"n{i}").gpus(8).cpu(96).memory_gi(512).at(block, rack).islands(*islands))
    return cluster(*nodes)


def gang(name: str, pods: int, gpus: float, **topology) -> ev.WorkloadQueued:
    request = ev.TopologyRequest(**topology) if topology else None
    return workload(name).queue("q").pod_set("main", count=pods, gpus=gpus, topology=request).obj()


def busy(name: str, gpus: float, on: str) -> tuple[ev.WorkloadQueued, list]:
    return workload(name).queue("q").gpus(gpus).obj(), [("main", on, 1)]


def with_running(log: LogBuilder, *running: tuple[ev.WorkloadQueued, list]) -> LogBuilder:
    for spec, on in running:
        log.running(spec, on=on)
    return log


CASES: list[tuple[str, Setup, dict]] = [
    ("without a request a gang spans racks by best fit",
     lambda: with_running(racks(("b1", "r1", 2), ("b1", "r2", 2)), busy("x", 4, "n1")).admitted(gang("w", 2, 8)),
     {"w": [("main", "n2", 1, ALL8), ("main", "n3", 1, ALL8)]}),
    ("a required rack keeps the pod set inside one rack",
     lambda: with_running(racks(("b1", "r1", 2), ("b1", "r2", 2)), busy("x", 4, "n1"))
     .admitted(gang("w", 2, 8, required=RACK)),
     {"w": [("main", "n3", 1, ALL8), ("main", "n4", 1, ALL8)]}),
    ("a required rack that no rack can hold leaves the gang unplaced",
     lambda: racks(("b1", "r1", 2), ("b1", "r2", 2)).admitted(gang("w", 3, 8, required=RACK)),
     {}),
    ("a preferred rack falls back to one block when no rack holds the pod set",
     lambda: racks(("b1", "r1", 1), ("b2", "r2", 2), ("b2", "r3", 1)).admitted(gang("w", 3, 8, preferred=RACK)),
     {"w": [("main", "n2", 1, ALL8), ("main", "n3", 1, ALL8), ("main", "n4", 1, ALL8)]}),
    ("a preferred rack falls back to anywhere when no block holds it either",
     lambda: racks(("b1", "r1", 1), ("b2", "r2", 1)).admitted(gang("w", 2, 8, preferred=RACK)),
     {"w": [("main", "n1", 1, ALL8), ("main", "n2", 1, ALL8)]}),
    ("a preferred rack no block holds spans as few blocks as hold it, the roomiest first",
     lambda: racks(("b1", "r1", 1), ("b2", "r2", 2), ("b3", "r3", 2), ("b4", "r4", 1))
     .admitted(gang("w", 4, 8, preferred=RACK)),
     {"w": [("main", "n2", 1, ALL8), ("main", "n3", 1, ALL8), ("main", "n4", 1, ALL8), ("main", "n5", 1, ALL8)]}),
    ("best fit on domains: the rack with the least room that holds the pod set",
     lambda: racks(("b1", "r1", 3), ("b1", "r2", 2)).admitted(gang("w", 2, 8, required=RACK)),
     {"w": [("main", "n4", 1, ALL8), ("main", "n5", 1, ALL8)]}),
    ("a required block: the 256-GPU job lands inside one block",
     lambda: racks(("b1", "r1", 16), ("b1", "r2", 16), ("b2", "r3", 16), ("b2", "r4", 20))
     .admitted(gang("w", 32, 8, required=BLOCK)),
     {"w": [("main", n, 1, ALL8) for n in sorted(f"n{i}" for i in range(1, 33))]}),
    ("a required block that no block holds: the 256-GPU job waits",
     lambda: with_running(racks(("b1", "r1", 32), ("b2", "r2", 32)), busy("x", 1, "n1"), busy("y", 1, "n33"))
     .admitted(gang("w", 32, 8, required=BLOCK)),
     {}),
    ("a required node (hostname) keeps every pod on one node",
     lambda: with_running(racks(("b1", "r1", 2)), busy("x", 6, "n1")).admitted(gang("w", 4, 2, required=HOSTNAME)),
     {"w": [("main", "n2", 4, ALL8)]}),
    ("slices: every slice of two pods inside one node, never split over the half-used one",
     lambda: with_running(racks(("b1", "r1", 3)), busy("x", 4, "n1"))
     .admitted(gang("w", 4, 4, slice_required=HOSTNAME, slice_size=2)),
     {"w": [("main", "n2", 2, ALL8), ("main", "n3", 2, ALL8)]}),
    ("slices inside a required block: each slice on one node of that block",
     lambda: racks(("b1", "r1", 1), ("b2", "r2", 2))
     .admitted(gang("w", 4, 4, required=BLOCK, slice_required=HOSTNAME, slice_size=2)),
     {"w": [("main", "n2", 2, ALL8), ("main", "n3", 2, ALL8)]}),
    ("a required NVLink island keeps the gang inside one island",
     lambda: with_running(racks(("b1", "r1", 1), islands=(4, 4)), busy("x", 2, "n1"))
     .admitted(gang("w", 4, 1, required=ISLAND)),
     {"w": [("main", "n1", 4, [4, 5, 6, 7])]}),
    ("a required NVLink island prefers the island with the least room that holds the gang",
     lambda: with_running(racks(("b1", "r1", 2), islands=(4, 4)), busy("x", 1, "n2"))
     .admitted(gang("w", 3, 1, required=ISLAND)),
     {"w": [("main", "n2", 3, [1, 2, 3])]}),
    ("a required NVLink island larger than any island waits",
     lambda: racks(("b1", "r1", 2), islands=(4, 4)).admitted(gang("w", 6, 1, required=ISLAND)),
     {}),
    ("PCIe-only nodes have no island to offer",
     lambda: cluster(node("p1").gpus(8).cpu(96).memory_gi(512)).admitted(gang("w", 2, 1, required=ISLAND)),
     {}),
    ("a preferred island falls back to spanning islands",
     lambda: racks(("b1", "r1", 1), islands=(4, 4)).admitted(gang("w", 6, 1, preferred=ISLAND)),
     {"w": [("main", "n1", 6, [0, 1, 2, 3, 4, 5])]}),
    ("whole GPUs come from the fullest island that still holds them",
     lambda: with_running(racks(("b1", "r1", 1), islands=(4, 4)), busy("x", 2, "n1")).admitted(gang("w", 1, 2)),
     {"w": [("main", "n1", 1, [2, 3])]}),
    ("sharing pods share one GPU before breaking another",
     lambda: racks(("b1", "r1", 1)).admitted(gang("a", 1, 0.5), gang("b", 1, 0.25), gang("c", 1, 0.5)),
     {"a": [("main", "n1", 1, [0])], "b": [("main", "n1", 1, [0])], "c": [("main", "n1", 1, [1])]}),
    ("a sharing pod does not fit the remains of several GPUs added up",
     lambda: with_running(cluster(node("n1").gpus(2).cpu(8).memory_gi(64)),
                          (workload("x").queue("q").pod_set("main", 2, gpus=0.6).obj(), [("main", "n1", 2)]))
     .admitted(gang("w", 1, 0.5)),
     {}),
]


@pytest.mark.parametrize(("setup", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_topology_placement(setup: Setup, expected: dict):
    log = setup()
    decisions = decide_pure(decide_placement, log.state)
    got = {d.workload: [(a.pod_set, a.node, a.count, a.gpus) for a in d.assignments] for d in decisions}
    assert got == expected
    for d in decisions:
        log.add(d)
    assert log.state.superseded == 0, "every placement holds where it lands"


def test_domains_follow_a_node_moved_to_another_rack_between_cycles():
    """The domains of a level are kept from cycle to cycle while the nodes are the same; a node
    observed again with another rack's label is found in that rack at the next cycle."""
    log = racks(("b1", "r1", 2), ("b1", "r2", 1)).admitted(gang("w", 2, 8, required=RACK))
    [d] = decide_pure(decide_placement, log.state)
    assert [a.node for a in d.assignments] == ["n1", "n2"]  # r1: the only rack holding two pods
    log.nodes(node("n2").gpus(8).cpu(96).memory_gi(512).at("b1", "r2"))
    [d] = decide_pure(decide_placement, log.state)
    assert [a.node for a in d.assignments] == ["n2", "n3"]  # now r2's; r1 holds one pod


def test_slices_that_no_node_holds_leave_the_gang_unplaced():
    log = with_running(racks(("b1", "r1", 3)), busy("x", 6, "n1"), busy("y", 6, "n2"))
    log.admitted(gang("w", 4, 4, slice_required=HOSTNAME, slice_size=2))
    assert decide_pure(decide_placement, log.state) == []


def test_the_placement_reason_names_the_domain():
    log = racks(("b1", "r1", 1), ("b1", "r2", 2)).admitted(gang("w", 2, 8, required=RACK))
    [d] = decide_pure(decide_placement, log.state)
    assert d.reason == "best fit on 2 node(s): n2, n3 (main in cloud.provider.com/topology-rack=r2)"


def test_the_placement_reason_names_the_domains_a_preferred_level_spans():
    log = racks(("b1", "r1", 1), ("b2", "r2", 2), ("b3", "r3", 2)).admitted(gang("w", 4, 8, preferred=RACK))
    [d] = decide_pure(decide_placement, log.state)
    assert d.reason.endswith("(main over 2 domains of cloud.provider.com/topology-block (b2, b3))")


def test_place_gang_uses_only_the_nodes_it_is_given():
    log = racks(("b1", "r1", 3))
    free = free_capacity(log.state)
    assignments = place_gang(free, [ev.PodSet(name="a", count=2, resources={GPU: 8000})], nodes={"n2", "n3"})
    assert [(a.node, a.count) for a in assignments] == [("n2", 1), ("n3", 1)]
    assert place_gang(free, [ev.PodSet(name="a", count=2, resources={GPU: 8000})], nodes={"n2", "n3"}) is None


def test_place_gang_with_plain_resources_has_no_per_gpu_view():
    free = as_free({"n1": {GPU: 2000}})
    assert place_gang(free, [ev.PodSet(name="a", count=4, resources={GPU: 500})]) is not None


def test_the_fold_takes_the_named_gpus_and_gives_them_back():
    log = racks(("b1", "r1", 1), islands=(4, 4)).admitted(gang("w", 1, 3))
    [d] = decide_pure(decide_placement, log.state)
    log.add(d)
    assert d.assignments[0].gpus == [0, 1, 2]
    assert log.state.nodes["n1"].gpus == [0, 0, 0] + [1000] * 5
    log.bind("w").finish("w")
    assert log.state.nodes["n1"].gpus == [1000] * 8


def test_a_placement_naming_a_taken_gpu_is_superseded():
    log = with_running(racks(("b1", "r1", 1)), busy("x", 1, "n1")).admitted(gang("w", 1, 1))
    taken = log.state.nodes["n1"].gpus.index(0)
    log.add(ev.PlacementDecided(workload="w", based_on=log.offset,
                                assignments=[ev.PodAssignment(pod_set="main", node="n1", count=1, gpus=[taken])]))
    assert log.phase("w") == "admitted" and log.state.superseded == 1
    assert "no longer fit the GPUs" in log.state.workloads["w"].superseded


def test_a_node_observed_again_keeps_what_its_pods_hold_gpu_by_gpu():
    log = with_running(racks(("b1", "r1", 1), islands=(4, 4)), busy("x", 3, "n1"))
    before = list(log.state.nodes["n1"].gpus)
    log.nodes(node("n1").gpus(8).cpu(96).memory_gi(512).at("b1", "r1").islands(4, 4))
    assert log.state.nodes["n1"].gpus == before and sum(before) == 5000


def test_domains_group_nodes_by_the_level_and_every_coarser_one():
    nodes = [("a", {BLOCK: "b1", RACK: "r1"}), ("b", {BLOCK: "b2", RACK: "r1"}), ("c", {BLOCK: "b1", RACK: "r1"}),
             ("d", {BLOCK: "b1"})]
    assert domains(nodes, RACK) == {("b1", "r1"): ["a", "c"], ("b2", "r1"): ["b"]}
    # The node level needs only the node: d, which has no rack, is a node all the same.
    assert domains(nodes, HOSTNAME) == {("", n): [n] for n in "abcd"}
    assert fallbacks(RACK) == [RACK, BLOCK, None]
    # Under a Topology, a level's domain is the values of it and every coarser level; a node
    # lacking one of them is in no domain of that level.
    topo = ("zone", RACK, HOSTNAME)
    labelled = [("a", {"zone": "z1", RACK: "r1"}), ("b", {"zone": "z2", RACK: "r1"}), ("c", {RACK: "r1"})]
    assert domains(labelled, RACK, topo) == {("z1", "r1"): ["a"], ("z2", "r1"): ["b"]}
    assert fallbacks(RACK, topo) == [RACK, "zone", None]
    assert fallbacks(HOSTNAME, topo) == [HOSTNAME, RACK, "zone", None]
    # Without a Topology a request names a label: the nodes that carry it are its domains.
    assert domains(labelled, "zone") == {("zone", "z1"): ["a"], ("zone", "z2"): ["b"]}
    assert fallbacks("zone") == ["zone", None]


CLUSTER_YAML = """
apiVersion: v1
kind: List
items:
- kind: Node
  metadata:
    name: {name}
    labels: {{cloud.provider.com/topology-rack: r1}}
    annotations: {{gangway.io/nvlink-islands: "{islands}"}}
  status: {{allocatable: {{nvidia.com/gpu: "8", cpu: "96"}}}}
"""


def test_the_cluster_file_reads_nvlink_islands_from_an_annotation():
    [n] = load_nodes(CLUSTER_YAML.format(name="n1", islands="4,4"))
    assert (n.islands, n.labels) == ([4, 4], {RACK: "r1"})
    with pytest.raises(ClusterFileError, match="adds up to 6 GPUs, not the node.s 8"):
        load_nodes(CLUSTER_YAML.format(name="n1", islands="4,2"))
    # a device gone unhealthy: 7 allocatable of the 8 the islands (and the capacity) count — the node
    # stays, its islands unknown (which GPU is gone is not said); more than its capacity is still wrong
    sick = CLUSTER_YAML.format(name="n1", islands="4,4").replace(
        'allocatable: {nvidia.com/gpu: "8", cpu: "96"}', 'allocatable: {nvidia.com/gpu: "7", cpu: "96"}, '
        'capacity: {nvidia.com/gpu: "8", cpu: "96"}')
    [n] = load_nodes(sick)
    assert (n.islands, n.allocatable["nvidia.com/gpu"]) == ([], 7000)
    with pytest.raises(ClusterFileError, match="adds up to 8 GPUs, not the node.s 7"):
        load_nodes(sick.replace('capacity: {nvidia.com/gpu: "8"', 'capacity: {nvidia.com/gpu: "7"'))


def test_the_fragmentation_measure_follows_every_placement_and_release():
    log = with_running(racks(("b1", "r1", 1), ("b1", "r2", 1), ("b2", "r3", 1), islands=(4, 4)),
                       busy("x", 1, "n1"), busy("y", 4, "n2"))
    f = freeindex.measure(log.state.free_index)
    assert (f.gpus_free, f.largest_island, f.largest_node, f.largest_rack, f.largest_block) == (19, 4, 8, 8, 11)
    assert f.fits == {"1": 19, "2": 9, "4": 4, "8": 0}
    log.finish("x")
    assert freeindex.measure(log.state.free_index).fits == {"1": 20, "2": 10, "4": 5, "8": 0}


def test_status_shows_the_fragmentation():
    from rich.console import Console
    from gangway.read.reports import status_tables
    log = with_running(racks(("b1", "r1", 2)), busy("x", 2, "n1"))
    console = Console(width=200, record=True)
    for table in status_tables(log.state):
        console.print(table)
    text = console.export_text()
    assert "Free GPUs in one piece" in text and "14" in text


def test_the_placement_benchmark_runs_small_and_places_every_shape():
    from gangway.benchmarks import placement_speed
    result = placement_speed.bench_placement(gpus=1024, gangs=120)
    assert result["nodes"] == 128
    assert all(s["placed"] > 0 for s in result["by_shape"].values() if s["tried"])
    assert "every gang" in placement_speed.table(result)


def test_a_preferred_level_whose_slices_fail_halfway_leaves_no_trace_in_free():
    log = with_running(racks(("b1", "r1", 2), ("b1", "r2", 1)), busy("x", 4, "n3"))
    free = free_capacity(log.state)
    before = {n: list(r.gpus) for n, r in free.items()}
    # Slices of 2 pods × 4 GPUs per node: n1 and n2 hold one slice each, n3 none; 3 slices never fit.
    pod_set = ev.PodSet(name="a", count=6, resources={GPU: 4000},
                        topology=ev.TopologyRequest(preferred=RACK, slice_required=HOSTNAME, slice_size=2))
    assert place_gang(free, [pod_set]) is None
    assert {n: list(r.gpus) for n, r in free.items()} == before
