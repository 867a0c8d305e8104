"""`gangway bench faults`: Kueue's baseline load through the real stack while it is being broken.

The load is Kueue's ``baseline`` scenario (30 ClusterQueues in cohorts, 15,000 workloads created
over 59 s, running 0.2–1 s each, time scale 1) — ``--shrink`` keeps that fraction of its
workloads (every queue stays) and ``span_s`` may compress their creation times. While it runs,
each fault in ``FAULTS`` is injected in turn, evenly spread over the creation span:

- a service (or the archiver) is killed with SIGKILL; the stack's supervisor restarts it; it has
  recovered when it has folded the whole log again (its ready file) and is the active instance
  again (deciding) — the archiver when it runs again and the archive holds everything the broker
  held at the kill;
- the embedded broker: once every job is sent, the whole stack (broker, archiver, services) is
  killed with SIGKILL and started again in the same state directory, as `gangway up` would be; it
  has recovered when the archive is restored and every service is ready;
- Apache Kafka (``--broker apache-kafka``; no archiver there, Kafka keeps its own data): its JVM is
  killed with SIGKILL and started again on the same data and ports while the services run on —
  once in the middle of the producer's stream of jobs (``broker-mid-produce``), and once after
  every job is sent; it has recovered when every service has committed a folded offset at or past
  the log's end as it stood when the broker answered again.

A broker kind is a ``BrokerKind``: the faults it takes and how to restart it.

Then, once every job has finished: jobs lost (sent and acknowledged, never finished: must be 0),
decisions duplicated (an admission of a workload not pending, a placement of one not admitted,
an eviction of one already leaving: must be 0), events written twice, replay mismatches (0),
rejections (0: no job was refused as a duplicate), the ledger's logs (1), and the recovery time
of each fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gangway import stack
from gangway.adapters import archive, kafka
from gangway.adapters.apache_kafka import ApacheKafka
from gangway.adapters.progress import CommittedOffsets
from gangway.benchmarks import kueue_scenarios as kueue
from gangway.benchmarks.results import reference_data
from gangway.events import catalogue as ev
from gangway.events import topics
from gangway.events.fold import apply
from gangway.events.state import State

SERVICE_FAULTS = ("admission", "placement", "preemption", "submission", "accounting", "binder", stack.ARCHIVER)
#: Every service and the archiver killed together.
ALL_AT_ONCE = "all"
BROKER = "broker"
#: The broker killed and restarted while the producer is streaming jobs to it.
MID_PRODUCE = "broker-mid-produce"
FAULTS = (*SERVICE_FAULTS, ALL_AT_ONCE, BROKER)
RECOVERY_TIMEOUT_S = 300.0


@dataclass
class BrokerKind:
    """How the fault bench runs a broker under the stack: the faults it takes, ``outside()`` (a
    context that starts a broker outside the stack and points the stack at it, or none) and
    ``restart(run, when)`` (returns what it measured; may replace ``run.running``)."""

    name: str
    faults: tuple[str, ...]
    restart: Callable[["Run", str], dict]
    outside: Callable[[Path], contextlib.AbstractContextManager] = lambda _tmp: contextlib.nullcontext()


def _restart_embedded(run: "Run", during: str = "") -> dict:
    """kill -9 of the broker, the archiver and every service; then `gangway up` again."""
    started = time.monotonic()
    running = run.running
    for proc in running.children.values():
        if proc.poll() is None:
            proc.kill()
    if running.broker is not None and running.broker.proc is not None:
        running.broker.proc.kill()
    for proc in running.children.values():
        proc.wait()
    if running.broker is not None and running.broker.proc is not None:
        running.broker.proc.wait()
    running.children.clear()
    if running.lock is not None:  # (a killed `gangway up` holds it no more: the kernel drops it with the process)
        running.lock.close()
    run.running = stack.Stack(cluster_file=running.cluster_file, time_scale=running.time_scale)
    run.running.start()
    run.running.wait_ready(timeout_s=RECOVERY_TIMEOUT_S)
    restored = run.running.restored.total if run.running.restored else 0
    return {"fault": "restart the embedded broker (whole stack, kill -9)",
            "recovery_s": time.monotonic() - started, "restored_records": restored}


EMBEDDED = BrokerKind("embedded", FAULTS, _restart_embedded)


class ApacheKafkaFaults:
    """Apache Kafka from the Maven jars, its data in the run's directory, restarted in place."""

    def __init__(self) -> None:
        self.kafka: ApacheKafka | None = None

    @contextlib.contextmanager
    def outside(self, tmp: Path):
        data = tmp / "kafka"
        data.mkdir()
        self.kafka = ApacheKafka(data_dir=str(data), log_path=str(tmp / "kafka.log"))
        old = os.environ.get("GANGWAY_KAFKA")
        self.kafka.start()
        os.environ["GANGWAY_KAFKA"] = self.kafka.bootstrap
        try:
            yield
        finally:
            _restore_env("GANGWAY_KAFKA", old)
            self.kafka.stop()

    def restart(self, run: "Run", during: str = "after every job was sent") -> dict:
        """kill -9 of Kafka's JVM, started again on the same data and ports; the services run on."""
        submitted = asyncio.run(archive.high_waters(run.running.bootstrap)).get(topics.SUBMISSIONS, 0)
        started = time.monotonic()
        self.kafka.proc.kill()
        self.kafka.proc.wait()
        self.kafka.start()
        back_s = time.monotonic() - started
        caught_up_s = _services_caught_up(run, started)
        return {"fault": f"restart Apache Kafka (kill -9), {during}", "recovery_s": caught_up_s,
                "broker_back_s": back_s, "submissions_at_kill": submitted}

    def kind(self) -> BrokerKind:
        return BrokerKind("apache-kafka", (*SERVICE_FAULTS[:-1], ALL_AT_ONCE, MID_PRODUCE, BROKER),
                          self.restart, self.outside)


