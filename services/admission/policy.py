"""Admission policy (pure): quota per ClusterQueue and flavor, all-or-nothing, fair and FIFO.

A scheduling cycle, in Kueue's words but without its one-admission-per-queue limit (kueue#14477):
1. snapshot: copy quota usage (the cohort tree's too) and free node capacity (``Snapshot``, in
   ``snapshot.py``: admission, preemption and defragmentation share it);
2. reserve what is already promised: admitted-but-unplaced gangs, and the room a preemptor is
   waiting for while its victims exit;
3. order the pending workloads: preemptors first, then queues reclaiming their nominal quota, then
   borrowers — highest priority first (aged, under the contract's priority aging), then oldest;
   with fair sharing, borrowers by the share their queue (and its cohorts) would have after
   admission, lowest first;
4. admit each one whose whole request fits its quota in some flavor *and* for which a placement
   exists on that flavor's free nodes — so no workload holds quota it cannot use (kueue#5243) and a
   gang never holds part of the cluster; a pod set with ``min_count`` may be admitted smaller;
5. under StrictFIFO a head that does not fit blocks its queue; under BestEffortFIFO the next one
   is tried — but the first gang blocked only by capacity gets a *reservation*: the nodes that
   free soonest are kept for it, and only workloads that end before it can start use them (EASY
   backfill), so a big gang is not starved by a stream of small ones; likewise the first workload
   kept out by quota has the quota that frees soonest held for it (``Snapshot.hold_quota``), and
   so do the next few, each from when those before it leave it enough.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Container, Iterator

from gangway.events.catalogue import PlacementDecided, WorkloadAdmitted
from gangway.events.codec import format_time
from gangway.events.quantity import format_resource
from gangway.events.reasons import NEVER_CODES, QUOTA_CODES, C, Reason, reason, said
from gangway.events.resources import GPU, ContractIndex, by_flavor, index_of
from gangway.events.state import State, WorkloadState, queue_key, shape_of
from gangway.services.admission.flavors import BORROW, group_options
from gangway.services.admission.snapshot import Admission, Outcome, Snapshot
from gangway.services.admission.victims import preemption_possible
from gangway.services.placement.policy import Placer, victims_in_flight

#: At most this many admissions per cycle: one append stays a few megabytes and a cycle well under
#: a second. A cycle's fixed cost (the snapshot of quota and free nodes, the placer) is shared by
#: its admissions: a burst of 10,000 onto 20,000 GPUs went 10 % faster at 3,000 than at 1,000.
ADMISSIONS_PER_CYCLE_MAX = 3000


def queue_order(state: State) -> list[WorkloadState]:
    """Pending workloads, highest priority (aged: ``rank``) first, then oldest."""
    return [state.workloads[key[3]] for key in heapq.merge(*state.pending_order.values())]


#: Up to this many workloads left, ``_merged`` sorts them at once instead of merging lazily.
_SORT_UP_TO = 256


def _merged(state: State, queues: dict[str, int], skip: Container[str],
            stop: Callable[[WorkloadState], bool] | None = None,
            done: Callable[[str], bool] | None = None) -> Iterator[WorkloadState]:
    """The pending workloads of ``queues`` (ClusterQueue → index of the first one to take) in
    queue order, lazily (a k-way merge of the fold's per-queue orders: nothing is sorted, and only
    what the caller takes is walked); those named in ``skip`` are passed over. When ``stop`` says
    so of a workload (not yielded), its queue leaves the merge and ``queues`` keeps its index
    there: the rest of that queue, from it on, for later. When ``done`` says so of a queue, it
    leaves the merge with nothing kept for later."""
    order = state.pending_order
    stopped: set[str] = set()
    for key, cq, i in _in_queue_order(order, queues, stopped):
        if key[3] in skip:
            continue
        if done is not None and done(cq):
            stopped.add(cq)
            queues[cq] = len(order[cq])
            continue
        wl = state.workloads[key[3]]
        if stop is not None and stop(wl):
            queues[cq] = i
            stopped.add(cq)
            continue
        yield wl
    for cq in queues:
        if cq not in stopped:
            queues[cq] = len(order[cq])


def _in_queue_order(order: dict[str, list], queues: dict[str, int], stopped: set[str]) -> Iterator[tuple]:
    """``(key, queue, index)`` of what is left of ``queues`` in queue order, lazily; a queue put in
    ``stopped`` (by the consumer, between two items) yields nothing more."""
    if sum(len(order[cq]) - i for cq, i in queues.items()) <= _SORT_UP_TO:
        # A short queue: one sort of what is left is cheaper than a heap (same order).
        for item in sorted((order[cq][i], cq, i) for cq, start in queues.items() for i in range(start, len(order[cq]))):
            if item[1] not in stopped:
                yield item
        return
    heap = [(order[cq][i], cq, i) for cq, i in queues.items() if i < len(order[cq])]
    heapq.heapify(heap)
    while heap:
        key, cq, i = heap[0]
        yield key, cq, i
        queue = order[cq]
        if cq not in stopped and i + 1 < len(queue):
            heapq.heapreplace(heap, (queue[i + 1], cq, i + 1))
        else:
            heapq.heappop(heap)


def admission_cycle(state: State, idx: ContractIndex, settle: bool = False) -> Iterator[tuple[Outcome, Snapshot]]:
    """Walk the queue as admission does: yields (outcome, snapshot) per pending workload.

    1. preemptors first (victims were ordered out for them; ``nominated``): they won their room;
       then, under ``Contract.moved_first``, the workloads defragmentation moved for them;
    2. then, as in Kueue, the queues whose next workload fits their nominal quota, before any
       workload that would borrow — a team reclaiming its guarantee is never beaten to the room
       by a borrower, even one of higher priority (which would be preempted again at once: a
       preemption cycle). A queue whose next workload would borrow keeps its order: everything
       after it in that queue waits for the second pass too;
    3. then the borrowers: in queue order, or with fair sharing by lowest share after admission.
    Preemption walks the same cycle, so it never evicts for a workload admission would admit.
    The walk is lazy (the fold keeps each queue in order): a caller that stops early has not
    paid for the rest of the queue. With ``settle`` (a caller that wants the admissions, not why the
    others wait, on a state whose pending counts hold: ``counts_hold``), a queue leaves the walk once
    every kind of workload still to come in it failed (``_Settled``): room only shrinks within a
    cycle, so none of the rest would fit.
    """
    snap = Snapshot(state, idx)
    snap.reserve_admitted()
    waiting = snap.in_flight()
    blocked: set[str] = set()
    # A gang whose bind failed waits out its requeue backoff (on the log's clock) out of the cycle;
    # so does a workload whose queue is stopped (stopPolicy), until it is not.
    backing_off = {name for name, t in state.backing_off.items() if t > state.time_ms}
    held = in_stopped_local_queues(state, idx)
    first = {name for name in state.nominated} | {name for name in waiting if name in state.pending}
    first = {name for name in first - backing_off - held if state.workloads[name].spec.cluster_queue not in idx.stopped}
    # (under Contract.gang_before_its_moved, a workload others were moved for goes as a gang)
    gangs = {state.workloads[name].moved_for for name in first} if idx.contract.gang_before_its_moved else set()
    for name in sorted(first, key=lambda name: _first_key(state.workloads[name], snap.aging, name in gangs)):
        yield _try(snap, idx, state.workloads[name], waiting, blocked), snap
    skip = first | backing_off | held
    settled = _Settled(state, snap, skip) if settle else None
    done = settled.done if settled is not None else None
    queues = {cq: 0 for cq in state.pending_order if cq not in idx.stopped}
    for wl in _merged(state, queues, skip, lambda wl: _needs_borrowing(snap, wl), done):
        yield _walked(settled, _try(snap, idx, wl, waiting, blocked)), snap
    later = {cq: i for cq, i in queues.items() if i < len(state.pending_order[cq])}
    if idx.contract.fair_sharing.enable:
        borrowers = fair_order(snap, idx, {cq: _merged(state, {cq: i}, skip, done=done) for cq, i in later.items()})
    else:
        borrowers = _merged(state, later, skip, done=done)
    for wl in borrowers:
        yield _walked(settled, _try(snap, idx, wl, waiting, blocked)), snap


def _first_key(wl: WorkloadState, aging: int, gang: bool = False) -> tuple:
    """The order of the cycle's first ones: the preemptors in queue order, then the workloads
    defragmentation moved (``moved_for``), biggest first, as their moves were planned. A ``gang``
    (workloads were moved for it) goes with the preemptors even if it was moved itself, before
    those moved for it (else they went back into the room it waits for, and were moved again)."""
    if wl.moved_for is None or gang:
        return (0, queue_key(wl, aging))
    return (1, -wl.request.get(GPU, 0), queue_key(wl, aging))


def in_stopped_local_queues(state: State, idx: ContractIndex) -> set[str]:
    """The pending workloads of LocalQueues stopped by their stopPolicy (only the ClusterQueues such
    LocalQueues feed are looked through; a stopped ClusterQueue leaves the cycle whole)."""
    if not idx.stopped_local:
        return set()
    feeding = {idx.local_queues[key].cluster_queue for key in idx.stopped_local} - idx.stopped.keys()
    found = set()
    for cq in feeding:
        for key in state.pending_order.get(cq, ()):
            spec = state.workloads[key[3]].spec
            if (spec.namespace, spec.queue) in idx.stopped_local:
                found.add(spec.workload)
    return found


def _walked(settled: _Settled | None, outcome: Outcome) -> Outcome:
    if settled is not None:
        settled.walked(outcome)
    return outcome


class _Settled:
    """Which ClusterQueues have nothing left in this cycle's walk that could be admitted: every kind
    of workload (shape) still to come in the queue has failed already (``Snapshot.settled``; room
    only shrinks within a cycle, so the rest would fail alike). Counted from the fold's pending
    shapes less those walked."""

    def __init__(self, state: State, snap: Snapshot, skip: Container[str]):
        self.snap = snap
        self.left = dict(state.pending_shapes)
        for name in skip:
            if name in state.pending:
                self.left[state.workloads[name].shape] -= 1
        self.failed = set(snap.settled)
        #: ClusterQueue → kinds with workloads still to walk that have not failed.
        self.open: dict[str, int] = {}
        for shape, n in self.left.items():
            if n > 0 and shape not in self.failed:
                cq = shape.partition("|")[0]  # (a shape's text starts with its ClusterQueue)
                self.open[cq] = self.open.get(cq, 0) + 1

    def walked(self, outcome: Outcome) -> None:
        shape = outcome.wl.shape
        was_open = self.left[shape] > 0 and shape not in self.failed
        self.left[shape] -= 1
        if outcome.admission is None and shape in self.snap.settled:
            self.failed.add(shape)
        if was_open and (self.left[shape] == 0 or shape in self.failed):
            cq = outcome.wl.spec.cluster_queue
            self.open[cq] -= 1

    def done(self, cq: str) -> bool:
        return self.open.get(cq) == 0


def fair_order(snap: Snapshot, idx: ContractIndex, queues: dict[str, Iterator[WorkloadState]]) -> Iterator[WorkloadState]:
    """Borrowers, the queue head whose queue (and cohorts, root first) would have the lowest share first.

    ``queues``: each borrowing ClusterQueue's workloads in queue order (taken lazily). Shares are
    Kueue's dominant resource shares, weighted by queue and cohort weights and by flavor values;
    each pick is taken into account before the next (a tournament per level).
    """
    heads: dict[str, WorkloadState] = {}
    for cq, walk in queues.items():
        head = next(walk, None)
        if head is not None:
            heads[cq] = head
    while heads:
        best = min(heads, key=lambda cq: (_share_key(snap, idx, heads[cq]), queue_key(heads[cq], snap.aging)))
        wl = heads[best]
        head = next(queues[best], None)
        if head is None:
            del heads[best]
        else:
            heads[best] = head
        yield wl


def _share_key(snap: Snapshot, idx: ContractIndex, wl: WorkloadState) -> tuple[int, ...]:
    cq = wl.spec.cluster_queue
    if cq not in idx.tree.queues:
        return ()
    asked = idx.asked(wl)
    extra = by_flavor(asked, idx.default_flavors(cq, asked))
    path = idx.tree.path(cq)
    return tuple(snap.view.share(node, extra if node.name == cq else {}, idx.weights)
                 for node in reversed(path[:-1]))


def _needs_borrowing(snap: Snapshot, wl: WorkloadState) -> bool:
    shape = wl.shape or shape_of(wl.spec)
    answer = snap.borrows.get(shape)
    if answer is None:
        answer = snap.borrows[shape] = _borrows(snap, wl)
    return answer


def _borrows(snap: Snapshot, wl: WorkloadState) -> bool:
    """Would ``wl`` borrow under the flavors admission would try first (each resource group's
    first option that fits now, flavor fungibility applied)? Not when it fits nowhere now. (Its
    queue's first flavors are not enough: under ``whenCanBorrow: TryNextFlavor`` a queue whose
    first flavor cannot hold the request borrows in the next, and must wait for the borrowers'
    pass like any borrower, not overtake a higher-priority one as if it fitted its own quota.)"""
    cq = snap.idx.cluster_queues.get(wl.spec.cluster_queue)
    if cq is None or cq.name not in snap.idx.tree.queues:
        return False
    request = snap.idx.asked(wl)
    borrows = False
    for group in snap.idx.groups[cq.name]:
        if not any(request.get(r, 0) > 0 for r in group[0].resources):
            continue
        group = snap.idx.tolerated(group, wl.spec.pod_sets)
        now, _ = group_options(snap.bound_view(), cq, group, request, snap.idx.contract.fair_sharing.enable)
        if not now:
            return False
        borrows = borrows or now[0].mode == BORROW
    return borrows


def _try(snap: Snapshot, idx: ContractIndex, wl: WorkloadState, waiting: dict[str, list[WorkloadState]],
         blocked: set[str]) -> Outcome:
    cq = wl.spec.cluster_queue
    if cq in blocked:
        return Outcome(wl, None, reason(C.STRICT_FIFO, cluster_queue=cq))
    if (wl.spec.namespace, wl.spec.queue) not in idx.local_queues:  # (as Kueue: inadmissible while it is gone)
        return Outcome(wl, None, reason(C.LOCAL_QUEUE_GONE, local_queue=f"{wl.spec.namespace}/{wl.spec.queue}"))
    outcome = snap.try_admit(wl)
    if outcome.admission is not None:
        return outcome
    if wl.spec.workload in waiting:
        victims = waiting[wl.spec.workload]
        flavors = wl.nominated_flavors or _first_flavors(idx, outcome)
        snap.reserve_for_preemptor(wl, victims, flavors)
        outcome.reason = reason(C.WAITING_FOR_VICTIMS, victims=len(victims))
    elif outcome.reason is not None and outcome.reason.code == C.NO_PLACEMENT and snap.reservation is None:
        outcome.reserved = snap.reserve_for_gang(wl, _first_flavors(idx, outcome))
        if outcome.reserved is not None:
            outcome.reason = Reason(C.RESERVATION_HELD, outcome.reason.params).plus(
                reserved_start=format_time(outcome.reserved[0]))
    elif outcome.reason is not None and outcome.reason.code in QUOTA_CODES and \
            (handed := snap.take_over(wl, _first_flavors(idx, outcome))) is not None:
        return handed
    elif outcome.reason is not None and outcome.reason.code in QUOTA_CODES and snap.may_hold(wl):
        # (under Contract.holds_against_preemption, one that can preempt now is held from now)
        now = idx.contract.holds_against_preemption and any(
            preemption_possible(snap, wl, flavors) for flavors in outcome.preempt_flavors)
        hold = snap.hold_quota(wl, _first_flavors(idx, outcome), now=now)
        if hold is not None:
            outcome.reason = outcome.reason.plus(held_start=format_time(hold.start_ms))
    if _strict(idx, cq) and not (outcome.reason is not None and outcome.reason.code in NEVER_CODES):
        # a head that can never be placed, or never fit the quota, is set aside, not waited for
        blocked.add(cq)
    return outcome


def _first_flavors(idx: ContractIndex, outcome: Outcome) -> dict[str, str]:
    """The flavors a workload not admitted waits in: the first assignment preemption could make room
    in, else its queue's first flavors."""
    wl = outcome.wl
    return outcome.preempt_flavors[0] if outcome.preempt_flavors else idx.default_flavors(wl.spec.cluster_queue, idx.asked(wl))


