"""The auditor (pure): fold the log and re-run each decision's ``decide`` on ``state[based_on]``.

One pass, no state copies: a first look finds every offset some decision was based on; while
folding, right after such an offset is applied, the services that decided there are asked to
decide again, and what they propose is kept until the decisions based on it arrive. A recorded
decision reproduces when a decision with the same id, time and content comes out again.

Its reason counts as data: the code and parameters must come out again, and the recorded sentence
must be the one the code renders from them (a sentence that is not is reported: ``explain`` and
``log`` show the rendered one). A decision recorded before reasons were codes carries only a
sentence: its content is checked without the reason.

Besides the decisions, the log itself is checked (``AuditReport.integrity``): its offsets go up by
one from 0 (a gap, a repeat or a line out of order is reported with its file line), a record no
reader folds (its writer does not write its type) is reported as skipped, a ConfigApplied must carry
its contract's digest, a fact's reason sentence must be its code's, a workload's lifecycle
(queued, admitted, placed, bound, running, finished or evicted) must not go back in time, and an
eviction for a preemptor must carry out an order for it. A decision derived before others recorded
at its offset but not recorded is reported (a service writes a prefix of what it decides: it was
taken out), and so is one without a reason code on a log whose decisions carry codes. These
cost one cheap look per event: the structure one comparison of the offsets with a range, the rest
a type lookup in the fold's loop.
"""

from __future__ import annotations

import bisect
import gc
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgspec

from gangway.contract import contract_digest, digest_matches
from gangway.events import catalogue as ev
from gangway.events.catalogue import DECISION_TYPES, Envelope, EvictionOrdered
from gangway.events.codec import format_time
from gangway.events.fold import apply
from gangway.events.reasons import render
from gangway.events.state import State
from gangway.services.deciders import propose_until, service_of


def _where(offset: int | None, line: int | None) -> str:
    return ", ".join(p for p in (f"offset {offset}" if offset is not None else "",
                                 f"line {line}" if line is not None else "") if p)


@dataclass
class Mismatch:
    """A recorded decision that does not come out again. ``line``: its line in the exported file (None
    for a log not read from a file); ``detail``: the recorded and the derived decision whole (JSON),
    where they differ."""

    offset: int
    id: str
    service: str
    why: str
    line: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        line = f", line {self.line}" if self.line is not None else ""
        return f"offset {self.offset} {self.id} ({self.service}){line}: {self.why}"


@dataclass
class Finding:
    """Something wrong with the log itself rather than with a decision: an integrity failure. ``why``
    says where (offset, file line) in its own words."""

    why: str
    offset: int | None = None
    line: int | None = None

    def __str__(self) -> str:
        return self.why


@dataclass
class AuditReport:
    events: int = 0
    decisions: int = 0
    verified: int = 0
    superseded: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    state: State | None = None
    #: What is wrong with the log itself (structure, quarantined records, digests, times), in log order.
    integrity: list[Finding] = field(default_factory=list)
    #: What was checked: the first and last offsets, and the log's clock at its end (None: no events).
    first_offset: int | None = None
    last_offset: int | None = None
    last_time_ms: int | None = None
    #: The log starts past offset 0: only its structure was checked (no decision re-derived).
    partial: bool = False

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.integrity


def _wanted(envelopes: list[Envelope]) -> dict[int, dict[str, set[str]]]:
    """based_on offset → services that decided there → the ids of their decisions."""
    wanted: dict[int, dict[str, set[str]]] = {}
    for env in envelopes:
        if isinstance(env.data, DECISION_TYPES):
            wanted.setdefault(env.data.based_on, {}).setdefault(service_of(env.data), set()).add(env.id)
    return wanted


