"""A pod template's nodeSelector and tolerations decide which nodes its pods may go to: a node's
NoSchedule/NoExecute taints keep off every pod that does not tolerate them, and a nodeSelector keeps
the pods to nodes with those labels — in admission, placement and preemption alike."""

from __future__ import annotations

import re

import msgspec
import pytest

from builders import cluster_queue, contract, line_of, node, workload
from gangway.events import catalogue as ev
from gangway.events.catalogue import Taint, Toleration, admits
from gangway.services.binder.cluster import ClusterFileError, load_nodes
from gangway.services.submission.manifests import ManifestError, load_jobs
from gangway.sim import Simulation

RESERVED = Taint(key="gangway.io/reserved", value="serving", effect="NoSchedule")


def tainted(name: str, *taints: Taint, **labels: str) -> ev.NodeObserved:
    b = node(name).gpus(8)
    for k, v in labels.items():
        b = b.label(k.replace("_", "."), v)
    return msgspec.structs.replace(b.obj(), taints=list(taints))


def with_pods(w, node_selector=None, tolerations=()) -> ev.WorkloadQueued:
    spec = w.obj()
    sets = [msgspec.structs.replace(ps, node_selector=node_selector or {}, tolerations=list(tolerations))
            for ps in spec.pod_sets]
    return msgspec.structs.replace(spec, pod_sets=sets)


def job_with(pod_spec: str) -> str:
    """A Job manifest whose pod template's spec has these lines besides its container."""
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: j, namespace: ns, labels: {{kueue.x-k8s.io/queue-name: q}}}}
spec:
  template:
    spec:{pod_spec}
      containers: [{{name: m, image: x, resources: {{requests: {{nvidia.com/gpu: 1}}}}}}]
"""


def placed_on(*specs: ev.WorkloadQueued, nodes: list[ev.NodeObserved]) -> dict[str, set[str]]:
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(64)).obj())
    sim.add_nodes(nodes)
    for spec in specs:
        sim.submit(spec)
    sim.run(until_ms=sim.now_ms + 1, rounds_max=50)
    return {name: {a.node for a in wl.placement.assignments} if wl.placement else set()
            for name, wl in sim.state.workloads.items()}


def test_kubernetes_toleration_rules():
    assert Toleration(key="gangway.io/reserved", value="serving", effect="NoSchedule").tolerates(RESERVED)
    assert Toleration(key="gangway.io/reserved", operator="Exists").tolerates(RESERVED)
    assert Toleration(operator="Exists").tolerates(RESERVED)
    assert not Toleration(key="gangway.io/reserved", value="batch").tolerates(RESERVED)
    assert not Toleration(key="gangway.io/reserved", operator="Exists", effect="NoExecute").tolerates(RESERVED)
    assert admits({"pool": "a"}, [], {"pool": "a"}, []) and not admits({"pool": "b"}, [], {"pool": "a"}, [])
    assert not admits({}, [RESERVED], {}, []) and admits({}, [RESERVED], {}, [Toleration(operator="Exists")])


def test_a_tainted_node_takes_only_pods_that_tolerate_its_taint():
    nodes = [tainted("a-reserved", RESERVED), tainted("b-open")]
    plain = with_pods(workload("plain").queue("q").gpus(8))
    where = placed_on(plain, with_pods(workload("second").queue("q").gpus(8)), nodes=nodes)
    assert where == {"plain": {"b-open"}, "second": set()}  # the tainted node stays empty for them
    serving = with_pods(workload("serving").queue("q").gpus(8),
                        tolerations=[Toleration(key="gangway.io/reserved", value="serving", effect="NoSchedule")])
    assert placed_on(plain, serving, nodes=nodes) == {"plain": {"b-open"}, "serving": {"a-reserved"}}


def test_a_node_selector_keeps_the_gang_to_the_nodes_with_those_labels():
    nodes = [tainted("a", pool="x"), tainted("b", pool="y"), tainted("c", pool="y")]
    gang = with_pods(workload("gang").queue("q").gpus(8, pods=2), node_selector={"pool": "y"})
    assert placed_on(gang, nodes=nodes) == {"gang": {"b", "c"}}
    too_big = with_pods(workload("big").queue("q").gpus(8, pods=3), node_selector={"pool": "y"})
    assert placed_on(too_big, nodes=nodes) == {"big": set()}  # three nodes free, but only two of pool y


def test_cluster_files_and_manifests_carry_taints_selectors_and_tolerations():
    [n] = load_nodes("""
