"""`gangway bench restore` and `gangway bench loss`: what the archive costs and what it can lose.

- ``restore``: an archive of a log of N events (a realistic mix of event types, encoded as the
  services encode them) is archived by the real archiver from a broker, then restored into a fresh
  embedded broker; prints the archiver's rate, the restore time and rate, and checks every offset.
- ``loss``: the loss window, measured. A producer appends steadily to the log of an embedded
  broker while the archiver runs as its own process; both the broker and the archiver are killed
  with SIGKILL mid-stream; the records the broker had acknowledged are compared with those in the
  archive (what a restore would bring back). Repeated; prints the records and milliseconds lost.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gangway.adapters import archive, kafka
from gangway.adapters.broker import EmbeddedBroker
from gangway.adapters.processes import die_with_parent
from gangway.events import catalogue as ev
from gangway.events import codec, topics

#: Targets stated here and printed beside the figures.
RESTORE_TARGET_S = 60.0
LOSS_TARGET_MS = 250.0
T0 = 1_764_000_000_000


def synthetic_events(n: int):
    """Yields N log records (key, value, headers) cycling through a workload's life: queued, admitted,
    placed, bound, running, finished — encoded by the codec, as the services write them."""
    spec = ev.PodSet(name="main", count=2, resources={"cpu": 8_000, "memory": 64 << 30, "nvidia.com/gpu": 8_000})
    key = topics.DEFAULT_CLUSTER.encode()
    i = made = 0
    while made < n:
        name = f"team-{i % 7}/job-{i}"
        cq = f"team-{i % 7}"
        t = T0 + i * 1000
        lives = [
            ("queued", "gangway/submission", ev.WorkloadQueued(
                workload=name, namespace=cq, queue="main", cluster_queue=cq, priority_class=None, priority=0,
                kind="Job", pod_sets=[spec], runtime_ms=600_000, labels={}, submission=f"gangway.submissions/0/{i}")),
            ("admit", "gangway/admission", ev.WorkloadAdmitted(
                workload=name, cluster_queue=cq, usage={"nvidia.com/gpu": 16_000}, borrowed={}, based_on=made)),
            ("place", "gangway/placement", ev.PlacementDecided(workload=name, based_on=made + 1, assignments=[
                ev.PodAssignment(pod_set="main", node=f"node-{i % 64}", count=2)])),
            ("bound", "gangway/binder", ev.WorkloadBound(workload=name, attempt=0)),
            ("running", "gangway/binder", ev.WorkloadRunning(workload=name, attempt=0)),
            ("finished", "gangway/binder", ev.WorkloadFinished(workload=name, attempt=0)),
        ]
        for kind, source, data in lives:
            env = ev.Envelope(id=f"{kind}/{name}", source=source, time_ms=t, data=data)
            value, headers = codec.to_binary(env)
            yield key, value, headers
            made += 1
            if made == n:
                return
        i += 1


async def _produce(bootstrap: str, records, topic: str = topics.LOG) -> None:
    prod = kafka.producer(bootstrap)
    await prod.start()
    try:
        futures = []
        for key, value, headers in records:
            futures.append(await prod.send(topic, value=value, key=key, headers=headers, partition=0))
            if len(futures) >= 20_000:
                await asyncio.gather(*futures)
                futures = []
        await asyncio.gather(*futures)
    finally:
        await prod.stop()


def archiver_process(bootstrap: str, root: Path, log_path: Path, ready: Path | None = None) -> subprocess.Popen:
    with open(log_path, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "gangway.adapters.archive", bootstrap, str(root),
                                 *(["--ready", str(ready)] if ready else [])],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=die_with_parent)


def _wait_archived(root: Path, topic: str, n: int, timeout_s: float) -> float:
    started = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    while archive.next_offsets(root)[topic] < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"archiver reached {archive.next_offsets(root)[topic]} of {n} in {timeout_s} s")
        time.sleep(0.2)
    return time.perf_counter() - started


def bench_restore(events: int = 1_000_000, runs: int = 3) -> dict:
    """The archive is made once; it is restored ``runs`` times, each into a fresh broker (the
    median is the figure); the first restored log is read back and every event checked."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "archive"
        t = time.perf_counter()
        with EmbeddedBroker() as source:
            asyncio.run(kafka.ensure_topics(source.bootstrap))
            t = time.perf_counter()
            asyncio.run(_produce(source.bootstrap, synthetic_events(events)))
            produce_s = time.perf_counter() - t  # encoding the events included
            proc = archiver_process(source.bootstrap, root, Path(tmp) / "archiver.log")
            try:
                archive_s = _wait_archived(root, topics.LOG, events, timeout_s=600)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
        size = sum(p.stat().st_size for p in root.rglob("*.seg"))
        restore_s, read_s = [], None
        for _ in range(runs):
            with EmbeddedBroker() as target:
                asyncio.run(kafka.ensure_topics(target.bootstrap))
                restored = asyncio.run(archive.restore(target.bootstrap, root))
                assert restored.records[topics.LOG] == events, restored
                restore_s.append(restored.seconds)
                if read_s is None:
                    t = time.perf_counter()
                    check = asyncio.run(_read_back_ids(target.bootstrap))
                    read_s = time.perf_counter() - t
                    assert check == events, f"read back {check} of {events}"
    median_s = statistics.median(restore_s)
    return {
        "events": events, "archive_mib": size / 2**20, "runs": runs,
        "produced_per_s": events / produce_s, "archiver_s": archive_s, "archived_per_s": events / archive_s,
        "restore_s": median_s, "restore_s_runs": restore_s, "restored_per_s": events / median_s,
        "read_back_s": read_s, "offsets_checked": events, "target_restore_s": RESTORE_TARGET_S,
        "meets_target": median_s <= RESTORE_TARGET_S,
    }


