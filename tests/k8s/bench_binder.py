"""Binder figures against the real API server (``make bench-binder``; not part of ``make test``):
pods bound per second by one binder for gangs of 1, 8 and 64 pods, and the time from a placement to
its gang's last pod bound (p50/p99; it includes the test's Job controller creating the pods), and the
seed's incident end to end — each run three times, the medians printed last with the machine's load.
Two paths: Jobs that name no scheduler (``gate``: each pod pinned and ungated, then bound — two
requests a pod) and Jobs that name ``schedulerName: gangway`` (``scheduler``: one bind a pod)."""

from __future__ import annotations

import asyncio
import os
import statistics
import time

import pytest

from gangway.contract import load_contract
from k8s_harness import FakeCluster, LocalLog, apply_manifests, create_node, node_object, run_until
from gangway.services.binder.objects import SCHEDULER_NAME
from test_kubernetes_binder import CONTRACT, job

pytestmark = pytest.mark.kubernetes
TARGET_PODS = 128
ROUNDS = 3
#: (path, size) → one (pods/s, p50 s, p99 s, wall s) per round; the incident's seconds per round.
RESULTS: dict[tuple[str, int], list[tuple[float, float, float, float]]] = {}
INCIDENT: list[float] = []


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


@pytest.mark.parametrize("rnd", range(ROUNDS))
@pytest.mark.parametrize("size", [1, 8, 64])
@pytest.mark.parametrize("path", ["gate", "scheduler"])
async def test_bench_binding(kube, make_binder, path, size, rnd):
    log = LocalLog()
    log.configure(load_contract(CONTRACT))
    for i in range(8):
        await create_node(kube, node_object(f"node-{i}"), {"cpu": "96", "memory": "1Ti", "pods": "500"})
    binder = await make_binder(bind_concurrency=64, pods_timeout_s=60)
    await run_until(log, [binder], lambda: len(log.state.nodes) == 8, what="nodes")
    stop = asyncio.Event()
    runner = asyncio.create_task(FakeCluster(kube, ["team"], kubelet=False).run(stop))
    gangs = max(1, TARGET_PODS // size)
    try:
        started = time.monotonic()
        for i in range(gangs):
            await apply_manifests(kube, job(f"g{size}-{i}", size, gpus=0, cpu="100m", memory="64Mi", pod_spec=(
                f"schedulerName: {SCHEDULER_NAME}" if path == "scheduler" else "")))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: sum(1 for w in wl.values() if w.phase == "bound") == gangs,
                        timeout_s=300, what="every gang bound")
        wall = time.monotonic() - started
    finally:
        stop.set()
        await runner
    pods = sum(n for n, _, _ in binder.bind_phases)
    # Binding time: the union of the intervals in which binds were in flight (gangs bind concurrently).
    seconds, until = 0.0, 0.0
    for _, start, end in sorted((p for p in binder.bind_phases), key=lambda p: p[1]):
        seconds += max(0.0, end - max(start, until))
        until = max(until, end)
    lat = binder.bind_latencies
    print(f"\n{path:>9}, gangs of {size:>2}: {gangs} gangs, {pods} pods; binding {pods / seconds:,.0f} pods/s "
          f"(while binds were in flight); placement → last pod bound p50 {statistics.median(lat) * 1000:.0f} ms, "
          f"p99 {pct(lat, 0.99) * 1000:.0f} ms; all {gangs} gangs submitted → bound in {wall:.1f} s")
    RESULTS.setdefault((path, size), []).append((pods / seconds, statistics.median(lat), pct(lat, 0.99), wall))


@pytest.mark.parametrize("rnd", range(ROUNDS))
async def test_bench_incident(kube, make_binder, rnd):
    from test_kubernetes_incident import test_the_incident_serving_reclaims_from_batch_on_a_real_api_server as incident
    started = time.monotonic()
    await incident(kube, make_binder)
    INCIDENT.append(time.monotonic() - started)


def test_bench_medians():
    """The medians of the rounds above, beside the machine's load."""
    print(f"\nmedians of {ROUNDS} (load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} cores):")
    for (path, size), runs in sorted(RESULTS.items()):
        rate, p50, p99, wall = (statistics.median(r[i] for r in runs) for i in range(4))
        print(f"  {path:>9}, gangs of {size:>2}: {rate:,.0f} pods bound/s; placement → last pod bound p50 {p50 * 1000:.0f} ms, "
              f"p99 {p99 * 1000:.0f} ms; {TARGET_PODS} pods submitted → bound in {wall:.1f} s ({len(runs)} runs)")
    if INCIDENT:
        print(f"  incident end to end: {statistics.median(INCIDENT):.1f} s ({len(INCIDENT)} runs)")
