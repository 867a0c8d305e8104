"""The binder when the cluster misbehaves: PodDisruptionBudgets, a binder killed mid-gang, nodes cordoned
and deleted under running work, watches that expire, two replicas and one Lease."""

from __future__ import annotations

import asyncio
import collections
import time

import pytest

from conftest import kill, wait_leading
from gangway.adapters.kubernetes import client as api
from gangway.events import catalogue as ev
from gangway.events.reasons import C
from gangway.services.binder import objects as ob
from k8s_harness import cluster_running, LocalLog, apply_manifests, create_node, ensure_namespace, node_object, run_until
from test_kubernetes_binder import job, pods_of, setup

pytestmark = pytest.mark.kubernetes


def running(log: LocalLog, name: str):
    return lambda: name in log.state.workloads and log.state.workloads[name].phase == "running"


async def test_a_pdb_refuses_the_eviction_until_the_grace_period_ends_then_the_pods_are_deleted(kube, make_binder):
    log, binder = await setup(kube, make_binder)
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("guarded", pods=2, gpus=8))
        await run_until(log, [binder], running(log, "team/guarded"), what="the guarded Job running")
        await kube.create(api.PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                     "metadata": {"name": "keep-all", "namespace": "team"},
                                     "spec": {"minAvailable": 2,
                                              "selector": {"matchLabels": {"batch.kubernetes.io/job-name": "guarded"}}}},
                          "team")
        grace_ms = 2000
        wl = log.state.workloads["team/guarded"]
        log.append("evict/test", ev.EvictionOrdered(workload="team/guarded", preemptor="team/urgent",
                                                    based_on=log.state.offset, grace_ms=grace_ms, reason="test order"))
        ordered = time.monotonic()
        await log.turn(binder)
        # Suspended before its pods leave (as Kueue): the Job controller does not count them as failed.
        assert (await kube.get(api.JOBS, "guarded", "team"))["spec"]["suspend"] is True
        assert len([p for p in await pods_of(kube, "guarded") if p["spec"].get("nodeName")]) == 2  # (the budget)
        await run_until(log, [binder], lambda: wl.phase == "pending", what="the eviction done")
        took = time.monotonic() - ordered
        [evicted] = log.of_type(ev.WorkloadEvicted)
        assert evicted.preemptor == "team/urgent" and "pods gone" in evicted.reason
        # The budget held the pods for the whole grace period, then they were deleted.
        assert took >= grace_ms / 1000
        [state] = [e for e in binder.evicting.values()] or [None]
        assert state is None  # forgotten once done
        assert not [p for p in await pods_of(kube, "guarded") if p["spec"].get("nodeName")]
        assert (await kube.get(api.JOBS, "guarded", "team"))["spec"]["suspend"] is True
        events, _ = await kube.list(api.EVENTS, "team", field_selector="involvedObject.name=guarded")
        assert any(e["reason"] == "Preempted" and "team/urgent" in e["message"] for e in events)


async def test_without_a_pdb_the_eviction_api_frees_the_pods_at_once(kube, make_binder):
    log, binder = await setup(kube, make_binder)
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("free", pods=2, gpus=8))
        await run_until(log, [binder], running(log, "team/free"), what="running")
        wl = log.state.workloads["team/free"]
        log.append("evict/test", ev.EvictionOrdered(workload="team/free", preemptor="team/urgent",
                                                    based_on=log.state.offset, grace_ms=60_000, reason="test order"))
        ordered = time.monotonic()
        await run_until(log, [binder], lambda: wl.phase == "pending", what="the eviction done")
        assert time.monotonic() - ordered < 10  # not the 60 s grace: the Eviction API let the pods go


