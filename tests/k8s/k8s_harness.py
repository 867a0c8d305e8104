"""What the Kubernetes tests run around the binder: a log in memory (the deciding services take
turns on it, as in ``gangway.sim``), the pods a Job controller would create, and a kubelet that
starts bound pods and finishes deleting them. All of it talks to the real API server."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from dataclasses import dataclass, field

import yaml

from gangway.adapters.kubernetes import ApiError, Kube
from gangway.adapters.kubernetes import client as api
from gangway.contract import contract_digest
from gangway.events import codec, kubeflow, rayjob
from gangway.events.catalogue import ConfigApplied, Envelope, JobRejected, JobSubmitted
from gangway.events.contract import Contract
from gangway.events.fold import apply
from gangway.events.kubeflow import TRAINING_KINDS
from gangway.events.state import State
from gangway.read.describe import describe
from gangway.services.binder.kubernetes import KubernetesBinder, submission_id
from gangway.services.deciders import DECIDERS, id_of
from gangway.services.submission.policy import Invalid, decide_submission, queue_job

KINDS = {"Job": api.JOBS, "JobSet": api.JOBSETS, **api.TRAINING_JOBS, rayjob.KIND: api.RAYJOBS}


class LocalLog:
    """The log as a list; ``turn`` lets every service act once."""

    def __init__(self):
        self.state = State()
        self.envelopes: list[Envelope] = []
        self.rejected: list[tuple[JobSubmitted, str]] = []
        #: What the binder's intake refused (for gangway.rejections).
        self.refused: list[JobRejected] = []

    def append(self, event_id: str, data, source: str = "gangway/test") -> Envelope:
        env = Envelope(id=event_id, source=source, time_ms=max(int(time.time() * 1000), self.state.time_ms),
                       data=data, offset=len(self.envelopes))
        self.envelopes.append(env)
        apply(self.state, env)
        return env

    def configure(self, contract: Contract) -> None:
        digest = contract_digest(contract)
        self.append(f"config/{digest[:12]}", ConfigApplied(contract=contract, digest=digest), "gangway/config")

    def submit(self, job: JobSubmitted) -> None:
        """What the submission service does with a record on gangway.submissions."""
        try:
            queued = queue_job(job, self.state, {}, submission=f"gangway.submissions/0/{len(self.envelopes)}")
        except Invalid as bad:
            self.rejected.append((job, bad.message))
            return
        self.append(f"queued/{queued.workload}", queued, "gangway/submission")

    def submit_again(self, job: JobSubmitted, version: str) -> None:
        """What the submission service does with an object submitted again (its queue-name label
        changed): the record as the binder's service sends it, decided as the service decides it."""
        where = f"gangway.submissions/0/{len(self.envelopes)}"
        value, headers = codec.to_binary(Envelope(id=submission_id(job, version), source="gangway/binder",
                                                  time_ms=int(time.time() * 1000), data=job))
        result = decide_submission(value, job.job_id.encode(), headers, self.state, {}, where)
        if isinstance(result, JobRejected):
            self.refused.append(result)
        elif result is not None:
            self.append(f"moved/{where}", result, "gangway/submission")

    def decide(self) -> int:
        added = 0
        for service, (prefix, decide) in DECIDERS.items():
            for d in decide(self.state):
                self.append(id_of(prefix, d), d, f"gangway/{service}")
                added += 1
        return added

    async def turn(self, *binders: KubernetesBinder) -> int:
        added = self.decide()
        for binder in binders:
            out = await binder.step(self.state)
            for pid, _, data in out.reports:
                self.append(pid, data, "gangway/binder")
            for job in out.submissions:
                self.submit(job)
            for job, version in out.moves:
                self.submit_again(job, version)
            self.refused += out.rejections
            added += len(out.reports) + len(out.submissions) + len(out.moves)
        return added

    def of_type(self, cls) -> list:
        return [e.data for e in self.envelopes if isinstance(e.data, cls)]

    def rejections(self) -> list:
        return [e.data for e in self.envelopes if isinstance(e.data, JobRejected)] + self.rejected


