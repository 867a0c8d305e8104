"""Explanations (why a job waits, what happened to it) and the published rules."""

from __future__ import annotations

import msgspec

import pytest

from builders import LogBuilder, cluster_queue, contract, line_of, node, workload
from gangway import cli
from gangway.read import rules
from gangway.contract import load_contract_file
from gangway.read.explain import explain, pending_report
from gangway.read.logfile import write_export
from test_preemption_rules import incident, wl

DEMO_CONTRACT = "gangway/demo/contract.yaml"


def one_queue(strict: bool = False) -> LogBuilder:
    q = cluster_queue("q").gpus(8).preemption(within="LowerPriority")
    if strict:
        q.strict_fifo()
    log = LogBuilder().configure(contract(q, cluster_queue("r").gpus(8)).priority_class("batch", 0, grace_ms=5_000))
    return log.nodes(node("n1").gpus(8), node("n2").gpus(8))


def job(name: str, queue: str, gpus: float, priority: int = 0, runtime_s: float | None = None, pods: int = 1):
    b = workload(name).queue(queue).priority(priority).pod_set("main", count=pods, gpus=gpus)
    return (b.runtime_s(runtime_s) if runtime_s else b).obj()


CASES = [
    ("over its quota", lambda: one_queue().running(job("r", "q", 4)).queue(job("w", "q", 8)), "w", "over_nominal_quota"),
    ("more than its quota could ever hold", lambda: one_queue().queue(job("w", "q", 8, pods=2)), "w",
     "quota_never_enough"),
    ("behind a higher priority that takes the room",
     lambda: one_queue().queue(job("hi", "q", 6, priority=5), job("lo", "q", 4)), "lo", "behind_higher_priority"),
    ("the head of a StrictFIFO queue blocks those behind it",
     lambda: one_queue(strict=True).running(job("r", "q", 4)).queue(job("big", "q", 8), job("small", "q", 1)), "small",
     "strict_fifo"),
    ("a head its quota can never hold does not block a StrictFIFO queue",
     lambda: one_queue(strict=True).queue(job("big", "q", 8, pods=2), job("small", "q", 1)), "small", "admissible"),
    ("fits now", lambda: one_queue().queue(job("w", "q", 2)), "w", "admissible"),
]


@pytest.mark.parametrize("name, setup, who, code", CASES, ids=[c[0] for c in CASES])
def test_every_pending_workload_has_a_reason(name, setup, who, code):
    assert pending_report(setup().state, forecast=False)[who].code == code


def test_a_workload_its_quota_can_never_hold_says_so_and_has_no_forecast():
    log = LogBuilder().configure(contract(cluster_queue("a").cohort("org").gpus(4, borrowing=2),
                                          cluster_queue("b").cohort("org").gpus(8)))
    log.nodes(node("n1").gpus(8), node("n2").gpus(8))
    name = "w"
    log.queue(job(name, "a", 7))  # a may use 4 + 2 borrowed at most
    report = pending_report(log.state)[name]
    assert (report.code, report.eta_ms) == ("quota_never_enough", None)
    assert report.reason == ("a can never hold it: it asks 7 of nvidia.com/gpu (default), and the most the queue can "
                             "use, with nothing else running, is 6")
    assert explain(log.envelopes, name)[-1] == "estimated start: never, unless the contract gives a more quota"