def _services_caught_up(run: "Run", started: float) -> float:
    """Seconds from ``started`` until every service's committed log offset reaches the log's end as
    it stood once the broker answered again (supervising meanwhile: a service that died is restarted)."""
    async def wait() -> float:
        end = None
        offsets = CommittedOffsets(run.running.bootstrap)
        groups = [f"gangway-{name}" for name in stack.SERVICES]
        try:
            while time.monotonic() - started < RECOVERY_TIMEOUT_S:
                run.running.supervise_once()
                if end is None:
                    with contextlib.suppress(Exception):
                        end = (await archive.high_waters(run.running.bootstrap)).get(topics.LOG)
                if end is not None:
                    committed = await offsets.read(groups)
                    if all(c is not None and c >= end for c in committed.values()):
                        return time.monotonic() - started
                await asyncio.sleep(0.1)
        finally:
            await offsets.close()
        raise TimeoutError(f"the services did not catch up with the log within {RECOVERY_TIMEOUT_S} s of the restart")
    return asyncio.run(wait())


def _restore_env(name: str, old: str | None) -> None:
    if old is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = old


@dataclass
class Run:
    running: stack.Stack
    recoveries: list[dict] = field(default_factory=list)


def _ready(name: str) -> Path:
    return stack.state_dir() / f"{name}.ready"


def _log_end(bootstrap: str) -> int:
    return asyncio.run(archive.high_waters(bootstrap)).get(topics.LOG, 0)


def _kill_service(run: Run, fault: str) -> dict:
    """kill -9 of one service, or of every service and the archiver at once ("all")."""
    running = run.running
    names = [n for n in (*stack.SERVICES, stack.ARCHIVER) if n in running.children] if fault == ALL_AT_ONCE else [fault]
    end_at_kill = _log_end(running.bootstrap)
    logs = {n: stack.state_dir() / "logs" / f"{n}.log" for n in names}
    active_before = {n: _active_lines(logs[n]) for n in names}
    started = time.monotonic()
    for n in names:
        running.children[n].send_signal(signal.SIGKILL)
    for n in names:
        running.children[n].wait()
        _ready(n).unlink(missing_ok=True)  # a killed process leaves its ready file behind
    deadline = started + RECOVERY_TIMEOUT_S
    root = archive.archive_dir(stack.state_dir())
    ready_s: dict[str, float] = {}
    recovered: set[str] = set()
    while len(recovered) < len(names):
        running.supervise_once()
        for n in names:
            if n not in ready_s and _ready(n).exists():
                ready_s[n] = time.monotonic() - started
            if n in ready_s and n not in recovered and (
                    archive.next_offsets(root)[topics.LOG] >= end_at_kill if n == stack.ARCHIVER
                    else _active_lines(logs[n]) > active_before[n]):
                recovered.add(n)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{', '.join(sorted(set(names) - recovered))} did not recover within "
                               f"{RECOVERY_TIMEOUT_S} s")
        time.sleep(0.02)
    what = ("every service and the archiver at once" if stack.ARCHIVER in names else "every service at once") \
        if fault == ALL_AT_ONCE else fault
    return {"fault": f"kill -9 {what}", "recovery_s": time.monotonic() - started,
            "ready_s": max(ready_s.values()) if fault != stack.ARCHIVER else None}


