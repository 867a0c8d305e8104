"""Kafka through aiokafka: topics, producers, the log reader. Records are CloudEvents (codec.py).

Every client gangway makes (producers, consumers, the admin client, the lease's group member) takes
its connection settings from one place, ``KafkaSettings.from_env()``: TLS and SASL, idempotence,
the group session timeout and how topics are replicated. See README "Connecting to Kafka".

Every client made here raises ``BrokerUnreachable`` (one line: the address and why) when it cannot
connect at start, instead of aiokafka's own error and log lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    AuthenticationFailedError, ClusterAuthorizationFailedError, GroupAuthorizationFailedError, KafkaConnectionError,
    KafkaError, KafkaTimeoutError, MessageSizeTooLargeError, SaslAuthenticationFailed, TopicAlreadyExistsError,
    TopicAuthorizationFailedError, UnknownError, UnsupportedVersionError, for_code,
)
from aiokafka.helpers import create_ssl_context
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from gangway.events import codec, topics
from gangway.events.catalogue import EVENT_TYPES, Envelope, JobRejected

log = logging.getLogger(__name__)
#: Kafka refused the credentials.
CREDENTIALS_REFUSED = (SaslAuthenticationFailed, AuthenticationFailedError)
#: Kafka's authoriser denied the principal.
NOT_AUTHORISED = (TopicAuthorizationFailedError, GroupAuthorizationFailedError, ClusterAuthorizationFailedError)
#: A connection failed after the client had started.
CONNECTION_FAILED = (KafkaConnectionError,)


def only_partition(topic: str) -> TopicPartition:
    """The one partition of one of gangway's topics (the log's one partition is its total order)."""
    return TopicPartition(topic, 0)


def partition_of(record) -> TopicPartition:
    """The partition a consumed record came from."""
    return TopicPartition(record.topic, record.partition)


LOG_PARTITION = only_partition(topics.LOG)
#: Largest record we produce or fetch (a ConfigApplied with many queues is the biggest).
RECORD_BYTES_MAX = 4 * 1024 * 1024
#: The topics file: one truth for ensure_topics, docker-compose's `topics` container and the AsyncAPI
#: bindings (the image copies it and names it with GANGWAY_TOPICS_FILE).
TOPICS_FILE = Path(os.environ.get("GANGWAY_TOPICS_FILE") or Path(__file__).resolve().parents[2] / "infra" / "topics.yaml")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
#: Bootstrap addresses of embedded (Tansu) brokers this process started or found: no idempotence there.
_EMBEDDED: set[str] = set()


class KafkaConfigError(ValueError):
    """A GANGWAY_KAFKA_* setting is missing or wrong."""


class IdempotenceRefused(KafkaConfigError):
    """The broker refused an idempotent producer (the embedded broker does), and nothing told
    this process that it is the embedded one."""


def mark_embedded(bootstrap: str) -> None:
    """Note that ``bootstrap`` is the embedded broker (it refuses idempotent producers)."""
    _EMBEDDED.add(bootstrap)


def _flag(env, name: str) -> bool | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise KafkaConfigError(f"{name}={raw!r}: expected true or false")


def _int(env, name: str, default: int | None) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise KafkaConfigError(f"{name}={raw!r}: expected an integer") from None


@dataclass(frozen=True)
class KafkaSettings:
    """How gangway's clients connect to Kafka and create topics (all from GANGWAY_KAFKA_* variables).

    ``idempotence`` None means: on, except against the embedded broker (which refuses it);
    ``session_timeout_ms`` None means 2 s on the embedded broker (whose joins take half of it)
    and 10 s on Kafka (whose brokers refuse less than 6 s unless configured otherwise).
    """

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "SCRAM-SHA-512"
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    check_hostname: bool = True
    idempotence: bool | None = None
    session_timeout_ms: int | None = None
    replication_factor: int = 1
    min_insync_replicas: int | None = None

    @classmethod
    def from_env(cls, env=None) -> "KafkaSettings":
        env = os.environ if env is None else env
        protocol = (env.get("GANGWAY_KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT").upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise KafkaConfigError(f"GANGWAY_KAFKA_SECURITY_PROTOCOL={protocol!r}: one of {', '.join(SECURITY_PROTOCOLS)}")
        mechanism = (env.get("GANGWAY_KAFKA_SASL_MECHANISM") or "SCRAM-SHA-512").upper()
        if mechanism not in SASL_MECHANISMS:
            raise KafkaConfigError(f"GANGWAY_KAFKA_SASL_MECHANISM={mechanism!r}: one of {', '.join(SASL_MECHANISMS)}")
        password = env.get("GANGWAY_KAFKA_PASSWORD")
        if env.get("GANGWAY_KAFKA_PASSWORD_FILE"):
            password = Path(env["GANGWAY_KAFKA_PASSWORD_FILE"]).read_text().strip()
        settings = cls(
            security_protocol=protocol, sasl_mechanism=mechanism,
            username=env.get("GANGWAY_KAFKA_USERNAME") or None, password=password or None,
            ca_file=env.get("GANGWAY_KAFKA_CA_FILE") or None, cert_file=env.get("GANGWAY_KAFKA_CERT_FILE") or None,
            key_file=env.get("GANGWAY_KAFKA_KEY_FILE") or None,
            check_hostname=_flag(env, "GANGWAY_KAFKA_CHECK_HOSTNAME") is not False,
            idempotence=_flag(env, "GANGWAY_KAFKA_IDEMPOTENCE"),
            session_timeout_ms=_int(env, "GANGWAY_KAFKA_SESSION_TIMEOUT_MS", None),
            replication_factor=_int(env, "GANGWAY_KAFKA_REPLICATION_FACTOR", 1),
            min_insync_replicas=_int(env, "GANGWAY_KAFKA_MIN_INSYNC_REPLICAS", None),
        )
        if settings.sasl and not (settings.username and settings.password):
            raise KafkaConfigError(f"GANGWAY_KAFKA_SECURITY_PROTOCOL={protocol} needs GANGWAY_KAFKA_USERNAME "
                                   "and GANGWAY_KAFKA_PASSWORD (or GANGWAY_KAFKA_PASSWORD_FILE)")
        return settings

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def idempotent(self, bootstrap: str) -> bool:
        # The embedded broker cannot do it whatever the setting says.
        return bootstrap not in _EMBEDDED and self.idempotence is not False

    def session_timeout(self, bootstrap: str) -> int:
        if self.session_timeout_ms is not None:
            return self.session_timeout_ms
        return 2_000 if bootstrap in _EMBEDDED else 10_000

    def client_kwargs(self) -> dict:
        """aiokafka's connection arguments (producers, consumers and the admin client alike)."""
        kwargs: dict = {"security_protocol": self.security_protocol}
        if self.tls:
            ctx = create_ssl_context(cafile=self.ca_file, certfile=self.cert_file, keyfile=self.key_file)
            ctx.check_hostname = self.check_hostname
            kwargs["ssl_context"] = ctx
        if self.sasl:
            kwargs.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.username,
                          sasl_plain_password=self.password)
        return kwargs

    def rdkafka_config(self) -> dict:
        """The same settings for librdkafka clients (confluent-kafka: outside producers, kcat)."""
        conf: dict = {"security.protocol": self.security_protocol.lower()}
        if self.tls:
            if self.ca_file:
                conf["ssl.ca.location"] = self.ca_file
            if self.cert_file:
                conf.update({"ssl.certificate.location": self.cert_file, "ssl.key.location": self.key_file})
            if not self.check_hostname:
                conf["ssl.endpoint.identification.algorithm"] = "none"
        if self.sasl:
            conf.update({"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.username,
                         "sasl.password": self.password})
        return conf


