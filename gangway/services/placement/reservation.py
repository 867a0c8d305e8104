"""Reservations for a blocked gang, and which nodes a backfill job may use (Slurm's EASY backfill; pure).

When the gang at the head of the queue fits its quota but no placement exists now, it gets a
*reservation*: the workloads holding nodes are let go, in the order they are expected to end
(start + ``runtime_ms``; a workload without a runtime never ends, for planning), until the gang can
be placed; that moment is the reservation's start ("shadow time") and the nodes it would take are
reserved. A job behind it may then start now only if it ends by that start, or if it keeps off
the reserved nodes: ``backfill_nodes`` gives the ``nodes=`` to pass to ``place_gang``.

A building block: admission (which decides who starts) is where a reservation is enforced.
"""

from __future__ import annotations

from typing import NamedTuple

from gangway.events.resources import index_of, quota_fit
from gangway.events.state import HOLDS_NODES, State, WorkloadState
from gangway.services.placement.policy import copy_free, free_capacity, place_gang, release_nodes

#: At most this many ends are tried (a bound on the planning work).
ENDS_MAX = 256


class Reservation(NamedTuple):
    workload: str
    start_ms: int
    nodes: frozenset[str]


def _expected_end_ms(state: State, wl: WorkloadState) -> int | None:
    if wl.spec.runtime_ms is None:
        return None
    return (wl.started_ms if wl.started_ms is not None else state.time_ms) + wl.spec.runtime_ms


def blocked_head(state: State) -> WorkloadState | None:
    """The first pending workload (priority, then arrival) that fits its quota but no placement."""
    if state.contract is None:
        return None
    idx = index_of(state.contract)
    free = free_capacity(state)
    waiting = sorted((state.workloads[n] for n in state.pending), key=lambda w: (-w.spec.priority, w.seq))
    for wl in waiting:
        if not quota_fit(idx, state.usage, wl.spec.cluster_queue, wl.request)[0]:
            continue
        if place_gang(copy_free(free), wl.spec.pod_sets) is None:
            return wl
    return None


def reserve(state: State, wl: WorkloadState) -> Reservation | None:
    """When and where ``wl`` could be placed as running workloads end (None: not foreseeable)."""
    ends = sorted((end, name) for name in state.active
                  if (other := state.workloads[name]).phase in HOLDS_NODES
                  and (end := _expected_end_ms(state, other)) is not None)
    later = free_capacity(state)
    for end, name in ends[:ENDS_MAX]:
        release_nodes(later, state.workloads[name])
        placed = place_gang(copy_free(later), wl.spec.pod_sets)
        if placed is not None:
            return Reservation(wl.spec.workload, max(end, state.time_ms), frozenset(a.node for a in placed))
    return None


def backfill_nodes(reservation: Reservation | None, wl: WorkloadState, now_ms: int,
                   all_nodes: list[str]) -> frozenset[str] | None:
    """The nodes ``wl`` may be placed on now without delaying the reservation (None: any node)."""
    if reservation is None or wl.spec.workload == reservation.workload:
        return None
    if wl.spec.runtime_ms is not None and now_ms + wl.spec.runtime_ms <= reservation.start_ms:
        return None
    return frozenset(n for n in all_nodes if n not in reservation.nodes)
