"""Binder: applies placements and evictions to the cluster and reports what the cluster did."""
