"""Binder policy of the simulated cluster: what it reports, and at which cluster time.

The logs here use ``step_ms=0`` so every event happens exactly at the time the case sets: a
workload placed at T0 starts at T0; reports about an end carry the time it happened (start +
runtime, order + grace), never the binder's ``now``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from builders import LogBuilder, cluster_queue, contract, node, workload
from gangway.events import catalogue as ev
from gangway.services.binder.policy import DEFAULT_RUNTIME_MS, due_reports, next_due_ms, node_digest, node_sync

T0 = 1_000_000
MINUTE = 60_000
Setup = Callable[[], LogBuilder]


def cluster() -> LogBuilder:
    log = LogBuilder(start_ms=T0, step_ms=0)
    return log.configure(contract(cluster_queue("q").gpus(64))).nodes(node("n1").gpus(8), node("n2").gpus(8))


def wl(name: str = "w", runtime_ms: int | None = MINUTE, gpus: int = 4):
    b = workload(name).queue("q").gpus(gpus)
    return b.runtime_ms(runtime_ms) if runtime_ms is not None else b


def evicted_by_p(grace_ms: int) -> ev.WorkloadEvicted:
    return ev.WorkloadEvicted(workload="w", attempt=0, preemptor="p",
                              reason=f"preempted by p after a {grace_ms} ms grace period")


CASES: list[tuple[str, Setup, int, list[tuple[str, int, object]]]] = [
    ("a placed gang is bound and started at once",
     lambda: cluster().admitted(wl()).place("w"), T0 + 5,
     [("bound/w/0", T0 + 5, ev.WorkloadBound(workload="w", attempt=0)),
      ("running/w/0", T0 + 5, ev.WorkloadRunning(workload="w", attempt=0))]),
    ("a bound gang is started",
     lambda: cluster().admitted(wl()).place("w").add(ev.WorkloadBound(workload="w", attempt=0)), T0 + 5,
     [("running/w/0", T0 + 5, ev.WorkloadRunning(workload="w", attempt=0))]),
    ("a running workload finishes at start + runtime, not at now",
     lambda: cluster().running(wl()), T0 + 10 * MINUTE,
     [("finished/w/0", T0 + MINUTE, ev.WorkloadFinished(workload="w", attempt=0))]),
    ("a running workload finishes exactly when its runtime is up",
     lambda: cluster().running(wl()), T0 + MINUTE,
     [("finished/w/0", T0 + MINUTE, ev.WorkloadFinished(workload="w", attempt=0))]),
    ("a running workload is not finished a millisecond early",
     lambda: cluster().running(wl()), T0 + MINUTE - 1,
     []),
    ("a workload that declares no runtime runs the default one",
     lambda: cluster().running(wl(runtime_ms=None)), T0 + DEFAULT_RUNTIME_MS,
     [("finished/w/0", T0 + DEFAULT_RUNTIME_MS, ev.WorkloadFinished(workload="w", attempt=0))]),
    ("an evicted pod is gone when its grace period is over, at order + grace",
     lambda: cluster().running(wl(runtime_ms=10 * MINUTE)).at(T0 + 10_000).order_eviction("w", "p", grace_ms=5_000),
     T0 + 20_000,
     [("evicted/w/0", T0 + 15_000, evicted_by_p(5_000))]),
    ("an evicted pod is not gone before its grace period is over",
     lambda: cluster().running(wl(runtime_ms=10 * MINUTE)).at(T0 + 10_000).order_eviction("w", "p", grace_ms=5_000),
     T0 + 14_999,
     []),
    ("a workload that finishes within its grace period finishes",
     lambda: cluster().running(wl(runtime_ms=12_000)).at(T0 + 10_000).order_eviction("w", "p", grace_ms=5_000),
     T0 + 20_000,
     [("finished/w/0", T0 + 12_000, ev.WorkloadFinished(workload="w", attempt=0))]),
    ("finishing exactly at the end of the grace period wins over the eviction",
     lambda: cluster().running(wl(runtime_ms=15_000)).at(T0 + 10_000).order_eviction("w", "p", grace_ms=5_000),
     T0 + 20_000,
     [("finished/w/0", T0 + 15_000, ev.WorkloadFinished(workload="w", attempt=0))]),
    ("finishing a millisecond after the grace period is too late",
     lambda: cluster().running(wl(runtime_ms=15_001)).at(T0 + 10_000).order_eviction("w", "p", grace_ms=5_000),
     T0 + 20_000,
     [("evicted/w/0", T0 + 15_000, evicted_by_p(5_000))]),
    ("a workload evicted before it was bound is gone after its grace period",
     lambda: cluster().admitted(wl()).place("w").order_eviction("w", "p", grace_ms=5_000), T0 + 5_000,
     [("evicted/w/0", T0 + 5_000, evicted_by_p(5_000))]),
    ("the reports of a later attempt carry its number",
     lambda: cluster().running(wl()).evicted("w").admit("w").place("w"), T0,
     [("bound/w/1", T0, ev.WorkloadBound(workload="w", attempt=1)),
      ("running/w/1", T0, ev.WorkloadRunning(workload="w", attempt=1))]),
    ("pending, admitted and finished workloads have nothing to report",
     lambda: cluster().queue(wl("p")).admitted(wl("a")).running(wl("f")).finish("f"), T0 + 100 * MINUTE,
     []),
    ("a running workload its producer took back stops at once, its finish never reported",
     lambda: cluster().running(wl()).add(ev.WithdrawalRequested(workload="w", reason="withdrawn by its producer")),
     T0 + 10 * MINUTE,
     [("withdrawn/w/0", T0 + 10 * MINUTE, ev.WorkloadWithdrawn(workload="w", reason="withdrawn by its producer"))]),
    ("a placed gang its producer took back is never bound",
     lambda: cluster().admitted(wl()).place("w").add(ev.WithdrawalRequested(workload="w", reason="not needed")), T0,
     [("withdrawn/w/0", T0, ev.WorkloadWithdrawn(workload="w", reason="not needed"))]),
    ("reports follow the order of admission",
     lambda: cluster().admitted(wl("w2"), wl("w1")).place("w1").place("w2"), T0,
     [("bound/w2/0", T0, ev.WorkloadBound(workload="w2", attempt=0)),
      ("running/w2/0", T0, ev.WorkloadRunning(workload="w2", attempt=0)),
      ("bound/w1/0", T0, ev.WorkloadBound(workload="w1", attempt=0)),
      ("running/w1/0", T0, ev.WorkloadRunning(workload="w1", attempt=0))]),
]


@pytest.mark.parametrize(("setup", "now_ms", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_due_reports(setup: Setup, now_ms: int, expected: list):
    assert due_reports(setup().state, now_ms) == expected


@pytest.mark.parametrize(("setup", "expected"), [
    pytest.param(lambda: cluster().queue(wl()), None, id="nothing runs: nothing is due"),
    pytest.param(lambda: cluster().admitted(wl()).place("w"), None, id="placed, not started: nothing is due yet"),
    pytest.param(lambda: cluster().running(wl("a", runtime_ms=5 * MINUTE), wl("b", runtime_ms=MINUTE)), T0 + MINUTE,
                 id="the earliest finish"),
    pytest.param(lambda: cluster().running(wl(runtime_ms=5 * MINUTE)).order_eviction("w", "p", grace_ms=1_000),
                 T0 + 1_000, id="an eviction due before the finish"),
    pytest.param(lambda: cluster().running(wl(runtime_ms=None)), T0 + DEFAULT_RUNTIME_MS,
                 id="the default runtime"),
])
def test_next_due_ms(setup: Setup, expected: int | None):
    assert next_due_ms(setup().state) == expected


def test_reports_replayed_through_the_fold_finish_the_workload_at_its_due_time():
    log = cluster().running(wl())
    for event_id, time_ms, event in due_reports(log.state, T0 + 10 * MINUTE):
        log.add(event, event_id=event_id, at_ms=time_ms)
    w = log.state.workloads["w"]
    assert (w.phase, w.finished_ms) == ("finished", T0 + MINUTE)


N1 = node("n1").gpus(8).obj()
N2 = node("n2").gpus(8).obj()
SYNC: list[tuple[str, list[ev.NodeObserved], list[tuple[str, object]]]] = [
    ("nodes the log already knows as they are: nothing to report", [N1, N2], []),
    ("a new node is reported", [N1, N2, node("n3").gpus(4).obj()],
     [("node/n3/" + node_digest(node("n3").gpus(4).obj()), node("n3").gpus(4).obj())]),
    ("a node whose allocatable changed is reported again", [node("n1").gpus(4).obj(), N2],
     [("node/n1/" + node_digest(node("n1").gpus(4).obj()), node("n1").gpus(4).obj())]),
    ("a node whose labels changed is reported again", [N1, node("n2").gpus(8).label("rack", "r1").obj()],
     [("node/n2/" + node_digest(node("n2").gpus(8).label("rack", "r1").obj()),
       node("n2").gpus(8).label("rack", "r1").obj())]),
    ("a node gone from the cluster is reported removed", [N2],
     [("node-removed/n1/2", ev.NodeRemoved(node="n1"))]),
    ("all change at once: by name, removals last", [node("n3").gpus(1).obj(), node("n0").gpus(1).obj()],
     [("node/n0/" + node_digest(node("n0").gpus(1).obj()), node("n0").gpus(1).obj()),
      ("node/n3/" + node_digest(node("n3").gpus(1).obj()), node("n3").gpus(1).obj()),
      ("node-removed/n1/2", ev.NodeRemoved(node="n1")), ("node-removed/n2/2", ev.NodeRemoved(node="n2"))]),
]


@pytest.mark.parametrize(("observed", "expected"), [c[1:] for c in SYNC], ids=[c[0] for c in SYNC])
def test_node_sync(observed: list[ev.NodeObserved], expected: list[tuple[str, object]]):
    state = cluster().state
    assert node_sync(state, observed, T0 + 7) == [(pid, T0 + 7, event) for pid, event in expected]


def test_node_sync_of_what_it_reported_has_nothing_more_to_report():
    log = cluster()
    observed = [node("n2").gpus(16).obj(), node("n3").gpus(8).obj()]
    for pid, t, event in node_sync(log.state, observed, T0):
        log.add(event, event_id=pid, at_ms=t)
    assert node_sync(log.state, observed, T0) == []


def test_node_digest_tells_node_observations_apart():
    assert node_digest(N1) == node_digest(node("n1").gpus(8).obj())
    assert node_digest(N1) != node_digest(node("n1").gpus(8).label("a", "b").obj())
