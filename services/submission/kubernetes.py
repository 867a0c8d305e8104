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

import msgspec

from gangway.events.catalogue import ATTEMPT_ANNOTATION, UID_LABEL, JobRejected, JobSubmitted
from gangway.events.state import State
from gangway.events.kubeflow import is_suspended
from gangway.services.submission.manifests import LABELS_READ, QUEUE_LABEL, ManifestError, job_of_object, unread
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


def check_object(obj: dict, request_uid: str, old: dict | None = None) -> JobRejected | list[str]:
    """What the binder's webhook asks of an object as it is created, before it is stored: the
    rejection of a manifest gangway cannot read or a job it would refuse whatever the contract says
    (a malformed key of Kueue's or gangway's, a pod set it cannot take: ``job_of_object`` and
    ``check_job``, as the intake would refuse it), else what of it gangway ignores (``unread``). Nothing here reads the contract: a queue it does not name is
    still the intake's to refuse, as it can change before the object is read. An object named by
    ``metadata.generateName`` is checked under a name of that prefix; the rejection's submission is
    the object's kind and ``request_uid`` (an object has no uid before it is stored).

    Given the object as it was (``old``: an update), the update is refused when it breaks an object
    gangway could read, or changes what gangway read of it (``_unfollowed``) — gangway reads a job
    once and would go on with what it read — and when it changes the queue-name label while the
    object runs (as Kueue refuses it); else what of it gangway ignores that the update adds."""
    manifest = _manifest(obj)
    if old is not None:
        return _check_update(_manifest(old), manifest, request_uid)
    try:
        _read(manifest)
    except ManifestError as exc:
        return _rejection(manifest, exc.reason, _problem(exc), request_uid)
    except Invalid as bad:
        return _rejection(manifest, bad.reason, bad.message, request_uid)
    return unread(manifest)


def _read(manifest: dict) -> JobSubmitted:
    """The job of ``manifest`` as the submission service would take it (raises ManifestError or
    Invalid); named by ``generateName``, under a name of that prefix."""
    meta = manifest["metadata"]
    if not meta.get("name") and isinstance(meta.get("generateName"), str):
        manifest = {**manifest, "metadata": {**meta, "name": meta["generateName"] + "00000"}}
    job = job_of_object(manifest, _where(manifest))
    check_job(job)
    return job


def _check_update(old: dict, new: dict, request_uid: str) -> JobRejected | list[str]:
    was_queue, queue = ((m["metadata"].get("labels") or {}).get(QUEUE_LABEL) for m in (old, new))
    if queue != was_queue and not is_suspended(new):
        return _rejection(new, "invalid_field", f"metadata.labels[{QUEUE_LABEL!r}]: cannot change from {was_queue} to "
                                               f"{queue} while the job runs (as in Kueue); suspended, it moves", request_uid)
    try:
        was = _read(old)
    except (ManifestError, Invalid):
        return []  # (gangway never took it: what it becomes is the intake's to judge)
    try:
        now = _read(new)
    except ManifestError as exc:
        return _rejection(new, exc.reason, _problem(exc), request_uid)
    except Invalid as bad:
        return _rejection(new, bad.reason, bad.message, request_uid)
    was_attempt, attempt = ((m["metadata"].get("annotations") or {}).get(ATTEMPT_ANNOTATION) for m in (old, new))
    resumed = attempt is not None and attempt != was_attempt
    changed = [] if resumed else _unfollowed(was, now)  # (gangway's own resume adds its flavors' tolerations)
    if changed:
        return _rejection(new, "invalid_field", f"gangway read this {new.get('kind')} when it was created and does not "
                                                f"follow changes to {', '.join(changed)}: delete it and create it again",
                          request_uid)
    before = set(unread(old))
    return [said for said in unread(new) if said not in before]


def _unfollowed(was: JobSubmitted, now: JobSubmitted) -> list[str]:
    """What gangway read of a job that differs between two versions of its object, in words ("pod set
    worker's count 2 → 4", "its priority class"); the queue and labels gangway does not read aside."""
    out = [f"its {name.replace('_', ' ')}" for name in ("kind", "priority_class", "runtime_seconds")
           if getattr(was, name) != getattr(now, name)]
    if {k: was.labels.get(k) for k in LABELS_READ} != {k: now.labels.get(k) for k in LABELS_READ}:
        out.append("its " + ", ".join(k for k in LABELS_READ if was.labels.get(k) != now.labels.get(k)))
    before = {ps.name: ps for ps in was.pod_sets}
    after = {ps.name: ps for ps in now.pod_sets}
    if before.keys() != after.keys():
        out.append(f"its pod sets ({', '.join(before)} → {', '.join(after)})")
    for name in before.keys() & after.keys():
        old_fields, new_fields = msgspec.structs.asdict(before[name]), msgspec.structs.asdict(after[name])
        out += [f"pod set {name}'s {field.replace('_', ' ')}" + (
                    f" {old_fields[field]} → {new_fields[field]}" if field == "count" else "")
                for field in old_fields if old_fields[field] != new_fields[field]]
    return out


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
