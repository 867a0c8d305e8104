"""The binder against a real kube-apiserver: intake, gang binding, status, rollbacks, evictions."""

from __future__ import annotations

import asyncio
import json

import pytest

from gangway.adapters.kubernetes import client as api
from gangway.contract import load_contract
from gangway.events import catalogue as ev
from gangway.events import kubeflow, rayjob
from gangway.events.kubeflow import TRAINING_KINDS
from gangway.events.reasons import C
from gangway.read.explain import explain
from gangway.services.binder.policy import RequeueBackoff
from gangway.services.binder import objects as ob
from gangway.services.binder.kubernetes import GONE
from k8s_harness import (cluster_running, LocalLog, apply_manifests, complete, create_node, ensure_namespace, node_object,
                         run_until, turn_until)

pytestmark = pytest.mark.kubernetes

CONTRACT = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["cpu", "memory", "nvidia.com/gpu"]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: 1000}
      - {name: memory, nominalQuota: 10Ti}
      - {name: nvidia.com/gpu, nominalQuota: 32}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team, name: default}
spec: {clusterQueue: team}
"""


def job(name: str, pods: int, gpus: int, suspend: bool = True, cpu: str = "1", memory: str = "1Gi",
        pod_spec: str = "") -> str:
    """A suspended, Indexed batch/v1 Job of ``pods`` pods in namespace team, queue default (``pod_spec``:
    more fields of its pod template's spec, as YAML lines), naming no scheduler, as Kueue users write it."""
    gpu = f", nvidia.com/gpu: {gpus}}}, limits: {{nvidia.com/gpu: {gpus}" if gpus else ""
    extra = "".join(f"\n      {line}" for line in pod_spec.splitlines() if line.strip())
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: team
  labels: {{kueue.x-k8s.io/queue-name: default}}
spec:
  parallelism: {pods}
  completions: {pods}
  completionMode: Indexed
  suspend: {str(suspend).lower()}
  template:
    spec:
      restartPolicy: Never{extra}
      containers:
      - name: main
        image: busybox
        resources: {{requests: {{cpu: "{cpu}", memory: {memory}{gpu}}}}}
"""


async def four_nodes(kube, gpus: int = 8) -> None:
    for i in range(4):
        await create_node(kube, node_object(f"node-{i}", islands=str(gpus)),
                          {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": str(gpus), "pods": "110"})


async def setup(kube, make_binder, contract: str = CONTRACT, **options):
    log = LocalLog()
    log.configure(load_contract(contract))
    await four_nodes(kube)
    binder = await make_binder(**options)
    await run_until(log, [binder], lambda: len(log.state.nodes) == 4, what="four nodes on the log")
    return log, binder


async def pods_of(kube, name: str, ns: str = "team") -> list[dict]:
    pods, _ = await kube.list(api.PODS, ns, label_selector=f"batch.kubernetes.io/job-name={name}")
    return sorted(pods, key=lambda p: p["metadata"]["name"])


async def test_a_suspended_job_is_admitted_bound_as_a_gang_run_and_finished(kube, make_binder):
    log, binder = await setup(kube, make_binder)
    async with cluster_running(kube, ["team"]):
        [obj] = await apply_manifests(kube, job("train", pods=3, gpus=4))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/train" in wl and wl["team/train"].phase == "running",
                        what="the Job running")
        queued = wl["team/train"].spec
        assert queued.labels[ob.UID_LABEL] == obj["metadata"]["uid"]
        [placement] = log.of_type(ev.PlacementDecided)
        pods = await pods_of(kube, "train")
        want = [a.node for a in placement.assignments for _ in range(a.count)]
        assert [p["spec"]["nodeName"] for p in pods] == want  # completion index order takes the assignments in order
        gpus = [p["metadata"]["annotations"][ob.GPUS_ANNOTATION] for p in pods]
        assert all(len(g.split(",")) == 4 for g in gpus)
        current = await kube.get(api.JOBS, "train", "team")
        assert current["spec"]["suspend"] is False
        cond = [c for c in current["status"]["conditions"] if c["type"] == ob.CONDITION_TYPE][0]
        assert cond["reason"] == "Admitted" and cond["message"].startswith("Admitted by gangway")
        events, _ = await kube.list(api.EVENTS, "team", field_selector="involvedObject.name=train")
        assert any(e["reason"] == "Admitted" for e in events)
        await complete(kube, current, message="all 3 succeeded")
        await run_until(log, [binder], lambda: wl["team/train"].phase == "finished", what="the Job finished")
        [fin] = log.of_type(ev.WorkloadFinished)
        assert fin.succeeded and "Complete" in fin.reason and "all 3 succeeded" in fin.reason
        # A re-list (a restart) submits nothing twice: the uid is on the log.
        again = await make_binder("binder-1")
        await binder.elector.release()
        await kill_lease_holder(binder)
        await run_until(log, [again], lambda: again.elector.leading, what="the second binder leading")
        for _ in range(5):
            await log.turn(again)
        assert len(log.of_type(ev.WorkloadQueued)) == 1


@pytest.mark.parametrize("kind", list(TRAINING_KINDS))
async def test_each_kubeflow_kind_is_admitted_bound_as_a_gang_run_and_finished(kube, make_binder, kind):
    """PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob, MPIJob: one pod set per replica type (the
    first asking for nothing, as launchers often do), resumed in runPolicy with its pods gated, each
    pod bound in its own pod set's place, told, finished."""
    training = TRAINING_KINDS[kind]
    replicas = {training.order[0]: 1, "Worker": 2}  # (JAXJob: Worker only)
    pod = {"spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": 4}}}]}}
    bare = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # (a launcher asking for nothing)
    obj = {"apiVersion": training.api_version, "kind": kind,
           "metadata": {"name": "dist", "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "default"}},
           "spec": {"runPolicy": {"suspend": True},
                    training.replica_specs: {t: {"replicas": n, "template": pod if t == "Worker" else bare}
                                             for t, n in replicas.items()}}}
    log, binder = await setup(kube, make_binder)
    await ensure_namespace(kube, "team")
    async with cluster_running(kube, ["team"]):
        await kube.create(api.TRAINING_JOBS[kind], obj, "team")
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/dist" in wl and wl["team/dist"].phase == "running",
                        what=f"the {kind} running")
        assert [(ps.name, ps.count) for ps in wl["team/dist"].spec.pod_sets] == [(t.lower(), n) for t, n in replicas.items()]
        [placement] = log.of_type(ev.PlacementDecided)
        pods, _ = await kube.list(api.PODS, "team", label_selector=f"{kubeflow.JOB_NAME_LABEL}=dist")
        assert len(pods) == sum(replicas.values()) and all(p["spec"].get("nodeName") for p in pods)
        for p in pods:  # (each on a node its own pod set was placed on)
            pod_set = p["metadata"]["labels"][training.role_label]
            assert p["spec"]["nodeName"] in {a.node for a in placement.assignments if a.pod_set == pod_set}
        current = await kube.get(api.TRAINING_JOBS[kind], "dist", "team")
        assert current["spec"]["runPolicy"]["suspend"] is False
        assert ob.condition(current)["reason"] == "Admitted"
        await complete(kube, current)
        await run_until(log, [binder], lambda: wl["team/dist"].phase == "finished", what=f"the {kind} finished")
        [fin] = log.of_type(ev.WorkloadFinished)
        assert fin.succeeded and f"{kind} Succeeded" in fin.reason


