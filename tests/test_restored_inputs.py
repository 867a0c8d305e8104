"""After a restore, the submission service's input offsets go back to the first record whose
result the archive lost, so a job queued inside the loss window is queued again, not skipped."""

from __future__ import annotations

from gangway.adapters.archive import Record
from gangway.events import codec, topics
from gangway.events.catalogue import CheckpointSaved, Envelope, JobRejected, WithdrawalRequested, WorkloadMoved, WorkloadQueued
from gangway.services.submission.service import GROUP, RestoredInputs


def record(offset: int, env: Envelope) -> Record:
    value, headers = codec.to_binary(env)
    return Record(offset, 0, b"k", value, headers)


def queued(where: str) -> Envelope:
    return Envelope(id=f"queued/{where}", source="gangway/submission", time_ms=1, data=WorkloadQueued(
        workload="t/w", namespace="t", queue="q", cluster_queue="q", priority_class=None, priority=0, kind="Job",
        pod_sets=[], runtime_ms=None, labels={}, submission=where))


def rejected(where: str) -> Envelope:
    return Envelope(id=f"rejected/{where}", source="gangway/submission", time_ms=1,
                    data=JobRejected(job_id="x", reason="invalid_field", message="m", original=b"", submission=where))


def checkpoint(where: str) -> Envelope:
    return Envelope(id=f"telemetry/{where}", source="gangway/submission", time_ms=1,
                    data=CheckpointSaved(workload="t/w", saved_ms=1))


def test_the_input_offset_goes_back_to_the_first_record_without_a_result():
    inputs = RestoredInputs()
    for i, where in enumerate(["gangway.submissions/0/0", "gangway.submissions/0/1", "gangway.submissions/0/3"]):
        inputs.observe(topics.LOG, record(i, queued(where)))
    inputs.observe(topics.REJECTIONS, record(0, rejected("gangway.submissions/0/2")))
    inputs.observe(topics.LOG, record(3, checkpoint("gangway.telemetry/0/0")))
    inputs.observe(topics.REJECTIONS, record(1, rejected("gangway.telemetry/0/1")))
    groups = {GROUP: {topics.SUBMISSIONS: 6, topics.TELEMETRY: 2}, "other": {topics.LOG: 9}}
    assert inputs.safe_offsets(groups) == {GROUP: {topics.SUBMISSIONS: 4, topics.TELEMETRY: 2},
                                           "other": {topics.LOG: 9}}


def test_a_result_lost_in_the_middle_sends_the_offset_back_to_it():
    inputs = RestoredInputs()
    for i in (0, 1, 3, 4):
        inputs.observe(topics.LOG, record(i, queued(f"gangway.submissions/0/{i}")))
    assert inputs.safe_offsets({GROUP: {topics.SUBMISSIONS: 5}}) == {GROUP: {topics.SUBMISSIONS: 2}}
    assert inputs.safe_offsets({}) == {}


def test_a_withdrawal_or_a_move_is_a_records_result_too():
    """(Before, the offset went back to the first withdrawal or move on the log, and every record
    from there was read and decided again.)"""
    inputs = RestoredInputs()
    inputs.observe(topics.LOG, record(0, queued("gangway.submissions/0/0")))
    inputs.observe(topics.LOG, record(1, Envelope(id="withdraw/gangway.submissions/0/1", source="gangway/submission",
                                                  time_ms=1, data=WithdrawalRequested(workload="t/w", reason="r"))))
    inputs.observe(topics.LOG, record(2, Envelope(id="moved/gangway.submissions/0/2", source="gangway/submission",
                                                  time_ms=1, data=WorkloadMoved(workload="t/w", from_queue="q", queue="p",
                                                                                cluster_queue="p"))))
    assert inputs.safe_offsets({GROUP: {topics.SUBMISSIONS: 3}}) == {GROUP: {topics.SUBMISSIONS: 3}}
