"""Kueue's own Job, JobSet and PyTorchJob samples, unchanged (tests/data/kueue-examples), created in a
real API server as a user would (``kubectl create -f``), each run to completion by gangway on the
queues of Kueue's single-ClusterQueue setup (9 CPUs, 36Gi)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gangway.adapters.kubernetes import client as api
from gangway.contract import load_contract
from gangway.events import catalogue as ev
from gangway.services.binder import objects as ob
from k8s_harness import (KINDS, FakeCluster, LocalLog, apply_manifests, complete, create_node, node_object, run_until,
                         turn_until)

pytestmark = pytest.mark.kubernetes
EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "kueue-examples"
SAMPLES = sorted(p.name for p in EXAMPLES.glob("*.yaml") if "setup" not in p.name)
#: The PyTorchJob sample names the LocalQueue "main"; Kueue's setup names only "user-queue".
MAIN_QUEUE = """
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: default, name: main}
spec: {clusterQueue: cluster-queue}
"""


def test_there_are_the_eight_samples():
    assert len(SAMPLES) == 8


async def test_every_kueue_sample_runs_unchanged(kube, make_binder):
    log = LocalLog()
    log.configure(load_contract((EXAMPLES / "single-clusterqueue-setup.yaml").read_text() + MAIN_QUEUE))
    # Three nodes in two racks of one block (the TAS samples' topology levels), 4 CPUs each.
    for i in range(3):
        labels = {"cloud.provider.com/topology-block": "block-0", "cloud.provider.com/topology-rack": f"rack-{i // 2}"}
        await create_node(kube, node_object(f"cpu-{i}", labels=labels), {"cpu": "4", "memory": "16Gi", "pods": "110"})
    binder = await make_binder()
    await run_until(log, [binder], lambda: len(log.state.nodes) == 3, what="three nodes")
    stop = asyncio.Event()
    runner = asyncio.create_task(FakeCluster(kube, ["default"]).run(stop))
    ran: dict[str, tuple[str, int]] = {}
    try:
        for sample in SAMPLES:
            [obj] = await apply_manifests(kube, (EXAMPLES / sample).read_text(), namespace="default")
            name = f"default/{obj['metadata']['name']}"
            if (EXAMPLES / sample).read_text().find("generateName") >= 0:
                print(f"{sample}: created as {obj['metadata']['name']} (generateName)")
            wl = log.state.workloads
            await run_until(log, [binder], lambda: name in wl and wl[name].phase == "running", timeout_s=30,
                            what=f"{sample} running")
            pods, _ = await kube.list(api.PODS, "default")
            mine = [p for p in pods if ob.owner_name(obj["kind"], p) == obj["metadata"]["name"]
                    and p["spec"].get("nodeName")]
            ran[sample] = (obj["kind"], len(mine))
            if obj["kind"] == "PyTorchJob":  # its pods lost at once (a restart): each replacement in its pod set's place
                places = {p["metadata"]["name"]: (p["spec"]["nodeName"], p["metadata"]["uid"]) for p in mine}
                for pod in places:
                    await kube.delete(api.PODS, pod, "default", grace_seconds=0)

                def replaced(pods):
                    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods
                            if p["metadata"]["name"] in places and p["metadata"]["uid"] != places[p["metadata"]["name"]][1]}

                async def all_back():
                    pods, _ = await kube.list(api.PODS, "default")
                    back = replaced(pods)
                    return back if len(back) == len(places) and all(back.values()) else None
                back = await turn_until(log, [binder], all_back, "the PyTorchJob's replacements bound", timeout_s=30)
                assert back == {pod: node for pod, (node, _) in places.items()}
                assert (wl[name].attempt, wl[name].phase) == (0, "running")
            await complete(kube, await kube.get(KINDS[obj["kind"]], obj["metadata"]["name"], "default"))
            await run_until(log, [binder], lambda: wl[name].phase == "finished", what=f"{sample} finished")
    finally:
        stop.set()
        await runner
    assert ran == {
        "jobs-sample-job-partial-admission.yaml": ("Job", 9),  # 20 one-CPU pods, min 5, on a 9-CPU queue: 9 run
        "jobs-sample-job.yaml": ("Job", 3),
        "jobs-sample-jobset-tas-combined.yaml": ("JobSet", 8),
        "jobs-sample-jobset-tas-required.yaml": ("JobSet", 4),
        "jobs-sample-jobset-tas-sliced.yaml": ("JobSet", 8),
        "jobs-sample-pytorchjob.yaml": ("PyTorchJob", 2),
        "jobs-sample-scalable-job.yaml": ("Job", 3),
        "sample-job.yaml": ("Job", 3),
    }
    partial = [a for a in log.of_type(ev.WorkloadAdmitted) if a.workload == "default/sample-job-partial-admission"]
    assert partial[0].counts == {"main": 9}
    assert (await kube.get(api.JOBS, "sample-job-partial-admission", "default"))["spec"]["parallelism"] == 9