async def turn_until(log: LocalLog, binders: list[KubernetesBinder], found, what: str, timeout_s: float = 10.0):
    """Turn the log until ``await found()`` (what the API server shows) is something; return it."""
    deadline = time.monotonic() + timeout_s
    while not (result := await found()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not seen in {timeout_s} s")
        await log.turn(*binders)
        await asyncio.sleep(0.05)
    return result


async def run_until(log: LocalLog, binders: list[KubernetesBinder], done, timeout_s: float = 30.0,
                    what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        await log.turn(*binders)
        if done():
            return
        if time.monotonic() > deadline:
            phases = {n: w.phase for n, w in log.state.workloads.items()}
            print("the log so far:\n" + "\n".join(f"[{e.offset}] {describe(e)}" for e in log.envelopes))
            raise TimeoutError(f"{what} not reached in {timeout_s} s; workloads: {phases}")
        await asyncio.sleep(0.05)


# --- the cluster's other actors --------------------------------------------------------------------------


def node_object(name: str, gpus: int = 8, cpu: str = "96", memory: str = "1Ti", labels: dict | None = None,
                islands: str | None = None) -> dict:
    annotations = {"gangway.io/nvlink-islands": islands} if islands else {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                         "annotations": annotations},
            "spec": {}}


async def create_node(kube: Kube, obj: dict, allocatable: dict | None = None) -> None:
    """A Node as a kubelet registers it: the object, then its status (allocatable, Ready)."""
    obj = copy.deepcopy(obj)
    status = obj.pop("status", None) or {}
    alloc = allocatable or status.get("allocatable") or {}
    await kube.create(api.NODES, obj)
    await kube.patch(api.NODES, obj["metadata"]["name"], {"status": {
        "allocatable": alloc, "capacity": alloc,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}]}},
        sub="status")
    # What the node lifecycle controller does once the node is Ready (the API server tainted it not-ready).
    await kube.patch(api.NODES, obj["metadata"]["name"], {"spec": {"taints": obj.get("spec", {}).get("taints")}})


