"""Hand-over: a workload kept out by quota alone is admitted to take over from running work that
is expected to end within the contract's ``backfill.hand_over_within_ms``; the binder starts it the moment that work has
ended, with no admission round trip in between. Pure core (Simulation); every log replays."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangway.events import catalogue as ev
from gangway.events.codec import Envelope
from gangway.events.contract import Backfill, ClusterQueue, Contract, FlavorQuotas, LocalQueue, Preemption, PriorityClass, Quota
from gangway.events.reasons import ReasonCode
from gangway.services.admission.policy import queue_order
from gangway.services.audit.replay import verify
from gangway.services.binder.policy import due_reports
from gangway.sim import Simulation
from builders import node
from test_quota_hold import CONTRACT as COHORT  # two teams of 4 CPUs in one cohort, each may borrow all of the other's

HAND_OVER_WITHIN_MS = Backfill().hand_over_within_ms

#: One team of 8 CPUs on one node of 8 CPUs; a grace period of 2 s.
CONTRACT = Contract(
    cluster_queues=[ClusterQueue(name="a", preemption=Preemption("Never", "Never"),
                                 flavors=[FlavorQuotas(flavor="default", resources={"cpu": Quota(nominal=8000)})])],
    local_queues=[LocalQueue(namespace="a", name="main", cluster_queue="a")],
    priority_classes=[PriorityClass(name="batch", value=10, grace_ms=2_000)],
)


def started(contract: Contract = CONTRACT) -> Simulation:
    sim = Simulation()
    sim.configure(contract)
    sim.add_nodes([node("n0").cpu(8).obj()])
    return sim


def submit(sim: Simulation, name: str, cpus: int, runtime_ms: int | None) -> None:
    sim.submit(ev.WorkloadQueued(
        workload=f"a/{name}", namespace="a", queue="main", cluster_queue="a", priority_class="batch", priority=10,
        kind="Job", runtime_ms=runtime_ms, pod_sets=[ev.PodSet(name="main", count=1, resources={"cpu": cpus * 1000})]))


def events_of(sim: Simulation, kind, workload: str) -> list[Envelope]:
    return [env for env in sim.log if isinstance(env.data, kind) and env.data.workload == workload]


def running_first(runtime_ms: int = 1_000, contract: Contract = CONTRACT) -> Simulation:
    """"a/first" (the whole queue and node) running since now."""
    sim = started(contract)
    submit(sim, "first", 8, runtime_ms)
    sim.step()
    assert sim.state.workloads["a/first"].phase == "running"
    return sim


def test_work_waiting_for_quota_that_frees_within_the_horizon_is_handed_over():
    sim = running_first()
    sim.run(until_ms=sim.now_ms + 1_000 - HAND_OVER_WITHIN_MS // 2)  # "first" ends in half the horizon
    submit(sim, "next", 8, 1_000)
    sim.step()
    admitted = events_of(sim, ev.WorkloadAdmitted, "a/next")
    assert [a.data.after for a in admitted] == [["a/first"]]
    assert admitted[0].data.reason_code == ReasonCode.FITS_NOMINAL and "a/first" in admitted[0].data.reason
    placed = events_of(sim, ev.PlacementDecided, "a/next")
    assert [a.node for p in placed for a in p.data.assignments] == ["n0"]  # the node "first" still runs on
    assert sim.state.workloads["a/next"].phase == "placed"
    assert sim.state.usage["a"]["default:cpu"] == 16_000  # both count until "first" ends
    # Before "first" ends the cluster binds nothing; at its end, the same report starts "next".
    assert not [r for r in due_reports(sim.state, sim.now_ms) if r[2].workload == "a/next"]
    end = sim.state.workloads["a/first"].started_ms + 1_000
    reports = [(type(r[2]).__name__, r[2].workload) for r in due_reports(sim.state, end)]
    assert reports == [("WorkloadFinished", "a/first"), ("WorkloadBound", "a/next"), ("WorkloadRunning", "a/next")]
    sim.run()
    assert events_of(sim, ev.WorkloadRunning, "a/next")[0].time_ms == end
    assert all(wl.phase == "finished" for wl in sim.state.workloads.values())
    assert verify(sim.log).ok


def test_work_that_frees_later_than_the_horizon_is_not_handed_over():
    sim = running_first()
    sim.run(until_ms=sim.now_ms + 1_000 - 2 * HAND_OVER_WITHIN_MS)
    submit(sim, "next", 8, 1_000)
    sim.step()
    assert not events_of(sim, ev.WorkloadAdmitted, "a/next")
    sim.run()
    assert [a.data.after for a in events_of(sim, ev.WorkloadAdmitted, "a/next")] == [[]]  # admitted once it ended
    assert verify(sim.log).ok


@pytest.mark.parametrize("within_ms, ends_in, handed_over", [(0, 50, False), (100, 50, True), (100, 400, False),
                                                             (500, 400, True)])
def test_the_contract_sets_the_horizon_and_zero_turns_hand_overs_off(within_ms, ends_in, handed_over):
    contract = msgspec.structs.replace(CONTRACT, backfill=Backfill(hand_over_within_ms=within_ms))
    sim = running_first(contract=contract)
    sim.run(until_ms=sim.now_ms + 1_000 - ends_in)
    submit(sim, "next", 8, 1_000)
    sim.step()
    assert [a.data.after for a in events_of(sim, ev.WorkloadAdmitted, "a/next")] == ([["a/first"]] if handed_over else [])
    sim.run()
    assert verify(sim.log).ok


def test_work_without_a_runtime_or_late_past_it_is_not_handed_over():
    sim = running_first(runtime_ms=None)
    submit(sim, "next", 8, 1_000)
    sim.step()
    assert not events_of(sim, ev.WorkloadAdmitted, "a/next")
    late = running_first()
    late.now_ms += 1_500  # "first" said 1 s and still runs (a real cluster may say so)
    late.append("tick", late.now_ms, ev.ClockTicked(reason="test"))
    submit(late, "next", 8, 1_000)
    late._decide_all()
    assert not events_of(late, ev.WorkloadAdmitted, "a/next")


def test_a_hand_over_whose_work_overruns_its_grace_period_lapses():
    sim = running_first()
    sim.run(until_ms=sim.now_ms + 1_000 - HAND_OVER_WITHIN_MS // 2)
    submit(sim, "next", 8, 1_000)
    sim._decide_all()
    assert sim.state.workloads["a/next"].phase == "placed"
    queued_ms = sim.state.workloads["a/next"].queued_ms
    submit(sim, "later", 8, 1_000)  # of the same priority, queued after "next"
    # "first" overruns (a real cluster: it runs on); the preemption service orders "next" out once
    # it is late by more than its grace period (2 s) and the horizon, and "next" queues again.
    end = sim.state.workloads["a/first"].started_ms + 1_000
    lapse = end + 2_000 + HAND_OVER_WITHIN_MS + 1
    sim.append("tick-before", lapse - 1, ev.ClockTicked(reason="test"))
    sim._decide_all()
    assert not events_of(sim, ev.EvictionOrdered, "a/next")
    sim.append("tick-at", lapse, ev.ClockTicked(reason="test"))
    sim._decide_all()
    [order] = events_of(sim, ev.EvictionOrdered, "a/next")
    assert order.data.reason_code == ReasonCode.HAND_OVER_LAPSED and order.data.preemptor == "HandOver/a/first"
    assert order.data.grace_ms == 0
    # Once the cluster reports it out, it waits again where it waited before (the overrun was not
    # its doing): ahead of "later".
    [out] = [r for r in due_reports(sim.state, lapse) if r[2].workload == "a/next"]
    assert isinstance(out[2], ev.WorkloadEvicted)
    sim.append(*out, "gangway/binder")
    assert sim.state.workloads["a/next"].phase == "pending"
    assert sim.state.workloads["a/next"].queued_ms == queued_ms
    assert [wl.spec.workload for wl in queue_order(sim.state)] == ["a/next", "a/later"]
    assert verify(sim.log).ok


def fold_admission(sim: Simulation, admitted: ev.WorkloadAdmitted) -> object:
    """Fold an admission no decide made (the fold checks it all the same)."""
    sim.append(f"forged/{len(sim.log)}", sim.now_ms, admitted, "gangway/admission")
    return sim.state.workloads[admitted.workload]


def test_the_fold_checks_a_hand_over_with_only_the_work_it_names_given_back():
    sim = running_first()
    submit(sim, "half", 4, 1_000)
    submit(sim, "next", 8, 1_000)
    asked = {"cpu": 8000}
    # Naming itself, or a workload twice, is refused; naming nothing, 8 CPUs do not fit beside "first".
    for after, code in ((["a/next"], ReasonCode.BAD_HAND_OVER), (["a/first", "a/first"], ReasonCode.BAD_HAND_OVER),
                        ([], ReasonCode.OVER_NOMINAL_QUOTA)):
        wl = fold_admission(sim, ev.WorkloadAdmitted(workload="a/next", cluster_queue="a", usage=asked, borrowed={},
                                                     based_on=sim.state.offset, after=after))
        assert wl.phase == "pending" and wl.superseded_code == code, after
    wl = fold_admission(sim, ev.WorkloadAdmitted(workload="a/next", cluster_queue="a", usage=asked, borrowed={},
                                                 based_on=sim.state.offset, after=["a/first"]))
    assert wl.phase == "admitted"
    # Now "half" does not fit even once "first" is gone: "next" is counted.
    half = fold_admission(sim, ev.WorkloadAdmitted(workload="a/half", cluster_queue="a", usage={"cpu": 4000},
                                                   borrowed={}, based_on=sim.state.offset, after=["a/first"]))
    assert half.phase == "pending" and half.superseded_code == ReasonCode.OVER_NOMINAL_QUOTA


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from([1, 2, 4]), st.integers(50, 400), st.booleans(),
                          st.integers(0, 120)), min_size=5, max_size=30))
def test_what_runs_never_goes_over_quota_or_a_node_with_hand_overs(jobs):
    """Random streams on 30 ms rounds: at every event of the log, what is running fits each queue's
    quota, the cohort's and each node, and every decision replays."""
    sim = Simulation(cycle_ms=30)
    sim.configure(COHORT)
    sim.add_nodes([node(n).cpu(4).obj() for n in ("n0", "n1")])
    for i, (team, cpus, runtime_ms, high, gap_ms) in enumerate(jobs):
        sim.run(until_ms=sim.now_ms + gap_ms)
        sim.submit(ev.WorkloadQueued(
            workload=f"{team}/j{i}", namespace=team, queue="main", cluster_queue=team, priority_class="high" if high else "low",
            priority=100 if high else 10, kind="Job", runtime_ms=runtime_ms,
            pod_sets=[ev.PodSet(name="main", count=1, resources={"cpu": cpus * 1000})]))
    sim.run()
    running: dict[str, ev.WorkloadQueued] = {}
    queued = {env.data.workload: env.data for env in sim.log if isinstance(env.data, ev.WorkloadQueued)}
    nodes: dict[str, str] = {}
    for env in sim.log:
        d = env.data
        if isinstance(d, ev.PlacementDecided):
            nodes[d.workload] = d.assignments[0].node
        elif isinstance(d, ev.WorkloadRunning):
            running[d.workload] = queued[d.workload]
        elif isinstance(d, (ev.WorkloadFinished, ev.WorkloadEvicted)):
            running.pop(d.workload, None)
        cpu = {w: s.pod_sets[0].resources["cpu"] for w, s in running.items()}
        assert sum(cpu.values()) <= 8000
        for team in "ab":
            assert sum(v for w, v in cpu.items() if w.startswith(team)) <= 8000
        for n in ("n0", "n1"):
            assert sum(v for w, v in cpu.items() if nodes[w] == n) <= 4000
    assert all(wl.phase == "finished" for wl in sim.state.workloads.values())
    assert verify(sim.log).ok


def test_random_streams_hand_over_at_all():
    """(So that the property above checks hand-overs: a stream like its examples has some.)"""
    sim = Simulation(cycle_ms=30)
    sim.configure(COHORT)
    sim.add_nodes([node(n).cpu(4).obj() for n in ("n0", "n1")])
    for i in range(40):
        sim.run(until_ms=sim.now_ms + 40)
        sim.submit(ev.WorkloadQueued(
            workload=f"a/j{i}", namespace="a", queue="main", cluster_queue="a", priority_class="low", priority=10,
            kind="Job", runtime_ms=200 + 50 * (i % 5), pod_sets=[ev.PodSet(name="main", count=1, resources={"cpu": 4000})]))
    sim.run()
    handed = [env for env in sim.log if isinstance(env.data, ev.WorkloadAdmitted) and env.data.after]
    assert len(handed) >= 10
    assert verify(sim.log).ok