def test_explain_lists_each_flavor_of_the_queue_and_why_it_does_not_take_the_gang():
    """As Kueue lists each flavor's reason: a gang no flavor takes is told the first flavor's reason,
    and explain lists every flavor the queue tries, in order — one whose quota is in use, one whose
    quota could never hold it, one with quota but no node that holds a pod — and says which would
    take it now; a queue of one flavor lists none."""
    q = cluster_queue("q").flavor("h100").gpus(8).flavor("a100").gpus(4).flavor("t4").gpus(16)
    log = LogBuilder().configure(contract(q).flavor_labels("h100", {"pool": "h100"})
                                 .flavor_labels("a100", {"pool": "a100"}).flavor_labels("t4", {"pool": "t4"}))
    log.nodes(node("h").gpus(8).label("pool", "h100"), node("a").gpus(8).label("pool", "a100"),
              node("t1").gpus(4).label("pool", "t4"), node("t2").gpus(4).label("pool", "t4"))
    log.running(job("r", "q", 4))  # (in h100, its first flavor)
    log.queue(job("w", "q", 8))
    lines = explain(log.envelopes, "w")
    at = lines.index("flavors, in the queue's order:")
    assert lines[at + 1].startswith("  h100: nvidia.com/gpu (h100): 12 in use with it, over nominal quota 8"), lines
    assert lines[at + 2].startswith("  a100: q can never hold it: it asks 8 of nvidia.com/gpu (a100)"), lines
    assert lines[at + 3] == ("  t4: no node can ever take pod set main: no node it may use holds one of its pods even "
                             "with nothing running (a pod asks 8 nvidia.com/gpu where the most a node has is 4)"), lines
    assert lines[at - 1].startswith("estimated start: ") and len(lines) == at + 4
    # one that fits a flavor now but waits behind the head of a StrictFIFO queue: that flavor would take it
    strict = cluster_queue("s").flavor("h100").gpus(8).flavor("t4").gpus(16).strict_fifo()
    log = LogBuilder().configure(contract(strict).flavor_labels("h100", {"pool": "h100"}).flavor_labels("t4", {"pool": "t4"}))
    log.nodes(node("h").gpus(8).label("pool", "h100"), node("t1").gpus(4).label("pool", "t4"))
    log.running(job("r", "s", 4)).queue(job("head", "s", 6), job("small", "s", 1))
    lines = explain(log.envelopes, "small")
    assert "  h100: would take it now (it waits for the reason above)" in lines, lines
    assert not [line for line in explain(one_queue().queue(job("w", "q", 8, pods=2)).envelopes, "w")
                if line.startswith("flavors")]


def test_a_job_on_a_cluster_with_no_node_yet_is_told_so():
    """`gangway up` without a cluster file starts with no node: the reason says the cluster has none,
    not that a pod asks more than the "0" the largest node has."""
    log = LogBuilder().configure(contract(cluster_queue("q").gpus(8)))
    log.queue(job("w", "q", 1))
    assert line_of(explain(log.envelopes, "w"), "now pending") == (
        "now pending (no_matching_nodes): no node can ever take pod set main: the cluster has no node yet (none "
        "reported to the log)")


def test_positions_count_within_the_local_and_the_cluster_queue():
    log = one_queue().queue(job("a", "q", 8, pods=2), job("b", "r", 8, pods=2), job("c", "q", 8, pods=2))
    report = pending_report(log.state, forecast=False)
    assert [(report[n].lq_position, report[n].cq_position) for n in "abc"] == [(1, 1), (1, 1), (2, 2)]


def test_the_estimated_start_is_when_the_running_job_ends():
    log = one_queue().running(job("running", "q", 8, runtime_s=100))
    log.queue(job("next", "q", 8, runtime_s=10))
    started = log.state.workloads["running"].started_ms
    report = pending_report(log.state)
    assert report["next"].eta_ms == started + 100_000
    assert report["next"].code == "over_nominal_quota"


def test_the_forecast_leaves_the_state_alone():
    log = one_queue().running(job("running", "q", 8, runtime_s=100)).queue(job("next", "q", 8))
    before = log.state.offset, dict(log.state.pending)
    pending_report(log.state)
    assert (log.state.offset, dict(log.state.pending)) == before


def test_a_job_waiting_for_its_victims_says_so():
    log = one_queue().running(job("low", "q", 8)).queue(job("hi", "q", 8, priority=9))
    log.order_eviction("low", "hi")
    assert pending_report(log.state, forecast=False)["hi"].code == "waiting_for_victims"


# --- explain ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def incident_log():
    sim = incident()
    sim.submit(wl("serve-1", "serving", 8, priority=1000, pods=2))
    sim.run(until_ms=sim.now_ms + 120_000)
    return sim.log


def test_explain_a_preempted_job_names_the_preemptor_the_rule_and_the_work_lost(incident_log):
    lines = explain(incident_log, "sweep-9", forecast=False)
    [preempted] = [line for line in lines if "] preempted by" in line]
    assert "preempted by serve-1: reclaimWithinCohort Any: batch is borrowing" in preempted
    assert "its nominal quota for serve-1 [reclaim_within_cohort]; grace period" in preempted
    assert "work lost" in preempted and "grace period 30 s" in preempted
    assert any("evicted (attempt 1)" in line for line in lines)


