"""Kafka through aiokafka: topics, producers, the log reader. Records are CloudEvents (codec.py)."""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from gangway.events import codec, topics
from gangway.events.catalogue import Envelope

log = logging.getLogger(__name__)
LOG_PARTITION = TopicPartition(topics.LOG, 0)
#: Largest record we produce or fetch (a ConfigApplied with many queues is the biggest).
RECORD_BYTES_MAX = 4 * 1024 * 1024


async def ensure_topics(bootstrap: str, timeout_s: float = 20.0) -> None:
    """Create gangway's topics (one partition each: the log's one partition is its total order)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            missing = [NewTopic(t, num_partitions=1, replication_factor=1) for t in topics.ALL if t not in existing]
            if missing:
                try:
                    await admin.create_topics(missing)
                except TopicAlreadyExistsError:
                    pass
            return
        except Exception as exc:  # the broker may still be starting
            if asyncio.get_running_loop().time() > deadline:
                raise
            log.debug("topics not ready yet: %s", exc)
            await asyncio.sleep(0.2)
        finally:
            await admin.close()


def producer(bootstrap: str) -> AIOKafkaProducer:
    # Tansu refuses idempotent producers (KNOWN-BROKER-LIMITS.md): effects are made idempotent
    # by deterministic event ids instead.
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=2,
        max_request_size=RECORD_BYTES_MAX, max_batch_size=1024 * 1024,
    )


def log_consumer(bootstrap: str, group_id: str | None = None) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=20, fetch_max_bytes=32 * 1024 * 1024,
        max_partition_fetch_bytes=RECORD_BYTES_MAX * 4,
    )


async def append(prod: AIOKafkaProducer, envelopes: list[Envelope], topic: str = topics.LOG) -> None:
    """Append events in order and wait until the broker has them all.

    Keys: the cluster on the log (its one partition), the event's subject (job id) elsewhere.
    """
    futures = []
    for env in envelopes:
        value, headers = codec.to_binary(env)
        key = topics.DEFAULT_CLUSTER if topic == topics.LOG else (env.subject() or "")
        futures.append(await prod.send(topic, value=value, key=key.encode(), headers=headers, partition=0))
    if futures:
        await asyncio.gather(*futures)


#: How many times a hole in the log's offsets is fetched again before it is taken as real.
HOLE_RETRIES_MAX = 100


class InOrder:
    """Hands out log records strictly in offset order, without holes.

    Tansu, with several producers appending to one partition, can make a later batch visible to a
    fetch before an earlier one: a consumer then jumps over offsets it never sees again (measured:
    one hole in 3,000 records with 3 producers). A reader that meets a hole goes back and fetches
    again; only a hole that lasts ``HOLE_RETRIES_MAX`` fetches is taken as real (Kafka leaves holes
    only for transaction markers and compaction, which gangway does not use).
    """

    def __init__(self, start: int = 0):
        self.next = start
        self.retries = 0

    def take(self, records: list) -> tuple[list, bool]:
        """The records that continue the log, and whether a hole stopped them (seek to ``next``)."""
        taken = []
        for rec in records:
            if rec.offset < self.next:
                continue
            if rec.offset > self.next:
                if self.retries < HOLE_RETRIES_MAX:
                    self.retries += 1
                    return taken, True
                log.warning("log offsets %d..%d never appeared; going on", self.next, rec.offset - 1)
            self.retries = 0
            taken.append(rec)
            self.next = rec.offset + 1
        return taken, False


def decode_log_record(rec) -> Envelope | None:
    """The envelope of a log record, or None for a record no gangway service wrote.

    Only gangway's services write the log (``codec.LOG_WRITERS``); a record that is not one of our
    CloudEvents, or comes from another writer, is skipped — by every reader alike, so every folded
    state stays the same (the services also quarantine it: ``services/runtime/shell.py``).
    """
    try:
        return codec.from_log_record(rec.value, rec.headers, rec.offset)
    except codec.CodecError as exc:
        log.error("log offset %d quarantined (%s): %s", rec.offset, exc.reason, exc)
        return None


async def read_log(bootstrap: str, start: int = 0, idle_ms: int = 500, follow: bool = False):
    """Yield every envelope of the log from ``start`` up to its current end (the auditor's input),
    or, with ``follow``, on and on as the log grows.

    The end is the fetch high-water mark (ListOffsets(latest) is unreliable on Tansu).
    """
    consumer = log_consumer(bootstrap)
    await consumer.start()
    order = InOrder(start)
    try:
        consumer.assign([LOG_PARTITION])
        consumer.seek(LOG_PARTITION, start)
        while True:
            batch = await consumer.getmany(LOG_PARTITION, timeout_ms=idle_ms, max_records=10_000)
            records, hole = order.take(batch.get(LOG_PARTITION, []))
            if hole:
                consumer.seek(LOG_PARTITION, order.next)
                await asyncio.sleep(0.02)
            for rec in records:
                env = decode_log_record(rec)
                if env is not None:
                    yield env
            high = consumer.highwater(LOG_PARTITION)
            if follow or hole or records or high is None:
                continue
            if await consumer.position(LOG_PARTITION) >= high:
                return
    finally:
        await consumer.stop()


class ActiveLease:
    """Which instance of a service is the active one: Kafka's consumer group decides.

    Every instance of a service joins one group (``gangway-<service>-active``) on the log's one
    partition, and never reads through it (the partition is paused at once): the member Kafka
    assigns the partition to is the active instance; the others stand by, folding the log like it,
    and one of them takes over when the active one leaves or stops heartbeating (session timeout).
    Two instances that both believe they are active for a moment are harmless: their decisions
    carry deterministic ids and are validated where they land.
    """

    #: Tansu answers a JoinGroup after half the session timeout: 2 s joins in 1 s.
    SESSION_TIMEOUT_MS = 2_000

    def __init__(self, bootstrap: str, group: str):
        self.active = False
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
            session_timeout_ms=self.SESSION_TIMEOUT_MS, heartbeat_interval_ms=500,
            rebalance_timeout_ms=self.SESSION_TIMEOUT_MS,
        )

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe([topics.LOG], listener=_LeaseListener(self))

    async def keep(self, stop: asyncio.Event) -> None:
        """Take part in the group until ``stop`` (heartbeats run in aiokafka's own task)."""
        while not stop.is_set():
            await self.consumer.getmany(timeout_ms=200)

    async def stop(self) -> None:
        self.active = False
        await self.consumer.stop()


class _LeaseListener(ConsumerRebalanceListener):
    def __init__(self, lease: ActiveLease):
        self.lease = lease

    async def on_partitions_revoked(self, revoked) -> None:
        self.lease.active = False

    async def on_partitions_assigned(self, assigned) -> None:
        if assigned:
            self.lease.consumer.pause(*assigned)
        self.lease.active = LOG_PARTITION in assigned
