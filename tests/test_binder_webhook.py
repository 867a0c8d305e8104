"""The binder's mutating webhook without a cluster: what it patches, what it refuses, its certificates
and its HTTPS server (tests/k8s/test_kubernetes_admission_webhook.py has the API server call it)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import socket
import ssl
import urllib.error
import urllib.request

import pytest
from starlette.testclient import TestClient

from gangway.adapters.broker import free_ports
from gangway.services.binder import webhook as wh
from gangway.services.submission.kubernetes import check_object


def job(kind: str = "Job", labels: dict | None = None, annotations: dict | None = None, spec: dict | None = None,
        owners: list | None = None) -> dict:
    meta = {"name": "j", "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "default"} if labels is None else labels}
    if annotations:
        meta["annotations"] = annotations
    if owners:
        meta["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, "spec": {"parallelism": 1} if spec is None else spec}


def ask(obj: dict, operation: str = "CREATE") -> dict:
    return wh.review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "request": {"uid": "u-1", "operation": operation, "object": obj}})


def patch_of(answer: dict) -> list | None:
    response = answer["response"]
    assert response["uid"] == "u-1" and response["allowed"] is True
    return json.loads(base64.b64decode(response["patch"])) if "patch" in response else None


def test_a_job_created_with_a_queue_label_and_not_suspended_is_stored_suspended():
    answer = ask(job())
    assert patch_of(answer) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert answer["response"]["patchType"] == "JSONPatch" and "suspended by gangway" in answer["response"]["warnings"][0]
    assert patch_of(ask(job("JobSet", spec={"suspend": False}))) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert patch_of(ask(job("RayJob", spec={"rayClusterSpec": {}}))) == [{"op": "add", "path": "/spec/suspend", "value": True}]


@pytest.mark.parametrize("kind", ["PyTorchJob", "TFJob", "MPIJob", "JAXJob"])
def test_a_kubeflow_job_is_suspended_in_its_run_policy_whether_it_has_one_or_not(kind):
    assert patch_of(ask(job(kind, spec={"pytorchReplicaSpecs": {}}))) == [
        {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}]
    assert patch_of(ask(job(kind, spec={"runPolicy": {"backoffLimit": 2}}))) == [
        {"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]


@pytest.mark.parametrize("obj, operation", [
    (job(spec={"suspend": True}), "CREATE"),                       # suspended already
    (job(labels={}), "CREATE"),                                    # no queue label: not gangway's
    (job("Deployment"), "CREATE"),                                 # a kind gangway does not take
    (job(annotations={"gangway.io/workload": "team/j"}), "CREATE"),  # resumed by gangway
    (job(owners=[{"kind": "JobSet", "name": "js", "uid": "x", "controller": True}]), "CREATE"),  # a JobSet's Job
    (job(), "UPDATE"),                                             # resumed later: the binder's pass decides
    (job(spec=[]), "CREATE"),                                      # no spec object: the API server refuses it
])
def test_what_the_webhook_leaves_as_it_is(obj, operation):
    assert patch_of(ask(obj, operation)) is None


def test_a_job_a_cronjob_makes_is_suspended_as_any_other():
    owned = job(owners=[{"kind": "CronJob", "name": "nightly", "uid": "x", "controller": True}])
    assert patch_of(ask(owned)) == [{"op": "add", "path": "/spec/suspend", "value": True}]


def test_a_request_that_is_no_admission_review_gets_400_and_why():
    client = TestClient(wh.create_app())
    for body, why in ((b"{not json", "Expecting property name"), (b'{"kind": "Pod"}', "not an AdmissionReview"),
                      (b'{"kind": "AdmissionReview", "request": {"operation": "CREATE"}}', "has no uid")):
        answer = client.post(wh.PATH, content=body)
        assert answer.status_code == 400 and why in answer.text, (body, answer.text)
    ok = client.post(wh.PATH, json={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                    "request": {"uid": "u-1", "operation": "CREATE", "object": job()}})
    assert ok.status_code == 200 and patch_of(ok.json()) is not None


def gpu_job(labels: dict | None = None, pod_annotations: dict | None = None, name: str | None = "train",
            gpus: object = 1) -> dict:
    """A Job as `kubectl apply` sends it: one pod of ``gpus`` GPUs, its template's annotations."""
    meta = {"namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "default", **(labels or {})}}
    meta.update({"name": name} if name else {"generateName": "train-"})
    container = {"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    template = {"metadata": {"annotations": pod_annotations or {}},
                "spec": {"restartPolicy": "Never", "containers": [container]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"parallelism": 1, "template": template}}


def checked(obj: dict, operation: str = "CREATE") -> tuple[dict, list]:
    """The webhook's answer given the intake's check, and the rejections it handed on."""
    refused = []
    answer = wh.review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "request": {"uid": "u-1", "operation": operation, "object": obj}}, check_object, refused.append)
    return answer["response"], refused


