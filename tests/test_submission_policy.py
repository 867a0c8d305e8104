"""The submission decision: every bad input a precise JobRejected, every good one a WorkloadQueued."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangway.events import catalogue as ev, codec
from gangway.events.catalogue import (
    UID_LABEL, ConfigApplied, Envelope, JobRejected, PodSet, TopologyRequest, WorkloadMoved, WorkloadQueued,
)
from gangway.events.contract import ClusterQueue, Contract, FlavorQuotas, LocalQueue, PodPriorityClass, PriorityClass, Quota
from gangway.events.fold import apply
from gangway.events.state import State
from gangway.services.submission.policy import JOB_TYPE, decide_submission, rejection_for_error

SUBMISSION = "gangway.submissions/0/42"
KEY = b"train-1"

CONTRACT = Contract(
    cluster_queues=[
        ClusterQueue(
            name="gpu-cq",
            flavors=[FlavorQuotas(flavor="h100", resources={
                "cpu": Quota(nominal=512_000), "memory": Quota(nominal=2**42 * 1000),
                "nvidia.com/gpu": Quota(nominal=64_000),
            })],
        ),
    ],
    local_queues=[
        LocalQueue(namespace="team-a", name="training", cluster_queue="gpu-cq"),
        LocalQueue(namespace="team-a", name="orphan", cluster_queue="gone-cq"),
    ],
    priority_classes=[PriorityClass(name="high", value=1000), PriorityClass(name="low", value=10)],
    default_priority=100,
)


# --- builders ------------------------------------------------------------------------------------


def make_state(contract: Contract | None = CONTRACT, queued: list[WorkloadQueued] = ()) -> State:
    state = State()
    offset = 0
    if contract is not None:
        state = apply(state, Envelope(id="config/1", source="test", time_ms=1_000,
                                      data=ConfigApplied(contract=contract, digest="d1"), offset=offset))
    for wl in queued:
        offset += 1
        state = apply(state, Envelope(id=f"queued/{offset}", source="test", time_ms=2_000, data=wl, offset=offset))
    return state


def pod_set(**changes) -> dict:
    return {"name": "main", "count": 2, "resources": {"cpu": "500m", "memory": "16Gi", "nvidia.com/gpu": 8}} | changes


def job(**changes) -> dict:
    return {
        "job_id": "train-1", "namespace": "team-a", "queue": "training",
        "pod_sets": [pod_set()], "runtime_seconds": 90.5, "labels": {"team": "vision"},
    } | changes


def without(doc: dict, name: str) -> dict:
    return {k: v for k, v in doc.items() if k != name}


def ce_headers(*, drop: str = "", **replace: bytes) -> list[tuple[str, bytes]]:
    headers = [
        ("ce_specversion", b"1.0"), ("ce_id", b"submit/train-1/1"), ("ce_source", b"test"),
        ("ce_type", JOB_TYPE.encode()), ("ce_time", b"2025-01-01T00:00:00.000Z"), ("content-type", b"application/json"),
    ]
    return [(k, replace.get(k, v)) for k, v in headers if k != drop]


def structured(data: dict, **attrs) -> bytes:
    event = {"specversion": "1.0", "id": "submit/train-1/1", "source": "test", "type": JOB_TYPE,
             "time": "2025-01-01T00:00:00.000Z", "datacontenttype": "application/json", "data": data} | attrs
    return json.dumps(event).encode()


def plain(data: dict) -> bytes:
    return json.dumps(data).encode()


def queued(workload: str = "team-a/train-1", submission: str = "gangway.submissions/0/7") -> WorkloadQueued:
    return WorkloadQueued(
        workload=workload, namespace="team-a", queue="training", cluster_queue="gpu-cq", priority_class=None,
        priority=100, kind="Job", pod_sets=[PodSet(name="main", count=1, resources={"cpu": 1000})],
        submission=submission,
    )


# --- every bad input --------------------------------------------------------------------------------


@dataclass
class Bad:
    name: str
    value: bytes | None
    reason: str
    #: Words the message must contain (the field it is about).
    names: tuple[str, ...]
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    job_id: str = "train-1"
    state: State | None = None
    in_flight: frozenset[str] = frozenset()
    max_bytes: int = 1_048_576


BAD = [
    # size, encoding, JSON
    Bad("a payload over max_bytes is rejected before it is even decoded", b"\xff" * 2_000, "oversized",
        ("2000 bytes", "1000"), job_id="", max_bytes=1_000),
    Bad("a payload that is not UTF-8 is rejected as not_utf8", b'{"job_id": "train-\xff"}', "not_utf8",
        ("UTF-8", "byte 18"), job_id=""),
    Bad("a CloudEvent header that is not UTF-8 is rejected as not_utf8", plain(job()), "not_utf8", ("ce_id",),
        headers=ce_headers(ce_id=b"\xfe\xff")),
    Bad("truncated JSON is malformed_json", b'{"job_id": "train-1", "pod_sets": [', "malformed_json", ("JSON",), job_id=""),
    Bad("an empty value is malformed_json", b"", "malformed_json", ("JSON",), job_id=""),
    Bad("a tombstone (no value) is malformed_json", None, "malformed_json", ("no value",), job_id=""),
    Bad("JSON nested too deeply is malformed_json", b'{"labels": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "malformed_json",
        ("nested too deeply",), job_id=""),
    Bad("a structured event nested too deeply is malformed_json",
        b'{"specversion": "1.0", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "malformed_json",
        ("nested too deeply",), job_id=""),
    Bad("a JSON array instead of an object is an invalid_field", b"[1, 2]", "invalid_field", ("JSON object",), job_id=""),
    # CloudEvents
    Bad("a binary-mode event without ce_id is a malformed_cloudevent", plain(job()), "malformed_cloudevent", ("'id'",),
        headers=ce_headers(drop="ce_id")),
    Bad("ce_ headers without ce_specversion are a malformed_cloudevent", plain(job()), "malformed_cloudevent",
        ("ce_specversion",), headers=ce_headers(drop="ce_specversion")),
    Bad("a binary-mode event with a bad ce_time is a malformed_cloudevent", plain(job()), "malformed_cloudevent",
        ("time",), headers=ce_headers(ce_time=b"yesterday")),
    Bad("a structured event of specversion 0.3 is a malformed_cloudevent", structured(job(), specversion="0.3"),
        "malformed_cloudevent", ("specversion",)),
    Bad("a structured event without data is a malformed_cloudevent", json.dumps({
        "specversion": "1.0", "id": "x", "source": "s", "type": JOB_TYPE, "job_id": "train-1"}).encode(),
        "malformed_cloudevent", ("data",)),
    Bad("a binary-mode event of another type is wrong_event_type", plain(job()), "wrong_event_type", ("ce_type", "queued"),
        headers=ce_headers(ce_type=b"io.gangway.workload.queued.v1")),
    Bad("a structured event of another type is wrong_event_type", structured(job(), type="com.example.order.v1"),
        "wrong_event_type", ("type", "com.example.order.v1")),
    # shapes and types
    Bad("a count given as a string is an invalid_field", plain(job(pod_sets=[pod_set(count="2")])), "invalid_field",
        ("pod_sets[0].count",)),
    Bad("a resource given as a boolean is an invalid_field", plain(job(pod_sets=[pod_set(resources={"cpu": True})])),
        "invalid_field", ("pod_sets[0].resources",)),
    Bad("an unknown field is an invalid_field", plain(job(gpus=8)), "invalid_field", ("gpus: unknown field",)),
    Bad("a number out of range in a structured event is malformed_json",
        structured(job()).replace(b'"runtime_seconds": 90.5', b'"runtime_seconds": 1e400'), "malformed_json",
        ("out of range",)),
    Bad("a number out of range is an invalid_field naming it", b'{"job_id": "train-1", "runtime_seconds": 1e400}',
        "invalid_field", ("runtime_seconds",)),
    Bad("a job without a queue is a missing_field", plain(without(job(), "queue")), "missing_field", ("queue",)),
    Bad("a pod set without a name is a missing_field", plain(job(pod_sets=[without(pod_set(), "name")])),
        "missing_field", ("pod_sets[0].name",)),
    Bad("a missing field in a structured event is a missing_field", structured(without(job(), "namespace")),
        "missing_field", ("namespace",)),
    Bad("an unknown kind is an invalid_field", plain(job(kind="Deployment")), "invalid_field", ("kind",)),
    # quantities
    Bad("a resource that is not a Kubernetes quantity is a bad_quantity",
        plain(job(pod_sets=[pod_set(resources={"cpu": "lots"})])), "bad_quantity", ("pod_sets[0].resources['cpu']", "lots")),
    Bad("a resource finer than a thousandth is a bad_quantity",
        plain(job(pod_sets=[pod_set(resources={"cpu": "0.0001"})])), "bad_quantity", ("pod_sets[0].resources['cpu']",)),
    Bad("a negative resource is an absurd_quantity", plain(job(pod_sets=[pod_set(resources={"memory": "-1Gi"})])),
        "absurd_quantity", ("pod_sets[0].resources['memory']",)),
    Bad("more than 64 GPUs in one pod is an absurd_quantity",
        plain(job(pod_sets=[pod_set(resources={"nvidia.com/gpu": 65})])), "absurd_quantity",
        ("pod_sets[0].resources['nvidia.com/gpu']", "64")),
    Bad("a pod set of zero pods is an absurd_quantity", plain(job(pod_sets=[pod_set(count=0)])), "absurd_quantity",
        ("pod_sets[0].count",)),
    Bad("a pod set of 10001 pods is an absurd_quantity", plain(job(pod_sets=[pod_set(count=10_001)])),
        "absurd_quantity", ("pod_sets[0].count", "10000")),
    Bad("more than 100000 pods in one job is an absurd_quantity",
        plain(job(pod_sets=[pod_set(name=f"p{i}", count=10_000) for i in range(11)])), "absurd_quantity",
        ("pod_sets", "110000")),
    Bad("more than 100 pod sets is an absurd_quantity",
        plain(job(pod_sets=[pod_set(name=f"p{i}", count=1) for i in range(101)])), "absurd_quantity", ("pod_sets", "101")),
    Bad("a min_count above count is an absurd_quantity", plain(job(pod_sets=[pod_set(min_count=3)])),
        "absurd_quantity", ("pod_sets[0].min_count",)),
    Bad("a runtime of zero seconds is an absurd_quantity", plain(job(runtime_seconds=0)), "absurd_quantity",
        ("runtime_seconds",)),
    Bad("a runtime over 366 days is an absurd_quantity", plain(job(runtime_seconds=367 * 86_400)), "absurd_quantity",
        ("runtime_seconds", "366 days")),
    Bad("a slice larger than its pod set is an absurd_quantity",
        plain(job(pod_sets=[pod_set(topology={"slice_required": "rack", "slice_size": 3})])), "absurd_quantity",
        ("pod_sets[0].topology.slice_size",)),
    # names
    Bad("two pod sets of one name are an invalid_field", plain(job(pod_sets=[pod_set(), pod_set()])), "invalid_field",
        ("pod_sets[1].name", "main")),
    Bad("no pod sets at all is an invalid_field", plain(job(pod_sets=[])), "invalid_field", ("pod_sets",)),
    Bad("an empty job_id is an invalid_field", plain(job(job_id="")), "invalid_field", ("job_id",), job_id=""),
    Bad("an empty namespace is an invalid_field", plain(job(namespace="")), "invalid_field", ("namespace",)),
    Bad("a namespace that is no Kubernetes namespace name is an invalid_field", plain(job(namespace="Bad NS")),
        "invalid_field", ("namespace 'Bad NS'", "DNS-1123 label")),
    Bad("a GPU request above one that is not whole is a bad_quantity",
        plain(job(pod_sets=[pod_set(resources={"nvidia.com/gpu": "1.5"})])), "bad_quantity",
        ("nvidia.com/gpu", "never a fraction above one")),
    Bad("an empty queue is an invalid_field", plain(job(queue="")), "invalid_field", ("queue",)),
    Bad("a job_id that is not a Kubernetes name is an invalid_field", plain(job(job_id="Train_1")), "invalid_field",
        ("job_id", "DNS-1123"), job_id="Train_1"),
    Bad("a job_id over 253 characters is an invalid_field", plain(job(job_id="a" * 254)), "invalid_field",
        ("job_id", "253"), job_id="a" * 254),
    Bad("required and preferred topology together are an invalid_field",
        plain(job(pod_sets=[pod_set(topology={"required": "rack", "preferred": "block"})])), "invalid_field",
        ("pod_sets[0].topology",)),
    # the contract
    Bad("a job before any contract is published is no_config", plain(job()), "no_config", ("contract",),
        state=make_state(contract=None)),
    Bad("a queue the namespace does not have is unknown_queue", plain(job(queue="inference")), "unknown_queue",
        ("queue", "inference", "team-a", "(there: orphan, training)")),
    Bad("a queue of another namespace is unknown_queue", plain(job(namespace="team-b")), "unknown_queue",
        ("queue", "team-b", "(there: none)")),
    Bad("a LocalQueue pointing at a missing ClusterQueue is unknown_queue", plain(job(queue="orphan")),
        "unknown_queue", ("queue", "gone-cq")),
    Bad("a priority class nobody defined is unknown_priority_class", plain(job(priority_class="urgent")),
        "unknown_priority_class", ("priority_class", "urgent")),
    Bad("a pod template's PriorityClass the contract does not hold is unknown_priority_class",
        plain(job(pod_sets=[pod_set(priority_class_name="urgent")])), "unknown_priority_class",
        ("priorityClassName", "urgent", "defined: none", "kueue.x-k8s.io/priority-class")),
    Bad("a resource the ClusterQueue has no quota for is no_quota",
        plain(job(pod_sets=[pod_set(resources={"cpu": 1, "example.com/fpga": 1})])), "no_quota",
        ("pod_sets[0].resources['example.com/fpga']", "gpu-cq", "no quota")),
    # duplicates
    Bad("a job id already in the state is duplicate_job", plain(job()), "duplicate_job", ("job", "team-a/train-1"),
        state=make_state(queued=[queued()])),
    Bad("a job id still in flight is duplicate_job", plain(job()), "duplicate_job", ("job", "team-a/train-1"),
        in_flight=frozenset({"team-a/train-1"})),
    Bad("a duplicate in binary mode is duplicate_job too", plain(job()), "duplicate_job", ("job",),
        headers=ce_headers(), in_flight=frozenset({"team-a/train-1"})),
]


@pytest.mark.parametrize("case", BAD, ids=[case.name for case in BAD])
def test_bad_input_is_rejected_with_its_reason_and_original_record(case: Bad):
    headers = case.headers + [("traceparent", b"00-abc-01"), ("x-binary", b"\x00\xff")]
    state = case.state if case.state is not None else make_state()

    result = decide_submission(case.value, KEY, headers, state, dict.fromkeys(case.in_flight, ""), SUBMISSION, case.max_bytes)

    assert isinstance(result, JobRejected), result
    assert result.reason == case.reason, result.message
    for word in case.names:
        assert word in result.message, result.message
    assert result.original == (case.value if case.value is not None else b"")
    assert result.original_key == KEY
    assert result.original_headers == list(headers)
    assert result.submission == SUBMISSION
    assert result.job_id == case.job_id


def test_a_rejection_survives_the_wire_with_the_original_bytes_intact():
    value = b'{"job_id": "train-1", \xff\x00}'
    rejected = decide_submission(value, None, [("x", b"\x80")], make_state(), {}, SUBMISSION)
    env = Envelope(id="reject/1", source="test", time_ms=1, data=rejected)

    decoded = codec.from_record(*codec.to_binary(env)).data

    assert decoded == rejected
    assert decoded.original == value and decoded.original_headers == [("x", b"\x80")]


def test_rejection_for_error_keeps_the_record_and_recovers_the_job_id():
    value = plain(job())
    rejected = rejection_for_error(value, KEY, [("h", b"v")], SUBMISSION, RuntimeError("boom"))

    assert rejected.job_id == "train-1"
    assert "RuntimeError: boom" in rejected.message
    assert (rejected.original, rejected.original_key, rejected.original_headers) == (value, KEY, [("h", b"v")])


def test_a_request_of_zero_asks_for_nothing_of_that_resource_as_in_kubernetes():
    queued = decide_submission(plain(job(pod_sets=[pod_set(resources={"cpu": "1", "nvidia.com/gpu": "0"})])), KEY, [],
                               make_state(), {}, SUBMISSION)
    assert isinstance(queued, WorkloadQueued) and queued.pod_sets[0].resources == {"cpu": 1000}


def test_a_pod_asking_for_pods_is_rejected_as_kubernetes_refuses_it():
    """``pods`` is a node's count (max-pods) and a queue's (coveredResources), never a container's
    request: asked, it would count each pod twice where a queue covers pods."""
    rejected = decide_submission(plain(job(pod_sets=[pod_set(resources={"cpu": "1", "pods": "1"})])), KEY, [],
                                 make_state(), {}, SUBMISSION)
    assert isinstance(rejected, JobRejected) and rejected.reason == "invalid_field"
    assert rejected.message.startswith("pod_sets[0].resources['pods']: 'pods' is a node's count of pods")


def test_a_producers_preferred_node_affinity_is_kept_and_its_weight_checked():
    term = {"weight": 30, "preference": {"match_expressions": [{"key": "zone", "operator": "In", "values": ["2"]}]}}
    queued = decide_submission(plain(job(pod_sets=[pod_set(preferred_affinity=[term])])), KEY, [], make_state(), {},
                               SUBMISSION)
    assert isinstance(queued, WorkloadQueued) and queued.pod_sets[0].preferred_affinity[0].weight == 30
    rejected = decide_submission(plain(job(pod_sets=[pod_set(preferred_affinity=[term | {"weight": 0}])])), KEY, [],
                                 make_state(), {}, SUBMISSION)
    assert isinstance(rejected, JobRejected) and rejected.reason == "invalid_field"
    assert rejected.message == ("pod_sets[0].preferred_affinity[0].weight is 0: a preferred term's weight is 1 to 100 "
                                "(as Kubernetes takes it)")


def test_a_rejection_names_the_namespace_the_record_names_so_explain_finds_only_its_own():
    from gangway.read.explain import rejected_lines
    unknown_queue = decide_submission(plain(job(queue="nope")), KEY, [], make_state(), {}, SUBMISSION)
    unreadable = decide_submission(structured(job(namespace="team-b", pod_sets="x")), KEY, [], make_state(), {},
                                   SUBMISSION)
    no_namespace = decide_submission(b'{"job_id": "train-1", "namespace": 7}', KEY, [], make_state(), {}, SUBMISSION)
    assert (unknown_queue.namespace, unreadable.namespace, no_namespace.namespace) == ("team-a", "team-b", "")
    assert {unknown_queue.job_id, unreadable.job_id, no_namespace.job_id} == {"train-1"}
    log = [Envelope(id=f"reject/{i}", source="test", time_ms=1, data=r, offset=i)
           for i, r in enumerate([unknown_queue, unreadable, no_namespace])]

    def offsets(workload):
        return [int(line.split("]")[0].rsplit(" ", 1)[1]) for line in rejected_lines(log, workload)]

    # team-b's rejection is not team-a's; one whose namespace could not be read may be either's
    assert offsets("team-a/train-1") == [0, 2]
    assert offsets("team-b/train-1") == [1, 2]
    assert offsets("train-1") == [0, 1, 2]
    assert offsets("team-a/other") == []
    assert rejected_lines(log, "team-b/train-1")[0].split("] ", 1)[1].startswith("team-b/train-1 rejected (")


# --- valid jobs ----------------------------------------------------------------------------------


EXPECTED = WorkloadQueued(
    workload="team-a/train-1", namespace="team-a", queue="training", cluster_queue="gpu-cq", priority_class=None,
    priority=100, kind="Job",
    pod_sets=[PodSet(name="main", count=2, resources={"cpu": 500, "memory": 16 * 2**30 * 1000, "nvidia.com/gpu": 8000})],
    runtime_ms=90_500, labels={"team": "vision"}, submission=SUBMISSION,
)

MODES = [
    ("a binary-mode CloudEvent", plain(job()), ce_headers(), "test submit/train-1/1"),
    ("a binary-mode CloudEvent with upper-case header names", plain(job()),
     [(k.upper(), v) for k, v in ce_headers()], "test submit/train-1/1"),
    ("a structured-mode CloudEvent", structured(job()), [("content-type", b"application/cloudevents+json")],
     "test submit/train-1/1"),
    ("plain JSON of the JobSubmitted", plain(job()), [], ""),
]


@pytest.mark.parametrize("value, headers, submitted_as", [m[1:] for m in MODES], ids=[m[0] for m in MODES])
def test_a_valid_job_becomes_a_workload_in_every_input_mode(value, headers, submitted_as):
    expected = msgspec.structs.replace(EXPECTED, submitted_as=submitted_as)
    assert decide_submission(value, KEY, headers, make_state(), {}, SUBMISSION) == expected


VALID = [
    ("a named priority class gives its value", job(priority_class="high"),
     {"priority_class": "high", "priority": 1000}),
    ("no runtime gives no runtime_ms", without(job(), "runtime_seconds"), {"runtime_ms": None}),
    ("runtime is rounded to the millisecond", job(runtime_seconds=1.0005), {"runtime_ms": 1000}),
    ("a PyTorchJob keeps its kind", job(kind="PyTorchJob"), {"kind": "PyTorchJob"}),
    ("a pod asking for nothing is taken, as Kueue takes a BestEffort pod", job(pod_sets=[pod_set(resources={})]),
     {"pod_sets": [PodSet(name="main", count=2, resources={})]}),
    ("a pod asking zero of everything asks for nothing",
     job(pod_sets=[pod_set(resources={"cpu": "0", "nvidia.com/gpu": 0})]),
     {"pod_sets": [PodSet(name="main", count=2, resources={})]}),
    ("topology passes through", job(pod_sets=[pod_set(topology={"slice_required": "rack", "slice_size": 2})]),
     {"pod_sets": [PodSet(name="main", count=2, resources=EXPECTED.pod_sets[0].resources,
                          topology=TopologyRequest(slice_required="rack", slice_size=2))]}),
    ("64 GPUs in a pod is allowed", job(pod_sets=[pod_set(count=1, resources={"nvidia.com/gpu": "64"})]),
     {"pod_sets": [PodSet(name="main", count=1, resources={"nvidia.com/gpu": 64_000})]}),
    ("a dotted job id is a valid Kubernetes name", job(job_id="team-a.train-1"), {"workload": "team-a/team-a.train-1"}),
]


@pytest.mark.parametrize("doc, changes", [v[1:] for v in VALID], ids=[v[0] for v in VALID])
def test_valid_job_details(doc, changes):
    result = decide_submission(plain(doc), KEY, [], make_state(), {}, SUBMISSION)
    assert result == msgspec.structs.replace(EXPECTED, **changes)


K8S_CLASSES = msgspec.structs.replace(CONTRACT, pod_priority_classes=[
    PodPriorityClass(name="batch-high", value=500), PodPriorityClass(name="cluster-default", value=7, global_default=True)],
    default_priority=7)  # what reading a globalDefault PriorityClass gives (test_contract)
POD_CLASS = [
    ("a pod template's PriorityClass gives its value", job(pod_sets=[pod_set(priority_class_name="batch-high")]), 500),
    ("the first pod set that names one decides",
     job(pod_sets=[pod_set(name="launcher", count=1), pod_set(name="workers", priority_class_name="batch-high")]), 500),
    ("the WorkloadPriorityClass label wins", job(priority_class="low", pod_sets=[pod_set(priority_class_name="batch-high")]), 10),
    ("naming none gives the default", job(), 7),
]


@pytest.mark.parametrize("doc, priority", [c[1:] for c in POD_CLASS], ids=[c[0] for c in POD_CLASS])
def test_a_kubernetes_priority_class_sets_the_priority_of_a_job_without_the_label(doc, priority):
    """Kueue's order: kueue.x-k8s.io/priority-class, else the pod template's priorityClassName, else
    the default."""
    result = decide_submission(plain(doc), KEY, [], make_state(K8S_CLASSES), {}, SUBMISSION)
    assert isinstance(result, WorkloadQueued), result
    assert result.priority == priority
    unknown = decide_submission(plain(job(pod_sets=[pod_set(priority_class_name="nope")])), KEY, [],
                                make_state(K8S_CLASSES), {}, SUBMISSION)
    assert unknown.reason == "unknown_priority_class" and "defined: batch-high, cluster-default" in unknown.message


def test_a_pod_template_may_name_one_of_the_clusters_priority_classes_and_the_contracts_wins():
    """Kueue reads the cluster's PriorityClasses: the binder puts them on the log
    (PriorityClassObserved); one the contract publishes under the same name keeps the contract's value."""
    state = make_state(K8S_CLASSES)
    for offset, observed in enumerate([ev.PriorityClassObserved(name="team-high", value=900),
                                       ev.PriorityClassObserved(name="batch-high", value=1),
                                       ev.PriorityClassObserved(name="old", value=3),
                                       ev.PriorityClassObserved(name="old", value=3, gone=True)], start=10):
        state = apply(state, Envelope(id=f"pc/{offset}", source="gangway/binder", time_ms=2_000, data=observed,
                                      offset=offset))
    assert state.cluster_priority_classes == {"team-high": 900, "batch-high": 1}

    def priority(pod_class: str):
        return decide_submission(plain(job(pod_sets=[pod_set(priority_class_name=pod_class)])), KEY, [], state, {},
                                 SUBMISSION)
    assert priority("team-high").priority == 900
    assert priority("batch-high").priority == 500  # (the contract's)
    gone = priority("old")
    assert gone.reason == "unknown_priority_class" and "in the contract or the cluster (defined: batch-high, " \
        "cluster-default, team-high)" in gone.message, gone.message


