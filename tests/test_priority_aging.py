"""Priority aging (the contract's ``aging_ms_per_point``, SchedulingPolicy ``priorityAging``): in
the order waiting work is admitted, a workload's priority rises one point per that many ms waited,
so a stream of higher-priority work no longer keeps lower-priority work out for good — while who
may preempt whom is never widened by it. Pure core (Simulation); every log replays."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangway.events import catalogue as ev
from gangway.events.contract import ClusterQueue, Contract, FlavorQuotas, LocalQueue, Preemption, PriorityClass, Quota
from gangway.events.reasons import C
from gangway.events.state import queue_key
from gangway.read.explain import explain
from gangway.services.admission.policy import queue_order
from gangway.services.audit.replay import verify
from gangway.sim import Simulation
from builders import node

#: One team of 4 CPUs on one node of 4 CPUs.
CONTRACT = Contract(
    cluster_queues=[ClusterQueue(name="a", preemption=Preemption(within_cluster_queue="LowerPriority"),
                                 flavors=[FlavorQuotas(flavor="default", resources={"cpu": Quota(nominal=4000)})])],
    local_queues=[LocalQueue(namespace="a", name="main", cluster_queue="a")],
    priority_classes=[PriorityClass(name="low", value=10), PriorityClass(name="high", value=100)],
)
#: 50 ms a point: the low job (10) goes ahead of high ones (100) queued 4.5 s after it.
AGED = msgspec.structs.replace(CONTRACT, aging_ms_per_point=50)


def started(contract: Contract) -> Simulation:
    sim = Simulation()
    sim.configure(contract)
    sim.add_nodes([node("n0").cpu(4).obj()])
    return sim


def submit(sim: Simulation, name: str, cpus: int, runtime_ms: int, high: bool = False, priority: int | None = None) -> None:
    """A job of ``cpus`` into team a's queue: of class high (100) or low (10), or of ``priority``."""
    sim.submit(ev.WorkloadQueued(
        workload=f"a/{name}", namespace="a", queue="main", cluster_queue="a",
        priority_class="high" if high else "low", priority=priority if priority is not None else 100 if high else 10,
        kind="Job", runtime_ms=runtime_ms, pod_sets=[ev.PodSet(name="main", count=1, resources={"cpu": cpus * 1000})]))


def in_turn(sim: Simulation, *jobs: tuple[str, int, int, bool, int]) -> None:
    """Submit each (name, CPUs, runtime ms, high?, then run this many ms) in turn."""
    for name, cpus, runtime_ms, high, wait_ms in jobs:
        submit(sim, name, cpus, runtime_ms, high=high)
        sim.run(until_ms=sim.now_ms + wait_ms)


def times(sim: Simulation, kind: type) -> dict[str, int]:
    """Workload → when its first event of ``kind`` is on the log (ms from the log's start)."""
    out: dict[str, int] = {}
    for env in sim.log:
        if isinstance(env.data, kind):
            out.setdefault(env.data.workload, env.time_ms - sim.log[0].time_ms)
    return out


