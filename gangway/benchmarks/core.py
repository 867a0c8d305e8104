"""`gangway bench core`: the pure core without Kafka, as the cluster grows and the queue deepens.

For each (GPUs, pending) point a state is folded from events: the contract (four teams in one
cohort, nominal quota a quarter of the cluster each), 8-GPU nodes, every node full of running
8-GPU workloads, and ``pending`` workloads of mixed shapes waiting. A quarter of the running
workloads then finish, and one scheduling cycle runs as the services do it: admission decides,
its decisions are folded, placement decides, its decisions are folded. Timed apart: each decide,
each fold step. Memory per workload is the fold's (tracemalloc around folding the pending ones).
Nothing here reads a wall clock but the benchmark itself; the core stays pure.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
import tracemalloc

from gangway.events import catalogue as ev
from gangway.events.contract import ClusterQueue, Contract, FlavorQuotas, LocalQueue, Preemption, Quota
from gangway.events.fold import apply, copy_state
from gangway.events.state import State
from gangway.services.admission.policy import admissions_placed
from gangway.services.deciders import id_of
from gangway.services.placement.policy import decide_placement

GPU = "nvidia.com/gpu"
MILLI = 1000
TEAMS = ("alpha", "beta", "gamma", "delta")
PENDING_SHAPES = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8)]  # (pods, GPUs per pod)
GPU_STEPS = (64, 512, 4096, 16_384)
PENDING_STEPS = (100, 1_000, 10_000, 100_000)
TARGET_PER_S = 1_000
#: Issue 13's targets at depth: (GPUs, pending) → admissions+placements per second.
DEPTH_TARGETS = {(16_384, 100_000): 2_000, (64, 100_000): 500}
T0 = 1_700_000_000_000


class _Log:
    """A state and the offset of the next event: events are folded as they are made."""

    def __init__(self):
        self.state = State()
        self.offset = 0

    def fold(self, event_id: str, data, time_ms: int = T0) -> None:
        apply(self.state, ev.Envelope(id=event_id, source="gangway/bench", time_ms=time_ms, data=data,
                                      offset=self.offset))
        self.offset += 1


def contract(gpus: int) -> Contract:
    return Contract(
        cluster_queues=[ClusterQueue(
            name=t, cohort="org", preemption=Preemption("LowerPriority", "Any"),
            flavors=[FlavorQuotas(flavor="default", resources={GPU: Quota(nominal=gpus * MILLI // len(TEAMS))})],
        ) for t in TEAMS],
        local_queues=[LocalQueue(namespace=t, name="default", cluster_queue=t) for t in TEAMS],
    )


def _workload(name: str, team: str, pods: int, per_pod: int, priority: int) -> ev.WorkloadQueued:
    return ev.WorkloadQueued(
        workload=f"{team}/{name}", namespace=team, queue="default", cluster_queue=team, priority_class=None,
        priority=priority, kind="Job", runtime_ms=3_600_000,
        pod_sets=[ev.PodSet(name="main", count=pods, resources={GPU: per_pod * MILLI})],
    )


def _step(log: _Log, decide, prefix: str) -> tuple[list, float, float]:
    """One service's turn: its decisions, the seconds deciding, the seconds folding them."""
    t = time.perf_counter()
    decisions = decide(log.state)
    t_decide = time.perf_counter() - t
    t = time.perf_counter()
    for d in decisions:
        log.fold(id_of(prefix, d), d)
    return decisions, t_decide, time.perf_counter() - t


def _cycle(log: _Log) -> dict:
    """One admission cycle (each gang admitted and placed together, as the admission service
    writes them) and one placement cycle for what it left; times in seconds."""
    decided, t_admit, t_fold_admit = _step(log, lambda state: list(admissions_placed(state)), "admit")
    placed, t_place, t_fold_place = _step(log, decide_placement, "place")
    admitted = sum(isinstance(d, ev.WorkloadAdmitted) for d in decided)
    return {"admitted": admitted, "placed": len(decided) - admitted + len(placed), "admission_s": t_admit,
            "placement_s": t_place, "fold_s": t_fold_admit + t_fold_place, "folded": len(decided) + len(placed)}