def _strict(idx: ContractIndex, cq: str) -> bool:
    queue = idx.cluster_queues.get(cq)
    return queue is not None and queue.queueing_strategy == "StrictFIFO"


def decide_admission(state: State) -> list[WorkloadAdmitted]:
    return list(admissions(state))


def admissions(state: State) -> Iterator[WorkloadAdmitted]:
    """``decide_admission``'s decisions one by one, lazily: a caller that has what it wants (the
    auditor, looking for the decisions recorded at an offset) stops the cycle there."""
    if state.contract is None or not state.pending:
        return
    idx = index_of(state.contract)
    made = 0
    counted = counts_hold(state)
    for outcome, snap in admission_cycle(state, idx, settle=counted):
        a = outcome.admission
        if a is None:
            if counted and _nothing_left(state, snap):
                break
            continue
        wl = outcome.wl
        yield WorkloadAdmitted(
            workload=wl.spec.workload, cluster_queue=wl.spec.cluster_queue,
            usage=a.request, borrowed=a.borrowed, based_on=state.offset,
            flavors=a.flavors, counts=a.counts, kept=snap.kept_from(wl), after=a.after, **said(_reason(idx, wl, a)),
        )
        made += 1
        if made >= ADMISSIONS_PER_CYCLE_MAX:
            break