async def _read_back_ids(bootstrap: str) -> int:
    """Count the restored log's events, checking each decodes and sits at its offset in order."""
    n = 0
    async for env in kafka.read_log(bootstrap):
        assert env.offset == n, (env.offset, n)
        n += 1
    return n


def report_restore(r: dict) -> str:
    return "\n".join([
        f"restore of a {r['events']:,}-event log ({r['archive_mib']:.0f} MiB of archive segments)",
        f"  archiver: {r['archived_per_s']:,.0f} records/s ({r['archiver_s']:.1f} s; broker took them at "
        f"{r['produced_per_s']:,.0f}/s)",
        f"  restore into a fresh broker: median of {r['runs']} {r['restore_s']:.1f} s "
        f"({', '.join(f'{x:.1f}' for x in r['restore_s_runs'])}; {r['restored_per_s']:,.0f} records/s), every "
        f"offset checked; target ≤ {r['target_restore_s']:.0f} s ({r['restore_s'] / r['target_restore_s']:.2f} × the "
        f"target): {'met' if r['meets_target'] else 'MISSED'}",
        f"  reading the restored log back and decoding it: {r['read_back_s']:.1f} s",
    ])


# --- the loss window ---------------------------------------------------------------------------


async def _steady(bootstrap: str, rate: float, records: list, acked: list[int]) -> None:
    """Append to the log at ``rate`` records/s; ``acked`` gets each acknowledged offset."""
    prod = kafka.producer(bootstrap)
    await prod.start()
    started = time.monotonic()
    try:
        for i, (key, value, headers) in enumerate(records):
            await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
            fut = await prod.send(topics.LOG, value=value, key=key, headers=headers, partition=0)
            fut.add_done_callback(lambda f: acked.append(f.result().offset) if not f.exception() else None)
    finally:
        try:
            await asyncio.wait_for(prod.stop(), 2)
        except Exception:  # the broker is gone by design
            pass