async def test_a_binder_killed_mid_gang_is_replaced_and_the_gang_completes(kube, make_binder):
    log, first = await setup(kube, make_binder, bind_concurrency=1)
    second = await make_binder("binder-1")
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("gang", pods=4, gpus=8))
        wl = log.state.workloads
        await run_until(log, [first, second], lambda: "team/gang" in wl and wl["team/gang"].phase == "placed",
                        what="placed")
        for _ in range(200):  # all four pods exist
            if len(await pods_of(kube, "gang")) == 4:
                break
            await asyncio.sleep(0.02)
        assert await wait_leading(first, second) is first  # the one to kill holds the lease
        # Turns of the first binder until one pod is bound (a turn may bind nothing yet: its
        # informer may not have seen the pods), then the binder dies before the others.
        turn = asyncio.create_task(log.turn(first))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            bound = [p for p in await pods_of(kube, "gang") if p["spec"].get("nodeName")]
            if bound:
                break
            if turn.done():
                turn.result()  # (a turn that failed fails the test here)
                turn = asyncio.create_task(log.turn(first))
            await asyncio.sleep(0.005)
        turn.cancel()
        await asyncio.gather(turn, return_exceptions=True)
        await kill(first)  # the binder dies between two binds, its lease unreleased
        killed = time.monotonic()
        bound = [p for p in await pods_of(kube, "gang") if p["spec"].get("nodeName")]
        assert 1 <= len(bound) < 4
        await run_until(log, [second], lambda: wl["team/gang"].phase in ("bound", "running"), what="the gang bound")
        took = time.monotonic() - killed
        assert took < 2.0 * 2 + 2  # the 2 s lease expired, then the standby finished the gang
        assert not log.of_type(ev.WorkloadEvicted)
        placement = log.of_type(ev.PlacementDecided)[-1]
        want = [a.node for a in placement.assignments for _ in range(a.count)]
        assert [p["spec"]["nodeName"] for p in await pods_of(kube, "gang")] == want


async def test_only_the_lease_holder_acts_and_a_standby_takes_over_within_seconds(kube, make_binder):
    log, first = await setup(kube, make_binder)
    second = await make_binder("binder-1")
    assert await wait_leading(first, second) is first
    await apply_manifests(kube, job("one", pods=1, gpus=1))
    for _ in range(10):
        out = await second.step(log.state)
        assert not out.reports and not out.submissions
        await asyncio.sleep(0.05)
    await kill(first)
    killed = time.monotonic()
    assert await wait_leading(second) is second
    assert time.monotonic() - killed < 2.0 + 1.5  # lease 2 s, renewals every 2/3 s
    await run_until(log, [second], lambda: "team/one" in log.state.workloads, what="the standby's intake")


