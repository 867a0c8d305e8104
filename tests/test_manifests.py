"""What ``gangway submit`` reads: Kubernetes Jobs, JobSets, PyTorchJobs, Lists and gangway's own format."""

from __future__ import annotations

import json
import textwrap

import msgspec
import pytest
from pathlib import Path
from msgspec.structs import replace

from gangway.events import codec
from gangway.events.catalogue import (
    ConfigApplied, Envelope, JobSubmitted, PodSetRequest, TopologyRequest, WorkloadQueued,
)
from gangway.events.contract import ClusterQueue, Contract, FlavorQuotas, LocalQueue, Quota
from gangway.events.fold import apply
from gangway.events.state import State
from gangway.services.submission.manifests import ManifestError, iter_jobs, load_jobs, to_cloudevent_record
from gangway.services.submission.policy import decide_submission


def yaml_text(text: str) -> str:
    return textwrap.dedent(text).lstrip()


BATCH_JOB = yaml_text("""
    apiVersion: batch/v1
    kind: Job
    metadata:
      name: sample-job
      namespace: team-a
      labels:
        kueue.x-k8s.io/queue-name: training
        kueue.x-k8s.io/priority-class: high
        team: vision
      annotations:
        gangway.io/runtime-seconds: "3600"
    spec:
      parallelism: 3
      completions: 3
      suspend: true
      template:
        metadata:
          annotations:
            kueue.x-k8s.io/podset-preferred-topology: cloud.google.com/gce-topology-block
        spec:
          containers:
          - name: trainer
            image: registry.k8s.io/e2e-test-images/agnhost:2.53
            args: ["entrypoint-tester", "hello", "world"]
            resources:
              requests:
                cpu: 1
                memory: "200Mi"
              limits:
                nvidia.com/gpu: 8
          - name: sidecar
            image: busybox
            resources:
              requests:
                cpu: 500m
                memory: 100Mi
          restartPolicy: Never
""")

JOBSET = yaml_text("""
    apiVersion: jobset.x-k8s.io/v1alpha2
    kind: JobSet
    metadata:
      name: llm-pretrain
      labels:
        kueue.x-k8s.io/queue-name: user-queue
    spec:
      network:
        enableDNSHostnames: true
      replicatedJobs:
      - name: workers
        replicas: 2
        template:
          spec:
            parallelism: 4
            completions: 4
            backoffLimit: 0
            template:
              metadata:
                annotations:
                  kueue.x-k8s.io/podset-required-topology: topology.gangway.io/block
                  kueue.x-k8s.io/podset-slice-required-topology: topology.gangway.io/rack
                  kueue.x-k8s.io/podset-slice-size: "4"
              spec:
                containers:
                - name: trainer
                  image: python:3.11
                  resources:
                    limits:
                      nvidia.com/gpu: 8
                      cpu: 96
                      memory: 1Ti
      - name: driver
        template:
          spec:
            template:
              spec:
                containers:
                - name: driver
                  image: python:3.11
                  resources:
                    requests:
                      cpu: 2
                      memory: 8Gi
""")

PYTORCH_JOB = yaml_text("""
    apiVersion: "kubeflow.org/v1"
    kind: PyTorchJob
    metadata:
      name: pytorch-simple
      namespace: kubeflow
      labels:
        kueue.x-k8s.io/queue-name: user-queue
    spec:
      pytorchReplicaSpecs:
        Worker:
          replicas: 3
          restartPolicy: OnFailure
          template:
            spec:
              containers:
                - name: pytorch
                  image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
                  imagePullPolicy: Always
                  command: ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]
                  resources:
                    requests:
                      cpu: 1
                      memory: "200Mi"
                      nvidia.com/gpu: 1
        Master:
          replicas: 1
          restartPolicy: OnFailure
          template:
            spec:
              containers:
                - name: pytorch
                  image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
                  resources:
                    requests:
                      cpu: 1
                      memory: "200Mi"
""")

GANGWAY_JOB = yaml_text("""
    job_id: notebook-42
    namespace: team-a
    queue: training
    kind: Job
    runtime_seconds: 600
    pod_sets:
    - name: main
      count: 1
      resources: {cpu: 4, nvidia.com/gpu: 1}
""")

WRAPPED_GANGWAY_JOB = yaml_text("""
    apiVersion: gangway.io/v1alpha1
    kind: JobSubmitted
    spec:
      job_id: notebook-43
      namespace: team-a
      queue: training
      priority_class: low
      pod_sets:
      - name: main
        count: 2
        resources: {cpu: 500m}
        topology: {required: topology.gangway.io/rack}
""")


def indent(text: str, spaces: int) -> str:
    return textwrap.indent(text, " " * spaces)


LIST = "apiVersion: v1\nkind: List\nitems:\n- " + indent(BATCH_JOB, 2).lstrip() + "- " + indent(PYTORCH_JOB, 2).lstrip()


# --- what each kind becomes ------------------------------------------------------------------------

SAMPLE_JOB = JobSubmitted(
    job_id="sample-job", namespace="team-a", queue="training", kind="Job", priority_class="high",
    runtime_seconds=3600.0, labels={"team": "vision"},
    pod_sets=[PodSetRequest(
        name="main", count=3,
        resources={"cpu": "1500m", "memory": str(300 * 2**20), "nvidia.com/gpu": 8},
        topology=TopologyRequest(preferred="cloud.google.com/gce-topology-block"),
    )],
)
LLM_PRETRAIN = JobSubmitted(
    job_id="llm-pretrain", namespace="default", queue="user-queue", kind="JobSet",
    pod_sets=[
        PodSetRequest(
            name="workers", count=8, resources={"nvidia.com/gpu": 8, "cpu": 96, "memory": "1Ti"},
            topology=TopologyRequest(required="topology.gangway.io/block",
                                     slice_required="topology.gangway.io/rack", slice_size=4),
        ),
        PodSetRequest(name="driver", count=1, resources={"cpu": 2, "memory": "8Gi"}),
    ],
)
PYTORCH_SIMPLE = JobSubmitted(
    job_id="pytorch-simple", namespace="kubeflow", queue="user-queue", kind="PyTorchJob",
    pod_sets=[
        PodSetRequest(name="master", count=1, resources={"cpu": 1, "memory": "200Mi"}),
        PodSetRequest(name="worker", count=3, resources={"cpu": 1, "memory": "200Mi", "nvidia.com/gpu": 1}),
    ],
)
TF_JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: tf-dist
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: user-queue}
spec:
  runPolicy: {suspend: true}
  tfReplicaSpecs:
    Worker:
      replicas: 4
      template:
        spec:
          containers: [{name: tensorflow, image: tf, resources: {limits: {nvidia.com/gpu: 2}, requests: {cpu: 4}}}]
    PS:
      replicas: 2
      template:
        spec:
          containers: [{name: tensorflow, image: tf, resources: {requests: {cpu: 2}}}]
    Chief:
      template:
        spec:
          containers: [{name: tensorflow, image: tf, resources: {requests: {cpu: 1}}}]
