"""What ``gangway submit FILE|-`` reads, and the Kafka record it writes for each job.

``load_jobs`` reads one or more YAML documents (or one JSON document) holding any of:

- gangway's own JobSubmitted, either bare (a mapping with ``job_id``, ``namespace``, ``queue``,
  ``pod_sets`` … and no ``apiVersion`` — exactly the JSON a producer puts on Kafka) or wrapped as
  ``{apiVersion: gangway.io/v1alpha1, kind: JobSubmitted, spec: <the same mapping>}``;
- a ``batch/v1`` Job: one pod set ``main`` of ``spec.parallelism`` pods (default 1; fewer when
  ``spec.completions`` is smaller, as Kubernetes runs no more pods than completions);
- a ``jobset.x-k8s.io/v1alpha2`` JobSet: one pod set per replicatedJob, named after it, of
  ``replicas`` × the Job's pod count;
- a Kubeflow job — ``kubeflow.org/v1`` PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob and
  ``kubeflow.org/v2beta1`` MPIJob (``gangway.events.kubeflow``): one pod set per replica type in its
  replica specs (``pytorchReplicaSpecs``, ``tfReplicaSpecs``, ``mpiReplicaSpecs``…), named in lower
  case as Kueue does (``master``, ``worker``, ``launcher``), of ``replicas`` pods (default 1);
- a ``kind: List`` of those (and a top-level sequence, read the same way).

For the Kubernetes kinds: job_id is ``metadata.name`` — or, for a manifest with only
``metadata.generateName``, that prefix and five random characters, as ``kubectl create`` makes
them (``load_jobs`` reports each generated name through ``on_generated``) — namespace ``metadata.namespace`` or ``default``, queue the label
``kueue.x-k8s.io/queue-name`` (required), priority class the label ``kueue.x-k8s.io/priority-class``,
runtime the annotation ``gangway.io/runtime-seconds``; the other labels are kept. A batch/v1 Job's
annotation ``kueue.x-k8s.io/job-min-parallelism`` (Kueue's partial admission) becomes its pod set's
``min_count``: it may run with fewer pods, down to that many, when the quota has no room for all. A pod's resources
are its effective request as Kubernetes and Kueue count it (each container's ``resources.requests``,
falling back to its ``limits``; an extended resource such as ``nvidia.com/gpu`` given in both must
give the same): per resource the larger of the sum over its containers and sidecars (init containers
with ``restartPolicy: Always``) and the peak of its init containers (each regular one with the
sidecars started before it), plus the pod's ``overhead``. Quantities stay Kubernetes quantity
strings — the submission service validates them — except that a resource several containers ask for
is computed here. Kueue's TAS annotations on a pod template
(``kueue.x-k8s.io/podset-required-topology``, ``-preferred-topology``,
``-slice-required-topology``, ``-slice-size``) become the pod set's TopologyRequest.

Anything else is a ``ManifestError`` naming the file, the document (1-based), its kind and name,
and the field.
"""

from __future__ import annotations

import difflib
import json
import math
import secrets
import uuid
from typing import Any, Callable, Iterator

import msgspec
import yaml

from gangway.contract.yamldocs import StrictLoader, documents
from gangway.events import codec, rayjob
from gangway.events.catalogue import (
    KEYS_WRITTEN, Envelope, JobMoved, JobSubmitted, JobWithdrawn, NodeSelectorRequirement, NodeSelectorTerm, PodSetRequest, PREFERRED_WEIGHTS, PreferredSchedulingTerm, Toleration, TolerationError,
    TopologyRequest, toleration_of,
)
from gangway.events.kubeflow import TRAINING_KINDS, replica_types
from gangway.events.quantity import MILLI, QuantityError, format_milli, is_extended_resource, parse_milli
from gangway.events.text import NotUtf8, digits, utf8_text
from gangway.services.submission.policy import MAX_EXEC_LABEL, Invalid, check_job, check_record_size

GANGWAY_API = "gangway.io/v1alpha1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
RUNTIME_ANNOTATION = "gangway.io/runtime-seconds"
MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
#: The characters Kubernetes' name generator uses (no vowels, no look-alikes).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
TOPOLOGY_ANNOTATIONS = {
    "kueue.x-k8s.io/podset-required-topology": "required",
    "kueue.x-k8s.io/podset-preferred-topology": "preferred",
    "kueue.x-k8s.io/podset-slice-required-topology": "slice_required",
    "kueue.x-k8s.io/podset-slice-size": "slice_size",
}
Quantity = str | int | float


class ManifestError(Exception):
    """A manifest gangway cannot turn into a JobSubmitted: where, and what is wrong."""

    def __init__(self, filename: str, document: int, kind: str, name: str, field: str, problem: str,
                 namespace: str = "", reason: str = ""):
        self.filename, self.document, self.kind, self.name = filename, document, kind, name
        #: The namespace the manifest names ('' when it names none that could be read).
        self.field, self.problem, self.namespace = field, problem, namespace
        #: The JobRejected reason a submission service would give it.
        self.reason = reason or ("missing_field" if problem.startswith("missing") else "invalid_field")
        what = f" ({' '.join(part for part in (kind, name) if part)})" if kind or name else ""
        at = f"{field}: " if field else ""
        super().__init__(f"{filename}: document {document}{what}: {at}{problem}")


def generate_name(prefix: str) -> str:
    """``prefix`` and five random characters, as the API server completes a ``generateName``."""
    return prefix + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))


class _Where(msgspec.Struct, frozen=True):
    """Where in the input a document is, for error messages (``prefix`` leads every field path)."""

    filename: str
    document: int
    kind: str = ""
    name: str = ""
    namespace: str = ""
    prefix: str = ""
    #: Called with (generateName, the name generated) for a manifest without a name.
    on_generated: Any = None

    def at(self, **changes: Any) -> "_Where":
        return msgspec.structs.replace(self, **changes)

    def error(self, field: str, problem: str, reason: str = "") -> ManifestError:
        return ManifestError(self.filename, self.document, self.kind, self.name, (self.prefix + field).rstrip("."),
                             problem, self.namespace, reason)