kind: Node
metadata: {name: n1}
spec:
  taints:
  - {key: gangway.io/reserved, value: serving, effect: NoSchedule}
  - {key: soft, effect: PreferNoSchedule}
  - {key: node.kubernetes.io/not-ready, effect: NoExecute}
status: {allocatable: {nvidia.com/gpu: 8}}
""")
    assert n.taints == [RESERVED]
    text = job_with("""
      nodeSelector: {pool: "y"}
      tolerations: [{key: gangway.io/reserved, operator: Exists, effect: NoSchedule}]""")
    [job] = load_jobs(text, "job.yaml")
    [ps] = job.pod_sets
    assert ps.node_selector == {"pool": "y"}
    assert ps.tolerations == [Toleration(key="gangway.io/reserved", operator="Exists", effect="NoSchedule")]
    with pytest.raises(ManifestError, match="neither Equal nor Exists"):
        load_jobs(text.replace("operator: Exists", "operator: Maybe"), "job.yaml")
    with pytest.raises(ManifestError, match="nodeSelector"):
        load_jobs(text.replace('pool: "y"', "pool: 3"), "job.yaml")


def test_a_gang_no_node_may_ever_take_is_said_so_and_does_not_block_a_strict_queue():
    from gangway.events.reasons import C
    from gangway.read.explain import explain
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(64).strict_fifo()).obj())
    sim.add_nodes([tainted("a", RESERVED, pool="x"), tainted("b", pool="y")])
    sim.submit(with_pods(workload("lost").queue("q").gpus(8), node_selector={"pool": "z"}))
    sim.submit(with_pods(workload("shy").queue("q").gpus(8), node_selector={"pool": "x"}))
    sim.submit(with_pods(workload("fine").queue("q").gpus(8)))
    sim.run(until_ms=sim.now_ms + 1, rounds_max=50)
    phases = {name: wl.phase for name, wl in sim.state.workloads.items()}
    assert phases == {"lost": "pending", "shy": "pending", "fine": "running"}
    lost = explain(sim.log, "lost")
    assert lost[-3] == f"now pending ({C.NO_MATCHING_NODES}): no node can ever take pod set main: no node has the labels pool=z"
    assert lost[-1] == "estimated start: never, unless nodes it may use join the cluster or come back into service"
    assert explain(sim.log, "shy")[-3].endswith(
        "every node it may use has a taint it does not tolerate (gangway.io/reserved=serving:NoSchedule)")


def test_labels_only_nodes_of_a_flavor_the_queue_lacks_carry_are_said_to_be_there():
    """Queue q lists h100 then a100; the gang asks for gpu=T4, which only t0 and t1 carry, and they
    belong to flavor t4, which another queue lists. It can never run (no node of q's flavors has
    the label), and the sentence says so rather than that no node has the label (a stranger's case)."""
    from gangway.events.reasons import C
    from gangway.read.explain import explain
    sim = Simulation()
    labels = {"h100": "H100", "a100": "A100", "t4": "T4"}
    c = contract(cluster_queue("q").flavor("h100").gpus(32).flavor("a100").gpus(32), cluster_queue("infer").flavor("t4").gpus(8))
    for flavor, product in labels.items():
        c = c.flavor_labels(flavor, {"gpu": product})
    sim.configure(c.obj())
    sim.add_nodes([tainted(f"{flavor[0]}{i}", gpu=product) for flavor, product in labels.items() for i in range(2)])
    sim.submit(with_pods(workload("want-t4").queue("q").gpus(1), node_selector={"gpu": "T4"}))
    sim.submit(with_pods(workload("want-z").queue("q").gpus(1), node_selector={"gpu": "Z"}))
    sim.submit(with_pods(workload("big-a100").queue("q").gpus(8, pods=3), node_selector={"gpu": "A100"}))
    sim.run(until_ms=sim.now_ms + 1, rounds_max=50)

    def now(name: str) -> str:
        return line_of(explain(sim.log, name), "now pending")
    assert now("want-t4") == (
        f"now pending ({C.NO_MATCHING_NODES}): no node can ever take pod set main: no node of q's flavors (h100, a100) "
        "has the labels gpu=T4; t0, t1 have them, in flavor t4, which q does not list")
    assert now("want-z").endswith(": no node has the labels gpu=Z")  # none anywhere: as before
    # a100's nodes have the label but are too few: told its first flavor's reason, which is h100's nodes';
    # the flavors' list gives a100's own
    assert now("big-a100").endswith(": no node of its flavor has the labels gpu=A100")
    assert ("  a100: no node can ever take pod set main: the nodes it may use hold 2 of its 3 pods even with nothing "
            "running") in explain(sim.log, "big-a100")


def test_a_flavors_tolerations_let_its_pods_onto_its_tainted_pool():
    """Kueue's ResourceFlavor.spec.tolerations: pods admitted with the flavor tolerate its nodes'
    taint though their templates do not; without them the pool is never placeable, and says why."""
    from gangway.events.reasons import C
    from gangway.read.explain import explain
    nodes = [tainted(f"t{i}", RESERVED, pool="train") for i in range(2)] + [tainted("open", pool="serve")]
    gangs = [with_pods(workload(name).queue("q").gpus(8, pods=2)) for name in ("gang", "later")]

    def run(tolerations) -> Simulation:
        sim = Simulation()
        sim.configure(contract(cluster_queue("q").flavor("train").gpus(32)).flavor_labels("train", {"pool": "train"})
                      .flavor_tolerations("train", *tolerations).obj())
        sim.add_nodes(nodes)
        for spec in gangs:
            sim.submit(spec)
        sim.run(until_ms=sim.now_ms + 1, rounds_max=50)
        return sim

    tolerated = run([Toleration(key="gangway.io/reserved", operator="Exists")])
    assert {a.node for a in tolerated.state.workloads["gang"].placement.assignments} == {"t0", "t1"}
    waiting = explain(tolerated.log, "later")  # behind the first gang on the only two nodes it may use
    assert any(line.startswith("now pending") and C.NO_MATCHING_NODES not in line for line in waiting), waiting
    untolerated = run([])
    assert {name: wl.phase for name, wl in untolerated.state.workloads.items()} == {"gang": "pending", "later": "pending"}
    assert explain(untolerated.log, "gang")[-3].endswith(
        "every node it may use has a taint it does not tolerate (gangway.io/reserved=serving:NoSchedule)")


def test_required_node_affinity_keeps_the_pods_to_nodes_one_of_its_terms_matches():
    from gangway.events.catalogue import NodeSelectorRequirement as Req
    from gangway.events.catalogue import NodeSelectorTerm as Term
    nodes = [tainted("a", pool="x", gen="3"), tainted("b", pool="y", gen="5"), tainted("c", pool="z", gen="4")]
    newer = [Term(match_expressions=[Req(key="gen", operator="Gt", values=["3"]),
                                     Req(key="pool", operator="NotIn", values=["z"])])]
    spec = with_pods(workload("w").queue("q").gpus(8))
    assert placed_on(spec, nodes=nodes) == {"w": {"a"}}  # without it: the first of three equal nodes
    pick = msgspec.structs.replace(spec, pod_sets=[msgspec.structs.replace(spec.pod_sets[0], node_affinity=newer)])
    assert placed_on(pick, nodes=nodes) == {"w": {"b"}}
    by_name = [Term(match_fields=[Req(key="metadata.name", operator="In", values=["c"])]),
               Term(match_expressions=[Req(key="pool", operator="DoesNotExist")])]
    pick = msgspec.structs.replace(spec, pod_sets=[msgspec.structs.replace(spec.pod_sets[0], node_affinity=by_name)])
    assert placed_on(pick, nodes=nodes) == {"w": {"c"}}
    assert not Term().matches("a", {"pool": "x"})  # an empty term matches no node, as in Kubernetes
    text = job_with("""
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions: [{key: gen, operator: Gt, values: ["3"]}, {key: pool, operator: NotIn, values: [z]}]
          preferredDuringSchedulingIgnoredDuringExecution:
          - {weight: 1, preference: {matchExpressions: [{key: pool, operator: In, values: [x]}]}}""")
    [job] = load_jobs(text, "job.yaml")
    assert job.pod_sets[0].node_affinity == newer
    with pytest.raises(ManifestError, match="must be one integer for Gt"):
        load_jobs(text.replace('values: ["3"]', "values: [three]"), "job.yaml")
    with pytest.raises(ManifestError, match="'Near' is not one of"):
        load_jobs(text.replace("operator: NotIn", "operator: Near"), "job.yaml")


def test_preferred_node_affinity_puts_the_pods_on_the_nodes_it_weighs_most_first():
    """Kubernetes' preferredDuringSchedulingIgnoredDuringExecution: the nodes matching the heavier
    terms first (weights summed), then best fit; a preference never keeps a pod off a node (it was
    read and then ignored: the first of equal nodes was taken)."""
    from gangway.events.catalogue import NodeSelectorRequirement as Req
    from gangway.events.catalogue import NodeSelectorTerm as Term
    from gangway.events.catalogue import PreferredSchedulingTerm as Pref
    nodes = [tainted("a", pool="x", zone="1"), tainted("b", pool="y", zone="2"), tainted("c", pool="z", zone="2")]
    spec = with_pods(workload("w").queue("q").gpus(8))

    def preferring(*terms: Pref, pods: int = 1, name: str = "w") -> ev.WorkloadQueued:
        ps = msgspec.structs.replace(spec.pod_sets[0], count=pods, preferred_affinity=list(terms))
        return msgspec.structs.replace(spec, workload=name, pod_sets=[ps])
    zone2 = Pref(weight=10, preference=Term(match_expressions=[Req(key="zone", operator="In", values=["2"])]))
    pool_z = Pref(weight=5, preference=Term(match_expressions=[Req(key="pool", operator="In", values=["z"])]))
    assert placed_on(spec, nodes=nodes) == {"w": {"a"}}
    assert placed_on(preferring(zone2), nodes=nodes) == {"w": {"b"}}  # (b and c weigh 10: best fit, then name)
    assert placed_on(preferring(zone2, pool_z), nodes=nodes) == {"w": {"c"}}  # (c weighs 15)
    heavier_pool = msgspec.structs.replace(pool_z, weight=20)
    assert placed_on(preferring(zone2, heavier_pool), nodes=nodes) == {"w": {"c"}}
    # more pods than the preferred nodes hold: the rest go where they fit; a gang is still all or nothing
    assert placed_on(preferring(pool_z, pods=3), nodes=nodes) == {"w": {"a", "b", "c"}}
    assert placed_on(preferring(pool_z, pods=4), nodes=nodes) == {"w": set()}
    # two gangs of one shape but other preferences are not taken for alike (the deciders' memos)
    both = placed_on(preferring(zone2, name="p2"), preferring(heavier_pool, name="pz"), nodes=nodes)
    assert both == {"p2": {"b"}, "pz": {"c"}}
    text = job_with("""
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - {weight: 10, preference: {matchExpressions: [{key: zone, operator: In, values: ["2"]}]}}
          - {weight: 5, preference: {matchExpressions: [{key: pool, operator: In, values: [z]}]}}""")
    [job] = load_jobs(text, "job.yaml")
    assert job.pod_sets[0].preferred_affinity == [zone2, pool_z] and job.pod_sets[0].node_affinity == []
    for bad, said in (("weight: 10", "weight: 0"), ("weight: 10", "weight: 101"), ("weight: 10", "weight: '10'"),
                      ("weight: 10", "weight: true")):
        with pytest.raises(ManifestError, match=r"preferredDuringSchedulingIgnoredDuringExecution\[0\].weight: .*"
                                                "whole number from 1 to 100"):
            load_jobs(text.replace(bad, said), "job.yaml")
    with pytest.raises(ManifestError, match=r"\[1\].preference: missing"):
        load_jobs(text.replace(", preference: {matchExpressions: [{key: pool, operator: In, values: [z]}]}", ""),
                  "job.yaml")
    with pytest.raises(ManifestError, match="'Near' is not one of"):
        load_jobs(text.replace("operator: In, values: [z]", "operator: Near, values: [z]"), "job.yaml")


def test_preferred_node_affinity_chooses_the_topology_domain_too():
    """A gang that must stay in one rack and prefers some nodes goes to the rack its preferences
    weigh most (each pod counting its node's weight), not to the least roomy rack with the
    preference ordering only the nodes inside it; contracts written before the field keep that."""
    from gangway.events.catalogue import NodeSelectorRequirement as Req
    from gangway.events.catalogue import NodeSelectorTerm as Term
    from gangway.events.catalogue import PreferredSchedulingTerm as Pref
    nodes = [tainted("a", rack="r1", zone="1"), tainted("b", rack="r2", zone="1"), tainted("c", rack="r2", zone="2"),
             tainted("d", rack="r3", zone="2"), tainted("e", rack="r3", zone="2"), tainted("f", rack="r3", zone="1")]
    spec = with_pods(workload("w").queue("q").gpus(8))
    zone2 = Pref(weight=10, preference=Term(match_expressions=[Req(key="zone", operator="In", values=["2"])]))

    def gang(pods: int, *terms: Pref) -> ev.WorkloadQueued:
        ps = msgspec.structs.replace(spec.pod_sets[0], count=pods, preferred_affinity=list(terms),
                                     topology=ev.TopologyRequest(required="rack"))
        return msgspec.structs.replace(spec, pod_sets=[ps])

    def placed(w: ev.WorkloadQueued, domains: bool) -> set[str]:
        sim = Simulation()
        sim.configure(msgspec.structs.replace(contract(cluster_queue("q").gpus(64)).obj(), preferred_domains=domains))
        sim.add_nodes(nodes)
        sim.submit(w)
        sim.run(until_ms=sim.now_ms + 1, rounds_max=50)
        wl = sim.state.workloads["w"]
        return {a.node for a in wl.placement.assignments}

    assert placed(gang(1), True) == {"a"}  # (no preference: the least roomy rack)
    assert placed(gang(1, zone2), True) == {"c"}  # (r2 holds a zone-2 node and is less roomy than r3)
    assert placed(gang(1, zone2), False) == {"a"}  # (before the field: r1, the least roomy)
    # two pods: r3 holds two zone-2 nodes (20), r2 one (10)
    assert placed(gang(2, zone2), True) == {"d", "e"}
    assert placed(gang(2, zone2), False) == {"b", "c"}


def test_a_gang_with_required_node_affinity_that_must_wait_waits_and_then_runs():
    """Its wait asks whether the gang could ever fit its nodes (a memo keyed by the pod set): the
    affinity's terms hold lists, and keying by them raised TypeError (found by a stranger test)."""
    from gangway.events.catalogue import NodeSelectorRequirement as Req
    from gangway.events.catalogue import NodeSelectorTerm as Term
    only_x = [Term(match_expressions=[Req(key="pool", operator="In", values=["x"])])]
    spec = with_pods(workload("w").queue("q").gpus(8).runtime_s(600))
    first, second = (msgspec.structs.replace(spec, workload=name, pod_sets=[
        msgspec.structs.replace(spec.pod_sets[0], node_affinity=only_x)]) for name in ("first", "second"))
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(64)).obj())
    sim.add_nodes([tainted("a", pool="x"), tainted("b", pool="y")])
    sim.submit(first)
    sim.submit(second)
    sim.run(until_ms=sim.now_ms + 1)
    assert sim.state.workloads["second"].phase == "pending"  # b is free, but not a node it may use
    sim.run()
    assert all(wl.phase == "finished" and wl.placement.assignments[0].node == "a"
               for wl in sim.state.workloads.values())


