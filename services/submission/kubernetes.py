"""Intake from the cluster: a Job, JobSet or Kubeflow job (PyTorchJob, TFJob, MPIJob…) object → the
JobSubmitted it becomes, or why gangway refuses it (pure; the Kubernetes binder calls it and tells
the object's owner).

The object's uid rides along as the label ``gangway.io/uid``: it is the intake's idempotency key (a
re-list after a restart finds the workload of that uid on the log and submits nothing again). The job
id is the object's name; an object re-created under the name of a workload still on the log gets
``<name>-<first 8 characters of its uid>``, so the two never collide. An object whose workload is on
the log is checked as that workload's move to the queue its label names now (``policy.move``).
"""

from __future__ import annotations

import json

from gangway.events.catalogue import UID_LABEL, JobRejected, JobSubmitted
from gangway.events.state import State
from gangway.services.submission.manifests import ManifestError, job_of_object, unread
from gangway.services.submission.policy import Invalid, check_job, move, queue_job, same_object, workload_id



def _manifest(obj: dict) -> dict:
    """The object as its owner wrote it: what the API server adds (status, managedFields…) left out."""
    meta = dict(obj.get("metadata") or {})
    for key in ("managedFields", "resourceVersion", "generation", "creationTimestamp", "selfLink"):
        meta.pop(key, None)
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": meta, "spec": obj.get("spec")}


def job_from_object(obj: dict, state: State) -> tuple[JobSubmitted, list[str]] | JobRejected:
    """The JobSubmitted for ``obj`` and what of it gangway ignores (a Kueue key it does not read, a
    key it reads put where it does not read it: ``manifests.unread``), or its rejection (checked as
    the submission service will check it, against the contract in ``state``): the reason, the
    message and the object as its owner wrote it (JSON), as gangway.rejections keeps bad input."""
    meta = obj.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    manifest = _manifest(obj)
    try:
        job = job_of_object(manifest, _where(manifest))
    except ManifestError as exc:
        return _rejection(manifest, exc.reason, _problem(exc), uid)
    known = state.workloads.get(f"{job.namespace}/{job.job_id}")
    if known is not None and known.spec.labels.get(UID_LABEL) != uid:
        job = JobSubmitted(**{**_fields(job), "job_id": f"{job.job_id}-{uid[:8]}"})
    job = JobSubmitted(**{**_fields(job), "labels": {**job.labels, UID_LABEL: uid}})
    mine = state.workloads.get(workload_id(job))
    moving = mine is not None and same_object(mine, job)  # (its queue-name label changed)
    try:
        if moving:
            move(job.queue, mine, state)
        else:
            queue_job(job, state, {}, submission="")
    except Invalid as bad:
        if moving:
            return _rejection(manifest, bad.reason, f"moving to queue {job.queue}: {bad.message}; it still waits in "
                                                    f"queue {mine.spec.queue}", uid)
        return _rejection(manifest, bad.reason, bad.message, uid)
    return job, unread(manifest)


def check_object(obj: dict, request_uid: str) -> JobRejected | list[str]:
    """What the binder's webhook asks of an object as it is created, before it is stored: the
    rejection of a manifest gangway cannot read or a job it would refuse whatever the contract says
    (a malformed key of Kueue's or gangway's, a pod set it cannot take: ``job_of_object`` and
    ``check_job``, as the intake would refuse it), else what of it gangway ignores (``unread``). Nothing here reads the contract: a queue it does not name is
    still the intake's to refuse, as it can change before the object is read. An object named by
    ``metadata.generateName`` is checked under a name of that prefix; the rejection's submission is
    the object's kind and ``request_uid`` (an object has no uid before it is stored)."""
    manifest = _manifest(obj)
    meta = manifest["metadata"]
    checked = manifest
    if not meta.get("name") and isinstance(meta.get("generateName"), str):
        checked = {**manifest, "metadata": {**meta, "name": meta["generateName"] + "00000"}}
    try:
        check_job(job_of_object(checked, _where(manifest)))
    except ManifestError as exc:
        return _rejection(manifest, exc.reason, _problem(exc), request_uid)
    except Invalid as bad:
        return _rejection(manifest, bad.reason, bad.message, request_uid)
    return unread(manifest)


def _where(manifest: dict) -> str:
    meta = manifest["metadata"]
    return f"{manifest.get('kind')} {meta.get('namespace')}/{meta.get('name') or meta.get('generateName')}"


def _problem(exc: ManifestError) -> str:
    return f"{exc.field}: {exc.problem}" if exc.field else exc.problem


def _rejection(manifest: dict, reason: str, message: str, uid: str) -> JobRejected:
    """The JobRejected of an object: the object as its owner wrote it (JSON) kept."""
    meta = manifest["metadata"]
    return JobRejected(job_id=str(meta.get("name") or meta.get("generateName") or ""),
                       namespace=str(meta.get("namespace") or ""), reason=reason, message=message,
                       original=json.dumps(manifest, sort_keys=True).encode(), submission=f"{manifest.get('kind')}/{uid}")


def _fields(job: JobSubmitted) -> dict:
    return {f: getattr(job, f) for f in job.__struct_fields__}
