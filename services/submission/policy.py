"""The submission decision: one record of ``gangway.submissions`` in, one event out.

``decide_submission`` reads a record in any of three forms:

1. a binary-mode CloudEvent (``ce_*`` headers, ``ce_type: io.gangway.job.submitted.v1``, the
   JobSubmitted as JSON in the value) — what ``gangway submit`` writes;
2. a structured-mode CloudEvent (the value is one JSON object with ``specversion`` and ``data``);
3. plain JSON of the JobSubmitted data (no ``ce_`` header, no ``specversion``), so that any Kafka
   client can submit without knowing CloudEvents.

A valid job becomes a ``WorkloadQueued``; every bad input becomes a ``JobRejected`` that carries a
reason code, a message naming the field, and the original value, key and headers — never an
exception. ``None`` means the record is a re-delivery of a submission already in the state.

Pure: no I/O, no clock, no randomness; imports only the standard library, msgspec and
``gangway.events``. Checks run in a fixed order (size, encoding, envelope, fields, duplicates,
contract), so one record always gets the same answer against the same state.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import msgspec

from gangway.events import codec
from gangway.events.catalogue import (
    EVENT_TYPES, PREFERRED_WEIGHTS, UID_LABEL, Envelope, JobMoved, JobRejected, JobSubmitted, JobWithdrawn, PodSet, PodSetRequest,
    TopologyRequest, WithdrawalRequested, WorkloadMoved, WorkloadQueued,
)
from gangway.events.contract import Contract, LocalQueue
from gangway.events.quantity import MILLI, MILLI_MAX, QuantityError, parse_milli
from gangway.events.resources import GPU, PODS, ContractIndex, index_of
from gangway.events.state import State, WorkloadState
from gangway.events.text import digits

JOB_TYPE = EVENT_TYPES[JobSubmitted]
WITHDRAW_TYPE = EVENT_TYPES[JobWithdrawn]
MOVE_TYPE = EVENT_TYPES[JobMoved]
#: What a producer may send on gangway.submissions (a move or a withdrawal only as a CloudEvent).
REQUEST_TYPES = (JOB_TYPE, MOVE_TYPE, WITHDRAW_TYPE)
MAX_BYTES = 1_048_576
#: A bad record up to this size is read for the job id and namespace its rejection names.
PROBE_BYTES_MAX = 16 * MAX_BYTES
POD_SETS_MAX = 100
POD_COUNT_MAX = 10_000
JOB_PODS_MAX = 100_000
GPUS_PER_POD_MAX = 64
RUNTIME_SECONDS_MAX = 366 * 86_400
JOB_ID_CHARS_MAX = 253
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: A Kubernetes namespace's name.
_DNS1123_LABEL = re.compile(r"(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: Reason for a resource the ClusterQueue has no quota for (a dedicated code may replace it).
NO_QUOTA_REASON = "no_quota"
#: A pod set requires a topology level that no node of the cluster carries (placement's own check
#: goes further: Topology levels and the nodes of the chosen flavor).
TOPOLOGY_REASON = "topology_unsatisfiable"
#: Gangway's NVLink-island level, and the node level every node is a domain of.
_ISLAND, _HOSTNAME = "gangway.io/nvlink-island", "kubernetes.io/hostname"
Headers = list[tuple[str, bytes]]


class Invalid(Exception):
    """Bad input found while deciding: a JobRejected reason code and a message naming the field."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