def load_jobs(text: str | bytes, filename: str, on_generated: Callable[[str, str], None] | None = None,
              on_unread: Callable[[str], None] | None = None, checked: bool = False) -> list[JobSubmitted]:
    """Every job in a YAML (multi-document) or JSON text (bytes must be UTF-8); raises ManifestError.
    ``on_unread`` is called with a warning for each key of a manifest that gangway does not read
    (``_unread``). A file that names one job (namespace and job id) twice is refused, naming both
    documents: the second would otherwise be a second submission of the same job.
    ``checked`` (``gangway submit``): each job also passes what the submission service checks
    without the state (``policy.check_job``) and fits a record of ``gangway.submissions``
    (``policy.MAX_BYTES``), so that a file is refused whole before anything is sent."""
    if isinstance(text, bytes):
        text = decode_text(text, filename)
    jobs: list[JobSubmitted] = []
    for job in iter_jobs(text, filename, on_generated, on_unread, checked):
        if isinstance(job, ManifestError):
            raise job
        jobs.append(job)
    return jobs


def iter_jobs(text: str | bytes, filename: str, on_generated: Callable[[str, str], None] | None = None,
              on_unread: Callable[[str], None] | None = None,
              checked: bool = False) -> Iterator[JobSubmitted | ManifestError]:
    """Each job of the text in its order, or in its place the ManifestError of a manifest that
    cannot be read (a document, or an item of a List), of a job the file names a second time, or
    (``checked``) of one the submission service would refuse: the others are read on. Text that is
    not UTF-8, or YAML that does not parse, ends the text with its error (what follows it cannot
    be told apart)."""
    first_seen: dict[str, int] = {}
    try:
        if isinstance(text, bytes):
            text = decode_text(text, filename)
        for index, doc in enumerate(_documents(text, filename), start=1):
            if doc is None:
                continue
            where = _Where(filename, index, on_generated=on_generated)
            for job in _jobs_or_errors(where, doc):
                yield job if isinstance(job, ManifestError) else _vetted(where, job, index, first_seen, checked)
            for warning in _unread(doc, index, filename) if on_unread is not None else ():
                on_unread(warning)
    except ManifestError as exc:  # (only decoding and _documents raise: the rest is caught per manifest)
        yield exc


def _vetted(where: _Where, job: JobSubmitted, index: int, first_seen: dict[str, int],
            checked: bool) -> JobSubmitted | ManifestError:
    """``job``, or why the file may not submit it: named before in the file, or (``checked``)
    refused by the submission service's state-free checks."""
    name = f"{job.namespace}/{job.job_id}"
    here = where.at(kind="", name=job.job_id)
    if name in first_seen:
        return here.error("", f"job {name} is also document {first_seen[name]}: a file names each job once "
                          "(submit a changed job under a new name)", reason="duplicate_job")
    first_seen[name] = index
    if checked:
        try:
            _check_submittable(here, job)
        except ManifestError as exc:
            return exc
    return job


def _jobs_or_errors(where: _Where, doc: Any) -> Iterator[JobSubmitted | ManifestError]:
    """``_jobs_of`` a document, a List's items one by one: an item that fails is its error."""
    items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else doc
    if (items is doc and not isinstance(doc, list)) or not isinstance(items, list):
        try:
            yield from _jobs_of(where, doc)
        except ManifestError as exc:
            yield exc
        return
    if items is not doc:
        where = where.at(kind="List", prefix=where.prefix + "items")
    for i, item in enumerate(items):
        yield from _jobs_or_errors(where.at(kind="", name="", prefix=f"{where.prefix}[{i}]."), item)


def decode_text(data: bytes, filename: str) -> str:
    """A file's bytes as text: UTF-8 (as YAML and JSON are), else a ManifestError naming the
    document, line and byte where it stops being UTF-8 (``text.NotUtf8``'s words)."""
    try:
        return utf8_text(data)
    except NotUtf8 as exc:
        lines = exc.before.split("\n")
        # the YAML document it is in: one more for each "---" after the first document's content
        separators = [i for i, line in enumerate(lines) if line.startswith("---")]
        content = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith(("#", "%", "---"))]
        document = 1 + sum(1 for i in separators if content and content[0] < i)
        raise ManifestError(filename, document, "", "", "", str(exc), reason="not_utf8") from None


def _check_submittable(where: _Where, job: JobSubmitted) -> None:
    try:
        check_job(job)
        check_record_size(job)
    except Invalid as bad:
        raise where.error("", f"{bad.message} ({bad.reason}, as the submission service would reject it)",
                          reason=bad.reason) from None


#: The Kueue labels and annotations gangway reads from a manifest; any other ``kueue.x-k8s.io/`` key
#: is ignored, and ``_unread`` names it.
KUEUE_KEYS_READ = frozenset({QUEUE_LABEL, PRIORITY_LABEL, MAX_EXEC_LABEL, MIN_PARALLELISM_ANNOTATION,
                             *TOPOLOGY_ANNOTATIONS})


def _unread(doc: Any, index: int, filename: str) -> list[str]:
    """``unread``'s sentences as warnings naming the file and the object (``index``: its document)."""
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = f"{doc.get('kind', '?')} {meta.get('name') or meta.get('generateName') or '?'}" \
        if isinstance(meta, dict) else f"document {index}"
    return [f"{filename}: warning: {name}: {said}" for said in unread(doc)]