async def ensure_namespace(kube: Kube, name: str) -> None:
    try:
        await kube.create(api.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except ApiError as exc:
        if not exc.conflict:
            raise


async def apply_manifests(kube: Kube, text: str, namespace: str | None = None) -> list[dict]:
    """Create every Job, JobSet and Kubeflow job in a YAML text (``kubectl create``: generateName honoured)."""
    made = []
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        for obj in doc.get("items", [doc]) if doc.get("kind") == "List" else [doc]:
            res = KINDS[obj["kind"]]
            ns = obj.get("metadata", {}).get("namespace") or namespace or "default"
            obj.setdefault("metadata", {})["namespace"] = ns
            await ensure_namespace(kube, ns)
            made.append(await kube.create(res, obj, ns))
    return made


def _pods_wanted(obj: dict) -> list[tuple[str, dict, dict, dict]]:
    """(pod name, labels, annotations, template) of every pod the object's controller would run."""
    kind, meta, spec = obj["kind"], obj["metadata"], obj.get("spec") or {}
    name = meta["name"]
    out = []
    if kind == "Job":
        n = min(spec.get("parallelism", 1), spec.get("completions") or spec.get("parallelism", 1))
        out = [_job_pod(name, i, spec["template"]) for i in range(n)]
    elif kind == "JobSet":
        for rj in spec.get("replicatedJobs") or []:
            job_spec = rj["template"]["spec"]
            per_job = min(job_spec.get("parallelism", 1), job_spec.get("completions") or job_spec.get("parallelism", 1))
            for j in range(rj.get("replicas", 1)):
                for i in range(per_job):
                    out.append((f"{name}-{rj['name']}-{j}-{i}",
                                {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                                 "jobset.sigs.k8s.io/job-index": str(j)},
                                {"batch.kubernetes.io/job-completion-index": str(i)}, job_spec["template"]))
    elif kind == rayjob.KIND:  # (as KubeRay labels its cluster's pods; its submitter's Job has the RayJob's name)
        cluster = ray_cluster_name(name)
        rc = spec.get("rayClusterSpec") or {}
        out.append((f"{cluster}-head", {rayjob.CLUSTER_LABEL: cluster, rayjob.NODE_TYPE_LABEL: "head",
                                        rayjob.GROUP_LABEL: "headgroup"}, {}, rc["headGroupSpec"]["template"]))
        for group in rc.get("workerGroupSpecs") or []:
            for i in range(group.get("replicas", 1) * max(1, group.get("numOfHosts", 1))):
                out.append((f"{cluster}-worker-{group['groupName'].lower()}-{i}",
                            {rayjob.CLUSTER_LABEL: cluster, rayjob.NODE_TYPE_LABEL: "worker",
                             rayjob.GROUP_LABEL: group["groupName"]}, {}, group["template"]))
        if rayjob.has_submitter(spec):
            out.append((f"{name}-submitter", {"batch.kubernetes.io/job-name": name}, {}, rayjob.submitter_template(spec)))
    elif kind in TRAINING_KINDS:  # (as the training operator and the MPI operator label them)
        training = TRAINING_KINDS[kind]
        for rtype, rs in (spec.get(training.replica_specs) or {}).items():
            for i in range(rs.get("replicas", 1)):
                out.append((f"{name}-{rtype.lower()}-{i}",
                            {kubeflow.JOB_NAME_LABEL: name, training.role_label: rtype.lower(),
                             kubeflow.REPLICA_INDEX_LABEL: str(i)}, {}, rs["template"]))
    return out


def ray_cluster_name(rayjob_name: str) -> str:
    """The RayCluster KubeRay makes for a RayJob: its name and five random characters (fixed here)."""
    return f"{rayjob_name}-x7k2p"


def _next_pods(obj: dict, pods: dict[str, dict]) -> list[tuple[str, dict, dict, dict]]:
    """An Indexed Job of more completions than parallelism: the pods of the lowest indexes not
    succeeded, as many as run at once (a succeeded pod stays, a failed one is made again)."""
    spec, name = obj["spec"], obj["metadata"]["name"]
    out, running = [], 0
    for i in range(spec["completions"]):
        pod = pods.get(f"{name}-{i}")
        phase = (pod or {}).get("status", {}).get("phase")
        if phase == "Succeeded":
            continue
        if running == spec.get("parallelism", 1):
            break
        running += 1
        if pod is not None and phase == "Failed":
            continue  # (retried once it is gone)
        out.append(_job_pod(name, i, spec["template"]))
    return out


def _job_pod(name: str, index: int, template: dict) -> tuple[str, dict, dict, dict]:
    """An Indexed Job's pod of ``index``: (name, labels, annotations, template)."""
    return (f"{name}-{index}", {"batch.kubernetes.io/job-name": name},
            {"batch.kubernetes.io/job-completion-index": str(index)}, template)


@dataclass
class FakeCluster:
    """The Job, JobSet and Kubeflow controllers (pods for resumed objects, none for suspended ones) and
    the kubelets (bound pods run; deleted pods go). ``hold_back`` (object name → pods) creates fewer pods."""

    kube: Kube
    namespaces: list[str]
    hold_back: dict[str, int] = field(default_factory=dict)
    #: Pods that got a deletionTimestamp (evicted or deleted gracefully), in order.
    deleted: list[str] = field(default_factory=list)
    kubelet: bool = True
    #: Pods created so far (names), for tests that count them.
    created: list[str] = field(default_factory=list)
    #: How long a kubelet takes to stop a pod once it is deleted gracefully (its grace period, as the
    #: containers take it): the pod stays, terminating, that long.
    terminate_s: float = 0.0
    _terminating: dict[str, float] = field(default_factory=dict)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.once()
            except ApiError:
                pass
            try:
                await asyncio.wait_for(stop.wait(), 0.05)
            except asyncio.TimeoutError:
                pass

    async def once(self) -> None:
        for ns in self.namespaces:
            pods, _ = await self.kube.list(api.PODS, ns)
            by_name = {p["metadata"]["name"]: p for p in pods}
            owners: set[str] = set()
            for kind, res in KINDS.items():
                try:
                    objs, _ = await self.kube.list(res, ns)
                except ApiError:
                    continue
                for obj in objs:
                    await self._control(obj, by_name)
                owners.update(obj["metadata"]["uid"] for obj in objs)
            await self._collect_garbage(pods, owners)
            if self.kubelet:
                for pod in pods:
                    await self._kubelet(pod)

    async def _control(self, obj: dict, pods: dict[str, dict]) -> None:
        wanted = _pods_wanted(dict(obj, kind=obj.get("kind")))
        ns, uid = obj["metadata"]["namespace"], obj["metadata"]["uid"]
        if obj.get("kind") == rayjob.KIND and not kubeflow.is_suspended(obj) and not (obj.get("status") or {}).get("rayClusterName"):
            # (KubeRay makes the RayCluster first and says its name in the RayJob's status)
            await self.kube.patch(api.RAYJOBS, obj["metadata"]["name"], {"status": {
                "rayClusterName": ray_cluster_name(obj["metadata"]["name"]), "jobDeploymentStatus": "Initializing"}},
                ns, sub="status")
        if kubeflow.is_suspended(obj) or rayjob.finished(obj) is not None or any(
                c.get("type") in ("Complete", "Completed", "Succeeded", "Failed")
                and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or []):
            if kubeflow.is_suspended(obj):
                for pname, *_ in wanted:
                    pod = pods.get(pname)
                    if pod and not pod["metadata"].get("deletionTimestamp") and not pod["spec"].get("nodeName"):
                        await self.kube.delete(api.PODS, pname, ns, grace_seconds=0)
            return
        limit = len(wanted) - self.hold_back.get(obj["metadata"]["name"], 0)
        if obj.get("kind") == "Job" and (obj["spec"].get("completions") or 0) > obj["spec"].get("parallelism", 1):
            wanted, limit = _next_pods(obj, pods), None  # more completions than parallelism: the next ones
        for pname, labels, notes, template in wanted[:limit]:
            if pname in pods:
                continue
            tmeta = template.get("metadata") or {}
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pname, "namespace": ns,
                                "labels": {**(tmeta.get("labels") or {}), **labels},
                                "annotations": {**(tmeta.get("annotations") or {}), **notes},
                                "ownerReferences": [{"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                                                     "name": obj["metadata"]["name"], "uid": uid, "controller": True}]},
                   "spec": copy.deepcopy(template["spec"])}
            pod["spec"].setdefault("restartPolicy", "Never")
            try:
                await self.kube.create(api.PODS, pod, ns)
                self.created.append(pname)
            except ApiError as exc:
                if not exc.conflict:
                    raise

    async def _collect_garbage(self, pods: list[dict], owners: set[str]) -> None:
        """The garbage collector: a pod whose owner object is gone is deleted (gracefully)."""
        for pod in pods:
            refs = pod["metadata"].get("ownerReferences") or []
            if refs and not pod["metadata"].get("deletionTimestamp") and not any(r.get("uid") in owners for r in refs):
                with contextlib.suppress(ApiError):
                    await self.kube.delete(api.PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])

    async def _kubelet(self, pod: dict) -> None:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        if meta.get("deletionTimestamp"):
            if meta["name"] not in self.deleted:
                self.deleted.append(meta["name"])
            if time.monotonic() < self._terminating.setdefault(meta["uid"], time.monotonic() + self.terminate_s):
                return  # still stopping its containers
            await self.kube.delete(api.PODS, meta["name"], meta["namespace"], grace_seconds=0)
        elif spec.get("nodeName") and status.get("phase") in (None, "Pending"):
            await self.kube.patch(api.PODS, meta["name"], {"status": {"phase": "Running"}}, meta["namespace"], sub="status")


async def complete(kube: Kube, obj: dict, succeeded: bool = True, message: str = "") -> None:
    """What the object's controller writes when it ends."""
    kind = obj["kind"]
    if kind == rayjob.KIND:
        await kube.patch(api.RAYJOBS, obj["metadata"]["name"], {"status": {
            "jobDeploymentStatus": "Complete" if succeeded else "Failed", "jobStatus": "SUCCEEDED" if succeeded else "FAILED",
            "message": message}}, obj["metadata"]["namespace"], sub="status")
        return
    good = "Succeeded" if kind in TRAINING_KINDS else {"Job": "Complete", "JobSet": "Completed"}[kind]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cond = {"type": good if succeeded else "Failed", "status": "True", "reason": "Done" if succeeded else "BackoffLimitExceeded",
            "message": message, "lastTransitionTime": now, "lastProbeTime": now}
    status = {"conditions": [cond]}
    if kind == "Job":
        n = obj["spec"].get("completions") or 1
        if succeeded:
            status.update({"startTime": now, "completionTime": now, "succeeded": n})
            status["conditions"] = [dict(cond, type="SuccessCriteriaMet"), cond]
        else:
            status.update({"startTime": now, "failed": 1})
            status["conditions"] = [dict(cond, type="FailureTarget"), cond]
    await kube.patch(KINDS[kind], obj["metadata"]["name"], {"status": status}, obj["metadata"]["namespace"], sub="status")


@contextlib.asynccontextmanager
async def cluster_running(kube: Kube, namespaces: list[str], **options):
    """A FakeCluster at work for the duration of the block."""
    cluster = FakeCluster(kube, namespaces, **options)
    stop = asyncio.Event()
    task = asyncio.create_task(cluster.run(stop))
    try:
        yield cluster
    finally:
        stop.set()
        await task
