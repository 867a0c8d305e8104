"""The deciding services' pure ``decide`` functions, by service name (used by shells and auditor)."""

from __future__ import annotations

from collections.abc import Callable

from gangway.events.catalogue import Decision, EvictionOrdered, PlacementDecided, WorkloadAdmitted, WorkloadIdle
from gangway.events.state import State
from gangway.services.admission.policy import decide_admission
from gangway.services.placement.policy import decide_placement
from gangway.services.preemption.idle import decide_idle
from gangway.services.preemption.policy import decide_preemption

#: service → (event id prefix, decide)
DECIDERS: dict[str, tuple[str, Callable[[State], list[Decision]]]] = {
    "admission": ("admit", decide_admission),
    "placement": ("place", decide_placement),
    "preemption": ("evict", decide_preemption),
    #: The idle-GPU hunt; the accounting shell runs it.
    "idle-hunt": ("idle", decide_idle),
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
