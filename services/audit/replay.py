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

import bisect
import gc
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgspec

from gangway.events.catalogue import DECISION_TYPES, Envelope, EvictionOrdered
from gangway.events.fold import apply
from gangway.events.state import State
from gangway.services.deciders import propose_until, service_of


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


def _wanted(envelopes: list[Envelope]) -> dict[int, dict[str, set[str]]]:
    """based_on offset → services that decided there → the ids of their decisions."""
    wanted: dict[int, dict[str, set[str]]] = {}
    for env in envelopes:
        if isinstance(env.data, DECISION_TYPES):
            wanted.setdefault(env.data.based_on, {}).setdefault(service_of(env.data), set()).add(env.id)
    return wanted


def _derive(state: State, services: dict[str, set[str]]) -> dict[str, tuple[int, object]]:
    """What each service decides on ``state``, up to the last of the decisions recorded there (a
    decide is a walk in order: what comes after them cannot change them, so it is not derived)."""
    derived: dict[str, tuple[int, object]] = {}
    for service in sorted(services):
        for pid, time_ms, decision in propose_until(service, state, services[service]):
            derived[pid] = (time_ms, decision)
    return derived


def _check(env: Envelope, derived: dict[str, tuple[int, object]] | None) -> str:
    if derived is None:
        return f"based_on {env.data.based_on} is not an earlier offset of this log"
    found = derived.get(env.id)
    if found is None:
        return f"decide on state[{env.data.based_on}] does not make this decision"
    time_ms, decision = found
    # (Equal as they are, they are equal without the reason's words too: the common case, no copies.)
    if decision != env.data and _content(decision, env.data) != _content(env.data, env.data):
        return (f"decide on state[{env.data.based_on}] decides differently: "
                f"recorded {msgspec.json.encode(env.data).decode()} / derived {msgspec.json.encode(decision).decode()}")
    if time_ms != env.time_ms:
        return f"recorded time {env.time_ms} ms, the state's time was {time_ms} ms"
    return ""


def _content(decision, recorded):
    """What of ``decision`` the audit compares with ``recorded``: everything but the reason's words
    (all of it for a decision whose reason has no code: an idle flag's sentence is its figures), and
    what a record written before a field was added cannot say (an eviction's flavors)."""
    if not hasattr(recorded, "reason_code"):
        return decision
    if isinstance(recorded, EvictionOrdered) and not recorded.flavors:  # recorded before they were named
        decision = msgspec.structs.replace(decision, flavors={})
    if recorded.reason_code is None:  # recorded before reasons were codes
        return msgspec.structs.replace(decision, reason="", reason_code=None, reason_params={})
    return msgspec.structs.replace(decision, reason="")


#: What deriving the decisions at one offset costs, in folds of one event (about: a decide walks the
#: queue and tries placements; the fold of an event touches a workload or a node). It only splits
#: the log between processes; a wrong guess costs balance, never correctness. Measured on
#: ``bench replay``'s log of 1,000,000 events: 10 µs a fold, 257 µs an admission's derive, 298 µs a
#: preemption's: 26 on average. At 15 the first of two processes took 39.2 s and the last 35.2 s;
#: at 26, 36.4 s and 35.3 s.
DERIVE_COST_IN_FOLDS = 26


def verify(envelopes: Iterable[Envelope], progress: Callable[[int], None] | None = None,
           workers: int = 1) -> AuditReport:
    """Fold the log and check every decision on it; ``workers`` > 1 splits the checking between
    that many processes (forked, where the platform can): each folds the log from its start, but
    derives only the decisions based on its own stretch of offsets (``split``), and this process
    takes the last stretch (so it folds the whole log and keeps the final state). The report is
    the same as with one worker, mismatches in log order."""
    envs = list(envelopes)
    wanted = _wanted(envs)
    # The log (and whatever else lives now) stays for the whole replay: out of the garbage
    # collector's sight meanwhile, so its full collections do not walk a million envelopes again
    # and again (and forked workers do not copy the pages it would touch).
    gc.freeze()
    try:
        if workers > 1 and len(wanted) > 1 and _can_fork():
            bounds = split(envs, wanted, workers)
            if bounds:
                return _verify_forked(envs, wanted, bounds, progress)
        report = _Part()
        state = _verify_part(envs, wanted, -_INF, _INF, len(envs), report, progress)
        return report.finish(state)
    finally:
        gc.unfreeze()


_INF = float("inf")


@dataclass
class _Part:
    """What one worker found: its decisions checked, and the mismatches as (position, Mismatch)."""

    events: int = 0
    decisions: int = 0
    verified: int = 0
    mismatches: list[tuple[int, Mismatch]] = field(default_factory=list)

    def finish(self, state: State, others: Iterable[_Part] = ()) -> AuditReport:
        parts = [self, *others]
        report = AuditReport(events=self.events, decisions=sum(p.decisions for p in parts),
                             verified=sum(p.verified for p in parts), superseded=state.superseded, state=state)
        report.mismatches = [m for _, m in sorted((m for p in parts for m in p.mismatches), key=lambda pm: pm[0])]
        return report


