"""The cycle's memos change no decision: admission and preemption decide the same with every memo
turned off (each workload its own shape), at every offset of random pipeline runs."""

from __future__ import annotations

from unittest import mock

from hypothesis import HealthCheck, Phase, given, settings

from builders import cluster_queue, contract, node, workload
from gangway.events.fold import apply
from gangway.events.state import State
from gangway.services.admission import policy as admission
from gangway.services.admission.policy import decide_admission
from gangway.services.preemption import policy as preemption
from gangway.services.preemption.policy import decide_preemption
from gangway.sim import Simulation
from test_properties import MINUTE, actions, random_run

MEMO_SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                         phases=(Phase.explicit, Phase.reuse, Phase.generate),
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def decisions_at_every_offset(log) -> list:
    state, out = State(), []
    for env in log:
        apply(state, env)
        out.append((decide_admission(state), decide_preemption(state)))
    return out


def no_memos():
    """Every workload a shape of its own, no remembered borrowing answers, no early end of a cycle
    and no queue left out of the walk."""
    return mock.patch.multiple(admission, _needs_borrowing=admission._borrows, _nothing_left=lambda state, snap: False,
                               counts_hold=lambda state: False), \
        mock.patch.object(admission.Snapshot, "failure_key", lambda self, wl: (wl.spec.workload, None)), \
        mock.patch.object(preemption, "_preemptor_key", lambda idx, wl, *_: (wl.spec.workload,))


@MEMO_SETTINGS
@given(steps=actions)
def test_memos_change_no_admission_and_no_eviction(steps):
    log = random_run(steps).log
    with_memos = decisions_at_every_offset(log)
    borrow, failures, preemptors = no_memos()
    with borrow, failures, preemptors:
        assert decisions_at_every_offset(log) == with_memos


def test_a_backfill_that_ends_in_time_is_admitted_after_a_longer_one_of_its_shape_failed():
    """While a reservation is held, gangs of one shape differ by runtime: the memo must tell them apart."""
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(16)).obj())
    sim.add_nodes([node("n1").gpus(8).obj()])
    sim.submit(workload("running").queue("q").gpus(4).runtime_ms(60 * MINUTE).obj())
    sim.run(until_ms=sim.now_ms)
    sim.submit(workload("big").queue("q").gpus(8).runtime_ms(60 * MINUTE).obj())  # blocked: gets the node reserved
    sim.submit(workload("long").queue("q").gpus(4).runtime_ms(120 * MINUTE).obj())  # would delay it
    sim.submit(workload("short").queue("q").gpus(4).runtime_ms(30 * MINUTE).obj())  # ends in time: backfill
    assert [d.workload for d in decide_admission(sim.state)] == ["short"]
    borrow, failures, preemptors = no_memos()
    with borrow, failures, preemptors:
        assert [d.workload for d in decide_admission(sim.state)] == ["short"]


def test_a_queue_whose_every_kind_of_workload_failed_is_not_walked_further():
    """Twenty queues of 1 GPU each, fifty workloads deep in two shapes: each admits one, then both of its
    shapes fail, and admission walks no further in it (the fold counts the shapes still to come) — the
    same admissions as walking every workload, for a fraction of the walk."""
    queues = [cluster_queue(f"q{i}").gpus(1) for i in range(20)]
    sim = Simulation()
    sim.configure(contract(*queues).obj())
    sim.add_nodes([node(f"n{i}").gpus(8).obj() for i in range(4)])
    for i in range(20):
        for j in range(50):
            sim.submit(workload(f"w{i}-{j}").queue(f"q{i}").gpus(1 if j % 2 == 0 else 2).obj())
    tried = []
    real = admission.Snapshot.try_admit

    def counting(self, wl):
        tried.append(wl.spec.workload)
        return real(self, wl)
    with mock.patch.object(admission.Snapshot, "try_admit", counting):
        admitted = decide_admission(sim.state)
        walked, tried[:] = len(tried), []
        borrow, failures, preemptors = no_memos()
        with borrow, failures, preemptors:
            assert decide_admission(sim.state) == admitted
    assert sorted(a.workload for a in admitted) == sorted(f"w{i}-0" for i in range(20))
    assert len(tried) == 1000 and walked == 20 * 3, walked
