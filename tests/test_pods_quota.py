"""Kueue's ``pods`` quota: a ClusterQueue that covers ``pods`` counts one per pod of what it admits
(containers cannot ask for it), so ``nominalQuota: 5`` admits 5 pods at most. Kueue's own sample
ClusterQueue (its documentation's first) covers cpu, memory and pods; gangway took the quota and
never counted against it: jobs of 6, 3 and 3 pods all ran at once (found by a stranger test)."""

from __future__ import annotations

import textwrap

from gangway.contract.kueue import read_contract
from gangway.events import catalogue as ev
from gangway.services.audit.replay import verify
from gangway.sim import Simulation

GI = 2**30 * 1000  # one Gi in milli units

CONTRACT = textwrap.dedent("""
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ResourceFlavor
    metadata: {name: default-flavor}
    ---
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ClusterQueue
    metadata: {name: counted}
    spec:
      namespaceSelector: {}
      resourceGroups:
      - coveredResources: [cpu, memory, pods]
        flavors:
        - name: default-flavor
          resources:
          - {name: cpu, nominalQuota: 9}
          - {name: memory, nominalQuota: 36Gi}
          - {name: pods, nominalQuota: 5}
    ---
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ClusterQueue
    metadata: {name: uncounted}
    spec:
      namespaceSelector: {}
      resourceGroups:
      - coveredResources: [cpu, memory]
        flavors:
        - name: default-flavor
          resources:
          - {name: cpu, nominalQuota: 9}
          - {name: memory, nominalQuota: 36Gi}
    ---
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: LocalQueue
    metadata: {name: default, namespace: a}
    spec: {clusterQueue: counted}
    ---
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: LocalQueue
    metadata: {name: default, namespace: b}
    spec: {clusterQueue: uncounted}
    """)


def job(name: str, pods: int, queue_ns: str = "a", min_count: int | None = None,
        resources: dict | None = None) -> ev.WorkloadQueued:
    cq = "counted" if queue_ns == "a" else "uncounted"
    return ev.WorkloadQueued(
        workload=f"{queue_ns}/{name}", namespace=queue_ns, queue="default", cluster_queue=cq, priority_class=None,
        priority=0, kind="Job", runtime_ms=600_000,
        pod_sets=[ev.PodSet(name="main", count=pods, resources={"cpu": 100, "memory": GI} if resources is None else resources,
                            min_count=min_count)])


def run(*jobs: ev.WorkloadQueued, nodes: list[ev.NodeObserved] | None = None) -> Simulation:
    """The jobs submitted at once on four 8-cpu nodes (or ``nodes``), run to the end; the log replays."""
    contract, warnings = read_contract(CONTRACT, "contract.yaml")
    assert warnings == []
    sim = Simulation()
    sim.configure(contract)
    sim.add_nodes(nodes or [ev.NodeObserved(node=f"c{i}", allocatable={"cpu": 8000, "memory": 32 * GI}) for i in range(4)])
    for j in jobs:
        sim.submit(j)
    sim.run()
    report = verify(sim.log)
    assert report.ok and report.verified == report.decisions, report.mismatches[:2]
    return sim


def admissions(sim: Simulation) -> dict[str, ev.WorkloadAdmitted]:
    return {e.data.workload: e.data for e in sim.log if isinstance(e.data, ev.WorkloadAdmitted)}


def at(sim: Simulation, name: str) -> int:
    return next(e.time_ms for e in sim.log if isinstance(e.data, ev.WorkloadAdmitted) and e.data.workload == name)


def test_a_queue_covering_pods_admits_no_more_pods_than_its_quota():
    sim = run(job("p6", 6), job("p3", 3), job("p3b", 3))
    admitted = admissions(sim)
    assert "a/p6" not in admitted  # 6 pods where 5 is all the queue may ever hold
    assert sim.state.workloads["a/p6"].phase == "pending"
    assert admitted["a/p3"].usage == {"cpu": 300, "memory": 3 * GI, "pods": 3000}
    assert at(sim, "a/p3b") >= at(sim, "a/p3") + 600_000, "3 + 3 pods ran at once under a quota of 5"


def test_partial_admission_counts_the_pods_it_admits():
    sim = run(job("p3", 3), job("p4", 4, min_count=1))
    admitted = admissions(sim)
    assert admitted["a/p4"].counts == {"main": 2} and admitted["a/p4"].usage["pods"] == 2000
    assert at(sim, "a/p4") == at(sim, "a/p3")


def test_a_queue_not_covering_pods_does_not_count_them():
    sim = run(job("p6", 6, "b"), job("p3", 3, "b"))
    admitted = admissions(sim)
    assert admitted["b/p6"].usage == {"cpu": 600, "memory": 6 * GI}
    assert at(sim, "b/p3") == at(sim, "b/p6")


def test_pods_asking_for_nothing_count_only_against_a_pods_quota():
    """BestEffort pods (no request), as Kueue takes them: a queue covering pods counts them (3 + 3
    under 5 wait for one another), one that does not admits them all at once, with no usage."""
    sim = run(job("e3", 3, resources={}), job("e3b", 3, resources={}), job("f6", 6, "b", resources={}),
              job("f3", 3, "b", resources={}))
    admitted = admissions(sim)
    assert admitted["a/e3"].usage == {"pods": 3000}
    assert at(sim, "a/e3b") >= at(sim, "a/e3") + 600_000, "3 + 3 pods ran at once under a quota of 5"
    assert admitted["b/f6"].usage == {} and at(sim, "b/f3") == at(sim, "b/f6")
    assert all(sim.state.workloads[w].phase == "finished" for w in ("a/e3", "a/e3b", "b/f6", "b/f3"))
