"""Admission writes each gang's placement with its admission (``PlacementDecided.with_admission``).

The placement is the one the placement service would make once the admissions are folded; the fold
keeps it only while the admission it was decided with is in force; the auditor re-derives it as
admission's.
"""

from __future__ import annotations

from unittest import mock

import msgspec
import pytest

from builders import LogBuilder, cluster_queue, contract, decide_pure, node, workload
from gangway.benchmarks.pipeline import simulated_log
from gangway.events import catalogue as ev
from gangway.events.fold import apply, copy_state
from gangway.events.reasons import ReasonCode
from gangway.events.state import State
from gangway.services.admission.policy import admissions, admissions_placed
from gangway.services.audit.replay import verify
from gangway.services.deciders import id_of, propose
from gangway.services.placement.policy import Placer, decide_placement


def two_nodes() -> LogBuilder:
    return LogBuilder().configure(contract(cluster_queue("q").gpus(16))).nodes(node("n1").gpus(8), node("n2").gpus(8))


def decided(log: LogBuilder) -> list:
    return decide_pure(lambda state: list(admissions_placed(state)), log.state)


def test_each_admission_is_followed_by_its_placement_at_the_same_offset():
    log = two_nodes().queue(workload("a").queue("q").gpus(4), workload("b").queue("q").pod_set("w", count=2, gpus=4))
    out = decided(log)
    assert [(type(d).__name__, d.workload) for d in out] == [
        ("WorkloadAdmitted", "a"), ("PlacementDecided", "a"), ("WorkloadAdmitted", "b"), ("PlacementDecided", "b")]
    assert all(d.based_on == log.offset for d in out)
    assert [d.with_admission for d in out if isinstance(d, ev.PlacementDecided)] == [True, True]
    assert [pid for pid, _, _ in propose("admission", log.state)] == [
        f"admit/a/{log.offset}", f"admit/a/{log.offset}/placement", f"admit/b/{log.offset}", f"admit/b/{log.offset}/placement"]


def test_written_in_order_the_pair_leaves_the_gang_placed():
    log = two_nodes().queue(workload("a").queue("q").pod_set("w", count=2, gpus=6))
    for d in decided(log):
        log.add(d, event_id=id_of("admit", d))
    assert log.phase("a") == "placed"
    assert sorted(a.node for a in log.state.workloads["a"].placement.assignments) == ["n1", "n2"]
    assert decide_placement(log.state) == []


def test_the_placement_does_not_hold_for_a_later_admission_of_the_same_workload():
    """Admitted, evicted before its placement landed, admitted again: the old pair's placement is stale."""
    log = two_nodes().queue(workload("a").queue("q").gpus(4))
    first_admission, first_placement = decided(log)
    log.add(first_admission).order_eviction("a", "x", grace_ms=0).evicted("a")
    log.admit("a")
    log.add(first_placement)
    wl = log.state.workloads["a"]
    assert wl.phase == "admitted" and wl.superseded_code == ReasonCode.DECIDED_BEFORE


def test_the_placement_does_not_hold_once_its_nodes_are_taken():
    """Between the decision and its fold other pods took the node: the placement service places it."""
    log = LogBuilder().configure(contract(cluster_queue("q").gpus(16))).nodes(node("n1").gpus(8))
    log.queue(workload("a").queue("q").gpus(8))
    admitted, placement = decided(log)
    log.add(admitted)
    log.nodes(node("n1").gpus(4))  # the node shrank meanwhile
    log.add(placement)
    assert log.phase("a") == "admitted" and log.state.workloads["a"].superseded_code == ReasonCode.PODS_NO_LONGER_FIT
    log.nodes(node("n1").gpus(8))
    [again] = decide_pure(decide_placement, log.state)
    assert again.workload == "a" and not again.with_admission


