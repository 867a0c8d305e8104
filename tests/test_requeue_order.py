"""Where a workload ordered out goes back in its queue. Kueue orders a queue by each workload's
creation time (``workload.Ordering.GetQueueOrderTimestamp``): a preempted workload goes back where
it was, ahead of the work queued after it, and only one evicted because its pods were not ready in
time is queued from its eviction (``waitForPodsReady.requeuingStrategy.timestamp: Eviction``, the
default; ``Creation`` keeps its place too). gangway queued every workload it ordered out from its
eviction, so a team's preempted job waited behind the jobs its team sent after it. Contracts read
now say Kueue's order (``Contract.requeue_in_place``) but for a workload ordered out for fair
sharing (below); one written before the field keeps the old order, so logs written then replay as
they were decided."""

from __future__ import annotations

import msgspec

from builders import LogBuilder, cluster_queue, contract, node, workload
from gangway.contract import load_contract_file
from gangway.events import catalogue as ev
from gangway.events.contract import PodsReady
from gangway.events.state import queue_key
from gangway.services.audit.replay import verify
from gangway.sim import Simulation
from test_contract_stories import FOUR_TEAMS, four_team_jobs, submit


def four_teams(requeue_in_place: bool | None = None) -> tuple[Simulation, list[str]]:
    """Teams a, b and c fill 512 GPUs with 30 jobs each (64 run, 26 wait); team d's 16 jobs take
    its guarantee back from 16 borrowers. Returns the simulation and the victims."""
    c = load_contract_file(FOUR_TEAMS)
    if requeue_in_place is not None:
        c = msgspec.structs.replace(c, requeue_in_place=requeue_in_place)
    sim = Simulation()
    sim.configure(c)
    sim.add_nodes([node(f"n{i:02}").gpus(8).cpu(96).obj() for i in range(64)])
    for team in "abc":
        submit(sim, four_team_jobs(team, 30))
    sim.run(until_ms=sim.now_ms + 60_000)
    start = len(sim.log)
    submit(sim, four_team_jobs("d", 16))
    sim.run(until_ms=sim.now_ms + 120_000)
    victims = [e.data.workload for e in sim.log[start:] if isinstance(e.data, ev.EvictionOrdered)]
    assert len(victims) == 16
    report = verify(sim.log)
    assert report.ok and report.verified == report.decisions, report.mismatches[:2]
    return sim, victims


def in_queue_order(state, prefix: str = "") -> list[str]:
    """The pending workloads (whose names start with ``prefix``) in queue order."""
    waiting = [state.workloads[n] for n in state.pending if n.startswith(prefix)]
    return [wl.spec.workload for wl in sorted(waiting, key=queue_key)]


def queue_of(sim: Simulation, team: str) -> list[str]:
    """Team ``team``'s pending workloads in queue order."""
    return in_queue_order(sim.state, f"team-{team}/")


def test_a_preempted_workload_goes_back_where_it_was_in_its_queue():
    assert load_contract_file(FOUR_TEAMS).requeue_in_place  # (a contract read now says Kueue's order)
    sim, victims = four_teams()
    teams = {v.split("/")[0][-1] for v in victims}
    assert len(teams) >= 2, victims
    for team in teams:
        theirs = [v for v in victims if v.startswith(f"team-{team}/")]
        order = queue_of(sim, team)
        # the victims (sent first, they ran) lead their queue, in the order they were sent
        assert order[:len(theirs)] == sorted(theirs, key=lambda w: int(w.rsplit("-", 1)[1])), (team, order)
        assert all(sim.state.workloads[w].attempt == 1 for w in theirs)


def test_a_contract_written_before_the_field_queues_them_from_their_eviction():
    sim, victims = four_teams(requeue_in_place=False)
    for team in {v.split("/")[0][-1] for v in victims}:
        theirs = set(v for v in victims if v.startswith(f"team-{team}/"))
        order = queue_of(sim, team)
        assert set(order[-len(theirs):]) == theirs, (team, order)
    # the field's default is the old order: a ConfigApplied recorded before it decodes so
    assert msgspec.json.decode(b"{}", type=ev.Contract).requeue_in_place is False