async def test_a_rayjob_is_admitted_bound_as_a_gang_run_and_finished(kube, make_binder):
    """KubeRay's RayJob (its CRD's stand-in and a simulated KubeRay): a head, a worker group and the
    submitter as pod sets; resumed with gangway's scheduler in every template (the submitter's written
    out), each pod — found by its RayCluster, or its submitter Job — bound in its own pod set's place,
    told, finished when its jobDeploymentStatus says so."""
    obj = {"apiVersion": rayjob.API_VERSION, "kind": rayjob.KIND,
           "metadata": {"name": "ray", "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "default"}},
           "spec": {"suspend": True, "shutdownAfterJobFinishes": True, "entrypoint": "python train.py",
                    "rayClusterSpec": {
                        "headGroupSpec": {"template": {"spec": {"containers": [
                            {"name": "head", "image": "rayproject/ray", "resources": {"requests": {"cpu": "2"}}}]}}},
                        "workerGroupSpecs": [{"groupName": "gpu", "replicas": 3, "template": {"spec": {"containers": [
                            {"name": "w", "image": "rayproject/ray", "resources": {"requests": {"cpu": "4"},
                                                                                    "limits": {"nvidia.com/gpu": 8}}}]}}}]}}}
    log, binder = await setup(kube, make_binder)
    await ensure_namespace(kube, "team")
    async with cluster_running(kube, ["team"]):
        await kube.create(api.RAYJOBS, obj, "team")
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/ray" in wl and wl["team/ray"].phase == "running",
                        what="the RayJob running")
        assert [(ps.name, ps.count) for ps in wl["team/ray"].spec.pod_sets] == [("head", 1), ("gpu", 3), ("submitter", 1)]
        [placement] = log.of_type(ev.PlacementDecided)
        pods, _ = await kube.list(api.PODS, "team")
        assert len(pods) == 5 and all(p["spec"].get("nodeName") for p in pods), pods
        for p in pods:  # (each on a node its own pod set was placed on)
            pod_set = ob.pod_set_of(rayjob.KIND, p, ["head", "gpu", "submitter"])
            assert p["spec"]["nodeName"] in {a.node for a in placement.assignments if a.pod_set == pod_set}, p
        workers = [p for p in pods if p["metadata"]["labels"].get(rayjob.GROUP_LABEL) == "gpu"]
        assert len({p["spec"]["nodeName"] for p in workers}) == 3  # (8 GPUs each: a node each)
        current = await kube.get(api.RAYJOBS, "ray", "team")
        assert current["spec"]["suspend"] is False and ob.condition(current)["reason"] == "Admitted"
        assert current["spec"]["submitterPodTemplate"]["spec"]["schedulerName"] == ob.SCHEDULER_NAME
        await complete(kube, current, message="done")
        await run_until(log, [binder], lambda: wl["team/ray"].phase == "finished", what="the RayJob finished")
        [fin] = log.of_type(ev.WorkloadFinished)
        assert fin.succeeded and "RayJob Complete" in fin.reason


SPOT_POOL = CONTRACT.replace("metadata: {name: default}\n", """metadata: {name: default}
spec:
  nodeLabels: {pool: spot}
  tolerations: [{key: spot, operator: Exists, effect: NoSchedule}]
""")