def decide_submission(
    value: bytes | None,
    key: bytes | None,
    headers: Headers,
    state: State,
    in_flight: Mapping[str, str],
    submission: str,
    max_bytes: int = MAX_BYTES,
    entitled: str | None = None,
) -> WorkloadQueued | WithdrawalRequested | WorkloadMoved | JobRejected | None:
    """Decide what one submission record becomes (a Kubernetes object submitted again under another
    queue-name label: its workload's move, ``move``).

    ``submission`` is the record's ``topic/partition/offset``; ``in_flight`` maps the workloads this
    service has queued but not yet seen folded into ``state`` to the CloudEvent they came from
    (``submitted_as``). Returns None for a re-delivery: the record that became a workload
    (``state.workloads[…].spec.submission``), or another record of the same CloudEvent — the same
    ``source`` and ``id``, which CloudEvents defines as duplicates (a producer that sent it again
    because the broker never acknowledged it).
    ``entitled`` is the one namespace the record's topic may submit into (a tenant's own
    ``gangway.submissions.<namespace>``, which only that tenant's principal may write); None for
    the shared topic, which only gangway's own principals may write.
    """
    try:
        job, submitted_as = read_submission(value, headers, max_bytes)
    except Invalid as bad:
        return recovered(bad, value, key, headers, submission)
    if isinstance(job, (JobWithdrawn, JobMoved)):
        try:
            if isinstance(job, JobMoved):
                return relocation(job, state, entitled, submission, submitted_as)
            return withdrawal(job, state, in_flight, entitled, submission, submitted_as)
        except Invalid as bad:
            return rejected(bad, job.job_id, value, key, headers, submission, job.namespace)
    workload = workload_id(job)
    known = state.workloads.get(workload)
    if known is not None and (known.spec.submission == submission or _not_after(submission, known.moved_by)
                              or (submitted_as and known.spec.submitted_as == submitted_as)):
        return None
    if submitted_as and in_flight.get(workload) == submitted_as:
        return None
    try:
        _check_entitled(job, entitled, submission)
        if known is not None and same_object(known, job):
            return move(job.queue, known, state, submission, submitted_as)
        return queue_job(job, state, in_flight, submission, submitted_as)
    except Invalid as bad:
        return rejected(bad, job.job_id, value, key, headers, submission, job.namespace)


def _not_after(submission: str, last: str) -> bool:
    """Is record ``submission`` (``topic/partition/offset``) at or before ``last``, on its partition?"""
    if not last or not submission:
        return False
    where, _, offset = submission.rpartition("/")
    last_where, _, last_offset = last.rpartition("/")
    return where == last_where and digits(offset) and digits(last_offset) and int(offset) <= int(last_offset)


def same_object(known: WorkloadState, job: JobSubmitted) -> bool:
    """Is ``job`` the Kubernetes object ``known`` was made from (the same ``gangway.io/uid``)?"""
    uid = known.spec.labels.get(UID_LABEL)
    return uid is not None and job.labels.get(UID_LABEL) == uid


def move(queue: str, known: WorkloadState, state: State, submission: str = "", submitted_as: str = "",
         said: str = "") -> WorkloadMoved:
    """A workload goes to LocalQueue ``queue`` of its namespace (the object it was made from names
    that queue now: its queue-name label changed; or its producer sent a ``JobMoved``), checked as a
    new job's queue is (it exists in the namespace, its ClusterQueue admits the namespace and covers
    every resource asked). Raises Invalid for a queue it cannot go to, and for the queue it is in
    (nothing to move: a second submission of the same object). Whether it still waits is the fold's
    to say (it holds only then)."""
    if queue == known.spec.queue:
        raise Invalid("duplicate_job", f"{known.spec.kind} {known.spec.workload} already waits in queue {queue}: "
                                       "nothing to move")
    idx = _index(state.contract)
    local_queue = _local_queue(idx, known.spec.namespace, queue)
    _check_quota_covers(idx, local_queue.cluster_queue, known.spec.pod_sets)
    return WorkloadMoved(workload=known.spec.workload, from_queue=known.spec.queue, queue=queue,
                         cluster_queue=local_queue.cluster_queue,
                         reason=said or f"queue-name label changed from {known.spec.queue} to {queue}",
                         submission=submission, requested_as=submitted_as)


def relocation(request: JobMoved, state: State, entitled: str | None, submission: str,
               submitted_as: str = "") -> WorkloadMoved | None:
    """A producer sends its waiting job to another queue (``move``). None for a re-delivery (the
    request that moved it last, or one before it on its partition). Raises Invalid for a job the
    log does not hold, or one made from a Kubernetes object (its queue-name label moves it)."""
    _check_entitled(request, entitled, submission)
    workload = f"{request.namespace}/{request.job_id}"
    known = state.workloads.get(workload)
    if known is None:
        raise Invalid("unknown_job", f"no job {workload} is on the log: nothing to move")
    if UID_LABEL in known.spec.labels:
        raise Invalid("kubernetes_object", f"{workload} was made from a Kubernetes {known.spec.kind}: change its label "
                                           f"(kubectl label {known.spec.kind.lower()} -n {request.namespace} "
                                           f"{request.job_id} kueue.x-k8s.io/queue-name={request.queue} --overwrite)")
    if _not_after(submission, known.moved_by):
        return None
    said = f"sent to queue {request.queue} by its producer ({submitted_as.split(' ', 1)[0]})"
    return move(request.queue, known, state, submission, submitted_as,
                f"{said}: {request.reason}" if request.reason else said)


