"""Integration fixtures: a REAL broker and the six REAL services as OS processes.

The broker is the embedded one, and for tests marked ``both_brokers`` also Apache Kafka (the
``broker_kind`` fixture of tests/conftest.py; the stack's broker is then an ``ApacheKafka`` named
to the stack with GANGWAY_KAFKA, its producers idempotent). One stack per broker kind is shared by
the session (the ``gw`` fixture, a Harness; ``bootstrap`` is its address): it is started with the demo's 8 × 8-GPU cluster at ``TIME_SCALE`` cluster seconds per
wall second, the demo contract is published, and the fixture yields once the binder's 8 nodes are
on the log. Tests share it with unique job names and wait for their own jobs to finish, so they do
not interfere.

Every wait has a deadline and fails with the log lines that matter (``Harness.wait_until``);
teardown asserts that no process of the stack survives it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from gangway import stack as stack_mod
from gangway.adapters import apache_kafka, kafka
from gangway.contract.kueue import load_contract
from gangway.demo import demo_file
from gangway.events import codec, topics
from gangway.events import catalogue as ev
from gangway.events.fold import apply
from gangway.events.state import State
from gangway.read.reports import log_line

#: Cluster seconds per wall second: a 60 s job runs for 0.1 s of wall time.
TIME_SCALE = 600.0
NODES = 8
CLUSTER_FILE = demo_file("cluster.yaml")
CONTRACT_FILE = demo_file("contract.yaml")
STARTUP_TIMEOUT_S = 60.0
VENV_BIN = Path(sys.executable).parent
#: librdkafka settings shared by the outside client's producer and consumers.
_RDKAFKA_QUIET = {"log.connection.close": False, "log_level": 3}


def uid() -> str:
    """A short random suffix for job names (DNS-1123 safe)."""
    return secrets.token_hex(3)


def make_job(job_id: str, namespace: str = "research", gpus: int = 1, count: int = 1,
             runtime_s: float = 60.0, **extra) -> dict:
    """A JobSubmitted as the plain JSON object a producer writes."""
    doc = {
        "job_id": job_id,
        "namespace": namespace,
        "queue": "default",
        "pod_sets": [{"name": "main", "count": count,
                      "resources": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": gpus}}],
        "runtime_seconds": runtime_s,
    }
    doc.update(extra)
    return doc


@dataclass
class Record:
    """One Kafka record as the outside client read it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


