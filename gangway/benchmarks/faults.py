"""`gangway bench faults`: Kueue's baseline load through the real stack while it is being broken.

The load is Kueue's ``baseline`` scenario (30 ClusterQueues in cohorts, 15,000 workloads created
over 59 s, running 0.2–1 s each, time scale 1) — ``--shrink`` keeps that fraction of its
workloads (every queue stays) and ``span_s`` may compress their creation times. While it runs,
each fault in ``FAULTS`` is injected in turn, evenly spread over the creation span:

- a service (or the archiver) is killed with SIGKILL; the stack's supervisor restarts it; it has
  recovered when it has folded the whole log again (its ready file) and is the active instance
  again (deciding) — the archiver when it runs again and the archive holds everything the broker
  held at the kill;
- the broker: once every job is sent, the whole stack (broker, archiver, services) is killed with
  SIGKILL and started again in the same state directory, as `gangway up` would be; it has
  recovered when the archive is restored and every service is ready.

A broker kind is a ``BrokerKind`` (how to restart it); the embedded broker's is built here, and
one for Apache Kafka can be plugged in (restarting Kafka itself keeps its data and the addresses).

Then, once every job has finished: jobs lost (sent and acknowledged, never finished: must be 0),
decisions duplicated (an admission of a workload not pending, a placement of one not admitted,
an eviction of one already leaving: must be 0), events written twice, replay mismatches (0),
rejections (0: no job was refused as a duplicate), the ledger's logs (1), and the recovery time
of each fault.
"""

from __future__ import annotations

import asyncio
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
from gangway.benchmarks import kueue_scenarios as kueue
from gangway.benchmarks.results import reference_data
from gangway.events import catalogue as ev
from gangway.events import topics
from gangway.events.fold import apply
from gangway.events.state import State

SERVICE_FAULTS = ("admission", "placement", "preemption", "submission", "accounting", "binder", stack.ARCHIVER)
#: Every service and the archiver killed together.
ALL_AT_ONCE = "all"
FAULTS = (*SERVICE_FAULTS, ALL_AT_ONCE, "broker")
RECOVERY_TIMEOUT_S = 300.0


@dataclass
class BrokerKind:
    """How the fault bench restarts the broker under a running stack: ``restart(stack)`` returns
    the stack to use afterwards (the embedded broker's restart is a whole new `gangway up`)."""

    name: str
    restart: Callable[["stack.Stack"], "stack.Stack"]


def _restart_embedded(running: stack.Stack) -> stack.Stack:
    """kill -9 of the broker, the archiver and every service; then `gangway up` again."""
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
    fresh = stack.Stack(cluster_file=running.cluster_file, time_scale=running.time_scale)
    fresh.start()
    return fresh


EMBEDDED = BrokerKind("embedded", _restart_embedded)


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
    names = [*stack.SERVICES, stack.ARCHIVER] if fault == ALL_AT_ONCE else [fault]
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
    what = "every service and the archiver at once" if fault == ALL_AT_ONCE else fault
    return {"fault": f"kill -9 {what}", "recovery_s": time.monotonic() - started,
            "ready_s": max(ready_s.values()) if fault != stack.ARCHIVER else None}


def _active_lines(path: Path) -> int:
    """How many times the service's log says it became the active instance."""
    try:
        return path.read_text(errors="replace").count(": active\n")
    except FileNotFoundError:
        return 0


def _restart_broker(run: Run, kind: BrokerKind) -> dict:
    started = time.monotonic()
    run.running = kind.restart(run.running)
    run.running.wait_ready(timeout_s=RECOVERY_TIMEOUT_S)
    restored = run.running.restored.total if run.running.restored else 0
    return {"fault": f"restart the {kind.name} broker (whole stack, kill -9)",
            "recovery_s": time.monotonic() - started, "restored_records": restored}