def build(gpus: int, pending: int, seed: int = 42) -> tuple[_Log, list[str]]:
    """A full cluster and ``pending`` waiting workloads; returns the log and the running workloads."""
    rng = random.Random(seed)
    log = _Log()
    log.fold("config/bench", ev.ConfigApplied(contract=contract(gpus), digest="bench"))
    nodes = gpus // 8
    for i in range(nodes):
        log.fold(f"node/{i}", ev.NodeObserved(node=f"node-{i:05d}", allocatable={GPU: 8 * MILLI, "cpu": 96 * MILLI}))
    running = []
    for i in range(nodes):  # one 8-GPU workload per node, teams in turn: the cluster is full
        wl = _workload(f"run-{i:05d}", TEAMS[i % len(TEAMS)], 1, 8, 0)
        log.fold(f"queued/{wl.workload}", wl)
        running.append(wl.workload)
    while log.state.pending:
        if not _cycle(log)["admitted"]:
            raise RuntimeError("could not fill the cluster")
    for name in running:
        log.fold(f"bound/{name}", ev.WorkloadBound(workload=name, attempt=0))
        log.fold(f"running/{name}", ev.WorkloadRunning(workload=name, attempt=0))
    for i in range(pending):
        pods, per_pod = rng.choice(PENDING_SHAPES)
        wl = _workload(f"w{i:06d}", rng.choice(TEAMS), pods, per_pod, rng.choice((0, 50, 100)))
        log.fold(f"queued/{wl.workload}", wl, T0 + 1000 + i)
    return log, running


def measure(gpus: int, pending: int, seed: int = 42, runs: int = 1) -> dict:
    """One point, ``runs`` times on copies of one built state: the median run's figures, and
    every run's admissions+placements per second."""
    gc.collect()
    built, running = build(gpus, pending, seed)
    rows = []
    for _ in range(max(1, runs)):
        log = _Log()
        log.state, log.offset = copy_state(built.state), built.offset
        rows.append(_measure_once(log, running, gpus, pending))
        del log
        gc.collect()
    speeds = [r["admissions_placements_per_s"] for r in rows]
    median = statistics.median(speeds)
    row = dict(min(rows, key=lambda r: abs(r["admissions_placements_per_s"] - median)))
    row.update({"admissions_placements_per_s": median, "runs_per_s": speeds})
    return row