def unread(doc: Any) -> list[str]:
    """What of a manifest gangway ignores, one sentence each: a Kueue label or annotation (on the
    object or a pod template, at any depth) it does not read, e.g. ``kueue.x-k8s.io/podset-group-name``,
    and a key it reads put where it does not read it (``job-min-parallelism`` as a label, the queue
    name as an annotation): the job runs, without what the key asks."""
    keys: dict[tuple[str, str, str], None] = {}
    _kueue_keys(doc, keys, True)
    out = []
    spec = doc.get("spec") if isinstance(doc, dict) else None
    managed = spec.get("managedBy") if isinstance(spec, dict) else None
    if isinstance(managed, str) and _is_kueue_key(managed):
        out.append(f"spec.managedBy is {managed}: Kueue leaves such an object to MultiKueue, which runs it on "
                   "another cluster; gangway runs it here")
    for key, place, level in keys:
        kueue = " (as Kueue does)" if _is_kueue_key(key) else ""
        if key in READ_AS_LABEL and place == "annotations" or key in READ_AS_ANNOTATION and place == "labels":
            here, read_as = ("an annotation", "a label") if key in READ_AS_LABEL else ("a label", "an annotation")
            out.append(f"{key} is {here} here; gangway reads it as {read_as}{kueue}: ignored")
        elif key in TOPOLOGY_ANNOTATIONS and level != "pod":
            out.append(f"{key} is on the {'object' if level == 'object' else 'Job template'}'s metadata; gangway reads "
                       f"it from each pod template's annotations{kueue}: ignored")
        elif key in OBJECT_ANNOTATIONS and level != "object":
            out.append(f"{key} is on a {'pod' if level == 'pod' else 'Job'} template; gangway reads it from the "
                       f"object's own annotations{kueue}: ignored")
        elif _is_kueue_key(key) and key not in KUEUE_KEYS_READ or _is_gangway_key(key) and key not in GANGWAY_KEYS_KNOWN:
            out.append(f"{key} is not read by gangway; ignored{_misspelt(key)}")
    return out


def _misspelt(key: str) -> str:
    """" (a misspelling of …?)" when ``key`` is close to a key gangway reads or writes, else ""."""
    known = _close_key(key)
    return f" (a misspelling of {known}?)" if known else ""


def _close_key(key: str) -> str | None:
    """The key gangway reads or writes that ``key`` (under the same prefix) is a likely misspelling of."""
    prefix, _, name = key.rpartition("/")
    known = _KEYS_BY_PREFIX.get(prefix, {})
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
    return known[close[0]] if close else None


def _is_gangway_key(key: str) -> bool:
    """Is ``key`` one of gangway's own labels or annotations (``gangway.io/…``)?"""
    return key.partition("/")[0] == "gangway.io" and "/" in key


def _is_kueue_key(key: str) -> bool:
    """Is ``key`` (a label or annotation, or a controller name) Kueue's: ``kueue.x-k8s.io/…`` or a
    subdomain's (``provreq.kueue.x-k8s.io/…``)?"""
    prefix = key.partition("/")[0]
    return "/" in key and (prefix == "kueue.x-k8s.io" or prefix.endswith(".kueue.x-k8s.io"))


def _kueue_keys(node: Any, found: dict[tuple[str, str, str], None], top: bool) -> None:
    """(key, 'labels' or 'annotations', level) of every Kueue key, and every key gangway reads, at
    any depth; level: the object's own metadata ('object'), a pod template's ('pod'), or another
    template's ('template': a JobSet's Job template)."""
    if isinstance(node, dict):
        if top and node.get("kind") == "List":
            _kueue_keys(node.get("items"), found, True)
            return
        spec = node.get("spec")
        level = "object" if top else "pod" if isinstance(spec, dict) and "containers" in spec else "template"
        # (a Kubernetes object's metadata; gangway's own JobSubmitted has its labels at the top)
        for meta in (node.get("metadata"), node if top else None):
            for place in ("labels", "annotations"):
                keys = meta.get(place) if isinstance(meta, dict) else None
                if isinstance(keys, dict):
                    found.update(((k, place, level), None) for k in keys if isinstance(k, str) and (
                        _is_kueue_key(k) or _is_gangway_key(k)))
        for key, value in node.items():
            if key != "metadata":
                _kueue_keys(value, found, False)
    elif isinstance(node, list):
        for item in node:
            _kueue_keys(item, found, top)


def job_of_object(obj: dict, where: str) -> JobSubmitted:
    """The job of one Kubernetes object as the API server returns it (a Job, JobSet or Kubeflow job
    that has its name); raises ManifestError naming ``where``."""
    return _jobs_of(_Where(where, 1), obj)[0]


def to_cloudevent_record(job: JobSubmitted | JobWithdrawn | JobMoved, source: str, now_ms: int,
                         nonce: str | None = None) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """The binary-mode CloudEvent record of a job (or of its move or withdrawal) for
    ``gangway.submissions``: (key, value, headers).

    Its id, ``submit/<namespace>/<job_id>/<ms>/<nonce>`` (``move/…``, ``withdraw/…``; a random
    nonce unless given), is this submission's own: submission takes another record with the same
    source and id as a re-delivery of it (the same bytes sent again), so two submissions must never
    share one — another document of the same job is a second submission (``duplicate_job``), not a
    re-delivery."""
    nonce = nonce if nonce is not None else uuid.uuid4().hex
    verb = {JobWithdrawn: "withdraw", JobMoved: "move"}.get(type(job), "submit")
    env = Envelope(id=f"{verb}/{job.namespace}/{job.job_id}/{now_ms}/{nonce}", source=source, time_ms=now_ms,
                   data=job)
    value, headers = codec.to_binary(env)
    return job.job_id.encode(), value, headers


