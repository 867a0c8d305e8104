"""CloudEvents 1.0 over the Kafka binding: round trips of every event type, times, and every error."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import config_event, contract, cluster_queue, node, workload
from gangway.events import catalogue as ev
from gangway.events.codec import (
    OFFSET_EXT, STRUCTURED, CodecError, decode_data, format_time, from_record, from_structured, parse_time,
    structured_line, to_binary, to_structured,
)
from gangway.events.reasons import ReasonCode
from gangway.events.resources import GPU

T = 1_700_000_000_123
SAMPLES: list[object] = [
    ev.JobSubmitted(job_id="j1", namespace="ns", queue="main", priority_class="high", runtime_seconds=1.5,
                    kind="PyTorchJob", labels={"team": "a"},
                    pod_sets=[ev.PodSetRequest(name="workers", count=4,
                                               resources={GPU: 8, "memory": "16Gi", "cpu": 1.5},
                                               topology=ev.TopologyRequest(required="rack", slice_size=2),
                                               min_count=2)]),
    workload("w1").queue("cq", "main").priority(100, "high").pod_set("driver", 1, cpu=2, memory_gi=8)
    .pod_set("workers", 4, gpus=8).runtime_s(3600).obj(),
    ev.JobRejected(job_id="j2", reason="bad_quantity", message="cpu: not a quantity", original=b"\xff\x00raw",
                   original_key=b"k", original_headers=[("ce_type", b"x"), ("ce_type", b"y")],
                   submission="gangway.submissions/0/7"),
    ev.WorkloadAdmitted(workload="w1", cluster_queue="cq", usage={GPU: 32_000}, borrowed={GPU: 8_000}, based_on=41,
                        reason="fits cq by borrowing", flavors={GPU: "h100"}, counts={"workers": 4}),
    ev.PlacementDecided(workload="w1", assignments=[ev.PodAssignment(pod_set="workers", node="n1", count=4)],
                        based_on=42, reason="best fit"),
    ev.EvictionOrdered(workload="w0", preemptor="w1", based_on=43, grace_ms=30_000, reason="LowerPriority",
                       work_lost_ms=120_000),
    ev.WorkloadBound(workload="w1", attempt=2),
    ev.WorkloadRunning(workload="w1", attempt=2),
    ev.WorkloadFinished(workload="w1", attempt=2, succeeded=False),
    ev.WorkloadEvicted(workload="w0", attempt=0, preemptor="w1", reason="preempted"),
    node("n1").gpus(8).cpu(96).memory_gi(1024).label("topology.kubernetes.io/zone", "z1").obj(),
    ev.NodeRemoved(node="n1"),
    config_event(contract(cluster_queue("cq").cohort("all").gpus(8, borrowing=4, lending=2)
                          .preemption("LowerPriority", "Any").strict_fifo())
                 .priority_class("high", 100, grace_ms=1000).obj()),
    ev.CheckpointSaved(workload="w1", saved_ms=T - 5, step=1200),
    ev.ClockTicked(reason="minimum runtime of w0 ends"),
    ev.WorkloadWithdrawn(workload="w1", reason="Job ns/w1 deleted"),
    ev.ClusterReconciled(kind="Job", namespace="ns", name="w1", uid="u-1", reason="pods gone",
                         reason_code=ReasonCode.PODS_VANISHED, workload="w1", attempt=0, pods=["w1-0"], nodes=["n1"]),
    ev.JobWithdrawn(job_id="w1", namespace="ns", reason="wrong data set"),
    ev.WithdrawalRequested(workload="ns/w1", reason="withdrawn by its producer", submission="gangway.submissions/0/9",
                           requested_as="gangway/cli withdraw/ns/w1/1/n"),
    ev.WorkloadMoved(workload="ns/w2", from_queue="a", queue="b", cluster_queue="cq-b", reason="label changed",
                     submission="gangway.submissions/0/10", requested_as="gangway/binder k8s/u-2/7"),
    ev.JobMoved(job_id="w1", namespace="ns", queue="spare", reason="its queue is full"),
    ev.PriorityClassObserved(name="team-high", value=500, global_default=False),
    ev.GpuTelemetry(node="n1", samples=[ev.GpuSample(gpu=3, sm_active=312, gpu_util=64, fb_used_mib=512, workload="w1")],
                    observed_ms=T - 1),
    ev.WorkloadProgress(workload="w1", step=7, tokens=10_000_000_000, observed_ms=T - 1),
    ev.WorkloadIdle(workload="w1", attempt=2, based_on=44, rule="SM active below 10 % for 30 min", sm_active=12,
                    since_ms=T - 1_800_000, gpu_milli=8000, reason="idle"),
    ev.InvoiceIssued(invoice_id="inv-1", team="ns", period="2026-11", period_start_ms=0, period_end_ms=1, currency="EUR",
                     lines=[ev.InvoiceLine(kind="credit", workload="w0", attempt=0, cluster_queue="cq", flavor="h100",
                                           resource=GPU, start_ms=0, end_ms=1, quantity=8000, unit_price_micros=2_100_000,
                                           list_cost_micros=0, billed_cost_micros=-5, priority_class="high")],
                     list_cost_micros=0, credits_micros=5, idle_cost_micros=0, billed_cost_micros=-5, log_id="l",
                     cut_offset=3),
]
ENVELOPES = [ev.Envelope(id=f"id-{i}", source="gangway/test", time_ms=T + i, data=d, offset=100 + i)
             for i, d in enumerate(SAMPLES)]
IDS = [type(d).__name__ for d in SAMPLES]


def test_samples_cover_every_event_type():
    assert [type(d) for d in SAMPLES] == list(ev.EVENT_TYPES)


@pytest.mark.parametrize("env", ENVELOPES, ids=IDS)
def test_binary_round_trip(env: ev.Envelope):
    value, headers = to_binary(env)
    assert from_record(value, headers, offset=env.offset) == env


@pytest.mark.parametrize("env", ENVELOPES, ids=IDS)
def test_binary_headers(env: ev.Envelope):
    _, headers = to_binary(env)
    subject = env.subject()
    assert headers == [
        ("ce_specversion", b"1.0"), ("ce_id", env.id.encode()), ("ce_source", b"gangway/test"),
        ("ce_type", ev.EVENT_TYPES[type(env.data)].encode()), ("ce_time", format_time(env.time_ms).encode()),
        ("content-type", b"application/json"),
    ] + ([("ce_subject", subject.encode())] if subject else [])


@pytest.mark.parametrize("env", ENVELOPES, ids=IDS)
def test_structured_round_trip(env: ev.Envelope):
    assert from_structured(to_structured(env)) == env
    assert from_structured(json.loads(json.dumps(to_structured(env)))) == env


@pytest.mark.parametrize("env", ENVELOPES, ids=IDS)
def test_structured_record_round_trip(env: ev.Envelope):
    assert from_record(structured_line(env), [("content-type", STRUCTURED.encode())]) == env


def test_structured_without_offset_leaves_it_to_the_record():
    env = ENVELOPES[6]
    obj = to_structured(env, with_offset=False)
    assert OFFSET_EXT not in obj
    assert from_structured(obj, offset=7) == msgspec.structs.replace(env, offset=7)
    assert from_structured(obj).offset == -1


def test_structured_attributes():
    obj = to_structured(ENVELOPES[3])
    assert {k: v for k, v in obj.items() if k != "data"} == {
        "specversion": "1.0", "id": "id-3", "source": "gangway/test", "type": "io.gangway.workload.admitted.v1",
        "time": "2023-11-14T22:13:20.126Z", "datacontenttype": "application/json", "subject": "w1",
        OFFSET_EXT: 103,
    }


def test_binary_headers_are_case_insensitive_and_subject_is_optional():
    value, headers = to_binary(ENVELOPES[6])
    shouted = [(k.upper(), v) for k, v in headers if k != "ce_subject"]
    assert from_record(value, shouted, offset=106) == ENVELOPES[6]


def test_an_event_without_time_is_at_time_zero():
    value, headers = to_binary(ENVELOPES[6])
    headers = [(k, v) for k, v in headers if k != "ce_time"]
    assert from_record(value, headers).time_ms == 0


# --- time ---------------------------------------------------------------------------------------

TIMES = [
    ("the epoch", 0, "1970-01-01T00:00:00.000Z"),
    ("milliseconds are kept", T, "2023-11-14T22:13:20.123Z"),
    ("before the epoch", -1, "1969-12-31T23:59:59.999Z"),
    ("a leap day", 951_782_400_000, "2000-02-29T00:00:00.000Z"),
]


@pytest.mark.parametrize(("ms", "text"), [c[1:] for c in TIMES], ids=[c[0] for c in TIMES])
def test_format_and_parse_time(ms: int, text: str):
    assert format_time(ms) == text
    assert parse_time(text) == ms


PARSED = [
    ("an offset is converted to UTC", "2023-11-14T23:13:20.123+01:00", T),
    ("a lowercase z", "2023-11-14T22:13:20.123z", T),
    ("no zone is taken as UTC", "2023-11-14T22:13:20.123", T),
    ("whole seconds", "2023-11-14T22:13:20Z", T - 123),
    ("microseconds are truncated to the millisecond", "2023-11-14T22:13:20.123999Z", T),
]


@pytest.mark.parametrize(("text", "ms"), [c[1:] for c in PARSED], ids=[c[0] for c in PARSED])
def test_parse_time(text: str, ms: int):
    assert parse_time(text) == ms


@settings(max_examples=300, derandomize=True)
@given(st.integers(min_value=0, max_value=253_402_300_799_999))
def test_time_round_trip(ms: int):
    """Every cluster time from the epoch to the end of year 9999."""
    assert parse_time(format_time(ms)) == ms


def test_a_time_of_the_services_form_is_checked_like_any_other():
    """The services' own form (one second parsed once, then reused) takes no shortcut around errors."""
    assert parse_time("2023-11-14T22:13:20.123Z") == parse_time("2023-11-14T22:13:20.123+00:00") == T
    assert parse_time("2023-11-14T22:13:20.999Z") - parse_time("2023-11-14T22:13:20.000Z") == 999
    with pytest.raises(CodecError, match="2023-02-30T10:00:00.123Z"):
        parse_time("2023-02-30T10:00:00.123Z")


