"""``gangway.quarantine``: records found on the log that no gangway service wrote, kept aside.

Every reader skips such a record alike (``codec.from_log_record``), so no state changes; one
service (the submission service, the log's gate for outside input) also copies it here, once,
with where it was found and why: the original key, value and headers, plus
``gangway-quarantine-offset``, ``-reason`` and ``-message`` headers.
"""

from __future__ import annotations

from aiokafka import TopicPartition

from gangway.adapters import kafka
from gangway.events import topics

OFFSET_HEADER = "gangway-quarantine-offset"
REASON_HEADER = "gangway-quarantine-reason"
MESSAGE_HEADER = "gangway-quarantine-message"
PARTITION = TopicPartition(topics.QUARANTINE, 0)


async def copied_offsets(bootstrap: str) -> set[int]:
    """Log offsets already copied to the quarantine topic (it is small: read it whole)."""
    consumer = kafka.log_consumer(bootstrap)
    await consumer.start()
    found: set[int] = set()
    try:
        consumer.assign([PARTITION])
        consumer.seek(PARTITION, 0)
        while True:
            batch = await consumer.getmany(PARTITION, timeout_ms=300, max_records=10_000)
            for rec in batch.get(PARTITION, []):
                for name, value in rec.headers or ():
                    if name == OFFSET_HEADER:
                        found.add(int(value))
            high = consumer.highwater(PARTITION)
            if high is not None and await consumer.position(PARTITION) >= high:
                return found
    finally:
        await consumer.stop()


async def copy(prod, found: list[tuple[object, str, str]]) -> None:
    """Copy (log record, reason, message) to the quarantine topic and wait for the broker."""
    futures = []
    for rec, reason, message in found:
        headers = [(k, v if v is not None else b"") for k, v in rec.headers or ()]
        headers += [(OFFSET_HEADER, str(rec.offset).encode()), (REASON_HEADER, reason.encode()),
                    (MESSAGE_HEADER, message.encode("utf-8", "replace")[:4096])]
        futures.append(await prod.send(topics.QUARANTINE, value=rec.value, key=rec.key, headers=headers, partition=0))
    for fut in futures:
        await fut