def admissions_placed(state: State) -> Iterator[WorkloadAdmitted | PlacementDecided]:
    """What the admission service writes: each admission followed by the gang's placement, decided
    in the same cycle (``PlacementDecided.with_admission``) — one round trip through the log fewer
    between quota and running. The placement is the placement service's own (``Placer``: scored,
    the gangs admitted before and not yet placed placed first, preemptors' room kept); a gang it
    cannot place there is left to the placement service, and so is one whose placement the fold
    finds no longer fits (the nodes changed between the decision and its fold). Lazy like
    ``admissions``: the preemptors (nominated, or waiting for their victims) come first in the
    cycle (``admission_cycle``), so the placer, which keeps no room for those it admits, is ready
    at the first other admission."""
    preemptors = state.nominated.keys() | (victims_in_flight(state).keys() & state.pending.keys())
    decided = admissions(state)
    head: list[WorkloadAdmitted] = []
    for admitted in decided:
        head.append(admitted)
        if admitted.workload not in preemptors:
            break
    placer = None
    for admitted in itertools.chain(head, decided):
        yield admitted
        if placer is None:  # not before: a caller that wanted only the admission stops there
            placer = Placer(state, admitted={a.workload for a in head})
            for name in state.unplaced:
                placer.place(state.workloads[name])
        placed = placer.place(state.workloads[admitted.workload], admitted, with_admission=True)
        if placed is not None:
            yield placed