"""
TF_DIST = JobSubmitted(
    job_id="tf-dist", namespace="ml", queue="user-queue", kind="TFJob",
    pod_sets=[  # (Chief, PS, Worker: the training operator's order, as Kueue lists them)
        PodSetRequest(name="chief", count=1, resources={"cpu": 1}),
        PodSetRequest(name="ps", count=2, resources={"cpu": 2}),
        PodSetRequest(name="worker", count=4, resources={"cpu": 4, "nvidia.com/gpu": 2}),
    ],
)
MPI_JOB = """
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: mpi-allreduce
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: user-queue}
spec:
  slotsPerWorker: 8
  mpiReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: worker, image: mpi, resources: {limits: {nvidia.com/gpu: 8}}}]
    Launcher:
      replicas: 1
      template:
        spec:
          containers: [{name: launcher, image: mpi, resources: {requests: {cpu: "500m"}}}]
"""
MPI_ALLREDUCE = JobSubmitted(
    job_id="mpi-allreduce", namespace="ml", queue="user-queue", kind="MPIJob",
    pod_sets=[PodSetRequest(name="launcher", count=1, resources={"cpu": "500m"}),
              PodSetRequest(name="worker", count=2, resources={"nvidia.com/gpu": 8})],
)
NOTEBOOK_42 = JobSubmitted(
    job_id="notebook-42", namespace="team-a", queue="training", runtime_seconds=600.0,
    pod_sets=[PodSetRequest(name="main", count=1, resources={"cpu": 4, "nvidia.com/gpu": 1})],
)
NOTEBOOK_43 = JobSubmitted(
    job_id="notebook-43", namespace="team-a", queue="training", priority_class="low",
    pod_sets=[PodSetRequest(name="main", count=2, resources={"cpu": "500m"},
                            topology=TopologyRequest(required="topology.gangway.io/rack"))],
)

LOADS = [
    ("a batch/v1 Job sums its containers' requests, falling back to limits", BATCH_JOB, [SAMPLE_JOB]),
    ("a JobSet has one pod set per replicatedJob of replicas times parallelism", JOBSET, [LLM_PRETRAIN]),
    ("a PyTorchJob has a master and a worker pod set", PYTORCH_JOB, [PYTORCH_SIMPLE]),
    ("a TFJob has a pod set per replica type, chief first", TF_JOB, [TF_DIST]),
    ("an MPIJob has a launcher and a worker pod set", MPI_JOB, [MPI_ALLREDUCE]),
    ("an XGBoostJob is read as the other Kubeflow kinds",
     PYTORCH_JOB.replace("PyTorchJob", "XGBoostJob").replace("pytorchReplicaSpecs", "xgbReplicaSpecs"),
     [msgspec.structs.replace(PYTORCH_SIMPLE, kind="XGBoostJob")]),
    ("a List yields each of its items in order", LIST, [SAMPLE_JOB, PYTORCH_SIMPLE]),
    ("gangway's own JobSubmitted is read as it is", GANGWAY_JOB, [NOTEBOOK_42]),
    ("gangway's JobSubmitted wrapped in apiVersion and kind is read from spec", WRAPPED_GANGWAY_JOB, [NOTEBOOK_43]),
    ("several YAML documents yield every job, empty documents skipped",
     "---\n" + BATCH_JOB + "---\n---\n" + GANGWAY_JOB + "...\n", [SAMPLE_JOB, NOTEBOOK_42]),
    ("a JSON document is read too", json.dumps({
        "job_id": "notebook-42", "namespace": "team-a", "queue": "training", "runtime_seconds": 600,
        "pod_sets": [{"name": "main", "count": 1, "resources": {"cpu": 4, "nvidia.com/gpu": 1}}]}), [NOTEBOOK_42]),
    ("a top-level sequence is read like a List", "- " + indent(GANGWAY_JOB, 2).lstrip(), [NOTEBOOK_42]),
    ("a Job's completions below its parallelism bound its pod count",
     BATCH_JOB.replace("completions: 3", "completions: 2"),
     [replace(SAMPLE_JOB, pod_sets=[replace(SAMPLE_JOB.pod_sets[0], count=2)])]),
    ("an empty file has no jobs", "", []),
    ("a replica type of 0 replicas runs nothing and is no pod set (Kueue admits such a job)",
     PYTORCH_JOB.replace("replicas: 3", "replicas: 0"),
     [replace(PYTORCH_SIMPLE, pod_sets=[ps for ps in PYTORCH_SIMPLE.pod_sets if ps.name != "worker"])]),
    ("a replicatedJob of 0 replicas likewise", JOBSET.replace("replicas: 2", "replicas: 0"),
     [replace(LLM_PRETRAIN, pod_sets=[ps for ps in LLM_PRETRAIN.pod_sets if ps.name != "workers"])]),
]


@pytest.mark.parametrize("text, expected", [case[1:] for case in LOADS], ids=[case[0] for case in LOADS])
def test_manifests_become_jobs(text, expected):
    assert load_jobs(text, "jobs.yaml") == expected


# --- what is refused, and where ------------------------------------------------------------------


ERRORS = [
    ("a Job without the queue label names the label", BATCH_JOB.replace("kueue.x-k8s.io/queue-name: training", "a: b"),
     1, "Job", "sample-job", "metadata.labels['kueue.x-k8s.io/queue-name']"),
    ("a min-parallelism above the Job's pods is refused",
     BATCH_JOB.replace('gangway.io/runtime-seconds: "3600"', 'kueue.x-k8s.io/job-min-parallelism: "7"'),
     1, "Job", "sample-job", "metadata.annotations['kueue.x-k8s.io/job-min-parallelism']"),
    ("a Job without any name is refused", BATCH_JOB.replace("  name: sample-job\n", ""), 1, "Job", "", "metadata.name"),
    ("an unsupported kind is refused", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
     1, "Deployment", "web", "kind"),
    ("a JobSet of another API version is refused", JOBSET.replace("v1alpha2", "v1alpha1"), 1, "JobSet", "llm-pretrain",
     "apiVersion"),
    ("a document that is not a mapping is refused", "---\n" + GANGWAY_JOB + "---\njust a string\n", 2, "", "", ""),
    ("YAML that does not parse is refused with its document", GANGWAY_JOB + "---\nkey: [unclosed\n", 2, "", "", ""),
    ("a label that is not a string is refused", BATCH_JOB.replace("team: vision", "gpu: true"),
     1, "Job", "sample-job", "metadata.labels['gpu']"),
    ("a runtime annotation that is not a number is refused",
     BATCH_JOB.replace('gangway.io/runtime-seconds: "3600"', 'gangway.io/runtime-seconds: "an hour"'),
     1, "Job", "sample-job", "metadata.annotations['gangway.io/runtime-seconds']"),
    ("a slice size that is not an integer is refused", JOBSET.replace('podset-slice-size: "4"', 'podset-slice-size: "four"'),
     1, "JobSet", "llm-pretrain",
     "spec.replicatedJobs[0].template.spec.template.metadata.annotations['kueue.x-k8s.io/podset-slice-size']"),
    ("a Job without a pod template is refused", "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\n"
     "  labels: {kueue.x-k8s.io/queue-name: q}\nspec: {parallelism: 1}\n", 1, "Job", "j", "spec.template"),
    ("a negative replica count is refused", JOBSET.replace("replicas: 2", "replicas: -2"),
     1, "JobSet", "llm-pretrain", "spec.replicatedJobs[0].replicas"),
    ("a resource that is not a quantity is refused", BATCH_JOB.replace("memory: 100Mi", "memory: [100]"),
     1, "Job", "sample-job", "spec.template.spec.containers[1].resources.requests['memory']"),
    ("a bad quantity summed over containers is refused", BATCH_JOB.replace("cpu: 500m", "cpu: half"),
     1, "Job", "sample-job", "spec.template.spec.containers[1].resources.requests['cpu']"),
    ("an MPIJob of the training operator's old version is refused, naming the one read",
     MPI_JOB.replace("v2beta1", "v1"), 1, "MPIJob", "mpi-allreduce", "apiVersion"),
    ("a TFJob's replica specs under PyTorch's field are refused", TF_JOB.replace("tfReplicaSpecs", "pytorchReplicaSpecs"),
     1, "TFJob", "tf-dist", "spec.tfReplicaSpecs"),
    ("a PyTorchJob without replica specs is refused", PYTORCH_JOB.split("  pytorchReplicaSpecs:")[0]
     + "  pytorchReplicaSpecs: {}\n", 1, "PyTorchJob", "pytorch-simple", "spec.pytorchReplicaSpecs"),
    ("a gangway job with a wrongly typed field names it", GANGWAY_JOB.replace("count: 1", "count: one"),
     1, "JobSubmitted", "notebook-42", "pod_sets[0].count"),
    ("a wrapped gangway job with a wrongly typed field names it under spec",
     WRAPPED_GANGWAY_JOB.replace("count: 2", "count: two"), 1, "JobSubmitted", "notebook-43", "spec.pod_sets[0].count"),
    ("a List whose items are not a list is refused", "apiVersion: v1\nkind: List\nitems: {}\n", 1, "List", "", "items"),
    ("an error inside a List names the item", LIST.replace("kueue.x-k8s.io/queue-name: user-queue", "x: y"),
     1, "PyTorchJob", "pytorch-simple", "items[1].metadata.labels['kueue.x-k8s.io/queue-name']"),
    ("a Job of no pods is refused (parallelism 0)", BATCH_JOB.replace("parallelism: 3", "parallelism: 0"),
     1, "Job", "sample-job", "spec"),
    ("a JobSet every replicatedJob of which has 0 replicas is refused", JOBSET.replace("replicas: 2", "replicas: 0")
     .replace("\n  - name: driver\n", "\n  - name: driver\n    replicas: 0\n"), 1, "JobSet", "llm-pretrain", "spec"),
    ("an item of a List that is not a mapping is named without a dangling dot",
     "apiVersion: v1\nkind: List\nitems: [just words]\n", 1, "", "", "items[0]"),
    ("a document that is a list of words names the item", "- just words\n", 1, "", "", "[0]"),
]


def test_a_manifest_without_an_api_version_is_told_it_is_missing_and_which_one_is_read():
    with pytest.raises(ManifestError) as caught:
        load_jobs(BATCH_JOB.replace("apiVersion: batch/v1\n", ""), "jobs.yaml")
    assert (caught.value.field, caught.value.reason) == ("apiVersion", "missing_field")
    assert caught.value.problem == "missing: gangway reads Job as apiVersion batch/v1"
    with pytest.raises(ManifestError, match="items\\[0\\]: an item must be a mapping, not str"):
        load_jobs("apiVersion: v1\nkind: List\nitems: [just words]\n", "jobs.yaml")


@pytest.mark.parametrize("text, document, kind, name, field", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_bad_manifests_are_refused_with_where_and_why(text, document, kind, name, field):
    with pytest.raises(ManifestError) as caught:
        load_jobs(text, "jobs.yaml")

    error = caught.value
    assert (error.filename, error.document, error.kind, error.name, error.field) == ("jobs.yaml", document, kind, name, field)
    assert str(error).startswith(f"jobs.yaml: document {document}")
    assert error.problem and error.problem in str(error)


@pytest.mark.parametrize("text, reason", [
    ("job_id: first\nnamespace: batch\njob_id: second\nqueue: q\n"
     "pod_sets: [{name: m, count: 1, resources: {nvidia.com/gpu: 1}}]\n", "malformed_yaml"),
    ('{"job_id": "first", "job_id": "second", "namespace": "batch", "queue": "q", '
     '"pod_sets": [{"name": "m", "count": 1, "resources": {"nvidia.com/gpu": 1}}]}', "malformed_json"),
], ids=["yaml", "json"])
def test_a_key_written_twice_is_refused_not_the_last_one_taken(text, reason):
    """As Kubernetes' strict decoding: the second job_id silently won (a stranger's test)."""
    with pytest.raises(ManifestError) as caught:
        load_jobs(text, "jobs.yaml")
    assert caught.value.reason == reason and 'duplicate key "job_id"' in caught.value.problem


# --- the record gangway submit writes ----------------------------------------------------------------


def test_a_job_becomes_a_binary_mode_cloudevent_record():
    key, value, headers = to_cloudevent_record(SAMPLE_JOB, "gangway-cli/alice", 1_735_689_600_000)

    env = codec.from_record(value, headers)
    names = dict(headers)
    assert key == b"sample-job"
    assert env.data == SAMPLE_JOB
    assert (env.id, env.source, env.time_ms) == ("submit/team-a/sample-job/1735689600000/" + env.id.rsplit("/", 1)[1],
                                                 "gangway-cli/alice", 1_735_689_600_000)
    assert to_cloudevent_record(SAMPLE_JOB, "x", 1, nonce="n")[2][1] == ("ce_id", b"submit/team-a/sample-job/1/n")
    assert names["ce_type"] == b"io.gangway.job.submitted.v1" and names["ce_subject"] == b"sample-job"


def test_every_manifest_kind_is_queued_by_the_submission_service():
    contract = Contract(
        cluster_queues=[ClusterQueue(name="cq", flavors=[FlavorQuotas(flavor="f", resources={
            "cpu": Quota(nominal=10**9), "memory": Quota(nominal=2**62), "nvidia.com/gpu": Quota(nominal=10**6)})])],
        local_queues=[LocalQueue(namespace="team-a", name="training", cluster_queue="cq"),
                      LocalQueue(namespace="default", name="user-queue", cluster_queue="cq"),
                      LocalQueue(namespace="kubeflow", name="user-queue", cluster_queue="cq")],
    )
    state = apply(State(), Envelope(id="c", source="t", time_ms=1, data=ConfigApplied(contract=contract, digest="d"), offset=0))
    jobs = load_jobs("---\n".join([JOBSET, PYTORCH_JOB, GANGWAY_JOB]), "jobs.yaml")

    for offset, job in enumerate(jobs):
        key, value, headers = to_cloudevent_record(job, "test", 5)
        result = decide_submission(value, key, headers, state, {}, f"gangway.submissions/0/{offset}")
        assert isinstance(result, WorkloadQueued), result
        assert [ps.name for ps in result.pod_sets] == [ps.name for ps in job.pod_sets]


# --- Kueue's own samples (copies in tests/data/kueue-examples, see PROVENANCE.md) -----------------

KUEUE_EXAMPLES = Path(__file__).parent / "data" / "kueue-examples"


def test_a_job_with_only_generate_name_gets_a_generated_name_as_kubectl_create_gives():
    seen = []
    text = BATCH_JOB.replace("name: sample-job", "generateName: sample-job-")
    first = load_jobs(text, "jobs.yaml", on_generated=lambda prefix, name: seen.append((prefix, name)))[0]
    second = load_jobs(text, "jobs.yaml")[0]
    assert first.job_id.startswith("sample-job-") and len(first.job_id) == len("sample-job-") + 5
    assert first.job_id != second.job_id
    assert seen == [("sample-job-", first.job_id)]


def test_the_min_parallelism_annotation_lets_a_job_run_partially():
    job = load_jobs((KUEUE_EXAMPLES / "jobs-sample-job-partial-admission.yaml").read_text(), "x.yaml")[0]
    assert (job.pod_sets[0].count, job.pod_sets[0].min_count) == (20, 5)


@pytest.mark.parametrize("name", sorted(p.name for p in KUEUE_EXAMPLES.glob("*.yaml") if "setup" not in p.name))
def test_every_kueue_sample_of_an_accepted_kind_loads(name):
    jobs = load_jobs((KUEUE_EXAMPLES / name).read_text(), name)
    assert len(jobs) == 1 and jobs[0].kind in ("Job", "JobSet", "PyTorchJob") and jobs[0].queue in ("user-queue", "main")


def misplaced(metadata: str, template_metadata: str) -> str:
    """A 2-pod Job named misplaced in namespace team, with these lines (flow-style YAML) in its
    metadata and its pod template's."""
    return textwrap.dedent(f"""\
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: misplaced
          namespace: team
          {metadata}
        spec:
          parallelism: 2
          template:
            metadata:
              {template_metadata}
            spec:
              containers: [{{name: c, image: x, resources: {{requests: {{nvidia.com/gpu: "1"}}}}}}]
        """)


