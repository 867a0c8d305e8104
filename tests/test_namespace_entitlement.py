"""Who may submit into which namespace, without a broker: Kueue's namespaceSelector (read from the
contract and enforced by the submission policy), a tenant topic's namespace (the submission policy),
the ACL model (gangway acls) and the Kafka client settings (GANGWAY_KAFKA_*)."""

from __future__ import annotations

import msgspec
import pytest

from gangway.adapters import kafka, kafka_acls
from gangway.contract.kueue import ConfigError, read_contract
from gangway.events import topics
from gangway.events.catalogue import ConfigApplied, Envelope, JobRejected, WorkloadQueued
from gangway.events.fold import apply
from gangway.events.state import State
from gangway.services.submission.policy import decide_submission

FLAVOR = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
"""


def cluster_queue(name: str, selector: str | None) -> str:
    field = f"\n  namespaceSelector: {selector}" if selector is not None else ""
    return f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: {name}}}
spec:{field}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{{name: h100, resources: [{{name: nvidia.com/gpu, nominalQuota: 64}}]}}]
"""


def local_queue(namespace: str, cq: str) -> str:
    return f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: default, namespace: {namespace}}}
spec: {{clusterQueue: {cq}}}
"""


def namespace(name: str, labels: dict[str, str]) -> str:
    return f"\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {msgspec.json.encode(labels).decode()}}}\n"


def contract_of(*docs: str, refused: tuple[str, ...] = (), open_to_all: tuple[str, ...] = ()):
    """The contract of these documents; ``refused``: its LocalQueues (namespace/name) whose
    ClusterQueue does not select their namespace, and ``open_to_all``: its ClusterQueues without a
    namespaceSelector (where Kueue admits no namespace), which ``config validate`` warns of."""
    contract, warnings = read_contract("---".join([FLAVOR, *docs]), "contract.yaml")
    assert sorted((w.kind, w.name) for w in warnings) == sorted(
        [*(("LocalQueue", lq) for lq in refused), *(("ClusterQueue", cq) for cq in open_to_all)])
    assert all("namespace_not_selected" in w.why or "where Kueue admits none" in w.why for w in warnings)
    return contract


def state_of(contract) -> State:
    return apply(State(), Envelope(id="config/1", source="test", time_ms=1_000,
                                   data=ConfigApplied(contract=contract, digest="d"), offset=0))


def job(ns: str, job_id: str = "train-1") -> bytes:
    return msgspec.json.encode({"job_id": job_id, "namespace": ns, "queue": "default",
                                "pod_sets": [{"name": "main", "count": 1, "resources": {"nvidia.com/gpu": 1}}]})


def decide(state: State, value: bytes, topic: str = topics.SUBMISSIONS):
    return decide_submission(value, b"k", [("origin", b"x")], state, {}, f"{topic}/0/3",
                             entitled=topics.entitled_namespace(topic))


# --- Kueue's namespaceSelector ---------------------------------------------------------------------


SELECTED = contract_of(
    namespace("research", {"team": "ml", "tier": "gold"}),
    namespace("batch", {"team": "data"}),
    cluster_queue("ml", "{matchLabels: {team: ml}}"),
    cluster_queue("not-batch", "{matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, "
                               "values: [batch]}]}"),
    cluster_queue("gold", "{matchExpressions: [{key: tier, operator: Exists}]}"),
    cluster_queue("anyone", "{}"),
    cluster_queue("unset", None),
    *(local_queue(ns, cq) for ns, cq in [("research", "ml"), ("batch", "ml"), ("serving", "not-batch")]),
    refused=("batch/default",), open_to_all=("unset",),
)


def test_namespace_objects_and_selectors_are_read_from_the_contract():
    labels = {ns.name: ns.labels for ns in SELECTED.namespaces}
    assert labels["research"] == {"team": "ml", "tier": "gold", "kubernetes.io/metadata.name": "research"}
    queues = {cq.name: cq for cq in SELECTED.cluster_queues}
    assert queues["ml"].namespace_selector.match_labels == {"team": "ml"}
    assert queues["unset"].namespace_selector is None
    admits = {(cq, ns): SELECTED.selects_namespace(queues[cq], ns)
              for cq in queues for ns in ("research", "batch", "serving")}
    assert admits == {
        ("ml", "research"): True, ("ml", "batch"): False, ("ml", "serving"): False,
        ("not-batch", "research"): True, ("not-batch", "batch"): False, ("not-batch", "serving"): True,
        ("gold", "research"): True, ("gold", "batch"): False, ("gold", "serving"): False,
        ("anyone", "research"): True, ("anyone", "batch"): True, ("anyone", "serving"): True,
        ("unset", "research"): True, ("unset", "batch"): True, ("unset", "serving"): True,
    }


def test_a_job_from_a_namespace_the_selector_does_not_match_is_rejected_with_the_reason():
    state = state_of(SELECTED)
    assert isinstance(decide(state, job("research")), WorkloadQueued)
    # serving has no Namespace object: its one label is kubernetes.io/metadata.name, which not-batch allows
    assert isinstance(decide(state, job("serving")), WorkloadQueued)
    out = decide(state, job("batch"))
    assert isinstance(out, JobRejected) and out.reason == "namespace_not_selected"
    assert "ClusterQueue 'ml'" in out.message and "team=data" in out.message and "inadmissible" in out.message
    assert out.original == job("batch") and out.original_headers == [("origin", b"x")]


@pytest.mark.parametrize("selector, why", [
    ("{matchExpressions: [{key: a, operator: Has}]}", "is not one of In, NotIn, Exists, DoesNotExist"),
    ("{matchExpressions: [{key: a, operator: In}]}", "needs at least one value"),
    ("{matchExpressions: [{key: a, operator: Exists, values: [x]}]}", "takes no values"),
    ("{matchExpressions: [{operator: Exists}]}", "required field is missing"),
    ("{matchFields: {a: b}}", "unknown field"),
    ("[team]", "must be a mapping"),
])
def test_a_bad_selector_is_an_error_located_at_its_field(selector, why):
    with pytest.raises(ConfigError) as err:
        read_contract("---".join([FLAVOR, cluster_queue("cq", selector)]), "contract.yaml")
    assert any("spec.namespaceSelector" in str(p) and why in str(p) for p in err.value.problems), err.value.problems


# --- a tenant's topic: its own namespace only ------------------------------------------------------


def test_a_tenant_topic_entitles_exactly_its_namespace():
    assert topics.entitled_namespace("gangway.submissions.research") == "research"
    assert topics.entitled_namespace(topics.SUBMISSIONS) is None
    assert topics.entitled_namespace(topics.LOG) is None
    assert topics.tenant_submissions("research") == "gangway.submissions.research"


def test_a_record_naming_another_namespace_on_a_tenant_topic_is_rejected_bytes_kept():
    state = state_of(SELECTED)
    ok = decide(state, job("research"), "gangway.submissions.research")
    assert isinstance(ok, WorkloadQueued) and ok.submission == "gangway.submissions.research/0/3"
    value = job("serving", "sneaky")
    out = decide(state, value, "gangway.submissions.research")
    assert isinstance(out, JobRejected) and out.reason == "not_entitled" and out.job_id == "sneaky"
    assert "'serving'" in out.message and "gangway.submissions.research" in out.message
    assert (out.original, out.original_key, out.original_headers) == (value, b"k", [("origin", b"x")])
    # The shared topic (gangway's own principals: the Kubernetes binder, operators) names any namespace.
    assert isinstance(decide(state, job("serving", "shared")), WorkloadQueued)


# --- the ACL model ---------------------------------------------------------------------------------


def may(acls, principal: str, operation: str, resource: str, name: str) -> bool:
    return any(a.principal == principal and a.operation == operation and a.resource == resource and
               (a.name == name if a.pattern == "LITERAL" else name.startswith(a.name)) for a in acls)


def test_the_acl_model_lets_each_principal_write_only_what_it_owns():
    acls = kafka_acls.acl_model("gangway", "ops", {"research": "User:alice", "serving": "bob"})
    alice, bob, ops, svc = "User:alice", "User:bob", "User:ops", "User:gangway"
    assert may(acls, alice, "WRITE", "TOPIC", "gangway.submissions.research")
    assert not may(acls, alice, "WRITE", "TOPIC", "gangway.submissions.serving")
    assert may(acls, bob, "WRITE", "TOPIC", "gangway.submissions.serving")
    for tenant in (alice, bob):
        for topic in topics.ALL:
            assert not may(acls, tenant, "WRITE", "TOPIC", topic), (tenant, topic)
        assert may(acls, tenant, "READ", "TOPIC", topics.REJECTIONS)
    # The admin writes contracts and the shared submissions, never the log (no forged decision).
    assert [t for t in topics.ALL if may(acls, ops, "WRITE", "TOPIC", t)] == [topics.SUBMISSIONS, topics.CONFIG]
    for topic in (*topics.ALL, "gangway.submissions.research"):
        assert may(acls, svc, "WRITE", "TOPIC", topic) and may(acls, svc, "READ", "TOPIC", topic)
    assert may(acls, svc, "READ", "GROUP", "gangway-submission")
    assert not may(acls, alice, "READ", "GROUP", "gangway-submission")
    assert all(a.pattern in ("LITERAL", "PREFIXED") for a in acls)


# --- the client settings ---------------------------------------------------------------------------


def test_client_settings_come_from_the_environment_in_one_place():
    conf = kafka.KafkaSettings.from_env({
        "GANGWAY_KAFKA_SECURITY_PROTOCOL": "sasl_plaintext", "GANGWAY_KAFKA_USERNAME": "alice",
        "GANGWAY_KAFKA_PASSWORD": "s3cret", "GANGWAY_KAFKA_REPLICATION_FACTOR": "3",
        "GANGWAY_KAFKA_MIN_INSYNC_REPLICAS": "2",
    })
    assert conf.client_kwargs() == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                                    "sasl_plain_username": "alice", "sasl_plain_password": "s3cret"}
    assert conf.rdkafka_config() == {"security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-512",
                                     "sasl.username": "alice", "sasl.password": "s3cret"}
    assert (conf.replication_factor, conf.min_insync_replicas) == (3, 2)
    assert kafka.KafkaSettings.from_env({}).client_kwargs() == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize("env, why", [
    ({"GANGWAY_KAFKA_SECURITY_PROTOCOL": "TLS"}, "one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"GANGWAY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "needs GANGWAY_KAFKA_USERNAME"),
    ({"GANGWAY_KAFKA_SASL_MECHANISM": "GSSAPI"}, "one of SCRAM-SHA-512"),
    ({"GANGWAY_KAFKA_IDEMPOTENCE": "maybe"}, "expected true or false"),
    ({"GANGWAY_KAFKA_REPLICATION_FACTOR": "three"}, "expected an integer"),
])
def test_a_wrong_setting_is_a_clear_error(env, why):
    with pytest.raises(kafka.KafkaConfigError, match=why):
        kafka.KafkaSettings.from_env(env)


def test_idempotence_is_on_except_on_the_embedded_broker_unless_set():
    kafka.mark_embedded("127.0.0.1:1")
    default = kafka.KafkaSettings.from_env({})
    assert default.idempotent("127.0.0.1:2") and not default.idempotent("127.0.0.1:1")
    assert (default.session_timeout("127.0.0.1:1"), default.session_timeout("127.0.0.1:2")) == (2_000, 10_000)
    off = kafka.KafkaSettings.from_env({"GANGWAY_KAFKA_IDEMPOTENCE": "false"})
    assert not off.idempotent("127.0.0.1:2")