def test_the_clusters_global_default_priority_class_gives_the_default_unless_the_contract_says_one():
    """Kubernetes and Kueue: a job that names no class takes the globalDefault PriorityClass's value.
    The contract's default (a SchedulingPolicy's, or a globalDefault class it publishes) wins; a
    class no longer globalDefault, or deleted, gives the default back (0)."""
    def default_priority(contract, *observed):
        state = make_state(contract)
        for offset, e in enumerate(observed, start=10):
            state = apply(state, Envelope(id=f"pc/{offset}", source="gangway/binder", time_ms=2_000, data=e,
                                          offset=offset))
        return decide_submission(plain(job()), KEY, [], state, {}, SUBMISSION).priority

    silent = msgspec.structs.replace(CONTRACT, default_priority=0, default_priority_from_cluster=True)
    cluster_default = ev.PriorityClassObserved(name="team-normal", value=40, global_default=True)
    assert default_priority(silent) == 0
    assert default_priority(silent, cluster_default) == 40
    assert default_priority(CONTRACT, cluster_default) == CONTRACT.default_priority == 100
    assert default_priority(silent, cluster_default, ev.PriorityClassObserved(name="team-normal", value=40)) == 0
    assert default_priority(silent, cluster_default,
                            ev.PriorityClassObserved(name="team-normal", value=40, gone=True)) == 0
    assert default_priority(silent, ev.PriorityClassObserved(name="other", value=5),
                            cluster_default) == 40


