"""The fold: ``apply(state, envelope)`` — the one transition function of gangway.

Every service, the auditor, the simulator and the tests build state with it. It is deterministic
and does no I/O. For speed it updates ``state`` in place and returns it; callers that need the old
state keep a copy (``copy_state``).

Rules (see DESIGN.md):
- A decision (admission, placement, eviction) is applied only if it still holds at the offset where
  it landed; otherwise it is counted as superseded, noted on its workload, and changes nothing else.
- Re-delivered events (same id, or a report about a stage already passed) change nothing.
"""

from __future__ import annotations

import bisect

import msgspec

from gangway.events import catalogue as ev
from gangway.events import freeindex, gpus, money
from gangway.events.decay import bring_up_to_date
from gangway.events.quota import QuotaView
from gangway.events.reasons import DEACTIVATING_CODES, C, Reason, reason
from gangway.events.resources import (
    GPU, add_into, add_on_node, admitted_pod_sets, assignment_use, by_flavor, by_resource, index_of, node_use, pods_that_fit, total_request,
)
from gangway.events.state import (
    EVICT_FROM, FINISH_FROM, GPU_MODEL_LABEL, HOLDS_NODES, ORDER_OUT_FROM, NodeState, State, WorkloadState, count_pod_shape,
    aging_of, handing_over, node_holdings, pod_shape_key, queue_key, runtime_key, shape_of,
)


def copy_state(state: State) -> State:
    """A deep copy (through msgpack: events are immutable and shared safely)."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=State)


def restored(state: State) -> State:
    """A state read back from a snapshot, its workloads' shapes (``shape_of``) and the pending counts
    by shape computed again: a snapshot written by an older version keeps the shapes that version
    computed, and the deciders must see the same shapes as a fold from the log's start."""
    for wl in state.workloads.values():
        wl.shape = shape_of(wl.spec)
    state.pending_shapes, state.pending_runtimes = {}, {}
    for name in state.pending:
        _count_pending(state, state.workloads[name])
    return state


def apply(state: State, env: ev.Envelope, handlers: dict | None = None) -> State:
    """Fold ``env`` into ``state``; with ``handlers`` (``handlers_for``), only events of those types
    change more than the state's time, offset and last id."""
    data = env.data
    handler = (_HANDLERS if handlers is None else handlers).get(type(data))
    if env.time_ms > state.time_ms:
        state.time_ms = env.time_ms
    if handler is not None:
        handler(state, env, data)
    state.offset = env.offset
    state.last_id = env.id
    return state


# --- helpers -----------------------------------------------------------------------------------


def _set_phase(state: State, wl: WorkloadState, phase: str) -> None:
    """Every phase change goes through here, keeping the phase indexes true."""
    name = wl.spec.workload
    if wl.phase == "admitted":
        state.unplaced.pop(name, None)
    elif wl.phase == "evicting":
        state.leaving.pop(name, None)
    if phase == "admitted":
        state.unplaced[name] = None
    elif phase == "evicting":
        state.leaving[name] = None
    wl.phase = phase


def _enqueue(state: State, wl: WorkloadState) -> None:
    cq = _pointed_at(state, wl)
    if cq is not None:
        wl.spec = msgspec.structs.replace(wl.spec, cluster_queue=cq)
        wl.shape = shape_of(wl.spec)
    state.pending[wl.spec.workload] = None
    bisect.insort(state.pending_order.setdefault(wl.spec.cluster_queue, []), queue_key(wl, aging_of(state.contract)))
    _count_pending(state, wl)


def _count_pending(state: State, wl: WorkloadState) -> None:
    state.pending_shapes[wl.shape] = state.pending_shapes.get(wl.shape, 0) + 1
    runtimes, runtime = state.pending_runtimes.setdefault(wl.shape, {}), runtime_key(wl)
    runtimes[runtime] = runtimes.get(runtime, 0) + 1


def _dequeue(state: State, wl: WorkloadState) -> None:
    del state.pending[wl.spec.workload]
    if state.backing_off:
        state.backing_off.pop(wl.spec.workload, None)
    state.nominated.pop(wl.spec.workload, None)
    queue = state.pending_order[wl.spec.cluster_queue]
    key = queue_key(wl, aging_of(state.contract))
    i = bisect.bisect_left(queue, key)
    del queue[i]  # (an emptied queue keeps its key, as the other indexes do)
    left = state.pending_shapes.get(wl.shape, 0) - 1
    if left > 0:
        state.pending_shapes[wl.shape] = left
        runtimes, runtime = state.pending_runtimes[wl.shape], runtime_key(wl)
        if runtimes[runtime] > 1:
            runtimes[runtime] -= 1
        else:
            del runtimes[runtime]
    else:
        state.pending_shapes.pop(wl.shape, None)
        state.pending_runtimes.pop(wl.shape, None)


def _supersede(state: State, wl: WorkloadState | None, what: str, env: ev.Envelope, why: Reason) -> None:
    state.superseded += 1
    if wl is not None:
        wl.superseded = f"{what} {env.id}: {why.message}"
        wl.superseded_code = why.code


