"""KubeRay's RayJob (``ray.io/v1``), as Kueue's ``ray.io/rayjob`` integration takes it.

A RayJob's pod sets: ``head`` (one pod, ``spec.rayClusterSpec.headGroupSpec.template``), one per
worker group (``workerGroupSpecs[i]``, named by its ``groupName``: ``replicas`` pods, 1 when not
given, times ``numOfHosts`` for a multi-host group) and, in the default submission mode
(``K8sJobMode``), ``submitter``: the pod of the Kubernetes Job KubeRay makes to run
``ray job submit`` (``spec.submitterPodTemplate``, else KubeRay's default: 500m cpu, 200Mi).
``spec.suspend`` suspends it (KubeRay then makes no RayCluster, and deletes the one it made). Its
cluster's pods carry ``ray.io/cluster`` (the cluster's name, ``status.rayClusterName``),
``ray.io/node-type`` (head or worker) and ``ray.io/group``; the submitter's pods its Job's name,
which is the RayJob's. It ends when ``status.jobDeploymentStatus`` is Complete or Failed, and it
succeeded when ``status.jobStatus`` is SUCCEEDED. Pure data, here because both the intake
(``gangway submit``, the Kubernetes intake) and the binder read it.
"""

from __future__ import annotations

from typing import Any

API_VERSION = "ray.io/v1"
KIND = "RayJob"
PLURAL = "rayjobs"
CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
HEAD = "head"
SUBMITTER = "submitter"
#: The submission mode whose submitter is a pod of its own (KubeRay's default).
K8S_JOB_MODE = "K8sJobMode"
#: KubeRay's submitter pod when ``spec.submitterPodTemplate`` gives none (Kueue counts the same).
DEFAULT_SUBMITTER = {"spec": {"restartPolicy": "Never", "containers": [{
    "name": "ray-job-submitter",
    "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}}


def has_submitter(spec: dict) -> bool:
    """Does the RayJob run its submitter as a pod of its own (``submissionMode`` K8sJobMode, the default)?"""
    return (spec.get("submissionMode") or K8S_JOB_MODE) == K8S_JOB_MODE


def submitter_template(spec: dict) -> dict:
    """The submitter's pod template: the RayJob's own, else KubeRay's default, with the head's image."""
    given = spec.get("submitterPodTemplate")
    if isinstance(given, dict):
        return given
    head = (((spec.get("rayClusterSpec") or {}).get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
    image = next((c.get("image") for c in head.get("containers") or [] if isinstance(c, dict)), None)
    template: dict[str, Any] = {"spec": {**DEFAULT_SUBMITTER["spec"],
                                         "containers": [dict(DEFAULT_SUBMITTER["spec"]["containers"][0])]}}
    if image:
        template["spec"]["containers"][0]["image"] = image
    return template


def finished(obj: dict) -> tuple[bool, str] | None:
    """(succeeded, what KubeRay said) once the RayJob has ended, else None."""
    status = obj.get("status") or {}
    deployment = status.get("jobDeploymentStatus")
    if deployment not in ("Complete", "Failed"):
        return None
    said = ": ".join(str(x) for x in (status.get("jobStatus"), status.get("message")) if x)
    return status.get("jobStatus") == "SUCCEEDED", f"RayJob {deployment}" + (f" ({said})" if said else "")
