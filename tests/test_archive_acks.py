"""Durable acknowledgements on the embedded broker: the archiver commits how far it has archived
(group ``gangway-archiver``), and a producer of jobs waits for it (``archive.wait_archived``), so a
job called sent is in the archive — it survives a kill of the whole stack. Without an archiver
(Apache Kafka) there is nothing to wait for."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from gangway import stack
from gangway.adapters import archive, kafka
from gangway.adapters.broker import EmbeddedBroker
from gangway.benchmarks.durability import archiver_process
from gangway.events import topics
from gangway.events.catalogue import JobSubmitted, PodSetRequest

pytestmark = pytest.mark.broker


def jobs(n: int) -> list[JobSubmitted]:
    return [JobSubmitted(job_id=f"j-{i}", namespace="research", queue="default",
                         pod_sets=[PodSetRequest(name="main", count=1, resources={"nvidia.com/gpu": "1"})])
            for i in range(n)]


async def produce_one(bootstrap: str) -> None:
    prod = kafka.producer(bootstrap)
    await prod.start()
    try:
        await (await prod.send(topics.SUBMISSIONS, value=b"{}", key=b"k", partition=0))
    finally:
        await prod.stop()


def test_jobs_called_sent_are_archived_and_a_stopped_archiver_holds_the_producer_back(tmp_path):
    with EmbeddedBroker() as broker:
        asyncio.run(kafka.ensure_topics(broker.bootstrap))
        # No archiver: nothing to wait for (as on Apache Kafka).
        assert asyncio.run(archive.wait_archived(broker.bootstrap, {topics.SUBMISSIONS: 0})) is False
        root = tmp_path / "archive"
        ready = tmp_path / "archiver.ready"
        proc = archiver_process(broker.bootstrap, root, tmp_path / "archiver.log", ready=ready)
        try:
            deadline = time.monotonic() + 60
            while not ready.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            sent = asyncio.run(stack.publish_jobs(broker.bootstrap, jobs(200)))
            assert len(sent) == 200
            assert archive.next_offsets(root)[topics.SUBMISSIONS] == 200  # on disk when publish_jobs returned
            proc.send_signal(signal.SIGSTOP)  # an archiver that does not keep up
            asyncio.run(produce_one(broker.bootstrap))
            with pytest.raises(archive.ArchiveBehind, match="gangway.submissions 200 of 201"):
                asyncio.run(archive.wait_archived(broker.bootstrap, {topics.SUBMISSIONS: 201}, timeout_s=1))
        finally:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