def cluster_node(name: str, spec: str = "", conditions: str = "[{type: Ready, status: 'True'}]",
                 gpus: str = "'8'", islands: str = "") -> str:
    """One Node of a cluster file as `kubectl get nodes -o yaml` prints it."""
    annotations = f", annotations: {{gangway.io/nvlink-islands: '{islands}'}}" if islands else ""
    return f"""
- apiVersion: v1
  kind: Node
  metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}{annotations}}}
  spec: {{{spec}}}
  status: {{allocatable: {{nvidia.com/gpu: {gpus}, cpu: '96'}}, conditions: {conditions}}}"""


def cluster_file(*nodes: str) -> str:
    return "apiVersion: v1\nkind: List\nitems:" + "".join(nodes) + "\n"


@pytest.mark.parametrize("spec, conditions, why", [
    # `kubectl cordon`: spec.unschedulable and the taint Kubernetes adds with it
    ("unschedulable: true, taints: [{key: node.kubernetes.io/unschedulable, effect: NoSchedule}]",
     "[{type: Ready, status: 'True'}]", "cordoned (spec.unschedulable)"),
    ("unschedulable: true", "[{type: Ready, status: 'True'}]", "cordoned (spec.unschedulable)"),
    # NotReady, with and without the taint the node lifecycle controller adds
    ("taints: [{key: node.kubernetes.io/not-ready, effect: NoExecute}]", "[{type: Ready, status: 'False'}]",
     "NotReady (False)"),
    ("", "[{type: Ready, status: Unknown, reason: NodeStatusUnknown}]", "NotReady (NodeStatusUnknown)"),
    ("taints: [{key: node.kubernetes.io/unreachable, effect: NoExecute}]", "[{type: Ready, status: 'True'}]",
     "taint node.kubernetes.io/unreachable:NoExecute"),
])
def test_a_cluster_file_s_cordoned_or_not_ready_node_takes_nothing_new(spec, conditions, why):
    """The dry-run's cluster file is read as Kubernetes reads its nodes (a stranger's dry-run placed
    jobs on a node `kubectl cordon` had left and on a NotReady one: both were read as available)."""
    n0, n1 = load_nodes(cluster_file(cluster_node("n0", spec, conditions), cluster_node("n1")))
    assert (n0.unavailable, n0.taints) == (why, [])
    assert n1.unavailable == ""
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(64)).obj())
    sim.add_nodes([n0, n1])
    sim.submit(workload("w").queue("q").gpus(8).runtime_s(600).obj())
    sim.submit(workload("x").queue("q").gpus(8).runtime_s(600).obj())
    sim.run(until_ms=sim.now_ms + 1)
    assert {name: [a.node for a in wl.placement.assignments] if wl.placement else wl.phase
            for name, wl in sim.state.workloads.items()} == {"w": ["n1"], "x": "pending"}


