"""Preemption: orders evictions so that higher-priority work within its quota can run."""