def rolled_back(pods_ready: PodsReady | None) -> list[str]:
    """w1 is admitted, placed and bound, then rolled back by the binder (its pods not ready in
    time: no preemptor, no order); w2, queued after it, waits. The queue's order afterwards."""
    c = contract(cluster_queue("q").gpus(8)).obj()
    c = msgspec.structs.replace(c, requeue_in_place=True, pods_ready=pods_ready)
    log = LogBuilder().configure(c).nodes(node("n0").gpus(8))
    log.queue(workload("w1").queue("q").gpus(8), workload("w2").queue("q").gpus(8)).admit("w1").place("w1").bind("w1")
    log.add(ev.WorkloadEvicted(workload="w1", attempt=0, reason="pods not ready within 5m"))
    assert log.state.workloads["w1"].phase == "pending"
    return in_queue_order(log.state)


def test_a_gang_rolled_back_for_its_pods_goes_from_its_eviction_unless_the_strategy_says_creation():
    assert rolled_back(None) == ["w2", "w1"]  # (Kueue's requeuingStrategy.timestamp: Eviction, its default)
    assert rolled_back(PodsReady()) == ["w2", "w1"]
    assert rolled_back(PodsReady(requeue_from_creation=True)) == ["w1", "w2"]


def test_the_consoles_wait_of_a_preempted_workload_counts_from_its_return_to_the_queue():
    """Its place in the queue is from its creation, but what it waited for its second admission
    is from its eviction (as Kueue's admission wait time counts from the requeue)."""
    from gangway.console.model import Folded
    c = msgspec.structs.replace(contract(cluster_queue("q").gpus(8)).obj(), requeue_in_place=True)
    log = LogBuilder().configure(c).nodes(node("n0").gpus(8))
    log.queue(workload("w1").queue("q").gpus(8)).admit("w1").place("w1").bind("w1")
    log.advance(3_600_000).add(ev.EvictionOrdered(workload="w1", preemptor="", based_on=log.offset, grace_ms=0,
                                                   reason="test order"))
    log.add(ev.WorkloadEvicted(workload="w1", attempt=0, reason="pods gone"))
    evicted_ms = log.state.workloads["w1"].requeued_ms
    assert log.state.workloads["w1"].queued_ms < evicted_ms - 3_600_000  # (its place: its creation)
    log.advance(5_000).admit("w1")
    folded = Folded()
    for env in log.envelopes:
        folded.add(env)
    first, second = folded.waits["q"]
    assert second == (log.state.workloads["w1"].admitted_ms - evicted_ms) / 1000 < 10


def test_the_rules_say_where_a_preempted_job_goes_back():
    from gangway.read import rules
    c = contract(cluster_queue("q").gpus(8)).obj()
    said = {flag: rules.as_text(rules.sections(msgspec.structs.replace(c, requeue_in_place=flag))) for flag in (True, False)}
    assert "A job preempted (or drained) goes back to its queue where it was, ahead of the jobs queued after it" in said[True]
    assert "A job preempted (or drained) goes back to its queue behind the jobs queued before its eviction" in said[False]


def test_one_preempted_for_fair_sharing_goes_back_from_its_eviction():
    """Kueue keeps its place too; gangway does not: kept at the head of its queue, a pair took turns
    preempting each other in the property tests once a third queue's admission moved the shares
    (w8 took w13's place for fair sharing, c then admitted a borrower, w13 took it back)."""
    from gangway.events.fold import _keeps_place
    from gangway.events.reasons import C
    c = msgspec.structs.replace(contract(cluster_queue("q").gpus(8)).obj(), requeue_in_place=True)
    order = ev.EvictionOrdered(workload="w", preemptor="p", based_on=0, grace_ms=0, reason="r")
    assert _keeps_place(c, msgspec.structs.replace(order, reason_code=C.RECLAIM_WITHIN_COHORT))
    assert not _keeps_place(c, msgspec.structs.replace(order, reason_code=C.FAIR_SHARING))
    assert _keeps_place(msgspec.structs.replace(c, requeue_in_place=False),
                        msgspec.structs.replace(order, reason_code=C.HAND_OVER_LAPSED))
