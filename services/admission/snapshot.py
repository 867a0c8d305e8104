"""The snapshot a scheduling cycle works on (pure): quota usage and free capacity, copied from the
state, which admission, preemption and defragmentation change by trial without touching ``State``.

``Snapshot.try_admit`` answers for one pending workload whether it fits its quota in some flavor
*and* a whole placement exists on that flavor's free nodes (``Outcome``: an ``Admission`` or the
reason it does not fit). The snapshot also holds what is already promised: admitted gangs not yet
placed, the room preemptors wait for, and the nodes reserved for one gang blocked by capacity
(EASY backfill).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product

import msgspec

from gangway.events.catalogue import KeptRoom, PodSet
from gangway.events.codec import format_time
from gangway.events.decay import averages
from gangway.events.fold import held_quota
from gangway.events.quantity import format_amount
from gangway.events.quota import QuotaView, fr_key
from gangway.events.reasons import NEVER_PLACEABLE_CODES, QUOTA_CODES, C, Reason, reason
from gangway.events.resources import (
    ContractIndex, add_into, by_flavor, by_resource,
)
from gangway.events.state import NO_RUNTIME, State, WorkloadState, handing_over, rank, shape_of, waits_to_take_over
from gangway.services.admission.flavors import Option, group_options, uncovered
from gangway.services.admission.victims import preemption_possible
from gangway.services.placement.policy import (
    Free, copy_free, expected_end, free_capacity, keep_smaller, moving, never_placeable, no_node_of_queue, place_admitted, place_gang, release_nodes,
    reserve_room, room_at_start, take_assignments, victims_in_flight,
)
from gangway.services.placement.topology import ISLAND


@dataclass
class Admission:
    """How a workload is admitted: flavors per resource, pods per pod set, what it holds."""

    flavors: dict[str, str]
    pod_sets: list[PodSet]
    counts: dict[str, int]
    request: dict[str, int]
    borrowed: dict[str, int]
    #: The running workloads whose quota it takes over when they end (a hand-over; [] for none).
    after: list[str] = field(default_factory=list)
    #: When the last of them is expected to end (None without a hand-over).
    after_ms: int | None = None


@dataclass
class Outcome:
    """What a cycle made of one pending workload."""

    wl: WorkloadState
    admission: Admission | None = None
    #: Why it was not admitted (None when it was).
    reason: Reason | None = None
    #: Flavor assignments (resource → flavor) under which evicting workloads would make room.
    preempt_flavors: list[dict[str, str]] = field(default_factory=list)
    #: The reservation held for it: (expected start ms, nodes kept).
    reserved: tuple[int, list[str]] | None = None

    @property
    def why(self) -> str:
        """The reason in words."""
        return self.reason.message if self.reason is not None else ""


@dataclass
class QuotaHold:
    """The quota kept for one workload blocked by quota alone (``Snapshot.hold_quota``): it can
    start at ``start_ms``, when the admitted work of its quota tree expected to end soonest has
    released enough; ``later`` is the usage then, the workload in it (and those held for before
    it in its tree). Only workloads ranked after it (``rank``: of lower priority) are held back. ``held``: its quota by
    flavor; ``end_ms``: when it is expected to give it back (its runtime from ``start_ms``; None
    without one)."""

    workload: str
    cluster_queue: str
    rank: int
    start_ms: int
    later: QuotaView
    held: dict[str, int]
    end_ms: int | None


class Snapshot:
    """Quota usage and free capacity as a cycle sees them; trial changes never touch ``State``.

    ``view`` is the quota in use now (what the fold will check an admission against); ``later``
    is how usage will change once the victims of waiting preemptors are gone and the preemptors
    are in. A workload is admitted only if it fits both now and later, so it neither lands over
    quota nor takes a preemptor's room.
    """

    def __init__(self, state: State, idx: ContractIndex):
        self.state = state
        self.idx = idx
        #: The contract's priority aging (``rank``).
        self.aging = idx.contract.aging_ms_per_point
        self.view = QuotaView.over(idx.tree, state.usage, state.cohort_usage, averages(state))
        self.later: dict[str, dict[str, int]] = {}
        self._bound: QuotaView | None = None
        self._later: QuotaView | None = None
        # Admission asks only whether a whole placement exists: plain best fit answers that, and
        # faster than the fragmentation score, which chooses among placements (placement's job).
        self.free: Free = free_capacity(state, scored=False)
        #: Capacity before reservations: backfill that ends in time may use it.
        self.free_unreserved: Free | None = None
        #: The nodes kept for one gang blocked by capacity (EASY backfill), once the cycle keeps them.
        self.reservation: KeptRoom | None = None
        #: Quota tree root (a ClusterQueue outside any cohort is its own) → the quota kept there for
        #: workloads blocked by quota, in the walk's order (backfill on quota, as ``reservation`` on nodes).
        self.holds: dict[str, list[QuotaHold]] = {}
        #: Kinds that did not fit (``failure_key``), and why: room only shrinks within a cycle.
        self.failed: dict[tuple, Outcome] = {}
        #: Shapes none of whose pending workloads fits any more this cycle: the shape failed, or
        #: while room is kept for a gang, its workload that ends soonest did (``_settles``).
        self.settled: set[str] = set()
        #: This cycle's admissions that declare a runtime: (expected end, ClusterQueue, quota by flavor).
        self.taken: list[tuple[int, str, dict]] = []
        #: Quota tree root → its admitted workloads by expected end (``quota_ends``), once asked.
        self._ends: dict[str, list[tuple[int, WorkloadState]]] | None = None
        #: Would a workload of this shape borrow (``_needs_borrowing``), until the quota view changes.
        self.borrows: dict[str, bool] = {}
        self._in_flight: dict[str, list[WorkloadState]] | None = None
        #: ``_kept``'s answers, by what they depend on.
        self._kept_keys: dict[tuple, tuple] = {}
        self._outranks_keys: dict[tuple, tuple] = {}
        #: ClusterQueue → the root of its quota tree (``_root``), once asked.
        self._roots: dict[str, str | None] = {}
        #: Quota tree root → the last rank pending there (``_last_pending``), once asked.
        self._last: dict[str, int] | None = None
        #: (ClusterQueue, quota by flavor) no hold could be made for this cycle.
        self.unholdable: set[tuple] = set()
        #: (shape, priority or holds outranked, flavors) no hand-over could be made for this cycle (``take_over``).
        self.no_hand_over: set[tuple] = set()

    # --- quota ---------------------------------------------------------------------------------

    def bound_view(self) -> QuotaView:
        """Quota to fit under: usage now plus what waiting preemptors will take, per queue."""
        if not self.later:
            return self.view
        if self._bound is None:
            self._bound = self.view.copy()
            for cq, deltas in sorted(self.later.items()):
                grow = {fr: d for fr, d in deltas.items() if d > 0}
                if cq in self.idx.tree.queues and grow:
                    self._bound.add(cq, grow)
        return self._bound

    def later_view(self) -> QuotaView:
        """Quota once every victim in flight is gone and every waiting preemptor is in (what a
        preemption trial starts from: room already promised is neither taken nor made twice)."""
        if self._later is None:
            self._later = self.view.copy()
            for cq, deltas in sorted(self.later.items()):
                if cq not in self.idx.tree.queues:
                    continue
                for sign in (-1, 1):  # give back before taking, so no node goes below zero
                    part = {fr: abs(d) for fr, d in deltas.items() if d * sign > 0}
                    if part:
                        self._later.add(cq, part, sign)
        return self._later

    def take(self, cq: str, held: dict[str, int]) -> None:
        self.view.add(cq, held)
        self.borrows.clear()
        for view in (self._bound, self._later):
            if view is not None:
                view.add(cq, held)

    # --- one workload --------------------------------------------------------------------------

    def try_admit(self, wl: WorkloadState) -> Outcome:
        """Admit ``wl`` in the snapshot if it fits (quota and a whole placement), else say why."""
        key = self.failure_key(wl)
        failed = self.failed.get(key)
        if failed is not None:
            return Outcome(wl, None, failed.reason, failed.preempt_flavors)
        cq = self.idx.cluster_queues.get(wl.spec.cluster_queue)
        if cq is None:
            return Outcome(wl, None, reason(C.UNKNOWN_CLUSTER_QUEUE, cluster_queue=wl.spec.cluster_queue))
        missing = uncovered(self.idx, cq.name, self.idx.asked(wl))
        if missing:
            return Outcome(wl, None, reason(C.NO_QUOTA_FOR_RESOURCES, cluster_queue=cq.name, resources=", ".join(missing)))
        outcome = self._assign(wl, wl.spec.pod_sets)
        # As Kueue: fewer pods only when preemption could not make room for all of them.
        if outcome.admission is None and _partial(wl) and \
                not any(self._preemption_possible(wl, flavors) for flavors in outcome.preempt_flavors):
            outcome = self._partial(wl, outcome)
        if outcome.admission is None:
            if self.idx.tainting and outcome.reason is not None and outcome.reason.code != C.UNTOLERATED_TAINT:
                outcome.reason = outcome.reason.plus(passed_over=self._passed_over(wl, cq.name))
            self.failed[key] = outcome
            if self._settles(key):
                self.settled.add(key[0])
        return outcome

    def _may_preempt(self, wl: WorkloadState, option: Option) -> bool:
        """Could preemption make room for ``wl`` in ``option``'s flavor (the queue's first flavors
        for its other resources)?"""
        flavors = self.idx.default_flavors(wl.spec.cluster_queue, self.idx.asked(wl))
        flavors.update((r, option.flavor) for r in option.resources)
        return self._preemption_possible(wl, flavors)

    def _preemption_possible(self, wl: WorkloadState, flavors: dict[str, str]) -> bool:
        """The preemption oracle's answer; yes where a preemptor's victims, ordered out and still
        leaving, hold what it asks of ``flavors``: that room is owed to it (the oracle, finding
        nobody left to preempt there, would send it elsewhere while they leave)."""
        victims = self.in_flight().get(wl.spec.workload)
        if victims:
            wanted = by_flavor(self.idx.asked(wl), flavors)
            if any(fr in wanted for victim in victims for fr in held_quota(self.state, victim.admission)):
                return True
        return preemption_possible(self, wl, flavors)

    def in_flight(self) -> dict[str, list[WorkloadState]]:
        """Preemptor → its victims still leaving (``victims_in_flight``), once per snapshot."""
        if self._in_flight is None:
            self._in_flight = victims_in_flight(self.state)
        return self._in_flight

    @property
    def backfilling(self) -> bool:
        """Is room kept for a gang (nodes or quota)? Then a workload's runtime decides too."""
        return self.reservation is not None or bool(self.holds)

    def failure_key(self, wl: WorkloadState) -> tuple:
        """Gangs of one shape fail alike; while room is kept for a gang (backfill lets a workload
        in if it ends in time) gangs of one shape that end before the same kept room starts do."""
        shape = wl.shape or shape_of(wl.spec)
        if not self.backfilling:
            return shape, None
        return shape, *self._kept(wl)

    def _kept(self, wl: WorkloadState) -> tuple[tuple[bool, tuple[bool, ...]], tuple[bool, ...]]:
        """``wl``'s ``_in_time`` and ``_outranks``: the same for every workload of a queue and runtime,
        and of a queue and rank, until room is kept anew (holds are only added in a cycle, the
        reservation made once), so asked once for each. (Aged, a rank is one workload's.)"""
        cq = wl.spec.cluster_queue
        holds = len(self.holds_of(cq))
        key = (cq, wl.spec.runtime_ms, holds, self.reservation is not None)
        in_time = self._kept_keys.get(key)
        if in_time is None:
            in_time = self._kept_keys[key] = self._in_time(cq, wl.spec.runtime_ms)
        key = (cq, holds, rank(wl, self.aging))
        outranks = self._outranks_keys.get(key)
        if outranks is None:
            outranks = self._outranks_keys[key] = self._outranks(wl)
        return in_time, outranks

    def _in_time(self, cq: str, runtime_ms: int | None) -> tuple[bool, tuple[bool, ...]]:
        """Would a workload of ``cq`` running ``runtime_ms`` end before the nodes kept for a gang,
        and before each quota hold in its tree, are taken?"""
        return (self.reservation is not None and self._ends_by(runtime_ms, self.reservation.start_ms),
                tuple(self._ends_by(runtime_ms, hold.start_ms) for hold in self.holds_of(cq)))

    def _ends_by(self, runtime_ms: int | None, start_ms: int) -> bool:
        return runtime_ms is not None and self.state.time_ms + runtime_ms <= start_ms

    def _outranks(self, wl: WorkloadState) -> tuple[bool, ...]:
        """For each quota hold in its tree: is ``wl`` ranked no later than the workload it is held
        for (of no lower priority, unless aged)? Then that hold does not keep it out."""
        mine = rank(wl, self.aging)
        return tuple(mine <= hold.rank for hold in self.holds_of(wl.spec.cluster_queue))

    def holds_of(self, cq: str) -> list[QuotaHold]:
        """The quota held in ``cq``'s quota tree this cycle, in the order it was held."""
        return self.holds.get(self.root(cq), []) if self.holds else []

    def may_hold(self, wl: WorkloadState) -> bool:
        """Could quota be held for ``wl`` (``hold_quota``): its quota tree has fewer holds than the
        contract's ``backfill.quota_holds_per_tree``, and work ranked after it (of lower priority)
        pending, which a hold keeps out?"""
        root = self.root(wl.spec.cluster_queue)
        holds_max = self.idx.contract.backfill.quota_holds_per_tree
        return root is not None and len(self.holds.get(root, ())) < holds_max and \
            rank(wl, self.aging) < self._last_pending(root)

    def _last_pending(self, root: str) -> int | float:
        """The last rank of the workloads pending in a quota tree (those a hold could keep out)."""
        if self._last is None:
            self._last = {}
            for cq, keys in self.state.pending_order.items():
                if keys and (tree := self.root(cq)) is not None:
                    self._last[tree] = max(self._last.get(tree, keys[-1][0]), keys[-1][0])
        return self._last.get(root, float("-inf"))

    def root(self, cq: str) -> str | None:
        """The root of ``cq``'s quota tree (``_root``)."""
        try:
            return self._roots[cq]
        except KeyError:
            root = self._roots[cq] = _root(self.idx, cq)
            return root

    def _settles(self, key: tuple) -> bool:
        """Does the failure of ``key`` fail every pending workload of its shape? Ending in time
        only lets a workload in more easily, so it does when its shape's workload that ends
        soonest ends as much in time. (A shape is one ClusterQueue's, walked in queue order:
        those of it still to come rank no higher.)"""
        shape, in_time = key[0], key[1]
        if in_time is None:
            return True
        shortest = min(self.state.pending_runtimes.get(shape) or (NO_RUNTIME,))
        shortest = shortest if shortest != NO_RUNTIME else None
        return in_time == self._in_time(shape.partition("|")[0], shortest)

    def _partial(self, wl: WorkloadState, full: Outcome) -> Outcome:
        """The most pods (down to each pod set's min_count) that fit: a binary search."""
        most = max(ps.count - (ps.min_count if ps.min_count is not None else ps.count) for ps in wl.spec.pod_sets)
        low, high, best = 1, most, None
        while low <= high:
            cut = (low + high) // 2
            trial = self._assign(wl, _cut(wl.spec.pod_sets, cut), commit=False)
            if trial.admission is not None:
                best, high = cut, cut - 1
            else:
                low = cut + 1
        if best is None:
            return full
        return self._assign(wl, _cut(wl.spec.pod_sets, best))

    def _assign(self, wl: WorkloadState, pod_sets: list[PodSet], commit: bool = True) -> Outcome:
        cq = self.idx.cluster_queues[wl.spec.cluster_queue]
        request = self.idx.quota_request(cq.name, pod_sets)
        per_group: list[list[Option]] = []
        preempt: list[tuple[list, list[Option], list[Option]]] = []
        reasons: list[Reason] = []
        for group in self.idx.groups[cq.name]:
            if not any(request.get(r, 0) > 0 for r in group[0].resources):
                continue
            tolerated = self.idx.tolerated(group, pod_sets)
            if not tolerated:  # (no cycle changes that: only the contract or the job)
                return Outcome(wl, None, untolerated_taint(self.idx, cq.name, group, pod_sets))
            group = tolerated
            now, pre = group_options(self.bound_view(), cq, group, request, self.idx.contract.fair_sharing.enable,
                                     lambda option: self._may_preempt(wl, option))
            if wl.nominated_flavors and len(now) > 1:  # the flavor its victims made room in first
                now.sort(key=lambda option: wl.nominated_flavors.get(option.resources[0]) != option.flavor)
            per_group.append(now)
            preempt.append((group, now, pre))
            if not now:
                reasons.append(_never_enough(self.idx, cq, group, request)
                               or (pre[0].why if pre else _no_fit_why(self.view, cq, group, request)))
        if reasons:
            never = self._never_anywhere(cq.name, request, pod_sets) if reasons[0].code in QUOTA_CODES else None
            if never is not None:
                return Outcome(wl, None, never)
            return Outcome(wl, None, reasons[0], _preempt_flavors(preempt))
        why: Reason | None = None
        holds = self.holds_on(wl)
        for combo in _product(per_group):
            flavors = _flavors(combo)
            held = by_flavor(request, flavors)
            ok, borrowed, misfit = self.view.fit(cq.name, held) if self.later else (True, dict(_borrowed(combo)), None)
            if not ok:
                why = _told(why, misfit)
                continue
            hold = next((h for h in holds if self.held_back(h, cq.name, held, borrowed)), None)
            if hold is not None:
                why = _told(why, reason(C.QUOTA_HELD_FOR_ANOTHER, gang=hold.workload, cluster_queue=hold.cluster_queue,
                                        start=format_time(hold.start_ms)))
                continue
            untopological = not_topology_aware(self.idx, pod_sets, flavors)
            if untopological is not None:
                why = _told(why, untopological)
                continue
            nodes, placed = self.flavor_nodes(flavors), self.idx.flavored(pod_sets, flavors)
            if not self._place(wl, placed, nodes, commit):
                why = _told(why, never_placeable(self.free, placed, nodes, self.state) or reason(
                    C.NO_PLACEMENT, of_flavor=", ".join(sorted(set(flavors.values()))) if nodes is not None else None))
                continue
            if commit:
                self.take(cq.name, held)
                if wl.spec.runtime_ms is not None:  # (it gives its quota back then: a later hold counts on it)
                    self.taken.append((self.state.time_ms + wl.spec.runtime_ms, cq.name, held))
                for hold in holds:  # it will still hold its quota when the held workload starts
                    hold.later.add(cq.name, held)
            counts = {ps.name: ps.count for ps, orig in zip(pod_sets, wl.spec.pod_sets) if ps.count != orig.count}
            return Outcome(wl, Admission(flavors, pod_sets, counts, request, by_resource(borrowed)))
        if why is not None and why.code in NEVER_PLACEABLE_CODES:
            why = self._placeable_later(cq.name, request, pod_sets) or why
        elif why is not None and why.code in QUOTA_CODES and (never := self._never_anywhere(cq.name, request, pod_sets)):
            return Outcome(wl, None, never)
        if why is not None and why.code == C.QUOTA_HELD_FOR_ANOTHER:
            return Outcome(wl, None, why)  # it fits now: held back by the contract's order, it preempts nobody
        return Outcome(wl, None, why, _preempt_flavors(preempt))

    def _never_anywhere(self, cq: str, request: dict[str, int], pod_sets: list[PodSet]) -> Reason | None:
        """Why a gang kept out by quota could never be placed under any of its queue's flavor
        assignments, even on empty nodes (None: some assignment's nodes could take it). Then that is
        what it is told, not the quota: it is set aside, no quota is held for it and no queue waits
        behind it (a 16-GPU pod where the largest node has 8 had quota held for it, ahead of work
        that fitted)."""
        for flavors in _assignments(self._groups_asked(cq, request, pod_sets)):
            if self._never_here(pod_sets, flavors) is None:
                return None
        return self._placeable_later(cq, request, pod_sets)  # (none could: in its words)

    def _passed_over(self, wl: WorkloadState, cq: str) -> str | None:
        """The flavors of ``cq`` passed over for ``wl`` for node taints a pod set of it does not
        tolerate, in words (None: none), so that a gang told another flavor's reason knows why not
        the tainted one."""
        request = self.idx.asked(wl)
        return _untolerated_words(self.idx, [fq for group in self._groups_asked(cq, request) for fq in group],
                                  wl.spec.pod_sets)

    def flavor_reasons(self, wl: WorkloadState) -> list[tuple[str, Reason | None]]:
        """Each flavor of ``wl``'s queue listed for a resource it asks, in the queue's order, with why
        that flavor does not take the whole gang now (None: it would), as Kueue lists each flavor's
        reason: the quota it could never hold there, a node taint one of its pod sets does not
        tolerate, the quota it does not fit now, or (a queue of one resource group) no placement on
        the flavor's nodes. Read only: the snapshot is not changed."""
        cq = self.idx.cluster_queues.get(wl.spec.cluster_queue)
        if cq is None:
            return []
        pod_sets = wl.spec.pod_sets
        request = self.idx.quota_request(cq.name, pod_sets)
        groups = self._groups_asked(cq.name, request)
        out: list[tuple[str, Reason | None]] = []
        for fq in (fq for group in groups for fq in group):
            flavors = {r: fq.flavor for r in fq.resources}
            why = _never_enough(self.idx, cq, [fq], request)
            if why is None and self.idx.untolerated(fq.flavor, pod_sets) is not None:
                why = untolerated_taint(self.idx, cq.name, [fq], pod_sets)
            if why is None:
                why = not_topology_aware(self.idx, pod_sets, flavors)
            if why is None:
                ok, _, _ = self.view.fit(cq.name, by_flavor(request, flavors))
                why = None if ok else _no_fit_why(self.view, cq, [fq], request)
            if why is None and len(groups) == 1:  # (a placement needs every resource's flavor)
                nodes, placed = self.flavor_nodes(flavors), self.idx.flavored(pod_sets, flavors)
                if place_gang(copy_free(self.free), placed, nodes=nodes) is None:
                    why = never_placeable(self.free, placed, nodes, self.state) or reason(C.NO_PLACEMENT,
                                                                                         of_flavor=fq.flavor)
            out.append((fq.flavor, why))
        return out

    def _groups_asked(self, cq: str, request: dict[str, int], pod_sets: list[PodSet] | None = None) -> list:
        """``cq``'s resource groups that ``request`` asks something of, each with the flavors the pod
        sets tolerate (``ContractIndex.tolerated``; all of them without ``pod_sets``)."""
        return [group if pod_sets is None else self.idx.tolerated(group, pod_sets) for group in self.idx.groups[cq]
                if any(request.get(r, 0) > 0 for r in group[0].resources)]

    def _never_here(self, pod_sets: list[PodSet], flavors: dict[str, str]) -> Reason | None:
        """Why no node of ``flavors`` could ever take the gang (``never_placeable``), or, under
        ``Contract.untopological_flavor_never``, why the flavors could not take its topology request
        (``not_topology_aware``: a flavor naming no Topology); None: they could."""
        if self.idx.contract.untopological_flavor_never and (why := not_topology_aware(self.idx, pod_sets, flavors)):
            return why
        return never_placeable(self.free, self.idx.flavored(pod_sets, flavors), self.flavor_nodes(flavors), self.state)

    def _placeable_later(self, cq: str, request: dict[str, int], pod_sets: list[PodSet]) -> Reason:
        """Why a gang that no flavor assignment it fits now could ever take waits: the quota of the
        first assignment it does not fit now whose nodes could take it; when none could, the never
        placeable reason of the queue's first assignment (its preferred flavors). (Every assignment
        it was tried under is never placeable, or it would have been told another reason: one whose
        nodes could take it is one it does not fit now.)"""
        groups = self._groups_asked(cq, request, pod_sets)
        first: Reason | None = None
        tried: list[frozenset[str] | None] = []  # each assignment's nodes (None: every node)
        for flavors in _assignments(groups):
            nodes = self.flavor_nodes(flavors)
            never = self._never_here(pod_sets, flavors)
            if never is None:
                _, _, misfit = self.view.fit(cq, by_flavor(request, flavors))
                return misfit or reason(C.NO_FLAVOR_ROOM, cluster_queue=cq, flavors=", ".join(sorted(set(flavors.values()))))
            first = first or never
            tried.append(nodes)
        if first is not None and first.code == C.NO_MATCHING_NODES:  # nodes of a flavor the queue lacks may match
            anywhere = None if None in tried else frozenset().union(*tried)
            listed = list(dict.fromkeys(fq.flavor for group in groups for fq in group))
            every = frozenset(self.state.nodes)
            others = {f: self.idx.flavor_nodes(f, self.state) or every for f in self.idx.flavors if f not in listed}
            first = no_node_of_queue(self.free, pod_sets, cq, listed, anywhere, others) or first
        return first

    def flavor_nodes(self, flavors: dict[str, str]) -> frozenset[str] | None:
        return self.idx.nodes_of(flavors, self.state)

    def would_admit(self, wl: WorkloadState) -> bool:
        """Would ``wl`` fit this snapshot's room now, whole? (The snapshot is not changed.)"""
        if self.idx.cluster_queues.get(wl.spec.cluster_queue) is None:
            return False
        return self._assign(wl, wl.spec.pod_sets, commit=False).admission is not None

    def _place(self, wl: WorkloadState, pod_sets: list[PodSet], nodes, commit: bool) -> bool:
        """Is there a whole placement (taking it in the snapshot when ``commit``)? A workload that
        ends before the reserved gang starts may use the reserved nodes (backfill)."""
        free = self.free if commit else copy_free(self.free)
        assignments = place_gang(free, pod_sets, nodes=nodes)
        if assignments is not None:
            if commit and self.free_unreserved is not None:  # the same pods leave the raw capacity
                take_assignments(self.free_unreserved, pod_sets, assignments)
            return True
        if self.free_unreserved is None or not self._ends_before_reservation(wl):
            return False
        raw = copy_free(self.free_unreserved)
        if place_gang(raw, pod_sets, nodes=nodes) is None:
            return False
        if commit:  # backfill: it ends before the reserved gang can start
            self.free_unreserved = raw
            keep_smaller(self.free, raw)
        return True

    def room_for(self, wl: WorkloadState) -> Free:
        """Free capacity as ``wl`` sees it: the nodes reserved for it are its own."""
        if self.reservation is not None and self.reservation.workload == wl.spec.workload and self.free_unreserved:
            return self.free_unreserved
        return self.free

    def holds_on(self, wl: WorkloadState) -> list[QuotaHold]:
        """The quota holds ``wl`` must respect: those for a workload ranked before it in its quota
        tree, unless ``wl`` ends before that one can start."""
        holds = self.holds_of(wl.spec.cluster_queue)
        if not holds:
            return []
        (_, in_time), outranks = self._kept(wl)
        return [hold for hold, early, higher in zip(holds, in_time, outranks) if not early and not higher]

    @staticmethod
    def held_back(hold: QuotaHold, cq: str, held: dict[str, int], borrowed: dict[str, int]) -> bool:
        """Does ``hold`` keep out a workload taking ``held`` of ``cq``: would there be no room for
        both when the held workload can start? A workload of another ClusterQueue within its own
        nominal quota is never held back (the quota is its queue's before it is lent)."""
        return (cq == hold.cluster_queue or bool(borrowed)) and not hold.later.fit(cq, held)[0]

    def _ends_before_reservation(self, wl: WorkloadState) -> bool:
        return self.reservation is not None and self._ends_by(wl.spec.runtime_ms, self.reservation.start_ms)

    def kept_from(self, wl: WorkloadState) -> KeptRoom | None:
        """The room ``wl``'s placement must leave alone: the reservation held for another gang,
        unless ``wl`` ends before that gang can start (backfill)."""
        if self.reservation is None or self.reservation.workload == wl.spec.workload or self._ends_before_reservation(wl):
            return None
        return self.reservation

    # --- reservations ------------------------------------------------------------------------

    def reserve_admitted(self) -> None:
        """Admitted gangs not yet placed will be: keep their room."""
        place_admitted(self.free, self.state, (self.state.workloads[name] for name in self.state.unplaced))

    def reserve_for_preemptor(self, wl: WorkloadState, victims: list[WorkloadState],
                              flavors: dict[str, str]) -> None:
        """Hold the room a preemptor waits for: its victims' quota and nodes will be its own — but
        for those defragmentation moves (``moving``): their quota stays theirs and their room is
        kept where they will be placed again."""
        moved = {v.spec.workload for v in moving(self.state, victims)}
        for victim in victims:
            if victim.spec.workload not in moved:
                add_into(self.later.setdefault(victim.spec.cluster_queue, {}), held_quota(self.state, victim.admission), -1)
        add_into(self.later.setdefault(wl.spec.cluster_queue, {}), by_flavor(self.idx.asked(wl), flavors))
        self._bound = self._later = None
        self.failed.clear()
        reserve_room(self.free, self.idx.flavored(wl.spec.pod_sets, flavors), victims, self.state)

    def hold_quota(self, wl: WorkloadState, flavors: dict[str, str], now: bool = False) -> QuotaHold | None:
        """Keep quota for a workload blocked by quota alone (backfill on quota): the admitted work
        of its quota tree (this cycle's too), and what is held there for those before it, is
        released in the order it is expected to end until the workload fits; from then on, until
        it starts, only work ranked after it (of lower priority) that ends before that time, or that leaves room for
        it then, is admitted in that tree — a stream of small workloads, each taking what the last
        one freed, no longer keeps one of higher priority out for good (among equal priorities
        Kueue's BestEffortFIFO stands: a later workload that fits passes). At most the contract's
        ``backfill.quota_holds_per_tree`` per tree and cycle, for the workloads the walk finds
        blocked there first (the highest priority, then the oldest): the caller asks ``may_hold``
        first (before it works out the flavors the workload waits in). ``now``: the workload can
        preempt for its room now (``Contract.holds_against_preemption``): what is held is held from
        now, and no work ranked after it backfills room its victims are about to give it."""
        cq = wl.spec.cluster_queue
        root = self.root(cq)
        holds = self.holds.get(root, [])
        held = by_flavor(self.idx.asked(wl), flavors)
        tried = (cq, tuple(sorted(held.items())))
        if tried in self.unholdable:
            return None
        later = self.view.copy()
        for before in holds:  # what is held for those before it, until they are expected to end
            later.add(before.cluster_queue, before.held)
        start = self.state.time_ms
        fits = later.fit(cq, held)[0]
        if self._ends is None:
            self._ends = quota_ends(self.state, self.idx)
        admitted = ((end, other.admission.cluster_queue, held_quota(self.state, other.admission))
                    for end, other in self._ends.get(root, ()))
        ending = sorted([*((h.end_ms, h.cluster_queue, h.held) for h in holds if h.end_ms is not None),
                         *(taken for taken in self.taken if self.root(taken[1]) == root)], key=_when)
        for end, owner, quota in heapq.merge(admitted, ending, key=_when):
            if fits:
                break
            later.add(owner, quota, -1)
            start = max(start, end)
            fits = later.fit(cq, held)[0]
        if not fits:  # (nor later in the cycle: its admissions and holds only take more)
            self.unholdable.add(tried)
            return None
        later.add(cq, held)
        if now:
            start = self.state.time_ms
        end = start + wl.spec.runtime_ms if wl.spec.runtime_ms is not None else None
        hold = QuotaHold(wl.spec.workload, cq, rank(wl, self.aging), start, later, held, end)
        # (the failures remembered stand: a hold only keeps more out, and the failure keys of its
        # tree's workloads now name one hold more)
        self.holds.setdefault(root, []).append(hold)
        return hold

    def take_over(self, wl: WorkloadState, flavors: dict[str, str]) -> Outcome | None:
        """Admit a workload kept out by quota alone now, to take over from running work of its
        quota tree expected to end within the contract's ``backfill.hand_over_within_ms`` (a
        hand-over; none when it is 0): that work is given back, quota and nodes, in the order it is
        expected to end until the workload fits both, and the workload's pods start once the last
        of it has ended (``WorkloadAdmitted.after``; the binder starts them then, with no decision
        in between). Not when a hold of higher priority in its tree would be taken from; work not
        started yet, or running with no declared runtime or late past it, is not taken over (when
        it ends is not known; a hand-over whose work overruns by more than its grace period
        lapses: ``hand_over_lapses``). Work another hand-over takes over may be taken over again:
        that one's quota and room are counted (as every admission's are) before this one is
        tried. Its quota and room are counted from now — the quota in use, and a node's free
        room, may show below zero until the work it takes over ends — so every later decision is
        checked with it in; the fold checks it with that work given back."""
        # (its priority, or aged the holds it outranks: a rank is one workload's)
        standing = self._outranks(wl) if self.aging else wl.spec.priority
        tried = (wl.shape or shape_of(wl.spec), standing, tuple(sorted(flavors.items())))
        if tried in self.no_hand_over:
            return None
        cq = wl.spec.cluster_queue
        root = self.root(cq)
        held = by_flavor(self.idx.asked(wl), flavors)
        if root is None or not self.idx.contract.backfill.hand_over_within_ms or \
                not_topology_aware(self.idx, wl.spec.pod_sets, flavors):
            self.no_hand_over.add(tried)
            return None
        self.no_hand_over.add(tried)  # (taken out again below if it hands over: the next may too)
        if self._ends is None:
            self._ends = quota_ends(self.state, self.idx)
        horizon = self.state.time_ms + self.idx.contract.backfill.hand_over_within_ms
        quota = room = None  # (copied once some work ends in time: most trials find none)
        pod_sets, nodes = self.idx.flavored(wl.spec.pod_sets, flavors), self.flavor_nodes(flavors)
        after: list[WorkloadState] = []
        placed = None
        for end, other in self._ends.get(root, ()):
            if end > horizon:
                break
            said = declared_end(other)
            if said is None or said < self.state.time_ms:
                continue  # (its end is not known, or it is late: when it ends is not known either)
            if quota is None:
                quota, room = self.bound_view().copy(), copy_free(self.free)
            quota.add(other.admission.cluster_queue, held_quota(self.state, other.admission), -1)
            release_nodes(room, other)
            after.append(other)
            fits, borrowed, _ = quota.fit(cq, held)
            if fits and (placed := place_gang(copy_free(room), pod_sets, nodes=nodes)) is not None:
                break
        if placed is None:
            return None
        holds = self.holds_on(wl)
        if any(self.held_back(h, cq, held, borrowed) for h in holds):
            return None
        self.no_hand_over.discard(tried)
        # Its pods are taken now, beside the work they take over (a node's room may go below zero
        # until that work ends), as the fold takes them: another hand-over giving that work back
        # then finds only what is left once both are counted.
        take_assignments(self.free, pod_sets, placed)
        if self.free_unreserved is not None:
            take_assignments(self.free_unreserved, pod_sets, placed)
        self.take(cq, held)
        last = max(expected_end(self.state, other) for other in after)
        if wl.spec.runtime_ms is not None:
            self.taken.append((last + wl.spec.runtime_ms, cq, held))
        for hold in holds:
            hold.later.add(cq, held)
        request = self.idx.quota_request(cq, wl.spec.pod_sets)
        return Outcome(wl, Admission(flavors, wl.spec.pod_sets, {}, request, by_resource(borrowed),
                                     [other.spec.workload for other in after], last))

    def reserve_for_gang(self, wl: WorkloadState, flavors: dict[str, str]) -> tuple[int, list[str]] | None:
        """Keep the nodes that free soonest for a gang blocked by capacity alone (EASY backfill).

        Running workloads are released in the order they are expected to end until the gang
        fits; those nodes keep for it what they will have then. Returns (expected start, nodes).
        """
        if self.reservation is not None:
            return None
        found = room_at_start(self.state, self.free, self.idx.flavored(wl.spec.pod_sets, flavors),
                              self.flavor_nodes(flavors))
        if found is None:
            return None
        start, trial, nodes = found
        self.free_unreserved = copy_free(self.free)
        keep_smaller(self.free, trial, nodes)
        self.reservation = KeptRoom(workload=wl.spec.workload, start_ms=start, nodes=nodes, flavors=dict(flavors))
        self.failed.clear()
        return start, nodes