def _verify_part(envs: list[Envelope], wanted: dict[int, dict[str, set[str]]], lo: float, hi: float, stop: int,
                 part: _Part, progress: Callable[[int], None] | None) -> State:
    """Fold ``envs[:stop]``, checking the decisions based on an offset in [lo, hi) (the -1 of the
    empty state included when lo is below it); returns the state."""
    last_use = {env.data.based_on: env.offset for env in envs if isinstance(env.data, DECISION_TYPES)}
    state = State()
    derived: dict[int, dict[str, tuple[int, object]]] = {}
    if -1 in wanted and lo <= -1 < hi:
        derived[-1] = _derive(state, wanted[-1])
    for position in range(stop):
        env = envs[position]
        data = env.data
        if isinstance(data, DECISION_TYPES) and lo <= data.based_on < hi:
            part.decisions += 1
            based_on = data.based_on
            why = _check(env, derived.get(based_on) if based_on < env.offset else None)
            if why:
                part.mismatches.append((position, Mismatch(env.offset, env.id, service_of(data), why)))
            else:
                part.verified += 1
            if last_use.get(based_on) == env.offset:
                derived.pop(based_on, None)
        apply(state, env)
        part.events += 1
        if env.offset in wanted and lo <= env.offset < hi:
            derived[env.offset] = _derive(state, wanted[env.offset])
        if progress is not None:
            progress(1)
    return state


def split(envs: list[Envelope], wanted: dict[int, dict[str, set[str]]], workers: int) -> list[int]:
    """Offsets where each worker's stretch of based_on offsets begins (after the first's), so that
    each does about as much: a worker folds the log up to its stretch's end and derives in its
    stretch (``DERIVE_COST_IN_FOLDS`` a derive), the last one folds the whole log. [] when the
    log is too small to split."""
    position = {env.offset: i for i, env in enumerate(envs)}
    offsets = sorted(o for o in wanted if o in position)
    if len(offsets) < workers:
        return []
    d = DERIVE_COST_IN_FOLDS
    # Worker taking offsets[j:k] costs position[offsets[k-1]] + d * (k - j): with c[k'] =
    # position[offsets[k']] + d * k', it may end past k' while c[k'] <= budget - d + d * j.
    c = [position[o] + d * k for k, o in enumerate(offsets)]

    def cut(budget: float) -> list[int] | None:
        starts, j = [], 0
        for _ in range(workers - 1):
            j = max(j, bisect.bisect_right(c, budget - d + d * j))
            starts.append(j)
        if len(envs) + d * (len(offsets) - j) > budget:
            return None
        return starts

    low, high = float(len(envs)), float(len(envs) + d * len(offsets))
    best = cut(high)
    for _ in range(50):
        middle = (low + high) / 2
        found = cut(middle)
        if found is None:
            low = middle
        else:
            high, best = middle, found
    starts = sorted(set(k for k in best if 0 < k < len(offsets)))
    return [offsets[k] for k in starts]


def _can_fork() -> bool:
    import multiprocessing
    return "fork" in multiprocessing.get_all_start_methods()


def _verify_forked(envs: list[Envelope], wanted: dict[int, dict[str, set[str]]], bounds: list[int],
                   progress: Callable[[int], None] | None) -> AuditReport:
    """One forked process per stretch but the last, which this process checks (``verify``)."""
    import multiprocessing
    context = multiprocessing.get_context("fork")
    edges = [-_INF, *bounds, _INF]
    # A worker folds up to its last decision; the last worker folds everything.
    stops = [0] * (len(edges) - 1)
    for i, env in enumerate(envs):
        if isinstance(env.data, DECISION_TYPES):
            k = bisect.bisect_right(bounds, env.data.based_on)
            stops[k] = i + 1
    children = []
    try:
        for k in range(len(edges) - 2):
            reader, writer = context.Pipe(duplex=False)
            child = context.Process(target=_child, args=(envs, wanted, edges[k], edges[k + 1], stops[k], writer),
                                    daemon=True)
            child.start()
            writer.close()
            children.append((child, reader))
        mine = _Part()
        state = _verify_part(envs, wanted, edges[-2], _INF, len(envs), mine, progress)
        others = []
        for child, reader in children:
            try:
                others.append(reader.recv())
            except EOFError:
                child.join()
                raise RuntimeError(f"a replay worker died (exit code {child.exitcode})") from None
            child.join()
        return mine.finish(state, others)
    finally:  # (stopped here, e.g. interrupted: the workers stop too)
        for child, reader in children:
            if child.is_alive():
                child.terminate()
                child.join()
            reader.close()


def _child(envs, wanted, lo, hi, stop, writer) -> None:
    part = _Part()
    _verify_part(envs, wanted, lo, hi, stop, part, None)
    writer.send(part)
    writer.close()
