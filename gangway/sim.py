"""A deterministic, in-memory run of the whole pipeline: no broker, no wall clock.

The log is a list; the deciding services and the simulated binder take turns exactly as their
shells do (each decides from the state at the end of the log, then its proposals are appended
with the next offsets); time jumps to the next moment the binder has something to report. Tests,
property tests and benchmarks use it; the auditor verifies its logs like any other.
"""

from __future__ import annotations

from collections.abc import Callable

from gangway.events.catalogue import ConfigApplied, Envelope, NodeObserved, WorkloadQueued
from gangway.contract import contract_digest
from gangway.events.contract import Contract
from gangway.events.fold import apply
from gangway.events.resources import index_of
from gangway.events.state import State, waits_to_take_over
from gangway.services.binder.policy import DEFAULT_RUNTIME_MS, due_reports, next_due_ms, node_sync
from gangway.services.deciders import DECIDERS, WRITTEN_BY, id_of

SERVICES = tuple(DECIDERS)


class Simulation:
    """``decide`` replaces some services' decide functions (policy comparisons: such a log replays
    only with the same functions); ``cycle_ms`` is how long a round that decided something takes
    in cluster time (0: deciding is instantaneous, as the auditor's replay assumes nothing else)."""

    def __init__(self, start_ms: int = 1_700_000_000_000, default_runtime_ms: int = DEFAULT_RUNTIME_MS,
                 state: State | None = None, decide: dict[str, Callable[[State], list]] | None = None,
                 cycle_ms: int = 0):
        """A fresh run, or (``state``) one that goes on from a state folded elsewhere (a forecast):
        its events then continue the offsets of that state's log."""
        self.log: list[Envelope] = []
        self.state = state if state is not None else State()
        self.first_offset = self.state.offset + 1
        self.now_ms = max(start_ms, self.state.time_ms)
        self.default_runtime_ms = default_runtime_ms
        self.decide = {name: fn for name, (_, fn) in DECIDERS.items()} | (decide or {})
        self.cycle_ms = cycle_ms

    def append(self, event_id: str, time_ms: int, data, source: str = "gangway/sim") -> Envelope:
        env = Envelope(id=event_id, source=source, time_ms=time_ms, data=data,
                       offset=self.first_offset + len(self.log))
        self.log.append(env)
        apply(self.state, env)
        return env

    def configure(self, contract: Contract) -> None:
        digest = contract_digest(contract)
        self.append(f"config/{digest[:12]}", self.now_ms, ConfigApplied(contract=contract, digest=digest), "gangway/config")

    def add_nodes(self, nodes: list[NodeObserved]) -> None:
        for pid, t, data in node_sync(self.state, nodes, self.now_ms):
            self.append(pid, t, data, "gangway/binder")

    def submit(self, wl: WorkloadQueued) -> None:
        self.append(f"queued/{wl.workload}", self.now_ms, wl, "gangway/submission")

    def step(self) -> int:
        """One round: every deciding service, then the binder at the current time. Returns events added."""
        added = self._decide_all()
        if added and self.cycle_ms:
            self.now_ms += self.cycle_ms
        for pid, t, data in due_reports(self.state, self.now_ms, self.default_runtime_ms):
            self.append(pid, t, data, "gangway/binder")
            added += 1
        return added

    def _decide_all(self) -> int:
        added = 0
        for service in SERVICES:
            if not self._may_decide(service):
                continue
            prefix = DECIDERS[service][0]
            for d in self.decide[service](self.state):
                self.append(id_of(prefix, d), self.state.time_ms, d,
                            f"gangway/{WRITTEN_BY.get(service, service)}")
                added += 1
        return added

    def _may_decide(self, service: str) -> bool:
        """False when the service has nothing to decide about: admission and preemption act only
        for pending workloads, placement only for admitted ones (skipping it changes nothing).
        Preemption also acts while a queue drains (HoldAndDrain), a hand-over waits (it may lapse) or
        a workload has a maximum execution time (it may use it up)."""
        contract = self.state.contract
        if service == "placement":
            return bool(self.state.unplaced)
        if service == "idle-hunt":
            return contract is not None and contract.idle_rule is not None and bool(self.state.active)
        if service == "preemption" and contract is not None and self.state.active and (
                index_of(contract).drains or any(waits_to_take_over(wl) or wl.spec.max_execution_ms is not None
                                                 for wl in map(self.state.workloads.__getitem__, self.state.active))):
            return True  # (a queue drains, a hand-over may lapse, a maximum execution time may end)
        return bool(self.state.pending)

    def run(self, until_ms: int | None = None, rounds_max: int = 100_000, stop=None) -> None:
        """Run until nothing is left to do (or ``until_ms``, or ``stop()`` says so), jumping time
        forward when idle."""
        for _ in range(rounds_max):
            if stop is not None and stop():
                return
            if self.step():
                if self.cycle_ms and until_ms is not None and self.now_ms >= until_ms:
                    return
                continue
            due = next_due_ms(self.state, self.default_runtime_ms)
            if due is None or (until_ms is not None and due > until_ms):
                if until_ms is not None:
                    self.now_ms = max(self.now_ms, until_ms)
                return
            self.now_ms = max(self.now_ms, due)
        raise RuntimeError(f"simulation did not settle in {rounds_max} rounds")
