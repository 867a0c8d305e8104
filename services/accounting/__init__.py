"""Accounting: who used which GPUs, for how long — the usage ledger behind showback and invoices.

- ``policy`` is pure (standard library, msgspec and ``gangway.events`` only): it turns the log into
  usage ``Interval``\\ s, one per allocation that ended, and reports the allocations still open.
- ``ledger`` is the SQL adapter (SQLAlchemy 2; SQLite by default, PostgreSQL via ``GANGWAY_DB``):
  it writes the intervals and a tracking row (the last log offset processed) in one transaction,
  so at-least-once delivery from Kafka gives exactly-once rows.

The shell that feeds them from the log lives elsewhere; nothing here talks to Kafka.
"""
