"""`gangway simulate --trace philly`: Microsoft's Philly trace through gangway's ``decide`` and
``apply`` under a simulated clock (``Simulation``, no broker), three policies in one run.

- **greedy FIFO**, what a default scheduler does: one global queue in arrival order, no quotas,
  no preemption; every job that fits is started (a later one may pass an earlier one that does
  not fit: best effort).
- **Kueue-like**: one ClusterQueue per virtual cluster (team) in one cohort, nominal quota
  proportional to the team's nodes in ``philly_vc.csv`` (8 GPUs a node), borrowing allowed,
  reclaimWithinCohort Any, BestEffortFIFO, and at most one admission per ClusterQueue per cycle
  (Kueue's scheduler admits one head per queue per cycle): gangway's decide with every admission
  but the first of each ClusterQueue dropped.
- **gangway**: the same contract, gangway's decide as it is.

Every scheduler runs a cycle per ``cycle_ms`` of cluster time while it has work (a decision
round takes that long). Jobs run their traced duration; a preempted job starts again from the
beginning. Teams missing from philly_vc.csv get no nominal quota (they only borrow).
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gangway.benchmarks.results import percentile, reference_data, write_json
from gangway.events.catalogue import NodeObserved, PodSet, WorkloadQueued
from gangway.events.contract import ClusterQueue, Contract, FlavorQuotas, LocalQueue, Preemption, Quota
from gangway.events.state import State
from gangway.services.admission.policy import decide_admission
from gangway.sim import Simulation

GPU = "nvidia.com/gpu"
MILLI = 1000
GPUS_PER_NODE = 8
CYCLE_MS = 1000
POLICIES = ("greedy-fifo", "kueue-like", "gangway")


@dataclass(frozen=True)
class Job:
    name: str
    team: str
    submit_ms: int
    duration_ms: int
    gpus: int


class TraceError(ValueError):
    """A trace file gangway cannot simulate: the file, the line and the field, in one sentence."""


def load_trace(data: Path, jobs: int | None = None, capacity: float = 1.0) -> tuple[list[Job], dict[str, int]]:
    """Jobs in submission order (the first ``jobs`` of them) and nodes per team (``capacity``
    times philly_vc.csv's node counts, at least one node a team). Raises TraceError for a line
    that is not a job (a bad time, duration or GPU count), or a trace without jobs."""
    vc_file, trace_file = data / "philly" / "philly_vc.csv", data / "philly" / "philly.csv"
    nodes = {}
    for line, row in _rows(vc_file, ("vc", "node num")):
        if row["vc"] in nodes:
            raise TraceError(f"{vc_file}:{line}: team {row['vc']!r} a second time (one line a team)")
        nodes[row["vc"]] = max(1, round(_number(vc_file, line, "node num", row, int, 0) * capacity))
    rows = []
    for i, (line, row) in enumerate(_rows(trace_file, ("timestamp", "duration", "num_gpus", "cluster"))):
        try:
            moment = dt.datetime.fromisoformat(row["timestamp"])
        except ValueError as exc:
            raise TraceError(f"{trace_file}:{line}: timestamp {row['timestamp']!r} is not a time ({exc})") from None
        if moment.tzinfo is None:  # (Philly's times are UTC; one with an offset says its own)
            moment = moment.replace(tzinfo=dt.timezone.utc)
        if moment.year < 1970:
            raise TraceError(f"{trace_file}:{line}: timestamp {row['timestamp']!r} is before 1970 (the log's clock "
                             "starts there)")
        if not row["cluster"]:
            raise TraceError(f"{trace_file}:{line}: no cluster (the job's team)")
        duration = _number(trace_file, line, "duration", row, float, 0)
        gpus = _number(trace_file, line, "num_gpus", row, int, 1)
        rows.append((int(moment.timestamp() * 1000), i, row, duration, gpus))
    if not rows:
        raise TraceError(f"{trace_file}: no jobs in it (a header line, then one job a line)")
    rows.sort(key=lambda r: (r[0], r[1]))
    if jobs is not None:
        rows = rows[:jobs]
    result = [Job(name=f"{row['cluster']}/j{i:05d}", team=row["cluster"], submit_ms=t,
                  duration_ms=max(1, round(duration * 1000)), gpus=gpus)
              for t, i, row, duration, gpus in rows]
    return result, nodes


def _rows(path: Path, columns: tuple[str, ...]):
    """(file line, row) of a CSV file with these columns."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # (a byte-order mark is no part of the header)
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or ())]
            if missing:
                raise TraceError(f"{path}: no column {', '.join(missing)} (the header has "
                                 f"{', '.join(reader.fieldnames or ()) or 'nothing'})")
            for row in reader:
                if None in row or any(row[c] is None for c in columns):
                    raise TraceError(f"{path}:{reader.line_num}: not the {len(reader.fieldnames)} fields of the header")
                yield reader.line_num, row
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _number(path: Path, line: int, column: str, row: dict, kind: type, least: float):
    """A column's number: a whole one for ``int``, finite, at least ``least``."""
    text = row[column]
    try:
        value = kind(text)
    except (TypeError, ValueError):
        value = None
    if value is None or not math.isfinite(value) or value < least:
        what = "a whole number" if kind is int else "a number"
        raise TraceError(f"{path}:{line}: {column} {text!r} is not {what} of at least {least:g}")
    return value