def test_a_label_naming_a_kubernetes_priority_class_says_where_that_class_is_named():
    result = decide_submission(plain(job(priority_class="batch-high")), KEY, [], make_state(K8S_CLASSES), {}, SUBMISSION)
    assert result.reason == "unknown_priority_class"
    assert result.message.endswith("'batch-high' is a Kubernetes PriorityClass: name it in the pod template's "
                                   "priorityClassName")


def test_a_redelivered_submission_that_is_already_a_workload_gives_nothing():
    state = make_state(queued=[queued(submission=SUBMISSION)])
    assert decide_submission(plain(job()), KEY, [], state, {}, SUBMISSION) is None


def test_the_same_job_from_another_record_is_a_duplicate_not_a_redelivery():
    state = make_state(queued=[queued(submission="gangway.submissions/0/7")])
    result = decide_submission(plain(job()), KEY, [], state, {}, SUBMISSION)
    assert isinstance(result, JobRejected) and result.reason == "duplicate_job"
    assert "gangway.submissions/0/7" in result.message


def test_a_finished_job_submitted_again_is_told_the_name_stays_its_own_and_to_use_a_new_one():
    state = make_state(queued=[queued(submission="gangway.submissions/0/7")])
    result = decide_submission(plain(job()), KEY, [], state, {}, SUBMISSION)
    assert isinstance(result, JobRejected) and result.reason == "duplicate_job"
    assert result.message.endswith("even once it has finished, so submit a new run under a new name")