@pytest.mark.parametrize("obj, reason, words", [
    (gpu_job({"kueue.x-k8s.io/max-exec-time-seconds": "0"}), "invalid_field",
     "kueue.x-k8s.io/max-exec-time-seconds"),
    (gpu_job(gpus=100), "absurd_quantity", "a pod asks for at most 64 GPUs"),
    (gpu_job(pod_annotations={"kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname",
                              "kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname"}), "invalid_field",
     "required and preferred are exclusive"),
])
def test_a_job_no_contract_admits_is_refused_as_it_is_created_and_its_rejection_kept(obj, reason, words):
    response, refused = checked(obj)
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 422 and response["status"]["reason"] == "Invalid"
    message = response["status"]["message"]
    assert message.startswith(f"gangway refuses Job team/train: {reason}: ") and words in message, message
    [rejection] = refused  # (for gangway.rejections, the object as its owner wrote it)
    assert (rejection.job_id, rejection.namespace, rejection.reason) == ("train", "team", reason)
    assert rejection.submission == "Job/u-1" and json.loads(rejection.original) == obj


def test_what_the_check_lets_through_is_suspended_and_told_what_gangway_ignores():
    response, refused = checked(gpu_job({"kueue.x-k8s.io/podset-group-name": "g"}))
    assert response["allowed"] is True and not refused
    assert json.loads(base64.b64decode(response["patch"])) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert "suspended by gangway" in response["warnings"][0]
    assert response["warnings"][1].startswith("Ignored by gangway: ") and "podset-group-name" in response["warnings"][1]
    # named by generateName (no name until it is stored): checked under its prefix
    response, refused = checked(gpu_job(name=None))
    assert response["allowed"] is True and not refused
    response, refused = checked(gpu_job({"kueue.x-k8s.io/max-exec-time-seconds": "-5"}, name=None))
    assert response["allowed"] is False and refused[0].job_id == "train-"


def updated(old: dict, new: dict) -> tuple[dict, list]:
    """The webhook's answer to an update of ``old`` into ``new`` given the intake's check, and the
    rejections it handed on."""
    refused = []
    answer = wh.review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "request": {"uid": "u-1", "operation": "UPDATE", "object": new, "oldObject": old}},
                       check_object, refused.append)
    return answer["response"], refused


def suspended(obj: dict, suspend: bool = True) -> dict:
    return {**obj, "spec": {**obj["spec"], "suspend": suspend}}


def with_(obj: dict, path: str, value) -> dict:
    """A deep copy of ``obj`` with ``path`` (keys split by " > ") set to ``value``."""
    out = json.loads(json.dumps(obj))
    *parents, last = path.split(" > ")
    node = out
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[last] = value
    return out


