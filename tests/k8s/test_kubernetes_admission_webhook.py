"""The binder's webhook called by a real kube-apiserver: infra/k8s/binder-webhook.yaml registered (its
Service swapped for a loopback URL), gangway's own certificate made and its CA published by the
binder's ServiceAccount, objects created unsuspended stored suspended, and one no contract admits
refused as it is created; an update changing what gangway read refused, one resuming a waiting Job
by hand suspended again."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
import yaml

from conftest import BINDER_NAMESPACE, USED
from gangway.adapters.broker import free_ports
from gangway.adapters.kubernetes import ApiError, Kube
from gangway.adapters.kubernetes import client as api
from gangway.events.kubeflow import TRAINING_KINDS
from gangway.services.binder import webhook as wh
from gangway.services.submission.kubernetes import check_object
import k8s_envtest as envtest
from k8s_harness import ensure_namespace

pytestmark = pytest.mark.kubernetes
MANIFEST = envtest.ROOT / "infra" / "k8s" / "binder-webhook.yaml"


async def register_on_loopback(kube) -> int:
    """infra/k8s/binder-webhook.yaml's configuration registered with a loopback URL instead of its
    Service (as for a binder outside the cluster); returns the port to serve on."""
    [port] = free_ports(1)
    configuration = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d["kind"] == "MutatingWebhookConfiguration"][0]
    [hook] = configuration["webhooks"]
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{hook['clientConfig']['service']['path']}"}
    await kube.create(wh.WEBHOOK_CONFIGURATIONS, configuration)
    return port


def job(name: str, kind: str = "Job", labels: dict | None = None, owner: dict | None = None) -> tuple[api.Resource, dict]:
    meta = {"name": name, "namespace": "team",
            "labels": {"kueue.x-k8s.io/queue-name": "default"} if labels is None else labels}
    if owner:
        meta["ownerReferences"] = [owner]
    pod = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
                                                              "resources": {"requests": {"cpu": "100m"}}}]}}
    if kind in TRAINING_KINDS:
        training = TRAINING_KINDS[kind]
        return api.TRAINING_JOBS[kind], {"apiVersion": training.api_version, "kind": kind, "metadata": meta,
                                         "spec": {training.replica_specs: {"Worker": {"replicas": 1, "template": pod}}}}
    return api.JOBS, {"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": {"template": pod}}


async def test_a_job_created_unsuspended_is_stored_suspended_by_gangways_webhook(kube, binder_kubeconfig):
    names = [*wh.service_names(wh.SERVICE, BINDER_NAMESPACE), "127.0.0.1"]
    await ensure_namespace(kube, "team")
    port = await register_on_loopback(kube)
    sa = await Kube.connect(kubeconfig=binder_kubeconfig)
    stop = asyncio.Event()
    serving = None
    try:
        try:  # (a Secret left by an earlier run of this test on the same control plane)
            await kube.delete(wh.SECRETS, wh.SECRET, BINDER_NAMESPACE)
        except ApiError:
            pass
        # the binder's ServiceAccount makes the certificate, and another replica reads the same one
        certs = await wh.own_certs(sa, BINDER_NAMESPACE, names)
        assert await wh.own_certs(sa, BINDER_NAMESPACE, names) == certs
        # one that does not name the Service (another --webhook-service) is made again, in place
        other = await wh.own_certs(sa, BINDER_NAMESPACE, [*names, "elsewhere.gangway.svc"])
        assert other != certs and other.serves(names)
        certs = other
        # two replicas starting at once: one writes the CA, the other finds it written (its test of the
        # resourceVersion failed: it reads again), neither fails its start
        assert sorted(await asyncio.gather(wh.publish_ca(sa, certs.ca), wh.publish_ca(sa, certs.ca))) == [0, 1]
        assert await wh.publish_ca(sa, certs.ca) == 0  # (written once)
        stored = await kube.get(wh.WEBHOOK_CONFIGURATIONS, wh.CONFIGURATION)
        assert base64.b64decode(stored["webhooks"][0]["clientConfig"]["caBundle"]) == certs.ca

        refusals = []
        serving = await wh.WebhookServer(certs, port, host="127.0.0.1", check=check_object,
                                         refused=refusals.append).start(stop)
        for res, obj in (job("eager"), job("torch", "PyTorchJob"), job("mpi", "MPIJob"), job("plain", labels={}),
                         job("child", owner={"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js",
                                             "uid": "0000", "controller": True})):
            await kube.create(res, obj, "team")
        assert (await kube.get(api.JOBS, "eager", "team"))["spec"]["suspend"] is True
        assert (await kube.get(api.TRAINING_JOBS["PyTorchJob"], "torch", "team"))["spec"]["runPolicy"]["suspend"] is True
        assert (await kube.get(api.TRAINING_JOBS["MPIJob"], "mpi", "team"))["spec"]["runPolicy"]["suspend"] is True
        # not gangway's: no queue label, or a JobSet's Job (it runs when its JobSet does)
        assert (await kube.get(api.JOBS, "plain", "team"))["spec"]["suspend"] is False
        assert (await kube.get(api.JOBS, "child", "team"))["spec"]["suspend"] is False
        # updates: one changing what gangway read is refused (the Job stays as it was), a waiting Job's
        # queue may change (the intake moves it), one resumed by hand is suspended again
        with pytest.raises(ApiError) as changed:
            await kube.patch(api.JOBS, "eager", {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}}}}, "team")
        assert changed.value.status == 422 and "suspend.gangway.io" in changed.value.message
        assert "does not follow changes to pod set main's node selector" in changed.value.message, changed.value.message
        assert not (await kube.get(api.JOBS, "eager", "team"))["spec"]["template"]["spec"].get("nodeSelector")
        await kube.patch(api.JOBS, "eager", {"spec": {"parallelism": 3}}, "team")  # (completions 1: still one pod)
        await kube.patch(api.JOBS, "eager", {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "other"}}}, "team")
        await kube.patch(api.JOBS, "eager", {"spec": {"suspend": False}}, "team")
        stored = await kube.get(api.JOBS, "eager", "team")
        assert stored["spec"]["suspend"] is True and stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "other"
        assert not refusals  # (an update refused is not a job refused)
        # one no contract admits is refused there and then (kubectl says why), its rejection handed on
        res, capped = job("capped", labels={"kueue.x-k8s.io/queue-name": "default",
                                            "kueue.x-k8s.io/max-exec-time-seconds": "an hour"})
        with pytest.raises(ApiError) as bad:
            await kube.create(res, capped, "team")
        assert bad.value.status == 422 and "suspend.gangway.io" in bad.value.message
        assert "gangway refuses Job team/capped: invalid_field: " in bad.value.message
        assert "max-exec-time-seconds" in bad.value.message
        with pytest.raises(ApiError) as gone:
            await kube.get(api.JOBS, "capped", "team")
        assert gone.value.not_found
        [rejection] = refusals
        assert (rejection.job_id, rejection.namespace, rejection.reason) == ("capped", "team", "invalid_field")
        assert json.loads(rejection.original)["metadata"]["labels"] == capped["metadata"]["labels"]

        # failurePolicy Fail, as Kueue's: with no webhook answering, no queued Job slips past
        stop.set()
        await serving
        serving = None
        with pytest.raises(ApiError) as refused:
            await kube.create(*job("late"), "team")
        assert "suspend.gangway.io" in refused.value.message
        await kube.create(*job("unqueued", labels={}), "team")  # (only objects with a queue label)
    finally:
        stop.set()
        if serving is not None:
            await serving
        await kube.delete(wh.WEBHOOK_CONFIGURATIONS, wh.CONFIGURATION)
        USED.update(sa.used)
        await sa.close()