def _release_nodes(state: State, wl: WorkloadState) -> None:
    if wl.placement is None or wl.phase not in HOLDS_NODES:
        return
    for name, used in assignment_use(wl.spec.pod_sets, wl.placement.assignments):
        node = state.nodes.get(name)
        if node is not None:
            add_on_node(node.free, used)
    _gpus_held(state, wl, sign=+1)


def _gpus_held(state: State, wl: WorkloadState, sign: int, only: str | None = None) -> None:
    """Take (-1) or give back (+1) the GPUs a placed workload holds, on every node or ``only`` one."""
    for name, _, indexes, milli in node_holdings(wl):
        node = state.nodes.get(name)
        if indexes and node is not None and (only is None or only == name):
            _index_node(state, node, -1)
            gpus.apply(node.gpus, [i for i in indexes if i < len(node.gpus)], milli, sign)
            _index_node(state, node, +1)


def _index_node(state: State, node: NodeState, sign: int) -> None:
    freeindex.change(state.free_index, node.gpus, node.islands, node.labels, sign)


def quota_view(state: State) -> QuotaView:
    """The quota tree of the contract in force over the state's own usage (updated in place)."""
    return QuotaView(index_of(state.contract).tree, state.usage, state.cohort_usage)


def held_quota(state: State, admission: ev.WorkloadAdmitted) -> dict[str, int]:
    """What an admission holds, per flavor-resource."""
    flavors = admission.flavors or index_of(state.contract).default_flavors(admission.cluster_queue, admission.usage)
    return by_flavor(admission.usage, flavors)


def _release_quota(state: State, wl: WorkloadState) -> None:
    if wl.admission is None:
        return
    view = quota_view(state)
    bring_up_to_date(state, wl.admission.cluster_queue)
    if wl.admission.cluster_queue in view.structure.queues:
        view.add(wl.admission.cluster_queue, held_quota(state, wl.admission), -1)
    else:  # its queue left the contract: only its own usage row remains to give back
        add_into(state.usage.setdefault(wl.admission.cluster_queue, {}), held_quota(state, wl.admission), -1)
    state.active.pop(wl.spec.workload, None)


def _requeue(state: State, wl: WorkloadState, env: ev.Envelope) -> bool:
    """An evicted workload goes back to its queue (``_keeps_place``: where it was, or as if queued
    now) — unless its producer took it back meanwhile: then it is withdrawn (False)."""
    _release_nodes(state, wl)
    _release_quota(state, wl)
    if wl.withdrawing is not None:
        _end_withdrawn(state, wl, env, wl.withdrawing)
        return False
    _set_phase(state, wl, "pending")
    order = wl.eviction
    if not _keeps_place(state.contract, order):
        wl.seq = env.offset
        wl.queued_ms = env.time_ms
    moved = dict(wl.admission.flavors) if is_move(state.contract, order) and wl.admission is not None else None
    wl.requeued_ms = env.time_ms
    wl.attempt += 1
    wl.admission = wl.placement = wl.eviction = None
    wl.admission_id = wl.placement_id = wl.eviction_id = None
    wl.placement_gpus = []
    wl.admitted_ms = wl.admitted_at = wl.started_ms = wl.eviction_ms = wl.checkpoint_ms = wl.checkpoint_step = None
    _reset_money(wl)
    _enqueue(state, wl)
    if moved is not None:  # placed again at once, in its flavors, as its move was planned (``Contract.moved_first``)
        wl.nominated, wl.nominated_flavors, wl.moved_for = True, moved, order.preemptor
        state.nominated[wl.spec.workload] = None
    return True


def is_move(contract: ev.Contract | None, order: ev.EvictionOrdered | None) -> bool:
    """Was this order a defragmentation move that must place the workload again at once
    (``Contract.moved_first``)? Until it is, its quota and room are kept for it, and once out it
    keeps its place and goes first, behind the gang it was moved for."""
    return order is not None and order.reason_code == C.DEFRAGMENTATION and contract is not None \
        and contract.moved_first


def _keeps_place(contract: ev.Contract | None, order: ev.EvictionOrdered | None) -> bool:
    """Does a workload going back to its queue keep its place there (its first queueing time and
    offset) rather than queue anew behind the work queued since? As Kueue orders a queue: one
    ordered out (``order``: preempted, drained) keeps it (``Contract.requeue_in_place``) unless
    fair sharing ordered it out; one the
    binder rolled back (no order: pods not ready, a failed bind, its node gone) only under
    ``requeuingStrategy.timestamp: Creation``. One whose hand-over lapsed always keeps it: the
    work it was to take over overran, not it. So does one defragmentation moved (``is_move``):
    it was moved, not preempted."""
    if order is not None and order.reason_code == C.HAND_OVER_LAPSED or is_move(contract, order):
        return True
    if contract is None:
        return False
    if order is None:
        return contract.pods_ready is not None and contract.pods_ready.requeue_from_creation
    # (not one ordered out for fair sharing: at the head of its queue it could take its place
    # back from its preemptor once a third queue's admission moved the shares — found by the
    # property tests; from its eviction, the queue's next workload goes instead)
    return contract.requeue_in_place and order.reason_code != C.FAIR_SHARING


