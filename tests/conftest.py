"""Fixtures shared by every test module: the brokers (embedded and Apache Kafka) and PostgreSQL.

Broker tiers: a test that asks for ``broker_kind`` (directly or through ``kafka_broker`` or the
integration stack) runs on the embedded broker, and — when marked ``both_brokers``, or every one
with ``GANGWAY_TEST_BROKERS=all`` — on Apache Kafka too. The Apache Kafka tier skips, with the
reason, only where java (or mvn, before the jars are cached) is missing.

PostgreSQL: ``GANGWAY_TEST_PG`` names a server to use; otherwise one is started for the session
from the local binaries (Debian's ``postgresql`` package: ``initdb``/``pg_ctl`` under
/usr/lib/postgresql/*/bin) in a temporary directory on a free port, as the ``postgres`` user when
running as root (PostgreSQL refuses root), and stopped afterwards.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

from gangway.adapters import apache_kafka
from gangway.adapters.broker import EmbeddedBroker, free_port

BROKERS = ("embedded", "apache-kafka")
APACHE = "apache-kafka"


def pytest_generate_tests(metafunc):
    if "broker_kind" not in metafunc.fixturenames:
        return
    both = metafunc.definition.get_closest_marker("both_brokers") or os.environ.get("GANGWAY_TEST_BROKERS") == "all"
    metafunc.parametrize("broker_kind", BROKERS if both else BROKERS[:1], indirect=True, scope="session")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """The Apache Kafka tier last (after pytest has grouped tests by broker): its session stack sets
    GANGWAY_KAFKA and the idempotence setting for as long as it lives, which is then to the end."""
    def apache(item) -> bool:
        callspec = getattr(item, "callspec", None)
        return callspec is not None and callspec.params.get("broker_kind") == APACHE
    items[:] = [item for item in items if not apache(item)] + [item for item in items if apache(item)]


@pytest.fixture(scope="session")
def broker_kind(request) -> str:
    """"embedded" or "apache-kafka" (skipped, with the reason, where Java or Maven is missing)."""
    kind = getattr(request, "param", BROKERS[0])
    if kind == APACHE:
        reason = apache_kafka.missing_tools()
        if reason:
            pytest.skip(f"Apache Kafka tier: {reason}")
        try:
            apache_kafka.install()
        except apache_kafka.BrokerError as exc:
            pytest.fail(f"Apache Kafka tier: {exc}")
    return kind


def start_broker(kind: str):
    """A started broker of that kind (``.bootstrap``, ``.stop()``)."""
    return apache_kafka.ApacheKafka().start() if kind == APACHE else EmbeddedBroker().start()


@pytest.fixture
def kafka_broker(broker_kind):
    """A fresh, empty broker of this test's kind, stopped afterwards."""
    broker = start_broker(broker_kind)
    try:
        yield broker
    finally:
        broker.stop()


# --- PostgreSQL ----------------------------------------------------------------------------------


def postgres_bindir() -> Path | None:
    """The newest local PostgreSQL server binaries (Debian's layout first, then PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class LocalPostgres:
    """A throwaway PostgreSQL server: initdb in a temporary directory, pg_ctl start on a free port."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="gangway-pg-"))
        self.data = self.dir / "data"
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as the package's user
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no `postgres` user to run PostgreSQL as") from None
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *cmd: str) -> None:
        # The server outlives the test that first asked for it: it must not look like part of a stack
        # (the integration stacks find their processes by GANGWAY_STATE_DIR in the environment).
        env = {k: v for k, v in os.environ.items() if not k.startswith("GANGWAY_")}
        done = subprocess.run([*self.as_user, *cmd], capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])} failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")

    def start(self) -> "LocalPostgres":
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--no-sync")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "server.log"), "-w",
                  "-t", "60", "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off",
                  "start")
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_admin_url():
    """The maintenance database of a PostgreSQL server for this session: GANGWAY_TEST_PG, or one
    started from the local binaries (skips, with the reason, where there are none)."""
    if os.environ.get("GANGWAY_TEST_PG"):
        yield os.environ["GANGWAY_TEST_PG"]
        return
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (Debian: apt-get install postgresql)")
    server = LocalPostgres(bindir)
    try:
        server.start()
    except RuntimeError as exc:
        server.stop()
        pytest.fail(f"could not start PostgreSQL from {bindir}: {exc}")
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_url(pg_admin_url):
    """A fresh PostgreSQL database ``gangway_test_<random>`` for this run, dropped afterwards."""
    admin = create_engine(pg_admin_url, isolation_level="AUTOCOMMIT")
    name = f"gangway_test_{secrets.token_hex(6)}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        admin.dispose()
        pytest.skip(f"PostgreSQL unreachable at {pg_admin_url}: {exc.orig}")
    try:
        yield make_url(pg_admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