def _active_lines(path: Path) -> int:
    """How many times the service's log says it became the active instance."""
    try:
        return path.read_text(errors="replace").count(": active\n")
    except FileNotFoundError:
        return 0


def _wait_finished(bootstrap: str, expected: set[str], timeout_s: float) -> None:
    asyncio.run(kafka.first_events(bootstrap, ev.WorkloadFinished, expected, timeout_s))


def count_faults(envs: list[ev.Envelope]) -> dict:
    """Duplicated decisions and events, by folding the log once."""
    state = State()
    seen: set[str] = set()
    twice = Counter()
    duplicated = Counter()
    for env in envs:
        if env.id in seen:
            twice[type(env.data).__name__] += 1
        seen.add(env.id)
        d = env.data
        wl = state.workloads.get(getattr(d, "workload", "") or "")
        if isinstance(d, ev.WorkloadAdmitted) and (wl is None or wl.spec.workload not in state.pending):
            duplicated["admission"] += 1
        elif isinstance(d, ev.PlacementDecided) and (wl is None or wl.phase != "admitted"):
            duplicated["placement"] += 1
        elif isinstance(d, ev.EvictionOrdered) and (wl is None or wl.phase == "evicting"):
            duplicated["eviction"] += 1
        apply(state, env)
    finished = {w for w, s in state.workloads.items() if s.phase == "finished"}
    return {"decisions_duplicated": sum(duplicated.values()), "duplicated_by_kind": dict(duplicated),
            "events_written_twice": sum(twice.values()), "written_twice_by_type": dict(twice),
            "finished": finished, "superseded": state.superseded, "ignored": state.ignored}


def bench_faults(shrink: float = 0.1, span_s: float | None = None, data_dir: str | None = None,
                 faults: tuple[str, ...] | None = None, kind: BrokerKind = EMBEDDED) -> dict:
    """``faults``: which of ``kind.faults`` to inject (all of them by default), in that order:
    the service kills and a mid-produce restart spread over the creation span, a broker restart
    once every job is sent."""
    faults = kind.faults if faults is None else faults
    unknown = [f for f in faults if f not in kind.faults]
    if unknown:
        raise ValueError(f"the {kind.name} broker takes no fault {', '.join(unknown)} (it takes {', '.join(kind.faults)})")
    sc = kueue.load(reference_data(data_dir, "kueue-perf/baseline/generator.yaml") / "kueue-perf" / "baseline" / "generator.yaml")
    step = max(1, round(1 / shrink)) if shrink else 1
    specs = sc.specs[::step]
    natural_s = max(s.create_ms for s in specs) / 1000
    scale = (span_s / natural_s) if span_s and natural_s else 1.0
    at_s = [0.5 + s.create_ms / 1000 * scale for s in specs]
    span = at_s[-1]
    # The mid-produce restart first: the service kills after it take seconds each to recover.
    during_load = sorted((f for f in faults if f != BROKER), key=lambda f: f != MID_PRODUCE)
    with tempfile.TemporaryDirectory() as tmp, kind.outside(Path(tmp)):
        old = os.environ.get("GANGWAY_STATE_DIR")
        os.environ["GANGWAY_STATE_DIR"] = tmp
        try:
            cluster = Path(tmp) / "cluster.yaml"
            cluster.write_text(kueue.nodes_yaml(sc))
            run = Run(stack.Stack(cluster_file=str(cluster), time_scale=1.0))
            run.running.start()
            try:
                asyncio.run(stack.publish_config(run.running.bootstrap, sc.contract, "kueue-perf/baseline",
                                                 run.running.clock.now_ms()))
                run.running.wait_ready(timeout_s=RECOVERY_TIMEOUT_S)
                started = time.monotonic()
                sent: dict[str, int] = {}
                failed: list[BaseException] = []

                def publish() -> None:
                    try:
                        sent.update(asyncio.run(stack.publish_jobs(
                            run.running.bootstrap, [kueue.job(s) for s in specs], at_s=at_s,
                            source="gangway/bench-faults", retry_s=RECOVERY_TIMEOUT_S)))
                    except BaseException as exc:  # reported below, not lost with the thread
                        failed.append(exc)
                publisher = threading.Thread(target=publish)
                publisher.start()
                for i, name in enumerate(during_load):
                    due = started + span * (i + 1) / (len(during_load) + 1)
                    while time.monotonic() < due:
                        run.running.supervise_once()
                        time.sleep(0.05)
                    if name == MID_PRODUCE:
                        if not publisher.is_alive():
                            raise RuntimeError("the producer had sent every job before the mid-produce restart: "
                                               "give the load a longer --span")
                        run.recoveries.append(kind.restart(run, "while jobs are being produced"))
                    else:
                        run.recoveries.append(_kill_service(run, name))
                while publisher.is_alive():
                    run.running.supervise_once()
                    publisher.join(0.1)
                if failed:
                    raise RuntimeError(f"the producer gave up: {failed[0]!r}") from failed[0]
                if BROKER in faults:
                    run.recoveries.append(kind.restart(run, "after every job was sent"))
                expected = set(sent)
                _wait_finished(run.running.bootstrap, expected, timeout_s=600)
                wall_s = time.monotonic() - started
                _, envs = asyncio.run(stack.read_state(run.running.bootstrap))
                ends = asyncio.run(archive.high_waters(run.running.bootstrap))
                rejections, submissions = ends.get(topics.REJECTIONS, 0), ends.get(topics.SUBMISSIONS, 0)
                ledger_logs = _ledger_logs(tmp)
            finally:
                run.running.stop()
        finally:
            _restore_env("GANGWAY_STATE_DIR", old)
    from gangway.services.audit.replay import verify
    counted = count_faults(envs)
    replay = verify(envs)
    lost = sorted(set(sent) - counted.pop("finished"))
    recoveries = [r["recovery_s"] for r in run.recoveries]
    result = {
        "broker": kind.name, "workloads": len(specs), "sent": len(sent), "cluster_queues": len(sc.contract.cluster_queues),
        "creation_span_s": span, "wall_s": wall_s, "faults": run.recoveries,
        "recovery_s_median": statistics.median(recoveries) if recoveries else 0.0,
        "recovery_s_max": max(recoveries, default=0.0),
        "jobs_lost": len(lost), "lost_examples": lost[:5], **counted,
        "replay_mismatches": len(replay.mismatches), "replay_decisions": replay.decisions,
        "rejections": rejections, "ledger_logs": ledger_logs, "log_events": len(envs), "submission_records": submissions,
    }
    result["ok"] = (result["jobs_lost"] == 0 and result["decisions_duplicated"] == 0
                    and result["replay_mismatches"] == 0 and result["rejections"] == 0 and ledger_logs == 1)
    return result


