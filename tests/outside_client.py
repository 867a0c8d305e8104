"""The outside client the tests read with: confluent-kafka (librdkafka), as any producer or
consumer in another language would."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition


def read_records(bootstrap: str, topic: str, count: int, deadline_s: float = 20) -> list:
    """The first ``count`` records of a topic's partition 0, as confluent-kafka reads them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-read-{topic}", "enable.auto.commit": False,
                         "log.connection.close": False, "log_level": 3})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        records, deadline = [], time.monotonic() + deadline_s
        while len(records) < count:
            assert time.monotonic() < deadline, f"read {len(records)} of {count} records of {topic} in {deadline_s} s"
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                records.append(msg)
        return records[:count]
    finally:
        consumer.close()
