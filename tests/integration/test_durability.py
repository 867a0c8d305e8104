"""The log survives `gangway up`: killed with kill -9 (the whole process group and the broker),
then stopped cleanly, and each time started again in the same state directory.

Each start must bring back every event at its offset (same ids), the services must resume (from
their snapshots after a clean stop), the ledger must count nothing twice, and the whole history
must replay. Runs its own stacks (not the session's shared one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gangway.demo import demo_file
from gangway.events import codec
from gangway.events import catalogue as ev
from gangway.services.accounting.ledger import Ledger

GANGWAY = [sys.executable, "-m", "gangway"]
pytestmark = pytest.mark.broker


@pytest.fixture
def env(tmp_path) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("GANGWAY_KAFKA", "GANGWAY_DB", "GANGWAY_CLOCK")}
    return dict(clean, GANGWAY_STATE_DIR=str(tmp_path / "state"), COLUMNS="200")


def run(args: list[str], env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(GANGWAY + args, env=env, capture_output=True, text=True, timeout=timeout)


def up(env: dict, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen(GANGWAY + ["up", "--cluster", demo_file("cluster.yaml"), "--time-scale", "600", *extra],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "gangway is up" in line:
            return proc
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("gangway up did not come up:\n" + "".join(lines))


def kill_everything(proc: subprocess.Popen, state: Path) -> None:
    """kill -9 of the process group of `gangway up`, and of the broker (its own session)."""
    bootstrap = (state / "bootstrap").read_text().split()[0]  # ("<address> embedded")
    broker = subprocess.run(["pgrep", "-f", f"listener-url tcp://{bootstrap}"], capture_output=True, text=True)
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in broker.stdout.split():
        os.kill(int(pid), signal.SIGKILL)
    proc.wait(timeout=10)


def export(env: dict, path: Path) -> list[dict]:
    done = run(["log", "--export", str(path)], env)
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in path.read_text().splitlines()]


def jobs(n: int, prefix: str, runtime_s: int) -> str:
    return yaml.safe_dump_all([{
        "job_id": f"{prefix}-{i}", "namespace": "batch" if i % 2 else "research", "queue": "default",
        "pod_sets": [{"name": "main", "count": 1, "resources": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1}}],
        "runtime_seconds": runtime_s,
    } for i in range(n)])


def finished(events: list[dict]) -> set[str]:
    return {e["subject"] for e in events if e["type"] == ev.EVENT_TYPES[ev.WorkloadFinished]}


def wait_for(env: dict, path: Path, done, timeout_s: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        events = export(env, path)
        if done(events) or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


def assert_same_history(before: list[dict], after: list[dict]) -> None:
    assert len(after) >= len(before)
    assert [(e["logoffset"], e["id"]) for e in after[:len(before)]] == [(e["logoffset"], e["id"]) for e in before]


def follow_to(path: Path, offset: int, timeout_s: float = 30) -> tuple[list[int], list[str]]:
    """The offsets `gangway log --follow` printed to ``path`` once it printed ``offset`` (or in
    ``timeout_s``), and its other lines."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = path.read_text().splitlines()
        offsets = [int(line.split()[0]) for line in lines if line.split() and line.split()[0].isdigit()]
        if offset in offsets or time.monotonic() > deadline:
            return offsets, [line for line in lines if not (line.split() and line.split()[0].isdigit())]
        time.sleep(0.5)


SHORT_S, LONG_S = 600, 9000  # cluster seconds (the stack runs 600 of them a second)