async def test_a_node_cordoned_keeps_its_work_and_a_node_deleted_requeues_it(kube, make_binder):
    log, binder = await setup(kube, make_binder)
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("resident", pods=1, gpus=8))
        await run_until(log, [binder], running(log, "team/resident"), what="running")
        [pod] = await pods_of(kube, "resident")
        home = pod["spec"]["nodeName"]
        await kube.patch(api.NODES, home, {"spec": {"unschedulable": True}})
        await run_until(log, [binder], lambda: home in log.state.unavailable, what="the cordon on the log")
        assert home not in log.state.nodes and log.state.unavailable[home].startswith("cordoned")
        assert log.state.workloads["team/resident"].phase == "running"
        # New work avoids it.
        await apply_manifests(kube, job("newcomer", pods=3, gpus=8))
        await run_until(log, [binder], running(log, "team/newcomer"), what="the newcomer running")
        assert home not in {p["spec"]["nodeName"] for p in await pods_of(kube, "newcomer")}
        # Deleted under running work: the workload requeues and runs elsewhere once room frees.
        await kube.delete(api.NODES, home)
        await run_until(log, [binder], lambda: log.of_type(ev.NodeRemoved), what="NodeRemoved")
        assert log.state.workloads["team/resident"].attempt == 1
        await create_node(kube, node_object("node-new"), {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"})
        await run_until(log, [binder], running(log, "team/resident"), what="the resident running again")
        [pod] = [p for p in await pods_of(kube, "resident") if not p["metadata"].get("deletionTimestamp")]
        assert pod["spec"]["nodeName"] == "node-new"


async def test_a_watch_that_expires_lists_again_and_misses_nothing(kube, make_binder):
    log, binder = await setup(kube, make_binder, watch_timeout_s=1)
    jobs = binder.reflectors["Job"]
    # Created while the binder's Job watch is down (its next watch asks for a version long compacted
    # out of the API server's watch cache: 410 Gone), so only the re-list can find it.
    jobs.resource_version = "1"
    deadline = time.monotonic() + 10
    while jobs.gone == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert jobs.gone >= 1
    lists = jobs.lists
    await apply_manifests(kube, job("meanwhile", pods=1, gpus=1))
    await run_until(log, [binder], lambda: "team/meanwhile" in log.state.workloads, what="the Job seen after 410",
                    timeout_s=20)
    assert jobs.lists > lists - 1


async def test_a_kind_the_cluster_does_not_serve_leaves_the_binder_working_with_the_others(kube, make_binder, monkeypatch):
    """A cluster without the Kubeflow training operator (no PyTorchJob CRD; here a version of it not
    served): the binder syncs without that kind, says so, and admits and binds Jobs as ever (it
    waited for a list that could never succeed, and acted on nothing, before)."""
    from gangway.services.binder import kubernetes as binder_mod
    monkeypatch.setitem(binder_mod.RESOURCES, "PyTorchJob", api.Resource("kubeflow.org", "v9", "pytorchjobs", "PyTorchJob"))
    log, binder = await setup(kube, make_binder)
    absent = binder.reflectors["PyTorchJob"]
    assert absent.absent and absent.synced.is_set() and not absent.store
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("plain", pods=2, gpus=4))
        await run_until(log, [binder], running(log, "team/plain"), what="a Job running beside the kind not served")
    assert binder.reflectors["PyTorchJob"].absent and not binder.reflectors["Job"].absent


async def test_gpus_held_by_a_pod_gangway_does_not_manage_are_not_given_to_a_gang(kube, make_binder):
    """An inference server's pod (no queue label, bound by another scheduler) holds node-0's 8 GPUs:
    the log's view of node-0 leaves them out, a gang of three 8-GPU pods runs on the other nodes, and
    the GPUs come back once that pod is gone."""
    log, binder = await setup(kube, make_binder)
    await ensure_namespace(kube, "infer")
    gpus = {"nvidia.com/gpu": "8"}
    await kube.create(api.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "serving", "namespace": "infer"},
                                 "spec": {"nodeName": "node-0", "containers": [
                                     {"name": "server", "image": "vllm", "resources": {"requests": gpus, "limits": gpus}}]}},
                      "infer")
    await run_until(log, [binder], lambda: log.state.nodes["node-0"].allocatable.get("nvidia.com/gpu") == 0,
                    what="node-0's GPUs held by the serving pod")
    [seen] = [e.data for e in log.envelopes if isinstance(e.data, ev.NodeObserved) and e.data.held_by_others]
    assert seen.node == "node-0" and seen.held_by_others["nvidia.com/gpu"] == 8000
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("trio", pods=3, gpus=8))
        await run_until(log, [binder], running(log, "team/trio"), what="the gang running")
        assert sorted(p["spec"]["nodeName"] for p in await pods_of(kube, "trio")) == ["node-1", "node-2", "node-3"]
    await kube.delete(api.PODS, "serving", "infer", grace_seconds=0)
    await run_until(log, [binder], lambda: log.state.nodes["node-0"].allocatable.get("nvidia.com/gpu") == 8000,
                    what="node-0's GPUs back once the serving pod is gone")


