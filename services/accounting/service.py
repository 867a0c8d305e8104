"""The accounting shell: usage intervals from the log into the SQL ledger, exactly once.

Each fetched batch's intervals and the new log position are written in one transaction (the
tracking row), so a restart or a replay of the whole log never counts anything twice. The log is
identified by the id of its first event: a fresh embedded broker is a new log.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from gangway.events.catalogue import Envelope
from gangway.events.state import State
from gangway.services.accounting.ledger import Ledger
from gangway.services.accounting.policy import Interval, usage_effects
from gangway.services.runtime.clock import ClusterClock
from gangway.services.runtime.shell import LogService


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
        self.pending: list[Interval] = []

    def lease_group(self) -> str:
        """Accounting services writing different ledgers are not standbys of each other."""
        return f"gangway-accounting-{hashlib.sha256(self.db_url.encode()).hexdigest()[:12]}-active"

    def on_event(self, before: State, env: Envelope) -> None:
        if env.offset == 0:
            self.log_id = env.id
            self.position = self.ledger.position(self.log_id)
        if env.offset > self.position:
            self.pending.extend(usage_effects(before, env))

    async def on_folded(self) -> None:
        if not self.log_id or self.state.offset <= self.position:
            return
        if not self.was_active:  # a standby keeps only what the active instance has not recorded yet
            self.position = await asyncio.to_thread(self.ledger.position, self.log_id)
            self.pending = [iv for iv in self.pending if iv.offset > self.position]
            return
        intervals, self.pending = self.pending, []
        await asyncio.to_thread(self.ledger.record, self.log_id, self.state.offset, intervals)
        self.position = self.state.offset

    async def run(self, stop: asyncio.Event, standby: bool = False) -> None:
        try:
            await super().run(stop, standby)
        finally:
            self.ledger.close()