def withdrawal(request: JobWithdrawn, state: State, in_flight: Mapping[str, str], entitled: str | None,
               submission: str, submitted_as: str = "") -> WithdrawalRequested:
    """A producer takes its job back: the log's workload of that name, whatever its phase (the
    fold ends a waiting one; the binder stops a running one). Raises Invalid for a job the log does
    not hold, or one made from a Kubernetes object (deleting the object withdraws it)."""
    _check_entitled(request, entitled, submission)
    workload = f"{request.namespace}/{request.job_id}"
    known = state.workloads.get(workload)
    if known is None and workload not in in_flight:
        raise Invalid("unknown_job", f"no job {workload} was submitted: nothing to withdraw")
    if known is not None and UID_LABEL in known.spec.labels:
        raise Invalid("kubernetes_object", f"{workload} was made from a Kubernetes {known.spec.kind}: delete it "
                                           f"(kubectl delete {known.spec.kind.lower()} -n {request.namespace} "
                                           f"{request.job_id}) to withdraw it")
    said = f"withdrawn by its producer ({submitted_as.split(' ', 1)[0]})"  # (a withdrawal is always a CloudEvent)
    return WithdrawalRequested(workload=workload, reason=f"{said}: {request.reason}" if request.reason else said,
                               submission=submission, requested_as=submitted_as)


def rejection_for_error(
    value: bytes | None, key: bytes | None, headers: Headers, submission: str, exc: BaseException
) -> JobRejected:
    """A JobRejected for an exception met while handling a record (for the shell's last resort)."""
    if isinstance(exc, Invalid):
        bad = exc
    elif isinstance(exc, codec.CodecError):
        bad = Invalid(exc.reason, str(exc))
    elif isinstance(exc, QuantityError):
        bad = Invalid("bad_quantity", str(exc))
    elif isinstance(exc, UnicodeDecodeError):
        bad = Invalid("not_utf8", str(exc))
    elif isinstance(exc, msgspec.DecodeError):
        bad = Invalid("malformed_json", str(exc))
    else:
        bad = Invalid("internal_error", f"the record could not be processed: {type(exc).__name__}: {exc}")
    return recovered(bad, value, key, headers, submission)


def rejected(
    bad: Invalid, job_id: str, value: bytes | None, key: bytes | None, headers: Headers, submission: str,
    namespace: str = "",
) -> JobRejected:
    return JobRejected(
        job_id=job_id,
        namespace=namespace,
        reason=bad.reason,
        message=bad.message,
        original=value if value is not None else b"",
        original_key=key,
        original_headers=[(name, header if header is not None else b"") for name, header in headers or ()],
        submission=submission,
    )


# --- reading the record: size, encoding, envelope ----------------------------------------------


class _Probe(msgspec.Struct):
    """The few members of a JSON object that tell the input mode (everything else is skipped)."""

    specversion: msgspec.Raw = msgspec.Raw(b"")
    type: msgspec.Raw = msgspec.Raw(b"")
    job_id: msgspec.Raw = msgspec.Raw(b"")
    namespace: msgspec.Raw = msgspec.Raw(b"")
    subject: msgspec.Raw = msgspec.Raw(b"")
    data: msgspec.Raw = msgspec.Raw(b"")


def check_record_size(job: JobSubmitted, max_bytes: int = MAX_BYTES) -> None:
    """Would ``job``, sent as a plain JSON record of ``gangway.submissions``, fit its limit (what
    ``read_submission`` refuses first)? Raises Invalid (``oversized``): for a job read from a file
    (``gangway submit``, the dry run), which the service would refuse so."""
    size = len(codec.encode_data(job))
    if size > max_bytes:
        raise Invalid("oversized", f"its record would be {size} bytes, over the {max_bytes}-byte "
                                   f"({max_bytes / MAX_BYTES:g} MiB) limit of a gangway.submissions record: make its "
                                   "labels or pod sets smaller")


def read_submission(value: bytes | None, headers: Headers,
                    max_bytes: int = MAX_BYTES) -> tuple[JobSubmitted | JobWithdrawn | JobMoved, str]:
    """The JobSubmitted (or, in a CloudEvent, JobWithdrawn or JobMoved) in a record, and the CloudEvent it came
    as (``"<source> <id>"``; empty for a plain JSON job, which has no identity of its own); raises
    Invalid."""
    if value is None:
        raise Invalid("malformed_json", "the record has no value (a tombstone); expected a JobSubmitted")
    if len(value) > max_bytes:
        raise Invalid("oversized", f"the record value is {len(value)} bytes, over the limit of {max_bytes}")
    _check_utf8(value)
    ce_headers = {name.lower(): header for name, header in headers or () if name.lower().startswith("ce_")}
    if ce_headers:
        return _event(_binary(value, headers, ce_headers))
    probe = _probe(value)
    if bytes(probe.specversion):
        return _event(_structured(value, headers, probe))
    return _guarded(codec.decode_data, JOB_TYPE, value), ""