def _derive(state: State, services: dict[str, set[str]]) -> tuple[dict[str, tuple[int, object]], list[tuple[str, str]]]:
    """What each service decides on ``state``, up to the last of the decisions recorded there (a
    decide is a walk in order: what comes after them cannot change them, so it is not derived);
    and, as (service, id), the decisions it makes before that last one which are not recorded.

    A service writes a prefix of what it decides (all of it, or up to where its cycle's time ran
    out): one missing from the middle of it was deleted from the log. (Once every recorded one has
    come out; otherwise their mismatches say more.)"""
    derived: dict[str, tuple[int, object]] = {}
    unrecorded: list[tuple[str, str]] = []
    for service in sorted(services):
        made = []
        for pid, time_ms, decision in propose_until(service, state, services[service]):
            derived[pid] = (time_ms, decision)
            made.append(pid)
        if services[service].issubset(made):
            unrecorded += [(service, pid) for pid in made if pid not in services[service]]
    return derived, unrecorded


def _check(env: Envelope, derived: dict[str, tuple[int, object]] | None) -> tuple[str, str]:
    """Why ``env``'s decision does not reproduce ('' when it does), and the decisions whole when
    their contents differ."""
    if derived is None:
        return f"based_on {env.data.based_on} is not an earlier offset of this log", ""
    found = derived.get(env.id)
    if found is None:
        return f"decide on state[{env.data.based_on}] does not make this decision", ""
    time_ms, decision = found
    recorded = env.data
    # (Equal as they are, they are equal without the reason's words too: the common case, no copies.)
    if decision != recorded:
        ours, theirs = _content(decision, recorded), _content(recorded, recorded)
        if ours != theirs:
            return (f"decide on state[{recorded.based_on}] decides differently: "
                    + "; ".join(differences(msgspec.to_builtins(theirs), msgspec.to_builtins(ours))),
                    f"recorded {msgspec.json.encode(recorded).decode()} / derived {msgspec.json.encode(decision).decode()}")
        if getattr(recorded, "reason_code", None) is not None and decision.reason != recorded.reason:
            # (the code and parameters came out again: the derived sentence is their rendering)
            return _not_its_code(recorded.reason, decision.reason), ""
    if time_ms != env.time_ms:
        return f"recorded time {env.time_ms} ms, the state's time was {time_ms} ms", ""
    return "", ""


def _not_its_code(recorded: str, rendered: str) -> str:
    return f"reason text is not its code's: recorded '{recorded}', the code says '{rendered}'"


_ABSENT = object()