def _wait_finished(bootstrap: str, expected: set[str], timeout_s: float) -> None:
    async def watch() -> None:
        done: set[str] = set()
        start = 0
        deadline = time.monotonic() + timeout_s
        while not expected <= done:
            async for env in kafka.read_log(bootstrap, start=start, idle_ms=200):
                start = env.offset + 1
                if isinstance(env.data, ev.WorkloadFinished):
                    done.add(env.data.workload)
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.2)
    asyncio.run(watch())


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
                 faults: tuple[str, ...] = FAULTS, kind: BrokerKind = EMBEDDED) -> dict:
    sc = kueue.load(reference_data(data_dir, "kueue-perf/baseline/generator.yaml") / "kueue-perf" / "baseline" / "generator.yaml")
    step = max(1, round(1 / shrink)) if shrink else 1
    specs = sc.specs[::step]
    natural_s = max(s.create_ms for s in specs) / 1000
    scale = (span_s / natural_s) if span_s and natural_s else 1.0
    at_s = [0.5 + s.create_ms / 1000 * scale for s in specs]
    span = at_s[-1]
    service_faults = [f for f in faults if f != "broker"]
    with tempfile.TemporaryDirectory() as tmp:
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
                publisher = threading.Thread(target=lambda: sent.update(asyncio.run(stack.publish_jobs(
                    run.running.bootstrap, [kueue.job(s) for s in specs], at_s=at_s, source="gangway/bench-faults"))))
                publisher.start()
                for i, name in enumerate(service_faults):
                    due = started + span * (i + 1) / (len(service_faults) + 1)
                    while time.monotonic() < due:
                        run.running.supervise_once()
                        time.sleep(0.05)
                    run.recoveries.append(_kill_service(run, name))
                while publisher.is_alive():
                    run.running.supervise_once()
                    publisher.join(0.1)
                if "broker" in faults:
                    run.recoveries.append(_restart_broker(run, kind))
                expected = set(sent)
                _wait_finished(run.running.bootstrap, expected, timeout_s=600)
                wall_s = time.monotonic() - started
                _, envs = asyncio.run(stack.read_state(run.running.bootstrap))
                rejections = asyncio.run(archive.high_waters(run.running.bootstrap)).get(topics.REJECTIONS, 0)
                ledger_logs = _ledger_logs(tmp)
            finally:
                run.running.stop()
        finally:
            if old is None:
                os.environ.pop("GANGWAY_STATE_DIR", None)
            else:
                os.environ["GANGWAY_STATE_DIR"] = old
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
        "rejections": rejections, "ledger_logs": ledger_logs, "log_events": len(envs),
    }
    result["ok"] = (result["jobs_lost"] == 0 and result["decisions_duplicated"] == 0
                    and result["replay_mismatches"] == 0 and result["rejections"] == 0 and ledger_logs == 1)
    return result


def _ledger_logs(state_dir: str) -> int:
    from gangway.services.accounting.ledger import Ledger, default_url
    with Ledger(default_url(state_dir)) as ledger:
        return len(ledger.logs())


def main(shrink: float = 0.1, data_dir: str | None = None, span_s: float | None = None,
         faults: tuple[str, ...] = FAULTS) -> dict:
    return bench_faults(shrink=shrink, span_s=span_s, data_dir=data_dir, faults=faults)


def report(r: dict) -> str:
    lines = [f"faults on the {r['broker']} broker: Kueue baseline, {r['workloads']:,} workloads on "
             f"{r['cluster_queues']} ClusterQueues created over {r['creation_span_s']:.0f} s; all finished after "
             f"{r['wall_s']:.0f} s", f"{'fault':<52} {'time to recover':>16}"]
    for f in r["faults"]:
        extra = f" ({f['restored_records']:,} records restored)" if "restored_records" in f else ""
        if f.get("ready_s") is not None:
            extra = f" (caught up with the log after {f['ready_s']:.2f} s, then active)"
        lines.append(f"{f['fault']:<52} {f['recovery_s']:>14.2f} s{extra}")
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
