"""`gangway bench fuzz`: the submission and telemetry decoders under hypothesis.

Each decoder gets ``--examples`` generated records: raw bytes, JSON of every shape, JobSubmitted
(or CheckpointSaved) objects with fields mutated, structured and binary-mode CloudEvents with
headers of every sort. The property, checked on every one: no exception; a valid record is
accepted, anything else becomes a JobRejected with a reason code and a message, keeping the
original value, key and headers byte for byte. ``tests/test_fuzz_decoders.py`` runs the same
properties for a few seconds in ``make test``. Needs hypothesis (a test dependency).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangway.contract.kueue import load_contract
from gangway.events import codec
from gangway.events import catalogue as ev
from gangway.events.fold import apply
from gangway.events.state import State
from gangway.services.submission.policy import decide_submission
from gangway.services.submission.telemetry import decide_telemetry

JOB_TYPE = ev.EVENT_TYPES[ev.JobSubmitted]
CHECKPOINT_TYPE = ev.EVENT_TYPES[ev.CheckpointSaved]
KNOWN = "research/known-job"


def fuzz_state() -> State:
    """The demo contract in force and one running workload (so checkpoints can name it)."""
    path = Path(__file__).resolve().parents[1] / "demo" / "contract.yaml"  # the demo's three teams
    contract = load_contract(path.read_text(), str(path))
    state = State()
    apply(state, ev.Envelope(id="c", source="gangway/config", time_ms=1, offset=0,
                             data=ev.ConfigApplied(contract=contract, digest="d")))
    return state


# --- strategies --------------------------------------------------------------------------------

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)), max_leaves=12)
names = st.one_of(st.sampled_from(["research", "batch", "serving", "default", "train-1", "", "A", "a" * 300]),
                  st.text(max_size=12))
quantities = st.one_of(st.sampled_from(["1", "500m", "8", "1Gi", "64Gi", "0", "-1", "1e3", "2.5", "1Ki", "9" * 30]),
                       st.integers(-10, 10**12), st.floats(allow_nan=True), st.text(max_size=8), json_values)
resources = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "", "ephemeral-storage"]),
                            quantities, max_size=4)
topologies = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "required": st.one_of(st.none(), names), "preferred": st.one_of(st.none(), names),
    "slice_required": st.one_of(st.none(), names), "slice_size": st.one_of(st.none(), st.integers(-2, 40)),
}), json_values)
pod_sets = st.fixed_dictionaries({"name": names, "count": st.one_of(st.integers(-2, 20_000), json_values),
                                  "resources": st.one_of(resources, json_values)},
                                 optional={"min_count": st.one_of(st.none(), st.integers(-2, 20)),
                                           "topology": topologies})
jobs = st.fixed_dictionaries(
    {"job_id": st.one_of(names, st.just("sweep-1"), json_values),
     "namespace": st.one_of(st.sampled_from(["research", "batch", "serving"]), names),
     "queue": st.one_of(st.just("default"), names),
     "pod_sets": st.one_of(st.lists(pod_sets, max_size=3), json_values)},
    optional={"priority_class": st.one_of(st.none(), st.sampled_from(["research", "production", "nope"]), names),
              "runtime_seconds": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                                           st.integers(-5, 10**9)),
              "kind": st.one_of(st.just("Job"), json_values),
              "labels": st.one_of(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3), json_values),
              "unexpected": json_values})
valid_jobs = st.fixed_dictionaries(
    {"job_id": st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True),
     "namespace": st.sampled_from(["research", "batch", "serving"]), "queue": st.just("default"),
     "pod_sets": st.lists(st.fixed_dictionaries(
         {"name": st.sampled_from(["main", "worker", "launcher"]), "count": st.integers(1, 64),
          "resources": st.fixed_dictionaries({"cpu": st.sampled_from(["1", "500m", "8", 4])},
                                             optional={"nvidia.com/gpu": st.integers(1, 8),
                                                       "memory": st.sampled_from(["1Gi", "64Gi"])})}),
         min_size=1, max_size=2, unique_by=lambda p: p["name"])},
    optional={"priority_class": st.sampled_from(["research", "production", "best-effort"]),
              "runtime_seconds": st.floats(1, 86_400)})
jobs = st.one_of(valid_jobs, jobs)
checkpoints = st.fixed_dictionaries(
    {"workload": st.one_of(st.just(KNOWN), names, json_values)},
    optional={"step": st.one_of(st.integers(-5, 10**6), json_values),
              "saved_ms": st.one_of(st.integers(-5, 2**63), json_values), "extra": json_values})
checkpoints = st.one_of(st.fixed_dictionaries({"workload": st.just(KNOWN)}, optional={
    "step": st.integers(0, 10**6), "saved_ms": st.integers(0, 2**62)}), checkpoints)
times = st.one_of(st.just("2026-01-01T00:00:00.000Z"), st.text(max_size=30), json_values)


def structured(data: st.SearchStrategy, type_name: str) -> st.SearchStrategy:
    return st.fixed_dictionaries(
        {"specversion": st.one_of(st.just("1.0"), json_values), "data": data},
        optional={"id": st.one_of(st.just("x-1"), json_values), "source": st.one_of(st.just("me"), json_values),
                  "type": st.one_of(st.just(type_name), st.sampled_from(list(ev.TYPES_BY_NAME)), json_values),
                  "time": times, "datacontenttype": st.one_of(st.just("application/json"), json_values),
                  "logoffset": json_values})


header_names = st.one_of(st.sampled_from(["ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "ce_subject",
                                          "content-type", "CE_TYPE", "traceparent"]), st.text(max_size=10))
header_values = st.one_of(st.none(), st.binary(max_size=30), st.sampled_from(
    [b"1.0", JOB_TYPE.encode(), CHECKPOINT_TYPE.encode(), b"application/json", b"text/plain", b"me",
     b"2026-01-01T00:00:00.000Z", b"\xff\xfe", b""]))
header_lists = st.lists(st.tuples(header_names, header_values), max_size=7)
binary_headers = st.builds(lambda t, rest: [("ce_specversion", b"1.0"), ("ce_id", b"i"), ("ce_source", b"s"),
                                            ("ce_type", t)] + rest,
                           st.sampled_from([JOB_TYPE.encode(), CHECKPOINT_TYPE.encode(), b"nope"]), header_lists)


def _encode(obj) -> bytes:
    try:
        return msgspec.json.encode(obj)
    except (OverflowError, ValueError, TypeError):
        return b"{}"


def records(data: st.SearchStrategy, type_name: str) -> st.SearchStrategy:
    """(value, key, headers) in every form a producer might send, good and bad."""
    values = st.one_of(
        st.none(), st.binary(max_size=300), json_values.map(_encode), data.map(_encode),
        structured(data, type_name).map(_encode),
        data.map(_encode).map(lambda b: b[: len(b) // 2]),  # cut short
        data.map(_encode).map(lambda b: b.replace(b'"', b"'", 1)),
    )
    headers = st.one_of(st.just([]), header_lists, binary_headers)
    return st.tuples(values, st.one_of(st.none(), st.binary(max_size=20)), headers)


# --- the properties ----------------------------------------------------------------------------


def _kept(result: ev.JobRejected, value, key, headers) -> None:
    assert result.reason and result.message, result
    assert result.original == (value if value is not None else b"")
    assert result.original_key == key
    assert result.original_headers == [(n, h if h is not None else b"") for n, h in headers]


def _check(result, record, accepted: tuple[type, ...], tally: Counter) -> None:
    """A decoder's answer: accepted as one of ``accepted``, or rejected with a reason and the bytes kept."""
    value, key, headers = record
    if isinstance(result, ev.JobRejected):
        _kept(result, value, key, headers)
        tally[f"rejected {result.reason}"] += 1
    else:
        assert isinstance(result, accepted), result
        tally["accepted"] += 1


