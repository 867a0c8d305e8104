"""The binder beside Kubernetes' own Job controller (kube-controller-manager's job and garbage
collector controllers): the pods are the controller's, made from the template as the binder left it
(gated), counted and finished by it; the test plays only the kubelet. The webhook is served too, so
a Job created unsuspended never gets a pod before gangway admits it; a Job deleted while it runs
loses its pods to the garbage collector before its workload gives back its nodes."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gangway.adapters.kubernetes import ApiError
from gangway.adapters.kubernetes import client as api
from gangway.events import catalogue as ev
from gangway.events.reasons import C
from gangway.services.binder import objects as ob
from gangway.services.binder import webhook as wh
from gangway.services.binder.policy import RequeueBackoff
from k8s_harness import apply_manifests, run_until, turn_until
from test_kubernetes_admission_webhook import register_on_loopback
from test_kubernetes_binder import job, pods_of, setup

pytestmark = pytest.mark.kubernetes


def ended(phase: str, exit_code: int, reason: str) -> dict:
    """A pod status as the kubelet writes it when the container has ended."""
    return {"status": {"phase": phase, "containerStatuses": [
        {"name": "main", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"terminated": {"exitCode": exit_code, "reason": reason}}}]}}


async def kubelet(kube, stop: asyncio.Event, finish: set[str], stuck=lambda pod: False, crash=lambda pod: False) -> None:
    """Bound pods start (but those ``stuck`` says cannot: their image does not pull); a running pod
    ``crash`` names fails; a pod of a Job named in ``finish`` succeeds; a deleted pod goes."""
    while not stop.is_set():
        pods, _ = await kube.list(api.PODS, "team")
        for pod in pods:
            m, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
            with contextlib.suppress(ApiError):
                if m.get("deletionTimestamp"):
                    await kube.delete(api.PODS, m["name"], "team", grace_seconds=0)
                elif pod["spec"].get("nodeName") and phase in (None, "Pending") and stuck(pod):
                    await kube.patch(api.PODS, m["name"], {"status": {"phase": "Pending", "containerStatuses": [
                        {"name": "main", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0,
                         "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}}, "team", sub="status")
                elif pod["spec"].get("nodeName") and phase in (None, "Pending"):
                    await kube.patch(api.PODS, m["name"], {"status": {"phase": "Running"}}, "team", sub="status")
                elif phase == "Running" and crash(pod):
                    await kube.patch(api.PODS, m["name"], ended("Failed", 1, "Error"), "team", sub="status")
                elif phase == "Running" and m["labels"].get("batch.kubernetes.io/job-name") in finish:
                    await kube.patch(api.PODS, m["name"], ended("Succeeded", 0, "Completed"), "team", sub="status")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


async def test_the_real_job_controller_makes_a_gangs_pods_gated_the_binder_binds_them_whole_and_it_finishes(
        control_plane, kube, make_binder):
    log, binder = await setup(kube, make_binder)
    port = await register_on_loopback(kube)
    stop, finish = asyncio.Event(), set()
    certs = wh.issue(["127.0.0.1"])
    await wh.publish_ca(kube, certs.ca)
    serving = await wh.WebhookServer(certs, port, host="127.0.0.1").start(stop)
    kubelet_task = asyncio.create_task(kubelet(kube, stop, finish))
    wl = log.state.workloads
    try:
        with control_plane.controllers("job,garbagecollector"):
            # created unsuspended by a user in a hurry: stored suspended, so the controller makes no pod
            [made] = await apply_manifests(kube, job("real", pods=2, gpus=8, suspend=False))
            assert made["spec"]["suspend"] is True
            await run_until(log, [binder], lambda: "team/real" in wl, what="the Job queued")
            assert await pods_of(kube, "real") == []
            await run_until(log, [binder], lambda: wl["team/real"].phase == "running", what="the gang running")
            pods = await pods_of(kube, "real")
            [placement] = log.of_type(ev.PlacementDecided)
            assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(a.node for a in placement.assignments
                                                                        for _ in range(a.count))
            # the controller made them from the template the binder resumed: behind gangway's gate, lifted
            # by the binder once each was pinned to its node
            assert all(not p["spec"].get("schedulingGates") and p["metadata"]["annotations"].get(ob.GPUS_ANNOTATION)
                       for p in pods)
            assert {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods} == {"0", "1"}
            finish.add("real")
            await run_until(log, [binder], lambda: wl["team/real"].phase == "finished", what="the Job finished")
            [done] = [f for f in log.of_type(ev.WorkloadFinished) if f.workload == "team/real"]
            assert done.succeeded, done
            current = await kube.get(api.JOBS, "real", "team")
            assert any(c["type"] == "Complete" and c["status"] == "True" for c in current["status"]["conditions"])

            # deleted while it runs: the garbage collector takes its pods, and only then does its
            # workload leave the log's nodes and quota (WorkloadWithdrawn)
            await apply_manifests(kube, job("dropped", pods=2, gpus=8))
            await run_until(log, [binder], lambda: "team/dropped" in wl and wl["team/dropped"].phase == "running",
                            what="the second gang running")
            await kube.delete(api.JOBS, "dropped", "team", propagation="Background")
            await run_until(log, [binder], lambda: wl["team/dropped"].phase == "finished", what="the deleted Job withdrawn")
            assert wl["team/dropped"].withdrawn and await pods_of(kube, "dropped") == []
            assert all(node.free == node.allocatable for node in log.state.nodes.values())
    finally:
        stop.set()
        await serving
        await kubelet_task
        await kube.delete(wh.WEBHOOK_CONFIGURATIONS, wh.CONFIGURATION)



async def test_a_gang_rolled_back_costs_its_job_no_failure_and_runs_in_its_next_attempt(control_plane, kube, make_binder):
    """backoffLimit 0, one pod whose image does not pull: past the pods-ready timeout the binder
    suspends the Job before it deletes the pods, so the Job controller counts no failure (deleted
    under a running Job, each pod would be one, and the Job would fail for good); the next attempt runs."""
    log, binder = await setup(kube, make_binder, pods_ready_timeout_s=2.0,
                              backoff=RequeueBackoff(base_s=0.5, max_s=1.0, limit=4))
    first_pod: list[str] = []

    def stuck(pod: dict) -> bool:  # the first pod of index 1 the kubelet meets never starts
        if pod["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") != "1":
            return False
        first_pod[:] = first_pod or [pod["metadata"]["uid"]]
        return pod["metadata"]["uid"] == first_pod[0]

    stop, finish = asyncio.Event(), set()
    kubelet_task = asyncio.create_task(kubelet(kube, stop, finish, stuck))
    wl = log.state.workloads
    try:
        with control_plane.controllers("job,garbagecollector"):
            await apply_manifests(kube, job("fragile", pods=2, gpus=8).replace(
                "  completionMode: Indexed", "  completionMode: Indexed\n  backoffLimit: 0"))
            await run_until(log, [binder], lambda: "team/fragile" in wl and wl["team/fragile"].attempt == 1
                            and wl["team/fragile"].phase == "running", what="the second attempt running", timeout_s=60)
            [rolled] = [e for e in log.of_type(ev.WorkloadEvicted) if e.workload == "team/fragile"]
            assert rolled.reason.startswith("gang not running: 1 of its 2 pods not running 2 s after its admission")
            current = await kube.get(api.JOBS, "fragile", "team")
            assert not current["status"].get("failed") and not any(
                c["type"] in ("Failed", "FailureTarget") for c in current["status"].get("conditions") or []), current["status"]
            finish.add("fragile")
            await run_until(log, [binder], lambda: wl["team/fragile"].phase == "finished", what="the Job finished")
            assert [f.succeeded for f in log.of_type(ev.WorkloadFinished) if f.workload == "team/fragile"] == [True]
    finally:
        stop.set()
        await kubelet_task


async def test_a_failed_pod_is_retried_by_the_job_controller_in_the_place_it_left(control_plane, kube, make_binder):
    """A pod of a running gang fails: the retry is the Job controller's (its backoffLimit), as with
    Kueue. Its replacement is bound where the failed pod ran (node and GPUs), the workload keeps its
    attempt and its GPUs, and nothing is requeued or counted as preemption."""
    log, binder = await setup(kube, make_binder)
    crashed: list[dict] = []

    def crash(pod: dict) -> bool:  # the first pod of index 1 to run fails
        if pod["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") != "1" or (
                crashed and crashed[0]["metadata"]["uid"] != pod["metadata"]["uid"]):
            return False
        crashed[:] = [pod]
        return True

    stop, finish = asyncio.Event(), set()
    kubelet_task = asyncio.create_task(kubelet(kube, stop, finish, crash=crash))
    wl = log.state.workloads
    try:
        with control_plane.controllers("job,garbagecollector"):
            await apply_manifests(kube, job("flaky", pods=2, gpus=4).replace(
                "  completionMode: Indexed", "  completionMode: Indexed\n  backoffLimit: 2"))
            await run_until(log, [binder], lambda: log.of_type(ev.ClusterReconciled), what="the replacement bound",
                            timeout_s=60)
            [found] = log.of_type(ev.ClusterReconciled)
            [failed] = crashed
            assert (found.reason_code, found.workload, found.attempt) == (C.PODS_REPLACED, "team/flaky", 0)
            assert found.action == f"each bound in the place its predecessor left ({failed['metadata']['name']})"
            [replacement] = [p for p in await pods_of(kube, "flaky") if p["metadata"]["name"] == found.pods[0]]
            assert replacement["metadata"]["uid"] != failed["metadata"]["uid"]
            assert (replacement["spec"]["nodeName"], replacement["metadata"]["annotations"][ob.GPUS_ANNOTATION]) == (
                failed["spec"]["nodeName"], failed["metadata"]["annotations"][ob.GPUS_ANNOTATION])

            async def whole():
                return len([p for p in await pods_of(kube, "flaky") if (p.get("status") or {}).get("phase") == "Running"]) == 2
            await turn_until(log, [binder], whole, what="the gang whole again", timeout_s=60)
            for _ in range(3):
                await log.turn(binder)
            # Short while it ran (a gang that crashed before it ever ran whole is the bound timeout's),
            # it said so on the Job, and takes it back once whole.
            events, _ = await kube.list(api.EVENTS, "team", field_selector="involvedObject.name=flaky")
            told = sorted(e["reason"] for e in events if e["reason"] in ("Recovering", "Recovered"))
            assert told in ([], ["Recovered", "Recovering"]), told
            said = ob.condition(await kube.get(api.JOBS, "flaky", "team"))
            assert said["reason"] != "Recovering" and (not told or said["message"] == "Recovered: all 2 pods running again")
            finish.add("flaky")
            await run_until(log, [binder], lambda: wl["team/flaky"].phase == "finished", what="the Job finished")
            assert [(f.attempt, f.succeeded) for f in log.of_type(ev.WorkloadFinished)] == [(0, True)]
            assert not log.of_type(ev.WorkloadEvicted)
            assert (await kube.get(api.JOBS, "flaky", "team"))["status"].get("failed") == 1
    finally:
        stop.set()
        await kubelet_task
