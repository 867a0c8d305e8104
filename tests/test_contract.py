"""The contract loader: Kueue's own YAML in, the canonical Contract (or every problem) out."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

import gangway
from gangway.contract import ConfigError, check_file, contract_digest, load_contract, read_contract, validate_file
from gangway.events.contract import (
    Backfill, BorrowWithinCohort, Cohort, FairSharing, FlavorFungibility, FlavorQuotas, PodsReady, Preemption, Price, Quota,
)

DEMO = Path(gangway.__file__).parent / "demo"
GI = 2**30 * 1000  # one Gi in milli units


def y(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def problems_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_contract(text, "config.yaml")
    return [str(p) for p in caught.value.problems]


def warnings_of(text: str) -> list[str]:
    return [str(w) for w in read_contract(text, "config.yaml")[1]]


FLAVOR = y("""
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ResourceFlavor
    metadata:
      name: default-flavor
    """)


def cluster_queue(name: str = "team-a", resources: str = "", cohort: str = "team-ab", extra: str = "") -> str:
    """A v1beta1 ClusterQueue in one group covering cpu and memory, as Kueue's docs write them."""
    resources = resources or """
          - name: "cpu"
            nominalQuota: 9
          - name: "memory"
            nominalQuota: 36Gi"""
    text = f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: "{name}"
