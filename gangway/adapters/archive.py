"""The archive: every record of every gangway topic, on disk, so the memory-only embedded broker
can be restarted (or killed, or the machine rebooted) without losing the log.

Layout, under ``<state dir>/archive/``::

    <topic>/<first offset, 20 digits>.seg    append-only segment files of one partition (0)
    groups.json                              committed input offsets of the consumer groups

A segment starts with ``MAGIC`` and holds records one after the other, each::

    u32 body length | u32 CRC-32 of the body | body
    body = MessagePack array [offset, timestamp ms, key, value, [[header name, value], ...]]

A torn tail (a record cut short, or whose CRC does not match, at the end of the last segment: the
archiver died in the middle of a write) is cut off with a warning when the archive is opened;
damage anywhere else is an ``ArchiveError``.

The **archiver** (``run_archiver``) consumes each topic in offset order and appends what it
fetches; with the default fsync policy ``batch`` it calls fsync after each fetched batch before
fetching the next, so a record is on disk within one fetch round (≈ the 20 ms fetch wait plus the
write) of being visible. That is the loss window: records the broker acknowledged but the archiver
had not yet written when the whole process group was killed. ``GANGWAY_ARCHIVE_FSYNC=none`` leaves
flushing to the operating system (a killed process loses nothing more; a power cut may lose the
last seconds); ``interval:MS`` calls fsync at most every MS milliseconds.

**Durable acknowledgements.** After each write the archiver commits how far it has archived each
topic to the consumer group ``gangway-archiver`` (the first commit is made before its ready file,
so the group exists before any service or producer runs). A producer of outside input — jobs,
contracts — waits until that group has passed its records (``wait_archived``) before it calls them
sent: what a producer was told is sent is never in the loss window. On Apache Kafka there is no such
group, and the broker's own ``acks=all`` is the acknowledgement.

**Restore** (``restore``) produces every archived record back, in order, into a fresh broker and
checks that each lands at the offset it had: offsets, keys, headers and timestamps are the same,
so the log keeps its identity (the id of event 0), snapshots still match it and the accounting
ledger goes on from its tracking row. Consumer group offsets are committed back too.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition

from gangway.adapters import kafka
from gangway.events import codec, topics

log = logging.getLogger(__name__)
MAGIC = b"GWARC01\n"
_PREFIX = struct.Struct(">II")
#: A new segment is started past this size.
SEGMENT_BYTES = 64 * 1024 * 1024
#: Larger than any record gangway fetches: a length beyond it is damage, not a record.
RECORD_BODY_MAX = kafka.RECORD_BYTES_MAX * 4
FSYNC_ENV = "GANGWAY_ARCHIVE_FSYNC"
DEFAULT_FSYNC = "batch"
#: Committed group offsets are saved this often, and only once the archive holds every record
#: visible when they were read, so a restored group never skips a record whose effects were lost.
GROUP_OFFSETS_EVERY_S = 1.0
#: Topics archived: all of gangway's, the quarantine included.
ARCHIVED_TOPICS = topics.ALL
#: The archiver's progress, committed per topic: the next offset it will archive.
ARCHIVER_GROUP = "gangway-archiver"
#: How long a producer waits for the archiver by default (it is restarted within seconds if it dies).
WAIT_ARCHIVED_S = 30.0
#: On SIGTERM, at most this long to archive what the broker still holds.
DRAIN_S = 5.0
#: The archiver is off the path from a queued job to a running one: it fetches lazily
#: (``kafka.LAZY_FETCH``) and yields the CPU (this niceness) to the services on it, as the
#: services off the path do (``shell.NICE``). A producer waiting for it (``wait_archived``) waits
#: up to a fifth of a second longer. In Kueue's large-scale scenario the two took the wall from
#: 8.15 to 6.33 × its lower bound (bench/README).
ARCHIVER_NICE = 10


class ArchiveError(RuntimeError):
    """The archive is damaged (not just a torn tail), or a restore did not reproduce it."""


class Record(msgspec.Struct, frozen=True, array_like=True):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    #: A list (what the producer's batch builder takes as it is).
    headers: list[tuple[str, bytes | None]] = msgspec.field(default_factory=list)


_BODY_ENCODER = msgspec.msgpack.Encoder()
_BODY_DECODER = msgspec.msgpack.Decoder(Record)


def encode(rec: Record) -> bytes:
    body = _BODY_ENCODER.encode(rec)
    return _PREFIX.pack(len(body), zlib.crc32(body)) + body


def _frames(data: bytes) -> tuple[list[tuple[int, int]], int]:
    """(start, length) of each sound record body, and where the sound part ends."""
    frames, at, end = [], len(MAGIC), len(data)
    view = memoryview(data)
    while end - at >= _PREFIX.size:
        length, crc = _PREFIX.unpack_from(data, at)
        start = at + _PREFIX.size
        if length > RECORD_BODY_MAX or start + length > end or zlib.crc32(view[start:start + length]) != crc:
            break
        frames.append((start, length))
        at = start + length
    return frames, at


def read_segment(data: bytes, where: str = "") -> tuple[list[Record], int]:
    """The records of one segment's bytes and the length of its sound part (< len(data): torn)."""
    frames, sound = _segment_frames(data, where)
    return list(_decode_frames(data, frames, where)), sound


