"""Running gangway: one service in this process, or the whole stack as supervised processes."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


from gangway.adapters import archive, kafka, processes
from gangway.adapters.broker import BrokerError, EmbeddedBroker, configured_bootstrap, port_free
from gangway.events import topics
from gangway.events.catalogue import ConfigApplied, Envelope, JobMoved, JobSubmitted, JobWithdrawn
from gangway.contract import contract_digest
from gangway.events.contract import Contract
from gangway.events.fold import apply
from gangway.events.state import State
from gangway.services.runtime import shell
from gangway.services.runtime.clock import ClusterClock
from gangway.services.submission.config import SOURCE as CONFIG_SOURCE

SERVICES = ("submission", "admission", "placement", "preemption", "accounting", "binder")
RESTARTS_MAX = 5
#: How long the services get to stop on SIGTERM (they save a snapshot) before they are killed.
SERVICE_STOP_GRACE_S = 10.0
#: How long `gangway up` waits for an outside Kafka (GANGWAY_KAFKA) to answer; the embedded one gets longer to start.
OUTSIDE_KAFKA_WAIT_S = 5.0
EMBEDDED_KAFKA_WAIT_S = 20.0
#: The archiver of the embedded broker's topics (a child like the services; see adapters/archive.py).
ARCHIVER = "archiver"
#: Consumer groups whose committed offsets the archive keeps (the submission service's inputs).
ARCHIVED_GROUPS = ("gangway-submission",)  # SubmissionService.group_id()
#: A deadline, not a wait: the archiver is up within a second or two on an idle machine.
ARCHIVER_START_TIMEOUT_S = 120.0
log = logging.getLogger(__name__)


class NoBrokerError(RuntimeError):
    """No Kafka to talk to: neither GANGWAY_KAFKA nor a running `gangway up`."""


class StackRunning(RuntimeError):
    """A `gangway up` already runs from this state directory (two would share its archive)."""


class ServiceFailed(RuntimeError):
    """A service of the stack kept dying (more often than RESTARTS_MAX) or was not ready in time: the
    message names it and its log file."""


def state_dir() -> Path:
    return Path(os.environ.get("GANGWAY_STATE_DIR", ".gangway"))


def _recorded_stack() -> tuple[str, bool] | None:
    """The address `gangway up` recorded in this state directory, and whether it is the embedded
    broker (which refuses idempotent producers): the file says "<address>" or "<address> embedded"."""
    path = state_dir() / "bootstrap"
    if not path.exists():
        return None
    address, *kind = path.read_text().split() or [""]
    return address, kind == ["embedded"]


def bootstrap_of_running_stack() -> str:
    """GANGWAY_KAFKA, else the embedded broker of the `gangway up` using this state directory."""
    configured = configured_bootstrap()
    recorded = _recorded_stack()
    if recorded is not None and recorded[1] and configured in (None, recorded[0]):
        kafka.mark_embedded(recorded[0])  # also when GANGWAY_KAFKA names it, as `gangway up` printed
    if configured:
        return configured
    if recorded is not None:
        return recorded[0]
    raise NoBrokerError("no Kafka: set GANGWAY_KAFKA or start the stack with `gangway up`")


def what_to_do(unreachable: kafka.BrokerUnreachable) -> str:
    """The remedy for a Kafka that does not answer, from where its address came."""
    if configured_bootstrap() == unreachable.bootstrap:
        return "check GANGWAY_KAFKA (is that Kafka running?), or unset it to use the stack `gangway up` starts"
    path = state_dir() / "bootstrap"
    recorded = _recorded_stack()
    if recorded is not None and recorded[0] == unreachable.bootstrap:
        return (f"{path} is left from a `gangway up` that is no longer running: start the stack again "
                f"with `gangway up` (or delete {path})")
    return "is the broker running?"


def build_service(name: str, bootstrap: str, cluster_file: str | None, default_runtime_ms: int | None,
                  kubernetes: dict | None = None, pending=None):
    """The service object for a name (imports only what that service needs). ``kubernetes``
    ({"kubeconfig": …, "context": …}, values may be None) makes the binder act on a real cluster;
    ``pending`` (state → why each pending workload waits) feeds what it tells users."""
    sdir = state_dir()
    if name == "binder" and kubernetes is not None:
        from gangway.adapters.kubernetes import Kube
        from gangway.services.binder.kubernetes_service import KubernetesBinderService
        from gangway.services.submission.kubernetes import check_object, job_from_object
        from gangway.services.binder.policy import RequeueBackoff
        default = RequeueBackoff()
        given = [kubernetes.get(key) for key in ("bind-backoff", "bind-backoff-max", "bind-backoff-limit")]
        # (none given: the contract's waitForPodsReady, else gangway's defaults, decide at each step)
        backoff = None if all(value is None for value in given) else RequeueBackoff(
            float(given[0] if given[0] is not None else default.base_s),
            float(given[1] if given[1] is not None else default.max_s),
            int(given[2] if given[2] is not None else default.limit))
        webhook = None
        if kubernetes.get("webhook-port"):
            from gangway.services.binder import webhook as wh
            webhook = wh.Options(int(kubernetes["webhook-port"]), kubernetes.get("webhook-service") or wh.SERVICE,
                                 kubernetes.get("webhook-configuration") or wh.CONFIGURATION,
                                 kubernetes.get("webhook-cert-dir"), kubernetes.get("webhook-host"))
        ready = kubernetes.get("pods-ready-timeout")
        return KubernetesBinderService(bootstrap, lambda: Kube.connect(kubernetes.get("kubeconfig"), kubernetes.get("context")),
                                       job_from_object, sdir, webhook=webhook, check=check_object, pending=pending,
                                       backoff=backoff,
                                       pods_ready_timeout_s=None if ready is None else float(ready))
    if name == "submission":
        from gangway.services.submission.service import SubmissionService
        return SubmissionService(bootstrap, sdir)
    if name == "accounting":
        from gangway.services.accounting.ledger import default_url
        from gangway.services.accounting.service import AccountingService
        return AccountingService(bootstrap, default_url(str(sdir)), sdir)
    if name == "binder":
        from gangway.services.binder.cluster import read_cluster_file
        from gangway.services.binder.policy import DEFAULT_RUNTIME_MS
        from gangway.services.binder.service import SimulatedBinder
        nodes = read_cluster_file(cluster_file) if cluster_file else None
        return SimulatedBinder(bootstrap, nodes, sdir, default_runtime_ms=default_runtime_ms or DEFAULT_RUNTIME_MS)
    if name in ("admission", "placement", "preemption"):
        from gangway.services.runtime.shell import DecidingService
        return DecidingService(name, bootstrap, sdir)
    raise ValueError(f"unknown service {name!r}; one of {', '.join(SERVICES)}")


def run_service(service) -> None:
    """Run a service until SIGINT or SIGTERM, as the active instance or a standby of it."""
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await service.run(stop, standby=True)
    service.own_process = True
    if service.nice:
        os.nice(service.nice)
    gc.set_threshold(*shell.GC_THRESHOLDS)
    asyncio.run(main())


async def current_digest(bootstrap: str) -> str:
    return (await _contract_in_force(bootstrap))[0]


async def _contract_in_force(bootstrap: str, start: int = 0, idle_ms: int = 200) -> tuple[str, int]:
    """The digest of the newest ConfigApplied on the log from ``start`` ("" if none), and the next offset."""
    digest = ""
    async for env in kafka.read_log(bootstrap, start=start, idle_ms=idle_ms):
        start = env.offset + 1
        if isinstance(env.data, ConfigApplied):
            digest = env.data.digest
    return digest, start


class ContractNotRelayed(TimeoutError):
    """The contract is on gangway.config, but no submission service copied it onto the log in time."""


#: How long `gangway config apply` waits for the submission service to put the contract on the log.
CONFIG_RELAY_TIMEOUT_S = 120.0


async def publish_config(bootstrap: str, contract: Contract, source: str, now_ms: int,
                         timeout_s: float = CONFIG_RELAY_TIMEOUT_S, state: State | None = None) -> bool:
    """Write the contract to gangway.config (only the admin principal may) unless it is already in
    force, and wait until the submission service has copied it onto the log. True if it was applied.
    ``state``: the log as the caller just folded it (the contract in force is read from it, not
    from the log again)."""
    digest = contract_digest(contract)
    in_force, end = ((state.contract_digest or "", state.offset + 1) if state is not None
                     else await _contract_in_force(bootstrap))
    if in_force == digest:
        return False
    env = Envelope(id=f"config/{digest[:16]}/{now_ms}", source=CONFIG_SOURCE, time_ms=now_ms,
                   data=ConfigApplied(contract=contract, digest=digest, source=source))
    prod = kafka.producer(bootstrap)
    await prod.start()
    try:
        config_end = await kafka.append(prod, [env], topic=topics.CONFIG)
    finally:
        await prod.stop()
    await archive.wait_archived(bootstrap, {topics.CONFIG: config_end})  # the embedded broker's archive
    deadline = time.monotonic() + timeout_s
    while in_force != digest:
        if time.monotonic() > deadline:
            raise ContractNotRelayed(
                f"the contract is on {topics.CONFIG}, but no submission service put it on the log within "
                f"{timeout_s:.0f} s: is `gangway up` running against {bootstrap}? It takes effect when one does")
        found, end = await _contract_in_force(bootstrap, end, idle_ms=100)
        in_force = found or in_force
    return True


async def read_state(bootstrap: str) -> tuple[State, list[Envelope]]:
    """The whole log, and the state it folds to."""
    state, envs = State(), []
    async for env in kafka.read_log(bootstrap):
        apply(state, env)
        envs.append(env)
    return state, envs


async def read_rejections(bootstrap: str) -> list[Envelope]:
    """Every JobRejected on gangway.rejections: the records refused at submission, kept whole."""
    return [env async for env in kafka.read_log(bootstrap, topic=topics.REJECTIONS)]


async def publish_jobs(bootstrap: str, jobs: list[JobSubmitted | JobWithdrawn | JobMoved], rate_per_s: float | None = None,
                       at_s: list[float] | None = None, source: str = "gangway/cli",
                       retry_s: float = 0.0) -> dict[str, int]:
    """Publish jobs (or their moves or withdrawals) as a producer does (binary-mode CloudEvents on gangway.submissions): all at
    once, ``rate_per_s`` a second, or each ``at_s[i]`` seconds after the call; a job whose send
    failed while the broker was away is sent again for up to ``retry_s`` (the submission service
    takes a job twice as once). Returns workload id → wall-clock ms when it was first sent, for
    every job the broker acknowledged — and, with the embedded broker, the archiver archived
    (``archive.wait_archived``: a job called sent survives a kill of the whole stack)."""
    from gangway.services.submission.manifests import to_cloudevent_record
    prod = kafka.producer(bootstrap)
    await prod.start()
    sends = kafka.RetryingSends(prod, topics.SUBMISSIONS, retry_s)
    sent: dict[str, int] = {}
    started = time.monotonic()
    try:
        for i, job in enumerate(jobs):
            due = at_s[i] if at_s is not None else (i / rate_per_s if rate_per_s else 0.0)
            if due:
                await asyncio.sleep(max(0.0, started + due - time.monotonic()))
            now = int(time.time() * 1000)
            key, value, headers = to_cloudevent_record(job, source, now)
            name = f"{job.namespace}/{job.job_id}"
            sent[name] = now
            await sends.send(name, key, value, headers)
        acknowledged = await sends.acknowledged()
    finally:
        await prod.stop()
    await archive.wait_archived(bootstrap, {topics.SUBMISSIONS: sends.end})  # the embedded broker's archive
    return {name: at for name, at in sent.items() if name in acknowledged}


def restore_archive(bootstrap: str, sdir: Path) -> archive.Restored:
    """Before any service starts: the archived topics back into the fresh embedded broker."""
    from gangway.services.submission.service import RestoredInputs
    root = archive.archive_dir(sdir)
    inputs = RestoredInputs()
    restored = asyncio.run(archive.restore(bootstrap, root, inputs.observe, inputs.safe_offsets))
    if restored.total:
        log.warning("restored %d archived records (%s) in %.1f s", restored.total,
                    ", ".join(f"{t} {n}" for t, n in restored.records.items() if n), restored.seconds)
    return restored


#: Held (flock) by the `gangway up` that runs from a state directory; it names that process.
LOCK_FILE = "up.lock"


#: The embedded broker's port, kept after the stack stops: started again, it listens there if it
#: can, so a console or ``log --follow`` left running finds the log again where it was.
BROKER_PORT_FILE = "broker-port"


#: How long a restarted stack waits for its broker's last port to be let go of.
PORT_AGAIN_WAIT_S = 3.0


def _port_again(path: Path) -> int:
    """The port the last embedded broker of this state directory listened on, once it is free (a
    broker just killed lets go of it in a moment), or 0: none recorded, or still taken after
    ``PORT_AGAIN_WAIT_S`` — any free port then."""
    try:
        port = int(path.read_text().strip())
    except (OSError, ValueError):
        return 0
    if not 0 < port < 65536:
        return 0
    deadline = time.monotonic() + PORT_AGAIN_WAIT_S
    while not port_free(port):
        if time.monotonic() > deadline:
            return 0
        time.sleep(0.1)
    return port


def _lock(path: Path) -> IO:
    """Hold ``path``'s lock for this process (released when the file closes, or the process ends, even
    killed); StackRunning when another process holds it. A second stack on one state directory would
    restore and archive the same history twice and corrupt it."""
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise StackRunning(f"a gangway stack is already running from {path.parent} (pid {holder}): stop it first "
                           "(Ctrl-C where `gangway up` runs), or start another with GANGWAY_STATE_DIR set to another "
                           "directory") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


#: How long `gangway down` waits for the stack to stop (its services snapshot their state first).
DOWN_TIMEOUT_S = 60.0


def stop_running_stack(timeout_s: float = DOWN_TIMEOUT_S) -> int | None:
    """Stop the `gangway up` that runs from this state directory as Ctrl-C would (SIGTERM to the
    process holding its lock), and wait until it let go of the lock; its pid, or None when nothing
    runs from here. Only the lock's holder is signalled: a pid left in the file by a stack that died
    is never killed (another process may have it now)."""
    path = state_dir() / LOCK_FILE
    if not path.exists():
        return None
    pid, deadline = None, time.monotonic() + timeout_s
    with open(path) as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return pid  # (None: nobody held it)
            except BlockingIOError:
                pass
            if pid is None:
                try:
                    pid = int(handle.read().strip())
                except ValueError:
                    raise StackRunning(f"the stack running from {path.parent} did not write its pid into {path}") from None
                with contextlib.suppress(ProcessLookupError):  # (it ended meanwhile: the lock is free next)
                    os.kill(pid, signal.SIGTERM)
            elif time.monotonic() > deadline:
                raise StackRunning(f"the stack running from {path.parent} (pid {pid}) did not stop within "
                                   f"{timeout_s:g} s of SIGTERM; its logs are in {path.parent / 'logs'}") from None
            time.sleep(0.2)


@dataclass
class Stack:
    """The embedded broker (unless GANGWAY_KAFKA) and the six services as child processes."""

    cluster_file: str | None = None
    #: {"kubeconfig": …, "context": …}: the binder acts on that cluster instead of a cluster file.
    kubernetes: dict | None = None
    time_scale: float = 1.0
    default_runtime_ms: int | None = None
    broker: EmbeddedBroker | None = None
    bootstrap: str = ""
    clock: ClusterClock = field(default_factory=ClusterClock.starting_now)
    children: dict[str, processes.Process] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    #: What was restored from the archive into the fresh embedded broker at start.
    restored: archive.Restored | None = None
    #: The state directory's lock, held while this stack runs (``_lock``).
    lock: IO | None = None
    #: Its state directory, as GANGWAY_STATE_DIR named it when the stack was made: what it starts,
    #: restarts, waits on and stops stays there, whatever the environment says later (another
    #: stack's, with two in one process).
    dir: Path = field(default_factory=state_dir)

    def start(self) -> str:
        shell.admission_cycle_s()  # a wrong setting stops here, not in a service's log
        sdir = self.dir
        (sdir / "logs").mkdir(parents=True, exist_ok=True)
        self.lock = _lock(sdir / LOCK_FILE)
        try:
            return self._start()
        except BaseException:
            self.stop()  # (what did start, and the lock)
            raise

    def _start(self) -> str:
        sdir = self.dir
        self.clock = ClusterClock.starting_now(self.time_scale)
        self.bootstrap = configured_bootstrap() or ""
        if not self.bootstrap:
            port, logs = _port_again(sdir / BROKER_PORT_FILE), str(sdir / "logs" / "broker.log")
            self.broker = EmbeddedBroker(port=port, log_path=logs)
            try:
                self.broker.start()
            except BrokerError:
                self.broker.stop()
                if not port:
                    raise
                self.broker = EmbeddedBroker(log_path=logs).start()  # (taken meanwhile: any free port)
            self.bootstrap = self.broker.bootstrap
            (sdir / BROKER_PORT_FILE).write_text(f"{self.broker.port}\n")
        wait_s = EMBEDDED_KAFKA_WAIT_S if self.broker is not None else OUTSIDE_KAFKA_WAIT_S
        asyncio.run(kafka.ensure_topics(self.bootstrap, timeout_s=wait_s))
        if self.broker is not None:
            (sdir / f"{ARCHIVER}.ready").unlink(missing_ok=True)
            self.restored = restore_archive(self.bootstrap, sdir)
            if self.restored.cluster_ms > self.clock.now_ms():  # a sped-up cluster goes on from where it was
                self.clock = ClusterClock(time.time(), self.restored.cluster_ms, self.time_scale)
            self._spawn(ARCHIVER)
            self._wait_for((ARCHIVER,), ARCHIVER_START_TIMEOUT_S)  # its progress group exists: producers can wait on it
        (sdir / "bootstrap").write_text(self.bootstrap + (" embedded" if self.broker else "") + "\n")
        for name in SERVICES:
            (sdir / f"{name}.ready").unlink(missing_ok=True)
            self._spawn(name)
        return self.bootstrap

    def _wait_for(self, names: tuple[str, ...], timeout_s: float) -> None:
        """Until each of ``names`` has written its ready file (supervising meanwhile)."""
        deadline = time.monotonic() + timeout_s
        while missing := [n for n in names if not (self.dir / f"{n}.ready").exists()]:
            if time.monotonic() > deadline:
                raise ServiceFailed(f"not ready after {timeout_s:g} s: {', '.join(missing)}; see "
                                  + ", ".join(str(self.dir / "logs" / f"{n}.log") for n in missing))
            self.supervise_once()
            time.sleep(0.05)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until every service has folded the whole log once."""
        self._wait_for(SERVICES, timeout_s)

    def _spawn(self, name: str) -> None:
        sdir = self.dir
        env = dict(os.environ, GANGWAY_KAFKA=self.bootstrap, GANGWAY_CLOCK=self.clock.to_env(),
                   GANGWAY_STATE_DIR=str(sdir), PYTHONUNBUFFERED="1")
        if self.broker is not None:  # the embedded broker: no idempotent producers, short sessions
            env.setdefault("GANGWAY_KAFKA_IDEMPOTENCE", "false")
            env.setdefault("GANGWAY_KAFKA_SESSION_TIMEOUT_MS", "2000")
        cmd = [sys.executable, "-m", "gangway", "service", name]
        if name == ARCHIVER:
            cmd = [sys.executable, "-m", "gangway.adapters.archive", self.bootstrap, str(archive.archive_dir(sdir)),
                   "--ready", str(sdir / f"{ARCHIVER}.ready"),
                   *(arg for group in ARCHIVED_GROUPS for arg in ("--group", group))]
        elif name == "binder" and self.kubernetes is not None:
            cmd += ["--kubernetes"] + [f"--{k}={v}" for k, v in sorted(self.kubernetes.items()) if v]
        elif name == "binder" and self.cluster_file:
            cmd += ["--cluster", self.cluster_file]
        if name == "binder" and self.default_runtime_ms:
            cmd += ["--default-runtime", str(self.default_runtime_ms / 1000)]
        self.children[name] = processes.spawn(cmd, log_path=sdir / "logs" / f"{name}.log", env=env)

    def supervise_once(self) -> None:
        """Restart a service that died (at most RESTARTS_MAX times each)."""
        for name, proc in list(self.children.items()):
            code = proc.poll()
            if code is None:
                continue
            count = self.restarts.get(name, 0)
            if count >= RESTARTS_MAX:
                raise ServiceFailed(f"service {name} keeps dying (exit {code}); see {self.dir / 'logs' / (name + '.log')}")
            self.restarts[name] = count + 1
            log.warning("service %s exited with %s; restarting", name, code)
            self._spawn(name)

    def stop(self) -> None:
        # The services first, then the archiver, which archives what they wrote last and exits.
        for group in ([p for n, p in self.children.items() if n != ARCHIVER], [self.children.get(ARCHIVER)]):
            processes.stop([p for p in group if p is not None], grace_s=SERVICE_STOP_GRACE_S)
        self.children.clear()
        if self.broker is not None:
            self.broker.stop()
        path = self.dir / "bootstrap"
        if path.exists() and self.broker is not None:
            path.unlink()
        if self.lock is not None:
            self.lock.close()  # (which releases it)
            self.lock = None

    def __enter__(self) -> "Stack":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