spec:
  namespaceSelector: {{}}
  cohort: "{cohort}"
  resourceGroups:
  - coveredResources: ["cpu", "memory"]
    flavors:
    - name: "default-flavor"
      resources:{textwrap.indent(textwrap.dedent(resources), "      ")}
{extra}"""
    return text.lstrip("\n")


def docs(*parts: str) -> str:
    return "---\n".join(parts)


# --- what loads --------------------------------------------------------------------------------


def test_the_demo_contract_loads_without_warnings():
    contract, warnings = read_contract((DEMO / "contract.yaml").read_text(), "contract.yaml")
    assert warnings == []
    gpus = {cq.name: cq.quota("nvidia.com/gpu") for cq in contract.cluster_queues}
    assert gpus == {
        "batch": Quota(nominal=8000),
        "research": Quota(nominal=24000),
        "serving": Quota(nominal=32000, borrowing_limit=0),
    }
    assert {cq.cohort for cq in contract.cluster_queues} == {"org"}
    assert all(cq.preemption == Preemption("LowerPriority", "Any") for cq in contract.cluster_queues)
    assert [(lq.namespace, lq.name, lq.cluster_queue) for lq in contract.local_queues] == [
        ("batch", "default", "batch"), ("research", "default", "research"), ("serving", "default", "serving"),
    ]
    classes = {pc.name: (pc.value, pc.grace_ms) for pc in contract.priority_classes}
    assert classes == {"production": (1000, 30_000), "research": (100, 60_000), "best-effort": (10, 10_000)}
    assert (contract.default_grace_ms, contract.default_priority) == (30_000, 0)  # (its SchedulingPolicy says 0)


def test_the_demo_quotas_fit_the_demo_cluster():
    nodes = yaml.safe_load((DEMO / "cluster.yaml").read_text())["items"]
    contract = load_contract((DEMO / "contract.yaml").read_text())
    assert len(nodes) == 8
    assert {n["status"]["allocatable"]["memory"] for n in nodes} == {"1073741824Ki"}
    assert [n["metadata"]["labels"]["cloud.provider.com/topology-rack"] for n in nodes] == ["rack-0"] * 4 + ["rack-1"] * 4
    for resource, per_node in (("nvidia.com/gpu", 8_000), ("cpu", 96_000), ("memory", 1024 * GI)):
        total = sum(cq.quota(resource).nominal for cq in contract.cluster_queues)
        assert total == 8 * per_node, resource


KUEUE_DOCS_CLUSTER_QUEUE = y("""
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ClusterQueue
    metadata:
      name: "team-a-cq"
    spec:
      namespaceSelector: {} # match all.
      cohort: "team-ab"
      queueingStrategy: StrictFIFO
      resourceGroups:
      - coveredResources: ["cpu", "memory", "pods"]
        flavors:
        - name: "default-flavor"
          resources:
          - name: "cpu"
            nominalQuota: 9
            borrowingLimit: 1
            lendingLimit: 500m
          - name: "memory"
            nominalQuota: 36Gi
          - name: "pods"
            nominalQuota: 5
      - coveredResources: ["nvidia.com/gpu"]
        flavors:
        - name: "vendor1"
          resources:
          - name: "nvidia.com/gpu"
            nominalQuota: 10
            lendingLimit: 2
      preemption:
        reclaimWithinCohort: Any
        borrowWithinCohort:
          policy: LowerPriority
          maxPriorityThreshold: 100
        withinClusterQueue: LowerPriority
    """)


def test_a_cluster_queue_from_kueues_documentation_loads_in_milli_units():
    vendor1 = FLAVOR.replace("default-flavor", "vendor1")
    contract, warnings = read_contract(docs(FLAVOR, vendor1, KUEUE_DOCS_CLUSTER_QUEUE), "config.yaml")
    cq = contract.cluster_queue("team-a-cq")
    assert cq.cohort == "team-ab"
    assert cq.queueing_strategy == "StrictFIFO"
    assert cq.preemption == Preemption(within_cluster_queue="LowerPriority", reclaim_within_cohort="Any",
                                       borrow_within_cohort=BorrowWithinCohort("LowerPriority", 100))
    assert [f.flavor for f in cq.flavors] == ["default-flavor", "vendor1"]
    assert cq.flavors[0].resources == {
        "cpu": Quota(nominal=9_000, borrowing_limit=1_000, lending_limit=500),
        "memory": Quota(nominal=36 * GI),
        "pods": Quota(nominal=5_000),
    }
    assert cq.quota("nvidia.com/gpu") == Quota(nominal=10_000, lending_limit=2_000)
    assert [str(w) for w in warnings] == []


LOADS = [
    pytest.param(
        docs(FLAVOR, cluster_queue().replace("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")
             .replace("cohort:", "cohortName:")),
        {"team-a": "team-ab"},
        id="a v1beta2 ClusterQueue names its cohort with cohortName",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(cohort="")),
        {"team-a": None},
        id="an empty cohort means no cohort",
    ),
    pytest.param(
        y("""
            apiVersion: v1
            kind: List
            items:
            - apiVersion: kueue.x-k8s.io/v1beta1
              kind: ResourceFlavor
              metadata: {name: default-flavor, uid: 1234, resourceVersion: "7"}
            - apiVersion: kueue.x-k8s.io/v1beta1
              kind: ClusterQueue
              metadata: {name: exported}
              spec: {cohort: org, namespaceSelector: {}, stopPolicy: None,
                     flavorFungibility: {whenCanBorrow: Borrow, whenCanPreempt: TryNextFlavor}}
              status: {pendingWorkloads: 3}
            """),
        {"exported": "org"},
        id="a kind List exported by kubectl get -o yaml loads item by item",
    ),
]


@pytest.mark.parametrize("text, cohorts", LOADS)
def test_valid_configs_load(text, cohorts):
    contract, warnings = read_contract(text, "config.yaml")
    assert {cq.name: cq.cohort for cq in contract.cluster_queues} == cohorts
    assert warnings == []


WARNINGS = [
    pytest.param(
        docs(FLAVOR, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ml\n"),
        "config.yaml: warning: ConfigMap ml: ConfigMap is not part of the contract; ignored",
        id="a ConfigMap is ignored with a warning",
    ),
    pytest.param(
        docs(FLAVOR, "apiVersion: kueue.x-k8s.io/v1beta1\nkind: AdmissionCheck\nmetadata:\n  name: prov\n"),
        "config.yaml: warning: AdmissionCheck prov: AdmissionCheck is not part of the contract; ignored",
        id="a Kueue kind outside the contract is ignored with a warning",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(extra="  concurrentAdmissionPolicy: {migration: {mode: TryPreferredFlavors}}\n")),
        "config.yaml: warning: ClusterQueue team-a: spec.concurrentAdmissionPolicy: not supported by gangway yet; "
        "ignored",
        id="a ClusterQueue's concurrentAdmissionPolicy is not enforced: a warning",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(extra="  admissionChecks: [prov]\n")),
        "config.yaml: warning: ClusterQueue team-a: spec.admissionChecks: not supported by gangway yet; ignored",
        id="a Kueue field gangway does not enforce is ignored with a warning",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(extra="  flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: "
                                         "TryNextFlavor, preference: PreemptionOverBorrowing}\n")),
        "config.yaml: warning: ClusterQueue team-a: spec.flavorFungibility.preference: not supported by gangway yet; "
        "ignored",
        id="flavorFungibility's preference (Kueue v1beta2) is not enforced: a warning, not an unknown field",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue().replace("  namespaceSelector: {}\n", "")),
        "config.yaml: warning: ClusterQueue team-a: spec.namespaceSelector: absent: gangway admits jobs of every "
        "namespace here, where Kueue admits none; write `namespaceSelector: {}` to say every namespace, or a selector",
        id="a ClusterQueue without namespaceSelector (Kueue: no namespace) is said",
    ),
    pytest.param(
        docs(FLAVOR, "apiVersion: kueue.x-k8s.io/v1alpha1\nkind: DynamicResourceAllocationConfig\n"
                     "metadata: {name: default}\n"),
        "config.yaml: warning: DynamicResourceAllocationConfig default: DynamicResourceAllocationConfig is not part "
        "of the contract; ignored",
        id="Kueue's DRA configuration is a Kueue kind gangway does not read: a warning",
    ),
    pytest.param(
        docs("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Topology\nmetadata: {name: dc}\n"
             "spec: {levels: [{nodeLabel: kubernetes.io/hostname}]}\n",
             "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: default-flavor}\n"
             "spec: {topologyName: dc}\n",
             cluster_queue()),
        "config.yaml: warning: ResourceFlavor default-flavor: spec.topologyName: Kueue refuses a flavor naming a Topology without "
        "spec.nodeLabels (\"at least one nodeLabel is required when topology is set\"); gangway places its jobs on "
        "any node of the cluster",
        id="a flavor naming a Topology without node labels (Kueue's API refuses it) is said",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(), *(f"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {n}}}\n"
                                        f"value: {v}\nglobalDefault: true\n" for n, v in (("first", 60), ("second", 50)))),
        "config.yaml: warning: PriorityClass second: globalDefault: a second globalDefault PriorityClass (Kubernetes "
        "refuses it; the first is 'first'): gangway takes the smallest value of them, 50, as Kubernetes does of those "
        "it has",
        id="two globalDefault PriorityClasses (Kubernetes refuses the second) are said",
    ),
]


@pytest.mark.parametrize("text, warning", WARNINGS)
def test_what_gangway_ignores_is_said(text, warning):
    assert warnings_of(text) == [warning]


# --- what is refused, with its precise field path ----------------------------------------------

#: A SchedulingPolicy's grace period for a class named "production" (which the file may not define).
GRACE_FOR_PRODUCTION = y("""
    apiVersion: gangway.io/v1alpha1
    kind: SchedulingPolicy
    metadata:
      name: default
    spec:
      priorityClasses:
      - name: production
        gracePeriodSeconds: 30
    """)
ERRORS = [
    pytest.param(
        docs(FLAVOR, cluster_queue(resources="""
            - name: cpu
              nominalQuota: 9
            - name: memory
              nominalQuota: abc""")),
        'config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[1].nominalQuota: '
        '"abc" is not a Kubernetes quantity',
        id="a malformed quantity names its field",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(resources="""
            - name: cpu
              nominalQuota: -4
            - name: memory
              nominalQuota: 36Gi""")),
        "config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
        "-4 is negative; it must be zero or more",
        id="a negative quota is refused",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(resources="""
            - name: cpu
              nominalQuota: 0.0001
            - name: memory
              nominalQuota: 36Gi""")),
        "config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
        "0.0001: finer than one thousandth",
        id="a quota finer than a milli unit is refused",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(), cluster_queue()),
        'config.yaml: ClusterQueue team-a: metadata.name: ClusterQueue "team-a" is already defined in document 2',
        id="a duplicate ClusterQueue name is refused",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(), y("""
            apiVersion: kueue.x-k8s.io/v1beta1
            kind: LocalQueue
            metadata:
              namespace: team-a
              name: main
            spec:
              clusterQueue: team-x
            """)),
        'config.yaml: LocalQueue team-a/main: spec.clusterQueue: ClusterQueue "team-x" is not defined',
        id="a LocalQueue pointing at a missing ClusterQueue is refused",
    ),
    pytest.param(
        cluster_queue(),
        'config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].name: '
        'ResourceFlavor "default-flavor" is not defined',
        id="a flavor not defined as a ResourceFlavor is refused",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(resources="""
            - name: cpu
              nominalQuota: 9
            - name: memory
              nominalQuota: 36Gi
            - name: nvidia.com/gpu
              nominalQuota: 8""")),
        'config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[2].name: '
        '"nvidia.com/gpu" is not in this group\'s coveredResources',
        id="a resource listed in a flavor but not in coveredResources is refused",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(resources="""
            - name: cpu
              nominalQuota: 9""")),
        'config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources: '
        'no quota for "memory", listed in coveredResources',
        id="a covered resource without a quota in a flavor is refused",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(extra="  preemption:\n    withinClusterQueue: Sometimes\n")),
        'config.yaml: ClusterQueue team-a: spec.preemption.withinClusterQueue: '
        '"Sometimes" is not one of Never, LowerPriority, LowerOrNewerEqualPriority',
        id="an unknown preemption policy is refused",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(extra="  preemption:\n    borrowWithinCohort: {policy: LowerPriority}\n")),
        "config.yaml: ClusterQueue team-a: spec.preemption.borrowWithinCohort: borrowWithinCohort.policy is not "
        "Never while reclaimWithinCohort is Never: a queue that may never preempt in its cohort cannot preempt "
        "there to borrow",
        id="borrowWithinCohort without reclaimWithinCohort is refused, as Kueue's API refuses it",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(extra="  preemption:\n    reclaimWithinCohort: LowerOrNewerEqualPriority\n")),
        'config.yaml: ClusterQueue team-a: spec.preemption.reclaimWithinCohort: '
        '"LowerOrNewerEqualPriority" is not one of Never, LowerPriority, Any',
        id="a policy valid only within the ClusterQueue is refused for reclaiming",
    ),
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: [oops\n",
        "config.yaml: line 5: invalid YAML: expected ',' or ']', but got '<stream end>' (column 1)",
        id="a YAML syntax error gives its line",
    ),
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nkind: ClusterQueue\nmetadata: {name: a}\n",
        'config.yaml: line 3: invalid YAML: duplicate key "kind" (column 1)',
        id="a key repeated in a mapping is refused as kubectl does",
    ),
    pytest.param(
        docs(FLAVOR, "- just\n- a list\n"),
        "config.yaml: document 2: must be a Kubernetes object (a mapping), not a list",
        id="a document that is not a mapping is refused",
    ),
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  labels: {a: b}\n",
        "config.yaml: document 1 (ResourceFlavor): metadata.name: required field is missing",
        id="a missing metadata.name is refused",
    ),
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: Team_A\n",
        "config.yaml: ResourceFlavor Team_A: metadata.name: \"Team_A\" is not a valid name "
        "(lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)",
        id="a name Kubernetes would refuse is refused",
    ),
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: 12\n",
        'config.yaml: document 1 (ResourceFlavor): metadata.name: 12 is a number as YAML reads it: quote it ("12") to '
        "make it a name",
        id="a name YAML reads as a number is told to be quoted",
    ),
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v2\nkind: ClusterQueue\nmetadata:\n  name: a\n",
        'config.yaml: ClusterQueue a: apiVersion: unknown apiVersion "kueue.x-k8s.io/v2"; expected '
        "kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2 or gangway.io/v1alpha1",
        id="an unknown apiVersion is refused",
    ),
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v1alpha1\nkind: ClusterQueue\nmetadata:\n  name: a\n",
        "config.yaml: ClusterQueue a: apiVersion: kueue.x-k8s.io/v1alpha1 does not serve ClusterQueue; "
        "use kueue.x-k8s.io/v1beta1 or kueue.x-k8s.io/v1beta2",
        id="a Kueue version that does not serve the kind is refused",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(resources="""
            - name: cpu
              nominalQuota: 9
              borowingLimit: 2
            - name: memory
              nominalQuota: 36Gi""")),
        "config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[0].borowingLimit: unknown field "
        "(did you mean borrowingLimit?)",
        id="a misspelt field is refused rather than silently dropped, and the field it may mean named",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue().replace("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")),
        "config.yaml: ClusterQueue team-a: spec.cohort: unknown field in kueue.x-k8s.io/v1beta2, "
        "which calls it cohortName",
        id="a v1beta1 field name in a v1beta2 object says what it is called now",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(cohort="", resources="""
            - name: cpu
              nominalQuota: 9
              borrowingLimit: 1
            - name: memory
              nominalQuota: 36Gi""")),
        "config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: "
        "must be unset when spec.cohort is empty: there is no one to borrow from",
        id="a borrowing limit without a cohort is refused as Kueue does",
    ),
    pytest.param(
        docs(FLAVOR, cluster_queue(resources="""
            - name: cpu
              nominalQuota: 9
              lendingLimit: 10
            - name: memory
              nominalQuota: 36Gi""")),
        "config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: "
        "10 is more than nominalQuota 9",
        id="lending more than the nominal quota is refused",
    ),
    pytest.param(
        y("""
            apiVersion: kueue.x-k8s.io/v1beta1
            kind: WorkloadPriorityClass
            metadata:
              name: urgent
            value: 3000000000
            """),
        "config.yaml: WorkloadPriorityClass urgent: value: 3000000000 is out of range: -2147483648 to 2147483647",
        id="a priority beyond 32 bits is refused",
    ),
    pytest.param(
        GRACE_FOR_PRODUCTION,
        'config.yaml: SchedulingPolicy default: spec.priorityClasses[0].name: '
        'WorkloadPriorityClass "production" is not defined',
        id="a grace period for an undefined priority class is refused",
    ),
    pytest.param(
        docs("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: production}\nvalue: 1000\n",
             GRACE_FOR_PRODUCTION),
        'config.yaml: SchedulingPolicy default: spec.priorityClasses[0].name: '
        'WorkloadPriorityClass "production" is not defined; "production" is a Kubernetes PriorityClass, and '
        'per-class settings apply to WorkloadPriorityClasses (a job names one with the label '
        'kueue.x-k8s.io/priority-class)',
        id="a grace period for a Kubernetes PriorityClass says where such settings apply",
    ),
    pytest.param(
        "apiVersion: gangway.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: p}\n"
        "spec: {defaultGracePeriodSeconds: -1}\n",
        "config.yaml: SchedulingPolicy p: spec.defaultGracePeriodSeconds: -1 is out of range: 0 to 2147483647",
        id="a negative grace period is refused",
    ),
    pytest.param(
        docs(FLAVOR, "apiVersion: v1\nkind: List\nitems:\n- apiVersion: kueue.x-k8s.io/v1beta1\n"
             "  kind: LocalQueue\n  metadata: {name: main}\n  spec: {clusterQueue: nowhere}\n"),
        'config.yaml: LocalQueue default/main: items[0].spec.clusterQueue: ClusterQueue "nowhere" is not defined',
        id="a problem inside a kind List names the item",
    ),
]


@pytest.mark.parametrize("text, problem", ERRORS)
def test_each_problem_is_reported_at_its_field(text, problem):
    assert problems_of(text) == [problem]


def test_every_problem_is_reported_not_just_the_first():
    bad_queue = cluster_queue(resources="""
        - name: cpu
          nominalQuota: lots
        - name: memory
          nominalQuota: 36Gi""", extra="  preemption:\n    withinClusterQueue: Always\n")
    local_queue = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: q}\nspec: {clusterQueue: gone}\n"
    found = problems_of(docs(bad_queue, bad_queue, local_queue, "42\n"))
    assert found == [
        'config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: '
        '"lots" is not a Kubernetes quantity',
        'config.yaml: ClusterQueue team-a: spec.preemption.withinClusterQueue: '
        '"Always" is not one of Never, LowerPriority, LowerOrNewerEqualPriority',
        'config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].name: '
        'ResourceFlavor "default-flavor" is not defined',
        'config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: '
        '"lots" is not a Kubernetes quantity',
        'config.yaml: ClusterQueue team-a: spec.preemption.withinClusterQueue: '
        '"Always" is not one of Never, LowerPriority, LowerOrNewerEqualPriority',
        'config.yaml: ClusterQueue team-a: metadata.name: ClusterQueue "team-a" is already defined in document 1',
        'config.yaml: LocalQueue default/q: spec.clusterQueue: ClusterQueue "gone" is not defined',
        "config.yaml: document 4: must be a Kubernetes object (a mapping), not an integer",
    ]


def test_validate_file_prints_one_line_per_problem_and_nothing_when_valid(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(cluster_queue())
    assert validate_file(DEMO / "contract.yaml") == []
    assert validate_file(bad) == [
        f'{bad}: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].name: '
        'ResourceFlavor "default-flavor" is not defined'
    ]
    assert validate_file(tmp_path / "missing.yaml")[0].startswith(f"{tmp_path / 'missing.yaml'}: cannot read:")


# --- the digest --------------------------------------------------------------------------------


def test_the_digest_is_stable_and_ignores_document_order():
    text = docs(FLAVOR, cluster_queue("team-a"), cluster_queue("team-b"))
    reordered = docs(cluster_queue("team-b"), FLAVOR, cluster_queue("team-a"))
    first = contract_digest(load_contract(text))
    assert first == contract_digest(load_contract(text))
    assert first == contract_digest(load_contract(reordered))
    assert len(first) == 64 and int(first, 16) >= 0


def test_the_digest_changes_when_a_quota_changes():
    before = load_contract(docs(FLAVOR, cluster_queue()))
    after = load_contract(docs(FLAVOR, cluster_queue().replace("nominalQuota: 9", "nominalQuota: 10")))
    assert contract_digest(before) != contract_digest(after)


# --- hierarchical cohorts, fungibility, fair sharing and gangway's policy ----------------------

HIERARCHY = docs(FLAVOR, y("""
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: Cohort
    metadata:
      name: org
    spec:
      fairSharing: {weight: "2"}
      resourceGroups:
      - coveredResources: [cpu]
        flavors:
        - name: default-flavor
          resources: [{name: cpu, nominalQuota: 10}]
    """), y("""
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: Cohort
    metadata:
      name: team-ab
    spec:
      parentName: org
    """), cluster_queue(extra=(
    "  flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: Preempt}\n"
    "  fairSharing: {weight: 500m}\n")))


def test_a_cohort_tree_loads_with_parents_quotas_and_weights():
    contract = load_contract(HIERARCHY)
    assert contract.cohorts == [
        Cohort(name="org", flavors=[FlavorQuotas("default-flavor", {"cpu": Quota(nominal=10_000)})], fair_weight=2000),
        Cohort(name="team-ab", parent="org"),
    ]
    [cq] = contract.cluster_queues
    assert cq.flavor_fungibility == FlavorFungibility(when_can_borrow="TryNextFlavor", when_can_preempt="MayStopSearch")
    assert cq.fair_weight == 500


def test_a_cohort_cycle_is_refused_where_it_closes():
    text = docs(*(y(f"""
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: Cohort
        metadata:
          name: {name}
        spec:
          parentName: {parent}
        """) for name, parent in (("a", "b"), ("b", "a"))))
    assert problems_of(text) == [
        "config.yaml: Cohort a: spec.parentName: cohorts form a cycle: a -> b -> a",
        "config.yaml: Cohort b: spec.parentName: cohorts form a cycle: b -> a -> b",
    ]


POLICY = docs(FLAVOR, cluster_queue(), y("""
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: WorkloadPriorityClass
    metadata: {name: research}
    value: 100
    """), y("""
    apiVersion: gangway.io/v1alpha1
    kind: SchedulingPolicy
    metadata: {name: default}
    spec:
      priorityClasses:
      - {name: research, gracePeriodSeconds: 60, minRuntimeSeconds: 600}
      fairSharing:
        enable: true
        preemptionStrategies: [LessThanInitialShare]
        usageHalfLifeSeconds: 3600
        flavorWeights: {default-flavor: {cpu: "3"}}
      checkpointAware: false
      prices:
        currency: EUR
        perHour: [{flavor: default-flavor, resource: cpu, price: "0.04"}]
      backfill: {quotaHoldsPerTree: 2, handOverWithinMilliseconds: 0}
      priorityAging: {secondsPerPoint: 0.5}
    """))


def test_the_scheduling_policy_sets_runtimes_fair_sharing_checkpoints_and_prices():
    contract = load_contract(POLICY)
    [pc] = contract.priority_classes
    assert (pc.grace_ms, pc.min_runtime_ms) == (60_000, 600_000)
    assert contract.fair_sharing == FairSharing(enable=True, preemption_strategies=["LessThanInitialShare"],
                                                usage_half_life_ms=3_600_000)
    assert contract.flavors[0].resource_weights == {"cpu": 3000}
    assert contract.checkpoint_aware is False
    assert (contract.currency, contract.prices) == ("EUR", [Price("default-flavor", "cpu", 40_000)])
    assert contract.backfill == Backfill(quota_holds_per_tree=2, hand_over_within_ms=0)
    assert load_contract(docs(FLAVOR, cluster_queue())).backfill == Backfill(quota_holds_per_tree=8, hand_over_within_ms=100)
    assert contract.aging_ms_per_point == 500
    assert load_contract(docs(FLAVOR, cluster_queue())).aging_ms_per_point == 0  # strict priority


@pytest.mark.parametrize("field, value, why", [
    ("checkpointAware", '"yes"', 'spec.checkpointAware: must be true or false, not a string'),
    ("prices", "{currency: euro}", 'spec.prices.currency: "euro" is not a three-letter currency code (ISO 4217)'),
    ("fairSharing", "{preemptionStrategies: [Fairest]}",
     'spec.fairSharing.preemptionStrategies[0]: "Fairest" is not one of LessThanOrEqualToFinalShare, '
     'LessThanInitialShare'),
    ("fairSharing", "{preemptionStrategies: [LessThanInitialShare, LessThanInitialShare]}",
     'spec.fairSharing.preemptionStrategies[1]: "LessThanInitialShare" is listed twice (a set in Kueue\'s API)'),
    ("fairSharing", "{flavorWeights: {gold: {cpu: 2}}}", 'spec.fairSharing.flavorWeights.gold: ResourceFlavor "gold" is not defined'),
    ("priorityClasses", "[{name: research}]",
     "spec.priorityClasses[0]: says nothing: give gracePeriodSeconds, minRuntimeSeconds or both"),
    ("backfill", "{quotaHoldsPerTree: -1}", "spec.backfill.quotaHoldsPerTree: -1 is out of range: 0 to 64"),
    ("backfill", '{handOverWithinMilliseconds: "100ms"}', 'spec.backfill.handOverWithinMilliseconds: "100ms" is not an integer'),
    ("backfill", "{handOverWithinMilliseconds: 600000}",
     "spec.backfill.handOverWithinMilliseconds: 600000 is out of range: 0 to 60000"),
    ("backfill", "[8]", "spec.backfill: must be a mapping, not a list"),
    ("priorityAging", "{secondsPerPoint: null}", "spec.priorityAging.secondsPerPoint: required field is missing"),
    ("priorityAging", "{secondsPerPoint: fast}", 'spec.priorityAging.secondsPerPoint: "fast" is not a number of seconds'),
    ("priorityAging", "{secondsPerPoint: 0}", "spec.priorityAging.secondsPerPoint: 0 is out of range: 0.001 to "
                                              "31536000 (seconds of waiting worth one priority point)"),
    ("priorityAging", "{secondsPerPoint: 1, cap: 3}", "spec.priorityAging.cap: unknown field"),
    ("priorityAging", "60", "spec.priorityAging: must be a mapping, not an integer"),
])
def test_a_bad_scheduling_policy_field_is_refused_precisely(field, value, why):
    text = docs(FLAVOR, cluster_queue(), "apiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\n"
                "metadata: {name: research}\nvalue: 1\n",
                f"apiVersion: gangway.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: p}}\nspec:\n  {field}: {value}\n")
    assert problems_of(text) == [f"config.yaml: SchedulingPolicy p: {why}"]


# --- Kueue's own Configuration -------------------------------------------------------------------

KUEUE_CONFIGURATION = y("""
    apiVersion: config.kueue.x-k8s.io/v1beta1
    kind: Configuration
    health: {healthProbeBindAddress: ":8081"}
    waitForPodsReady: {enable: true, timeout: 5m}
    fairSharing:
      enable: true
      preemptionStrategies: [LessThanInitialShare]
    integrations: {frameworks: [batch/job]}
    fairShareing: {enable: true}
    """)


def test_kueues_configuration_gives_the_contract_its_fair_sharing_and_names_what_else_it_sets():
    contract, warnings = read_contract(docs(FLAVOR, cluster_queue(), KUEUE_CONFIGURATION), "config.yaml")
    assert contract.fair_sharing == FairSharing(enable=True, preemption_strategies=["LessThanInitialShare"])
    said = [str(w) for w in warnings]
    assert contract.pods_ready == PodsReady(timeout_ms=300_000)  # (Kueue's defaults for the rest)
    assert not any("waitForPodsReady" in w for w in said), said
    for field in ("health", "integrations"):
        assert f"config.yaml: warning: document 3 (Configuration): {field}: not supported by gangway; ignored" in said
    assert any("fairShareing: not a field of Kueue's Configuration that gangway knows; ignored (did you mean "
               "fairSharing?)" in w for w in said), said
    # Without fairSharing it changes nothing; alone it is no contract (as a file of Namespaces is not).
    plain = "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nmanageJobsWithoutQueueName: true\n"
    assert read_contract(docs(FLAVOR, cluster_queue(), plain), "config.yaml")[0].fair_sharing == FairSharing()
    assert problems_of(plain) and "no contract" in " ".join(problems_of(plain)).lower()
    # A field at Kueue's neutral value says nothing, and is not warned of.
    neutral = "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nwaitForPodsReady: {enable: false}\n" \
              "manageJobsWithoutQueueName: false\n"
    assert warnings_of(docs(FLAVOR, cluster_queue(), neutral)) == []


@pytest.mark.parametrize("extra, why", [
    ("apiVersion: gangway.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: p}\nspec:\n  fairSharing: {enable: false}\n",
     "config.yaml: document 3 (Configuration): fairSharing: the SchedulingPolicy in document 4 sets fairSharing too; say it in one of them"),
    ("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n",
     "config.yaml: document 4 (Configuration): only one Kueue Configuration is allowed; another is in document 3"),
    (None, 'config.yaml: document 3 (Configuration): fairSharing.preemptionStrategies[0]: "Fairest" is not one of '
           'LessThanOrEqualToFinalShare, LessThanInitialShare'),
    (None, "config.yaml: document 3 (Configuration): fairSharing.usageHalfLifeSeconds: unknown field"),
])
def test_a_kueue_configuration_that_cannot_be_used_is_refused_precisely(extra, why):
    if extra is None:  # a bad fairSharing of its own
        config = "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nfairSharing:\n  " + (
            "preemptionStrategies: [Fairest]\n" if "Fairest" in why else "usageHalfLifeSeconds: 60\n")
        text = docs(FLAVOR, cluster_queue(), config)
    else:
        text = docs(FLAVOR, cluster_queue(), KUEUE_CONFIGURATION, extra)
    assert why in problems_of(text)


def test_kueues_wait_for_pods_ready_is_the_binders_as_kueue_defines_it():
    config = y("""
        apiVersion: config.kueue.x-k8s.io/v1beta1
        kind: Configuration
        waitForPodsReady:
          enable: true
          timeout: 2m30s
          recoveryTimeout: 1.5m
          blockAdmission: true
          requeuingStrategy: {timestamp: Creation, backoffBaseSeconds: 5, backoffMaxSeconds: 600, backoffLimitCount: 3}
        """)
    contract, warnings = read_contract(docs(FLAVOR, cluster_queue(), config), "config.yaml")
    # (backoffLimitCount 3: requeued three times, deactivated at the fourth failure)
    assert contract.pods_ready == PodsReady(timeout_ms=150_000, recovery_timeout_ms=90_000, backoff_base_ms=5_000,
                                            backoff_max_ms=600_000, backoff_limit=4, requeue_from_creation=True)
    said = [str(w) for w in warnings]
    assert [w.split(": ")[3] for w in said] == ["waitForPodsReady.blockAdmission"], said
    assert read_contract(docs(FLAVOR, cluster_queue(), config.replace("Creation", "Eviction")),
                         "config.yaml")[0].pods_ready.requeue_from_creation is False
    # only enabled it says anything; without a Configuration the binder's own flags and defaults rule
    assert read_contract(docs(FLAVOR, cluster_queue(), config.replace("enable: true", "enable: false")),
                         "config.yaml")[0].pods_ready is None
    assert read_contract(docs(FLAVOR, cluster_queue()), "config.yaml")[0].pods_ready is None
    # backoffLimitCount 0: deactivated at the first failure; left out (null): never
    first = read_contract(docs(FLAVOR, cluster_queue(), config.replace("backoffLimitCount: 3", "backoffLimitCount: 0")),
                          "config.yaml")[0].pods_ready
    assert first.backoff_limit == 1
    assert read_contract(docs(FLAVOR, cluster_queue(), config.replace(", backoffLimitCount: 3", "")),
                         "config.yaml")[0].pods_ready.backoff_limit == 0


@pytest.mark.parametrize("field, why", [
    ("timeout: 5 minutes", 'waitForPodsReady.timeout: "5 minutes" is not a duration (Go\'s form: 5m, 90s, 1h30m)'),
    ("timeout: -5m", 'waitForPodsReady.timeout: "-5m" is not a duration (Go\'s form: 5m, 90s, 1h30m)'),
    ("timeout: 300", "waitForPodsReady.timeout: 300 is not a duration (Go's form: 5m, 90s, 1h30m)"),
    ("timeout: 0s", 'waitForPodsReady.timeout: "0s" is out of range: 1 ms to 168 h'),
    ("recoveryTimeout: 200h", 'waitForPodsReady.recoveryTimeout: "200h" is out of range: 1 ms to 168 h'),
    ("enable: 'yes'", 'waitForPodsReady.enable: "yes" is not true or false'),
    ("requeuingStrategy: {backoffBaseSeconds: 0}", "waitForPodsReady.requeuingStrategy.backoffBaseSeconds: 0 is out of "
                                                   "range: 1 to 2147483647"),
    ("requeuingStrategy: {timestamp: Later}", 'waitForPodsReady.requeuingStrategy.timestamp: "Later" is not one of '
                                              'Eviction, Creation'),
    ("timeOut: 5m", "waitForPodsReady.timeOut: unknown field (did you mean timeout?)"),
])
def test_a_bad_wait_for_pods_ready_is_refused_precisely(field, why):
    config = "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nwaitForPodsReady:\n  " + (
        field if field.startswith("enable") else "enable: true\n  " + field) + "\n"
    assert problems_of(docs(FLAVOR, cluster_queue(), config)) == [f"config.yaml: document 3 (Configuration): {why}"]


# --- Kueue's Topology and a flavor's topologyName ------------------------------------------------

TOPOLOGY = y("""
    apiVersion: kueue.x-k8s.io/{version}
    kind: Topology
    metadata:
      name: default
    spec:
      levels:
      - nodeLabel: cloud.provider.com/topology-block
      - nodeLabel: cloud.provider.com/topology-rack
      - nodeLabel: kubernetes.io/hostname
    """)
TAS_FLAVOR = y("""
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ResourceFlavor
    metadata:
      name: tas-flavor
    spec:
      nodeLabels: {pool: tas}
      topologyName: default
    """)


@pytest.mark.parametrize("version", ["v1alpha1", "v1beta1", "v1beta2"])
def test_a_topology_and_the_flavor_naming_it_are_read_in_every_kueue_version(version):
    contract, warnings = read_contract(docs(TOPOLOGY.format(version=version), TAS_FLAVOR), "config.yaml")
    assert warnings == []
    assert [(t.name, t.levels) for t in contract.topologies] == [
        ("default", ["cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"])]
    assert contract.flavors[0].topology_name == "default"


TOPOLOGY_ERRORS = [
    pytest.param(TAS_FLAVOR, "config.yaml: ResourceFlavor tas-flavor: spec.topologyName: Topology \"default\" is not defined",
                 id="a flavor naming a Topology that is not defined"),
    pytest.param(TOPOLOGY.format(version="v1beta1").replace("topology-rack", "topology-block"),
                 "config.yaml: Topology default: spec.levels[1].nodeLabel: cloud.provider.com/topology-block is "
                 "already a level: levels must be unique", id="levels repeat"),
    pytest.param(y("""
        apiVersion: kueue.x-k8s.io/v1beta1
        kind: Topology
        metadata: {name: t}
        spec:
          levels: [{nodeLabel: kubernetes.io/hostname}, {nodeLabel: rack}]
        """), "config.yaml: Topology t: spec.levels: kubernetes.io/hostname can only be the lowest level",
        id="hostname above another level"),
    pytest.param("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Topology\nmetadata: {name: t}\nspec: {levels: []}\n",
                 "config.yaml: Topology t: spec.levels: 0 levels: a Topology has 1 to 16", id="no levels"),
    pytest.param("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Topology\nmetadata: {name: t}\n"
                 "spec: {levels: [{nodeLabel: 'bad label'}]}\n",
                 "config.yaml: Topology t: spec.levels[0].nodeLabel: \"bad label\" is not a node label key",
                 id="a level that is not a label key"),
]


@pytest.mark.parametrize("text, problem", TOPOLOGY_ERRORS)
def test_a_wrong_topology_is_refused_with_its_field(text, problem):
    assert problems_of(text) == [problem]


TAINTED_POOL = y("""
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ResourceFlavor
    metadata: {name: spot}
    spec:
      nodeLabels: {instance-type: spot}
      tolerations:
      - {key: spot, operator: Exists, effect: NoSchedule}
      - {key: pool, value: training}
    """)


def test_a_flavors_tolerations_are_read_and_a_wrong_one_is_refused_with_its_field():
    from gangway.events.contract import Toleration
    contract, warnings = read_contract(TAINTED_POOL, "config.yaml")
    assert warnings == []  # read and enforced: no "not supported" warning
    assert contract.flavors[0].tolerations == [Toleration(key="spot", operator="Exists", effect="NoSchedule"),
                                               Toleration(key="pool", value="training")]
    assert problems_of(TAINTED_POOL.replace("operator: Exists", "operator: Sometimes")) == [
        "config.yaml: ResourceFlavor spot: spec.tolerations[0].operator: 'Sometimes' is neither Equal nor Exists"]
    assert problems_of(TAINTED_POOL.replace("{key: pool, value: training}", "{value: training}")) == [
        "config.yaml: ResourceFlavor spot: spec.tolerations[1].key: missing (only operator Exists may leave the key out)"]


def test_a_flavors_node_taints_are_read_and_a_wrong_one_is_refused_with_its_field():
    from gangway.events.contract import Taint
    text = TAINTED_POOL.replace("  tolerations:", "  nodeTaints:\n  - {key: spot, value: 'true', effect: NoSchedule}\n"
                                "  - {key: slow, effect: PreferNoSchedule}\n  tolerations:")
    contract, warnings = read_contract(text, "config.yaml")
    assert warnings == []  # read and enforced: no "not read" warning
    assert contract.flavors[0].node_taints == [Taint(key="spot", value="true", effect="NoSchedule"),
                                               Taint(key="slow", effect="PreferNoSchedule")]
    assert problems_of(text.replace("effect: NoSchedule}\n  - {key: slow", "effect: Never}\n  - {key: slow")) == [
        "config.yaml: ResourceFlavor spot: spec.nodeTaints[0].effect: 'Never' is not one of NoSchedule, "
        "PreferNoSchedule, NoExecute"]
    assert problems_of(text.replace("{key: slow, effect: PreferNoSchedule}", "{effect: NoExecute}")) == [
        "config.yaml: ResourceFlavor spot: spec.nodeTaints[1].key: missing"]
    assert problems_of(text.replace("value: 'true'", "value: 7")) == [
        "config.yaml: ResourceFlavor spot: spec.nodeTaints[0].value: must be a string, not int"]


def test_a_file_without_contract_objects_is_an_error_that_says_what_a_contract_holds(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: train}\nspec: {}\n")
    errors, warnings = check_file(job)
    assert len(errors) == 1 and "no contract objects" in errors[0] and "ResourceFlavor" in errors[0]
    assert warnings == [f"{job}: warning: Job train: Job is not part of the contract; ignored"]
    assert validate_file(job) == errors
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert "no contract objects" in validate_file(empty)[0]
    # Namespaces only give their labels to the queues' namespaceSelectors: a file of them is no contract
    namespaces = tmp_path / "namespaces.yaml"
    namespaces.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n")
    assert "no contract objects" in validate_file(namespaces)[0]


@pytest.mark.parametrize("api_version, ignored", [("config.kueue.x-k8s.io/v1beta1", False),
                                                  ("config.kueue.x-k8s.io/v1beta2", False),
                                                  ("visibility.kueue.x-k8s.io/v1beta1", True)])
def test_kueues_other_api_groups_are_not_the_contract_and_are_ignored_with_a_warning(api_version, ignored, tmp_path):
    """Kueue's own Configuration is read (its fairSharing: above); what else Kueue serves is not."""
    config = tmp_path / "config.yaml"
    config.write_text(f"apiVersion: {api_version}\nkind: Configuration\nmetadata: {{name: kueue}}\n---\n"
                      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: gpus}\n")
    errors, warnings = check_file(config)
    assert errors == []
    assert warnings == ([f"{config}: warning: Configuration kueue: Configuration is not part of the contract; ignored"]
                        if ignored else [])


