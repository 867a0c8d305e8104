"""Admission policy (pure): quota per ClusterQueue, all-or-nothing, priority then FIFO.

A scheduling cycle, in Kueue's words but without its one-admission-per-queue limit:
1. snapshot: copy quota usage and free node capacity (``Snapshot``);
2. reserve what is already promised: admitted-but-unplaced gangs, and the room a preemptor is
   waiting for while its victims exit;
3. order the pending workloads: highest priority first, then oldest (queue time, then log order);
4. admit each one whose whole request fits its quota *and* for which a placement exists on the
   capacity left — so no workload ever holds quota it cannot use (kueue#5243) and a gang never
   holds part of the cluster;
5. under StrictFIFO a head that does not fit blocks its queue; under BestEffortFIFO the next one
   is tried.
"""

from __future__ import annotations

from collections.abc import Iterator

from gangway.events.catalogue import WorkloadAdmitted
from gangway.events.quantity import format_resource
from gangway.events.resources import ContractIndex, add_into, index_of, quota_fit
from gangway.events.state import State, WorkloadState
from gangway.services.placement.policy import (
    Free, free_capacity, place_gang, reserve_room, victims_in_flight,
)

#: At most this many admissions per cycle.
ADMISSIONS_PER_CYCLE_MAX = 1000


class Snapshot:
    """Quota usage and free capacity as a cycle sees them; trial changes never touch ``State``.

    ``usage`` is the quota in use now (what the fold will check an admission against);
    ``later`` is how usage will change once the victims of waiting preemptors are gone and the
    preemptors are in. A workload is admitted only if it fits both now and later, so it neither
    lands over quota nor takes a preemptor's room.
    """

    def __init__(self, state: State, idx: ContractIndex):
        self.state = state
        self.idx = idx
        self.usage = {cq: dict(res) for cq, res in state.usage.items()}
        self.later: dict[str, dict[str, int]] = {}
        self.free: Free = free_capacity(state)
        #: Shapes that did not fit, and why. Room only shrinks within a cycle, so an identical
        #: gang in the same queue fails the same way.
        self.failed: dict[tuple, str] = {}
        #: quota_fit answers until usage next changes (deep queues ask the same question often).
        self._quota_memo: dict[tuple, tuple[bool, dict[str, int], str]] = {}

    def quota(self, cq: str, request: dict[str, int], binding: bool = False) -> tuple[bool, dict[str, int], str]:
        """``quota_fit`` against usage now (or the binding usage), remembered until usage changes."""
        key = (cq, tuple(sorted(request.items())), binding)
        answer = self._quota_memo.get(key)
        if answer is None:
            usage = self.binding_usage() if binding else self.usage
            answer = self._quota_memo[key] = quota_fit(self.idx, usage, cq, request)
        return answer

    def binding_usage(self) -> dict[str, dict[str, int]]:
        """Usage to fit under: the larger of now and later, per queue and resource."""
        if not self.later:
            return self.usage
        binding = {cq: dict(res) for cq, res in self.usage.items()}
        for cq, deltas in self.later.items():
            for resource, delta in deltas.items():
                if delta > 0:
                    binding.setdefault(cq, {})[resource] = binding.get(cq, {}).get(resource, 0) + delta
        return binding

    def fits(self, wl: WorkloadState) -> tuple[bool, dict[str, int], str]:
        """Quota and a placement for the whole gang; on success both are taken in the snapshot."""
        key = shape_key(wl)
        if key in self.failed:
            return False, {}, self.failed[key]
        cq = wl.spec.cluster_queue
        ok, borrowed, why = self.quota(cq, wl.request, binding=True)
        if ok and self.later:  # what it borrows is counted, as the fold counts it, from usage now
            ok, borrowed, why = self.quota(cq, wl.request)
        if ok and place_gang(self.free, wl.spec.pod_sets) is None:
            ok, why = False, "no placement for the whole gang on free capacity"
        if not ok:
            self.failed[key] = why
            return False, {}, why
        add_into(self.usage.setdefault(cq, {}), wl.request)
        self._quota_memo.clear()
        return True, borrowed, ""

    def reserve_admitted(self) -> None:
        """Admitted gangs not yet placed will be: keep their room."""
        for name in self.state.unplaced:
            place_gang(self.free, self.state.workloads[name].spec.pod_sets)

    def reserve_for_preemptor(self, wl: WorkloadState, victims: list[WorkloadState]) -> None:
        """Hold the room a preemptor waits for: its victims' quota and nodes will be its own."""
        for victim in victims:
            add_into(self.later.setdefault(victim.spec.cluster_queue, {}), victim.admission.usage, -1)
        add_into(self.later.setdefault(wl.spec.cluster_queue, {}), wl.request)
        self._quota_memo.clear()
        reserve_room(self.free, wl, victims)


