"""Kueue's maximum execution time (label ``kueue.x-k8s.io/max-exec-time-seconds``): a workload
admitted that long in all is ordered out and deactivated, never queued again. Pure core
(Simulation) and the submission path; every log replays."""

from __future__ import annotations

import msgspec
import pytest
import yaml

from builders import cluster_queue, contract, node, workload
from gangway.events import catalogue as ev
from gangway.events.reasons import ReasonCode
from gangway.read.explain import explain
from gangway.services.audit.replay import verify
from gangway.services.submission.manifests import load_jobs, unread
from gangway.services.submission.policy import MAX_EXEC_LABEL, Invalid, check_job
from gangway.sim import Simulation


def started() -> Simulation:
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(8)).obj())
    sim.add_nodes([node("n0").gpus(8).obj()])
    return sim


def limited(name: str, runtime_s: int, max_s: int | None, gpus: int = 8) -> ev.WorkloadQueued:
    wq = workload(name).queue("q").gpus(gpus).runtime_s(runtime_s).obj()
    return msgspec.structs.replace(wq, max_execution_ms=None if max_s is None else max_s * 1000)


def of(sim: Simulation, kind, name: str) -> list[ev.Envelope]:
    return [env for env in sim.log if isinstance(env.data, kind) and env.data.workload == name]


def test_a_workload_past_its_maximum_execution_time_is_ordered_out_and_deactivated():
    sim = started()
    sim.submit(limited("long", runtime_s=60, max_s=10))
    sim.submit(limited("next", runtime_s=5, max_s=None))  # waits for the node "long" holds
    sim.run(until_ms=sim.now_ms + 120_000, rounds_max=200)
    admitted = of(sim, ev.WorkloadAdmitted, "long")[0].time_ms
    [order] = of(sim, ev.EvictionOrdered, "long")
    assert order.time_ms == admitted + 10_000  # at the deadline, not later
    assert order.data.reason_code == ReasonCode.MAX_EXECUTION_TIME_EXCEEDED
    assert order.data.preemptor == "MaximumExecutionTime"
    long = sim.state.workloads["long"]
    assert long.phase == "finished" and long.deactivated_code == ReasonCode.MAX_EXECUTION_TIME_EXCEEDED
    assert len(of(sim, ev.WorkloadAdmitted, "long")) == 1, "deactivated: never queued again"
    [out] = of(sim, ev.WorkloadEvicted, "long")  # the binder's report says so too
    assert (out.data.reason_code, out.data.reason) == (ReasonCode.MAX_EXECUTION_TIME_EXCEEDED, order.data.reason)
    assert sim.state.workloads["next"].phase == "finished"  # ran in the room it gave back
    assert explain(sim.log, "long")[-1].startswith("now deactivated (max_execution_time_exceeded): admitted for 10 s "
                                                   "in all"), explain(sim.log, "long")
    assert verify(sim.log).ok


def test_work_that_ends_within_its_maximum_execution_time_is_left_alone():
    sim = started()
    sim.submit(limited("short", runtime_s=5, max_s=10))
    sim.run(until_ms=sim.now_ms + 60_000, rounds_max=200)
    assert not of(sim, ev.EvictionOrdered, "short")
    assert sim.state.workloads["short"].deactivated is None
    assert verify(sim.log).ok


def test_the_time_of_earlier_attempts_counts():
    """Preempted after 6 s of a 10 s limit, it has 4 s left when it is admitted again."""
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(8).preemption(within="LowerPriority"))
                  .priority_class("low", 1, grace_ms=0).priority_class("high", 100, grace_ms=0).obj())
    sim.add_nodes([node("n0").gpus(8).obj()])
    low = msgspec.structs.replace(limited("low", runtime_s=60, max_s=10), priority_class="low", priority=1)
    sim.submit(low)
    sim.run(until_ms=sim.now_ms + 6_000, rounds_max=100)
    sim.submit(msgspec.structs.replace(limited("high", runtime_s=3, max_s=None), priority_class="high", priority=100))
    sim.run(until_ms=sim.now_ms + 60_000, rounds_max=300)
    orders = of(sim, ev.EvictionOrdered, "low")
    assert [o.data.reason_code for o in orders] == [ReasonCode.WITHIN_QUEUE_LOWER_PRIORITY,
                                                   ReasonCode.MAX_EXECUTION_TIME_EXCEEDED]
    first_out = of(sim, ev.WorkloadEvicted, "low")[0].time_ms
    first_in, second_in = (a.time_ms for a in of(sim, ev.WorkloadAdmitted, "low"))
    assert orders[1].time_ms == second_in + 10_000 - (first_out - first_in)
    assert sim.state.workloads["low"].deactivated_code == ReasonCode.MAX_EXECUTION_TIME_EXCEEDED
    assert verify(sim.log).ok


JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: capped
  namespace: team
  labels: {kueue.x-k8s.io/queue-name: main, kueue.x-k8s.io/max-exec-time-seconds: "LIMIT"}
spec:
  template:
    spec:
      containers: [{name: c, image: x, resources: {requests: {nvidia.com/gpu: 1}}}]
"""


def test_the_label_is_read_from_a_manifest_and_a_bad_value_is_refused():
    [job] = load_jobs(JOB.replace("LIMIT", "3600"), "job.yaml")
    assert job.labels[MAX_EXEC_LABEL] == "3600"
    assert not unread(yaml.safe_load(JOB.replace("LIMIT", "3600"))), "read: not warned of"
    assert unread(yaml.safe_load(JOB.replace("labels: {kueue.x-k8s.io/queue-name: main, ",
                                             "annotations: {kueue.x-k8s.io/queue-name: main, ")))
    check_job(job)
    for bad in ("0", "-5", "1.5", "an hour", "99999999999"):
        [job] = load_jobs(JOB.replace("LIMIT", bad), "job.yaml")
        with pytest.raises(Invalid) as refused:
            check_job(job)
        assert refused.value.reason == "invalid_field" and MAX_EXEC_LABEL in str(refused.value), bad
