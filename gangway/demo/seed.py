"""The seed story of topology-aware placement, told twice side by side (pure, in memory).

8 nodes × 8 NVLink GPUs; a flurry of 24 two-GPU jobs; then an 8-GPU tensor-parallel fine-tune
that must sit inside one NVLink island. Placed greedily (each pod to the node with the most free
GPUs, as a spreading scheduler does), the flurry leaves 16 GPUs free in pairs and no home for the
fine-tune; gangway keeps whole nodes free and places it at once.
"""

from __future__ import annotations

from gangway.events import freeindex
from gangway.events.catalogue import NodeObserved, PlacementDecided, PodAssignment, PodSet, TopologyRequest, WorkloadQueued
from gangway.events.contract import ClusterQueue, Contract, FlavorQuotas, LocalQueue, Quota
from gangway.events.resources import GPU
from gangway.events.state import State
from gangway.services.admission.policy import decide_admission
from gangway.services.placement.topology import ISLAND
from gangway.sim import Simulation

JOBS = 24


def spread_placement(state: State) -> list[PlacementDecided]:
    """The greedy baseline: every pod to the node with the most free GPUs (first by name on ties)."""
    free = {name: node.free.get(GPU, 0) for name, node in state.nodes.items()}
    decisions = []
    for name in state.unplaced:
        wl = state.workloads[name]
        assignments = []
        for ps in wl.spec.pod_sets:
            need = ps.resources.get(GPU, 0)
            for _ in range(ps.count):
                node = min(free, key=lambda n: (-free[n], n))
                if free[node] < need:
                    return decisions
                free[node] -= need
                assignments.append(PodAssignment(pod_set=ps.name, node=node, count=1))
        decisions.append(PlacementDecided(workload=name, assignments=assignments, based_on=state.offset,
                                          reason="spread: each pod to the node with the most free GPUs"))
    return decisions


def _job(name: str, gpus: int, topology: TopologyRequest | None = None) -> WorkloadQueued:
    pod_set = PodSet(name="main", count=1, resources={GPU: gpus * 1000}, topology=topology)
    return WorkloadQueued(workload=f"ml/{name}", namespace="ml", queue="default", cluster_queue="ml",
                          priority_class=None, priority=0, kind="Job", pod_sets=[pod_set], runtime_ms=3_600_000)


def tell(greedy: bool) -> dict:
    """Run the story with the greedy baseline or gangway's placement; what was left and what ran."""
    # The baseline places every gang itself: admission admits only (gangway's admits and places).
    sim = Simulation(decide={"admission": decide_admission, "placement": spread_placement} if greedy else None)
    sim.configure(Contract(cluster_queues=[ClusterQueue(name="ml", flavors=[FlavorQuotas(
        flavor="default", resources={GPU: Quota(nominal=64_000)})])],
        local_queues=[LocalQueue(namespace="ml", name="default", cluster_queue="ml")]))
    sim.add_nodes([NodeObserved(node=f"node-{i}", allocatable={GPU: 8000}, islands=[8]) for i in range(8)])
    for i in range(JOBS):
        sim.submit(_job(f"small-{i:02d}", 2))
        sim.run(until_ms=sim.now_ms + 1)
    measure = freeindex.measure(sim.state.free_index)
    sim.submit(_job("fine-tune", 8, TopologyRequest(required=ISLAND)))
    sim.run(until_ms=sim.now_ms + 1)
    fine_tune = sim.state.workloads["ml/fine-tune"]
    return {"gpus_free": measure.gpus_free, "largest_island": measure.largest_island,
            "fits_8": measure.fits["8"], "fine_tune": fine_tune.phase}


def lines() -> list[str]:
    greedy, gangway = tell(True), tell(False)
    rows = [("after 24 two-GPU jobs", "greedy (spread)", "gangway"),
            ("GPUs free", greedy["gpus_free"], gangway["gpus_free"]),
            ("largest free NVLink island", greedy["largest_island"], gangway["largest_island"]),
            ("8-GPU islands free", greedy["fits_8"], gangway["fits_8"]),
            ("the 8-GPU fine-tune (one island)", greedy["fine_tune"], gangway["fine_tune"])]
    return [f"{a:<34} {b!s:>16} {c!s:>10}" for a, b, c in rows]