def _end_withdrawn(state: State, wl: WorkloadState, env: ev.Envelope, why: str) -> None:
    _set_phase(state, wl, "finished")
    wl.finished_ms = env.time_ms
    wl.withdrawn = why or "withdrawn"


def _reset_money(wl: WorkloadState) -> None:
    """A new attempt starts with nothing charged, sampled, flagged or processed."""
    wl.charged_from_ms, wl.segment, wl.busy_milli_ms, wl.low_since_ms, wl.idle = None, 0, 0, None, None
    wl.gpu_sm, wl.gpu_seen_ms = {}, {}
    wl.tokens = wl.tokens_saved = 0


# --- handlers ----------------------------------------------------------------------------------


def _queued(state: State, env: ev.Envelope, e: ev.WorkloadQueued) -> None:
    if e.workload in state.workloads:
        state.ignored += 1
        return
    wl = state.workloads[e.workload] = WorkloadState(
        spec=e, phase="pending", seq=env.offset, queued_ms=env.time_ms, request=total_request(e.pod_sets),
        shape=shape_of(e),
    )
    _enqueue(state, wl)
    models = gpu_models_of(state.contract, wl.spec.cluster_queue)
    for ps in e.pod_sets:
        count_pod_shape(state, pod_shape_key(ps.resources, models if ps.resources.get(GPU) else ()), ps.count,
                        env.time_ms)


_MODELS: dict[tuple[int, str], tuple[object, tuple[str, ...]]] = {}


def gpu_models_of(contract, cluster_queue: str) -> tuple[str, ...]:
    """The GPU models a ClusterQueue's GPUs may be (sorted; () for any): when every flavor that
    gives it GPUs selects nodes by ``GPU_MODEL_LABEL``, the models those flavors name."""
    if contract is None:
        return ()
    key = (id(contract), cluster_queue)
    cached = _MODELS.get(key)
    if cached is not None and cached[0] is contract:
        return cached[1]
    flavors = {f.name: f for f in contract.flavors}
    cq = contract.cluster_queue(cluster_queue)
    names = [fq.flavor for fq in cq.flavors if GPU in fq.resources] if cq is not None else []
    labels = [flavors[n].node_labels.get(GPU_MODEL_LABEL) if n in flavors else None for n in names]
    models = tuple(sorted(set(labels))) if labels and None not in labels else ()
    if len(_MODELS) > 1024:
        _MODELS.clear()
    _MODELS[key] = (contract, models)
    return models


def _seen(state: State, wl: WorkloadState | None, env: ev.Envelope) -> bool:
    """Was this decision folded before? (If not, it is remembered now.)"""
    if wl is None:
        return False
    if env.id in wl.decided:
        state.ignored += 1
        return True
    wl.decided.append(env.id)
    return False


def _admitted(state: State, env: ev.Envelope, e: ev.WorkloadAdmitted) -> None:
    wl = state.workloads.get(e.workload)
    if _seen(state, wl, env):
        return
    held = held_quota(state, e) if state.contract is not None else {}
    why = admission_invalid(state, wl, e, held)
    if why:
        _supersede(state, wl, "admission", env, why)
        return
    _set_phase(state, wl, "admitted")
    wl.admission, wl.admission_id, wl.admitted_ms, wl.admitted_at = e, env.id, env.time_ms, env.offset
    wl.superseded = wl.superseded_code = None
    wl.nominated = False
    wl.nominated_flavors = {}
    wl.moved_for = None
    bring_up_to_date(state, e.cluster_queue)
    quota_view(state).add(e.cluster_queue, held)
    _dequeue(state, wl)
    state.active[e.workload] = None
    state.decisions += 1


def _stale(wl: WorkloadState | None, phase: str, based_on: int, since: int | None, what: str,
           with_admission: bool = False) -> Reason | None:
    """What every decision about a workload checks first: the workload exists, is still ``phase``,
    and the decision saw the event that put it there (at offset ``since``) — or, for a placement
    decided with its admission, that admission is the one in force (decided at the same offset)."""
    if wl is None:
        return reason(C.UNKNOWN_WORKLOAD)
    if wl.phase != phase:
        return reason(C.WORKLOAD_MOVED_ON, phase=wl.phase, expected=phase)
    if (wl.admission.based_on != based_on) if with_admission else based_on < since:
        return reason(C.DECIDED_BEFORE, based_on=based_on, what=what, since=since)
    return None


