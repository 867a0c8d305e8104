"""Topology levels as Kueue defines them, and gangs no node can ever take (issue: a placeable gang
never waits forever).

Each story goes the way a stranger's files would: Kueue YAML through the contract loader, Node
objects through the cluster loader, a batch/v1 Job through the manifest reader and the submission
decision, then the pure pipeline (``Simulation``) and ``explain``.
"""

from __future__ import annotations

import msgspec
import pytest
import yaml

from gangway.contract import load_contract
from gangway.events import catalogue as ev
from gangway.read.explain import explain, pending_report
from gangway.services.binder.cluster import load_nodes
from gangway.services.submission.manifests import load_jobs
from gangway.services.submission.policy import Invalid, decide_submission, queue_job
from gangway.sim import Simulation

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: gpus
      resources:
      - {name: cpu, nominalQuota: 10000}
      - {name: memory, nominalQuota: 100000Gi}
      - {name: nvidia.com/gpu, nominalQuota: 1024}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: team, name: lq}
spec: {clusterQueue: cq}
"""
PLAIN_FLAVOR = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: gpus}\n---\n"
TAS = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: Topology
metadata: {name: dc}
spec:
  levels:
  - nodeLabel: example.com/zone
  - nodeLabel: example.com/pod
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpus}
spec: {topologyName: dc}
---
"""


def nodes_yaml(count: int, labels=lambda i: {}, islands: str = "") -> str:
    """``islands``: every node's NVLink islands (gangway.io/nvlink-islands), none when empty."""
    items = []
    for i in range(count):
        extra = "".join(f"\n        {k}: {v}" for k, v in labels(i).items())
        annotations = f"\n    annotations: {{gangway.io/nvlink-islands: '{islands}'}}" if islands else ""
        items.append(f"""
- apiVersion: v1
  kind: Node
  metadata:
    name: node-{i}{annotations}
    labels:
        kubernetes.io/hostname: node-{i}{extra}
  status:
    allocatable: {{cpu: "96", memory: 1000Gi, nvidia.com/gpu: "8", pods: "110"}}""")
    return "apiVersion: v1\nkind: List\nitems:" + "".join(items) + "\n"