class Harness:
    """The running stack and what tests do with it: produce, read the log, wait."""

    def __init__(self, running: stack_mod.Stack, state_dir: Path, kind: str = "embedded"):
        self.stack = running
        self.bootstrap = running.bootstrap
        self.kind = kind
        self.state_dir = state_dir
        self.envs: list[ev.Envelope] = []
        self.state = State()
        #: Every service pid this harness has seen (restarts included), for the orphan check.
        self.pids_seen: set[int] = set()
        self._producer: Producer | None = None
        self._rejections: Consumer | None = None
        self.rejected: list[tuple[Record, ev.Envelope]] = []
        self._note_children()

    uid = staticmethod(uid)
    job = staticmethod(make_job)

    @staticmethod
    def pid_alive(pid: int) -> bool:
        return pid_alive(pid)

    def service_process(self, name: str, state_dir: Path, env: dict[str, str]) -> "ServiceProcess":
        """One more ``gangway service NAME`` process on this stack's broker (not supervised by it)."""
        return ServiceProcess(name, self.bootstrap, state_dir, env)

    # --- the log ---------------------------------------------------------------------------

    def log(self) -> list[ev.Envelope]:
        """The whole log so far, read with gangway's own reader (incrementally), and folded."""
        start = self.envs[-1].offset + 1 if self.envs else 0

        async def read() -> list[ev.Envelope]:
            return [env async for env in kafka.read_log(self.bootstrap, start=start, idle_ms=100)]

        for env in asyncio.run(read()):
            assert env.offset == (self.envs[-1].offset + 1 if self.envs else 0), f"log offset gap before {env.offset}"
            self.envs.append(env)
            apply(self.state, env)
        return self.envs

    def about(self, workloads: Iterable[str]) -> list[ev.Envelope]:
        wanted = set(workloads)
        return [env for env in self.envs if env.subject() in wanted]

    def lines(self, envs: Iterable[ev.Envelope]) -> str:
        t0 = self.envs[0].time_ms if self.envs else 0
        return "\n".join(log_line(env, t0) for env in envs)

    # --- waiting ---------------------------------------------------------------------------

    def wait_until(self, what: str, done: Callable[[State, list[ev.Envelope]], object], timeout_s: float,
                   about: Iterable[str] = (), tick: Callable[[], None] | None = None, poll_s: float = 0.1):
        """Poll the log until ``done(state, envs)`` is truthy (returned); fail at the deadline."""
        about = list(about)
        deadline = time.monotonic() + timeout_s
        while True:
            if tick is not None:
                tick()
            else:
                self.assert_services_alive()
            self._note_children()
            self.log()
            result = done(self.state, self.envs)
            if result:
                return result
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout_s} s waiting for {what}\n{self.diagnosis(about)}")
            time.sleep(poll_s)  # polling interval of a deadline-bounded wait

    def wait_finished(self, workloads: Iterable[str], timeout_s: float = 30.0, tick=None) -> State:
        names = sorted(workloads)

        def finished(state: State, _envs) -> bool:
            return all(name in state.workloads and state.workloads[name].phase == "finished" for name in names)

        self.wait_until(f"{', '.join(names)} to finish", finished, timeout_s, about=names, tick=tick)
        return self.state

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Until no workload is pending or holds quota (earlier tests' jobs are done)."""
        self.wait_until("the cluster to be idle", lambda s, _e: not s.pending and not s.active, timeout_s)

    def diagnosis(self, about: list[str] = ()) -> str:
        envs = self.about(about) if about else self.envs[-40:]
        parts = [f"--- log lines{' about ' + ', '.join(about) if about else ' (last 40)'} ---", self.lines(envs)]
        pending = ", ".join(f"{n} ({self.state.workloads[n].superseded or 'waiting'})" for n in self.state.pending)
        parts.append(f"--- pending: {pending or 'none'}; active: {', '.join(self.state.active) or 'none'}")
        for name in stack_mod.SERVICES:
            proc = self.stack.children.get(name)
            how = "not started" if proc is None else (
                f"pid {proc.pid}, exited {proc.returncode}" if proc.poll() is not None
                else f"pid {proc.pid}, running, {cpu_seconds(proc.pid):.1f} s CPU")
            parts.append(f"--- {name} ({how}); {name}.log (tail) ---\n{self.service_log(name, 8)}")
        return "\n".join(parts)

    def service_log(self, name: str, lines: int = 20) -> str:
        path = self.state_dir / "logs" / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # --- the services as processes ---------------------------------------------------------

    def _note_children(self) -> None:
        self.pids_seen.update(proc.pid for proc in self.stack.children.values())

    def assert_services_alive(self, *down: str) -> None:
        """Fail at once, with its log, if a service other than those ``down`` on purpose has exited."""
        for name, proc in self.stack.children.items():
            code = proc.poll()
            if name in down:
                continue
            if code is not None:
                pytest.fail(f"service {name} (pid {proc.pid}) exited with {code}\n{self.service_log(name, 40)}")

    def supervise(self) -> None:
        self.stack.supervise_once()
        self._note_children()

    # --- the outside client (confluent-kafka / librdkafka) -----------------------------------

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            # Idempotent on Apache Kafka; the embedded broker refuses idempotent producers.
            self._producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                                       "enable.idempotence": self.kind != "embedded", "message.max.bytes": 4_000_000,
                                       "linger.ms": 2, **kafka.settings().rdkafka_config(), **_RDKAFKA_QUIET})
        return self._producer

    def produce(self, records: Iterable[tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]],
                topic: str = topics.SUBMISSIONS) -> list[int]:
        """Produce (key, value, headers) records in order; return their offsets once acknowledged."""
        results: list = []

        def delivered(err, msg) -> None:
            results.append((err, msg.offset() if err is None else None))

        count = 0
        for key, value, headers in records:
            self.producer.produce(topic, value=value, key=key, headers=headers, partition=0, on_delivery=delivered)
            count += 1
        left = self.producer.flush(15)
        assert left == 0, f"{left} record(s) not delivered to {topic} within 15 s"
        errors = [err for err, _ in results if err is not None]
        assert not errors and len(results) == count, f"delivery failed: {errors}"
        return [offset for _, offset in results]

    def produce_jobs(self, docs: Iterable[dict]) -> list[int]:
        """Jobs as plain JSON (the simplest producer), keyed by job id."""
        return self.produce((d["job_id"].encode(), msgspec.json.encode(d), None) for d in docs)

    def rejections(self) -> list[tuple[Record, ev.Envelope]]:
        """Every JobRejected on ``gangway.rejections`` so far, read with confluent-kafka."""
        if self._rejections is None:
            self._rejections = Consumer({
                "bootstrap.servers": self.bootstrap, "group.id": f"gangway-it-rejections-{uid()}",
                "enable.auto.commit": False, "max.partition.fetch.bytes": 16_000_000,
                "fetch.max.bytes": 32_000_000, "receive.message.max.bytes": 40_000_000,
                **kafka.settings().rdkafka_config(), **_RDKAFKA_QUIET,
            })
            self._rejections.assign([TopicPartition(topics.REJECTIONS, 0, OFFSET_BEGINNING)])
        while True:
            msgs = self._rejections.consume(num_messages=1000, timeout=0.2)
            if not msgs:
                return self.rejected
            for msg in msgs:
                assert msg.error() is None, f"reading {topics.REJECTIONS}: {msg.error()}"
                rec = Record(msg.offset(), msg.key(), msg.value(), list(msg.headers() or []))
                self.rejected.append((rec, codec.from_record(rec.value, rec.headers, rec.offset)))

    def wait_rejections(self, keys: Iterable[bytes], timeout_s: float = 20.0) -> dict[bytes, list[ev.JobRejected]]:
        """Until each original key has a JobRejected; returns them all, by original key."""
        keys = list(keys)
        deadline = time.monotonic() + timeout_s
        while True:
            self.assert_services_alive()
            by_key: dict[bytes, list[ev.JobRejected]] = {}
            for _rec, env in self.rejections():
                by_key.setdefault(env.data.original_key, []).append(env.data)
            missing = [k for k in keys if k not in by_key]
            if not missing:
                return by_key
            if time.monotonic() > deadline:
                so_far = [(env.data.original_key, env.data.reason) for _rec, env in self.rejected]
                pytest.fail(f"timed out after {timeout_s} s waiting for rejections of {missing}; "
                            f"rejected so far: {so_far}\n{self.diagnosis()}")
            time.sleep(0.1)  # polling interval of a deadline-bounded wait

    # --- the gangway CLI as a subprocess -----------------------------------------------------

    def cli(self, *args: str, timeout_s: float = 60.0, state_dir: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        env = dict(os.environ, GANGWAY_KAFKA=self.bootstrap, COLUMNS="1000", NO_COLOR="1",
                   GANGWAY_STATE_DIR=str(state_dir or self.state_dir / "cli"), **broker_env(self.kind), **(env or {}))
        return subprocess.run([str(VENV_BIN / "gangway"), *args], env=env, capture_output=True, text=True,
                              timeout=timeout_s, stdin=subprocess.DEVNULL)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
        if self._rejections is not None:
            self._rejections.close()
            self._rejections = None


def processes_with_env(name: str, value: str) -> list[tuple[int, str]]:
    """Live processes (not zombies) whose environment holds ``name=value``: (pid, command line)."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((int(entry.name), cmd))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (a service spinning shows up in a failure message)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not reaped, counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "\nState:\tZ" not in status


def broker_env(kind: str) -> dict[str, str]:
    """What a gangway process is told about the broker of this kind (KafkaSettings)."""
    if kind == "embedded":
        return {"GANGWAY_KAFKA_IDEMPOTENCE": "false", "GANGWAY_KAFKA_SESSION_TIMEOUT_MS": "2000"}
    # The test broker allows 1 s sessions (group.min.session.timeout.ms): standbys take over fast.
    return {"GANGWAY_KAFKA_IDEMPOTENCE": "true", "GANGWAY_KAFKA_SESSION_TIMEOUT_MS": "2000"}


@contextmanager
def running_stack(state_dir: Path, cluster_file: str, contract_file: str, nodes: int, time_scale: float = TIME_SCALE,
                  kind: str = "embedded", broker=None, env: dict[str, str] | None = None):
    """A whole stack (broker and six services as processes) with a contract applied; yields a Harness
    once the binder's nodes and the contract are on the log; afterwards, checks nothing survived it.

    ``kind`` "apache-kafka": an Apache Kafka broker (``broker``, which the caller stops, or one
    started here) is pointed at with GANGWAY_KAFKA, as a production deployment is; ``env`` adds
    settings (credentials) for the stack and this process."""
    outside = None
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GANGWAY_STATE_DIR", str(state_dir))
        for name in ("GANGWAY_KAFKA", "GANGWAY_DB", "GANGWAY_CLOCK"):
            mp.delenv(name, raising=False)
        for name, value in {**broker_env(kind), **(env or {})}.items():
            mp.setenv(name, value)
        if kind == "apache-kafka":
            outside = broker or apache_kafka.ApacheKafka(log_path=str(state_dir / "kafka.log")).start()
            mp.setenv("GANGWAY_KAFKA", outside.bootstrap)
        running = stack_mod.Stack(cluster_file=cluster_file, time_scale=time_scale)
        harness = None
        try:
            running.start()
            harness = Harness(running, state_dir, kind)
            contract = load_contract(Path(contract_file).read_text(), contract_file)
            asyncio.run(stack_mod.publish_config(running.bootstrap, contract, str(contract_file),
                                                 running.clock.now_ms()))
            harness.wait_until(f"the binder's {nodes} nodes and the contract on the log",
                               lambda s, _e: len(s.nodes) == nodes and s.contract is not None, STARTUP_TIMEOUT_S)
            # The orphan check below finds the stack's processes by their environment: it must see them now.
            seen = {pid for pid, _cmd in processes_with_env("GANGWAY_STATE_DIR", str(state_dir))}
            ours = running.broker or (outside if broker is None else None)
            assert seen >= {proc.pid for proc in running.children.values()} | ({ours.proc.pid} if ours else set()), seen
            yield harness
        finally:
            ours = running.broker or outside
            broker_pid = ours.proc.pid if ours and ours.proc else None
            pids = set(harness.pids_seen) if harness else set()
            pids.update(proc.pid for proc in running.children.values())
            if harness is not None:
                harness.close()
            running.stop()
            if outside is not None:
                if broker is None:
                    outside.stop()
                (state_dir / "bootstrap").unlink(missing_ok=True)  # the stack keeps an outside broker's address
    if broker is not None:
        broker_pid = None  # the caller's broker outlives this stack
    alive = [pid for pid in sorted(pids | ({broker_pid} if broker_pid else set())) if pid_alive(pid)]
    assert not alive, f"processes of the stack outlived it: {alive}"
    # (multiprocessing's resource tracker, started by a benchmark test in this process while the
    # session's environment names this state dir, is this process's child, not the stack's)
    orphans = [(pid, cmd) for pid, cmd in processes_with_env("GANGWAY_STATE_DIR", str(state_dir))
               if "multiprocessing.resource_tracker" not in cmd]
    assert not orphans, f"orphan processes of the stack: {orphans}"
    assert not (state_dir / "bootstrap").exists(), "stop() left the bootstrap file behind"


@pytest.fixture(scope="session")
def gw(tmp_path_factory, broker_kind):
    """The stack on a broker of this kind, running the demo cluster and contract; yields a Harness."""
    with running_stack(tmp_path_factory.mktemp(f"gangway-state-{broker_kind}"), CLUSTER_FILE, CONTRACT_FILE, NODES,
                       kind=broker_kind) as harness:
        yield harness


@pytest.fixture(scope="session")
def bootstrap(gw) -> str:
    """The bootstrap address of the running stack's embedded broker."""
    return gw.bootstrap


class ServiceProcess:
    """One extra gangway service as an OS process (``gangway service NAME``), outside the stack."""

    def __init__(self, name: str, bootstrap: str, state_dir: Path, env: dict[str, str]):
        self.name, self.bootstrap, self.state_dir, self.extra = name, bootstrap, state_dir, env
        self.proc: subprocess.Popen | None = None
        self.log_path = state_dir / f"{name}.log"

    def start(self) -> "ServiceProcess":
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, GANGWAY_KAFKA=self.bootstrap, GANGWAY_STATE_DIR=str(self.state_dir),
                   PYTHONUNBUFFERED="1", **self.extra)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "gangway", "service", self.name], env=env,
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