def admission_invalid(state: State, wl: WorkloadState | None, e: ev.WorkloadAdmitted,
                      held: dict[str, int]) -> Reason | None:
    """Why this admission, holding ``held`` (``held_quota``), no longer holds (None when it does)."""
    stale = _stale(wl, "pending", e.based_on, wl and wl.seq, "the workload (re)entered its queue")
    if stale is not None:
        return stale
    if state.contract is None:
        return reason(C.NO_CONFIG)
    if e.cluster_queue != wl.spec.cluster_queue:
        return reason(C.WRONG_CLUSTER_QUEUE, cluster_queue=wl.spec.cluster_queue)
    why = _counts_invalid(wl, e.counts) if e.counts else None
    if why:
        return why
    idx = index_of(state.contract)
    if e.usage != (idx.quota_request(e.cluster_queue, admitted_pod_sets(wl.spec.pod_sets, e.counts)) if e.counts
                   else idx.asked(wl)):
        return reason(C.USAGE_DIFFERS)
    if e.cluster_queue not in idx.tree.queues:
        return reason(C.UNKNOWN_CLUSTER_QUEUE, cluster_queue=e.cluster_queue)
    stop = idx.stop_of(wl.spec)
    if stop is not None:  # (stopped after the admission was decided: what the log says first holds)
        return reason(C.QUEUE_STOPPED, queue_kind=stop[0], queue=stop[1], policy=stop[2])
    why = _flavors_invalid(idx, e)
    if why:
        return why
    if e.workload in e.after or len(set(e.after)) != len(e.after):
        return reason(C.BAD_HAND_OVER, after=", ".join(e.after))
    fits, borrowed, why = _view_after(state, idx, e).fit(e.cluster_queue, held)
    if not fits:
        return why
    # Borrowing less than the decision said (work in the cohort ended since) takes nothing from
    # anyone: the admission holds. Borrowing more would take what the decision never weighed.
    if any(v > e.borrowed.get(r, 0) for r, v in by_resource(borrowed).items()):
        return reason(C.BORROWING_DIFFERS)
    return None


def _view_after(state: State, idx, e: ev.WorkloadAdmitted) -> QuotaView:
    """The quota an admission is checked against: usage now, less what the workloads it takes over
    (``after``) and that are still there hold — it starts only once they are gone, and every
    admission since is checked with it counted, so the quota in use never goes over."""
    gone = [state.workloads[n] for n in e.after if n in state.active]
    if not gone:
        return quota_view(state)
    view = QuotaView.over(idx.tree, state.usage, state.cohort_usage)
    for wl in gone:
        if wl.admission.cluster_queue in idx.tree.queues:
            view.add(wl.admission.cluster_queue, held_quota(state, wl.admission), -1)
    return view


def _counts_invalid(wl: WorkloadState, counts: dict[str, int]) -> Reason | None:
    for ps in wl.spec.pod_sets:
        if ps.name in counts:
            low = ps.min_count if ps.min_count is not None else ps.count
            if not low <= counts[ps.name] <= ps.count:
                return reason(C.COUNTS_OUT_OF_RANGE, pod_set=ps.name, count=counts[ps.name], low=low, high=ps.count)
    unknown = sorted(set(counts) - {ps.name for ps in wl.spec.pod_sets})
    if unknown:
        return reason(C.UNKNOWN_POD_SET, pod_set=unknown[0])
    return None


def _flavors_invalid(idx, e: ev.WorkloadAdmitted) -> Reason | None:
    for resource, flavor in e.flavors.items():
        if not any(fq.flavor == flavor and resource in fq.resources for fq in idx.cluster_queues[e.cluster_queue].flavors):
            return reason(C.FLAVOR_WITHOUT_QUOTA, flavor=flavor, cluster_queue=e.cluster_queue, resource=resource)
    missing = [r for r, v in e.usage.items() if v > 0 and r not in e.flavors]
    if e.flavors and missing:
        return reason(C.FLAVOR_MISSING, resources=", ".join(sorted(missing)))
    return None


def _placed(state: State, env: ev.Envelope, e: ev.PlacementDecided) -> None:
    wl = state.workloads.get(e.workload)
    if _seen(state, wl, env):
        return
    held = placement_invalid(state, wl, e) or placement_gpus(state, wl, e)
    if isinstance(held, Reason):
        _supersede(state, wl, "placement", env, held)
        return
    _set_phase(state, wl, "placed")
    wl.placement, wl.placement_id = e, env.id
    wl.placement_gpus = held
    wl.superseded = wl.superseded_code = None
    for name, used in assignment_use(wl.spec.pod_sets, e.assignments):
        add_on_node(state.nodes[name].free, used, -1)
    _gpus_held(state, wl, sign=-1)
    state.decisions += 1


