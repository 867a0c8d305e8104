"""Fair sharing: dominant resource shares with weights and flavor values, usage decay, preemption strategies.

Kueue's rules (concepts/fair_sharing): a queue's share is what it uses above its nominal quota over
what the cohort can lend, divided by its weight; borrowers are admitted lowest share first, and a
preemptor may take from a queue only while the strategies hold (LessThanOrEqualToFinalShare: its
share after admission ≤ the victim queue's share after the preemption; LessThanInitialShare: its
share after admission < the victim queue's share before).
"""

from __future__ import annotations

import pytest

from builders import LogBuilder, cluster_queue, contract, decide_pure, node, workload
from gangway.events.reasons import ReasonCode
from gangway.events.decay import average_at
from gangway.events.quota import fr_key
from gangway.events.resources import GPU
from gangway.services.admission.policy import decide_admission
from gangway.services.preemption.policy import decide_preemption

G = fr_key("default", GPU)


def wl(name: str, queue: str, gpus: float, priority: int = 0, pods: int = 1):
    return workload(name).queue(queue).priority(priority).pod_set("main", count=pods, gpus=gpus).obj()


def cohort(weights=(1, 1, 1), half_life_ms=None, strategies=(), preempt="Never", c_gpus=4) -> LogBuilder:
    """Queues a, b (4 GPUs nominal) and c (``c_gpus``), weights as given, share cohort "all"; 4 nodes of 8 GPUs."""
    queues = [cluster_queue(n).cohort("all").gpus(g).weight(w).preemption(reclaim=preempt)
              for n, w, g in zip("abc", weights, (4, 4, c_gpus))]
    c = contract(*queues).fair_sharing(*strategies, half_life_ms=half_life_ms)
    return LogBuilder().configure(c).nodes(*(node(f"n{i}").gpus(8) for i in range(4)))


def order(log: LogBuilder) -> list[str]:
    return [d.workload for d in decide_pure(decide_admission, log.state)]


def test_borrowers_go_lowest_share_first_not_first_come():
    # a borrows 2 already; a1 (queued first) would take a to 3/12 above nominal, b1 takes b to 1/12.
    log = cohort().running(wl("a0", "a", 6)).queue(wl("a1", "a", 1), wl("b1", "b", 5))
    assert order(log) == ["b1", "a1"]


def test_without_fair_sharing_borrowers_go_first_come():
    log = LogBuilder().configure(contract(*(cluster_queue(n).cohort("all").gpus(4) for n in "abc")))
    log.nodes(*(node(f"n{i}").gpus(8) for i in range(4)))
    log.running(wl("a0", "a", 6)).queue(wl("a1", "a", 1), wl("b1", "b", 5))
    assert order(log) == ["a1", "b1"]


def test_a_heavier_weight_borrows_at_a_lower_share():
    # Both borrow 2 of the 20 the cohort has; a weighs 2 (share 3/20/2 after) against b's 3/20.
    log = cohort(weights=(2, 1, 1), c_gpus=12).running(wl("a0", "a", 6), wl("b0", "b", 6))
    log.queue(wl("b1", "b", 1), wl("a1", "a", 1))
    assert order(log) == ["a1", "b1"]


def test_flavor_values_weigh_in_shares():
    # GPUs of flavor "default" weigh 3 in a's and b's shares alike, so the order stays by share.
    log = cohort()
    log.state.contract  # noqa: B018 - the contract is replaced below with weighted flavors
    c = contract(*(cluster_queue(n).cohort("all").gpus(4) for n in "abc")).fair_sharing()
    c.flavor_weight("default", GPU, 3)
    log = LogBuilder().configure(c).nodes(*(node(f"n{i}").gpus(8) for i in range(4)))
    log.running(wl("a0", "a", 6))
    from gangway.events.quota import QuotaView
    from gangway.events.resources import index_of

    idx = index_of(log.state.contract)
    v = QuotaView(idx.tree, log.state.usage, log.state.cohort_usage)
    assert v.share(idx.tree.queues["a"], {}, idx.weights) == 2000 * 3 * 1000 // 12_000  # 2 of 12, ×3