def test_explain_the_preemptor_lists_whom_it_displaced(incident_log):
    lines = explain(incident_log, "serve-1", forecast=False)
    assert sum("ordered out to make room for it" in line for line in lines) == 2
    assert not any("evicted" in line for line in lines)  # the victims' evictions are theirs, not its
    assert lines[-1] == "now running"


def test_explain_a_pending_job_gives_reason_position_and_estimate(incident_log):
    lines = explain(incident_log, "sweep-8")
    assert lines[-3].startswith("now pending (")
    assert lines[-2].startswith("position 1 in LocalQueue ns/batch")
    assert lines[-1].startswith("estimated start: ")


def test_explain_an_unknown_job_says_so(incident_log):
    assert explain(incident_log, "nobody") == ["nobody: no such job in the log"]


def test_the_explain_command_reads_an_exported_log(incident_log, tmp_path, capsys):
    path = tmp_path / "log.jsonl"
    write_export(incident_log, path)
    assert cli.main(["explain", "sweep-9", "--log", str(path), "--no-forecast"]) == 0
    assert "preempted by serve-1" in capsys.readouterr().out
    assert cli.main(["explain", "nobody", "--log", str(path)]) == 1


@pytest.mark.parametrize("islands", [(), (4, 4)])
def test_a_placement_says_the_largest_free_island_only_where_some_node_declares_islands(islands):
    """On a cluster no node of which declares gangway.io/nvlink-islands every node counts as one
    island, and "largest free island N" said nothing true (a stranger's case): explain, the log's
    lines and the console's stream leave it out there, and keep it where islands exist."""
    from gangway.console import model
    from gangway.read.reports import log_line
    from gangway.sim import Simulation
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(16)).obj())
    sim.add_nodes([node(f"n{i}").gpus(8).islands(*islands).obj() for i in range(2)])
    sim.submit(workload("w").queue("q").gpus(2).obj())
    sim.run(until_ms=sim.now_ms + 1)
    [placed] = [line for line in explain(sim.log, "w", forecast=False) if "] placed:" in line]
    assert ("largest free island" in placed) == bool(islands), placed
    from gangway.read.describe import IslandWatch
    watch = IslandWatch()
    [logged] = [line for line in (log_line(env, 0, watch.see(env)) for env in sim.log) if "PlacementDecided" in line]
    folded = model.Folded()
    for env in sim.log:
        folded.add(env)
    [streamed] = [item["text"] for item in model.stream(folded) if item["kind"] == "PlacementDecided"]
    for line in (placed, logged, streamed):
        assert ("; largest free island 4" in line) == bool(islands), line  # 8 GPUs a node, in islands of 4
        assert "island" not in line or islands, line


# --- the published rules ------------------------------------------------------------------------------


def test_the_rules_say_each_teams_guarantee_limits_and_preemption_in_words():
    text = rules.as_text(rules.sections(load_contract_file(DEMO_CONTRACT)))
    assert "Flavor default: 32 nvidia.com/gpu, 384 cpu, 4Ti memory guaranteed; never borrows" in text
    assert "may borrow whatever cohort org leaves unused of nvidia.com/gpu" in text
    assert "takes back, by preempting any of their jobs, the quota other queues of cohort org borrowed" in text
    assert "production: priority 1000; 30 s grace when preempted." in text


@pytest.mark.parametrize("reclaim, said", [
    ("Never", "lends whatever it does not use, and gets it back as the borrowers' jobs end (it preempts none of them)"),
    ("LowerPriority", "takes it back when it needs it by preempting the borrowers' lower-priority jobs"),
    ("Any", "lends whatever it does not use, and takes it back by preemption when it needs it"),
])
def test_the_rules_say_how_a_queue_gets_back_what_it_lends_as_its_reclaim_policy_does(reclaim, said):
    """(Under reclaimWithinCohort Never the flavor line promised reclaim by preemption, which the
    queue's own line then denied.)"""
    c = contract(cluster_queue("a").cohort("all").gpus(8).preemption(reclaim=reclaim), cluster_queue("b").cohort("all").gpus(8))
    text = rules.as_text(rules.sections(c.obj()))
    assert said in text


