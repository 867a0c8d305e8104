"""The ledger in SQL: one row per charge (an attempt, or its part between price changes), the
charges still running (replaced at every batch, so a report at noon shows the morning), the
invoices issued, and a tracking row per log.

Exactly-once on top of at-least-once delivery (the eventsourcing "tracking row" habit): the usage
rows of a batch and the new tracking position are written in ONE transaction, and a batch at or
below the position writes nothing. A restart resumes from ``position(log_id)``.

A *log id* names one log: topic, partition and a digest of its whole first event — id, source,
time and content (``billing.log_identity``). The embedded broker keeps its log in memory, so each
restart starts a new log whose offsets count from 0 again; its first event is appended at another
time, so it gets its own tracking row (position -1) and its own rows. The tracking row also keeps
the id of the event at its position: the shell checks the log still holds it there before trusting
the position (``last_id``), so a log that merely looks the same can never inherit another's
position. Rows of older logs stay and cannot collide: ``log_id`` is part of every key.

Quantities are integers: ``gpu_milli_ms`` is milli-GPUs times milliseconds (8 GPUs for one hour
is 8000 * 3_600_000). Hours appear only in reports.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, NamedTuple

import msgspec
from sqlalchemy import (
    BigInteger, Boolean, Column, Index, Integer, MetaData, String, Table, Text, create_engine, distinct, func, select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, make_url

from gangway.services.accounting.policy import Interval

#: milli-GPU-milliseconds in one GPU-hour.
MILLI_GPU_MS_PER_HOUR = 1000 * 3_600_000
DEFAULT_CONSUMER = "accounting"

metadata = MetaData()


def _charge_columns() -> list[Column]:
    """What a charge carries besides its quantities (item 1 of the money issue)."""
    return [
        Column("local_queue", String(255), nullable=False, default=""),
        Column("flavors", Text, nullable=False, default="{}"),
        Column("placement", Text, nullable=False, default="[]"),
        Column("resources", Text, nullable=False, default="{}"),
        Column("prices", Text, nullable=False, default="{}"),
        Column("currency", String(8), nullable=False, default=""),
        Column("cost_micros", BigInteger, nullable=False, default=0),
        Column("contract_digest", String(128), nullable=False, default=""),
        Column("busy_milli_ms", BigInteger, nullable=False, default=0),
        Column("sampled", Boolean, nullable=False, default=False),
        Column("tokens", BigInteger, nullable=False, default=0),
        Column("useful_tokens", BigInteger, nullable=False, default=0),
        Column("work_lost_ms", BigInteger, nullable=False, default=0),
        Column("waste_micros", BigInteger, nullable=False, default=0),
    ]


usage = Table(
    "gangway_usage",
    metadata,
    Column("log_id", String(512), primary_key=True),
    Column("workload", String(255), primary_key=True),
    Column("attempt", Integer, primary_key=True, autoincrement=False),
    Column("segment", Integer, primary_key=True, autoincrement=False),
    Column("team", String(255), nullable=False),
    Column("cluster_queue", String(255), nullable=False),
    Column("priority_class", String(255)),
    Column("start_ms", BigInteger, nullable=False),
    Column("end_ms", BigInteger, nullable=False),
    Column("gpu_milli", BigInteger, nullable=False),
    Column("cpu_milli", BigInteger, nullable=False),
    Column("gpu_milli_ms", BigInteger, nullable=False),
    Column("cpu_milli_ms", BigInteger, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("log_offset", BigInteger, nullable=False),
    *_charge_columns(),
    Index("gangway_usage_team", "team"),
)

#: The charges still running at the tracked position (replaced whole at every batch).
running = Table(
    "gangway_running",
    metadata,
    Column("log_id", String(512), primary_key=True),
    Column("workload", String(255), primary_key=True),
    Column("attempt", Integer, primary_key=True, autoincrement=False),
    Column("segment", Integer, primary_key=True, autoincrement=False),
    Column("charge", Text, nullable=False),
)

#: Invoices issued (``InvoiceIssued`` as JSON), one per id: issuing again changes nothing.
invoices = Table(
    "gangway_invoices",
    metadata,
    Column("invoice_id", String(255), primary_key=True),
    Column("log_id", String(512), nullable=False),
    Column("team", String(255), nullable=False),
    Column("period", String(32), nullable=False),
    Column("billed_cost_micros", BigInteger, nullable=False),
    Column("invoice", Text, nullable=False),
)

tracking = Table(
    "gangway_tracking",
    metadata,
    Column("consumer", String(255), primary_key=True),
    Column("log_id", String(512), primary_key=True),
    #: Last log offset whose effects are in the ledger (every offset up to it is processed).
    Column("position", BigInteger, nullable=False),
    #: Id of the event at that offset ("" when not given).
    Column("last_id", String(512), nullable=False, default=""),
)


class TeamUsage(NamedTuple):
    team: str
    gpu_hours: float
    workloads: int


class WorkloadUsage(NamedTuple):
    log_id: str
    workload: str
    team: str
    attempts: int
    gpu_milli_ms: int
    gpu_hours: float


def default_url(state_dir: str) -> str:
    """``GANGWAY_DB`` when set, else a SQLite file ``accounting.db`` in ``state_dir``."""
    return os.environ.get("GANGWAY_DB") or "sqlite:///" + os.path.join(state_dir, "accounting.db")


class Ledger:
    """The usage ledger of one consumer (one tracking row per log it has read)."""

    def __init__(self, url: str, consumer: str = DEFAULT_CONSUMER):
        _ensure_sqlite_dir(url)
        self._engine = create_engine(url)
        self._consumer = consumer
        metadata.create_all(self._engine)

    def position(self, log_id: str) -> int:
        """The last offset of ``log_id`` already recorded (-1: none)."""
        with self._engine.connect() as conn:
            found = _tracked(conn, self._consumer, log_id)
        return -1 if found is None else found

    def last_id(self, log_id: str) -> str:
        """Id of the event at the recorded position ("" if none)."""
        query = select(tracking.c.last_id).where(tracking.c.consumer == self._consumer, tracking.c.log_id == log_id)
        with self._engine.connect() as conn:
            return conn.execute(query).scalar_one_or_none() or ""

    def record(self, log_id: str, offset: int, intervals: Iterable[Interval],
               open_charges: Iterable[Interval] | None = None, last_id: str = "") -> int:
        """Record the effects of every event up to ``offset``; returns how many charge rows were written.

        One transaction: charges (those ended after the current position), the running charges
        (replaced whole, when given) and the new position. An ``offset`` at or below the position
        writes nothing (a re-delivery or a replay).
        """
        intervals = list(intervals)
        if any(iv.offset > offset for iv in intervals):
            raise ValueError(f"an interval ends after offset {offset}, the position being recorded")
        with self._engine.begin() as conn:
            found = _tracked(conn, self._consumer, log_id, lock=True)
            position = -1 if found is None else found
            if offset <= position:
                return 0
            rows = [_row(log_id, iv) for iv in intervals if iv.offset > position]
            if rows:
                conn.execute(_insert_new(conn, usage), rows)
            if open_charges is not None:
                conn.execute(running.delete().where(running.c.log_id == log_id))
                opened = [{"log_id": log_id, "workload": iv.workload, "attempt": iv.attempt, "segment": iv.segment,
                           "charge": msgspec.json.encode(iv).decode()} for iv in open_charges]
                if opened:
                    conn.execute(running.insert(), opened)
            _track(conn, self._consumer, log_id, offset, last_id, exists=found is not None)
        return len(rows)

    def charges(self, log_id: str | None = None, team: str | None = None, running_too: bool = True) -> list[Interval]:
        """Every charge (and, with ``running_too``, the running ones as of the position), in order."""
        query = select(usage)
        if log_id is not None:
            query = query.where(usage.c.log_id == log_id)
        if team is not None:
            query = query.where(usage.c.team == team)
        out = []
        with self._engine.connect() as conn:
            for r in conn.execute(query.order_by(usage.c.log_id, usage.c.log_offset, usage.c.workload, usage.c.segment)):
                out.append(_interval(r))
            if running_too:
                q2 = select(running.c.charge).order_by(running.c.log_id, running.c.workload)
                if log_id is not None:
                    q2 = q2.where(running.c.log_id == log_id)
                for (text,) in conn.execute(q2):
                    iv = msgspec.json.decode(text, type=Interval)
                    if team is None or iv.team == team:
                        out.append(iv)
        return out

    def record_invoice(self, invoice) -> bool:
        """Keep an issued invoice; False when that id was issued before (nothing changes)."""
        row = {"invoice_id": invoice.invoice_id, "log_id": invoice.log_id, "team": invoice.team,
               "period": invoice.period, "billed_cost_micros": invoice.billed_cost_micros,
               "invoice": msgspec.json.encode(invoice).decode()}
        with self._engine.begin() as conn:
            exists = conn.execute(select(invoices.c.invoice_id).where(invoices.c.invoice_id == invoice.invoice_id)).first()
            if exists:
                return False
            conn.execute(_insert_new(conn, invoices), [row])
        return True

    def invoices(self, log_id: str | None = None, period: str | None = None) -> list:
        from gangway.events.catalogue import InvoiceIssued
        query = select(invoices.c.invoice).order_by(invoices.c.period, invoices.c.team)
        if log_id is not None:
            query = query.where(invoices.c.log_id == log_id)
        if period is not None:
            query = query.where(invoices.c.period == period)
        with self._engine.connect() as conn:
            return [msgspec.json.decode(text, type=InvoiceIssued) for (text,) in conn.execute(query)]

    def team_usage(self, log_id: str | None = None) -> list[TeamUsage]:
        """GPU-hours and workloads per team (over every log unless ``log_id`` is given)."""
        per_workload = _per_workload(log_id, None).subquery()
        query = (
            select(per_workload.c.team, func.sum(per_workload.c.gpu), func.count())
            .group_by(per_workload.c.team)
            .order_by(per_workload.c.team)
        )
        with self._engine.connect() as conn:
            return [TeamUsage(team, _hours(gpu), n) for team, gpu, n in conn.execute(query)]

    def workload_usage(self, log_id: str | None = None, team: str | None = None) -> list[WorkloadUsage]:
        """Usage per workload (all its attempts), sorted by log id and workload."""
        query = _per_workload(log_id, team).order_by(usage.c.log_id, usage.c.workload)
        with self._engine.connect() as conn:
            return [
                WorkloadUsage(r.log_id, r.workload, r.team, r.attempts, int(r.gpu), _hours(r.gpu))
                for r in conn.execute(query)
            ]

    def logs(self) -> list[tuple[str, int]]:
        """Every log this consumer has recorded, with its position."""
        query = (
            select(tracking.c.log_id, tracking.c.position)
            .where(tracking.c.consumer == self._consumer)
            .order_by(tracking.c.log_id)
        )
        with self._engine.connect() as conn:
            return [(log_id, position) for log_id, position in conn.execute(query)]

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- helpers -----------------------------------------------------------------------------------


def _ensure_sqlite_dir(url: str) -> None:
    parsed = make_url(url)
    path = parsed.database
    if parsed.get_backend_name() == "sqlite" and path and path != ":memory:" and not path.startswith("file:"):
        Path(path).parent.mkdir(parents=True, exist_ok=True)


def _tracked(conn: Connection, consumer: str, log_id: str, lock: bool = False) -> int | None:
    query = select(tracking.c.position).where(tracking.c.consumer == consumer, tracking.c.log_id == log_id)
    if lock:
        query = query.with_for_update()
    return conn.execute(query).scalar_one_or_none()


def _track(conn: Connection, consumer: str, log_id: str, offset: int, last_id: str, exists: bool) -> None:
    if exists:
        where = (tracking.c.consumer == consumer) & (tracking.c.log_id == log_id)
        conn.execute(tracking.update().where(where).values(position=offset, last_id=last_id))
    else:
        conn.execute(tracking.insert().values(consumer=consumer, log_id=log_id, position=offset, last_id=last_id))


def _insert_new(conn: Connection, table: Table):
    """An INSERT that skips rows whose key is already there (a replay never double counts)."""
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    if dialect == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing()
    return table.insert()  # elsewhere a duplicate key fails the transaction: still never counted twice


def _row(log_id: str, iv: Interval) -> dict:
    return {
        "log_id": log_id, "workload": iv.workload, "attempt": iv.attempt, "team": iv.team,
        "cluster_queue": iv.cluster_queue, "priority_class": iv.priority_class,
        "start_ms": iv.start_ms, "end_ms": iv.end_ms, "gpu_milli": iv.gpu_milli, "cpu_milli": iv.cpu_milli,
        "gpu_milli_ms": iv.gpu_milli_ms, "cpu_milli_ms": iv.cpu_milli_ms,
        "outcome": iv.outcome, "log_offset": iv.offset, "segment": iv.segment, "local_queue": iv.local_queue,
        "flavors": _json(iv.flavors), "placement": _json(iv.placement), "resources": _json(iv.resources),
        "prices": _json(iv.prices), "currency": iv.currency, "cost_micros": iv.cost_micros(),
        "contract_digest": iv.contract_digest, "busy_milli_ms": iv.busy_milli_ms, "sampled": iv.sampled,
        "tokens": iv.tokens, "useful_tokens": iv.useful_tokens, "work_lost_ms": iv.work_lost_ms,
        "waste_micros": iv.waste_micros,
    }


def _json(value) -> str:
    return msgspec.json.encode(value).decode()


def _interval(r) -> Interval:
    return Interval(
        workload=r.workload, attempt=r.attempt, team=r.team, cluster_queue=r.cluster_queue,
        priority_class=r.priority_class, start_ms=r.start_ms, end_ms=r.end_ms, gpu_milli=r.gpu_milli,
        cpu_milli=r.cpu_milli, outcome=r.outcome, offset=r.log_offset, segment=r.segment, local_queue=r.local_queue,
        flavors=msgspec.json.decode(r.flavors), placement=msgspec.json.decode(r.placement),
        resources=msgspec.json.decode(r.resources), prices=msgspec.json.decode(r.prices), currency=r.currency,
        contract_digest=r.contract_digest, busy_milli_ms=r.busy_milli_ms, sampled=bool(r.sampled), tokens=r.tokens,
        useful_tokens=r.useful_tokens, work_lost_ms=r.work_lost_ms,
    )


def _per_workload(log_id: str | None, team: str | None):
    query = select(
        usage.c.log_id, usage.c.workload, usage.c.team,
        func.count(distinct(usage.c.attempt)).label("attempts"), func.sum(usage.c.gpu_milli_ms).label("gpu"),
    ).group_by(usage.c.log_id, usage.c.workload, usage.c.team)
    if log_id is not None:
        query = query.where(usage.c.log_id == log_id)
    if team is not None:
        query = query.where(usage.c.team == team)
    return query


def _hours(gpu_milli_ms) -> float:
    """Exact integer total (PostgreSQL sums BIGINT as NUMERIC) to GPU-hours, converted once."""
    return int(gpu_milli_ms) / MILLI_GPU_MS_PER_HOUR