def counts_hold(state: State) -> bool:
    """Does the fold count every pending workload by its shape (``State.pending_shapes``)? Not in a
    state restored from a snapshot older than the counts, or than the shapes."""
    return "" not in state.pending_shapes and sum(state.pending_shapes.values()) == len(state.pending)


def _nothing_left(state: State, snap: Snapshot) -> bool:
    """Has every shape of pending workload failed in this cycle (``Snapshot.settled``)? Room only
    shrinks within a cycle, so none of the rest can be admitted: a deep queue of a few kinds is not
    walked to its end."""
    return len(snap.settled) >= len(state.pending_shapes)


def _reason(idx: ContractIndex, wl: WorkloadState, a: Admission) -> Reason:
    cq = wl.spec.cluster_queue
    partial = ", ".join(f"{c} pods of {n}" for n, c in sorted(a.counts.items())) if a.counts else None
    # A flavor is named only when the queue offered a choice.
    chosen = (", ".join(sorted(set(a.flavors.values())))
              if any(len(group) > 1 for group in idx.groups.get(cq, [])) else None)
    after = {"takes_over": f"{', '.join(a.after)} (expected by {format_time(a.after_ms)})"} if a.after else {}
    if a.borrowed:
        borrowed = ", ".join(format_resource(r, v) for r, v in sorted(a.borrowed.items()))
        return reason(C.FITS_BORROWING, cluster_queue=cq, borrowed=borrowed, partial=partial, chosen_flavor=chosen, **after)
    return reason(C.FITS_NOMINAL, cluster_queue=cq, partial=partial, chosen_flavor=chosen, **after)
