"""The whole pipeline on the real embedded broker, with the real services as OS processes.

Outside clients on the wire: confluent-kafka (librdkafka) produces the jobs and reads the
rejections and the raw log records; the official CloudEvents SDK reads what gangway writes.
One stack is shared (conftest.py); every test uses job names of its own and waits for its jobs.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timezone
from pathlib import Path

import msgspec
import pytest
from cloudevents.core.bindings import kafka as ce_kafka
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from cloudevents.v1 import http as ce_http
from cloudevents.v1.kafka import KafkaMessage, from_binary

from gangway.read.logfile import read_export, write_export
from outside_client import read_records
from gangway.demo import demo_file
from gangway.events import codec, topics
from gangway.events import catalogue as ev
from gangway.events.fold import apply
from gangway.events.quantity import MILLI
from gangway.events.resources import GPU, total_request
from gangway.events.state import HOLDS_NODES, State
from gangway.services.accounting.billing import log_identity
from gangway.services.accounting.ledger import MILLI_GPU_MS_PER_HOUR, Ledger, default_url
from gangway.services.audit.replay import verify
from gangway.services.runtime.shell import NICE
from gangway.services.submission.manifests import load_jobs, to_cloudevent_record
from gangway.services.submission.policy import MAX_BYTES

pytestmark = pytest.mark.broker

JOB_TYPE = ev.EVENT_TYPES[ev.JobSubmitted]
PIPELINE = [ev.WorkloadQueued, ev.WorkloadAdmitted, ev.PlacementDecided, ev.WorkloadBound, ev.WorkloadRunning,
            ev.WorkloadFinished]
#: Event types every run that schedules jobs puts on the log.
ALWAYS_ON_THE_LOG = {ev.ConfigApplied, ev.NodeObserved, *PIPELINE}


# --- what the log says ---------------------------------------------------------------------------


def first_of_each(envs: list[ev.Envelope], workload: str) -> list[type]:
    """The pipeline event types about ``workload``, in the order each first appears."""
    seen: list[type] = []
    for env in envs:
        if env.subject() == workload and type(env.data) in PIPELINE and type(env.data) not in seen:
            seen.append(type(env.data))
    return seen


def one(envs: list[ev.Envelope], kind: type, workload: str) -> ev.Envelope:
    found = [env for env in envs if isinstance(env.data, kind) and env.subject() == workload]
    assert len(found) == 1, f"expected one {kind.__name__} for {workload}, found {[e.offset for e in found]}"
    return found[0]


def applied_decisions(envs: list[ev.Envelope]) -> list[tuple[ev.Envelope, int]]:
    """Each decision the fold applied (not superseded, not a re-delivery), with the workload's attempt."""
    state, out = State(), []
    for env in envs:
        if not isinstance(env.data, ev.DECISION_TYPES):
            apply(state, env)
            continue
        wl = state.workloads.get(env.data.workload)
        attempt, applied_before = (wl.attempt if wl is not None else None), state.decisions
        apply(state, env)
        if state.decisions > applied_before:
            out.append((env, attempt))
    return out


def ended_allocations(envs: list[ev.Envelope]) -> dict[str, list[tuple[str, int, int, int]]]:
    """Per workload, each ended attempt as (team, gpu_milli, start_ms, end_ms), from folding the log.

    An attempt is billed from its WorkloadRunning to the WorkloadFinished, WorkloadEvicted or (once it
    held nodes) WorkloadWithdrawn that the fold applies (a zero-length interval if it never ran).
    """
    state, out = State(), {}
    for env in envs:
        data = env.data
        wl = state.workloads.get(getattr(data, "workload", ""))
        before = (wl.phase, wl.attempt, wl.started_ms) if wl is not None else None
        apply(state, env)
        if before is None or not isinstance(data, (ev.WorkloadFinished, ev.WorkloadEvicted, ev.WorkloadWithdrawn)):
            continue
        phase, attempt, started = before
        if isinstance(data, ev.WorkloadEvicted):  # (requeued: its next attempt; or ended, withdrawn meanwhile)
            ended = wl.attempt == attempt + 1 or wl.withdrawn is not None
        else:
            ended = wl.phase == "finished" and (isinstance(data, ev.WorkloadFinished) or phase in HOLDS_NODES)
        if ended and phase != "finished":
            gpu = total_request(wl.spec.pod_sets).get(GPU, 0)
            start = env.time_ms if started is None else min(started, env.time_ms)
            out.setdefault(data.workload, []).append((wl.spec.namespace, gpu, start, env.time_ms))
    return out


def gpu_milli_ms(allocations: list[tuple[str, int, int, int]]) -> int:
    return sum(gpu * (end - start) for _team, gpu, start, end in allocations)


# --- a demo-like run, shared by the CloudEvents and replay tests --------------------------------


