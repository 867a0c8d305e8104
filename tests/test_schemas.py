"""schemas/ is generated from the code: it must not drift, and its schemas must fit real events.

Fix a drift with `make schemas` (or `python -m gangway.read.schemas --write`).
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from gangway.read import schemas
from gangway.events import catalogue as ev
from gangway.events import topics
from gangway.events.codec import LOG_WRITERS, encode_data
from gangway.events.reasons import MESSAGES, ReasonCode
from gangway.events.contract import (
    ClusterQueue, Contract, FlavorQuotas, LocalQueue, Preemption, PriorityClass, Quota, ResourceFlavor,
)

TOPOLOGY = ev.TopologyRequest(
    required="topology.kubernetes.io/rack", slice_required="kubernetes.io/hostname", slice_size=2,
)
POD_SET = ev.PodSet(
    name="workers", count=4, resources={"nvidia.com/gpu": 8000, "cpu": 500}, topology=TOPOLOGY, min_count=2,
)
CONTRACT = Contract(
    flavors=[ResourceFlavor(name="h100", node_labels={"gpu": "h100"})],
    cluster_queues=[ClusterQueue(
        name="research", cohort="all", preemption=Preemption(within_cluster_queue="LowerPriority"),
        flavors=[FlavorQuotas(flavor="h100", resources={"nvidia.com/gpu": Quota(nominal=64000, borrowing_limit=8000)})],
    )],
    local_queues=[LocalQueue(namespace="ml", name="default", cluster_queue="research")],
    priority_classes=[PriorityClass(name="high", value=1000, grace_ms=60_000)],
)

#: One event of every type, with optional fields filled in so that every part of a schema is used.
SAMPLES: dict[type, object] = {
    ev.JobSubmitted: ev.JobSubmitted(
        job_id="j-1", namespace="ml", queue="default", kind="PyTorchJob", priority_class="high",
        runtime_seconds=90.5, labels={"team": "vision"},
        pod_sets=[ev.PodSetRequest(
            name="workers", count=4, resources={"nvidia.com/gpu": 8, "memory": "16Gi", "cpu": 0.5},
            topology=TOPOLOGY, min_count=2,
        )],
    ),
    ev.WorkloadQueued: ev.WorkloadQueued(
        workload="ml/j-1", namespace="ml", queue="default", cluster_queue="research", priority_class=None,
        priority=0, kind="Job", pod_sets=[POD_SET], runtime_ms=90_500, submission="gangway.submissions/0/7",
    ),
    ev.JobRejected: ev.JobRejected(
        job_id="j-2", reason="bad_quantity", message="cpu: not a quantity", original=b"\x00{bad",
        original_key=b"j-2", original_headers=[("ce_type", b"io.gangway.job.submitted.v1")],
    ),
    ev.WorkloadAdmitted: ev.WorkloadAdmitted(
        workload="ml/j-1", cluster_queue="research", usage={"nvidia.com/gpu": 32000},
        borrowed={"nvidia.com/gpu": 8000}, based_on=41, reason="fits research by borrowing from its cohort (8 GPUs)",
        reason_code=ReasonCode.FITS_BORROWING, reason_params={"cluster_queue": "research", "borrowed": "8 GPUs"},
        flavors={"nvidia.com/gpu": "h100"}, counts={"workers": 3},
    ),
    ev.PlacementDecided: ev.PlacementDecided(
        workload="ml/j-1", assignments=[ev.PodAssignment(pod_set="workers", node="n-1", count=4)], based_on=42,
    ),
    ev.EvictionOrdered: ev.EvictionOrdered(workload="ml/j-0", preemptor="ml/j-1", based_on=43, grace_ms=30_000,
                                           reason_code=ReasonCode.WITHIN_QUEUE_LOWER_PRIORITY,
                                           reason_params={"policy": "LowerPriority", "priority": 5}),
    ev.WorkloadBound: ev.WorkloadBound(workload="ml/j-1", attempt=0),
    ev.WorkloadRunning: ev.WorkloadRunning(workload="ml/j-1", attempt=0),
    ev.WorkloadFinished: ev.WorkloadFinished(workload="ml/j-1", attempt=0, succeeded=False),
    ev.WorkloadEvicted: ev.WorkloadEvicted(workload="ml/j-0", attempt=1, preemptor="ml/j-1", reason="preempted"),
    ev.NodeObserved: ev.NodeObserved(node="n-1", allocatable={"nvidia.com/gpu": 8000}, labels={"gpu": "h100"}),
    ev.NodeRemoved: ev.NodeRemoved(node="n-1"),
    ev.ConfigApplied: ev.ConfigApplied(contract=CONTRACT, digest="ab" * 32, source="infra/contract.yaml"),
    ev.CheckpointSaved: ev.CheckpointSaved(workload="ml/j-1", saved_ms=1_700_000_000_000, step=5000),
    ev.ClockTicked: ev.ClockTicked(reason="minimum runtime of ml/j-0 ends"),
    ev.GpuTelemetry: ev.GpuTelemetry(node="n-1", samples=[ev.GpuSample(gpu=0, sm_active=312, gpu_util=64,
                                                                       fb_used_mib=61234, workload="ml/j-1")]),
    ev.WorkloadProgress: ev.WorkloadProgress(workload="ml/j-1", step=90, tokens=1_200_000),
    ev.WorkloadIdle: ev.WorkloadIdle(workload="ml/j-1", attempt=0, based_on=50, rule="SM active below 10 % for 30 min",
                                     sm_active=40, since_ms=1_700_000_000_000, gpu_milli=8000),
    ev.InvoiceIssued: ev.InvoiceIssued(
        invoice_id="inv-2026-11-ml-0123456789abcdef", team="ml", period="2026-11", period_start_ms=1_793_491_200_000,
        period_end_ms=1_796_083_200_000, currency="EUR", lines=[ev.InvoiceLine(
            kind="usage", workload="ml/j-1", attempt=0, cluster_queue="ml", flavor="h100", resource="nvidia.com/gpu",
            start_ms=1_793_491_200_000, end_ms=1_793_494_800_000, quantity=8000 * 3_600_000,
            unit_price_micros=2_100_000, list_cost_micros=16_800_000, billed_cost_micros=16_800_000)],
        list_cost_micros=16_800_000, credits_micros=0, idle_cost_micros=0, billed_cost_micros=16_800_000,
        log_id="gangway.log/0/abc", cut_offset=900),
    ev.WorkloadWithdrawn: ev.WorkloadWithdrawn(workload="ml/j-0", reason="Job ml/j-0 deleted"),
    ev.JobWithdrawn: ev.JobWithdrawn(job_id="j-1", namespace="ml", reason="wrong data set"),
    ev.JobMoved: ev.JobMoved(job_id="j-1", namespace="ml", queue="spare", reason="its queue is full"),
    ev.PriorityClassObserved: ev.PriorityClassObserved(name="team-high", value=500),
    ev.WithdrawalRequested: ev.WithdrawalRequested(
        workload="ml/j-1", reason="withdrawn by its producer (gangway/cli): wrong data set",
        submission="gangway.submissions/0/17", requested_as="gangway/cli withdraw/ml/j-1/1796083200000/5f0c"),
    ev.WorkloadMoved: ev.WorkloadMoved(
        workload="ml/j-2", from_queue="research", queue="training", cluster_queue="ml-training",
        reason="queue-name label changed from research to training", submission="gangway.submissions/0/18",
        requested_as="gangway/binder k8s/6a1d0c2e/41977"),
    ev.ClusterReconciled: ev.ClusterReconciled(
        kind="Job", namespace="ml", name="j-0", uid="0b5e", reason="Job ml/j-0 was resumed with 1 pod(s) on nodes, "
        "but the log holds no placement for it", reason_code=ReasonCode.RESUMED_WITHOUT_PLACEMENT,
        reason_params={"kind": "Job", "object": "ml/j-0", "pods": 1}, pods=["j-0-0"], nodes=["n-1"],
        action="suspended again, 1 pod(s) deleted"),
}

def errors(schema: dict, value: object) -> list[str]:
    """Why ``value`` does not fit ``schema`` (empty: it fits), by the jsonschema library."""
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    return sorted(e.message for e in validator.iter_errors(value))


def _schema_of(cls: type) -> dict:
    return json.loads((schemas.ROOT / schemas.schema_path(cls)).read_text())


# --- tests ----------------------------------------------------------------------------------------


def test_schemas_on_disk_match_the_code():
    drifted = schemas.drift(schemas.render())
    assert not drifted, f"schemas/ drifted from the code (run `make schemas`): {drifted}"


def test_the_drift_check_reports_a_stray_file(tmp_path):
    expected = schemas.render()
    for path, text in expected.items():
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "schemas" / "io.gangway.old.v1.json").write_text("{}")
    assert schemas.drift(expected, root=tmp_path) == ["schemas/io.gangway.old.v1.json"]


def test_there_is_a_sample_of_every_event_type():
    assert set(SAMPLES) == set(ev.EVENT_TYPES)


@pytest.mark.parametrize("cls", list(ev.EVENT_TYPES), ids=lambda cls: cls.__name__)
def test_the_schema_accepts_an_encoded_event(cls):
    schema = _schema_of(cls)
    assert schema["$id"].endswith(ev.EVENT_TYPES[cls]) and schema["title"] == cls.__name__
    assert errors(schema, json.loads(encode_data(SAMPLES[cls]))) == []


@pytest.mark.parametrize("cls", list(ev.EVENT_TYPES), ids=lambda cls: cls.__name__)
def test_the_schema_refuses_an_unknown_field_and_a_missing_one(cls):
    schema = _schema_of(cls)
    data = json.loads(encode_data(SAMPLES[cls]))
    assert any("surprise" in e for e in errors(schema, {**data, "surprise": 1}))
    required = schema["$defs"][cls.__name__].get("required", [])
    if required:
        del data[required[0]]
        assert errors(schema, data) == [f"'{required[0]}' is a required property"]


def test_asyncapi_lists_the_topics_and_their_messages():
    doc = yaml.safe_load((schemas.ROOT / schemas.ASYNCAPI).read_text())
    assert doc["asyncapi"] == "3.0.0"
    channels = doc["channels"]
    # gangway.quarantine holds whatever bytes were found on the log: no message of gangway's.
    assert sorted(ch["address"] for ch in channels.values()) == sorted(set(topics.ALL) - {topics.QUARANTINE})
    on_log = [name for name in channels["log"]["messages"]]
    assert on_log == ["WorkloadQueued", "CheckpointSaved", "GpuTelemetry", "WorkloadProgress", "ConfigApplied",
                      "WithdrawalRequested", "WorkloadMoved", "WorkloadAdmitted", "PlacementDecided", "EvictionOrdered", "WorkloadBound",
                      "WorkloadRunning", "WorkloadFinished", "WorkloadEvicted", "NodeObserved", "NodeRemoved",
                      "PriorityClassObserved", "ClockTicked", "WorkloadWithdrawn", "ClusterReconciled", "WorkloadIdle"]
    assert list(channels["config"]["messages"]) == ["ConfigApplied"]
    assert list(channels["submissions"]["messages"]) == ["JobSubmitted", "JobMoved", "JobWithdrawn"]
    assert list(channels["rejections"]["messages"]) == ["JobRejected"]
    assert list(channels["telemetry"]["messages"]) == ["CheckpointSaved", "WorkloadProgress", "GpuTelemetry"]
    assert list(channels["invoices"]["messages"]) == ["InvoiceIssued"]


def test_asyncapi_messages_point_at_existing_schemas_and_cloudevents_headers():
    doc = yaml.safe_load((schemas.ROOT / schemas.ASYNCAPI).read_text())
    headers = doc["components"]["schemas"]["CloudEventHeaders"]["properties"]
    assert set(headers) == {"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "ce_subject", "content-type"}
    for name, message in doc["components"]["messages"].items():
        assert (schemas.ROOT / schemas.OUT_DIR / message["payload"]["$ref"]).is_file(), name
        assert message["headers"]["allOf"][0] == {"$ref": "#/components/schemas/CloudEventHeaders"}


def test_every_asyncapi_operation_names_a_channel_and_its_messages():
    doc = yaml.safe_load((schemas.ROOT / schemas.ASYNCAPI).read_text())
    for name, op in doc["operations"].items():
        channel = op["channel"]["$ref"].removeprefix("#/channels/")
        assert op["action"] in ("send", "receive") and channel in doc["channels"], name
        for ref in op.get("messages", []):
            assert ref["$ref"].removeprefix(f"#/channels/{channel}/messages/") in doc["channels"][channel]["messages"]


def test_each_services_send_operation_lists_what_it_may_write_on_the_log():
    """The document says what the codec enforces (``LOG_WRITERS``): a writer's own events, no more."""
    doc = yaml.safe_load((schemas.ROOT / schemas.ASYNCAPI).read_text())
    for source, types in LOG_WRITERS.items():
        op = doc["operations"].get(f"{source.removeprefix('gangway/')}_send_log")
        if op is None:  # gangway/config: logs written before contracts came through gangway.config
            continue
        assert sorted(m["$ref"].rsplit("/", 1)[1] for m in op["messages"]) == sorted(t.__name__ for t in types), source


def test_a_consumer_can_switch_on_the_reason_code():
    """Every decision's schema lists every code; the AsyncAPI document gives each code its sentence."""
    for cls in (t for t in ev.DECISION_TYPES if "reason_code" in t.__struct_fields__):  # idle flags carry figures
        schema = _schema_of(cls)
        assert schema["$defs"]["ReasonCode"]["enum"] == sorted(code.value for code in ReasonCode)
        assert {"$ref": "#/$defs/ReasonCode"} in schema["$defs"][cls.__name__]["properties"]["reason_code"]["anyOf"]
    doc = yaml.safe_load((schemas.ROOT / schemas.ASYNCAPI).read_text())
    said = {one["const"]: one["description"] for one in doc["components"]["schemas"]["ReasonCode"]["oneOf"]}
    assert said == {code.value: MESSAGES[code] for code in ReasonCode}
    bad = json.loads(encode_data(SAMPLES[ev.EvictionOrdered]))
    bad["reason_code"] = "because"
    assert errors(_schema_of(ev.EvictionOrdered), bad)
