"""A record on gangway.log that no gangway service wrote is quarantined: never folded, never a
crash, alerted, counted, and copied once to gangway.quarantine."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangway.adapters import archive, kafka, quarantine
from gangway.adapters.broker import EmbeddedBroker
from gangway.events import codec, topics
from gangway.events.catalogue import Envelope, NodeObserved, WorkloadAdmitted
from gangway.services.runtime.clock import ClusterClock
from gangway.services.submission.service import SubmissionService

NODE = Envelope(id="node/n0", source="gangway/binder", time_ms=1_000,
                data=NodeObserved(node="n0", allocatable={"nvidia.com/gpu": 8000}))
FORGED = Envelope(id="admit/x/0", source="mallory/cli", time_ms=2_000,
                  data=WorkloadAdmitted(workload="research/x", cluster_queue="research", usage={}, borrowed={}, based_on=0))
WRONG_TYPE = Envelope(id="admit/y/0", source="gangway/binder", time_ms=2_000,
                      data=WorkloadAdmitted(workload="research/y", cluster_queue="research", usage={}, borrowed={}, based_on=0))


def test_an_event_from_an_unknown_writer_is_refused_by_the_log_reader():
    value, headers = codec.to_binary(FORGED)
    with pytest.raises(codec.CodecError) as err:
        codec.from_log_record(value, headers, 3)
    assert err.value.reason == "unknown_writer" and "mallory/cli" in str(err.value)


def test_an_event_its_writer_does_not_write_is_refused():
    value, headers = codec.to_binary(WRONG_TYPE)
    with pytest.raises(codec.CodecError) as err:
        codec.from_log_record(value, headers, 3)
    assert err.value.reason == "forbidden_event"


def test_every_writer_of_the_log_is_accepted_for_its_own_events():
    value, headers = codec.to_binary(NODE)
    assert codec.from_log_record(value, headers, 0) == msgspec.structs.replace(NODE, offset=0)


header_names = st.one_of(st.sampled_from(["ce_specversion", "ce_type", "ce_id", "ce_source", "ce_time",
                                          "content-type", "ce_subject"]), st.text(max_size=10))
header_values = st.one_of(st.none(), st.binary(max_size=40),
                          st.sampled_from([b"1.0", b"io.gangway.node.observed.v1", b"gangway/binder",
                                           b"application/json", b"2026-01-01T00:00:00.000Z", b"\xff"]))


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.none(), st.binary(max_size=200), st.just(codec.to_binary(NODE)[0])),
       headers=st.lists(st.tuples(header_names, header_values), max_size=8))
def test_any_bytes_on_the_log_decode_or_raise_codec_error(value, headers):
    try:
        env = codec.from_log_record(value, headers, 1)
    except codec.CodecError as exc:
        assert exc.reason
        return
    assert env.source in codec.LOG_WRITERS


@pytest.mark.broker
async def test_garbage_and_forgeries_are_quarantined_once_and_change_no_state(tmp_path, caplog):
    with EmbeddedBroker() as broker:
        await kafka.ensure_topics(broker.bootstrap)
        prod = kafka.producer(broker.bootstrap)
        await prod.start()
        try:
            await kafka.append(prod, [NODE])
            await prod.send_and_wait(topics.LOG, value=b"\x00\xffnot an event", key=b"default", partition=0)
            await kafka.append(prod, [FORGED, WRONG_TYPE])
            await kafka.append(prod, [msgspec.structs.replace(NODE, id="node/n1", data=NodeObserved(
                node="n1", allocatable={"nvidia.com/gpu": 8000}))])
        finally:
            await prod.stop()
        clock = ClusterClock.starting_now()
        for _ in range(2):  # a restart copies nothing twice
            service = SubmissionService(broker.bootstrap, tmp_path, clock)
            service.snapshots = False
            stop = asyncio.Event()
            task = asyncio.create_task(service.run(stop))
            for _ in range(400):
                if service.state.offset >= 4 and not service.to_quarantine:
                    break
                await asyncio.sleep(0.05)
            stop.set()
            await task
            assert service.quarantined == 3
        assert sorted(service.state.nodes) == ["n0", "n1"]
        assert not service.state.workloads and service.state.decisions == 0
        assert "QUARANTINED gangway.log offset 1 (malformed_json)" in caplog.text
        assert await quarantine.copied_offsets(broker.bootstrap) == {1, 2, 3}
        assert (await archive.high_waters(broker.bootstrap))[topics.QUARANTINE] == 3, "copied twice"
        envs = []
        async for env in kafka.read_log(broker.bootstrap):
            envs.append(env.offset)
        assert envs == [0, 4], "every reader skips the same records"


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_the_fast_path_for_records_as_gangway_writes_them_reads_what_the_general_path_reads(data):
    """A record as the services write it decodes without the general path; any change to its headers
    or value either still reads the same or goes to the general path, which refuses it with its reason."""
    env = data.draw(st.sampled_from([NODE, FORGED, WRONG_TYPE, msgspec.structs.replace(NODE, id=""),
                                     Envelope(id="admit/z/0", source="gangway/admission", time_ms=3_999,
                                              data=FORGED.data)]))
    value, headers = codec.to_binary(env)
    headers = list(headers)
    for _ in range(data.draw(st.integers(0, 2))):
        i = data.draw(st.integers(0, len(headers)))
        change = data.draw(st.sampled_from(["drop", "swap", "key", "value", "add"]))
        if change == "add" or not headers:
            headers.insert(i, data.draw(st.tuples(header_names, header_values)))
        elif change == "drop":
            del headers[i % len(headers)]
        elif change == "swap":
            j = data.draw(st.integers(0, len(headers) - 1))
            headers[i % len(headers)], headers[j] = headers[j], headers[i % len(headers)]
        elif change == "key":
            headers[i % len(headers)] = (data.draw(header_names), headers[i % len(headers)][1])
        else:
            headers[i % len(headers)] = (headers[i % len(headers)][0], data.draw(header_values))
    if data.draw(st.booleans()):
        value = data.draw(st.one_of(st.none(), st.binary(max_size=40), st.just(value + b" "), st.just(value[:-1])))
    fast = codec._as_written(value, headers, 7)
    try:
        general = codec._read_log_record(value, headers, 7)
    except codec.CodecError:
        assert fast is None
    else:
        assert fast is None or fast == general


def test_the_services_records_take_the_fast_path():
    value, headers = codec.to_binary(NODE)
    assert codec._as_written(value, headers, 0) == msgspec.structs.replace(NODE, offset=0)
    assert headers[6][0] == "ce_subject" and codec._as_written(value, headers[:6], 0) is not None
    assert codec._as_written(value, headers[::-1], 0) is None  # what the fast path does not know
    assert codec._as_written(*codec.to_binary(FORGED), 0) is None
