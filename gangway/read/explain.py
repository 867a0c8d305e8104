"""Why a job waits, and what happened to it: pure functions over the state and the log.

- ``pending_report``: for each pending workload its current reason (a ``ReasonCode``, its
  parameters and their sentence, from the admission cycle itself), its position in its LocalQueue and ClusterQueue, and an estimated start.
- The estimate is a *forecast*: the pure pipeline run forward from the current state in simulated
  time, with every workload running for its declared runtime (or the binder's default) and nothing
  new arriving. It is what would happen if nobody else submitted anything.
- ``explain``: one job's story from the log — each decision with its reason; for an eviction, who
  preempted it, under which rule, after which grace period, and how much work was lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gangway.events import catalogue as ev, topics
from gangway.events.codec import format_time
from gangway.events.fold import apply, copy_state
from gangway.events.reasons import C, CONFIG_CODES, NEVER_PLACEABLE_CODES, Param, Reason, ReasonCode, reason
from gangway.events.resources import index_of
from gangway.events.state import HOLDS_NODES, State, WorkloadState, aging_of
from gangway.read.describe import IslandWatch, describe, idle_reason
from gangway.services.admission.policy import admission_cycle, queue_order
from gangway.services.admission.snapshot import Outcome, Snapshot
from gangway.services.admission.victims import withheld
from gangway.services.placement.policy import ASSUMED_RUNTIME_MS
from gangway.sim import Simulation

#: Forecasts look this far ahead at most (cluster time).
FORECAST_HORIZON_MS = 7 * 24 * 3_600_000
FORECAST_ROUNDS_MAX = 20_000


@dataclass
class Pending:
    code: ReasonCode
    reason: str
    lq_position: int
    cq_position: int
    eta_ms: int | None = None
    params: dict[str, Param] = field(default_factory=dict)


def classify(outcome: Outcome, snap: Snapshot, fits_alone: bool) -> Reason:
    """Why a workload was not admitted this cycle, as a reason code with its parameters.

    The cycle's own reason stands, except that a workload which would fit on its own is waiting
    behind others: the gang holding a reservation, or workloads ahead of it in the queue."""
    why = outcome.reason or reason(C.NO_PLACEMENT)
    if why.code in (C.STRICT_FIFO, C.WAITING_FOR_VICTIMS, C.RESERVATION_HELD, C.QUOTA_HELD_FOR_ANOTHER,
                    *NEVER_PLACEABLE_CODES, *CONFIG_CODES):
        return why
    if fits_alone:
        if snap.reservation:
            return reason(C.RESERVED_FOR_ANOTHER_GANG, gang=snap.reservation.workload,
                          start=format_time(snap.reservation.start_ms))
        return reason(C.BEHIND_HIGHER_PRIORITY)
    return why


def pending_report(state: State, forecast: bool = True) -> dict[str, Pending]:
    """Every pending workload's reason, positions and (with ``forecast``) estimated start."""
    if state.contract is None:
        return {name: _pending(reason(C.NO_CONFIG), 0, 0) for name in state.pending}
    idx = index_of(state.contract)
    lq_pos, cq_pos = _positions(state)
    report: dict[str, Pending] = {}
    alone = Snapshot(state, idx)
    alone.reserve_admitted()
    for outcome, snap in admission_cycle(state, idx):
        name = outcome.wl.spec.workload
        why = reason(C.ADMISSIBLE) if outcome.admission is not None else \
            classify(outcome, snap, alone.would_admit(outcome.wl))
        report[name] = _pending(why, lq_pos[name], cq_pos[name])
    for name, retry_ms in state.backing_off.items():  # out of the cycle until its requeue backoff ends
        wl = state.workloads[name]
        if retry_ms > state.time_ms:
            why = reason(C.BIND_BACKOFF, failures=wl.bind_failures, retry_at=format_time(wl.retry_after_ms))
            report[name] = _pending(why, lq_pos[name], cq_pos[name])
    if idx.stopped or idx.stopped_local:  # out of the cycle while its queue is stopped
        for name in state.pending:
            stop = idx.stop_of(state.workloads[name].spec)
            if stop is not None and name not in report:
                why = reason(C.QUEUE_STOPPED, queue_kind=stop[0], queue=stop[1], policy=stop[2])
                report[name] = _pending(why, lq_pos[name], cq_pos[name])
    # (a workload no cycle can admit as things stand has no start to forecast: ``NEVER_STARTS`` says why)
    waiting = {name for name, pending in report.items() if pending.code not in NEVER_STARTS}
    if forecast and waiting:  # a workload no node or quota can ever take has no start to forecast
        for name, eta in forecast_starts(state, waiting).items():
            report[name].eta_ms = eta
    return report


