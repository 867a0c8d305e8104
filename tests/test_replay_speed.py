"""The auditor's shortcuts give the answers of the plain replay: deriving only up to the decisions
recorded at an offset, and splitting the log between processes."""

from __future__ import annotations

import contextlib
import os
from unittest import mock

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gangway.events import catalogue as ev
from gangway.events.fold import apply
from gangway.events.state import State
from gangway.services.audit import replay
from gangway.services.audit.replay import verify
from gangway.services.admission.policy import decide_admission
from gangway.services.deciders import DECIDERS, propose, propose_until
from gangway.services.placement import fragmentation as _fragmentation, scoring as _scoring
from gangway.services.placement.policy import decide_placement, free_capacity
from gangway.services.preemption.policy import decide_preemption
from test_properties import actions, random_run
from test_replay import LOG, data, first, tampered

_PARSE, _SPECS_BUILD, _THRESHOLDS_BUILD = _scoring._parsed, _scoring._specs, _fragmentation._thresholds
_EFFECTS_BUILD = _scoring._effects
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    phases=(Phase.explicit, Phase.reuse, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(actions, st.randoms(use_true_random=False))
def test_deriving_up_to_the_wanted_decisions_is_a_prefix_of_the_whole_decide(steps, rng):
    """At every offset of a random run, for every service: asked for some of the ids ``propose``
    gives, ``propose_until`` gives exactly ``propose``'s items up to the last of them; asked for an
    id it never makes, all of them."""
    sim = random_run(steps)
    state = State()
    for env in sim.log:
        apply(state, env)
        for service in DECIDERS:
            whole = propose(service, state)
            ids = [pid for pid, _, _ in whole]
            if ids:
                wanted = set(rng.sample(ids, rng.randint(1, len(ids))))
                last = max(i for i, pid in enumerate(ids) if pid in wanted)
                assert _bytes(propose_until(service, state, wanted)) == _bytes(whole[:last + 1])
            assert _bytes(propose_until(service, state, {"never/made/0"})) == _bytes(whole)


def _bytes(items) -> list[bytes]:
    return [msgspec.json.encode([pid, time_ms, d]) for pid, time_ms, d in items]


def test_a_decision_made_after_others_is_still_found():
    """Two admissions at one offset: asked for the second, the first is derived on the way."""
    offsets = {}
    for env in LOG:
        if isinstance(env.data, ev.WorkloadAdmitted):
            offsets.setdefault(env.data.based_on, []).append(env.id)
    based_on, ids = next((o, ids) for o, ids in offsets.items() if len(ids) > 1)
    state = State()
    for env in LOG[:based_on + 1]:
        apply(state, env)
    got = [pid for pid, _, _ in propose_until("admission", state, {ids[-1]})]
    assert got[-1] == ids[-1] and ids[0] in got


def _report(report) -> tuple:
    return (report.events, report.decisions, report.verified, report.superseded,
            [(m.offset, m.id, m.service, m.why) for m in report.mismatches],
            msgspec.msgpack.encode(report.state))


def test_split_gives_each_worker_a_stretch_of_the_offsets():
    wanted = replay._wanted(LOG)
    bounds = replay.split(LOG, wanted, 3)
    assert len(bounds) == 2 and bounds == sorted(bounds)
    assert all(b in wanted for b in bounds)
    assert replay.split(LOG[:1], replay._wanted(LOG[:1]), 2) == []


def test_two_workers_report_what_one_does():
    one, two = verify(LOG), verify(LOG, workers=2)
    assert two.mismatches == [] and two.verified == two.decisions > 0
    assert _report(two) == _report(one)


def test_workers_report_tampering_anywhere_in_log_order():
    """Tampered decisions in both workers' stretches come back as one list in log order."""
    early, late = first(ev.EvictionOrdered), [e.offset for e in LOG if isinstance(e.data, ev.WorkloadAdmitted)][-1]
    log = tampered(early, data(grace_ms=1))
    log[late] = msgspec.structs.replace(log[late], time_ms=log[late].time_ms - 1)
    bounds = replay.split(log, replay._wanted(log), 2)
    assert log[early].data.based_on < bounds[0] <= log[late].data.based_on  # one in each stretch
    for workers in (2, 3):
        report = verify(log, workers=workers)
        assert [m.offset for m in report.mismatches] == [early, late]
        assert _report(report) == _report(verify(log))


def test_a_log_too_short_to_split_is_checked_here():
    assert _report(verify(LOG[:3], workers=4)) == _report(verify(LOG[:3]))


# --- the memos of the shared deciders ---------------------------------------------------------------


def _no_memos():
    """free_capacity builds every room, the scorer parses, builds its specs, table and thresholds,
    and scores every kind of node afresh."""
    from gangway.services.placement import fragmentation, policy, scoring

    def rooms(state):
        return {name: policy._room_of(n) for name, n in state.nodes.items()}, any(n.taints for n in state.nodes.values())

    def specs(node_models, restricted):
        scoring._SPECS.clear()
        return _SPECS_BUILD(node_models, restricted)

    def thresholds(table):
        fragmentation._THRESHOLDS.clear()
        return _THRESHOLDS_BUILD(table)

    def effects(*args):
        scoring._EFFECTS.clear()
        return _EFFECTS_BUILD(*args)

    return [mock.patch.object(policy, "_rooms", rooms), mock.patch.object(scoring, "_effects", effects),
            mock.patch.object(scoring, "_parsed", lambda key: (scoring._PARSED.clear(), _PARSE(key))[1]),
            mock.patch.object(scoring, "_specs", specs),
            mock.patch.object(fragmentation, "_table", lambda shapes, specs: fragmentation.ShapeTable.of(shapes, specs)),
            mock.patch.object(fragmentation, "_thresholds", thresholds)]


def _decisions_at_every_offset(log) -> list[bytes]:
    state, out = State(), []
    for env in log:
        apply(state, env)
        out.append(msgspec.json.encode([decide_placement(state), decide_admission(state), decide_preemption(state)]))
    return out


@SETTINGS
@given(actions)
def test_the_deciders_memos_change_no_decision(steps):
    """Placement, admission and preemption decide the same at every offset of random runs (nodes
    coming back as new objects, contracts changing) with the memos as without them."""
    log = random_run(steps).log
    with_memos = _decisions_at_every_offset(log)
    with contextlib.ExitStack() as stack:
        for patch in _no_memos():
            stack.enter_context(patch)
        assert _decisions_at_every_offset(log) == with_memos


def test_the_rooms_follow_a_node_observed_again():
    """A node observed again is a new object with its own free room: the rooms of the last call
    are not used for it, though the names and their number are the same."""
    state = State()
    for env in LOG:
        apply(state, env)
        if len(state.nodes) >= 2:
            break
    before = free_capacity(state)
    name = sorted(state.nodes)[0]
    node = state.nodes[name]
    apply(state, ev.Envelope(id="again", source="t", time_ms=state.time_ms, offset=state.offset + 1,
                             data=ev.NodeObserved(node=name, allocatable={**node.allocatable, "nvidia.com/gpu": 2000})))
    after = free_capacity(state)
    assert after[name].free is state.nodes[name].free and after[name].gpus == [1000, 1000]
    assert before[name].free is not after[name].free
    assert all(after[n] is before[n] for n in state.nodes if n != name)


def test_the_deciders_memos_change_no_decision_on_a_busy_cluster():
    """The bench's mixed gangs on a few nodes: the fragmentation score orders most placements."""
    from gangway.benchmarks.pipeline import simulated_log
    log = simulated_log(workloads=200, seed=3, nodes=8)
    with mock.patch.object(_scoring, "keys", wraps=_scoring.keys) as scored:
        with_memos = _decisions_at_every_offset(log)
    assert scored.call_count > 30  # the scorer is exercised, not skipped
    with contextlib.ExitStack() as stack:
        for patch in _no_memos():
            stack.enter_context(patch)
        assert _decisions_at_every_offset(log) == with_memos


def test_the_log_is_handed_back_to_the_garbage_collector():
    import gc
    assert gc.get_freeze_count() == 0
    verify(LOG)
    verify(LOG, workers=2)
    def stop(_n: int) -> None:
        assert gc.get_freeze_count() > 0, "the log is out of the collector's sight while it is replayed"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        verify(LOG, progress=stop)
    assert gc.get_freeze_count() == 0


def test_gangway_replay_with_two_workers_reproduces_every_decision(tmp_path):
    import subprocess
    import sys

    from gangway.read.logfile import write_export
    path = tmp_path / "log.jsonl"
    write_export(LOG, str(path))
    done = subprocess.run([sys.executable, "-m", "gangway", "replay", "--workers", "2", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    decisions = sum(isinstance(e.data, ev.DECISION_TYPES) for e in LOG)
    assert f"{decisions} of {decisions} decisions reproduced" in " ".join(done.stdout.split())
    refused = subprocess.run([sys.executable, "-m", "gangway", "replay", "--workers", "0", str(path)],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "must be 1 or more" in refused.stderr


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), st.integers(0, 3), max_size=3),
                          st.lists(st.sampled_from([0, 500, 1000]), max_size=3),
                          st.sampled_from(["", "A100", "H100"])), min_size=1, max_size=5))
