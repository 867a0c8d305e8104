"""The README's main job and the commands around it, run as a user runs them (subprocesses)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

GANGWAY = [sys.executable, "-m", "gangway"]
pytestmark = pytest.mark.broker


def run(args: list[str], env: dict, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(GANGWAY + args, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def env(tmp_path) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("GANGWAY_KAFKA", "GANGWAY_DB", "GANGWAY_CLOCK")}
    return dict(clean, GANGWAY_STATE_DIR=str(tmp_path / "state"), COLUMNS="200")


def test_the_demo_runs_and_its_log_replays(env, tmp_path):
    out = tmp_path / "demo-log.jsonl"
    demo = run(["demo", "--time-scale", "480", "--out", str(out)], env)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "GPU-hours allocated per team" in demo.stdout
    for team in ("serving", "research", "batch"):
        assert team in demo.stdout
    # the two 40-GPU gangs: both ran, one after the other, never half placed
    assert "research/llm-pretrain placed" in demo.stdout and "batch/embeddings-rebuild placed" in demo.stdout
    assert "ordered out for serving/inference-canary" in demo.stdout
    # money: the night priced, the canary's preemption waste, batch's idle sweeps, the invoices
    assert "money per team (list prices, EUR)" in demo.stdout
    assert "the canary's preemption waste: research/llm-pretrain lost" in demo.stdout
    assert "idle GPUs: team batch" in demo.stdout and "flagged idle (SM active below 10 % for 5 min)" in demo.stdout
    assert "by accounting; derived again from the log: identical" in demo.stdout, demo.stdout
    assert "data:image/png;base64," in (tmp_path / "demo-log-showback.html").read_text()
    replay = run(["replay", str(out)], env)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "decisions reproduced" in replay.stdout
    assert "re-derived from the log" in replay.stdout


def test_the_broker_command_creates_the_topics_and_stops_on_sigint(env):
    proc = subprocess.Popen(GANGWAY + ["broker"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        deadline = time.monotonic() + 30
        while "broker ready at" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
        assert "broker ready at" in line, line
        bootstrap = line.split("broker ready at ")[1].split()[0]
        listed = subprocess.run(
            [sys.executable, "-c", (
                "import asyncio\nfrom aiokafka.admin import AIOKafkaAdminClient\n"
                "async def main():\n    a = AIOKafkaAdminClient(bootstrap_servers=%r)\n    await a.start()\n"
                "    print(sorted(await a.list_topics()))\n    await a.close()\nasyncio.run(main())" % bootstrap
            )], capture_output=True, text=True, timeout=60,
        )
        for topic in ("gangway.log", "gangway.submissions", "gangway.rejections", "gangway.telemetry", "gangway.invoices"):
            assert topic in listed.stdout, listed.stdout + listed.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0


def test_commands_that_need_a_stack_say_so_without_one(env):
    status = run(["status"], env, timeout=30)
    assert status.returncode != 0
    assert "GANGWAY_KAFKA" in status.stderr + status.stdout


def test_config_validate_reports_problems_and_exit_codes(env, tmp_path):
    good = run(["config", "validate", str(Path("gangway/demo/contract.yaml"))], env, timeout=30)
    assert good.returncode == 0 and "valid" in good.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: q, namespace: t}\n"
                   "spec: {clusterQueue: missing}\n")
    result = run(["config", "validate", str(bad)], env, timeout=30)
    assert result.returncode == 1
    assert "missing" in result.stdout


def test_up_reports_ready_only_when_every_service_folded_the_log_and_stops_cleanly(env):
    state = Path(env["GANGWAY_STATE_DIR"])
    proc = subprocess.Popen(GANGWAY + ["up", "--config", "gangway/demo/contract.yaml",
                                       "--cluster", "gangway/demo/cluster.yaml"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert "gangway is up: GANGWAY_KAFKA=" in line, line + proc.stdout.read() if proc.poll() is not None else line
        services = ("submission", "admission", "placement", "preemption", "accounting", "binder")
        assert all((state / f"{name}.ready").exists() for name in services)
        deadline = time.monotonic() + 20
        status = run(["status"], env, timeout=60)
        while "gpu-node-7" not in status.stdout and time.monotonic() < deadline:  # the binder's nodes
            status = run(["status"], env, timeout=60)
        assert status.returncode == 0 and "gpu-node-7" in status.stdout, status.stdout + status.stderr
        # A shell that exports what `gangway up` printed submits to the embedded broker: it takes
        # GANGWAY_KAFKA_IDEMPOTENCE=false from the line, and without it the stack's record tells.
        printed = dict(word.split("=", 1) for word in line.split() if word.startswith("GANGWAY_KAFKA"))
        assert printed == {"GANGWAY_KAFKA": printed["GANGWAY_KAFKA"], "GANGWAY_KAFKA_IDEMPOTENCE": "false"}
        only_address = run(["submit", "gangway/demo/jobs-morning.yaml"], dict(env, GANGWAY_KAFKA=printed["GANGWAY_KAFKA"]))
        assert only_address.returncode == 0, only_address.stdout + only_address.stderr
        down = run(["down"], env, timeout=90)  # (what Ctrl-C where it runs does, from another shell)
        assert down.returncode == 0 and down.stdout.strip() == (
            f"stopped the gangway stack running from {state} (pid {proc.pid})"), down.stdout + down.stderr
        assert proc.wait(timeout=10) == 0 and "stopping…" in proc.stdout.read()  # (its lock goes just before it exits)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    assert not list(state.glob("*.ready")), "ready files outlive the services"
    assert not (state / "bootstrap").exists()
    again = run(["down"], env)
    assert (again.returncode, again.stdout.strip()) == (0, f"no gangway stack runs from {state}: nothing to stop")


def test_a_producer_the_broker_refuses_as_idempotent_says_what_to_set(monkeypatch, capsys, tmp_path):
    """GANGWAY_KAFKA names a broker that refuses InitProducerId (the embedded one does, though not
    every time) and nothing says it is the embedded one: one line naming the setting, not a
    traceback. A producer that is not idempotent passes such an error on as it is."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import UnknownError

    from gangway import cli
    from gangway.adapters import kafka

    async def refused(self):
        await self.client.close()  # what aiokafka has opened by the time InitProducerId is refused
        raise UnknownError()
    monkeypatch.setattr(AIOKafkaProducer, "start", refused)
    monkeypatch.setattr(kafka, "_EMBEDDED", set())  # whatever other tests marked embedded in this process
    monkeypatch.setenv("GANGWAY_KAFKA", "127.0.0.1:1")
    monkeypatch.setenv("GANGWAY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("GANGWAY_KAFKA_IDEMPOTENCE", raising=False)
    assert cli.main(["submit", "gangway/demo/jobs-morning.yaml"]) == 1
    err = capsys.readouterr().err
    assert "refused an idempotent producer" in err and "GANGWAY_KAFKA_IDEMPOTENCE=false" in err, err
    monkeypatch.setenv("GANGWAY_KAFKA_IDEMPOTENCE", "false")
    with pytest.raises(UnknownError):
        cli.main(["submit", "gangway/demo/jobs-morning.yaml"])


def test_the_embedded_broker_a_stack_recorded_is_known_as_such_also_when_gangway_kafka_names_it(monkeypatch, tmp_path):
    from gangway import stack
    from gangway.adapters import kafka
    monkeypatch.setattr(kafka, "_EMBEDDED", set())  # what this test marks stays in it
    state = tmp_path / "state"
    state.mkdir()
    (state / "bootstrap").write_text("127.0.0.1:40001 embedded\n")
    monkeypatch.setenv("GANGWAY_STATE_DIR", str(state))
    monkeypatch.delenv("GANGWAY_KAFKA_IDEMPOTENCE", raising=False)
    for named in ("127.0.0.1:40002", "127.0.0.1:40001"):  # another broker, then the recorded one
        monkeypatch.setenv("GANGWAY_KAFKA", named)
        assert stack.bootstrap_of_running_stack() == named
    assert kafka.settings().idempotent("127.0.0.1:40002") and not kafka.settings().idempotent("127.0.0.1:40001")


def test_log_follow_prints_events_as_they_arrive(env):
    import asyncio

    from gangway.adapters import kafka
    from gangway.adapters.broker import EmbeddedBroker
    from gangway.events.catalogue import Envelope, NodeRemoved

    async def append(bootstrap: str, names: list[str]) -> None:
        prod = kafka.producer(bootstrap)
        await prod.start()
        try:
            await kafka.append(prod, [Envelope(id=n, source="gangway/binder", time_ms=1, data=NodeRemoved(node=n)) for n in names])
        finally:
            await prod.stop()

    with EmbeddedBroker() as broker:
        asyncio.run(kafka.ensure_topics(broker.bootstrap))
        asyncio.run(append(broker.bootstrap, ["a", "b"]))
        proc = subprocess.Popen(GANGWAY + ["log", "--follow"], env=dict(env, GANGWAY_KAFKA=broker.bootstrap),
                                stdout=subprocess.PIPE, text=True)
        try:
            lines = [proc.stdout.readline(), proc.stdout.readline()]
            asyncio.run(append(broker.bootstrap, ["c"]))
            lines.append(proc.stdout.readline())
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert [line.split()[-2] for line in lines] == ["a", "b", "c"], lines