def _segment_frames(data: bytes, where: str) -> tuple[list[tuple[int, int]], int]:
    if not data.startswith(MAGIC):
        if len(data) < len(MAGIC) and MAGIC.startswith(data):
            return [], 0  # torn while writing the header itself
        raise ArchiveError(f"{where}: not an archive segment (bad magic)")
    return _frames(data)


def _decode_frames(data: bytes, frames: list[tuple[int, int]], where: str) -> Iterator[Record]:
    """Records one at a time (a whole segment of them at once keeps the cyclic GC busy)."""
    view = memoryview(data)
    decode = _BODY_DECODER.decode
    for start, length in frames:
        try:
            yield decode(view[start:start + length])
        except msgspec.DecodeError:  # a sound CRC over a bad body: written by something else
            raise ArchiveError(f"{where}: record at byte {start} does not decode") from None


def _last_record(path: Path) -> Record | None:
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        return None
    frames, _ = _frames(data)
    if not frames:
        return None
    start, length = frames[-1]
    return _BODY_DECODER.decode(memoryview(data)[start:start + length])


def _topic_dir(root: Path, topic: str) -> Path:
    return root / topic


def segments(root: Path, topic: str) -> list[Path]:
    folder = _topic_dir(root, topic)
    return sorted(folder.glob("*.seg")) if folder.exists() else []


def read_topic(root: Path, topic: str, repair: bool = True) -> Iterator[Record]:
    """Every archived record of a topic, in offset order; a torn tail of the last segment is cut
    off (with ``repair``) or ignored, damage elsewhere raises ``ArchiveError``."""
    return read_topic_segments(root, topic, segments(root, topic), repair)


def read_topic_segments(root: Path, topic: str, paths: list[Path], repair: bool = True) -> Iterator[Record]:
    expected = None
    for i, path in enumerate(paths):
        data = path.read_bytes()
        frames, sound = _segment_frames(data, str(path))
        if sound < len(data):
            if i != len(paths) - 1:
                raise ArchiveError(f"{path}: damaged at byte {sound} of {len(data)} (not the last segment)")
            log.warning("archive %s: torn tail of %d bytes cut off after %d records", path, len(data) - sound,
                        len(frames))
            if repair:
                with open(path, "r+b") as f:
                    f.truncate(max(sound, len(MAGIC)) if sound else 0)
                    f.flush()
                    os.fsync(f.fileno())
        for rec in _decode_frames(data, frames, str(path)):
            if expected is not None and rec.offset != expected:
                raise ArchiveError(f"{path}: offset {rec.offset} follows {expected - 1} (a gap or a repeat)")
            expected = rec.offset + 1
            yield rec


def repair_tail(root: Path, topic: str) -> None:
    """Cut a torn tail off the topic's last segment (with a warning), so appending goes on after it."""
    paths = segments(root, topic)
    if paths:
        last = paths[-1]
        for _ in read_topic_segments(root, topic, [last]):
            pass


