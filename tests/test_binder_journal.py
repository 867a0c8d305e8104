"""The simulated cluster remembers what it saw: reports lost with the end of a log (a restore
from an archive that missed its last records) are made again with the times the cluster saw."""

from __future__ import annotations

from builders import LogBuilder, cluster_queue, contract, node, workload
from gangway.services.binder.service import Journal, SimulatedBinder
from gangway.services.runtime.clock import ClusterClock

T0 = 1_000_000


def placed_log() -> LogBuilder:
    log = LogBuilder(start_ms=T0, step_ms=0)
    log.configure(contract(cluster_queue("q").gpus(64))).nodes(node("n1").gpus(8))
    return log.admitted(workload("w").queue("q").gpus(4).runtime_ms(60_000)).place("w")


def binder(tmp_path, now_ms: int) -> SimulatedBinder:
    b = SimulatedBinder("unused:9092", [], tmp_path, ClusterClock(0.0, now_ms, 0.0))
    b.nodes_synced = True
    return b


async def test_a_start_the_log_lost_is_reported_again_with_the_time_the_cluster_saw(tmp_path):
    first = binder(tmp_path, T0 + 5)
    reports = first.decide(placed_log().state)
    assert [(pid, t) for pid, t, _ in reports] == [("bound/w/0", T0 + 5), ("running/w/0", T0 + 5)]
    await first.after_append()  # acknowledged: journaled
    # The whole stack dies; the restored log ends before these reports. Much later, a new binder:
    again = binder(tmp_path, T0 + 40_000)
    assert [(pid, t) for pid, t, _ in again.decide(placed_log().state)] == [("bound/w/0", T0 + 5),
                                                                            ("running/w/0", T0 + 5)]


async def test_reports_never_acknowledged_are_not_remembered(tmp_path):
    first = binder(tmp_path, T0 + 5)
    first.decide(placed_log().state)  # appended, but the process died before the broker answered
    again = binder(tmp_path, T0 + 40_000)
    assert [t for _, t, _ in again.decide(placed_log().state)] == [T0 + 40_000, T0 + 40_000]


def test_a_journal_of_another_log_is_not_used(tmp_path):
    Journal(tmp_path / "binder.journal").record([("running/w/0", T0 - 10_000, None)])
    again = binder(tmp_path, T0 + 7)  # w was admitted at T0 on this log: the entry is older
    assert [t for pid, t, _ in again.decide(placed_log().state) if pid == "running/w/0"] == [T0 + 7]


def test_without_a_cluster_file_a_restarted_binder_keeps_the_nodes_on_the_log(tmp_path):
    """`gangway up` started again without --cluster removed every node, sending the running work back
    to wait for nodes that never come (an operator's report): with no cluster file the nodes stay; with
    one, the log is brought to it."""
    state = placed_log().state
    kept = SimulatedBinder("unused:9092", None, tmp_path, ClusterClock(0.0, T0 + 5, 0.0))
    assert [type(data).__name__ for _, _, data in kept.decide(state)] == ["WorkloadBound", "WorkloadRunning"]
    synced = SimulatedBinder("unused:9092", [node("n2").gpus(8).obj()], tmp_path / "other", ClusterClock(0.0, T0 + 5, 0.0))
    assert sorted(type(data).__name__ for _, _, data in synced.decide(state)) == ["NodeObserved", "NodeRemoved"]