def test_time_before_year_1000_round_trips():
    ms = -30_610_224_000_001  # 0999-12-31T23:59:59.999Z
    assert format_time(ms) == "0999-12-31T23:59:59.999Z"
    assert parse_time(format_time(ms)) == ms


# --- every CodecError reason ---------------------------------------------------------------------

GOOD_VALUE, GOOD_HEADERS = to_binary(ENVELOPES[11])


def headers_with(**changes: bytes | None) -> list[tuple[str, bytes]]:
    """The good binary headers with some replaced (None: removed)."""
    out = [(k, changes.get(k, v)) for k, v in GOOD_HEADERS]
    return [(k, v) for k, v in out if v is not None]


def structured(**changes) -> bytes:
    obj = to_structured(ENVELOPES[11])
    obj.update(changes)
    return json.dumps({k: v for k, v in obj.items() if v is not ...}).encode()


ERRORS = [
    ("a record with no value", None, GOOD_HEADERS, "malformed_cloudevent", "record has no value"),
    ("an unknown event type", GOOD_VALUE, headers_with(ce_type=b"io.gangway.node.exploded.v1"),
     "wrong_event_type", "unknown CloudEvents type"),
    ("data that is not JSON", b"{node:", GOOD_HEADERS, "malformed_json", "data is not valid JSON"),
    ("data missing a required field", b"{}", GOOD_HEADERS, "missing_field", "missing required field `node`"),
    ("data with a field of the wrong type", b'{"node": 7}', GOOD_HEADERS, "invalid_field", "Expected `str`, got `int`"),
    ("data with an unknown field", b'{"node": "n1", "color": "red"}', GOOD_HEADERS, "invalid_field", "unknown field"),
    ("data that is not an object", b"[1]", GOOD_HEADERS, "invalid_field", "Expected `object`"),
    ("a header that is not UTF-8", GOOD_VALUE, headers_with(ce_source=b"\xff\xfe"), "not_utf8", "ce_source"),
    ("no id", GOOD_VALUE, headers_with(ce_id=None), "malformed_cloudevent", "'id' is missing"),
    ("an empty source", GOOD_VALUE, headers_with(ce_source=b""), "malformed_cloudevent", "'source' is missing"),
    ("no specversion but a type", GOOD_VALUE, headers_with(ce_specversion=None), "malformed_cloudevent",
     "'specversion' is missing"),
    ("specversion 0.3", GOOD_VALUE, headers_with(ce_specversion=b"0.3"), "malformed_cloudevent", "is not 1.0"),
    ("a time that is not RFC 3339", GOOD_VALUE, headers_with(ce_time=b"yesterday"), "malformed_cloudevent",
     "not RFC 3339"),
    ("no ce_ headers and a value that is not JSON", b"hello", [], "malformed_json", "record value is not valid JSON"),
    ("no ce_ headers and JSON that is not an object", b"[1, 2]", [], "malformed_cloudevent",
     "no structured CloudEvent"),
    ("no ce_ headers and an object that is not a CloudEvent", b'{"node": "n1"}', [], "malformed_cloudevent",
     "no structured CloudEvent"),
    ("structured without data", structured(data=...), [], "malformed_cloudevent", "has no data"),
    ("structured with data_base64 only", structured(data=..., data_base64="AAAA"), [], "malformed_cloudevent",
     "has no data"),
    ("structured with a log offset that is not an integer", structured(**{OFFSET_EXT: "7"}), [], "malformed_cloudevent",
     "logoffset is not an integer"),
    ("structured with a boolean log offset", structured(**{OFFSET_EXT: True}), [], "malformed_cloudevent",
     "logoffset is not an integer"),
    ("structured with a non-string id", structured(id=7), [], "malformed_cloudevent", "'id' is missing"),
    ("structured with specversion 1.1", structured(specversion="1.1"), [], "malformed_cloudevent", "is not 1.0"),
    ("structured with an unknown type", structured(type="com.example.thing"), [], "wrong_event_type",
     "unknown CloudEvents type"),
    ("structured with data missing a field", structured(data={}), [], "missing_field", "missing required field"),
    ("structured with XML data", structured(datacontenttype="application/xml"), [], "malformed_cloudevent",
     "is not JSON"),
    ("structured JSON nested too deeply", b"[" * 100_000 + b"]" * 100_000, [], "malformed_json", "nested too deeply"),
]


