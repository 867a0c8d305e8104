"""Defragmentation: moving running work so that a gang blocked by scattered free GPUs can start."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from builders import LogBuilder, cluster_queue, contract, decide_pure, node, workload
from gangway.events.reasons import ReasonCode
from gangway import demo
from gangway.contract import load_contract_file
from gangway.events import catalogue as ev
from gangway.events.contract import Contract
from gangway.services.preemption.policy import decide_preemption
from gangway.sim import Simulation


def job(name: str, gpus: float, pods: int = 1, priority: int = 0, runtime_s: float = 3600):
    return workload(name).queue("q").priority(priority).pod_set("main", count=pods, gpus=gpus).runtime_s(runtime_s).obj()


def scattered(nodes: int = 4, per_node: int = 3) -> LogBuilder:
    """``nodes`` nodes of 8 GPUs, each running ``per_node`` 2-GPU jobs: the free GPUs come in twos."""
    log = LogBuilder().configure(contract(cluster_queue("q").gpus(64).preemption(within="LowerPriority")))
    log.nodes(*(node(f"n{i}").gpus(8) for i in range(nodes)))
    for i in range(nodes):
        for j in range(per_node):
            log.running(job(f"small-{i}-{j}", 2), on=[("main", f"n{i}", 1)])
    return log


def test_a_gang_blocked_by_fragmentation_gets_a_consolidation_that_moves_least():
    log = scattered().queue(job("finetune", 8, priority=0))  # 8 GPUs free in total, 2 per node
    orders = decide_pure(decide_preemption, log.state)
    moved = sorted(o.workload for o in orders)
    nodes = {log.state.workloads[m].placement.assignments[0].node for m in moved}
    assert len(moved) == 3 and len(nodes) == 1  # one node emptied of its three 2-GPU jobs
    assert all(o.reason_code == ReasonCode.DEFRAGMENTATION for o in orders)
    assert all(o.reason.startswith("defragmentation: moved so that finetune (8 nvidia.com/gpu)") for o in orders)


def test_no_consolidation_when_the_moved_work_could_not_be_placed_again():
    log = scattered(nodes=2, per_node=3).queue(job("finetune", 8))  # 4 free: the 6 moved GPUs fit nowhere
    assert decide_pure(decide_preemption, log.state) == []


def test_no_consolidation_when_too_few_gpus_are_free_in_total():
    log = scattered(nodes=4, per_node=4).queue(job("finetune", 8))  # the cluster is full
    assert decide_pure(decide_preemption, log.state) == []


def test_higher_priority_work_is_not_moved():
    log = LogBuilder().configure(contract(cluster_queue("q").gpus(64))).nodes(*(node(f"n{i}").gpus(8) for i in range(4)))
    for i in range(4):
        for j in range(3):
            log.running(job(f"vip-{i}-{j}", 2, priority=9), on=[("main", f"n{i}", 1)])
    log.queue(job("finetune", 8, priority=0))
    assert decide_pure(decide_preemption, log.state) == []


def test_the_consolidation_runs_through_the_pipeline_and_everyone_runs_again():
    log = scattered().queue(job("finetune", 8, runtime_s=600))
    sim = Simulation(state=log.state)
    sim.run(until_ms=sim.now_ms + 120_000)
    state = sim.state
    assert state.workloads["finetune"].phase == "running"
    assert len(state.workloads["finetune"].placement.assignments) == 1  # one whole node
    assert all(wl.phase == "running" for wl in state.workloads.values())
    assert sum(isinstance(e.data, ev.EvictionOrdered) for e in sim.log) == 3


@pytest.mark.parametrize("moved_first", [True, False], ids=["moved-first", "contract-before-the-field"])
@pytest.mark.parametrize("nominal", [32, 64], ids=["quota-bound", "node-bound"])
def test_work_arriving_while_the_moved_leave_does_not_take_their_place(nominal, moved_first):
    """The consolidation's promise, every moved workload placed again at once, holds against a job
    that arrives while they leave (their 30 s grace period) and would fit: the moved keep their
    quota (nominal 32: what runs plus the gang) and their room (64: the nodes are the limit) until
    they are out, and then go first, behind the gang, ahead of the newcomer queued before their
    eviction (``Contract.moved_first``). Under a contract written before the field, the newcomer
    takes one moved job's place and that job waits (found by the property tests: a job moved for a
    newer one of its priority waited, then preempted it back under LowerOrNewerEqualPriority)."""
    c = contract(cluster_queue("q").gpus(nominal).preemption(within="LowerPriority")).obj()
    log = scattered()
    log.configure(msgspec.structs.replace(c, moved_first=moved_first)).queue(job("finetune", 8, runtime_s=600))
    sim = Simulation(state=log.state)
    sim.run(until_ms=sim.now_ms + 5_000)
    moved = {e.data.workload for e in sim.log if isinstance(e.data, ev.EvictionOrdered)}
    assert len(moved) == 3 and all(sim.state.workloads[m].phase == "evicting" for m in moved)
    sim.submit(job("newcomer", 2))
    sim.run(until_ms=sim.now_ms + 60_000)
    waiting = {name for name, wl in sim.state.workloads.items() if wl.phase == "pending"}
    assert sim.state.workloads["finetune"].phase == "running"
    if moved_first:
        assert waiting == {"newcomer"}
        left = max(e.time_ms for e in sim.log if isinstance(e.data, ev.WorkloadEvicted))
        assert all(sim.state.workloads[m].started_ms == left for m in moved)  # at once
    else:
        assert sim.state.workloads["newcomer"].phase == "running"
        assert len(waiting) == 1 and waiting < moved


def test_a_contract_read_now_keeps_the_moves_promise():
    """The contract reader sets ``moved_first`` (and ``no_preemption_back``,
    ``preemptor_room_after_admitted``, ``no_proxy_preemption``); a contract recorded before the
    field decodes without it."""
    read = load_contract_file(Path(demo.__file__).parent / "contract.yaml")
    assert read.moved_first and read.no_preemption_back and read.preemptor_room_after_admitted and read.no_proxy_preemption
    assert read.gang_before_its_moved
    recorded = msgspec.json.encode(contract(cluster_queue("q").gpus(8)).obj())
    assert b"moved_first" in recorded
    old = msgspec.json.decode(recorded.replace(b',"moved_first":false', b""), type=Contract)
    assert old.moved_first is False


def two_teams(reclaim: str) -> LogBuilder:
    """4 nodes of 8 GPUs, each running a 2-GPU job of team a (queue "a", 24 GPUs nominal) and two of
    team b (queue "b", 8 nominal, borrowing 8 of a's in their cohort): 2 GPUs free per node. Queue a
    reclaims what b borrows under ``reclaim``."""
    log = LogBuilder().configure(contract(
        cluster_queue("a").cohort("all").gpus(24).preemption(within="LowerPriority", reclaim=reclaim),
        cluster_queue("b").cohort("all").gpus(8)))
    log.nodes(*(node(f"n{i}").gpus(8) for i in range(4)))
    for i in range(4):
        for team, jobs in (("a", 1), ("b", 2)):
            for j in range(jobs):
                log.running(workload(f"{team}-{i}-{j}").queue(team).pod_set("main", gpus=2).runtime_s(3600).obj(),
                            on=[("main", f"n{i}", 1)])
    return log.queue(workload("gang").queue("a").pod_set("main", gpus=8).runtime_s(600).obj())


def test_another_teams_work_is_never_moved_for_a_gang_whose_rules_may_not_take_from_it():
    """Kueue would never preempt b's work for a's gang under reclaimWithinCohort: Never: nor does
    defragmentation move it (moving a's own job frees 4 GPUs on a node, not 8: no plan)."""
    assert decide_pure(decide_preemption, two_teams(reclaim="Never").state) == []


def test_another_teams_borrowed_work_is_moved_when_the_gang_may_reclaim_it():
    orders = decide_pure(decide_preemption, two_teams(reclaim="Any").state)
    moved = sorted(o.workload for o in orders)
    assert len(moved) == 3 and sorted(m[0] for m in moved) == ["a", "b", "b"]  # one node emptied
    assert all(o.reason_code == ReasonCode.DEFRAGMENTATION for o in orders)


def test_a_gang_that_was_moved_itself_goes_before_the_workloads_moved_for_it():
    """tests/data/defrag-chain.jsonl: a run the property tests found (32x, random seeds), folded up
    to the order that began a livelock: w3 was moved for w20 and waits again; defragmentation moves
    w9 for w3. Among the moved, biggest first, w9 went back into its room before w3 was tried, and
    was moved again at every cycle (``Contract.gang_before_its_moved`` off: 150 orders in 300
    rounds). With the field w3 goes first, as the gang it is: one move, both run."""
    from collections import Counter

    from builders import fold_file

    def run(field: bool) -> tuple[Counter, Simulation]:
        sim = Simulation(state=fold_file(Path(__file__).parent / "data" / "defrag-chain.jsonl",
                                         gang_before_its_moved=field))
        try:
            sim.run(until_ms=sim.now_ms + 3_600_000, rounds_max=300)
        except RuntimeError:
            assert not field, "the run settles with the field"
        return Counter(e.data.preemptor for e in sim.log if isinstance(e.data, ev.EvictionOrdered)
                       and e.data.workload == "w9"), sim

    moves, sim = run(True)
    assert moves == {"w3": 1} and sim.state.workloads["w3"].phase == "finished"
    moves, sim = run(False)
    assert moves["w3"] >= 100 and sim.state.workloads["w3"].phase == "pending"
