"""gangway: a GPU batch-scheduling core for shared Kubernetes clusters, event-sourced on Kafka."""

__version__ = "0.1.0"