def _admissions_then_placement(state: State) -> tuple[list, list]:
    """The pairs admission writes, and what the placement service decides once only the
    admissions are folded (its cycle places the gangs left unplaced first, in order)."""
    out = list(admissions_placed(state))
    after = copy_state(state)
    offset = state.offset
    for d in out:
        if isinstance(d, ev.WorkloadAdmitted):
            offset += 1
            apply(after, ev.Envelope(id=id_of("admit", d), source="gangway/admission", time_ms=state.time_ms,
                                     offset=offset, data=d))
    with_admission = [d for d in out if isinstance(d, ev.PlacementDecided)]
    return with_admission, decide_placement(after)


def _placed(decisions) -> dict:
    return {d.workload: (d.assignments, d.reason_code, d.reason_params, d.fragmentation) for d in decisions}


@pytest.mark.parametrize("seed", [3, 11])
def test_placements_with_admission_are_the_placement_services_own(seed: int):
    """On a busy simulated cluster (mixed gangs, preemption), at every offset with someone to admit:
    each placement written with an admission is the one the placement service would make."""
    log = simulated_log(workloads=150, seed=seed, nodes=6)
    # (some admissions are made beside a reservation: their placements leave the kept room alone)
    assert any(isinstance(env.data, ev.WorkloadAdmitted) and env.data.kept for env in log)
    state = State()
    compared = 0
    for env in log:
        apply(state, env)
        if not state.pending:
            continue
        with_admission, by_placement = _admissions_then_placement(state)
        mine = _placed(with_admission)
        theirs = {name: placed for name, placed in _placed(by_placement).items() if name in mine}
        assert mine == theirs, env.offset
        compared += len(mine)
    assert compared > 100


def test_the_auditor_re_derives_placements_written_with_admissions():
    log = simulated_log(workloads=150, seed=5, nodes=6)
    with_admission = [env for env in log if isinstance(env.data, ev.PlacementDecided) and env.data.with_admission]
    assert with_admission and all(env.source == "gangway/admission" and env.id.endswith("/placement")
                                  for env in with_admission)
    report = verify(log)
    assert report.ok, report.mismatches[:3]
    assert report.verified >= len(with_admission)
    i = log.index(with_admission[0])
    moved = msgspec.structs.replace(with_admission[0].data, assignments=list(reversed(with_admission[0].data.assignments))
                                    if len(with_admission[0].data.assignments) > 1 else
                                    [msgspec.structs.replace(with_admission[0].data.assignments[0], node="elsewhere")])
    [mismatch, *_] = verify(log[:i] + [msgspec.structs.replace(log[i], data=moved)] + log[i + 1:]).mismatches
    assert (mismatch.offset, mismatch.service) == (log[i].offset, "admission")


def _reference(state: State) -> list:
    """admissions_placed the plain way: the whole cycle first, then every placement."""
    decided = list(admissions(state))
    placer = Placer(state, admitted={a.workload for a in decided})
    for name in state.unplaced:
        placer.place(state.workloads[name])
    out = []
    for a in decided:
        out.append(a)
        placed = placer.place(state.workloads[a.workload], a, with_admission=True)
        if placed is not None:
            out.append(placed)
    return out


@pytest.mark.parametrize("seed", [3, 6])
def test_the_lazy_pairs_are_the_whole_cycles(seed: int):
    """Preemptors (nominated, or waiting for victims) come first in the cycle, so the placer built
    at the first other admission keeps the same rooms as one built after the whole cycle."""
    log = simulated_log(workloads=200, seed=seed, nodes=4)  # each has a cycle admitting a nominated
    state = State()                                          # preemptor before one still waiting
    preempting = 0
    for env in log:
        apply(state, env)
        if state.pending:
            preempting += bool(state.nominated or any(wl.phase == "evicting" for wl in state.workloads.values()))
            assert list(admissions_placed(state)) == _reference(state), env.offset
    assert preempting > 20


def test_a_caller_that_wants_only_the_admission_builds_no_placer():
    log = two_nodes().queue(workload("a").queue("q").gpus(4))
    with mock.patch("gangway.services.admission.policy.Placer", wraps=Placer) as built:
        first = next(admissions_placed(log.state))
        assert isinstance(first, ev.WorkloadAdmitted) and built.call_count == 0
        assert len(list(admissions_placed(log.state))) == 2 and built.call_count == 1
