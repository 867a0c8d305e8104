"""The service shell on the real broker: snapshots resume, a foreign snapshot is refused."""

from __future__ import annotations

import asyncio
import time

import pytest

from gangway.adapters import kafka
from gangway.adapters.broker import EmbeddedBroker
from gangway.events.catalogue import Envelope, NodeObserved
from gangway.services.runtime.clock import ClusterClock
from gangway.services.runtime.shell import DecidingService

pytestmark = pytest.mark.broker


def nodes(n: int, start: int = 0) -> list[Envelope]:
    """Nodes n<start>… observed, at offsets start… (a fold without the broker needs them; appending
    gives the log's own)."""
    return [Envelope(id=f"node/{i}", source="gangway/binder", time_ms=1_000 + i, offset=i,
                     data=NodeObserved(node=f"n{i}", allocatable={"nvidia.com/gpu": 8000})) for i in range(start, start + n)]


async def run_until(service: DecidingService, offset: int, deadline_s: float = 20) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while service.state.offset < offset:
        assert loop.time() < end, f"{service.name} stuck at offset {service.state.offset}"
        await asyncio.sleep(0.05)
    stop.set()
    await task


async def append(bootstrap: str, envs: list[Envelope]) -> None:
    prod = kafka.producer(bootstrap)
    await prod.start()
    try:
        await kafka.append(prod, envs)
    finally:
        await prod.stop()


async def test_a_restarted_service_resumes_from_its_snapshot(tmp_path):
    with EmbeddedBroker() as broker:
        await kafka.ensure_topics(broker.bootstrap)
        await append(broker.bootstrap, nodes(5))
        clock = ClusterClock.starting_now()
        first = DecidingService("admission", broker.bootstrap, tmp_path, clock)
        await run_until(first, 4)
        assert (tmp_path / "admission.snapshot").exists()
        await append(broker.bootstrap, nodes(3, start=5))
        second = DecidingService("admission", broker.bootstrap, tmp_path, clock)
        folded = []
        original_fold = second.fold
        second.fold = lambda env: (folded.append(env.offset), original_fold(env))
        await run_until(second, 7)
        assert folded == [5, 6, 7], "resumed after the snapshot, not from zero"
        assert sorted(second.state.nodes) == [f"n{i}" for i in range(8)]


async def test_a_snapshot_of_another_log_is_refused(tmp_path):
    with EmbeddedBroker() as broker:
        await kafka.ensure_topics(broker.bootstrap)
        await append(broker.bootstrap, nodes(4))
        service = DecidingService("placement", broker.bootstrap, tmp_path)
        await run_until(service, 3)
    with EmbeddedBroker() as fresh:  # a new embedded broker is a new, empty log
        await kafka.ensure_topics(fresh.bootstrap)
        await append(fresh.bootstrap, nodes(6, start=10))
        service = DecidingService("placement", fresh.bootstrap, tmp_path)
        await run_until(service, 5)
        assert sorted(service.state.nodes) == [f"n{i}" for i in range(10, 16)]


async def test_a_snapshot_past_the_end_of_the_log_is_refused_at_once(tmp_path, monkeypatch):
    """The log ends before the snapshot's offset (another, shorter log): nothing will ever be there to
    compare, so the service folds from zero without waiting for a record (as it waits when the broker
    is merely slow to answer)."""
    from gangway.services.runtime import shell
    monkeypatch.setattr(shell, "RESUME_WAIT_S", 3600.0)
    with EmbeddedBroker() as broker:
        await kafka.ensure_topics(broker.bootstrap)
        await append(broker.bootstrap, nodes(6))
        service = DecidingService("placement", broker.bootstrap, tmp_path)
        await run_until(service, 5)
    with EmbeddedBroker() as fresh:
        await kafka.ensure_topics(fresh.bootstrap)
        await append(fresh.bootstrap, nodes(2, start=10))
        service = DecidingService("placement", fresh.bootstrap, tmp_path)
        await run_until(service, 1)
        assert sorted(service.state.nodes) == ["n10", "n11"]