def check_submission(state: State, record, tally: Counter) -> None:
    value, key, headers = record
    result = decide_submission(value, key, headers, state, {}, "gangway.submissions/0/7")
    _check(result, record, (ev.WorkloadQueued,), tally)


def check_telemetry(state: State, record, tally: Counter) -> None:
    value, key, headers = record
    result = decide_telemetry(value, key, headers, state, "gangway.telemetry/0/7")
    _check(result, record, (ev.CheckpointSaved, ev.GpuTelemetry, ev.WorkloadProgress), tally)


def check_log_record(record, tally: Counter) -> None:
    value, _, headers = record
    try:
        codec.from_log_record(value, headers, 3)
        tally["accepted"] += 1
    except codec.CodecError as exc:
        assert exc.reason
        tally[f"quarantined {exc.reason}"] += 1


def running_state() -> State:
    """``fuzz_state`` with KNOWN queued, admitted, placed and running (checkpoints may name it)."""
    state = fuzz_state()
    job = ev.JobSubmitted(job_id="known-job", namespace="research", queue="default", pod_sets=[
        ev.PodSetRequest(name="main", count=1, resources={"cpu": "1", "nvidia.com/gpu": "1"})])
    queued = decide_submission(codec.encode_data(job), None, [], state, {}, "gangway.submissions/0/0")
    apply(state, ev.Envelope(id="q", source="gangway/submission", time_ms=2, offset=1, data=queued))
    return state