def test_kubernetes_priority_classes_are_read_and_a_global_default_is_the_default_priority():
    from gangway.events.contract import PodPriorityClass
    classes = y("""
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: batch-high}
        value: 500
        description: batch jobs that matter
        ---
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: cluster-default}
        value: 7
        globalDefault: true
        preemptionPolicy: Never
        """)
    contract, warnings = read_contract(classes, "config.yaml")
    assert contract.pod_priority_classes == [PodPriorityClass(name="batch-high", value=500),
                                             PodPriorityClass(name="cluster-default", value=7, global_default=True)]
    assert contract.default_priority == 7
    assert [str(w) for w in warnings] == [
        "config.yaml: warning: PriorityClass cluster-default: preemptionPolicy: not supported by gangway yet; ignored"]
    policy = "apiVersion: gangway.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: p}\nspec: {defaultPriority: 3}\n"
    assert read_contract(docs(classes, policy), "config.yaml")[0].default_priority == 3  # gangway's own wins
    assert not read_contract(docs(classes, policy), "config.yaml")[0].default_priority_from_cluster
    assert not contract.default_priority_from_cluster
    # Neither: not said, so the cluster's globalDefault class gives it (test_submission_policy).
    silent = read_contract(classes.replace("globalDefault: true", "globalDefault: false"), "config.yaml")[0]
    assert (silent.default_priority, silent.default_priority_from_cluster) == (0, True)
    assert problems_of(classes.replace("value: 500", "value: high")) == [
        "config.yaml: PriorityClass batch-high: value: \"high\" is not an integer"]


