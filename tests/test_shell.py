"""The service shell on the real broker: snapshots resume, a foreign snapshot is refused."""

from __future__ import annotations

import asyncio

import pytest

from gangway.adapters import kafka
from gangway.adapters.broker import EmbeddedBroker
from gangway.events.catalogue import Envelope, NodeObserved
from gangway.services.runtime.clock import ClusterClock
from gangway.services.runtime.shell import DecidingService

pytestmark = pytest.mark.broker


def nodes(n: int, start: int = 0) -> list[Envelope]:
    return [Envelope(id=f"node/{i}", source="test", time_ms=1_000 + i,
                     data=NodeObserved(node=f"n{i}", allocatable={"nvidia.com/gpu": 8000})) for i in range(start, start + n)]


async def run_until(service: DecidingService, offset: int, deadline_s: float = 20) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while service.state.offset < offset:
        assert loop.time() < end, f"{service.name} stuck at offset {service.state.offset}"
        await asyncio.sleep(0.05)
    stop.set()
    await task


async def append(bootstrap: str, envs: list[Envelope]) -> None:
    prod = kafka.producer(bootstrap)
    await prod.start()
    try:
        await kafka.append(prod, envs)
    finally:
        await prod.stop()


async def test_a_restarted_service_resumes_from_its_snapshot(tmp_path):
    with EmbeddedBroker() as broker:
        await kafka.ensure_topics(broker.bootstrap)
        await append(broker.bootstrap, nodes(5))
        clock = ClusterClock.starting_now()
        first = DecidingService("admission", broker.bootstrap, tmp_path, clock)
        await run_until(first, 4)
        assert (tmp_path / "admission.snapshot").exists()
        await append(broker.bootstrap, nodes(3, start=5))
        second = DecidingService("admission", broker.bootstrap, tmp_path, clock)
        folded = []
        original_fold = second.fold
        second.fold = lambda env: (folded.append(env.offset), original_fold(env))
        await run_until(second, 7)
        assert folded == [5, 6, 7], "resumed after the snapshot, not from zero"
        assert sorted(second.state.nodes) == [f"n{i}" for i in range(8)]


async def test_a_snapshot_of_another_log_is_refused(tmp_path):
    with EmbeddedBroker() as broker:
        await kafka.ensure_topics(broker.bootstrap)
        await append(broker.bootstrap, nodes(4))
        service = DecidingService("placement", broker.bootstrap, tmp_path)
        await run_until(service, 3)
    with EmbeddedBroker() as fresh:  # a new embedded broker is a new, empty log
        await kafka.ensure_topics(fresh.bootstrap)
        await append(fresh.bootstrap, nodes(6, start=10))
        service = DecidingService("placement", fresh.bootstrap, tmp_path)
        await run_until(service, 5)
        assert sorted(service.state.nodes) == [f"n{i}" for i in range(10, 16)]
