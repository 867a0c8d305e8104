"""`gangway bench kueue --scenario NAME`: Kueue's own scheduler-performance scenarios, end to end.

Reads ``kueue-perf/<scenario>/generator.yaml`` as it is — cohorts of ClusterQueues (nominalQuota,
borrowingLimit, reclaimWithinCohort, withinClusterQueue) and, per queue, workload sets that create
``count`` workloads one every ``creationIntervalMs``, each asking ``request`` cpu (per pod,
``podCount`` pods) at ``priority`` and running ``runtimeMs`` once admitted — and runs it through
the real broker and all six services (``Stack``, time scale 1: real time), on simulated nodes that
hold exactly the quota. Prints Kueue's figures beside Kueue's published ones (``rangespec.yaml``'s
comments) and the scenario's lower bound.

Times: creation is when the job is sent (wall clock = cluster clock at time scale 1); admission is
the WorkloadAdmitted's event time (the state's time when admission decided); running is the
binder's WorkloadRunning time; release is the WorkloadFinished time (start + runtime).
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import statistics
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgspec
import yaml

from gangway import stack
from gangway.adapters import kafka
from gangway.benchmarks.results import reference_data, write_json
from gangway.events import catalogue as ev
from gangway.events.contract import (
    WRITTEN_NOW, Backfill, ClusterQueue, Contract, FlavorQuotas, LocalQueue, Preemption, PriorityClass, Quota,
)
from gangway.events.quantity import parse_milli

#: Kueue's published averages (rangespec.yaml's comments): wall ms, usage %, avg ms to admission.
PUBLISHED = {
    "baseline": {"wall_ms": 351_116, "usage_pct": 55.9,
                 "admission_ms": {"large": 16_501, "medium": 76_768, "small": 215_468}},
    "large-scale": {"wall_ms": 1_179_411, "usage_pct": 38.64,
                    "admission_ms": {"large": 105_604, "medium": 256_413, "small": 700_379}},
    "tas": {"wall_ms": 401_472, "usage_pct": 62.41, "admission_ms": {
        "large-balanced-rack": 37_862, "large-preferred-rack": 39_573, "large-required-rack": 39_625,
        "medium-balanced-rack": 106_303, "medium-preferred-rack": 106_324, "medium-required-rack": 107_071,
        "small-balanced-rack": 237_846, "small-preferred-rack": 246_090, "small-required-rack": 246_755}},
}
#: What each figure of a scenario is asked to be: (figure, at most (else at least), the bound, whose
#: goal). ``admission_vs_kueue`` (the average time to admission ÷ Kueue's) is asked of every class.
GOALS = {
    "baseline": [("wall_vs_lower_bound", True, 1.25, "issue 5"), ("wall_vs_lower_bound", True, 1.10, "issue 13"),
                 ("usage_pct", False, 85.0, "issue 5"),
                 ("admission_vs_kueue", True, 1 / 3, "issue 5"), ("admission_vs_kueue", True, 1 / 5, "issue 13")],
    "large-scale": [("wall_vs_kueue", True, 0.2, "issue 5"), ("wall_vs_lower_bound", True, 8.0, "issue 13"),
                    ("admission_vs_kueue", True, 1 / 3, "issue 5"),
                    ("quota_held_before_running_pct", True, 25.0, "issue 13")],
}
_FIGURE_NAMES = {"wall_vs_lower_bound": "wall / lower bound", "wall_vs_kueue": "wall / Kueue's",
                 "usage_pct": "ClusterQueue usage %", "quota_held_before_running_pct": "quota held before running %"}


@dataclass(frozen=True)
class Spec:
    """One workload to create: when, where, what."""

    name: str
    cluster_queue: str
    namespace: str
    cls: str
    create_ms: int
    runtime_ms: int
    priority: int
    per_pod_milli: int
    pods: int
    topology: dict | None = None


@dataclass
class Scenario:
    name: str
    contract: Contract
    nominal_milli: dict[str, int]
    specs: list[Spec] = field(default_factory=list)
    topology: dict | None = None
    #: A shrunk scenario is not compared with Kueue's published figures.
    shrunk: bool = False


def load(path: Path, shrink: float | None = None) -> Scenario:
    """The scenario of a generator.yaml; ``shrink`` keeps that fraction of queues and workloads."""
    doc = yaml.safe_load(path.read_text())
    queues: list[ClusterQueue] = []
    local: list[LocalQueue] = []
    priorities: set[int] = set()
    specs: list[Spec] = []
    nominal: dict[str, int] = {}

    def scaled(n: int) -> int:
        return n if shrink is None else max(1, math.ceil(n * shrink))

    for cohort_set in doc["cohorts"]:
        for c in range(scaled(cohort_set["count"])):
            cohort = f"{cohort_set['className']}-{c}"
            for queue_set in cohort_set["queuesSets"]:
                for q in range(scaled(queue_set["count"])):
                    cq = f"{cohort}-{queue_set['className']}-{q}"
                    nominal[cq] = parse_milli(str(queue_set["nominalQuota"]))
                    queues.append(ClusterQueue(
                        name=cq, cohort=cohort,
                        preemption=Preemption(within_cluster_queue=queue_set["withinClusterQueue"],
                                              reclaim_within_cohort=queue_set["reclaimWithinCohort"]),
                        flavors=[FlavorQuotas(flavor="default", resources={"cpu": Quota(
                            nominal=nominal[cq], borrowing_limit=parse_milli(str(queue_set["borrowingLimit"])))})],
                    ))
                    local.append(LocalQueue(namespace=cq, name="main", cluster_queue=cq))
                    for s, wset in enumerate(queue_set["workloadsSets"]):
                        for w in wset["workloads"]:
                            priorities.add(int(w["priority"]))
                            topo = ({"constraint": w["tasConstraint"], "level": w["tasLevel"],
                                     "slice_size": w.get("sliceSize")} if "tasConstraint" in w else None)
                            for i in range(scaled(wset["count"])):
                                specs.append(Spec(
                                    name=f"{w['className']}-{s}-{i}", cluster_queue=cq, namespace=cq,
                                    cls=w["className"], create_ms=i * int(wset["creationIntervalMs"]),
                                    runtime_ms=int(w["runtimeMs"]), priority=int(w["priority"]),
                                    per_pod_milli=parse_milli(str(w["request"])), pods=int(w.get("podCount", 1)),
                                    topology=topo,
                                ))
    specs.sort(key=lambda s: (s.create_ms, s.cluster_queue, s.name))
    contract = Contract(
        cluster_queues=queues, local_queues=local,
        priority_classes=[PriorityClass(name=f"priority-{p}", value=p) for p in sorted(priorities)],
        **WRITTEN_NOW,  # (as the contract reader would say of its YAML)
    )
    return Scenario(path.parent.name, contract, nominal, specs, doc.get("topology"), shrink is not None)


def lower_bound_ms(sc: Scenario) -> dict:
    """No scheduler can finish sooner: all demand at full quota, or the last creation + its runtime."""
    demand = sum(s.per_pod_milli * s.pods * s.runtime_ms for s in sc.specs)
    capacity = sum(sc.nominal_milli.values())
    by_demand = demand / capacity
    by_last = max(s.create_ms + s.runtime_ms for s in sc.specs)
    return {"demand_over_capacity_ms": by_demand, "last_creation_plus_runtime_ms": by_last,
            "lower_bound_ms": max(by_demand, by_last)}


def nodes_yaml(sc: Scenario) -> str:
    """The simulated nodes: the scenario's topology when it has one (block × rack × node, with the
    level labels), else nodes holding exactly the quota, each as big as the largest pod."""
    if sc.topology:
        return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": _topology_nodes(sc.topology)})
    capacity = sum(sc.nominal_milli.values())
    size = max(max(s.per_pod_milli for s in sc.specs), 20_000)
    items = [_node(f"node-{i:04d}", {}, f"{size}m", "256Gi") for i in range(-(-capacity // size))]
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})


def _node(name: str, labels: dict, cpu: str, memory: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}


def _topology_nodes(topology: dict) -> list[dict]:
    levels = topology["levels"]
    leaf = levels[-1]
    nodes: list[dict] = []

    def walk(depth: int, labels: dict, path: str) -> None:
        level = levels[depth]
        for i in range(level["count"]):
            name = f"{path}{level['name']}-{i}"
            here = dict(labels, **{level["nodeLabel"]: name})
            if depth == len(levels) - 1:
                nodes.append(_node(name, here, str(leaf["capacity"]["cpu"]), str(leaf["capacity"]["memory"])))
            else:
                walk(depth + 1, here, name + "-")

    walk(0, {}, "")
    return nodes


def _topology_request(topo: dict | None) -> ev.TopologyRequest | None:
    """Kueue's TAS constraint as gangway's pod-set topology request (required, preferred, balanced)."""
    if topo is None:
        return None
    if topo["constraint"] == "required":
        return ev.TopologyRequest(required=topo["level"])
    if topo["constraint"] == "balanced":
        return ev.TopologyRequest(preferred=topo["level"], slice_required=topo["level"],
                                  slice_size=topo.get("slice_size") or 1)
    return ev.TopologyRequest(preferred=topo["level"])


def job(s: Spec) -> ev.JobSubmitted:
    return ev.JobSubmitted(
        job_id=s.name, namespace=s.namespace, queue="main", priority_class=f"priority-{s.priority}",
        runtime_seconds=s.runtime_ms / 1000,
        pod_sets=[ev.PodSetRequest(name="main", count=s.pods, resources={"cpu": f"{s.per_pod_milli}m"},
                                   topology=_topology_request(s.topology))],
    )


async def _wait_finished(bootstrap: str, expected: set[str], deadline_s: float) -> None:
    """Follow the log until every expected workload finished."""
    finished = await kafka.first_events(bootstrap, ev.WorkloadFinished, expected, deadline_s)
    if len(finished) < len(expected):
        raise TimeoutError(f"only {len(finished)} of {len(expected)} workloads finished in {deadline_s:.0f} s")


def times_of(envs: list[ev.Envelope]) -> dict[str, dict]:
    """Per workload, from the whole log: when it was queued, first admitted, first running, first
    finished, and how often it was evicted. A hand-over (``WorkloadAdmitted.after``) counts as
    admitted when the last of the work it takes over left, not when it was decided: until then the
    quota it was given was that work's (its time to admission is the one Kueue's would be with no
    round trip)."""
    seen: dict[str, dict] = {}
    for env in envs:
        d = env.data
        if not isinstance(d, (ev.WorkloadQueued, ev.WorkloadAdmitted, ev.WorkloadRunning, ev.WorkloadEvicted,
                              ev.WorkloadFinished)):
            continue
        rec = seen.setdefault(d.workload, {"evictions": 0})
        if isinstance(d, ev.WorkloadQueued):
            rec["queued_ms"] = env.time_ms
        elif isinstance(d, ev.WorkloadAdmitted):
            if "admitted_ms" not in rec:
                rec["admitted_ms"], rec["after"] = env.time_ms, d.after
        elif isinstance(d, ev.WorkloadRunning):
            rec.setdefault("running_ms", env.time_ms)
        elif isinstance(d, ev.WorkloadEvicted):
            rec["evictions"] += 1
            rec.setdefault("left_ms", []).append(env.time_ms)
        else:
            rec.setdefault("finished_ms", env.time_ms)
            rec.setdefault("left_ms", []).append(env.time_ms)
    for rec in seen.values():  # a hand-over is admitted once the work it takes over has left
        if rec.get("after"):
            rec["admitted_ms"] = max([rec["admitted_ms"], *(_left_after(seen.get(n, {}), rec["admitted_ms"]) for n in rec["after"])])
    return seen


def _left_after(rec: dict, t: int) -> int:
    """When a workload first left (finished or evicted) at or after ``t`` (``t`` if it did not)."""
    return next((left for left in rec.get("left_ms", ()) if left >= t), t)


def _held_intervals(envs: list[ev.Envelope]) -> dict[str, list[tuple[int, int, int]]]:
    """Per ClusterQueue: (from, to, cpu milli) for every admission, until its quota was released."""
    from gangway.events.state import HOLDS_QUOTA
    from gangway.read.reports import holding_intervals
    held: dict[str, list[tuple[int, int, int]]] = {}
    for wl, start, end in holding_intervals(envs, HOLDS_QUOTA, hand_over=True):
        held.setdefault(wl.spec.cluster_queue, []).append((start, end, wl.request.get("cpu", 0)))
    return held


def figures(sc: Scenario, sent: dict[str, int], seen: dict[str, dict], envs: list[ev.Envelope]) -> dict:
    specs = {f"{s.namespace}/{s.name}": s for s in sc.specs}
    first = min(sent.values())
    last_finish = max(rec["finished_ms"] for rec in seen.values() if "finished_ms" in rec)
    wall_ms = last_finish - first
    per_class: dict[str, list[int]] = {}
    to_running: dict[str, list[int]] = {}
    for name, s in specs.items():
        rec = seen[name]
        per_class.setdefault(s.cls, []).append(max(0, rec["admitted_ms"] - sent[name]))
        to_running.setdefault(s.cls, []).append(max(0, rec["running_ms"] - sent[name]))
    held = _held_intervals(envs)
    used = sum((min(b, last_finish) - max(a, first)) * m for ivs in held.values() for a, b, m in ivs)
    # Quota held while the workload was not running yet (placement and binding round trips).
    waiting = sum(max(0, seen[n]["running_ms"] - seen[n]["admitted_ms"]) * s.per_pod_milli * s.pods
                  for n, s in specs.items())
    usage_pct = 100 * used / (sum(sc.nominal_milli.values()) * wall_ms)
    bound = lower_bound_ms(sc)
    published = {} if sc.shrunk else PUBLISHED.get(sc.name, {})
    avg = {c: sum(v) / len(v) for c, v in sorted(per_class.items())}
    result = {
        "scenario": sc.name, "workloads": len(specs), "cluster_queues": len(sc.contract.cluster_queues),
        "wall_ms": wall_ms, "usage_pct": usage_pct, **bound,
        "wall_vs_lower_bound": wall_ms / bound["lower_bound_ms"],
        "avg_time_to_admission_ms": avg,
        "avg_time_to_running_ms": {c: sum(v) / len(v) for c, v in sorted(to_running.items())},
        "max_time_to_admission_ms": {c: max(v) for c, v in sorted(per_class.items())},
        "avg_admission_to_running_ms": {c: sum(to_running[c]) / len(to_running[c]) - avg[c] for c in avg},
        "quota_held_before_running_pct": 100 * waiting / used if used else 0.0,
        "evictions": sum(rec["evictions"] for rec in seen.values()),
        "log_events": len(envs),
        "kueue_published": published,
    }
    if published:
        result["wall_vs_kueue"] = wall_ms / published["wall_ms"]
        result["usage_vs_kueue"] = usage_pct / published["usage_pct"]
        result["admission_vs_kueue"] = {c: avg[c] / published["admission_ms"][c]
                                        for c in avg if c in published["admission_ms"]}
    return result


def goals(scenario: str, runs: list[dict]) -> list[dict]:
    """Each goal of ``scenario`` (``GOALS``; none for a shrunk one: Kueue published no figures for
    it) beside the median of its figure over ``runs`` (each figure's own median), the ratio and
    whether the median meets it."""
    if not runs or runs[0].get("shrink"):
        return []
    rows = []
    for figure, at_most, bound, source in GOALS.get(scenario, []):
        if figure == "admission_vs_kueue":
            named = [(f"avg time to admission {c} / Kueue's", [r[figure][c] for r in runs]) for c in runs[0][figure]]
        else:
            named = [(_FIGURE_NAMES[figure], [r[figure] for r in runs])]
        for name, values in named:
            median = statistics.median_low(values)  # (as the medians beside it in the JSON)
            rows.append({"figure": name, "median": median, "runs": values, "goal": bound, "at_most": at_most,
                         "source": source, "ratio": median / bound,
                         "met": median <= bound if at_most else median >= bound})
    return rows


def goals_report(rows: list[dict]) -> str:
    """``goals``' rows as the table ``bench kueue`` prints after its runs."""
    n = len(rows[0]["runs"])
    lines = [f"{'median of ' + str(n) + ' run' + 's' * (n > 1) + ' beside each goal':<42} {'median':>8} {'goal':>9} "
             f"{'ratio':>6}  runs"]
    for r in rows:
        goal = f"{'≤' if r['at_most'] else '≥'} {r['goal']:.3g}"
        lines.append(f"{r['figure']:<42} {r['median']:>8.3f} {goal:>9} {r['ratio']:>6.2f}  "
                     f"{', '.join(f'{v:.3f}' for v in r['runs'])}  {'met' if r['met'] else 'NOT MET'} ({r['source']})")
    return "\n".join(lines)


def run(sc: Scenario, deadline_s: float | None = None) -> dict:
    bound = lower_bound_ms(sc)["lower_bound_ms"]
    deadline_s = deadline_s or 900 + 20 * bound / 1000
    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("GANGWAY_STATE_DIR")
        os.environ["GANGWAY_STATE_DIR"] = tmp
        try:
            cluster = Path(tmp) / "cluster.yaml"
            cluster.write_text(nodes_yaml(sc))
            with stack.Stack(cluster_file=str(cluster), time_scale=1.0) as running:
                asyncio.run(stack.publish_config(running.bootstrap, sc.contract, f"kueue-perf/{sc.name}",
                                                 running.clock.now_ms()))
                running.wait_ready()
                sent = asyncio.run(_run_async(running.bootstrap, sc, deadline_s))
                _, envs = asyncio.run(stack.read_state(running.bootstrap))
        finally:
            if old is None:
                os.environ.pop("GANGWAY_STATE_DIR", None)
            else:
                os.environ["GANGWAY_STATE_DIR"] = old
    result = figures(sc, sent, times_of(envs), envs)
    from gangway.benchmarks.pipeline import _replay_speed
    result["replay"] = _replay_speed(envs)
    return result


def simulate(sc: Scenario, cycle_ms: int) -> dict:
    """The scenario on the in-process simulation (``gangway.sim``) instead of the broker and six
    processes: the same submission checks and decide functions on the same nodes, the log a list,
    the clock simulated, each round that decided something ``cycle_ms`` of cluster time. At 0 the
    figures are the scheduling policy's alone, without the pipeline's round trips: what the real
    run's figures come down to as its overhead goes (``--simulated``)."""
    from gangway.services.binder.cluster import load_nodes
    from gangway.services.submission.policy import queue_job
    from gangway.sim import Simulation
    sim = Simulation(cycle_ms=cycle_ms)
    sim.configure(sc.contract)
    sim.add_nodes(load_nodes(nodes_yaml(sc)))
    start = sim.now_ms
    sent: dict[str, int] = {}
    for i, s in enumerate(sc.specs):  # (in creation order)
        if start + s.create_ms > sim.now_ms:
            sim.run(until_ms=start + s.create_ms)
        queued = queue_job(job(s), sim.state, {}, f"bench-kueue#{i}")
        sim.submit(queued)
        sent[queued.workload] = sim.now_ms
    sim.run()
    result = figures(sc, sent, times_of(sim.log), sim.log)
    result["simulated_cycle_ms"] = cycle_ms
    return result


async def _run_async(bootstrap: str, sc: Scenario, deadline_s: float) -> dict[str, int]:
    watcher = asyncio.create_task(_wait_finished(bootstrap, {f"{s.namespace}/{s.name}" for s in sc.specs}, deadline_s))
    # Every job at its creation time (half a second from now, to let the watcher start).
    sent = await stack.publish_jobs(bootstrap, [job(s) for s in sc.specs],
                                    at_s=[0.5 + s.create_ms / 1000 for s in sc.specs], source="gangway/bench-kueue")
    await watcher
    return sent


def report(result: dict) -> str:
    pub = result.get("kueue_published") or {}
    how = ("real broker and six services, time scale 1" if result.get("simulated_cycle_ms") is None else
           f"in-process simulation, {result['simulated_cycle_ms']} ms a deciding round (no broker)")
    aging = result.get("aging_ms_per_point")
    lines = [f"Kueue scenario {result['scenario']}: {result['workloads']} workloads on "
             f"{result['cluster_queues']} ClusterQueues, {how}" +
             (f"; priority aging: one point per {aging / 1000:g} s waited" if aging else "")]
    lines.append(f"{'figure':<34} {'gangway':>12} {'Kueue':>12} {'ratio':>7}")
    bound = result["lower_bound_ms"]
    lines.append(f"{'wall ms':<34} {result['wall_ms']:>12,.0f} {pub.get('wall_ms', float('nan')):>12,.0f} "
                 f"{result.get('wall_vs_kueue', float('nan')):>7.3f}")
    lines.append(f"{'  lower bound ms (÷ capacity, last)':<34} {bound:>12,.0f}   "
                 f"({result['demand_over_capacity_ms']:,.0f} / {result['last_creation_plus_runtime_ms']:,.0f}); "
                 f"wall / bound {result['wall_vs_lower_bound']:.3f}")
    lines.append(f"{'ClusterQueue usage %':<34} {result['usage_pct']:>12.1f} {pub.get('usage_pct', float('nan')):>12.1f} "
                 f"{result.get('usage_vs_kueue', float('nan')):>7.3f}")
    for cls, avg in result["avg_time_to_admission_ms"].items():
        k = pub.get("admission_ms", {}).get(cls, float("nan"))
        lines.append(f"{'avg ms to admission ' + cls:<34} {avg:>12,.0f} {k:>12,.0f} "
                     f"{result.get('admission_vs_kueue', {}).get(cls, float('nan')):>7.3f}")
    for cls, avg in result["avg_time_to_running_ms"].items():
        lines.append(f"{'  avg ms to running ' + cls:<34} {avg:>12,.0f}")
    lines.append(f"quota held before running (placement and binding round trips): "
                 f"{result['quota_held_before_running_pct']:.1f} % of the quota held")
    replayed = (f"; replay {result['replay']['verified']}/{result['replay']['decisions']} decisions reproduced"
                if "replay" in result else "")
    lines.append(f"evictions {result['evictions']}; log {result['log_events']} events{replayed}")
    return "\n".join(lines)


def median_run(results: list[dict]) -> dict:
    """The run with the median wall (the lower of the two middle ones for an even count), with every
    run's wall, admission times and quota held before running beside its own figures, and the median
    of each of those across the runs (each class's own: not necessarily the kept run's)."""
    ranked = sorted(range(len(results)), key=lambda i: results[i]["wall_ms"])
    result = dict(results[ranked[(len(ranked) - 1) // 2]])
    result["runs_wall_ms"] = [r["wall_ms"] for r in results]
    result["runs_admission_ms"] = [r["avg_time_to_admission_ms"] for r in results]
    result["runs_quota_held_before_running_pct"] = [r["quota_held_before_running_pct"] for r in results]
    result["median_admission_ms"] = {c: statistics.median_low(r["avg_time_to_admission_ms"][c] for r in results)
                                     for c in result["avg_time_to_admission_ms"]}
    if "admission_vs_kueue" in result:
        result["median_admission_vs_kueue"] = {c: statistics.median_low(r["admission_vs_kueue"][c] for r in results)
                                               for c in result["admission_vs_kueue"]}
    result["median_quota_held_before_running_pct"] = statistics.median_low(result["runs_quota_held_before_running_pct"])
    result["goals"] = goals(result["scenario"], results) if "scenario" in result else []
    return result


def main(scenario: str, out: str | None, shrink: float | None = None, data_dir: str | None = None,
         runs: int = 3, provenance=lambda result: result, simulated: int | None = None,
         quota_holds: int | None = None, aging_s: float | None = None) -> int:
    if not re.fullmatch(r"[a-z-]+", scenario):
        raise SystemExit(f"gangway: bad scenario name {scenario!r}")
    needs = f"kueue-perf/{scenario}/generator.yaml"
    path = reference_data(data_dir, needs) / needs
    sc = load(path, shrink)
    if quota_holds is not None:  # the platform team's trade between the priorities' waits
        sc = replace(sc, contract=msgspec.structs.replace(
            sc.contract, backfill=Backfill(quota_holds_per_tree=quota_holds)))
    if aging_s is not None:  # the platform team's trade: how much waiting is worth a priority point
        sc = replace(sc, contract=msgspec.structs.replace(sc.contract, aging_ms_per_point=round(aging_s * 1000)))
    if sc.topology:
        print(f"note: {scenario} has a topology ({sc.topology['name']}): its nodes carry the level labels and "
              f"the pod sets Kueue's TAS constraints; placement honours what the code of this branch supports")
    done = []
    if simulated is not None:  # deterministic: one run says it all
        runs = 1
    for i in range(runs):
        result = run(sc) if simulated is None else simulate(sc, simulated)
        result["shrink"] = shrink
        result["quota_holds_per_tree"] = sc.contract.backfill.quota_holds_per_tree
        result["aging_ms_per_point"] = sc.contract.aging_ms_per_point
        print(f"--- run {i + 1} of {runs}\n{report(result)}", flush=True)
        done.append(result)
    result = provenance(median_run(done))
    if runs > 1:
        print(f"median of {runs} runs by wall: {result['wall_ms'] / 1000:.1f} s (runs: "
              f"{', '.join(f'{w / 1000:.1f}' for w in result['runs_wall_ms'])} s), "
              f"{result['wall_vs_lower_bound']:.2f} × the lower bound (the run kept in the results)")
    if result["goals"]:
        print(goals_report(result["goals"]))
    kind = "-shrunk" * bool(shrink) + (f"-simulated-{simulated}ms" if simulated is not None else "") + \
        (f"-holds-{quota_holds}" if quota_holds is not None else "") + \
        (f"-aging-{sc.contract.aging_ms_per_point}ms" if aging_s is not None else "")
    write_json(result, out or f"bench/results/kueue-{scenario}{kind}.json")
    return 0
