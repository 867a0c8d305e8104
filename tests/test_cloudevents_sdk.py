"""Every event type gangway emits, written by gangway to a real Kafka topic, read by librdkafka
(confluent-kafka) and parsed by the official CloudEvents SDK's Kafka binding."""

from __future__ import annotations


import msgspec
import pytest
from cloudevents.v1.kafka import KafkaMessage, from_binary

from gangway.adapters import kafka
from gangway.adapters.broker import EmbeddedBroker
from gangway.events import catalogue as ev
from gangway.events import codec, topics
from outside_client import read_records
from test_schemas import SAMPLES

pytestmark = pytest.mark.broker
TOPIC_OF = {ev.JobSubmitted: topics.SUBMISSIONS, ev.JobRejected: topics.REJECTIONS}


async def test_the_cloudevents_sdk_parses_every_event_type_read_back_from_kafka():
    envs = [ev.Envelope(id=f"sample/{i}", source="gangway/test", time_ms=1_764_000_000_123 + i, data=data)
            for i, data in enumerate(SAMPLES[cls] for cls in ev.EVENT_TYPES)]
    with EmbeddedBroker() as broker:
        await kafka.ensure_topics(broker.bootstrap)
        prod = kafka.producer(broker.bootstrap)
        await prod.start()
        try:
            for topic in topics.ALL:
                await kafka.append(prod, [e for e in envs if TOPIC_OF.get(type(e.data), topics.LOG) == topic], topic)
        finally:
            await prod.stop()
        parsed = []
        for topic in (topics.LOG, topics.SUBMISSIONS, topics.REJECTIONS):
            expected = [e for e in envs if TOPIC_OF.get(type(e.data), topics.LOG) == topic]
            for msg, env in zip(read_records(broker.bootstrap, topic, len(expected)), expected, strict=True):
                event = from_binary(KafkaMessage(headers=dict(msg.headers()), key=msg.key(), value=msg.value()))
                assert (event["id"], event["type"], event["source"]) == (env.id, env.type, env.source)
                assert event["time"] == codec.format_time(env.time_ms)
                assert event.get("subject") == env.subject()
                assert event.get_data() == msgspec.json.decode(msgspec.json.encode(env.data))
                parsed.append(event["type"])
    assert sorted(parsed) == sorted(ev.EVENT_TYPES.values())