def placement_gpus(state: State, wl: WorkloadState, e: ev.PlacementDecided) -> list[list[int]] | Reason:
    """The GPU indexes each assignment takes (as named, or chosen best fit), or why they do not fit."""
    gpu_per_pod = {ps.name: ps.resources.get(GPU, 0) for ps in wl.spec.pod_sets}
    trial: dict[str, list[int]] = {}
    out: list[list[int]] = []
    handed = _handed_room(state, wl)
    for a in e.assignments:
        node, milli = state.nodes[a.node], gpu_per_pod[a.pod_set]
        if milli == 0 or not node.gpus:
            out.append([])
            continue
        free = trial.get(a.node)
        if free is None:
            free = trial[a.node] = list(node.gpus)
            for indexes, each in handed.get(a.node, _NONE_HANDED)[1]:
                gpus.apply(free, [i for i in indexes if i < len(free)], each, +1)
        indexes = list(a.gpus) if a.gpus else gpus.choose(free, node.islands, milli, a.count)
        if indexes is None or not gpus.fits(free, indexes, milli, a.count):
            return reason(C.GPUS_NO_LONGER_FIT, count=a.count, pod_set=a.pod_set, node=a.node)
        gpus.apply(free, indexes, milli)
        out.append(indexes)
    return out


_NONE_HANDED: tuple[dict[str, int], list] = ({}, [])


def _handed_room(state: State, wl: WorkloadState) -> dict[str, tuple[dict[str, int], list[tuple[list[int], int]]]]:
    """Per node, what the workloads a hand-over takes over (still there) hold: resources, and
    (GPU indexes, milli per pod) per assignment. A hand-over's placement may use it: its pods start
    once they are gone (the node's free room is below zero until then)."""
    out: dict[str, tuple[dict[str, int], list[tuple[list[int], int]]]] = {}
    for name in handing_over(state, wl):
        for node, used, indexes, milli in node_holdings(state.workloads[name]):
            resources, gpu_held = out.setdefault(node, ({}, []))
            add_into(resources, used)
            if indexes:
                gpu_held.append((indexes, milli))
    return out


def placement_invalid(state: State, wl: WorkloadState | None, e: ev.PlacementDecided) -> Reason | None:
    stale = _stale(wl, "admitted", e.based_on, wl and wl.admitted_at, "the admission in force",
                   with_admission=e.with_admission)
    if stale is not None:
        return stale
    per_pod = {ps.name: ps.resources for ps in wl.spec.pod_sets}
    placed = {name: 0 for name in per_pod}
    allowed = placement_nodes(state, wl)
    taken: dict[str, dict[str, int]] = {}
    handed = _handed_room(state, wl)
    for a in e.assignments:
        if a.pod_set not in per_pod:
            return reason(C.UNKNOWN_POD_SET, pod_set=a.pod_set)
        node = state.nodes.get(a.node)
        if node is None:
            return reason(C.NODE_GONE, node=a.node)
        if allowed is not None and a.node not in allowed:
            return reason(C.NODE_WITHOUT_FLAVOR, node=a.node)
        if a.count <= 0:
            return reason(C.EMPTY_ASSIGNMENT)
        free = taken.get(a.node)
        if free is None:
            free = taken[a.node] = dict(node.free)
            add_on_node(free, handed.get(a.node, _NONE_HANDED)[0])
        if pods_that_fit(free, per_pod[a.pod_set]) < a.count:
            return reason(C.PODS_NO_LONGER_FIT, count=a.count, pod_set=a.pod_set, node=a.node)
        add_on_node(free, node_use(per_pod[a.pod_set], a.count), -1)
        placed[a.pod_set] += a.count
    for ps in admitted_pod_sets(wl.spec.pod_sets, wl.admission.counts):
        if placed[ps.name] != ps.count:
            return reason(C.GANG_INCOMPLETE, pod_set=ps.name, placed=placed[ps.name], count=ps.count)
    return None


def placement_nodes(state: State, wl: WorkloadState):
    """The nodes an admitted workload may use: those with every assigned flavor's labels (None: all)."""
    return index_of(state.contract).nodes_of(wl.admission.flavors, state)


def _eviction_ordered(state: State, env: ev.Envelope, e: ev.EvictionOrdered) -> None:
    wl = state.workloads.get(e.workload)
    if _seen(state, wl, env):
        return
    if wl is None:
        _supersede(state, wl, "eviction", env, reason(C.UNKNOWN_WORKLOAD))
        return
    if wl.phase not in ORDER_OUT_FROM:
        _supersede(state, wl, "eviction", env, reason(C.WORKLOAD_MOVED_ON, phase=wl.phase))
        return
    if e.based_on < wl.admitted_at:
        _supersede(state, wl, "eviction", env, reason(C.DECIDED_BEFORE, based_on=e.based_on,
                                                      what="the admission in force", since=wl.admitted_at))
        return
    wl.eviction, wl.eviction_id, wl.eviction_ms = e, env.id, env.time_ms
    wl.evictions.append((e.preemptor, e.reason, e.work_lost_ms))
    preemptor = state.workloads.get(e.preemptor)
    if preemptor is not None and preemptor.phase == "pending":
        preemptor.nominated = True
        if e.flavors:
            preemptor.nominated_flavors = e.flavors
        state.nominated[e.preemptor] = None
    if wl.phase == "admitted":
        # Nothing runs yet: the quota goes back at once and the workload waits again.
        _requeue(state, wl, env)
    else:
        _set_phase(state, wl, "evicting")
    state.decisions += 1