def settings() -> KafkaSettings:
    return KafkaSettings.from_env()


@cache
def topic_specs() -> tuple[dict, ...]:
    """infra/topics.yaml's topics: name, partitions and Kafka topic configs."""
    return tuple(yaml.safe_load(TOPICS_FILE.read_text())["topics"])


def new_topics(existing: set[str], conf: KafkaSettings) -> list[NewTopic]:
    """The topics of infra/topics.yaml that do not exist yet, as production needs them: configs
    from the file (the log keeps everything), replicated ``conf.replication_factor`` times, with
    ``min.insync.replicas`` when set (acks=all then waits for that many copies)."""
    made = []
    for spec in topic_specs():
        if spec["name"] in existing:
            continue
        configs = {key: str(value) for key, value in spec.get("config", {}).items()}
        if conf.min_insync_replicas is not None:
            configs["min.insync.replicas"] = str(conf.min_insync_replicas)
        made.append(NewTopic(spec["name"], num_partitions=spec["partitions"],
                             replication_factor=conf.replication_factor, topic_configs=configs))
    return made


def admin_client(bootstrap: str, conf: KafkaSettings | None = None) -> AIOKafkaAdminClient:
    conf = conf or settings()
    return _Admin(bootstrap, request_timeout_ms=5000, **conf.client_kwargs())