def job_yaml(name: str, pods: int, annotations: dict[str, str], gpus: int = 8) -> str:
    """A batch/v1 Job of ``pods`` pods of ``gpus`` GPUs with these pod-template annotations."""
    return yaml.safe_dump({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                     "annotations": {"gangway.io/runtime-seconds": "600"}},
        "spec": {"parallelism": pods, "completions": pods, "template": {
            "metadata": {"annotations": dict(annotations)},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer", "resources": {
                "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)}}}]}}},
    })


def cluster(contract_yaml: str, nodes: str) -> Simulation:
    sim = Simulation()
    sim.configure(load_contract(contract_yaml))
    sim.add_nodes(load_nodes(nodes))
    sim.run()
    return sim


def submit(sim: Simulation, job: str) -> str:
    (submitted,) = load_jobs(job, "job.yaml")
    wl = queue_job(submitted, sim.state, {}, "")
    sim.submit(wl)
    return wl.workload


def zones_and_pods(i: int) -> dict[str, str]:
    """Zone z0 holds nodes 0-3, zone z1 nodes 4-7; "pod" p0 names nodes 0,1 in z0 and 4,5 in z1."""
    return {"example.com/zone": f"z{i // 4}", "example.com/pod": f"p{(i % 4) // 2}"}


def where(sim: Simulation, name: str, *keys: str) -> set[tuple[str, ...]]:
    """The values of these labels on the nodes a workload was placed on."""
    return {tuple(sim.state.nodes[a.node].labels[k] for k in keys) for a in sim.state.workloads[name].placement.assignments}


def phase(sim: Simulation, name: str) -> str:
    return sim.state.workloads[name].phase


def test_a_node_level_request_on_nodes_with_only_a_hostname_is_placed():
    """The issue's case: 8 nodes × 8 GPUs labelled only with kubernetes.io/hostname."""
    sim = cluster(PLAIN_FLAVOR + QUEUES, nodes_yaml(8))
    name = submit(sim, job_yaml("train", 1, {"kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"}))
    sim.run(until_ms=sim.now_ms + 1000)
    wl = sim.state.workloads[name]
    assert wl.phase in ("bound", "running") and len(wl.placement.assignments) == 1


def test_without_a_topology_a_request_names_a_label_and_its_nodes_are_the_domains():
    sim = cluster(PLAIN_FLAVOR + QUEUES, nodes_yaml(6, lambda i: {"example.com/pod": f"p{i % 2}"}))
    name = submit(sim, job_yaml("tp", 3, {"kueue.x-k8s.io/podset-required-topology": "example.com/pod"}))
    sim.run(until_ms=sim.now_ms + 1000)
    wl = sim.state.workloads[name]
    pods = {sim.state.nodes[a.node].labels["example.com/pod"] for a in wl.placement.assignments}
    assert wl.phase == "running" and len(pods) == 1


def test_a_topology_nests_its_levels_so_a_pod_name_reused_across_zones_is_two_domains():
    sim = cluster(TAS + QUEUES, nodes_yaml(8, zones_and_pods))
    small = submit(sim, job_yaml("small", 2, {"kueue.x-k8s.io/podset-required-topology": "example.com/pod"}))
    big = submit(sim, job_yaml("big", 3, {"kueue.x-k8s.io/podset-required-topology": "example.com/pod"}))
    sim.run(until_ms=sim.now_ms + 1000)
    assert len(where(sim, small, "example.com/zone", "example.com/pod")) == 1  # never p0 of z0 with p0 of z1
    # No (zone, pod) domain has 3 nodes, though "p0" alone labels 4: it can never be placed, and says so.
    assert phase(sim, big) == "pending"
    report = pending_report(sim.state)[big]
    assert report.code == "topology_unsatisfiable" and report.eta_ms is None
    assert "no such domain holds its 3 pods even with nothing running (the largest, example.com/pod=p0, holds 2)" \
        in report.reason


def test_a_preferred_level_climbs_the_topology_then_goes_anywhere():
    sim = cluster(TAS + QUEUES, nodes_yaml(8, zones_and_pods))
    first = submit(sim, job_yaml("first", 4, {"kueue.x-k8s.io/podset-preferred-topology": "example.com/pod"}))
    second = submit(sim, job_yaml("second", 4, {"kueue.x-k8s.io/podset-preferred-topology": "example.com/pod"}))
    sim.run(until_ms=sim.now_ms + 1000)
    for name in (first, second):  # 4 pods: no (zone, pod) holds them, each zone does
        assert len(where(sim, name, "example.com/zone")) == 1


def test_a_gang_that_never_fits_its_level_does_not_hold_back_one_of_its_size_that_asks_otherwise():
    """Gangs alike in everything but their topology request do not fit or fail alike: a 3-pod gang
    that requires one (zone, pod) domain (none holds 3 nodes) is tried first; the 3-pod gang queued
    after it, which only prefers one, is placed in the same cycle (the cycle's memo of failed shapes
    knew gangs by their resources alone, and left the second waiting forever)."""
    sim = cluster(TAS + QUEUES, nodes_yaml(8, zones_and_pods))
    never = submit(sim, job_yaml("never", 3, {"kueue.x-k8s.io/podset-required-topology": "example.com/pod"}))
    preferred = submit(sim, job_yaml("preferred", 3, {"kueue.x-k8s.io/podset-preferred-topology": "example.com/pod"}))
    anywhere = submit(sim, job_yaml("anywhere", 3, {}))
    sim.run(until_ms=sim.now_ms + 1000)
    assert phase(sim, never) == "pending"
    assert phase(sim, preferred) == "running" and len(where(sim, preferred, "example.com/zone")) == 1
    assert phase(sim, anywhere) == "running"


def test_a_gang_too_big_for_its_nodes_even_when_empty_can_never_be_placed_until_a_node_grows():
    """Three 8-GPU pods on two 8-GPU nodes (one busy): never, whatever frees up, and the forecast
    agrees. The busy node observed again with 16 GPUs (a change of allocatable alone) makes it
    placeable once the other job ends: it waits for room, with a forecast, then runs."""
    sim = cluster(PLAIN_FLAVOR + QUEUES, nodes_yaml(2))
    busy = submit(sim, job_yaml("busy", 1, {}))
    sim.run(until_ms=sim.now_ms + 1000)
    name = submit(sim, job_yaml("wide", 3, {}))
    sim.run(until_ms=sim.now_ms + 1000)
    report = pending_report(sim.state)[name]
    assert (report.code, report.eta_ms) == ("no_matching_nodes", None)
    assert "the nodes it may use hold 2 of its 3 pods even with nothing running" in report.reason
    assert explain(sim.log, name)[-1] == "estimated start: never, unless nodes it may use join the cluster or come back into service"
    [home] = [a.node for a in sim.state.workloads[busy].placement.assignments]
    observed = load_nodes(nodes_yaml(2))  # (the binder observes every node)
    sim.add_nodes([msgspec.structs.replace(n, allocatable={**n.allocatable, "nvidia.com/gpu": 16_000})
                   if n.node == home else n for n in observed])
    sim.run(until_ms=sim.now_ms + 1000)
    report = pending_report(sim.state)[name]
    assert report.code in ("no_placement", "reservation_held") and report.eta_ms is not None
    sim.run(until_ms=sim.now_ms + 600_000)
    assert phase(sim, name) == "running"


def test_a_flavor_no_node_matches_and_a_pod_bigger_than_every_node_are_never_placeable():
    h100 = ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: gpus}\n"
            "spec: {nodeLabels: {nvidia.com/gpu.product: H100}}\n---\n")
    sim = cluster(h100 + QUEUES, nodes_yaml(2, lambda i: {"nvidia.com/gpu.product": "A100"}))
    name = submit(sim, job_yaml("h100", 1, {}))
    sim.run(until_ms=sim.now_ms + 1000)
    report = pending_report(sim.state)[name]
    assert (report.code, report.eta_ms) == ("no_matching_nodes", None)
    assert report.reason.endswith("no node carries its flavor's node labels")
    # (asking for a level too: the flavor's labels are what is missing, not "no nodes to place it on")
    tas = TAS.replace("spec: {topologyName: dc}", "spec: {topologyName: dc, nodeLabels: {pool: tas}}")
    sim = cluster(tas + QUEUES, nodes_yaml(2, zones_and_pods))
    name = submit(sim, job_yaml("racked", 1, {"kueue.x-k8s.io/podset-required-topology": "example.com/pod"}))
    sim.run(until_ms=sim.now_ms + 1000)
    report = pending_report(sim.state)[name]
    assert report.code == "no_matching_nodes" and report.reason.endswith("no node carries its flavor's node labels")
    sim = cluster(PLAIN_FLAVOR + QUEUES, nodes_yaml(2))
    huge = yaml.safe_load(job_yaml("huge", 1, {}))
    huge["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "16"  # 8 a node
    submit(sim, yaml.safe_dump(huge))
    sim.run(until_ms=sim.now_ms + 1000)
    assert pending_report(sim.state)["team/huge"].reason.endswith(
        "no node it may use holds one of its pods even with nothing running (a pod asks 16 nvidia.com/gpu where the "
        "most a node has is 8)")


def test_slices_that_no_domain_can_hold_even_when_empty_can_never_be_placed():
    """Slices of 3 pods, each inside one (zone, pod) domain of 2 nodes: none fits, whatever frees up."""
    sim = cluster(TAS + QUEUES, nodes_yaml(8, zones_and_pods))
    name = submit(sim, job_yaml("sliced", 6, {"kueue.x-k8s.io/podset-preferred-topology": "example.com/zone",
                                              "kueue.x-k8s.io/podset-slice-required-topology": "example.com/pod",
                                              "kueue.x-k8s.io/podset-slice-size": "3"}))
    fits = submit(sim, job_yaml("pairs", 4, {"kueue.x-k8s.io/podset-slice-required-topology": "example.com/pod",
                                             "kueue.x-k8s.io/podset-slice-size": "2"}))
    sim.run(until_ms=sim.now_ms + 1000)
    report = pending_report(sim.state)[name]
    assert report.code == "topology_unsatisfiable" and report.eta_ms is None
    assert "its domains hold 0 slices of 3 pods even with nothing running, and it needs 2" in report.reason
    assert phase(sim, fits) == "running"


@pytest.mark.parametrize("annotations, label", [
    ({"kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/topology-rack"},
     "cloud.provider.com/topology-rack"),
    ({"kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname",
      "kueue.x-k8s.io/podset-slice-required-topology": "example.com/rail", "kueue.x-k8s.io/podset-slice-size": "1"},
     "example.com/rail"),
    ({"kueue.x-k8s.io/podset-required-topology": "gangway.io/nvlink-island"}, "gangway.io/nvlink-islands"),
])
def test_a_level_no_node_carries_is_refused_at_submission_naming_the_label(annotations, label):
    sim = cluster(PLAIN_FLAVOR + QUEUES, nodes_yaml(4))
    with pytest.raises(Invalid) as caught:
        submit(sim, job_yaml("never", 1, annotations))
    assert caught.value.reason == "topology_unsatisfiable" and label in caught.value.message


def test_a_level_no_node_of_its_flavor_carries_waits_with_its_own_reason_and_no_forecast():
    # The Topology's coarser level (zone) is on no node: known only once the flavor is chosen.
    sim = cluster(TAS + QUEUES, nodes_yaml(4, lambda i: {"example.com/pod": "p0"}))
    name = submit(sim, job_yaml("never", 2, {"kueue.x-k8s.io/podset-required-topology": "example.com/pod"}))
    fits = submit(sim, job_yaml("fits", 1, {}))
    sim.run(until_ms=sim.now_ms + 1000)
    assert phase(sim, name) == "pending" and phase(sim, fits) == "running"
    report = pending_report(sim.state)[name]
    assert report.code == "topology_unsatisfiable" and report.eta_ms is None
    assert "no node carries the label example.com/zone" in report.reason
    lines = explain(sim.log, name)
    assert lines[-3].startswith("now pending (topology_unsatisfiable): topology can never be satisfied")
    assert lines[-1].startswith("estimated start: never")


def test_a_strict_fifo_queue_sets_a_never_placeable_head_aside():
    strict = QUEUES.replace("namespaceSelector: {}", "namespaceSelector: {}\n  queueingStrategy: StrictFIFO")
    sim = cluster(TAS + strict, nodes_yaml(4, lambda i: {"example.com/pod": "p0"}))
    never = submit(sim, job_yaml("never", 2, {"kueue.x-k8s.io/podset-required-topology": "example.com/pod"}))
    after = submit(sim, job_yaml("after", 1, {}))
    sim.run(until_ms=sim.now_ms + 1000)
    assert (phase(sim, never), phase(sim, after)) == ("pending", "running")


def test_the_submission_rejection_keeps_the_original_bytes():
    sim = cluster(PLAIN_FLAVOR + QUEUES, nodes_yaml(2))
    (job,) = load_jobs(job_yaml("never", 1, {"kueue.x-k8s.io/podset-required-topology": "example.com/rail"}), "j")
    value = msgspec.json.encode(job)
    out = decide_submission(value, None, [], sim.state, {}, "gangway.submissions/0/7")
    assert isinstance(out, ev.JobRejected) and out.reason == "topology_unsatisfiable" and out.original == value
    assert "no node of the cluster carries the label example.com/rail" in out.message


def test_an_island_request_no_island_can_hold_is_never_placeable_and_does_not_block_a_strict_queue():
    """Nodes of two 4-GPU NVLink islands: 6 GPUs, or two pods of 3, never fit one island, whatever
    frees up; two pods of 2 do. Under StrictFIFO the never-placeable head is set aside."""
    strict = QUEUES.replace("namespaceSelector: {}", "namespaceSelector: {}\n  queueingStrategy: StrictFIFO")
    sim = cluster(PLAIN_FLAVOR + strict, nodes_yaml(2, islands="4,4"))
    island = {"kueue.x-k8s.io/podset-required-topology": "gangway.io/nvlink-island"}
    six = submit(sim, job_yaml("six", 1, island, gpus=6))
    threes = submit(sim, job_yaml("threes", 2, island, gpus=3))
    twos = submit(sim, job_yaml("twos", 2, island, gpus=2))
    small = submit(sim, job_yaml("small", 1, {}, gpus=1))
    sim.run(until_ms=sim.now_ms + 1000)
    assert [phase(sim, n) for n in (six, threes, twos, small)] == ["pending", "pending", "running", "running"]
    for name, pods in ((six, "pod of 6 nvidia.com/gpu"), (threes, "2 pods of 3 nvidia.com/gpu")):
        report = pending_report(sim.state)[name]
        assert (report.code, report.eta_ms) == ("topology_unsatisfiable", None), report
        assert f"no island takes its {pods} even with nothing running (the largest, on node-0, has 4 GPUs)" \
            in report.reason
        assert explain(sim.log, name)[-1].startswith("estimated start: never")
    [placed] = sim.state.workloads[twos].placement.assignments
    assert placed.count == 2 and len({g // 4 for g in placed.gpus}) == 1 and len(placed.gpus) == 4  # one island


@pytest.mark.parametrize("annotations, words", [
    ({"kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname"},
     "slice_required is given without slice_size"),
    ({"kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname", "kueue.x-k8s.io/podset-slice-size": "3"},
     "slice_size is 3: it must divide count (4) into whole slices"),
])
def test_slices_without_a_size_or_of_a_size_that_does_not_divide_the_pods_are_refused_at_submission(annotations, words):
    sim = cluster(PLAIN_FLAVOR + QUEUES, nodes_yaml(2))
    with pytest.raises(Invalid) as caught:
        submit(sim, job_yaml("sliced", 4, annotations, gpus=1))
    assert caught.value.reason == "invalid_field" and words in caught.value.message


def test_a_level_only_nodes_outside_its_flavor_carry_is_said_of_the_flavors_nodes():
    pool_a = ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: gpus}\n"
              "spec: {nodeLabels: {example.com/pool: a}}\n---\n")
    # node-0 and node-1 are the flavor's; only node-2, of another pool, carries a rack label
    sim = cluster(pool_a + QUEUES, nodes_yaml(3, lambda i: {"example.com/pool": "a"} if i < 2 else
                                              {"example.com/pool": "b", "example.com/rack": "r0"}))
    name = submit(sim, job_yaml("racked", 1, {"kueue.x-k8s.io/podset-required-topology": "example.com/rack"}))
    sim.run(until_ms=sim.now_ms + 1000)
    report = pending_report(sim.state)[name]
    assert (report.code, report.eta_ms) == ("topology_unsatisfiable", None)
    assert report.reason.endswith("no node of its flavor carries the label example.com/rack"), report.reason


def test_a_level_its_flavors_topology_does_not_list_is_never_placeable_though_the_nodes_carry_it():
    """Kueue: "no requested topology level". The nodes carry a zone label the Topology does not
    list: gangway placed the gang by zone anyway (a stranger test on Kueue's TAS samples); the
    node level too, when the Topology stops above it."""
    labels = lambda i: {**zones_and_pods(i), "topology.kubernetes.io/zone": f"z{i // 4}"}  # noqa: E731
    sim = cluster(TAS + QUEUES, nodes_yaml(8, labels))
    zone = submit(sim, job_yaml("by-zone", 2, {"kueue.x-k8s.io/podset-required-topology": "topology.kubernetes.io/zone"}))
    sim.run(until_ms=sim.now_ms + 1000)
    assert phase(sim, zone) == "pending"
    report = pending_report(sim.state)[zone]
    assert report.code == "topology_unsatisfiable" and report.eta_ms is None
    assert report.reason.endswith("but it is no level of its nodes' Topology (example.com/zone, example.com/pod, "
                                  "kubernetes.io/hostname)")
    without_nodes = TAS.replace("  - nodeLabel: kubernetes.io/hostname\n", "")
    sim = cluster(without_nodes + QUEUES, nodes_yaml(8, zones_and_pods))
    node = submit(sim, job_yaml("one-node", 1, {"kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"}))
    pod = submit(sim, job_yaml("one-pod", 2, {"kueue.x-k8s.io/podset-required-topology": "example.com/pod"}))
    sim.run(until_ms=sim.now_ms + 1000)
    assert phase(sim, node) == "pending" and pending_report(sim.state)[node].code == "topology_unsatisfiable"
    assert phase(sim, pod) == "running"


def test_a_topology_request_goes_to_the_flavor_that_names_a_topology_not_the_plain_one_before_it():
    """Kueue's TAS skips a flavor without topologyName for a pod set that asks for a level ("does not
    support TopologyAwareScheduling"): gangway charged the first, plain, flavor and placed the gang
    on its nodes, which carry the same labels (a stranger test)."""
    two_flavors = (TAS.replace("metadata: {name: gpus}\nspec: {topologyName: dc}",
                               "metadata: {name: tas}\nspec: {topologyName: dc, nodeLabels: {pool: tas}}")
                   + "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: plain}\n"
                     "spec: {nodeLabels: {pool: plain}}\n---\n")
    queues = QUEUES.replace("""    - name: gpus
      resources:
      - {name: cpu, nominalQuota: 10000}
      - {name: memory, nominalQuota: 100000Gi}
      - {name: nvidia.com/gpu, nominalQuota: 1024}""", """    - name: plain
      resources:
      - {name: cpu, nominalQuota: 10000}
      - {name: memory, nominalQuota: 100000Gi}
      - {name: nvidia.com/gpu, nominalQuota: 1024}
    - name: tas
      resources:
      - {name: cpu, nominalQuota: 10000}
      - {name: memory, nominalQuota: 100000Gi}
      - {name: nvidia.com/gpu, nominalQuota: 1024}""")
    sim = cluster(two_flavors + queues, nodes_yaml(8, lambda i: {**zones_and_pods(i), "pool": "plain" if i < 4 else "tas"}))
    asks = submit(sim, job_yaml("asks", 2, {"kueue.x-k8s.io/podset-required-topology": "example.com/pod"}))
    plain = submit(sim, job_yaml("plain", 2, {}))
    sim.run(until_ms=sim.now_ms + 1000)
    assert sim.state.workloads[asks].admission.flavors["nvidia.com/gpu"] == "tas"
    assert where(sim, asks, "pool") == {("tas",)}
    assert sim.state.workloads[plain].admission.flavors["nvidia.com/gpu"] == "plain"


def test_a_topology_request_in_a_queue_whose_flavors_name_no_topology_is_never_placeable_not_waiting_for_room():
    """Where the contract defines a Topology, a queue whose only flavor names none can never take a
    gang asking for a level (Kueue's TAS skips such a flavor): it waited as no_flavor_room on an
    empty cluster, "not within a week" (a stranger's case), and its flavor line said the flavor would
    take it now. A StrictFIFO queue sets it aside: the job behind it runs."""
    plain_beside = TAS + "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: plain}\n---\n"
    queues = QUEUES.replace("    - name: gpus\n", "    - name: plain\n").replace(
        "  namespaceSelector: {}\n", "  namespaceSelector: {}\n  queueingStrategy: StrictFIFO\n")
    sim = cluster(plain_beside + queues, nodes_yaml(4, zones_and_pods))
    asks = submit(sim, job_yaml("asks", 2, {"kueue.x-k8s.io/podset-required-topology": "example.com/pod"}))
    behind = submit(sim, job_yaml("behind", 2, {}))
    sim.run(until_ms=sim.now_ms + 1000)
    assert (phase(sim, asks), phase(sim, behind)) == ("pending", "running")
    report = pending_report(sim.state)[asks]
    assert (report.code, report.eta_ms) == ("topology_unsatisfiable", None), report
    assert report.reason.endswith("flavor plain names no Topology (topologyName): Kueue places a topology request "
                                  "only in flavors that do"), report.reason
    assert explain(sim.log, asks)[-1].startswith("estimated start: never")