def next_offsets(root: Path) -> dict[str, int]:
    """Per topic, the offset after the last archived record (0: nothing archived)."""
    found = {}
    for topic in ARCHIVED_TOPICS:
        last = None
        for path in reversed(segments(root, topic)[-2:]):
            last = _last_record(path)
            if last is not None:
                break
        found[topic] = last.offset + 1 if last is not None else 0
    return found


def fsync_policy() -> tuple[str, float]:
    """("batch"|"none"|"interval", seconds) from GANGWAY_ARCHIVE_FSYNC."""
    text = os.environ.get(FSYNC_ENV, DEFAULT_FSYNC).strip().lower()
    if text in ("batch", "none"):
        return text, 0.0
    if text.startswith("interval:"):
        try:
            ms = float(text.split(":", 1)[1])
        except ValueError:
            ms = -1
        if ms >= 0:
            return "interval", ms / 1000
    raise ArchiveError(f"{FSYNC_ENV}={text!r}: expected batch, none or interval:MS")


@dataclass
class TopicWriter:
    """Appends records of one topic to its current segment (a new one past SEGMENT_BYTES)."""

    root: Path
    topic: str
    next_offset: int = 0
    file: object = None
    size: int = 0

    def open(self) -> None:
        folder = _topic_dir(self.root, self.topic)
        folder.mkdir(parents=True, exist_ok=True)
        paths = segments(self.root, self.topic)
        if paths and paths[-1].stat().st_size < SEGMENT_BYTES:
            self._open(paths[-1])
        else:
            self._open(folder / f"{self.next_offset:020d}.seg")

    def _open(self, path: Path) -> None:
        if self.file is not None:
            self.file.close()
        self.file = open(path, "ab")
        self.size = self.file.tell()
        if self.size == 0:
            self.file.write(MAGIC)
            self.size = len(MAGIC)
            _fsync_dir(path.parent)

    def append(self, records) -> None:
        if self.file is None:
            self.open()
        for rec in records:
            if rec.offset != self.next_offset:
                raise ArchiveError(f"{self.topic}: record at offset {rec.offset}, expected {self.next_offset}")
            if self.size >= SEGMENT_BYTES:
                self.file.flush()
                os.fsync(self.file.fileno())
                self._open(_topic_dir(self.root, self.topic) / f"{rec.offset:020d}.seg")
            raw = encode(rec)
            self.file.write(raw)
            self.size += len(raw)
            self.next_offset = rec.offset + 1

    def flush(self, sync: bool) -> None:
        if self.file is not None:
            self.file.flush()
            if sync:
                os.fsync(self.file.fileno())

    def close(self) -> None:
        if self.file is not None:
            self.flush(True)
            self.file.close()
            self.file = None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _as_record(rec) -> Record:
    """A fetched record as archived (a null header value, which no gangway writer sends and no
    producer can send back, is kept as empty)."""
    headers = rec.headers or ()
    if any(v is None for _, v in headers):
        return Record(rec.offset, rec.timestamp, rec.key, rec.value, [(k, v or b"") for k, v in headers])
    return Record(rec.offset, rec.timestamp, rec.key, rec.value, list(headers))


# --- consumer group offsets --------------------------------------------------------------------


def groups_path(root: Path) -> Path:
    return root / "groups.json"


def load_group_offsets(root: Path) -> dict[str, dict[str, int]]:
    path = groups_path(root)
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError:
        log.warning("archive %s unreadable; group offsets start from the archive's own evidence", path)
        return {}


def save_group_offsets(root: Path, offsets: dict[str, dict[str, int]]) -> None:
    tmp = groups_path(root).with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(offsets, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, groups_path(root))
    _fsync_dir(root)


