"""A plain batch/v1 Job — no schedulerName, as Kueue users write it — placed through a scheduling gate:
the suspended Job's template gains gangway's gate, each pod is created gated, pinned to its node
(a ``kubernetes.io/hostname`` nodeSelector) and ungated, then bound; a pod that cannot be ungated and
bound rolls the gang back, requeued with a backoff, and deactivated after too many failed binds."""

from __future__ import annotations

import pytest

from gangway.adapters.kubernetes import client as api
from gangway.events import catalogue as ev
from gangway.events.reasons import C
from gangway.read.explain import explain
from gangway.services.binder import objects as ob
from gangway.services.binder.policy import RequeueBackoff
from k8s_harness import cluster_running, apply_manifests, run_until
from test_kubernetes_binder import job, pods_of, setup

pytestmark = pytest.mark.kubernetes


async def test_a_job_without_a_scheduler_name_is_placed_through_a_gate_and_bound_as_a_gang(kube, make_binder):
    log, binder = await setup(kube, make_binder)
    for i in range(4):  # what every kubelet labels its node with
        await kube.patch(api.NODES, f"node-{i}", {"metadata": {"labels": {"kubernetes.io/os": "linux"}}})
    await run_until(log, [binder], lambda: all(n.labels.get("kubernetes.io/os") for n in log.state.nodes.values()),
                    what="the nodes' labels on the log")
    async with cluster_running(kube, ["team"], kubelet=False) as cluster:
        await apply_manifests(kube, job("plain", pods=4, gpus=4, pod_spec="nodeSelector: {kubernetes.io/os: linux}"))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/plain" in wl and wl["team/plain"].phase == "bound",
                        what="the plain Job bound")
        current = await kube.get(api.JOBS, "plain", "team")
        template = current["spec"]["template"]["spec"]
        assert "schedulerName" not in template or template["schedulerName"] == "default-scheduler"
        assert {"name": ob.GATE} in template["schedulingGates"]
        assert len(cluster.created) == 4  # the Job's controller made them from the gated template
        [placement] = log.of_type(ev.PlacementDecided)
        want = [a.node for a in placement.assignments for _ in range(a.count)]
        pods = await pods_of(kube, "plain")
        assert [p["spec"]["nodeName"] for p in pods] == want
        for pod, node in zip(pods, want):
            assert not pod["spec"].get("schedulingGates")
            # pinned where the placement put it, the template's own selector kept
            assert pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux", ob.HOSTNAME_LABEL: node}
            assert len(pod["metadata"]["annotations"][ob.GPUS_ANNOTATION].split(",")) == 4
        assert binder.pods_bound == 4


async def test_a_pod_held_by_another_gate_rolls_the_gang_back_and_after_the_limit_it_is_deactivated(kube, make_binder):
    log, binder = await setup(kube, make_binder, backoff=RequeueBackoff(base_s=0.5, max_s=1.0, limit=2))
    async with cluster_running(kube, ["team"], kubelet=False):
        await apply_manifests(kube, job("held", pods=2, gpus=8, pod_spec="schedulingGates: [{name: example.com/hold}]"))
        wl = log.state.workloads
        await run_until(log, [binder], lambda: "team/held" in wl and wl["team/held"].phase == "finished",
                        what="the held Job deactivated", timeout_s=40)
        first, last = log.of_type(ev.WorkloadEvicted)
        assert (first.bind_failures, first.reason_code, last.bind_failures, last.reason_code) == (
            1, C.BIND_BACKOFF, 2, C.BIND_FAILURES_EXCEEDED)
        assert "held by scheduling gate(s) example.com/hold" in first.reason
        assert wl["team/held"].deactivated and "limit 2" in wl["team/held"].deactivated
        assert len(log.of_type(ev.WorkloadAdmitted)) == 2  # no third try
        assert all(v == 0 for v in log.state.usage["team"].values())
        # No pod of it is left on a node, the Job is suspended, and kubectl describe says why.
        assert not [p for p in await pods_of(kube, "held") if p["spec"].get("nodeName")]
        current = await kube.get(api.JOBS, "held", "team")
        assert current["spec"]["suspend"] is True
        cond = [c for c in current["status"]["conditions"] if c["type"] == ob.CONDITION_TYPE][0]
        assert cond["reason"] == "Deactivated" and "2 failed binds in a row" in cond["message"]
        lines = explain(log.envelopes, "team/held", forecast=False)
        assert lines[-1].startswith(f"now deactivated ({C.BIND_FAILURES_EXCEEDED})")


async def test_taints_and_node_selectors_of_the_cluster_decide_where_pods_go(kube, make_binder):
    log, binder = await setup(kube, make_binder)
    await kube.patch(api.NODES, "node-0", {"spec": {"taints": [
        {"key": "gangway.io/reserved", "value": "serving", "effect": "NoSchedule"}]}})
    await kube.patch(api.NODES, "node-3", {"metadata": {"labels": {"pool": "y"}}})
    await run_until(log, [binder], lambda: log.state.nodes["node-0"].taints and
                    log.state.nodes["node-3"].labels.get("pool") == "y", what="the taint and label on the log")
    wl = log.state.workloads

    def nodes_of(name: str) -> set[str]:
        return {a.node for a in wl[name].placement.assignments}
    async with cluster_running(kube, ["team"]):
        await apply_manifests(kube, job("picky", pods=1, gpus=8, pod_spec="nodeSelector: {pool: \"y\"}"))
        await run_until(log, [binder], lambda: "team/picky" in wl and wl["team/picky"].phase == "running",
                        what="the picky Job running")
        assert nodes_of("team/picky") == {"node-3"}
        # Three more whole nodes are free, but one is tainted: a gang of three that does not tolerate it waits.
        await apply_manifests(kube, job("plain", pods=3, gpus=8))
        await run_until(log, [binder], lambda: "team/plain" in wl, what="the plain Job queued")
        for _ in range(5):
            await log.turn(binder)
        assert wl["team/plain"].phase == "pending"
        await apply_manifests(kube, job("tolerant", pods=1, gpus=8, pod_spec=(
            "tolerations: [{key: gangway.io/reserved, operator: Exists, effect: NoSchedule}]")))
        await run_until(log, [binder], lambda: "team/tolerant" in wl and wl["team/tolerant"].phase == "running",
                        what="the tolerant Job running")
        assert nodes_of("team/tolerant") == {"node-0"}
        [pod] = await pods_of(kube, "tolerant")
        assert pod["spec"]["nodeName"] == "node-0"
        # Required node affinity: of node-1 and node-2, the one its term names.
        await apply_manifests(kube, job("affine", pods=1, gpus=8, pod_spec=(
            "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
            "[{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [node-2]}]}]}}}")))
        await run_until(log, [binder], lambda: "team/affine" in wl and wl["team/affine"].phase == "running",
                        what="the affine Job running")
        assert nodes_of("team/affine") == {"node-2"}
        assert wl["team/plain"].phase == "pending"