@pytest.mark.parametrize("backfill, said, unsaid", [
    ({}, ["the first 8 jobs its cohort's quota keeps out (each cycle) have the quota that frees soonest held",
          "running work expected to end within 100 ms"], ["no quota is held"]),
    ({"quota_holds_per_tree": 1, "hand_over_within_ms": 250},
     ["the first job its cohort's quota keeps out has the quota", "expected to end within 250 ms"], []),
    ({"quota_holds_per_tree": 0, "hand_over_within_ms": 0},
     ["no quota is held for a job its cohort's quota keeps out (whatever fits goes first)"], ["take over"]),
])
def test_the_rules_say_what_backfill_keeps_for_waiting_jobs(backfill, said, unsaid):
    from gangway.events.contract import Backfill
    c = msgspec.structs.replace(contract(cluster_queue("a").cohort("all").gpus(8)).obj(), backfill=Backfill(**backfill))
    text = rules.as_text(rules.sections(c))
    assert all(s in text for s in said) and not any(s in text for s in unsaid), text


def test_the_rules_say_priority_aging_when_the_contract_sets_it():
    plain = contract(cluster_queue("a").gpus(8)).obj()
    assert "priority rises" not in rules.as_text(rules.sections(plain))
    text = rules.as_text(rules.sections(msgspec.structs.replace(plain, aging_ms_per_point=60_000)))
    assert ("A waiting job's priority rises one point for each 60 s it has waited, in the order jobs are admitted "
            "(and quota held) only: a job never waits behind one of higher priority queued more than 60 s a point "
            "of difference after it.") in text



def test_the_rules_say_a_moved_job_is_placed_again_at_once_and_none_is_preempted_back_when_the_contract_says():
    plain = contract(cluster_queue("a").gpus(8)).obj()
    assert "moved to make room" not in rules.as_text(rules.sections(plain))
    assert "could preempt the preemptor" not in rules.as_text(rules.sections(plain))
    text = rules.as_text(rules.sections(msgspec.structs.replace(plain, moved_first=True, no_preemption_back=True)))
    assert ("A job moved to make room for a gang blocked by scattered free GPUs keeps its quota and a place while it "
            "leaves, and is placed again at once, right behind that gang [defragmentation].") in text
    assert ("No job is preempted where one of the jobs preempted with it, back in its queue, could preempt the "
            "preemptor at once") in text
    proxy = "Nor for a job that a job waiting ahead of it in its own queue could preempt at once and replace"
    assert proxy not in text
    both = msgspec.structs.replace(plain, no_preemption_back=True, no_proxy_preemption=True)
    assert proxy in rules.as_text(rules.sections(both))
    undone = "Nor for a job that, once in, a job waiting in another queue of its cohort could preempt at once"
    assert undone not in rules.as_text(rules.sections(both))
    assert undone in rules.as_text(rules.sections(msgspec.structs.replace(both, no_preemption_undone=True)))


def test_the_rules_say_a_gpu_model_keeps_room_for_its_own_jobs_when_a_flavor_selects_one():
    models = (contract(cluster_queue("a").flavor("t4").gpus(8), cluster_queue("b").gpus(8))
              .flavor_labels("t4", {"nvidia.com/gpu.product": "T4"}).obj())
    said = "keeps off a model whose free GPUs are down to what the jobs that may use only that model will need"
    assert said in rules.as_text(rules.sections(msgspec.structs.replace(models, model_reserve=True)))
    assert said not in rules.as_text(rules.sections(models))  # (a contract recorded before the field)
    plain = contract(cluster_queue("a").gpus(8)).obj()
    assert said not in rules.as_text(rules.sections(msgspec.structs.replace(plain, model_reserve=True)))


