"""Apache Kafka (KRaft, one node) from Maven Central jars, on loopback, with its data in a temporary
directory: the broker of the Apache Kafka test tier and of ``gangway broker --kafka apache``.

The jars come from ``infra/kafka/pom.xml`` (the one place the Kafka version is named) and are copied
once with ``mvn dependency:copy-dependencies`` into ``.cache/kafka-<version>/``. Needs ``java``
(17+) always and ``mvn`` the first time; ``missing_tools`` says which is absent.

Optionally the broker authenticates (SASL/SCRAM-SHA-512 on a SASL_PLAINTEXT listener, and a
SASL_SSL one with a PEM certificate) and authorises with the StandardAuthorizer: users are created
at storage-format time (``--add-scram``), nothing is allowed without an ACL, and the broker's own
principal is the only super user besides the loopback-only controller listener's ANONYMOUS.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from gangway.adapters.broker import BrokerError, _wait_for_port, free_ports
from gangway.adapters.processes import die_with_parent

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "infra" / "kafka" / "pom.xml"
#: Where the jars are cached (gitignored); GANGWAY_KAFKA_CACHE moves it.
CACHE = Path(os.environ.get("GANGWAY_KAFKA_CACHE") or ROOT / ".cache")
#: A deadline, not a wait: a JVM on a loaded 2-core machine can take minutes to listen.
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 20.0
#: The broker's own SCRAM user (inter-broker traffic); a super user.
BROKER_USER = "broker"
#: Heap of the test broker: small, the machine is shared.
HEAP = "-Xmx512m"


def kafka_version() -> str:
    """The Kafka version infra/kafka/pom.xml pins (docker-compose.yml names the same)."""
    found = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    if not found:
        raise BrokerError(f"{POM}: no <kafka.version>")
    return found.group(1).strip()


def jar_dir() -> Path:
    return CACHE / f"kafka-{kafka_version()}"


def missing_tools() -> str | None:
    """Why Apache Kafka cannot run here (None if it can): java absent, or mvn absent with no jars cached."""
    if shutil.which("java") is None:
        return "java is not installed (Debian: apt-get install openjdk-17-jre-headless)"
    if not POM.exists():
        return f"{POM} is missing: Apache Kafka is installed from a source checkout of gangway"
    if not (jar_dir() / ".complete").exists() and shutil.which("mvn") is None:
        return f"mvn is not installed and {jar_dir()} holds no Kafka jars (Debian: apt-get install maven)"
    return None


def install() -> Path:
    """The directory of Kafka's jars, copied from Maven Central the first time (a minute or so)."""
    target = jar_dir()
    if (target / ".complete").exists():
        return target
    reason = missing_tools()
    if reason:
        raise BrokerError(f"cannot install Apache Kafka: {reason}")
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", "-DincludeScope=runtime",
         f"-DoutputDirectory={target}"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise BrokerError(f"mvn could not fetch Kafka {kafka_version()}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    (target / ".complete").write_text(kafka_version() + "\n")
    return target


def random_cluster_id() -> str:
    """A KRaft cluster id: a UUID in URL-safe base64 without padding (what `kafka-storage random-uuid` prints),
    never starting with "-" (``kafka-storage format --cluster-id -x…`` reads it as an option and fails)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass
class TlsFiles:
    """The broker's certificate and key (PEM), and the CA clients trust."""

    cert_file: str
    key_file: str
    ca_file: str


@dataclass
class ApacheKafka:
    """One Kafka process (broker and controller); use as a context manager or call start/stop.

    With ``users`` (name → password) the client listener is SASL_PLAINTEXT with SCRAM-SHA-512 and
    the StandardAuthorizer denies what no ACL allows; with ``tls`` too, a SASL_SSL listener is added
    (``ssl_bootstrap``).
    """

    port: int = 0
    users: dict[str, str] | None = None
    tls: TlsFiles | None = None
    data_dir: str | None = None
    log_path: str | None = None
    ssl_port: int = 0
    controller_port: int = 0
    broker_password: str = field(default_factory=lambda: uuid.uuid4().hex)
    proc: subprocess.Popen | None = field(default=None, repr=False)
    _tmp: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def secured(self) -> bool:
        return self.users is not None

    def properties(self, log_dir: str) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": log_dir,
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # gangway's lease group uses short sessions in tests (GANGWAY_KAFKA_SESSION_TIMEOUT_MS).
            "group.min.session.timeout.ms": "1000",
            # A node restarted after kill -9 cannot register again until its previous registration's
            # session ends (9 s by default): one node, heartbeating itself over loopback, needs no more
            # than 3 s (the restart takes ~5 s instead of ~12).
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
        }
        if not self.secured:
            props.update({
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
            })
            return "".join(f"{k}={v}\n" for k, v in props.items())
        jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                f'username="{BROKER_USER}" password="{self.broker_password}";')
        listeners = [f"SASL_PLAINTEXT://127.0.0.1:{self.port}"]
        if self.tls:
            listeners.append(f"SASL_SSL://127.0.0.1:{self.ssl_port}")
        props.update({
            "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{self.controller_port}"]),
            "advertised.listeners": ",".join(listeners),
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            # The controller listener is PLAINTEXT on loopback: its peer (this very broker) is ANONYMOUS.
            "super.users": f"User:{BROKER_USER};User:ANONYMOUS",
        })
        if self.tls:
            props.update({
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": self._pem_keystore(),
                "ssl.client.auth": "none",
            })
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _pem_keystore(self) -> str:
        """Kafka's PEM keystore: the private key (PKCS#8) followed by the certificate chain, one file."""
        path = Path(self.data_dir) / "keystore.pem"
        path.write_text(Path(self.tls.key_file).read_text() + Path(self.tls.cert_file).read_text())
        return str(path)

    def start(self) -> "ApacheKafka":
        """Start the broker; on a data directory it ran on before (a restart, same ports), with its data."""
        jars = install()
        if self.data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="gangway-kafka-")
            self.data_dir = self._tmp.name
        data = Path(self.data_dir)
        port, controller_port, ssl_port = free_ports(3)
        self.port = self.port or port
        self.controller_port = self.controller_port or controller_port
        if self.tls:
            self.ssl_port = self.ssl_port or ssl_port
        (data / "server.properties").write_text(self.properties(str(data / "logs")))
        (data / "log4j2.properties").write_text(
            "status = warn\nappender.out.type = Console\nappender.out.name = out\n"
            "appender.out.layout.type = PatternLayout\nappender.out.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = warn\nrootLogger.appenderRef.out.ref = out\n"
            "logger.server.name = kafka.server.KafkaRaftServer\nlogger.server.level = info\n")
        java = ["java", HEAP, "-XX:+UseSerialGC", f"-Dlog4j2.configurationFile={data / 'log4j2.properties'}",
                "-cp", f"{jars}/*"]
        fmt = [*java, "kafka.tools.StorageTool", "format", "--config", str(data / "server.properties"),
               f"--cluster-id={random_cluster_id()}", "--ignore-formatted"]  # an id may start with "-"
        if self.secured:
            for name, password in {BROKER_USER: self.broker_password, **self.users}.items():
                fmt += ["--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]"]
        if not (data / "logs" / "meta.properties").exists():  # formatted once: a restart keeps its data
            done = subprocess.run(fmt, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                raise BrokerError(f"kafka-storage format failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        out = open(self.log_path, "ab") if self.log_path else open(data / "server.log", "ab")
        self.proc = subprocess.Popen(
            [*java, "kafka.Kafka", str(data / "server.properties")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent,
        )
        out.close()
        try:
            _wait_for_port(self.port, self.proc, START_TIMEOUT_S)
        except BrokerError as exc:
            self.stop()
            raise BrokerError(f"{exc}\n{self.log_tail()}") from None
        return self

    def log_tail(self, lines: int = 30) -> str:
        path = Path(self.log_path) if self.log_path else Path(self.data_dir or ".") / "server.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Controlled shutdown (SIGTERM), then SIGKILL after STOP_TIMEOUT_S; the temporary data goes
        (a broker whose data is temporary is killed at once: its controlled shutdown, which can take
        seconds, would keep nothing)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if self._tmp is not None else signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.data_dir = None

    def __enter__(self) -> "ApacheKafka":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