def test_the_same_cloudevent_sent_again_is_a_redelivery_folded_or_in_flight():
    """A producer that never got its acknowledgement sends the record again: the same source and id
    (CloudEvents' duplicate), at a new offset. Whether the first is folded or still in flight, the
    second gives nothing; a different CloudEvent for the same job is still a duplicate job."""
    first = decide_submission(plain(job()), KEY, ce_headers(), make_state(), {}, "gangway.submissions/0/7")
    assert first.submitted_as == "test submit/train-1/1"
    folded = make_state(queued=[first])
    assert decide_submission(plain(job()), KEY, ce_headers(), folded, {}, SUBMISSION) is None
    assert decide_submission(plain(job()), KEY, ce_headers(), make_state(), {first.workload: first.submitted_as},
                             SUBMISSION) is None
    for other in (ce_headers(ce_id=b"submit/train-1/2"), ce_headers(ce_source=b"another-producer")):
        again = decide_submission(plain(job()), KEY, other, folded, {}, SUBMISSION)
        assert isinstance(again, JobRejected) and again.reason == "duplicate_job"
    in_flight = decide_submission(plain(job()), KEY, ce_headers(ce_id=b"x"), make_state(), {first.workload: "test y"},
                                  SUBMISSION)
    assert isinstance(in_flight, JobRejected) and in_flight.reason == "duplicate_job"


