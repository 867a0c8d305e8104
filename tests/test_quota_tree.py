"""The cohort tree (quota.py): what each queue can still take, as Kueue computes it.

Tables of (setup, queue → GPUs it can still take). The tree is built from the contract; usage is
added through ``QuotaView.add`` exactly as the fold does.
"""

from __future__ import annotations

import pytest

from builders import cluster_queue, contract, milli
from gangway.events.quota import QuotaStructure, QuotaView, fr_key
from gangway.events.reasons import ReasonCode
from gangway.events.resources import GPU

G = fr_key("default", GPU)


def view(c, used: dict[str, float]) -> QuotaView:
    v = QuotaView(QuotaStructure(c.obj()), {}, {})
    for queue, gpus in used.items():
        v.add(queue, {G: milli(gpus)})
    return v


def flat(b_lending=None, a_borrowing=None):
    return contract(cluster_queue("a").cohort("team").gpus(8, borrowing=a_borrowing),
                    cluster_queue("b").cohort("team").gpus(8, lending=b_lending), cluster_queue("solo").gpus(4))


def tree(c_lending=None):
    """org (own quota 8) ─┬─ ab ─┬─ a (4)
                          │      └─ b (4)
                          └─ c (4, lending limit c_lending)"""
    return (contract(cluster_queue("a").cohort("ab").gpus(4), cluster_queue("b").cohort("ab").gpus(4),
                     cluster_queue("c").cohort("org").gpus(4, lending=c_lending))
            .cohort("org", gpus=8).cohort("ab", parent="org"))


CASES = [
    ("a queue without a cohort has its nominal quota", flat(), {}, {"solo": 4}),
    ("a cohort member can take everything its cohort has unused", flat(), {}, {"a": 16, "b": 16}),
    ("what one member uses, the other cannot take", flat(), {"a": 12}, {"a": 4, "b": 4}),
    ("a borrowing limit caps what a member takes above its nominal", flat(a_borrowing=2), {}, {"a": 10}),
    ("a lending limit keeps the rest of a member's quota for itself", flat(b_lending=2), {}, {"a": 10, "b": 16}),
    ("even within its nominal, a member is short while others borrow it", flat(), {"a": 14}, {"b": 2}),
    ("the root cohort's own quota is lent to the whole tree", tree(), {}, {"a": 20, "c": 20}),
    ("a subtree's usage counts against its siblings' parent", tree(), {"a": 10}, {"b": 10, "c": 10}),
    ("a lending limit in a child of the root keeps its quota out of the pool", tree(c_lending=0), {},
     {"a": 16, "c": 20}),
    ("usage within a lending-limited queue's guarantee does not reach its parent", tree(c_lending=0), {"c": 4},
     {"a": 16, "c": 16}),
]


@pytest.mark.parametrize("name, c, used, expected", CASES, ids=[c[0] for c in CASES])
def test_available(name, c, used, expected):
    v = view(c, used)
    assert {q: v.available(q, G) / 1000 for q in expected} == expected


def test_giving_back_what_was_taken_restores_every_node():
    v = view(tree(c_lending=2), {"a": 7, "b": 3, "c": 5})
    for queue, gpus in (("a", 7), ("b", 3), ("c", 5)):
        v.add(queue, {G: milli(gpus)}, -1)
    assert all(value == 0 for table in (v.usage, v.cohort_usage) for row in table.values() for value in row.values())


def test_fit_names_what_is_borrowed_and_why_it_does_not_fit():
    v = view(flat(a_borrowing=2), {"b": 6})
    assert v.fit("a", {G: milli(9)}) == (True, {G: milli(1)}, None)
    ok, _, why = v.fit("a", {G: milli(11)})
    assert not ok and why.code == ReasonCode.OVER_BORROWING_LIMIT
    assert why.params == {"resource": GPU, "flavor": "default", "cluster_queue": "a", "wanted": "11", "nominal": "8",
                          "limit": "2"}
    assert why.message == "nvidia.com/gpu (default): 11 in use with it, over nominal 8 + borrowing limit 2 of a"


def test_a_view_over_copies_made_on_write_changes_neither_the_usage_it_reads_nor_its_copies():
    """``QuotaView.over`` (a cycle's trial view) and ``copy`` share the usage dictionaries until one
    of them writes: what each adds shows in it alone, and each still answers as a view built over
    deep copies would."""
    base = view(tree(), {"a": 3, "c": 5})  # c borrows 1 from org
    usage, cohort_usage = base.usage, base.cohort_usage
    before = ({k: dict(v) for k, v in usage.items()}, {k: dict(v) for k, v in cohort_usage.items()})
    trial = QuotaView.over(base.structure, usage, cohort_usage)
    trial.add("a", {G: milli(2)})
    twin = trial.copy()
    trial.add("a", {G: milli(2)})  # after the copy: the twin does not see it
    trial.add("b", {G: milli(4)})
    twin.add("a", {G: milli(1)})
    assert (usage, cohort_usage) == before  # the state's usage is untouched
    assert trial.usage["a"][G] == milli(7) and twin.usage["a"][G] == milli(6) and "b" not in twin.usage
    for got, deep in ((trial, view(tree(), {"a": 7, "c": 5, "b": 4})), (twin, view(tree(), {"a": 6, "c": 5}))):
        assert [got.available(q, G) for q in "abc"] == [deep.available(q, G) for q in "abc"]
