"""The submission shell: JobSubmitted records in; WorkloadQueued to the log, JobRejected to gangway.rejections;
JobWithdrawn records in, WithdrawalRequested to the log; a Kubernetes object's JobSubmitted naming another
queue than its workload's, WorkloadMoved.

It also relays telemetry — checkpoints, GPU figures, progress — from ``gangway.telemetry`` onto
the log (``telemetry.py``), and contracts from ``gangway.config``, which only the admin principal
writes (``config.py``).

Inputs: the shared ``gangway.submissions`` (written by gangway's own principals: the Kubernetes
binder, operators) and every tenant topic ``gangway.submissions.<namespace>`` that exists when the
service starts (one partition each; a tenant added later is read after a restart). A record on a
tenant topic may only name that namespace.

Input offsets are committed (consumer group ``gangway-submission``) only after what they became
is acknowledged by the broker; a record seen again after a crash is recognised by its
``submission`` position and produces nothing twice.
"""

from __future__ import annotations

import asyncio
import logging

import msgspec

from gangway.adapters import kafka
from gangway.events import topics
from gangway.events.catalogue import (
    EVENT_TYPES, ConfigApplied, JobRejected, NodeObserved, NodeRemoved, PriorityClassObserved, WithdrawalRequested,
    WorkloadMoved, WorkloadQueued,
)
from gangway.events.state import State
from gangway.events.text import digits
from gangway.services.runtime.shell import LogService, Proposal
from gangway.services.submission.config import decide_config
from gangway.services.submission.policy import decide_submission
from gangway.services.submission.telemetry import decide_telemetry

SUBMISSIONS_PARTITION = kafka.only_partition(topics.SUBMISSIONS)
TELEMETRY_PARTITION = kafka.only_partition(topics.TELEMETRY)
CONFIG_PARTITION = kafka.only_partition(topics.CONFIG)
#: At most this many submissions are validated per cycle.
SUBMISSIONS_PER_CYCLE_MAX = 5_000
log = logging.getLogger(__name__)


