"""A decision log recorded by an older gangway still reads, replays and explains (tests/data/recorded).

The demo's log was recorded before decisions carried reason codes: its events are read through the
codec's versioning (records of ``.v1`` that lack the fields added since), every decision in it must
come out again from today's ``decide`` — scheduling behaviour has not changed — and today's reason
codes must render the very sentences recorded then.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gangway.events import catalogue as ev
from gangway.events.fold import apply
from gangway.events.reasons import DECISION_CODES, render
from gangway.events.state import State
from gangway.read.explain import explain
from gangway.read.logfile import read_export
from gangway.services.audit.replay import verify
from gangway.services.deciders import SERVICE_OF, propose

RECORDED = Path(__file__).parent / "data" / "recorded"


@pytest.fixture(scope="module")
def demo_log() -> list[ev.Envelope]:
    return read_export(str(RECORDED / "demo-log.jsonl"))


def test_the_recorded_demo_log_reads_as_todays_types(demo_log):
    assert len(demo_log) == 99 and [env.offset for env in demo_log] == list(range(99))
    decisions = [env.data for env in demo_log if isinstance(env.data, ev.DECISION_TYPES)]
    assert len(decisions) == 32
    # Recorded before reasons were codes: the sentence is all they carry.
    assert all(d.reason and d.reason_code is None and d.reason_params == {} for d in decisions)


def test_every_recorded_decision_is_reproduced(demo_log):
    report = verify(demo_log)
    assert report.mismatches == []
    assert (report.verified, report.decisions, report.superseded) == (32, 32, 0)


def test_todays_reason_codes_render_the_sentences_recorded_before_them(demo_log):
    """Re-derive each decision where it was made: its code and parameters say what was recorded in words."""
    state = State()
    wanted = {env.data.based_on for env in demo_log if isinstance(env.data, ev.DECISION_TYPES)}
    derived: dict[str, ev.Decision] = {}
    for env in demo_log:
        apply(state, env)
        if env.offset in wanted:
            for service in sorted({SERVICE_OF[t] for t in ev.DECISION_TYPES}):
                derived.update({pid: d for pid, _, d in propose(service, state)})
    for env in demo_log:
        if isinstance(env.data, ev.DECISION_TYPES):
            again = derived[env.id]
            assert again.reason_code in DECISION_CODES[type(again).__name__]
            assert render(again.reason_code, again.reason_params) == env.data.reason


def test_explain_still_tells_the_preempted_jobs_story(demo_log):
    victim = next(env.data for env in demo_log if isinstance(env.data, ev.EvictionOrdered))
    lines = explain(demo_log, victim.workload, forecast=False)
    [preempted] = [line for line in lines if "] preempted by" in line]
    assert f"preempted by {victim.preemptor}: reclaimWithinCohort Any" in preempted  # preemptor and rule
    assert f"grace period {victim.grace_ms / 1000:g} s" in preempted
    assert f"work lost {victim.work_lost_ms / 1000:g} s" in preempted and victim.work_lost_ms > 0
    assert lines[-1] == "now finished"
