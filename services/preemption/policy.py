"""Preemption policy (pure): who must leave so that a pending workload can be admitted.

For each pending workload that admission cannot admit (walking the very same cycle, so nothing is
evicted for a workload that fits anyway), in queue order, and for each flavor assignment under
which evictions could make room: the fewest victims the preemption rules allow after which it fits
(``admission/victims.py``: the search admission also asks whether preemption could make room),
ordered out (``EvictionOrdered``, with the grace period of their priority class and the work they
lose) — whole workloads only, never a part of a gang.
A preemptor whose victims are still exiting is not given new ones. A gang that fits its quota but
finds the free GPUs scattered gets a consolidation instead (``defrag.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

from gangway.events.catalogue import EvictionOrdered
from gangway.events.quantity import format_resource
from gangway.events.reasons import C, reason, said
from gangway.events.resources import GPU, ContractIndex, index_of
from gangway.events.state import ORDER_OUT_FROM, State, WorkloadState, execution_deadline, shape_of
from gangway.services.admission.policy import admission_cycle
from gangway.services.admission.snapshot import Snapshot, hand_over_lapses
from gangway.services.admission.victims import anyone_preemptible, choose_victims, work_lost_ms
from gangway.services.placement.policy import victims_in_flight
from gangway.services.preemption.defrag import plan_moves

#: At most this many preemptors are served per cycle.
PREEMPTORS_PER_CYCLE_MAX = 64


def decide_preemption(state: State) -> list[EvictionOrdered]:
    return list(evictions(state))


def evictions(state: State) -> Iterator[EvictionOrdered]:
    """``decide_preemption``'s orders one by one, lazily (a caller may stop early): first what
    queues stopped with HoldAndDrain still hold (``drained``), then the preemptions."""
    if state.contract is None:
        return
    idx = index_of(state.contract)
    yield from drained(state, idx)
    yield from timed_out(state, idx)
    if not state.pending or not anyone_preemptible(state, idx):
        return
    waiting = victims_in_flight(state)
    ordered_out: set[str] = set()
    hopeless: set[tuple] = set()
    served = 0
    for outcome, snap in admission_cycle(state, idx):
        wl = outcome.wl
        if outcome.admission is not None or wl.spec.workload in waiting or not outcome.preempt_flavors:
            continue
        key = _preemptor_key(idx, wl, snap)
        if key in hopeless:
            continue
        found = None
        for flavors in outcome.preempt_flavors:
            victims = choose_victims(state, idx, snap, wl, flavors, ordered_out)
            if victims:
                found = flavors, victims
                break
        if found is None and outcome.reason is not None and outcome.reason.code in (C.NO_PLACEMENT, C.RESERVATION_HELD) \
                and outcome.preempt_flavors:
            found = _defragment(state, idx, snap, wl, outcome.preempt_flavors[0], ordered_out)
        if found is None:
            # Nothing changes in the snapshot until a preemption succeeds: an identical
            # preemptor (same queue, shape, priority and age) would find no victims either.
            hopeless.add(key)
            continue
        hopeless.clear()
        flavors, victims = found
        for victim, rule in victims:
            yield EvictionOrdered(
                workload=victim.spec.workload, preemptor=wl.spec.workload, based_on=state.offset,
                grace_ms=idx.grace_ms(victim.spec.priority_class), work_lost_ms=work_lost_ms(victim, state.time_ms),
                flavors=flavors, **said(rule),
            )
        ordered_out.update(v.spec.workload for v, _ in victims)
        snap.reserve_for_preemptor(wl, [v for v, _ in victims], flavors)
        served += 1
        if served >= PREEMPTORS_PER_CYCLE_MAX:
            break


def drained(state: State, idx: ContractIndex) -> Iterator[EvictionOrdered]:
    """Kueue's stopPolicy HoldAndDrain: every workload a stopped queue (its ClusterQueue or its
    LocalQueue) admitted and that is not leaving yet is ordered out — with its priority class's
    grace period, in name order — and waits in its queue, which admits nothing, until the policy
    is lifted. The order names the queue where a preemption names its preemptor
    (``ClusterQueue/<name>``, ``LocalQueue/<namespace>/<name>``: no workload is named so)."""
    if not idx.drains:
        return
    drained = []
    for name in state.active:
        wl = state.workloads[name]
        stop = idx.stop_of(wl.spec) if wl.phase in ORDER_OUT_FROM and wl.eviction is None else None
        if stop is not None and stop[2] == "HoldAndDrain":
            drained.append((name, wl, stop))
    for name, wl, (kind, queue, _) in sorted(drained, key=lambda found: found[0]):
        yield EvictionOrdered(
            workload=name, preemptor=f"{kind}/{queue}", based_on=state.offset,
            grace_ms=idx.grace_ms(wl.spec.priority_class), work_lost_ms=work_lost_ms(wl, state.time_ms),
            **said(reason(C.QUEUE_DRAINED, queue_kind=kind, queue=queue)))


def timed_out(state: State, idx: ContractIndex) -> Iterator[EvictionOrdered]:
    """The orders time alone makes, in one look at each active workload: first, a hand-over
    (``WorkloadAdmitted.after``) not started yet whose work to take over is late past its declared
    end by more than its grace period (``hand_over_lapses``) is ordered out at once (it holds quota
    and nodes it cannot use): it waits in its queue again, where preemption may make room for it;
    the order names that work as ``HandOver/<workload>``. Then a workload admitted for its whole
    maximum execution time (``execution_deadline``) is ordered out, with its grace period, as
    ``MaximumExecutionTime``; once out it is deactivated (the fold), as Kueue deactivates it."""
    now, overran = state.time_ms, []
    for name in state.active:
        wl = state.workloads[name]
        lapse = hand_over_lapses(state, idx, wl)
        if lapse is not None and lapse[0] <= now:
            yield EvictionOrdered(
                workload=name, preemptor=f"HandOver/{lapse[1]}", based_on=state.offset, grace_ms=0, work_lost_ms=0,
                **said(reason(C.HAND_OVER_LAPSED, workload=lapse[1])))
        deadline = execution_deadline(wl)
        if deadline is not None and deadline <= now and wl.phase in ORDER_OUT_FROM and wl.eviction is None:
            overran.append(wl)
    for wl in overran:
        yield EvictionOrdered(
            workload=wl.spec.workload, preemptor="MaximumExecutionTime", based_on=state.offset,
            grace_ms=idx.grace_ms(wl.spec.priority_class), work_lost_ms=work_lost_ms(wl, now),
            **said(reason(C.MAX_EXECUTION_TIME_EXCEEDED, executed_s=(wl.executed_ms + now - wl.admitted_ms) // 1000,
                          maximum_s=wl.spec.max_execution_ms // 1000)))


def _defragment(state: State, idx: ContractIndex, snap: Snapshot, wl: WorkloadState, flavors: dict[str, str],
                ordered_out: set[str]):
    """A consolidation plan for a gang blocked by fragmentation, as (flavors, [(victim, rule)])."""
    moves = plan_moves(state, idx, snap, wl, flavors, ordered_out,
                       work_lost_ms if idx.contract.checkpoint_aware else lambda _wl, _now: 0)
    if not moves:
        return None
    gpus = format_resource(GPU, wl.request.get(GPU, 0))
    rule = reason(C.DEFRAGMENTATION, preemptor=wl.spec.workload, gpus=gpus)
    return flavors, [(moved, rule) for moved in moves]


def _preemptor_key(idx: ContractIndex, wl: WorkloadState, snap: Snapshot) -> tuple:
    """Preemptors with equal keys find the same victims: the same queue and shape (the runtime
    plays no part), the same priority, the same age under LowerOrNewerEqualPriority or priority
    aging, and the same room (the gang holding the reservation sees its reserved nodes as its own)."""
    cq = idx.cluster_queues.get(wl.spec.cluster_queue)
    newer = idx.contract.aging_ms_per_point > 0 or (
        cq is not None and cq.preemption.within_cluster_queue == "LowerOrNewerEqualPriority")
    holder = snap.reservation is not None and snap.reservation.workload == wl.spec.workload
    return (wl.shape or shape_of(wl.spec), wl.spec.priority, wl.queued_ms if newer else None, holder)