def test_a_key_gangway_reads_put_where_it_does_not_read_it_is_named_in_a_warning():
    """Kueue reads the queue name and priority class as labels, partial admission and topology as
    annotations (gangway its runtime and profile too): one in the other place is not read, and
    `gangway submit` says so; a queue name given only as an annotation is refused with the hint."""
    text = misplaced('labels: {kueue.x-k8s.io/queue-name: lq, kueue.x-k8s.io/job-min-parallelism: "1", '
                     'gangway.io/runtime-seconds: "60"}\n          annotations: {kueue.x-k8s.io/priority-class: high}',
                     "labels: {kueue.x-k8s.io/podset-required-topology: example.com/rack}")
    unread: list[str] = []
    [job] = load_jobs(text, "job.yaml", on_unread=unread.append)
    assert job.runtime_seconds is None and job.priority_class is None and job.pod_sets[0].min_count is None
    assert job.pod_sets[0].topology is None
    said = "job.yaml: warning: Job misplaced: {} is {} here; gangway reads it as {}{}: ignored"
    assert unread == [
        said.format("kueue.x-k8s.io/job-min-parallelism", "a label", "an annotation", " (as Kueue does)"),
        said.format("gangway.io/runtime-seconds", "a label", "an annotation", ""),
        said.format("kueue.x-k8s.io/priority-class", "an annotation", "a label", " (as Kueue does)"),
        said.format("kueue.x-k8s.io/podset-required-topology", "a label", "an annotation", " (as Kueue does)"),
    ]
    only_annotated = text.replace("kueue.x-k8s.io/queue-name: lq, ", "").replace(
        "annotations: {kueue.x-k8s.io/priority-class: high}", "annotations: {kueue.x-k8s.io/queue-name: lq}")
    with pytest.raises(ManifestError, match="it is an annotation here: Kueue and gangway read it as a label"):
        load_jobs(only_annotated, "job.yaml")


