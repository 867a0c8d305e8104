"""A gang whose bind failed is requeued with a backoff on the log's clock, and deactivated after too
many failed binds in a row; what reconciling finds is on the log and changes no scheduling state."""

from __future__ import annotations

from builders import LogBuilder, cluster_queue, contract, node, workload
from gangway.events import catalogue as ev
from gangway.events.fold import copy_state
from gangway.events.reasons import C, reason, said
from gangway.read.describe import describe
from gangway.read.explain import explain, pending_report
from gangway.services.admission.policy import decide_admission
from gangway.services.binder.policy import RequeueBackoff, bind_failed, due_reports, rule_deadlines
from gangway.sim import Simulation

BACKOFF = RequeueBackoff(base_s=10, max_s=60, limit=3)


def placed() -> LogBuilder:
    log = LogBuilder().configure(contract(cluster_queue("q").gpus(16))).nodes(node("n1").gpus(8))
    return log.queue(workload("w").queue("q").gpus(8)).admit("w").place("w")


def fail_bind(log: LogBuilder, why: str = "pod w-0 to n1: 409 Conflict") -> ev.WorkloadEvicted:
    report = bind_failed(log.state.workloads["w"], log.now_ms, why, BACKOFF)
    log.add(report)
    return report


def test_the_backoff_doubles_up_to_its_maximum_and_ends_at_its_limit():
    assert [BACKOFF.after(n) for n in (1, 2, 3, 4)] == [10_000, 20_000, None, None]
    assert [RequeueBackoff(1, 5, 0).after(n) for n in (1, 2, 3, 4, 50)] == [1000, 2000, 4000, 5000, 5000]


def test_a_failed_bind_keeps_the_workload_out_of_admission_until_its_backoff_ends_on_the_logs_clock():
    log = placed()
    failed_at = log.now_ms
    report = fail_bind(log)
    assert (report.bind_failures, report.reason_code) == (1, C.BIND_BACKOFF)
    wl = log.state.workloads["w"]
    assert wl.phase == "pending" and wl.retry_after_ms == failed_at + 10_000
    assert decide_admission(log.state) == []  # the quota is free, but it waits out its backoff
    [(deadline, why)] = rule_deadlines(log.state)
    assert deadline == wl.retry_after_ms and "backoff of w" in why
    # Explain and the Pending message say why it waits.
    [pending] = pending_report(log.state, forecast=False).values()
    assert pending.code == C.BIND_BACKOFF and "1 failed bind(s) in a row" in pending.reason
    # The binder's tick at the deadline (on the log) makes it admissible again; replaying gives the same.
    ticks = [r for r in due_reports(log.state, wl.retry_after_ms) if isinstance(r[2], ev.ClockTicked)]
    [(_, t, tick)] = ticks
    log.add(tick, at_ms=t)
    [admitted] = decide_admission(log.state)
    assert admitted.workload == "w"
    replayed = LogBuilder()
    for env in log.envelopes:
        replayed.append(env)
    assert decide_admission(replayed.state) == [admitted]


def test_a_bind_that_keeps_failing_is_deactivated_with_a_typed_reason_explain_shows():
    log = placed()
    fail_bind(log)
    log.at(log.state.workloads["w"].retry_after_ms).admit("w").place("w")
    failed_at = log.now_ms
    second = fail_bind(log)
    assert second.bind_failures == 2 and second.retry_after_ms - failed_at == 20_000
    log.at(second.retry_after_ms).admit("w").place("w")
    last = fail_bind(log, "pod w-0 to n1: held by scheduling gate(s) example.com/hold")
    assert last.reason_code == C.BIND_FAILURES_EXCEEDED and last.retry_after_ms == 0
    wl = log.state.workloads["w"]
    assert wl.phase == "finished" and wl.deactivated and "limit 3" in wl.deactivated
    assert not log.state.pending and not log.state.active and not log.state.backing_off
    assert all(v == 0 for v in log.state.usage["q"].values())
    lines = explain(log.envelopes, "w", forecast=False)
    assert lines[-1].startswith(f"now deactivated ({C.BIND_FAILURES_EXCEEDED}): deactivated after 3 failed binds")
    assert "example.com/hold" in lines[-1]
    assert any("admissible again at" in line for line in lines)


def test_a_simulation_waits_out_a_backoff_and_then_admits():
    log = placed()
    fail_bind(log)
    sim = Simulation(state=copy_state(log.state))
    sim.run(until_ms=log.now_ms + 60_000, rounds_max=100)
    admitted = [e for e in sim.log if isinstance(e.data, ev.WorkloadAdmitted)]
    assert admitted and admitted[0].time_ms >= log.state.workloads["w"].retry_after_ms


def test_what_reconciling_found_is_on_the_log_and_changes_no_scheduling_state():
    log = placed()
    before = copy_state(log.state)
    found = ev.ClusterReconciled(kind="Job", namespace="ns", name="w", uid="u-1",
                                 **said(reason(C.RESUMED_WITHOUT_PLACEMENT, kind="Job", object="ns/w", pods=1)),
                                 workload="w", attempt=0, pods=["w-0"], nodes=["n1"],
                                 action="suspended again, 1 pod(s) deleted")
    log.add(found)
    after = log.state
    assert (after.workloads, after.pending, after.active, after.usage, after.nodes) == (
        before.workloads, before.pending, before.active, before.usage, before.nodes)
    line = describe(log.envelopes[-1])
    assert line == ("w reconciled with the cluster [resumed_without_placement]: Job ns/w was resumed with 1 pod(s) "
                    "on nodes, but the log holds no placement for it; suspended again, 1 pod(s) deleted")
    orphan = ev.ClusterReconciled(kind="Job", namespace="ns", name="x", uid="u-2",
                                  **said(reason(C.PODS_BOUND_WITHOUT_PLACEMENT, kind="Job", object="ns/x", pods=1)))
    log.add(orphan)
    assert describe(log.envelopes[-1]).startswith("Job ns/x reconciled with the cluster [pods_bound_without_placement]")
    assert any("reconciled with the cluster" in line for line in explain(log.envelopes, "w", forecast=False))


def test_a_log_with_backoffs_and_reconcile_findings_replays_every_decision():
    from gangway.services.audit.replay import verify
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(16)).obj())
    sim.add_nodes([node("n1").gpus(8).obj(), node("n2").gpus(8).obj()])
    sim.submit(workload("w").queue("q").gpus(8).obj())
    sim._decide_all()  # admitted and placed, not bound yet
    wl = sim.state.workloads["w"]
    assert wl.phase == "placed"
    sim.append("reconciled/x", sim.now_ms, ev.ClusterReconciled(
        kind="Job", namespace="ns", name="w", uid="u",
        **said(reason(C.PODS_VANISHED, kind="Job", object="ns/w", pods=1, workload="w")),
        workload="w", attempt=0), "gangway/binder")
    sim.append("rolled-back/w/0", sim.now_ms, bind_failed(wl, sim.now_ms, "refused", BACKOFF), "gangway/binder")
    sim.submit(workload("v").queue("q").gpus(8).obj())
    sim.run(until_ms=sim.now_ms + 600_000, rounds_max=200)
    admitted = [e for e in sim.log if isinstance(e.data, ev.WorkloadAdmitted)]
    assert [e.data.workload for e in admitted] == ["w", "v", "w"]  # v went first while w backed off
    rolled = next(e for e in sim.log if isinstance(e.data, ev.WorkloadEvicted))
    assert admitted[-1].time_ms >= rolled.data.retry_after_ms > admitted[1].time_ms
    report = verify(sim.log)
    assert report.ok and report.verified == report.decisions and report.decisions >= 6