def run(examples: int, which: str, tally: Counter) -> None:
    """Check one decoder (submission, telemetry or log) on ``examples`` generated records."""
    opts = settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                    suppress_health_check=list(HealthCheck))
    if which == "submission":
        state = fuzz_state()
        test = given(records(jobs, JOB_TYPE))(lambda record: check_submission(state, record, tally))
    elif which == "telemetry":
        state = running_state()
        test = given(records(checkpoints, CHECKPOINT_TYPE))(lambda record: check_telemetry(state, record, tally))
    else:
        test = given(records(jobs, JOB_TYPE))(lambda record: check_log_record(record, tally))
    opts(_progress(test, which, tally))()


def _progress(test, which: str, tally: Counter, every: int = 5_000):
    """Print a line every ``every`` inputs (a long run shows how far it got)."""
    inner = test.hypothesis.inner_test

    def counted(record):
        inner(record)
        n = sum(tally.values())
        if n % every == 0:
            print(f"{which}: {n:,} inputs, no failure so far", flush=True)
    test.hypothesis.inner_test = counted
    return test


DECODERS = ("submission", "telemetry", "log")


def bench_fuzz(examples: int = 100_000, log_examples: int | None = None, only: str | None = None) -> dict:
    """``examples`` inputs for each input decoder (submission, telemetry); the log reader gets
    ``log_examples`` (default a fifth: it is the codec both of the others go through). ``only``:
    one decoder (to run them in parallel processes)."""
    counts = {"submission": examples, "telemetry": examples, "log": log_examples or max(1, examples // 5)}
    if only:
        counts = {only: examples}
    result: dict = {"examples_per_decoder": counts, "decoders": {}}
    for which, n in counts.items():
        tally: Counter = Counter()
        started = time.perf_counter()
        run(n, which, tally)
        result["decoders"][which] = {"inputs": sum(tally.values()), "seconds": time.perf_counter() - started,
                                     "outcomes": dict(tally.most_common())}
    result["ok"] = True  # any failing input raises, with hypothesis's shrunk example
    return result


def report(r: dict) -> str:
    lines = ["fuzzed decoders: no crash, every input accepted or rejected with a reason (original bytes kept)"]
    for name, d in r["decoders"].items():
        top = ", ".join(f"{k} {v:,}" for k, v in list(d["outcomes"].items())[:6])
        lines.append(f"  {name:<10} {d['inputs']:>9,} inputs in {d['seconds']:.0f} s: {top}")
    return "\n".join(lines)