# --- properties -----------------------------------------------------------------------------------


HEADER_NAMES = st.one_of(
    st.sampled_from(["ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "ce_subject", "content-type"]),
    st.text(max_size=12),
)
HEADER_VALUES = st.one_of(
    st.sampled_from([b"1.0", JOB_TYPE.encode(), b"2025-01-01T00:00:00Z", b"application/json"]),
    st.binary(max_size=24),
)
HEADERS = st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=6)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.binary(max_size=600) | st.just(b"{}"), headers=HEADERS, key=st.none() | st.binary(max_size=8))
def test_arbitrary_bytes_and_headers_are_rejected_never_raised(value, headers, key):
    result = decide_submission(value, key, headers, make_state(), {}, SUBMISSION)

    assert isinstance(result, JobRejected)
    assert result.original == value and result.original_key == key
    assert result.original_headers == list(headers)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    where=st.sampled_from(["job_id", "namespace", "queue", "kind", "priority_class", "runtime_seconds", "labels",
                           "pod_sets", "name", "count", "resources", "topology", "min_count", "cpu"]),
    junk=JSON_VALUES,
    mode=st.sampled_from(["binary", "structured", "plain"]),
)
def test_any_json_in_any_field_is_decided_never_raised(where, junk, mode):
    doc = job()
    if where in ("name", "count", "resources", "topology", "min_count"):
        doc["pod_sets"] = [pod_set(**{where: junk})]
    elif where == "cpu":
        doc["pod_sets"] = [pod_set(resources={"cpu": junk})]
    else:
        doc[where] = junk
    value = structured(doc) if mode == "structured" else plain(doc)
    headers = ce_headers() if mode == "binary" else []

    result = decide_submission(value, KEY, headers, make_state(), {}, SUBMISSION)

    assert isinstance(result, (WorkloadQueued, JobRejected))
    if isinstance(result, JobRejected):
        assert result.original == value and result.message