@pytest.fixture(scope="session")
def demo_run(gw):
    """The demo's night jobs, then its morning canary once they run (so that it preempts)."""
    gw.wait_idle()
    night = load_jobs(Path(demo_file("jobs-night.yaml")).read_text(), "jobs-night.yaml")
    morning = load_jobs(Path(demo_file("jobs-morning.yaml")).read_text(), "jobs-morning.yaml")
    now = gw.stack.clock.now_ms()
    gw.produce(to_cloudevent_record(j, "it/demo", now) for j in night)
    names = [f"{j.namespace}/{j.job_id}" for j in night]
    # The 40-GPU batch gang waits for the 40-GPU research gang: the rest runs, borrowing serving's quota.
    starters = [n for n in names if n != "batch/embeddings-rebuild"]
    gw.wait_until("the night's jobs to run", lambda s, _e: all(
        n in s.workloads and s.workloads[n].started_ms is not None for n in starters), 30, about=names)
    gw.produce(to_cloudevent_record(j, "it/demo", gw.stack.clock.now_ms()) for j in morning)
    names += [f"{j.namespace}/{j.job_id}" for j in morning]
    gw.wait_finished(names, timeout_s=60)
    return names


# --- tests ---------------------------------------------------------------------------------------


def test_services_off_the_path_from_queued_to_running_yield_the_cpu(gw):
    """Accounting, placement (admission places gangs itself) and preemption run niced, so on a busy
    machine submission, admission and the binder get the CPU first (os.nice; field 19 of /proc/PID/stat)."""
    ours = os.nice(0)
    nice = {name: int(Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[16]) - ours
            for name, proc in gw.stack.children.items()}
    assert {name: nice[name] for name in ("submission", "admission", "binder")} == dict.fromkeys(
        ("submission", "admission", "binder"), 0)
    # (10, 10 and 19: shell.NICE; niceness stops at 19, so a runner already niced sees less)
    assert (nice["placement"], nice["preemption"], nice["accounting"]) == tuple(
        min(19, ours + NICE[name]) - ours for name in ("placement", "preemption", "accounting"))
    assert min(NICE.values()) >= 10


@pytest.mark.both_brokers
def test_jobs_from_an_outside_client_run_in_binary_structured_and_plain_json_mode(gw):
    u = gw.uid()
    binary = gw.job(f"binary-{u}", namespace="research", gpus=2, runtime_s=60)
    structured = gw.job(f"structured-{u}", namespace="batch", gpus=1, count=2, runtime_s=90)
    plain = gw.job(f"plain-{u}", namespace="serving", gpus=4, runtime_s=30.25)
    attrs = lambda doc: {"type": JOB_TYPE, "source": "it/confluent-kafka", "id": f"ce-{doc['job_id']}",  # noqa: E731
                         "subject": doc["job_id"], "datacontenttype": "application/json"}
    as_binary = ce_kafka.to_binary_event(CloudEvent(attrs(binary), binary))
    as_structured = ce_kafka.to_structured_event(CloudEvent(attrs(structured), structured))
    assert "ce_type" in as_binary.headers and not any(h.startswith("ce_") for h in as_structured.headers)
    offsets = gw.produce([
        (b"binary", as_binary.value, list(as_binary.headers.items())),
        (b"structured", as_structured.value, list(as_structured.headers.items())),
        (b"plain", msgspec.json.encode(plain), None),
    ])
    docs = {f"research/binary-{u}": binary, f"batch/structured-{u}": structured, f"serving/plain-{u}": plain}
    gw.wait_finished(docs, timeout_s=30)

    envs = gw.envs
    for (workload, doc), offset in zip(docs.items(), offsets, strict=True):
        assert first_of_each(envs, workload) == PIPELINE, gw.lines(gw.about([workload]))
        queued = one(envs, ev.WorkloadQueued, workload).data
        assert queued.submission == f"{topics.SUBMISSIONS}/0/{offset}"
        assert queued.runtime_ms == round(doc["runtime_seconds"] * 1000)
        assert queued.pod_sets[0].count == doc["pod_sets"][0]["count"]
        assert queued.pod_sets[0].resources == {"cpu": 2000, "memory": 8 * 2**30 * MILLI,
                                                GPU: doc["pod_sets"][0]["resources"][GPU] * MILLI}
        running = one(envs, ev.WorkloadRunning, workload)
        finished = one(envs, ev.WorkloadFinished, workload)
        assert finished.time_ms - running.time_ms == queued.runtime_ms, "the runtime is exact in cluster time"
        assert gw.state.workloads[workload].attempt == 0
    assert not [rec for rec, env in gw.rejections() if rec.key in (b"binary", b"structured", b"plain")]