def declared_end(wl: WorkloadState) -> int | None:
    """When a running workload said it would end (start + declared runtime), or an evicting one
    must be gone (order + grace period); None otherwise."""
    if wl.phase == "evicting" and wl.eviction is not None:
        return (wl.eviction_ms or 0) + wl.eviction.grace_ms
    if wl.phase == "running" and wl.started_ms is not None and wl.spec.runtime_ms is not None:
        return wl.started_ms + wl.spec.runtime_ms
    return None


def hand_over_lapses(state: State, idx: ContractIndex, wl: WorkloadState) -> tuple[int, str] | None:
    """When a hand-over that has not started lapses, and the work it waits for that makes it: the
    first of that work to be late past its declared end by more than its grace period (preemption
    stops waiting for such work then, too) and the contract's ``backfill.hand_over_within_ms``.
    None: it does not (yet), or ``wl`` is no hand-over waiting to start."""
    if not waits_to_take_over(wl):
        return None
    lapses, within = [], idx.contract.backfill.hand_over_within_ms
    for name in handing_over(state, wl):
        other = state.workloads[name]
        end = declared_end(other)
        if end is not None:
            lapses.append((end + idx.grace_ms(other.spec.priority_class) + within + 1, name))
    return min(lapses) if lapses else None


def quota_ends(state: State, idx: ContractIndex) -> dict[str, list[tuple[int, WorkloadState]]]:
    """Quota tree root → its admitted workloads, by the time they are expected to give their quota
    back (``expected_end``)."""
    ends: dict[str, list[tuple[int, str, WorkloadState]]] = {}
    for name in state.active:
        wl = state.workloads[name]
        root = _root(idx, wl.admission.cluster_queue) if wl.admission is not None else None
        if root is not None:
            ends.setdefault(root, []).append((expected_end(state, wl), name, wl))
    return {root: [(end, wl) for end, _, wl in sorted(found)] for root, found in ends.items()}


