"""Reservations for a blocked gang and EASY backfill (the planner; admission enforces it)."""

from __future__ import annotations

from builders import LogBuilder, cluster_queue, contract, node, workload
from gangway.services.placement.reservation import Reservation, backfill_nodes, blocked_head, reserve

CONTRACT = contract(cluster_queue("q").gpus(1000).cpu(10_000).memory_gi(100_000))
MINUTE_MS = 60_000


def nodes(count: int) -> LogBuilder:
    return LogBuilder().configure(CONTRACT).nodes(
        *(node(f"n{i}").gpus(8).cpu(96).memory_gi(512).at("b1", f"r{(i + 1) // 2}") for i in range(1, count + 1)))


def job(name: str, gpus: int, pods: int = 1, minutes: float | None = 60, priority: int = 0):
    b = workload(name).queue("q").priority(priority).pod_set("main", count=pods, gpus=gpus)
    return b.runtime_ms(round(minutes * MINUTE_MS)) if minutes is not None else b


def test_the_blocked_head_is_reserved_the_nodes_that_free_soonest():
    log = nodes(3)
    log.running(job("long", 8, minutes=120), on=[("main", "n1", 1)])
    log.running(job("short", 8, minutes=30), on=[("main", "n2", 1)])
    log.running(job("mid", 8, minutes=60), on=[("main", "n3", 1)])
    log.queue(job("big", 8, pods=2))
    head = blocked_head(log.state)
    assert head is not None and head.spec.workload == "big"
    r = reserve(log.state, head)
    started = log.state.workloads["mid"].started_ms
    assert r == Reservation("big", started + 60 * MINUTE_MS, frozenset({"n2", "n3"}))


def test_a_workload_without_a_runtime_never_frees_its_nodes_for_planning():
    log = nodes(2)
    log.running(job("forever", 8, minutes=None), on=[("main", "n1", 1)])
    log.running(job("forever-too", 8, minutes=None), on=[("main", "n2", 1)])
    log.queue(job("big", 8, pods=2))
    assert reserve(log.state, blocked_head(log.state)) is None


def test_nothing_is_blocked_when_the_head_fits_now():
    log = nodes(2).queue(job("small", 8))
    assert blocked_head(log.state) is None


BACKFILL_CASES = [
    ("a job that ends before the reservation starts may use any node", 30, None),
    ("a job that ends after it keeps off the reserved nodes", 90, frozenset({"n1"})),
    ("a job without a runtime keeps off the reserved nodes", None, frozenset({"n1"})),
]


def test_backfill_nodes():
    log = nodes(3).queue(*(job(f"j{i}", 1, minutes=m) for i, (_, m, _) in enumerate(BACKFILL_CASES)))
    reservation = Reservation("big", log.state.time_ms + 60 * MINUTE_MS, frozenset({"n2", "n3"}))
    for i, (why, _, expected) in enumerate(BACKFILL_CASES):
        wl = log.state.workloads[f"j{i}"]
        assert backfill_nodes(reservation, wl, log.state.time_ms, ["n1", "n2", "n3"]) == expected, why
    assert backfill_nodes(None, log.state.workloads["j0"], log.state.time_ms, ["n1"]) is None


def test_status_shows_the_blocked_head_and_its_expected_start():
    from rich.console import Console
    from gangway.reports import status_tables
    log = nodes(2)
    log.running(job("short", 8, minutes=30), on=[("main", "n2", 1)])
    log.running(job("long", 8, minutes=90), on=[("main", "n1", 1)])
    log.queue(job("big", 8, pods=2))
    console = Console(width=200, record=True)
    for table in status_tables(log.state):
        console.print(table)
    text = console.export_text()
    assert "Blocked at the head" in text and "big" in text and "n1, n2" in text