def _bad_records(u: str) -> list[tuple[str, bytes, bytes, list[tuple[str, bytes]] | None]]:
    """(expected reason, key, value, headers) for every kind of bad input the submission policy knows."""
    def plain(**changes) -> bytes:
        doc = {"job_id": f"bad-{u}", "namespace": "research", "queue": "default",
               "pod_sets": [{"name": "main", "count": 1, "resources": {"nvidia.com/gpu": 1}}], "runtime_seconds": 30}
        doc.update(changes)
        return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()

    def ce(ce_type: bytes = JOB_TYPE.encode(), specversion: bool = True) -> list[tuple[str, bytes]]:
        headers = [("ce_specversion", b"1.0")] if specversion else []
        return headers + [("ce_id", f"bad/{u}".encode()), ("ce_source", b"it/bad"), ("ce_type", ce_type),
                          ("content-type", b"application/json")]

    extra = [("x-trace", b"\x00\x01\xfe\xff"), ("x-trace", b"again"), ("X-Empty", b"")]
    gpus = lambda amount: [{"name": "main", "count": 1, "resources": {"nvidia.com/gpu": amount}}]  # noqa: E731
    return [
        ("not_utf8", b'{"job_id": "caf\xe9", "namespace": "research"}', extra),
        ("oversized", b'{"job_id": "big", "pad": "' + b"x" * MAX_BYTES + b'"}', extra),
        ("malformed_json", b'{"job_id": "half", "namespace": ', extra),
        ("malformed_json", b"", None),
        ("malformed_cloudevent", plain(), ce(specversion=False)),
        ("malformed_cloudevent", json.dumps({"specversion": "1.0", "id": "x", "source": "it", "type": JOB_TYPE})
         .encode(), [("content-type", b"application/cloudevents+json")]),
        ("wrong_event_type", plain(), ce(b"io.gangway.workload.queued.v1") + extra),
        ("wrong_event_type", json.dumps({"specversion": "1.0", "id": "x", "source": "it",
                                         "type": "com.example.other", "data": {}}).encode(), None),
        ("missing_field", plain(queue=None), None),
        ("missing_field", plain(pod_sets=None), ce()),
        ("invalid_field", plain(job_id="Not_A_Kubernetes_Name"), None),
        ("invalid_field", plain(pod_sets=[{"name": "main", "count": "two", "resources": {"cpu": 1}}]), extra),
        ("bad_quantity", plain(pod_sets=gpus("lots")), None),
        ("bad_quantity", plain(pod_sets=[{"name": "main", "count": 1, "resources": {"memory": "12Qi"}}]), ce()),
        ("absurd_quantity", plain(pod_sets=gpus(1000)), None),
        ("absurd_quantity", plain(runtime_seconds=-5), None),
        ("unknown_queue", plain(queue="nope"), None),
        ("unknown_queue", plain(namespace="nobody"), None),
        ("unknown_priority_class", plain(priority_class="platinum"), ce()),
        ("no_quota", plain(pod_sets=[{"name": "main", "count": 1, "resources": {"example.com/fpga": 1}}]), None),
        ("topology_unsatisfiable", plain(pod_sets=[{"name": "main", "count": 1, "resources": {"nvidia.com/gpu": 1},
                                                    "topology": {"required": "example.com/no-such-label"}}]), None),
        ("unknown_job", json.dumps({"job_id": f"never-{u}", "namespace": "research"}).encode(),
         ce(b"io.gangway.job.withdrawn.v1")),
    ]


def test_every_bad_input_is_rejected_once_with_its_original_bytes_and_submission_keeps_running(gw):
    u = gw.uid()
    cases = [(reason, f"bad-{i}-{reason}-{u}".encode(), value, headers)
             for i, (reason, value, headers) in enumerate(_bad_records(u))]
    original = gw.job(f"dup-{u}", runtime_s=30)
    duplicate_key = f"bad-dup-{u}".encode()
    cases.append(("duplicate_job", duplicate_key, msgspec.json.encode(original), [("x-trace", b"\xff")]))
    after = gw.job(f"after-bad-{u}", runtime_s=30)
    # The original first, then every bad record, then a valid job: all in one go.
    offsets = gw.produce([(b"dup-original", msgspec.json.encode(original), None)]
                         + [(key, value, headers) for _reason, key, value, headers in cases]
                         + [(b"after-bad", msgspec.json.encode(after), None)])
    # Not here: malformed_yaml (the CLI's manifests, not Kafka records), no_config (the contract is in
    # force), internal_error (the shell's last resort for a bug), not_entitled (needs a tenant topic:
    # test_kafka_security.py), namespace_not_selected (the demo's queues select every namespace:
    # test_namespace_entitlement.py) and kubernetes_object (a withdrawal of a job made from a Kubernetes
    # object: test_submission_policy.py).
    reasons_known = set(ev.RejectionReason.__args__) - {"malformed_yaml", "no_config", "internal_error",
                                                        "not_entitled", "namespace_not_selected", "kubernetes_object"}
    assert {reason for reason, *_ in cases} == reasons_known, "a bad-input kind is not covered"

    gw.wait_rejections([key for _r, key, _v, _h in cases])
    gw.wait_finished([f"research/dup-{u}", f"research/after-bad-{u}"], timeout_s=30)
    gw.rejections()  # a second rejection of any record would show up by now
    by_key: dict[bytes, list[ev.JobRejected]] = {}
    records: dict[bytes, list] = {}
    for rec, env in gw.rejected:
        by_key.setdefault(env.data.original_key, []).append(env.data)
        records.setdefault(env.data.original_key, []).append(rec)
    for (reason, key, value, headers), offset in zip(cases, offsets[1:-1], strict=True):
        found = by_key.get(key, [])
        assert len(found) == 1, f"{key!r}: expected one JobRejected, got {[(r.reason, r.message) for r in found]}"
        rejected = found[0]
        assert rejected.reason == reason, f"{key!r}: {rejected.reason} ({rejected.message}), expected {reason}"
        assert rejected.message
        assert rejected.original == value, f"{key!r}: original value not byte-exact"
        assert rejected.original_key == key
        assert rejected.original_headers == list(headers or []), f"{key!r}: headers not byte-exact"
        assert rejected.submission == f"{topics.SUBMISSIONS}/0/{offset}"
        assert records[key][0].key == rejected.job_id.encode(), "rejections are keyed by the job id they name"
    assert by_key[duplicate_key][0].job_id == f"dup-{u}"
    assert b"dup-original" not in by_key and b"after-bad" not in by_key
    # A job refused at submission is not on the log: `gangway explain` finds its rejections instead.
    explained = gw.cli("explain", f"research/bad-{u}")
    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert "rejected (topology_unsatisfiable)" in explained.stdout, explained.stdout
    assert "example.com/no-such-label" in explained.stdout and f"{topics.SUBMISSIONS}/0/" in explained.stdout
    # Nothing bad became a workload, and the submission service is still the one that started.
    bad_positions = {f"{topics.SUBMISSIONS}/0/{offset}" for offset in offsets[1:-1]}
    assert not [e for e in gw.envs if isinstance(e.data, ev.WorkloadQueued) and e.data.submission in bad_positions]
    assert gw.stack.restarts.get("submission", 0) == 0
    assert first_of_each(gw.envs, f"research/after-bad-{u}") == PIPELINE


