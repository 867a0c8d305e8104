"""``gangway up --kubernetes``: the whole stack (embedded broker, six services as processes) with the
binder acting on the real API server as its ServiceAccount."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gangway import stack
from gangway.adapters.kubernetes import client as api
from gangway.contract import load_contract
from gangway.services.binder import objects as ob
from gangway.services.binder import webhook as wh
from k8s_harness import cluster_running, apply_manifests, create_node, node_object
from test_kubernetes_admission_webhook import register_on_loopback
from test_kubernetes_binder import job, pods_of, relabel, two_queues

pytestmark = pytest.mark.kubernetes


async def test_gangway_up_kubernetes_binds_a_kubectl_applied_job(kube, binder_kubeconfig, tmp_path, monkeypatch):
    monkeypatch.setenv("GANGWAY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("GANGWAY_KAFKA", raising=False)
    for i in range(3):
        await create_node(kube, node_object(f"node-{i}", islands="8"), {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"})
    # with its webhook on loopback, registered by URL as for a binder outside the cluster
    port = await register_on_loopback(kube)
    running = stack.Stack(kubernetes={"kubeconfig": binder_kubeconfig, "context": None, "webhook-port": str(port),
                                      "webhook-host": "127.0.0.1"})
    async with cluster_running(kube, ["team"]):
        try:
            await asyncio.to_thread(running.start)
            await asyncio.to_thread(running.wait_ready, 90.0)
            await stack.publish_config(running.bootstrap, load_contract(two_queues(16)), "test", running.clock.now_ms())
            # created unsuspended: the webhook stores it suspended, so no pod exists before gangway admits it
            [created] = await apply_manifests(kube, job("via-stack", pods=2, gpus=8, suspend=False))
            assert created["spec"]["suspend"] is True
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                running.supervise_once()
                pods = await pods_of(kube, "via-stack")
                if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods):
                    break
                await asyncio.sleep(0.2)
            else:
                logs = (tmp_path / "state" / "logs" / "binder.log").read_text()[-3000:]
                raise AssertionError(f"pods not bound through the stack; binder log:\n{logs}")
            assert sorted(p["spec"]["nodeName"] for p in pods) == ["node-0", "node-1"]
            state, _ = await stack.read_state(running.bootstrap)
            assert state.workloads["team/via-stack"].spec.labels[ob.UID_LABEL]
            current = await kube.get(api.JOBS, "via-stack", "team")
            assert any(c["type"] == ob.CONDITION_TYPE and c["reason"] == "Admitted" for c in current["status"]["conditions"])
            # A Job the binder refuses at intake never reaches the log: its rejection is on gangway.rejections,
            # where `gangway explain` finds it.
            await apply_manifests(kube, job("lost-way", pods=1, gpus=1).replace("queue-name: default", "queue-name: nowhere"))
            deadline = time.monotonic() + 60
            while not any(e.data.job_id == "lost-way" for e in await stack.read_rejections(running.bootstrap)):
                assert time.monotonic() < deadline, "no rejection of the refused Job on gangway.rejections; binder log:\n" + \
                    (tmp_path / "state" / "logs" / "binder.log").read_text()[-3000:]
                running.supervise_once()
                await asyncio.sleep(0.2)
            said = subprocess.run([str(Path(sys.executable).parent / "gangway"), "explain", "team/lost-way"], capture_output=True, text=True,
                                  env={**os.environ, "GANGWAY_KAFKA": running.bootstrap}, timeout=60)
            assert said.returncode == 0 and "unknown_queue" in said.stdout and "nowhere" in said.stdout, said
            # One no contract admits is refused by the webhook as it is created (its owner's apply says
            # why), and its rejection reaches gangway.rejections all the same.
            with pytest.raises(api.ApiError) as refused:
                await apply_manifests(kube, job("capped", pods=1, gpus=1).replace(
                    "queue-name: default}", 'queue-name: default, kueue.x-k8s.io/max-exec-time-seconds: "0"}'))
            assert refused.value.status == 422 and "max-exec-time-seconds" in refused.value.message
            deadline = time.monotonic() + 60
            while not any(e.data.job_id == "capped" for e in await stack.read_rejections(running.bootstrap)):
                assert time.monotonic() < deadline, "the webhook's rejection not on gangway.rejections"
                running.supervise_once()
                await asyncio.sleep(0.2)
            said = subprocess.run([str(Path(sys.executable).parent / "gangway"), "explain", "team/capped"], capture_output=True,
                                  text=True, env={**os.environ, "GANGWAY_KAFKA": running.bootstrap}, timeout=60)
            assert said.returncode == 0 and "invalid_field" in said.stdout and "max-exec-time-seconds" in said.stdout, said
            # A Job waiting in a full queue moved by its label: the binder submits it again, the
            # submission service moves it, and it runs from the other queue.
            await apply_manifests(kube, job("mover", pods=1, gpus=8))
            deadline = time.monotonic() + 60
            while "team/mover" not in (await stack.read_state(running.bootstrap))[0].workloads:
                assert time.monotonic() < deadline, "the Job to move not queued"
                running.supervise_once()
                await asyncio.sleep(0.2)
            await relabel(kube, "mover", "other")
            deadline = time.monotonic() + 60
            while not [p for p in await pods_of(kube, "mover") if p["spec"].get("nodeName")]:
                assert time.monotonic() < deadline, "the moved Job not bound; binder log:\n" + \
                    (tmp_path / "state" / "logs" / "binder.log").read_text()[-3000:]
                running.supervise_once()
                await asyncio.sleep(0.2)
            said = subprocess.run([str(Path(sys.executable).parent / "gangway"), "explain", "team/mover"], capture_output=True,
                                  text=True, env={**os.environ, "GANGWAY_KAFKA": running.bootstrap}, timeout=60)
            assert "moved from queue default to other (ClusterQueue other)" in said.stdout, said
        finally:
            await asyncio.to_thread(running.stop)
            await kube.delete(wh.WEBHOOK_CONFIGURATIONS, wh.CONFIGURATION)