def _when(release: tuple) -> int:
    return release[0]


def _root(idx: ContractIndex, cq: str) -> str | None:
    """The root of a ClusterQueue's quota tree (itself outside any cohort; None when not in the contract)."""
    return (idx.tree.root_of(cq) or cq) if cq in idx.tree.queues else None


def not_topology_aware(idx: ContractIndex, pod_sets: list[PodSet], flavors: dict[str, str]) -> Reason | None:
    """Why a flavor assignment cannot take a gang asking for a topology level: where the contract
    defines Topologies, Kueue places such a pod set only in flavors that name one (``topologyName``;
    its TAS skips the others). None when it can (or no pod set asks, or only for an NVLink island,
    gangway's own level; without any Topology a level is a node label, on any flavor)."""
    if not idx.contract.topologies:
        return None
    plain = sorted(f for f in set(flavors.values()) if f not in idx.flavors or idx.flavors[f].topology_name is None)
    if not plain:
        return None
    for ps in pod_sets:
        t = ps.topology
        if t is None:
            continue
        for asked, level in (("required", t.required), ("preferred", t.preferred), ("slice-required", t.slice_required)):
            if level is not None and level != ISLAND:
                return reason(C.TOPOLOGY_UNSATISFIABLE, pod_set=ps.name, request=asked, level=level,
                              missing=f"flavor {plain[0]} names no Topology (topologyName): Kueue places a topology "
                                      "request only in flavors that do")
    return None


