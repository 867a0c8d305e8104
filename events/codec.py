"""CloudEvents 1.0 over the Kafka protocol binding, as pure bytes in and bytes out.

- Binary content mode (what gangway writes): the event's data is the record value as JSON; its
  attributes travel in ``ce_*`` headers; ``content-type: application/json``.
- Structured content mode (accepted on input; used for ``gangway log --export``): the record value
  is one JSON object with the attributes and ``data``; ``content-type:
  application/cloudevents+json``.

Times are RFC 3339 UTC with milliseconds, so they round-trip exactly to ``time_ms``.
Decoding errors are ``CodecError`` with a machine-readable ``reason``.

Event versions (DESIGN.md, "How an event type evolves"): within ``.vN`` a type only gains optional
fields, so every older record of it decodes as it is. A breaking change makes ``.vN+1``; the step
from ``.vN`` is an *upcaster* registered here (``upcaster``), a pure function on the record's JSON
data, and a record of an old version is read as the current type — upcasters chain, one version at
a time, as pyeventsourcing's do. Gangway writes only current versions.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import msgspec

from gangway.events import catalogue as ev
from gangway.events.catalogue import EVENT_TYPES, TYPES_BY_NAME, Envelope

SPECVERSION = "1.0"
JSON = "application/json"
STRUCTURED = "application/cloudevents+json"
#: CloudEvents extension attribute carrying the log offset in exported logs.
OFFSET_EXT = "logoffset"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_ENCODER = msgspec.json.Encoder()
_DECODERS = {cls: msgspec.json.Decoder(cls) for cls in EVENT_TYPES}
Headers = list[tuple[str, bytes]]


class CodecError(ValueError):
    """A record that is not a valid gangway CloudEvent; ``reason`` is a JobRejected reason code."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def format_time(time_ms: int) -> str:
    m = _EPOCH + dt.timedelta(milliseconds=time_ms)
    return (f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}"
            f".{m.microsecond // 1000:03d}Z")


#: "YYYY-MM-DDTHH:MM:SS" → its ms since the epoch, for the times the services write (``format_time``):
#: a burst's events share a handful of seconds, so each second is parsed once.
_SECONDS: dict[str, int] = {}
_SECONDS_MAX = 4096


def parse_time(text: str) -> int:
    if isinstance(text, str) and len(text) == 24 and text[19] == "." and text[23] == "Z" \
            and text[20:23].isascii() and text[20:23].isdigit():
        second = _SECONDS.get(text[:19])
        if second is None:
            try:
                second = _parse_time(text[:19] + "Z")
            except CodecError:
                return _parse_time(text)  # the error names the whole text
            if len(_SECONDS) >= _SECONDS_MAX:
                _SECONDS.clear()
            _SECONDS[text[:19]] = second
        return second + int(text[20:23])
    return _parse_time(text)


