"""Benchmarks that print figures: the pipeline through the real broker, and the auditor's speed.

They are commands (`gangway bench pipeline`, `gangway bench replay`), never timed unit tests.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from gangway import stack
from gangway.benchmarks.results import percentile
from gangway.events import catalogue as ev
from gangway.events.contract import ClusterQueue, Contract, FlavorQuotas, LocalQueue, Quota

GPU_MILLI = 1000


def bench_contract(gpus: int) -> Contract:
    quota = {"nvidia.com/gpu": Quota(nominal=gpus * GPU_MILLI), "cpu": Quota(nominal=gpus * 8 * GPU_MILLI)}
    return Contract(
        cluster_queues=[ClusterQueue(name="bench", flavors=[FlavorQuotas(flavor="default", resources=quota)])],
        local_queues=[LocalQueue(namespace="bench", name="default", cluster_queue="bench")],
    )


def cluster_yaml(nodes: int) -> str:
    items = [{
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i:04d}", "labels": {}},
        "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "110"}},
    } for i in range(nodes)]
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})


def job(i: int, runtime_s: float) -> ev.JobSubmitted:
    return ev.JobSubmitted(
        job_id=f"job-{i:06d}", namespace="bench", queue="default", runtime_seconds=runtime_s,
        pod_sets=[ev.PodSetRequest(name="main", count=1, resources={"nvidia.com/gpu": 1, "cpu": "4"})],
    )


async def _wait_running(bootstrap: str, expected: set[str], deadline_s: float) -> dict[str, int]:
    """Cluster time at which each expected workload was first reported running."""
    from gangway.adapters import kafka
    running = await kafka.first_events(bootstrap, ev.WorkloadRunning, expected, deadline_s)
    if len(running) == len(expected):
        return running
    state, _ = await stack.read_state(bootstrap)
    stuck = {w: (state.workloads[w].phase, state.workloads[w].superseded) if w in state.workloads else "not queued"
             for w in sorted(expected - set(running))[:10]}
    raise TimeoutError(f"only {len(running)} of {len(expected)} workloads ran in {deadline_s} s; stuck: {stuck}")


def _phase(bootstrap: str, jobs: list[ev.JobSubmitted], rate: float | None) -> dict[str, float]:
    sent = asyncio.run(stack.publish_jobs(bootstrap, jobs, rate))
    running = asyncio.run(_wait_running(bootstrap, set(sent), 120))
    ids = list(sent)
    latencies = [running[w] - sent[w] for w in ids]
    span_s = (max(running[w] for w in ids) - min(sent[w] for w in ids)) / 1000
    return {"jobs": len(ids), "p50_ms": percentile(latencies, 0.5), "p99_ms": percentile(latencies, 0.99),
            "max_ms": max(latencies), "mean_ms": statistics.fmean(latencies), "workloads_per_s": len(ids) / span_s}


BROKERS = ("embedded", "apache-kafka")


def bench_brokers(jobs: int, rate: float, brokers: tuple[str, ...], repeat: int) -> dict:
    """``bench_pipeline`` ``repeat`` times on each broker (interleaved, so both see the same machine
    load), with the median of each figure beside the runs."""
    runs: dict[str, list[dict]] = {b: [] for b in brokers}
    for _ in range(repeat):
        for broker in brokers:
            runs[broker].append(bench_pipeline(jobs, rate, broker))
    out = {"jobs": jobs, "rate_per_s": rate, "repeat": repeat}
    for broker, results in runs.items():
        out[broker] = {"median": {phase: {key: statistics.median(r[phase][key] for r in results)
                                          for key in ("p50_ms", "p99_ms", "workloads_per_s")}
                                  for phase in ("paced", "burst")},
                       "runs": results}
    return out


#: ``bench pipeline --jobs 10000``'s target (issue 13): the burst, JobSubmitted → WorkloadRunning
#: through the six processes, in workloads per second end to end.
PIPELINE_BURST_TARGET_PER_S = 1_500


def pipeline_line(result: dict) -> str:
    """The burst's throughput beside its target, per broker (the median where there were runs)."""
    lines = []
    per_broker = {b: result[b] for b in BROKERS if b in result} or {result.get("broker", "embedded"): result}
    for broker, r in per_broker.items():
        if "median" in r:
            speed, runs = r["median"]["burst"]["workloads_per_s"], [x["burst"]["workloads_per_s"] for x in r["runs"]]
        else:
            speed, runs = r["burst"]["workloads_per_s"], [r["burst"]["workloads_per_s"]]
        jobs = result.get("jobs") or r["burst"]["jobs"]
        lines.append(f"pipeline burst ({broker}, {jobs:,} jobs on {2 * jobs + 10:,} GPUs): {speed:,.0f} workloads/s "
                     f"end to end (median of {len(runs)}: {', '.join(f'{x:,.0f}' for x in runs)}), "
                     f"target {PIPELINE_BURST_TARGET_PER_S:,} ({speed / PIPELINE_BURST_TARGET_PER_S:.2f}×)")
    return "\n".join(lines)