def _report(state: State, wl: WorkloadState | None, attempt: int, allowed: tuple[str, ...]) -> bool:
    """Is this binder report about the workload's current attempt and a stage it can move from?"""
    if wl is None or wl.attempt != attempt or wl.phase not in allowed:
        state.ignored += 1
        return False
    return True


def _bound(state: State, env: ev.Envelope, e: ev.WorkloadBound) -> None:
    wl = state.workloads.get(e.workload)
    if _report(state, wl, e.attempt, ("placed",)):
        _set_phase(state, wl, "bound")


def _running(state: State, env: ev.Envelope, e: ev.WorkloadRunning) -> None:
    wl = state.workloads.get(e.workload)
    if _report(state, wl, e.attempt, ("bound",)):
        _set_phase(state, wl, "running")
        wl.started_ms = env.time_ms
        _reset_money(wl)


def _finished(state: State, env: ev.Envelope, e: ev.WorkloadFinished) -> None:
    wl = state.workloads.get(e.workload)
    if _report(state, wl, e.attempt, FINISH_FROM):
        _release_nodes(state, wl)
        _release_quota(state, wl)
        _set_phase(state, wl, "finished")
        wl.finished_ms = env.time_ms
        wl.idle = wl.low_since_ms = None


def _evicted(state: State, env: ev.Envelope, e: ev.WorkloadEvicted) -> None:
    wl = state.workloads.get(e.workload)
    if not _report(state, wl, e.attempt, EVICT_FROM):
        return
    order, admitted_ms = wl.eviction, wl.admitted_ms
    if _requeue(state, wl, env):
        if admitted_ms is not None:
            wl.executed_ms += env.time_ms - admitted_ms
        wl.bind_failures, wl.retry_after_ms = e.bind_failures, e.retry_after_ms
        if e.retry_after_ms:
            state.backing_off[e.workload] = e.retry_after_ms
        # Deactivated (out of its queue for good): after too many failed binds (the report says
        # so), or once ordered out for its maximum execution time (the order does, whatever the
        # report says: a pod lost meanwhile is reported without it).
        said = next((x for x in (e, order) if x is not None and x.reason_code in DEACTIVATING_CODES), None)
        if said is not None:
            _deactivate(state, wl, env, said.reason or "deactivated", said.reason_code)


def _deactivate(state: State, wl: WorkloadState, env: ev.Envelope, why: str, code: C) -> None:
    _dequeue(state, wl)
    _set_phase(state, wl, "finished")
    wl.finished_ms = env.time_ms
    wl.deactivated, wl.deactivated_code = why, code


def _node_observed(state: State, env: ev.Envelope, e: ev.NodeObserved) -> None:
    if e.unavailable:
        # No new pods there: out of ``nodes`` (placement and preemption see only those), without
        # touching what runs on it; observed available again, it comes back with its free room
        # recomputed from what still runs there.
        if e.node in state.nodes:
            _index_node(state, state.nodes.pop(e.node), -1)
            state.node_epoch += 1
        state.unavailable[e.node] = e.unavailable
        return
    state.unavailable.pop(e.node, None)
    free = dict(e.allocatable)
    holding = []
    for name in state.active:
        wl = state.workloads[name]
        if wl.phase in HOLDS_NODES and wl.placement is not None:
            holding.append(wl)
            for name, used in assignment_use(wl.spec.pod_sets, wl.placement.assignments):
                if name == e.node:
                    add_on_node(free, used, -1)
    known = state.nodes.get(e.node)
    if known is None or known.labels != e.labels or known.taints != e.taints or known.allocatable != e.allocatable:
        state.node_epoch += 1
    if e.node in state.nodes:
        _index_node(state, state.nodes[e.node], -1)
    state.nodes[e.node] = NodeState(name=e.node, allocatable=dict(e.allocatable), labels=dict(e.labels), free=free,
                                    gpus=gpus.slots(e.allocatable.get(GPU, 0)), islands=list(e.islands),
                                    taints=list(e.taints))
    _index_node(state, state.nodes[e.node], +1)
    for wl in holding:
        _gpus_held(state, wl, sign=-1, only=e.node)


def _priority_class(state: State, env: ev.Envelope, e: ev.PriorityClassObserved) -> None:
    if e.gone:
        state.cluster_priority_classes.pop(e.name, None)
    else:
        state.cluster_priority_classes[e.name] = e.value
    if e.global_default and not e.gone:
        state.cluster_default_class = e.name
    elif state.cluster_default_class == e.name:
        state.cluster_default_class = ""


def _node_removed(state: State, env: ev.Envelope, e: ev.NodeRemoved) -> None:
    if e.node not in state.nodes and e.node not in state.unavailable:
        state.ignored += 1
        return
    for name in list(state.active):
        wl = state.workloads[name]
        if wl.phase in HOLDS_NODES and wl.placement and any(a.node == e.node for a in wl.placement.assignments):
            _requeue(state, wl, env)
    state.unavailable.pop(e.node, None)
    if e.node in state.nodes:
        _index_node(state, state.nodes[e.node], -1)
        del state.nodes[e.node]
        state.node_epoch += 1


