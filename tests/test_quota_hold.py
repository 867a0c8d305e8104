"""Backfill on quota: the first workload its quota tree keeps out has the quota that frees soonest
held for it, so a stream of small workloads, each taking what the last one freed, no longer keeps a
big one of higher priority out for good. Pure core (Simulation); every log replays."""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangway.events import catalogue as ev
from gangway.events.contract import Backfill, ClusterQueue, Contract, FlavorQuotas, LocalQueue, Preemption, PriorityClass, Quota
from gangway.events.reasons import ReasonCode
from gangway.read.explain import pending_report
from gangway.services.audit.replay import verify
from gangway.sim import Simulation
from builders import node
from test_decide_memos import decisions_at_every_offset, no_memos

#: Two teams of 4 CPUs each in one cohort, each may borrow all of the other's; one node of 8 CPUs.
CONTRACT = Contract(
    cluster_queues=[ClusterQueue(name=team, cohort="org", preemption=Preemption("Never", "Never"),
                                 flavors=[FlavorQuotas(flavor="default", resources={"cpu": Quota(nominal=4000, borrowing_limit=4000)})])
                    for team in ("a", "b")],
    local_queues=[LocalQueue(namespace=team, name="main", cluster_queue=team) for team in ("a", "b")],
    priority_classes=[PriorityClass(name="low", value=10), PriorityClass(name="high", value=100)],
)


def started(contract: Contract = CONTRACT) -> Simulation:
    sim = Simulation()
    sim.configure(contract)
    sim.add_nodes([node("n0").cpu(8).obj()])
    return sim


def submit(sim: Simulation, team: str, name: str, cpus: int, runtime_ms: int | None, high: bool = False) -> None:
    sim.submit(ev.WorkloadQueued(
        workload=f"{team}/{name}", namespace=team, queue="main", cluster_queue=team,
        priority_class="high" if high else "low", priority=100 if high else 10, kind="Job", runtime_ms=runtime_ms,
        pod_sets=[ev.PodSet(name="main", count=1, resources={"cpu": cpus * 1000})]))


def admitted_ms(sim: Simulation, workload: str) -> int | None:
    return next((env.time_ms for env in sim.log if isinstance(env.data, ev.WorkloadAdmitted)
                 and env.data.workload == workload), None)


