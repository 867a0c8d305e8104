"""The binder's shell in simulated-cluster mode: the cluster's nodes and the passing of time.

The simulated cluster remembers what it saw happen (``binder.journal`` in the state directory: each
report it appended, with its time). If the log loses reports — the embedded broker's archive lost
its last records when the whole stack was killed — the restored log says a gang is still placed
that the cluster started long ago: the binder reports it again (the same event id) with the time
the cluster saw it start, not the time of the restart, so runtimes and accounting stay exact.
"""

from __future__ import annotations

import logging
from pathlib import Path

from gangway.events.catalogue import NodeObserved
from gangway.events.state import State
from gangway.events.text import digits
from gangway.services.binder.policy import DEFAULT_RUNTIME_MS, due_reports, next_due_ms, node_sync
from gangway.services.runtime.clock import ClusterClock
from gangway.services.runtime.shell import IDLE_WAIT_S, LogService, Proposal


class SimulatedBinder(LogService):
    name = "binder"

    def __init__(self, bootstrap: str, nodes: list[NodeObserved] | None, state_dir: str | Path = ".gangway",
                 clock: ClusterClock | None = None, default_runtime_ms: int = DEFAULT_RUNTIME_MS):
        """``nodes``: the simulated cluster (a cluster file's), which the log is brought to at start
        (nodes added, changed, removed); None (no cluster file): the nodes the log has stay as they are."""
        super().__init__(bootstrap, state_dir, clock)
        self.nodes = nodes or []
        self.default_runtime_ms = default_runtime_ms
        self.nodes_synced = nodes is None
        self.journal = Journal(self.state_dir / "binder.journal")
        self._proposed: list[Proposal] = []

    def decide(self, state: State) -> list[Proposal]:
        now = max(self.clock.now_ms(), state.time_ms)
        if not self.nodes_synced:
            self.nodes_synced = True
            reports = node_sync(state, self.nodes, now)
            if reports:
                return reports
        self._proposed = [(pid, self._seen_at(state, pid, data, t), data)
                          for pid, t, data in due_reports(state, now, self.default_runtime_ms)]
        return self._proposed

    def _seen_at(self, state: State, pid: str, data, t: int) -> int:
        """When the cluster saw it, if it did — and in this workload's life on this log (a journal
        entry older than the admission belongs to another log with the same names)."""
        seen = self.journal.seen.get(pid) if pid.startswith(REMEMBERED) else None
        wl = state.workloads.get(getattr(data, "workload", ""))
        if seen is None or wl is None or wl.admitted_ms is None or seen < wl.admitted_ms:
            return t
        return seen

    async def after_append(self) -> None:
        self.journal.record(self._proposed)
        self._proposed = []

    def wake_in_s(self, state: State) -> float:
        due = next_due_ms(state, self.default_runtime_ms)
        if due is None:
            return IDLE_WAIT_S
        return min(IDLE_WAIT_S, self.clock.wall_seconds_until(due))


#: Reports whose time is what the cluster saw, not a function of the log (ends are: start + runtime).
REMEMBERED = ("bound/", "running/")
log = logging.getLogger(__name__)


class Journal:
    """What the simulated cluster saw: report id → cluster time, one ``id<TAB>time`` line each,
    appended after the broker acknowledged the report (written to the OS at once, not fsynced: a
    power cut may lose the last lines, and those reports then carry the restart's time)."""

    def __init__(self, path: Path):
        self.path = path
        self.seen: dict[str, int] = {}
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                pid, _, t = line.rpartition("\t")
                if pid and digits(t):
                    self.seen.setdefault(pid, int(t))
        if self.seen:
            log.info("binder: %d reports remembered from %s", len(self.seen), path)

    def record(self, proposals: list[Proposal]) -> None:
        fresh = [(pid, t) for pid, t, _ in proposals if pid.startswith(REMEMBERED) and pid not in self.seen]
        if not fresh:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write("".join(f"{pid}\t{t}\n" for pid, t in fresh))  # to the OS at once: a killed binder keeps it
        self.seen.update(fresh)