def test_an_annotation_on_the_wrong_object_is_named_in_a_warning():
    """Topology is read from each pod template's annotations (Kueue's podset-* keys), partial
    admission and the runtime from the object's own: one on the other is not read."""
    text = misplaced("labels: {kueue.x-k8s.io/queue-name: lq}\n"
                     "          annotations: {kueue.x-k8s.io/podset-required-topology: example.com/rack}",
                     'annotations: {kueue.x-k8s.io/job-min-parallelism: "1", gangway.io/runtime-seconds: "60"}')
    unread: list[str] = []
    [job] = load_jobs(text, "job.yaml", on_unread=unread.append)
    assert job.pod_sets[0].topology is None and job.pod_sets[0].min_count is None and job.runtime_seconds is None
    assert unread == [
        "job.yaml: warning: Job misplaced: kueue.x-k8s.io/podset-required-topology is on the object's metadata; "
        "gangway reads it from each pod template's annotations (as Kueue does): ignored",
        "job.yaml: warning: Job misplaced: kueue.x-k8s.io/job-min-parallelism is on a pod template; gangway reads it "
        "from the object's own annotations (as Kueue does): ignored",
        "job.yaml: warning: Job misplaced: gangway.io/runtime-seconds is on a pod template; gangway reads it from "
        "the object's own annotations: ignored",
    ]
    unread.clear()
    fixed = text.replace("annotations: {kueue.x-k8s.io/podset-required-topology: example.com/rack}",
                         "annotations: {kueue.x-k8s.io/job-min-parallelism: '1', gangway.io/runtime-seconds: '60'}")
    fixed = fixed.replace('annotations: {kueue.x-k8s.io/job-min-parallelism: "1", gangway.io/runtime-seconds: "60"}',
                          "annotations: {kueue.x-k8s.io/podset-required-topology: example.com/rack}")
    [job] = load_jobs(fixed, "job.yaml", on_unread=unread.append)
    assert unread == [] and job.pod_sets[0].topology.required == "example.com/rack" and job.runtime_seconds == 60