def pod_set(gpus: int) -> PodSet:
    """A job of up to 8 GPUs is one pod; a bigger one is a gang of 8-GPU pods (as Philly ran them)."""
    if gpus <= GPUS_PER_NODE:
        return PodSet(name="main", count=1, resources={GPU: gpus * MILLI})
    pods = -(-gpus // GPUS_PER_NODE)
    return PodSet(name="main", count=pods, resources={GPU: gpus * MILLI // pods})


def contract(policy: str, teams: list[str], nodes: dict[str, int]) -> Contract:
    if policy == "greedy-fifo":
        total = sum(nodes.values()) * GPUS_PER_NODE * MILLI
        return Contract(
            cluster_queues=[ClusterQueue(name="all", flavors=[FlavorQuotas(
                flavor="default", resources={GPU: Quota(nominal=total)})])],
            local_queues=[LocalQueue(namespace=t, name="default", cluster_queue="all") for t in teams],
        )
    return Contract(
        cluster_queues=[ClusterQueue(
            name=t, cohort="philly", preemption=Preemption(within_cluster_queue="Never", reclaim_within_cohort="Any"),
            flavors=[FlavorQuotas(flavor="default", resources={
                GPU: Quota(nominal=nodes.get(t, 0) * GPUS_PER_NODE * MILLI)})],
        ) for t in teams],
        local_queues=[LocalQueue(namespace=t, name="default", cluster_queue=t) for t in teams],
    )


def first_admission_per_queue(decide: Callable[[State], list]) -> Callable[[State], list]:
    """Kueue's cycle on top of gangway's: keep only the first admission of each ClusterQueue.
    (Dropping later admissions only leaves more room: the ones kept still hold where they land.)"""
    def decide_one_per_queue(state: State) -> list:
        kept, seen = [], set()
        for d in decide(state):
            if d.cluster_queue not in seen:
                seen.add(d.cluster_queue)
                kept.append(d)
        return kept
    return decide_one_per_queue


class _Sampler:
    """Free and fragmented GPUs, sampled at every arrival (time-weighted afterwards)."""

    def __init__(self):
        self.samples: list[tuple[int, int, int, int]] = []  # (time, busy, free on partly used nodes, pending)

    def sample(self, sim: Simulation) -> None:
        busy = partial = 0
        for node in sim.state.nodes.values():
            total = node.allocatable.get(GPU, 0)
            free = node.free.get(GPU, 0)
            busy += total - free
            if 0 < free < total:
                partial += free
        self.samples.append((sim.now_ms, busy // MILLI, partial // MILLI, len(sim.state.pending)))


def simulate(policy: str, jobs: list[Job], nodes: dict[str, int], cycle_ms: int = CYCLE_MS) -> dict:
    teams = sorted({j.team for j in jobs} | set(nodes))
    decide = {"admission": first_admission_per_queue(decide_admission)} if policy == "kueue-like" else None
    start_ms = jobs[0].submit_ms if jobs else 0
    sim = Simulation(start_ms=start_ms, decide=decide, cycle_ms=cycle_ms)
    sim.configure(contract(policy, teams, nodes))
    total_nodes = sum(nodes.values())
    sim.add_nodes([NodeObserved(node=f"node-{i:04d}", allocatable={GPU: GPUS_PER_NODE * MILLI})
                   for i in range(total_nodes)])
    sampler = _Sampler()
    started = time.perf_counter()
    for job in jobs:
        sim.run(until_ms=job.submit_ms)
        sim.now_ms = max(sim.now_ms, job.submit_ms)
        sampler.sample(sim)
        sim.submit(WorkloadQueued(
            workload=job.name, namespace=job.team, queue="default",
            cluster_queue="all" if policy == "greedy-fifo" else job.team, priority_class=None, priority=0,
            kind="Job", runtime_ms=job.duration_ms, pod_sets=[pod_set(job.gpus)],
        ))
    sim.run(rounds_max=10_000_000)
    elapsed = time.perf_counter() - started
    return _figures(policy, sim, jobs, total_nodes * GPUS_PER_NODE, sampler, elapsed)


def _figures(policy: str, sim: Simulation, jobs: list[Job], capacity: int, sampler: _Sampler,
             elapsed_s: float) -> dict:
    state = sim.state
    jct, wait, per_team = [], [], {}
    first_start: dict[str, int] = {}
    gpu_ms = 0
    preemptions = 0
    for env in sim.log:
        kind = type(env.data).__name__
        if kind == "WorkloadRunning":
            first_start.setdefault(env.data.workload, env.time_ms)
        elif kind == "WorkloadEvicted":
            preemptions += 1
    for job in jobs:
        wl = state.workloads[job.name]
        if wl.phase != "finished":
            raise RuntimeError(f"{policy}: {job.name} did not finish ({wl.phase})")
        jct.append((wl.finished_ms - job.submit_ms) / 1000)
        delay = (first_start[job.name] - job.submit_ms) / 1000
        wait.append(delay)
        per_team.setdefault(job.team, []).append(delay)
        gpu_ms += job.gpus * job.duration_ms
    end_ms = max(state.workloads[j.name].finished_ms for j in jobs)
    span_ms = end_ms - jobs[0].submit_ms
    busy_gpu_s = _busy_gpu_seconds(sim.log, capacity)
    frag = _time_weighted(sampler.samples, 2, end_ms)
    return {
        "policy": policy, "jobs": len(jobs), "gpus": capacity, "cycle_ms": sim.cycle_ms,
        "simulated_days": span_ms / 86_400_000, "wall_seconds": elapsed_s, "log_events": len(sim.log),
        "avg_jct_s": statistics.fmean(jct), "p50_jct_s": percentile(jct, 0.5), "p99_jct_s": percentile(jct, 0.99),
        "avg_queueing_s": statistics.fmean(wait), "p99_queueing_s": percentile(wait, 0.99),
        "queueing_by_team": {t: {"jobs": len(v), "avg_s": statistics.fmean(v), "p99_s": percentile(v, 0.99)}
                             for t, v in sorted(per_team.items())},
        "gpu_utilization_pct": 100 * busy_gpu_s / (capacity * span_ms / 1000),
        "useful_gpu_utilization_pct": 100 * gpu_ms / 1000 / (capacity * span_ms / 1000),
        "fragmented_free_gpus_pct": 100 * frag / capacity,
        "preemptions": preemptions, "superseded": state.superseded,
        "jct_s": jct,
    }


def _busy_gpu_seconds(log, capacity: int) -> float:
    """GPU-seconds held on nodes (placement to finish or eviction), from the log."""
    from gangway.events.state import HOLDS_NODES
    from gangway.read.reports import holding_intervals
    return sum((end - start) * (wl.request.get(GPU, 0) // MILLI)
               for wl, start, end in holding_intervals(log, HOLDS_NODES)) / 1000


def _time_weighted(samples: list[tuple], index: int, end_ms: int) -> float:
    if not samples:
        return 0.0
    total = weighted = 0
    for (t, *rest), nxt in zip(samples, samples[1:] + [(end_ms,)]):
        span = max(0, nxt[0] - t)
        weighted += (t, *rest)[index] * span
        total += span
    return weighted / total if total else 0.0


def table(results: list[dict]) -> str:
    lines = [f"{'policy':<12} {'avg JCT h':>9} {'p99 JCT h':>9} {'avg wait h':>10} {'p99 wait h':>10} "
             f"{'GPU util %':>10} {'frag free %':>11} {'preempt':>7} {'wall s':>7}"]
    for r in results:
        lines.append(f"{r['policy']:<12} {r['avg_jct_s'] / 3600:>9.2f} {r['p99_jct_s'] / 3600:>9.1f} "
                     f"{r['avg_queueing_s'] / 3600:>10.3f} {r['p99_queueing_s'] / 3600:>10.2f} "
                     f"{r['gpu_utilization_pct']:>10.1f} {r['fragmented_free_gpus_pct']:>11.1f} "
                     f"{r['preemptions']:>7} {r['wall_seconds']:>7.1f}")
    teams = sorted(results[0]["queueing_by_team"])
    lines.append("")
    lines.append("average queueing delay per team (h): " + " | ".join(r["policy"] for r in results))
    for t in teams:
        cells = "  ".join(f"{r['queueing_by_team'][t]['avg_s'] / 3600:>10.3f}" for r in results)
        lines.append(f"  {t:<8} ({results[0]['queueing_by_team'][t]['jobs']:>5} jobs) {cells}")
    return "\n".join(lines)


def plot(results: list[dict], out_dir: Path, stem: str = "philly") -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for r in results:
        xs = sorted(max(1.0, v) for v in r["jct_s"])
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=r["policy"])
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"Philly trace, {results[0]['jobs']} jobs on {results[0]['gpus']} GPUs: JCT CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(str(out_dir / f"{stem}-jct.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    teams = sorted(results[0]["queueing_by_team"])
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / len(results)
    for k, r in enumerate(results):
        ax.bar([i + k * width for i in range(len(teams))],
               [r["queueing_by_team"][t]["avg_s"] / 3600 for t in teams], width, label=r["policy"])
    ax.set_xticks([i + width for i in range(len(teams))], teams, rotation=45, fontsize=8)
    ax.set_ylabel("average queueing delay (h)")
    ax.set_title("queueing delay per team (virtual cluster)")
    ax.legend()
    fig.tight_layout()
    paths.append(str(out_dir / f"{stem}-queueing.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def main(trace: str, jobs: int | None = None, out_dir: str = "bench/results", data_dir: str | None = None,
         policies: tuple[str, ...] = POLICIES, capacity: float = 1.0) -> int:
    if trace != "philly":
        raise SystemExit(f"gangway: unknown trace {trace!r}")
    try:
        trace_jobs, nodes = load_trace(reference_data(data_dir, "philly/philly.csv"), jobs, capacity)
    except TraceError as exc:
        raise SystemExit(f"gangway: {exc}") from None
    cluster_gpus = sum(nodes.values()) * GPUS_PER_NODE
    too_big = [j for j in trace_jobs if j.gpus > cluster_gpus]
    if too_big:
        biggest = max(too_big, key=lambda j: j.gpus)
        print(f"left out: {len(too_big)} job(s) asking more GPUs than the whole cluster has ({cluster_gpus}; "
              f"the largest {biggest.name}, {biggest.gpus}): no policy can ever run them", flush=True)
        trace_jobs = [j for j in trace_jobs if j.gpus <= cluster_gpus]
        if not trace_jobs:
            raise SystemExit("gangway: no job of the trace fits the cluster: nothing to simulate")
    print(f"Philly: {len(trace_jobs)} jobs, {sum(nodes.values())} nodes ({sum(nodes.values()) * GPUS_PER_NODE} GPUs, "
          f"{capacity:g} × philly_vc.csv), a scheduling cycle every {CYCLE_MS} ms", flush=True)
    results = []
    for policy in policies:
        results.append(simulate(policy, trace_jobs, nodes))
        print(f"{policy}: {results[-1]['wall_seconds']:.1f} s, {results[-1]['log_events']} events", flush=True)
    print(table(results))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    suffix = ("" if jobs is None else f"-{jobs}") + ("" if capacity == 1.0 else f"-capacity{capacity:g}")
    plots = plot(results, out, f"philly{suffix}")
    write_json({"trace": "philly", "jobs": len(trace_jobs), "capacity": capacity, "nodes": nodes, "plots": plots,
                "results": [{k: v for k, v in r.items() if k != "jct_s"} for r in results]},
               str(out / f"philly{suffix}.json"))
    return 0
