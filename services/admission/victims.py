"""Who may be preempted for a pending workload (pure): the preemption rules and the victim search.

Preemption (``services/preemption/policy.py``) orders out the victims found here. Admission asks
the same search whether preemption could make room (``preemption_possible``), as Kueue's scheduler
asks its preemption oracle: under ``whenCanPreempt: Preempt`` the flavor search stops only at a
flavor where someone may be preempted, and a job that may run with fewer pods waits for the
preemption of whole workloads rather than be admitted with fewer pods where preemption would make
room for all of them.

For one pending workload and one flavor assignment:
1. candidates, in Kueue's order — workloads of *other* queues in the cohort that are borrowing
   (with fair sharing, the queue with the highest share first), then workloads of its own queue —
   then lowest priority first, then (checkpoint-aware) the one that loses least work, then most
   recently admitted first. Who may be a candidate:
   - own queue: ``withinClusterQueue`` (LowerPriority, LowerOrNewerEqualPriority);
   - with the contract's priority aging, a rule that preempts by priority takes only a victim
     ranked after the preemptor too (``_lower``): aging orders admission, it never lets a
     workload preempt, nor one it let in ahead be preempted for what it outranked;
   - other queues, classical: ``reclaimWithinCohort`` when the preemptor stays within its nominal
     quota, or ``borrowWithinCohort`` (lower priority, at most ``maxPriorityThreshold``) when it
     must borrow;
   - other queues, fair sharing: the preemption strategies (LessThanOrEqualToFinalShare,
     LessThanInitialShare) compare the queues' dominant resource shares;
   - never a workload that has run less than its priority class's minimum runtime, nor one
     expected to end (its declared runtime) within the grace period its eviction would give it —
     evicting it frees nothing sooner than waiting for it (``protected``); and while a workload
     the rules allow is protected by its minimum runtime, none of higher priority than it is a
     candidate (the minimum runtime delays its preemption, never redirects it to work of higher
     priority: the preemptor waits, at most that long);
2. add candidates to a trial until the preemptor fits (quota and a whole placement);
3. minimal set: put each chosen victim back, newest choice first, and keep it out of the set if
   the preemptor still fits without evicting it. Under ``Contract.no_preemption_back``, a minimal
   set after which a victim of another queue, back alone in its queue, could preempt the
   preemptor at once (``_turns_back``) is not taken: the candidate that made it fit is passed
   over and the search goes on. Under ``Contract.no_proxy_preemption`` too, nor is one whose
   preemptor a workload waiting ahead of it in its own queue could preempt at once and replace,
   where a victim could preempt that one back (``_taken_over``). Under
   ``Contract.no_preemption_undone``, nor one whose preemptor, once in, a workload waiting in
   another queue of its cohort tree could preempt at once (``_undone_by``). Under
   ``Contract.holds_against_preemption``, the quota held for a workload ranked before the
   preemptor keeps it out as it keeps out an admission.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gangway.events.fold import held_quota
from gangway.events.quota import QuotaNode, QuotaView
from gangway.events.reasons import C, Reason, reason
from gangway.events.resources import ContractIndex, by_flavor
from gangway.events.state import State, WorkloadState, queue_key, rank, shape_of
from gangway.services.placement.policy import copy_free, place_gang, release_nodes

if TYPE_CHECKING:
    from gangway.services.admission.snapshot import Snapshot


def idle_words(wl: WorkloadState) -> str:
    """Why an idle-flagged workload goes first: the rule and its figures."""
    flag = wl.idle
    return (f"idle first: {flag.rule} (SM active {flag.sm_active / 10:g} % since t={flag.since_ms} ms "
            f"on {flag.gpu_milli / 1000:g} GPUs)")


def work_lost_ms(wl: WorkloadState, now_ms: int) -> int:
    """What evicting ``wl`` now throws away: the time since it started or last checkpointed."""
    if wl.started_ms is None:
        return 0
    return max(0, now_ms - max(wl.started_ms, wl.checkpoint_ms or 0))


def protected(idx: ContractIndex, victim: WorkloadState, now_ms: int) -> bool:
    """May ``victim`` not be evicted now? When it has run less than its priority class's minimum
    runtime (kueue#9876), or when it is expected to end — by its declared runtime — within one grace
    period of now: an eviction gives it that grace to leave, so evicting it would free nothing
    sooner than waiting, and would throw its work away if it failed to finish in time after all.
    (One that is late by more than a grace period is no longer believed.)"""
    return _before_min_runtime(idx, victim, now_ms) or _ends_within_grace(idx, victim, now_ms)


def anyone_preemptible(state: State, idx: ContractIndex) -> bool:
    """Does some workload holding quota (admitted, not leaving) stand unprotected now? When none
    does, no preemption rule and no consolidation finds a victim (both pass over the ``protected``),
    so preemption need not walk the queue. (In Kueue's baseline scenario every admitted workload
    ends within its grace period: the walk found nobody, 14 CPU seconds a run.)"""
    now = state.time_ms
    for name in state.active:
        wl = state.workloads[name]
        if wl.phase != "evicting" and wl.admission is not None and not protected(idx, wl, now):
            return True
    return False


def _ends_within_grace(idx: ContractIndex, victim: WorkloadState, now_ms: int) -> bool:
    """Is ``victim`` expected, by its declared runtime, to end within one grace period of now?"""
    runtime = victim.spec.runtime_ms
    if runtime is None:
        return False
    started = victim.started_ms if victim.started_ms is not None else now_ms
    return abs(started + runtime - now_ms) <= idx.grace_ms(victim.spec.priority_class)


def _before_min_runtime(idx: ContractIndex, victim: WorkloadState, now_ms: int) -> bool:
    """Has ``victim`` run less than its priority class's minimum runtime?"""
    minimum = idx.min_runtime_ms(victim.spec.priority_class)
    return bool(minimum) and victim.started_ms is not None and now_ms - victim.started_ms < minimum


class _Trial:
    """The preemptor's view while victims are tried: quota and nodes without them (reverted by copy)."""

    def __init__(self, state: State, idx: ContractIndex, snap: Snapshot, wl: WorkloadState, flavors: dict[str, str]):
        self.state, self.idx, self.snap, self.wl, self.flavors = state, idx, snap, wl, flavors
        self.held = by_flavor(idx.asked(wl), flavors)
        self.nodes = snap.flavor_nodes(flavors)
        self.pod_sets = idx.flavored(wl.spec.pod_sets, flavors)

    def view_without(self, victims: list[WorkloadState]) -> QuotaView:
        base = self.snap.later_view()
        view = base.copy()
        for victim in victims:
            view.add(victim.spec.cluster_queue, held_quota(self.state, victim.admission), -1)
        return view

    def fits_without(self, victims: list[WorkloadState], within: int | None = None) -> bool:
        """Would the preemptor fit, quota and nodes, once ``victims`` are gone (``within``: inside
        the quota of the subtree that many levels above its queue, 0 its own nominal quota)?"""
        view = self.view_without(victims)
        cq = self.wl.spec.cluster_queue
        ok, borrowed, _ = view.fit(cq, self.held)
        if not ok or (within is not None and any(v > view.available_within(cq, fr, within)
                                                  for fr, v in self.held.items() if v > 0)):
            return False
        if self.idx.contract.holds_against_preemption and any(
                self.snap.held_back(hold, cq, self.held, borrowed) for hold in self.snap.holds_on(self.wl)):
            return False  # (quota held for a workload before it: admission would keep it out too)
        free = copy_free(self.snap.room_for(self.wl))
        for victim in victims:
            release_nodes(free, victim)
        return place_gang(free, self.pod_sets, nodes=self.nodes) is not None


def preemption_possible(snap: Snapshot, wl: WorkloadState, flavors: dict[str, str]) -> bool:
    """Kueue's preemption oracle: would evicting workloads the rules allow make room for ``wl`` under
    ``flavors``, quota and a whole placement (``choose_victims`` finds any)?"""
    return bool(choose_victims(snap.state, snap.idx, snap, wl, flavors, set()))


def choose_victims(state: State, idx: ContractIndex, snap: Snapshot, wl: WorkloadState, flavors: dict[str, str],
                   ordered_out: set[str], guard: bool | None = None) -> list[tuple[WorkloadState, Reason]]:
    """The fewest victims (in the candidates' order) after which ``wl`` fits, or [] — as Kueue: a
    queue below its nominal quota in what the preemptor needs first reclaims what it lent (and its
    own lower-priority work) so as to fit inside that nominal quota; failing that, what lies outside
    the lowest cohort of its tree whose own quota could hold it (Kueue's
    FindHeightOfLowestSubtreeThatFits); failing that, or when it is not below, the victims are
    those its rules allow for fitting at all (borrowing: ``borrowWithinCohort``). ``guard``: whether
    a set one of whose victims could preempt ``wl`` back is passed over (None: as the contract says,
    ``no_preemption_back``)."""
    trial = _Trial(state, idx, snap, wl, flavors)
    guard = idx.contract.no_preemption_back if guard is None else guard
    below, fits = _against_nominal(trial)
    if below and not idx.contract.fair_sharing.enable:
        path = idx.tree.path(wl.spec.cluster_queue)
        for height in range(max(1, len(path) - 1)):  # (the root's subtree is the whole tree: no reclaim)
            chosen = _fewest(trial, _candidates(trial, ordered_out, reclaim=True, outside=path[height]), guard, height)
            if chosen:
                return chosen
    return _fewest(trial, _candidates(trial, ordered_out, reclaim=fits), guard)


def withheld(state: State, idx: ContractIndex, snap: Snapshot, wl: WorkloadState,
             flavors: dict[str, str]) -> tuple[list[WorkloadState], WorkloadState, WorkloadState | None] | None:
    """Why ``wl`` gets no preemption under ``no_preemption_back`` in ``flavors``: the victims Kueue's
    rules would take, the one of them that could preempt back at once, and the workload it would
    preempt when that is not ``wl`` but one that would take ``wl``'s place (``_taken_over``; else
    None). None: not that."""
    if not idx.contract.no_preemption_back or choose_victims(state, idx, snap, wl, flavors, set()):
        return None
    chosen = choose_victims(state, idx, snap, wl, flavors, set(), guard=False)
    found = _comes_back(_Trial(state, idx, snap, wl, flavors), chosen) if chosen else None
    return ([v for v, _ in chosen], *found) if found is not None else None


def preemptible_in_other_queues(state: State, idx: ContractIndex, snap: Snapshot, wl: WorkloadState,
                                flavors: dict[str, str], ordered_out: set[str]) -> set[str]:
    """The workloads of other ClusterQueues that ``wl``'s preemption rules let it take room from
    under ``flavors`` (reclaim what they borrow, or borrowWithinCohort): the only other teams' work
    defragmentation may move for it."""
    trial = _Trial(state, idx, snap, wl, flavors)
    below, fits = _against_nominal(trial)
    return {victim.spec.workload for reclaim in {fits, below or fits}  # (choose_victims' two searches)
            for victim, _ in _candidates(trial, ordered_out, reclaim=reclaim)
            if victim.spec.cluster_queue != wl.spec.cluster_queue}


def _against_nominal(trial: _Trial) -> tuple[bool, bool]:
    """(Does the preemptor's queue use less than its nominal quota of everything the preemptor
    needs, would the preemptor fit that nominal quota with what the queue uses now?)"""
    cq = trial.wl.spec.cluster_queue
    node = trial.idx.tree.queues.get(cq)
    if node is None:
        return False, False
    own = trial.snap.later_view().usage.get(cq, {})
    below = all(own.get(fr, 0) < node.nominal.get(fr, 0) for fr, v in trial.held.items() if v > 0)
    fits = all(own.get(fr, 0) + v <= node.nominal.get(fr, -1) for fr, v in trial.held.items())
    return below, fits


def _fewest(trial: _Trial, candidates: list[tuple[WorkloadState, Reason]], guard: bool,
            within: int | None = None) -> list[tuple[WorkloadState, Reason]]:
    wl = trial.wl
    chosen: list[tuple[WorkloadState, Reason]] = []
    for candidate in candidates:
        victim, rule = candidate
        so_far = [v for v, _ in chosen]
        if victim.spec.cluster_queue != wl.spec.cluster_queue:
            # As in Kueue: another queue's workload goes only while that queue still borrows what
            # the preemptor needs, once the victims chosen so far are gone.
            if not trial.view_without(so_far).borrowing(victim.spec.cluster_queue, trial.held):
                continue
            if rule.code == C.FAIR_SHARING and not _fair_still(trial, so_far, victim):
                continue
        chosen.append(candidate)
        if trial.fits_without([v for v, _ in chosen], within):
            fewest = _minimal(trial, chosen, within)
            if not guard or _comes_back(trial, fewest) is None:
                return fewest
            chosen.pop()  # with it, a victim could turn back: go on without it
    return []


def _minimal(trial: _Trial, chosen: list[tuple[WorkloadState, Reason]],
             within: int | None) -> list[tuple[WorkloadState, Reason]]:
    """Put each chosen victim back, newest choice first, while the preemptor still fits without it."""
    fewest = list(chosen)
    for item in reversed(chosen):
        rest = [v for v, _ in fewest if v is not item[0]]
        if trial.fits_without(rest, within):
            fewest.remove(item)
    return fewest


def _comes_back(trial: _Trial, chosen: list[tuple[WorkloadState, Reason]]) -> tuple[WorkloadState, WorkloadState | None] | None:
    """A victim of ``chosen`` that could come straight back (``_turns_back``), and the workload it
    would preempt when that is not the preemptor but one that would replace it (``_taken_over``,
    under ``Contract.no_proxy_preemption``); None: none could."""
    back = _turns_back(trial, chosen)
    if back is not None:
        return back, None
    if trial.idx.contract.no_proxy_preemption and (found := _taken_over(trial, chosen)) is not None:
        return found
    if trial.idx.contract.no_preemption_undone and (waiting := _undone_by(trial, chosen)) is not None:
        return waiting, None
    return None


def _taken_over(trial: _Trial, chosen: list[tuple[WorkloadState, Reason]]) -> tuple[WorkloadState, WorkloadState] | None:
    """(A victim of another queue, a workload waiting ahead of the preemptor in its own queue): the
    one that, once the preemptor is in, could preempt it there at once (its queue's
    ``withinClusterQueue``; quota only) and take its place, and against which the victim, back in
    its queue, could preempt at once (None: none). The preemptor would be a proxy: the room its
    rules granted it would go to a workload the cohort's rules did not grant it to, and come back
    — a cycle of three through a queue's own priorities, found by the property tests: w19 of c
    took w22 of a for fair sharing, w14, c's waiting higher-priority workload, took w19's place,
    which put c above its fair share, and w22 took w14 for fair sharing; round and round, work lost
    each time, while Kueue's pairwise proof holds for each step."""
    state, idx, wl = trial.state, trial.idx, trial.wl
    cq = wl.spec.cluster_queue
    if all(victim.spec.cluster_queue == cq for victim, _ in chosen):
        return None
    policy = idx.cluster_queues[cq].preemption.within_cluster_queue
    aging = idx.contract.aging_ms_per_point
    mine = queue_key(wl, aging)
    view = trial.view_without([victim for victim, _ in chosen])
    tried: set[tuple] = set()  # (workloads of one shape and priority fare alike: a deep queue is one of a few kinds)
    for key in state.pending_order.get(cq, ()):
        if key >= mine:
            break  # (the queue's order: only those ahead of the preemptor)
        ahead = state.workloads[key[3]]
        kind = (ahead.shape or shape_of(ahead.spec), ahead.spec.priority)
        if kind in tried or _within_queue_rule(policy, ahead, wl, aging) is None:
            continue
        tried.add(kind)
        asked = idx.asked(ahead)
        flavors = {**idx.default_flavors(cq, asked), **trial.flavors}
        if not view.fit(cq, by_flavor(asked, flavors))[0]:
            continue  # (it would not fit in the preemptor's place)
        back = _turns_back(_Trial(state, idx, trial.snap, ahead, flavors), chosen)
        if back is not None:
            return back, ahead
    return None


def _undone_by(trial: _Trial, chosen: list[tuple[WorkloadState, Reason]]) -> WorkloadState | None:
    """A workload waiting in another queue of the preemptor's cohort tree that, once the victims
    are gone and the preemptor is in, could preempt it at once by its own queue's rules (quota
    only): reclaimWithinCohort when it would fit its queue's nominal quota, else borrowWithinCohort,
    or fair sharing; None: none could. Such a preemption is undone at the next cycle, and where no
    state of the three is one Kueue's rules leave alone, they go round: p0 of vision reclaimed
    vision's nominal quota from big-urgent of llm, p1 (of higher priority, in vision) preempted p0
    and borrowed, big-urgent preempted p1 by borrowWithinCohort, p0 reclaimed again — every 90 s,
    the GPUs idle between (a stranger's case). Not where the preemptor is protected once in (a
    minimum runtime, or an end within a grace period): that preemption is not at once."""
    state, idx, wl = trial.state, trial.idx, trial.wl
    mine = wl.spec.cluster_queue
    root = idx.tree.root_of(mine)
    if root is None or idx.min_runtime_ms(wl.spec.priority_class) or _ends_within_grace(idx, wl, state.time_ms):
        return None
    gone = trial.view_without([v for v, _ in chosen])
    view = gone.copy()
    view.add(mine, trial.held)
    if not view.borrowing(mine):
        return None  # (the cohort's rules take only from a queue that borrows)
    fair = idx.contract.fair_sharing.enable
    aging = idx.contract.aging_ms_per_point
    node = idx.tree.queues[mine]
    without, with_it = gone.share(node, {}, idx.weights), view.share(node, {}, idx.weights)
    for q, order in state.pending_order.items():
        if q == mine or q not in idx.tree.queues or idx.tree.root_of(q) != root or q in idx.stopped:
            continue
        policy = idx.cluster_queues[q].preemption
        nominal = idx.tree.queues[q].nominal
        own = view.usage.get(q, {})
        tried: set[tuple] = set()  # (workloads of one shape and priority fare alike)
        for key in order:
            waiting = state.workloads[key[3]]
            kind = (waiting.shape or shape_of(waiting.spec), waiting.spec.priority)
            if kind in tried:
                continue
            tried.add(kind)
            asked = idx.asked(waiting)
            back = by_flavor(asked, idx.default_flavors(q, asked))
            if not view.borrowing(mine, back) or view.fit(q, back)[0] or not gone.fit(q, back)[0]:
                continue  # (not taken from; fits beside the preemptor; or kept out by more than it)
            if fair:
                if _fair_turn(idx, view.share(idx.tree.queues[q], back, idx.weights), without, with_it):
                    return waiting
            elif all(own.get(fr, 0) + v <= nominal.get(fr, -1) for fr, v in back.items()):
                if _reclaim_rule(policy.reclaim_within_cohort, waiting, wl, mine, aging) is not None:
                    return waiting
            elif _borrow_rule(policy.borrow_within_cohort, waiting, wl, mine, aging) is not None:
                return waiting
    return None


def _turns_back(trial: _Trial, chosen: list[tuple[WorkloadState, Reason]]) -> WorkloadState | None:
    """A victim of another queue that, back alone in its queue once all of ``chosen`` are gone and
    the preemptor is in, could preempt the preemptor at once (None: none could). Kueue's rules
    allow such a pair when several victims of one queue go: fair sharing's LessThanInitialShare
    takes the last ones against the queue's share with the first still in, so the first, back
    alone, sees its queue far below the preemptor's (kueue#14543); borrowWithinCohort takes whole
    workloads from a borrowing queue until it borrows no more, so the first one, back, fits its
    queue's nominal quota and reclaims it.
    Both lose the work of two workloads to end where they began. (Quota only: a victim that could
    not be placed back is counted as one that could.)"""
    idx, wl = trial.idx, trial.wl
    mine = wl.spec.cluster_queue
    # (within a queue, and for a preemptor reclaiming its nominal quota, the rules never let a
    # victim preempt its preemptor: only these two rules can turn back)
    turning = [(victim, rule) for victim, rule in chosen if rule.code in (C.FAIR_SHARING, C.BORROW_WITHIN_COHORT)]
    if not turning:
        return None
    view = trial.view_without([v for v, _ in chosen])
    node = idx.tree.queues[mine]
    without = view.share(node, {}, idx.weights)  # the preemptor's queue, the preemptor out again
    view.add(mine, trial.held)
    with_it = view.share(node, {}, idx.weights)
    for victim, rule in turning:
        vq = victim.spec.cluster_queue
        back = held_quota(trial.state, victim.admission)
        if not view.borrowing(mine, back):
            continue  # (a queue within its nominal quota of what the victim needs is not taken from)
        if rule.code == C.FAIR_SHARING:
            if _fair_turn(idx, view.share(idx.tree.queues[vq], back, idx.weights), without, with_it):
                return victim
        elif rule.code == C.BORROW_WITHIN_COHORT:
            policy = idx.cluster_queues[vq].preemption.reclaim_within_cohort
            nominal = idx.tree.queues[vq].nominal
            own = view.usage.get(vq, {})
            if _reclaim_rule(policy, victim, wl, mine, idx.contract.aging_ms_per_point) is not None and \
                    all(own.get(fr, 0) + v <= nominal.get(fr, -1) for fr, v in back.items()):
                return victim
    return None


def _fair_turn(idx: ContractIndex, share: int, without: int, with_it: int) -> bool:
    """Would a workload whose queue's share with it is ``share`` preempt, by Kueue's fair-sharing
    strategies, the preemptor whose queue's share is ``without`` it and ``with_it``?"""
    return any(strategy == "LessThanOrEqualToFinalShare" and share <= without
               or strategy == "LessThanInitialShare" and share < with_it
               for strategy in idx.contract.fair_sharing.preemption_strategies)


def _candidates(trial: _Trial, ordered_out: set[str], reclaim: bool,
                outside: QuotaNode | None = None) -> list[tuple[WorkloadState, Reason]]:
    """Who the preemptor's rules allow it to preempt, in the order they go; other queues' workloads
    under ``reclaimWithinCohort`` when ``reclaim`` (only queues outside the subtree ``outside``),
    else under ``borrowWithinCohort``."""
    state, idx, wl = trial.state, trial.idx, trial.wl
    cq_name = wl.spec.cluster_queue
    cq = idx.cluster_queues.get(cq_name)
    if cq is None:
        return []
    if _preempts_nobody(idx, cq):
        return []
    view = trial.snap.later_view()
    root = idx.tree.root_of(cq_name)
    fair = idx.contract.fair_sharing.enable
    idle_rule = idx.contract.idle_rule
    aging = idx.contract.aging_ms_per_point
    found: list[tuple[tuple, WorkloadState, Reason]] = []
    shares: dict[str, int] = {}
    #: Per victim queue: is it in the preemptor's cohort tree and borrowing what it needs? (The
    #: cheap tests go first; the per-victim ones only for victims a rule allows.)
    reclaimable: dict[str, bool] = {}
    #: The lowest priority of a workload the rules allow but its minimum runtime protects.
    floor: int | None = None
    for name in state.active:
        victim = state.workloads[name]
        if victim.phase == "evicting" or victim.admission is None or name in ordered_out:
            continue
        vq = victim.spec.cluster_queue
        if vq == cq_name:
            rule, group = _within_queue_rule(cq.preemption.within_cluster_queue, wl, victim, aging), 1
        else:
            if vq not in reclaimable:
                reclaimable[vq] = (root is not None and vq in idx.tree.queues and idx.tree.root_of(vq) == root
                                   and view.borrowing(vq, trial.held)
                                   and (outside is None or not any(n is outside for n in idx.tree.path(vq))))
            if not reclaimable[vq]:
                continue
            group = 0
            if fair:
                rule = reason(C.FAIR_SHARING, victim_queue=vq, cohort=root)
            elif reclaim:
                rule = _reclaim_rule(cq.preemption.reclaim_within_cohort, wl, victim, vq, aging)
            else:
                rule = _borrow_rule(cq.preemption.borrow_within_cohort, wl, victim, vq, aging)
        if not rule or not _shares_something(state, trial, victim):
            continue
        if _before_min_runtime(idx, victim, state.time_ms):
            floor = victim.spec.priority if floor is None else min(floor, victim.spec.priority)
            continue
        if _ends_within_grace(idx, victim, state.time_ms):  # (the rest of ``protected``)
            continue
        lost = work_lost_ms(victim, state.time_ms) if idx.contract.checkpoint_aware else 0
        # With fair sharing, the queue furthest above its share gives first (Kueue's order).
        share = 0
        if fair and group == 0:
            share = -shares.setdefault(vq, view.share(idx.tree.queues[vq], {}, idx.weights))
        # The idle-GPU hunt (contract switch): idle borrowers of other queues go first.
        idle_first = group == 0 and idle_rule is not None and idle_rule.preempt_first and victim.idle is not None
        if idle_first:
            rule = rule.plus(idle_first=idle_words(victim))
        key = (group, not idle_first, share, victim.spec.priority, lost, -(victim.admitted_ms or 0), -victim.seq)
        found.append((key, victim, rule))
    found.sort(key=lambda item: item[0])
    # A minimum runtime delays the preemption of a workload, it never sends it to one of higher
    # priority instead: while a lower-priority workload is protected, the higher ones wait too.
    return [(victim, rule) for _, victim, rule in found if floor is None or victim.spec.priority <= floor]


def _preempts_nobody(idx: ContractIndex, cq) -> bool:
    """A queue whose every preemption policy is Never (and no fair sharing) has no candidates."""
    p = cq.preemption
    return (p.within_cluster_queue == "Never" and p.reclaim_within_cohort == "Never"
            and p.borrow_within_cohort.policy != "LowerPriority" and not idx.contract.fair_sharing.enable)


def _shares_something(state: State, trial: _Trial, victim: WorkloadState) -> bool:
    """Does evicting the victim give back quota the preemptor needs, or nodes it may use?"""
    held = held_quota(state, victim.admission)
    if any(fr in held for fr in trial.held):
        return True
    if trial.nodes is None or victim.placement is None:
        return False
    return any(a.node in trial.nodes for a in victim.placement.assignments)


def _lower(wl: WorkloadState, victim: WorkloadState, aging: int) -> bool:
    """Is ``victim`` of lower priority than ``wl`` for the rules that preempt by priority? With the
    contract's priority aging, also ranked after it (``rank``): a workload the aged order let in
    ahead of ``wl`` is not preempted for it, nor is one of higher priority by an aged one."""
    return victim.spec.priority < wl.spec.priority and (not aging or rank(victim, aging) > rank(wl, aging))


def _within_queue_rule(policy: str, wl: WorkloadState, victim: WorkloadState, aging: int) -> Reason | None:
    p, q = wl.spec.priority, victim.spec.priority
    if policy in ("LowerPriority", "LowerOrNewerEqualPriority") and _lower(wl, victim, aging):
        return reason(C.WITHIN_QUEUE_LOWER_PRIORITY, policy=policy, priority=p, victim_priority=q,
                      preemptor=wl.spec.workload)
    if policy == "LowerOrNewerEqualPriority" and q == p and victim.queued_ms > wl.queued_ms:
        return reason(C.WITHIN_QUEUE_NEWER_EQUAL_PRIORITY, policy=policy, priority=q, preemptor=wl.spec.workload)
    return None


def _reclaim_rule(policy: str, wl: WorkloadState, victim: WorkloadState, vq: str, aging: int) -> Reason | None:
    if policy == "Any" or (policy == "LowerPriority" and _lower(wl, victim, aging)):
        return reason(C.RECLAIM_WITHIN_COHORT, policy=policy, victim_queue=vq, cluster_queue=wl.spec.cluster_queue,
                      preemptor=wl.spec.workload)
    return None


def _borrow_rule(policy, wl: WorkloadState, victim: WorkloadState, vq: str, aging: int) -> Reason | None:
    p, q = wl.spec.priority, victim.spec.priority
    if policy.policy != "LowerPriority" or not _lower(wl, victim, aging):
        return None
    if policy.max_priority_threshold is not None and q > policy.max_priority_threshold:
        return None
    return reason(C.BORROW_WITHIN_COHORT, preemptor=wl.spec.workload, priority=p, victim_queue=vq, victim_priority=q)


def _fair_still(trial: _Trial, chosen: list[WorkloadState], victim: WorkloadState) -> bool:
    """Kueue's fair-sharing strategies, in order: may ``victim`` go, given those already chosen?"""
    idx = trial.idx
    view = trial.view_without(chosen)
    cq = idx.tree.queues[trial.wl.spec.cluster_queue]
    vq = idx.tree.queues[victim.spec.cluster_queue]
    preemptor_after = view.share(cq, trial.held, idx.weights)
    victim_before = view.share(vq, {}, idx.weights)
    removed = held_quota(trial.state, victim.admission)
    victim_after = view.share(vq, {fr: -v for fr, v in removed.items()}, idx.weights)
    for strategy in idx.contract.fair_sharing.preemption_strategies:
        if strategy == "LessThanOrEqualToFinalShare" and preemptor_after <= victim_after:
            return True
        if strategy == "LessThanInitialShare" and preemptor_after < victim_before:
            return True
    return False