def test_a_kind_kueue_does_not_define_is_an_error_and_one_it_does_but_gangway_does_not_read_a_warning():
    assert problems_of(docs(FLAVOR, cluster_queue().replace("kind: ClusterQueue", "kind: clusterqueue"))) == [
        'config.yaml: clusterqueue team-a: kind: "clusterqueue" is no kind of kueue.x-k8s.io; did you mean ClusterQueue?']
    assert "(it defines AdmissionCheck, ClusterQueue, Cohort," in problems_of(docs(FLAVOR, cluster_queue().replace(
        "kind: ClusterQueue", "kind: Gizmo")))[0]
    assert warnings_of(docs(FLAVOR, "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: w}\n")) == [
        "config.yaml: warning: Workload w: Workload is not part of the contract; ignored"]


def test_a_local_queue_in_a_namespace_its_cluster_queue_does_not_select_is_said():
    """Valid (Kueue takes it), but every job sent to it is refused: `config validate` says so, as
    `gangway rules` does; a Namespace object with the selected label makes it take jobs."""
    selecting = cluster_queue().replace("namespaceSelector: {}", "namespaceSelector: {matchLabels: {team: a}}")
    queue = y("""
        apiVersion: kueue.x-k8s.io/v1beta1
        kind: LocalQueue
        metadata: {name: q, namespace: team-a}
        spec: {clusterQueue: team-a}
        """)
    assert warnings_of(docs(FLAVOR, selecting, queue)) == [
        'config.yaml: warning: LocalQueue team-a/q: spec.clusterQueue: ClusterQueue "team-a"\'s namespaceSelector does '
        'not select namespace "team-a": every job sent to this LocalQueue is refused (namespace_not_selected; a '
        "namespace's labels are those of its v1 Namespace object in the contract)"]
    labelled = y("""
        apiVersion: v1
        kind: Namespace
        metadata: {name: team-a, labels: {team: a}}
        """)
    assert warnings_of(docs(FLAVOR, selecting, queue, labelled)) == []