def _pending(why: Reason, lq_position: int, cq_position: int) -> Pending:
    return Pending(why.code, why.message, lq_position, cq_position, params=dict(why.params))


def _positions(state: State) -> tuple[dict[str, int], dict[str, int]]:
    """1-based positions in queue order within each LocalQueue and each ClusterQueue."""
    lq: dict[tuple[str, str], int] = {}
    cq: dict[str, int] = {}
    lq_pos, cq_pos = {}, {}
    for wl in queue_order(state):
        key = (wl.spec.namespace, wl.spec.queue)
        lq[key] = lq_pos[wl.spec.workload] = lq.get(key, 0) + 1
        cq[wl.spec.cluster_queue] = cq_pos[wl.spec.workload] = cq.get(wl.spec.cluster_queue, 0) + 1
    return lq_pos, cq_pos


def forecast_starts(state: State, names: set[str]) -> dict[str, int | None]:
    """When each named pending workload would be admitted if nothing else arrived (None: not within
    the horizon). Runs the pure pipeline forward on a copy; the state is not touched. Work that
    declares no runtime runs ``ASSUMED_RUNTIME_MS`` there, as the quota holds and node reservations
    assume (one estimate, not two: a hold "free by" an hour from now beside a start in ten minutes)."""
    sim = Simulation(state=copy_state(state), default_runtime_ms=ASSUMED_RUNTIME_MS)
    starts: dict[str, int | None] = {name: None for name in names}

    def done() -> bool:
        for env in sim.log[done.seen:]:
            if isinstance(env.data, ev.WorkloadAdmitted) and env.data.workload in starts \
                    and starts[env.data.workload] is None:
                starts[env.data.workload] = env.time_ms
        done.seen = len(sim.log)
        return all(t is not None for t in starts.values())

    done.seen = 0
    sim.run(until_ms=state.time_ms + FORECAST_HORIZON_MS, rounds_max=FORECAST_ROUNDS_MAX, stop=done)
    done()
    return starts


# --- one job's story ------------------------------------------------------------------------------


def explain(envs: list[ev.Envelope], workload: str, forecast: bool = True) -> list[str]:
    """The lines ``gangway explain`` prints for one workload (``namespace/job`` or a bare job id)."""
    state = State()
    lines: list[str] = []
    name = _resolve(envs, workload)
    watch = IslandWatch()
    for env in envs:
        before = state.superseded
        was = state.workloads.get(name)
        held = was is not None and was.phase in HOLDS_NODES
        apply(state, env)
        islands = watch.see(env)
        wl = state.workloads.get(name)
        superseded = None
        if state.superseded > before and wl is not None and wl.superseded is not None:
            superseded = f"[{wl.superseded_code}] {wl.superseded}" if wl.superseded_code else wl.superseded
        if held and isinstance(env.data, ev.NodeRemoved) and wl.phase == "pending":
            # (the node's removal is about the node: said here for the work it held)
            lines.append(f"[{env.offset}] evicted (attempt {wl.attempt}): node {env.data.node} left the cluster "
                         "under it; back in its queue")
            continue
        line = describe(env, about=name, superseded=superseded, islands=islands)
        if line:
            lines.append(f"[{env.offset}] {line}")
    if not lines:
        return [f"{workload}: no such job in the log"]
    return _recreated(state, name) + lines + standing_lines(envs, state, name, forecast=forecast)


def _recreated(state: State, name: str) -> list[str]:
    """A line naming the workloads of a Kubernetes object deleted and created again under ``name``'s
    object name (each is queued as ``<name>-<its uid's first 8 characters>``): ``explain <ns>/<name>``
    tells the first one's story, and would hide the job that runs now."""
    later = [(w.seq, n, w.phase) for n, w in state.workloads.items()
             if n.startswith(f"{name}-") and n[len(name) + 1:] == w.spec.labels.get(ev.UID_LABEL, "")[:8]]
    if not later:
        return []
    named = ", ".join(f"{n} (now {phase})" for _, n, phase in sorted(later))
    return [f"note: the object of {name} was deleted and created again: the new one is workload {named} "
            f"(`gangway explain <workload>`); below, the first one's story"]


