"""Topic names and the partition key of the log."""

SUBMISSIONS = "gangway.submissions"
LOG = "gangway.log"
TELEMETRY = "gangway.telemetry"
REJECTIONS = "gangway.rejections"
INVOICES = "gangway.invoices"
ALL = (SUBMISSIONS, LOG, TELEMETRY, REJECTIONS, INVOICES)
#: The one cluster this deployment schedules: the log's key and its only partition.
DEFAULT_CLUSTER = "default"
#: Records found on the log that no gangway service wrote, copied aside with why (never folded).
QUARANTINE = "gangway.quarantine"