def test_the_same_job_name_in_two_namespaces_is_two_workloads_and_a_duplicate_is_rejected(gw):
    u = gw.uid()
    research, batch = gw.job(f"twin-{u}", namespace="research", gpus=2), gw.job(f"twin-{u}", namespace="batch")
    again = gw.job(f"twin-{u}", namespace="research", gpus=1)
    gw.produce([(b"twin-research", msgspec.json.encode(research), None),
                (b"twin-batch", msgspec.json.encode(batch), None),
                (b"twin-research-again", msgspec.json.encode(again), None)])
    state = gw.wait_finished([f"research/twin-{u}", f"batch/twin-{u}"])
    assert state.workloads[f"research/twin-{u}"].spec.cluster_queue == "research"
    assert state.workloads[f"batch/twin-{u}"].spec.cluster_queue == "batch"
    assert total_request(state.workloads[f"research/twin-{u}"].spec.pod_sets)[GPU] == 2 * MILLI, \
        "the duplicate did not replace the first"
    rejected = gw.wait_rejections([b"twin-research-again"])
    assert [r.reason for r in rejected[b"twin-research-again"]] == ["duplicate_job"]
    assert f"research/twin-{u}" in rejected[b"twin-research-again"][0].message
    assert b"twin-batch" not in rejected and b"twin-research" not in rejected
    queued = [e.data.workload for e in gw.envs if isinstance(e.data, ev.WorkloadQueued) and u in e.data.workload]
    assert sorted(queued) == [f"batch/twin-{u}", f"research/twin-{u}"]