def shape_key(wl: WorkloadState) -> tuple:
    """What decides whether a gang fits: its queue and the shape of its pod sets."""
    return (wl.spec.cluster_queue, tuple((ps.count, tuple(sorted(ps.resources.items()))) for ps in wl.spec.pod_sets))


def queue_order(state: State) -> list[WorkloadState]:
    """Pending workloads, highest priority first, then oldest."""
    pending = [state.workloads[name] for name in state.pending]
    pending.sort(key=lambda wl: (-wl.spec.priority, wl.queued_ms, wl.seq))
    return pending


def admission_cycle(state: State, idx: ContractIndex) -> Iterator[tuple[WorkloadState, bool, dict[str, int], str, Snapshot]]:
    """Walk the queue as admission does: yields (workload, admitted?, borrowed, why-not, snapshot).

    1. preemptors first (victims were ordered out for them; ``nominated``): they won their room;
    2. then, as in Kueue, the queues whose next workload fits their nominal quota, before any
       workload that would borrow — a team reclaiming its guarantee is never beaten to the room
       by a borrower, even one of higher priority (which would be preempted again at once: a
       preemption cycle). A queue whose next workload would borrow keeps its order: everything
       after it in that queue waits for the second pass too;
    3. then the rest, in queue order.
    Preemption walks the same cycle, so it never evicts for a workload admission would admit.
    """
    snap = Snapshot(state, idx)
    snap.reserve_admitted()
    waiting = victims_in_flight(state)
    blocked: set[str] = set()
    order = queue_order(state)
    for wl in order:
        if wl.nominated or wl.spec.workload in waiting:
            yield _try(snap, idx, wl, waiting, blocked)
    later: list[WorkloadState] = []
    borrowing_queues: set[str] = set()
    for wl in order:
        if wl.nominated or wl.spec.workload in waiting:
            continue
        cq = wl.spec.cluster_queue
        if cq in borrowing_queues or _needs_borrowing(snap, idx, wl):
            borrowing_queues.add(cq)
            later.append(wl)
            continue
        yield _try(snap, idx, wl, waiting, blocked)
    for wl in later:
        yield _try(snap, idx, wl, waiting, blocked)


def _needs_borrowing(snap: Snapshot, idx: ContractIndex, wl: WorkloadState) -> bool:
    ok, borrowed, _ = snap.quota(wl.spec.cluster_queue, wl.request)
    return ok and bool(borrowed)


def _try(snap: Snapshot, idx: ContractIndex, wl: WorkloadState, waiting: dict[str, list[WorkloadState]],
         blocked: set[str]) -> tuple[WorkloadState, bool, dict[str, int], str, Snapshot]:
    cq = wl.spec.cluster_queue
    if cq in blocked:
        return wl, False, {}, f"StrictFIFO: behind the head of {cq}", snap
    ok, borrowed, why = snap.fits(wl)
    if not ok and wl.spec.workload in waiting:
        snap.reserve_for_preemptor(wl, waiting[wl.spec.workload])
        why = f"waiting for {len(waiting[wl.spec.workload])} preempted workload(s) to exit"
    elif not ok and _strict(idx, cq):
        blocked.add(cq)
    return wl, ok, borrowed, why, snap


def _strict(idx: ContractIndex, cq: str) -> bool:
    queue = idx.cluster_queues.get(cq)
    return queue is not None and queue.queueing_strategy == "StrictFIFO"


def decide_admission(state: State) -> list[WorkloadAdmitted]:
    if state.contract is None:
        return []
    idx = index_of(state.contract)
    decisions: list[WorkloadAdmitted] = []
    for wl, ok, borrowed, _why, _snap in admission_cycle(state, idx):
        if not ok:
            continue
        decisions.append(WorkloadAdmitted(
            workload=wl.spec.workload, cluster_queue=wl.spec.cluster_queue,
            usage=wl.request, borrowed=borrowed, based_on=state.offset,
            reason=_reason(wl, borrowed),
        ))
        if len(decisions) >= ADMISSIONS_PER_CYCLE_MAX:
            break
    return decisions


def _reason(wl: WorkloadState, borrowed: dict[str, int]) -> str:
    if borrowed:
        parts = ", ".join(format_resource(r, v) for r, v in sorted(borrowed.items()))
        return f"fits {wl.spec.cluster_queue} by borrowing from its cohort ({parts})"
    return f"fits nominal quota of {wl.spec.cluster_queue}"
