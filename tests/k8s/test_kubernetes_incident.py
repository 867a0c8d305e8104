"""The seed's incident on a real API server: the demo's 8 nodes × 8 GPUs (64 GPUs), its three teams, the
night's Jobs, JobSet and PyTorchJob; in the morning serving's canary reclaims its quota from batch. The
pods end bound where the log's placements say, and exactly the pods of the workloads preemption chose
are evicted — the same workloads the in-memory simulation of the same story evicts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml

from gangway.adapters.kubernetes import client as api
from gangway.contract import load_contract_file
from gangway.events import catalogue as ev
from gangway.services.binder import objects as ob
from gangway.services.binder.cluster import load_nodes
from gangway.services.submission.manifests import load_jobs
from gangway.services.submission.policy import queue_job
from gangway.sim import Simulation
from k8s_harness import FakeCluster, LocalLog, apply_manifests, create_node, run_until

pytestmark = pytest.mark.kubernetes
DEMO = Path(__file__).resolve().parents[2] / "gangway" / "demo"
NAMESPACES = ["research", "batch", "serving"]


def simulated_victims() -> set[str]:
    """Who the pure pipeline evicts in the same story (same contract, nodes, jobs, order)."""
    sim = Simulation()
    sim.configure(load_contract_file(DEMO / "contract.yaml"))
    sim.add_nodes(load_nodes((DEMO / "cluster.yaml").read_text()))
    for name in ("jobs-night.yaml", "jobs-morning.yaml"):
        for job in load_jobs((DEMO / name).read_text(), name):
            sim.submit(queue_job(job, sim.state, {}, submission=""))
            sim.run(until_ms=sim.now_ms + 1)
    return {e.data.workload for e in sim.log if isinstance(e.data, ev.EvictionOrdered)}


async def pods_by_workload(kube, log: LocalLog) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    pods, _ = await kube.list(api.PODS)
    uid_of = {}
    for kind, res in (("Job", api.JOBS), ("JobSet", api.JOBSETS), ("PyTorchJob", api.TRAINING_JOBS["PyTorchJob"])):
        objs, _ = await kube.list(res)
        for o in objs:
            uid_of[(kind, o["metadata"]["namespace"], o["metadata"]["name"])] = f"{o['metadata']['namespace']}/{o['metadata']['name']}"
    for p in pods:
        for kind in ("Job", "JobSet", "PyTorchJob"):
            owner = ob.owner_name(kind, p)
            if owner and (kind, p["metadata"]["namespace"], owner) in uid_of:
                out.setdefault(uid_of[(kind, p["metadata"]["namespace"], owner)], []).append(p)
    return out


async def test_the_incident_serving_reclaims_from_batch_on_a_real_api_server(kube, make_binder):
    expected_victims = simulated_victims()
    assert expected_victims  # the story has preemptions
    started = time.monotonic()
    log = LocalLog()
    log.configure(load_contract_file(DEMO / "contract.yaml"))
    cluster_doc = yaml.safe_load((DEMO / "cluster.yaml").read_text())
    for item in cluster_doc["items"]:
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {k: item["metadata"][k] for k in ("name", "labels", "annotations") if k in item["metadata"]},
                "spec": {}}
        await create_node(kube, node, item["status"]["allocatable"])
    binder = await make_binder(bind_concurrency=64)
    await run_until(log, [binder], lambda: len(log.state.nodes) == 8, what="the 8 nodes")
    stop = asyncio.Event()
    cluster = FakeCluster(kube, NAMESPACES)
    runner = asyncio.create_task(cluster.run(stop))
    wl = log.state.workloads
    try:
        night = (DEMO / "jobs-night.yaml").read_text().split("\n---")
        for doc in night:  # one by one, so the queue order is the file's, as in the simulation
            if not yaml.safe_load(doc):
                continue
            [obj] = await apply_manifests(kube, doc)
            name = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
            await run_until(log, [binder], lambda: name in wl, what=f"{name} queued")
        await run_until(log, [binder], lambda: not log.state.unplaced and all(
            w.phase in ("running", "pending") for w in wl.values()), what="the night settled")
        night_running = {n for n, w in wl.items() if w.phase == "running"}
        [canary] = await apply_manifests(kube, (DEMO / "jobs-morning.yaml").read_text())
        await run_until(log, [binder], lambda: "serving/inference-canary" in wl
                        and wl["serving/inference-canary"].phase == "running", timeout_s=60, what="the canary running")
    finally:
        stop.set()
        await runner
    took = time.monotonic() - started
    evicted = {e.workload for e in log.of_type(ev.WorkloadEvicted)}
    print("evicted:", [(e.workload, e.reason) for e in log.of_type(ev.WorkloadEvicted)], "found:", binder.found)
    assert {e.workload for e in log.of_type(ev.EvictionOrdered)} == expected_victims == evicted
    assert evicted <= night_running
    # Exactly the victims' pods were evicted: every pod that got a deletionTimestamp belongs to one.
    victim_pods = {p for name in evicted for p in _pod_names(log, name)}
    assert set(cluster.deleted) == victim_pods
    # Every running workload's pods are bound where its placement says.
    bound = await pods_by_workload(kube, log)
    for name, w in wl.items():
        if w.phase != "running":
            continue
        live = [p for p in bound.get(name, []) if not p["metadata"].get("deletionTimestamp")]
        assert sorted(p["spec"]["nodeName"] for p in live) == sorted(
            a.node for a in w.placement.assignments for _ in range(a.count)), name
    print(f"\nincident end to end: {took:.1f} s; {len(night_running)} night workloads ran, "
          f"{len(evicted)} evicted ({', '.join(sorted(evicted))}), {binder.pods_bound} pods bound")


def _pod_names(log: LocalLog, workload: str) -> set[str]:
    """The pod names the test's Job controller gave the workload's first attempt."""
    from k8s_harness import _pods_wanted
    spec = log.state.workloads[workload].spec
    ns, name = workload.split("/")
    obj_kind = spec.kind
    # Rebuild the object's pod names from its manifest (the fake controller's naming).
    text = (DEMO / "jobs-night.yaml").read_text()
    for doc in yaml.safe_load_all(text):
        if doc and doc["metadata"]["name"] == name and doc["metadata"]["namespace"] == ns and doc["kind"] == obj_kind:
            return {p[0] for p in _pods_wanted(doc)}
    return set()
