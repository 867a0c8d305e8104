"""The binder's pure side: Kubernetes objects read and written, and what the fold does with
withdrawals and nodes that take no new pods (no API server needed)."""

from __future__ import annotations

from builders import LogBuilder, cluster_queue, contract, node, workload

from gangway.events import catalogue as ev
from gangway.events.catalogue import PodAssignment
from gangway.services.binder import objects as ob
from gangway.services.placement.policy import decide_placement


def node_obj(**spec) -> dict:
    return {"kind": "Node", "metadata": {"name": "n1"}, "spec": spec,
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_node_takes_no_new_pods_when_cordoned_not_ready_or_tainted_by_kubernetes():
    assert ob.node_unavailable(node_obj()) == ""
    assert ob.node_unavailable(node_obj(unschedulable=True)).startswith("cordoned")
    not_ready = node_obj()
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
    assert ob.node_unavailable(not_ready) == "NotReady (KubeletNotReady)"
    tainted = node_obj(taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])
    assert ob.node_unavailable(tainted) == "taint node.kubernetes.io/unreachable:NoExecute"
    # A taint of the operator's own (GPU nodes often carry one) is left to the pods' tolerations.
    assert ob.node_unavailable(node_obj(taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])) == ""
    assert ob.node_observed(node_obj(unschedulable=True)).unavailable.startswith("cordoned")


def test_a_node_object_that_cannot_be_read_says_why():
    """The binder left such a node out with "unreadable allocatable or islands", whatever was wrong:
    it now logs what the cluster file's reader says (the node, the field, the value)."""
    garbled = node_obj()
    garbled["metadata"]["annotations"] = {"gangway.io/nvlink-islands": "a,b"}
    assert ob.node_observed(garbled) == ("Node n1: gangway.io/nvlink-islands='a,b': 'a' is not a number "
                                         '(island sizes in GPUs, comma-separated: "4,4")')
    negative = node_obj()
    negative["status"]["allocatable"]["nvidia.com/gpu"] = "-2"
    assert ob.node_observed(negative).startswith("Node n1: status.allocatable.nvidia.com/gpu: '-2' is negative")


def test_a_node_object_with_more_gpus_than_any_node_has_is_left_out_with_why(caplog):
    """Each GPU is an entry of its own in the fold: a Node claiming 10^11 GPUs (a broken device plugin,
    a hand-made object) is not observed, and the binder logs why, rather than reporting it and
    building a list of 10^11 GPUs (a MemoryError, in every service that folds the log)."""
    from gangway.events.state import State
    from gangway.services.binder.kubernetes import KubernetesBinder, Step
    huge, fine = node_obj(), node_obj()
    huge["status"]["allocatable"]["nvidia.com/gpu"] = "100000000000"
    fine["metadata"]["name"] = "n2"
    assert ob.node_observed(huge) == ("Node n1: status.allocatable.nvidia.com/gpu: '100000000000' GPUs on one node: "
                                      "at most 1024 (the largest nodes have 16; gangway keeps each GPU's use apart)")
    huge["status"]["allocatable"]["nvidia.com/gpu"] = "1024"
    assert ob.node_observed(huge).allocatable["nvidia.com/gpu"] == 1024_000
    huge["status"]["allocatable"]["nvidia.com/gpu"] = "1025"
    binder = KubernetesBinder(None, "test")  # (no API server: only its node pass, on objects it was given)
    binder.reflectors["Node"].store.update({"n1": huge, "n2": fine})
    out = Step()
    binder._nodes(State(), out, 0, {})
    assert [report.node for _, _, report in out.reports] == ["n2"]
    assert "Node n1: status.allocatable.nvidia.com/gpu: '1025' GPUs on one node: at most 1024" in caplog.text
    assert "left out" in caplog.text