#: The estimated start of a workload that no cycle can admit as things stand, by its reason: only
#: nodes joining or another contract can change it (no forecast is run for it).
NEVER_STARTS = {
    C.TOPOLOGY_UNSATISFIABLE: "estimated start: never, unless nodes that meet its topology request join the cluster",
    C.NO_MATCHING_NODES: "estimated start: never, unless nodes it may use join the cluster or come back into service",
    C.QUOTA_NEVER_ENOUGH: "estimated start: never, unless the contract gives {cluster_queue} more quota",
    C.UNTOLERATED_TAINT: ("estimated start: never, unless it tolerates the taint or the contract gives {cluster_queue} "
                          "a flavor it tolerates"),
    C.QUEUE_STOPPED: "estimated start: none while its queue is stopped (a contract with its stopPolicy None resumes it)",
    C.NO_CONFIG: "estimated start: none until a contract is applied",
    C.LOCAL_QUEUE_GONE: "estimated start: never, unless a contract brings its LocalQueue back",
    C.UNKNOWN_CLUSTER_QUEUE: "estimated start: never, unless a contract brings ClusterQueue {cluster_queue} back",
    C.NO_QUOTA_FOR_RESOURCES: "estimated start: never, unless the contract gives {cluster_queue} quota for what it asks",
    C.NO_QUOTA_IN_FLAVOR: "estimated start: never, unless the contract gives {cluster_queue} quota for what it asks",
}


def standing_lines(envs: list[ev.Envelope], state: State, name: str, reports: dict[str, Pending] | None = None,
                   forecast: bool = True) -> list[str]:
    """What ``explain`` says after a workload's decisions, ``state`` being ``envs`` folded: its cost
    so far (when the contract has prices) and where it stands — for a pending one its reason,
    positions and estimated start (from ``reports``, ``pending_report``'s, when the caller has them)."""
    lines: list[str] = []
    wl = state.workloads.get(name)
    if wl is not None and state.contract is not None and state.contract.prices:
        lines.extend(_money_lines(envs, name))
    if wl is not None and wl.phase == "pending":
        report = (reports if reports is not None else pending_report(state, forecast=forecast)).get(name)
        if report is not None:
            lines.append(f"now pending ({report.code}): {report.reason}")
            aging = aging_of(state.contract)
            aged = (f" (priority {wl.spec.priority}, aged to {wl.spec.priority + (state.time_ms - wl.queued_ms) // aging} "
                    f"by {(state.time_ms - wl.queued_ms) / 1000:g} s in the queue: one point per {aging / 1000:g} s)"
                    if aging else "")
            lines.append(f"position {report.lq_position} in LocalQueue {wl.spec.namespace}/{wl.spec.queue}, "
                         f"{report.cq_position} in ClusterQueue {wl.spec.cluster_queue}{aged}")
            if forecast:
                lines.append(f"estimated start: {start_words(report, wl, state.time_ms)}")
            lines.extend(flavor_lines(state, wl))
            lines.extend(withheld_lines(state, wl))
    elif wl is not None and wl.deactivated:
        lines.append(f"now deactivated ({wl.deactivated_code or C.BIND_FAILURES_EXCEEDED}): {wl.deactivated}")
    elif wl is not None and wl.withdrawn:
        lines.append(f"now withdrawn: {wl.withdrawn}")
    elif wl is not None and wl.withdrawing:
        lines.append(f"now {wl.phase}, being withdrawn ({wl.withdrawing}): its pods are being stopped")
    elif wl is not None:
        lines.append(f"now {wl.phase}")
    return lines


def withheld_lines(state: State, wl: WorkloadState) -> list[str]:
    """For a workload that Kueue's rules would let preempt, where one of its victims could preempt it
    straight back (``Contract.no_preemption_back``): the preemption it does not get, and why."""
    if state.contract is None or not state.contract.no_preemption_back:
        return []
    idx = index_of(state.contract)
    for outcome, snap in admission_cycle(state, idx):
        if outcome.wl is wl:
            break
    else:
        return []
    if outcome.admission is not None:
        return []
    for flavors in outcome.preempt_flavors:
        found = withheld(state, idx, snap, wl, flavors)
        if found is not None:
            victims, back, ahead = found
            taking = f"no preemption for it: taking {', '.join(v.spec.workload for v in victims)} would make room, but "
            if ahead is None and back not in victims:
                return [f"{taking}{back.spec.workload}, waiting in {back.spec.cluster_queue}, could then preempt it at "
                        "once: it waits for work to end instead (the contract's no_preemption_undone)"]
            if ahead is None:
                return [f"{taking}{back.spec.workload}, back in {back.spec.cluster_queue}, could preempt it at once: it "
                        "waits for work to end instead (the contract's no_preemption_back)"]
            return [f"{taking}{ahead.spec.workload}, waiting ahead of it in {ahead.spec.cluster_queue}, could take its "
                    f"place at once, and {back.spec.workload}, back in {back.spec.cluster_queue}, could then preempt "
                    f"{ahead.spec.workload}: it waits for work to end instead (the contract's no_proxy_preemption)"]
    return []