async def test_a_nodes_pod_count_is_counted_for_every_pod_on_it(kube, make_binder):
    """node-0 takes 3 pods (its kubelet's max-pods) and two pods of another scheduler asking for
    nothing run there: one pod's room is left, whatever its GPUs. A Job of four 1-GPU pods puts
    one pod there at most (before, all four: best fit fills the first node)."""
    log, binder = await setup(kube, make_binder)
    await ensure_namespace(kube, "infer")
    await kube.patch(api.NODES, "node-0", {"status": {"allocatable": {
        "cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "3"}}}, sub="status")
    for name in ("agent-a", "agent-b"):
        await kube.create(api.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "infer"},
                                     "spec": {"nodeName": "node-0", "containers": [{"name": "c", "image": "agent"}]}},
                          "infer")
    await run_until(log, [binder], lambda: log.state.nodes["node-0"].allocatable.get("pods") == 1000,
                    what="node-0's pods held by the two agents")
    [seen] = [e.data for e in log.envelopes if isinstance(e.data, ev.NodeObserved) and e.data.held_by_others][-1:]
    assert seen.held_by_others == {"pods": 2000}
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("four", pods=4, gpus=1))
        await run_until(log, [binder], running(log, "team/four"), what="the four pods running")
        on = collections.Counter(p["spec"]["nodeName"] for p in await pods_of(kube, "four"))
        assert on["node-0"] <= 1 and sum(on.values()) == 4, on
        assert {n: log.state.nodes[n].free["pods"] for n in on} == {n: 110_000 - k * 1000 if n != "node-0" else 0
                                                                    for n, k in on.items()}


async def test_a_pod_of_a_bound_gang_replaced_by_its_controller_is_bound_in_the_place_it_left(kube, make_binder):
    """The controller re-creates a deleted pod (same name, new uid, unbound, gated) before the
    binder's next look: the gang is bound, not running, so only the uid tells the replacement. It is
    bound where its predecessor was (node and GPUs), the workload keeps its attempt (the retry is the
    controller's, as with Kueue), and the log says what was found and done."""
    log, binder = await setup(kube, make_binder)
    wl = log.state.workloads
    async with cluster_running(kube, ["team"], kubelet=False):
        await apply_manifests(kube, job("quick", pods=2, gpus=4))
        await run_until(log, [binder], lambda: "team/quick" in wl and wl["team/quick"].phase == "bound",
                        what="the Job bound")
        gone = (await pods_of(kube, "quick"))[0]
        first = gone["metadata"]
        await kube.delete(api.PODS, first["name"], "team", grace_seconds=0)
        for _ in range(200):  # the re-created pod in the binder's cache before it looks again
            again = next((p for p in binder.reflectors["Pod"].store.values() if p["metadata"]["name"] == first["name"]),
                         None)
            if again is not None and again["metadata"]["uid"] != first["uid"]:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the controller did not re-create the pod")
        await run_until(log, [binder], lambda: log.of_type(ev.ClusterReconciled), what="the replaced pod found")
        [found] = log.of_type(ev.ClusterReconciled)
        assert (found.reason_code, found.kind, found.namespace, found.name) == (C.PODS_REPLACED, "Job", "team", "quick")
        assert (found.workload, found.attempt, found.pods) == ("team/quick", 0, [first["name"]])
        assert found.nodes == [gone["spec"]["nodeName"]] and found.action == "each bound in the place its predecessor left"
        replacement = await kube.get(api.PODS, first["name"], "team")
        assert replacement["metadata"]["uid"] != first["uid"] and replacement["spec"]["nodeName"] == gone["spec"]["nodeName"]
        assert replacement["metadata"]["annotations"][ob.GPUS_ANNOTATION] == first["annotations"][ob.GPUS_ANNOTATION]
        for _ in range(5):
            await log.turn(binder)
        assert (wl["team/quick"].phase, wl["team/quick"].attempt) == ("bound", 0)
        assert not log.of_type(ev.WorkloadEvicted) and len(log.of_type(ev.ClusterReconciled)) == 1


async def lost_where_it_cannot_run_again(kube, make_binder, name: str, spoil, restore=None):
    """A gang of two 8-GPU pods running; ``spoil(log, binder, node)`` makes the node of its first pod
    one that cannot take that pod again (and waits until the log says so); that pod deleted, the gang
    must be placed anew and run elsewhere. Returns the node, the eviction and the log; ``restore(node)``
    puts the node back, whatever happened."""
    log, binder = await setup(kube, make_binder)
    wl = log.state.workloads
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job(name, pods=2, gpus=8))
        await run_until(log, [binder], lambda: f"team/{name}" in wl and wl[f"team/{name}"].phase == "running",
                        what="the gang running")
        victim = (await pods_of(kube, name))[0]
        node = victim["spec"]["nodeName"]
        try:
            await spoil(log, binder, node)
            await kube.delete(api.PODS, victim["metadata"]["name"], "team", grace_seconds=0)
            await run_until(log, [binder], lambda: (wl[f"team/{name}"].attempt, wl[f"team/{name}"].phase) == (1, "running"),
                            what="the gang placed anew and running")
            [evicted] = log.of_type(ev.WorkloadEvicted)
            assert node not in {p["spec"]["nodeName"] for p in await pods_of(kube, name)}
            return node, evicted, log
        finally:
            if restore is not None:
                await restore(node)