@pytest.mark.parametrize("ready, said", [
    (None, None),
    ({"timeout_ms": 150_000, "recovery_timeout_ms": 90_000, "backoff_base_ms": 5_000, "backoff_max_ms": 600_000,
      "backoff_limit": 3},
     "On Kubernetes, a bound gang whose pods are not all running 150 s after its admission gives its nodes back and "
     "waits 5 s, doubling with each time in a row up to 600 s, before it is admitted again (after 3 in a row it is "
     "deactivated), behind the jobs queued before then; so does a running gang short of a pod for 90 s (Kueue's "
     "waitForPodsReady)"),
    ({}, "before it is admitted again (it is never deactivated for it), behind the jobs queued before then; a running "
         "gang short of a pod is left to its controller"),
    ({"requeue_from_creation": True}, "(it is never deactivated for it), where it was in its queue; a running gang"),
])
def test_the_rules_say_kueues_wait_for_pods_ready_when_the_contract_sets_it(ready, said):
    from gangway.events.contract import PodsReady
    c = msgspec.structs.replace(contract(cluster_queue("a").gpus(8)).obj(),
                                pods_ready=None if ready is None else PodsReady(**ready))
    text = rules.as_text(rules.sections(c))
    assert (said in text) if said else "waitForPodsReady" not in text, text


def test_the_rules_cover_limits_fair_sharing_minimum_runtimes_and_prices():
    c = (contract(cluster_queue("a").cohort("all").gpus(8, borrowing=4, lending=2).weight(2)
                  .borrow_within_cohort("LowerPriority", 10), cluster_queue("b").cohort("all").gpus(8))
         .priority_class("prod", 100, grace_ms=60_000, min_runtime_ms=600_000).fair_sharing(half_life_ms=3_600_000))
    text = rules.as_text(rules.sections(c.obj()))
    for said in ("may borrow at most 4 nvidia.com/gpu", "lends at most 2 nvidia.com/gpu",
                 "Fair sharing is on", "halving every 1 h", "Fair-sharing weight 2.",
                 "Across cohort all, fair sharing decides whose jobs it may preempt", "never preempted in its first 600 s"):
        assert said in text, said
    # (borrowWithinCohort is Kueue's classical preemption: fair sharing decides instead, as preemption does)
    assert "may preempt lower-priority jobs of priority at most 10" not in text
    mixed = rules.as_text(rules.sections(contract(cluster_queue("a").cohort("all").gpus(8, borrowing=0).cpu(64),
                                                  cluster_queue("b").cohort("all").gpus(8)).obj()))
    assert "never borrows nvidia.com/gpu; may borrow whatever cohort all leaves unused of cpu" in mixed


def test_the_rules_say_a_namespace_selector_a_cohorts_limits_and_a_weight_fair_sharing_ignores():
    """A stranger found `gangway rules` silent on a ClusterQueue's namespaceSelector, a Cohort's
    borrowingLimit/lendingLimit and a fairSharing.weight set while fair sharing is off."""
    from gangway.events.contract import Cohort, FlavorQuotas, LabelRequirement, LabelSelector, Namespace, Quota
    from gangway.events.resources import GPU
    selector = LabelSelector(match_labels={"team": "ml"}, match_expressions=[
        LabelRequirement(key="tier", operator="In", values=["gold", "silver"]),
        LabelRequirement(key="frozen", operator="DoesNotExist")])
    labeled = msgspec.structs.replace(cluster_queue("labeled").cohort("eng").gpus(8).weight(2).obj(),
                                      namespace_selector=selector)
    c = (contract(cluster_queue("open").cohort("root").gpus(8)).cluster_queue(labeled, local_queue=False)
         .local_queue("q", "labeled", namespace="ok").local_queue("q", "labeled", namespace="bronze").obj())
    eng = Cohort(name="eng", parent="root", fair_weight=3000, flavors=[
        FlavorQuotas("default", {GPU: Quota(nominal=4000, borrowing_limit=2000, lending_limit=1000)})])
    c = msgspec.structs.replace(c, cohorts=[Cohort(name="root"), eng], namespaces=[
        Namespace(name="ok", labels={"team": "ml", "tier": "gold"}),
        Namespace(name="bronze", labels={"team": "ml", "tier": "bronze"})])
    text = rules.as_text(rules.sections(c))
    for said in (
            "- Jobs are admitted only from namespaces with team=ml, tier in (gold, silver), no label frozen "
            "(its namespaceSelector); others are refused [namespace_not_selected].",
            "- LocalQueue bronze/q is in a namespace it does not select: its jobs are refused.",
            "- It has no namespaceSelector: jobs from every namespace are admitted (Kueue admits none; "
            "namespaceSelector: {} says every namespace).",
            "its queues may borrow at most 2 nvidia.com/gpu (default) from root between them; it lends at most "
            "1 nvidia.com/gpu (default) to root (keeping the rest for its queues at all times); fair-sharing weight 3 "
            "is set, but has no effect while fair sharing is off.",
            "- Fair-sharing weight 2 is set, but has no effect while fair sharing is off (the SchedulingPolicy's "
            "fairSharing.enable)."):
        assert said in text, said
    assert text.count("It has no namespaceSelector") == 1  # queue open only
    assert "fair-sharing weight 1" not in text.lower()  # the default weight is not news