async def read_group_offsets(bootstrap: str, groups: list[str],
                             consumers: dict[str, AIOKafkaConsumer] | None = None) -> dict[str, dict[str, int]]:
    """Committed offsets of the groups on the archived topics (OffsetFetch for given partitions:
    Tansu does not answer the "all partitions" form the admin client sends). ``consumers`` keeps
    one idle consumer per group between calls."""
    own = consumers is None
    consumers = {} if consumers is None else consumers
    try:
        found: dict[str, dict[str, int]] = {}
        for group in groups:
            if group not in consumers:
                consumers[group] = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                                    enable_auto_commit=False)
                await consumers[group].start()
            found[group] = {}
            for topic in ARCHIVED_TOPICS:
                offset = await consumers[group].committed(TopicPartition(topic, 0))
                if offset is not None and offset >= 0:
                    found[group][topic] = offset
        return found
    finally:
        if own:
            for consumer in consumers.values():
                await consumer.stop()


async def commit_group_offsets(bootstrap: str, offsets: dict[str, dict[str, int]]) -> None:
    for group, by_topic in offsets.items():
        if not by_topic:
            continue
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
        await consumer.start()
        try:
            tps = {TopicPartition(t, 0): o for t, o in by_topic.items()}
            consumer.assign(list(tps))
            await consumer.commit(tps)
        finally:
            await consumer.stop()


# --- the archiver ------------------------------------------------------------------------------


@dataclass
class Archiver:
    """Consumes every topic in offset order and appends it to the archive."""

    bootstrap: str
    root: Path
    groups: list[str] = field(default_factory=list)
    writers: dict[str, TopicWriter] = field(default_factory=dict)
    archived: int = 0
    group_consumers: dict = field(default_factory=dict)

    async def run(self, stop: asyncio.Event, ready: Path | None = None) -> None:
        policy, interval = fsync_policy()
        self.root.mkdir(parents=True, exist_ok=True)
        starts = next_offsets(self.root)
        for topic in ARCHIVED_TOPICS:
            repair_tail(self.root, topic)
            self.writers[topic] = TopicWriter(self.root, topic, starts[topic])
            self.writers[topic].open()
        consumer = kafka.log_consumer(self.bootstrap, group_id=ARCHIVER_GROUP, lazy=True)
        await consumer.start()
        tps = {TopicPartition(t, 0): t for t in ARCHIVED_TOPICS}
        order = {tp: kafka.InOrder(starts[t]) for tp, t in tps.items()}
        consumer.assign(list(tps))
        for tp, t in tps.items():
            consumer.seek(tp, starts[t])
        await consumer.commit({tp: starts[t] for tp, t in tps.items()})
        last_sync = time.monotonic()
        pending_groups: tuple[float, dict, dict[str, int]] | None = None
        if ready is not None:
            ready.touch()
        drain_until = None
        caught_up = False
        try:
            while True:
                if stop.is_set():  # archive what the broker holds now, then stop
                    drain_until = drain_until or time.monotonic() + DRAIN_S
                    if caught_up or time.monotonic() > drain_until:
                        break
                batch = await consumer.getmany(timeout_ms=50 if stop.is_set() else 200, max_records=20_000)
                wrote = False
                for tp, records in batch.items():
                    taken, hole = order[tp].take(records)
                    if taken:
                        self.writers[tps[tp]].append(_as_record(r) for r in taken)
                        self.archived += len(taken)
                        wrote = True
                    if hole:
                        consumer.seek(tp, order[tp].next)
                now = time.monotonic()
                if wrote and (policy == "batch" or (policy == "interval" and now - last_sync >= interval)):
                    for w in self.writers.values():
                        w.flush(True)
                    last_sync = now
                elif wrote:
                    for w in self.writers.values():
                        w.flush(False)
                if wrote:  # written (and synced, as the policy says): producers waiting may go on
                    await consumer.commit({tp: order[tp].next for tp in batch})
                highs = {tp: consumer.highwater(tp) for tp in tps}
                caught_up = not wrote and all(h is not None and order[tp].next >= h for tp, h in highs.items())
                if self.groups and not stop.is_set():
                    pending_groups = await self._save_groups(consumer, tps, order, pending_groups, now)
        finally:
            if ready is not None:
                ready.unlink(missing_ok=True)
            await consumer.stop()
            for group_consumer in self.group_consumers.values():
                await group_consumer.stop()
            for w in self.writers.values():
                w.close()

    async def _save_groups(self, consumer, tps, order, pending, now):
        """Read the groups' committed offsets now and then; save a reading once the archive holds
        everything the broker showed at that moment (its fetch high-water marks)."""
        if pending is not None:
            read_at, offsets, marks = pending
            if all(order[tp].next >= marks.get(t, 0) for tp, t in tps.items()):
                save_group_offsets(self.root, offsets)
                pending = None
            return pending
        if now - getattr(self, "_groups_read_at", 0.0) < GROUP_OFFSETS_EVERY_S:
            return None
        self._groups_read_at = now
        try:
            offsets = await read_group_offsets(self.bootstrap, self.groups, self.group_consumers)
        except Exception as exc:  # the broker may be busy; try again later
            log.debug("group offsets not read: %s", exc)
            return None
        # Marks taken after the offsets were read: everything acknowledged before the commit is below them.
        await asyncio.sleep(0.05)
        marks = {t: consumer.highwater(tp) or 0 for tp, t in tps.items()}
        return now, offsets, marks