def test_a_producer_withdraws_a_running_job_and_a_waiting_one_and_a_job_it_never_sent_is_refused(gw):
    """`gangway withdraw`: a running job's GPUs come back once the binder has stopped its pods, a
    waiting one leaves its queue, and a name the log does not hold is refused (on gangway.rejections,
    as every bad record), each said by the command."""
    gw.wait_idle()
    u = gw.uid()
    # 64 GPUs: the first 40-GPU gang runs for a long time (10 min of wall time), the second waits behind it
    first, second = (gw.job(f"hold-{name}-{u}", namespace="research", runtime_s=360_000, pod_sets=[
        {"name": "worker", "count": 5, "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 8}}])
        for name in ("a", "b"))
    gw.produce_jobs([first, second])
    running, waiting = f"research/{first['job_id']}", f"research/{second['job_id']}"
    gw.wait_until(f"{running} running and {waiting} waiting", lambda s, _e: running in s.workloads and waiting in s.workloads
                  and s.workloads[running].phase == "running" and s.workloads[waiting].phase == "pending", 30)
    said = gw.cli("withdraw", running, "--reason", "wrong data set")
    assert said.returncode == 0, said.stdout + said.stderr
    assert f"{running}: withdrawn (withdrawn by its producer (gangway/cli): wrong data set)" in said.stdout
    # its GPUs went to the gang that waited behind it
    gw.wait_until(f"{waiting} running", lambda s, _e: s.workloads[waiting].phase == "running", 30)
    state = gw.state
    assert state.workloads[running].phase == "finished" and state.workloads[running].withdrawn.endswith("wrong data set")
    told = gw.cli("explain", running)
    assert "withdrawal requested: withdrawn by its producer (gangway/cli): wrong data set" in told.stdout, told.stdout
    assert "now withdrawn: withdrawn by its producer (gangway/cli): wrong data set" in told.stdout, told.stdout
    third = gw.job(f"hold-c-{u}", namespace="research", runtime_s=360_000, pod_sets=[
        {"name": "worker", "count": 5, "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 8}}])
    gw.produce_jobs([third])
    queued = f"research/{third['job_id']}"
    gw.wait_until(f"{queued} waiting", lambda s, _e: queued in s.workloads and s.workloads[queued].phase == "pending", 30)
    # a request refused before is not this one's answer (the log's clock runs 600 times the command's)
    said = gw.cli("move", queued, "--queue", "typo")
    assert said.returncode == 1 and f"{queued}: refused: unknown_queue" in said.stdout, said.stdout + said.stderr
    said = gw.cli("withdraw", queued, waiting, f"research/never-sent-{u}")
    assert said.returncode == 1, said.stdout + said.stderr
    assert "unknown_queue" not in said.stdout, said.stdout
    assert f"{queued}: withdrawn (withdrawn by its producer (gangway/cli))" in said.stdout
    assert f"{waiting}: withdrawn" in said.stdout
    assert f"research/never-sent-{u}: refused: unknown_job: no job research/never-sent-{u} was submitted" in said.stdout
    gw.wait_idle()


@pytest.mark.both_brokers
def test_two_40_gpu_gangs_on_64_gpus_run_one_after_the_other_whole_without_deadlock(gw):
    gw.wait_idle()
    u = gw.uid()
    gangs = [gw.job(f"gang-{name}-{u}", namespace="research", runtime_s=600, pod_sets=[
        {"name": "master", "count": 1, "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 8}},
        {"name": "worker", "count": 4, "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 8}},
    ]) for name in ("a", "b")]
    gw.produce_jobs(gangs)
    names = [f"research/{g['job_id']}" for g in gangs]
    gw.wait_finished(names, timeout_s=40)

    envs = [e for e in gw.envs if e.subject() in names]
    for env in envs:
        if isinstance(env.data, ev.PlacementDecided):
            placed = {}
            for a in env.data.assignments:
                placed[a.pod_set] = placed.get(a.pod_set, 0) + a.count
            assert placed == {"master": 1, "worker": 4}, f"a placement covers part of a gang:\n{gw.lines([env])}"
    first, second = sorted(names, key=lambda n: one(gw.envs, ev.WorkloadRunning, n).offset)
    first_finished = one(gw.envs, ev.WorkloadFinished, first)
    applied = [(env, attempt) for env, attempt in applied_decisions(gw.envs) if env.subject() == second]
    second_admitted = [env for env, _ in applied if isinstance(env.data, ev.WorkloadAdmitted)]
    assert len(second_admitted) == 1 and second_admitted[0].offset > first_finished.offset, \
        f"the second gang was admitted while the first held its GPUs:\n{gw.lines(envs)}"
    # At every offset: never both gangs holding quota, never a node over-committed.
    state = State()
    for env in gw.envs:
        apply(state, env)
        assert sum(1 for n in names if n in state.active) <= 1, f"both gangs active at offset {env.offset}"
        assert all(v >= 0 for node in state.nodes.values() for v in node.free.values()), \
            f"a node is over-committed at offset {env.offset}"
    for name in names:
        assert first_of_each(gw.envs, name) == PIPELINE


def test_the_cloudevents_sdk_reads_every_event_on_the_log_and_the_structured_export(gw, demo_run, tmp_path):
    envs = list(gw.log())
    types_on_log = {type(e.data) for e in envs}
    assert ALWAYS_ON_THE_LOG <= types_on_log, f"missing: {ALWAYS_ON_THE_LOG - types_on_log}"
    assert {ev.EvictionOrdered, ev.WorkloadEvicted} <= types_on_log, \
        f"the demo-like run did not preempt:\n{gw.lines(gw.about(demo_run))}"
    sdk_types = set()
    for msg, env in zip(read_records(gw.bootstrap, topics.LOG, len(envs)), envs, strict=True):
        assert msg.offset() == env.offset
        message = KafkaMessage(headers=dict(msg.headers()), key=msg.key(), value=msg.value())
        legacy = from_binary(message)  # cloudevents.v1.kafka: the SDK's Kafka binding
        assert legacy["specversion"] == "1.0"
        assert legacy["id"] == env.id and legacy["type"] == env.type and legacy["source"] == env.source
        assert legacy["time"] == codec.format_time(env.time_ms)
        assert legacy.get("subject") == env.subject()
        assert legacy["datacontenttype"] == "application/json"
        assert legacy["partitionkey"] == topics.DEFAULT_CLUSTER.encode()
        assert legacy.get_data() == msgspec.to_builtins(env.data)
        core = ce_kafka.from_binary(ce_kafka.KafkaMessage(headers=dict(msg.headers()), key=msg.key(),
                                                          value=msg.value()), JSONFormat())
        assert (core.get_id(), core.get_type(), core.get_source(), core.get_subject()) == \
            (env.id, env.type, env.source, env.subject())
        assert core.get_time().tzinfo is not None
        assert round(core.get_time().astimezone(timezone.utc).timestamp() * 1000) == env.time_ms
        assert core.get_data() == msgspec.to_builtins(env.data)
        sdk_types.add(legacy["type"])
    assert sdk_types == {ev.EVENT_TYPES[t] for t in types_on_log}

    export = tmp_path / "log.jsonl"
    write_export(envs, str(export))
    lines = export.read_bytes().splitlines()
    assert len(lines) == len(envs)
    for line, env in zip(lines, envs, strict=True):
        structured = JSONFormat().read(None, line)  # the SDK's structured JSON reader
        assert (structured.get_id(), structured.get_type(), structured.get_source(), structured.get_subject()) == \
            (env.id, env.type, env.source, env.subject())
        assert round(structured.get_time().timestamp() * 1000) == env.time_ms
        assert structured.get_extension("logoffset") == env.offset
        assert structured.get_data() == msgspec.to_builtins(env.data)
        legacy = ce_http.from_json(line)
        assert (legacy["id"], legacy["type"], legacy["time"]) == (env.id, env.type, codec.format_time(env.time_ms))
    assert [e.id for e in read_export(str(export))] == [e.id for e in envs]


@pytest.mark.both_brokers
def test_replay_reproduces_every_decision_and_names_a_tampered_one(gw, demo_run, tmp_path):
    envs = list(gw.log())
    report = verify(envs)
    assert report.ok, "\n".join(str(m) for m in report.mismatches)
    decisions = sum(1 for e in envs if isinstance(e.data, ev.DECISION_TYPES))
    assert report.verified == report.decisions == decisions > 0
    assert report.events == len(envs)

    export = tmp_path / "log.jsonl"
    write_export(envs, str(export))
    done = gw.cli("replay", str(export))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{decisions} of {decisions} decisions reproduced" in done.stdout
    from_broker = gw.cli("replay")
    assert from_broker.returncode == 0, from_broker.stdout + from_broker.stderr

    lines = export.read_bytes().splitlines()
    admitted = next(e for e in envs if isinstance(e.data, ev.WorkloadAdmitted)
                    and e.data.workload == "research/llm-pretrain")
    for field, change in (("cluster_queue", lambda v: "batch"),
                          ("usage", lambda v: {**v, GPU: v[GPU] - 8 * MILLI})):
        obj = json.loads(lines[admitted.offset])
        assert obj["id"] == admitted.id and obj["logoffset"] == admitted.offset
        obj["data"][field] = change(obj["data"][field])
        tampered = tmp_path / f"tampered-{field}.jsonl"
        tampered.write_bytes(b"\n".join([*lines[:admitted.offset], json.dumps(obj).encode(),
                                         *lines[admitted.offset + 1:]]) + b"\n")
        done = gw.cli("replay", str(tampered))
        assert done.returncode == 1, f"tampered {field}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        assert "NOT REPRODUCED" in done.stdout
        assert f"offset {admitted.offset} {admitted.id}" in done.stdout, done.stdout


@pytest.mark.both_brokers
def test_a_killed_service_restarts_and_the_pipeline_goes_on_without_duplicate_decisions(gw):
    gw.wait_idle()
    u = gw.uid()
    batch_a = [gw.job(f"restart-a{i}-{u}", gpus=4, runtime_s=240) for i in range(6)]
    batch_b = [gw.job(f"restart-b{i}-{u}", namespace="batch", gpus=1, runtime_s=120) for i in range(4)]
    old = {name: gw.stack.children[name] for name in ("admission", "submission")}
    gw.produce_jobs(batch_a)
    for proc in old.values():  # mid-run: the jobs just went out
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    gw.produce_jobs(batch_b)
    gw.supervise()
    for name, proc in old.items():
        assert gw.stack.restarts[name] == 1 and gw.stack.children[name].pid != proc.pid
        assert not gw.pid_alive(proc.pid)
    names = [f"research/{j['job_id']}" for j in batch_a] + [f"batch/{j['job_id']}" for j in batch_b]
    gw.wait_finished(names, timeout_s=40, tick=gw.supervise)

    # A graceful stop snapshots. While placement is down the log grows past its snapshot (jobs are
    # queued, admitted and placed with their admissions, which need no placement service);
    # restarted, it resumes from the snapshot.
    placement = gw.stack.children["placement"]
    log_before = (gw.state_dir / "logs" / "placement.log").stat().st_size
    placement.send_signal(signal.SIGTERM)
    assert placement.wait(15) == 0
    snapshot = msgspec.msgpack.decode((gw.state_dir / "placement.snapshot").read_bytes(), type=State)
    batch_c = [gw.job(f"restart-c{i}-{u}", gpus=2, runtime_s=60) for i in range(2)]
    gw.produce_jobs(batch_c)
    names_c = [f"research/{j['job_id']}" for j in batch_c]
    gw.wait_until("the jobs to be placed with their admissions while placement is down", lambda st, _e: all(
        n in st.workloads and st.workloads[n].placement is not None and st.workloads[n].placement.with_admission
        for n in names_c), 20, about=names_c, tick=lambda: gw.assert_services_alive("placement"))
    assert gw.state.offset > snapshot.offset
    gw.supervise()
    assert gw.stack.restarts["placement"] == 1
    names += names_c
    gw.wait_finished(names, timeout_s=30, tick=gw.supervise)
    expected, deadline = f"resumed from snapshot at offset {snapshot.offset}", time.monotonic() + 30
    while True:  # the jobs needed no placement service: it may still be starting
        resumed = (gw.state_dir / "logs" / "placement.log").read_bytes()[log_before:].decode(errors="replace")
        if expected in resumed or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert expected in resumed, resumed
    assert gw.stack.restarts == {"admission": 1, "submission": 1, "placement": 1}, "a service died on its own"

    envs = gw.envs
    for name in names:
        queued = [e.offset for e in envs if isinstance(e.data, ev.WorkloadQueued) and e.data.workload == name]
        assert len(queued) == 1, f"{name} queued at offsets {queued}: a re-delivered submission counted twice"
    assert not [rec for rec, env in gw.rejections() if u in env.data.job_id], "a re-delivered job was rejected"
    applied = applied_decisions(envs)
    keys = [(type(env.data).__name__, env.data.workload, attempt) for env, attempt in applied]
    assert len(keys) == len(set(keys)), f"a decision applied twice: {sorted(k for k in keys if keys.count(k) > 1)}"
    decision_ids = [e.id for e in envs if isinstance(e.data, ev.DECISION_TYPES)]
    assert len(decision_ids) == len(set(decision_ids)), "a decision was appended twice"
    report = verify(envs)
    assert report.ok and report.verified == report.decisions, "\n".join(map(str, report.mismatches))


@pytest.mark.both_brokers
@pytest.mark.postgres
def test_accounting_bills_runtime_times_gpus_exactly_once_in_sqlite_and_postgresql(gw, request, tmp_path):
    try:
        pg_url = request.getfixturevalue("pg_url")
    except pytest.skip.Exception as exc:  # SQLite is still checked; the test reports the skip at the end
        pg_url, pg_missing = None, str(exc)
    gw.wait_idle()
    u = gw.uid()
    jobs = [gw.job(f"bill-r-{u}", namespace="research", gpus=3, count=2, runtime_s=150),
            gw.job(f"bill-b-{u}", namespace="batch", gpus=1, runtime_s=90),
            gw.job(f"bill-s-{u}", namespace="serving", gpus=2, runtime_s=210.5)]
    gw.produce_jobs(jobs)
    mine = {f"{j['namespace']}/{j['job_id']}": j for j in jobs}
    gw.wait_finished(mine, timeout_s=30)
    ledgers = {"sqlite": Ledger(default_url(str(gw.state_dir)))}
    pg_accounting = None
    try:
        if pg_url:
            ledgers["postgresql"] = Ledger(pg_url)
            pg_accounting = gw.service_process("accounting", tmp_path / "pg-accounting", {"GANGWAY_DB": pg_url})
            pg_accounting.start()
        _check_ledgers(gw, ledgers, mine, pg_accounting)

        # Restart the accounting services (kill -9): they refold the whole log and count nothing twice.
        stack_accounting = gw.stack.children["accounting"]
        stack_accounting.send_signal(signal.SIGKILL)
        stack_accounting.wait(10)
        gw.supervise()
        assert gw.stack.children["accounting"].pid != stack_accounting.pid
        if pg_accounting is not None:
            pg_accounting.kill()
            pg_accounting.start()
        late = gw.job(f"bill-late-{u}", namespace="research", gpus=1, runtime_s=120)
        gw.produce_jobs([late])
        mine[f"research/bill-late-{u}"] = late
        gw.wait_finished(mine, timeout_s=30)
        _check_ledgers(gw, ledgers, mine, pg_accounting)
    finally:
        if pg_accounting is not None:
            pg_accounting.stop()
        for ledger in ledgers.values():
            ledger.close()
    if not pg_url:
        pytest.skip(f"SQLite checked; PostgreSQL not: {pg_missing}")


def _check_ledgers(gw, ledgers: dict[str, Ledger], mine: dict[str, dict], pg_accounting) -> None:
    envs = list(gw.log())
    log_id, end = log_identity(envs[0]), envs[-1].offset
    for name, ledger in ledgers.items():
        gw.wait_until(f"the {name} ledger to reach offset {end}",
                      lambda _s, _e, ledger=ledger: ledger.position(log_id) >= end, 90,
                      tick=lambda: (gw.assert_services_alive(), pg_accounting and _alive(pg_accounting)))
    allocations = ended_allocations(envs)
    for workload, doc in mine.items():
        ps = doc["pod_sets"][0]
        runtime_ms = round(doc["runtime_seconds"] * 1000)
        assert [stop - begin for _t, _g, begin, stop in allocations.get(workload, [])] == [runtime_ms], \
            f"{workload} did not run once for its whole runtime:\n{gw.lines(gw.about([workload]))}"
        assert gpu_milli_ms(allocations[workload]) == runtime_ms * ps["count"] * ps["resources"][GPU] * MILLI
    expected_team: dict[str, int] = {}
    for allocs in allocations.values():
        expected_team[allocs[0][0]] = expected_team.get(allocs[0][0], 0) + gpu_milli_ms(allocs)
    for name, ledger in ledgers.items():
        rows = {r.workload: r for r in ledger.workload_usage(log_id)}
        assert set(rows) == set(allocations), f"{name}: ledger workloads differ from the log's"
        for workload, allocs in allocations.items():
            assert (rows[workload].attempts, rows[workload].gpu_milli_ms) == (len(allocs), gpu_milli_ms(allocs)), \
                f"{name}: {workload} billed {rows[workload]}, expected {len(allocs)} attempt(s), {gpu_milli_ms(allocs)}"
        team_total: dict[str, int] = {}
        for row in rows.values():
            team_total[row.team] = team_total.get(row.team, 0) + row.gpu_milli_ms
        assert team_total == expected_team, f"{name}: per-team GPU milli-ms"
        hours = {row.team: row.gpu_hours for row in ledger.team_usage(log_id)}
        assert hours == {team: total / MILLI_GPU_MS_PER_HOUR for team, total in expected_team.items()}


def _alive(service) -> None:
    if service.proc is not None and service.proc.poll() is not None:
        pytest.fail(f"the PostgreSQL accounting service exited with {service.proc.returncode}\n{service.log_tail()}")


def test_gangway_status_and_log_export_show_what_the_log_holds(gw, tmp_path):
    gw.wait_idle()
    export = tmp_path / "exported" / "log.jsonl"
    for _ in range(5):  # the stack is live: a clock tick may land between two reads; look again then
        envs = list(gw.log())
        status, done, printed = gw.cli("status"), gw.cli("log", "--export", str(export)), gw.cli("log")
        if len(list(gw.log())) == len(envs):
            break
    last = envs[-1].offset
    assert status.returncode == 0, status.stdout + status.stderr
    for node in sorted(gw.state.nodes):
        assert node in status.stdout
    for cq in ("research", "batch", "serving"):
        assert cq in status.stdout
    assert f"log offset {last};" in status.stdout
    assert f"{gw.state.decisions} decisions applied, {gw.state.superseded} superseded" in status.stdout

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(envs)} events written" in done.stdout
    exported = read_export(str(export))
    assert [(e.offset, e.id, e.type, e.time_ms) for e in exported] == \
        [(e.offset, e.id, e.type, e.time_ms) for e in envs]
    assert [e.data for e in exported] == [e.data for e in envs]

    assert printed.returncode == 0, printed.stdout + printed.stderr
    lines = printed.stdout.splitlines()
    assert len(lines) == len(envs)
    assert [int(line.split()[0]) for line in lines] == [e.offset for e in envs]


@pytest.mark.both_brokers
def test_seed_story_on_the_real_broker_2_gpu_jobs_are_packed_and_the_fine_tune_gets_one_nvlink_island(gw):
    """The demo's nodes are 8-GPU NVLink islands. Spread, eight 2-GPU jobs would leave 6 GPUs on every
    node and no home for an 8-GPU tensor-parallel fine-tune; packed, they leave whole nodes."""
    gw.wait_idle()
    u = gw.uid()
    smalls = [gw.job(f"small-{i}-{u}", gpus=2, runtime_s=3000) for i in range(8)]
    gw.produce_jobs(smalls)
    names = [f"research/{j['job_id']}" for j in smalls]
    gw.wait_until("the 2-GPU jobs to run", lambda s, _e: all(
        n in s.workloads and s.workloads[n].started_ms is not None for n in names), 30, about=names)
    tune = gw.job(f"fine-tune-{u}", gpus=8, runtime_s=60)
    tune["pod_sets"][0]["topology"] = {"required": "gangway.io/nvlink-island"}
    gw.produce_jobs([tune])
    name = f"research/{tune['job_id']}"
    state = gw.wait_finished([name, *names], timeout_s=60)
    assert {a.node for n in names for a in state.workloads[n].placement.assignments} and \
        len({a.node for n in names for a in state.workloads[n].placement.assignments}) == 2, "packed on two nodes"
    [placed] = state.workloads[name].placement.assignments
    assert placed.gpus == list(range(8)), f"the fine-tune spans islands:\n{gw.lines(gw.envs)}"
    decided = one(gw.envs, ev.PlacementDecided, name).data
    assert decided.fragmentation is not None and decided.reason.endswith(f"(main in NVLink island 0 of {placed.node})")
