"""Who may write what, the Kafka way: principals and ACLs (README "Who may write what").

``acl_model`` is the model as data (pure); ``apply_acls`` creates those ACLs, and the tenants'
submission topics, on a broker running an authorizer (Kafka's StandardAuthorizer), through
confluent-kafka's admin client with the GANGWAY_KAFKA_* credentials of a principal allowed to alter
ACLs (a super user). ``gangway kafka acls`` prints the model and, with ``--apply``, applies it.

- the **service** principal (the six services): reads and writes every ``gangway.*`` topic, creates
  them, uses the ``gangway-*`` consumer groups;
- the **admin** principal (operators: ``gangway config apply``, ``gangway submit``): writes
  ``gangway.config`` (contracts, which the submission service copies onto the log) and the shared
  submissions topic, reads every ``gangway.*`` topic; it cannot write the log, so it cannot forge a
  decision either;
- each **tenant** principal: writes only its own ``gangway.submissions.<namespace>``, reads the log
  and the rejections, uses consumer groups named ``<namespace>-*``.

Nothing else is allowed (the broker runs with ``allow.everyone.if.no.acl.found=false``): a tenant
cannot write another tenant's topic, the log, telemetry (checkpoints) or the shared submissions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gangway.events import topics

CLUSTER = "kafka-cluster"
#: Consumer groups of gangway's services (gangway-submission, gangway-<service>-active, ...).
SERVICE_GROUPS = "gangway-"


@dataclass(frozen=True, order=True)
class Acl:
    """One ALLOW rule: ``principal`` may ``operation`` on the resource (``pattern`` LITERAL or PREFIXED)."""

    principal: str
    resource: str  # TOPIC, GROUP or CLUSTER
    name: str
    pattern: str
    operation: str

    def __str__(self) -> str:
        kind = "prefixed" if self.pattern == "PREFIXED" else "literal"
        return f"ALLOW {self.principal:<24} {self.operation:<16} {self.resource} {self.name} ({kind})"


def _principal(name: str) -> str:
    return name if ":" in name else f"User:{name}"


def acl_model(service: str, admin: str, tenants: dict[str, str]) -> list[Acl]:
    """Every ACL of the model: ``tenants`` maps a namespace to its principal (``User:alice`` or ``alice``)."""
    service, admin = _principal(service), _principal(admin)
    acls = [Acl(service, "TOPIC", "gangway.", "PREFIXED", op)
            for op in ("READ", "WRITE", "DESCRIBE", "CREATE", "DESCRIBE_CONFIGS")]
    acls += [Acl(service, "GROUP", SERVICE_GROUPS, "PREFIXED", op) for op in ("READ", "DESCRIBE")]
    acls += [Acl(service, "CLUSTER", CLUSTER, "LITERAL", op) for op in ("IDEMPOTENT_WRITE", "DESCRIBE")]
    acls += [Acl(admin, "TOPIC", "gangway.", "PREFIXED", op) for op in ("READ", "DESCRIBE")]
    acls += [Acl(admin, "TOPIC", name, "LITERAL", "WRITE") for name in (topics.CONFIG, topics.SUBMISSIONS)]
    acls += [Acl(admin, "CLUSTER", CLUSTER, "LITERAL", "IDEMPOTENT_WRITE")]
    for namespace, who in sorted(tenants.items()):
        who = _principal(who)
        own = topics.tenant_submissions(namespace)
        acls += [Acl(who, "TOPIC", own, "LITERAL", op) for op in ("WRITE", "DESCRIBE")]
        acls += [Acl(who, "TOPIC", name, "LITERAL", op)
                 for name in (topics.LOG, topics.REJECTIONS) for op in ("READ", "DESCRIBE")]
        acls += [Acl(who, "GROUP", f"{namespace}-", "PREFIXED", "READ")]
        acls += [Acl(who, "CLUSTER", CLUSTER, "LITERAL", "IDEMPOTENT_WRITE")]
    return sorted(set(acls))


def apply_acls(bootstrap: str, acls: list[Acl], tenant_namespaces: list[str], rdkafka_config: dict,
               timeout_s: float = 30.0) -> list[str]:
    """Create the tenants' submission topics (if missing) and the ACLs; returns the topics created."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, **rdkafka_config})
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    wanted = [topics.tenant_submissions(ns) for ns in tenant_namespaces]
    created = []
    new = [NewTopic(t, num_partitions=1, replication_factor=-1) for t in wanted if t not in existing]
    for topic, future in (admin.create_topics(new, request_timeout=timeout_s) if new else {}).items():
        try:
            future.result()
            created.append(topic)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise
    # librdkafka calls Kafka's CLUSTER resource BROKER.
    kinds = {"TOPIC": ResourceType.TOPIC, "GROUP": ResourceType.GROUP, "CLUSTER": ResourceType.BROKER}
    bindings = [
        AclBinding(kinds[acl.resource], acl.name, ResourcePatternType[acl.pattern], acl.principal, "*",
                   AclOperation[acl.operation], AclPermissionType.ALLOW)
        for acl in acls
    ]
    for future in admin.create_acls(bindings, request_timeout=timeout_s).values():
        future.result()
    # Created is not yet in force: wait until the broker's authorizer lists every one of them.
    any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
    deadline = time.monotonic() + timeout_s
    while True:
        listed = set(admin.describe_acls(any_acl, request_timeout=timeout_s).result())
        if set(bindings) <= listed:
            return created
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(set(bindings) - listed)} ACLs still not in force after {timeout_s} s")
        time.sleep(0.2)  # polling a deadline-bounded wait
