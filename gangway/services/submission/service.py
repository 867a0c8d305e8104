"""The submission shell: JobSubmitted records in; WorkloadQueued to the log, JobRejected out.

Input offsets are committed (consumer group ``gangway-submission``) only after what they became
is acknowledged by the broker; a record seen again after a crash is recognised by its
``submission`` position and produces nothing twice.
"""

from __future__ import annotations

from aiokafka import TopicPartition

from gangway.adapters import kafka
from gangway.events import topics
from gangway.events.catalogue import JobRejected, WorkloadQueued
from gangway.events.state import State
from gangway.services.runtime.shell import LogService, Proposal
from gangway.services.submission.policy import decide_submission

SUBMISSIONS_PARTITION = TopicPartition(topics.SUBMISSIONS, 0)
#: At most this many submissions are validated per cycle.
SUBMISSIONS_PER_CYCLE_MAX = 5_000


class SubmissionService(LogService):
    name = "submission"
    waits_for_own_writes = False

    def __init__(self, *args, max_bytes: int = 1_048_576, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_bytes = max_bytes
        self.inputs: list = []
        self.consumer = None
        self.commit_to: int | None = None

    def group_id(self) -> str:
        return "gangway-submission"

    def input_partitions(self) -> list:
        return [SUBMISSIONS_PARTITION]

    async def on_start(self, consumer) -> None:
        self.consumer = consumer
        self.inputs = []  # whatever a standby period left here, the active instance handled
        committed = await consumer.committed(SUBMISSIONS_PARTITION) or 0
        consumer.seek(SUBMISSIONS_PARTITION, committed)
        self.input_order[SUBMISSIONS_PARTITION] = kafka.InOrder(committed)

    def on_input(self, records: list) -> None:
        self.inputs.extend(records)

    def decide(self, state: State) -> list[Proposal]:
        batch, self.inputs = self.inputs[:SUBMISSIONS_PER_CYCLE_MAX], self.inputs[SUBMISSIONS_PER_CYCLE_MAX:]
        proposals: list[Proposal] = []
        # Jobs queued but not folded yet are taken too (ids "queued/<workload>").
        taken = {pid.removeprefix("queued/") for pid in self.in_flight}
        now = self.clock.now_ms()
        for rec in batch:
            where = f"{topics.SUBMISSIONS}/{rec.partition}/{rec.offset}"
            result = decide_submission(rec.value, rec.key, list(rec.headers or ()), state, taken, where, self.max_bytes)
            if isinstance(result, WorkloadQueued):
                taken.add(result.workload)
                proposals.append((f"queued/{result.workload}", now, result))
            elif isinstance(result, JobRejected):
                proposals.append((f"rejected/{where}", now, result))
        if batch:
            self.commit_to = batch[-1].offset + 1
        return proposals

    def wake_in_s(self, state: State) -> float:
        return 0.0 if self.inputs else super().wake_in_s(state)

    async def after_append(self) -> None:
        if self.commit_to is not None and self.consumer is not None:
            await self.consumer.commit({SUBMISSIONS_PARTITION: self.commit_to})
            self.commit_to = None
