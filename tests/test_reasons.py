"""Reasons are data: every code has its sentence, and the sentences are only words.

Rewording a template changes what people read and nothing a program decides on: explain and status
classify by code, preemption chooses its victims by code, the audit compares codes.
"""

from __future__ import annotations

import string

import pytest

from gangway.events import reasons
from gangway.events.reasons import CLAUSES, MESSAGES, ReasonCode, reason, render
from gangway.read.explain import explain, pending_report
from gangway.services.audit.replay import verify
from gangway.services.preemption.policy import decide_preemption
from builders import decide_pure
from test_explain_rules import CASES
from test_fair_sharing import cohort
from test_preemption_rules import incident, wl


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_every_code_has_a_message_template():
    assert set(MESSAGES) == set(ReasonCode)
    assert all(MESSAGES[code].strip() for code in ReasonCode)


def test_every_clause_says_its_own_parameter():
    assert all(placeholders(clause) == {key} for key, clause in CLAUSES.items())


def test_a_reason_renders_its_template_with_its_parameters_and_present_clauses_only():
    why = reason(ReasonCode.FITS_NOMINAL, cluster_queue="q", partial="2 pods of main", chosen_flavor=None)
    assert why.params == {"cluster_queue": "q", "partial": "2 pods of main"}
    assert why.message == "fits nominal quota of q with 2 pods of main (partial admission)"
    with pytest.raises(KeyError):
        render(ReasonCode.STRICT_FIFO, {})  # a parameter its sentence needs is missing


@pytest.fixture
def reworded(monkeypatch):
    """Every template and clause said differently (and the code still in it, to tell them apart)."""
    monkeypatch.setattr(reasons, "MESSAGES", {
        code: f"REWORDED {code.value} " + " ".join("{%s}" % p for p in sorted(placeholders(t)))
        for code, t in MESSAGES.items()})
    monkeypatch.setattr(reasons, "CLAUSES", {key: f" +{key}={{{key}}}" for key in CLAUSES})


def classified() -> dict[str, tuple[str, str]]:
    out = {}
    for name, setup, who, _ in CASES:
        p = pending_report(setup().state, forecast=False)[who]
        out[name] = (p.code, p.reason)
    return out


def test_rewording_a_template_does_not_change_what_explain_classifies(request):
    before = classified()
    request.getfixturevalue("reworded")
    after = classified()
    assert {k: code for k, (code, _) in after.items()} == {k: code for k, (code, _) in before.items()}
    assert all(after[k][1] != before[k][1] and after[k][1].startswith("REWORDED") for k in before)


def test_rewording_a_template_changes_no_preemption(request):
    def orders():
        log = cohort(strategies=("LessThanOrEqualToFinalShare",), preempt="Any", c_gpus=12)
        log.running(wl("a0", "a", 8), wl("a1", "a", 2), wl("a2", "a", 2), wl("c0", "c", 4)).queue(wl("b1", "b", 6))
        return [(o.workload, o.preemptor, o.reason_code, o.reason_params) for o in decide_pure(decide_preemption, log.state)]
    before = orders()
    request.getfixturevalue("reworded")
    assert orders() == before and before and all(code == ReasonCode.FAIR_SHARING for _, _, code, _ in before)


def test_a_log_written_with_other_words_is_reported_and_explained_in_the_current_words(request):
    """The recorded sentence must be the one the code renders (strangerB #2: a forged sentence passed
    replay and explain showed it): a log whose templates were reworded since is reported sentence by
    sentence, nothing else differs, and explain says the code's current words."""
    sim = incident()
    sim.submit(wl("serve-1", "serving", 8, priority=1000, pods=2))
    sim.run(until_ms=sim.now_ms + 120_000)
    request.getfixturevalue("reworded")
    mismatches = verify(sim.log).mismatches
    assert mismatches and all(m.why.startswith("reason text is not its code's: recorded '") for m in mismatches)
    [preempted] = [line for line in explain(sim.log, "sweep-9", forecast=False) if "] preempted by" in line]
    assert "preempted by serve-1: REWORDED reclaim_within_cohort" in preempted  # rendered from the code
    assert "[reclaim_within_cohort]" in preempted


def test_the_published_rules_name_the_codes_the_log_records_them_under():
    import re

    from gangway.contract import load_contract_file
    from gangway.read import rules
    text = rules.as_text(rules.sections(load_contract_file("gangway/demo/contract.yaml")))
    named = {code for group in re.findall(r"\[([a-z_, ]+)\]", text) for code in group.split(", ")}
    assert named == {"within_queue_lower_priority", "reclaim_within_cohort", "reservation_held", "quota_held_for_another",
                     "reserved_for_another_gang", "topology_unsatisfiable", "defragmentation"}
    assert named <= {code.value for code in ReasonCode}


def test_every_decision_carries_its_code_and_the_sentence_is_their_rendering():
    from gangway.events import catalogue as ev
    from gangway.events.reasons import DECISION_CODES
    sim = incident()
    sim.submit(wl("serve-1", "serving", 8, priority=1000, pods=2))
    sim.run(until_ms=sim.now_ms + 120_000)
    coded = tuple(t for t in ev.DECISION_TYPES if t.__name__ in DECISION_CODES)  # an idle flag's reason is its figures
    decisions = [env.data for env in sim.log if isinstance(env.data, coded)]
    assert {type(d) for d in decisions} == set(coded)
    for d in decisions:
        assert d.reason_code in DECISION_CODES[type(d).__name__]
        assert d.reason == render(d.reason_code, d.reason_params)


def test_a_superseded_decision_keeps_its_code_and_explain_names_it():
    import msgspec

    from builders import LogBuilder, cluster_queue, contract, node, workload
    log = LogBuilder().configure(contract(cluster_queue("a").gpus(8))).nodes(node("n1").gpus(8))
    log.queue(workload("w").queue("a").gpus(4).obj())
    admission = log.admission("w")
    log.add(admission, event_id="admit-1").add(msgspec.structs.replace(admission, based_on=log.offset), event_id="admit-2")
    wl_state = log.state.workloads["w"]
    assert wl_state.superseded_code == ReasonCode.WORKLOAD_MOVED_ON
    assert wl_state.superseded == "admission admit-2: workload is admitted, not pending"
    lines = explain(log.envelopes, "w", forecast=False)
    assert any(line.endswith("admission superseded: [workload_moved_on] admission admit-2: workload is admitted, "
                             "not pending") for line in lines), lines
