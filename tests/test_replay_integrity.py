"""The auditor checks the log itself, not only the decisions still on it (an outside tester's report,
strangerB: defects 1, 2, 3, 14, 15, 16 and 17): a deleted, repeated or moved line, a partial or cut
export, a forged reason sentence, a contract changed under its digest, a record from a writer that
does not write it, an empty file, and a fact timed before what it follows. Each is reported, with
its file line where the log came from a file, and the replay does not pass."""

from __future__ import annotations

from pathlib import Path

import msgspec

from gangway import cli
from gangway.events import catalogue as ev
from gangway.events.reasons import render
from gangway.read.explain import explain
from gangway.read.logfile import read_export, read_log_file, write_export
from gangway.services.audit.replay import verify
from test_replay import LOG, data, first, tampered


def export(tmp_path: Path, envs=LOG, edit=None) -> Path:
    """``envs`` exported, its lines (bytes, each with its newline) passed through ``edit``."""
    path = tmp_path / "log.jsonl"
    write_export(list(envs), str(path))
    if edit is not None:
        path.write_bytes(b"".join(edit(path.read_bytes().splitlines(keepends=True))))
    return path


def on_line(i: int, old: bytes, new: bytes):
    """An ``export`` edit: the first ``old`` of line ``i`` (0-based; -1 the last) replaced by ``new``."""
    def edit(lines):
        lines[i] = lines[i].replace(old, new, 1)
        return lines
    return edit


def audit(path: Path):
    log = read_log_file(str(path))
    return verify(log.envs, lines=log.lines, quarantined=log.quarantined, end=log.end, misplaced=log.misplaced)


def said(report) -> list[str]:
    return [str(f) for f in report.integrity]


def test_an_untouched_export_passes_and_marks_its_end(tmp_path):
    log = read_log_file(str(export(tmp_path)))
    assert log.end == LOG[-1].offset + 1 and log.lines == list(range(1, len(LOG) + 1))
    report = verify(log.envs, lines=log.lines, quarantined=log.quarantined, end=log.end)
    assert report.ok and report.integrity == [] and report.verified == report.decisions
    assert (report.first_offset, report.last_offset, report.last_time_ms) == (0, LOG[-1].offset, SIM_TIME())


def SIM_TIME() -> int:
    return max(e.time_ms for e in LOG)


# --- 1: the log's own structure -----------------------------------------------------------------------


def test_a_deleted_decision_is_an_offset_missing(tmp_path):
    gone = first(ev.EvictionOrdered)
    report = audit(export(tmp_path, edit=lambda lines: lines[:gone] + lines[gone + 1:]))
    assert not report.ok
    evicted = next(e for e in LOG if isinstance(e.data, ev.WorkloadEvicted) and e.data.workload == LOG[gone].data.workload)
    assert said(report) == [f"offset {gone} missing (before line {gone + 1})",
                            f"offset {evicted.offset}, line {evicted.offset} {evicted.id}: WorkloadEvicted of "
                            f"{evicted.data.workload} for preemptor {evicted.data.preemptor}, but no EvictionOrdered in "
                            f"force ordered it out for {evicted.data.preemptor}"]  # (the order it carried out is gone)


def test_a_repeated_line_is_an_offset_twice(tmp_path):
    i = first(ev.WorkloadAdmitted)
    report = audit(export(tmp_path, edit=lambda lines: lines[:i + 1] + [lines[i]] + lines[i + 1:]))
    assert not report.ok
    assert f"offset {i} twice (lines {i + 1}, {i + 2})" in said(report)


def test_a_swapped_pair_is_a_line_out_of_order(tmp_path):
    i = first(ev.PlacementDecided)
    report = audit(export(tmp_path, edit=lambda lines: lines[:i] + [lines[i + 1], lines[i]] + lines[i + 2:]))
    assert not report.ok
    assert said(report)[0] == f"line {i + 1} has offset {i + 1} after offset {i - 1}: out of order"