def bench_pipeline(jobs: int = 1000, rate: float = 100.0, broker: str = "embedded") -> dict:
    """JobSubmitted → WorkloadRunning through the real broker and the six services (time scale 1).

    A first phase of 10 jobs warms the stack up (processes starting, the binder's nodes, first
    fetches) and is reported apart as ``warmup``; then ``jobs`` jobs at ``rate`` a second
    (``paced``: latency under a steady load), then ``jobs`` more all at once (``burst``: throughput).
    ``broker`` "apache-kafka": an Apache Kafka started for the run (idempotent producers) instead of
    the embedded broker.
    """
    if broker == "apache-kafka":
        from gangway.adapters.apache_kafka import ApacheKafka
        with ApacheKafka() as kafka_broker:
            os.environ["GANGWAY_KAFKA"] = kafka_broker.bootstrap
            try:
                return {"broker": broker, **bench_pipeline(jobs, rate)}
            finally:
                del os.environ["GANGWAY_KAFKA"]
    gpus = 2 * jobs + 10
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GANGWAY_STATE_DIR"] = tmp
        cluster = Path(tmp) / "cluster.yaml"
        cluster.write_text(cluster_yaml(-(-gpus // 8)))
        with stack.Stack(cluster_file=str(cluster), time_scale=1.0) as running:
            asyncio.run(stack.publish_config(running.bootstrap, bench_contract(gpus), "bench", running.clock.now_ms()))
            warmup = _phase(running.bootstrap, [job(2 * jobs + i, 3600) for i in range(10)], 10.0)
            paced = _phase(running.bootstrap, [job(i, 3600) for i in range(jobs)], rate)
            burst = _phase(running.bootstrap, [job(jobs + i, 3600) for i in range(jobs)], None)
            state, envs = asyncio.run(stack.read_state(running.bootstrap))
    replay = _replay_speed(envs)
    return {"warmup": warmup, "paced": paced, "burst": burst, "rate_per_s": rate, "log_events": len(envs),
            "superseded": state.superseded, "replay": replay}


def _replay_speed(envs: list[ev.Envelope], workers: int = 1, file=None) -> dict:
    """One replay of ``envs``; ``file`` (a ``LogFile``): the export they were read from, whose own
    checks (numbering, end, lines no reader folds) the replay runs too, as `gangway replay` does."""
    from gangway.services.audit.replay import verify
    cpu = _cpu_seconds()
    started = time.perf_counter()
    checks = {} if file is None else {"lines": file.lines, "quarantined": file.quarantined, "end": file.end,
                                      "misplaced": file.misplaced}
    report = verify(envs, workers=workers, **checks)
    elapsed = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu
    return {"events": report.events, "decisions": report.decisions, "verified": report.verified,
            "mismatches": len(report.mismatches), "integrity": len(report.integrity),
            "superseded": report.superseded, "seconds": elapsed,
            "events_per_s": report.events / elapsed if elapsed else 0.0, "workers": workers, "cpu_seconds": cpu}


def _cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the replay's workers)."""
    import resource
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


SHAPES = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8)]  # (pods, GPUs per pod)
RUNTIME_S = (60, 3600)


def simulated_log(workloads: int | None = None, seed: int = 42, events: int | None = None,
                  nodes: int = 32, load: float | None = None, cycle_ms: int = 0) -> list[ev.Envelope]:
    """A realistic log from the in-memory pipeline: 3 teams in a cohort, mixed gangs, preemption.

    Stops submitting after ``workloads`` workloads or once the log holds ``events`` events, then
    lets everything finish. ``load`` is the offered GPU load (1.0: arrivals ask for exactly the
    cluster's GPU-seconds); without it arrivals come every 0–120 s (deep queues on 32 nodes).
    ``cycle_ms``: the services decide once per cycle, on everything that happened meanwhile (0:
    after every event, the auditor's worst case).
    """
    from gangway.events.catalogue import NodeObserved, PodSet, WorkloadQueued
    from gangway.events.contract import Preemption
    from gangway.sim import Simulation
    rng = random.Random(seed)
    gpus = nodes * 8
    teams = {"serving": (1000, gpus // 2), "research": (100, gpus * 3 // 8), "batch": (10, gpus // 8)}
    sim = Simulation(cycle_ms=cycle_ms)
    sim.configure(Contract(
        cluster_queues=[ClusterQueue(
            name=t, cohort="org", preemption=Preemption(within_cluster_queue="LowerPriority", reclaim_within_cohort="Any"),
            flavors=[FlavorQuotas(flavor="default", resources={"nvidia.com/gpu": Quota(nominal=n * GPU_MILLI)})],
        ) for t, (_, n) in teams.items()],
        local_queues=[LocalQueue(namespace=t, name="default", cluster_queue=t) for t in teams],
    ))
    sim.add_nodes([NodeObserved(node=f"n{i:03d}", allocatable={"nvidia.com/gpu": 8 * GPU_MILLI}) for i in range(nodes)])
    mean_gpu_s = statistics.fmean(p * g for p, g in SHAPES) * statistics.fmean(RUNTIME_S)
    gap_mean_s = mean_gpu_s / gpus / load if load else None
    i = 0
    while (workloads is None or i < workloads) and (events is None or len(sim.log) < events):
        team = rng.choice(list(teams))
        pods, per_pod = rng.choice(SHAPES)
        sim.submit(WorkloadQueued(
            workload=f"{team}/w{i}", namespace=team, queue="default", cluster_queue=team, priority_class=None,
            priority=teams[team][0], kind="Job", runtime_ms=rng.randint(*RUNTIME_S) * 1000,
            pod_sets=[PodSet(name="main", count=pods, resources={"nvidia.com/gpu": per_pod * GPU_MILLI})],
        ))
        gap_ms = int(rng.expovariate(1 / gap_mean_s) * 1000) if gap_mean_s else rng.randint(0, 120_000)
        sim.run(until_ms=sim.now_ms + gap_ms)
        i += 1
    sim.run()
    return sim.log


def _generate_export(path: str, events: int, seed: int, load: float) -> None:
    from gangway.read.logfile import write_export
    write_export(simulated_log(events=events, seed=seed, load=load), path)


def _peak_rss_mib() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


#: ``bench replay``'s target (issue 13): verification speed on the 1,000,000-event log.
REPLAY_TARGET_PER_S = 50_000


def bench_replay(workloads: int | None = None, events: int | None = None, seed: int = 42,
                 load: float = 0.85, repeat: int = 3, log: str | None = None, workers: int = 1) -> dict:
    """Generate a log (in a child process), export it, then read it back and verify it here.

    ``workloads``: the old in-memory variant (deep queues, 0–120 s arrivals) — no export.
    ``events``: a log of about that many events at ``load`` (offered GPU load), written as an
    auditor gets it (one structured CloudEvent per line), read back (codec) and verified; the
    generation, the reading and the verification are timed apart, and the peak memory is this
    process's (the generator runs in another). ``log``: verify this export instead of generating
    one. The verification runs ``repeat`` times on the log read once; ``events_per_s`` is the
    median, beside the target. ``workers``: processes checking the log (``verify``); the CPU
    time of all of them is reported beside the wall time.
    """
    if events is None and log is None:
        started = time.perf_counter()
        envs = simulated_log(workloads or 20_000, seed)
        generated = time.perf_counter() - started
        result = _replay_runs(envs, repeat, workers)
        result["generate_seconds"] = generated
        return result
    import multiprocessing

    from gangway.read.logfile import read_log_file
    with tempfile.TemporaryDirectory() as tmp:
        path = log or str(Path(tmp) / "log.jsonl")
        generated = None
        if log is None:
            started = time.perf_counter()
            child = multiprocessing.get_context("spawn").Process(target=_generate_export, args=(path, events, seed, load))
            child.start()
            child.join()
            if child.exitcode != 0:
                raise RuntimeError(f"log generation failed (exit {child.exitcode})")
            generated = time.perf_counter() - started
        size = Path(path).stat().st_size
        rss_before = _peak_rss_mib()
        started = time.perf_counter()
        file = read_log_file(path)
        envs = file.envs
        read_s = time.perf_counter() - started
    result = _replay_runs(envs, repeat, workers, file)
    result.update({
        "generate_seconds": generated, "load": load if log is None else None, "seed": seed if log is None else None,
        "log": log, "export_bytes": size,
        "read_seconds": read_s, "read_events_per_s": len(envs) / read_s if read_s else 0.0,
        "peak_rss_mib_before_read": rss_before, "peak_rss_mib": _peak_rss_mib(),
    })
    return result


def _replay_runs(envs: list[ev.Envelope], repeat: int, workers: int = 1, file=None) -> dict:
    """``_replay_speed`` ``repeat`` times: the median run's figures, every run's speed, the target."""
    runs = []
    for _ in range(max(1, repeat)):
        runs.append(_replay_speed(envs, workers, file))
        gc.collect()
    speeds = [r["events_per_s"] for r in runs]
    median = statistics.median(speeds)
    result = dict(min(runs, key=lambda r: abs(r["events_per_s"] - median)))
    result.update({"events_per_s": median, "runs_events_per_s": speeds, "repeat": len(runs),
                   "runs_cpu_seconds": [r["cpu_seconds"] for r in runs],
                   "mismatches": max(r["mismatches"] for r in runs),
                   "integrity": max(r.get("integrity", 0) for r in runs),
                   "target_events_per_s": REPLAY_TARGET_PER_S, "ratio_to_target": median / REPLAY_TARGET_PER_S})
    return result


def replay_line(result: dict) -> str:
    """The figure beside its target, as ``bench replay`` prints it."""
    runs = ", ".join(f"{s:,.0f}" for s in result["runs_events_per_s"])
    workers = result.get("workers", 1)
    cpu = (f"; {result['events'] / result['cpu_seconds']:,.0f} events per CPU second"
           if result.get("cpu_seconds") else "")
    return (f"replay: {result['events_per_s']:,.0f} events/s verifying {result['events']:,} events "
            f"with {workers} process{'es' if workers > 1 else ''}{cpu} "
            f"({result['verified']:,} of {result['decisions']:,} decisions reproduced, {result['mismatches']} mismatches, "
            f"{result.get('integrity', 0)} integrity failure(s); "
            f"median of {result['repeat']}: {runs}), target {result['target_events_per_s']:,} "
            f"({result['ratio_to_target']:.2f}×)")
