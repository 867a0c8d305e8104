"""The shell of a log-following service.

One loop, the same for every service:
1. fetch what the log has past our offset and fold it (``apply``);
2. when caught up (position = fetch high-water) and none of our proposals is still in flight,
   ``decide`` on the state and append the proposals, each with ``based_on`` = our offset;
3. keep the ids of those bound for the log in flight until they come back through it — so the
   next decision is taken from a state that includes them, and nothing is proposed twice
   (a proposal names its topic: the log unless it says otherwise);
4. now and then, snapshot (state + offset) so a restart does not refold from zero.

Subclasses give ``decide`` (pure, from the policy module) and optionally ``wake_in_s`` (when to
decide again without new events) and ``on_event`` (effects outside the log, e.g. SQL).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import msgspec

from gangway.adapters import kafka, quarantine
from gangway.events import codec, topics
from gangway.events.catalogue import Envelope, WorkloadAdmitted
from gangway.events.fold import apply, handlers_for, restored
from gangway.events.state import State
from gangway.services.deciders import follows, proposals, propose
from gangway.services.runtime.clock import ClusterClock

log = logging.getLogger(__name__)


class Proposal(NamedTuple):
    """An event a service proposes: its id, its time (cluster ms), its data, and the topic it goes to.

    ``decide`` may return plain ``(id, time_ms, data)`` triples for the log."""

    id: str
    time_ms: int
    data: object
    topic: str = topics.LOG


FETCH_RECORDS_MAX = 20_000
IDLE_WAIT_S = 1.0
FETCH_WAIT_S = 0.05
#: How long a service starting from its snapshot waits for the log's record at the snapshot's offset
#: (to check it is the log the snapshot was taken on) before it folds from zero instead.
RESUME_WAIT_S = 30.0
#: Proposals not seen back after this long are given up (a lost produce); decide again.
IN_FLIGHT_TIMEOUT_S = 30.0
#: A snapshot after at least this many events folded since the last…
SNAPSHOT_EVERY_EVENTS = 50_000
#: …and at least this many per workload in the state: a snapshot costs in proportion to the state
#: (a quarter of a second at 20,000 workloads, a tenth of a 10,000-job burst's CPU when it fell in
#: it), so spacing them in proportion keeps their share of the fold's cost the same at any size.
SNAPSHOT_EVENTS_PER_WORKLOAD = 4
#: The niceness a snapshot's writer adds to its service's (``snapshot_in_background``): the
#: lowest priority, so it writes in what the services leave of the CPU.
SNAPSHOT_NICE = 19
#: The collector's thresholds in a service's own process: a full collection walks the whole folded
#: state, and with Python's default (one per 10 of the middle generation's) a burst onto a big
#: cluster spent a sixth of each service's time in them; one per 100 leaves about one a burst, and
#: cycles are still freed.
GC_THRESHOLDS = (700, 10, 100)

#: Niceness of a service's own process (``os.nice``, by service name): the services off the path from
#: a queued job to a running one yield the CPU to those on it (submission, admission, the binder)
#: when the machine is busy, and catch up after. Placement places only what admission could not
#: place with the admission; preemption finds what admission cannot admit; money is counted from
#: the log at any delay. (The archiver too: ``archive.ARCHIVER_NICE``.) At 5, 5 and 10 the two
#: folding services off the path still took a third of a core each all through Kueue's
#: large-scale burst, where admission is the bottleneck and got half of one: 10, 10 and 19 took
#: the wall from 7.5–7.6 to 6.5–7.3 × its lower bound (bench/README, nineteenth round).
NICE = {"placement": 10, "preemption": 10, "accounting": 19}


#: How often, at most, a service commits the log offset it has folded (its consumer group's
#: committed offset on the log: what the console and any Kafka lag exporter read as its progress).
FOLDED_COMMIT_EVERY_S = 1.0


class LogService:
    name = "service"
    snapshots = True
    #: Decide only from a state that includes our last proposals (the deciders must: their
    #: ``based_on`` state alone explains each decision). Submission does not need to: it knows
    #: which jobs it has in flight and validates each record on its own.
    waits_for_own_writes = True
    #: Whether this service copies log records no gangway service wrote to ``gangway.quarantine``
    #: (every service skips them alike and counts them; one copies them, once).
    copies_quarantine = False
    #: Whether the service has its process to itself (``gangway service``): it then tunes the
    #: collector (``GC_THRESHOLDS``, and the first fold's objects frozen once caught up).
    own_process = False
    #: The share of its time the service may spend in ``decide`` (1: decide whenever caught up).
    decide_share = 1.0
    #: How long a decide may go on before the service appends what it decided and decides the
    #: rest later (s; None: no limit), and the share of the runtimes it admitted that shortens
    #: that (``cycle_limit_s``). A decide may stop after any decision: each is decided on the state
    #: it is based on whatever comes after it, and the auditor derives up to the last.
    cycle_s: float | None = None
    runtime_share: float | None = None
    #: The event types whose effect on the state the service reads (None: every one). The others
    #: only move its state's time and offset: what they change in the state is never true in it.
    folds: frozenset[type] | None = None

    def __init__(self, bootstrap: str, state_dir: str | Path = ".gangway", clock: ClusterClock | None = None):
        self.bootstrap = bootstrap
        self.state_dir = Path(state_dir)
        self.clock = clock or ClusterClock.from_env()
        self.state = State()
        #: Our proposals not yet seen back in the log: event id → when it was appended (monotonic s).
        self.in_flight: dict[str, float] = {}
        self.order = kafka.InOrder(0)
        #: Input partition → its reader in offset order (``on_start`` seeks and sets these).
        self.input_order: dict = {}
        self.caught_up = False
        self.lease: kafka.ActiveLease | None = None
        #: Whether the service was active at the last turn of the loop (None: not known yet).
        self.was_active: bool | None = None
        self._since_snapshot = 0
        #: The forked process writing a snapshot (``snapshot_in_background``), until reaped.
        self._writer: int | None = None
        #: No decide before this (monotonic s): ``decide_share``.
        self.next_decide_at = 0.0
        #: The folded offset last committed (next offset to fold), and when (monotonic s).
        self._committed: tuple[int, float] = (0, 0.0)
        #: Log records skipped as not gangway's, and those still to copy to the quarantine topic.
        self.quarantined = 0
        self.to_quarantine: list[tuple[object, str, str]] = []
        self.quarantine_copied: set[int] | None = None
        self._handlers = None if self.folds is None else handlers_for(self.folds)

    # --- hooks -----------------------------------------------------------------------------

    def decide(self, state: State) -> Iterable[Proposal]:
        return []

    def wake_in_s(self, state: State) -> float:
        """Longest wait for new events before deciding again."""
        return IDLE_WAIT_S

    def on_event(self, before: State, env: Envelope) -> None:
        """Called with the state *before* ``env`` is folded."""

    async def on_folded(self) -> None:
        """Called at each turn of the loop, after the fetched batch (if any) is folded."""

    async def on_caught_up(self) -> None:
        """Called once, the first time the service has folded the whole log."""

    @property
    def ready_path(self) -> Path:
        """Exists while the service runs and has folded the whole log once (``gangway up`` waits for it)."""
        return self.state_dir / f"{self.name}.ready"

    def input_partitions(self) -> list:
        """Partitions read besides the log (their records go to ``on_input``)."""
        return []

    async def on_start(self, consumer) -> None:
        """Called each time the service becomes the active instance (at once without standby):
        seek the input partitions and set ``input_order`` for each."""

    def on_input(self, records: list) -> None:
        """Records from ``input_partitions``, in order, as they arrive."""

    async def after_append(self) -> None:
        """Called after proposals were appended and acknowledged."""

    @property
    def nice(self) -> int:
        """Niceness of the service's own process (``NICE``)."""
        return NICE.get(self.name, 0)

    # --- snapshots -------------------------------------------------------------------------

    @property
    def snapshot_path(self) -> Path:
        return self.state_dir / f"{self.name}.snapshot"

    def save_snapshot(self) -> None:
        """The state, written now (at a stop: the process ends next)."""
        if not self.snapshots or self.state.offset < 0:
            return
        self._reap_writer(block=True)
        self._write_snapshot()
        self._since_snapshot = 0

    def snapshot_in_background(self) -> None:
        """The state, written by a forked copy of this process at the lowest priority, while this
        one goes on folding and deciding. Encoding a big state holds the loop for a quarter of a
        second and more, and every service reaches the threshold at about the same offset: written
        in the loop, the pipeline stalled at once, on the work's critical path (a tenth of the CPU
        of the baseline's tail in one sampled run). The copy dies with this process (a snapshot
        half written is left as a ``.tmp`` file, never as the snapshot). Without fork (or prctl),
        written now."""
        if not self.snapshots or self.state.offset < 0 or not self._reap_writer(block=False):
            return  # (one still being written: the next turn of the loop asks again)
        if not _CAN_FORK:
            self.save_snapshot()
            return
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the copy: write and leave, touching nothing of the parent's (sockets, loop, logs)
            code = 1
            try:
                _die_with(parent)
                os.nice(SNAPSHOT_NICE)
                self._write_snapshot()
                code = 0
            finally:
                os._exit(code)
        self._writer = pid
        self._since_snapshot = 0

    def _reap_writer(self, block: bool) -> bool:
        """Is no snapshot being written (the last writer, if any, has ended and is reaped)?"""
        if self._writer is None:
            return True
        try:
            pid, status = os.waitpid(self._writer, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, status = self._writer, 0
        if pid == 0:
            return False
        if os.waitstatus_to_exitcode(status) != 0:
            log.warning("%s: the snapshot writer (pid %d) failed: the last snapshot stands", self.name, pid)
        self._writer = None
        return True

    def _write_snapshot(self) -> None:
        tmp = self.snapshot_path.with_suffix(f".{os.getpid()}.tmp")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(msgspec.msgpack.encode(self.state))
        os.replace(tmp, self.snapshot_path)

    def load_snapshot(self) -> State | None:
        if not self.snapshots or not self.snapshot_path.exists():
            return None
        try:
            return restored(msgspec.msgpack.decode(self.snapshot_path.read_bytes(), type=State))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("%s: unreadable snapshot ignored: %s", self.name, exc)
            return None

    async def _resume(self, consumer) -> None:
        """Start from the snapshot if the log still holds the event it ends with, else from zero."""
        snap = self.load_snapshot()
        if snap is not None:
            consumer.seek(kafka.LOG_PARTITION, snap.offset)
            # (an empty fetch is no answer, not a mismatch: a busy broker, one still restoring its
            # archive, may take seconds; only a log that ends before the offset has nothing to give)
            deadline, records = time.monotonic() + RESUME_WAIT_S, []
            while not records and time.monotonic() < deadline:
                batch = await consumer.getmany(kafka.LOG_PARTITION, timeout_ms=1000, max_records=1)
                records = batch.get(kafka.LOG_PARTITION, [])
                end = consumer.highwater(kafka.LOG_PARTITION)  # (the fetch's high-water: right on every broker)
                if not records and end is not None and end <= snap.offset:
                    break
            if records and records[0].offset == snap.offset and _record_id(records[0]) == snap.last_id:
                self.state = snap
                self.order = kafka.InOrder(snap.offset + 1)
                consumer.seek(kafka.LOG_PARTITION, snap.offset + 1)
                log.info("%s: resumed from snapshot at offset %d", self.name, snap.offset)
                return
            log.info("%s: snapshot does not match this log; folding from zero", self.name)
        self.state = State()
        self.order = kafka.InOrder(0)
        consumer.seek(kafka.LOG_PARTITION, 0)

    # --- the loop --------------------------------------------------------------------------

    def fold(self, env: Envelope) -> None:
        self.on_event(self.state, env)
        apply(self.state, env, self._handlers)
        self.in_flight.pop(env.id, None)
        self._since_snapshot += 1

    async def run(self, stop: asyncio.Event, standby: bool = False) -> None:
        """Fold, decide and append until ``stop``. With ``standby``, several instances may run:
        all fold, and only the one holding the ``ActiveLease`` decides and appends."""
        # The services off that path (those in ``NICE``) fetch the log lazily (``kafka.LAZY_FETCH``): in
        # Kueue's baseline their prompt fetches took CPU from the two on the path.
        async with kafka.log_consumer(self.bootstrap, group_id=self.group_id(), lazy=self.name in NICE) as consumer, \
                kafka.producer(self.bootstrap) as producer:
            self.lease = kafka.ActiveLease(self.bootstrap, self.lease_group()) if standby else None
            keeper = None
            try:
                if self.lease is not None:
                    await self.lease.start()
                    keeper = asyncio.create_task(self.lease.keep(stop))
                consumer.assign([kafka.LOG_PARTITION, *self.input_partitions()])
                await self._resume(consumer)
                await self._loop(consumer, producer, stop)
            finally:
                self.ready_path.unlink(missing_ok=True)
                self.save_snapshot()
                if keeper is not None:
                    stop.set()
                    await keeper
                    await self.lease.stop()

    async def _follow_lease(self, consumer) -> None:
        """Read inputs only while active; on becoming active, take them up where they were left.

        ``was_active`` is what the rest of the loop goes by, so a lease won in the middle of a
        turn takes effect at the next one, after ``on_start``."""
        inputs = self.input_partitions()
        active = self.lease is None or self.lease.active
        before, self.was_active = self.was_active, active
        if active and not before:
            if inputs:
                consumer.resume(*inputs)
            await self.on_start(consumer)
            if self.state.offset >= 0:
                await self.on_folded()  # act on what was folded while standing by
            log.info("%s: active", self.name)
        elif not active and (before or before is None):
            if inputs:
                consumer.pause(*inputs)
            if before:
                log.info("%s: standing by", self.name)

    def lease_group(self) -> str:
        """Instances in one lease group stand in for each other: one of them is active."""
        return f"gangway-{self.name}-active"

    def group_id(self) -> str | None:
        """Consumer group of the service's consumer: it stores input offsets (submission) and, at
        most once a second, the log offset folded so far (``commit_folded``). The log is always read
        from the service's own snapshot or from zero, never from this commit: it only reports progress."""
        return f"gangway-{self.name}"

    async def commit_folded(self, consumer) -> None:
        """Commit the next log offset to fold, if it moved and a second has passed (cheap: one
        OffsetCommit a second at most). A failed commit only delays the report."""
        folded, at = self._committed
        now = time.monotonic()
        if self.state.offset + 1 == folded or now - at < FOLDED_COMMIT_EVERY_S:
            return
        try:
            await consumer.commit({kafka.LOG_PARTITION: self.state.offset + 1})
            self._committed = (self.state.offset + 1, now)
        except Exception as exc:  # reporting progress must never stop the service
            log.debug("%s: folded offset not committed: %s", self.name, exc)

    async def _loop(self, consumer, producer, stop: asyncio.Event) -> None:
        wait_s = 0.0
        while not stop.is_set():
            await self._follow_lease(consumer)
            batch = await consumer.getmany(timeout_ms=int(wait_s * 1000), max_records=FETCH_RECORDS_MAX)
            for tp in self.input_partitions() if self.was_active else ():
                inputs, input_hole = self.input_order[tp].take(batch.get(tp, []))
                if inputs:
                    self.on_input(inputs)
                if input_hole:
                    consumer.seek(tp, self.input_order[tp].next)
            records, hole = self.order.take(batch.get(kafka.LOG_PARTITION, []))
            for rec in records:
                env = self.decode(rec)
                if env is not None:
                    self.fold(env)
            await self.on_folded()
            await self.commit_folded(consumer)
            if self.to_quarantine and self.was_active:
                await self._copy_quarantined(producer)
            if self._since_snapshot >= max(SNAPSHOT_EVERY_EVENTS, SNAPSHOT_EVENTS_PER_WORKLOAD * len(self.state.workloads)):
                self.snapshot_in_background()
            if hole:  # a later batch showed up before an earlier one: fetch the earlier one again
                consumer.seek(kafka.LOG_PARTITION, self.order.next)
                wait_s = FETCH_WAIT_S
                continue
            high = consumer.highwater(kafka.LOG_PARTITION)
            if high is None:  # no fetch answered yet: wait for one rather than spin
                wait_s = FETCH_WAIT_S
                continue
            if await consumer.position(kafka.LOG_PARTITION) < high:
                # More to fetch. Ask again at once only if this fetch gave records: an await that
                # completes without suspending never lets aiokafka's fetcher task run, so
                # polling with a zero timeout and nothing buffered would spin forever.
                wait_s = 0.0 if records else FETCH_WAIT_S
                continue
            if not self.caught_up:
                self.caught_up = True
                if self.own_process:  # what the first fold built lives on: no full collection walks it again
                    gc.collect()
                    gc.freeze()
                await self.on_caught_up()
                self.state_dir.mkdir(parents=True, exist_ok=True)
                self.ready_path.touch()
            wait_s = await self._decide_and_append(producer)

    def decode(self, rec) -> Envelope | None:
        """The event of a log record, or None: a record no gangway service wrote is quarantined —
        never folded, so it changes no state, and an alert names it."""
        try:
            return codec.from_log_record(rec.value, rec.headers, rec.offset)
        except codec.CodecError as exc:
            self.quarantined += 1
            log.error("%s: QUARANTINED gangway.log offset %d (%s): %s", self.name, rec.offset, exc.reason, exc)
            if self.copies_quarantine:
                self.to_quarantine.append((rec, exc.reason, str(exc)))
            return None

    async def _copy_quarantined(self, producer) -> None:
        if self.quarantine_copied is None:
            self.quarantine_copied = await quarantine.copied_offsets(self.bootstrap)
        fresh = [q for q in self.to_quarantine if q[0].offset not in self.quarantine_copied]
        self.to_quarantine = []
        if fresh:
            await quarantine.copy(producer, fresh)
            self.quarantine_copied.update(q[0].offset for q in fresh)

    def cycle_limit_s(self, limit_s: float | None, decision) -> float | None:
        """The cycle's limit once ``decision`` is in it: an admission's workload that declares a
        runtime makes it ``runtime_share`` of that runtime (wall time), never less than
        ``ADMISSION_CYCLE_MIN_MS``, if that is shorter."""
        if self.runtime_share is None or not isinstance(decision, WorkloadAdmitted):
            return limit_s
        wl = self.state.workloads.get(decision.workload)
        runtime_ms = wl.spec.runtime_ms if wl is not None else None
        if not runtime_ms:
            return limit_s
        own = max(ADMISSION_CYCLE_MIN_MS / 1000, runtime_ms / 1000 / self.clock.scale * self.runtime_share)
        return own if limit_s is None else min(limit_s, own)

    async def _decide_and_append(self, producer) -> float:
        """Decide if nothing is in flight; return how long to wait for events before trying again."""
        if not self.was_active:
            return IDLE_WAIT_S
        now = time.monotonic()
        lost = [pid for pid, since in self.in_flight.items() if now - since >= IN_FLIGHT_TIMEOUT_S]
        if lost:
            log.warning("%s: %d proposal(s) never came back (%s…); deciding again", self.name, len(lost), lost[0])
            for pid in lost:
                del self.in_flight[pid]
        if self.in_flight and self.waits_for_own_writes:
            return IDLE_WAIT_S
        if now < self.next_decide_at:
            return self.next_decide_at - now
        proposals = self.decide(self.state)
        if self.decide_share < 1.0:
            took = time.monotonic() - now
            self.next_decide_at = now + took / self.decide_share
        # The log's events go out as they are decided (every ``STREAM_EVERY_S`` for a lazy decide:
        # the first of a long cycle's decisions reach the log, and the binder, while the rest are
        # decided); the other topics' after the log has them all, in order. A cycle that has gone
        # on past its limit (``cycle_limit_s``) stops after the decision it is at and what goes
        # with it (``follows``): the next cycle decides the rest, on a fresher state.
        to_log = kafka.Appender(producer)
        others: dict[str, list[Envelope]] = {}
        send_at = now + STREAM_EVERY_S
        limit_s = self.cycle_s
        last = None
        for p in proposals:
            p = Proposal(*p)
            if last is not None and limit_s is not None and time.monotonic() - now >= limit_s and not follows(p.data, last):
                break
            last = p.data
            limit_s = self.cycle_limit_s(limit_s, p.data)
            env = Envelope(id=p.id, source=f"gangway/{self.name}", time_ms=p.time_ms, data=p.data)
            if p.topic != topics.LOG:
                others.setdefault(p.topic, []).append(env)
                continue
            self.in_flight[env.id] = now
            await to_log.add(env)
            if time.monotonic() >= send_at:
                await to_log.send()
                await asyncio.sleep(0)  # the producer's sender takes them to the broker
                send_at = time.monotonic() + STREAM_EVERY_S
        if not to_log.added and not others:
            return self.wake_in_s(self.state)
        await to_log.acknowledged()
        for topic, envelopes in others.items():
            await kafka.append(producer, envelopes, topic=topic)
        await self.after_append()
        return IDLE_WAIT_S if to_log.added else 0.0


#: A decide that yields its decisions lazily (``deciders.proposals``) has what it decided so far
#: sent to the broker at least this often (s).
STREAM_EVERY_S = 0.05
#: Admission's cycle goes on no longer than this share of the shortest runtime declared by the
#: workloads it has admitted so far (wall time at the cluster clock's scale), and never less than
#: ``ADMISSION_CYCLE_MIN_MS`` (``GANGWAY_ADMISSION_CYCLE_MS`` sets a limit for every cycle): what it
#: has not reached is decided in the next cycle, on a fresher state. A workload holds its quota from
#: the state its admission was decided on: in Kueue's large-scale scenario (runtimes of 150–700 ms)
#: cycles of up to 3,000 admissions held two thirds of the quota-time before the work ran. Short
#: cycles cost throughput (each waits for its own decisions to come back before the next): work of
#: an hour, or of no declared runtime, does not shorten them.
ADMISSION_CYCLE_SHARE_OF_RUNTIME = 1 / 40
ADMISSION_CYCLE_MIN_MS = 25


class ServiceSettingError(ValueError):
    """A GANGWAY_* setting of the services is wrong."""


def admission_cycle_s(env=os.environ) -> float | None:
    """Admission's cycle limit in seconds (None: none but the runtimes'), from
    ``GANGWAY_ADMISSION_CYCLE_MS``."""
    raw = env.get("GANGWAY_ADMISSION_CYCLE_MS", "").strip()
    try:
        ms = float(raw) if raw else 0
    except ValueError:
        ms = -1
    if not ms >= 0 or ms == float("inf"):
        raise ServiceSettingError(f"GANGWAY_ADMISSION_CYCLE_MS={raw!r}: expected a number of milliseconds, 0 or more "
                                  f"(0: no limit)")
    return ms / 1000 if ms else None


def _record_id(rec) -> str:
    for key, value in rec.headers or ():
        if key == "ce_id":
            return value.decode("utf-8", "replace")
    return ""


#: The share of its time the preemption service may spend deciding. Its decide runs a whole
#: admission cycle to find the workloads admission cannot admit; in a burst where everything fits it
#: finds none, and deciding after every fetched batch cost as much as admission itself. So after a
#: decide that took t it waits t × (1 / share − 1) before the next: no wait while the queues are
#: short, about a second under a burst of ten thousand. Its decisions stay those of the state they
#: are based on; only how often it asks changes.
PREEMPTION_DECIDE_SHARE = 0.25


class DecidingService(LogService):
    """Admission, placement or preemption: the shell around one pure ``decide``."""

    def __init__(self, name: str, bootstrap: str, state_dir: str | Path = ".gangway", clock: ClusterClock | None = None):
        super().__init__(bootstrap, state_dir, clock)
        self.name = name
        self.decide_share = PREEMPTION_DECIDE_SHARE if name == "preemption" else 1.0
        if name == "admission":
            self.cycle_s, self.runtime_share = admission_cycle_s(), ADMISSION_CYCLE_SHARE_OF_RUNTIME

    def decide(self, state: State) -> Iterable[Proposal]:
        # (preemption's decide is timed for its share: taken whole; the others' lazily, so what
        # they decide first is on its way while they decide the rest)
        return propose(self.name, state) if self.decide_share < 1.0 else proposals(self.name, state)


def _prctl():
    """Linux's prctl(2), or None (nor where there is no fork)."""
    if not hasattr(os, "fork"):
        return None
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()
#: Can a snapshot be written by a forked copy that dies with its service? (Linux: fork and prctl.)
_CAN_FORK = _PRCTL is not None
_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> None:
    """In a forked copy: be killed (SIGKILL) when ``parent``, the process that forked it, ends, so a
    service killed while its snapshot is written leaves no process behind; a stop's signal ends it
    at once, and no signal it gets wakes the parent's loop (their wake-up socket is shared)."""
    signal.set_wakeup_fd(-1)
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, signal.SIG_DFL)
    if _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
        os._exit(1)  # (or it ended before that took hold)