def _withdrawn(state: State, env: ev.Envelope, e: ev.WorkloadWithdrawn) -> None:
    wl = state.workloads.get(e.workload)
    if wl is None or wl.phase == "finished":
        state.ignored += 1
        return
    if wl.phase == "pending":
        _dequeue(state, wl)
    else:
        _release_nodes(state, wl)
        _release_quota(state, wl)
    _end_withdrawn(state, wl, env, e.reason)


def _withdrawal_requested(state: State, env: ev.Envelope, e: ev.WithdrawalRequested) -> None:
    """Out of its queue at once; holding quota or nodes, it is ``withdrawing`` until the binder says
    its pods are gone (``WorkloadWithdrawn``)."""
    wl = state.workloads.get(e.workload)
    if wl is None or wl.phase == "finished" or wl.withdrawing is not None:
        state.ignored += 1
        return
    if wl.phase == "pending":
        _dequeue(state, wl)
        _end_withdrawn(state, wl, env, e.reason)
    else:
        wl.withdrawing = e.reason or "withdrawn"


def _config(state: State, env: ev.Envelope, e: ev.ConfigApplied) -> None:
    for wl in repriced(state, e.contract):
        # The charge so far ends here at the old prices; a new one starts at the new prices.
        wl.busy_milli_ms = 0
        wl.gpu_seen_ms = {key: max(seen, env.time_ms) for key, seen in wl.gpu_seen_ms.items()}
        wl.charged_from_ms, wl.segment = env.time_ms, wl.segment + 1
    aging = aging_of(state.contract)
    state.contract = e.contract
    state.contract_digest = e.digest
    if aging_of(e.contract) != aging:  # the waiting work takes its place under the new aging
        aging = aging_of(e.contract)
        for queue in state.pending_order.values():
            queue[:] = sorted(queue_key(state.workloads[key[3]], aging) for key in queue)
    _follow_local_queues(state)
    # Cohort usage depends on the tree and the lending limits: derive it again under the new one.
    state.cohort_usage = {}
    view, usage = quota_view(state), state.usage
    state.usage = view.usage = {}
    for cq, amounts in sorted(usage.items()):
        if cq in view.structure.queues:
            view.add(cq, amounts)
        else:
            state.usage[cq] = amounts


def _pointed_at(state: State, wl: WorkloadState) -> str | None:
    """The ClusterQueue ``wl``'s LocalQueue points at, where that is not the one it is queued for
    (None: the same, or the LocalQueue is gone — it then waits as ``local_queue_gone``)."""
    if state.contract is None:
        return None
    lq = index_of(state.contract).local_queues.get((wl.spec.namespace, wl.spec.queue))
    return lq.cluster_queue if lq is not None and lq.cluster_queue != wl.spec.cluster_queue else None


def _follow_local_queues(state: State) -> None:
    """A waiting workload goes where its LocalQueue points (``_enqueue``): a contract that points
    the LocalQueue at another ClusterQueue takes the workloads waiting in it there, in the place
    their priority and age give them — as Kueue does with a LocalQueue created again pointing
    elsewhere (its ``clusterQueue`` cannot be changed in place). An admitted workload keeps the
    ClusterQueue of its admission until it waits again."""
    for wl in [state.workloads[name] for name in state.pending if _pointed_at(state, state.workloads[name])]:
        _requeue_in(state, wl, wl.spec.queue)


def _requeue_in(state: State, wl: WorkloadState, queue: str) -> None:
    """Take waiting ``wl`` out of its queue and into LocalQueue ``queue``'s (its own or another of
    its namespace), where its priority and age place it; a failed bind's backoff goes with it."""
    backoff = state.backing_off.get(wl.spec.workload)
    _dequeue(state, wl)
    if queue != wl.spec.queue:
        wl.spec = msgspec.structs.replace(wl.spec, queue=queue)
    _enqueue(state, wl)
    if backoff is not None:
        state.backing_off[wl.spec.workload] = backoff


def _moved(state: State, env: ev.Envelope, e: ev.WorkloadMoved) -> None:
    """A move holds if the workload still waits and its namespace has the LocalQueue under the
    contract in force; it then goes where that LocalQueue points now."""
    wl = state.workloads.get(e.workload)
    if wl is None or e.queue == wl.spec.queue:  # (unknown, or there already: a re-delivery)
        state.ignored += 1
        return
    if wl.phase != "pending":  # (it keeps the queue it was admitted from: told, as a decision too late is)
        _supersede(state, wl, "move", env, reason(C.WORKLOAD_MOVED_ON, phase=wl.phase, expected="pending"))
        return
    if state.contract is None or (wl.spec.namespace, e.queue) not in index_of(state.contract).local_queues:
        _supersede(state, wl, "move", env, reason(C.LOCAL_QUEUE_GONE, local_queue=f"{wl.spec.namespace}/{e.queue}"))
        return
    _requeue_in(state, wl, e.queue)
    wl.moved_by = e.submission