def test_a_kueue_key_gangway_does_not_read_is_named_in_a_warning():
    """The job is still read (and runs), but `gangway submit` says what Kueue would have acted on."""
    text = textwrap.dedent("""\
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: grouped
          namespace: team
          labels: {kueue.x-k8s.io/queue-name: lq, kueue.x-k8s.io/priority-class: high}
          annotations: {kueue.x-k8s.io/job-min-parallelism: "1", kueue.x-k8s.io/pod-group-total-count: "2",
                        provreq.kueue.x-k8s.io/maxRunDurationSeconds: "600", example.com/kueue.x-k8s.io: "x"}
        spec:
          parallelism: 2
          managedBy: kueue.x-k8s.io/multikueue
          template:
            metadata:
              annotations:
                kueue.x-k8s.io/podset-required-topology: example.com/rack
                kueue.x-k8s.io/podset-group-name: together
            spec:
              priorityClassName: high-priority
              containers: [{name: c, image: x, resources: {requests: {nvidia.com/gpu: "1"}}}]
        """)
    unread: list[str] = []
    [job] = load_jobs(text, "job.yaml", on_unread=unread.append)
    assert job.job_id == "grouped" and job.pod_sets[0].priority_class_name == "high-priority"  # read, not warned of
    assert unread == [
        "job.yaml: warning: Job grouped: spec.managedBy is kueue.x-k8s.io/multikueue: Kueue leaves such an object to "
        "MultiKueue, which runs it on another cluster; gangway runs it here",
        "job.yaml: warning: Job grouped: kueue.x-k8s.io/pod-group-total-count is not read by gangway; ignored",
        "job.yaml: warning: Job grouped: provreq.kueue.x-k8s.io/maxRunDurationSeconds is not read by gangway; ignored",
        "job.yaml: warning: Job grouped: kueue.x-k8s.io/podset-group-name is not read by gangway; ignored",
    ]


def test_a_misspelt_key_is_named_with_the_key_it_is_close_to():
    """A typo in one of gangway's own keys (``gangway.io/…``) was ignored without a word, the job
    running for the default time; now it is warned of with the key it is close to, as a close Kueue
    key is, and a queue-name label misspelt says so in the refusal. The keys the binder writes on
    the objects it manages are read back without a warning."""
    text = misplaced('labels: {kueue.x-k8s.io/queue-name: lq, gangway.io/uid: u1}\n'
                     '          annotations: {gangway.io/runtime-secnds: "60", gangway.io/workload: team/misplaced, '
                     'gangway.io/attempt: "1", gangway.io/colour: blue}',
                     "annotations: {kueue.x-k8s.io/podset-required-topolgy: example.com/rack, "
                     "gangway.io/gpu-indexes: '0'}")
    unread: list[str] = []
    [job] = load_jobs(text, "job.yaml", on_unread=unread.append)
    assert job.runtime_seconds is None and job.pod_sets[0].topology is None
    said = "job.yaml: warning: Job misplaced: {} is not read by gangway; ignored{}"
    assert unread == [
        said.format("gangway.io/runtime-secnds", " (a misspelling of gangway.io/runtime-seconds?)"),
        said.format("gangway.io/colour", ""),
        said.format("kueue.x-k8s.io/podset-required-topolgy",
                    " (a misspelling of kueue.x-k8s.io/podset-required-topology?)"),
    ]
    misspelt_queue = text.replace("kueue.x-k8s.io/queue-name: lq", "kueue.x-k8s.io/queue-nme: lq")
    with pytest.raises(ManifestError, match=r"missing: name the LocalQueue to submit to \(kueue.x-k8s.io/queue-nme "
                                            r"is here: a misspelling\?\)"):
        load_jobs(misspelt_queue, "job.yaml")