def untolerated_taint(idx: ContractIndex, cq: str, group: list, pod_sets: list[PodSet]) -> Reason:
    """Why no flavor of a resource group may take a gang: each declares a node taint one of its pod
    sets does not tolerate (``ContractIndex.untolerated``); the first flavor's is named, and the
    others' in the clause ``other_flavors``."""
    pod_set, taint = idx.untolerated(group[0].flavor, pod_sets)
    return reason(C.UNTOLERATED_TAINT, cluster_queue=cq, resources=", ".join(sorted(group[0].resources)),
                  flavors=", ".join(fq.flavor for fq in group), pod_set=pod_set, flavor=group[0].flavor, taint=str(taint),
                  other_flavors=_untolerated_words(idx, group[1:], pod_sets))


def _untolerated_words(idx: ContractIndex, flavors: list, pod_sets: list[PodSet]) -> str | None:
    """Each of ``flavors`` whose node taints a pod set does not tolerate, with the first such pod set
    and taint, in words (None: none)."""
    said = [f"{fq.flavor} (pod set {found[0]} does not tolerate {found[1]})" for fq in flavors
            if (found := idx.untolerated(fq.flavor, pod_sets)) is not None]
    return ", ".join(said) or None


def _told(told: Reason | None, failed: Reason | None) -> Reason | None:
    """Which reason a gang no flavor assignment takes is told: the first assignment's, in the
    queue's flavor order, unless it can never change (never placeable) and a later one's can — a
    gang is never placeable only when no flavor could ever take it (a busy flavor will)."""
    if told is None or (told.code in NEVER_PLACEABLE_CODES and failed is not None
                        and failed.code not in NEVER_PLACEABLE_CODES):
        return failed
    return told