def _ledger_logs(state_dir: str) -> int:
    from gangway.services.accounting.ledger import Ledger, default_url
    with Ledger(default_url(state_dir)) as ledger:
        return len(ledger.logs())


def main(shrink: float = 0.1, data_dir: str | None = None, span_s: float | None = None, broker: str = "embedded") -> dict:
    kind = ApacheKafkaFaults().kind() if broker == "apache-kafka" else EMBEDDED
    return bench_faults(shrink=shrink, span_s=span_s, data_dir=data_dir, kind=kind)


def report(r: dict) -> str:
    lines = [f"faults on the {r['broker']} broker: Kueue baseline, {r['workloads']:,} workloads on "
             f"{r['cluster_queues']} ClusterQueues created over {r['creation_span_s']:.0f} s; all finished after "
             f"{r['wall_s']:.0f} s", f"{'fault':<62} {'time to recover':>16}"]
    for f in r["faults"]:
        extra = f" ({f['restored_records']:,} records restored)" if "restored_records" in f else ""
        if "broker_back_s" in f:
            extra = (f" (answering again after {f['broker_back_s']:.2f} s; {f['submissions_at_kill']:,} of "
                     f"{r['submission_records']:,} submission records were on the broker at the kill)")
        if f.get("ready_s") is not None:
            extra = f" (caught up with the log after {f['ready_s']:.2f} s, then active)"
        lines.append(f"{f['fault']:<62} {f['recovery_s']:>14.2f} s{extra}")
    lines += [
        f"jobs lost                {r['jobs_lost']:>6}   (target 0){' e.g. ' + ', '.join(r['lost_examples']) if r['lost_examples'] else ''}",
        f"decisions duplicated     {r['decisions_duplicated']:>6}   (target 0) {r['duplicated_by_kind'] or ''}",
        f"replay mismatches        {r['replay_mismatches']:>6}   (target 0; {r['replay_decisions']:,} decisions re-derived)",
        f"events written twice     {r['events_written_twice']:>6}   {r['written_twice_by_type'] or ''}",
        f"jobs rejected            {r['rejections']:>6}   (target 0)",
        f"ledger logs              {r['ledger_logs']:>6}   (target 1: the restored log is the same log)",
        f"superseded decisions {r['superseded']}, re-deliveries ignored by the fold {r['ignored']}; "
        f"log {r['log_events']:,} events",
        f"{'all targets met' if r['ok'] else 'TARGETS MISSED'}",
    ]
    return "\n".join(lines)