# --- documents ---------------------------------------------------------------------------------


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object's pairs as a dict, refusing a key written twice (as Kubernetes' strict decoding
    does: the last one silently won — a job submitted under the second of two names)."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _DuplicateKey(f"duplicate key {json.dumps(key, ensure_ascii=False)}")
        seen.add(key)
    return dict(pairs)


def _documents(text: str, filename: str) -> Iterator[Any]:
    if text.lstrip().startswith(("{", "[")):
        try:
            yield json.loads(text, object_pairs_hook=_no_duplicate_keys)
            return
        except _DuplicateKey as exc:
            raise ManifestError(filename, 1, "", "", "", f"not valid JSON: {exc}", reason="malformed_json") from None
        except ValueError:
            pass  # not JSON after all: YAML's flow style, read below
    index = 0
    try:
        for index, doc in enumerate(documents(text, StrictLoader), start=1):
            yield doc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(filename, index + 1, "", "", "", f"not valid YAML{line}: {problem}",
                            reason="malformed_yaml") from None


def _jobs_of(where: _Where, doc: Any) -> list[JobSubmitted]:
    if isinstance(doc, list):
        return _items(where, doc)
    if not isinstance(doc, dict):
        raise where.error("", f"{'an item' if where.prefix else 'a document'} must be a mapping, not {_type_name(doc)}")
    api, kind = doc.get("apiVersion"), doc.get("kind")
    if kind == "List":
        return _items(where.at(kind="List", prefix=where.prefix + "items"), doc.get("items"))
    if api is None and "job_id" in doc:
        return [_gangway_job(where.at(kind="JobSubmitted", name=_text(doc.get("job_id")),
                                      namespace=_text(doc.get("namespace"))), doc)]
    meta = doc.get("metadata")
    where = where.at(kind=_text(kind), name=_text(meta.get("name")) if isinstance(meta, dict) else "",
                     namespace=(_text(meta.get("namespace")) if meta.get("namespace") is not None else "default")
                     if isinstance(meta, dict) else "")
    reader = _READERS.get((api, kind))
    if reader is None:
        read_as = next((a for a, k in _READERS if k == kind), None)
        if read_as is not None:
            said = "missing" if api is None else repr(api)
            raise where.error("apiVersion", f"{said}: gangway reads {kind} as apiVersion {read_as}",
                              reason="missing_field" if api is None else "")
        supported = ", ".join(f"{a} {k}" for a, k in _READERS)
        raise where.error("kind", f"unsupported apiVersion {api!r} kind {kind!r} (supported: {supported}, v1 List)")
    return [reader(where, doc)]


def _items(where: _Where, items: Any) -> list[JobSubmitted]:
    if not isinstance(items, list):
        raise where.error("", f"must be a list of manifests, not {_type_name(items)}")
    jobs: list[JobSubmitted] = []
    for i, item in enumerate(items):
        jobs.extend(_jobs_of(where.at(kind="", name="", prefix=f"{where.prefix}[{i}]."), item))
    return jobs


# --- gangway's own format ------------------------------------------------------------------------


def _gangway_job(where: _Where, doc: dict) -> JobSubmitted:
    try:
        return msgspec.convert(doc, JobSubmitted)
    except msgspec.ValidationError as exc:
        field, problem = _split_msgspec(str(exc))
        raise where.error(field, problem) from None


def _wrapped_gangway_job(where: _Where, doc: dict) -> JobSubmitted:
    spec = _mapping(where, doc, "spec", required=True)
    return _gangway_job(where.at(name=_text(spec.get("job_id")), namespace=_text(spec.get("namespace")),
                                 prefix=where.prefix + "spec."), spec)


def _split_msgspec(message: str) -> tuple[str, str]:
    """("pod_sets[0].count", "Expected `int`, got `str`") from msgspec's message."""
    what, sep, path = message.rpartition(" - at `$")
    if not sep:
        return "", message
    return path.rstrip("`").lstrip("."), what


# --- Kubernetes kinds ------------------------------------------------------------------------------


def _batch_job(where: _Where, doc: dict) -> JobSubmitted:
    spec = _mapping(where, doc, "spec", required=True)
    count = _job_pods(where, spec, "spec")
    pod_set = _pod_set(where, "main", count, spec.get("template"), "spec.template")
    annotations = _strings(where, _mapping(where, doc, "metadata"), "annotations", "metadata.annotations")
    if MIN_PARALLELISM_ANNOTATION in annotations:
        pod_set = msgspec.structs.replace(pod_set, min_count=_min_parallelism(where, annotations, count))
    return _k8s_job(where, doc, "Job", [pod_set])


def _min_parallelism(where: _Where, annotations: dict[str, str], count: int) -> int:
    field = f"metadata.annotations[{MIN_PARALLELISM_ANNOTATION!r}]"
    text = annotations[MIN_PARALLELISM_ANNOTATION]
    try:
        value = int(text)
    except ValueError:
        raise where.error(field, f"{text!r} is not a whole number of pods") from None
    if not 1 <= value < count:  # Kueue's webhook: above 0 and below the Job's pods (parallelism, at most completions)
        if count == 1:
            raise where.error(field, f"must be at least 1 and less than the Job's pods, and it runs 1 pod, so it cannot "
                                     f"run with fewer: leave the annotation out (not {value})")
        raise where.error(field, f"must be at least 1 and less than the Job's {count} pods, not {value}")
    return value


def _jobset(where: _Where, doc: dict) -> JobSubmitted:
    spec = _mapping(where, doc, "spec", required=True)
    replicated = _list(where, spec, "replicatedJobs", "spec.replicatedJobs")
    pod_sets = [_replicated_job(where, f"spec.replicatedJobs[{i}]", rj) for i, rj in enumerate(replicated)]
    return _k8s_job(where, doc, "JobSet", pod_sets)