async def test_a_pod_drained_off_a_cordoned_node_is_not_replaced_there_the_gang_is_placed_anew(kube, make_binder):
    """kubectl drain: the node cordoned, then its pods evicted. The replacement its controller makes is
    not bound back onto the cordoned node (a bind ignores the cordon): the gang is requeued once its
    pods are gone, and placed on nodes that take pods."""
    async def cordon(log, binder, node):
        await kube.patch(api.NODES, node, {"spec": {"unschedulable": True}})
        await run_until(log, [binder], lambda: node in log.state.unavailable, what="the node cordoned")
    node, evicted, log = await lost_where_it_cannot_run_again(kube, make_binder, "drained", cordon)
    assert f"their place on node {node} unavailable (" in evicted.reason, evicted.reason
    assert not [f for f in log.of_type(ev.ClusterReconciled) if f.reason_code == C.PODS_REPLACED]


async def test_a_pod_lost_on_a_node_short_of_a_device_is_not_replaced_there_the_gang_is_placed_anew(kube, make_binder):
    """A GPU gone unhealthy: the device plugin reports one fewer allocatable, and the pod that held it
    fails. The node stays (its islands unknown: which GPU is gone is not said); the replacement is not bound back there (the kubelet would refuse it, again and again until the Job's
    backoffLimit or the recovery timeout): the gang is requeued at once and placed on nodes with room."""
    # (the device plugin takes it out of allocatable; the capacity, and the islands, still count it)
    seven = {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "7", "pods": "110"}

    async def lose_a_gpu(log, binder, node):
        await kube.patch(api.NODES, node, {"status": {"allocatable": seven}}, sub="status")
        await run_until(log, [binder], lambda: log.state.nodes[node].allocatable["nvidia.com/gpu"] == 7000,
                        what="the node's seven GPUs on the log")
        assert log.state.workloads["team/sick"].phase == "running"  # (what runs there keeps running)

    async def heal(node):
        await kube.patch(api.NODES, node, {"status": {"allocatable": {**seven, "nvidia.com/gpu": "8"}}}, sub="status")
    node, evicted, _ = await lost_where_it_cannot_run_again(kube, make_binder, "sick", lose_a_gpu, heal)
    assert (f"their place on node {node} unavailable (7 nvidia.com/gpu left to gangway there, 8 nvidia.com/gpu "
            "placed: a device gone unhealthy") in evicted.reason, evicted.reason