@pytest.mark.parametrize("path, value, words", [
    ("spec > parallelism", 3, "pod set main's count 1 → 3"),
    ("spec > template > spec > containers > 0 > resources > limits", {"nvidia.com/gpu": 2}, "pod set main's resources"),
    ("spec > template > spec > nodeSelector", {"pool": "a"}, "pod set main's node selector"),
    ("spec > template > metadata > annotations", {"kueue.x-k8s.io/podset-required-topology": "example.com/rack"},
     "pod set main's topology"),
    ("metadata > labels", {"kueue.x-k8s.io/queue-name": "default", "kueue.x-k8s.io/priority-class": "high"},
     "its priority class"),
    ("metadata > labels", {"kueue.x-k8s.io/queue-name": "default", "kueue.x-k8s.io/max-exec-time-seconds": "60"},
     "its kueue.x-k8s.io/max-exec-time-seconds"),
    ("metadata > annotations", {"gangway.io/runtime-seconds": "60"}, "its runtime seconds"),
])
def test_an_update_changing_what_gangway_read_is_refused_and_the_object_stays(path, value, words):
    """gangway reads a job once, when it is created: an update changing what it read (which it would
    not follow: its pods would no longer be what was admitted and placed) is refused, waiting or
    running, and kubectl says what changed; nothing goes to gangway.rejections (the object stays)."""
    for old in (suspended(gpu_job()), suspended(gpu_job(), False)):
        response, refused = updated(old, with_(old, path, value))
        assert response["allowed"] is False and not refused, response
        message = response["status"]["message"]
        assert message.startswith("gangway refuses Job team/train: invalid_field: gangway read this Job when it was "
                                  "created and does not follow changes to ") and words in message, message
        assert message.endswith("delete it and create it again")


def test_an_update_gangway_follows_or_does_not_read_is_let_through():
    """Its own labels, finalizers, status, a waiting job's queue (the intake moves it), gangway's own
    resume (it adds its flavors' tolerations) and a suspension: allowed, without the warnings its
    creation gave again; a key the update adds that gangway ignores is warned of."""
    waiting = suspended(gpu_job({"kueue.x-k8s.io/podset-group-name": "g"}))
    running = with_(suspended(waiting, False), "metadata > annotations", {"gangway.io/workload": "team/train",
                                                                       "gangway.io/attempt": "1"})
    for old, new in (
        (waiting, with_(waiting, "metadata > labels > team", "vision")),
        (waiting, with_(waiting, "metadata > finalizers", ["example.com/keep"])),
        (waiting, with_(waiting, "status", {"active": 0})),
        (waiting, with_(waiting, "metadata > labels > kueue.x-k8s.io/queue-name", "other")),
        (running, suspended(running)),
        (with_(waiting, "metadata > annotations", {"gangway.io/attempt": "1"}),
         with_(with_(suspended(waiting, False), "metadata > annotations",
                     {"gangway.io/workload": "team/train", "gangway.io/attempt": "2"}),
               "spec > template > spec > tolerations", [{"key": "pool", "operator": "Exists"}])),
    ):
        response, refused = updated(old, new)
        assert response["allowed"] is True and "patch" not in response and not refused, (new, response)
        assert "warnings" not in response
    response, _ = updated(waiting, with_(waiting, "metadata > labels > kueue.x-k8s.io/pod-group-name", "g2"))
    assert response["allowed"] is True and response["warnings"] == [
        "Ignored by gangway: kueue.x-k8s.io/pod-group-name is not read by gangway; ignored"]


