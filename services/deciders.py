"""The deciding services' pure ``decide`` functions, by service name (used by shells and auditor)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from gangway.events.catalogue import Decision, EvictionOrdered, PlacementDecided, WorkloadAdmitted, WorkloadIdle
from gangway.events.state import State
from gangway.services.admission.policy import admissions, decide_admission
from gangway.services.placement.policy import decide_placement, placements
from gangway.services.preemption.idle import decide_idle
from gangway.services.preemption.policy import decide_preemption, evictions

#: service → (event id prefix, decide)
DECIDERS: dict[str, tuple[str, Callable[[State], list[Decision]]]] = {
    "admission": ("admit", decide_admission),
    "placement": ("place", decide_placement),
    "preemption": ("evict", decide_preemption),
    #: The idle-GPU hunt; the accounting shell runs it.
    "idle-hunt": ("idle", decide_idle),
}
#: service → its decisions one by one, lazily (the same as ``decide``'s list, in order).
LAZY: dict[str, Callable[[State], Iterable[Decision]]] = {
    "admission": admissions,
    "placement": placements,
    "preemption": evictions,
    "idle-hunt": decide_idle,
}
#: The service whose shell writes a decider's decisions (their events' source), where it is another.
WRITTEN_BY: dict[str, str] = {"idle-hunt": "accounting"}
SERVICE_OF: dict[type, str] = {
    WorkloadAdmitted: "admission",
    PlacementDecided: "placement",
    EvictionOrdered: "preemption",
    WorkloadIdle: "idle-hunt",
}


def decision_id(prefix: str, workload: str, based_on: int) -> str:
    """Deterministic: a service deciding again at the same offset writes the same ids."""
    return f"{prefix}/{workload}/{based_on}"


def propose(service: str, state: State) -> list[tuple[str, int, Decision]]:
    """``decide`` of one service, as (event id, event time, decision) — time is the state's."""
    prefix, decide = DECIDERS[service]
    return [(decision_id(prefix, d.workload, d.based_on), state.time_ms, d) for d in decide(state)]


def propose_until(service: str, state: State, wanted: set[str]) -> Iterator[tuple[str, int, Decision]]:
    """``propose``'s items in order, lazily, stopping once every id in ``wanted`` has come out
    (all of them when one never does): what the auditor asks to check the decisions recorded."""
    prefix = DECIDERS[service][0]
    left = set(wanted)
    for d in LAZY[service](state):
        pid = decision_id(prefix, d.workload, d.based_on)
        yield pid, state.time_ms, d
        left.discard(pid)
        if not left:
            return