def _checkpoint(state: State, env: ev.Envelope, e: ev.CheckpointSaved) -> None:
    """A checkpoint counts (it saves the attempt's work from preemption's and accounting's loss) only
    for a workload running that attempt (or in its eviction's grace), taken after it started, with a
    step that is not negative and not below the step of the attempt's last checkpoint that counted
    (a step going backwards saves nothing new). Any other is ignored."""
    wl = state.workloads.get(e.workload)
    if wl is None or wl.phase not in ("running", "evicting"):
        state.ignored += 1
        return
    if e.step is not None and (e.step < 0 or (wl.checkpoint_step is not None and e.step < wl.checkpoint_step)):
        state.ignored += 1
        return
    saved = e.saved_ms or env.time_ms
    if wl.started_ms is not None and saved >= wl.started_ms:
        wl.checkpoint_ms = max(saved, wl.checkpoint_ms or 0)
        wl.tokens_saved = wl.tokens
        if e.step is not None:
            wl.checkpoint_step = e.step


def repriced(state: State, contract) -> list[WorkloadState]:
    """Running workloads whose prices change under ``contract`` (their charge is split there)."""
    out = []
    for name in state.active:
        wl = state.workloads[name]
        if wl.phase in HOLDS_NODES and wl.started_ms is not None:
            if money.prices_of(state.contract, wl) != money.prices_of(contract, wl):
                out.append(wl)
    return out


def _telemetry(state: State, env: ev.Envelope, e: ev.GpuTelemetry) -> None:
    """Each sample goes to the workload holding that GPU (running, current attempt)."""
    at = e.observed_ms or env.time_ms
    holders: dict[str, WorkloadState] = {}
    for name in state.active:
        wl = state.workloads[name]
        if wl.phase in ("running", "evicting") and wl.started_ms is not None:
            for node, index in money.held_gpus(wl):
                if node == e.node:
                    holders[money.gpu_key(node, index)] = wl
    touched: dict[str, WorkloadState] = {}
    for sample in e.samples:
        key = money.gpu_key(e.node, sample.gpu)
        wl = holders.get(key)
        if wl is None:
            continue
        start = wl.charged_from_ms if wl.charged_from_ms is not None else wl.started_ms
        since = max(wl.gpu_seen_ms.get(key, start), start)
        if at > since:
            wl.busy_milli_ms += sample.sm_active * (at - since)
            wl.gpu_seen_ms[key] = at
        wl.gpu_sm[key] = sample.sm_active
        touched[wl.spec.workload] = wl
    if not touched:
        state.ignored += 1
    rule = state.contract.idle_rule if state.contract is not None else None
    for wl in touched.values():
        mean = money.mean_sm(wl)
        if rule is not None and mean is not None and mean < rule.sm_active_below:
            if wl.low_since_ms is None:
                wl.low_since_ms = at
        else:
            wl.low_since_ms = None
            wl.idle = None


def _progress(state: State, env: ev.Envelope, e: ev.WorkloadProgress) -> None:
    wl = state.workloads.get(e.workload)
    if wl is None or wl.phase not in ("running", "evicting"):
        state.ignored += 1
        return
    wl.tokens = max(wl.tokens, e.tokens)


def _idle(state: State, env: ev.Envelope, e: ev.WorkloadIdle) -> None:
    """The idle flag holds if the workload still runs that attempt and its SMs are still low."""
    wl = state.workloads.get(e.workload)
    if _seen(state, wl, env):
        return
    if wl is None or wl.attempt != e.attempt or wl.phase != "running" or wl.low_since_ms is None:
        _supersede(state, wl, "idle flag", env, reason(C.NO_LONGER_IDLE))
        return
    wl.idle = e
    state.decisions += 1


_HANDLERS = {
    ev.WorkloadQueued: _queued,
    ev.WorkloadAdmitted: _admitted,
    ev.PlacementDecided: _placed,
    ev.EvictionOrdered: _eviction_ordered,
    ev.WorkloadBound: _bound,
    ev.WorkloadRunning: _running,
    ev.WorkloadFinished: _finished,
    ev.WorkloadEvicted: _evicted,
    ev.NodeObserved: _node_observed,
    ev.NodeRemoved: _node_removed,
    ev.PriorityClassObserved: _priority_class,
    ev.ConfigApplied: _config,
    ev.CheckpointSaved: _checkpoint,
    ev.GpuTelemetry: _telemetry,
    ev.WorkloadProgress: _progress,
    ev.WorkloadIdle: _idle,
    ev.WorkloadWithdrawn: _withdrawn,
    ev.WithdrawalRequested: _withdrawal_requested,
    ev.WorkloadMoved: _moved,
}


def handlers_for(types) -> dict:
    """The fold's handlers of ``types`` only: a service that reads only what those events change
    (``LogService.folds``) folds the rest as time passing."""
    unknown = set(types) - set(_HANDLERS)
    if unknown:
        raise ValueError(f"the fold has no handler for {sorted(t.__name__ for t in unknown)}")
    return {t: h for t, h in _HANDLERS.items() if t in types}
