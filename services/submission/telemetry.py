"""Telemetry relay (pure): a checkpoint a workload reports becomes a CheckpointSaved on the log.

Workloads (or their exporters) publish ``io.gangway.checkpoint.saved.v1`` CloudEvents on
``gangway.telemetry`` — binary mode, or the event's JSON data alone. Preemption must see
checkpoints in the log's order to stay replayable, so the submission service copies each valid
one onto the log; a record that is not a checkpoint of a known workload is rejected, kept whole,
like a bad job.
"""

from __future__ import annotations

import msgspec

from gangway.events import codec
from gangway.events.catalogue import CheckpointSaved, JobRejected
from gangway.events.state import State
from gangway.services.submission.policy import Headers, Invalid, rejected


def decide_telemetry(value: bytes | None, key: bytes | None, headers: Headers, state: State,
                     where: str) -> CheckpointSaved | JobRejected:
    try:
        checkpoint = read_checkpoint(value, headers)
    except Invalid as bad:
        return rejected(bad, "", value, key, headers, where)
    if checkpoint.workload not in state.workloads:
        bad = Invalid("invalid_field", f"workload: {checkpoint.workload!r} is not a known workload")
        return rejected(bad, checkpoint.workload, value, key, headers, where)
    return checkpoint


def read_checkpoint(value: bytes | None, headers: Headers) -> CheckpointSaved:
    """The checkpoint in a record: a CloudEvent (binary or structured) or its JSON data; raises Invalid."""
    if value is None:
        raise Invalid("malformed_json", "the record has no value; expected a CheckpointSaved")
    try:
        if any(name.lower().startswith("ce_") for name, _ in headers or ()):
            env = codec.from_record(value, headers)
        else:
            obj = msgspec.json.decode(value)
            if not (isinstance(obj, dict) and "specversion" in obj):
                return msgspec.convert(obj, CheckpointSaved)
            env = codec.from_structured(obj)
    except codec.CodecError as exc:
        raise Invalid(exc.reason, str(exc)) from exc
    except msgspec.ValidationError as exc:
        raise Invalid("invalid_field", f"CheckpointSaved: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise Invalid("malformed_json", f"not JSON: {exc}") from exc
    if not isinstance(env.data, CheckpointSaved):
        raise Invalid("wrong_event_type", f"CloudEvent type is {env.type}; telemetry takes checkpoint.saved events")
    return env.data if env.data.saved_ms else msgspec.structs.replace(env.data, saved_ms=env.time_ms)
