"""Intake from the cluster: a Job, JobSet or PyTorchJob object → the JobSubmitted it becomes, or
why gangway refuses it (pure; the Kubernetes binder calls it and tells the object's owner).

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
from gangway.services.submission.policy import Invalid, move, queue_job, same_object, workload_id



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
    where = f"{obj.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
    manifest = _manifest(obj)

    def refused(reason: str, message: str) -> JobRejected:
        return JobRejected(job_id=str(meta.get("name") or ""), namespace=str(meta.get("namespace") or ""),
                           reason=reason, message=message, original=json.dumps(manifest, sort_keys=True).encode(),
                           submission=f"{obj.get('kind')}/{uid}")
    try:
        job = job_of_object(manifest, where)
    except ManifestError as exc:
        return refused(exc.reason, f"{exc.field}: {exc.problem}" if exc.field else exc.problem)
    known = state.workloads.get(f"{job.namespace}/{job.job_id}")
    if known is not None and known.spec.labels.get(UID_LABEL) != uid:
        job = JobSubmitted(**{**_fields(job), "job_id": f"{job.job_id}-{uid[:8]}"})
    job = JobSubmitted(**{**_fields(job), "labels": {**job.labels, UID_LABEL: uid}})
    mine = state.workloads.get(workload_id(job))
    moving = mine is not None and same_object(mine, job)  # (its queue-name label changed)
    try:
        if moving:
            move(job, mine, state)
        else:
            queue_job(job, state, {}, submission="")
    except Invalid as bad:
        if moving:
            return refused(bad.reason, f"moving to queue {job.queue}: {bad.message}; it still waits in queue "
                                       f"{mine.spec.queue}")
        return refused(bad.reason, bad.message)
    return job, unread(manifest)


def _fields(job: JobSubmitted) -> dict:
    return {f: getattr(job, f) for f in job.__struct_fields__}
