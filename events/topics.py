"""Topic names and the partition key of the log."""

SUBMISSIONS = "gangway.submissions"
LOG = "gangway.log"
TELEMETRY = "gangway.telemetry"
REJECTIONS = "gangway.rejections"
INVOICES = "gangway.invoices"
#: Records found on the log that no gangway service wrote, copied aside with why (never folded).
QUARANTINE = "gangway.quarantine"
#: Contracts from the admin principal (the only one allowed to write it); submission copies them onto the log.
CONFIG = "gangway.config"
ALL = (SUBMISSIONS, LOG, TELEMETRY, REJECTIONS, INVOICES, QUARANTINE, CONFIG)
#: A tenant's own submission topic is ``gangway.submissions.<namespace>``: only that tenant's
#: principal may write it (a Kafka ACL), and it may name only that namespace (the submission service).
TENANT_SUBMISSIONS_PREFIX = SUBMISSIONS + "."


def tenant_submissions(namespace: str) -> str:
    return TENANT_SUBMISSIONS_PREFIX + namespace


def entitled_namespace(topic: str) -> str | None:
    """The namespace a submission topic entitles its producers to; None for the shared topic,
    which only gangway's own principals (the Kubernetes binder, operators) may write."""
    return topic.removeprefix(TENANT_SUBMISSIONS_PREFIX) if topic.startswith(TENANT_SUBMISSIONS_PREFIX) else None
#: The one cluster this deployment schedules: the log's key and its only partition.
DEFAULT_CLUSTER = "default"