class BrokerUnreachable(ConnectionError):
    """No Kafka answers at a bootstrap address."""

    def __init__(self, bootstrap: str, why: str):
        super().__init__(f"cannot reach Kafka at {bootstrap}: {why}")
        self.bootstrap = bootstrap


def _why_unreachable(bootstrap: str) -> str:
    """What is at the address, in a few words (asked only once connecting has failed)."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    try:
        with socket.create_connection((host or "localhost", int(port)), timeout=1.0):
            if settings().security_protocol != "PLAINTEXT":
                return ("something listens there but the secured connection failed: check "
                        "GANGWAY_KAFKA_SECURITY_PROTOCOL and the credentials (GANGWAY_KAFKA_USERNAME/PASSWORD)")
            return "something listens there but does not answer as Kafka"
    except ValueError:
        return "not a host:port address"
    except OSError as exc:
        return f"nothing answers there ({exc.strerror or type(exc).__name__})"


class _QuietBootstrap(logging.Filter):
    """aiokafka logs each failed bootstrap connection before it raises; BrokerUnreachable says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Unable connect to \"")


class _Repeats(logging.Filter):
    """aiokafka logs a lost broker several times a second while it retries (a `log --follow` or a
    console waiting out a restart of `gangway up` printed hundreds of lines): each kind of message
    passes once every ``every_s``, saying how many like it were left out meanwhile."""

    def __init__(self, every_s: float = 30.0, clock=time.monotonic):
        super().__init__()
        self.every_s, self.clock = every_s, clock
        #: message template → (when it last passed, how many were left out since)
        self.seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key, now = str(record.msg), self.clock()
        last = self.seen.get(key)
        if last is not None and now - last[0] < self.every_s:
            self.seen[key] = (last[0], last[1] + 1)
            return False
        if last is not None and last[1]:
            record.msg = f"{record.msg} (and {last[1]} more like it in the last {now - last[0]:.0f} s)"
        self.seen[key] = (now, 0)
        return True


logging.getLogger("aiokafka").addFilter(_QuietBootstrap())
_REPEATS = _Repeats()
for _name in ("aiokafka", "aiokafka.consumer.fetcher", "aiokafka.conn"):  # (a logger's filters are its own)
    logging.getLogger(_name).addFilter(_REPEATS)


class _Connects:
    """A client that raises BrokerUnreachable when it cannot connect at start."""

    def __init__(self, bootstrap: str, **config):
        super().__init__(bootstrap_servers=bootstrap, **config)
        self.bootstrap = bootstrap

    async def start(self) -> None:
        try:
            await super().start()
        except KafkaConnectionError:
            await (self.close() if isinstance(self, AIOKafkaAdminClient) else self.stop())
            raise BrokerUnreachable(self.bootstrap, _why_unreachable(self.bootstrap)) from None


class _Producer(_Connects, AIOKafkaProducer):
    def __init__(self, bootstrap: str, **config):
        super().__init__(bootstrap, **config)
        self.idempotent = bool(config.get("enable_idempotence"))

    async def start(self) -> None:
        try:
            await super().start()
        except (UnknownError, UnsupportedVersionError) as exc:
            if not self.idempotent:  # the refusal is about something else
                raise
            await self.stop()
            raise IdempotenceRefused(
                f"the Kafka at {self.bootstrap} refused an idempotent producer ({type(exc).__name__} to "
                "InitProducerId); the embedded broker of `gangway up` cannot do it: set "
                "GANGWAY_KAFKA_IDEMPOTENCE=false (`gangway up` prints it), or run the command where "
                "GANGWAY_STATE_DIR is that stack's") from None


class _Consumer(_Connects, AIOKafkaConsumer):
    pass


class _Admin(_Connects, AIOKafkaAdminClient):
    async def close(self) -> None:
        if not getattr(self, "_closed", True):  # aiokafka logs a second close
            await super().close()