@pytest.mark.parametrize("gpus, said", [
    ("'-2'", "status.allocatable.nvidia.com/gpu: '-2' is negative"),
    ("'1.5'", "status.allocatable.nvidia.com/gpu: '1.5' is not a whole number: GPUs must be a whole non-negative number"),
    ("500m", "status.allocatable.nvidia.com/gpu: '500m' is not a whole number"),
    ("'100000000000'", "status.allocatable.nvidia.com/gpu: '100000000000' GPUs on one node: at most 1024 "
                       "(the largest nodes have 16; gangway keeps each GPU's use apart)"),
])
def test_a_cluster_file_refuses_gpu_counts_kubernetes_cannot_have(gpus, said):
    with pytest.raises(ClusterFileError, match=re.escape(f"nodes.yaml: Node n0: {said}")):
        load_nodes(cluster_file(cluster_node("n0", gpus=gpus)), "nodes.yaml")
    [zero] = load_nodes(cluster_file(cluster_node("n0", gpus="'0'")), "nodes.yaml")
    assert zero.allocatable["nvidia.com/gpu"] == 0


def test_a_cluster_file_s_errors_name_the_node_and_what_is_wrong():
    with pytest.raises(ClusterFileError, match="nodes.yaml: node name n0 repeats"):
        load_nodes(cluster_file(cluster_node("n0"), cluster_node("n1"), cluster_node("n0")), "nodes.yaml")
    with pytest.raises(ClusterFileError, match="Node n0: gangway.io/nvlink-islands='a,b': 'a' is not a number"):
        load_nodes(cluster_file(cluster_node("n0", islands="a,b")), "nodes.yaml")
    with pytest.raises(ClusterFileError, match=r"Node n0: spec.taints\[0\].effect: 'NoScheduel' is not one of"):
        load_nodes(cluster_file(cluster_node("n0", spec="taints: [{key: x, effect: NoScheduel}]")), "nodes.yaml")
    with pytest.raises(ClusterFileError, match=r"Node n0: spec.taints\[1\].key: missing"):
        load_nodes(cluster_file(cluster_node("n0", spec="taints: [{key: x, effect: NoSchedule}, {effect: NoSchedule}]")),
                   "nodes.yaml")
    with pytest.raises(ClusterFileError, match="spec.unschedulable must be true or false, not 'yes'"):
        load_nodes(cluster_file(cluster_node("n0", spec="unschedulable: 'yes'")), "nodes.yaml")
