"""The submission service: turns records of ``gangway.submissions`` into WorkloadQueued or JobRejected.

- ``policy``: the pure decision (bytes, headers and state in; one event out). No I/O, no clock;
  imports only the standard library, msgspec and ``gangway.events``.
- ``manifests``: what ``gangway submit`` reads (Kubernetes Job, JobSet, Kubeflow jobs, gangway's own
  JobSubmitted) and how it encodes a submission as a binary-mode CloudEvent record.
"""