async def _with_admin(bootstrap: str, call, timeout_s: float, wait_for_listener: bool):
    """``await call(admin)`` on a fresh admin client, tried again for ``timeout_s`` while the broker
    is still starting. An address where nothing listens fails at once unless ``wait_for_listener``
    (a broker this process has just launched may not listen yet)."""
    conf = settings()
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        admin = admin_client(bootstrap, conf)
        try:
            await admin.start()
            return await call(admin, conf)
        except BrokerUnreachable:
            if not wait_for_listener or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)
        except Exception as exc:  # the broker may still be starting
            if asyncio.get_running_loop().time() > deadline:
                raise
            log.debug("broker not ready yet: %s", exc)
            await asyncio.sleep(0.2)
        finally:
            await admin.close()


async def ensure_topics(bootstrap: str, timeout_s: float = 20.0) -> None:
    """Create gangway's topics as infra/topics.yaml says (the log's one partition is its total order).

    The embedded broker accepts topic configs but applies none of them (memory storage)."""
    async def create(admin, conf: KafkaSettings) -> None:
        missing = new_topics(set(await admin.list_topics()), conf)
        if not missing:
            return
        try:
            response = await admin.create_topics(missing)
        except TopicAlreadyExistsError:
            response = None
        # Per-topic errors come back in the response (a denied CREATE, a bad config), not raised.
        for topic, code, *message in getattr(response, "topic_errors", ()):
            if code not in (0, TopicAlreadyExistsError.errno):
                raise for_code(code)(f"creating {topic}: {message[0] if message else ''}")
    await _with_admin(bootstrap, create, timeout_s, wait_for_listener=True)


async def tenant_submission_topics(bootstrap: str, timeout_s: float = 20.0) -> list[str]:
    """The per-namespace submission topics (``gangway.submissions.<namespace>``) that exist now
    (those this principal may describe). Nothing listening fails at once: the stack creates topics
    before any service starts."""
    async def tenants(admin, _conf) -> list[str]:
        return sorted(t for t in await admin.list_topics() if topics.entitled_namespace(t))
    return await _with_admin(bootstrap, tenants, timeout_s, wait_for_listener=False)


def producer(bootstrap: str) -> AIOKafkaProducer:
    """acks=all always; idempotent except on the embedded broker, which refuses it
    (KafkaSettings.idempotence): there, effects stay idempotent by deterministic event ids."""
    conf = settings()
    return _Producer(
        bootstrap, acks="all", enable_idempotence=conf.idempotent(bootstrap), linger_ms=2,
        max_request_size=RECORD_BYTES_MAX, max_batch_size=1024 * 1024, **conf.client_kwargs(),
    )


#: How a reader on the path from a queued job to a running one fetches (bytes, ms): a fetch is
#: answered as soon as there is anything, or after 20 ms.
PROMPT_FETCH = (1, 20)
#: How a reader off that path fetches (``lazy``): in batches of at least 64 KiB, or what there is
#: after 200 ms. A fetch answered at each few events costs the reader about as much as decoding
#: them, and the broker as much again: in Kueue's large-scale scenario (six events a workload,
#: 12,000 a second) the archiver's prompt fetches alone cost the wall a fifth (8.15 → 7.03 × the
#: lower bound, bench/README). Reading a fifth of a second later costs such a reader nothing.
LAZY_FETCH = (64 * 1024, 200)


def log_consumer(bootstrap: str, group_id: str | None = None, lazy: bool = False) -> AIOKafkaConsumer:
    """A consumer of the log, fetching as ``PROMPT_FETCH`` says, or ``LAZY_FETCH`` if ``lazy``."""
    min_bytes, wait_ms = LAZY_FETCH if lazy else PROMPT_FETCH
    return _Consumer(
        bootstrap, group_id=group_id, enable_auto_commit=False, fetch_min_bytes=min_bytes,
        auto_offset_reset="earliest", fetch_max_wait_ms=wait_ms, fetch_max_bytes=32 * 1024 * 1024,
        max_partition_fetch_bytes=RECORD_BYTES_MAX * 4, **settings().client_kwargs(),
    )


async def append(prod: AIOKafkaProducer, envelopes: list[Envelope], topic: str = topics.LOG) -> int:
    """Append events in order and wait until the broker has them all; returns one past the last
    offset (0 for no events). (``Appender``, all at once.)"""
    appender = Appender(prod, topic)
    for env in envelopes:
        await appender.add(env)
    return await appender.acknowledged()


