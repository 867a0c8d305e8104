"""Defragmentation planning (pure): which preemptible workloads to move so a blocked gang fits.

When a gang has no placement although enough GPUs are free in total, the free GPUs are in the
wrong places. A plan picks one *anchor* domain (a node, or a domain of the gang's required level;
racks and blocks for gangs bigger than a node), evicts the workloads there with lower priority than
the gang, cheapest lost work first (GPU milli × time run since start: no checkpoints are known
yet), until the gang fits inside the anchor, and holds only if every evicted workload can be placed
again elsewhere at once (KAI's rule). Then members are dropped while the plan still holds, most
expensive first (it helps when a job spans anchors). Of all anchors the cheapest plan wins
(ties: fewer moves, then anchor name).

A building block: carrying a plan out is EvictionOrdered for each move (reason: defragmentation
for the gang), then the usual re-admission and re-placement.
"""

from __future__ import annotations

from typing import NamedTuple

from gangway.events.catalogue import PodAssignment
from gangway.events.resources import GPU
from gangway.events.state import HOLDS_NODES, State, WorkloadState
from gangway.services.placement import topology
from gangway.services.placement.policy import Free, copy_free, free_capacity, place_gang, release_nodes

#: At most this many anchors and this many candidate moves per anchor are considered.
ANCHORS_MAX = 64
MOVES_MAX = 32


class DefragPlan(NamedTuple):
    workload: str
    anchor: str
    evict: list[str]
    #: Where the gang lands once the moves are done.
    target: list[PodAssignment]
    #: Lost work of the moves (GPU milli × ms run).
    cost: int


def _gpus(wl: WorkloadState) -> int:
    return wl.request.get(GPU, 0)


def _cost(state: State, wl: WorkloadState) -> int:
    started = wl.started_ms if wl.started_ms is not None else state.time_ms
    return _gpus(wl) * max(0, state.time_ms - started)


def _anchors(state: State, wl: WorkloadState) -> list[tuple[str, list[str]]]:
    """(name, nodes) of every domain the gang might be gathered in."""
    required = [ps.topology.required for ps in wl.spec.pod_sets if ps.topology and ps.topology.required]
    node_gpus = max((n.allocatable.get(GPU, 0) for n in state.nodes.values()), default=0)
    if required and required[0] != topology.ISLAND:
        levels = [required[0]]
    elif _gpus(wl) <= node_gpus:
        levels = [topology.HOSTNAME]
    else:
        levels = [topology.RACK, topology.BLOCK]
    items = [(n, state.nodes[n].labels) for n in sorted(state.nodes)]
    return [("/".join(key), members) for level in levels for key, members in topology.domains(items, level).items()]


def _holds(free: Free, state: State, wl: WorkloadState, evict: list[str], anchor: list[str]) -> list[PodAssignment] | None:
    """The gang's placement inside ``anchor`` once ``evict`` left, if every evicted one fits again."""
    trial = copy_free(free)
    for name in evict:
        release_nodes(trial, state.workloads[name])
    target = place_gang(trial, wl.spec.pod_sets, nodes=set(anchor))
    if target is None:
        return None
    for name in sorted(evict, key=lambda n: -_gpus(state.workloads[n])):
        if place_gang(trial, state.workloads[name].spec.pod_sets) is None:
            return None
    return target


def _plan_in(free: Free, state: State, wl: WorkloadState, anchor: list[str]) -> tuple[list[str], list[PodAssignment]] | None:
    inside = set(anchor)
    movable = sorted(((_cost(state, other), name) for name in state.active
                      if (other := state.workloads[name]).phase in HOLDS_NODES and other.placement is not None
                      and other.spec.priority < wl.spec.priority
                      and any(a.node in inside for a in other.placement.assignments)))
    evict: list[str] = []
    for _, name in movable[:MOVES_MAX]:
        evict.append(name)
        if _holds(free, state, wl, evict, anchor) is not None:
            break
    else:
        return None
    for name in sorted(evict, key=lambda n: (-_cost(state, state.workloads[n]), n)):
        fewer = [n for n in evict if n != name]
        if fewer and _holds(free, state, wl, fewer, anchor) is not None:
            evict = fewer
    return evict, _holds(free, state, wl, evict, anchor)


def plan_defrag(state: State, wl: WorkloadState) -> DefragPlan | None:
    """The cheapest consolidation that lets ``wl`` be placed, or None (it fits already, GPUs are
    short in total, or no plan moves only lower-priority workloads that can all be placed again)."""
    free = free_capacity(state)
    if place_gang(copy_free(free), wl.spec.pod_sets) is not None:
        return None
    if sum(room.free.get(GPU, 0) for room in free.values()) < _gpus(wl):
        return None
    best: DefragPlan | None = None
    for name, anchor in _anchors(state, wl)[:ANCHORS_MAX]:
        planned = _plan_in(free, state, wl, anchor)
        if planned is None:
            continue
        evict, target = planned
        cost = sum(_cost(state, state.workloads[n]) for n in evict)
        if best is None or (cost, len(evict), name) < (best.cost, len(best.evict), best.anchor):
            best = DefragPlan(wl.spec.workload, name, sorted(evict), target, cost)
    return best
