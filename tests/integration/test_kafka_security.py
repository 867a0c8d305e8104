"""Authentication and authorisation on Apache Kafka: SCRAM-SHA-512 users, the StandardAuthorizer and
gangway's ACL model (README "Who may write what"), with the whole stack running as the service
principal.

Users (created at storage-format time): ``gangway`` (the services), ``ops`` (the admin principal),
``alice`` (tenant of namespace research) and ``bob`` (tenant of serving). The client listener is
SASL_PLAINTEXT; a SASL_SSL listener with a certificate from a CA made here (openssl) is tested too.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest
from confluent_kafka import Producer

from conftest import CLUSTER_FILE, CONTRACT_FILE, NODES, make_job, running_stack, uid
from gangway.adapters import apache_kafka, kafka, kafka_acls
from gangway.events import catalogue as ev
from gangway.events import codec, topics

pytestmark = pytest.mark.broker

TENANTS = {"research": "alice", "serving": "bob"}


def creds(user: str, password: str, protocol: str = "SASL_PLAINTEXT") -> dict[str, str]:
    """GANGWAY_KAFKA_* settings of one principal."""
    return {"GANGWAY_KAFKA_SECURITY_PROTOCOL": protocol, "GANGWAY_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "GANGWAY_KAFKA_USERNAME": user, "GANGWAY_KAFKA_PASSWORD": password}


def make_tls(where: Path) -> apache_kafka.TlsFiles | None:
    """A throwaway CA and a broker certificate for 127.0.0.1 (None without openssl)."""
    if shutil.which("openssl") is None:
        return None
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True, stdin=subprocess.DEVNULL)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=gangway test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=localhost")
    (where / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "broker.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "broker.crt", "-days", "2", "-extfile", "san.ext")
    return apache_kafka.TlsFiles(cert_file=str(where / "broker.crt"), key_file=str(where / "broker.key"),
                                 ca_file=str(where / "ca.crt"))


class Secured:
    def __init__(self, gw, broker: apache_kafka.ApacheKafka, users: dict[str, str]):
        self.gw, self.broker, self.users = gw, broker, users

    def env(self, user: str) -> dict[str, str]:
        return creds(user, self.users[user])

    def producer(self, user: str) -> Producer:
        conf = kafka.KafkaSettings.from_env(self.env(user)).rdkafka_config()
        return Producer({"bootstrap.servers": self.broker.bootstrap, "acks": "all", "enable.idempotence": True,
                         "log.connection.close": False, "log_level": 0, **conf})

    def produce(self, user: str, topic: str, value: bytes, key: bytes, headers=None) -> str | None:
        """Produce one record as ``user``: None when acknowledged, else the error's name."""
        results = []
        prod = self.producer(user)
        prod.produce(topic, value=value, key=key, headers=headers, partition=0,
                     on_delivery=lambda err, _msg: results.append(err))
        prod.flush(20)
        assert results, f"no delivery report for {topic} within 20 s"
        return None if results[0] is None else results[0].name()


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    reason = apache_kafka.missing_tools()
    if reason:
        pytest.skip(f"Apache Kafka tier: {reason}")
    work = tmp_path_factory.mktemp("kafka-security")
    users = {name: secrets.token_urlsafe(12) for name in ("gangway", "ops", "alice", "bob")}
    broker = apache_kafka.ApacheKafka(users=users, tls=make_tls(work), log_path=str(work / "kafka.log")).start()
    try:
        root = {"security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": apache_kafka.BROKER_USER, "sasl.password": broker.broker_password}
        acls = kafka_acls.acl_model("gangway", "ops", TENANTS)
        created = kafka_acls.apply_acls(broker.bootstrap, acls, sorted(TENANTS), root)
        assert created == ["gangway.submissions.research", "gangway.submissions.serving"]
        with running_stack(work / "state", CLUSTER_FILE, CONTRACT_FILE, NODES, kind="apache-kafka", broker=broker,
                           env=creds("gangway", users["gangway"])) as gw:
            yield Secured(gw, broker, users)
    finally:
        broker.stop()