async def test_a_flavors_tolerations_are_added_to_the_job_it_resumes_on_the_flavors_tainted_nodes(kube, make_binder):
    """Kueue's ResourceFlavor.spec.tolerations: the Job's template does not tolerate the pool's taint;
    gangway places it there all the same and adds the toleration when it resumes the Job, as Kueue does."""
    log = LocalLog()
    log.configure(load_contract(SPOT_POOL))
    for i in range(2):
        node = node_object(f"spot-{i}", labels={"pool": "spot"})
        node["spec"]["taints"] = [{"key": "spot", "value": "true", "effect": "NoSchedule"}]
        await create_node(kube, node, {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "110"})
    binder = await make_binder()
    await run_until(log, [binder], lambda: len(log.state.nodes) == 2, what="two nodes on the log")
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("spot-train", pods=2, gpus=8,
                                        pod_spec="tolerations: [{key: team, operator: Exists}]"))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/spot-train" in wl and wl["team/spot-train"].phase == "running",
                        what="the Job running on the tainted pool")
        spot = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
        current = await kube.get(api.JOBS, "spot-train", "team")
        assert current["spec"]["template"]["spec"]["tolerations"] == [{"key": "team", "operator": "Exists"}, spot]
        pods = await pods_of(kube, "spot-train")
        assert sorted(p["spec"]["nodeName"] for p in pods) == ["spot-0", "spot-1"]
        assert all(spot in p["spec"]["tolerations"] for p in pods)


async def kill_lease_holder(binder) -> None:
    from conftest import kill
    await kill(binder)