def test_the_rules_say_which_topology_each_flavor_places_by_and_what_a_job_may_ask():
    from gangway.contract import load_contract
    from test_topology_levels import QUEUES, TAS
    t4 = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: t4}\n---\n"
    text = rules.as_text(rules.sections(load_contract(TAS + t4 + QUEUES)))
    assert ("Flavor gpus places gangs by Topology dc: kubernetes.io/hostname within example.com/pod within "
            "example.com/zone.") in text
    assert "On other flavors a level is any node label" in text
    assert "kueue.x-k8s.io/podset-required-topology" in text and "[topology_unsatisfiable]" in text
    plain = rules.as_text(rules.sections(load_contract_file(DEMO_CONTRACT)))
    assert "places gangs by Topology" not in plain and "A level is any node label" in plain


def test_the_rules_say_which_nodes_each_flavor_places_on_and_what_its_pods_tolerate():
    from gangway.events.contract import Toleration
    c = (contract(cluster_queue("q").flavor("spot").gpus(8)).flavor_labels("spot", {"pool": "spot"})
         .flavor_tolerations("spot", Toleration(key="spot", operator="Exists", effect="NoSchedule"),
                             Toleration(key="team", value="a")).obj())
    text = rules.as_text(rules.sections(c))
    assert "Flavor spot: nodes labelled pool=spot; its pods tolerate spot:NoSchedule, team=a" in text
    plain = rules.as_text(rules.sections(load_contract_file(DEMO_CONTRACT)))
    assert "Flavor default: any node." in plain and "tolerate" not in plain.split("Flavors: the nodes")[1].split("\n\n")[0]


def test_the_html_rules_escape_what_they_print(tmp_path):
    c = contract(cluster_queue("a<b>").gpus(1)).obj()
    page = rules.as_html(rules.sections(c))
    assert "a&lt;b&gt;" in page and "<b>" not in page.split("<body>")[1]


def test_the_rules_command_writes_html(tmp_path, capsys):
    out = tmp_path / "rules.html"
    assert cli.main(["rules", "--config", DEMO_CONTRACT, "--html", "--out", str(out)]) == 0
    assert out.read_text().startswith("<!doctype html>")


def test_a_blocked_gang_shows_its_reservation_and_a_small_job_shows_whose_it_is():
    log = LogBuilder().configure(contract(cluster_queue("q").gpus(64))).nodes(*(node(f"n{i}").gpus(8) for i in range(3)))
    log.running(job("busy", "q", 8, runtime_s=100), on=[("main", "n0", 1)])
    log.running(job("busy2", "q", 8, runtime_s=200), on=[("main", "n1", 1)])
    log.queue(job("big", "q", 8, pods=2, priority=5), job("small", "q", 4))
    report = pending_report(log.state)
    assert report["big"].code == "reservation_held" and "free by 20" in report["big"].reason
    assert report["small"].code == "reserved_for_another_gang" and "reserved for big" in report["small"].reason
    assert report["big"].eta_ms == log.state.workloads["busy"].started_ms + 100_000


def test_the_estimated_start_and_the_quota_hold_assume_the_same_runtime_for_work_that_declares_none():
    """A stranger's report: "quota held for it, free by <in an hour>" beside "estimated start: <in 10
    minutes>" for the same waiting job. Both now assume an hour for work that declares no runtime."""
    from gangway.events.codec import format_time
    from gangway.services.placement.policy import ASSUMED_RUNTIME_MS
    log = LogBuilder().configure(contract(cluster_queue("q").gpus(8))).nodes(node("n0").gpus(8))
    log.running(job("fill", "q", 8), on=[("main", "n0", 1)])
    log.queue(job("waiter", "q", 8))
    [said] = pending_report(log.state).values()
    end = log.state.workloads["fill"].started_ms + ASSUMED_RUNTIME_MS
    assert said.eta_ms == end, (format_time(said.eta_ms), format_time(end))
    assert "free by" not in said.reason or f"free by {format_time(end)}" in said.reason, said.reason