async def test_what_reconciling_finds_is_fixed_and_written_onto_the_log(kube, make_binder):
    log, binder = await setup(kube, make_binder)
    wl = log.state.workloads
    # An object someone resumed by hand, its pods bound by another scheduler, the log knowing nothing of it.
    rogue = job("rogue", pods=2, gpus=8, suspend=False).replace(
        "labels: {kueue.x-k8s.io/queue-name: default}",
        "labels: {kueue.x-k8s.io/queue-name: default}\n  annotations: {gangway.io/workload: team/rogue, "
        "gangway.io/attempt: '0'}")
    for i, node in enumerate(("node-2", "node-3")):
        await kube.create(api.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"rogue-{i}", "namespace": "team", "labels": {"batch.kubernetes.io/job-name": "rogue"}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]}}, "team")
    for _ in range(100):  # the binder's cache has both pods before their Job appears
        if sum(1 for p in binder.reflectors["Pod"].store.values() if p["metadata"]["name"].startswith("rogue")) == 2:
            break
        await asyncio.sleep(0.02)
    [obj] = await apply_manifests(kube, rogue)
    await run_until(log, [binder], lambda: log.of_type(ev.ClusterReconciled), what="the rogue Job found")
    found = log.of_type(ev.ClusterReconciled)[-1]
    assert (found.reason_code, found.name, found.uid, found.workload) == (
        C.RESUMED_WITHOUT_PLACEMENT, "rogue", obj["metadata"]["uid"], None)
    assert (found.pods, found.nodes) == (["rogue-0", "rogue-1"], ["node-2", "node-3"])
    assert found.action == "suspended again, 2 pod(s) deleted"
    assert (await kube.get(api.JOBS, "rogue", "team"))["spec"]["suspend"] is True
    assert not [p for p in await pods_of(kube, "rogue") if not p["metadata"].get("deletionTimestamp")]
    # Once suspended it is an ordinary submission; nothing is found twice.
    await run_until(log, [binder], lambda: "team/rogue" in wl, what="the rogue Job queued")
    for _ in range(5):
        await log.turn(binder)
    assert len(log.of_type(ev.ClusterReconciled)) == 1
    assert binder.found[-1] == found.reason


async def test_a_job_that_fails_while_it_waits_leaves_its_queue(kube, make_binder):
    """A Job that ended (here: failed) while gangway held it pending was admitted, resumed and rolled
    back again and again (a stranger's report with a real Job controller): it is withdrawn."""
    log, binder = await setup(kube, make_binder)
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("too-big", pods=64, gpus=8))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/too-big" in wl, what="queued")
        assert wl["team/too-big"].phase == "pending"
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cond = {"status": "True", "reason": "DeadlineExceeded", "message": "too late", "lastTransitionTime": now,
                "lastProbeTime": now}
        await kube.patch(api.JOBS, "too-big", {"status": {"startTime": now, "conditions": [
            {"type": "FailureTarget", **cond}, {"type": "Failed", **cond}]}}, "team", sub="status")
        await run_until(log, [binder], lambda: wl["team/too-big"].phase == "finished", what="the withdrawal")
        [w] = log.of_type(ev.WorkloadWithdrawn)
        assert w.reason == "Job Failed (DeadlineExceeded: too late) while gangway held it pending"
        # its condition no longer says where it waits
        cond = [c for c in (await kube.get(api.JOBS, "too-big", "team"))["status"]["conditions"]
                if c["type"] == ob.CONDITION_TYPE][0]
        assert (cond["reason"], cond["message"]) == ("Withdrawn", f"Withdrawn by gangway: {w.reason}")


async def test_a_waiting_job_resumed_by_hand_is_suspended_again(kube, make_binder):
    """kubectl patch spec.suspend=false on a Job gangway held pending left it resumed, its pods made
    without the scheduling gate (a stranger's report): the reconcile suspends it again."""
    log, binder = await setup(kube, make_binder)
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("sneaky", pods=64, gpus=8))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/sneaky" in wl, what="queued")
        await kube.patch(api.JOBS, "sneaky", {"spec": {"suspend": False}}, "team")
        await run_until(log, [binder], lambda: log.of_type(ev.ClusterReconciled), what="the resumed Job found")
        [found] = log.of_type(ev.ClusterReconciled)
        assert (found.reason_code, found.name, found.workload) == (C.RESUMED_WITHOUT_PLACEMENT, "sneaky", "team/sneaky")
        assert (await kube.get(api.JOBS, "sneaky", "team"))["spec"]["suspend"] is True
        assert wl["team/sneaky"].phase == "pending"
