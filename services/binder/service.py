"""The binder's shell in simulated-cluster mode: the cluster's nodes and the passing of time."""

from __future__ import annotations

from pathlib import Path

from gangway.events.catalogue import NodeObserved
from gangway.events.state import State
from gangway.services.binder.policy import DEFAULT_RUNTIME_MS, due_reports, next_due_ms, node_sync
from gangway.services.runtime.clock import ClusterClock
from gangway.services.runtime.shell import IDLE_WAIT_S, LogService, Proposal


class SimulatedBinder(LogService):
    name = "binder"

    def __init__(self, bootstrap: str, nodes: list[NodeObserved], state_dir: str | Path = ".gangway",
                 clock: ClusterClock | None = None, default_runtime_ms: int = DEFAULT_RUNTIME_MS):
        super().__init__(bootstrap, state_dir, clock)
        self.nodes = nodes
        self.default_runtime_ms = default_runtime_ms
        self.nodes_synced = False

    def decide(self, state: State) -> list[Proposal]:
        now = max(self.clock.now_ms(), state.time_ms)
        if not self.nodes_synced:
            self.nodes_synced = True
            reports = node_sync(state, self.nodes, now)
            if reports:
                return reports
        return due_reports(state, now, self.default_runtime_ms)

    def wake_in_s(self, state: State) -> float:
        due = next_due_ms(state, self.default_runtime_ms)
        if due is None:
            return IDLE_WAIT_S
        return min(IDLE_WAIT_S, self.clock.wall_seconds_until(due))
