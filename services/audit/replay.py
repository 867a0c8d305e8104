"""The auditor (pure): fold the log and re-run each decision's ``decide`` on ``state[based_on]``.

One pass, no state copies: a first look finds every offset some decision was based on; while
folding, right after such an offset is applied, the services that decided there are asked to
decide again, and what they propose is kept until the decisions based on it arrive. A recorded
decision reproduces when a decision with the same id, time and content comes out again.

Its reason counts as data: the code and parameters must come out again, not the sentence (which is
their rendering, and may be reworded). A decision recorded before reasons were codes carries only a
sentence: its content is checked without the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgspec

from gangway.events.catalogue import DECISION_TYPES, Envelope
from gangway.events.fold import apply
from gangway.events.state import State
from gangway.services.deciders import SERVICE_OF, propose


@dataclass
class Mismatch:
    offset: int
    id: str
    service: str
    why: str

    def __str__(self) -> str:
        return f"offset {self.offset} {self.id} ({self.service}): {self.why}"


@dataclass
class AuditReport:
    events: int = 0
    decisions: int = 0
    verified: int = 0
    superseded: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    state: State | None = None

    @property
    def ok(self) -> bool:
        return not self.mismatches


def _wanted(envelopes: list[Envelope]) -> dict[int, set[str]]:
    """based_on offset → services that decided there."""
    wanted: dict[int, set[str]] = {}
    for env in envelopes:
        if isinstance(env.data, DECISION_TYPES):
            wanted.setdefault(env.data.based_on, set()).add(SERVICE_OF[type(env.data)])
    return wanted


def _derive(state: State, services: set[str]) -> dict[str, tuple[int, object]]:
    derived: dict[str, tuple[int, object]] = {}
    for service in sorted(services):
        for pid, time_ms, decision in propose(service, state):
            derived[pid] = (time_ms, decision)
    return derived


def _check(env: Envelope, derived: dict[str, tuple[int, object]] | None) -> str:
    if derived is None:
        return f"based_on {env.data.based_on} is not an earlier offset of this log"
    found = derived.get(env.id)
    if found is None:
        return f"decide on state[{env.data.based_on}] does not make this decision"
    time_ms, decision = found
    if _content(decision, env.data) != _content(env.data, env.data):
        return (f"decide on state[{env.data.based_on}] decides differently: "
                f"recorded {msgspec.json.encode(env.data).decode()} / derived {msgspec.json.encode(decision).decode()}")
    if time_ms != env.time_ms:
        return f"recorded time {env.time_ms} ms, the state's time was {time_ms} ms"
    return ""


def _content(decision, recorded):
    """What of ``decision`` the audit compares with ``recorded``: everything but the reason's words
    (all of it for a decision whose reason has no code: an idle flag's sentence is its figures)."""
    if not hasattr(recorded, "reason_code"):
        return decision
    if recorded.reason_code is None:  # recorded before reasons were codes
        return msgspec.structs.replace(decision, reason="", reason_code=None, reason_params={})
    return msgspec.structs.replace(decision, reason="")


def verify(envelopes: Iterable[Envelope], progress: Callable[[int], None] | None = None) -> AuditReport:
    envs = list(envelopes)
    wanted = _wanted(envs)
    last_use = {env.data.based_on: env.offset for env in envs if isinstance(env.data, DECISION_TYPES)}
    report = AuditReport()
    state = State()
    derived: dict[int, dict[str, tuple[int, object]]] = {}
    if -1 in wanted:
        derived[-1] = _derive(state, wanted[-1])
    for env in envs:
        if isinstance(env.data, DECISION_TYPES):
            report.decisions += 1
            based_on = env.data.based_on
            why = _check(env, derived.get(based_on) if based_on < env.offset else None)
            if why:
                report.mismatches.append(Mismatch(env.offset, env.id, SERVICE_OF[type(env.data)], why))
            else:
                report.verified += 1
            if last_use.get(based_on) == env.offset:
                derived.pop(based_on, None)
        apply(state, env)
        report.events += 1
        if env.offset in wanted:
            derived[env.offset] = _derive(state, wanted[env.offset])
        if progress is not None:
            progress(1)
    report.superseded = state.superseded
    report.state = state
    return report
