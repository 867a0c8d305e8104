"""A node's pod count: Kubernetes nodes report ``pods`` in their allocatable (the kubelet's
max-pods, 110 by default) and the kubelet refuses a pod beyond it, whatever the pod asks. gangway
counted it for no pod, so many small pods could be placed on one node past it (a stranger running
small-pod jobs on real nodes would see pods fail with OutOfpods). Now each pod takes one of its
node's ``pods``, in placement, in the fold's check of a placement and in what the node has free; a
node without ``pods`` in its allocatable (a simulated one) takes any number."""

from __future__ import annotations

from gangway.events import catalogue as ev
from gangway.events.reasons import C
from gangway.read.explain import pending_report
from gangway.events.resources import UNBOUNDED, pods_that_fit
from gangway.sim import Simulation
from tests.builders import LogBuilder, cluster_queue, contract, workload
from tests.test_pods_quota import job, run


def small_nodes(n: int, max_pods: int | None) -> list[ev.NodeObserved]:
    pods = {} if max_pods is None else {"pods": max_pods * 1000}
    return [ev.NodeObserved(node=f"c{i}", allocatable={"cpu": 64_000, "memory": 256 * 2**30 * 1000, **pods})
            for i in range(n)]


def placed(sim: Simulation, name: str) -> dict[str, int]:
    [p] = [e.data for e in sim.log if isinstance(e.data, ev.PlacementDecided) and e.data.workload == name]
    out: dict[str, int] = {}
    for a in p.assignments:
        out[a.node] = out.get(a.node, 0) + a.count
    return out


def started(sim: Simulation, name: str) -> int:
    return next(e.time_ms for e in sim.log if isinstance(e.data, ev.PlacementDecided) and e.data.workload == name)


def test_pods_that_fit_counts_the_nodes_pods():
    assert pods_that_fit({"cpu": 64_000, "pods": 3000}, {"cpu": 100}) == 3
    assert pods_that_fit({"cpu": 200, "pods": 3000}, {"cpu": 100}) == 2  # (cpu binds first)
    assert pods_that_fit({"cpu": 64_000, "pods": 0}, {"cpu": 100}) == 0
    assert pods_that_fit({"cpu": 64_000, "pods": -1000}, {"cpu": 100}) == 0  # (a node over its count)
    assert pods_that_fit({"pods": 2000}, {}) == 2  # (pods asking for nothing: the count alone)
    assert pods_that_fit({"cpu": 64_000}, {"cpu": 100}) == 640  # (no pods allocatable: not bounded by it)
    assert pods_that_fit({"cpu": 64_000}, {}) == UNBOUNDED


def test_a_gang_of_small_pods_spreads_past_a_nodes_pod_count():
    """Five 100m pods on nodes taking 3 pods each: 3 + 2, not 5 on one node; then a 2-pod job finds one
    pod's room left and waits, whole, for the first to end. The log replays."""
    sim = run(job("five", 5, "b"), job("two", 2, "b"), nodes=small_nodes(2, 3))
    assert sorted(placed(sim, "b/five").values()) == [2, 3]
    assert started(sim, "b/two") >= started(sim, "b/five") + 600_000, "7 pods ran on 6 pods' room"
    assert sorted(placed(sim, "b/two").values()) in ([2], [1, 1])


def test_without_a_pod_count_a_node_takes_any_number():
    sim = run(job("five", 5, "b"), job("two", 2, "b"), nodes=small_nodes(2, None))
    assert started(sim, "b/two") == started(sim, "b/five")
    assert sum(placed(sim, "b/five").values()) == 5


def test_pods_asking_for_nothing_are_bounded_by_the_pod_count_too():
    sim = run(job("e3", 3, "b", resources={}), job("e2", 2, "b", resources={}), nodes=small_nodes(2, 2))
    assert sorted(placed(sim, "b/e3").values()) == [1, 2]
    assert started(sim, "b/e2") >= started(sim, "b/e3") + 600_000


def test_a_gang_larger_than_every_nodes_pod_count_together_is_told_it_never_fits():
    """Seven pods on two nodes of 3 pods each can never run: said, not left waiting as no_capacity."""
    sim = run(job("seven", 7, "b"), nodes=small_nodes(2, 3))
    report = pending_report(sim.state)["b/seven"]
    assert (report.code, report.eta_ms) == ("no_matching_nodes", None), report
    assert report.reason.endswith("the nodes it may use hold 6 of its 7 pods even with nothing running, c0, c1 held to "
                                  "their pods allocatable (the kubelet's max-pods)"), report.reason
    assert not any(isinstance(e.data, ev.PlacementDecided) for e in sim.log)


def test_the_fold_refuses_a_placement_past_a_nodes_pod_count():
    """A placement decided elsewhere (another replica, an older code) putting 4 pods on a node that
    takes 3 is refused by the fold, as one beyond its cpu would be."""
    def n(name: str, max_pods: int) -> ev.NodeObserved:
        return ev.NodeObserved(node=name, allocatable={"cpu": 64_000, "pods": max_pods * 1000})
    log = LogBuilder().configure(contract(cluster_queue("q").cpu(64))).nodes(n("n0", 3))
    log.queue(workload("w").queue("q").pod_set(count=4, cpu=1)).admit("w")
    log.place("w", [("main", "n0", 4)])
    wl = log.state.workloads["w"]
    assert wl.phase == "admitted" and wl.superseded_code == C.PODS_NO_LONGER_FIT, wl.superseded
    log.nodes(n("n1", 3))
    log.place("w", [("main", "n0", 3), ("main", "n1", 1)])
    assert log.state.workloads["w"].phase == "placed"
    assert log.state.nodes["n0"].free["pods"] == 0 and log.state.nodes["n1"].free["pods"] == 2000
    # the node observed again with room for 2 pods (a pod of another scheduler came): what runs there is taken out
    log.nodes(n("n0", 2))
    assert log.state.nodes["n0"].free["pods"] == -1000
    log.bind("w").finish("w")
    assert log.state.nodes["n0"].free["pods"] == 2000 and log.state.nodes["n1"].free["pods"] == 3000