def test_a_tenant_submits_into_its_own_namespace_and_another_is_rejected_with_its_bytes(secured):
    gw, u = secured.gw, uid()
    mine = make_job(f"mine-{u}", namespace="research")
    sneaky = msgspec.json.encode(make_job(f"sneaky-{u}", namespace="serving"))
    own_topic = topics.tenant_submissions("research")
    assert secured.produce("alice", own_topic, msgspec.json.encode(mine), mine["job_id"].encode()) is None
    assert secured.produce("alice", own_topic, sneaky, b"sneaky") is None
    gw.wait_finished([f"research/mine-{u}"])
    (rejection,) = gw.wait_rejections([b"sneaky"])[b"sneaky"]
    assert rejection.reason == "not_entitled" and rejection.job_id == f"sneaky-{u}"
    assert "'serving'" in rejection.message and own_topic in rejection.message
    assert rejection.original == sneaky and rejection.submission.startswith(own_topic + "/0/")
    assert f"serving/sneaky-{u}" not in gw.state.workloads
    # Another tenant's topic, and the shared one, refuse alice's writes outright (the broker's ACLs).
    job = msgspec.json.encode(make_job(f"other-{u}", namespace="serving"))
    assert secured.produce("alice", topics.tenant_submissions("serving"), job, b"x") == "TOPIC_AUTHORIZATION_FAILED"
    assert secured.produce("alice", topics.SUBMISSIONS, job, b"x") == "TOPIC_AUTHORIZATION_FAILED"
    # bob, on his own topic, gets in.
    theirs = make_job(f"theirs-{u}", namespace="serving")
    assert secured.produce("bob", topics.tenant_submissions("serving"), msgspec.json.encode(theirs), b"t") is None
    gw.wait_finished([f"serving/theirs-{u}"])


def test_a_forged_decision_or_checkpoint_from_a_tenant_or_the_admin_is_refused_by_the_broker(secured):
    gw, u = secured.gw, uid()
    forged = ev.Envelope(id=f"forged/{u}", source="gangway/admission", time_ms=1,
                         data=ev.WorkloadAdmitted(workload=f"research/x-{u}", cluster_queue="research",
                                                  usage={"nvidia.com/gpu": 64_000}, borrowed={}, based_on=0))
    value, headers = codec.to_binary(forged)
    assert secured.produce("alice", topics.LOG, value, b"default", headers) == "TOPIC_AUTHORIZATION_FAILED"
    # Nor may the admin principal: it writes contracts to gangway.config, never the log.
    assert secured.produce("ops", topics.LOG, value, b"default", headers) == "TOPIC_AUTHORIZATION_FAILED"
    checkpoint = ev.Envelope(id=f"forged-ckpt/{u}", source="tenant", time_ms=1,
                             data=ev.CheckpointSaved(workload=f"research/x-{u}", saved_ms=1))
    value, headers = codec.to_binary(checkpoint)
    assert secured.produce("alice", topics.TELEMETRY, value, b"x", headers) == "TOPIC_AUTHORIZATION_FAILED"
    assert not [env for env in gw.log() if env.id.startswith(("forged/", "forged-ckpt/"))]


def test_config_apply_needs_the_admin_principal(secured, tmp_path):
    gw = secured.gw
    # The demo contract with a namespace's labels declared is another contract (same queues).
    relabelled = tmp_path / "contract.yaml"
    relabelled.write_text(Path(CONTRACT_FILE).read_text() + "\n---\napiVersion: v1\nkind: Namespace\n"
                          "metadata: {name: research, labels: {team: research}}\n")
    denied = gw.cli("config", "apply", str(relabelled), env=secured.env("alice"))
    assert denied.returncode != 0
    assert "not authorised" in denied.stderr and "User:alice" in denied.stderr, denied.stderr
    assert "admin principal" in denied.stderr
    applied = gw.cli("config", "apply", str(relabelled), env=secured.env("ops"))
    assert applied.returncode == 0 and "contract applied" in applied.stdout, applied.stderr
    wrong = gw.cli("status", env={**secured.env("ops"), "GANGWAY_KAFKA_PASSWORD": "wrong"})
    assert wrong.returncode != 0 and "credentials" in wrong.stderr, wrong.stderr
    assert "Traceback" not in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr


def test_gangway_clients_speak_sasl_ssl_with_a_ca_file(secured, monkeypatch):
    if secured.broker.tls is None:
        pytest.skip("openssl is not installed: no certificate for the SASL_SSL listener")
    for name, value in {**creds("ops", secured.users["ops"], "SASL_SSL"),
                        "GANGWAY_KAFKA_CA_FILE": secured.broker.tls.ca_file}.items():
        monkeypatch.setenv(name, value)

    async def first_events() -> list[ev.Envelope]:
        found = []
        async for env in kafka.read_log(secured.broker.ssl_bootstrap, idle_ms=200):
            found.append(env)
            if len(found) == 3:
                break
        return found

    envs = asyncio.run(first_events())
    assert [env.offset for env in envs] == [0, 1, 2]
    monkeypatch.delenv("GANGWAY_KAFKA_CA_FILE")  # the system's CAs do not know the test CA

    async def untrusted() -> None:
        async for _env in kafka.read_log(secured.broker.ssl_bootstrap, idle_ms=200):
            break

    with pytest.raises(Exception):
        asyncio.run(asyncio.wait_for(untrusted(), 15))