def test_the_policy_imports_only_the_standard_library_msgspec_and_gangway_events():
    import ast
    import sys

    from gangway.services.submission import policy

    tree = ast.parse(open(policy.__file__, encoding="utf-8").read())
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    foreign = {
        m for m in modules
        if m.split(".")[0] not in sys.stdlib_module_names and m != "msgspec" and not m.startswith("gangway.events")
    }
    assert foreign == set()


# --- contracts from gangway.config ----------------------------------------------------------------


def test_a_contract_on_the_config_topic_is_copied_once_and_anything_else_is_rejected_bytes_kept():
    from gangway.contract.kueue import contract_digest
    from gangway.events import codec
    from gangway.services.submission.config import SOURCE, decide_config

    def record(data) -> tuple[bytes, list]:
        return codec.to_binary(Envelope(id="config/x/1", source=SOURCE, time_ms=5, data=data))

    other = msgspec.structs.replace(CONTRACT, cluster_queues=CONTRACT.cluster_queues[:0])
    applied = ConfigApplied(contract=other, digest=contract_digest(other), source="ops.yaml")
    value, headers = record(applied)
    assert decide_config(value, b"default", headers, make_state(), "gangway.config/0/0") == applied
    now_in_force = apply(make_state(), Envelope(id="config/2", source="test", time_ms=2, data=applied, offset=1))
    assert decide_config(value, b"default", headers, now_in_force, "gangway.config/0/1") is None
    forged = msgspec.structs.replace(applied, digest="0" * 64)
    for value, headers, reason in (
        (*record(forged), "invalid_field"),
        (*record(queued()), "wrong_event_type"),
        (b"\xff\x00 not a CloudEvent", [("ce_specversion", b"1.0")], None),
    ):
        out = decide_config(value, b"k", headers, make_state(), "gangway.config/0/2")
        assert isinstance(out, JobRejected) and out.original == value and out.submission == "gangway.config/0/2"
        assert reason is None or out.reason == reason, out


# --- the submission service's own fold --------------------------------------------------------------


def test_submission_decides_alike_on_its_projection_of_the_log_and_on_the_whole_fold():
    """The submission service folds only what it reads (``SubmissionService.folds``): on a log where
    workloads were admitted, placed, run and finished, a node removed and the contract changed,
    every kind of record it decides gets the same answer from that state as from the whole."""
    from gangway.events.catalogue import NodeObserved, NodeRemoved
    from gangway.events.fold import handlers_for
    from gangway.services.submission.service import SubmissionService
    from gangway.services.submission.telemetry import decide_telemetry
    from gangway.sim import Simulation

    sim = Simulation()
    sim.configure(CONTRACT)
    sim.add_nodes([NodeObserved(node=f"n{i}", allocatable={"cpu": 64_000, "memory": 2**40 * 1000, "nvidia.com/gpu": 8000},
                                labels={"rack": f"r{i % 2}"}) for i in range(4)])
    for i in range(12):
        sim.submit(decide_submission(plain(job(job_id=f"train-{i}")), KEY, ce_headers(ce_id=f"submit/{i}".encode()),
                                     sim.state, {}, f"gangway.submissions/0/{i}"))
    sim.run(until_ms=sim.now_ms + 200_000)
    sim.append("gone/n3", sim.now_ms, NodeRemoved(node="n3"))
    sim.configure(msgspec.structs.replace(CONTRACT, default_priority=5))
    sim.run(until_ms=sim.now_ms + 100_000)
    phases = {wl.phase for wl in sim.state.workloads.values()}
    assert {"finished", "running", "pending"} <= phases, phases

    projected = State()
    handlers = handlers_for(SubmissionService.folds)
    for env in sim.log:
        apply(projected, env, handlers)
    assert (projected.offset, projected.time_ms) == (sim.state.offset, sim.state.time_ms)
    records = [
        (plain(job(job_id="train-3")), ce_headers(ce_id=b"submit/3"), "gangway.submissions/0/3"),  # redelivered
        (plain(job(job_id="train-3")), ce_headers(ce_id=b"submit/3"), SUBMISSION),  # the same CloudEvent again
        (plain(job(job_id="train-4")), ce_headers(ce_id=b"other"), SUBMISSION),  # a duplicate job
        (plain(job(job_id="train-99")), [], SUBMISSION),  # a new one
        (plain(job(job_id="t", pod_sets=[pod_set(topology={"required": "rack"})])), [], SUBMISSION),
        (plain(job(job_id="t", pod_sets=[pod_set(topology={"required": "zone"})])), [], SUBMISSION),
        (plain(job(job_id="t", queue="orphan")), [], SUBMISSION),
    ]
    for value, headers, where in records:
        assert decide_submission(value, KEY, headers, projected, {}, where) \
            == decide_submission(value, KEY, headers, sim.state, {}, where)
    for workload in ("team-a/train-0", "team-a/train-11", "team-a/nobody"):
        value = plain({"workload": workload, "tokens": 5, "observed_ms": 1})
        headers = ce_headers(ce_type=b"io.gangway.workload.progress.v1")
        assert decide_telemetry(value, None, headers, projected, "t/0/1") \
            == decide_telemetry(value, None, headers, sim.state, "t/0/1")
    assert (projected.contract, projected.contract_digest) == (sim.state.contract, sim.state.contract_digest)
    assert sorted(projected.nodes) == sorted(sim.state.nodes) == ["n0", "n1", "n2"]
    with pytest.raises(ValueError, match="JobRejected"):  # not an event of the log
        handlers_for({JobRejected})


# --- what strangerB's report found (producers) --------------------------------------------------