# --- what strangerB's report found (gangway submit) ------------------------------------------------


def gangway_doc(job_id: str = "y06", namespace: str = "batch", **more) -> str:
    fields = {"job_id": job_id, "namespace": namespace, "queue": "default",
              "pod_sets": [{"name": "main", "count": 1, "resources": {"nvidia.com/gpu": 1}}]} | more
    return json.dumps(fields)


def test_a_file_naming_one_job_twice_is_refused_naming_both_documents():
    with pytest.raises(ManifestError) as caught:
        load_jobs("\n---\n".join([gangway_doc(), gangway_doc(namespace="research"), gangway_doc()]), "jobs.yaml")
    assert caught.value.document == 3 and "batch/y06 is also document 1" in str(caught.value)
    # the same name in two namespaces is two jobs
    assert len(load_jobs("\n---\n".join([gangway_doc(), gangway_doc(namespace="research")]), "jobs.yaml")) == 2


def test_a_file_that_is_not_utf8_is_refused_naming_the_document_and_byte():
    with pytest.raises(ManifestError) as caught:
        load_jobs(b"\xff\xfe{}", "p03.json")
    assert str(caught.value).startswith("p03.json: document 1: not UTF-8 text") and "byte 0" in str(caught.value)
    text = (gangway_doc() + "\n---\n").encode() + b"job_id: caf\xe9\n"
    with pytest.raises(ManifestError) as caught:
        load_jobs(text, "jobs.yaml")
    assert caught.value.document == 2 and "line 3" in str(caught.value)
    assert load_jobs(gangway_doc().encode(), "jobs.json")[0].job_id == "y06"


@pytest.mark.parametrize("doc, problem", [
    ('{"runtime_seconds": 1e400}', "runtime_seconds: Number out of range (invalid_field"),
    ('{"runtime_seconds": NaN}', "runtime_seconds: not a number (NaN) (invalid_field"),
    ('{"runtime_seconds": -100}', "runtime_seconds is -100.0"),
    ('{"runtime_seconds": 1e12}', "runtime_seconds is 1000000000000.0"),
    ('{"job_id": "a/b"}', "job_id 'a/b' is not a valid Kubernetes name"),
    ('{"pod_sets": [{"name": "m", "count": 0, "resources": {"nvidia.com/gpu": 1}}]}', "pod_sets[0].count is 0"),
    ('{"labels": {"big": "%s"}}' % ("x" * 1_100_000), "over the 1048576-byte (1 MiB) limit"),
])
def test_gangway_submit_refuses_what_the_submission_service_would_reject_without_the_state(doc, problem):
    """``checked`` (gangway submit) runs the submission service's own state-free checks on each job,
    so a value JSON cannot carry on the record (an infinite runtime) is refused, not sent as none."""
    text = json.dumps(json.loads(gangway_doc()) | json.loads(doc)) if "NaN" not in doc and "1e400" not in doc \
        else gangway_doc()[:-1] + ", " + doc[1:]
    unchecked = load_jobs(text, "job.json")  # (the dry run reads them unchecked, and reports the rejection)
    assert len(unchecked) == 1
    with pytest.raises(ManifestError) as caught:
        load_jobs(text, "job.json", checked=True)
    assert caught.value.document == 1 and problem in str(caught.value), str(caught.value)


def test_an_infinite_runtime_is_refused_by_gangway_submit_as_the_kafka_path_refuses_it():
    """strangerB #9: the same JSON job, runtime_seconds 1e400, produced to gangway.submissions is
    rejected `invalid_field: runtime_seconds: Number out of range`; `gangway submit` (which reads the
    file as YAML, 1e400 being inf there) refused it as absurd_quantity, `runtime_seconds is inf`."""
    from gangway.events.state import State
    from gangway.services.submission.policy import decide_submission
    text = gangway_doc()[:-1] + ', "runtime_seconds": 1e400}'
    kafka = decide_submission(text.encode(), None, [], State(), {}, "s/0")
    with pytest.raises(ManifestError) as caught:
        load_jobs(text, "job.json", checked=True)
    assert (caught.value.reason, kafka.reason) == ("invalid_field", "invalid_field")
    assert kafka.message == "runtime_seconds: Number out of range"
    assert caught.value.problem == f"{kafka.message} (invalid_field, as the submission service would reject it)"


# --- a pod's effective request: init containers, sidecars and overhead ------------------------------


def pod_job(pod_spec: str) -> str:
    """A one-pod Job whose pod template's spec is ``pod_spec`` (YAML, indented for its place)."""
    return yaml_text("""
        apiVersion: batch/v1
        kind: Job
        metadata: {name: j, namespace: ns, labels: {kueue.x-k8s.io/queue-name: q}}
        spec:
          template:
            spec:
        """) + textwrap.indent(yaml_text(pod_spec), "      ")


def gpu(n: int | str, limit: int | str | None = None) -> str:
    return f"{{requests: {{nvidia.com/gpu: {n}}}, limits: {{nvidia.com/gpu: {n if limit is None else limit}}}}}"