def _replicated_job(where: _Where, field: str, rj: Any) -> PodSetRequest:
    if not isinstance(rj, dict):
        raise where.error(field, f"must be a mapping, not {_type_name(rj)}")
    name = rj.get("name")
    if not isinstance(name, str) or not name:
        raise where.error(f"{field}.name", "missing: every replicatedJob needs a name")
    replicas = _count(where, rj, "replicas", f"{field}.replicas")
    job_spec = _mapping(where, _mapping(where, rj, "template", f"{field}.template", required=True), "spec",
                        f"{field}.template.spec", required=True)
    count = replicas * _job_pods(where, job_spec, f"{field}.template.spec")
    return _pod_set(where, name, count, job_spec.get("template"), f"{field}.template.spec.template")


def _training_job(where: _Where, doc: dict) -> JobSubmitted:
    """A Kubeflow job (``gangway.events.kubeflow``): one pod set per replica type, named in lower case."""
    kind = TRAINING_KINDS[doc["kind"]]
    field = f"spec.{kind.replica_specs}"
    spec = _mapping(where, doc, "spec", required=True)
    replica_specs = _mapping(where, spec, kind.replica_specs, field, required=True)
    if not replica_specs:
        raise where.error(field, f"is empty: give at least {' or '.join(f'a {t}' for t in kind.order[-2:])}")
    pod_sets = [_replicas(where, f"{field}.{t}", t, replica_specs[t]) for t in replica_types(kind, replica_specs)]
    return _k8s_job(where, doc, kind.kind, pod_sets)


def _ray_job(where: _Where, doc: dict) -> JobSubmitted:
    """KubeRay's RayJob (``gangway.events.rayjob``), with the limits Kueue's webhook sets: it makes its
    own cluster, deleted when its job ends, of a fixed size."""
    spec = _mapping(where, doc, "spec", required=True)
    if spec.get("clusterSelector"):
        raise where.error("spec.clusterSelector", "a queued RayJob makes its own cluster (as with Kueue): one that "
                                                  "runs on an existing RayCluster is not queued; leave out the "
                                                  "queue-name label to run it so")
    field = "spec.rayClusterSpec"
    cluster = _mapping(where, spec, "rayClusterSpec", field, required=True)
    if spec.get("shutdownAfterJobFinishes") is not True:
        raise where.error("spec.shutdownAfterJobFinishes", "must be true for a queued RayJob (as Kueue asks): its "
                                                           "cluster would hold its quota after its job ended")
    if cluster.get("enableInTreeAutoscaling"):
        raise where.error(f"{field}.enableInTreeAutoscaling", "must be false for a queued RayJob (as Kueue asks): "
                                                              "gangway admits a gang of a fixed size")
    head = _mapping(where, cluster, "headGroupSpec", f"{field}.headGroupSpec", required=True)
    pod_sets = [_pod_set(where, rayjob.HEAD, 1, head.get("template"), f"{field}.headGroupSpec.template")]
    groups = cluster.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        raise where.error(f"{field}.workerGroupSpecs", f"must be a list, not {_type_name(groups)}")
    for i, group in enumerate(groups):
        at = f"{field}.workerGroupSpecs[{i}]"
        if not isinstance(group, dict):
            raise where.error(at, f"must be a mapping, not {_type_name(group)}")
        name = group.get("groupName")
        if not isinstance(name, str) or not name:
            raise where.error(f"{at}.groupName", "missing: every worker group needs a name")
        if name.lower() in {ps.name for ps in pod_sets} | {rayjob.SUBMITTER}:
            raise where.error(f"{at}.groupName", f"{name!r} names another pod set of the RayJob (its head, its "
                                                 "submitter or another group)")
        count = _count(where, group, "replicas", f"{at}.replicas") * max(1, _count(where, group, "numOfHosts",
                                                                                  f"{at}.numOfHosts"))
        pod_sets.append(_pod_set(where, name.lower(), count, group.get("template"), f"{at}.template"))
    if rayjob.has_submitter(spec):
        pod_sets.append(_pod_set(where, rayjob.SUBMITTER, 1, rayjob.submitter_template(spec), "spec.submitterPodTemplate"))
    return _k8s_job(where, doc, rayjob.KIND, pod_sets)


def _replicas(where: _Where, field: str, replica_type: str, replica_spec: Any) -> PodSetRequest:
    if not isinstance(replica_spec, dict):
        raise where.error(field, f"must be a mapping, not {_type_name(replica_spec)}")
    count = _count(where, replica_spec, "replicas", f"{field}.replicas")
    return _pod_set(where, str(replica_type).lower(), count, replica_spec.get("template"), f"{field}.template")


def _job_pods(where: _Where, job_spec: dict, field: str) -> int:
    """Pods a batch/v1 Job runs at once: parallelism (default 1), at most its completions."""
    parallelism = _count(where, job_spec, "parallelism", f"{field}.parallelism")
    if job_spec.get("completions") is None:
        return parallelism
    return min(parallelism, _count(where, job_spec, "completions", f"{field}.completions"))


def _k8s_job(where: _Where, doc: dict, kind: str, pod_sets: list[PodSetRequest]) -> JobSubmitted:
    meta = _mapping(where, doc, "metadata", required=True)
    labels = _strings(where, meta, "labels", "metadata.labels")
    annotations = _strings(where, meta, "annotations", "metadata.annotations")
    if QUEUE_LABEL not in labels:
        raise where.error(f"metadata.labels[{QUEUE_LABEL!r}]", "missing: name the LocalQueue to submit to" + (
            " (it is an annotation here: Kueue and gangway read it as a label)" if QUEUE_LABEL in annotations else
            next((f" ({k} is here: a misspelling?)" for k in labels if _close_key(k) == QUEUE_LABEL), "")))
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise where.error("metadata.namespace", f"must be a string, not {_type_name(namespace)}")
    if not any(ps.count for ps in pod_sets):
        raise where.error("spec", f"runs no pod: {_no_pods(kind, pod_sets)} (Kueue would admit it to run "
                                  "nothing; gangway refuses it)", reason="absurd_quantity")
    return JobSubmitted(
        job_id=_job_name(where, meta),
        namespace=namespace,
        queue=labels[QUEUE_LABEL],
        pod_sets=[ps for ps in pod_sets if ps.count],  # (a replica type or replicatedJob of 0 runs nothing, as in Kueue)
        kind=kind,
        priority_class=labels.get(PRIORITY_LABEL),
        runtime_seconds=_runtime(where, annotations),
        labels={k: v for k, v in labels.items() if k not in (QUEUE_LABEL, PRIORITY_LABEL)} | _profile(where, annotations),
    )