def stream_with_a_low_job(contract: Contract, until_ms: int = 20_000, cpus: int = 1) -> Simulation:
    """High-priority 1-CPU jobs of 1 s every 200 ms (5 a second for the 4 CPUs: the queue grows)
    until ``until_ms``; one low-priority job of ``cpus`` queued at 1,030 ms."""
    sim = started(contract)
    start = sim.now_ms
    for i in range(until_ms // 200):
        sim.run(until_ms=start + i * 200)
        submit(sim, f"high-{i:03d}", 1, 1000, high=True)
        if i * 200 == 1000:
            sim.run(until_ms=start + 1030)
            submit(sim, "low", cpus, 1000, high=False)
    sim.run()
    return sim


def test_strict_priority_keeps_the_low_job_out_while_high_work_waits():
    sim = stream_with_a_low_job(CONTRACT)
    admitted = times(sim, ev.WorkloadAdmitted)
    assert admitted["a/low"] > max(t for name, t in admitted.items() if name != "a/low")
    assert verify(sim.log).ok


@pytest.mark.parametrize("cpus", [1, 4])
def test_aged_the_low_job_goes_before_high_work_queued_long_enough_after_it(cpus):
    # 90 points at 50 ms a point: 4.5 s. High jobs queued before 1,030 + 4,500 ms go first, every
    # later one after it — the bound the contract states — though the stream goes on to 20 s. A
    # low job of all 4 CPUs has the quota held for it (each CPU freed kept from the high jobs it
    # outranks; they would take each one, being of higher priority, were holds kept by priority).
    sim = stream_with_a_low_job(AGED, cpus=cpus)
    queued, admitted = times(sim, ev.WorkloadQueued), times(sim, ev.WorkloadAdmitted)
    bound = queued["a/low"] + 90 * 50
    highs = [name for name in queued if name != "a/low"]
    before = [name for name in highs if queued[name] < bound]
    after = [name for name in highs if queued[name] > bound]
    assert before and after
    assert all(admitted[name] <= admitted["a/low"] for name in before)
    assert all(admitted[name] >= admitted["a/low"] for name in after)
    assert admitted["a/low"] < 10_000
    assert not [e for e in sim.log if isinstance(e.data, ev.EvictionOrdered)]  # none of them preempts it
    assert all(wl.phase == "finished" for wl in sim.state.workloads.values())
    assert verify(sim.log).ok


def first_low_second(contract: Contract) -> dict[str, int]:
    """A high job of all 4 CPUs for 10 s, a low one of 4 CPUs for 60 s queued behind it (not
    ending within its grace period: preemptable), a second high one queued 9 s later: when each
    started running."""
    sim = started(contract)
    in_turn(sim, ("first", 4, 10_000, True, 100), ("low", 4, 60_000, False, 9_000), ("second", 4, 1_000, True, 0))
    sim.run()
    assert verify(sim.log).ok
    assert not [e for e in sim.log if isinstance(e.data, ev.EvictionOrdered)]
    return times(sim, ev.WorkloadRunning)


def test_aging_never_lets_work_preempt_nor_one_it_let_in_be_preempted_for_what_it_outranked():
    # (LowerPriority preemption in the queue.) Aged, the low job ranks before the second high one,
    # takes the CPUs the first frees, and the second — of higher priority, ranked after it — waits
    # for it instead of ordering it out.
    started_at = first_low_second(AGED)
    assert started_at["a/first"] < started_at["a/low"] < started_at["a/second"]
    # Without aging the second high job goes first.
    started_at = first_low_second(CONTRACT)
    assert started_at["a/first"] < started_at["a/second"] < started_at["a/low"]


def test_a_low_job_that_ranks_after_a_preemptor_is_still_preempted_by_it():
    sim = started(AGED)
    in_turn(sim, ("low", 4, 60_000, False, 1_000), ("high", 4, 1_000, True, 0))
    sim.run()
    evicted = [e.data for e in sim.log if isinstance(e.data, ev.EvictionOrdered)]
    assert [(e.workload, e.reason_code) for e in evicted] == [("a/low", C.WITHIN_QUEUE_LOWER_PRIORITY)]
    assert verify(sim.log).ok


def test_a_contract_that_changes_the_aging_reorders_the_waiting_work():
    sim = started(CONTRACT)
    in_turn(sim, ("blocker", 4, 30_000, True, 100), ("low", 1, 1_000, False, 10_000), ("high", 1, 1_000, True, 100))
    assert [wl.spec.workload for wl in queue_order(sim.state)] == ["a/high", "a/low"]
    sim.configure(AGED)  # the low job has waited 10 s: 200 points at 50 ms
    sim.run(until_ms=sim.now_ms + 100)
    assert [wl.spec.workload for wl in queue_order(sim.state)] == ["a/low", "a/high"]
    assert sim.state.pending_order["a"] == sorted(queue_key(wl, 50) for wl in queue_order(sim.state))
    waited = sim.state.time_ms - sim.state.workloads["a/low"].queued_ms
    assert ("position 1 in LocalQueue a/main, 1 in ClusterQueue a (priority 10, aged to "
            f"{10 + waited // 50} by {waited / 1000:g} s in the queue: one point per 0.05 s)") in \
        explain(sim.log, "a/low", forecast=False)
    sim.run()
    started_at = times(sim, ev.WorkloadRunning)
    assert started_at["a/low"] <= started_at["a/high"]
    assert all(wl.phase == "finished" for wl in sim.state.workloads.values())
    assert verify(sim.log).ok


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(aging_ms=st.sampled_from([10, 50, 200]),
       jobs=st.lists(st.tuples(st.integers(0, 100), st.sampled_from([0, 10, 50, 100]), st.integers(200, 1500)),
                     min_size=30, max_size=60))
def test_admissions_follow_the_aged_order(aging_ms, jobs):
    """Random streams of 1-CPU jobs (one shape, so nothing backfills past another) into one queue of
    4 CPUs, at random gaps, priorities and runtimes: whenever a job is admitted, every job waiting
    then that ranks before it (priority plus a point per ``aging_ms`` waited) was admitted first."""
    contract = msgspec.structs.replace(CONTRACT, aging_ms_per_point=aging_ms, cluster_queues=[
        msgspec.structs.replace(CONTRACT.cluster_queues[0], preemption=Preemption())])
    sim = started(contract)
    start = sim.now_ms
    at = start
    for i, (gap, priority, runtime) in enumerate(jobs):
        at += gap
        sim.run(until_ms=at)
        submit(sim, f"j{i}", 1, runtime, priority=priority)
    sim.run()
    queued, admitted = offsets(sim, ev.WorkloadQueued), offsets(sim, ev.WorkloadAdmitted)
    when = times(sim, ev.WorkloadQueued)
    priority = {f"a/j{i}": p for i, (_, p, _) in enumerate(jobs)}
    rank = {name: (when[name] - priority[name] * aging_ms, queued[name]) for name in queued}
    for y, i in admitted.items():
        ahead = [x for x in queued if queued[x] < i and rank[x] < rank[y]]
        assert all(admitted[x] < i for x in ahead), (y, [x for x in ahead if admitted[x] > i])
    assert len(admitted) == len(jobs) and verify(sim.log).ok


def offsets(sim: Simulation, kind: type) -> dict[str, int]:
    """Workload → the offset of its first event of ``kind`` on the log."""
    out: dict[str, int] = {}
    for i, env in enumerate(sim.log):
        if isinstance(env.data, kind):
            out.setdefault(env.data.workload, i)
    return out