@pytest.mark.parametrize(("value", "headers", "reason", "message"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_codec_error(value, headers, reason: str, message: str):
    with pytest.raises(CodecError, match=message) as caught:
        from_record(value, headers)
    assert caught.value.reason == reason


def test_binary_record_with_a_content_type_that_is_not_json_is_refused():
    with pytest.raises(CodecError, match="is not JSON") as caught:
        from_record(GOOD_VALUE, headers_with(**{"content-type": b"text/plain"}))
    assert caught.value.reason == "malformed_cloudevent"


def test_every_reason_the_codec_uses_is_a_rejection_reason():
    reasons = {c[3] for c in ERRORS}
    assert reasons == {"malformed_cloudevent", "malformed_json", "wrong_event_type", "missing_field",
                       "invalid_field", "not_utf8"}
    assert reasons <= set(ev.RejectionReason.__args__)


def test_decode_data_names_the_type():
    with pytest.raises(CodecError, match="io.gangway.node.removed.v1: Object missing required field `node`"):
        decode_data("io.gangway.node.removed.v1", b"{}")


@pytest.mark.parametrize("env", ENVELOPES, ids=IDS)
def test_an_exported_line_decodes_in_one_pass_to_the_same_envelope(env: ev.Envelope):
    from gangway.events.codec import from_structured_line
    assert from_structured_line(structured_line(env)) == env
    assert from_structured_line(structured_line(env), offset=5) == from_structured(
        json.loads(structured_line(env)), offset=5)


@pytest.mark.parametrize("line, reason", [
    (b'{"specversion": "0.3", "id": "a", "source": "s", "type": "io.gangway.node.removed.v1", "data": {"node": "n"}}',
     "malformed_cloudevent"),
    (b'{"specversion": "1.0", "id": "", "source": "s", "type": "io.gangway.node.removed.v1", "data": {"node": "n"}}',
     "malformed_cloudevent"),
    (b'{"specversion": "1.0", "id": "a", "source": "s", "type": "io.gangway.node.removed.v1"}', "malformed_cloudevent"),
    (b'{"specversion": "1.0", "id": "a", "source": "s", "type": "io.gangway.node.removed.v1", "data": {}}',
     "missing_field"),
    (b'{"specversion": "1.0", "id": "a", "source": "s", "type": "io.gangway.node.removed.v1", "logoffset": true, '
     b'"data": {"node": "n"}}', "malformed_cloudevent"),
])
def test_an_odd_exported_line_fails_as_the_general_decoder_does(line: bytes, reason: str):
    from gangway.events.codec import from_structured_line
    with pytest.raises(CodecError) as fast:
        from_structured_line(line)
    with pytest.raises(CodecError) as general:
        from_structured(json.loads(line))
    assert fast.value.reason == general.value.reason == reason
