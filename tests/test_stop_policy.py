"""Kueue's stopPolicy on a ClusterQueue or a LocalQueue: Hold admits nothing new, HoldAndDrain also
orders out what the queue admitted; lifting it (a contract with the policy None) resumes the queue.
Pure core (Simulation), the contract as a platform team writes it."""

from __future__ import annotations


import msgspec
import pytest

from builders import node
from gangway.console.model import Folded
from gangway.contract import load_contract
from gangway.events import catalogue as ev
from gangway.events.reasons import ReasonCode, render
from gangway.read.explain import explain, pending_report
from gangway.read.reports import status_tables
from gangway.services.audit.replay import verify
from gangway.sim import Simulation
from test_contract_stories import FOUR_TEAMS, four_team_jobs, submit

TEXT = FOUR_TEAMS.read_text()
#: A second LocalQueue of team-a, to add to the four-teams contract.
URGENT = """
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: urgent
  namespace: team-a
spec:
  clusterQueue: team-a
"""


def stopped(kind: str, name: str, policy: str, namespace: str = "") -> str:
    """The four-teams contract with one queue's stopPolicy set."""
    header = f"kind: {kind}\nmetadata:\n  name: {name}\n" + (f"  namespace: {namespace}\n" if namespace else "")
    assert header in TEXT
    docs = TEXT.split("\n---\n")
    out = []
    for doc in docs:
        if header in doc:
            doc = doc.replace("spec:\n", f"spec:\n  stopPolicy: {policy}\n", 1)
        out.append(doc)
    return "\n---\n".join(out)


def contract(text: str):
    return load_contract(text, "contract.yaml")


def started(cluster_nodes: int = 32) -> Simulation:
    sim = Simulation()
    sim.configure(contract(TEXT))
    sim.add_nodes([node(f"n{i:02}").gpus(8).cpu(96).obj() for i in range(cluster_nodes)])
    return sim