def test_a_cluster_queues_lists_are_within_kueues_bounds():
    many = "".join(f"\n          - name: r{i}\n            nominalQuota: 1" for i in range(17))
    wide = cluster_queue(resources=many).replace('coveredResources: ["cpu", "memory"]',
                                                 f"coveredResources: [{', '.join(f'r{i}' for i in range(17))}]")
    assert "spec.resourceGroups[0].coveredResources: lists 17 items: Kueue takes 1 to 16" in " ".join(
        problems_of(docs(FLAVOR, wide)))
    empty = cluster_queue().replace("  resourceGroups:\n", "  resourceGroups:\n  - {coveredResources: [], flavors: []}\n")
    said = " ".join(problems_of(docs(FLAVOR, empty)))
    assert "spec.resourceGroups[0].coveredResources: lists 0 items: Kueue takes 1 to 16" in said
    assert "spec.resourceGroups[0].flavors: lists 0 items: Kueue takes 1 to 16" in said


def test_a_name_too_long_says_its_length():
    [problem] = problems_of(docs(FLAVOR.replace("default-flavor", "f" * 300)))
    assert problem.endswith("is 300 characters long: a name has at most 253")


def test_a_cohort_may_lend_more_than_its_own_nominal_quota_a_cluster_queue_may_not():
    """A Cohort's lendingLimit caps what its whole subtree lends (its queues' quota with its own):
    Kueue's cohort webhook does not hold it to the Cohort's nominalQuota (Kueue's hierarchical
    cohort example: nominalQuota 0, lendingLimit 2)."""
    cohort = y("""
        apiVersion: kueue.x-k8s.io/v1beta1
        kind: Cohort
        metadata: {name: team-ab}
        spec:
          parent: root
          resourceGroups:
          - coveredResources: [cpu, memory]
            flavors:
            - name: default-flavor
              resources:
              - {name: cpu, nominalQuota: 0, lendingLimit: 2}
              - {name: memory, nominalQuota: 0}
        """)
    contract, _ = read_contract(docs(FLAVOR, cluster_queue(), cohort), "config.yaml")
    assert contract.cohorts[0].flavors[0].resources["cpu"].lending_limit == 2_000
    assert problems_of(docs(FLAVOR, cluster_queue(resources="""
        - name: cpu
          nominalQuota: 1
          lendingLimit: 2
        - name: memory
          nominalQuota: 36Gi"""))) == [
        "config.yaml: ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: 2 is more "
        "than nominalQuota 1"]


