"""Preemption policy (pure): who must leave so that a pending workload can be admitted.

For each pending workload that admission cannot admit (walking the very same cycle, so nothing is
evicted for a workload that fits anyway), in queue order:
1. candidates, in Kueue's order: workloads of *other* queues in the cohort that are borrowing
   (reclaim — only for a preemptor that stays within its nominal quota), then workloads of its
   own queue that the queue's ``withinClusterQueue`` policy allows; then lowest priority first,
   then most recently admitted first;
2. add candidates to a trial snapshot until the preemptor fits (quota and a whole placement);
3. minimal set: put each chosen victim back, newest choice first, and keep it if the preemptor
   still fits without evicting it;
4. order the victims out (``EvictionOrdered``) — whole workloads only, never a part of a gang.
A preemptor whose victims are still exiting is not given new ones.
"""

from __future__ import annotations

from gangway.events.catalogue import EvictionOrdered
from gangway.events.resources import ContractIndex, add_into, index_of, is_borrowing, quota_fit
from gangway.events.state import State, WorkloadState
from gangway.services.admission.policy import Snapshot, admission_cycle, shape_key
from gangway.services.placement.policy import copy_free, place_gang, release_nodes, victims_in_flight

#: At most this many preemptors are served per cycle.
PREEMPTORS_PER_CYCLE_MAX = 64


def decide_preemption(state: State) -> list[EvictionOrdered]:
    if state.contract is None:
        return []
    idx = index_of(state.contract)
    waiting = victims_in_flight(state)
    orders: list[EvictionOrdered] = []
    ordered_out: set[str] = set()
    hopeless: set[tuple] = set()
    served = 0
    for wl, admitted, _borrowed, _why, snap in admission_cycle(state, idx):
        if admitted or wl.spec.workload in waiting:
            continue
        key = _preemptor_key(idx, wl)
        if key in hopeless:
            continue
        victims = _choose_victims(state, idx, snap, wl, ordered_out)
        if not victims:
            # Nothing changes in the snapshot until a preemption succeeds: an identical
            # preemptor (same queue, shape, priority and age) would find no victims either.
            hopeless.add(key)
            continue
        hopeless.clear()
        for victim, rule in victims:
            orders.append(EvictionOrdered(
                workload=victim.spec.workload, preemptor=wl.spec.workload, based_on=state.offset,
                grace_ms=idx.grace_ms(victim.spec.priority_class), reason=rule,
            ))
        ordered_out.update(v.spec.workload for v, _ in victims)
        _commit(snap, wl, [v for v, _ in victims])
        served += 1
        if served >= PREEMPTORS_PER_CYCLE_MAX:
            break
    return orders


def _preemptor_key(idx: ContractIndex, wl: WorkloadState) -> tuple:
    """Preemptors with equal keys find the same victims (age matters only under LowerOrNewerEqualPriority)."""
    cq = idx.cluster_queues.get(wl.spec.cluster_queue)
    newer = cq is not None and cq.preemption.within_cluster_queue == "LowerOrNewerEqualPriority"
    return (shape_key(wl), wl.spec.priority, wl.queued_ms if newer else None)


def _candidates(state: State, idx: ContractIndex, snap: Snapshot, wl: WorkloadState,
                ordered_out: set[str]) -> list[tuple[WorkloadState, str]]:
    cq_name = wl.spec.cluster_queue
    cq = idx.cluster_queues.get(cq_name)
    if cq is None:
        return []
    request = wl.request
    own_usage = snap.binding_usage().get(cq_name, {})
    within_nominal = all(
        own_usage.get(r, 0) + v <= (idx.quotas[cq_name][r].nominal if r in idx.quotas[cq_name] else -1)
        for r, v in request.items() if v > 0
    )
    found: list[tuple[tuple, WorkloadState, str]] = []
    for name in state.active:
        victim = state.workloads[name]
        if victim.phase == "evicting" or victim.admission is None or name in ordered_out:
            continue
        vq = victim.spec.cluster_queue
        rule = ""
        if vq == cq_name:
            rule = _within_queue_rule(cq.preemption.within_cluster_queue, wl, victim)
            group = 1
        elif cq.cohort and idx.cluster_queues.get(vq) and idx.cluster_queues[vq].cohort == cq.cohort:
            if within_nominal and is_borrowing(idx, snap.usage, vq):
                rule = _reclaim_rule(cq.preemption.reclaim_within_cohort, wl, victim, vq)
            group = 0
        if rule:
            key = (group, victim.spec.priority, -(victim.admitted_ms or 0), -victim.seq)
            found.append((key, victim, rule))
    found.sort(key=lambda item: item[0])
    return [(victim, rule) for _, victim, rule in found]


def _within_queue_rule(policy: str, wl: WorkloadState, victim: WorkloadState) -> str:
    p, q = wl.spec.priority, victim.spec.priority
    if policy in ("LowerPriority", "LowerOrNewerEqualPriority") and q < p:
        return f"withinClusterQueue {policy}: priority {q} < {p} of {wl.spec.workload}"
    if policy == "LowerOrNewerEqualPriority" and q == p and victim.queued_ms > wl.queued_ms:
        return f"withinClusterQueue {policy}: same priority {q}, queued after {wl.spec.workload}"
    return ""


def _reclaim_rule(policy: str, wl: WorkloadState, victim: WorkloadState, vq: str) -> str:
    p, q = wl.spec.priority, victim.spec.priority
    if policy == "Any" or (policy == "LowerPriority" and q < p):
        return (f"reclaimWithinCohort {policy}: {vq} is borrowing and {wl.spec.cluster_queue} "
                f"reclaims its nominal quota for {wl.spec.workload}")
    return ""


def _fits_without(snap: Snapshot, idx: ContractIndex, wl: WorkloadState, victims: list[WorkloadState]) -> bool:
    usage = {cq: dict(res) for cq, res in snap.binding_usage().items()}
    free = copy_free(snap.free)
    for victim in victims:
        add_into(usage.setdefault(victim.spec.cluster_queue, {}), victim.admission.usage, -1)
        release_nodes(free, victim)
    ok, _, _ = quota_fit(idx, usage, wl.spec.cluster_queue, wl.request)
    return ok and place_gang(free, wl.spec.pod_sets) is not None


def _choose_victims(state: State, idx: ContractIndex, snap: Snapshot, wl: WorkloadState,
                    ordered_out: set[str]) -> list[tuple[WorkloadState, str]]:
    candidates = _candidates(state, idx, snap, wl, ordered_out)
    chosen: list[tuple[WorkloadState, str]] = []
    for candidate in candidates:
        chosen.append(candidate)
        if _fits_without(snap, idx, wl, [v for v, _ in chosen]):
            break
    else:
        return []
    for item in reversed(list(chosen)):
        rest = [v for v, _ in chosen if v is not item[0]]
        if _fits_without(snap, idx, wl, rest):
            chosen.remove(item)
    return chosen


def _commit(snap: Snapshot, wl: WorkloadState, victims: list[WorkloadState]) -> None:
    """Later preemptors in this cycle see this preemptor's room taken, as the next cycle will."""
    snap.reserve_for_preemptor(wl, victims)