@pytest.mark.both_brokers
async def test_one_instance_decides_and_a_standby_takes_over_when_it_stops(tmp_path, kafka_broker):
    from gangway.events.catalogue import ConfigApplied, WorkloadAdmitted, WorkloadQueued
    from gangway.events.contract import ClusterQueue, Contract, FlavorQuotas, LocalQueue, Quota
    from gangway.events.catalogue import PodSet

    contract = Contract(
        cluster_queues=[ClusterQueue(name="q", flavors=[FlavorQuotas(flavor="f", resources={
            "nvidia.com/gpu": Quota(nominal=64_000)})])],
        local_queues=[LocalQueue(namespace="t", name="q", cluster_queue="q")],
    )

    def queued(i: int) -> Envelope:
        return Envelope(id=f"queued/t/w{i}", source="gangway/submission", time_ms=2_000 + i, data=WorkloadQueued(
            workload=f"t/w{i}", namespace="t", queue="q", cluster_queue="q", priority_class=None, priority=0,
            kind="Job", pod_sets=[PodSet(name="main", count=1, resources={"nvidia.com/gpu": 1000})]))

    async def admitted(bootstrap: str) -> list[str]:
        return [e.data.workload async for e in kafka.read_log(bootstrap, idle_ms=50)
                if isinstance(e.data, WorkloadAdmitted)]

    async def until(condition, what: str, deadline_s: float = 20) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        while not await condition():
            assert loop.time() < end, f"timed out: {what}"
            await asyncio.sleep(0.1)

    broker = kafka_broker
    await kafka.ensure_topics(broker.bootstrap)
    await append(broker.bootstrap, [Envelope(id="config", source="gangway/config", time_ms=1_000,
                                             data=ConfigApplied(contract=contract, digest="d"))] + nodes(2))
    stops = {name: asyncio.Event() for name in ("a", "b")}
    services = {name: DecidingService("admission", broker.bootstrap, tmp_path / name) for name in stops}
    tasks = {name: asyncio.create_task(services[name].run(stops[name], standby=True)) for name in stops}
    try:
        await append(broker.bootstrap, [queued(i) for i in range(3)])
        await until(lambda: _len_at_least(admitted(broker.bootstrap), 3), "the first jobs admitted")

        async def one_active() -> bool:
            return sum(bool(s.lease and s.lease.active) for s in services.values()) == 1
        await until(one_active, "exactly one active instance")
        first = next(n for n, s in services.items() if s.lease.active)
        other = "b" if first == "a" else "a"
        stops[first].set()
        await tasks[first]
        await until(lambda: _true(services[other].lease.active), "the standby taking over")
        await append(broker.bootstrap, [queued(i) for i in range(3, 6)])
        await until(lambda: _len_at_least(admitted(broker.bootstrap), 6), "jobs admitted by the new active")
        assert sorted(await admitted(broker.bootstrap)) == [f"t/w{i}" for i in range(6)], "each admitted once"
    finally:
        for name in stops:
            stops[name].set()
        await asyncio.gather(*tasks.values())


async def _len_at_least(items, n: int) -> bool:
    return len(await items) >= n


async def _true(value: bool) -> bool:
    return value


async def test_each_proposal_goes_to_its_own_topic_and_only_the_log_ones_wait_in_flight(tmp_path):
    from gangway.events import codec, topics
    from gangway.services.runtime.shell import LogService, Proposal

    class TwoTopics(LogService):
        name = "binder"  # a writer of the log (NodeObserved), or the reader quarantines its record
        snapshots = False
        decided = False

        def decide(self, state):
            if self.decided:
                return []
            self.decided = True
            node = NodeObserved(node="n", allocatable={"nvidia.com/gpu": 8000})
            return [("to-log", 1, node), Proposal("to-rejections", 2, node, topics.REJECTIONS)]

    with EmbeddedBroker() as broker:
        await kafka.ensure_topics(broker.bootstrap)
        service = TwoTopics(broker.bootstrap, tmp_path)
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop))
        for _ in range(400):
            if service.state.offset >= 0:
                break
            await asyncio.sleep(0.05)
        assert "to-rejections" not in service.in_flight
        stop.set()
        await task
        assert [e.id async for e in kafka.read_log(broker.bootstrap, idle_ms=50)] == ["to-log"]
        async with kafka.log_consumer(broker.bootstrap) as consumer:
            consumer.assign([kafka.only_partition(topics.REJECTIONS)])
            batch = await consumer.getmany(timeout_ms=2000)
        records = [r for rs in batch.values() for r in rs]
        assert [codec.from_record(r.value, r.headers, r.offset).id for r in records] == ["to-rejections"]


async def test_preemption_spends_at_most_its_share_of_time_deciding(tmp_path):
    """After a decide that took t, the preemption service waits t × (1/share − 1) before the next
    (it runs a whole admission cycle each time); admission decides whenever it is caught up."""
    from gangway.services.runtime import shell

    preemption = DecidingService("preemption", "127.0.0.1:9", tmp_path)
    admission = DecidingService("admission", "127.0.0.1:9", tmp_path)
    calls: list[str] = []

    def slow_decide(name):
        def decide(_state):
            calls.append(name)
            time.sleep(0.05)
            return []
        return decide

    for service in (preemption, admission):
        service.was_active = True
        service.decide = slow_decide(service.name)
        await service._decide_and_append(None)
        wait = await service._decide_and_append(None)
        if service is preemption:
            assert calls == ["preemption"], "the second decide waits"
            assert 0.05 * (1 / shell.PREEMPTION_DECIDE_SHARE - 1) * 0.9 <= wait <= 5
        else:
            assert calls == ["preemption", "admission", "admission"]
    await asyncio.sleep(preemption.next_decide_at - time.monotonic() + 0.01)
    await preemption._decide_and_append(None)
    assert calls.count("preemption") == 2, "once the wait is over it decides again"