def differences(recorded, derived, limit: int = 4) -> list[str]:
    """Field by field, where two decisions (as JSON values) differ: ``path: recorded X, derived Y``,
    the first ``limit`` of them and how many more."""
    found: list[str] = []
    count = 0

    def show(value) -> str:
        if value is _ABSENT:
            return "nothing"
        text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
        return text if len(text) <= 80 else text[:77] + "..."

    def walk(path: str, a, b) -> None:
        nonlocal count
        if a == b:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in [*a, *(k for k in b if k not in a)]:
                walk(f"{path}.{key}" if path else str(key), a.get(key, _ABSENT), b.get(key, _ABSENT))
        elif isinstance(a, list) and isinstance(b, list):
            for i in range(max(len(a), len(b))):
                walk(f"{path}[{i}]", a[i] if i < len(a) else _ABSENT, b[i] if i < len(b) else _ABSENT)
        else:
            count += 1
            if len(found) < limit:
                found.append(f"{path or 'the decision'}: recorded {show(a)}, derived {show(b)}")

    walk("", recorded, derived)
    if count > len(found):
        found.append(f"and {count - len(found)} more")
    return found


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
           workers: int = 1, lines: list[int] | None = None,
           quarantined: Iterable[tuple] = (), end: int | None = None,
           misplaced: Iterable[tuple[int, str]] = ()) -> AuditReport:
    """Fold the log and check every decision on it, and the log itself (``AuditReport.integrity``).

    ``lines``: the file line of each event, for a log read from a file (mismatches and findings
    name them); ``quarantined``: the records the reader skipped as no reader folds them, as (line,
    offset, why, …) (``logfile.Quarantined``), each reported; ``end``: the offset after the last
    event, where the export marks it (``logend``); ``misplaced``: lines standing where no line of an
    export does, as (line, why) (``LogFile.misplaced``), each reported. A log that starts past
    offset 0 is a partial one: the state before it is not there to decide on, so only its structure
    is checked, and it does not pass. An empty log does not pass either.

    ``workers`` > 1 splits the checking between that many processes (forked, where the platform
    can): each folds the log from its start, but derives only the decisions based on its own
    stretch of offsets (``split``), and this process takes the last stretch (so it folds the whole
    log, checks the facts and keeps the final state). The report is the same as with one worker,
    mismatches in log order."""
    envs = list(envelopes)
    quarantined = list(quarantined)
    findings = [Finding(f"line {line}: {why}", None, line) for line, why in misplaced]
    findings += structure(envs, lines, quarantined, end)
    if not envs:
        return AuditReport(integrity=findings or [Finding("no events: nothing was checked")])
    first = min([min(e.offset for e in envs), *(q[1] for q in quarantined)])
    if first > 0:
        if progress is not None:
            progress(len(envs))
        return _covered(AuditReport(
            events=len(envs), decisions=sum(isinstance(e.data, DECISION_TYPES) for e in envs), partial=True,
            integrity=[Finding(f"the log starts at offset {first}, not 0: a partial export (or its first lines "
                               "deleted); no decision can be re-derived without the state before it, so only "
                               "the log's structure was checked", first, lines[0] if lines else None), *findings]),
            envs)
    wanted = _wanted(envs)
    # The log (and whatever else lives now) stays for the whole replay: out of the garbage
    # collector's sight meanwhile, so its full collections do not walk a million envelopes again
    # and again (and forked workers do not copy the pages it would touch).
    gc.freeze()
    try:
        report = None
        if workers > 1 and len(wanted) > 1 and _can_fork():
            bounds = split(envs, wanted, workers)
            if bounds:
                report = _verify_forked(envs, wanted, bounds, progress, lines)
        if report is None:
            part = _Part()
            state = _verify_part(envs, wanted, -_INF, _INF, len(envs), part, progress, lines)
            report = part.finish(state)
    finally:
        gc.unfreeze()
    report.integrity = findings + report.integrity
    return _covered(report, envs)


def _covered(report: AuditReport, envs: list[Envelope]) -> AuditReport:
    report.first_offset, report.last_offset = min(e.offset for e in envs), max(e.offset for e in envs)
    report.last_time_ms = report.state.time_ms if report.state is not None else max(e.time_ms for e in envs)
    return report


def structure(envs: list[Envelope], lines: list[int] | None = None,
              quarantined: list[tuple] = (), end: int | None = None) -> list[Finding]:
    """What is wrong with the log's own numbering: its offsets must go up by one, line after line.
    Each gap, repeat and line out of order is named (with its file line where ``lines`` are
    given), each quarantined record too, and an ``end`` that is not the last offset's next. One
    comparison with a range when all is well."""
    findings = [Finding(f"{_where(offset, line)}: skipped, never folded: {why}", offset, line)
                for line, offset, why, *_ in quarantined]
    offsets = [e.offset for e in envs]
    if quarantined:  # they hold their offsets in the file: numbered with the others
        at = sorted([*zip(lines or range(len(envs)), offsets), *((q[0] or 0, q[1]) for q in quarantined)])
        lines, offsets = [line for line, _ in at], [offset for _, offset in at]
    if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
        findings += _disorder(offsets, lines)
    if end is not None and offsets and end != offsets[-1] + 1:
        findings.append(Finding(f"the export marks its end at offset {end} (after its last line's {end - 1}), but "
                                f"its last line has offset {offsets[-1]}", end, lines[-1] if lines else None))
    return findings