def _partial(wl: WorkloadState) -> bool:
    return any(ps.min_count is not None and ps.min_count < ps.count for ps in wl.spec.pod_sets)


def _cut(pod_sets: list[PodSet], cut: int) -> list[PodSet]:
    """Each partially admissible pod set ``cut`` pods smaller, never below its min_count."""
    out = []
    for ps in pod_sets:
        if ps.min_count is not None and ps.min_count < ps.count:
            ps = msgspec.structs.replace(ps, count=max(ps.min_count, ps.count - cut))
        out.append(ps)
    return out


def _preempt_flavors(groups: list[tuple[list, list[Option], list[Option]]]) -> list[dict[str, str]]:
    """Flavor assignments under which evictions could make room (only a workload not admitted
    needs them): per resource group, its options now and by preemption in the group's order."""
    per_group = []
    for group, now, pre in groups:
        rank = {fq.flavor: i for i, fq in enumerate(group)}
        per_group.append(sorted(now + pre, key=lambda o: rank[o.flavor]))
    return [_flavors(combo) for combo in _product(per_group)]


def _flavors(combo) -> dict[str, str]:
    return {r: o.flavor for o in combo for r in o.resources}


def _borrowed(combo) -> dict[str, int]:
    return {fr: v for o in combo for fr, v in o.borrowed}


