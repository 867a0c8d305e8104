"""The archive's segment format: round trip, torn tails cut off, damage refused, fsync policy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangway.adapters import archive
from gangway.adapters.archive import MAGIC, ArchiveError, Record, TopicWriter, read_segment, read_topic

TOPIC = "gangway.log"
blobs = st.one_of(st.none(), st.binary(max_size=64))
headers = st.lists(st.tuples(st.text(max_size=12), blobs), max_size=4)


@st.composite
def record_lists(draw):
    n = draw(st.integers(0, 20))
    return [Record(i, draw(st.integers(-2**63, 2**63 - 1)), draw(blobs), draw(blobs), draw(headers)) for i in range(n)]


@settings(max_examples=100, deadline=None)
@given(record_lists())
def test_records_come_back_byte_for_byte(records):
    data = MAGIC + b"".join(archive.encode(r) for r in records)
    assert read_segment(data) == (records, len(data))


def write(tmp_path, n: int, start: int = 0) -> TopicWriter:
    w = TopicWriter(tmp_path, TOPIC, start)
    w.append(Record(i, 1000 + i, b"k", f"value {i}".encode(), [("ce_id", f"id/{i}".encode())])
             for i in range(start, start + n))
    w.close()
    return w


def test_a_torn_tail_is_cut_off_with_a_warning_and_appending_goes_on(tmp_path, caplog):
    write(tmp_path, 10)
    path = archive.segments(tmp_path, TOPIC)[-1]
    whole = path.read_bytes()
    path.write_bytes(whole[:-5])  # the archiver died in the middle of writing record 9
    assert [r.offset for r in read_topic(tmp_path, TOPIC)] == list(range(9))
    assert "torn tail" in caplog.text
    assert archive.next_offsets(tmp_path)[TOPIC] == 9
    write(tmp_path, 3, start=9)
    assert [r.offset for r in read_topic(tmp_path, TOPIC)] == list(range(12))


def test_a_flipped_bit_in_the_last_record_is_a_torn_tail_but_elsewhere_is_damage(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "SEGMENT_BYTES", 200)  # several segments
    write(tmp_path, 12)
    paths = archive.segments(tmp_path, TOPIC)
    assert len(paths) > 2
    first = bytearray(paths[0].read_bytes())
    first[len(MAGIC) + 12] ^= 0xFF
    paths[0].write_bytes(bytes(first))
    with pytest.raises(ArchiveError, match="not the last segment"):
        list(read_topic(tmp_path, TOPIC))


def test_a_gap_in_offsets_is_refused_when_writing(tmp_path):
    w = TopicWriter(tmp_path, TOPIC, 0)
    with pytest.raises(ArchiveError, match="expected 0"):
        w.append([Record(1, 0, None, b"x")])


def test_segments_roll_over_and_read_back_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "SEGMENT_BYTES", 300)
    write(tmp_path, 30)
    assert len(archive.segments(tmp_path, TOPIC)) > 3
    assert [r.offset for r in read_topic(tmp_path, TOPIC)] == list(range(30))
    assert archive.next_offsets(tmp_path)[TOPIC] == 30


@pytest.mark.parametrize(("text", "policy"), [("batch", ("batch", 0.0)), ("none", ("none", 0.0)),
                                              ("interval:250", ("interval", 0.25))])
def test_fsync_policy_from_the_environment(monkeypatch, text, policy):
    monkeypatch.setenv(archive.FSYNC_ENV, text)
    assert archive.fsync_policy() == policy


def test_a_bad_fsync_policy_is_an_error_naming_the_choices(monkeypatch):
    monkeypatch.setenv(archive.FSYNC_ENV, "sometimes")
    with pytest.raises(ArchiveError, match="batch, none or interval:MS"):
        archive.fsync_policy()