def _event(env: Envelope) -> tuple[JobSubmitted | JobWithdrawn | JobMoved, str]:
    return env.data, f"{env.source} {env.id}"


def _check_utf8(value: bytes) -> None:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = value[exc.start:exc.start + 1]
        raise Invalid("not_utf8", f"the record value is not UTF-8: {exc.reason} at byte {exc.start} ({bad!r})") from None


def _binary(value: bytes, headers: Headers, ce_headers: dict[str, bytes | None]) -> Envelope:
    if not ce_headers.get("ce_specversion"):
        raise Invalid(
            "malformed_cloudevent", "header ce_specversion is missing (ce_ headers make a binary-mode CloudEvent)"
        )
    ce_type = ce_headers.get("ce_type")
    if ce_type is not None and ce_type not in {t.encode() for t in REQUEST_TYPES}:
        shown = ce_type.decode("utf-8", "replace")
        raise Invalid("wrong_event_type", f"header ce_type is {shown!r}; {_ONLY_JOBS}")
    return _guarded(codec.from_record, value, headers)


def _structured(value: bytes, headers: Headers, probe: _Probe) -> Envelope:
    ce_type = _json_value(probe.type)
    if isinstance(ce_type, str) and ce_type not in REQUEST_TYPES:
        raise Invalid("wrong_event_type", f"CloudEvent attribute type is {ce_type!r}; {_ONLY_JOBS}")
    return _guarded(codec.from_record, value, headers)


_ONLY_JOBS = f"gangway.submissions takes only {', '.join(REQUEST_TYPES[:-1])} and {REQUEST_TYPES[-1]}"


def _probe(value: bytes) -> _Probe:
    try:
        return msgspec.json.decode(value, type=_Probe)
    except msgspec.ValidationError as exc:
        raise Invalid(
            "invalid_field", f"the record value must be a JSON object (a JobSubmitted or a CloudEvent): {exc}"
        ) from None
    except msgspec.DecodeError as exc:
        raise Invalid("malformed_json", f"the record value is not valid JSON: {exc}") from None
    except RecursionError:
        raise Invalid("malformed_json", "the record value is JSON nested too deeply") from None


def _guarded(decode, *args):
    """Run a codec function, turning every decoding failure into Invalid."""
    try:
        return decode(*args)
    except codec.CodecError as exc:
        raise Invalid(exc.reason, _tidy(str(exc))) from None
    except msgspec.ValidationError as exc:
        raise Invalid("invalid_field", _tidy(str(exc))) from None
    except msgspec.DecodeError as exc:
        raise Invalid("malformed_json", f"not valid JSON: {exc}") from None
    except RecursionError:
        raise Invalid("malformed_json", "JSON nested too deeply") from None


_AT = re.compile(r"^(?P<what>.*) - at `\$\.?(?P<path>[^`]*)`$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]*)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>[^`]*)`$")