def test_an_update_moving_a_running_job_or_breaking_a_waiting_one_is_refused():
    """As Kueue: the queue-name label of an object that runs cannot change (nor be taken off); an
    update that makes a key malformed is refused as that object's creation would be."""
    running = suspended(gpu_job(), False)
    for labels in ({"kueue.x-k8s.io/queue-name": "other"}, {}):
        response, _ = updated(running, with_(running, "metadata > labels", labels))
        assert response["allowed"] is False and "metadata.labels['kueue.x-k8s.io/queue-name']: cannot change from " \
            "default to " in response["status"]["message"] and "while the job runs (as in Kueue)" in \
            response["status"]["message"], response
    waiting = suspended(gpu_job())
    response, refused = updated(waiting, with_(waiting, "metadata > labels > kueue.x-k8s.io/max-exec-time-seconds", "0"))
    assert response["allowed"] is False and "max-exec-time-seconds" in response["status"]["message"] and not refused
    # one gangway never took (created before the webhook, refused at intake) is the intake's to judge
    broken = with_(waiting, "metadata > labels > kueue.x-k8s.io/max-exec-time-seconds", "0")
    response, _ = updated(broken, with_(broken, "spec > parallelism", 2))
    assert response["allowed"] is True


def test_a_job_resumed_by_hand_before_gangway_admitted_it_is_suspended_again():
    waiting = suspended(gpu_job())
    response, _ = updated(waiting, suspended(waiting, False))
    assert json.loads(base64.b64decode(response["patch"])) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert response["warnings"] == ["Job resumed by hand: suspended by gangway until it is admitted"]


@pytest.mark.parametrize("obj, operation", [
    ({**gpu_job({"kueue.x-k8s.io/max-exec-time-seconds": "0"}), "kind": "Deployment"}, "CREATE"),  # not a kind of gangway's
])
def test_the_check_leaves_what_is_not_a_queued_object_being_created(obj, operation):
    response, refused = checked(obj, operation)
    assert response["allowed"] is True and not refused


def test_gangways_own_certificate_serves_the_names_it_was_made_for_until_near_its_end():
    names = wh.service_names("gangway-binder-webhook", "gangway") + ["127.0.0.1"]
    certs = wh.issue(names)
    assert names[2] == "gangway-binder-webhook.gangway.svc"
    assert certs.serves(names) and certs.serves(names[:1])
    assert not certs.serves(names + ["other.gangway.svc"])
    late = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=wh.VALID_DAYS - wh.RENEW_DAYS + 1)
    assert not certs.serves(names, now=late)
    assert not wh.Certs(b"junk", b"", b"junk", b"").serves(names)


async def test_the_server_answers_over_https_with_a_certificate_its_ca_vouches_for():
    certs = wh.issue(["127.0.0.1"])
    [port] = free_ports(1)
    stop = asyncio.Event()
    server = wh.WebhookServer(certs, port, host="127.0.0.1")
    task = await server.start(stop)
    try:
        trusting = ssl.create_default_context(cadata=certs.ca.decode())
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "request": {"uid": "u-1", "operation": "CREATE", "object": job()}}).encode()

        def post(context):
            req = urllib.request.Request(f"https://127.0.0.1:{port}{wh.PATH}", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, context=context, timeout=5) as resp:
                return json.loads(resp.read())
        assert patch_of(await asyncio.to_thread(post, trusting)) is not None
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            await asyncio.to_thread(post, ssl.create_default_context(cadata=wh.issue(["127.0.0.1"]).ca.decode()))
        # a second server on the same port says it cannot serve, and does not take the process down
        with pytest.raises(wh.WebhookError, match=f"cannot serve HTTPS on 127.0.0.1:{port}: Address already in use"):
            await wh.WebhookServer(certs, port, host="127.0.0.1").start(asyncio.Event())
    finally:
        stop.set()
        await task
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_mounted_certificate_is_read_and_a_missing_one_named(tmp_path):
    certs = wh.issue(["gangway-binder-webhook.gangway.svc"])
    (tmp_path / "tls.crt").write_bytes(certs.cert)
    with pytest.raises(wh.WebhookError, match=r"--webhook-cert-dir .*: cannot read .*tls\.key: No such file"):
        wh.mounted_certs(tmp_path)
    (tmp_path / "tls.key").write_bytes(certs.key)
    assert wh.mounted_certs(tmp_path) == wh.Certs(b"", b"", certs.cert, certs.key)