def contract_edited(applied: ev.ConfigApplied) -> str:
    """Why a ConfigApplied's contract is not the one it was applied as ('' when it is)."""
    if digest_matches(applied.contract, applied.digest):
        return ""
    digest = contract_digest(applied.contract)
    return (f"ConfigApplied's digest {applied.digest[:12]}… is not its contract's ({digest[:12]}…): the contract "
            "was changed after it was applied")


def _disorder(offsets: list[int], lines: list[int] | None) -> list[Finding]:
    """The gaps, repeats and lines out of order of offsets that do not go up by one."""
    def line(i: int) -> int | None:
        return lines[i] if lines else None

    at: dict[int, list[int]] = {}
    for i, offset in enumerate(offsets):
        at.setdefault(offset, []).append(i)
    found: list[tuple[int, Finding]] = []
    for offset, positions in at.items():
        if len(positions) > 1:
            where = f"lines {', '.join(str(line(i)) for i in positions)}" if lines else f"{len(positions)} events"
            times = "twice" if len(positions) == 2 else f"{len(positions)} times"
            found.append((positions[1], Finding(f"offset {offset} {times} ({where})", offset, line(positions[1]))))
    disorder = 0
    # A line continues the numbering (its offset is one more than the last in order), starts a run
    # of its own (the next line follows it: lines deleted before it, or a stretch moved), or stands
    # alone out of order (an edited offset, a swapped line): only the last is blamed on its line.
    last = top = offsets[0]
    for i in range(1, len(offsets)):
        offset = offsets[i]
        if offset == last + 1:
            last = top = max(top, offset)
            continue
        if at[offset][0] != i:  # a repeat: said above
            continue
        after = offsets[i + 1] if i + 1 < len(offsets) else None
        if after == offset + 1 or (after is None and offset > last):
            if offset < last:
                disorder += 1
                found.append((i, _out_of_order(offset, last, line(i))))
            last, top = offset, max(top, offset)
        else:
            disorder += 1
            found.append((i, _out_of_order(offset, last, line(i))))
    # The gaps: between the offsets present from the first to the top of the numbering (walked
    # present by present, not offset by offset: one line with offset 2**63 is one gap, not a hang).
    present = sorted(o for o in at if offsets[0] <= o <= top)
    for before, offset in zip(present, present[1:]):
        if offset > before + 1:
            gap_start, position = before + 1, at[offset][0]
            said = f"offset {gap_start} missing" if gap_start == offset - 1 else f"offsets {gap_start}–{offset - 1} missing"
            if lines:
                said += f" (before line {line(position)})"
            found.append((position, Finding(said, gap_start, None)))
    said = [f for _, f in sorted(found, key=lambda pf: pf[0])]
    if len(said) > _SAID_MAX:  # a log shuffled whole: the first of it says enough
        said = [*said[:_SAID_MAX], Finding(f"and {len(said) - _SAID_MAX} more gaps, repeats and lines out of order "
                                           f"({disorder} lines out of order in all)")]
    return said


#: The most gaps, repeats and lines out of order ``structure`` names one by one.
_SAID_MAX = 20


def _out_of_order(offset: int, last: int, line: int | None) -> Finding:
    where = f"line {line} has offset {offset}" if line is not None else f"offset {offset} comes"
    return Finding(f"{where} after offset {last}: out of order", offset, line)


_INF = float("inf")


@dataclass
class _Part:
    """What one worker found: its decisions checked, and the mismatches as (position, Mismatch)."""

    events: int = 0
    decisions: int = 0
    verified: int = 0
    mismatches: list[tuple[int, Mismatch]] = field(default_factory=list)
    #: The facts' findings (``_Facts``): only the worker that folds the whole log looks at them.
    integrity: list[Finding] = field(default_factory=list)

    def finish(self, state: State, others: Iterable[_Part] = ()) -> AuditReport:
        parts = [self, *others]
        report = AuditReport(events=self.events, decisions=sum(p.decisions for p in parts),
                             verified=sum(p.verified for p in parts), superseded=state.superseded, state=state,
                             integrity=self.integrity)
        report.mismatches = [m for _, m in sorted((m for p in parts for m in p.mismatches), key=lambda pm: pm[0])]
        return report


