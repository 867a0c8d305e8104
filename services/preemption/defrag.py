"""Defragmentation (pure): move running work so that a gang blocked by fragmentation can start.

When a gang fits its quota and enough GPUs are free in total on its flavor's nodes, but no whole
placement exists (the free GPUs are scattered), plan a consolidation:
1. candidates are running workloads that may be moved: of the gang's own ClusterQueue, or of another
   whose work the gang's preemption rules let it take room from (``preemptible_in_other_queues``:
   a team's work within its quota is never moved for another team's gang, as Kueue would never
   preempt it); priority at most the gang's, not ``protected`` (past their minimum runtime, not
   expected to end within their grace period anyway), not already leaving — cheapest first (least
   work lost since the last checkpoint, then fewest GPUs);
2. take candidates out, one by one, until the gang can be placed;
3. minimal set: put back every candidate the gang can do without (newest choice first);
4. KAI's rule: the plan holds only if, with the gang placed, every moved workload can be placed
   again on what is left — nobody is moved out of the cluster, only across it.
The moves are carried out as EvictionOrdered (reason ``defragmentation: …``); the gang is then
nominated, admitted and placed; the moved workloads are admitted and placed again.
"""

from __future__ import annotations

from gangway.events.catalogue import PodSet
from gangway.events.resources import GPU, ContractIndex
from gangway.events.state import State, WorkloadState
from gangway.services.admission.snapshot import Snapshot
from gangway.services.admission.victims import preemptible_in_other_queues, protected
from gangway.services.placement.policy import copy_free, place_again, place_gang, release_nodes

#: At most this many workloads are moved for one gang.
MOVES_MAX = 16


def plan_moves(state: State, idx: ContractIndex, snap: Snapshot, wl: WorkloadState, flavors: dict[str, str],
               ordered_out: set[str], lost_ms) -> list[WorkloadState]:
    """The workloads to move so that ``wl`` can be placed under ``flavors`` ([] when no plan holds)."""
    nodes, pod_sets = snap.flavor_nodes(flavors), idx.flavored(wl.spec.pod_sets, flavors)
    need = wl.request.get(GPU, 0)
    free = snap.room_for(wl)
    usable = [n for n in free if nodes is None or n in nodes]
    if need <= 0 or sum(free[n].free.get(GPU, 0) for n in usable) < need:
        return []  # not fragmentation: there are not enough free GPUs at all
    others = preemptible_in_other_queues(state, idx, snap, wl, flavors, ordered_out)
    candidates = _movable(state, idx, wl, nodes, ordered_out, lost_ms, others)
    chosen: list[WorkloadState] = []
    for candidate in candidates:
        chosen.append(candidate)
        if _gang_fits(free, pod_sets, chosen, nodes):
            break
        if len(chosen) >= MOVES_MAX:
            return []
    else:
        return []
    for item in reversed(list(chosen)):
        rest = [c for c in chosen if c is not item]
        if _gang_fits(free, pod_sets, rest, nodes):
            chosen = rest
    return chosen if _all_placed_again(free, pod_sets, chosen, nodes, state) else []


def _movable(state: State, idx: ContractIndex, wl: WorkloadState, nodes, ordered_out: set[str],
             lost_ms, others: set[str]) -> list[WorkloadState]:
    found = []
    for name in state.active:
        other = state.workloads[name]
        if other.phase not in ("bound", "running") or name in ordered_out or other.placement is None:
            continue
        if other.spec.cluster_queue != wl.spec.cluster_queue and name not in others:
            continue
        if other.spec.priority > wl.spec.priority:
            continue
        if protected(idx, other, state.time_ms):
            continue
        if nodes is not None and not any(a.node in nodes for a in other.placement.assignments):
            continue
        found.append(((lost_ms(other, state.time_ms), other.request.get(GPU, 0), -other.seq), other))
    found.sort(key=lambda item: item[0])
    return [other for _, other in found]


def _gang_fits(free, pod_sets: list[PodSet], moved: list[WorkloadState], nodes) -> bool:
    trial = copy_free(free)
    for other in moved:
        release_nodes(trial, other)
    return place_gang(trial, pod_sets, nodes=nodes) is not None


def _all_placed_again(free, pod_sets: list[PodSet], moved: list[WorkloadState], nodes, state: State) -> bool:
    """With the gang placed, does every moved workload find a whole placement on what is left?"""
    trial = copy_free(free)
    for other in moved:
        release_nodes(trial, other)
    return place_gang(trial, pod_sets, nodes=nodes) is not None and place_again(trial, state, moved)