def test_two_documents_of_one_job_sent_by_the_cli_are_two_submissions_not_a_redelivery():
    """Each record ``gangway submit`` writes has a CloudEvent id of its own (namespace, job, time and a
    nonce): a second job of the same name is a duplicate_job, even sent in the same millisecond; the
    very record sent again (a producer's retry) is still a re-delivery."""
    from gangway.events.catalogue import JobSubmitted
    from gangway.services.submission.manifests import to_cloudevent_record
    small, big = (msgspec.convert(job(pod_sets=[pod_set(count=n)]), JobSubmitted) for n in (1, 2))
    first, second = to_cloudevent_record(small, "gangway/cli", 5), to_cloudevent_record(big, "gangway/cli", 5)
    assert dict(first[2])["ce_id"] != dict(second[2])["ce_id"]
    assert dict(first[2])["ce_id"].startswith(b"submit/team-a/train-1/5/")
    queued_first = decide_submission(first[1], first[0], first[2], make_state(), {}, "gangway.submissions/0/7")
    assert isinstance(queued_first, WorkloadQueued)
    for in_state, in_flight in ((make_state(queued=[queued_first]), {}),
                                (make_state(), {queued_first.workload: queued_first.submitted_as})):
        again = decide_submission(second[1], second[0], second[2], in_state, in_flight, SUBMISSION)
        assert isinstance(again, JobRejected) and again.reason == "duplicate_job", again
        assert decide_submission(first[1], first[0], first[2], in_state, in_flight, SUBMISSION) is None


def test_an_oversized_record_is_rejected_naming_its_namespace_and_job():
    big = plain(job(labels={f"l{i}": "x" * 100 for i in range(12_000)}))
    assert len(big) > 1_048_576
    rejected = decide_submission(big, KEY, [], make_state(), {}, SUBMISSION)
    assert (rejected.reason, rejected.namespace, rejected.job_id) == ("oversized", "team-a", "train-1")
    assert rejected.original == big


def test_explain_finds_a_rejected_job_by_the_id_as_submitted_even_with_a_slash():
    from gangway.read.explain import rejected_lines
    rejected = decide_submission(plain(job(job_id="a/b", namespace="team-a")), KEY, [], make_state(), {}, SUBMISSION)
    assert (rejected.reason, rejected.job_id, rejected.namespace) == ("invalid_field", "a/b", "team-a")
    unnamed = decide_submission(b"not json", KEY, [], make_state(), {}, SUBMISSION)
    assert (unnamed.job_id, unnamed.namespace) == ("", "")
    log = [Envelope(id=f"reject/{i}", source="test", time_ms=1, data=r, offset=i) for i, r in enumerate([rejected, unnamed])]
    for name in ("team-a/a/b", "a/b"):
        assert len(rejected_lines(log, name)) == 1, name
    for name in ("team-b/a/b", "b", "other", "team-a/"):  # (a rejection that names no job is no job's)
        assert rejected_lines(log, name) == [], name


def test_a_checkpoint_with_a_negative_step_is_rejected_whole():
    from gangway.events.catalogue import CheckpointSaved
    from gangway.services.submission.telemetry import decide_telemetry
    state = make_state(queued=[queued()])
    for step, ok in ((-5, False), (0, True), (1200, True)):
        value = plain({"workload": "team-a/train-1", "step": step})
        result = decide_telemetry(value, b"k", [("h", b"v")], state, "gangway.telemetry/0/3")
        if ok:
            assert isinstance(result, CheckpointSaved) and result.step == step
        else:
            assert isinstance(result, JobRejected) and result.reason == "invalid_field" and "step" in result.message
            assert (result.original, result.original_key, result.original_headers) == (value, b"k", [("h", b"v")])


# --- a producer takes its job back ----------------------------------------------------------------


def withdrawal_record(namespace: str = "team-a", job_id: str = "train-1", reason: str = "") -> tuple[bytes, list]:
    from gangway.events.catalogue import JobWithdrawn
    from gangway.services.submission.manifests import to_cloudevent_record
    _, value, headers = to_cloudevent_record(JobWithdrawn(job_id=job_id, namespace=namespace, reason=reason),
                                             "gangway/cli", 5, nonce="n")
    return value, headers


def test_a_withdrawal_of_a_queued_job_is_requested_on_the_log():
    from gangway.events.catalogue import WithdrawalRequested
    value, headers = withdrawal_record(reason="wrong data set")
    got = decide_submission(value, KEY, headers, make_state(queued=[queued()]), {}, SUBMISSION)
    assert got == WithdrawalRequested(workload="team-a/train-1", reason="withdrawn by its producer (gangway/cli): wrong "
                                      "data set", submission=SUBMISSION,
                                      requested_as="gangway/cli withdraw/team-a/train-1/5/n")
    # one whose job is being queued in this very batch is taken too
    assert isinstance(decide_submission(value, KEY, headers, make_state(), {"team-a/train-1": "x"}, SUBMISSION),
                      WithdrawalRequested)


@pytest.mark.parametrize("state, entitled, reason, said", [
    (make_state(), None, "unknown_job", "no job team-a/train-1 was submitted: nothing to withdraw"),
    (make_state(queued=[queued()]), "team-b", "not_entitled", "may submit only into namespace 'team-b'"),
    (make_state(queued=[msgspec.structs.replace(queued(), labels={"gangway.io/uid": "u-1"})]), None,
     "kubernetes_object", "made from a Kubernetes Job: delete it (kubectl delete job -n team-a train-1)"),
])
def test_a_withdrawal_gangway_cannot_take_is_rejected_with_its_bytes(state, entitled, reason, said):
    value, headers = withdrawal_record()
    got = decide_submission(value, KEY, headers, state, {}, SUBMISSION, entitled=entitled)
    assert isinstance(got, JobRejected) and (got.reason, got.job_id, got.namespace) == (reason, "train-1", "team-a")
    assert said in got.message and got.original == value


def test_a_plain_json_record_is_always_a_job_never_a_withdrawal():
    """A withdrawal must say what it is (a CloudEvent's type): a plain record naming only a job is a
    job with fields missing, never taken for a withdrawal."""
    got = decide_submission(plain({"job_id": "train-1", "namespace": "team-a"}), KEY, [], make_state(queued=[queued()]),
                            {}, SUBMISSION)
    assert isinstance(got, JobRejected) and got.reason == "missing_field"


# --- a Kubernetes object's queue-name label changed: its workload moves ---------------------------

MOVES = msgspec.structs.replace(CONTRACT, cluster_queues=[*CONTRACT.cluster_queues, msgspec.structs.replace(
    CONTRACT.cluster_queues[0], name="spare-cq")], local_queues=[
    *CONTRACT.local_queues, LocalQueue(namespace="team-a", name="spare", cluster_queue="spare-cq"),
    LocalQueue(namespace="team-b", name="spare", cluster_queue="spare-cq")])


