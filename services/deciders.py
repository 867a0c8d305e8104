"""The deciding services' pure ``decide`` functions, by service name (used by shells and auditor)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from gangway.events.catalogue import Decision, EvictionOrdered, PlacementDecided, WorkloadAdmitted, WorkloadIdle
from gangway.events.state import State
from gangway.services.admission.policy import admissions_placed
from gangway.services.placement.policy import decide_placement, placements
from gangway.services.preemption.idle import decide_idle
from gangway.services.preemption.policy import decide_preemption, evictions

#: service → (event id prefix, decide)
DECIDERS: dict[str, tuple[str, Callable[[State], list[Decision]]]] = {
    #: admission writes each gang's placement with its admission (``PlacementDecided.with_admission``)
    "admission": ("admit", lambda state: list(admissions_placed(state))),
    "placement": ("place", decide_placement),
    "preemption": ("evict", decide_preemption),
    #: The idle-GPU hunt; the accounting shell runs it.
    "idle-hunt": ("idle", decide_idle),
}
#: service → its decisions one by one, lazily (the same as ``decide``'s list, in order).
LAZY: dict[str, Callable[[State], Iterable[Decision]]] = {
    "admission": admissions_placed,
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


def service_of(decision: Decision) -> str:
    """The decider that made ``decision`` (a placement decided with its admission is admission's)."""
    if isinstance(decision, PlacementDecided) and decision.with_admission:
        return "admission"
    return SERVICE_OF[type(decision)]


def follows(decision: Decision, before: Decision) -> bool:
    """Does ``decision`` go with the one before it: the placement decided with that admission?"""
    return isinstance(decision, PlacementDecided) and decision.with_admission and decision.workload == before.workload


def decision_id(prefix: str, workload: str, based_on: int) -> str:
    """Deterministic: a service deciding again at the same offset writes the same ids."""
    return f"{prefix}/{workload}/{based_on}"


def id_of(prefix: str, decision: Decision) -> str:
    """``decision``'s id; a placement decided with its admission is named after the admission:
    ``admit/<workload>/<offset>/placement``."""
    name = decision_id(prefix, decision.workload, decision.based_on)
    return f"{name}/placement" if isinstance(decision, PlacementDecided) and decision.with_admission else name


def propose(service: str, state: State) -> list[tuple[str, int, Decision]]:
    """``decide`` of one service, as (event id, event time, decision) — time is the state's."""
    return list(proposals(service, state))


def proposals(service: str, state: State) -> Iterator[tuple[str, int, Decision]]:
    """``propose``'s items in order, lazily: each is out before the next is decided."""
    prefix = DECIDERS[service][0]
    for d in LAZY[service](state):
        yield id_of(prefix, d), state.time_ms, d


def propose_until(service: str, state: State, wanted: set[str]) -> Iterator[tuple[str, int, Decision]]:
    """``proposals``, stopping once every id in ``wanted`` has come out (all of them when one never
    does): what the auditor asks to check the decisions recorded."""
    left = set(wanted)
    for item in proposals(service, state):
        yield item
        left.discard(item[0])
        if not left:
            return