async def wait_archived(bootstrap: str, ends: dict[str, int], timeout_s: float = WAIT_ARCHIVED_S) -> bool:
    """Until the archiver has archived each topic up to ``ends[topic]`` (exclusive). False at once if
    no archiver runs there (no ``gangway-archiver`` group, or one this principal may not read: Apache
    Kafka keeps its own data); raises
    ``ArchiveBehind`` when the deadline passes first."""
    consumer = kafka.log_consumer(bootstrap, group_id=ARCHIVER_GROUP)
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            behind = {}
            for topic, end in ends.items():
                try:
                    committed = await consumer.committed(TopicPartition(topic, 0))
                except kafka.NOT_AUTHORISED:  # a secured broker (Apache Kafka): no archiver runs there
                    return False
                if committed is None or committed < 0:
                    return False
                if committed < end:
                    behind[topic] = (committed, end)
            if not behind:
                return True
            if time.monotonic() > deadline:
                raise ArchiveBehind(f"the archiver has not archived {', '.join(f'{t} {c} of {e}' for t, (c, e) in behind.items())}"
                                    f" after {timeout_s:.0f} s: the records are on the broker but not yet safe from a kill")
            await asyncio.sleep(0.02)
    finally:
        await consumer.stop()


class ArchiveBehind(TimeoutError):
    """The broker acknowledged records that the archiver has not archived within the deadline."""


def archive_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "archive"


# --- restore -----------------------------------------------------------------------------------


@dataclass
class Restored:
    records: dict[str, int]
    seconds: float
    #: The newest event time (CloudEvents ``time``) on the restored log: cluster time goes on from it.
    cluster_ms: int = 0

    @property
    def total(self) -> int:
        return sum(self.records.values())


async def restore(bootstrap: str, root: Path, observe=None, adjust_groups=None) -> Restored:
    """Produce every archived record back, in order, into a broker whose topics are empty, and
    check each lands at its archived offset. Topics that already hold exactly the archive (an
    outside Kafka that kept its data) are left alone. ``observe(topic, record)`` sees each record
    produced back; ``adjust_groups(offsets)`` may move the archived group offsets before they are
    committed."""
    started = time.perf_counter()
    counts: dict[str, int] = {}
    times: list[int] = []
    prod = kafka.producer(bootstrap)
    await prod.start()
    collecting = gc.isenabled()
    gc.disable()  # a bulk load of short-lived objects: the cyclic GC would only rescan them
    try:
        ends = await high_waters(bootstrap)
        archived_ends = next_offsets(root)
        for topic in ARCHIVED_TOPICS:
            expected_end = archived_ends[topic]
            if expected_end == 0:
                counts[topic] = 0
                continue
            present = ends.get(topic, 0)
            if present == expected_end:
                counts[topic] = 0
                continue
            if present:
                raise ArchiveError(f"{topic}: the broker holds {present} records, the archive {expected_end}; "
                                   "restore needs the topic empty")
            records = read_topic(root, topic)
            if observe is not None:
                records = _observed(records, topic, observe)
            counts[topic] = await _produce_back(prod, topic, records, times,
                                                scan_times_from=expected_end - TIME_SCAN_RECORDS)
    finally:
        if collecting:
            gc.enable()
        await prod.stop()
    groups = load_group_offsets(root)
    if adjust_groups is not None:
        groups = adjust_groups(groups)
    if groups:
        await commit_group_offsets(bootstrap, groups)
    return Restored(counts, time.perf_counter() - started, max(times, default=0))