@pytest.mark.parametrize("pod_spec, expected", [
    # an init container asking more than the app containers: the pod needs its request while it runs
    (f"""
    initContainers: [{{name: i, image: x, resources: {gpu(4)}}}]
    containers: [{{name: c, image: x, resources: {gpu(2)}}}]""", {"nvidia.com/gpu": "4"}),
    # a sidecar (an init container that keeps running) adds to the app containers
    (f"""
    initContainers: [{{name: s, image: x, restartPolicy: Always, resources: {gpu(1)}}}]
    containers: [{{name: c, image: x, resources: {gpu(2)}}}]""", {"nvidia.com/gpu": "3"}),
    # a regular init container after a sidecar runs beside it (KEP-753): 1 + 4 > 1 + 2
    (f"""
    initContainers:
    - {{name: s, image: x, restartPolicy: Always, resources: {gpu(1)}}}
    - {{name: i, image: x, resources: {gpu(4)}}}
    containers: [{{name: c, image: x, resources: {gpu(2)}}}]""", {"nvidia.com/gpu": "5"}),
    # ... one before it does not
    (f"""
    initContainers:
    - {{name: i, image: x, resources: {gpu(4)}}}
    - {{name: s, image: x, restartPolicy: Always, resources: {gpu(1)}}}
    containers: [{{name: c, image: x, resources: {gpu(2)}}}]""", {"nvidia.com/gpu": "4"}),
    # a smaller init container changes nothing; the pod's overhead is added; CPU by the same rule
    ("""
    initContainers: [{name: i, image: x, resources: {requests: {cpu: 3, nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 1}}}]
    containers:
    - {name: c, image: x, resources: {requests: {cpu: 500m}, limits: {nvidia.com/gpu: 2}}}
    - {name: d, image: x, resources: {requests: {cpu: 1}}}
    overhead: {cpu: 250m}""", {"nvidia.com/gpu": "2", "cpu": "3250m"}),
])
def test_a_pod_asks_for_its_effective_request_as_kubernetes_counts_it(pod_spec, expected):
    """max(the init containers' peak, the app containers and sidecars) plus overhead (a stranger's
    Job with a 4-GPU init container was queued and placed as 2 GPUs, which the kubelet refuses)."""
    [job] = load_jobs(pod_job(pod_spec), "job.yaml")
    assert job.pod_sets[0].resources == expected


def test_an_extended_resource_whose_request_differs_from_its_limit_is_refused():
    with pytest.raises(ManifestError) as caught:
        load_jobs(pod_job(f"containers: [{{name: c, image: x, resources: {gpu(4, limit=2)}}}]"), "job.yaml")
    assert caught.value.field == "spec.template.spec.containers[0].resources.requests['nvidia.com/gpu']"
    assert "4 differs from its limit 2" in caught.value.problem
    # the limit alone is the request; equal quantities written differently are equal; CPU may be overcommitted
    [job] = load_jobs(pod_job("""
    containers:
    - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 2}}}
    - {name: d, image: x, resources: {requests: {nvidia.com/gpu: "1", cpu: 1}, limits: {nvidia.com/gpu: 1000m, cpu: 2}}}
    """), "job.yaml")
    assert job.pod_sets[0].resources == {"nvidia.com/gpu": "3", "cpu": 1}


@pytest.mark.parametrize("amount", ["100m", "0.5", "1500m", 2.5])
def test_a_fraction_of_an_extended_resource_is_refused_as_the_api_server_refuses_it(amount):
    with pytest.raises(ManifestError) as caught:
        load_jobs(pod_job(f"containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: {amount!r}, cpu: 500m}}}}}}]"),
                  "job.yaml")
    assert caught.value.field == "spec.template.spec.containers[0].resources.limits['nvidia.com/gpu']"
    assert "is not a whole number" in caught.value.problem
    [job] = load_jobs(pod_job("containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 2000m, cpu: 500m}}}]"),
                      "job.yaml")  # whole, however written; CPU in fractions
    assert job.pod_sets[0].resources == {"nvidia.com/gpu": "2000m", "cpu": "500m"}


def test_each_manifest_that_cannot_be_read_is_its_own_error_in_its_place():
    """What dry-run reads: a bad document, or a bad item of a List, is an error where it stands, and
    the others are read on (load_jobs, for gangway submit, stops at the first)."""
    bad = BATCH_JOB.replace("kueue.x-k8s.io/queue-name: training", "a: b")
    listed = LIST.replace("kueue.x-k8s.io/queue-name: user-queue", "x: y")
    found = list(iter_jobs("---\n".join([bad, GANGWAY_JOB, listed]), "jobs.yaml"))
    assert [(type(f).__name__, f.name if isinstance(f, ManifestError) else f.job_id) for f in found] == [
        ("ManifestError", "sample-job"), ("JobSubmitted", "notebook-42"), ("JobSubmitted", "sample-job"),
        ("ManifestError", "pytorch-simple")]
    assert (found[0].namespace, found[0].document, found[3].field) == (
        "team-a", 1, "items[1].metadata.labels['kueue.x-k8s.io/queue-name']")
    with pytest.raises(ManifestError, match="document 1"):
        load_jobs("---\n".join([bad, GANGWAY_JOB]), "jobs.yaml")


@pytest.mark.parametrize("value", ["0", "3", "7"])
def test_a_min_parallelism_outside_1_to_below_the_jobs_pods_says_so(value):
    """Kueue's webhook: 0 < min < the Job's pods (its parallelism, at most its completions). 0 and
    the Job's own 3 pods were taken as "no partial admission" silently; the rule is said plainly."""
    text = BATCH_JOB.replace('gangway.io/runtime-seconds: "3600"', f'kueue.x-k8s.io/job-min-parallelism: "{value}"')
    with pytest.raises(ManifestError) as caught:
        load_jobs(text, "jobs.yaml")
    assert caught.value.problem == f"must be at least 1 and less than the Job's 3 pods, not {value}"
    [job] = load_jobs(text.replace(f'min-parallelism: "{value}"', 'min-parallelism: "2"'), "jobs.yaml")
    assert job.pod_sets[0].min_count == 2
    one_pod = text.replace("parallelism: 3", "parallelism: 1").replace("completions: 3", "completions: 1")
    with pytest.raises(ManifestError) as caught:
        load_jobs(one_pod, "jobs.yaml")
    assert caught.value.problem == ("must be at least 1 and less than the Job's pods, and it runs 1 pod, so it cannot "
                                    f"run with fewer: leave the annotation out (not {value})")


def test_a_kueue_label_on_gangways_own_job_format_is_named_too():
    unread: list[str] = []
    load_jobs("job_id: n1\nnamespace: team\nqueue: q\nlabels: {kueue.x-k8s.io/podset-group-name: g}\n"
              "pod_sets: [{name: main, count: 1, resources: {nvidia.com/gpu: 1}}]\n", "n.yaml", on_unread=unread.append)
    assert unread == ["n.yaml: warning: document 1: kueue.x-k8s.io/podset-group-name is not read by gangway; ignored"]