async def test_admission_stops_a_long_cycle_after_the_decision_it_is_at_and_its_placement(tmp_path, monkeypatch):
    """A decide that goes on past ``GANGWAY_ADMISSION_CYCLE_MS`` is cut after the admission it is at
    and the placement decided with it; what was appended is what is in flight, and the next
    decisions are left to the next cycle (the decide is lazy: they are never made)."""
    from gangway.events.catalogue import PlacementDecided, PodAssignment, WorkloadAdmitted
    from gangway.services.runtime.shell import admission_cycle_s

    monkeypatch.setenv("GANGWAY_ADMISSION_CYCLE_MS", "40")
    decided: list[str] = []

    def decide(_state):
        for i in range(50):
            name = f"ns/w{i}"
            decided.append(name)
            time.sleep(0.01)
            yield (f"admit/{name}/0", 1, WorkloadAdmitted(workload=name, cluster_queue="q", usage={}, borrowed={}, based_on=0))
            yield (f"admit/{name}/0/placement", 1, PlacementDecided(
                workload=name, assignments=[PodAssignment(pod_set="main", node="n", count=1)], based_on=0,
                with_admission=True))

    with EmbeddedBroker() as broker:
        await kafka.ensure_topics(broker.bootstrap)
        service = DecidingService("admission", broker.bootstrap, tmp_path)
        assert service.cycle_s == admission_cycle_s() == 0.04
        service.was_active, service.decide = True, decide
        prod = kafka.producer(broker.bootstrap)
        await prod.start()
        try:
            await service._decide_and_append(prod)
        finally:
            await prod.stop()
        appended = [e.id async for e in kafka.read_log(broker.bootstrap, idle_ms=50)]
    assert 2 <= len(decided) < 20
    last = decided[-2]  # (the last one decided was made past the limit, and dropped)
    assert appended == [f"admit/ns/w{i}/0{part}" for i in range(len(decided) - 1) for part in ("", "/placement")]
    assert appended[-1] == f"admit/{last}/0/placement" and set(service.in_flight) == set(appended)


@pytest.mark.parametrize("raw, seconds", [("", None), ("0", None), ("12.5", 0.0125), (" 100 ", 0.1)])
def test_the_admission_cycle_setting(raw, seconds):
    from gangway.services.runtime.shell import admission_cycle_s
    assert admission_cycle_s({"GANGWAY_ADMISSION_CYCLE_MS": raw}) == seconds


@pytest.mark.parametrize("raw", ["-1", "abc", "inf", "nan"])
def test_a_wrong_admission_cycle_setting_is_refused_by_gangway_up_in_one_line(raw, monkeypatch, capsys, tmp_path):
    from gangway import cli
    monkeypatch.setenv("GANGWAY_ADMISSION_CYCLE_MS", raw)
    monkeypatch.setenv("GANGWAY_STATE_DIR", str(tmp_path))
    assert cli.main(["up"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"GANGWAY_ADMISSION_CYCLE_MS={raw!r}" in err[0] and "milliseconds" in err[0]


@pytest.mark.parametrize("runtimes_s, scale, limit_s", [
    ([None], 1.0, None),                # no declared runtime: no limit
    ([0.15, 0.7], 1.0, 0.025),          # Kueue's large-scale: the floor
    ([4.0], 1.0, 0.1),                  # a fortieth of the runtime
    ([4.0, 2.0, 8.0], 1.0, 0.05),       # the shortest admitted so far
    ([3600.0], 1.0, 90.0),              # an hour's work: no cut a cycle reaches (3,000 admissions first)
    ([600.0], 600.0, 0.025),            # ten cluster minutes at × 600 are a second of wall time
])
def test_a_cycle_is_limited_by_the_shortest_runtime_it_admitted(runtimes_s, scale, limit_s, tmp_path):
    from gangway.events.catalogue import WorkloadAdmitted
    from gangway.events.state import State
    from gangway.services.runtime.shell import admission_cycle_s

    service = DecidingService("admission", "127.0.0.1:9", tmp_path, ClusterClock.starting_now(scale))
    service.state = State()
    limit = admission_cycle_s({})
    for i, runtime_s in enumerate(runtimes_s):
        spec = type("Spec", (), {"runtime_ms": None if runtime_s is None else int(runtime_s * 1000)})
        service.state.workloads[f"ns/w{i}"] = type("Wl", (), {"spec": spec})
        limit = service.cycle_limit_s(limit, WorkloadAdmitted(workload=f"ns/w{i}", cluster_queue="q", usage={},
                                                              borrowed={}, based_on=0))
    assert limit == pytest.approx(limit_s) if limit_s is not None else limit is None
