"""Placement policy (pure): a gang lands atomically on free capacity, best fit first.

Best fit: for each pod set, nodes are tried from the least free (of the pod's main resource: GPUs
when it asks for GPUs, else CPU) to the most free, so partly used nodes fill up before empty ones
are touched and whole nodes stay whole for big gangs. Ties break by node name: deterministic.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Container

from gangway.events.catalogue import PlacementDecided, PodAssignment, PodSet
from gangway.events.fold import placement_nodes
from gangway.events.resources import GPU, add_into, admitted_pod_sets, assignment_use, pods_that_fit
from gangway.events.state import HOLDS_NODES, State, WorkloadState

Free = dict[str, dict[str, int]]
#: At most this many placements per cycle (a bound on every loop; the next cycle takes the rest).
PLACEMENTS_PER_CYCLE_MAX = 1000


def free_capacity(state: State) -> Free:
    """A private copy of every node's free resources."""
    return {name: dict(node.free) for name, node in state.nodes.items()}


def _main_resource(per_pod: dict[str, int]) -> str:
    return GPU if per_pod.get(GPU, 0) > 0 else "cpu"


def place_gang(free: Free, pod_sets: list[PodSet], *, nodes: Container[str] | None = None) -> list[PodAssignment] | None:
    """Place every pod of every pod set, or nothing. On success ``free`` is reduced in place.

    ``nodes``, when given, are the only nodes that may be used (a flavor's nodes).
    """
    trial: Free = {}
    assignments: list[PodAssignment] = []
    for ps in pod_sets:
        main = _main_resource(ps.resources)
        need = ps.resources.get(main, 0)
        remaining = ps.count
        # Best fit: least free of the main resource first. Sorting on that alone is cheap; whether
        # the other resources fit is checked only for the few nodes actually tried.
        candidates = sorted((trial.get(n, f).get(main, 0), n) for n, f in free.items())
        for _, name in candidates[bisect_left(candidates, (need, "")):]:
            if nodes is not None and name not in nodes:
                continue
            n = min(remaining, pods_that_fit(trial.get(name, free[name]), ps.resources))
            if n <= 0:
                continue
            node_free = trial.setdefault(name, dict(free[name]))
            add_into(node_free, {k: v * n for k, v in ps.resources.items()}, -1)
            assignments.append(PodAssignment(pod_set=ps.name, node=name, count=n))
            remaining -= n
            if remaining == 0:
                break
        if remaining:
            return None
    free.update(trial)
    return assignments


def release_nodes(free: Free, wl: WorkloadState) -> None:
    """Give a workload's node resources back in ``free``."""
    if wl.placement is None or wl.phase not in HOLDS_NODES:
        return
    for node, used in assignment_use(wl.spec.pod_sets, wl.placement.assignments):
        if node in free:
            add_into(free[node], used)


def victims_in_flight(state: State) -> dict[str, list[WorkloadState]]:
    """Preemptor → its victims that were ordered out and have not exited yet."""
    waiting: dict[str, list[WorkloadState]] = {}
    for name in state.leaving:
        wl = state.workloads[name]
        if wl.eviction is not None:
            waiting.setdefault(wl.eviction.preemptor, []).append(wl)
    return waiting


def reserve_room(free: Free, wl: WorkloadState, victims: list[WorkloadState]) -> None:
    """Keep the room a preemptor will have once its victims are gone out of ``free``.

    Each node keeps the smaller of what is free now and what will be free once the victims left
    and the preemptor came in: whoever is placed meanwhile fits now and never takes that room.
    """
    later = {n: dict(f) for n, f in free.items()}
    for victim in victims:
        release_nodes(later, victim)
    if place_gang(later, wl.spec.pod_sets) is None:
        return
    for name, now in free.items():
        for resource, amount in later[name].items():
            now[resource] = min(now.get(resource, 0), amount)


def decide_placement(state: State) -> list[PlacementDecided]:
    """Place admitted workloads in admission order; one that does not fit waits, whole.

    The room a preemptor waits for (its victims are leaving) is kept for it, as admission does.
    """
    free = free_capacity(state)
    for preemptor, victims in sorted(victims_in_flight(state).items()):
        wl = state.workloads.get(preemptor)
        if wl is not None and wl.phase == "pending":
            reserve_room(free, wl, victims)
    decisions: list[PlacementDecided] = []
    for name in state.unplaced:
        wl = state.workloads[name]
        assignments = place_gang(free, admitted_pod_sets(wl.spec.pod_sets, wl.admission.counts),
                                 nodes=placement_nodes(state, wl))
        if assignments is None:
            continue
        nodes = sorted({a.node for a in assignments})
        decisions.append(PlacementDecided(
            workload=name, assignments=assignments, based_on=state.offset,
            reason=f"best fit on {len(nodes)} node(s): {', '.join(nodes[:8])}{' …' if len(nodes) > 8 else ''}",
        ))
        if len(decisions) >= PLACEMENTS_PER_CYCLE_MAX:
            break
    return decisions