class Appender:
    """Events appended to one topic in order: ``add`` each, ``send`` what is batched so far (the
    broker gets it while more is decided), ``acknowledged`` to send the rest and wait until the
    broker has them all.

    Keys: the cluster on the log (its one partition), the event's subject (job id) elsewhere.
    The records go in batches built here, as ``send`` would batch them but with one future a batch
    rather than one a record: a decision of thousands of events cost a tenth of a burst's CPU in
    ``send``. A record over the producer's request size is refused before it is batched, as
    ``send`` refuses it.
    """

    def __init__(self, prod: AIOKafkaProducer, topic: str = topics.LOG):
        self.prod, self.topic = prod, topic
        self.sent: list[tuple[asyncio.Future, int]] = []
        self.batch = None
        #: Events in ``batch``; ``added``: all events added.
        self.count = self.added = 0

    async def add(self, env: Envelope) -> None:
        value, headers = codec.to_binary(env)
        key = (topics.DEFAULT_CLUSTER if self.topic == topics.LOG else (env.subject() or "")).encode()
        if len(value) > RECORD_BYTES_MAX // 2 and DefaultRecordBatchBuilder.estimate_size_in_bytes(
                key, value, headers) > RECORD_BYTES_MAX:
            raise MessageSizeTooLargeError(f"event {env.id!r} is over {RECORD_BYTES_MAX} bytes as a record")
        if self.batch is None:
            self.batch = self.prod.create_batch()
        if self.batch.append(timestamp=None, key=key, value=value, headers=headers) is None:  # full: the next one
            await self.send()
            self.batch = self.prod.create_batch()
            self.batch.append(timestamp=None, key=key, value=value, headers=headers)  # (a batch takes its first)
        self.count += 1
        self.added += 1

    async def send(self) -> None:
        """Hand what is batched to the producer (not waiting for the broker's answer)."""
        if self.count:
            self.sent.append((await self.prod.send_batch(self.batch, self.topic, partition=0), self.count))
            self.batch, self.count = None, 0

    async def acknowledged(self) -> int:
        """Send the rest and wait for the broker: one past the last offset (0 when nothing was added)."""
        await self.send()
        if not self.sent:
            return 0
        metas = await asyncio.gather(*(future for future, _ in self.sent))
        return max(meta.offset + n for meta, (_, n) in zip(metas, self.sent))


class RetryingSends:
    """Records sent one by one, acknowledged together at the end (``acknowledged``), each sent again,
    the same bytes, when its send failed for a reason that passes — the broker away or restarting
    (aiokafka's retriable errors) or the delivery timeout while it was — until ``retry_s`` has
    passed since that failure. The records' consumers must take a record twice as once (the
    submission service does: a job's idempotency key). Any other error is raised."""

    RETRY_PAUSE_S = 0.5

    def __init__(self, prod: AIOKafkaProducer, topic: str, retry_s: float):
        self.prod, self.topic, self.retry_s = prod, topic, retry_s
        self.records: dict[str, tuple[bytes, bytes, list]] = {}
        self.futures: dict[str, asyncio.Future] = {}
        self.resent = 0
        #: One past the highest offset the broker acknowledged.
        self.end = 0

    async def send(self, name: str, key: bytes, value: bytes, headers: list) -> None:
        self.records[name] = (key, value, headers)
        self.futures[name] = await self._send(name)

    async def _send(self, name: str) -> asyncio.Future:
        key, value, headers = self.records[name]
        try:
            return await self.prod.send(self.topic, value=value, key=key, headers=headers, partition=0)
        except KafkaError as exc:  # no metadata, buffer full, closed connection: answered like a failed delivery
            failed = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            return failed

    def _passes(self, exc: BaseException) -> bool:
        return isinstance(exc, KafkaTimeoutError) or (isinstance(exc, KafkaError) and exc.retriable)

    async def acknowledged(self) -> set[str]:
        """Every record's name, once the broker has acknowledged it."""
        done: set[str] = set()
        first_failure: float | None = None
        while self.futures:
            names = list(self.futures)
            results = await asyncio.gather(*self.futures.values(), return_exceptions=True)
            self.futures = {}
            failed = []
            for name, result in zip(names, results):
                if not isinstance(result, BaseException):
                    done.add(name)
                    self.end = max(self.end, result.offset + 1)
                elif not self._passes(result):
                    raise result
                else:
                    failed.append((name, result))
            if not failed:
                break
            now = asyncio.get_running_loop().time()
            first_failure = now if first_failure is None else first_failure
            if now - first_failure > self.retry_s:
                raise failed[0][1]
            log.warning("%d records to %s not acknowledged (%s); sending them again", len(failed), self.topic,
                        failed[0][1])
            await asyncio.sleep(self.RETRY_PAUSE_S)
            for name, _ in failed:
                self.resent += 1
                self.futures[name] = await self._send(name)
        return done


