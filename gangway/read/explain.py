"""Why a job waits, and what happened to it: pure functions over the state and the log.

- ``pending_report``: for each pending workload its current reason (a code and a sentence, from the
  admission cycle itself), its position in its LocalQueue and ClusterQueue, and an estimated start.
- The estimate is a *forecast*: the pure pipeline run forward from the current state in simulated
  time, with every workload running for its declared runtime (or the binder's default) and nothing
  new arriving. It is what would happen if nobody else submitted anything.
- ``explain``: one job's story from the log — each decision with its reason; for an eviction, who
  preempted it, under which rule, after which grace period, and how much work was lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from gangway.events import catalogue as ev
from gangway.events.codec import format_time
from gangway.events.fold import apply, copy_state
from gangway.events.resources import index_of
from gangway.events.state import State
from gangway.services.admission.policy import Outcome, Snapshot, admission_cycle, queue_order
from gangway.services.placement.topology import TOPOLOGY_UNSATISFIABLE, UNSATISFIABLE_PREFIX
from gangway.sim import Simulation

#: Forecasts look this far ahead at most (cluster time).
FORECAST_HORIZON_MS = 7 * 24 * 3_600_000
FORECAST_ROUNDS_MAX = 20_000


@dataclass
class Pending:
    code: str
    reason: str
    lq_position: int
    cq_position: int
    eta_ms: int | None = None


def classify(outcome: Outcome, snap: Snapshot, fits_alone: bool) -> str:
    """A short code for why a workload was not admitted this cycle."""
    why = outcome.why
    if why.startswith(UNSATISFIABLE_PREFIX):
        return TOPOLOGY_UNSATISFIABLE
    if why.startswith("StrictFIFO"):
        return "strict_fifo"
    if why.startswith("waiting for"):
        return "waiting_for_victims"
    if outcome.reserved is not None:
        return "reservation_held"
    if "ClusterQueue" in why and ("does not exist" in why or "not in the contract" in why or "no quota" in why):
        return "no_quota"
    if fits_alone:
        return "reserved_for_another_gang" if snap.reservation else "behind_higher_priority"
    if "lent it" in why:
        return "nominal_quota_lent_out"
    if "left to lend" in why:
        return "cohort_exhausted"
    if "over nominal" in why:
        return "over_quota"
    return "no_capacity"


def pending_report(state: State, forecast: bool = True) -> dict[str, Pending]:
    """Every pending workload's reason, positions and (with ``forecast``) estimated start."""
    if state.contract is None:
        return {name: Pending("no_config", "no contract has been applied", 0, 0) for name in state.pending}
    idx = index_of(state.contract)
    lq_pos, cq_pos = _positions(state)
    report: dict[str, Pending] = {}
    alone = Snapshot(state, idx)
    alone.reserve_admitted()
    for outcome, snap in admission_cycle(state, idx):
        name = outcome.wl.spec.workload
        if outcome.admission is not None:
            report[name] = Pending("admissible", "fits now: admission will admit it in its next cycle",
                                   lq_pos[name], cq_pos[name])
            continue
        code = classify(outcome, snap, alone.would_admit(outcome.wl))
        reason = outcome.why
        if code == "behind_higher_priority":
            reason = "fits on its own, but workloads ahead of it (higher priority or older) take the room first"
        elif code == "reserved_for_another_gang":
            gang, start = snap.reservation
            reason = f"the room it needs is reserved for {gang}, expected to start at {format_time(start)}"
        report[name] = Pending(code, reason, lq_pos[name], cq_pos[name])
    waiting = {name for name, pending in report.items() if pending.code != TOPOLOGY_UNSATISFIABLE}
    if forecast and waiting:  # a workload no node can ever take has no start to forecast
        for name, eta in forecast_starts(state, waiting).items():
            report[name].eta_ms = eta
    return report


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
    the horizon). Runs the pure pipeline forward on a copy; the state is not touched."""
    sim = Simulation(state=copy_state(state))
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
    for env in envs:
        before = state.superseded
        apply(state, env)
        wl = state.workloads.get(name)
        superseded = wl.superseded if state.superseded > before and wl is not None else ""
        line = _line(env, name, superseded)
        if line:
            lines.append(line)
    if not lines:
        return [f"{workload}: no such job in the log"]
    wl = state.workloads.get(name)
    if wl is not None and wl.phase == "pending":
        report = pending_report(state, forecast=forecast).get(name)
        if report is not None:
            lines.append(f"now pending ({report.code}): {report.reason}")
            lines.append(f"position {report.lq_position} in LocalQueue {wl.spec.namespace}/{wl.spec.queue}, "
                         f"{report.cq_position} in ClusterQueue {wl.spec.cluster_queue}")
            if forecast and report.code == TOPOLOGY_UNSATISFIABLE:
                lines.append("estimated start: never, unless nodes with that label join the cluster")
            elif forecast:
                lines.append(f"estimated start: {_eta(report.eta_ms, state.time_ms)}")
    elif wl is not None:
        lines.append(f"now {wl.phase}")
    return lines


def _resolve(envs: list[ev.Envelope], workload: str) -> str:
    if "/" in workload:
        return workload
    for env in envs:
        if isinstance(env.data, ev.WorkloadQueued) and env.data.workload.rsplit("/", 1)[-1] == workload:
            return env.data.workload
    return workload


def _eta(eta_ms: int | None, now_ms: int) -> str:
    if eta_ms is None:
        return "not within a week at the declared runtimes"
    return f"{format_time(eta_ms)} (in {(eta_ms - now_ms) / 1000:.0f} s, if nothing else arrives)"


def _line(env: ev.Envelope, name: str, superseded: str) -> str:
    data = env.data
    for_it = isinstance(data, ev.EvictionOrdered) and data.preemptor == name
    if getattr(data, "workload", None) != name and not for_it:
        return ""
    at = f"[{env.offset}] "
    if isinstance(data, ev.WorkloadQueued):
        return f"{at}queued in {data.cluster_queue} (LocalQueue {data.namespace}/{data.queue}, priority {data.priority})"
    if isinstance(data, ev.EvictionOrdered) and data.preemptor == name and data.workload != name:
        return f"{at}{data.workload} ordered out to make room for it: {data.reason}"
    if isinstance(data, ev.WorkloadAdmitted):
        return f"{at}admission {'superseded: ' + superseded if superseded else 'applied: ' + data.reason}"
    if isinstance(data, ev.PlacementDecided):
        return f"{at}placement {'superseded: ' + superseded if superseded else 'applied: ' + data.reason}"
    if isinstance(data, ev.EvictionOrdered):
        return (f"{at}preempted by {data.preemptor}: {data.reason}; grace period {data.grace_ms / 1000:g} s; "
                f"work lost {data.work_lost_ms / 1000:g} s")
    if isinstance(data, ev.WorkloadEvicted):
        return f"{at}evicted (attempt {data.attempt + 1}); back in its queue"
    if isinstance(data, ev.CheckpointSaved):
        return f"{at}checkpoint saved" + (f" at step {data.step}" if data.step is not None else "")
    if isinstance(data, (ev.WorkloadBound, ev.WorkloadRunning, ev.WorkloadFinished)):
        return f"{at}{type(data).__name__.removeprefix('Workload').lower()} (attempt {data.attempt + 1})"
    return ""