def of_object(uid: str = "u-1", submission: str = "gangway.submissions/0/7") -> WorkloadQueued:
    return msgspec.structs.replace(queued(submission=submission), labels={UID_LABEL: uid},
                                   submitted_as="gangway/binder k8s/u-1")


def object_record(queue: str, uid: str = "u-1", version: str = "12") -> tuple[bytes, list]:
    return plain(job(queue=queue, labels={UID_LABEL: uid})), ce_headers(ce_id=f"k8s/{uid}/{version}".encode(),
                                                                        ce_source=b"gangway/binder")


def test_an_object_submitted_again_under_another_queue_moves_its_workload_and_that_record_moves_it_once():
    state = make_state(MOVES, queued=[of_object()])
    value, headers = object_record("spare")
    moved = decide_submission(value, KEY, headers, state, {}, SUBMISSION)
    assert moved == WorkloadMoved(workload="team-a/train-1", from_queue="training", queue="spare", cluster_queue="spare-cq",
                                  reason="queue-name label changed from training to spare", submission=SUBMISSION,
                                  requested_as="gangway/binder k8s/u-1/12")
    state = apply(state, Envelope(id="moved/1", source="gangway/submission", time_ms=3_000, data=moved, offset=5))
    wl = state.workloads["team-a/train-1"]
    assert (wl.spec.queue, wl.spec.cluster_queue, wl.moved_by) == ("spare", "spare-cq", SUBMISSION)
    assert state.pending_order["gpu-cq"] == [] and len(state.pending_order["spare-cq"]) == 1
    # the record delivered again, or an older one of its partition after it: nothing
    assert decide_submission(value, KEY, headers, state, {}, SUBMISSION) is None
    older, older_headers = object_record("training", version="11")
    assert decide_submission(older, KEY, older_headers, state, {}, "gangway.submissions/0/41") is None
    # moved back by a later change
    back = decide_submission(older, KEY, older_headers, state, {}, "gangway.submissions/0/43")
    assert isinstance(back, WorkloadMoved) and (back.from_queue, back.queue) == ("spare", "training")


@pytest.mark.parametrize(("queue", "uid", "reason", "said"), [
    ("nowhere", "u-1", "unknown_queue", "no LocalQueue 'nowhere' in namespace 'team-a'"),
    ("orphan", "u-1", "unknown_queue", "points at ClusterQueue 'gone-cq'"),
    ("training", "u-1", "duplicate_job", "Job team-a/train-1 already waits in queue training: nothing to move"),
    ("spare", "u-2", "duplicate_job", "a job's name stays its own on the log"),  # another object of the same name
])
def test_a_move_gangway_cannot_make_is_rejected_and_the_workload_stays(queue, uid, reason, said):
    state = make_state(MOVES, queued=[of_object()])
    value, headers = object_record(queue, uid=uid)
    result = decide_submission(value, KEY, headers, state, {}, SUBMISSION)
    assert isinstance(result, JobRejected) and result.reason == reason and said in result.message, result
    assert result.original == value


def move_record(queue: str, namespace: str = "team-a", job_id: str = "train-1", reason: str = "") -> tuple[bytes, list]:
    from gangway.events.catalogue import JobMoved
    from gangway.services.submission.manifests import to_cloudevent_record
    _, value, headers = to_cloudevent_record(JobMoved(job_id=job_id, namespace=namespace, queue=queue, reason=reason),
                                             "gangway/cli", 5, nonce="n")
    return value, headers


def test_a_producer_moves_its_waiting_job_to_another_queue_and_that_record_moves_it_once():
    """`gangway move` (a JobMoved CloudEvent): what a queue-name label change is for a Kubernetes object."""
    state = make_state(MOVES, queued=[queued()])
    value, headers = move_record("spare", reason="the training queue is full")
    moved = decide_submission(value, KEY, headers, state, {}, SUBMISSION)
    assert moved == WorkloadMoved(workload="team-a/train-1", from_queue="training", queue="spare", cluster_queue="spare-cq",
                                  reason="sent to queue spare by its producer (gangway/cli): the training queue is full",
                                  submission=SUBMISSION, requested_as="gangway/cli move/team-a/train-1/5/n")
    state = apply(state, Envelope(id="moved/1", source="gangway/submission", time_ms=3_000, data=moved, offset=5))
    assert state.workloads["team-a/train-1"].spec.queue == "spare" and len(state.pending_order["spare-cq"]) == 1
    assert decide_submission(value, KEY, headers, state, {}, SUBMISSION) is None  # (delivered again)
    back, back_headers = move_record("training")
    assert decide_submission(back, KEY, back_headers, state, {}, "gangway.submissions/0/43").queue == "training"


@pytest.mark.parametrize("state, queue, entitled, reason, said", [
    (make_state(MOVES), "spare", None, "unknown_job", "no job team-a/train-1 is on the log: nothing to move"),
    (make_state(MOVES, queued=[queued()]), "nowhere", None, "unknown_queue", "no LocalQueue 'nowhere' in namespace 'team-a'"),
    (make_state(MOVES, queued=[queued()]), "training", None, "duplicate_job", "already waits in queue training"),
    (make_state(MOVES, queued=[queued()]), "spare", "team-b", "not_entitled", "may submit only into namespace 'team-b'"),
    (make_state(MOVES, queued=[of_object()]), "spare", None, "kubernetes_object",
     "made from a Kubernetes Job: change its label (kubectl label job -n team-a train-1 "
     "kueue.x-k8s.io/queue-name=spare --overwrite)"),
])
def test_a_move_a_producer_cannot_make_is_rejected_with_its_bytes(state, queue, entitled, reason, said):
    value, headers = move_record(queue)
    got = decide_submission(value, KEY, headers, state, {}, SUBMISSION, entitled=entitled)
    assert isinstance(got, JobRejected) and (got.reason, got.job_id, got.namespace) == (reason, "train-1", "team-a")
    assert said in got.message and got.original == value, got.message


def test_a_producers_job_submitted_again_under_another_queue_is_a_duplicate_not_a_move():
    """Only a Kubernetes object (the same ``gangway.io/uid``) moves by being sent again: a producer's job
    name is its identity, and a producer moves its job with a JobMoved (`gangway move`)."""
    state = make_state(MOVES, queued=[queued()])
    result = decide_submission(plain(job(queue="spare")), KEY, [], state, {}, SUBMISSION)
    assert isinstance(result, JobRejected) and result.reason == "duplicate_job"
