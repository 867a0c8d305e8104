"""A short fuzz run of the submission, telemetry and log decoders (the long one: `gangway bench
fuzz --examples 100000`, see README "Durability"): no crash, every input accepted or rejected with
a reason, the original bytes kept."""

from __future__ import annotations

from collections import Counter

import pytest

from gangway.benchmarks import fuzz

EXAMPLES = 250


@pytest.mark.parametrize("which", ["submission", "telemetry", "log"])
def test_every_generated_record_is_accepted_or_rejected_with_a_reason(which):
    tally: Counter = Counter()
    fuzz.run(EXAMPLES, which, tally)
    assert sum(tally.values()) >= EXAMPLES
    rejected = sum(n for outcome, n in tally.items() if outcome != "accepted")
    assert rejected > 0, tally
    if which != "log":  # the generators reach valid records too, not only garbage
        assert tally["accepted"] > 0, tally


def test_the_fuzz_bench_reports_every_decoder():
    result = fuzz.bench_fuzz(examples=30)
    assert set(result["decoders"]) == {"submission", "telemetry", "log"}
    assert "inputs" in fuzz.report(result)