#: Where a workload is in its lifecycle, by the events that move it: a fact (a report of what
#: happened, not re-derived) moving it must not be timed before the event that moved it last.
_LIFECYCLE = frozenset({ev.WorkloadQueued, ev.WorkloadAdmitted, ev.PlacementDecided, ev.EvictionOrdered,
                        ev.WorkloadBound, ev.WorkloadRunning, ev.WorkloadFinished, ev.WorkloadEvicted})
_FACTS = frozenset({ev.WorkloadBound, ev.WorkloadRunning, ev.WorkloadFinished, ev.WorkloadEvicted})
#: Facts whose reason sentence is their code's rendering. (A failed bind's WorkloadEvicted is not one:
#: its sentence is the cluster's error, its code and parameters the backoff.)
_CODED_FACTS = frozenset({ev.ClusterReconciled})
_CHECKED = _LIFECYCLE | _CODED_FACTS | {ev.ConfigApplied}


class _Facts:
    """The checks of what the auditor does not re-derive, made as the events are folded: a
    ConfigApplied's digest, a coded fact's sentence, a workload's lifecycle in time order, an
    eviction for a preemptor carrying out an order for that preemptor, a report of an attempt made."""

    def __init__(self, lines: list[int] | None, found: list[Finding]):
        self.lines, self.found = lines, found
        #: workload → (time, event type, offset) of what moved it last
        self.moved: dict[str, tuple[int, str, int]] = {}

    def fold(self, state: State, env: Envelope, position: int) -> None:
        data = env.data
        kind = type(data)
        if kind is ev.ConfigApplied:
            edited = contract_edited(data)
            if edited:
                self._found(env, position, edited)
        elif kind in _CODED_FACTS and data.reason_code is not None:
            try:
                said = render(data.reason_code, data.reason_params)
            except (KeyError, IndexError, ValueError):
                said = None
            if said != data.reason:
                self._found(env, position, _not_its_code(data.reason, said) if said is not None else
                            f"reason parameters do not fill the sentence of its code {data.reason_code}")
        if kind not in _LIFECYCLE:
            apply(state, env)
            return
        name = data.workload
        wl = state.workloads.get(name)
        before = (wl.phase, wl.attempt) if wl is not None else None
        if kind in _FACTS and wl is not None and data.attempt > wl.attempt:
            self._found(env, position, f"{kind.__name__} of {name} reports attempt {data.attempt}, but its "
                                       f"current attempt is {wl.attempt}: a report of an attempt not made")
        if kind is ev.WorkloadEvicted and data.preemptor is not None:
            order = wl.eviction if wl is not None and wl.phase == "evicting" else None
            if order is None or order.preemptor != data.preemptor:
                self._found(env, position, f"WorkloadEvicted of {name} for preemptor {data.preemptor}, but no "
                            f"EvictionOrdered in force ordered it out for {data.preemptor}"
                            + (f" (the order in force names {order.preemptor})" if order is not None else ""))
        apply(state, env)
        wl = state.workloads.get(name)
        if wl is None or (wl.phase, wl.attempt) == before:
            return  # it did not move the workload (superseded, a re-delivery, a stale report)
        last = self.moved.get(name)
        if last is not None and env.time_ms < last[0] and kind in _FACTS:
            self._found(env, position, f"{kind.__name__} of {name} at {format_time(env.time_ms)} is before its "
                                       f"{last[1]} at {format_time(last[0])} (offset {last[2]}): time goes backwards")
        if last is None or env.time_ms >= last[0]:
            self.moved[name] = (env.time_ms, kind.__name__, env.offset)

    def _found(self, env: Envelope, position: int, why: str) -> None:
        line = self.lines[position] if self.lines else None
        self.found.append(Finding(f"{_where(env.offset, line)} {env.id}: {why}", env.offset, line))


