"""A downstream consumer written with faust-streaming reads gangway's log (DESIGN.md: "Who uses it").

Real embedded broker, real gangway events appended with ``gangway.adapters.kafka.append``, and a
faust App run in this test's event loop: one agent on ``gangway.log`` with raw serialization, no
tables and no exactly-once (neither works on Tansu: docs/embedded-broker.md), no web server. Each
record is decoded with ``gangway.events.codec.from_record`` from faust's ``event.value`` and
``event.headers``; the decoded envelopes must be exactly what was appended, in log order.
"""

from __future__ import annotations

import asyncio
import threading
import uuid

import msgspec
import pytest

from gangway.adapters.kafka import append, ensure_topics, producer
from gangway.contract import contract_digest
from gangway.events import catalogue as ev
from gangway.events import codec, topics
from gangway.events.contract import (
    ClusterQueue, Contract, FlavorQuotas, LocalQueue, PriorityClass, Quota, ResourceFlavor,
)

faust = pytest.importorskip("faust")

pytestmark = pytest.mark.broker

#: Generous: a consumer-group join on Tansu takes seconds (docs/embedded-broker.md).
RECEIVE_DEADLINE_S = 60.0
#: Tansu answers a JoinGroup only after half the member's session timeout (at least 1 s): faust's
#: default of 60 s makes the join alone take 30 s. 2 s (join in 1 s) is plenty for a consumer whose
#: heartbeats run in faust's own consumer thread every 0.5 s.
SESSION_TIMEOUT_S = 2.0
HEARTBEAT_INTERVAL_S = 0.5
GPU = "nvidia.com/gpu"
T0 = 1_700_000_000_000


def _events() -> list[ev.Envelope]:
    contract = Contract(
        flavors=[ResourceFlavor(name="h100")],
        cluster_queues=[ClusterQueue(
            name="team-a",
            flavors=[FlavorQuotas(flavor="h100", resources={GPU: Quota(nominal=16_000, borrowing_limit=8_000)})],
            cohort="all",
        )],
        local_queues=[LocalQueue(namespace="ns", name="team-a", cluster_queue="team-a")],
        priority_classes=[PriorityClass(name="high", value=100, grace_ms=10_000)],
    )
    pod_set = ev.PodSet(name="main", count=2, resources={GPU: 4_000, "cpu": 8_000})
    data: list[ev.Event] = [
        ev.ConfigApplied(contract=contract, digest=contract_digest(contract), source="test"),
        ev.NodeObserved(node="n1", allocatable={GPU: 8_000, "cpu": 96_000}, labels={"rack": "r1"}),
        ev.NodeObserved(node="n2", allocatable={GPU: 8_000, "cpu": 96_000}, labels={"rack": "r1"}),
        ev.WorkloadQueued(
            workload="ns/train", namespace="ns", queue="team-a", cluster_queue="team-a",
            priority_class="high", priority=100, kind="Job", pod_sets=[pod_set], runtime_ms=60_000,
            submission="gangway.submissions/0/0",
        ),
        ev.WorkloadAdmitted(workload="ns/train", cluster_queue="team-a", usage={GPU: 8_000, "cpu": 16_000},
                            borrowed={}, based_on=3),
        ev.PlacementDecided(workload="ns/train", based_on=4, assignments=[
            ev.PodAssignment(pod_set="main", node="n1", count=1),
            ev.PodAssignment(pod_set="main", node="n2", count=1),
        ]),
        ev.WorkloadBound(workload="ns/train", attempt=0),
    ]
    return [ev.Envelope(id=f"faust-test/{i}", source="gangway/test", time_ms=T0 + 1000 * i, data=d)
            for i, d in enumerate(data)]


@pytest.mark.both_brokers
async def test_faust_agent_reads_and_decodes_the_log(tmp_path, kafka_broker):
    appended = _events()
    tasks_before = asyncio.all_tasks()
    threads_before = set(threading.enumerate())
    broker = kafka_broker
    await ensure_topics(broker.bootstrap)
    prod = producer(broker.bootstrap)
    await prod.start()
    try:
        await append(prod, appended)
    finally:
        await prod.stop()

    app = faust.App(
        f"gangway-faust-test-{uuid.uuid4().hex[:12]}",
        broker=f"kafka://{broker.bootstrap}",
        store="memory://",
        datadir=str(tmp_path / "faust"),
        web_enabled=False,
        autodiscover=False,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=SESSION_TIMEOUT_S,
        broker_heartbeat_interval=HEARTBEAT_INTERVAL_S,
        broker_rebalance_timeout=10.0,
        topic_disable_leader=True,  # no faust-internal leader topic
        topic_allow_declare=False,  # gangway's topics exist already
        key_serializer="raw",
        value_serializer="raw",
    )
    log_topic = app.topic(topics.LOG, key_type=bytes, value_type=bytes,
                          key_serializer="raw", value_serializer="raw")
    received: list[ev.Envelope] = []
    failures: list[BaseException] = []

    @app.agent(log_topic)
    async def collect(stream):
        async for event in stream.events():
            try:
                received.append(codec.from_record(
                    event.value, list(event.headers.items()), event.message.offset))
            except Exception as exc:  # noqa: BLE001 - reported by the test, not swallowed by faust
                failures.append(exc)

    await app.start()
    try:
        deadline = asyncio.get_running_loop().time() + RECEIVE_DEADLINE_S
        while len(received) + len(failures) < len(appended) and not app.should_stop:
            if asyncio.get_running_loop().time() > deadline:
                pytest.fail(f"faust received {len(received)} of {len(appended)} events "
                            f"within {RECEIVE_DEADLINE_S} s")
            await asyncio.sleep(0.05)
        if app.crashed:
            pytest.fail(f"the faust app crashed: {app.crash_reason!r}")
    finally:
        await app.stop()

    assert not failures, failures
    # The topic is fresh, so event i is at offset i: equality checks ids, types, data and order.
    assert received == [msgspec.structs.replace(env, offset=i) for i, env in enumerate(appended)]
    assert [env.type for env in received] == [env.type for env in appended]
    leftover = [t for t in asyncio.all_tasks() - tasks_before if not t.done()]
    assert not leftover, leftover
    threads_left = [t for t in set(threading.enumerate()) - threads_before if t.is_alive()]
    assert not threads_left, threads_left