async def test_a_job_created_without_suspend_is_suspended_and_a_bad_one_is_told_why(kube, make_binder):
    log, binder = await setup(kube, make_binder)
    await apply_manifests(kube, job("eager", pods=1, gpus=1, suspend=False))
    await apply_manifests(kube, job("greedy", pods=1, gpus=1).replace("queue-name: default", "queue-name: nowhere"))
    # Kueue's partial admission is an annotation: as a label it is not read, and the Job's owner is told.
    await apply_manifests(kube, job("partial", pods=2, gpus=1).replace(
        "queue-name: default}", 'queue-name: default, kueue.x-k8s.io/job-min-parallelism: "1"}'))
    wl = log.state.workloads
    await run_until(log, [binder], lambda: "team/eager" in wl and "team/partial" in wl, what="the eager Job queued")
    assert (await kube.get(api.JOBS, "eager", "team"))["spec"]["suspend"] is True or wl["team/eager"].phase != "pending"
    assert wl["team/partial"].spec.pod_sets[0].min_count is None

    async def told(name: str = "greedy", reason: str = "Rejected"):
        events, _ = await kube.list(api.EVENTS, "team", field_selector=f"involvedObject.name={name}")
        return [e for e in events if e["reason"] == reason]
    [event] = await turn_until(log, [binder], told, "the refused Job told")
    assert event["type"] == "Warning" and "unknown_queue" in event["message"] and "nowhere" in event["message"]
    # on gangway.rejections too, the object as its owner wrote it kept (where `gangway explain` looks)
    [refused] = [r for r in log.refused if r.job_id == "greedy"]
    assert (refused.reason, refused.namespace) == ("unknown_queue", "team") and "nowhere" in refused.message
    assert json.loads(refused.original)["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "nowhere"}
    [ignored] = await told("partial", "KeysIgnored")
    assert ignored["type"] == "Warning" and ignored["message"] == (
        "Ignored by gangway: kueue.x-k8s.io/job-min-parallelism is a label here; gangway reads it as an annotation "
        "(as Kueue does): ignored")
    greedy = await kube.get(api.JOBS, "greedy", "team")
    cond = [c for c in greedy["status"]["conditions"] if c["type"] == ob.CONDITION_TYPE][0]
    assert cond["status"] == "False" and cond["reason"] == "Rejected"
    assert "team/greedy" not in wl


async def test_a_jobsets_own_job_is_left_to_its_jobset_though_it_carries_the_queue_label(kube, make_binder):
    """A JobSet's Jobs carry the labels of their template, the queue label too: they run when their
    JobSet does, and are neither suspended nor taken in as jobs of their own."""
    log, binder = await setup(kube, make_binder)
    [child] = await apply_manifests(kube, job("js-worker-0", pods=1, gpus=1, suspend=False).replace(
        "  labels:", "  ownerReferences: [{apiVersion: jobset.x-k8s.io/v1alpha2, kind: JobSet, name: js, uid: '0', "
        "controller: true}]\n  labels:"))
    assert child["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    await apply_manifests(kube, job("eager", pods=1, gpus=1, suspend=False))
    await run_until(log, [binder], lambda: "team/eager" in log.state.workloads, what="the eager Job queued")
    await binder.step(log.state, log.state.time_ms)
    assert "team/js-worker-0" not in log.state.workloads
    assert (await kube.get(api.JOBS, "js-worker-0", "team"))["spec"]["suspend"] is False


async def test_gangways_condition_keeps_a_condition_written_after_the_binder_read_the_job(kube, make_binder):
    """The binder's patch of its condition carries the resourceVersion it read: a condition another
    controller wrote meanwhile (409 Conflict) is read again and kept, not overwritten."""
    log, binder = await setup(kube, make_binder)
    await apply_manifests(kube, job("watched", pods=1, gpus=1))
    stale = await kube.get(api.JOBS, "watched", "team")
    stamp = "2026-12-03T10:00:00Z"
    await kube.patch(api.JOBS, "watched", {"status": {"conditions": [
        {"type": "Audited", "status": "True", "reason": "Checked", "message": "another controller's",
         "lastProbeTime": stamp, "lastTransitionTime": stamp}]}}, "team", sub="status")
    await binder.tell(stale, "Normal", "Told", "the binder's sentence", status="False")
    conditions = {c["type"]: c for c in (await kube.get(api.JOBS, "watched", "team"))["status"]["conditions"]}
    assert conditions["Audited"]["message"] == "another controller's"
    assert conditions[ob.CONDITION_TYPE]["reason"] in ("Told", "Pending")  # (the binder may have told it more since)
    # A binder that starts again (nothing told in its memory) tells again only what the condition does not say.
    await binder.tell(stale, "Normal", "Again", "said once", status="False")
    binder.told.clear()
    await binder.tell(await kube.get(api.JOBS, "watched", "team"), "Normal", "Again", "said once", status="False")
    events, _ = await kube.list(api.EVENTS, "team", field_selector="involvedObject.name=watched")
    assert [e["message"] for e in events if e["reason"] == "Again"] == ["said once"]


async def test_deleting_the_job_withdraws_the_workload_and_frees_its_quota(kube, make_binder):
    """Once its pods are gone: while they terminate (their grace period) their GPUs stay taken on the
    log, so no other gang is bound beside them."""
    log, binder = await setup(kube, make_binder)
    async with cluster_running(kube, ["team"], terminate_s=3.0) as cluster:
        await apply_manifests(kube, job("big", pods=4, gpus=8))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/big" in wl and wl["team/big"].phase == "running",
                        what="the big Job running")
        assert log.state.usage["team"]
        await kube.delete(api.JOBS, "big", "team", propagation="Background")
        await run_until(log, [binder], lambda: len(cluster.deleted) == 4, what="the garbage collector at its pods")
        await apply_manifests(kube, job("next", pods=4, gpus=8))
        await run_until(log, [binder], lambda: "team/next" in wl, what="the next Job queued")
        assert wl["team/big"].phase == "running" and wl["team/next"].phase == "pending"
        assert len(await pods_of(kube, "big")) == 4  # terminating
        await run_until(log, [binder], lambda: wl["team/big"].phase == "finished", what="the withdrawal")
        assert await pods_of(kube, "big") == []
        [w] = log.of_type(ev.WorkloadWithdrawn)
        assert w.workload == "team/big" and "deleted" in w.reason
        await run_until(log, [binder], lambda: wl["team/next"].phase == "running", what="the next Job running")
        await kube.delete(api.JOBS, "next", "team", propagation="Background")
        await run_until(log, [binder], lambda: wl["team/next"].phase == "finished", what="the second withdrawal")
        assert all(v == 0 for v in log.state.usage["team"].values())
        assert all(n.free == n.allocatable for n in log.state.nodes.values())
        # created again under its name: a new workload, which `gangway explain team/big` points to
        [again] = await apply_manifests(kube, job("big", pods=1, gpus=8))
        renamed = f"team/big-{again['metadata']['uid'][:8]}"
        await run_until(log, [binder], lambda: renamed in wl, what="the Job created again queued")
        said = explain(log.envelopes, "team/big")
        assert said[0].startswith(f"note: the object of team/big was deleted and created again: the new one is "
                                  f"workload {renamed} (now "), said
        assert any("withdrawn" in line for line in said[1:]) and not explain(log.envelopes, renamed)[0].startswith("note")


async def test_a_gang_not_whole_again_in_time_keeps_its_gpus_until_the_rest_of_its_pods_are_gone(kube, make_binder):
    """A running gang loses a pod its controller does not replace: past the pods-ready timeout (Kueue's
    recoveryTimeout) its other pods are deleted with their grace period, and the gang goes back to its
    queue (its quota and GPUs to the others) only once they have stopped."""
    log, binder = await setup(kube, make_binder, pods_ready_timeout_s=1.0)
    async with cluster_running(kube, ["team"], terminate_s=3.0) as cluster:
        await apply_manifests(kube, job("pair", pods=2, gpus=8))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/pair" in wl and wl["team/pair"].phase == "running",
                        what="the pair running")
        cluster.hold_back["pair"] = 1  # (its controller makes no replacement)
        last = (await pods_of(kube, "pair"))[-1]["metadata"]
        await kube.delete(api.PODS, last["name"], "team", grace_seconds=0)
        await run_until(log, [binder], lambda: log.of_type(ev.ClusterReconciled), what="the lost pod found")
        found = next(e for e in log.envelopes if isinstance(e.data, ev.ClusterReconciled))
        assert found.data.reason_code == C.PODS_VANISHED
        assert found.data.action.startswith("1 pod(s) deleted and the Job suspended again")
        assert wl["team/pair"].phase == "running" and wl["team/pair"].attempt == 0  # the other pod is stopping
        await run_until(log, [binder], lambda: log.of_type(ev.WorkloadEvicted), what="the gang requeued")
        requeued = next(e for e in log.envelopes if isinstance(e.data, ev.WorkloadEvicted))
        assert requeued.data.workload == "team/pair" and requeued.time_ms - found.time_ms >= 2500
        assert requeued.data.reason.startswith("gang not whole again: 1 of its 2 pods not running 1 s after it lost one "
                                               "(no replacement made by its controller)")


