"""Admission: admits pending workloads under their ClusterQueue's quota, whole gangs only."""