def _no_pods(kind: str, pod_sets: list[PodSetRequest]) -> str:
    if kind == "Job":
        return "its parallelism (or completions) is 0"
    return f"every {'replicatedJob' if kind == 'JobSet' else 'replica type'} has 0 ({', '.join(ps.name for ps in pod_sets)})"


#: A job's utilisation profile for the simulated cluster: annotation → the largest value it may take.
PROFILE_ANNOTATIONS = {
    "gangway.io/sm-active": 1.0, "gangway.io/gpu-util": 1.0, "gangway.io/fb-used-mib": 2.0**40,
    "gangway.io/tokens-per-second": 1e12, "gangway.io/checkpoint-seconds": 1e9,
}
#: Where gangway reads each key it reads (as Kueue does): one put in the other place is not read.
READ_AS_LABEL = frozenset({QUEUE_LABEL, PRIORITY_LABEL, MAX_EXEC_LABEL})
#: Annotations read from the object's own metadata (the others, topology, from each pod template's).
OBJECT_ANNOTATIONS = frozenset({MIN_PARALLELISM_ANNOTATION, RUNTIME_ANNOTATION, *PROFILE_ANNOTATIONS})
READ_AS_ANNOTATION = frozenset({MIN_PARALLELISM_ANNOTATION, *TOPOLOGY_ANNOTATIONS, RUNTIME_ANNOTATION,
                                *PROFILE_ANNOTATIONS})
#: The labels a job carries that gangway reads (the queue's and priority class's aside: their own fields).
LABELS_READ = (MAX_EXEC_LABEL, *PROFILE_ANNOTATIONS)
#: gangway's own keys (``gangway.io/…``) a manifest may carry: those it reads, and those it writes on
#: the objects it manages (found again when it reads them back); any other is named by ``_unread``.
GANGWAY_KEYS_KNOWN = frozenset({RUNTIME_ANNOTATION, *PROFILE_ANNOTATIONS, *KEYS_WRITTEN})
#: The keys gangway reads or writes, by prefix (``kueue.x-k8s.io``, ``gangway.io``): name → key.
_KEYS_BY_PREFIX: dict[str, dict[str, str]] = {
    prefix: {k.rpartition("/")[2]: k for k in (*KUEUE_KEYS_READ, *GANGWAY_KEYS_KNOWN) if k.rpartition("/")[0] == prefix}
    for prefix in {k.rpartition("/")[0] for k in (*KUEUE_KEYS_READ, *GANGWAY_KEYS_KNOWN)}}


def _profile(where: _Where, annotations: dict[str, str]) -> dict[str, str]:
    """The profile annotations (kept as labels so they ride on the workload), checked."""
    out = {}
    for key, high in PROFILE_ANNOTATIONS.items():
        text = annotations.get(key)
        if text is None:
            continue
        field = f"metadata.annotations[{key!r}]"
        try:
            value = float(text)
        except ValueError:
            raise where.error(field, f"{text!r} is not a number") from None
        if not (math.isfinite(value) and 0 <= value <= high):
            raise where.error(field, f"{text!r} is not within 0-{high:g}")
        out[key] = text
    return out


def _job_name(where: _Where, meta: dict) -> str:
    name = meta.get("name")
    if isinstance(name, str) and name:
        return name
    prefix = meta.get("generateName")
    if isinstance(prefix, str) and prefix:
        name = generate_name(prefix)
        if where.on_generated is not None:
            where.on_generated(prefix, name)
        return name
    raise where.error("metadata.name", "missing (give metadata.name or metadata.generateName)")


def _runtime(where: _Where, annotations: dict[str, str]) -> float | None:
    text = annotations.get(RUNTIME_ANNOTATION)
    if text is None:
        return None
    field = f"metadata.annotations[{RUNTIME_ANNOTATION!r}]"
    try:
        seconds = float(text)
    except ValueError:
        raise where.error(field, f"{text!r} is not a number of seconds") from None
    if not math.isfinite(seconds):
        raise where.error(field, f"{text!r} is not a finite number of seconds")
    return seconds


# --- pod templates -----------------------------------------------------------------------------------


def _pod_set(where: _Where, name: str, count: int, template: Any, field: str) -> PodSetRequest:
    if not isinstance(template, dict):
        raise where.error(field, f"missing pod template (found {_type_name(template)})")
    meta = _mapping(where, template, "metadata", f"{field}.metadata")
    annotations = _strings(where, meta, "annotations", f"{field}.metadata.annotations")
    spec = _mapping(where, template, "spec", f"{field}.spec", required=True)
    required, preferred = _node_affinity(where, spec, f"{field}.spec.affinity.nodeAffinity")
    return PodSetRequest(
        name=name,
        count=count,
        resources=_pod_resources(where, spec, f"{field}.spec"),
        topology=_topology(where, annotations, f"{field}.metadata.annotations"),
        node_selector=_strings(where, spec, "nodeSelector", f"{field}.spec.nodeSelector"),
        tolerations=_tolerations(where, spec, f"{field}.spec.tolerations"),
        node_affinity=required,
        preferred_affinity=preferred,
        priority_class_name=_optional_string(where, spec, "priorityClassName", f"{field}.spec.priorityClassName"),
    )


