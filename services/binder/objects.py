"""Kubernetes objects as the binder reads and writes them (pure: dicts in, dicts and events out).

- Nodes → NodeObserved: allocatable resources, labels, NVLink islands (``cluster.py``), and
  ``unavailable`` when the node takes no new pods: ``spec.unschedulable`` (cordoned), a Ready
  condition that is not True, or a ``node.kubernetes.io/*`` NoSchedule/NoExecute taint (the ones
  Kubernetes itself sets). Other taints are left to the pods' tolerations.
- Jobs of the kinds gangway accepts (Job, JobSet, the Kubeflow training kinds of
  ``gangway.events.kubeflow``): how each is suspended, where its pod templates are, how its pods are
  labelled (pod set, index), and whether it has finished.
- Pods → assignments: the pods of each pod set, in index order, take the placement's assignments in
  their order, so the same placement and the same pods always give the same binding.
"""

from __future__ import annotations

import copy

import msgspec

from gangway.events import kubeflow, rayjob
from gangway.events.catalogue import (  # noqa: F401 (ob.UID_LABEL, ob.GPUS_ANNOTATION…)
    ATTEMPT_ANNOTATION, GPUS_ANNOTATION, UID_LABEL, WORKLOAD_ANNOTATION, NodeObserved, PodAssignment, Toleration)
from gangway.events.kubeflow import is_suspended
from gangway.events.quantity import QuantityError, parse_milli
from gangway.events.text import digits
from gangway.services.binder.cluster import ClusterFileError, _node, node_unavailable  # noqa: F401 (objects.node_unavailable)

SCHEDULER_NAME = "gangway"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CONDITION_TYPE = "GangwayScheduling"
#: The scheduling gate gangway adds to the pod templates of objects whose pods do not name its
#: scheduler (a batch/v1 Job's template cannot gain a schedulerName): each pod is created gated, and
#: gangway pins it to its node and lifts the gate (Kueue's topology-aware scheduling does the same).
GATE = "gangway.io/placement"
HOSTNAME_LABEL = "kubernetes.io/hostname"
KINDS = ("Job", "JobSet", *kubeflow.TRAINING_KINDS, rayjob.KIND)
#: Labels that name a pod's owner object, per kind (the Kubeflow kinds': ``kubeflow.JOB_NAME_LABEL``).
OWNER_LABELS = {
    "Job": ("batch.kubernetes.io/job-name", "job-name"),
    "JobSet": ("jobset.sigs.k8s.io/jobset-name",),
}


# --- nodes -----------------------------------------------------------------------------------------


def node_observed(node: dict) -> NodeObserved | str:
    """The NodeObserved of a Node object, ``unavailable`` set as a cluster file's
    (``cluster.node_unavailable``); when it cannot be read, why, in the cluster file's words
    ("Node n1: gangway.io/nvlink-islands='a,b': 'a' is not a number …"), for the caller to log."""
    try:
        return _node(node, "cluster")
    except ClusterFileError as exc:
        return str(exc).removeprefix("cluster: ")


# --- job objects -------------------------------------------------------------------------------------


def kind_of(obj: dict) -> str:
    return str(obj.get("kind") or "")


def meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def queued_object(obj: dict) -> bool:
    """Is ``obj`` a job of gangway's: a queue label, and not made by an object of a kind gangway takes
    (a JobSet's Jobs carry the queue label their template gave them, but run when their JobSet does)?"""
    return QUEUE_LABEL in (meta(obj).get("labels") or {}) and not any(
        isinstance(ref, dict) and ref.get("controller") and ref.get("kind") in KINDS
        for ref in meta(obj).get("ownerReferences") or [])


def needs_suspending(obj: dict) -> bool:
    """A job of gangway's that runs without having been admitted: not suspended, and not resumed by
    gangway (its workload annotation). The webhook suspends it as it is created; the binder's pass
    suspends what got past (as Kueue's webhook and job reconciler do)."""
    return (kind_of(obj) in KINDS and queued_object(obj) and not is_suspended(obj)
            and WORKLOAD_ANNOTATION not in (meta(obj).get("annotations") or {}))