def test_v1beta2_flavor_fungibility_takes_only_its_own_names():
    """v1beta2 dropped Borrow and Preempt (MayStopSearch says both); v1beta1 still takes them."""
    def fungibility(version: str, borrow: str) -> list[str]:
        queue = cluster_queue(extra=f"  flavorFungibility: {{whenCanBorrow: {borrow}}}\n")
        if version == "v1beta2":
            queue = queue.replace("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2").replace("cohort:", "cohortName:")
        try:
            read_contract(docs(FLAVOR, queue), "config.yaml")
        except ConfigError as refused:
            return [str(p) for p in refused.problems]
        return []
    assert fungibility("v1beta1", "Borrow") == [] and fungibility("v1beta2", "MayStopSearch") == []
    assert fungibility("v1beta2", "Borrow") == [
        'config.yaml: ClusterQueue team-a: spec.flavorFungibility.whenCanBorrow: "Borrow" is not one of '
        "MayStopSearch, TryNextFlavor"]


def test_a_flavor_s_node_labels_must_be_kubernetes_labels():
    flavor = FLAVOR.replace("name: default-flavor", "name: default-flavor\nspec:\n  nodeLabels: {'bad key!': x, "
                            "example.com/pool: 'not ok', cloud.google.com/gke-accelerator: nvidia-h100-80gb}")
    assert problems_of(docs(flavor, cluster_queue())) == [
        'config.yaml: ResourceFlavor default-flavor: spec.nodeLabels.bad key!: "bad key!" is no Kubernetes label key: '
        "an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' and '.', starting and "
        "ending with a letter or digit",
        'config.yaml: ResourceFlavor default-flavor: spec.nodeLabels.example.com/pool: "not ok" is no Kubernetes '
        "label value: at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"]


def test_config_validate_reads_the_standard_input_as_submit_does():
    import subprocess
    import sys
    demo = Path(gangway.__file__).parent / "demo" / "contract.yaml"
    done = subprocess.run([sys.executable, "-m", "gangway", "config", "validate", "-"], input=demo.read_bytes(),
                          capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout.decode().strip() == "<stdin>: valid", done.stderr
    bad = subprocess.run([sys.executable, "-m", "gangway", "config", "validate", "-"], input=b"kind: x\n",
                         capture_output=True, timeout=60)
    assert bad.returncode == 1 and bad.stdout.decode().startswith("<stdin>: document 1: apiVersion:")


def test_a_v1beta2_cluster_queue_has_no_admission_checks_field():
    """Kueue's v1beta2 took `spec.admissionChecks` out for `admissionChecksStrategy` (kueue#7490)."""
    v1beta2 = cluster_queue(extra="  admissionChecks: [prov]\n").replace(
        "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2").replace("cohort:", "cohortName:")
    assert problems_of(docs(FLAVOR, v1beta2)) == [
        "config.yaml: ClusterQueue team-a: spec.admissionChecks: unknown field in kueue.x-k8s.io/v1beta2, which lists "
        "its checks in admissionChecksStrategy"]
