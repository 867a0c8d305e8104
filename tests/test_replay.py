"""The auditor: replaying a log re-derives every decision, and any tampering is reported where it is."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from builders import cluster_queue, contract, node, workload
from gangway.events import catalogue as ev
from gangway.events.reasons import ReasonCode
from gangway.events.fold import copy_state
from gangway.services.admission.policy import decide_admission
from gangway.services.audit.replay import verify
from gangway.services.deciders import decision_id
from gangway.sim import Simulation

MINUTE = 60_000


def contract_for_replay():
    return (contract(
        cluster_queue("research").cohort("lab").gpus(8).preemption("LowerPriority", "Any"),
        cluster_queue("prod").cohort("lab").gpus(8).preemption("LowerPriority", "Any"),
        cluster_queue("batch").gpus(8).preemption("LowerOrNewerEqualPriority"),
    ).priority_class("low", 0, grace_ms=10_000).priority_class("high", 100).obj())


def busy_simulation() -> Simulation:
    """Borrowing, reclaim, preemption within a queue, a lost node, and a new contract."""
    sim = Simulation()
    sim.configure(contract_for_replay())
    sim.add_nodes([node(f"n{i}").gpus(8).cpu(64).obj() for i in range(1, 4)])
    for i in range(3):
        sim.submit(workload(f"r{i}").queue("research").priority(0, "low").gpus(4).runtime_ms(20 * MINUTE).obj())
    sim.submit(workload("b0").queue("batch").priority(0, "low").gpus(8).runtime_ms(30 * MINUTE).obj())
    sim.run(until_ms=sim.now_ms + MINUTE)
    sim.submit(workload("p0").queue("prod").priority(100, "high").gpus(4, pods=2).runtime_ms(10 * MINUTE).obj())
    sim.submit(workload("b1").queue("batch").priority(100, "high").gpus(8).runtime_ms(5 * MINUTE).obj())
    sim.run(until_ms=sim.now_ms + 2 * MINUTE)
    sim.add_nodes([node("n1").gpus(8).cpu(64).obj(), node("n2").gpus(8).cpu(64).obj()])  # n3 is lost
    sim.configure(msgspec.structs.replace(contract_for_replay(), default_grace_ms=1_000))
    sim.run(until_ms=sim.now_ms + 120 * MINUTE)
    return sim


SIM = busy_simulation()
LOG = SIM.log


def first(kind: type, skip: int = 0) -> int:
    """Offset of the first decision of a kind (after ``skip`` of them)."""
    return [e.offset for e in LOG if isinstance(e.data, kind)][skip]


def tampered(offset: int, change: Callable[[ev.Envelope], ev.Envelope]) -> list[ev.Envelope]:
    log = list(LOG)
    log[offset] = change(log[offset])
    return log


def data(**changes) -> Callable[[ev.Envelope], ev.Envelope]:
    return lambda env: msgspec.structs.replace(env, data=msgspec.structs.replace(env.data, **changes))


def test_the_simulation_does_all_the_interesting_things():
    kinds = {type(e.data) for e in LOG}
    assert {ev.WorkloadAdmitted, ev.PlacementDecided, ev.EvictionOrdered, ev.WorkloadEvicted, ev.NodeRemoved,
            ev.WorkloadFinished, ev.ConfigApplied} <= kinds
    assert any(e.data.borrowed for e in LOG if isinstance(e.data, ev.WorkloadAdmitted))
    assert {(e.data.reason_code, e.data.reason_params["policy"]) for e in LOG if isinstance(e.data, ev.EvictionOrdered)} >= {
        (ReasonCode.WITHIN_QUEUE_LOWER_PRIORITY, "LowerOrNewerEqualPriority"), (ReasonCode.RECLAIM_WITHIN_COHORT, "Any")}
    assert all(w.phase == "finished" for w in SIM.state.workloads.values())


def test_auditor_verifies_every_decision_of_a_simulation():
    report = verify(LOG)
    decisions = sum(isinstance(e.data, ev.DECISION_TYPES) for e in LOG)
    assert report.mismatches == []
    assert (report.ok, report.events, report.decisions, report.verified, report.superseded) == (
        True, len(LOG), decisions, decisions, 0)
    assert msgspec.msgpack.encode(report.state) == msgspec.msgpack.encode(SIM.state)


def test_auditor_reports_progress_per_event():
    seen: list[int] = []
    verify(LOG, progress=seen.append)
    assert seen == [1] * len(LOG)


TAMPERING: list[tuple[str, Callable[[], int], Callable[[ev.Envelope], ev.Envelope], str]] = [
    ("an admission's usage", lambda: first(ev.WorkloadAdmitted), data(usage={"nvidia.com/gpu": 1}),
     "decides differently"),
    ("an admission's borrowing", lambda: first(ev.WorkloadAdmitted), data(borrowed={"nvidia.com/gpu": 1000}),
     "decides differently"),
    ("an admission's reason code", lambda: first(ev.WorkloadAdmitted), data(reason_code=ReasonCode.STRICT_FIFO),
     "decides differently"),
    ("an eviction's reason parameters", lambda: first(ev.EvictionOrdered),
     lambda env: msgspec.structs.replace(env, data=msgspec.structs.replace(
         env.data, reason_params={**env.data.reason_params, "policy": "Never"})), "decides differently"),
    ("an admission's workload", lambda: first(ev.WorkloadAdmitted, 1), data(workload="r0"), "decides differently"),
    ("a placement's node", lambda: first(ev.PlacementDecided),
     lambda env: msgspec.structs.replace(env, data=msgspec.structs.replace(env.data, assignments=[
         msgspec.structs.replace(a, node="n9") for a in env.data.assignments])), "decides differently"),
    ("an eviction's grace period", lambda: first(ev.EvictionOrdered), data(grace_ms=1), "decides differently"),
    ("an eviction's preemptor", lambda: first(ev.EvictionOrdered), data(preemptor="r1"), "decides differently"),
    ("an admission's based_on, one offset earlier", lambda: first(ev.WorkloadAdmitted, 2),
     lambda env: msgspec.structs.replace(env, data=msgspec.structs.replace(env.data, based_on=env.data.based_on - 1)),
     "does not make this decision"),
    ("a placement's based_on, one offset earlier", lambda: first(ev.PlacementDecided, 2),
     lambda env: msgspec.structs.replace(env, data=msgspec.structs.replace(env.data, based_on=env.data.based_on - 1)),
     "does not make this decision"),
    ("an admission's time", lambda: first(ev.WorkloadAdmitted, 1),
     lambda env: msgspec.structs.replace(env, time_ms=env.time_ms - 1), "recorded time"),
    ("an eviction's time", lambda: first(ev.EvictionOrdered),
     lambda env: msgspec.structs.replace(env, time_ms=env.time_ms - 1), "recorded time"),
    ("an admission's id", lambda: first(ev.WorkloadAdmitted, 1),
     lambda env: msgspec.structs.replace(env, id=env.id + "x"), "does not make this decision"),
    ("an admission based on the future", lambda: first(ev.WorkloadAdmitted, 1), data(based_on=10_000),
     "based_on 10000 is not an earlier offset"),
    ("a placement based on itself", lambda: first(ev.PlacementDecided),
     lambda env: msgspec.structs.replace(env, data=msgspec.structs.replace(env.data, based_on=env.offset)),
     "is not an earlier offset"),
    ("an eviction no decide makes", lambda: first(ev.WorkloadFinished),
     lambda env: msgspec.structs.replace(env, id=decision_id("evict", "r0", env.offset - 1), data=ev.EvictionOrdered(
         workload="r0", preemptor="p0", based_on=env.offset - 1, grace_ms=0)), "does not make this decision"),
]


@pytest.mark.parametrize(("where", "change", "why"), [c[1:] for c in TAMPERING], ids=[c[0] for c in TAMPERING])
def test_tampering_is_reported_at_its_offset(where: Callable[[], int], change, why: str):
    offset = where()
    report = verify(tampered(offset, change))
    assert not report.ok
    assert report.mismatches[0].offset == offset
    assert why in report.mismatches[0].why
    assert report.mismatches[0].id == tampered(offset, change)[offset].id


def test_mismatch_names_service_and_offset():
    offset = first(ev.EvictionOrdered)
    [mismatch] = verify(tampered(offset, data(grace_ms=1))).mismatches
    assert (mismatch.offset, mismatch.service) == (offset, "preemption")
    assert str(mismatch).startswith(f"offset {offset} {LOG[offset].id} (preemption): ")


def test_a_decision_based_on_the_state_before_any_event_is_checked_against_the_empty_state():
    log = [ev.Envelope(id=decision_id("admit", "w", -1), source="x", time_ms=0, offset=0, data=ev.WorkloadAdmitted(
        workload="w", cluster_queue="q", usage={}, borrowed={}, based_on=-1))]
    [mismatch] = verify(log).mismatches
    assert "decide on state[-1] does not make this decision" in mismatch.why


# --- superseded decisions --------------------------------------------------------------------------


def sim_with_a_stale_admission() -> tuple[Simulation, int]:
    """A second admission instance decides from an older state; its decision lands late, superseded."""
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(8)).obj())
    sim.add_nodes([node("n1").gpus(8).obj()])
    sim.submit(workload("w1").queue("q").gpus(4).runtime_ms(MINUTE).obj())
    old = copy_state(sim.state)
    sim.submit(workload("w2").queue("q").gpus(4).runtime_ms(MINUTE).obj())
    sim.run(until_ms=sim.now_ms + 1_000)
    [stale] = decide_admission(old)
    stale_id = decision_id("admit", stale.workload, stale.based_on)
    env = sim.append(stale_id, old.time_ms, stale, "gangway/admission-standby")
    sim.run()
    return sim, env.offset


def test_a_faithful_but_superseded_decision_still_verifies():
    sim, offset = sim_with_a_stale_admission()
    assert sim.state.workloads["w1"].superseded.startswith(f"admission {sim.log[offset].id}: workload is")
    report = verify(sim.log)
    assert report.mismatches == []
    assert (report.superseded, report.verified, report.decisions) == (1, report.decisions, report.decisions)


def test_a_superseded_decision_is_verified_too():
    sim, offset = sim_with_a_stale_admission()
    log = list(sim.log)
    log[offset] = data(reason_params={"cluster_queue": "forged"})(log[offset])
    [mismatch] = verify(log).mismatches
    assert mismatch.offset == offset and "decides differently" in mismatch.why


def test_replay_uses_the_contract_in_force_at_the_time():
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(4)).obj())
    sim.add_nodes([node("n1").gpus(8).obj()])
    sim.submit(workload("w").queue("q").gpus(8).obj())
    sim.run()
    sim.configure(contract(cluster_queue("q").gpus(8)).obj())
    sim.run()
    admitted = [e for e in sim.log if isinstance(e.data, ev.WorkloadAdmitted)]
    assert [e.data.based_on for e in admitted] == [3]
    report = verify(sim.log)
    assert (report.ok, report.verified) == (True, 2)