def waiting_reason(pod: dict) -> str:
    """Why a pod is not running, as the kubelet says it (a container's waiting reason and message),
    else its phase."""
    status = pod.get("status") or {}
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = ((c or {}).get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return waiting["reason"] + (f": {waiting['message']}" if waiting.get("message") else "")
    return f"{status.get('phase') or 'Pending'}" + ("" if (pod.get("spec") or {}).get("nodeName") else ", not bound")


def templates(obj: dict) -> list[dict]:
    """The pod templates of an object (mutable views into it)."""
    spec = obj.get("spec") or {}
    kind = kind_of(obj)
    if kind == "Job":
        return [spec.setdefault("template", {})]
    if kind == "JobSet":
        return [rj.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
                for rj in spec.get("replicatedJobs") or []]
    if kind in kubeflow.TRAINING_KINDS:
        replica_specs = spec.get(kubeflow.TRAINING_KINDS[kind].replica_specs) or {}
        return [rs.setdefault("template", {}) for rs in replica_specs.values()]
    if kind == rayjob.KIND:
        cluster = spec.get("rayClusterSpec") or {}
        found = [cluster.setdefault("headGroupSpec", {}).setdefault("template", {})]
        found += [g.setdefault("template", {}) for g in cluster.get("workerGroupSpecs") or [] if isinstance(g, dict)]
        return found + ([spec["submitterPodTemplate"]] if isinstance(spec.get("submitterPodTemplate"), dict) else [])
    return []


def suspend_patch(obj: dict, suspend: bool, workload: str = "", attempt: int = 0,
                  scheduler: str | None = SCHEDULER_NAME, gate: str | None = None,
                  tolerations: list[dict] = ()) -> dict:
    """A merge patch that suspends or resumes ``obj``; resuming marks the object with its workload and
    attempt and, in every pod template, names gangway's ``scheduler`` or adds the scheduling ``gate``
    (a suspended Job's template takes new scheduling gates, not a new scheduler: KEP-2926), and adds
    the ``tolerations`` its admitted flavors give its pods that the template lacks (as Kueue does)."""
    kind = kind_of(obj)
    patch: dict = {}
    if not suspend:
        patch["metadata"] = {"annotations": {WORKLOAD_ANNOTATION: workload, ATTEMPT_ANNOTATION: str(attempt)}}
    if kind in kubeflow.TRAINING_KINDS:
        patch["spec"] = {"runPolicy": {"suspend": suspend}}
    else:
        patch["spec"] = {"suspend": suspend}
    if suspend:
        return patch
    def fields(template_spec: dict) -> dict:
        out = {"schedulingGates": _gates_with(template_spec, gate)} if gate is not None else \
            {"schedulerName": scheduler} if scheduler is not None else {}
        if tolerations:
            have = [t for t in template_spec.get("tolerations") or [] if isinstance(t, dict)]
            out["tolerations"] = have + [t for t in tolerations if t not in have]
        return out
    if gate is not None or scheduler is not None or tolerations:
        _template_fields(obj, patch["spec"], fields)
    return patch


def toleration_object(t: Toleration) -> dict:
    """A toleration as Kubernetes writes it (empty fields left out)."""
    return {k: v for k, v in (("key", t.key), ("operator", t.operator), ("value", t.value), ("effect", t.effect)) if v}


def _gates_with(template_spec: dict, gate: str) -> list[dict]:
    gates = [g for g in template_spec.get("schedulingGates") or [] if isinstance(g, dict)]
    return gates if any(g.get("name") == gate for g in gates) else gates + [{"name": gate}]


def _template_fields(obj: dict, patch_spec: dict, fields) -> None:
    """Set ``fields(template spec)`` in every pod template of ``obj``, into ``patch_spec``."""
    kind, spec = kind_of(obj), obj.get("spec") or {}
    if kind == "Job":
        patch_spec["template"] = {"spec": fields((spec.get("template") or {}).get("spec") or {})}
    elif kind == "JobSet":  # a list: a merge patch replaces it whole
        rjs = copy.deepcopy(spec.get("replicatedJobs") or [])
        for rj in rjs:
            _set_fields(rj.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {}), fields)
        patch_spec["replicatedJobs"] = rjs
    elif kind in kubeflow.TRAINING_KINDS:
        field = kubeflow.TRAINING_KINDS[kind].replica_specs
        patch_spec[field] = {t: {"template": {"spec": fields(((rs or {}).get("template") or {}).get("spec") or {})}}
                             for t, rs in (spec.get(field) or {}).items()}
    elif kind == rayjob.KIND:  # (its worker groups are a list: a merge patch replaces it whole)
        cluster = spec.get("rayClusterSpec") or {}
        head = ((cluster.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
        groups = copy.deepcopy(cluster.get("workerGroupSpecs") or [])
        for group in groups:
            _set_fields(group.setdefault("template", {}), fields)
        patch_spec["rayClusterSpec"] = {"headGroupSpec": {"template": {"spec": fields(head)}}, "workerGroupSpecs": groups}
        if rayjob.has_submitter(spec):  # (KubeRay's default one written out, so its pod is gangway's too)
            patch_spec["submitterPodTemplate"] = _set_fields(copy.deepcopy(rayjob.submitter_template(spec)), fields)


def _set_fields(template: dict, fields) -> dict:
    """``fields(its spec)`` set in a pod template (a copy, the whole of which a patch carries); returns it."""
    spec = template.setdefault("spec", {})
    spec.update(fields(spec))
    return template


def names_scheduler(obj: dict, scheduler: str) -> bool:
    """Do all the object's pod templates already name ``scheduler``?"""
    found = [(t.get("spec") or {}).get("schedulerName") for t in templates(copy.deepcopy(obj))]
    return bool(found) and all(name == scheduler for name in found)


def finished(obj: dict) -> tuple[bool, bool, str] | None:
    """(finished, succeeded, what Kubernetes said) once the object has ended, else None."""
    kind = kind_of(obj)
    if kind == rayjob.KIND:
        ended = rayjob.finished(obj)
        return None if ended is None else (True, *ended)
    good, bad = ("Succeeded", "Failed") if kind in kubeflow.TRAINING_KINDS else \
        {"JobSet": ("Completed", "Failed")}.get(kind, ("Complete", "Failed"))
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") in (good, bad):
            said = ": ".join(x for x in (cond.get("reason"), cond.get("message")) if x)
            return True, cond["type"] == good, f"{kind} {cond['type']}" + (f" ({said})" if said else "")
    return None


def condition(obj: dict) -> dict:
    """gangway's condition on the object ({} when it has none)."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == CONDITION_TYPE), {})


def with_condition(obj: dict, status: str, reason: str, message: str, now: str) -> list[dict]:
    """The object's status.conditions with gangway's condition set (others kept as they are)."""
    conditions = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") != CONDITION_TYPE]
    old = condition(obj)
    since = old.get("lastTransitionTime") if old.get("status") == status else now
    conditions.append({"type": CONDITION_TYPE, "status": status, "reason": reason, "message": message[:1024],
                       "lastProbeTime": now, "lastTransitionTime": since or now})
    return conditions


# --- pods ----------------------------------------------------------------------------------------------


def owners(pod: dict, ray_clusters: dict[tuple[str, str], str] | None = None) -> list[tuple[str, str]]:
    """(kind, name) of each object of a kind gangway takes that may have made ``pod``, read from its
    labels once. The Kubeflow kinds label their pods alike: a pod whose controller is one of them is
    that kind's only (a launcher made through a batch/v1 Job, or a pod without owners, may be any).
    A RayJob's cluster pods name their RayCluster (``ray_clusters``: (namespace, cluster) → RayJob,
    from the RayJobs' status), its submitter's pods their Job, which has the RayJob's name."""
    labels = meta(pod).get("labels") or {}
    found = []
    for kind in ("Job", "JobSet"):
        name = next((labels[key] for key in OWNER_LABELS[kind] if key in labels), None)
        if name is not None:
            found.append((kind, name))
            if kind == "Job":
                found.append((rayjob.KIND, name))
    cluster = labels.get(rayjob.CLUSTER_LABEL)
    if cluster is not None and ray_clusters:
        name = ray_clusters.get((meta(pod).get("namespace"), cluster))
        if name is not None:
            found.append((rayjob.KIND, name))
    name = labels.get(kubeflow.JOB_NAME_LABEL)
    if name is not None:
        controller = next((ref.get("kind") for ref in meta(pod).get("ownerReferences") or []
                           if isinstance(ref, dict) and ref.get("controller")), None)
        kinds = [controller] if controller in kubeflow.TRAINING_KINDS else list(kubeflow.TRAINING_KINDS)
        found += [(kind, name) for kind in kinds]
    return found


def owner_name(kind: str, pod: dict) -> str | None:
    """The name of the ``kind`` object that made ``pod`` (None: none of that kind): ``owners``."""
    return next((name for k, name in owners(pod) if k == kind), None)


def pod_set_of(kind: str, pod: dict, pod_sets: list[str]) -> str | None:
    labels = meta(pod).get("labels") or {}
    if kind == "Job":
        return pod_sets[0] if pod_sets else None
    if kind == "JobSet":
        return labels.get("jobset.sigs.k8s.io/replicatedjob-name")
    if kind in kubeflow.TRAINING_KINDS:
        rt = labels.get(kubeflow.TRAINING_KINDS[kind].role_label)
        return rt.lower() if rt else None
    if kind == rayjob.KIND:
        if rayjob.CLUSTER_LABEL not in labels:
            return rayjob.SUBMITTER  # (its Job's pod)
        if labels.get(rayjob.NODE_TYPE_LABEL) == "head":
            return rayjob.HEAD
        group = labels.get(rayjob.GROUP_LABEL)
        return group.lower() if group else None
    return None


def _int(text) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return 1 << 30


def pod_order(pod: dict) -> tuple:
    """Index order: JobSet job index, then completion or replica index, then name."""
    m = meta(pod)
    labels, annotations = m.get("labels") or {}, m.get("annotations") or {}
    completion = annotations.get("batch.kubernetes.io/job-completion-index",
                                 labels.get("batch.kubernetes.io/job-completion-index"))
    replica = labels.get(kubeflow.REPLICA_INDEX_LABEL)
    return (_int(labels.get("jobset.sigs.k8s.io/job-index", 0)), _int(completion if completion is not None else replica),
            str(m.get("name")))


def successive(obj: dict) -> bool:
    """A batch/v1 Job that runs more pods in all than at once (``completions`` > ``parallelism``): as
    pods succeed its controller creates the next ones, which take the places they leave."""
    spec = obj.get("spec") or {}
    if kind_of(obj) != "Job":
        return False
    parallelism = spec.get("parallelism", 1)
    completions = spec.get("completions")
    return isinstance(completions, int) and isinstance(parallelism, int) and completions > parallelism


def gpus_of(pod: dict) -> list[int]:
    """The GPU indexes gangway gave a bound pod (``GPUS_ANNOTATION``; [] when none)."""
    text = (meta(pod).get("annotations") or {}).get(GPUS_ANNOTATION) or ""
    return [int(i) for i in text.split(",") if digits(i.strip())]


def gates(pod: dict) -> list[str]:
    """The names of the pod's scheduling gates (a gated pod is not scheduled, nor can it be bound)."""
    return [str(g.get("name")) for g in (pod.get("spec") or {}).get("schedulingGates") or [] if isinstance(g, dict)]


def ungate_patch(pod: dict, node: str, gpus: list[int], gate: str) -> dict:
    """A merge patch that pins a gated pod to ``node`` (a ``kubernetes.io/hostname`` nodeSelector, which
    a gated pod may gain: KEP-3838), notes its GPU indexes and removes ``gate``: the pod can then be
    bound there, by gangway or by the default scheduler, and nowhere else."""
    rest = [g for g in (pod.get("spec") or {}).get("schedulingGates") or [] if g.get("name") != gate]
    annotations = {GPUS_ANNOTATION: ",".join(map(str, gpus))} if gpus else {}
    return {"metadata": {"annotations": annotations},
            "spec": {"nodeSelector": {HOSTNAME_LABEL: node}, "schedulingGates": rest or None}}


def pod_requests(pod: dict) -> dict[str, int]:
    """What a pod holds on its node (milli units), as the kubelet counts it: its containers' requests
    summed, at least its largest init container's, plus its overhead (a quantity that cannot be read
    is left out: the API server refuses those)."""
    spec = pod.get("spec") or {}

    def milli(written: object) -> dict[str, int]:
        out = {}
        for resource, quantity in (written.items() if isinstance(written, dict) else ()):
            try:
                out[str(resource)] = parse_milli(quantity)
            except QuantityError:
                continue
        return out

    def requests(container: object) -> dict[str, int]:
        return milli(((container.get("resources") or {}).get("requests")) if isinstance(container, dict) else None)
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for resource, amount in requests(container).items():
            total[resource] = total.get(resource, 0) + amount
    for container in spec.get("initContainers") or []:
        for resource, amount in requests(container).items():
            total[resource] = max(total.get(resource, 0), amount)
    for resource, amount in milli(spec.get("overhead")).items():
        total[resource] = total.get(resource, 0) + amount
    return total


def without_others(node: NodeObserved, held: dict[str, int]) -> NodeObserved:
    """``node`` with what pods gangway does not manage hold there taken out of its allocatable (never
    below zero), and said (``held_by_others``)."""
    held = {r: v for r, v in sorted(held.items()) if v > 0 and r in node.allocatable}
    if not held:
        return node
    allocatable = {r: max(0, v - held.get(r, 0)) for r, v in node.allocatable.items()}
    return msgspec.structs.replace(node, allocatable=allocatable, held_by_others=held)


def live(pod: dict) -> bool:
    """A pod that counts: not being deleted, not failed."""
    return not meta(pod).get("deletionTimestamp") and (pod.get("status") or {}).get("phase") != "Failed"


def split_gpus(indexes: list[int], count: int) -> list[list[int]]:
    """The GPU indexes of an assignment of ``count`` pods, per pod (each its equal share, in order;
    a pod sharing one GPU gets that GPU)."""
    if not indexes:
        return [[] for _ in range(count)]
    if len(indexes) % count == 0:
        k = len(indexes) // count
        return [indexes[i * k:(i + 1) * k] for i in range(count)]
    return [indexes[i % len(indexes):i % len(indexes) + 1] for i in range(count)]


def bindings(pods_by_set: dict[str, list[dict]], assignments: list[PodAssignment],
             gpus: list[list[int]]) -> list[tuple[dict, str, list[int]]]:
    """(pod, node, GPU indexes) for every pod: each pod set's pods in index order take its
    assignments in the placement's order. Raises ValueError when the counts differ."""
    slots: dict[str, list[tuple[str, list[int]]]] = {}
    for i, a in enumerate(assignments):
        for share in split_gpus(gpus[i] if i < len(gpus) else [], a.count):
            slots.setdefault(a.pod_set, []).append((a.node, share))
    out = []
    for pod_set, want in slots.items():
        pods = sorted(pods_by_set.get(pod_set, []), key=pod_order)
        if len(pods) != len(want):
            raise ValueError(f"pod set {pod_set}: {len(pods)} pods for {len(want)} placed")
        out.extend((pod, node, share) for pod, (node, share) in zip(pods, want))
    return out