def _one_loss_run(rate: float, run_s: float, tmp: Path, i: int) -> dict:
    root = tmp / f"archive-{i}"
    broker = EmbeddedBroker().start()
    asyncio.run(kafka.ensure_topics(broker.bootstrap))
    proc = archiver_process(broker.bootstrap, root, tmp / f"archiver-{i}.log")
    acked: list[int] = []
    records = list(synthetic_events(int(rate * (run_s + 30))))  # made before the clock starts
    flowing: list = []

    async def produce_then_kill() -> None:
        task = asyncio.create_task(_steady(broker.bootstrap, rate, records, acked))
        while not acked:  # the stream is flowing
            await asyncio.sleep(0.01)
        first = acked[0]
        flowing.append(time.monotonic())
        await asyncio.sleep(run_s)
        flowing.append(time.monotonic())
        flowing.append(first)
        # The whole stack dies at once: kill -9 of the broker and the archiver.
        os.kill(broker.proc.pid, signal.SIGKILL)
        os.kill(proc.pid, signal.SIGKILL)
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass

    time.sleep(1.0)  # the archiver is connected
    asyncio.run(produce_then_kill())
    broker.proc.wait()
    proc.wait()
    acked_n = max(acked) + 1 if acked else 0
    archived = archive.next_offsets(root)[topics.LOG]
    with EmbeddedBroker() as fresh:  # what a restart brings back
        asyncio.run(kafka.ensure_topics(fresh.bootstrap))
        restored = asyncio.run(archive.restore(fresh.bootstrap, root))
    if not acked_n:
        raise RuntimeError("nothing was acknowledged before the kill: the measure is void")
    lost = max(0, acked_n - archived)
    since, until, first = flowing
    achieved = (acked_n - first) / (until - since)  # the rate the loaded machine actually carried
    return {"acked": acked_n, "archived": archived, "restored": restored.records[topics.LOG],
            "achieved_per_s": achieved, "lost": lost, "lost_ms": 1000 * lost / achieved}


def bench_loss(rate: float = 2000.0, runs: int = 5, run_s: float = 4.0) -> dict:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the broker is killed on purpose
    with tempfile.TemporaryDirectory() as tmp:
        results = [_one_loss_run(rate, run_s, Path(tmp), i) for i in range(runs)]
    lost_ms = [r["lost_ms"] for r in results]
    return {"rate_per_s": rate, "runs": results, "fsync": archive.fsync_policy()[0],
            "lost_records_median": statistics.median(r["lost"] for r in results),
            "lost_records_max": max(r["lost"] for r in results),
            "lost_ms_median": statistics.median(lost_ms), "lost_ms_max": max(lost_ms),
            "restored_equals_archived": all(r["restored"] == r["archived"] for r in results),
            "target_ms": LOSS_TARGET_MS, "meets_target": max(lost_ms) <= LOSS_TARGET_MS}


def report_loss(r: dict) -> str:
    lines = [f"loss window: steady appends asked at {r['rate_per_s']:,.0f} records/s, broker and archiver killed with "
             f"SIGKILL mid-stream (fsync policy {r['fsync']})",
             f"{'run':>4} {'carried/s':>10} {'acknowledged':>13} {'archived':>9} {'restored':>9} {'lost':>6} "
             f"{'lost ms':>8}"]
    for i, run in enumerate(r["runs"]):
        lines.append(f"{i:>4} {run['achieved_per_s']:>10,.0f} {run['acked']:>13,} {run['archived']:>9,} "
                     f"{run['restored']:>9,} {run['lost']:>6} {run['lost_ms']:>8.1f}")
    lines.append(f"lost: median {r['lost_records_median']} records ({r['lost_ms_median']:.1f} ms of appends at the rate "
                 f"carried), max "
                 f"{r['lost_records_max']} ({r['lost_ms_max']:.1f} ms); target ≤ {r['target_ms']:.0f} ms: "
                 f"{'met' if r['meets_target'] else 'MISSED'}; restored = archived: {r['restored_equals_archived']}")
    return "\n".join(lines)
