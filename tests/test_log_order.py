"""Reading the log in offset order, without holes, even when the broker shows batches out of order."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import pytest

from gangway.adapters import kafka
from gangway.adapters.broker import EmbeddedBroker
from gangway.events.catalogue import Envelope, NodeRemoved


@dataclass
class Rec:
    offset: int


def offsets(records) -> list[int]:
    return [r.offset for r in records]


def test_records_in_order_pass_through():
    order = kafka.InOrder(0)
    taken, hole = order.take([Rec(0), Rec(1), Rec(2)])
    assert (offsets(taken), hole, order.next) == ([0, 1, 2], False, 3)


def test_a_hole_stops_the_records_and_asks_to_fetch_again():
    order = kafka.InOrder(5)
    taken, hole = order.take([Rec(5), Rec(7), Rec(8)])
    assert (offsets(taken), hole, order.next) == ([5], True, 6)
    taken, hole = order.take([Rec(6), Rec(7), Rec(8)])
    assert (offsets(taken), hole, order.next) == ([6, 7, 8], False, 9)


def test_records_seen_again_after_going_back_are_skipped():
    order = kafka.InOrder(3)
    taken, _ = order.take([Rec(1), Rec(2), Rec(3)])
    assert offsets(taken) == [3]


def test_a_hole_that_lasts_is_taken_as_real():
    order = kafka.InOrder(0)
    for _ in range(kafka.HOLE_RETRIES_MAX):
        assert order.take([Rec(2)]) == ([], True)
    taken, hole = order.take([Rec(2)])
    assert (offsets(taken), hole, order.next) == ([2], False, 3)


@pytest.mark.broker
async def test_concurrent_producers_never_leave_a_reader_with_a_hole():
    """Three producers append small batches at once (on Tansu a later batch can become visible
    before an earlier one); readers folding while they write still see every offset once."""
    count = 1500
    with EmbeddedBroker() as broker:
        await kafka.ensure_topics(broker.bootstrap)

        async def produce(pid: int) -> None:
            prod = kafka.producer(broker.bootstrap)
            await prod.start()
            rng, i = random.Random(pid), 0
            try:
                while i < count // 3:
                    envs = [Envelope(id=f"p{pid}/{i + j}", source="gangway/binder", time_ms=1, data=NodeRemoved(node="n"))
                            for j in range(rng.choice([1, 2, 3, 5]))]
                    await kafka.append(prod, envs)
                    i += len(envs)
                    await asyncio.sleep(rng.random() * 0.004)
            finally:
                await prod.stop()

        async def read_while_written() -> list[int]:
            seen: list[int] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while len(seen) < count and loop.time() < deadline:
                async for env in kafka.read_log(broker.bootstrap, start=len(seen), idle_ms=20):
                    seen.append(env.offset)
            return seen

        readers = [asyncio.create_task(read_while_written()) for _ in range(2)]
        await asyncio.gather(*(produce(p) for p in range(3)))
        for seen in await asyncio.gather(*readers):
            assert seen == list(range(len(seen))) and len(seen) >= count, "a hole or a repeat"


@pytest.mark.broker
async def test_a_reader_of_some_types_gets_those_in_order_and_no_others():
    """``read_log(types=…)`` (what the benchmarks wait with) skips the other records undecoded."""
    from gangway.events.catalogue import NodeObserved
    with EmbeddedBroker() as broker:
        await kafka.ensure_topics(broker.bootstrap)
        prod = kafka.producer(broker.bootstrap)
        await prod.start()
        try:
            await kafka.append(prod, [
                Envelope(id=f"e{i}", source="gangway/binder", time_ms=i,
                         data=NodeRemoved(node=f"n{i}") if i % 3 else NodeObserved(node=f"n{i}", allocatable={}))
                for i in range(30)])
        finally:
            await prod.stop()
        only = [env async for env in kafka.read_log(broker.bootstrap, idle_ms=50, types=(NodeObserved,))]
        every = [env async for env in kafka.read_log(broker.bootstrap, idle_ms=50)]
    assert [env.offset for env in only] == list(range(0, 30, 3))
    assert all(isinstance(env.data, NodeObserved) for env in only) and len(every) == 30


@pytest.mark.broker
@pytest.mark.both_brokers
async def test_an_append_of_several_batches_lands_whole_in_order_and_says_where_it_ends(kafka_broker):
    """``append`` builds the batches itself: 3,000 records of 700 bytes take three, which land in
    order, and it returns one past the last offset; a record over the request size is refused."""
    from aiokafka.errors import MessageSizeTooLargeError

    from gangway.events.catalogue import NodeObserved
    envs = [Envelope(id=f"e{i}", source="gangway/binder", time_ms=i,
                     data=NodeObserved(node=f"n{i}", allocatable={}, labels={"pad": "x" * 600})) for i in range(3000)]
    await kafka.ensure_topics(kafka_broker.bootstrap)
    prod = kafka.producer(kafka_broker.bootstrap)
    await prod.start()
    try:
        assert await kafka.append(prod, envs[:1]) == 1
        assert await kafka.append(prod, envs[1:]) == 3000
        assert await kafka.append(prod, []) == 0
        huge = Envelope(id="huge", source="gangway/binder", time_ms=1,
                        data=NodeObserved(node="n", allocatable={}, labels={"pad": "x" * kafka.RECORD_BYTES_MAX}))
        with pytest.raises(MessageSizeTooLargeError):
            await kafka.append(prod, [huge])
    finally:
        await prod.stop()
    read = [env async for env in kafka.read_log(kafka_broker.bootstrap, idle_ms=200)]
    assert [(env.offset, env.id) for env in read] == [(i, f"e{i}") for i in range(3000)]