def test_usage_decay_remembers_a_burst_after_it_ended():
    log = cohort(half_life_ms=60_000).running(wl("a0", "a", 6, pods=2))
    log.advance(120_000).finish("a0")  # a borrowed 8 for two minutes, then stopped
    average = average_at(log.state, "a", log.state.time_ms)[G]
    assert 12_000 * 0.70 <= average <= 12_000 * 0.80  # 1 − 2^−2 of 12, give or take the steps
    log.queue(wl("a1", "a", 6), wl("b1", "b", 6))
    assert order(log) == ["b1", "a1"]  # a's burst counts against it though it holds nothing now


def test_usage_decay_forgets_after_many_half_lives():
    log = cohort(half_life_ms=1_000).running(wl("a0", "a", 6, pods=2))
    log.advance(10_000).finish("a0")
    assert average_at(log.state, "a", log.state.time_ms).get(G, 0) > 10_000
    assert average_at(log.state, "a", log.state.time_ms + 60_000).get(G, 0) == 0


@pytest.mark.parametrize("strategies, victims", [
    (("LessThanOrEqualToFinalShare",), ["a2"]),
    (("LessThanInitialShare",), ["a2"]),
])
def test_preemption_takes_from_the_queue_above_its_fair_share(strategies, victims):
    # Of the 20 GPUs, a borrows 8 (three workloads) and c uses 4; b wants 6: 2 GPUs must come back.
    log = cohort(strategies=strategies, preempt="Any", c_gpus=12)
    log.running(wl("a0", "a", 8), wl("a1", "a", 2), wl("a2", "a", 2), wl("c0", "c", 4))
    log.queue(wl("b1", "b", 6))
    orders = decide_pure(decide_preemption, log.state)
    assert sorted(o.workload for o in orders) == victims
    assert all(o.reason_code == ReasonCode.FAIR_SHARING and o.reason_params["victim_queue"] == "a" for o in orders)
    assert all(o.reason.startswith("fair sharing: a is above its fair share") for o in orders)


def test_no_preemption_when_the_preemptor_would_end_above_the_victims_share():
    # Of 16 GPUs, a borrows 2; b asks for 8 (4 above nominal): b's share after (4/16) is above a's
    # share before (2/16) and after any eviction.
    log = cohort(strategies=("LessThanOrEqualToFinalShare", "LessThanInitialShare"), preempt="Any", c_gpus=8)
    log.running(wl("a0", "a", 6), wl("c0", "c", 4), wl("x", "c", 0.5))
    log.queue(wl("b1", "b", 8, priority=5))
    assert [o.workload for o in decide_pure(decide_preemption, log.state)] == []


def test_a_queue_of_weight_zero_borrows_last():
    # Kueue's docs: "a weight of 0 represents an infinite share value: the queue is always at a
    # disadvantage compared to others". a (weight 0) queued first; b's borrower still goes first.
    log = cohort(weights=(0, 1, 1), c_gpus=12).running(wl("a0", "a", 4), wl("b0", "b", 4))
    log.queue(wl("a1", "a", 1), wl("b1", "b", 1))
    assert order(log) == ["b1", "a1"]


def test_a_queue_of_weight_zero_is_preempted_first():
    log = cohort(weights=(0, 1, 1), strategies=("LessThanOrEqualToFinalShare",), preempt="Any", c_gpus=4)
    log.running(wl("a0", "a", 6), wl("b0", "b", 6))  # both borrow 2 of the 12
    log.queue(wl("c0", "c", 4))                         # c reclaims its 4: one borrower must give way
    assert [o.workload for o in decide_pure(decide_preemption, log.state)] == ["a0"]