def _parse_time(text: str) -> int:
    if not isinstance(text, str):
        raise CodecError("malformed_cloudevent", f"time is not RFC 3339 text: {text!r}")
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise CodecError("malformed_cloudevent", f"time is not RFC 3339: {text!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return (moment - _EPOCH) // dt.timedelta(milliseconds=1)


def encode_data(data: Any) -> bytes:
    return _ENCODER.encode(data)


#: An upcaster: the JSON data of a record of one version → the data of the next version.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
#: Old CloudEvents type → (the next version's type, the upcaster that makes its data).
UPCASTERS: dict[str, tuple[str, Upcaster]] = {}
_VERSIONED = re.compile(r"^(?P<stem>io\.gangway\.[a-z_]+\.[a-z_]+)\.v(?P<version>[0-9]+)$")
_CURRENT = {m["stem"]: int(m["version"]) for m in map(_VERSIONED.match, TYPES_BY_NAME) if m}


def upcaster(old: str, new: str) -> Callable[[Upcaster], Upcaster]:
    """Register the decorated function as the step from type ``old`` to ``new`` (one version up)."""
    a, b = _VERSIONED.match(old), _VERSIONED.match(new)
    if a is None or b is None or a["stem"] != b["stem"] or int(b["version"]) != int(a["version"]) + 1:
        raise ValueError(f"an upcaster goes from .vN to .vN+1 of one type: not {old} → {new}")
    if old in TYPES_BY_NAME or old in UPCASTERS:
        raise ValueError(f"{old} is current or already has an upcaster")

    def register(fn: Upcaster) -> Upcaster:
        UPCASTERS[old] = (new, fn)
        return fn
    return register


def upcast(type_name: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The current type and data of a record of an old version (unchanged when it is current)."""
    while type_name not in TYPES_BY_NAME and type_name in UPCASTERS:
        type_name, step = UPCASTERS[type_name]
        data = step(dict(data))
    return type_name, data


def _unknown(type_name: str) -> CodecError:
    m = _VERSIONED.match(type_name)
    if m and m["stem"] in _CURRENT and int(m["version"]) > _CURRENT[m["stem"]]:
        return CodecError("wrong_event_type", f"CloudEvents type {type_name!r} is newer than this gangway reads "
                                              f"(.v{_CURRENT[m['stem']]}): upgrade gangway")
    return CodecError("wrong_event_type", f"unknown CloudEvents type {type_name!r}")


def decode_data(type_name: str, payload: bytes | str) -> Any:
    cls = TYPES_BY_NAME.get(type_name)
    if cls is None and type_name in UPCASTERS:
        try:
            old = msgspec.json.decode(payload)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise CodecError("malformed_json", f"{type_name}: data is not valid JSON") from exc
        if not isinstance(old, dict):
            raise CodecError("invalid_field", f"{type_name}: data is not a JSON object")
        type_name, data = upcast(type_name, old)
        cls, payload = TYPES_BY_NAME.get(type_name), _ENCODER.encode(data)
    if cls is None:
        raise _unknown(type_name)
    try:
        return _DECODERS[cls].decode(payload)
    except msgspec.ValidationError as exc:
        text = str(exc)
        reason = "missing_field" if text.startswith("Object missing required field") else "invalid_field"
        raise CodecError(reason, f"{type_name}: {text}") from exc
    except msgspec.DecodeError as exc:
        raise CodecError("malformed_json", f"{type_name}: data is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise CodecError("malformed_json", f"{type_name}: data is JSON nested too deeply") from exc


def to_binary(env: Envelope) -> tuple[bytes, Headers]:
    """Encode for a Kafka record in binary content mode: (value, headers)."""
    headers: Headers = [
        ("ce_specversion", b"1.0"),
        ("ce_id", env.id.encode()),
        ("ce_source", env.source.encode()),
        ("ce_type", env.type.encode()),
        ("ce_time", format_time(env.time_ms).encode()),
        ("content-type", JSON.encode()),
    ]
    subject = env.subject()
    if subject:
        headers.append(("ce_subject", subject.encode()))
    return encode_data(env.data), headers


def to_structured(env: Envelope, with_offset: bool = True) -> dict[str, Any]:
    """The structured-mode JSON object of an event (``data`` as a JSON value)."""
    obj: dict[str, Any] = {
        "specversion": SPECVERSION,
        "id": env.id,
        "source": env.source,
        "type": env.type,
        "time": format_time(env.time_ms),
        "datacontenttype": JSON,
    }
    subject = env.subject()
    if subject:
        obj["subject"] = subject
    if with_offset and env.offset >= 0:
        obj[OFFSET_EXT] = env.offset
    obj["data"] = msgspec.to_builtins(env.data)
    return obj


def structured_line(env: Envelope) -> bytes:
    return _ENCODER.encode(to_structured(env))


def _header_map(headers: Headers | None) -> dict[str, bytes]:
    result: dict[str, bytes] = {}
    for key, value in headers or ():
        result[key.lower()] = value if value is not None else b""
    return result


def _text(value: bytes, what: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CodecError("not_utf8", f"header {what} is not UTF-8") from exc


def _binary_attrs(headers: Headers | None) -> dict[str, str] | None:
    """The CloudEvents attributes of well-formed binary-mode headers (text keys, UTF-8 values), in
    one pass; None for anything else, which ``from_record``'s general path reads (and rejects with
    its reasons). A log record exactly as the services write it does not get here (``_as_written``)."""
    attrs: dict[str, str] = {}
    content_type = None
    try:
        for key, value in headers or ():
            key = key.lower()
            if key[:3] == "ce_":
                attrs[key[3:]] = value.decode("utf-8") if value is not None else ""
            elif key == "content-type":
                content_type = value.decode("utf-8") if value is not None else ""
    except (UnicodeDecodeError, AttributeError, TypeError):
        return None
    if "type" not in attrs and "specversion" not in attrs:
        return None
    if content_type is not None:  # the binding maps datacontenttype to the content-type header
        attrs["datacontenttype"] = content_type
    return attrs


def from_record(value: bytes | None, headers: Headers | None, offset: int = -1) -> Envelope:
    """Decode a Kafka record in binary or structured content mode into an Envelope."""
    if value is None:
        raise CodecError("malformed_cloudevent", "record has no value")
    attrs = _binary_attrs(headers)
    if attrs is not None:
        return _envelope(attrs, value, offset)
    hmap = _header_map(headers)
    if "ce_type" in hmap or "ce_specversion" in hmap:
        attrs = {k[3:]: _text(v, k) for k, v in hmap.items() if k.startswith("ce_")}
        if "content-type" in hmap:  # the binding maps datacontenttype to the content-type header
            attrs["datacontenttype"] = _text(hmap["content-type"], "content-type")
        return _envelope(attrs, value, offset)
    try:
        obj = msgspec.json.decode(value)
    except msgspec.DecodeError as exc:
        raise CodecError("malformed_json", f"record value is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise CodecError("malformed_json", "record value is JSON nested too deeply") from exc
    if not isinstance(obj, dict) or "specversion" not in obj:
        raise CodecError("malformed_cloudevent", "no ce_ headers and no structured CloudEvent in the value")
    return from_structured(obj, offset)


def from_structured(obj: dict[str, Any], offset: int = -1) -> Envelope:
    if not isinstance(obj, dict):
        raise CodecError("malformed_cloudevent", f"a structured CloudEvent is a JSON object, not {_json_type(obj)}")
    attrs = {k: v for k, v in obj.items() if k not in ("data", "data_base64")}
    if "data" not in obj:
        raise CodecError("malformed_cloudevent", "structured CloudEvent has no data")
    if OFFSET_EXT in attrs and offset < 0:
        offset = attrs[OFFSET_EXT]
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise CodecError("malformed_cloudevent", f"{OFFSET_EXT} is not an integer")
    return _envelope(attrs, _ENCODER.encode(obj["data"]), offset)


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true or false",
            type(None): "null"}.get(type(value), type(value).__name__)


class _Line(msgspec.Struct):
    """The usual structured-mode line, decoded in one pass with ``data`` left as raw JSON."""

    specversion: str
    id: str
    source: str
    type: str
    data: msgspec.Raw
    time: str = ""
    datacontenttype: str = ""
    logoffset: int = -1
    subject: str | None = None


_LINE = msgspec.json.Decoder(_Line)


def from_structured_line(raw: bytes, offset: int = -1) -> Envelope:
    """``from_structured(json.decode(raw))`` without building a dict and encoding ``data`` again.

    Lines out of the ordinary (no ``data``, odd attribute types) take the general path, which
    raises the same errors as ever."""
    try:
        line = _LINE.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        obj = msgspec.json.decode(raw)
        env = from_structured(obj, offset)
        return _subject_checked(env, obj.get("subject") if isinstance(obj, dict) else None)
    attrs = {"specversion": line.specversion, "id": line.id, "source": line.source, "type": line.type,
             "time": line.time, "datacontenttype": line.datacontenttype}
    if offset < 0 and line.logoffset >= 0:
        offset = line.logoffset
    return _subject_checked(_envelope(attrs, line.data, offset), line.subject)


def _subject_checked(env: Envelope, subject: object) -> Envelope:
    """``env``, when the subject it was written with (None: none) is its data's (``Envelope.subject``:
    what it is about, which gangway writes with every event of the log); else CodecError — the
    record was changed after it was written (the subject is how consumers find a workload's events)."""
    if subject is not None and subject != (env.subject() or ""):
        raise CodecError("malformed_cloudevent", f"event {env.id!r}: subject {subject!r} is not its data's "
                                                 f"({env.subject()!r}): changed after it was written")
    return env


def _envelope(attrs: dict[str, Any], payload: bytes, offset: int) -> Envelope:
    for required in ("specversion", "id", "source", "type"):
        if not isinstance(attrs.get(required), str) or not attrs[required]:
            raise CodecError("malformed_cloudevent", f"CloudEvent attribute {required!r} is missing or empty")
    if attrs["specversion"] != SPECVERSION:
        raise CodecError("malformed_cloudevent", f"specversion {attrs['specversion']!r} is not 1.0")
    content_type = attrs.get("datacontenttype") or attrs.get("content-type")
    if content_type and not str(content_type).startswith(JSON):
        raise CodecError("malformed_cloudevent", f"data content type {content_type!r} is not JSON")
    time_ms = parse_time(attrs["time"]) if attrs.get("time") else 0
    data = decode_data(attrs["type"], payload)
    return Envelope(id=attrs["id"], source=attrs["source"], time_ms=time_ms, data=data, offset=offset)


#: Who writes ``gangway.log``, and what each writer may write there. A record from anyone else, or
#: of a type its writer does not write, is quarantined by every reader alike (never folded).
LOG_WRITERS: dict[str, frozenset[type]] = {
    # logs written before contracts came through gangway.config: `gangway config apply` wrote the log
    "gangway/config": frozenset({ev.ConfigApplied}),
    # submission relays telemetry (checkpoints, GPU samples, progress) from gangway.telemetry and
    # contracts from gangway.config
    "gangway/submission": frozenset({ev.WorkloadQueued, ev.CheckpointSaved, ev.GpuTelemetry, ev.WorkloadProgress,
                                     ev.ConfigApplied, ev.WithdrawalRequested, ev.WorkloadMoved}),
    # admission writes a gang's placement with its admission (PlacementDecided.with_admission)
    "gangway/admission": frozenset({ev.WorkloadAdmitted, ev.PlacementDecided}),
    "gangway/placement": frozenset({ev.PlacementDecided}),
    "gangway/preemption": frozenset({ev.EvictionOrdered}),
    # the binder reports the cluster: the simulated one's telemetry too, the Kubernetes one's withdrawals
    "gangway/binder": frozenset({ev.NodeObserved, ev.NodeRemoved, ev.PriorityClassObserved, ev.WorkloadBound,
                                 ev.WorkloadRunning, ev.WorkloadFinished, ev.WorkloadEvicted, ev.ClockTicked, ev.WorkloadWithdrawn,
                                 ev.ClusterReconciled, ev.CheckpointSaved, ev.GpuTelemetry, ev.WorkloadProgress}),
    # the idle-GPU hunt: decided by accounting's shell
    "gangway/accounting": frozenset({ev.WorkloadIdle}),
}


#: The headers ``to_binary`` writes, in its order (a ``ce_subject`` may follow).
_WRITTEN_KEYS = ("ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "content-type")
_WRITTEN_CONSTANTS = (b"1.0", JSON.encode())


def _as_written(value: bytes, headers: Headers, offset: int) -> Envelope | None:
    """The event of a log record as gangway writes it: ``to_binary``'s headers in its order, a
    writer and a current type it writes (``_WRITTEN``), an id, a time and data that decode. None for
    anything else: ``from_log_record``'s general path then reads it, or refuses it with its reasons.
    Every record the services write takes this path, in a third of the general path's time (no
    attribute dictionary; writer, type and time looked up by their bytes): decoding was a third of
    what each service spent folding the log."""
    try:
        (k0, v0), (k1, v1), (k2, v2), (k3, v3), (k4, v4), (k5, v5), *subject = headers
        if (k0, k1, k2, k3, k4, k5) != _WRITTEN_KEYS or (v0, v5) != _WRITTEN_CONSTANTS:
            return None
        text = None
        if subject:
            [(key, text)] = subject
            if key != "ce_subject":
                return None
        written = _WRITTEN.get((v2, v3))
        if written is None:
            return None
        source, decoder = written
        if not v1:
            return None
        env = Envelope(v1.decode("utf-8"), source, _header_time(v4), decoder.decode(value), offset)
        if subject and (text or b"").decode("utf-8") != (env.subject() or ""):
            return None  # (the general path refuses it, saying why)
        return env
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError, msgspec.MsgspecError):
        return None  # (CodecError and UnicodeDecodeError are ValueErrors)


@lru_cache(maxsize=_SECONDS_MAX)
def _header_time(raw: bytes) -> int:
    """A ``ce_time`` header's ms since the epoch, remembered by its bytes: the events of one decision
    share their time. (Raises as ``parse_time`` does; a refusal is not remembered.)"""
    return parse_time(raw.decode("utf-8"))


def from_log_record(value: bytes | None, headers: Headers | None, offset: int = -1) -> Envelope:
    """A record of ``gangway.log``: a gangway CloudEvent written by the service that writes its
    type. Raises ``CodecError`` (reason ``malformed_*``, ``not_utf8``, ``unknown_writer`` or
    ``forbidden_event``) for anything else — whatever the bytes; never another exception."""
    env = _as_written(value, headers, offset) if headers else None
    return env if env is not None else _read_log_record(value, headers, offset)


def _read_log_record(value: bytes | None, headers: Headers | None, offset: int) -> Envelope:
    """``from_log_record`` for any record: the general path, with every reason for refusing one."""
    try:
        env = from_record(value, headers, offset)
    except CodecError:
        raise
    except (ValueError, TypeError, AttributeError, KeyError, OverflowError, RecursionError, msgspec.MsgspecError) as exc:
        raise CodecError("malformed_cloudevent", f"record is not a CloudEvent: {type(exc).__name__}: {exc}") from exc
    refused = writer_refusal(env)
    if refused is not None:
        raise refused
    subject = _header_map(headers).get("ce_subject")
    return _subject_checked(env, _text(subject, "ce_subject") if subject is not None else None)


def writer_refusal(env: Envelope) -> CodecError | None:
    """Why the log's readers quarantine ``env`` (``LOG_WRITERS``: an unknown writer, or a type its
    writer does not write), or None when its writer writes it."""
    allowed = LOG_WRITERS.get(env.source)
    if allowed is None:
        return CodecError("unknown_writer", f"event {env.id!r} from {env.source!r}: not a writer of the log")
    if type(env.data) not in allowed:
        return CodecError("forbidden_event", f"event {env.id!r}: {env.source} does not write {env.type}")
    return None


#: (writer, CloudEvents type) as header bytes → the writer and its type's decoder, for every type a
#: writer of the log writes (``_as_written``).
_WRITTEN: dict[tuple[bytes, bytes], tuple[str, msgspec.json.Decoder]] = {
    (source.encode(), EVENT_TYPES[cls].encode()): (source, _DECODERS[cls])
    for source, allowed in LOG_WRITERS.items() for cls in allowed}