async def test_a_new_leader_counts_a_gangs_recovery_timeout_from_when_it_lost_its_pod_not_from_its_own_start(
        kube, make_binder):
    """The first binder finds the pair short of a pod and says so on the Job (its ``Recovering``
    condition, with the time); it dies, and the binder that leads next requeues the gang when the
    timeout runs out from then (before, it counted from its own first look: a gang could hold its
    GPUs for a timeout per leader)."""
    log, first = await setup(kube, make_binder, pods_ready_timeout_s=6.0)
    async with cluster_running(kube, ["team"]) as cluster:
        await apply_manifests(kube, job("pair", pods=2, gpus=8))
        wl = log.state.workloads
        await run_until(log, [first], running(log, "team/pair"), what="the pair running")
        cluster.hold_back["pair"] = 1  # (its controller makes no replacement)
        last = (await pods_of(kube, "pair"))[-1]["metadata"]
        await kube.delete(api.PODS, last["name"], "team", grace_seconds=0)

        async def recovering():
            said = ob.condition(await kube.get(api.JOBS, "pair", "team"))
            return said if said.get("reason") == "Recovering" else None
        said = await turn_until(log, [first], recovering, what="the Recovering condition")
        assert said["status"] == "True" and said["message"].startswith(
            "Recovering: 1 of its 2 pods not running (no replacement made by its controller); back in its queue unless "
            "whole again within 6 s"), said
        lost_at = first.gangs[("team/pair", 0)].short_since
        second = await make_binder("binder-1", pods_ready_timeout_s=6.0)
        await kill_lease_holder(first)
        await run_until(log, [second], lambda: second.elector.leading, what="the second binder leading")
        await run_until(log, [second], lambda: ("team/pair", 0) in second.gangs and
                        second.gangs[("team/pair", 0)].short_since is not None, what="the second binder's look")
        assert second.gangs[("team/pair", 0)].short_since <= lost_at + 1.0  # (the condition's time is in whole seconds)
        await run_until(log, [second], lambda: wl["team/pair"].phase == "pending", what="the gang requeued")
        [requeued] = log.of_type(ev.WorkloadEvicted)
        assert requeued.reason.startswith("gang not whole again: 1 of its 2 pods not running 6 s after it lost one")


async def test_a_job_of_more_completions_than_parallelism_runs_its_next_pods_in_the_places_left(kube, make_binder):
    """Four completions, two at a time: as a pod succeeds its controller creates the next, which is
    bound where the finished one ran (node and GPUs); the workload keeps its placement throughout
    (it was requeued as a lost pod), and finishes with the Job."""
    log, binder = await setup(kube, make_binder)
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("work", pods=2, gpus=4).replace("completions: 2", "completions: 4"))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/work" in wl and wl["team/work"].phase == "running",
                        what="the first two pods running")
        places = {}
        for done, nxt in (("work-0", "work-2"), ("work-1", "work-3")):
            pod = next(p for p in await pods_of(kube, "work") if p["metadata"]["name"] == done)
            places[done] = (pod["spec"]["nodeName"], pod["metadata"]["annotations"].get(ob.GPUS_ANNOTATION))
            await kube.patch(api.PODS, done, {"status": {"phase": "Succeeded"}}, "team", sub="status")

            async def bound(name=nxt):
                return [p for p in await pods_of(kube, "work") if p["metadata"]["name"] == name and p["spec"].get("nodeName")]
            [pod] = await turn_until(log, [binder], bound, f"{nxt} bound")
            assert (pod["spec"]["nodeName"], pod["metadata"]["annotations"].get(ob.GPUS_ANNOTATION)) == places[done]
        assert (wl["team/work"].phase, wl["team/work"].attempt) == ("running", 0)
        assert not log.of_type(ev.WorkloadEvicted) and not log.of_type(ev.ClusterReconciled)
        await complete(kube, await kube.get(api.JOBS, "work", "team"))
        await run_until(log, [binder], lambda: wl["team/work"].phase == "finished", what="the Job finished")
        assert all(v == 0 for v in log.state.usage["team"].values())


async def test_a_gang_whose_last_bind_fails_is_rolled_back_and_requeued_after_a_backoff(kube, make_binder):
    log, binder = await setup(kube, make_binder, backoff=RequeueBackoff(base_s=1.0, max_s=5.0, limit=4))
    async with cluster_running(kube, ["team"], kubelet=False):
        # A Job that names gangway's scheduler itself: no scheduling gate, gangway binds its pods as they come.
        await apply_manifests(kube, job("gang", pods=4, gpus=8, pod_spec=f"schedulerName: {ob.SCHEDULER_NAME}"))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/gang" in wl and wl["team/gang"].phase == "placed",
                        what="the gang placed")
        # Before the binder binds: the last pod (index 3) is taken by someone else's scheduler.
        for _ in range(200):
            pods = await pods_of(kube, "gang")
            if len(pods) == 4:
                break
            await asyncio.sleep(0.02)
        last = pods[-1]["metadata"]["name"]
        await kube.create(api.PODS, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": last},
                                     "target": {"apiVersion": "v1", "kind": "Node", "name": "node-0"}},
                          "team", sub="binding", name=last)
        await run_until(log, [binder], lambda: bool(log.of_type(ev.WorkloadEvicted)), what="the rollback")
        [rolled] = log.of_type(ev.WorkloadEvicted)
        assert "gang not bound" in rolled.reason and "1 of 4 binds refused" in rolled.reason and last in rolled.reason
        assert (rolled.bind_failures, rolled.reason_code) == (1, C.BIND_BACKOFF)
        rolled_at = next(e.time_ms for e in log.envelopes if e.data is rolled)
        # the first backoff: 1 s from the binder's pass (the report is appended when the pass ends)
        assert 0 < rolled.retry_after_ms - rolled_at <= 1000
        # Never half a gang: after the rollback no pod of the first attempt is left on a node.
        await run_until(log, [binder], lambda: wl["team/gang"].attempt == 1 and wl["team/gang"].phase == "bound",
                        what="the second attempt bound")
        # Admitted again only once the backoff ended, on the log's clock (a tick of the binder said so).
        readmitted = [e for e in log.envelopes if isinstance(e.data, ev.WorkloadAdmitted)][-1]
        assert readmitted.time_ms >= rolled.retry_after_ms
        assert any(isinstance(e.data, ev.ClockTicked) and "backoff of team/gang" in e.data.reason for e in log.envelopes)
        pods = await pods_of(kube, "gang")
        assert len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods)
        events, _ = await kube.list(api.EVENTS, "team", field_selector="involvedObject.name=gang")
        assert any(e["reason"] == "GangRolledBack" for e in events)