def _optional_string(where: _Where, mapping: dict, key: str, field: str) -> str | None:
    value = mapping.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise where.error(field, f"must be a string, not {_type_name(value)}")
    return value


def _node_affinity(where: _Where, pod_spec: dict,
                   field: str) -> tuple[list[NodeSelectorTerm], list[PreferredSchedulingTerm]]:
    """The node affinity's required terms (the only nodes its pods may go to) and preferred ones
    (weight 1 to 100 each: the nodes its pods try first)."""
    affinity = _mapping(where, pod_spec, "affinity", field.rsplit(".", 1)[0])
    node = _mapping(where, affinity, "nodeAffinity", field)
    required = _mapping(where, node, "requiredDuringSchedulingIgnoredDuringExecution",
                        f"{field}.requiredDuringSchedulingIgnoredDuringExecution")
    terms = []
    if required:
        where_terms = f"{field}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        for i, term in enumerate(_list(where, required, "nodeSelectorTerms", where_terms)):
            terms.append(_term(where, term, f"{where_terms}[{i}]"))
    field = f"{field}.preferredDuringSchedulingIgnoredDuringExecution"
    preferred = []
    for i, term in enumerate(_optional_list(where, node, "preferredDuringSchedulingIgnoredDuringExecution", field)):
        if not isinstance(term, dict):
            raise where.error(f"{field}[{i}]", f"must be a mapping, not {_type_name(term)}")
        weight = term.get("weight")
        if type(weight) is not int or weight not in PREFERRED_WEIGHTS:
            raise where.error(f"{field}[{i}].weight", f"{weight!r}: a preferred term's weight is a whole number from "
                                                     "1 to 100 (as Kubernetes takes it)")
        if term.get("preference") is None:
            raise where.error(f"{field}[{i}].preference", "missing")
        preferred.append(PreferredSchedulingTerm(weight=weight, preference=_term(where, term["preference"],
                                                                                   f"{field}[{i}].preference")))
    return terms, preferred


def _term(where: _Where, term: Any, field: str) -> NodeSelectorTerm:
    if not isinstance(term, dict):
        raise where.error(field, f"must be a mapping, not {_type_name(term)}")
    parts = {}
    for key in ("matchExpressions", "matchFields"):
        reqs = term.get(key) or []
        if not isinstance(reqs, list):
            raise where.error(f"{field}.{key}", f"must be a list, not {_type_name(reqs)}")
        parts[key] = [_requirement(where, r, f"{field}.{key}[{j}]", key == "matchFields") for j, r in enumerate(reqs)]
    return NodeSelectorTerm(match_expressions=parts["matchExpressions"], match_fields=parts["matchFields"])