def stream(sim: Simulation, team: str, until_ms: int, every_ms: int = 125, runtime_ms: int = 1000,
           big: tuple[str, int] | None = None) -> None:
    """One-CPU jobs of ``team`` every ``every_ms`` until ``until_ms`` (the cohort stays full); ``big``:
    (team, at ms) of an 8-CPU high-priority job submitted into it."""
    start = sim.now_ms
    for i in range(until_ms // every_ms):
        sim.run(until_ms=start + i * every_ms)
        if big is not None and i * every_ms == big[1]:
            submit(sim, big[0], "big", 8, 1000, high=True)
        submit(sim, team, f"small-{i}", 1, runtime_ms)
    sim.run()


def test_a_big_job_is_not_kept_out_by_a_stream_of_small_ones():
    # b's small jobs fill the cohort (b borrows a's idle quota). Without the hold, each one that
    # ends frees one CPU and the next takes it: b's big job (8 CPUs, higher priority) would wait
    # until the stream stops at 60 s.
    sim = started()
    stream(sim, "b", until_ms=60_000, big=("b", 5_000))
    start = admitted_ms(sim, "b/big") - sim.log[0].time_ms
    assert 5_000 <= start <= 5_000 + 1_000 + 125  # the running small jobs end (1 s), nothing new in between
    assert all(wl.phase == "finished" for wl in sim.state.workloads.values())
    assert verify(sim.log).ok


def test_a_contract_that_holds_no_quota_lets_the_stream_keep_the_big_job_out():
    # backfill.quota_holds_per_tree 0 (Kueue's BestEffortFIFO): whatever fits goes, and each CPU a
    # small job frees is taken by the next small one before the big job's 8 are ever free together.
    sim = started(msgspec.structs.replace(CONTRACT, backfill=Backfill(quota_holds_per_tree=0)))
    stream(sim, "b", until_ms=20_000, big=("b", 5_000))
    start = admitted_ms(sim, "b/big") - sim.log[0].time_ms
    assert start >= 19_000, start  # once the stream stops (with the default hold: by about 6.1 s)
    assert verify(sim.log).ok


def test_work_that_ends_before_the_held_start_still_runs_beside_it():
    sim = started()
    submit(sim, "b", "long", 4, 10_000)  # half the cohort for 10 s: the big job can start then
    sim.run(until_ms=sim.now_ms + 1)
    submit(sim, "a", "big", 8, 1000, high=True)
    submit(sim, "b", "short", 1, 5_000)  # ends before the big job can start: backfill
    submit(sim, "b", "late", 1, 20_000)  # would still run then: held back
    sim.step()
    phases = {name: wl.phase for name, wl in sim.state.workloads.items()}
    assert phases["b/short"] != "pending" and phases["b/late"] == "pending" and phases["a/big"] == "pending"
    report = pending_report(sim.state, forecast=False)
    assert report["b/late"].code == ReasonCode.QUOTA_HELD_FOR_ANOTHER
    assert report["b/late"].params["gang"] == "a/big"
    assert "quota held for it" in report["a/big"].reason
    sim.run()
    # held back until the held start; then b/long's end gives b its own nominal quota back, which
    # b/late takes first (a queue reclaiming its nominal quota goes before a borrower)
    assert admitted_ms(sim, "b/late") - sim.log[0].time_ms >= 10_000
    assert verify(sim.log).ok


def test_another_queue_within_its_nominal_quota_is_not_held_back():
    # b's quota is b's before it is lent: a's big job, which must borrow, does not hold it back.
    sim = started()
    submit(sim, "a", "first", 2, 10_000)
    sim.run(until_ms=sim.now_ms + 1)
    submit(sim, "a", "big", 8, 1000, high=True)
    submit(sim, "b", "own", 4, 60_000)  # within b's nominal 4, long after the big job's start
    submit(sim, "a", "own", 1, 60_000)  # a's own lower-priority work is held back
    sim.step()
    phases = {name: wl.phase for name, wl in sim.state.workloads.items()}
    assert phases["b/own"] != "pending" and phases["a/own"] == "pending"
    sim.run()
    assert verify(sim.log).ok


def test_each_gang_kept_out_by_quota_has_quota_held_for_it_not_only_the_first():
    # b's long job holds 2 of the cohort's 8 CPUs for 10 s, a's fill 4 for 5 s. a's two big jobs
    # wait: the first can start at 5 s (fill ends), the second (6 CPUs) at 6 s, when the first ends.
    # a's late job (low priority, 60 s) fits now and beside the first at 5 s, but not beside the
    # second: with quota held for the first only, it ran at once and the second waited for b's long
    # job to end, at 10 s.
    sim = started()
    submit(sim, "b", "long", 2, 10_000)
    submit(sim, "a", "fill", 4, 5_000)
    sim.run(until_ms=sim.now_ms + 1)
    submit(sim, "a", "big1", 4, 1000, high=True)
    submit(sim, "a", "big2", 6, 1000, high=True)
    submit(sim, "a", "late", 2, 60_000)
    sim.step()
    assert sim.state.workloads["a/late"].phase == "pending"
    report = pending_report(sim.state, forecast=False)
    assert report["a/late"].code == ReasonCode.QUOTA_HELD_FOR_ANOTHER and report["a/late"].params["gang"] == "a/big2"
    assert "quota held for it" in report["a/big2"].reason
    sim.run()
    t0 = sim.log[0].time_ms
    assert admitted_ms(sim, "a/big1") - t0 < 5_100
    assert admitted_ms(sim, "a/big2") - t0 < 6_100
    assert admitted_ms(sim, "a/late") >= admitted_ms(sim, "a/big2")
    assert verify(sim.log).ok


#: (team, CPUs, runtime s or None, high priority, ms until the next one)
jobs = st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 8), st.one_of(st.none(), st.integers(1, 30)),
                          st.booleans(), st.integers(0, 3000)), min_size=3, max_size=25)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(jobs)
def test_memos_and_early_stops_change_nothing_while_quota_is_held(jobs):
    # While quota is held, failures are remembered by shape and whether a workload ends before the
    # held start, and a cycle stops once every shape's soonest-ending workload failed: at every
    # offset admission and preemption decide as with every memo and early stop turned off.
    sim = started()
    for i, (team, cpus, runtime_s, high, gap_ms) in enumerate(jobs):
        submit(sim, team, f"j{i}", cpus, runtime_s * 1000 if runtime_s else None, high)
        sim.run(until_ms=sim.now_ms + gap_ms)
    sim.run()
    assert verify(sim.log).ok
    with_memos = decisions_at_every_offset(sim.log)
    borrow, failures, preemptors = no_memos()
    with borrow, failures, preemptors:
        assert decisions_at_every_offset(sim.log) == with_memos


def test_no_quota_is_held_for_a_job_no_node_could_ever_take():
    """A one-pod 8-CPU job on nodes of 4 CPUs fits the quota it may borrow, but no node: it is told
    so while quota keeps it out too, and holds nothing — the work that fits runs beside it."""
    sim = Simulation()
    sim.configure(CONTRACT)
    sim.add_nodes([node("n0").cpu(4).obj(), node("n1").cpu(4).obj()])
    submit(sim, "b", "long", 4, 10_000)
    sim.run(until_ms=sim.now_ms + 1)
    submit(sim, "a", "huge", 8, 1000, high=True)
    submit(sim, "b", "late", 1, 20_000)  # lower priority, runs long past when quota would free
    sim.step()
    report = pending_report(sim.state, forecast=False)
    assert report["a/huge"].code == ReasonCode.NO_MATCHING_NODES and "quota held" not in report["a/huge"].reason
    assert sim.state.workloads["b/late"].phase != "pending"
    assert verify(sim.log).ok


