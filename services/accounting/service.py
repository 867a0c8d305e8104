"""The accounting shell: charges from the log into the SQL ledger exactly once, invoices out, and
the idle-GPU hunt.

The new charges, the running charges and the new log position are written in one transaction
(the tracking row), so a restart or a replay of the whole log never counts anything twice. They are
written at most once every ``LEDGER_WRITE_EVERY_S``, and at most a tenth of the time (and once more
at stop): the running charges are rewritten whole at each write, which, after every fetched batch
of a burst onto a big cluster, cost more than the rest of the service put together. The ledger
lags the log by about that long.

The log is identified by a digest of its whole first event (``billing.log_identity``), and the
tracking row keeps the id of the event at its position: if the log holds another event there, it
is another log, recorded afresh under a new identity.

When the log's clock passes a billing period's end (plus the contract's settle time), the books
cut the period and the active instance publishes one ``InvoiceIssued`` per team on
``gangway.invoices`` (key: the team), then keeps it in the ledger. Invoice ids are deterministic:
an instance that publishes again after a crash publishes the same invoice with the same id.

The active instance also appends the idle-GPU hunt's ``WorkloadIdle`` decisions to the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

from gangway.adapters import kafka
from gangway.events import topics
from gangway.events.catalogue import Envelope, InvoiceIssued
from gangway.events.state import State
from gangway.services.accounting.billing import Books, log_identity
from gangway.services.accounting.ledger import Ledger
from gangway.services.accounting.policy import open_allocations, usage_effects
from gangway.services.deciders import propose
from gangway.services.runtime.clock import ClusterClock
from gangway.services.runtime.shell import LogService, Proposal

#: How often, at most, the ledger is written (the log's new charges, the running ones, the position)…
LEDGER_WRITE_EVERY_S = 1.0
#: …and at most this share of the time (a write of many running charges waits longer for the next).
LEDGER_WRITE_SHARE = 0.1


class AccountingService(LogService):
    name = "accounting"
    # Accounting refolds from zero (cheap) and relies on the ledger's position, not on snapshots.
    snapshots = False

    def __init__(self, bootstrap: str, db_url: str, state_dir: str | Path = ".gangway", clock: ClusterClock | None = None):
        super().__init__(bootstrap, state_dir, clock)
        self.db_url = db_url
        self.ledger = Ledger(db_url)
        self.log_id = ""
        self.position = -1
        self.expected_id = ""
        self.books = Books()
        #: Charges of ``books`` already handed to the ledger (an index into ``books.charges``).
        self.flushed = 0
        self.invoices: list[InvoiceIssued] = []
        self.producer = None
        #: When the ledger was last written (monotonic s), and how long to wait from then.
        self.written_at = float("-inf")
        self.write_every_s = LEDGER_WRITE_EVERY_S

    def lease_group(self) -> str:
        """Accounting services writing different ledgers are not standbys of each other."""
        return f"gangway-accounting-{hashlib.sha256(self.db_url.encode()).hexdigest()[:12]}-active"

    def _switch(self, log_id: str) -> None:
        self.log_id = self.books.log_id = log_id
        self.position = self.ledger.position(log_id)
        self.expected_id = self.ledger.last_id(log_id)
        self.flushed = 0

    def on_event(self, before: State, env: Envelope) -> None:
        if env.offset == 0:
            self._switch(log_identity(env))
        if env.offset == self.position and self.expected_id and env.id != self.expected_id:
            # Same first event, another log: never inherit its position.
            self._switch(f"{self.log_id}~{hashlib.sha256(env.id.encode()).hexdigest()[:8]}@{env.offset}")
        self.books.charges.extend(usage_effects(before, env))

    def fold(self, env: Envelope) -> None:
        super().fold(env)
        self.invoices.extend(self.books.after(self.state, env))

    def decide(self, state: State) -> list[Proposal]:
        return propose("idle-hunt", state)

    def wake_in_s(self, state: State) -> float:
        """Soon enough to write what was folded since the ledger's last write."""
        wait = super().wake_in_s(state)
        if self.log_id and self.state.offset > self.position:
            wait = min(wait, max(0.0, self.written_at + self.write_every_s - time.monotonic()))
        return wait

    async def on_folded(self, force: bool = False) -> None:
        if not self.log_id or self.state.offset <= self.position:
            return
        if not force and time.monotonic() - self.written_at < self.write_every_s:
            return
        self.written_at = time.monotonic()
        try:
            await self._write()
        finally:
            took = time.monotonic() - self.written_at
            self.write_every_s = max(LEDGER_WRITE_EVERY_S, took / LEDGER_WRITE_SHARE)

    async def _write(self) -> None:
        if not self.was_active:  # a standby keeps only what the active instance has not recorded yet
            self.position = await asyncio.to_thread(self.ledger.position, self.log_id)
            return
        charges = [c for c in self.books.charges[self.flushed:] if c.offset > self.position]
        running = open_allocations(self.state, self.state.time_ms)
        await asyncio.to_thread(self.ledger.record, self.log_id, self.state.offset, charges, running, self.state.last_id)
        self.flushed = len(self.books.charges)
        self.position = self.state.offset
        self.expected_id = self.state.last_id
        await self._issue()

    async def _issue(self) -> None:
        invoices, self.invoices = self.invoices, []
        fresh = [inv for inv in invoices if not await asyncio.to_thread(self._issued, inv.invoice_id)]
        if not fresh:
            return
        if self.producer is None:
            self.producer = kafka.producer(self.bootstrap)
            await self.producer.start()
        now = self.clock.now_ms()
        await kafka.append(self.producer, [Envelope(id=inv.invoice_id, source="gangway/accounting",
                                                    time_ms=max(now, inv.period_end_ms), data=inv) for inv in fresh],
                           topic=topics.INVOICES)
        for inv in fresh:
            await asyncio.to_thread(self.ledger.record_invoice, inv)

    def _issued(self, invoice_id: str) -> bool:
        return any(inv.invoice_id == invoice_id for inv in self.ledger.invoices(self.log_id))

    async def run(self, stop: asyncio.Event, standby: bool = False) -> None:
        try:
            await super().run(stop, standby)
        finally:
            await self.on_folded(force=True)
            if self.producer is not None:
                await self.producer.stop()
            self.ledger.close()