def test_every_kubeflow_kind_is_a_kind_a_job_may_be_and_is_read():
    """The event catalogue's JobKind names every kind the intake reads (a Kubeflow kind added to one
    and not the other would be read and then refused as an event, or never read)."""
    import typing

    from gangway.events.catalogue import JobKind
    from gangway.events.kubeflow import TRAINING_KINDS
    assert set(typing.get_args(JobKind)) == {"Job", "JobSet", *TRAINING_KINDS, "RayJob"}
    for kind in TRAINING_KINDS.values():
        text = PYTORCH_JOB.replace("kubeflow.org/v1", kind.api_version).replace("PyTorchJob", kind.kind).replace(
            "pytorchReplicaSpecs", kind.replica_specs)
        [job] = load_jobs(text, "jobs.yaml")
        assert (job.kind, sorted(ps.name for ps in job.pod_sets)) == (kind.kind, ["master", "worker"])


def test_a_pod_asking_for_nothing_is_taken_and_one_asking_through_dra_is_refused():
    """A pod with no request (BestEffort) is taken, as Kueue takes it; one that asks for its GPU
    through a DRA claim is refused, told that gangway reads extended resources, not claims."""
    bare = BATCH_JOB.split("      containers:")[0] + "      containers: [{name: c, image: busybox}]\n"
    [job] = load_jobs(bare, "jobs.yaml")
    assert job.pod_sets[0].resources == {}
    dra = BATCH_JOB.split("      containers:")[0] + (
        "      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]\n"
        "      containers: [{name: c, image: busybox, resources: {claims: [{name: gpu}]}}]\n")
    with pytest.raises(ManifestError) as caught:
        load_jobs(dra, "jobs.yaml")
    assert caught.value.field == "spec.template.spec.resourceClaims"
    assert "Dynamic Resource Allocation" in caught.value.problem and "nvidia.com/gpu" in caught.value.problem
    beside = dra.replace("resources: {claims: [{name: gpu}]}", "resources: {requests: {cpu: 2}, claims: [{name: gpu}]}")
    with pytest.raises(ManifestError) as caught:  # (its devices would be neither counted nor placed)
        load_jobs(beside, "jobs.yaml")
    assert caught.value.field == "spec.template.spec.resourceClaims"


RAY_JOB = yaml_text("""
    apiVersion: ray.io/v1
    kind: RayJob
    metadata:
      name: rayjob-sample
      namespace: team
      labels: {kueue.x-k8s.io/queue-name: q}
    spec:
      entrypoint: python /home/ray/samples/sample_code.py
      shutdownAfterJobFinishes: true
      rayClusterSpec:
        rayVersion: '2.9.0'
        headGroupSpec:
          rayStartParams: {}
          template:
            spec:
              containers:
              - {name: ray-head, image: rayproject/ray:2.9.0, resources: {requests: {cpu: "1", memory: 2Gi}}}
        workerGroupSpecs:
        - replicas: 2
          minReplicas: 1
          maxReplicas: 5
          groupName: GPU-group
          rayStartParams: {}
          template:
            metadata:
              annotations: {kueue.x-k8s.io/podset-required-topology: example.com/rack}
            spec:
              containers:
              - {name: ray-worker, image: rayproject/ray:2.9.0, resources: {limits: {cpu: "8", nvidia.com/gpu: "4"}}}
""")


def test_a_rayjob_has_a_head_a_pod_set_per_worker_group_and_its_submitter_as_kueue_counts_them():
    """KubeRay's RayJob as Kueue's integration reads it: the head (1 pod), each worker group (replicas
    times numOfHosts, named by its group in lower case) and, in the default K8sJobMode, the
    submitter's pod (KubeRay's default 500m cpu and 200Mi, or the RayJob's own template)."""
    [job] = load_jobs(RAY_JOB, "ray.yaml")
    assert (job.kind, job.job_id, job.queue) == ("RayJob", "rayjob-sample", "q")
    assert [(ps.name, ps.count, ps.resources) for ps in job.pod_sets] == [
        ("head", 1, {"cpu": "1", "memory": "2Gi"}), ("gpu-group", 2, {"cpu": "8", "nvidia.com/gpu": "4"}),
        ("submitter", 1, {"cpu": "500m", "memory": "200Mi"})]
    assert job.pod_sets[1].topology.required == "example.com/rack"
    multi_host = RAY_JOB.replace("replicas: 2\n", "replicas: 2\n      numOfHosts: 4\n").replace(
        "rayClusterSpec:", "submissionMode: HTTPMode\n  rayClusterSpec:")
    [job] = load_jobs(multi_host, "ray.yaml")
    assert [(ps.name, ps.count) for ps in job.pod_sets] == [("head", 1), ("gpu-group", 8)]  # (no submitter pod)
    own = RAY_JOB.replace("rayClusterSpec:", "submitterPodTemplate:\n    spec:\n      containers: [{name: s, image: x, "
                                              "resources: {requests: {cpu: 100m}}}]\n  rayClusterSpec:")
    [job] = load_jobs(own, "ray.yaml")
    assert job.pod_sets[-1].resources == {"cpu": "100m"}


@pytest.mark.parametrize("change, field, words", [
    (("shutdownAfterJobFinishes: true", "shutdownAfterJobFinishes: false"), "spec.shutdownAfterJobFinishes",
     "must be true for a queued RayJob"),
    (("rayVersion: '2.9.0'", "rayVersion: '2.9.0'\n    enableInTreeAutoscaling: true"),
     "spec.rayClusterSpec.enableInTreeAutoscaling", "must be false"),
    (("entrypoint:", "clusterSelector: {ray.io/cluster: shared}\n  entrypoint:"), "spec.clusterSelector",
     "makes its own cluster"),
    (("groupName: GPU-group", "groupName: head"), "spec.rayClusterSpec.workerGroupSpecs[0].groupName",
     "names another pod set"),
])
def test_a_rayjob_kueue_would_refuse_is_refused_naming_the_field(change, field, words):
    with pytest.raises(ManifestError) as caught:
        load_jobs(RAY_JOB.replace(*change), "ray.yaml")
    assert caught.value.field == field and words in caught.value.problem, caught.value
