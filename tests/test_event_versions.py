"""How an event type evolves (DESIGN.md): optional fields within a version, an upcaster to the next.

A record of an old version is read as the current type; a ``.v1`` type only ever gains optional
fields (checked against the fields every type had when this rule was written down).
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from gangway.events import catalogue as ev
from gangway.events import codec
from gangway.events.codec import CodecError, from_record, from_structured_line

V0 = "io.gangway.eviction.ordered.v0"
V1 = "io.gangway.eviction.ordered.v1"
FIELDS_AT_V1 = json.loads((Path(__file__).parent / "data" / "recorded" / "v1-fields.json").read_text())

#: A hand-written record of an EvictionOrdered as an older gangway might have written it: grace in
#: seconds, no reason, no work lost.
OLD = {"workload": "ml/sweep", "preemptor": "ml/serve", "based_on": 41, "grace_seconds": 30}


@pytest.fixture
def eviction_v0(monkeypatch):
    """An upcaster from a ``.v0`` of EvictionOrdered to the current ``.v1`` (registered for this test)."""
    monkeypatch.setattr(codec, "UPCASTERS", {})

    @codec.upcaster(V0, V1)
    def grace_in_ms(data: dict) -> dict:
        data["grace_ms"] = round(data.pop("grace_seconds") * 1000)
        return data


def test_an_old_version_record_is_read_as_the_current_type(eviction_v0):
    line = json.dumps({"specversion": "1.0", "id": "evict/ml/sweep/41", "source": "gangway/preemption",
                       "type": V0, "time": "2026-12-01T10:00:00.000Z", "logoffset": 42, "data": OLD}).encode()
    binary = from_record(json.dumps(OLD).encode(), [("ce_specversion", b"1.0"), ("ce_id", b"evict/ml/sweep/41"),
                                                    ("ce_source", b"gangway/preemption"), ("ce_type", V0.encode())])
    for env in (from_structured_line(line), binary):
        assert env.data == ev.EvictionOrdered(workload="ml/sweep", preemptor="ml/serve", based_on=41, grace_ms=30_000)
        assert env.type == V1  # written back, it is the current version
        assert env.data.reason_code is None and env.data.work_lost_ms == 0


def test_an_upcaster_that_leaves_a_required_field_out_fails_as_the_record_would(eviction_v0):
    with pytest.raises(CodecError) as caught:
        codec.decode_data(V0, json.dumps({"workload": "w", "grace_seconds": 1}).encode())
    assert caught.value.reason == "missing_field"


def test_an_upcaster_goes_one_version_up_within_one_type():
    for old, new in ((V0, "io.gangway.eviction.ordered.v2"), (V0, "io.gangway.workload.evicted.v1"),
                     (V1, "io.gangway.eviction.ordered.v2"), ("eviction.v0", V1)):
        with pytest.raises(ValueError):
            codec.upcaster(old, new)


def test_a_record_of_a_version_newer_than_this_gangway_asks_for_an_upgrade():
    with pytest.raises(CodecError) as caught:
        codec.decode_data("io.gangway.eviction.ordered.v2", b"{}")
    assert caught.value.reason == "wrong_event_type" and "newer than this gangway reads (.v1)" in str(caught.value)


def test_a_v1_type_only_ever_gains_optional_fields():
    """No field of a .v1 type is removed or renamed and no required field is added: such a change
    is a .v2 with an upcaster from .v1. A type no longer current must have its upcaster."""
    for name, was in FIELDS_AT_V1.items():
        if name not in ev.TYPES_BY_NAME:
            assert name in codec.UPCASTERS, f"{name} is gone without an upcaster"
            continue
        fields = msgspec.inspect.type_info(ev.TYPES_BY_NAME[name]).fields
        assert set(was["fields"]) <= {f.name for f in fields}, name
        assert {f.name for f in fields if f.required} <= set(was["required"]), name