def test_what_pods_gangway_does_not_manage_hold_is_taken_out_of_their_node():
    """A GPU Deployment's pod, a DaemonSet's, a Job without a queue label: the kubelet counts what they
    hold, so gangway's view of the node leaves it out (it double-booked those GPUs before)."""
    from gangway.events.state import State
    from gangway.read.describe import describe
    from gangway.services.binder.kubernetes import KubernetesBinder, Step
    n1 = node_obj()
    n1["status"]["allocatable"].update({"cpu": "64", "memory": "512Gi", "pods": "110"})

    def a_pod(name: str, node: str | None = "n1", phase: str = "Running", labels: dict | None = None,
              annotations: dict | None = None, **spec) -> dict:
        return {"metadata": {"name": name, "namespace": "infer", "uid": f"u-{name}", "resourceVersion": "1",
                             "labels": labels or {}, "annotations": annotations or {}},
                "spec": {"nodeName": node, **spec}, "status": {"phase": phase}}
    serving = a_pod("serve", containers=[{"resources": {"requests": {"nvidia.com/gpu": "2", "cpu": "4"}}},
                                         {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
                    initContainers=[{"resources": {"requests": {"cpu": "8"}}}], overhead={"cpu": "250m"})
    assert ob.pod_requests(serving) == {"nvidia.com/gpu": 2000, "cpu": 8250, "memory": 1024 ** 3 * 1000}
    exporter = a_pod("dcgm-exporter", containers=[{"resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}])
    queued_job = {"kind": "Job", "metadata": {"name": "train", "namespace": "infer", "uid": "u-1",
                                              "labels": {"kueue.x-k8s.io/queue-name": "default"}}}
    not_held = [a_pod("done", phase="Succeeded", containers=[{"resources": {"requests": {"nvidia.com/gpu": "8"}}}]),
                a_pod("unbound", node=None, containers=[{"resources": {"requests": {"nvidia.com/gpu": "8"}}}]),
                a_pod("ours", labels={"batch.kubernetes.io/job-name": "train"},
                      containers=[{"resources": {"requests": {"nvidia.com/gpu": "4"}}}]),
                a_pod("ours-left", annotations={ob.GPUS_ANNOTATION: "4,5"},  # (its object deleted: it terminates)
                      containers=[{"resources": {"requests": {"nvidia.com/gpu": "2"}}}])]
    binder = KubernetesBinder(None, "test")  # (no API server: its node pass on objects it was given)
    binder.reflectors["Node"].store.update({"n1": n1})
    binder.reflectors["Pod"].store.update({f"infer/{p['metadata']['name']}": p for p in [serving, exporter, *not_held]})
    held = binder._held_by_others({"u-1": queued_job}, {})
    # (each of the two pods also takes one of the node's 110 pods, whatever it asks: the kubelet's max-pods)
    assert held == {"n1": {"nvidia.com/gpu": 2000, "cpu": 8350, "memory": 1024 ** 3 * 1000 + 128 * 1024 ** 2 * 1000,
                           "pods": 2000}}
    assert binder._held_by_others({"u-1": queued_job}, {}) == held  # (each pod's requests read once per version)
    bigger = {**serving, "metadata": {**serving["metadata"], "resourceVersion": "2"},
              "spec": {**serving["spec"], "containers": [{"resources": {"requests": {"nvidia.com/gpu": "3"}}}]}}
    binder.reflectors["Pod"].store["infer/serve"] = bigger
    assert binder._held_by_others({"u-1": queued_job}, {})["n1"]["nvidia.com/gpu"] == 3000
    binder.reflectors["Pod"].store["infer/serve"] = serving
    out = Step()
    binder._nodes(State(), out, 0, held)
    [(_, _, seen)] = out.reports
    assert seen.allocatable == {"nvidia.com/gpu": 6000, "cpu": 64000 - 8350,
                                "memory": 512 * 1024 ** 3 * 1000 - held["n1"]["memory"], "pods": 108_000}
    assert seen.held_by_others == held["n1"]
    assert describe(ev.Envelope(id="n", source="gangway/binder", time_ms=0, data=seen)) == \
        "node n1 observed: 6 GPUs (besides 2 GPUs held by pods gangway does not manage)"
    # placement sees 6 free GPUs there: an 8-GPU pod does not go, a 6-GPU one does
    log = LogBuilder().configure(contract(cluster_queue("q").gpus(16))).add(seen)
    log.queue(workload("eight").queue("q").gpus(8)).admit("eight")
    assert decide_placement(log.state) == []
    log.queue(workload("six").queue("q").gpus(6)).admit("six")
    assert [(p.workload, [a.node for a in p.assignments]) for p in decide_placement(log.state)] == [("six", ["n1"])]


def pod(name: str, index: int, rtype: str | None = None) -> dict:
    labels = {"training.kubeflow.org/replica-type": rtype, "training.kubeflow.org/replica-index": str(index)} if rtype \
        else {}
    return {"metadata": {"name": name, "labels": labels,
                         "annotations": {} if rtype else {"batch.kubernetes.io/job-completion-index": str(index)}}}


def test_pods_take_their_assignments_in_index_order_with_their_own_gpus():
    pods = [pod(f"p-{i}", i) for i in (3, 1, 0, 2)]
    plan = ob.bindings({"main": pods}, [PodAssignment("main", "a", 2, [0, 1, 2, 3]), PodAssignment("main", "b", 2, [4, 5, 6, 7])],
                       [[0, 1, 2, 3], [4, 5, 6, 7]])
    assert [(p["metadata"]["name"], n, g) for p, n, g in plan] == [
        ("p-0", "a", [0, 1]), ("p-1", "a", [2, 3]), ("p-2", "b", [4, 5]), ("p-3", "b", [6, 7])]
    assert [ob.pod_set_of("PyTorchJob", pod("m", 0, "master"), ["master", "worker"])] == ["master"]


def test_resuming_names_gangways_scheduler_in_every_template_of_every_kind():
    jobset = {"kind": "JobSet", "spec": {"suspend": True, "replicatedJobs": [
        {"name": "w", "template": {"spec": {"template": {"spec": {"containers": []}}}}}]}}
    patch = ob.suspend_patch(jobset, False, "ns/js", 2)
    assert patch["spec"]["suspend"] is False
    assert patch["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["schedulerName"] == "gangway"
    assert patch["metadata"]["annotations"] == {ob.WORKLOAD_ANNOTATION: "ns/js", ob.ATTEMPT_ANNOTATION: "2"}
    torch = {"kind": "PyTorchJob", "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {"Master": {}}}}
    patch = ob.suspend_patch(torch, False, "ns/t", 0)
    assert patch["spec"]["runPolicy"] == {"suspend": False}
    assert patch["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["schedulerName"] == "gangway"
    assert ob.suspend_patch(torch, True) == {"spec": {"runPolicy": {"suspend": True}}}
    assert ob.finished({"kind": "PyTorchJob", "status": {"conditions": [
        {"type": "Succeeded", "status": "True", "reason": "Done"}]}}) == (True, True, "PyTorchJob Succeeded (Done)")


def test_an_mpijob_and_a_tfjob_are_suspended_resumed_and_read_as_kubeflow_kinds():
    """MPIJob (the MPI operator's v2beta1: its pods say their replica type in job-role) and TFJob
    (the training operator's), as PyTorchJob: runPolicy.suspend, templates in their replica specs,
    pods labelled with the job's name, Succeeded / Failed conditions."""
    mpi = {"kind": "MPIJob", "metadata": {"name": "m", "labels": {ob.QUEUE_LABEL: "q"}},
           "spec": {"runPolicy": {"suspend": True}, "mpiReplicaSpecs": {"Launcher": {}, "Worker": {"replicas": 2}}}}
    assert ob.is_suspended(mpi) and not ob.needs_suspending(mpi)
    patch = ob.suspend_patch(mpi, False, "ns/m", 0, gate=ob.GATE)
    assert patch["spec"]["runPolicy"] == {"suspend": False}
    assert {t: rs["template"]["spec"]["schedulingGates"] for t, rs in patch["spec"]["mpiReplicaSpecs"].items()} == {
        "Launcher": [{"name": ob.GATE}], "Worker": [{"name": ob.GATE}]}
    assert len(ob.templates(mpi)) == 2
    worker = {"metadata": {"name": "m-worker-1", "labels": {
        "training.kubeflow.org/job-name": "m", "training.kubeflow.org/job-role": "worker",
        "training.kubeflow.org/replica-index": "1"}}}
    assert (ob.owner_name("MPIJob", worker), ob.pod_set_of("MPIJob", worker, ["launcher", "worker"])) == ("m", "worker")
    assert ob.finished({"kind": "MPIJob", "status": {"conditions": [{"type": "Failed", "status": "True"}]}}) == (
        True, False, "MPIJob Failed")
    tf = {"kind": "TFJob", "spec": {"tfReplicaSpecs": {"PS": {}, "Worker": {}}}}
    assert not ob.is_suspended(tf)
    assert set(ob.suspend_patch(tf, False, "ns/t", 0)["spec"]["tfReplicaSpecs"]) == {"PS", "Worker"}
    ps = {"metadata": {"name": "t-ps-0", "labels": {"training.kubeflow.org/job-name": "t",
                                                    "training.kubeflow.org/replica-type": "ps"},
                       "ownerReferences": [{"kind": "TFJob", "name": "t", "controller": True}]}}
    assert (ob.owner_name("TFJob", ps), ob.pod_set_of("TFJob", ps, ["ps", "worker"])) == ("t", "ps")
    # (a PyTorchJob of the same name in the namespace does not take the TFJob's pod)
    assert ob.owner_name("PyTorchJob", ps) is None


def test_a_rayjob_is_suspended_resumed_and_its_pods_found_as_kuberay_makes_them():
    """KubeRay's RayJob: spec.suspend; resuming names gangway's scheduler in its head's and worker
    groups' templates and writes out the submitter's (KubeRay's default one, so its pod waits for
    gangway too); its cluster's pods are found by their RayCluster (the RayJob's status names it),
    its submitter's by their Job, named as the RayJob; it ends when jobDeploymentStatus says so."""
    ray = {"kind": "RayJob", "metadata": {"name": "r", "namespace": "ns", "labels": {ob.QUEUE_LABEL: "q"}},
           "spec": {"suspend": True, "shutdownAfterJobFinishes": True, "rayClusterSpec": {
               "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "ray:2"}]}}},
               "workerGroupSpecs": [{"groupName": "GPU", "replicas": 2, "template": {"spec": {"containers": []}}}]}}}
    assert ob.is_suspended(ray) and not ob.needs_suspending(ray) and len(ob.templates(ray)) == 2
    patch = ob.suspend_patch(ray, False, "ns/r", 1)
    assert patch["spec"]["suspend"] is False
    cluster = patch["spec"]["rayClusterSpec"]
    assert cluster["headGroupSpec"]["template"]["spec"] == {"schedulerName": "gangway"}
    assert cluster["workerGroupSpecs"][0]["template"]["spec"]["schedulerName"] == "gangway"
    assert cluster["workerGroupSpecs"][0]["groupName"] == "GPU"  # (the list is replaced whole)
    submitter = patch["spec"]["submitterPodTemplate"]["spec"]
    assert submitter["schedulerName"] == "gangway" and submitter["containers"][0]["image"] == "ray:2"
    assert "submitterPodTemplate" not in ob.suspend_patch({**ray, "spec": {**ray["spec"], "submissionMode": "HTTPMode"}},
                                                          False, "ns/r", 1)["spec"]
    clusters = {("ns", "r-abcde"): "r"}
    head = {"metadata": {"name": "r-abcde-head-x", "namespace": "ns", "labels": {
        "ray.io/cluster": "r-abcde", "ray.io/node-type": "head", "ray.io/group": "headgroup"}}}
    worker = {"metadata": {"name": "r-abcde-worker-gpu-y", "namespace": "ns", "labels": {
        "ray.io/cluster": "r-abcde", "ray.io/node-type": "worker", "ray.io/group": "GPU"}}}
    submit = {"metadata": {"name": "r-z", "namespace": "ns", "labels": {"batch.kubernetes.io/job-name": "r"}}}
    pod_sets = ["head", "gpu", "submitter"]
    assert [(("RayJob", "r") in ob.owners(p, clusters), ob.pod_set_of("RayJob", p, pod_sets))
            for p in (head, worker, submit)] == [(True, "head"), (True, "gpu"), (True, "submitter")]
    assert ("RayJob", "r") not in ob.owners(head, {})  # (a cluster no RayJob names is nobody's)
    assert ob.finished(ray) is None
    assert ob.finished({"kind": "RayJob", "status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}}) == (
        True, True, "RayJob Complete (SUCCEEDED)")
    assert ob.finished({"kind": "RayJob", "status": {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED",
                                                     "message": "exit 1"}}) == (True, False, "RayJob Failed (FAILED: exit 1)")


def base() -> LogBuilder:
    return LogBuilder().configure(contract(cluster_queue("q").gpus(16))).nodes(node("n1").gpus(8), node("n2").gpus(8))


def test_a_withdrawn_workload_gives_back_its_queue_place_quota_and_nodes():
    log = base().running(workload("w").queue("q").gpus(8)).queue(workload("v").queue("q").gpus(8))
    assert log.state.usage["q"]
    log.add(ev.WorkloadWithdrawn(workload="w", reason="Job ns/w deleted"))
    log.add(ev.WorkloadWithdrawn(workload="v", reason="Job ns/v deleted"))
    w, v = log.state.workloads["w"], log.state.workloads["v"]
    assert (w.phase, w.withdrawn, v.phase) == ("finished", "Job ns/w deleted", "finished")
    assert not log.state.pending and not log.state.active
    assert all(n.free == n.allocatable for n in log.state.nodes.values())
    assert all(amount == 0 for amount in log.state.usage["q"].values())


def test_a_cordoned_node_keeps_what_runs_there_gets_nothing_new_and_comes_back_with_its_room():
    log = base().running(workload("w").queue("q").gpus(8))
    home = log.state.workloads["w"].placement.assignments[0].node
    other = "n2" if home == "n1" else "n1"
    log.add(ev.NodeObserved(node=home, allocatable={"nvidia.com/gpu": 8000}, unavailable="cordoned"))
    assert home not in log.state.nodes and log.state.unavailable == {home: "cordoned"}
    assert log.state.workloads["w"].phase == "running"
    log.queue(workload("x").queue("q").gpus(8)).admit("x")
    [placed] = decide_placement(log.state)
    assert [a.node for a in placed.assignments] == [other]
    log.add(ev.NodeObserved(node=home, allocatable={"nvidia.com/gpu": 8000}))
    assert log.state.nodes[home].free["nvidia.com/gpu"] == 0 and not log.state.unavailable
    # Removed while cordoned: what ran there goes back to its queue.
    log.add(ev.NodeObserved(node=home, allocatable={"nvidia.com/gpu": 8000}, unavailable="cordoned"))
    log.add(ev.NodeRemoved(node=home))
    assert log.state.workloads["w"].phase == "pending" and home not in log.state.unavailable


def test_a_job_is_resumed_behind_gangways_gate_and_a_gated_pod_is_pinned_then_ungated():
    job = {"kind": "Job", "spec": {"suspend": True, "template": {"spec": {
        "schedulingGates": [{"name": "example.com/other"}], "containers": []}}}}
    patch = ob.suspend_patch(job, False, "ns/j", 1, gate=ob.GATE)
    assert patch["spec"]["suspend"] is False
    assert patch["spec"]["template"] == {"spec": {"schedulingGates": [{"name": "example.com/other"}, {"name": ob.GATE}]}}
    again = ob.suspend_patch({"kind": "Job", "spec": {"template": patch["spec"]["template"]}}, False, "ns/j", 2, gate=ob.GATE)
    assert again["spec"]["template"]["spec"]["schedulingGates"].count({"name": ob.GATE}) == 1
    assert not ob.names_scheduler(job, "gangway")
    assert ob.names_scheduler({"kind": "Job", "spec": {"template": {"spec": {"schedulerName": "gangway"}}}}, "gangway")
    pod = {"metadata": {"name": "j-0"}, "spec": {"schedulingGates": [{"name": ob.GATE}, {"name": "example.com/other"}]}}
    assert ob.gates(pod) == [ob.GATE, "example.com/other"]
    assert ob.ungate_patch(pod, "n1", [2, 3], ob.GATE) == {
        "metadata": {"annotations": {ob.GPUS_ANNOTATION: "2,3"}},
        "spec": {"nodeSelector": {ob.HOSTNAME_LABEL: "n1"}, "schedulingGates": [{"name": "example.com/other"}]}}
    assert ob.ungate_patch({"spec": {"schedulingGates": [{"name": ob.GATE}]}}, "n1", [], ob.GATE)["spec"][
        "schedulingGates"] is None


def test_resuming_adds_the_tolerations_of_the_admitted_flavors_each_template_lacks():
    from gangway.events.contract import Toleration
    spot = ob.toleration_object(Toleration(key="spot", operator="Exists", effect="NoSchedule"))
    assert spot == {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
    own = {"key": "team", "value": "a"}
    ptj = {"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {
        "Master": {"template": {"spec": {"tolerations": [own]}}}, "Worker": {"template": {"spec": {"tolerations": [spot]}}}}}}
    patch = ob.suspend_patch(ptj, False, "ns/p", 1, tolerations=[spot])
    specs = {t: rs["template"]["spec"] for t, rs in patch["spec"]["pytorchReplicaSpecs"].items()}
    assert specs["Master"] == {"schedulerName": ob.SCHEDULER_NAME, "tolerations": [own, spot]}
    assert specs["Worker"]["tolerations"] == [spot]  # already there: not twice
    plain = ob.suspend_patch(ptj, False, "ns/p", 1)
    assert all("tolerations" not in rs["template"]["spec"] for rs in plain["spec"]["pytorchReplicaSpecs"].values())


async def test_a_kind_whose_webhook_refuses_a_new_scheduler_is_resumed_behind_the_gate():
    """JobSet's own validating webhook answers 403 (not the API server's 422) to a new schedulerName
    in a suspended JobSet's templates, and allows scheduling gates: the binder gates its pods instead,
    and gates the kind's next objects at once."""
    from types import SimpleNamespace

    from gangway.adapters.kubernetes import ApiError
    from gangway.services.binder.kubernetes import KubernetesBinder

    class Kube:
        def __init__(self):
            self.patches = []

        async def patch(self, res, name, body, namespace=None, **_):
            self.patches.append(body)
            templates = [rj["template"]["spec"]["template"]["spec"] for rj in body["spec"].get("replicatedJobs", [])]
            if any("schedulerName" in t for t in templates):
                raise ApiError(403, "Forbidden", 'admission webhook "vjobset.kb.io" denied the request: '
                               'spec.replicatedJobs: Invalid value: ...: field is immutable')
            return {}

    kube = Kube()
    binder = KubernetesBinder(kube, "b-0")
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "js", "namespace": "team"},
              "spec": {"suspend": True, "replicatedJobs": [
                  {"name": "workers", "template": {"spec": {"template": {"spec": {"containers": []}}}}}]}}
    wl = SimpleNamespace(spec=SimpleNamespace(workload="team/js"), attempt=0, admission=SimpleNamespace(counts={}))
    await binder._resume(wl, jobset, [])
    gated = kube.patches[-1]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert len(kube.patches) == 2 and gated["schedulingGates"] == [{"name": ob.GATE}]
    await binder._resume(wl, jobset, [])  # the next one is gated at once
    assert len(kube.patches) == 3 and "schedulingGates" in \
        kube.patches[-1]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