def _event_time(newest: bytes) -> int:
    try:
        return codec.parse_time(newest.decode()) if newest else 0
    except (codec.CodecError, UnicodeDecodeError):
        return 0


def _observed(records, topic: str, observe):
    for rec in records:
        observe(topic, rec)
        yield rec


#: The newest event time is looked for among the log's last records only (event times on the log
#: only lag its order by a few seconds of cluster time: reports of ends carry when they happened).
TIME_SCAN_RECORDS = 10_000


async def _produce_back(prod, topic: str, records, times: list[int], scan_times_from: int = 0) -> int:
    """Produce records back in whole batches (one future per batch, not per record) and check each
    batch's base offset; batches go one at a time per partition, so order is kept."""
    n = 0
    newest = b""  # gangway writes times as fixed-width RFC 3339 UTC: bytes order is time order
    is_log = topic == topics.LOG
    pending: list[tuple[int, int, asyncio.Future]] = []

    async def settle(keep: int) -> None:
        while len(pending) > keep:
            first, count, fut = pending.pop(0)
            meta = await fut
            if meta.offset != first:
                raise ArchiveError(f"{topic}: archived offsets {first}..{first + count - 1} restored from {meta.offset}")

    batch, first, count = prod.create_batch(), 0, 0
    for rec in records:
        if rec.offset != n:
            raise ArchiveError(f"{topic}: archived offset {rec.offset} where {n} was expected")
        headers = rec.headers
        if batch.append(timestamp=rec.timestamp, key=rec.key, value=rec.value, headers=headers) is None:
            pending.append((first, count, await prod.send_batch(batch, topic, partition=0)))
            await settle(keep=8)
            batch, first, count = prod.create_batch(), n, 0
            if batch.append(timestamp=rec.timestamp, key=rec.key, value=rec.value, headers=headers) is None:
                raise ArchiveError(f"{topic}: record at offset {n} is larger than a batch")
        count += 1
        n += 1
        if is_log and rec.offset >= scan_times_from:
            for name, value in rec.headers:
                if name == "ce_time" and value is not None and len(value) == 24 and value > newest:
                    newest = value
    if count:
        pending.append((first, count, await prod.send_batch(batch, topic, partition=0)))
    await settle(keep=0)
    if is_log:
        times.append(_event_time(newest))
    return n


async def high_waters(bootstrap: str) -> dict[str, int]:
    """Records each topic holds now (fetch high-water; ListOffsets is unreliable on Tansu)."""
    consumer = kafka.log_consumer(bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(t, 0) for t in ARCHIVED_TOPICS]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        found: dict[str, int] = {}
        deadline = time.monotonic() + 5
        while len(found) < len(tps) and time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=100, max_records=1)
            for tp in tps:
                high = consumer.highwater(tp)
                if high is not None:
                    found[tp.topic] = high
        return found
    finally:
        await consumer.stop()


# --- the archiver process ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m gangway.adapters.archive BOOTSTRAP DIR [--group G]...``: the stack's archiver.

    SIGTERM makes it archive what the broker holds at that moment, then exit. SIGINT is ignored: a
    Ctrl-C in the terminal of `gangway up` reaches the whole process group, and the archiver must
    outlive the services to archive their last records (the stack sends SIGTERM once they are
    gone)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="gangway-archiver")
    parser.add_argument("bootstrap")
    parser.add_argument("dir")
    parser.add_argument("--group", action="append", default=[], help="consumer group whose offsets to keep")
    parser.add_argument("--ready", help="file touched once archiving has started")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s archiver %(levelname)s %(message)s")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        archiver = Archiver(args.bootstrap, Path(args.dir), groups=args.group)
        await archiver.run(stop, Path(args.ready) if args.ready else None)
        log.info("archived %d records this run", archiver.archived)

    os.nice(ARCHIVER_NICE)
    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