#: How many times a hole in the log's offsets is fetched again before it is taken as real.
HOLE_RETRIES_MAX = 100


class InOrder:
    """Hands out log records strictly in offset order, without holes.

    Tansu, with several producers appending to one partition, can make a later batch visible to a
    fetch before an earlier one: a consumer then jumps over offsets it never sees again (measured:
    one hole in 3,000 records with 3 producers). A reader that meets a hole goes back and fetches
    again; only a hole that lasts ``HOLE_RETRIES_MAX`` fetches is taken as real (Kafka leaves holes
    only for transaction markers and compaction, which gangway does not use).
    """

    def __init__(self, start: int = 0):
        self.next = start
        self.retries = 0

    def take(self, records: list) -> tuple[list, bool]:
        """The records that continue the log, and whether a hole stopped them (seek to ``next``)."""
        taken = []
        for rec in records:
            if rec.offset < self.next:
                continue
            if rec.offset > self.next:
                if self.retries < HOLE_RETRIES_MAX:
                    self.retries += 1
                    return taken, True
                log.warning("log offsets %d..%d never appeared; going on", self.next, rec.offset - 1)
            self.retries = 0
            taken.append(rec)
            self.next = rec.offset + 1
        return taken, False


def decode_log_record(rec) -> Envelope | None:
    """The envelope of a log record, or None for a record no gangway service wrote.

    Only gangway's services write the log (``codec.LOG_WRITERS``); a record that is not one of our
    CloudEvents, or comes from another writer, is skipped — by every reader alike, so every folded
    state stays the same (the services also quarantine it: ``services/runtime/shell.py``).
    """
    try:
        return codec.from_log_record(rec.value, rec.headers, rec.offset)
    except codec.CodecError as exc:
        log.error("log offset %d quarantined (%s): %s", rec.offset, exc.reason, exc)
        return None


#: Who writes ``gangway.rejections``: the submission service (records it refused) and the Kubernetes
#: binder (objects its intake refused, which never become records).
REJECTION_WRITERS = frozenset({"gangway/submission", "gangway/binder"})


def decode_rejection(rec) -> Envelope | None:
    """The JobRejected of a ``gangway.rejections`` record (``REJECTION_WRITERS`` write them), or
    None for anything else there."""
    try:
        env = codec.from_record(rec.value, rec.headers, rec.offset)
    except codec.CodecError:
        return None
    return env if env.source in REJECTION_WRITERS and isinstance(env.data, JobRejected) else None


#: How a reader decodes the records of each topic of gangway's events it may read (``log_fetches``).
_DECODERS = {topics.LOG: decode_log_record, topics.REJECTIONS: decode_rejection}


def _of_types(rec, types: frozenset[bytes]) -> bool:
    return any(key == "ce_type" and value in types for key, value in rec.headers or ())


