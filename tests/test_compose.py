"""The deployment files agree with the code: docker-compose.yml, infra/topics.yaml, infra/k8s/.

Docker and Kubernetes are not needed: the files are read as YAML and checked against each other.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gangway.adapters import apache_kafka, kafka
from gangway.events import topics

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("submission", "admission", "placement", "preemption", "accounting", "binder")
#: Packages under services/ that are services (runtime is the shell they share).
REAL_SERVICES = sorted(p.parent.name for p in ROOT.glob("services/*/__init__.py") if p.parent.name != "runtime")
INFRA_YAML = sorted(ROOT.glob("infra/**/*.yaml"))


def load(path: Path):
    return yaml.safe_load(path.read_text())


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def k8s_objects(kind: str) -> list[dict]:
    return [doc for path in ROOT.glob("infra/k8s/*.yaml") for doc in documents(path) if doc.get("kind") == kind]


@pytest.fixture(scope="module")
def compose() -> dict:
    return load(ROOT / "docker-compose.yml")["services"]


@pytest.fixture(scope="module")
def topic_settings() -> list[dict]:
    return load(ROOT / "infra" / "topics.yaml")["topics"]


# --- docker-compose.yml ---------------------------------------------------------------------------


def test_compose_runs_every_service(compose):
    assert set(SERVICES) <= set(compose)
    for name in SERVICES:
        assert compose[name]["command"][:3] == ["gangway", "service", name]
        assert compose[name]["environment"] == {
            "GANGWAY_KAFKA": "kafka:9092",
            "GANGWAY_DB": "postgresql+psycopg://gangway:gangway@postgres:5432/gangway",
        }


def test_every_service_waits_for_kafka_and_accounting_for_postgres(compose):
    for name in SERVICES:
        assert "kafka" in compose[name]["depends_on"], name
    assert "postgres" in compose["accounting"]["depends_on"]


def test_compose_runs_the_pinned_broker_database_and_the_binder_on_its_cluster_file(compose):
    # The Kafka the tests run (infra/kafka/pom.xml) is the Kafka docker-compose runs.
    assert compose["kafka"]["image"] == f"apache/kafka:{apache_kafka.kafka_version()}"
    assert compose["topics"]["image"] == compose["kafka"]["image"]
    assert compose["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert compose["postgres"]["image"] == "postgres:16"
    assert compose["binder"]["command"][3:] == ["--cluster", "/config/cluster.yaml"]
    mounted = compose["binder"]["volumes"][0].split(":")[0]
    assert (ROOT / mounted).is_file()


def test_compose_creates_every_topic_as_infra_topics_yaml_says(compose, topic_settings):
    script = compose["topics"]["command"][0]
    for topic in topic_settings:
        configs = "".join(f" --config {key}={value}" for key, value in topic["config"].items())
        expected = (f'--replication-factor "$$RF" --topic {topic["name"]} --partitions {topic["partitions"]}{configs}'
                    ' --config min.insync.replicas="$$MIN_ISR"\n')
        assert expected in script, topic["name"]
    assert script.count("--topic ") == len(topic_settings)
    assert compose["topics"]["environment"] == {"RF": "${GANGWAY_KAFKA_REPLICATION_FACTOR:-1}",
                                                "MIN_ISR": "${GANGWAY_KAFKA_MIN_INSYNC_REPLICAS:-1}"}


def test_ensure_topics_creates_what_compose_creates_from_the_same_file(compose, topic_settings):
    """ensure_topics (gangway up, the tests) and compose's `topics` both read infra/topics.yaml."""
    conf = kafka.KafkaSettings(replication_factor=3, min_insync_replicas=2)
    made = {t.name: t for t in kafka.new_topics(set(), conf)}
    script = compose["topics"]["command"][0]
    assert sorted(made) == sorted(t["name"] for t in topic_settings)
    for topic in topic_settings:
        new = made[topic["name"]]
        assert (new.num_partitions, new.replication_factor) == (topic["partitions"], 3)
        assert new.topic_configs == {**{k: str(v) for k, v in topic["config"].items()}, "min.insync.replicas": "2"}
        line = next(line for line in script.splitlines() if f"--topic {topic['name']} " in line)
        configs = dict(part.split("=", 1) for part in line.split(" --config ")[1:])
        assert configs == {**{k: str(v) for k, v in topic["config"].items()}, "min.insync.replicas": '"$$MIN_ISR"'}
    assert kafka.new_topics({t["name"] for t in topic_settings}, conf) == []


# --- infra/ --------------------------------------------------------------------------------------


def test_infra_topics_are_the_code_topics_with_the_log_on_one_partition(topic_settings):
    by_name = {t["name"]: t for t in topic_settings}
    assert sorted(by_name) == sorted(topics.ALL)
    assert by_name[topics.LOG]["partitions"] == 1
    assert by_name[topics.LOG]["config"]["retention.ms"] == -1
    assert by_name[topics.SUBMISSIONS]["config"]["retention.ms"] == 7 * 24 * 3600 * 1000


@pytest.mark.parametrize("path", INFRA_YAML, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_infra_file_parses_as_yaml(path):
    assert documents(path)


def test_there_is_one_deployment_per_service_with_a_standby():
    deployments = {d["metadata"]["name"]: d for d in k8s_objects("Deployment")}
    assert sorted(deployments) == sorted(f"gangway-{name}" for name in SERVICES)
    for deployment in deployments.values():
        assert deployment["metadata"]["namespace"] == "gangway"
        assert deployment["spec"]["replicas"] == 2


def test_every_deployment_command_names_a_real_service():
    for deployment in k8s_objects("Deployment"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        command = container["command"]
        assert command[:2] == ["gangway", "service"] and command[2] in REAL_SERVICES, command
        assert container["image"] == "gangway:0.1.0"
        assert container["env"][0]["valueFrom"]["configMapKeyRef"]["key"] == "GANGWAY_KAFKA"


JOB_KINDS = ("jobs", "jobsets", "pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs", "mpijobs", "rayjobs")


def test_only_the_binder_may_touch_pods_and_nodes():
    (role,) = k8s_objects("ClusterRole")
    granted = {(resource, verb) for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]}
    # What the binder does with each (tests/k8s/test_kubernetes_rbac.py checks it against the requests made).
    assert granted == {
        ("pods", "list"), ("pods", "watch"), ("pods", "delete"), ("pods", "patch"), ("pods/binding", "create"),
        ("pods/eviction", "create"), ("nodes", "list"), ("nodes", "watch"), ("events", "create"),
        ("priorityclasses", "list"), ("priorityclasses", "watch"),
        *((kind, verb) for kind in JOB_KINDS for verb in ("list", "watch", "patch")),
        *((f"{kind}/status", "patch") for kind in JOB_KINDS),
        ("mutatingwebhookconfigurations", "get"), ("mutatingwebhookconfigurations", "patch"),
    }
    (binding,) = k8s_objects("ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    accounts = {d["metadata"]["name"]: d["spec"]["template"]["spec"].get("serviceAccountName")
                for d in k8s_objects("Deployment")}
    assert [s["name"] for s in binding["subjects"]] == [accounts.pop("gangway-binder")]
    assert set(accounts.values()) == {None}


def test_kustomization_lists_every_manifest():
    listed = load(ROOT / "infra" / "k8s" / "kustomization.yaml")["resources"]
    on_disk = sorted(p.name for p in (ROOT / "infra" / "k8s").glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == on_disk
