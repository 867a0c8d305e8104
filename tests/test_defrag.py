"""Defragmentation planning: move the cheapest lower-priority work so a blocked gang fits, and only
if everything moved fits again elsewhere (KAI's rule)."""

from __future__ import annotations

from builders import LogBuilder, cluster_queue, contract, node, workload
from gangway.events import catalogue as ev
from gangway.services.placement.defrag import plan_defrag
from gangway.services.placement.topology import ISLAND

CONTRACT = contract(cluster_queue("q").gpus(1000).cpu(10_000).memory_gi(100_000))


def cluster(count: int) -> LogBuilder:
    return LogBuilder().configure(CONTRACT).nodes(
        *(node(f"n{i}").gpus(8).cpu(96).memory_gi(512).at("b1", "r1").islands(8) for i in range(1, count + 1)))


def small(name: str, gpus: int = 2, priority: int = 0):
    return workload(name).queue("q").priority(priority).pod_set("main", 1, gpus=gpus)


FINE_TUNE = (workload("fine-tune").queue("q").priority(10)
             .pod_set("main", 1, gpus=8, topology=ev.TopologyRequest(required=ISLAND)))


def scattered(log: LogBuilder, per_node: list[list[tuple[str, int, int]]]) -> LogBuilder:
    """Run jobs as (name, GPUs, priority) on n1, n2, … in order, each a minute after the last."""
    for i, jobs in enumerate(per_node):
        for name, gpus, priority in jobs:
            log.running(small(name, gpus, priority), on=[("main", f"n{i + 1}", 1)]).advance(60_000)
    return log


def test_the_cheapest_node_to_clear_is_cleared_and_its_jobs_fit_elsewhere():
    # 12 GPUs free, at most 6 on one node. Clearing n4 moves one 2-GPU job that ran least.
    log = scattered(cluster(4), [[("a1", 3, 0), ("a2", 3, 0)], [("b1", 2, 0), ("b2", 2, 0), ("b3", 2, 0)],
                                 [("c1", 6, 0)], [("d1", 2, 0)]])
    log.queue(FINE_TUNE)
    plan = plan_defrag(log.state, log.state.workloads["fine-tune"])
    assert plan is not None and (plan.anchor, plan.evict) == ("b1/r1/n4", ["d1"])
    assert [(a.node, a.gpus) for a in plan.target] == [("n4", list(range(8)))]
    d1 = log.state.workloads["d1"]
    assert plan.cost == 2000 * (log.state.time_ms - d1.started_ms), "2 GPUs × the time d1 ran"


def test_no_plan_when_what_would_move_cannot_be_placed_again():
    # 8 GPUs free (2 + 2 + 4), but whichever node is cleared, its job finds no node to go to.
    log = scattered(cluster(3), [[("a1", 6, 0)], [("b1", 6, 0)], [("c1", 4, 0)]])
    log.queue(FINE_TUNE)
    assert plan_defrag(log.state, log.state.workloads["fine-tune"]) is None


def test_no_plan_moves_work_of_equal_or_higher_priority():
    log = scattered(cluster(3), [[("a1", 4, 10)], [("b1", 4, 20)], [("c1", 4, 10)]])
    log.queue(FINE_TUNE)
    assert plan_defrag(log.state, log.state.workloads["fine-tune"]) is None


def test_no_plan_when_gpus_are_short_in_total_or_the_gang_fits_already():
    log = scattered(cluster(2), [[("a1", 6, 0)], [("b1", 6, 0)]])
    log.queue(workload("big").queue("q").priority(10).pod_set("main", 1, gpus=8)
              .pod_set("more", 1, gpus=8))
    assert plan_defrag(log.state, log.state.workloads["big"]) is None
    log = cluster(2).queue(FINE_TUNE)
    assert plan_defrag(log.state, log.state.workloads["fine-tune"]) is None