async def log_fetches(bootstrap: str, start: int = 0, idle_ms: int = 500, types: tuple[type, ...] = (),
                     topic: str = topics.LOG, lazy: bool = False):
    """Yield ``(envelopes, end, caught_up)`` for every fetch of the log (or of another topic of
    gangway's events: ``topic``) from ``start``, forever.

    With ``types``, only the records of those event types are decoded (told by their ``ce_type``
    header, which the services write): a reader waiting for one kind of event does not pay for
    decoding all the others.

    Records come strictly in offset order (``InOrder`` fetches holes again); ``end`` is the fetch
    high-water mark (ListOffsets(latest) is unreliable on Tansu), None until the broker has answered;
    ``caught_up``: the fetch brought nothing and the reader stands at the end. ``lazy``: fetch as a
    reader off the services' path does (``LAZY_FETCH``). Close it with ``contextlib.aclosing`` so
    the consumer stops when the reader does."""
    consumer = log_consumer(bootstrap, lazy=lazy)
    order = InOrder(start)
    wanted = frozenset(EVENT_TYPES[t].encode() for t in types)
    partition, decode = only_partition(topic), _DECODERS[topic]
    try:
        await consumer.start()
        consumer.assign([partition])
        consumer.seek(partition, start)
        while True:
            batch = await consumer.getmany(partition, timeout_ms=idle_ms, max_records=10_000)
            records, hole = order.take(batch.get(partition, []))
            if hole:
                consumer.seek(partition, order.next)
                await asyncio.sleep(0.02)
            if wanted:
                records = [rec for rec in records if _of_types(rec, wanted)]
            envs = [env for env in map(decode, records) if env is not None]
            end = consumer.highwater(partition)
            quiet = not (hole or records) and end is not None
            yield envs, end, quiet and await consumer.position(partition) >= end
    finally:
        await consumer.stop()


async def read_log(bootstrap: str, start: int = 0, idle_ms: int = 500, follow: bool = False,
                   types: tuple[type, ...] = (), topic: str = topics.LOG):
    """Yield every envelope of the log (or of ``topic``) from ``start`` up to its current end (the
    auditor's input), or, with ``follow``, on and on as it grows; with ``types``, only events of
    those types."""
    async with contextlib.aclosing(log_fetches(bootstrap, start, idle_ms, types, topic)) as fetches:
        async for envs, _, caught_up in fetches:
            for env in envs:
                yield env
            if caught_up and not follow:
                return


async def first_events(bootstrap: str, event_type: type, workloads: set[str], deadline_s: float) -> dict[str, int]:
    """When each of ``workloads`` first has an event of ``event_type`` on the log (its event time),
    following the log until all of them have or ``deadline_s`` passes (then what was found). Only
    records of that type are decoded, and the log is fetched lazily (the times are the events'
    own, not when they were read): a benchmark waiting on the services does not take their CPU."""
    found: dict[str, int] = {}
    deadline = time.monotonic() + deadline_s
    async with contextlib.aclosing(log_fetches(bootstrap, idle_ms=100, types=(event_type,), lazy=True)) as fetches:
        async for envs, _, _ in fetches:
            for env in envs:
                if env.data.workload in workloads:
                    found.setdefault(env.data.workload, env.time_ms)
            if len(found) == len(workloads) or time.monotonic() > deadline:
                return found
    return found


class ActiveLease:
    """Which instance of a service is the active one: Kafka's consumer group decides.

    Every instance of a service joins one group (``gangway-<service>-active``) on the log's one
    partition, and never reads through it (the partition is paused at once): the member Kafka
    assigns the partition to is the active instance; the others stand by, folding the log like it,
    and one of them takes over when the active one leaves or stops heartbeating (session timeout).
    Two instances that both believe they are active for a moment are harmless: their decisions
    carry deterministic ids and are validated where they land.
    """

    def __init__(self, bootstrap: str, group: str):
        self.active = False
        conf = settings()
        # Tansu answers a JoinGroup after half the session timeout: 2 s there joins in 1 s. Kafka
        # brokers refuse less than group.min.session.timeout.ms (6 s by default): 10 s there.
        session_ms = conf.session_timeout(bootstrap)
        self.consumer = _Consumer(
            bootstrap, group_id=group, enable_auto_commit=False,
            session_timeout_ms=session_ms, heartbeat_interval_ms=min(500, session_ms // 3),
            rebalance_timeout_ms=session_ms, **conf.client_kwargs(),
        )

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe([topics.LOG], listener=_LeaseListener(self))

    async def keep(self, stop: asyncio.Event) -> None:
        """Take part in the group until ``stop`` (heartbeats run in aiokafka's own task)."""
        while not stop.is_set():
            await self.consumer.getmany(timeout_ms=200)

    async def stop(self) -> None:
        self.active = False
        await self.consumer.stop()


class _LeaseListener(ConsumerRebalanceListener):
    def __init__(self, lease: ActiveLease):
        self.lease = lease

    async def on_partitions_revoked(self, revoked) -> None:
        self.lease.active = False

    async def on_partitions_assigned(self, assigned) -> None:
        if assigned:
            self.lease.consumer.pause(*assigned)
        self.lease.active = LOG_PARTITION in assigned