def test_the_rules_name_the_kubernetes_priority_classes_and_which_is_the_default():
    from gangway.events.contract import PodPriorityClass
    c = msgspec.structs.replace(contract(cluster_queue("q").gpus(8)).obj(), pod_priority_classes=[
        PodPriorityClass(name="batch-high", value=500), PodPriorityClass(name="base", value=7, global_default=True)])
    text = rules.as_text(rules.sections(c))
    assert "Kubernetes PriorityClasses: batch-high 500, base 7 (the default)." in text
    assert "[unknown_priority_class]" in text
    assert "Kubernetes PriorityClasses" not in rules.as_text(rules.sections(load_contract_file(DEMO_CONTRACT)))


def test_a_workload_whose_queues_a_new_contract_removed_gets_no_forecast_but_what_would_change_it():
    """It said "estimated start: not within a week" (an operator's report): no cycle can admit it until
    a contract brings its queue back (its LocalQueue gone, it is not admitted: as in Kueue)."""
    from builders import node
    from gangway.contract import load_contract
    from gangway.sim import Simulation
    from test_contract_stories import FOUR_TEAMS, four_team_jobs, submit

    text = FOUR_TEAMS.read_text()
    sim = Simulation()
    sim.configure(load_contract(text, "c.yaml"))
    sim.add_nodes([node("n0").gpus(8).obj()])
    submit(sim, four_team_jobs("a", 2))
    sim.run(until_ms=sim.now_ms + 1_000)
    without = [doc for doc in text.split("\n---\n") if "name: team-a\n" not in doc and "namespace: team-a\n" not in doc]
    sim.configure(load_contract("\n---\n".join(without), "c.yaml"))
    lines = explain(sim.log, "team-a/a-1")
    assert ("now pending (local_queue_gone): LocalQueue team-a/default is not in the contract any more: nothing is "
            "admitted from it until a contract brings it back") in lines
    assert lines[-1] == "estimated start: never, unless a contract brings its LocalQueue back"
    from gangway.read.reports import status_tables
    assert "team-a (not in the contract)" in list(status_tables(sim.state)[0].columns[0].cells)


def test_explain_says_when_a_node_leaving_the_cluster_sends_the_workload_back_to_its_queue():
    """It went from "running (attempt 1)" straight to its next admission (an operator's report)."""
    from builders import node
    from gangway.contract import load_contract
    from gangway.events.catalogue import NodeRemoved
    from gangway.sim import Simulation
    from test_contract_stories import FOUR_TEAMS, four_team_jobs, submit

    sim = Simulation()
    sim.configure(load_contract(FOUR_TEAMS.read_text(), "c.yaml"))
    sim.add_nodes([node("n0").gpus(8).obj(), node("n1").gpus(8).obj()])
    submit(sim, four_team_jobs("a", 1))
    sim.run(until_ms=sim.now_ms + 1_000)
    where = sim.state.workloads["team-a/a-0"].placement.assignments[0].node
    sim.append("gone", sim.now_ms, NodeRemoved(node=where), "gangway/binder")
    sim.run(until_ms=sim.now_ms + 1_000)
    lines = explain(sim.log, "team-a/a-0")
    gone = next(i for i, line in enumerate(lines) if "left the cluster" in line)
    assert lines[gone].endswith(f"evicted (attempt 1): node {where} left the cluster under it; back in its queue")
    assert "admitted" in lines[gone + 1] and lines[gone - 1].endswith("running (attempt 1)")


def test_a_withdrawal_is_said_with_its_reason_in_the_log_and_explain():
    """`gangway log` printed 'WorkloadWithdrawn WorkloadWithdrawn' and explain left it out (a stranger's report)."""
    from gangway.events import catalogue as ev
    from gangway.read.describe import describe
    env = ev.Envelope(id="withdrawn/team/x/1", source="gangway/binder", time_ms=0, offset=3,
                      data=ev.WorkloadWithdrawn(workload="team/x", reason="Job team/x (uid 1) deleted"))
    assert describe(env) == "team/x withdrawn: Job team/x (uid 1) deleted"
    assert describe(env, about="team/x") == "withdrawn: Job team/x (uid 1) deleted"