def _tidy(message: str) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.pod_sets[0].count`" as "pod_sets[0].count: ..."."""
    message = message.removeprefix(f"{JOB_TYPE}: ")
    match = _AT.match(message)
    path, what = (match["path"], match["what"]) if match else ("", message)
    if path.startswith("["):
        path = ""  # a path into untyped JSON ("[...][...]") names nothing
    within = f"{path}." if path else ""
    missing, unknown = _MISSING.match(what), _UNKNOWN.match(what)
    if missing:
        return f"{within}{missing['field']}: missing (required)"
    if unknown:
        return f"{within}{unknown['field']}: unknown field"
    return f"{path}: {what}" if path else what


#: What decoding a stray piece of JSON may raise (msgspec.Raw is not checked for UTF-8).
_UNREADABLE = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError)


def _json_value(raw: msgspec.Raw) -> object:
    try:
        return msgspec.json.decode(raw) if bytes(raw) else None
    except _UNREADABLE:
        return None


def recovered(bad: Invalid, value: bytes | None, key: bytes | None, headers: Headers,
              submission: str) -> JobRejected:
    """The JobRejected of a record that could not be read as a job: with the best job id it names
    (data.job_id, else the CloudEvent subject) and namespace (data.namespace), else ''."""
    probe = _Probe()
    # (An oversized record is probed too, up to a bound: its job id and namespace name it in the
    # rejection, as for any other bad record; skipping its members is a fast scan.)
    if value is not None and len(value) <= PROBE_BYTES_MAX:
        try:
            probe = msgspec.json.decode(value, type=_Probe)
        except _UNREADABLE:
            pass
    job_id = _first_string(_json_value(probe.job_id), _data_field(probe.data, "job_id"), _json_value(probe.subject),
                           *(header.decode("utf-8", "replace") for name, header in headers or ()
                             if name.lower() == "ce_subject" and header))
    namespace = _first_string(_json_value(probe.namespace), _data_field(probe.data, "namespace"))
    return rejected(bad, job_id, value, key, headers, submission, namespace)


def _first_string(*found: object) -> str:
    return next((f for f in found if isinstance(f, str) and f), "")


def _data_field(raw: msgspec.Raw, name: str) -> object:
    if not bytes(raw):
        return None
    try:
        return _json_value(getattr(msgspec.json.decode(raw, type=_Probe), name))
    except _UNREADABLE:
        return None


# --- validating the job --------------------------------------------------------------------------


def _check_entitled(job: JobSubmitted | JobWithdrawn | JobMoved, entitled: str | None, submission: str) -> None:
    """A tenant's topic submits into that tenant's namespace only (what a topic ACL cannot see)."""
    if entitled is not None and job.namespace != entitled:
        topic = submission.rsplit("/", 2)[0]
        raise Invalid(
            "not_entitled",
            f"namespace: {job.namespace!r} is not this producer's namespace: records on {topic} may submit "
            f"only into namespace {entitled!r} (the topic's ACL admits only that tenant's principal)",
        )


#: Kueue's maximum execution time, a label in whole seconds (Kueue: a positive int32).
MAX_EXEC_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"


def max_execution_ms(labels: Mapping[str, str]) -> int | None:
    """The maximum execution time a job's labels give (``MAX_EXEC_LABEL``); raises Invalid."""
    value = labels.get(MAX_EXEC_LABEL)
    if value is None:
        return None
    if not (isinstance(value, str) and value.isascii() and value.isdigit() and 0 < int(value) <= 2**31 - 1):
        raise Invalid("invalid_field", f"labels[{MAX_EXEC_LABEL!r}] is {value!r}: a whole number of seconds, "
                                       f"1 to {2**31 - 1}")
    return int(value) * 1000


def queue_job(job: JobSubmitted, state: State, in_flight: Mapping[str, str], submission: str,
              submitted_as: str = "") -> WorkloadQueued:
    """The workload a valid job becomes; raises Invalid for the first thing wrong with it."""
    pod_sets, runtime_ms = check_job(job)
    _check_unique(workload_id(job), state, in_flight)
    idx = _index(state.contract)
    local_queue = _local_queue(idx, job.namespace, job.queue)
    priority = _priority(idx, job.priority_class, next(
        (ps.priority_class_name for ps in job.pod_sets if ps.priority_class_name), None), state)
    _check_quota_covers(idx, local_queue.cluster_queue, pod_sets)
    _check_topology_exists(state, pod_sets)
    return WorkloadQueued(
        workload=workload_id(job),
        namespace=job.namespace,
        queue=job.queue,
        cluster_queue=local_queue.cluster_queue,
        priority_class=job.priority_class,
        priority=priority,
        kind=job.kind,
        pod_sets=pod_sets,
        runtime_ms=runtime_ms,
        labels=dict(job.labels),
        submission=submission,
        submitted_as=submitted_as,
        max_execution_ms=max_execution_ms(job.labels),
    )


def check_job(job: JobSubmitted) -> tuple[list[PodSet], int | None]:
    """What can be checked of a job without the state: its names, pod sets and runtime (the pod
    sets and runtime as the workload will hold them); raises Invalid. ``queue_job`` starts with it,
    and ``gangway submit`` runs it on every job of a file before sending any (a value the record's
    JSON cannot carry, e.g. an infinite runtime, is refused there, not turned into none)."""
    _check_names(job)
    max_execution_ms(job.labels)
    return _pod_sets(job.pod_sets), _runtime_ms(job.runtime_seconds)


def _check_names(job: JobSubmitted) -> None:
    for field in ("job_id", "namespace", "queue"):
        if not getattr(job, field):
            raise Invalid("invalid_field", f"{field} is empty")
    if len(job.job_id) > JOB_ID_CHARS_MAX:
        raise Invalid("invalid_field", f"job_id is {len(job.job_id)} characters long, over {JOB_ID_CHARS_MAX}")
    if not _DNS1123_SUBDOMAIN.fullmatch(job.job_id):
        raise Invalid(
            "invalid_field",
            f"job_id {job.job_id!r} is not a valid Kubernetes name (DNS-1123 subdomain: lower-case letters, "
            "digits, '-' and '.', starting and ending with a letter or digit)",
        )
    if not _DNS1123_LABEL.fullmatch(job.namespace):
        raise Invalid("invalid_field", f"namespace {job.namespace!r} is not a valid Kubernetes namespace (DNS-1123 "
                                       "label: at most 63 lower-case letters, digits and '-', starting and ending "
                                       "with a letter or digit)")
    if job.priority_class is not None and not job.priority_class:
        raise Invalid("invalid_field", "priority_class is empty (leave it out for the default priority)")


def _pod_sets(requests: list[PodSetRequest]) -> list[PodSet]:
    if not requests:
        raise Invalid("invalid_field", "pod_sets is empty: a job needs at least one pod set")
    if len(requests) > POD_SETS_MAX:
        raise Invalid("absurd_quantity", f"pod_sets has {len(requests)} pod sets, over {POD_SETS_MAX}")
    pod_sets = [_pod_set(f"pod_sets[{i}]", request) for i, request in enumerate(requests)]
    seen: set[str] = set()
    for i, ps in enumerate(pod_sets):
        if ps.name in seen:
            raise Invalid("invalid_field", f"pod_sets[{i}].name {ps.name!r} is used by an earlier pod set")
        seen.add(ps.name)
    _check_totals(pod_sets)
    return pod_sets


def _pod_set(where: str, request: PodSetRequest) -> PodSet:
    if not request.name:
        raise Invalid("invalid_field", f"{where}.name is empty")
    if not 1 <= request.count <= POD_COUNT_MAX:
        raise Invalid("absurd_quantity", f"{where}.count is {request.count}: a pod set has 1 to {POD_COUNT_MAX} pods")
    if request.min_count is not None and not 1 <= request.min_count <= request.count:
        raise Invalid(
            "absurd_quantity", f"{where}.min_count is {request.min_count}: it must be 1 to count ({request.count})"
        )
    # (A request of zero, which Kubernetes takes, e.g. `nvidia.com/gpu: 0` in a CPU variant of a
    # template, asks for nothing of that resource; a pod asking for nothing at all — BestEffort, a
    # launcher beside its workers — is admitted as Kueue admits it, taking quota only where its
    # ClusterQueue covers ``pods``.)
    resources = {
        name: milli for name, amount in sorted(request.resources.items())
        if (milli := _quantity(f"{where}.resources[{name!r}]", name, amount))
    }
    _check_topology(f"{where}.topology", request.topology, request.count)
    for i, term in enumerate(request.preferred_affinity):
        if term.weight not in PREFERRED_WEIGHTS:
            raise Invalid("invalid_field", f"{where}.preferred_affinity[{i}].weight is {term.weight}: a preferred "
                                           "term's weight is 1 to 100 (as Kubernetes takes it)")
    return PodSet(
        name=request.name, count=request.count, resources=resources,
        topology=request.topology, min_count=request.min_count,
        node_selector=request.node_selector, tolerations=request.tolerations, node_affinity=request.node_affinity,
        preferred_affinity=request.preferred_affinity,
    )


def _quantity(field: str, resource: str, amount: str | int | float) -> int:
    if not resource:
        raise Invalid("invalid_field", f"{field}: the resource name is empty")
    if resource == PODS:  # (Kubernetes refuses it in a container's requests too)
        raise Invalid("invalid_field", f"{field}: 'pods' is a node's count of pods (and a queue's, where it "
                                       "covers pods), not something a pod asks for: each pod takes one")
    try:
        milli = parse_milli(amount)
    except QuantityError as exc:
        raise Invalid("bad_quantity", f"{field} is {amount!r}: {exc}") from None
    if milli < 0:
        raise Invalid("absurd_quantity", f"{field} is {amount!r}: a request cannot be negative")
    if resource == GPU and milli > GPUS_PER_POD_MAX * MILLI:
        raise Invalid("absurd_quantity", f"{field} is {amount!r}: a pod asks for at most {GPUS_PER_POD_MAX} GPUs")
    if resource == GPU and milli > MILLI and milli % MILLI:
        raise Invalid("bad_quantity", f"{field} is {amount!r}: a pod shares one GPU (a fraction below 1) or asks "
                                      "for whole GPUs, never a fraction above one")
    return milli


def _check_topology(where: str, topology: TopologyRequest | None, count: int) -> None:
    if topology is None:
        return
    for level in ("required", "preferred", "slice_required"):
        if getattr(topology, level) == "":
            raise Invalid("invalid_field", f"{where}.{level} is empty (leave it out instead)")
    if topology.required is not None and topology.preferred is not None:
        raise Invalid("invalid_field", f"{where}: required and preferred are exclusive (give one)")
    if topology.slice_size is None:
        if topology.slice_required is not None:  # (Kueue's webhook refuses it too)
            raise Invalid("invalid_field", f"{where}.slice_required is given without slice_size (the pods in a slice)")
        return
    if topology.slice_required is None:
        raise Invalid("invalid_field", f"{where}.slice_size is given without slice_required")
    if not 1 <= topology.slice_size <= count:
        raise Invalid(
            "absurd_quantity", f"{where}.slice_size is {topology.slice_size}: it must be 1 to count ({count})"
        )
    if count % topology.slice_size:
        raise Invalid(
            "invalid_field", f"{where}.slice_size is {topology.slice_size}: it must divide count ({count}) into "
            f"whole slices (every slice is placed whole inside one {topology.slice_required} domain)"
        )


def _check_totals(pod_sets: list[PodSet]) -> None:
    pods = sum(ps.count for ps in pod_sets)
    if pods > JOB_PODS_MAX:
        raise Invalid("absurd_quantity", f"pod_sets: {pods} pods in all, over {JOB_PODS_MAX} for one job")
    totals: dict[str, int] = {}
    for ps in pod_sets:
        for name, amount in ps.resources.items():
            totals[name] = totals.get(name, 0) + amount * ps.count
    for name, total in sorted(totals.items()):
        if total > MILLI_MAX:
            raise Invalid(
                "absurd_quantity", f"pod_sets: the job asks for {total} milli {name} in all, over {MILLI_MAX}"
            )


def _runtime_ms(runtime_seconds: float | None) -> int | None:
    if runtime_seconds is None:
        return None
    # A record's JSON cannot carry these (msgspec refuses 1e400 as "Number out of range", an
    # invalid_field); a file `gangway submit` reads as YAML can: refused alike, not sent as none.
    if math.isinf(runtime_seconds):
        raise Invalid("invalid_field", "runtime_seconds: Number out of range")
    if math.isnan(runtime_seconds):
        raise Invalid("invalid_field", "runtime_seconds: not a number (NaN)")
    if not 0 < runtime_seconds <= RUNTIME_SECONDS_MAX:
        raise Invalid(
            "absurd_quantity",
            f"runtime_seconds is {runtime_seconds!r}: it must be over 0 and at most {RUNTIME_SECONDS_MAX} (366 days)",
        )
    runtime_ms = round(runtime_seconds * 1000)
    if runtime_ms == 0:
        raise Invalid("absurd_quantity", f"runtime_seconds is {runtime_seconds!r}: under one millisecond")
    return runtime_ms


def workload_id(job: JobSubmitted) -> str:
    """Workloads are named ``namespace/job_id``: job names are unique per namespace, as in Kubernetes."""
    return f"{job.namespace}/{job.job_id}"


def _check_unique(workload: str, state: State, in_flight: Mapping[str, str]) -> None:
    known = state.workloads.get(workload)
    if known is not None:
        # (a workload's name is its identity on the log for good: its decisions, runs and invoice
        # lines; the submission service does not fold whether it finished, so this says the same)
        raise Invalid(
            "duplicate_job",
            f"job {workload!r} is already a workload (submitted as {known.spec.submission or 'unknown'}): a job's "
            "name stays its own on the log for good, even once it has finished, so submit a new run under a new name",
        )
    if workload in in_flight:
        raise Invalid("duplicate_job", f"job {workload!r} is already being queued")


# --- checking against the contract ---------------------------------------------------------------


def _index(contract: Contract | None) -> ContractIndex:
    if contract is None:
        raise Invalid("no_config", "no contract in force: the platform has not published its queues yet")
    return index_of(contract)


def _local_queue(idx: ContractIndex, namespace: str, queue: str) -> LocalQueue:
    local_queue = idx.local_queues.get((namespace, queue))
    if local_queue is None:
        offered = sorted(name for ns, name in idx.local_queues if ns == namespace)
        raise Invalid(
            "unknown_queue",
            f"queue: no LocalQueue {queue!r} in namespace {namespace!r} "
            f"(there: {', '.join(offered) or 'none'})",
        )
    if local_queue.cluster_queue not in idx.quotas:
        raise Invalid(
            "unknown_queue",
            f"queue: LocalQueue {namespace}/{queue} points at ClusterQueue "
            f"{local_queue.cluster_queue!r}, which the contract does not define",
        )
    cluster_queue = idx.cluster_queues[local_queue.cluster_queue]
    if not idx.contract.selects_namespace(cluster_queue, namespace):
        labels = ", ".join(f"{k}={v}" for k, v in sorted(idx.contract.namespace_labels(namespace).items()))
        raise Invalid(
            "namespace_not_selected",
            f"queue: ClusterQueue {cluster_queue.name!r} (LocalQueue {namespace}/{queue}) does not admit "
            f"namespace {namespace!r}: its namespaceSelector does not match the namespace's labels ({labels}); "
            "Kueue leaves such a workload inadmissible",
        )
    return local_queue


def _priority(idx: ContractIndex, priority_class: str | None, pod_class: str | None, state: State) -> int:
    """Kueue's order: the WorkloadPriorityClass label, else the pod template's Kubernetes
    PriorityClass (the contract's of that name, else the cluster's as the binder reported them: the
    API server refuses a pod naming one it does not have), else the default (the contract's —
    SchedulingPolicy or a globalDefault class it publishes — else the cluster's globalDefault
    class's, else 0)."""
    cluster_classes = state.cluster_priority_classes
    if priority_class is None and pod_class is not None:
        pod_classes = {pc.name: pc.value for pc in idx.contract.pod_priority_classes}
        value = pod_classes.get(pod_class, cluster_classes.get(pod_class))
        if value is None:
            offered = ", ".join(sorted({*pod_classes, *cluster_classes})) or "none"
            raise Invalid("unknown_priority_class", f"priorityClassName: no Kubernetes PriorityClass {pod_class!r} in "
                          f"the contract or the cluster (defined: {offered}); publish it with the contract, create "
                          f"it in the cluster, or set the label kueue.x-k8s.io/priority-class")
        return value
    if priority_class is None:
        if idx.contract.default_priority_from_cluster:
            return cluster_classes.get(state.cluster_default_class, idx.contract.default_priority)
        return idx.contract.default_priority
    found = idx.priority_classes.get(priority_class)
    if found is None:
        offered = ", ".join(sorted(idx.priority_classes)) or "none"
        pod_class_named = any(pc.name == priority_class for pc in idx.contract.pod_priority_classes)
        raise Invalid("unknown_priority_class", f"priority_class: no WorkloadPriorityClass {priority_class!r} "
                      f"(defined: {offered})" + (f"; {priority_class!r} is a Kubernetes PriorityClass: name it in the "
                                                 f"pod template's priorityClassName" if pod_class_named else ""))
    return found.value


def _check_quota_covers(idx: ContractIndex, cluster_queue: str, pod_sets: list[PodSet]) -> None:
    covered = idx.quotas[cluster_queue]
    for i, ps in enumerate(pod_sets):
        for name in ps.resources:
            if name not in covered:
                raise Invalid(
                    NO_QUOTA_REASON,
                    f"pod_sets[{i}].resources[{name!r}]: ClusterQueue {cluster_queue!r} has no quota for "
                    f"{name!r} (it covers: {', '.join(sorted(covered)) or 'nothing'})",
                )


def _check_topology_exists(state: State, pod_sets: list[PodSet]) -> None:
    """Once nodes are known, a required (or slice) level must be a label some node carries."""
    if not state.nodes:
        return
    for i, ps in enumerate(pod_sets):
        t = ps.topology
        for field, level in (("required", t and t.required), ("slice_required", t and t.slice_required)):
            if not level or level == _HOSTNAME:
                continue
            if level == _ISLAND:
                if not any(n.islands for n in state.nodes.values()):
                    raise Invalid(TOPOLOGY_REASON, f"pod_sets[{i}].topology.{field} is {level}: no node of the "
                                  "cluster declares NVLink islands (gangway.io/nvlink-islands), so it could never run")
            elif not any(level in n.labels for n in state.nodes.values()):
                raise Invalid(TOPOLOGY_REASON, f"pod_sets[{i}].topology.{field} is {level}: no node of the cluster "
                              f"carries the label {level}, so it could never run")