def _verify_part(envs: list[Envelope], wanted: dict[int, dict[str, set[str]]], lo: float, hi: float, stop: int,
                 part: _Part, progress: Callable[[int], None] | None, lines: list[int] | None = None) -> State:
    """Fold ``envs[:stop]``, checking the decisions based on an offset in [lo, hi) (the -1 of the
    empty state included when lo is below it), and the facts when it folds the whole log (hi is
    infinite); returns the state."""
    # Where each based_on offset is used last, and the kinds of decision each service wrote on this
    # log: one it makes now but never wrote then (an admission's placement, on a log from before
    # admission placed) is not missed when absent. (One pass over the log for both.)
    last_use: dict[int, int] = {}
    wrote: set[tuple[str, type]] = set()
    for env in envs:
        if isinstance(env.data, DECISION_TYPES):
            last_use[env.data.based_on] = env.offset
            wrote.add((service_of(env.data), type(env.data)))
    state = State()
    derived: dict[int, dict[str, tuple[int, object]]] = {}
    #: based_on offset → the decisions derived there before its last recorded one, not recorded
    unrecorded: dict[int, list[tuple[str, str]]] = {}
    facts = _Facts(lines, part.integrity) if hi == _INF else None

    def derive(offset: int) -> None:
        derived[offset], missed = _derive(state, wanted[offset])
        missed = [(service, pid) for service, pid in missed if (service, type(derived[offset][pid][1])) in wrote]
        if missed:
            unrecorded[offset] = missed

    if -1 in wanted and lo <= -1 < hi:
        derive(-1)
    coded_at = None  # the first decision whose reason is a code: none after it is recorded without one
    for position in range(stop):
        env = envs[position]
        data = env.data
        if coded_at is None and getattr(data, "reason_code", None) is not None and isinstance(data, DECISION_TYPES):
            coded_at = env.offset
        if isinstance(data, DECISION_TYPES) and lo <= data.based_on < hi:
            part.decisions += 1
            based_on = data.based_on
            why, detail = _check(env, derived.get(based_on) if based_on < env.offset else None)
            if not why and coded_at is not None and getattr(data, "reason_code", 0) is None:
                why = (f"its reason has no code, as decisions recorded before reasons were codes, but the decision "
                       f"at offset {coded_at} carries one: a code taken out?")
            if why:
                part.mismatches.append((position, Mismatch(env.offset, env.id, service_of(data), why,
                                                           lines[position] if lines else None, detail)))
            else:
                part.verified += 1
            if last_use.get(based_on) == env.offset:
                derived.pop(based_on, None)
                for service, pid in unrecorded.pop(based_on, ()):  # (said after the last recorded there)
                    part.mismatches.append((position, Mismatch(
                        based_on, pid, service, f"decide on state[{based_on}] makes this decision before ones "
                        "recorded there, and it is not on the log: deleted?", lines[position] if lines else None)))
        if facts is not None and type(data) in _CHECKED:
            facts.fold(state, env, position)
        else:
            apply(state, env)
        part.events += 1
        if env.offset in wanted and lo <= env.offset < hi:
            derive(env.offset)
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
                   progress: Callable[[int], None] | None, lines: list[int] | None = None) -> AuditReport:
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
            child = context.Process(target=_child, args=(envs, wanted, edges[k], edges[k + 1], stops[k], writer, lines),
                                    daemon=True)
            child.start()
            writer.close()
            children.append((child, reader))
        mine = _Part()
        state = _verify_part(envs, wanted, edges[-2], _INF, len(envs), mine, progress, lines)
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


def _child(envs, wanted, lo, hi, stop, writer, lines=None) -> None:
    part = _Part()
    _verify_part(envs, wanted, lo, hi, stop, part, None, lines)
    writer.send(part)
    writer.close()