def _assignments(groups: list) -> Iterator[dict[str, str]]:
    """Each flavor assignment (resource → flavor) of these resource groups, in the queue's order."""
    for combo in _product(groups):
        yield {r: fq.flavor for fq in combo for r in fq.resources}


def _product(groups: list[list[Option]]):
    return product(*groups)


def _never_enough(idx: ContractIndex, cq, group, request: dict[str, int]) -> Reason | None:
    """Does the request exceed, in every flavor of the group, what the queue could use with nothing
    else running (its nominal quota and all it may borrow)? Then no cycle can admit it: the reason
    names the first flavor's shortfall."""
    first: Reason | None = None
    for fq in group:
        short = next(((r, v, most) for r, v in sorted(request.items()) if r in fq.resources and v > 0
                      and v > (most := idx.tree.ceiling(cq.name, fr_key(fq.flavor, r)))), None)
        if short is None:
            return None
        if first is None:
            r, v, most = short
            first = reason(C.QUOTA_NEVER_ENOUGH, cluster_queue=cq.name, resource=r, flavor=fq.flavor,
                           wanted=format_amount(r, v), most=format_amount(r, most))
    return first


def _no_fit_why(view: QuotaView, cq, group, request: dict[str, int]) -> Reason:
    """Why no flavor of a group fits: the first flavor's own reason says most."""
    fq = group[0]
    _, _, why = view.fit(cq.name, by_flavor(request, {r: fq.flavor for r in fq.resources}))
    return why or reason(C.NO_FLAVOR_ROOM, cluster_queue=cq.name, flavors=", ".join(f.flavor for f in group))