def test_rooms_are_alike_exactly_when_their_kinds_are(rooms):
    from gangway.events.state import GPU_MODEL_LABEL
    from gangway.services.placement.policy import NodeRoom, _all_alike, _kind
    made = [NodeRoom(dict(free), list(slots), [], {GPU_MODEL_LABEL: model} if model else {}) for free, slots, model in rooms]
    assert _all_alike(made) == (len({_kind(room) for room in made}) == 1)


def test_workers_stop_when_the_replay_is_interrupted():
    import multiprocessing

    def stop(_n: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        verify(LOG, progress=stop, workers=2)
    assert multiprocessing.active_children() == []


def test_a_worker_that_dies_is_reported(monkeypatch):
    monkeypatch.setattr(replay, "_child", lambda *args: os._exit(3))
    with pytest.raises(RuntimeError, match="a replay worker died \\(exit code 3\\)"):
        verify(LOG, workers=2)


def _keys_from_scratch(live, shape, cpu, memory, gpus, models):
    """What ``scoring.keys`` gives, all in numpy from the nodes as they are (the offline scorer's way)."""
    import numpy as np

    from gangway.services.placement.fragmentation import Nodes, after_one_pod, fragmentation
    width = max(1, max(len(g) for g in gpus))
    gpu = np.array([list(g) + [0] * (width - len(g)) for g in gpus], dtype=np.int64)
    before = Nodes(np.array(cpu, dtype=np.int64), np.array(memory, dtype=np.int64) // _scoring.MIB_MILLI, gpu,
                   np.array([live.codes.get(m, 0) for m in models], dtype=np.int64))
    after = after_one_pod(before, shape)
    score = live.scorer.score(before, after, fragmentation(before, live.scorer.table))
    return list(zip(score.tolist(), after.gpu.sum(axis=1).tolist(), after.cpu.tolist()))


_GIB = 1024 * _scoring.MIB_MILLI
_pod_shape_key = st.tuples(st.sampled_from([0, 4000, 16000]), st.sampled_from([0, 8 * _GIB]),
                           st.sampled_from([500, 1000, 2000, 4000]), st.sampled_from(["", "A100", "A100|H100"]))
_node = st.tuples(st.integers(0, 64) .map(lambda c: c * 1000), st.integers(0, 512).map(lambda g: g * _GIB),
                  st.lists(st.sampled_from([0, 250, 500, 1000]), min_size=1, max_size=8), st.sampled_from(["", "A100", "H100"]))


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_pod_shape_key, st.integers(1, 10**7), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 10**6), st.lists(_node, min_size=1, max_size=6)), min_size=1, max_size=4))
def test_the_kept_effects_score_nodes_as_the_scorer_does_from_scratch(mix, calls):
    """``scoring.keys`` keeps what one more pod does to each kind of node per shape table and
    weighs it per call: the same keys as scoring the nodes from scratch, call after call (time
    passing, so the weights change while the table stays)."""
    pod_shapes = {f"{c}/{m}/{g}" + (f"/{models}" if models else ""): n for (c, m, g, models), n in mix.items()}
    for age_ms, nodes in calls:
        live = _scoring.scorer_of(pod_shapes, 0, age_ms, ["A100", "H100"])
        if live is None:
            continue
        for shape in {_scoring.shape_of(c, m, g) for c, m, g, _ in mix}:
            fits = [(c, m, g, model) for c, m, g, model in nodes if c >= shape.cpu and m // _scoring.MIB_MILLI >= shape.memory
                    and (max(g) >= shape.milli if shape.milli < 1000 else g.count(1000) >= shape.gpus)]
            if not fits:
                continue
            args = ([f[0] for f in fits], [f[1] for f in fits], [f[2] for f in fits], [f[3] for f in fits])
            assert _scoring.keys(live, shape, *args) == _keys_from_scratch(live, shape, *args)