def test_the_log_survives_kill_9_and_a_clean_stop(env, tmp_path):
    state = Path(env["GANGWAY_STATE_DIR"])
    first = up(env, "--config", demo_file("contract.yaml"))
    try:
        (tmp_path / "short.yaml").write_text(jobs(24, "short", SHORT_S))  # 1 s of wall time each
        (tmp_path / "long.yaml").write_text(jobs(8, "long", LONG_S))     # 15 s: they run across the kill
        for name in ("long.yaml", "short.yaml"):
            assert run(["submit", str(tmp_path / name)], env).returncode == 0
        before = wait_for(env, tmp_path / "a.jsonl", lambda evs: len(finished(evs)) >= 4)
        time.sleep(0.5)  # well past the archiver's loss window (one fetch round)
    except BaseException:
        os.killpg(first.pid, signal.SIGKILL)
        raise
    address = (state / "bootstrap").read_text()
    follower = subprocess.Popen(GANGWAY + ["log", "--follow"], env=env, stdout=(tmp_path / "follow.txt").open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
    follow_to(tmp_path / "follow.txt", before[-1]["logoffset"])  # (it follows before the kill)
    kill_everything(first, state)
    groups = json.loads((state / "archive" / "groups.json").read_text())
    assert groups["gangway-submission"]["gangway.submissions"] == 32, "the submission service's input offset"
    assert not any("/long-" in w for w in finished(before)), "the long jobs finished before the kill"

    second = up(env)
    try:
        restored = export(env, tmp_path / "b.jsonl")
        assert_same_history(before, restored)
        after = wait_for(env, tmp_path / "c.jsonl", lambda evs: len(finished(evs)) == 32, timeout_s=180)
        assert len(finished(after)) == 32, "jobs lost after the restore"
        assert (state / "bootstrap").read_text() == address, "the broker listens where it did"
        followed = follow_to(tmp_path / "follow.txt", after[-1]["logoffset"])
    finally:
        follower.kill()
        second.send_signal(signal.SIGINT)
        assert second.wait(timeout=60) == 0
    # the follower left running went on across the restart, without a wall of connection errors
    assert followed[0] == list(range(after[-1]["logoffset"] + 1)), "log --follow lost or repeated events"
    assert len(followed[1]) < 20, followed[1]
    assert not (state / "bootstrap").exists()

    third = up(env)  # after a clean stop: the services resume from their snapshots
    try:
        again = export(env, tmp_path / "d.jsonl")
        assert_same_history(after, again)
    finally:
        third.send_signal(signal.SIGINT)
        assert third.wait(timeout=60) == 0
    logs = (state / "logs" / "admission.log").read_text()
    assert "resumed from snapshot" in logs

    ids = [e["id"] for e in again]
    assert len(ids) == len(set(ids)), "an event was written twice"
    replay = run(["replay", str(tmp_path / "d.jsonl")], env)
    assert replay.returncode == 0, replay.stdout + replay.stderr

    with Ledger(f"sqlite:///{state / 'accounting.db'}") as ledger:
        logs_in_ledger = ledger.logs()
        usage = ledger.workload_usage()
    assert len(logs_in_ledger) == 1, "the restored log is a new log to the ledger"
    assert sorted(u.workload for u in usage) == sorted(finished(again))
    gpu_ms = {u.workload: u.gpu_milli_ms for u in usage}
    for name, gpu_milli_ms in gpu_ms.items():  # each counted once: runtime × 1 GPU, no more
        runtime_s = LONG_S if "/long-" in name else SHORT_S
        assert gpu_milli_ms == 1000 * runtime_s * 1000, name
    assert codec.SPECVERSION == again[0]["specversion"]


@pytest.mark.both_brokers
def test_faults_on_a_small_kueue_baseline_lose_nothing_and_duplicate_nothing(broker_kind, capsys):
    """`gangway bench faults`, small (60 workloads over 6 s), on both brokers: every service (and
    the archiver) killed with kill -9 at once during the load; on Apache Kafka also Kafka itself
    killed and restarted while the producer streams the jobs; then the broker restarted (embedded:
    the whole stack, kill -9; Apache Kafka: its JVM, kill -9). The long run, which kills each
    service in turn, is in README "Durability"."""
    from gangway.benchmarks import faults
    reference = Path(__file__).parents[1] / "data" / "reference"
    if broker_kind == "apache-kafka":
        kind, injected = faults.ApacheKafkaFaults().kind(), (faults.ALL_AT_ONCE, faults.MID_PRODUCE, faults.BROKER)
        expected = ["restart Apache Kafka (kill -9), while jobs are being produced", "kill -9 every service at once",
                    "restart Apache Kafka (kill -9), after every job was sent"]
    else:
        kind, injected = faults.EMBEDDED, (faults.ALL_AT_ONCE, faults.BROKER)
        expected = ["kill -9 every service and the archiver at once", "restart the embedded broker (whole stack, kill -9)"]
    result = faults.bench_faults(shrink=0.004, span_s=6, data_dir=str(reference), faults=injected, kind=kind)
    print(faults.report(result))
    assert [f["fault"] for f in result["faults"]] == expected
    assert result["sent"] == result["workloads"] == 60
    assert result["jobs_lost"] == 0, result["lost_examples"]
    assert result["decisions_duplicated"] == 0, result["duplicated_by_kind"]
    assert result["replay_mismatches"] == 0
    assert result["rejections"] == 0 and result["ledger_logs"] == 1
    if broker_kind == "apache-kafka":  # the producer went on after the broker came back
        assert result["faults"][0]["submissions_at_kill"] < result["submission_records"]
    else:
        assert result["faults"][-1]["restored_records"] > 0
    assert result["ok"]