#: Kueue's own Configuration in the contract file: its waitForPodsReady is the binder's when no flag says otherwise.
PODS_READY_CONFIGURATION = """---
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady:
  enable: true
  timeout: 2s
  requeuingStrategy: {backoffBaseSeconds: 1, backoffMaxSeconds: 5, backoffLimitCount: 4}
"""


@pytest.mark.parametrize("said_by", ["flags", "contract"])
async def test_a_bound_gang_whose_pod_cannot_start_gives_its_nodes_back_and_is_requeued(kube, make_binder, said_by):
    """Kueue's waitForPodsReady: one pod's image does not pull, so the gang's other pod runs on at its
    rendezvous holding GPUs; past the timeout (from admission) the gang is rolled back and requeued
    with the bind backoff, the kubelet's reason in what the log and the Job's owner are told. The
    timeout and backoff are the binder's flags, or Kueue's Configuration in the contract."""
    if said_by == "flags":
        log, binder = await setup(kube, make_binder, pods_ready_timeout_s=2.0,
                                  backoff=RequeueBackoff(base_s=1.0, max_s=5.0, limit=4))
    else:
        log, binder = await setup(kube, make_binder, CONTRACT + PODS_READY_CONFIGURATION)
        assert log.state.contract.pods_ready.timeout_ms == 2000
    async with cluster_running(kube, ["team"], kubelet=False):
        await apply_manifests(kube, job("stuck", pods=2, gpus=8))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/stuck" in wl and wl["team/stuck"].phase == "bound",
                        what="the gang bound")
        first, second = await pods_of(kube, "stuck")
        await kube.patch(api.PODS, first["metadata"]["name"], {"status": {"phase": "Running"}}, "team", sub="status")
        await kube.patch(api.PODS, second["metadata"]["name"], {"status": {"phase": "Pending", "containerStatuses": [
            {"name": "main", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0,
             "state": {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "busybox"'}}}]}},
                         "team", sub="status")
        await run_until(log, [binder], lambda: bool(log.of_type(ev.WorkloadEvicted)), what="the rollback")
        [rolled] = log.of_type(ev.WorkloadEvicted)
        assert rolled.reason.startswith(f"gang not running: 1 of its 2 pods not running 2 s after its admission "
                                        f"({second['metadata']['name']}: ImagePullBackOff: Back-off pulling image")
        assert (rolled.bind_failures, rolled.reason_code) == (1, C.BIND_BACKOFF)
        assert wl["team/stuck"].phase == "pending" and not any(n.free != n.allocatable for n in log.state.nodes.values())
        await run_until(log, [binder], lambda: wl["team/stuck"].attempt == 1 and wl["team/stuck"].phase == "bound",
                        what="the second attempt bound")
        events, _ = await kube.list(api.EVENTS, "team", field_selector="involvedObject.name=stuck")
        assert any(e["reason"] == "GangRolledBack" and "ImagePullBackOff" in e["message"] for e in events)


async def test_a_pod_deleted_after_the_binders_look_is_not_a_refused_bind(kube, make_binder):
    """A controller deletes and re-creates a pod between the binder's look and its bind (as when an object
    created without suspend is suspended at once): the API server says the pod is being deleted. That is a
    pod gone, bound next pass once re-created, not a refused bind that rolls the whole gang back."""
    _, binder = await setup(kube, make_binder)
    await ensure_namespace(kube, "team")
    hold = {"name": "going", "finalizers": ["gangway.test/hold"]}  # keeps it in its being-deleted state
    pod = await kube.create(api.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": hold,
                                       "spec": {"containers": [{"name": "main", "image": "busybox"}]}}, "team")
    try:
        await kube.delete(api.PODS, "going", "team")
        assert (await kube.get(api.PODS, "going", "team"))["metadata"].get("deletionTimestamp")
        assert await binder._bind(pod, "node-0", []) == GONE
    finally:
        await kube.patch(api.PODS, "going", {"metadata": {"finalizers": None}}, "team")
    # A pod someone else bound is still a refusal.
    other = await kube.create(api.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "taken"},
                                         "spec": {"nodeName": "node-1",
                                                  "containers": [{"name": "main", "image": "busybox"}]}}, "team")
    try:
        refused = await binder._bind(other, "node-0", [])
        assert refused not in ("", GONE) and "taken" in refused
    finally:
        await kube.delete(api.PODS, "taken", "team", grace_seconds=0)


async def test_pods_that_never_all_appear_are_rolled_back_after_the_timeout(kube, make_binder):
    log, binder = await setup(kube, make_binder, pods_timeout_s=1.0)
    async with cluster_running(kube, ["team"], hold_back={"slow": 1}):
        await apply_manifests(kube, job("slow", pods=3, gpus=8))
        await run_until(log, [binder], lambda: bool(log.of_type(ev.WorkloadEvicted)), what="the timeout rollback")
        [rolled] = log.of_type(ev.WorkloadEvicted)
        assert "did not all appear within 1 s (main: 2 of 3)" in rolled.reason
        assert (await kube.get(api.JOBS, "slow", "team"))["spec"]["suspend"] is True
        assert all(not p["spec"].get("nodeName") for p in await pods_of(kube, "slow"))


async def test_a_waiting_job_is_told_its_position_why_and_when_it_should_start(kube, make_binder):
    from gangway.read.explain import pending_report
    log, binder = await setup(kube, make_binder, pending=pending_report)
    async with cluster_running(kube, ["team"]):
        runtime = '\n  annotations: {gangway.io/runtime-seconds: "600"}'
        await apply_manifests(kube, job("first", pods=4, gpus=8).replace("queue-name: default}", "queue-name: default}" + runtime))
        await run_until(log, [binder], running(log, "team/first"), what="the first Job running")
        await apply_manifests(kube, job("second", pods=1, gpus=8))
        await run_until(log, [binder], lambda: "team/second" in log.state.workloads, what="the second queued")

        async def told():
            events, _ = await kube.list(api.EVENTS, "team", field_selector="involvedObject.name=second")
            return [e["message"] for e in events if e["reason"] == "Pending"]
        for _ in range(100):
            await log.turn(binder)
            if await told():
                break
            await asyncio.sleep(0.05)
        [message] = await told()
        assert message.startswith("Pending: position 1 of 1 in ClusterQueue team, estimated start ")
        assert " UTC: " in message and "quota" in message
        cond = [c for c in (await kube.get(api.JOBS, "second", "team"))["status"]["conditions"]
                if c["type"] == ob.CONDITION_TYPE][0]
        assert cond["reason"] == "Pending" and cond["message"] == message


def running(log, name: str):
    return lambda: name in log.state.workloads and log.state.workloads[name].phase == "running"


def _other(document: str) -> str:
    return document.replace("{name: team}", "{name: other}").replace("name: default}", "name: other}").replace(
        "clusterQueue: team}", "clusterQueue: other}")


def two_queues(gpus: int = 8) -> str:
    """CONTRACT with ``gpus`` GPUs for ClusterQueue team, and a ClusterQueue other as big, with
    LocalQueue team/other pointing at it."""
    one = CONTRACT.replace("nvidia.com/gpu, nominalQuota: 32}", f"nvidia.com/gpu, nominalQuota: {gpus}}}")
    return one + "---" + "---".join(_other(document) for document in one.split("---")[1:])


async def relabel(kube, name: str, queue: str | None) -> None:
    """Set (None: remove) Job ``name``'s queue-name label."""
    await kube.patch(api.JOBS, name, {"metadata": {"labels": {ob.QUEUE_LABEL: queue}}}, "team")


async def test_a_waiting_jobs_queue_name_label_moves_it_taken_off_withdraws_it_and_a_running_ones_is_ignored(kube, make_binder):
    """Kueue's way: `kubectl label job … kueue.x-k8s.io/queue-name=other --overwrite` on a Job that
    waits moves its workload to LocalQueue other (a queue it cannot go to is refused and it waits
    where it was); on one admitted, the label changes nothing and its owner is told so."""
    log = LocalLog()
    log.configure(load_contract(two_queues()))
    await four_nodes(kube)
    binder = await make_binder()
    await run_until(log, [binder], lambda: len(log.state.nodes) == 4, what="four nodes on the log")
    wl = log.state.workloads
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("first", pods=1, gpus=8))
        await run_until(log, [binder], running(log, "team/first"), what="the first Job running")
        await apply_manifests(kube, job("second", pods=1, gpus=8))
        await run_until(log, [binder], lambda: "team/second" in wl, what="the second Job queued")
        for _ in range(3):
            await log.turn(binder)
        assert wl["team/second"].phase == "pending"  # (ClusterQueue team's 8 GPUs are the first's)

        await relabel(kube, "second", "nowhere")
        await run_until(log, [binder], lambda: log.refused, what="the move refused")
        [refused] = log.refused
        assert refused.reason == "unknown_queue" and refused.message.startswith("moving to queue nowhere: ")
        assert refused.message.endswith("it still waits in queue default"), refused.message
        assert wl["team/second"].spec.queue == "default" and not log.of_type(ev.WorkloadMoved)

        await relabel(kube, "second", "other")
        await run_until(log, [binder], running(log, "team/second"), what="the moved Job running")
        [moved] = log.of_type(ev.WorkloadMoved)
        assert (moved.workload, moved.from_queue, moved.queue, moved.cluster_queue) == (
            "team/second", "default", "other", "other")
        assert wl["team/second"].admission.cluster_queue == "other" and wl["team/second"].spec.queue == "other"
        assert any("moved from queue default to other (ClusterQueue other): queue-name label changed" in line
                   for line in explain(log.envelopes, "team/second"))

        await relabel(kube, "first", "other")

        async def told():
            events, _ = await kube.list(api.EVENTS, "team", field_selector="involvedObject.name=first")
            return [e["message"] for e in events if e["reason"] == "QueueChangeIgnored"]
        [said] = await turn_until(log, [binder], told, what="the owner told")
        assert "the queue-name label says other, but team/first is running from queue default" in said
        for _ in range(3):
            await log.turn(binder)
        assert len(await told()) == 1 and len(log.of_type(ev.WorkloadMoved)) == 1
        assert wl["team/first"].spec.queue == "default" and wl["team/first"].phase == "running"

        # The label taken off a waiting Job: gangway schedules it no more (it stays suspended).
        await apply_manifests(kube, job("third", pods=1, gpus=8))
        await run_until(log, [binder], lambda: "team/third" in wl, what="the third Job queued")
        await relabel(kube, "third", None)
        await run_until(log, [binder], lambda: wl["team/third"].phase == "finished", what="the third Job withdrawn")
        [w] = log.of_type(ev.WorkloadWithdrawn)
        assert w.reason.endswith("its queue-name label removed: gangway schedules it no more"), w.reason
        assert (await kube.get(api.JOBS, "third", "team"))["spec"]["suspend"] is True


async def test_a_job_past_its_maximum_execution_time_is_evicted_and_deactivated_on_the_api_server(kube, make_binder):
    """Kueue's ``kueue.x-k8s.io/max-exec-time-seconds``: admitted that long, the Job is suspended, its
    pods go, its owner is told it is deactivated, and it is never admitted again."""
    log = LocalLog()
    log.configure(load_contract(CONTRACT + """---
apiVersion: gangway.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: default}
spec: {defaultGracePeriodSeconds: 1}
"""))
    await four_nodes(kube)
    binder = await make_binder()
    await run_until(log, [binder], lambda: len(log.state.nodes) == 4, what="four nodes on the log")
    wl = log.state.workloads
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("capped", pods=2, gpus=4).replace(
            "queue-name: default}", 'queue-name: default, kueue.x-k8s.io/max-exec-time-seconds: "2"}'))
        await run_until(log, [binder], running(log, "team/capped"), what="the capped Job running")
        assert wl["team/capped"].spec.max_execution_ms == 2000
        await run_until(log, [binder], lambda: wl["team/capped"].deactivated_code is not None, timeout_s=30,
                        what="the capped Job deactivated")
        [order] = log.of_type(ev.EvictionOrdered)
        assert (order.reason_code, order.preemptor) == (C.MAX_EXECUTION_TIME_EXCEEDED, "MaximumExecutionTime")
        admitted = next(e for e in log.envelopes if isinstance(e.data, ev.WorkloadAdmitted))
        assert order.workload == "team/capped" and log.envelopes[-1].time_ms - admitted.time_ms >= 2000
        assert wl["team/capped"].deactivated_code == C.MAX_EXECUTION_TIME_EXCEEDED
        assert (await kube.get(api.JOBS, "capped", "team"))["spec"]["suspend"] is True
        assert not await pods_of(kube, "capped")
        events, _ = await kube.list(api.EVENTS, "team", field_selector="involvedObject.name=capped")
        [told] = [e for e in events if e["reason"] == "Deactivated"]
        assert told["type"] == "Warning" and told["message"].startswith(
            "Deactivated for its maximum execution time: admitted for 2 s in all, its maximum execution time (label "
            "kueue.x-k8s.io/max-exec-time-seconds: 2): deactivated"), told["message"]
        for _ in range(20):  # never queued again
            await log.turn(binder)
            await asyncio.sleep(0.05)
        assert len(log.of_type(ev.WorkloadAdmitted)) == 1 and wl["team/capped"].phase != "running"