#: One team of 8 GPUs on two nodes of 4, preempting within itself by priority (a stranger's case).
ONE_TEAM = Contract(
    cluster_queues=[ClusterQueue(name="team", preemption=Preemption("LowerOrNewerEqualPriority", "Never"),
                                 flavors=[FlavorQuotas(flavor="default", resources={"nvidia.com/gpu": Quota(nominal=8000)})])],
    local_queues=[LocalQueue(namespace="t", name="q", cluster_queue="team")],
    priority_classes=[PriorityClass(name=f"p{v}", value=v) for v in (10, 50, 100)],
)


def gpu_job(sim: Simulation, name: str, gpus: int, priority: int, runtime_s: int, pods: int = 1) -> None:
    sim.submit(ev.WorkloadQueued(
        workload=f"t/{name}", namespace="t", queue="q", cluster_queue="team", priority_class=f"p{priority}",
        priority=priority, kind="Job", runtime_ms=runtime_s * 1000,
        pod_sets=[ev.PodSet(name="main", count=pods, resources={"nvidia.com/gpu": gpus * 1000})]))


def held_from_the_start(switch: bool, with_mid: bool = True) -> Simulation:
    """a and b (priority 100, 4 GPUs, 600 s and 1,200 s) run; h (100, 2 pods of 4) waits for their
    quota, held from a's end… until b's; m (50, 4 GPUs, 1,800 s) and s (10, 4 GPUs, 300 s) come
    after it. s ends before h can start: it backfills at +600 s. m does not."""
    sim = Simulation()
    sim.configure(msgspec.structs.replace(ONE_TEAM, holds_against_preemption=switch))
    sim.add_nodes([node(f"n{i}").gpus(4).obj() for i in range(2)])
    gpu_job(sim, "a", 4, 100, 600)
    gpu_job(sim, "b", 4, 100, 1200)
    for at_s, job in ((10, ("h", 4, 100, 600, 2)), (20, ("m", 4, 50, 1800)), (30, ("s", 4, 10, 300))):
        sim.run(until_ms=sim.log[0].time_ms + at_s * 1000)
        if job[0] != "m" or with_mid:
            gpu_job(sim, *job)
    sim.run()
    return sim


def evictions(sim: Simulation) -> list[tuple[str, str]]:
    return [(env.data.preemptor, env.data.workload) for env in sim.log if isinstance(env.data, ev.EvictionOrdered)]


def test_a_preemptor_ranked_after_a_hold_does_not_take_the_quota_held():
    # without m, the hold is kept: s backfills at +600 s, h starts at +1,200 s, nothing is evicted
    sim = held_from_the_start(switch=False, with_mid=False)
    assert evictions(sim) == [] and admitted_ms(sim, "t/h") - sim.log[0].time_ms == 1_200_000
    # with m: m preempted s and took the quota held for h; h then preempted m (570 s of work lost)
    sim = held_from_the_start(switch=False)
    assert ("t/m", "t/s") in evictions(sim) and ("t/h", "t/m") in evictions(sim)
    # the switch: the hold keeps m out of h's quota as it keeps its admission out
    sim = held_from_the_start(switch=True)
    start = sim.log[0].time_ms
    assert evictions(sim) == []
    assert [admitted_ms(sim, f"t/{n}") - start for n in "shm"] == [600_000, 1_200_000, 1_800_000]
    assert verify(sim.log).ok


def preemptor_held(switch: bool) -> Simulation:
    """b (100, 4 GPUs, 60 s) and m (50, 4 GPUs, 3,600 s) run; h (100, 2 pods of 4) may preempt m
    (not b: of its priority and older), and waits for b's quota; s (10, 4 GPUs, 300 s) would end
    before m does, the hold's natural start."""
    sim = Simulation()
    sim.configure(msgspec.structs.replace(ONE_TEAM, holds_against_preemption=switch))
    sim.add_nodes([node(f"n{i}").gpus(4).obj() for i in range(2)])
    gpu_job(sim, "b", 4, 100, 60)
    gpu_job(sim, "m", 4, 50, 3600)
    sim.run(until_ms=sim.log[0].time_ms + 10_000)
    gpu_job(sim, "h", 4, 100, 600, pods=2)
    gpu_job(sim, "s", 4, 10, 300)
    sim.run()
    return sim


def test_nothing_backfills_room_a_preemptor_is_about_to_take():
    # without the switch s took b's room when b ended and was preempted at once, with m, for h
    assert sorted(evictions(preemptor_held(False))) == [("t/h", "t/m"), ("t/h", "t/s")]
    sim = preemptor_held(True)
    assert evictions(sim) == [("t/h", "t/m")]
    assert admitted_ms(sim, "t/s") > admitted_ms(sim, "t/h")
    assert verify(sim.log).ok
