"""Flavor assignment (pure): which ResourceFlavor's quota — and nodes — each resource of a gang uses.

Kueue's flavor assigner, for one workload in one ClusterQueue:
1. the queue's flavors form resource groups (flavors that cover the same resources, in list order);
2. in each group the flavors are tried in order; each is *Fit* (fits within the queue's nominal
   quota), *Borrow* (fits by borrowing from the cohort), *Preempt* (would fit if workloads left:
   the request is within nominal quota, or the queue may borrow while preempting) or *NoFit*;
3. flavor fungibility decides where the search stops: ``whenCanBorrow: MayStopSearch`` takes the
   first flavor that fits even by borrowing, ``TryNextFlavor`` looks for one that fits without
   borrowing first; ``whenCanPreempt: MayStopSearch`` (Kueue's ``Preempt``) stops at a flavor where
   preemption would make room (the workload waits for it) — as Kueue asks its preemption oracle,
   only where the preemption rules find someone to preempt (``may_preempt``; a flavor where nobody
   may be is passed over) — ``TryNextFlavor`` keeps looking for one that fits now.

Better than Kueue: a flavor that fits the quota but has no placement for the whole gang on its
nodes is passed over for the next one (no head-of-line blocking across flavors, kueue#8309).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gangway.events.contract import ClusterQueue, FlavorQuotas
from gangway.events.quota import QuotaView, fr_key
from gangway.events.reasons import Reason
from gangway.events.resources import ContractIndex

FIT, BORROW, PREEMPT, NOFIT = "Fit", "Borrow", "Preempt", "NoFit"


@dataclass(frozen=True)
class Option:
    """One flavor of one resource group for a request: its mode, borrowing and why not."""

    flavor: str
    resources: tuple[str, ...]
    mode: str
    borrowed: tuple[tuple[str, int], ...] = ()
    why: Reason | None = None


def group_options(view: QuotaView, cq: ClusterQueue, group: list[FlavorQuotas], request: dict[str, int],
                  fair_sharing: bool = False, may_preempt: Callable[[Option], bool] | None = None,
                  ) -> tuple[list[Option], list[Option]]:
    """(options that fit now, in the order to try them; options where preemption would make room).

    A queue may preempt while borrowing under ``borrowWithinCohort`` or fair sharing (as in Kueue).
    ``may_preempt`` is the preemption oracle: asked only where the search would stop at a flavor
    with a later one left to try, whether anyone may be preempted there.
    """
    now: list[Option] = []
    preempts: list[Option] = []
    fungibility = cq.flavor_fungibility
    for i, fq in enumerate(group):
        option = _classify(view, cq, fq, request, fair_sharing)
        if option.mode in (FIT, BORROW):
            now.append(option)
        elif option.mode == PREEMPT:
            stops = fungibility.when_can_preempt == "MayStopSearch" and not now
            if stops and i + 1 < len(group) and may_preempt is not None and not may_preempt(option):
                continue  # nobody may be preempted here (Kueue's NoCandidates): the next flavor
            preempts.append(option)
            if stops:
                break
    if fungibility.when_can_borrow == "TryNextFlavor":
        now.sort(key=lambda o: o.mode == BORROW)  # stable: list order within each mode
    return now, preempts


def _classify(view: QuotaView, cq: ClusterQueue, fq: FlavorQuotas, request: dict[str, int],
              fair_sharing: bool) -> Option:
    resources = tuple(sorted(r for r in fq.resources if request.get(r, 0) > 0))
    amounts = {fr_key(fq.flavor, r): request[r] for r in resources}
    ok, borrowed, why = view.fit(cq.name, amounts)
    if ok:
        return Option(fq.flavor, resources, BORROW if borrowed else FIT, tuple(sorted(borrowed.items())))
    node = view.structure.queues[cq.name]
    room = _preemptible_room(view, cq, node, fair_sharing or cq.preemption.borrow_within_cohort.policy != "Never")
    if all(amount <= room(fr) for fr, amount in amounts.items()):
        return Option(fq.flavor, resources, PREEMPT, why=why)
    return Option(fq.flavor, resources, NOFIT, why=why)


def _preemptible_room(view: QuotaView, cq: ClusterQueue, node, while_borrowing: bool):
    """What the queue could hold of an fr if preemption emptied what it may empty: its nominal quota,
    or in a cohort tree the quota of the highest cohort below the root (what it may reclaim from
    outside that cohort, as Kueue's hierarchical reclaim), or while it may preempt to borrow the root's."""
    path = view.structure.path(cq.name)

    def room(fr: str) -> int:
        nominal = node.nominal.get(fr, 0)
        if while_borrowing and node.parent:
            limit = node.borrowing_limit.get(fr)
            pool = view.structure.cohorts[path[-1].name].subtree.get(fr, 0)
            return pool if limit is None else min(pool, nominal + limit)
        if len(path) > 2:
            return max(nominal, view.structure.ceiling(cq.name, fr, len(path) - 2))
        return nominal
    return room


def uncovered(idx: ContractIndex, cq_name: str, request: dict[str, int]) -> list[str]:
    """Requested resources no flavor of the queue covers."""
    covered = {r for group in idx.groups.get(cq_name, []) for r in group[0].resources}
    return sorted(r for r, v in request.items() if v > 0 and r not in covered)