async def test_a_job_naming_one_of_the_clusters_priority_classes_takes_its_value(kube, make_binder):
    """Kueue reads the cluster's PriorityClasses: one created in the cluster (not in the contract) is
    put on the log by the binder, and a Job whose pod template names it is queued with its value; the
    cluster's globalDefault class gives a Job naming none its value (this contract says no default)."""
    for name, value, default in [("team-high", 500, False), ("team-normal", 40, True)]:
        await kube.create(api.PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                 "metadata": {"name": name}, "value": value,
                                                 "globalDefault": default})
    log, binder = await setup(kube, make_binder)
    await run_until(log, [binder], lambda: log.state.cluster_priority_classes.get("team-high") == 500
                    and log.state.cluster_default_class == "team-normal", what="the cluster's PriorityClasses on the log")
    assert log.state.cluster_priority_classes["system-cluster-critical"] == 2_000_000_000  # (Kubernetes' own)
    await apply_manifests(kube, job("urgent", pods=1, gpus=1, pod_spec="priorityClassName: team-high"))
    await apply_manifests(kube, job("plain", pods=1, gpus=1))
    await run_until(log, [binder], lambda: {"team/urgent", "team/plain"} <= set(log.state.workloads),
                    what="the Jobs queued")
    assert log.state.workloads["team/urgent"].spec.priority == 500
    assert log.state.workloads["team/plain"].spec.priority == 40
    await kube.delete(api.PRIORITY_CLASSES, "team-high")
    await run_until(log, [binder], lambda: "team-high" not in log.state.cluster_priority_classes,
                    what="the deleted PriorityClass gone from the log")
    normal = await kube.get(api.PRIORITY_CLASSES, "team-normal")
    normal["globalDefault"] = False
    await kube.replace(api.PRIORITY_CLASSES, "team-normal", normal)
    await run_until(log, [binder], lambda: log.state.cluster_default_class == "",
                    what="the class no longer globalDefault on the log")