def flavor_lines(state: State, wl: WorkloadState) -> list[str]:
    """For a workload whose queue lists more than one flavor for what it asks, each flavor in the
    queue's order and why it does not take the gang now (``Snapshot.flavor_reasons``), as Kueue
    lists them; [] for a queue of one flavor (its reason is the one above)."""
    if state.contract is None:
        return []
    snap = Snapshot(state, index_of(state.contract))
    snap.reserve_admitted()
    said = snap.flavor_reasons(wl)
    if len(said) < 2:
        return []
    return ["flavors, in the queue's order:"] + [
        f"  {flavor}: {why.message if why is not None else 'would take it now (it waits for the reason above)'}"
        for flavor, why in said]


def rejected_lines(rejections: list[ev.Envelope], workload: str) -> list[str]:
    """What ``gangway explain`` says of a job that never reached the log: each JobRejected (on
    gangway.rejections) of its job id, with the reason and the record it came from. ``workload``
    is ``namespace/job`` (a rejection of that job id in another namespace is not its own; one whose
    namespace could not be read may be) or a bare job id (every namespace's). A namespace has no
    ``/``, so a job id that has one (rejected as no valid name) is found as submitted, with its
    namespace or without: ``research/a/b`` and ``a/b`` both find job ``a/b`` of ``research``."""
    namespace, slash, job_id = workload.partition("/")

    def its_own(d: ev.JobRejected) -> bool:
        return bool(d.job_id) and (d.job_id == workload or (
            bool(slash) and d.job_id == job_id and d.namespace in ("", namespace)))
    return [f"[{topics.REJECTIONS} {env.offset}] {describe(env)} (record {env.data.submission or '?'})"
            for env in rejections if isinstance(env.data, ev.JobRejected) and its_own(env.data)]


def _money_lines(envs: list[ev.Envelope], name: str) -> list[str]:
    """What the workload cost so far (every attempt, running work accrued) and how busy its GPUs were."""
    from gangway.read.money import money, run_figures
    from gangway.services.accounting.billing import books_of
    books = books_of(envs)
    run = next((r for r in run_figures([c for c in books.known() if c.workload == name], books.state)), None)
    if run is None:
        return []
    currency = books.state.contract.currency if books.state.contract else ""
    busy = "no GPU telemetry" if run.busy_ratio is None else f"GPUs busy {run.busy_ratio:.0%} (SM active)"
    out = [f"cost so far: {money(run.list_cost_micros)} {currency} at list price over {run.attempts} attempt(s), "
           f"{money(run.waste_micros)} of it lost to preemption or lost nodes; {busy}"]
    wl = books.state.workloads.get(name)
    if wl is not None and wl.idle is not None:
        out.append(f"flagged idle now: {idle_reason(wl.idle)}")
    return out


def _resolve(envs: list[ev.Envelope], workload: str) -> str:
    if "/" in workload:
        return workload
    for env in envs:
        if isinstance(env.data, ev.WorkloadQueued) and env.data.workload.rsplit("/", 1)[-1] == workload:
            return env.data.workload
    return workload


def start_words(report: Pending, wl: WorkloadState, now_ms: int) -> str:
    """A pending workload's estimated start in words: never (and what would change that) for one
    no cycle can admit as things stand, else its forecast (``explain``'s and the console's)."""
    never = NEVER_STARTS.get(report.code)
    if never is not None:
        return never.format(cluster_queue=wl.spec.cluster_queue).removeprefix("estimated start: ")
    return _eta(report.eta_ms, now_ms)


def _eta(eta_ms: int | None, now_ms: int) -> str:
    if eta_ms is None:
        return "not within a week at the declared runtimes"
    return f"{format_time(eta_ms)} (in {(eta_ms - now_ms) / 1000:.0f} s, if nothing else arrives)"
