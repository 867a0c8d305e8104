"""`gangway bench console`: how fast the console folds a log and answers its pages.

A log from the in-memory pipeline (``pipeline.simulated_log``), cut halfway so that queues are deep
and GPUs held, is served by the console app as an exported log would be (``create_app(log=…)``);
each figure is the median of ``runs`` runs.
"""

from __future__ import annotations

import statistics
import time

from gangway.benchmarks.pipeline import simulated_log

#: What a page should take at most for an operator to call it live (one push a second).
PAGE_TARGET_MS = 1000.0


def _timed(call) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def bench_console(workloads: int = 4000, seed: int = 42, runs: int = 3) -> dict:
    from starlette.testclient import TestClient

    from gangway.console.app import create_app
    from gangway.console.model import Folded

    envs = simulated_log(workloads=workloads, seed=seed)
    envs = envs[: len(envs) // 2]
    probe = Folded()
    for env in envs:
        probe.add(env)
    state = probe.state
    job = next(iter(state.active), None) or next(iter(state.workloads))
    fold_s, pages = [], {"/api/view": [], "/metrics": [], "/api/stream?limit=200": [], f"/api/job?name={job}": []}
    for _ in range(runs):
        fold_s.append(_timed(lambda: [Folded().add(env) for env in envs]) / 1000)
        with TestClient(create_app("unused:0", log=envs)) as client:
            for path, times in pages.items():
                times.append(_timed(lambda: client.get(path).raise_for_status()))
    fold = statistics.median(fold_s)
    return {
        "events": len(envs), "pending": len(state.pending), "active": len(state.active), "runs": runs,
        "fold_events_per_s": len(envs) / fold if fold else 0.0,
        "pages_ms": {path: statistics.median(times) for path, times in pages.items()},
        "page_target_ms": PAGE_TARGET_MS,
    }


def table(result: dict) -> str:
    lines = [f"console on {result['events']:,} events ({result['pending']:,} pending, {result['active']:,} running), "
             f"medians of {result['runs']}",
             f"  fold                          {result['fold_events_per_s']:>10,.0f} events/s"]
    for path, ms in result["pages_ms"].items():
        ratio = ms / result["page_target_ms"]
        lines.append(f"  {path.split('?name=')[0]:<30}{ms:>10,.0f} ms   target ≤ {result['page_target_ms']:,.0f} ms "
                     f"({ratio:.2f} × the target)")
    return "\n".join(lines)