def test_an_edited_logoffset_is_out_of_order_and_leaves_its_offset_missing(tmp_path):
    i = first(ev.EvictionOrdered)

    def edit(lines):
        lines[i] = lines[i].replace(f'"logoffset":{i},'.encode(), b'"logoffset":9999,')
        return lines
    report = audit(export(tmp_path, edit=edit))
    assert said(report)[:2] == [f"line {i + 1} has offset 9999 after offset {i - 1}: out of order",
                                f"offset {i} missing (before line {i + 2})"]


def test_a_partial_export_is_said_and_its_decisions_are_not_passed(tmp_path):
    report = audit(export(tmp_path, envs=LOG[5:]))
    assert report.partial and not report.ok and report.verified == 0 and report.decisions > 0
    assert said(report)[0].startswith("the log starts at offset 5, not 0: a partial export")


def test_an_export_cut_at_its_end_no_longer_marks_it_and_the_cli_says_what_was_checked(tmp_path, capsys):
    path = export(tmp_path, edit=lambda lines: lines[:-10])
    assert read_log_file(str(path)).end is None
    # a cut after a line cannot be told from the lines: without the mark the file fails, unless
    # the auditor says it was written before exports marked their end
    assert cli.main(["replay", str(path)]) == 1
    assert "INTEGRITY the export does not mark its end: it may be cut after a line" in capsys.readouterr().out
    assert cli.main(["replay", "--unmarked-end", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"checked offsets 0–{LOG[-11].offset} (lines 1–{len(LOG) - 10})" in out
    assert "does not mark its end" in out and "INTEGRITY" not in out
    assert cli.main(["replay", str(export(tmp_path))]) == 0
    assert f"marks its end at offset {LOG[-1].offset + 1}" in capsys.readouterr().out


def test_an_export_whose_last_line_is_not_the_end_it_marks_fails(tmp_path):
    def edit(lines):
        lines[-1] = lines[-1].replace(f'"logend":{LOG[-1].offset + 1}'.encode(), b'"logend":99999')
        return lines
    report = audit(export(tmp_path, edit=edit))
    assert said(report) == [f"the export marks its end at offset 99999 (after its last line's 99998), but its last "
                            f"line has offset {LOG[-1].offset}"]


# --- 2: the reason's sentence -----------------------------------------------------------------------------


def test_a_forged_reason_sentence_is_a_mismatch_and_explain_shows_the_codes_own(tmp_path):
    i = first(ev.EvictionOrdered)
    log = tampered(i, data(reason="because I said so"))
    [mismatch] = verify(log).mismatches
    rendered = render(LOG[i].data.reason_code, LOG[i].data.reason_params)
    assert (mismatch.offset, mismatch.why) == (
        i, f"reason text is not its code's: recorded 'because I said so', the code says '{rendered}'")
    story = "\n".join(explain(log, LOG[i].data.workload, forecast=False))
    assert "because I said so" not in story and rendered in story


# --- 3: the contract's digest -----------------------------------------------------------------------------


def test_a_contract_changed_under_its_digest_fails():
    i = first(ev.ConfigApplied)
    contract = LOG[i].data.contract
    report = verify(tampered(i, data(contract=msgspec.structs.replace(contract, default_grace_ms=1))))
    assert not report.ok
    [finding] = report.integrity
    assert f"offset {i} " in str(finding) and "ConfigApplied's digest" in str(finding)
    assert "is not its contract's" in str(finding)


def test_a_contract_recorded_before_fields_were_added_still_verifies():
    """A field added to the contract later decodes to its default in a contract recorded before it
    (ADDED_LATER), and encodes it: the digest is tried with the newest such fields left out. A log
    recorded before them (the proxy-preemption fixture: 7 contracts, before gang_before_its_moved
    and after model_reserve) verifies; one whose contract is edited does not, nor one that sets a
    field its writer could not have had while lacking an older one."""
    from gangway.contract import digest_matches
    from gangway.events.contract import ADDED_LATER, Contract
    from gangway.read.logfile import read_log_file as read
    applied = [e.data for e in read(str(Path(__file__).parent / "data" / "proxy-preemption.jsonl")).envs
               if isinstance(e.data, ev.ConfigApplied)]
    assert len(applied) == 7 and all(digest_matches(a.contract, a.digest) for a in applied)
    edited = msgspec.structs.replace(applied[0].contract, default_grace_ms=1)
    assert not digest_matches(edited, applied[0].digest)
    newest = msgspec.structs.replace(applied[0].contract, **{ADDED_LATER[-1]: True})
    assert not digest_matches(newest, applied[0].digest)
    assert {f.name for f in msgspec.structs.fields(Contract)} >= set(ADDED_LATER)


# --- 14: records no reader folds --------------------------------------------------------------------------


def test_a_record_from_a_writer_that_does_not_write_it_is_skipped_and_reported(tmp_path):
    i = first(ev.EvictionOrdered)
    for source in ("evil/forger", "gangway/binder"):
        def edit(lines):
            lines[i] = lines[i].replace(b'"source":"gangway/preemption"', f'"source":"{source}"'.encode())
            return lines
        path = export(tmp_path, edit=edit)
        assert [e.offset for e in read_export(str(path))] == [e.offset for e in LOG if e.offset != i]
        report = audit(path)
        assert not report.ok and report.decisions == sum(isinstance(e.data, ev.DECISION_TYPES) for e in LOG) - 1
        finding, unordered = said(report)  # its offset is not missing: it is on the file, skipped
        assert finding.startswith(f"offset {i}, line {i + 1}: skipped, never folded: event '{LOG[i].id}'")
        assert "but no EvictionOrdered in force ordered it out" in unordered


# --- 15: an empty file ------------------------------------------------------------------------------------


def test_replaying_an_empty_file_fails(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"\n")
    assert cli.main(["replay", str(empty)]) == 1
    assert f"no events in {empty}" in capsys.readouterr().err
    assert not verify([]).ok


# --- 16: what differs -------------------------------------------------------------------------------------


def test_a_mismatch_names_the_field_that_differs_and_its_file_line(tmp_path, capsys):
    i = first(ev.PlacementDecided)
    moved = tampered(i, data(assignments=[msgspec.structs.replace(a, node="n9") for a in LOG[i].data.assignments]))
    path = export(tmp_path, envs=moved)
    [mismatch, *_] = audit(path).mismatches
    assert (mismatch.offset, mismatch.line) == (i, i + 1)
    assert f"assignments[0].node: recorded n9, derived {LOG[i].data.assignments[0].node}" in mismatch.why
    assert "{" not in mismatch.why and mismatch.detail.startswith("recorded {")
    assert cli.main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"NOT REPRODUCED offset {i} {LOG[i].id} (admission), line {i + 1}: " in out and "recorded {" not in out
    assert cli.main(["replay", "--verbose", str(path)]) == 1
    assert "recorded {" in capsys.readouterr().out


# --- 17: facts timed before what they follow --------------------------------------------------------------


def test_a_workload_running_before_it_was_queued_fails():
    i = first(ev.WorkloadRunning)
    workload = LOG[i].data.workload
    queued = next(e for e in LOG if isinstance(e.data, ev.WorkloadQueued) and e.data.workload == workload)
    log = tampered(i, lambda env: msgspec.structs.replace(env, time_ms=queued.time_ms - 60_000))
    report = verify(log)
    assert not report.ok
    [finding] = said(report)
    assert finding.startswith(f"offset {i} {LOG[i].id}: WorkloadRunning of {workload} at ")
    assert finding.endswith("time goes backwards")
    assert said(verify(log, workers=2)) == said(report)  # the process folding the whole log checks the facts


def test_an_edited_subject_is_refused_on_the_log_and_in_an_export_naming_its_line(tmp_path):
    """The CloudEvents subject is how consumers find a workload's events: one that is not its data's
    was changed after it was written. An export's line is refused by name; a record on the log is
    quarantined like any record not as its writer writes it."""
    import pytest
    from gangway.events import codec
    from gangway.read.logfile import LogFileError

    at = first(ev.WorkloadAdmitted)
    victim = LOG[at].data.workload

    def edit(lines):
        lines[at] = lines[at].replace(f'"subject":"{victim}"'.encode(), b'"subject":"research/someone-else"')
        assert lines[at] != export_lines[at]
        return lines

    export_lines = export(tmp_path).read_bytes().splitlines(keepends=True)
    with pytest.raises(LogFileError, match=rf":{at + 1}: .*subject 'research/someone-else' is not its data's "
                                           rf"\('{victim}'\): changed after it was written"):
        read_log_file(str(export(tmp_path, edit=edit)))

    value, headers = codec.to_binary(LOG[at])
    assert codec.from_log_record(value, headers, at) == LOG[at]
    edited = [(k, b"research/someone-else" if k == "ce_subject" else v) for k, v in headers]
    with pytest.raises(codec.CodecError, match="subject 'research/someone-else' is not its data's") as refused:
        codec.from_log_record(value, edited, at)
    assert refused.value.reason == "malformed_cloudevent"


def test_an_absurd_gpu_count_in_an_export_is_refused_by_its_line_not_a_memory_error(tmp_path, capsys):
    """Each GPU is an entry of its own in the fold: a node of 10^12 GPUs (a crafted export) was a
    MemoryError traceback; it is refused as the line is read, as a cluster file refuses it."""
    import re
    i = first(ev.NodeObserved)

    def edit(lines):
        lines[i] = re.sub(rb'"nvidia.com/gpu":\d+', b'"nvidia.com/gpu":1000000000000000', lines[i])
        return lines
    path = export(tmp_path, edit=edit)
    assert cli.main(["replay", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (f"gangway: {path}:{i + 1}: io.gangway.node.observed.v1: allocatable nvidia.com/gpu is "
                           "1000000000000000 milli: at most 1024 GPUs on one node")


def test_a_line_that_is_no_cloudevent_object_or_has_no_offset_and_a_gzip_file_are_named_a_bom_is_read(tmp_path):
    import gzip

    import pytest
    from gangway.read.logfile import LogFileError

    lines = export(tmp_path).read_bytes().splitlines(keepends=True)
    cases = {"[1, 2]\n": ":3: a structured CloudEvent is a JSON object, not an array",
             "null\n": ":3: a structured CloudEvent is a JSON object, not null"}
    for bad, said in cases.items():
        path = tmp_path / "bad.jsonl"
        path.write_bytes(b"".join([*lines[:2], bad.encode(), *lines[2:]]))
        with pytest.raises(LogFileError, match=said):
            read_log_file(str(path))
    unnumbered = tmp_path / "unnumbered.jsonl"
    line = msgspec.json.decode(lines[1])
    del line["logoffset"]
    unnumbered.write_bytes(b"".join([lines[0], msgspec.json.encode(line) + b"\n", *lines[2:]]))
    with pytest.raises(LogFileError, match=":2: no logoffset: every event of an export carries its offset"):
        read_log_file(str(unnumbered))
    zipped = tmp_path / "log.jsonl"
    zipped.write_bytes(gzip.compress(b"".join(lines)))
    with pytest.raises(LogFileError, match="a gzip file: decompress it first"):
        read_log_file(str(zipped))
    marked = tmp_path / "bom.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + b"".join(lines))
    assert read_log_file(str(marked)).envs == read_log_file(str(export(tmp_path))).envs


# --- lines where no line of an export stands, and records no reader can take (a stranger's tampering) ------


def test_lines_appended_after_the_end_marker_and_a_rejection_pasted_among_the_log_s_lines_are_said(tmp_path):
    rejection = write_rejection(tmp_path)
    appended = audit(export(tmp_path, LOG[:-5], edit=lambda lines: lines + [
        export(tmp_path / "x", LOG).read_bytes().splitlines(keepends=True)[-5]]))
    assert f"line {len(LOG) - 4}: line {len(LOG) - 4} and those after it come after line {len(LOG) - 5}, which " \
           "marks the export's end (lines appended to the export?)" in said(appended)
    pasted = audit(export(tmp_path, edit=lambda lines: lines[:10] + [rejection] + lines[10:]))
    assert said(pasted) == ["line 11: a JobRejected among the log's lines (a dry run's rejections come after the "
                            "line that marks the log's end)"]
    after = audit(export(tmp_path, edit=lambda lines: lines + [rejection]))  # where a dry run writes them
    assert after.ok


def write_rejection(tmp_path: Path) -> bytes:
    path = tmp_path / "rejected.jsonl"
    write_export([], str(path), [ev.Envelope(id="reject/x", source="gangway/submission", time_ms=0, offset=0,
                                             data=ev.JobRejected(job_id="x", reason="bad_quantity", message="no",
                                                                 original=b"x"))])
    return path.read_bytes()


def test_an_offset_in_the_billions_is_one_gap_not_a_hang_and_a_byte_that_is_not_utf8_is_named(tmp_path, capsys):
    huge = on_line(-1, f'"logoffset":{LOG[-1].offset}'.encode(), f'"logoffset":{2**63 - 1}'.encode())
    report = audit(export(tmp_path, edit=huge))
    assert said(report)[0] == f"offsets {LOG[-1].offset}–{2**63 - 2} missing (before line {len(LOG)})"

    latin1 = on_line(3, b'"source":"', b'"source":"\xe9')
    assert cli.main(["replay", str(export(tmp_path, edit=latin1))]) == 1
    assert capsys.readouterr().err == f"gangway: {tmp_path / 'log.jsonl'}:4: not UTF-8 text (invalid continuation " \
                                      "byte at byte 0 of the line's field)\n"


def test_a_clock_leaping_past_a_hundred_thousand_billing_periods_is_refused_not_billed_for_minutes(tmp_path, capsys):
    path = export(tmp_path, edit=on_line(-1, b'"time":"', b'"time":"9999-12-31T23:59:59.999Z","x-was":"'))
    assert cli.main(["invoice", "--log", str(path), "--unchecked"]) == 1
    assert "the log's clock jumps to 9999-12-31T23:59:59.999Z, past more than 100,000 billing periods" in \
        capsys.readouterr().err


# --- decisions taken out (a stranger's tampering, the file renumbered after) ----------------------------------


def test_a_decision_taken_out_from_between_others_of_its_offset_is_said():
    """A service writes what it decides at an offset in order, all of it or up to where its cycle
    stopped: one missing before the last recorded there was taken out (the insider renumbering the
    file leaves no gap; the gap is said here too, the file not being renumbered)."""
    by_offset: dict[int, list[int]] = {}
    for i, e in enumerate(LOG):
        if isinstance(e.data, ev.WorkloadAdmitted):
            by_offset.setdefault(e.data.based_on, []).append(i)
    based_on, (gone, *_) = next((o, ids) for o, ids in by_offset.items() if len(ids) > 1)
    report = verify([e for i, e in enumerate(LOG) if i not in (gone, gone + 1)])  # the admission and its placement
    missed = [m for m in report.mismatches if m.offset == based_on]  # (later ones follow from it: it never ran)
    assert {m.id for m in missed} == {LOG[gone].id, LOG[gone + 1].id}
    assert all(m.why == f"decide on state[{based_on}] makes this decision before ones recorded there, and it is "
               "not on the log: deleted?" for m in missed)


def test_a_reason_code_taken_out_of_a_decision_is_not_read_as_an_old_record():
    """Decisions recorded before reasons were codes are checked without one; a decision with its code
    taken out, on a log whose decisions carry codes, is not (its sentence could then say anything)."""
    offset = first(ev.EvictionOrdered)
    report = verify(tampered(offset, data(reason_code=None, reason_params={}, reason="it had to go")))
    [mismatch] = report.mismatches
    assert mismatch.offset == offset and mismatch.why.startswith("its reason has no code, as decisions recorded "
                                                                "before reasons were codes, but the decision at offset")


def test_a_report_of_an_attempt_not_made_and_a_line_without_its_time_are_said(tmp_path, capsys):
    """A bind reported for attempt 10**20 was ignored by the fold (the workload then never ran, and
    its team's bill changed) and the replay passed; a line without its time was read as 1970."""
    bound = next(e for e in LOG if isinstance(e.data, ev.WorkloadBound))
    report = verify(tampered(bound.offset, data(attempt=10**20)))
    assert f"offset {bound.offset} {bound.id}: WorkloadBound of {bound.data.workload} reports attempt " \
           f"{10**20}, but its current attempt is {bound.data.attempt}: a report of an attempt not made" in said(report)

    assert cli.main(["replay", str(export(tmp_path, edit=on_line(5, b'"time":', b'"tmie":')))]) == 1
    assert capsys.readouterr().err == f"gangway: {tmp_path / 'log.jsonl'}:6: no time: every event of an export " \
                                      "carries its time\n"
