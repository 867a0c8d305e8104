"""Telemetry relay (pure): what running workloads and GPU exporters report becomes events on the log.

Three kinds of record come in on ``gangway.telemetry`` — as CloudEvents (binary or structured
mode) or as their plain JSON:

- a checkpoint (``io.gangway.checkpoint.saved.v1``; JSON ``{"workload": "ns/job", "step": 1200}``);
- GPU figures in DCGM's terms (``io.gangway.gpu.sampled.v1``), per node and GPU index; the plain
  JSON may use DCGM's own field names and units::

      {"node": "gpu-node-0", "gpus": [{"gpu": 0, "DCGM_FI_PROF_SM_ACTIVE": 0.31,
        "DCGM_FI_DEV_GPU_UTIL": 64, "DCGM_FI_DEV_FB_USED": 30512, "workload": "research/llm"}]}

- progress (``io.gangway.progress.reported.v1``; JSON ``{"workload": "ns/job", "step": 90, "tokens": 1.2e6}``).

Preemption, accounting and the idle-GPU hunt must see them in the log's order to stay
replayable, so the submission service copies each valid one onto the log; a record that is none
of these, names an unknown workload or node, or carries figures out of range is rejected, kept
whole (value, key, headers), like a bad job.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from gangway.events import codec
from gangway.events.catalogue import CheckpointSaved, GpuSample, GpuTelemetry, JobRejected, WorkloadProgress
from gangway.events.resources import GPU
from gangway.events.state import State
from gangway.services.submission.policy import Headers, Invalid, rejected

Telemetry = CheckpointSaved | GpuTelemetry | WorkloadProgress
#: DCGM field names (dcgm-exporter's metric names) accepted in plain JSON.
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
SAMPLES_MAX = 1024


def decide_telemetry(value: bytes | None, key: bytes | None, headers: Headers, state: State,
                     where: str) -> Telemetry | JobRejected:
    try:
        event = read_telemetry(value, headers)
        check_known(event, state)
    except Invalid as bad:
        return rejected(bad, "", value, key, headers, where)
    return event


def check_known(event: Telemetry, state: State) -> None:
    if isinstance(event, GpuTelemetry):
        if event.node not in state.nodes:
            raise Invalid("invalid_field", f"node: {event.node!r} is not a known node")
        check_samples(event)
        gpus = state.nodes[event.node].allocatable.get(GPU, 0) // 1000
        wrong = next((s for s in event.samples if s.gpu >= gpus), None)
        if wrong is not None:  # (a GPU the node does not have: no placement could ever name it)
            raise Invalid("invalid_field", f"samples: GPU {wrong.gpu} of {event.node!r}, which has {gpus} GPUs "
                                           f"(indexes 0 to {gpus - 1})")
        return
    if event.workload not in state.workloads:
        raise Invalid("invalid_field", f"workload: {event.workload!r} is not a known workload")
    if isinstance(event, WorkloadProgress) and (event.tokens < 0 or (event.step is not None and event.step < 0)):
        raise Invalid("invalid_field", "tokens and step must be zero or more")
    if isinstance(event, CheckpointSaved) and event.step is not None and event.step < 0:
        raise Invalid("invalid_field", f"step: {event.step} is negative: a checkpoint's step is zero or more")


def check_samples(event: GpuTelemetry) -> None:
    if not event.samples:
        raise Invalid("missing_field", "samples: no GPU sample")
    if len(event.samples) > SAMPLES_MAX:
        raise Invalid("absurd_quantity", f"samples: {len(event.samples)} GPUs on one node")
    seen = set()
    for i, s in enumerate(event.samples):
        if s.gpu < 0 or s.gpu in seen:
            raise Invalid("invalid_field", f"samples[{i}].gpu: {s.gpu} is negative or repeated")
        seen.add(s.gpu)
        if not 0 <= s.sm_active <= 1000:
            raise Invalid("invalid_field", f"samples[{i}].sm_active: {s.sm_active} is not within 0-1000 (thousandths)")
        if not 0 <= s.gpu_util <= 100:
            raise Invalid("invalid_field", f"samples[{i}].gpu_util: {s.gpu_util} is not a percentage")
        if s.fb_used_mib < 0:
            raise Invalid("invalid_field", f"samples[{i}].fb_used_mib: {s.fb_used_mib} is negative")


def read_telemetry(value: bytes | None, headers: Headers) -> Telemetry:
    """The telemetry in a record: a CloudEvent (binary or structured) or its JSON data; raises Invalid."""
    if value is None:
        raise Invalid("malformed_json", "the record has no value; expected a checkpoint, GPU figures or progress")
    try:
        if any(name.lower().startswith("ce_") for name, _ in headers or ()):
            env = codec.from_record(value, headers)
        else:
            obj = msgspec.json.decode(value)
            if not (isinstance(obj, dict) and "specversion" in obj):
                return _plain(obj)
            env = codec.from_structured(obj)
    except codec.CodecError as exc:
        raise Invalid(exc.reason, str(exc)) from exc
    except msgspec.ValidationError as exc:
        raise Invalid("invalid_field", f"telemetry: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise Invalid("malformed_json", f"not JSON: {exc}") from exc
    data = env.data
    if not isinstance(data, (CheckpointSaved, GpuTelemetry, WorkloadProgress)):
        raise Invalid("wrong_event_type", f"CloudEvent type is {env.type}; telemetry takes checkpoint.saved, "
                                          "gpu.sampled and progress.reported events")
    if isinstance(data, CheckpointSaved):
        return data if data.saved_ms else msgspec.structs.replace(data, saved_ms=env.time_ms)
    # GPU figures and progress without their own time count from when the relay appends them
    # (the cluster's clock), not from the sender's clock.
    return data


def _plain(obj: Any) -> Telemetry:
    if not isinstance(obj, dict):
        raise Invalid("invalid_field", "telemetry must be a JSON object")
    if "node" in obj:
        if "gpus" in obj:
            return GpuTelemetry(node=_text(obj, "node"), samples=[_dcgm(i, g) for i, g in enumerate(_list(obj, "gpus"))],
                                observed_ms=_int(obj, "observed_ms", 0))
        return msgspec.convert(obj, GpuTelemetry)
    if "tokens" in obj:
        tokens = obj.get("tokens")
        if isinstance(tokens, float) and tokens.is_integer():
            obj = {**obj, "tokens": int(tokens)}
        return msgspec.convert(obj, WorkloadProgress)
    return msgspec.convert(obj, CheckpointSaved)


def _dcgm(i: int, g: Any) -> GpuSample:
    if not isinstance(g, dict):
        raise Invalid("invalid_field", f"gpus[{i}]: must be an object")
    unknown = set(g) - {"gpu", SM_ACTIVE, GPU_UTIL, FB_USED, "workload"}
    if unknown:
        raise Invalid("invalid_field", f"gpus[{i}]: unknown field(s) {sorted(unknown)}")
    if SM_ACTIVE not in g:
        raise Invalid("missing_field", f"gpus[{i}].{SM_ACTIVE}: missing")
    sm = _number(g[SM_ACTIVE], f"gpus[{i}].{SM_ACTIVE}", 0, 1)
    util = _number(g.get(GPU_UTIL, 0), f"gpus[{i}].{GPU_UTIL}", 0, 100)
    fb = _number(g.get(FB_USED, 0), f"gpus[{i}].{FB_USED}", 0, 2**40)
    workload = g.get("workload")
    if workload is not None and not isinstance(workload, str):
        raise Invalid("invalid_field", f"gpus[{i}].workload: must be a string")
    return GpuSample(gpu=_int(g, "gpu", None, f"gpus[{i}]."), sm_active=round(sm * 1000), gpu_util=round(util),
                     fb_used_mib=round(fb), workload=workload)


def _number(value: Any, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Invalid("invalid_field", f"{field}: {value!r} is not a number")
    if not low <= value <= high:
        raise Invalid("invalid_field", f"{field}: {value!r} is not within {low:g}-{high:g}")
    return float(value)


def _int(obj: dict, name: str, default: int | None, prefix: str = "") -> int:
    value = obj.get(name, default)
    if value is None:
        raise Invalid("missing_field", f"{prefix}{name}: missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Invalid("invalid_field", f"{prefix}{name}: {value!r} is not an integer of zero or more")
    return value


def _text(obj: dict, name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value:
        raise Invalid("missing_field" if value is None else "invalid_field", f"{name}: must be a non-empty string")
    return value


def _list(obj: dict, name: str) -> list:
    value = obj.get(name)
    if not isinstance(value, list):
        raise Invalid("invalid_field", f"{name}: must be a list")
    return value