def _measure_once(log: _Log, running: list[str], gpus: int, pending: int) -> dict:
    freed = running[: max(1, len(running) // 4)]
    t = time.perf_counter()
    for name in freed:
        log.fold(f"finished/{name}", ev.WorkloadFinished(workload=name, attempt=0), T0 + 10_000_000)
    fold_finish_s = (time.perf_counter() - t) / len(freed)
    cycle = _cycle(log)
    busy = cycle["admission_s"] + cycle["placement_s"] + cycle["fold_s"]
    per_s = cycle["placed"] / busy if busy else 0.0
    return {
        "gpus": gpus, "nodes": gpus // 8, "pending": pending, "gpus_freed": len(freed) * 8, **cycle,
        "cycle_s": busy, "admissions_placements_per_s": per_s,
        "fold_step_us": (cycle["fold_s"] / cycle["folded"] * 1e6) if cycle["folded"] else None,
        "fold_finish_us": fold_finish_s * 1e6,
    }


def memory_per_workload(count: int = 4_000, seed: int = 42) -> dict:
    """Bytes the folded state holds per workload: pending, then admitted and placed (room for all)."""
    rng = random.Random(seed)
    log = _Log()
    log.fold("config/bench", ev.ConfigApplied(contract=contract(count * 8), digest="bench"))
    for i in range(count // 8):  # big nodes: room for every workload, and few nodes to sort
        log.fold(f"node/{i}", ev.NodeObserved(node=f"node-{i:05d}", allocatable={GPU: 64 * MILLI}))
    shapes = [(rng.choice(PENDING_SHAPES[:4]), rng.choice(TEAMS)) for _ in range(count)]
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for i, ((pods, per_pod), team) in enumerate(shapes):  # the event (the spec) stays in the state
        wl = _workload(f"w{i:06d}", team, pods, per_pod, 0)
        log.fold(f"queued/{wl.workload}", wl)
    queued = tracemalloc.get_traced_memory()[0]
    while log.state.pending:
        if not _cycle(log)["placed"]:
            break
    placed = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"workloads": count, "pending_bytes_per_workload": (queued - base) / count,
            "placed_bytes_per_workload": (placed - base) / count}


def bench_core(gpu_steps=GPU_STEPS, pending_steps=PENDING_STEPS, seed: int = 42, runs: int = 3) -> dict:
    rows = [measure(g, p, seed, runs) for g in gpu_steps for p in pending_steps]
    top = [r for r in rows if r["gpus"] == max(gpu_steps) and r["pending"] == max(pending_steps)][0]
    targets = []
    for (gpus, pending), target in DEPTH_TARGETS.items():
        row = next((r for r in rows if (r["gpus"], r["pending"]) == (gpus, pending)), None)
        if row is not None:
            targets.append({"gpus": gpus, "pending": pending, "admissions_placements_per_s": row["admissions_placements_per_s"],
                            "runs_per_s": row["runs_per_s"], "target_per_s": target,
                            "ratio_to_target": row["admissions_placements_per_s"] / target})
    return {"rows": rows, "memory": memory_per_workload(), "target_per_s": TARGET_PER_S, "runs": runs,
            "at_largest": {"gpus": top["gpus"], "pending": top["pending"],
                           "admissions_placements_per_s": top["admissions_placements_per_s"],
                           "ratio_to_target": top["admissions_placements_per_s"] / TARGET_PER_S},
            "targets": targets}


def table(result: dict) -> str:
    head = (f"{'GPUs':>6} {'pending':>8} {'admitted':>8} {'placed':>6} {'admit ms':>9} {'admit/s':>8} {'place ms':>9} "
            f"{'fold ms':>8} {'cycle ms':>9} {'adm+pl/s':>9} {'fold µs/ev':>10}")
    lines = [head]
    for r in result["rows"]:
        lines.append(f"{r['gpus']:>6} {r['pending']:>8} {r['admitted']:>8} {r['placed']:>6} "
                     f"{r['admission_s'] * 1e3:>9.1f} {r['admitted'] / r['admission_s'] if r['admission_s'] else 0:>8.0f} "
                     f"{r['placement_s'] * 1e3:>9.1f} {r['fold_s'] * 1e3:>8.1f} "
                     f"{r['cycle_s'] * 1e3:>9.1f} {r['admissions_placements_per_s']:>9.0f} "
                     f"{(r['fold_step_us'] or 0):>10.1f}")
    m = result["memory"]
    top = result["at_largest"]
    lines.append(f"memory per workload: {m['pending_bytes_per_workload']:.0f} B pending, "
                 f"{m['placed_bytes_per_workload']:.0f} B admitted and placed ({m['workloads']} workloads)")
    lines.append(f"at {top['gpus']} GPUs, {top['pending']} pending: {top['admissions_placements_per_s']:.0f} "
                 f"admissions+placements/s, target {result['target_per_s']} ({top['ratio_to_target']:.2f}×)")
    lines += [target_line(t, result.get("runs", 1)) for t in result.get("targets", [])]
    return "\n".join(lines)


def target_line(t: dict, runs: int) -> str:
    every = ", ".join(f"{x:,.0f}" for x in t["runs_per_s"])
    return (f"admission at depth, {t['gpus']:,} GPUs and {t['pending']:,} pending: "
            f"{t['admissions_placements_per_s']:,.0f} admissions+placements/s (median of {runs}: {every}), "
            f"target {t['target_per_s']:,} ({t['ratio_to_target']:.2f}×)")


def plot(result: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = result["rows"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for gpus in sorted({r["gpus"] for r in rows}):
        mine = sorted((r for r in rows if r["gpus"] == gpus), key=lambda r: r["pending"])
        xs = [r["pending"] for r in mine]
        left.plot(xs, [r["cycle_s"] * 1e3 for r in mine], marker="o", label=f"{gpus} GPUs")
        right.plot(xs, [r["admissions_placements_per_s"] for r in mine], marker="o", label=f"{gpus} GPUs")
    right.axhline(result["target_per_s"], color="grey", linestyle="--", label="target")
    for ax, title in ((left, "one admission+placement cycle (ms)"), (right, "admissions+placements per second")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("pending workloads")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("gangway core, no Kafka (a quarter of a full cluster freed, then one cycle)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