class SubmissionService(LogService):
    name = "submission"
    waits_for_own_writes = False
    copies_quarantine = True
    #: Submission reads the contract in force, the nodes' labels, the cluster's PriorityClasses and the
    #: workloads as they were queued (their names and where each came from) and moved: nothing later
    #: in a workload's life (a move it folds is taken as holding; the full fold's word on it is the
    #: one that counts). Folding admissions, placements and the binder's reports too was a third of
    #: its CPU in a burst.
    folds = frozenset({ConfigApplied, NodeObserved, NodeRemoved, PriorityClassObserved, WorkloadQueued, WorkloadMoved})

    def __init__(self, *args, max_bytes: int = 1_048_576, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_bytes = max_bytes
        self.inputs: list = []
        self.consumer = None
        #: Input partition → the offset to commit once this cycle's proposals are acknowledged.
        self.commit_to: dict = {}
        self.tenant_partitions: list = []
        #: Workload → the CloudEvent it was queued from, while its WorkloadQueued is in flight.
        self.queued_as: dict[str, str] = {}

    def group_id(self) -> str:
        return GROUP

    def input_partitions(self) -> list:
        return [SUBMISSIONS_PARTITION, *self.tenant_partitions, TELEMETRY_PARTITION, CONFIG_PARTITION]

    async def run(self, stop: asyncio.Event, standby: bool = False) -> None:
        self.tenant_partitions = [kafka.only_partition(t) for t in await kafka.tenant_submission_topics(self.bootstrap)]
        if self.tenant_partitions:
            log.info("submission: tenant topics %s", ", ".join(tp.topic for tp in self.tenant_partitions))
        await super().run(stop, standby)

    async def on_start(self, consumer) -> None:
        self.consumer = consumer
        self.inputs = []  # whatever a standby period left here, the active instance handled
        for tp in self.input_partitions():
            committed = await consumer.committed(tp) or 0
            consumer.seek(tp, committed)
            self.input_order[tp] = kafka.InOrder(committed)

    def on_input(self, records: list) -> None:
        self.inputs.extend(records)

    def decide(self, state: State) -> list[Proposal]:
        batch, self.inputs = self.inputs[:SUBMISSIONS_PER_CYCLE_MAX], self.inputs[SUBMISSIONS_PER_CYCLE_MAX:]
        proposals: list[Proposal] = []
        # Jobs queued but not folded yet are taken too (ids "queued/<workload>"), with the
        # CloudEvent each came as, so that the same CloudEvent sent again is a re-delivery.
        taken = self.queued_as = {wl: ce for wl, ce in self.queued_as.items() if f"queued/{wl}" in self.in_flight}
        now = self.clock.now_ms()
        for rec in batch:
            where = f"{rec.topic}/{rec.partition}/{rec.offset}"
            headers = list(rec.headers or ())
            if rec.topic == topics.CONFIG:
                contract = decide_config(rec.value, rec.key, headers, state, where)
                if isinstance(contract, JobRejected):
                    proposals.append(Proposal(f"rejected/{where}", now, contract, topics.REJECTIONS))
                elif contract is not None:
                    proposals.append(Proposal(f"config/{where}", now, contract))
                self.commit_to[CONFIG_PARTITION] = rec.offset + 1
                continue
            if rec.topic == topics.TELEMETRY:
                result = decide_telemetry(rec.value, rec.key, headers, state, where)
                if isinstance(result, JobRejected):
                    proposals.append(Proposal(f"rejected/{where}", now, result, topics.REJECTIONS))
                else:
                    proposals.append(Proposal(f"telemetry/{where}", now, result))
                self.commit_to[TELEMETRY_PARTITION] = rec.offset + 1
                continue
            result = decide_submission(rec.value, rec.key, headers, state, taken, where, self.max_bytes,
                                       entitled=topics.entitled_namespace(rec.topic))
            self.commit_to[kafka.partition_of(rec)] = rec.offset + 1
            if isinstance(result, WorkloadQueued):
                taken[result.workload] = result.submitted_as
                proposals.append(Proposal(f"queued/{result.workload}", now, result))
            elif isinstance(result, WithdrawalRequested):
                proposals.append(Proposal(f"withdraw/{where}", now, result))
            elif isinstance(result, WorkloadMoved):
                proposals.append(Proposal(f"moved/{where}", now, result))
            elif isinstance(result, JobRejected):
                proposals.append(Proposal(f"rejected/{where}", now, result, topics.REJECTIONS))
        return proposals

    def wake_in_s(self, state: State) -> float:
        return 0.0 if self.inputs else super().wake_in_s(state)

    async def after_append(self) -> None:
        if self.commit_to and self.consumer is not None:
            await self.consumer.commit(self.commit_to)
            self.commit_to = {}


class RestoredInputs:
    """Which input records already have their result in topics restored from an archive.

    Every submission record below the committed offset became a WorkloadQueued on the log or a
    JobRejected (both name the record's ``topic/partition/offset``), or a withdrawal or a move (ids
    ``withdraw/<record>``, ``moved/<record>``); every telemetry record an event
    on the log with the id ``telemetry/<record>`` (a checkpoint, GPU samples, progress) or a
    JobRejected, every config record a ConfigApplied with the id ``config/<record>``, a JobRejected,
    or nothing (a contract already in force, decided again harmlessly). A result the archive lost (its
    loss window) leaves a gap: the input offset goes back to the first gap, so the record is read
    and decided again instead of being skipped. Fed record by record during the restore.
    """

    def __init__(self) -> None:
        self.done: dict[str, set[int]] = {topics.SUBMISSIONS: set(), topics.TELEMETRY: set(), topics.CONFIG: set()}

    def _mark(self, where: str) -> None:
        topic, _, offset = where.rpartition("/0/")
        if topic in self.done and digits(offset):
            self.done[topic].add(int(offset))

    def observe(self, topic: str, rec) -> None:
        if topic not in (topics.LOG, topics.REJECTIONS):
            return
        headers = dict(rec.headers)
        ce_type = headers.get("ce_type")
        ce_id = (headers.get("ce_id") or b"").decode("utf-8", "replace")
        if topic == topics.LOG and ce_id.startswith(("telemetry/", "config/", "withdraw/", "moved/")):
            self._mark(ce_id.partition("/")[2])
        elif (topic == topics.LOG and ce_type == _QUEUED_TYPE) or topic == topics.REJECTIONS:
            try:
                self._mark(msgspec.json.decode(rec.value or b"{}", type=_Submission).submission)
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass

    def safe_offsets(self, groups: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        """The archived committed offsets, moved back to the first record whose result is missing."""
        offsets = dict(groups.get(GROUP, {}))
        for topic, committed in offsets.items():
            done = self.done.get(topic)
            if done is not None:
                offsets[topic] = next((p for p in range(committed) if p not in done), committed)
        return {**groups, GROUP: offsets} if offsets else groups


class _Submission(msgspec.Struct):
    submission: str = ""


GROUP = "gangway-submission"
_QUEUED_TYPE = EVENT_TYPES[WorkloadQueued].encode()
