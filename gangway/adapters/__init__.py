"""Adapters: the only modules that talk to Kafka, SQL, Kubernetes and the operating system."""