def phases(sim: Simulation, team: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for name, wl in sim.state.workloads.items():
        if name.startswith(f"team-{team}/"):
            found[wl.phase] = found.get(wl.phase, 0) + 1
    return found


def test_hold_admits_nothing_new_and_keeps_what_runs_then_resumes():
    sim = started()
    submit(sim, four_team_jobs("a", 4))
    sim.run(until_ms=sim.now_ms + 60_000)
    assert phases(sim, "a") == {"running": 4}

    sim.configure(contract(stopped("ClusterQueue", "team-a", "Hold")))
    start = len(sim.log)
    submit(sim, "\n---\n".join(four_team_jobs("a", 6).split("\n---\n")[4:]))  # a-4, a-5
    submit(sim, four_team_jobs("b", 2))
    sim.run(until_ms=sim.now_ms + 60_000)
    admitted = {e.data.workload for e in sim.log[start:] if isinstance(e.data, ev.WorkloadAdmitted)}
    assert admitted == {"team-b/b-0", "team-b/b-1"}  # the cluster has room: only the stop keeps a-4, a-5 out
    assert phases(sim, "a") == {"running": 4, "pending": 2}
    assert not any(isinstance(e.data, ev.EvictionOrdered) for e in sim.log[start:])

    report = pending_report(sim.state)
    assert report["team-a/a-4"].code == ReasonCode.QUEUE_STOPPED
    queues = status_tables(sim.state)[0]
    assert list(queues.columns[0].cells) == ["team-a (stopped: Hold)", "team-b", "team-c", "team-d"]
    assert report["team-a/a-4"].eta_ms is None
    lines = explain(sim.log, "team-a/a-4")
    assert any("ClusterQueue team-a is stopped (stopPolicy Hold)" in line for line in lines)
    assert any(line.startswith("estimated start: none while its queue is stopped") for line in lines)

    sim.configure(contract(TEXT))
    sim.run(until_ms=sim.now_ms + 60_000)
    assert phases(sim, "a") == {"running": 6}
    assert verify(sim.log).ok


def test_hold_and_drain_orders_out_what_the_queue_admitted_and_lends_the_room():
    sim = started()
    submit(sim, four_team_jobs("a", 4))
    submit(sim, four_team_jobs("b", 40))  # b borrows all it can: 28 of 32 nodes with a's 4
    sim.run(until_ms=sim.now_ms + 60_000)
    assert phases(sim, "a") == {"running": 4}

    start = len(sim.log)
    sim.configure(contract(stopped("ClusterQueue", "team-a", "HoldAndDrain")))
    sim.run(until_ms=sim.now_ms + 120_000)
    orders = [e.data for e in sim.log[start:] if isinstance(e.data, ev.EvictionOrdered)]
    assert sorted(o.workload for o in orders) == [f"team-a/a-{i}" for i in range(4)]
    assert {o.preemptor for o in orders} == {"ClusterQueue/team-a"}
    assert {o.reason_code for o in orders} == {ReasonCode.QUEUE_DRAINED}
    assert {o.grace_ms for o in orders} == {30_000}  # its priority class's grace period
    assert orders[0].reason == render(ReasonCode.QUEUE_DRAINED, orders[0].reason_params)
    assert phases(sim, "a") == {"pending": 4}  # back in its queue, not admitted again
    assert phases(sim, "b")["running"] == 32  # the room it left is lent out
    assert pending_report(sim.state)["team-a/a-0"].code == ReasonCode.QUEUE_STOPPED
    assert any(line.endswith("drained: ClusterQueue team-a is stopped with stopPolicy HoldAndDrain: what it admitted "
                             "is evicted, and waits in it until its stopPolicy is None again [queue_drained]; grace "
                             "period 30 s; work lost 60 s") for line in explain(sim.log, "team-a/a-0")), explain(sim.log, "team-a/a-0")

    sim.configure(contract(TEXT))  # resumed: it takes its guarantee back from the borrower
    sim.run(until_ms=sim.now_ms + 120_000)
    assert phases(sim, "a") == {"running": 4}
    report = verify(sim.log)
    assert report.ok and report.verified == report.decisions

    # The console's Kueue metrics: a drain is an eviction for a stopped queue, not a preemption.
    folded = Folded()
    for env in sim.log:
        folded.add(env)
    assert folded.evicted[("team-a", "ClusterQueueStopped")] == 4
    assert not any(reason == "ClusterQueueStopped" or queue == "" for queue, reason in folded.preempted)


def test_a_stopped_local_queue_holds_only_its_own_workloads():
    text = TEXT + URGENT
    sim = started(4)
    sim.configure(contract(text))
    submit(sim, four_team_jobs("a", 2))
    sim.run(until_ms=sim.now_ms + 60_000)
    assert phases(sim, "a") == {"running": 2}

    held = stopped("LocalQueue", "default", "HoldAndDrain", namespace="team-a") + text[len(TEXT):]
    sim.configure(contract(held))
    submit(sim, four_team_jobs("a", 3).split("\n---\n")[2].replace("queue: default", "queue: urgent"))
    sim.run(until_ms=sim.now_ms + 120_000)
    assert phases(sim, "a") == {"pending": 2, "running": 1}
    assert sim.state.workloads["team-a/a-2"].phase == "running"  # from LocalQueue urgent
    orders = [e.data for e in sim.log if isinstance(e.data, ev.EvictionOrdered)]
    assert {o.preemptor for o in orders} == {"LocalQueue/team-a/default"}
    why = pending_report(sim.state)["team-a/a-0"]
    assert (why.code, why.params["queue_kind"], why.params["queue"]) == (ReasonCode.QUEUE_STOPPED, "LocalQueue",
                                                                         "team-a/default")
    assert verify(sim.log).ok


@pytest.mark.parametrize("kind,name,namespace", [("ClusterQueue", "team-a", ""), ("LocalQueue", "default", "team-a")])
def test_stop_policy_is_read_and_a_wrong_value_is_refused(kind, name, namespace):
    c = contract(stopped(kind, name, "Hold", namespace))
    queues = c.cluster_queues if kind == "ClusterQueue" else c.local_queues
    assert [q.stop_policy for q in queues if q.name == name and getattr(q, "namespace", "") == namespace] == ["Hold"]
    with pytest.raises(Exception, match="stopPolicy.*is not one of None, Hold, HoldAndDrain"):
        contract(stopped(kind, name, "Pause", namespace))
    assert msgspec.json.decode(msgspec.json.encode(c), type=type(c)) == c


def test_gangway_rules_says_which_queues_are_stopped_and_what_that_does():
    from gangway.read import rules
    text = rules.as_text(rules.sections(contract(stopped("LocalQueue", "default", "Hold", namespace="team-a"))))
    assert ("LocalQueue team-a/default is stopped (stopPolicy Hold): it admits nothing new [queue_stopped], until a "
            "contract sets its stopPolicy to None.") in text
    drained = rules.as_text(rules.sections(contract(stopped("ClusterQueue", "team-b", "HoldAndDrain"))))
    assert ("It is stopped (stopPolicy HoldAndDrain): it admits nothing new [queue_stopped]; what it admitted is "
            "ordered out, with its class's grace period [queue_drained], until a contract sets its stopPolicy to "
            "None.") in drained
    assert "stopped" not in rules.as_text(rules.sections(contract(TEXT)))


def test_a_local_queue_removed_from_the_contract_admits_nothing_until_it_is_back():
    """Kueue leaves a workload whose LocalQueue is gone inadmissible; gangway admitted it (an
    operator's report)."""
    extra = URGENT
    sim = started(4)
    sim.configure(contract(TEXT + extra))
    submit(sim, four_team_jobs("a", 1).replace("queue: default", "queue: urgent"))
    sim.configure(contract(TEXT))  # urgent removed before its job could be admitted
    sim.run(until_ms=sim.now_ms + 60_000)
    assert phases(sim, "a") == {"pending": 1}  # the cluster is empty: only the missing queue keeps it out
    assert pending_report(sim.state)["team-a/a-0"].code == ReasonCode.LOCAL_QUEUE_GONE
    sim.configure(contract(TEXT + extra))
    sim.run(until_ms=sim.now_ms + 60_000)
    assert phases(sim, "a") == {"running": 1}
    assert verify(sim.log).ok


def test_a_local_queue_pointed_at_another_cluster_queue_takes_its_waiting_jobs_there():
    """Kueue's LocalQueue ``clusterQueue`` is immutable: pointing it elsewhere is creating it again,
    which takes its pending workloads to the new ClusterQueue; gangway's contract does the same in
    one step. What was admitted keeps the ClusterQueue it was admitted to."""
    sim = started(4)
    sim.configure(contract(TEXT + URGENT))
    submit(sim, four_team_jobs("a", 5).replace("queue: default", "queue: urgent"))
    sim.run(until_ms=sim.now_ms + 60_000)
    assert phases(sim, "a") == {"running": 4, "pending": 1}  # 4 nodes of 8 GPUs
    sim.configure(contract(TEXT + URGENT.replace("clusterQueue: team-a", "clusterQueue: team-b")))
    waiting = sim.state.workloads["team-a/a-4"]
    assert waiting.spec.cluster_queue == "team-b" and waiting.shape.startswith("team-b|")
    assert [key[3] for key in sim.state.pending_order["team-b"]] == ["team-a/a-4"]
    assert not sim.state.pending_order["team-a"]
    assert {sim.state.workloads[f"team-a/a-{i}"].admission.cluster_queue for i in range(4)} == {"team-a"}
    sim.run(until_ms=sim.now_ms + 11 * 3600_000)  # the first four end: the fifth is admitted to team-b
    admitted = [e.data for e in sim.log if isinstance(e.data, ev.WorkloadAdmitted) and e.data.workload == "team-a/a-4"]
    assert [a.cluster_queue for a in admitted] == ["team-b"]
    assert verify(sim.log).ok