def _requirement(where: _Where, req: Any, field: str, on_fields: bool) -> NodeSelectorRequirement:
    if not isinstance(req, dict):
        raise where.error(field, f"must be a mapping, not {_type_name(req)}")
    key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
    if not isinstance(key, str) or not key:
        raise where.error(f"{field}.key", "missing")
    if on_fields and key != "metadata.name":
        raise where.error(f"{field}.key", f"{key!r}: only metadata.name may be matched as a field")
    ops = ("In", "NotIn") if on_fields else ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
    if op not in ops:
        raise where.error(f"{field}.operator", f"{op!r} is not one of {', '.join(ops)}")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise where.error(f"{field}.values", "must be a list of strings")
    if op in ("In", "NotIn") and not values:
        raise where.error(f"{field}.values", f"must not be empty for {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise where.error(f"{field}.values", f"must be empty for {op}")
    if op in ("Gt", "Lt") and (len(values) != 1 or not digits(values[0].removeprefix("-"))):
        raise where.error(f"{field}.values", f"must be one integer for {op}")
    return NodeSelectorRequirement(key=key, operator=op, values=list(values))


def _tolerations(where: _Where, pod_spec: dict, field: str) -> list[Toleration]:
    """The pod's tolerations (``toleration_of``)."""
    value = pod_spec.get("tolerations")
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error(field, f"must be a list, not {_type_name(value)}")
    out = []
    for i, item in enumerate(value):
        try:
            out.append(toleration_of(item))
        except TolerationError as exc:
            raise where.error(f"{field}[{i}]" + (f".{exc.field}" if exc.field else ""), exc.why) from None
    return out


def _pod_resources(where: _Where, pod_spec: dict, field: str) -> dict[str, Quantity]:
    """The pod's effective request per resource, as Kubernetes (and Kueue) count it: the larger of
    its app containers with its sidecars (init containers with ``restartPolicy: Always``) and the
    peak of its init containers, each regular one counted with the sidecars started before it
    (KEP-753), plus the pod's ``overhead``. A resource only one container asks for keeps its quantity
    as written (the submission service checks it); any other is computed here."""
    def requests(key: str, required: bool = False) -> list[tuple[Any, dict[str, tuple[str, Quantity]]]]:
        containers = _list(where, pod_spec, key, f"{field}.{key}") if required else \
            _optional_list(where, pod_spec, key, f"{field}.{key}")
        return [(c, _container_requests(where, c, f"{field}.{key}[{i}]")) for i, c in enumerate(containers)]
    app = [asked for _, asked in requests("containers", required=True)]
    init = requests("initContainers")
    overhead = {str(r): (f"{field}.overhead[{r!r}]", amount)
                for r, amount in _mapping(where, pod_spec, "overhead", f"{field}.overhead").items()}
    everything = app + [asked for _, asked in init] + [overhead]
    named = [r for asked in everything for r in asked]
    claims = pod_spec.get("resourceClaims") or any(
        isinstance(c, dict) and isinstance(c.get("resources"), dict) and c["resources"].get("claims")
        for key in ("containers", "initContainers") for c in pod_spec.get(key) or [])
    if claims:  # (its devices would be neither counted nor placed)
        raise where.error(f"{field}.resourceClaims", "asks for devices through Dynamic Resource Allocation, which "
                                                      "gangway does not read: request them as an extended resource "
                                                      "(resources.limits: {nvidia.com/gpu: N})")
    out: dict[str, Quantity] = {}
    for resource in dict.fromkeys(named):
        amounts = [asked[resource] for asked in everything if resource in asked]
        if len(amounts) == 1:
            out[resource] = amounts[0][1]
            continue
        milli = {id(asked): _milli(where, *asked[resource]) if resource in asked else 0 for asked in everything}
        total = sum(milli[id(asked)] for asked in app)  # app containers, then each sidecar adds to it
        sidecars = peak = 0
        for container, asked in init:
            if isinstance(container, dict) and container.get("restartPolicy") == "Always":
                sidecars += milli[id(asked)]
                total += milli[id(asked)]
                peak = max(peak, sidecars)
            else:
                peak = max(peak, milli[id(asked)] + sidecars)
        out[resource] = format_milli(max(total, peak) + milli[id(overhead)])
    return out


def _milli(where: _Where, field: str, amount: Quantity) -> int:
    try:
        return parse_milli(amount)
    except QuantityError as exc:
        raise where.error(field, str(exc)) from None


def _container_requests(where: _Where, container: Any, field: str) -> dict[str, tuple[str, Quantity]]:
    """A container's request per resource, falling back to its limit, with the field it came from.
    An extended resource (``nvidia.com/gpu``) asked for in both must ask the same in both, as the API
    server requires (it cannot be overcommitted)."""
    if not isinstance(container, dict):
        raise where.error(field, f"must be a mapping, not {_type_name(container)}")
    resources = _mapping(where, container, "resources", f"{field}.resources")
    merged: dict[str, tuple[str, Quantity]] = {}
    for part in ("limits", "requests"):
        for resource, amount in _mapping(where, resources, part, f"{field}.resources.{part}").items():
            amount_field = f"{field}.resources.{part}[{resource!r}]"
            if isinstance(amount, bool) or not isinstance(amount, (str, int, float)):
                raise where.error(amount_field, f"must be a Kubernetes quantity, not {_type_name(amount)}")
            if is_extended_resource(str(resource)) and _whole(amount) is False:
                raise where.error(amount_field, f"{amount!r} is not a whole number: Kubernetes counts an extended "
                                  f"resource such as {resource} in whole units (a pod asking for a fraction is refused "
                                  "by the API server)")
            if part == "requests" and str(resource) in merged and is_extended_resource(str(resource)):
                limit = merged[str(resource)][1]
                if _same_quantity(amount, limit) is False:
                    raise where.error(amount_field, f"{amount!r} differs from its limit {limit!r}: an extended "
                                      "resource cannot be overcommitted, so its request must equal its limit "
                                      "(or give only the limit)")
            merged[str(resource)] = (amount_field, amount)
    return merged



def _whole(amount: Quantity) -> bool | None:
    """Is a quantity a whole number of units (None when it is not a quantity: said elsewhere)?"""
    try:
        return parse_milli(amount) % MILLI == 0
    except QuantityError:
        return None


def _same_quantity(a: Quantity, b: Quantity) -> bool | None:
    """Are two quantities equal (None when one is not a quantity: the submission service says so)?"""
    try:
        return parse_milli(a) == parse_milli(b)
    except QuantityError:
        return None


def _topology(where: _Where, annotations: dict[str, str], field: str) -> TopologyRequest | None:
    found = {attr: annotations[key] for key, attr in TOPOLOGY_ANNOTATIONS.items() if key in annotations}
    if not found:
        return None
    if "slice_size" in found:
        text = found["slice_size"]
        try:
            found["slice_size"] = int(text)
        except ValueError:
            slice_field = f"{field}[{'kueue.x-k8s.io/podset-slice-size'!r}]"
            raise where.error(slice_field, f"{text!r} is not an integer") from None
    return TopologyRequest(**found)


# --- small readers -----------------------------------------------------------------------------------


def _mapping(where: _Where, obj: dict, key: str, field: str | None = None, required: bool = False) -> dict:
    value = obj.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        problem = "missing" if value is None else f"must be a mapping, not {_type_name(value)}"
        raise where.error(field or key, problem)
    return value


def _list(where: _Where, obj: dict, key: str, field: str) -> list:
    value = obj.get(key)
    if not isinstance(value, list) or not value:
        problem = "missing or empty" if not value else f"must be a list, not {_type_name(value)}"
        raise where.error(field, problem)
    return value


def _optional_list(where: _Where, obj: dict, key: str, field: str) -> list:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error(field, f"must be a list, not {_type_name(value)}")
    return value


def _strings(where: _Where, obj: dict, key: str, field: str) -> dict[str, str]:
    values = _mapping(where, obj, key, field)
    for name, value in values.items():
        if not isinstance(value, str):
            raise where.error(f"{field}[{name!r}]", f"must be a string (quote it), not {_type_name(value)}")
    return {str(name): value for name, value in values.items()}


def _count(where: _Where, obj: dict, key: str, field: str) -> int:
    value = obj.get(key)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise where.error(field, f"must be a whole number of pods, not {value!r}")
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _type_name(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


_READERS: dict[tuple[str, str], Callable[[_Where, dict], JobSubmitted]] = {
    ("batch/v1", "Job"): _batch_job,
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): _jobset,
    **{(kind.api_version, kind.kind): _training_job for kind in TRAINING_KINDS.values()},
    (rayjob.API_VERSION, rayjob.KIND): _ray_job,
    (GANGWAY_API, "JobSubmitted"): _wrapped_gangway_job,
}
