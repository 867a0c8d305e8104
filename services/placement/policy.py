"""Placement policy (pure): a gang lands atomically on free capacity, best fit first, on the topology.

Best fit: for each pod set, nodes are tried from the least free (of the pod's main resource: GPUs
when it asks for GPUs, else CPU) to the most free, so partly used nodes fill up before empty ones
are touched and whole nodes stay whole for big gangs. Ties break by node name: deterministic.
Within a node, GPUs are chosen one by one (``events/gpus.py``): whole GPUs from the fullest NVLink
island that still holds them, shared GPUs before whole ones.

Topology (``topology.py``; Kueue's TAS annotations on each pod set):
- *required* level: the whole pod set inside one domain of that level, or the gang is not placed;
- *preferred* level: that level if possible, else each coarser level in turn, else anywhere;
- *slices* (``slice_required`` + ``slice_size``): every slice of that many pods inside one domain;
- ``gangway.io/nvlink-island`` as the level: every pod on one node, inside one NVLink island.
Among the domains that can hold the pod set, the one with the least room that still holds it is
tried first (best fit on domains), so big blocks, racks, nodes and islands stay whole.
"""

from __future__ import annotations

import bisect
import heapq
import operator
from collections.abc import Container, Iterable, Iterator, Mapping

from gangway.events import freeindex, gpus
from gangway.events.catalogue import (
    Fragmentation, KeptRoom, PlacementDecided, PodAssignment, PodSet, Taint, TopologyRequest, WorkloadAdmitted, admits,
    preference,
)
from gangway.events.quantity import MILLI, format_amount, format_resource
from gangway.events.reasons import C, Reason, reason, said
from gangway.events.resources import (
    GPU, PODS, add_on_node, admitted_pod_sets, assignment_use, index_of, node_use, pods_that_fit,
)
from gangway.events.fold import is_move
from gangway.events.state import GPU_MODEL_LABEL, NodeState, State, WorkloadState, node_holdings
from gangway.services.placement import scoring, topology

#: At most this many placements per cycle (a bound on every loop; the next cycle takes the rest).
PLACEMENTS_PER_CYCLE_MAX = 1000
#: At most this many domains are tried for one pod set (best fit first).
DOMAIN_TRIES_MAX = 64


class NodeRoom:
    """What is free on one node: resources (milli), milli per GPU, and what never changes."""

    __slots__ = ("free", "gpus", "islands", "labels", "taints")

    def __init__(self, free: dict[str, int], gpus: list[int] | None = None, islands: list[int] | None = None,
                 labels: Mapping[str, str] | None = None, taints: list[Taint] | None = None):
        self.free = free
        self.gpus = gpus if gpus is not None else []
        self.islands = islands if islands is not None else []
        self.labels = labels if labels is not None else {}
        self.taints = taints if taints is not None else []

    def copy(self) -> NodeRoom:
        return NodeRoom(dict(self.free), list(self.gpus), self.islands, self.labels, self.taints)

    def __eq__(self, other) -> bool:
        return isinstance(other, NodeRoom) and (self.free, self.gpus) == (other.free, other.gpus)

    def __repr__(self) -> str:
        return f"NodeRoom({self.free}, gpus={self.gpus})"


class Free(dict[str, NodeRoom]):
    """Free room per node name: what admission, placement and preemption take trial placements from.
    ``scorer`` (from the pods queued lately) orders the nodes for GPU pods; None: best fit.

    Copy on write: a room may be shared with the state's node or with another ``Free`` (``owned``
    names the rooms that are this one's alone; None: all of them). Whoever changes a room in place
    takes it with ``own`` first; trials (``_Trial``) copy what they change anyway."""

    _scorer: scoring.LiveScorer | None = None
    #: What ``scorer`` is built from, until it is first needed (None: built, or none to build).
    _scorer_of: tuple | None = None
    #: Each node's Topology levels (``topology.node_levels``); a node not in it has no Topology.
    levels: dict[str, topology.Levels] = {}
    #: Does some node have taints (then every pod set is checked against them)?
    tainted: bool = False
    #: ``Contract.preferred_domains``: preferred node affinity ranks topology domains too.
    preferred_domains: bool = False
    #: ``Contract.model_reserve``: a GPU model keeps free what the pods that may use only it will
    #: need (``_reserve_deficits``).
    model_reserve: bool = False
    owned: set[str] | None = None
    #: A superset of the nodes with a free GPU (None: not gathered yet): GPU pods look only at
    #: these. Room only grows through ``own``, which adds the node.
    gpu_nodes: set[str] | None = None

    def with_gpus(self) -> set[str]:
        """Every node that may have a free GPU (and perhaps some that no longer have one)."""
        found = self.gpu_nodes
        if found is None:
            found = self.gpu_nodes = {name for name, room in self.items() if room.free.get(GPU, 0) > 0}
        return found

    #: The nodes by kind of free room (``_Kinds``), for GPU pods on big clusters; None: not
    #: built yet (only a ``Free`` from ``free_capacity`` builds one: ``indexed``).
    kinds: _Kinds | None = None
    indexed: bool = False

    #: The state's rooms this ``Free`` was made from (``free_capacity``; None: another kind of Free).
    state_rooms: dict[str, NodeRoom] | None = None

    def by_kind(self) -> _Kinds:
        """The kind index, up to date (rooms changed through ``own`` are filed again). A ``Free`` of
        the state's rooms starts from the state's index (``_state_kinds``): only the rooms it has
        changed already are filed."""
        kinds = self.kinds
        if kinds is None:
            base = self.state_rooms
            if base is None:
                kinds = self.kinds = _Kinds(self)
            else:
                kinds = self.kinds = _state_kinds(base)
                for name, room in self.items():
                    if room is not base[name]:
                        kinds.file(name, room)
        elif kinds.dirty:
            kinds.refile(self)
        return kinds

    @property
    def scorer(self) -> scoring.LiveScorer | None:
        """The fragmentation scorer of the pods queued lately (built when first needed)."""
        if self._scorer_of is not None:
            self._scorer, self._scorer_of = scoring.scorer_of(*self._scorer_of), None
        return self._scorer

    @scorer.setter
    def scorer(self, value: scoring.LiveScorer | None) -> None:
        self._scorer, self._scorer_of = value, None

    def scored(self) -> bool:
        """Is there a scorer (``scorer`` is not None)? Answered without building it."""
        if self._scorer_of is not None:
            return scoring.has_scored_shapes(self._scorer_of[0])
        return self._scorer is not None

    def own(self, name: str) -> NodeRoom:
        """The room of ``name``, this ``Free``'s alone (copied the first time it is changed)."""
        room = self[name]
        if self.gpu_nodes is not None:
            self.gpu_nodes.add(name)
        if self.kinds is not None:  # it may change in place: filed again when next asked
            self.kinds.dirty.add(name)
        owned = self.owned
        if owned is None or name in owned:
            return room
        room = self[name] = room.copy()
        owned.add(name)
        return room


def _kind(room: NodeRoom) -> tuple:
    """What placement sees of a node: nodes of one kind fit, take and score GPU pods alike."""
    return tuple(sorted(room.free.items())), tuple(room.gpus), room.labels.get(GPU_MODEL_LABEL, "")


class _Kinds:
    """The nodes of a ``Free`` grouped by kind (``_kind``), each kind's names sorted: a GPU pod set
    is ordered by looking at each kind once, not at every node (a big cluster has a few dozen
    kinds of node state and thousands of nodes)."""

    __slots__ = ("kind_of", "members", "dirty")

    def __init__(self, free: Mapping[str, NodeRoom] | None = None):
        self.kind_of: dict[str, tuple] = {}
        self.members: dict[tuple, list[str]] = {}
        #: Names whose room may have changed in place since filed.
        self.dirty: set[str] = set()
        if free is not None:
            for name in sorted(free):
                key = self.kind_of[name] = _kind(free[name])
                self.members.setdefault(key, []).append(name)

    def copy(self) -> _Kinds:
        other = _Kinds()
        other.kind_of = dict(self.kind_of)
        other.members = {k: list(v) for k, v in self.members.items()}
        other.dirty = set(self.dirty)
        return other

    def file(self, name: str, room: NodeRoom) -> None:
        key = _kind(room)
        old = self.kind_of.get(name)
        if old == key:
            return
        if old is not None:
            names = self.members[old]
            del names[bisect.bisect_left(names, name)]
            if not names:
                del self.members[old]
        self.kind_of[name] = key
        bisect.insort(self.members.setdefault(key, []), name)

    def refile(self, free: Free) -> None:
        for name in sorted(self.dirty):
            self.file(name, free[name])
        self.dirty.clear()


#: The kind index of the last rooms ``_state_kinds`` was asked for: [those rooms, the index, each
#: node's free resources and GPUs as filed].
_LAST_KINDS: list = [None, None, {}]


def _state_kinds(rooms: dict[str, NodeRoom]) -> _Kinds:
    """A copy of the kind index of the state's rooms (``_rooms``), kept from cycle to cycle: the
    fold changes a room's free resources and GPUs in place, so each node is compared with what
    was filed and only those that changed are filed again (building the index of a thousand nodes
    every cycle was a tenth of admission's time in Kueue's large-scale scenario)."""
    last_rooms, kinds, filed = _LAST_KINDS
    if last_rooms is not rooms:
        kinds = _Kinds(rooms)
        filed = {name: (dict(room.free), list(room.gpus)) for name, room in rooms.items()}
        _LAST_KINDS[:] = [rooms, kinds, filed]
    else:
        for name, room in rooms.items():
            free, slots = filed[name]
            if room.free != free or room.gpus != slots:
                kinds.file(name, room)
                filed[name] = (dict(room.free), list(room.gpus))
    return kinds.copy()


_ROOMS: dict[int, tuple[NodeState, NodeRoom]] = {}


def _room_of(node: NodeState) -> NodeRoom:
    """The room over a node's own free resources and GPUs (a ``Free`` never changes a room it
    does not own, so one room per node serves every ``Free`` while the node is the same)."""
    cached = _ROOMS.get(id(node))
    if cached is not None and cached[0] is node:
        room = cached[1]
        if room.free is node.free and room.gpus is node.gpus:
            return room
    room = NodeRoom(node.free, node.gpus, node.islands, node.labels, node.taints)
    if len(_ROOMS) > 65_536:
        _ROOMS.clear()
    _ROOMS[id(node)] = (node, room)
    return room


#: The last rooms ``free_capacity`` made: (the state's node dict, its nodes in order, name → room,
#: tainted). The fold changes a node's free room and GPUs in place and replaces the node object
#: when it changes otherwise, so while the same node objects are there the rooms serve again.
_LAST_ROOMS: list = [None, (), {}, False]


def _rooms(state: State) -> tuple[dict[str, NodeRoom], bool]:
    """Every node's room (``_room_of``) and whether some node has taints, from the last call's when
    the state holds the very same node objects (checked one by one: cheaper than building)."""
    nodes, last = state.nodes, _LAST_ROOMS
    values = tuple(nodes.values())
    if last[0] is nodes and len(values) == len(last[1]) and all(map(operator.is_, values, last[1])):
        return last[2], last[3]
    rooms = {name: _room_of(n) for name, n in nodes.items()}
    tainted = any(n.taints for n in values)
    last[:] = [nodes, values, rooms, tainted]
    return rooms, tainted


def free_capacity(state: State, scored: bool = True) -> Free:
    """Every node's free room (shared with the state's nodes until changed: copy on write), with
    the scorer of the state's pod mix when ``scored``."""
    rooms, tainted = _rooms(state)
    free = Free(rooms)
    free.owned = set()
    free.indexed = True
    free.state_rooms = rooms
    free.tainted = tainted
    if scored:
        free._scorer_of = (state.pod_shapes, state.pod_shapes_ms, state.time_ms, _node_models(state))
    free.levels = topology.node_levels(state.contract, state.nodes, state.node_epoch)
    free.preferred_domains = state.contract is not None and state.contract.preferred_domains
    free.model_reserve = state.contract is not None and state.contract.model_reserve
    return free


_MODELS_CACHE: dict[tuple, tuple[object, tuple[str, ...]]] = {}


def _node_models(state: State) -> tuple[str, ...]:
    """The GPU models the state's nodes name (memo per node epoch)."""
    key = (id(state.nodes), state.node_epoch)
    cached = _MODELS_CACHE.get(key)
    if cached is not None and cached[0] is state.nodes:
        return cached[1]
    models = tuple(sorted({m for n in state.nodes.values() if (m := n.labels.get(GPU_MODEL_LABEL))}))
    if len(_MODELS_CACHE) > 16:
        _MODELS_CACHE.clear()
    _MODELS_CACHE[key] = (state.nodes, models)
    return models


def copy_free(free: Free) -> Free:
    """A copy whose changes never show in ``free`` (nor the other way): the rooms are shared, and
    copied by whichever side changes one first."""
    copy = Free(free)
    copy._scorer, copy._scorer_of, copy.levels, copy.tainted = free._scorer, free._scorer_of, free.levels, free.tainted
    copy.preferred_domains, copy.model_reserve = free.preferred_domains, free.model_reserve
    copy.owned, free.owned = set(), set()
    if free.gpu_nodes is not None:
        copy.gpu_nodes = set(free.gpu_nodes)
    copy.indexed, copy.state_rooms = free.indexed, free.state_rooms
    if free.kinds is not None:
        copy.kinds = free.kinds.copy()
    names = free.__dict__.get("names")
    if names is not None:
        copy.__dict__["names"] = names
    return copy


def _names(free: Free) -> list[str]:
    """Every node name, sorted (nodes never come or go in a Free: sorted once)."""
    names = free.__dict__.get("names")
    if names is None or len(names) != len(free):
        names = free.__dict__["names"] = sorted(free)
    return names


def as_free(plain: Mapping[str, dict[str, int]]) -> Free:
    """Free room from plain resource dictionaries (no per-GPU view, no labels)."""
    return Free({name: NodeRoom(dict(f)) for name, f in plain.items()})


class _Trial:
    """Copy-on-write changes over ``base`` (a ``Free`` or another trial), committed or dropped whole."""

    def __init__(self, base: Mapping[str, NodeRoom]):
        self.base = base
        #: The ``Free`` under every trial.
        self.root = base.root if isinstance(base, _Trial) else base
        self.changed: dict[str, NodeRoom] = {}
        self.levels: dict[str, topology.Levels] = getattr(base, "levels", {})

    @property
    def scorer(self) -> scoring.LiveScorer | None:
        return getattr(self.root, "scorer", None)

    def scored(self) -> bool:
        root = self.root
        return root.scored() if isinstance(root, Free) else getattr(root, "scorer", None) is not None

    def __getitem__(self, name: str) -> NodeRoom:
        room = self.changed.get(name)
        return room if room is not None else self.base[name]

    def __setitem__(self, name: str, room: NodeRoom) -> None:
        self.changed[name] = room

    def writable(self, name: str) -> NodeRoom:
        if name not in self.changed:
            self.changed[name] = self.base[name].copy()
        return self.changed[name]

    def commit(self) -> None:
        base = self.base
        for name, room in self.changed.items():
            base[name] = room
        owned = getattr(base, "owned", None)
        if owned is not None:  # the trial's rooms were copies: the base's own now
            owned.update(self.changed)
        with_gpus = getattr(base, "gpu_nodes", None)
        if with_gpus is not None:  # a trial only takes room: the nodes it left without a GPU go
            with_gpus.difference_update([name for name, room in self.changed.items() if room.free.get(GPU, 0) <= 0])
        kinds = getattr(base, "kinds", None)
        if kinds is not None:
            for name, room in self.changed.items():
                kinds.file(name, room)


def place_gang(free: Free, pod_sets: list[PodSet], *, nodes: Container[str] | None = None) -> list[PodAssignment] | None:
    """Place every pod of every pod set, or nothing. On success ``free`` is reduced in place.
    ``nodes``, when given, are the only nodes that may be used."""
    placed = _place_gang(free, pod_sets, nodes)
    return None if placed is None else placed[0]


def _place_gang(free: Free, pod_sets: list[PodSet], nodes: Container[str] | None) -> tuple[list[PodAssignment], list[str]] | None:
    trial = _Trial(free)
    allowed = _names(free) if nodes is None else sorted(n for n in free if n in nodes)
    assignments: list[PodAssignment] = []
    notes: list[str] = []
    tainted = getattr(free, "tainted", False)
    for ps in pod_sets:
        where = allowed
        if ps.node_selector or ps.node_affinity or tainted:  # only the nodes its pods may go to (labels, taints)
            where = [n for n in allowed
                     if admits(free[n].labels, free[n].taints, ps.node_selector, ps.tolerations, n, ps.node_affinity)]
        got = _place_pod_set(trial, ps, where)
        if got is None:
            return None
        assignments += got[0]
        notes += [f"{ps.name}{got[1]}"] if got[1] else []
    trial.commit()
    return assignments, notes


def _place_pod_set(trial: _Trial, ps: PodSet, allowed: list[str]) -> tuple[list[PodAssignment], str] | None:
    """The pod set's assignments and where they landed (its topology level), or None."""
    t = ps.topology or TopologyRequest()
    if t.required:
        levels: list[str | None] = [t.required]
    elif t.preferred:
        levels = topology.fallbacks(t.preferred, topology.common_levels(allowed, trial.levels))
    else:
        levels = [None]
    # A preferred level falls back to anywhere (None) last; before that, over as few domains of
    # the coarsest level it tried as hold it.
    coarsest = levels[-2] if len(levels) > 1 and levels[-1] is None else None
    for level in levels:
        got = _in_one_domain(trial, ps, allowed, level)
        if got is not None:
            return got
        if level is not None and level == coarsest and level != topology.ISLAND:
            got = _in_fewest_domains(trial, ps, allowed, level)
            if got is not None:
                return got
    return None


def _domain_rooms(trial: _Trial, ps: PodSet, names: list[str], level: str) -> tuple[dict, dict, dict]:
    """The domains of ``level`` among ``names`` that hold at least one of the pod set's pods (key →
    nodes), how many of its pods each holds now (key → pods), and each node's (node → pods)."""
    fit = _pods_that_fit_by_kind(trial, ps.resources, names)
    groups = {}
    for key, members in _every_domain(trial, level).items():  # (in their order, each down to its nodes with room)
        inside = [n for n in members if n in fit]
        if inside:
            groups[key] = inside
    return groups, {key: sum(fit[n] for n in members) for key, members in groups.items()}, fit


def _domain_preference(trial: _Trial, ps: PodSet, members: list[str], fit: dict[str, int]) -> int:
    """What the pod set's preferred node affinity weighs in a domain: its pods on the domain's most
    preferred nodes first, each pod counting its node's weight (kube-scheduler scores each pod)."""
    weights = sorted(((preference(ps.preferred_affinity, n, trial[n].labels), fit[n]) for n in members), reverse=True)
    total, left = 0, ps.count
    for weight, pods in weights:
        if left <= 0 or weight <= 0:
            break
        total += weight * min(pods, left)
        left -= pods
    return total


def _pods_that_fit_by_kind(trial: _Trial, per_pod: dict[str, int], names: list[str]) -> dict[str, int]:
    """Node → how many pods of ``per_pod`` fit on it now, for the nodes of ``names`` where one does:
    counted once per kind of node (``_kind_groups``), not for each of a topology's hundreds of nodes."""
    main = next((r for r, v in per_pod.items() if v > 0), None)
    if main is None:  # (a pod asking for nothing: only the nodes' pods count bounds it)
        return {n: k for n in names if (k := pods_that_fit(trial[n].free, per_pod)) > 0}
    allowed = None if len(names) == len(trial.root) else set(names)  # (names are some of the root's nodes)
    fit: dict[str, int] = {}
    for room, members in _kind_groups(trial, main, per_pod[main]):
        k = pods_that_fit(room.free, per_pod)
        if k > 0:
            for n in members:
                if allowed is None or n in allowed:
                    fit[n] = k
    return fit


#: Every node's domains of a level (``topology.domains``), by the state's rooms (``_rooms``: a new
#: dict whenever a node object, and so its labels, changes), the level and the nodes' Topology levels.
_DOMAINS: dict[tuple, tuple[dict, object, dict]] = {}


def _every_domain(trial: _Trial, level: str) -> dict[tuple[str, ...], list[str]]:
    """The domains of ``level`` over all the root's nodes; for the state's rooms (``free_capacity``)
    kept from gang to gang and cycle to cycle while the nodes are the same (grouping a topology's
    640 nodes for every gang tried was most of what the tas scenario's admission spent)."""
    levels = trial.levels or None  # (no node has a Topology: as none given)
    rooms = trial.root.state_rooms
    if rooms is None:
        return topology.domains(((n, room.labels) for n, room in trial.root.items()), level, levels)
    key = (id(rooms), level, id(levels))
    cached = _DOMAINS.get(key)
    if cached is not None and cached[0] is rooms and cached[1] is levels:
        return cached[2]
    every = topology.domains(((n, room.labels) for n, room in rooms.items()), level, levels)
    if len(_DOMAINS) > 16:  # (each keeps its rooms alive)
        _DOMAINS.clear()
    _DOMAINS[key] = (rooms, levels, every)
    return every


def _in_fewest_domains(trial: _Trial, ps: PodSet, names: list[str], level: str) -> tuple[list[PodAssignment], str] | None:
    """The pod set over as few domains of ``level`` as hold it: the roomiest first (a preferred
    topology too big for any one domain spans two racks, not whichever nodes come first)."""
    groups, rooms, _ = _domain_rooms(trial, ps, names, level)
    chosen, room = [], 0
    for key in sorted(rooms, key=lambda key: (-rooms[key], key)):
        if room >= ps.count:
            break
        chosen.append(key)
        room += rooms[key]
    if room < ps.count or len(chosen) < 2:
        return None
    child = _Trial(trial)
    got = _sliced(child, ps, [n for key in chosen for n in groups[key]])
    if got is None:
        return None
    child.commit()
    return got, f" over {len(chosen)} domains of {level} ({', '.join(key[-1] for key in chosen)})"


def _in_one_domain(trial: _Trial, ps: PodSet, names: list[str], level: str | None) -> tuple[list[PodAssignment], str] | None:
    """The pod set inside one domain of ``level`` (None: anywhere), the least roomy that holds it first
    — after the domains its preferred node affinity weighs more (``_domain_preference``)."""
    if level is None:
        # Anywhere is the last resort: a failure drops the caller's whole trial, so only slices
        # (placed one by one, each committed) need a trial of their own.
        scope = _Trial(trial) if ps.topology is not None and ps.topology.slice_required else trial
        got = _sliced(scope, ps, names)
        if got is not None and scope is not trial:
            scope.commit()
        return None if got is None else (got, "")
    if level == topology.ISLAND:
        return _in_one_island(trial, ps, [n for n in names if pods_that_fit(trial[n].free, ps.resources) >= ps.count])
    groups, rooms, fit = _domain_rooms(trial, ps, names, level)
    ranked = sorted((room, key) for key, room in rooms.items() if room >= ps.count)
    if ps.preferred_affinity and getattr(trial.root, "preferred_domains", False):
        # (the domain its preferences weigh most first, then the least roomy)
        weight = {key: _domain_preference(trial, ps, groups[key], fit) for _, key in ranked}
        ranked.sort(key=lambda room_key: -weight[room_key[1]])
    for _, key in ranked[:DOMAIN_TRIES_MAX]:
        child = _Trial(trial)
        got = _sliced(child, ps, groups[key])
        if got is not None:
            child.commit()
            return got, topology.describe(level, key)
    return None


def _sliced(trial: _Trial, ps: PodSet, names: list[str]) -> list[PodAssignment] | None:
    """Every slice of the pod set inside one domain of the slice level, or the pod set on ``names``."""
    t = ps.topology
    if t is None or not t.slice_required or not t.slice_size:
        return _on_nodes(trial, ps, names, ps.count)
    if ps.count % t.slice_size:
        return None
    one = PodSet(name=ps.name, count=t.slice_size, resources=ps.resources, preferred_affinity=ps.preferred_affinity)
    out: list[PodAssignment] = []
    for _ in range(ps.count // t.slice_size):
        got = _in_one_domain(trial, one, names, t.slice_required)
        if got is None:
            return None
        out += got[0]
    return out


def _on_nodes(trial: _Trial, ps: PodSet, names: list[str], count: int) -> list[PodAssignment] | None:
    """``count`` pods on ``names``, best fit: the least free of the main resource first. Pods
    without GPUs go to the nodes with the fewest free GPUs first, so they do not take the CPU that
    free GPUs will need (measured on the Alibaba traces: a third fewer GPUs left unallocated).
    GPU pods, one or many, take the nodes in the fragmentation score's order when there is one."""
    out: list[PodAssignment] = []
    root = trial.root
    if isinstance(root, Free) and root.indexed and len(names) == len(root) > KINDS_FROM:
        # (names are always some of the root's nodes: here all of them)
        order = _order_by_kind(trial, ps.resources) if ps.resources.get(GPU, 0) > 0 else _plain_order_by_kind(trial, ps.resources)
    else:
        order = _best_fit_order(trial, ps.resources, names)
        if len(order) > 1 and trial.scored():
            order = _scored_order(trial, ps.resources, order)
    if ps.preferred_affinity:  # (the nodes it prefers most first, each weight in the order above)
        order = sorted(order, key=lambda n: -preference(ps.preferred_affinity, n, trial[n].labels))
    for name in order:
        n, indexes = _fit_on(trial[name], ps.resources, count)
        if n <= 0:
            continue
        _take(trial.writable(name), ps.resources, n, indexes)
        out.append(PodAssignment(pod_set=ps.name, node=name, count=n, gpus=indexes))
        count -= n
        if count == 0:
            return out
    return None


#: Clusters of more nodes than this order GPU pods by kind of node (``_Kinds``).
KINDS_FROM = 64


def _order_by_kind(trial: _Trial, per_pod: dict[str, int]) -> Iterator[str]:
    """Every node of the root, in the order ``_best_fit_order`` then ``_scored_order`` give them,
    lazily: each kind of node is looked at once, its names (sorted) merged with the others'.

    Best fit sorts by (free GPUs, name); the score sorts by (score, GPUs left, CPU left), ties by
    the best-fit position — within equal keys the free GPUs are equal, so by name. Nodes a trial
    changed are kinds of their own."""
    need = per_pod[GPU]
    groups = _kind_groups(trial, GPU, need)
    total = sum(len(members) for _, members in groups)
    shape = scoring.shape_of(per_pod.get("cpu", 0), per_pod.get("memory", 0), need)
    if total > 1 and shape is not None and trial.scored():
        groups = [(room, members) for room, members in groups if _fits_one(room, per_pod, shape)]
        if len(groups) <= 1:
            keyed = [()] * len(groups)  # one kind: every node alike, by name (no score needed)
        else:
            rooms = [room for room, _ in groups]
            keyed = scoring.keys(trial.scorer, shape, [r.free.get("cpu", 0) for r in rooms],
                                 [r.free.get("memory", 0) for r in rooms], [r.gpus for r in rooms],
                                 [r.labels.get(GPU_MODEL_LABEL, "") for r in rooms])
            deficits = _reserve_deficits(trial, rooms, need)
            if deficits is not None:
                keyed = [(deficit, *key) for deficit, key in zip(deficits, keyed)]
    else:
        keyed = [(room.free.get(GPU, 0),) for room, _ in groups]
    streams = [_keyed(key, members) for key, (_, members) in zip(keyed, groups)]
    return (name for _, name in heapq.merge(*streams))


def _plain_order_by_kind(trial: _Trial, per_pod: dict[str, int]) -> Iterator[str]:
    """``_best_fit_order`` of a pod set without GPUs (fewest free GPUs, then least free CPU, then
    name), lazily: each kind of node looked at once (a Kueue scenario's thousand CPU nodes have a
    score of kinds, and sorting every node for every pod was most of admission's time)."""
    groups = _kind_groups(trial, "cpu", per_pod.get("cpu", 0))
    streams = [_keyed((room.free.get(GPU, 0), room.free.get("cpu", 0)), members) for room, members in groups]
    return (name for _, name in heapq.merge(*streams))


def _kind_groups(trial: _Trial, resource: str, need: int) -> list[tuple[NodeRoom, list[str]]]:
    """The root's kinds of node with ``need`` of ``resource`` free, as (room, names): the nodes a
    trial changed are kinds of their own."""
    kinds = trial.root.by_kind()
    changed: dict[str, NodeRoom] = {}
    level = trial
    while isinstance(level, _Trial):
        for name, room in level.changed.items():
            changed.setdefault(name, room)
        level = level.base
    groups: list[tuple[NodeRoom, list[str]]] = []
    for names in kinds.members.values():
        room = level[names[0]]  # (``level`` is the root now: the room the kind was filed from)
        if room.free.get(resource, 0) >= need:
            members = [n for n in names if n not in changed] if changed else names
            if members:
                groups.append((room, members))
    for name, room in changed.items():
        if room.free.get(resource, 0) >= need:
            groups.append((room, [name]))
    return groups


def _keyed(key: tuple, names: list[str]) -> Iterator[tuple[tuple, str]]:
    for name in names:
        yield key, name


def _best_fit_order(trial: _Trial, per_pod: dict[str, int], names: list[str]) -> list[str]:
    if per_pod.get(GPU, 0) > 0:
        need, changed, base = per_pod[GPU], trial.changed, trial.base
        if not changed and type(base) is Free and len(names) <= KINDS_FROM:  # (the common case, fast)
            by_gpu = [(g, n) for n in names if (g := base[n].free.get(GPU, 0)) >= need]
            by_gpu.sort()
            return [n for _, n in by_gpu]
        root = trial.root
        if isinstance(root, Free) and len(names) > 64:  # look only where a GPU may be free
            maybe = root.with_gpus()
            if len(names) == len(root):  # (names are always some of the root's nodes)
                names = maybe
            elif len(maybe) * 4 < len(names):
                allowed = set(names)
                names = [n for n in maybe if n in allowed]
        by_gpu = []
        for n in names:  # only the nodes with room for one pod's GPUs are sorted (most are full)
            room = changed.get(n) or base[n]
            g = room.free.get(GPU, 0)
            if g >= need:
                by_gpu.append((g, n))
        by_gpu.sort()
        return [n for _, n in by_gpu]
    need = per_pod.get("cpu", 0)
    rooms = ((trial[n].free, n) for n in names)
    return [n for *_, n in sorted((f.get(GPU, 0), f.get("cpu", 0), n) for f, n in rooms if f.get("cpu", 0) >= need)]


def _scored_order(trial: _Trial, per_pod: dict[str, int], names: list[str]) -> list[str]:
    """The nodes that fit one pod, by the fragmentation score (``scoring.py``); unscored shapes:
    ``names`` as they are."""
    shape = scoring.shape_of(per_pod.get("cpu", 0), per_pod.get("memory", 0), per_pod.get(GPU, 0))
    if shape is None:
        return names
    need = per_pod.get(GPU, 0)
    fitting, rooms = [], []
    for n in names:
        room = trial[n]
        if room.free.get(GPU, 0) >= need and _fits_one(room, per_pod, shape):
            fitting.append(n)
            rooms.append(room)
    if len(fitting) <= 1 or _all_alike(rooms):
        return fitting  # (nodes alike score alike: the best-fit order stands)
    ranked = scoring.order(trial.scorer, shape, [r.free.get("cpu", 0) for r in rooms],
                           [r.free.get("memory", 0) for r in rooms], [r.gpus for r in rooms], [r.labels for r in rooms])
    deficits = _reserve_deficits(trial, rooms, need)
    if deficits is not None:
        ranked.sort(key=deficits.__getitem__)  # (stable: by score within a deficit)
    return [fitting[i] for i in ranked]


def _reserve_deficits(trial: _Trial, rooms: list[NodeRoom], need: int) -> list[int] | None:
    """The model reserve (``Contract.model_reserve``), for GPU pods: how far one more pod of
    ``need`` GPU milli on each room would take its GPU model below what the model keeps free —
    its share of the mix's GPU demand that only it may take (``LiveScorer.shares``) times the
    GPUs the cluster has free after the pod (if the mix holds until the cluster is full, that is
    what the pods that may use only that model still ask). Free GPUs are counted on the capacity
    the trial started from (a gang's pods placed before this pod set aside). Candidates go in
    deficit order, the score's order within one: a pod that may use several models keeps off the
    scarce ones while another has room, where the score alone drew it to the model the fewest
    restricted pods may use (measured on the ``gpuspec`` traces: fewer pods failed early than
    FGD's). None: nothing kept (the contract predates the field, or no restricted demand)."""
    root = trial.root
    shares = trial.scorer.shares if getattr(root, "model_reserve", False) else None
    if not shares:
        return None
    free = _free_by_model(root)
    after = sum(free.values()) - need
    deficits = []
    for room in rooms:
        model = room.labels.get(GPU_MODEL_LABEL, "")
        demand, total = shares.get(model, (0, 1))
        deficits.append(max(0, demand * after // total - (free.get(model, 0) - need)))
    return deficits


def _free_by_model(free: Free) -> dict[str, int]:
    """Free GPU milli per GPU model ("": nodes without the label), each kind of node counted once
    when the nodes are filed by kind."""
    rooms = ((free[names[0]], len(names)) for names in free.by_kind().members.values()) if free.indexed \
        else ((room, 1) for room in free.values())
    out: dict[str, int] = {}
    for room, count in rooms:
        model = room.labels.get(GPU_MODEL_LABEL, "")
        out[model] = out.get(model, 0) + room.free.get(GPU, 0) * count
    return out


def _all_alike(rooms: list[NodeRoom]) -> bool:
    """Are the rooms all of one kind (``_kind``)? Compared as they are, stopping at the first other."""
    first = rooms[0]
    free, slots, model = first.free, first.gpus, first.labels.get(GPU_MODEL_LABEL, "")
    return all(r.free == free and r.gpus == slots and r.labels.get(GPU_MODEL_LABEL, "") == model for r in rooms)


def _fits_one(room: NodeRoom, per_pod: dict[str, int], shape: scoring.Shape) -> bool:
    if pods_that_fit(room.free, per_pod) < 1:
        return False
    if shape.milli < gpus.WHOLE:
        return max(room.gpus, default=0) >= shape.milli
    return room.gpus.count(gpus.WHOLE) >= shape.gpus


def _fit_on(room: NodeRoom, per_pod: dict[str, int], count: int) -> tuple[int, list[int]]:
    """How many of ``count`` pods fit the node (resources and GPU by GPU), and their GPU indexes."""
    n = min(count, pods_that_fit(room.free, per_pod))
    milli = per_pod.get(GPU, 0)
    if n <= 0 or not milli or not room.gpus:
        return n, []
    while n > 0:
        indexes = gpus.choose(room.gpus, room.islands, milli, n)
        if indexes is not None:
            return n, indexes
        n -= 1
    return 0, []


def _take(room: NodeRoom, per_pod: dict[str, int], n: int, indexes: list[int]) -> None:
    add_on_node(room.free, node_use(per_pod, n), -1)
    if indexes:
        gpus.apply(room.gpus, indexes, per_pod.get(GPU, 0))


def _in_one_island(trial: _Trial, ps: PodSet, names: list[str]) -> tuple[list[PodAssignment], str] | None:
    """Every pod on one node inside one NVLink island: the island with the least free that holds it."""
    milli = ps.resources.get(GPU, 0)
    best = None
    for name in names:
        room = trial[name]
        if not milli or not room.islands:
            continue
        for k, span in enumerate(gpus.island_ranges(room.islands, len(room.gpus))):
            room_in_island = sum(room.gpus[i] for i in span)
            if room_in_island < milli * ps.count or (best is not None and room_in_island >= best[0]):
                continue
            indexes = gpus.choose(room.gpus, room.islands, milli, ps.count, within=span)
            if indexes is not None:
                best = (room_in_island, name, k, indexes)
    if best is None:
        return None
    _, name, k, indexes = best
    _take(trial.writable(name), ps.resources, ps.count, indexes)
    return [PodAssignment(pod_set=ps.name, node=name, count=ps.count, gpus=indexes)], f" in NVLink island {k} of {name}"


def never_placeable(free: Free, pod_sets: list[PodSet], nodes: Container[str] | None, state: State) -> Reason | None:
    """Why no placement of the gang can ever exist on these nodes, whatever frees up (None: one may):
    a pod set requires (or slices by) a topology level that no candidate node carries
    (``topology_unsatisfiable``: the pod set, the level and the missing label), or no candidate node
    has its nodeSelector's labels and taints it tolerates (``no_matching_nodes``), or a pod set is
    too big for the candidate nodes with nothing running on them (``_too_big``)."""
    tainted = getattr(free, "tainted", False)
    if pod_sets and nodes is not None and not any(name in nodes for name in state.nodes):
        return reason(C.NO_MATCHING_NODES, pod_set=pod_sets[0].name,
                      missing="no node carries its flavor's node labels" + _unavailable_note(state))
    for ps in pod_sets:
        if ps.node_selector or ps.node_affinity or tainted:
            missing = _no_node_for(free, ps, nodes)
            if missing:
                return reason(C.NO_MATCHING_NODES, pod_set=ps.name, missing=missing)
        t = ps.topology
        if t is None:
            continue
        for field, level in (("required", t.required), ("slice-required", t.slice_required)):
            if level is None or (level == topology.HOSTNAME and not free.levels):  # (every node is one)
                continue
            # (lazily: the first node that carries the level settles it)
            candidates = ((n, room.labels, len(room.islands)) for n, room in free.items() if nodes is None or n in nodes)
            why = topology.missing_label(candidates, level, free.levels,
                                         "no node" if nodes is None else "no node of its flavor")
            if why is not None:
                return reason(C.TOPOLOGY_UNSATISFIABLE, pod_set=ps.name, request=field, level=level, missing=why)
    for ps in pod_sets:
        found = _too_big(state, free, ps, nodes)
        if found is not None:
            return found
    return None


def _too_big(state: State, free: Free, ps: PodSet, nodes: Container[str] | None) -> Reason | None:
    """Is the pod set too big for its candidate nodes even with nothing running on them? Counted pod
    by pod on each node's allocatable: all its pods on all the nodes, or in one domain of a required
    level, or in slices of a slice-required level. Necessary conditions only (None when they hold:
    a placement may still never exist). Remembered per node epoch (the nodes' labels, taints and
    allocatable), contract (its Topologies) and candidate set: a failing gang asks in every cycle."""
    key = (id(state.nodes), state.node_epoch, len(state.unavailable), id(state.contract), id(nodes), ps.count,
           tuple(sorted(ps.resources.items())), ps.topology, tuple(sorted(ps.node_selector.items())),
           tuple(ps.tolerations), repr(ps.node_affinity) if ps.node_affinity else ())  # (its terms hold lists)
    cached = _TOO_BIG.get(key)
    if cached is not None and cached[0] is state.nodes and cached[1] is state.contract and cached[2] is nodes:
        return cached[3]
    if len(_TOO_BIG) > 4096:
        _TOO_BIG.clear()
    found = _too_big_now(state, free, ps, nodes)
    _TOO_BIG[key] = (state.nodes, state.contract, nodes, found)
    return found


_TOO_BIG: dict[tuple, tuple] = {}


def _too_big_now(state: State, free: Free, ps: PodSet, nodes: Container[str] | None) -> Reason | None:
    checked = ps.node_selector or ps.node_affinity or getattr(free, "tainted", False)
    room = {}  # node → how many of the pod set's pods it holds when empty
    allowed = []  # the nodes it may use
    for name, node in state.nodes.items():
        if (nodes is None or name in nodes) and (not checked or admits(
                node.labels, node.taints, ps.node_selector, ps.tolerations, name, ps.node_affinity)):
            allowed.append(node)
            k = pods_that_fit(node.allocatable, ps.resources)
            if k > 0:
                room[name] = k
    t = ps.topology or TopologyRequest()
    if t.required and t.required != topology.ISLAND:
        groups = topology.domains(((n, state.nodes[n].labels) for n in room), t.required, free.levels)
        most, first = min(((-sum(room[n] for n in members), key) for key, members in groups.items()), default=(0, ()))
        if -most < ps.count:
            largest = f"the largest, {t.required}={first[-1]}, holds {-most}" if groups else "no node it may use is in one"
            return reason(C.TOPOLOGY_UNSATISFIABLE, pod_set=ps.name, request="required", level=t.required,
                          missing=f"no such domain holds its {ps.count} pods even with nothing running ({largest})")
    if t.required == topology.ISLAND:
        found = _no_island_holds(state, ps, room)
        if found is not None:
            return found
    if t.slice_required and t.slice_size and t.slice_required != topology.ISLAND:
        groups = topology.domains(((n, state.nodes[n].labels) for n in room), t.slice_required, free.levels)
        slices = sum(sum(room[n] for n in members) // t.slice_size for members in groups.values())
        if slices * t.slice_size < ps.count:
            return reason(C.TOPOLOGY_UNSATISFIABLE, pod_set=ps.name, request="slice-required", level=t.slice_required,
                          missing=f"its domains hold {slices} slices of {t.slice_size} pods even with nothing running, "
                                  f"and it needs {ps.count // t.slice_size}")
    total = sum(room.values())
    if total >= ps.count:
        return None
    if not state.nodes:  # (every node cordoned or not ready: the note below names them)
        missing = "no node takes new pods" if state.unavailable else "the cluster has no node yet (none reported to the log)"
    elif not total:  # (a flavor whose labels no node carries is said first: ``never_placeable``)
        missing = "no node it may use holds one of its pods even with nothing running" + _short_of(ps, allowed)
    else:
        missing = f"the nodes it may use hold {total} of its {ps.count} pods even with nothing running"
        bounded = [n.name for n in allowed if n.name in room and room[n.name] * MILLI == n.allocatable.get(PODS)]
        if bounded:  # (a node's pod count, not what the pods ask, is what stops them there)
            missing += (f", {_some(bounded)} held to {'its' if len(bounded) == 1 else 'their'} pods allocatable "
                        "(the kubelet's max-pods)")
    return reason(C.NO_MATCHING_NODES, pod_set=ps.name, missing=missing + _unavailable_note(state))


def _short_of(ps: PodSet, allowed: list) -> str:
    """Which of a pod's requests no node of ``allowed`` has as much of, with the most one has:
    ``" (a pod asks 40 cpu where the most a node has is 32)"``, '' when none alone is short."""
    short = []
    for resource, asked in sorted(ps.resources.items()):
        most = max((node.allocatable.get(resource, 0) for node in allowed), default=0)
        if asked > most:
            short.append(f"{format_resource(resource, asked)} where the most a node has is {format_amount(resource, most)}")
    return f" (a pod asks {', and '.join(short)})" if short else ""


def _unavailable_note(state: State) -> str:
    """The nodes that take nothing new now (cordoned, NotReady…), which may take it once they are back."""
    if not state.unavailable:
        return ""
    return ("; not counted while they take nothing new (back in service, they count again): "
            + _some([f"{node} {why}" for node, why in sorted(state.unavailable.items())]))


def _some(named: list[str]) -> str:
    """The first three of ``named`` and how many more: ``"a, b, c and 2 more"``."""
    return ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")


def _no_island_holds(state: State, ps: PodSet, room: dict[str, int]) -> Reason | None:
    """Is there no NVLink island, on a node that holds all the pod set's pods (``room``: pods per
    empty node), whose GPUs, all free, take every pod (``_in_one_island`` with nothing running)?"""
    milli = ps.resources.get(GPU, 0)
    largest: tuple[int, str] | None = None
    for name, pods in sorted(room.items()):
        node = state.nodes[name]
        if not milli or pods < ps.count or not node.islands:
            continue
        empty = [gpus.WHOLE] * len(node.gpus)
        for span in gpus.island_ranges(node.islands, len(empty)):
            if gpus.choose(empty, node.islands, milli, ps.count, within=span) is not None:
                return None
            if largest is None or len(span) > largest[0]:
                largest = (len(span), name)
    if not milli:
        missing = "it asks for no GPU"
    elif largest is None:
        missing = "no node it may use both has NVLink islands and holds its pods"
    else:
        pods = f"{ps.count} pods" if ps.count != 1 else "pod"
        missing = (f"no island takes its {pods} of {format_resource(GPU, milli)} even with nothing running "
                   f"(the largest, on {largest[1]}, has {largest[0]} GPUs)")
    return reason(C.TOPOLOGY_UNSATISFIABLE, pod_set=ps.name, request="required", level=topology.ISLAND, missing=missing)


def _labelled(free: Free, ps: PodSet, names: list[str]) -> list[str]:
    """The nodes among ``names`` with the pod set's nodeSelector labels and required node affinity."""
    return [n for n in names if admits(free[n].labels, [], ps.node_selector, [], n, ps.node_affinity)]


def _wanted(ps: PodSet) -> str:
    """What the pod set asks of a node's labels, in words ("the labels a=b and its required node affinity")."""
    wanted = [f"the labels {', '.join(f'{k}={v}' for k, v in sorted(ps.node_selector.items()))}"] \
        if ps.node_selector else []
    wanted += ["its required node affinity"] if ps.node_affinity else []
    return " and ".join(wanted)


def _no_node_for(free: Free, ps: PodSet, nodes: Container[str] | None) -> str:
    """Why no candidate node may take the pod set's pods ('' when one may)."""
    names = [n for n in _names(free) if nodes is None or n in nodes]
    labelled = _labelled(free, ps, names)
    if not labelled:
        # Nodes outside the flavor may have them: then it is the flavor's nodes that lack them.
        anywhere = nodes is not None and _labelled(free, ps, [n for n in _names(free) if n not in nodes])
        return f"no node{' of its flavor' if anywhere else ''} has {_wanted(ps)}"
    if any(admits(free[n].labels, free[n].taints, ps.node_selector, ps.tolerations, n, ps.node_affinity)
           for n in labelled):
        return ""
    taints = sorted({str(t) for n in labelled
                     for t in free[n].taints if not any(tol.tolerates(t) for tol in ps.tolerations)})
    return f"every node it may use has a taint it does not tolerate ({', '.join(taints[:3])})"


def no_node_of_queue(free: Free, pod_sets: list[PodSet], queue: str, flavors: list[str], nodes: Container[str] | None,
                     other_flavors: Mapping[str, Container[str]]) -> Reason | None:
    """``no_matching_nodes`` when no node any flavor assignment of the queue may use (``nodes``, the
    nodes of its ``flavors``; None: every node) has a pod set's labels, but nodes outside them do: the
    sentence names the queue's flavors and the flavors (``other_flavors``: flavor → its nodes) those
    nodes belong to, which the queue does not list. None when that is not why."""
    if nodes is None:
        return None
    names = _names(free)
    for ps in pod_sets:
        if not (ps.node_selector or ps.node_affinity) or _labelled(free, ps, [n for n in names if n in nodes]):
            continue
        elsewhere = _labelled(free, ps, [n for n in names if n not in nodes])
        if not elsewhere:
            continue
        theirs = sorted(f for f, members in other_flavors.items() if f not in flavors and any(n in members for n in elsewhere))
        have = "has" if len(elsewhere) == 1 else "have"
        where = (f"in flavor{'s' if len(theirs) > 1 else ''} {', '.join(theirs)}, which {queue} does not list" if theirs
                 else f"in no flavor {queue} lists")
        return reason(C.NO_MATCHING_NODES, pod_set=ps.name,
                      missing=f"no node of {queue}'s flavor{'s' if len(flavors) > 1 else ''} ({', '.join(flavors)}) "
                              f"has {_wanted(ps)}; {_some(elsewhere)} {have} them, {where}")
    return None


def release_nodes(free: Free, wl: WorkloadState) -> None:
    """Give a workload's node resources (and GPUs) back in ``free``."""
    for node, used, indexes, milli in node_holdings(wl):
        if node not in free:
            continue
        room = free.own(node)
        add_on_node(room.free, used)
        if indexes and room.gpus:
            gpus.apply(room.gpus, [i for i in indexes if i < len(room.gpus)], milli, +1)


#: Expected runtime of a workload that declares none (for reservations and ETAs).
ASSUMED_RUNTIME_MS = 3_600_000


def expected_ends(state: State) -> list[tuple[int, WorkloadState]]:
    """Workloads holding nodes, by the time they are expected to release them."""
    ends = sorted((expected_end(state, wl), name, wl) for name, wl in
                  ((name, state.workloads[name]) for name in state.active) if wl.placement is not None)
    return [(end, wl) for end, _, wl in ends]


def expected_end(state: State, wl: WorkloadState) -> int:
    """When an admitted workload is expected to be gone: its grace period after its eviction, or
    its declared runtime (``ASSUMED_RUNTIME_MS`` without one) from its start, or from now when not
    running yet; never before now."""
    if wl.phase == "evicting" and wl.eviction is not None:
        end = (wl.eviction_ms or state.time_ms) + wl.eviction.grace_ms
    else:
        begun = wl.started_ms if wl.started_ms is not None else state.time_ms
        end = begun + (wl.spec.runtime_ms if wl.spec.runtime_ms is not None else ASSUMED_RUNTIME_MS)
    return max(end, state.time_ms)


def room_at_start(state: State, free: Free, pod_sets: list[PodSet], nodes: Container[str] | None,
                  ends: list[tuple[int, WorkloadState]] | None = None) -> tuple[int, Free, list[str]] | None:
    """When and where a gang blocked by capacity could start: running workloads are released in
    the order they are expected to end (``ends``, by default ``expected_ends``) until it fits.
    Returns (expected start, the room then with the gang in it, the nodes it takes), or None when
    it would not fit even then."""
    later = copy_free(free)
    start = state.time_ms
    for end, victim in expected_ends(state) if ends is None else ends:
        if place_gang(copy_free(later), pod_sets, nodes=nodes) is not None:
            break
        release_nodes(later, victim)
        start = max(start, end)
    assignments = place_gang(later, pod_sets, nodes=nodes)
    if assignments is None:
        return None
    return start, later, sorted({a.node for a in assignments})


def victims_in_flight(state: State) -> dict[str, list[WorkloadState]]:
    """Preemptor → its victims that were ordered out and have not exited yet."""
    waiting: dict[str, list[WorkloadState]] = {}
    for name in state.leaving:
        wl = state.workloads[name]
        if wl.eviction is not None:
            waiting.setdefault(wl.eviction.preemptor, []).append(wl)
    return waiting


def reserve_room(free: Free, pod_sets: list[PodSet], victims: list[WorkloadState], state: State,
                 unplaced: list[WorkloadState] = ()) -> None:
    """Keep the room a preemptor will have once its victims are gone out of ``free``.

    Each node keeps the smaller of what is free now and what will be free once the victims left
    and the preemptor came in (resource by resource, GPU by GPU): whoever is placed meanwhile fits
    now and never takes that room. The victims defragmentation moves (``moving``) are placed again
    after the preemptor, as their move was planned: their room is kept too. ``unplaced``: gangs
    admitted and not yet placed, which ``free`` does not hold yet: the preemptor's room is found
    where they leave it (as admission's snapshot finds it), not in room they will take.
    """
    later = copy_free(free)
    for victim in victims:
        release_nodes(later, victim)
    if unplaced:
        view = copy_free(later)
        place_admitted(view, state, unplaced)
        placed = place_gang(view, pod_sets)
        if placed is None:
            return
        take_assignments(later, pod_sets, placed)
    elif place_gang(later, pod_sets) is None:
        return
    place_again(later, state, moving(state, victims))
    keep_smaller(free, later)


def place_admitted(free: Free, state: State, admitted: Iterable[WorkloadState]) -> bool:
    """Place each workload of ``admitted`` on ``free`` (which changes) as it was admitted, in turn:
    does every one find a whole placement?"""
    idx = index_of(state.contract)
    for wl in admitted:
        pod_sets = idx.flavored(admitted_pod_sets(wl.spec.pod_sets, wl.admission.counts), wl.admission.flavors)
        if place_gang(free, pod_sets, nodes=idx.nodes_of(wl.admission.flavors, state)) is None:
            return False
    return True


def place_again(free: Free, state: State, moved: list[WorkloadState]) -> bool:
    """Place each workload of ``moved`` again on ``free`` (which changes) as it was admitted, biggest
    first: does every one find a whole placement?"""
    return place_admitted(free, state, sorted(moved, key=lambda wl: -wl.request.get(GPU, 0)))


def moving(state: State, victims: list[WorkloadState]) -> list[WorkloadState]:
    """The victims defragmentation ordered out to be placed again at once (``fold.is_move``)."""
    return [v for v in victims if is_move(state.contract, v.eviction)]


def keep_smaller(free: Free, other: Free, names=None) -> None:
    """Each node of ``free`` (of ``names``, when given) keeps the smaller of its room and ``other``'s,
    resource by resource and GPU by GPU."""
    for name in list(free) if names is None else names:
        now, then = free[name], other[name]
        if now is then or (all(resource in now.free and now.free[resource] <= amount for resource, amount in then.free.items())
                           and all(a <= b for a, b in zip(now.gpus, then.gpus))):
            continue  # already no larger: nothing to change (the room stays shared)
        now = free.own(name)
        for resource, amount in then.free.items():
            now.free[resource] = min(now.free.get(resource, 0), amount)
        now.gpus[:] = [min(a, b) for a, b in zip(now.gpus, then.gpus)]


def take_assignments(free: Free, pod_sets: list[PodSet], assignments: list[PodAssignment]) -> None:
    """Take pods placed elsewhere (same nodes, same GPUs) out of ``free`` too."""
    gpu_per_pod = {ps.name: ps.resources.get(GPU, 0) for ps in pod_sets}
    for (node, used), a in zip(assignment_use(pod_sets, assignments), assignments):
        if node not in free:
            continue
        room = free.own(node)
        add_on_node(room.free, used, -1)
        if a.gpus and room.gpus:
            gpus.apply(room.gpus, [i for i in a.gpus if i < len(room.gpus)], gpu_per_pod[a.pod_set], -1)


def decide_placement(state: State) -> list[PlacementDecided]:
    """Place admitted workloads in admission order; one that does not fit waits, whole.

    The room a preemptor waits for (its victims are leaving) is kept for it, as admission does.
    """
    return list(placements(state))


def placements(state: State) -> Iterator[PlacementDecided]:
    """``decide_placement``'s decisions one by one, lazily (a caller may stop early)."""
    if not state.unplaced:
        return
    placer = Placer(state)
    made = 0
    for name in state.unplaced:
        decided = placer.place(state.workloads[name])
        if decided is None:
            continue
        yield decided
        made += 1
        if made >= PLACEMENTS_PER_CYCLE_MAX:
            break


class Placer:
    """Placement's cycle, one gang at a time: free capacity scored, the room of waiting preemptors
    kept, each placement taken before the next. Admission uses one too, to place each gang it admits
    in the same cycle (``PlacementDecided.with_admission``): after the gangs already admitted and
    not yet placed, which the placement service would place first."""

    def __init__(self, state: State, admitted: Container[str] = ()):
        """``admitted``: workloads admitted in the cycle this placer follows (a preemptor among
        them is placed like any admitted gang; no room is kept for it any more)."""
        self.state = state
        self.free = free_capacity(state)
        idx = index_of(state.contract)
        waiting = victims_in_flight(state)
        # (the gangs admitted before and not yet placed: this placer places them first, as
        # admission's snapshot does — Contract.preemptor_room_after_admitted)
        unplaced = [state.workloads[name] for name in state.unplaced] \
            if waiting and state.contract.preemptor_room_after_admitted else []
        for preemptor, victims in sorted(waiting.items()):
            wl = state.workloads.get(preemptor)
            if wl is not None and wl.phase == "pending" and preemptor not in admitted:
                # Its room is kept in the flavors its victims were ordered out for (records written
                # before they were named: its queue's first ones).
                flavors = wl.nominated_flavors or idx.default_flavors(wl.spec.cluster_queue, idx.asked(wl))
                reserve_room(self.free, idx.flavored(wl.spec.pod_sets, flavors), victims, state, unplaced)
        self.measure = _Measure(state)
        #: Rooms kept for gangs blocked by capacity (``KeptRoom``, named by admissions): the room
        #: each will have at its start with it in, and the nodes it takes (None: it would not fit).
        self.kept: dict[tuple, tuple[Free, list[str]] | None] = {}
        self._ends: list[tuple[int, WorkloadState]] | None = None

    def place(self, wl: WorkloadState, admission: WorkloadAdmitted | None = None,
              with_admission: bool = False) -> PlacementDecided | None:
        """Place ``wl``'s admitted pod sets on its flavors' nodes, as ``admission`` (by default the
        one in force; admission passes the one its cycle just decided) admitted them: leaving alone
        the room kept for another gang when it was admitted (``WorkloadAdmitted.kept``); a hand-over
        (``WorkloadAdmitted.after``) may also use what the work it takes over holds."""
        admission = admission or wl.admission
        idx = index_of(self.state.contract)
        pod_sets = idx.flavored(admitted_pod_sets(wl.spec.pod_sets, admission.counts), admission.flavors)
        kept = self._kept(admission.kept, idx) if admission.kept is not None else None
        taken_over = [self.state.workloads[n] for n in admission.after if n in self.state.active]
        if kept is None and not taken_over:
            placed = _place_gang(self.free, pod_sets, idx.nodes_of(admission.flavors, self.state))
        else:
            room = copy_free(self.free)
            for other in taken_over:  # a hand-over: on the room the work it takes over leaves too
                release_nodes(room, other)
            if kept is not None:
                keep_smaller(room, kept[0], kept[1])
            placed = _place_gang(room, pod_sets, idx.nodes_of(admission.flavors, self.state))
            if placed is not None:  # taken now (beside the work taken over, as the fold takes it)
                take_assignments(self.free, pod_sets, placed[0])
                if kept is not None:  # it stays past the gang's start: out of the room then, too
                    take_assignments(kept[0], pod_sets, placed[0])
        if placed is None:
            return None
        assignments, notes = placed
        return PlacementDecided(
            workload=wl.spec.workload, assignments=assignments, based_on=self.state.offset,
            **said(_reason(assignments, notes)), fragmentation=self.measure.after(wl.spec.pod_sets, assignments),
            with_admission=with_admission)

    def _kept(self, kept: KeptRoom, idx) -> tuple[Free, list[str]] | None:
        """The room at its start of the gang ``kept`` is held for, with it in, and its nodes (as
        admission's snapshot found them: ``room_at_start``), on this cycle's free capacity the
        first time it is asked; None once the gang is no longer pending (admitted: its own
        placement takes the room) or when it would not fit. It tries the nodes admission kept
        first, then any of its flavors' (admission chose among placements by best fit alone)."""
        key = (kept.workload, kept.start_ms, tuple(kept.nodes))
        if key in self.kept:
            return self.kept[key]
        gang = self.state.workloads.get(kept.workload)
        found = None
        if gang is not None and gang.phase == "pending":
            if self._ends is None:
                self._ends = expected_ends(self.state)
            pod_sets = idx.flavored(gang.spec.pod_sets, kept.flavors)
            found = (room_at_start(self.state, self.free, pod_sets, frozenset(kept.nodes), self._ends)
                     or room_at_start(self.state, self.free, pod_sets, idx.nodes_of(kept.flavors, self.state), self._ends))
        self.kept[key] = None if found is None else (found[1], found[2])
        return self.kept[key]


class _Measure:
    """The state's fragmentation index, updated placement by placement through one cycle."""

    def __init__(self, state: State):
        self.nodes = state.nodes
        index = state.free_index
        self.index = freeindex.FreeIndex(dict(index.islands), dict(index.nodes), dict(index.domains))
        self.gpus: dict[str, list[int]] = {}

    def after(self, pod_sets: list[PodSet], assignments: list[PodAssignment]) -> Fragmentation:
        milli = {ps.name: ps.resources.get(GPU, 0) for ps in pod_sets}
        for a in assignments:
            if not a.gpus:
                continue
            node = self.nodes[a.node]
            now = self.gpus.setdefault(a.node, list(node.gpus))
            freeindex.change(self.index, now, node.islands, node.labels, -1)
            gpus.apply(now, a.gpus, milli[a.pod_set])
            freeindex.change(self.index, now, node.islands, node.labels, +1)
        return freeindex.measure(self.index)


def _reason(assignments: list[PodAssignment], notes: list[str]) -> Reason:
    nodes = sorted({a.node for a in assignments})
    return reason(C.BEST_FIT, node_count=len(nodes), nodes=f"{', '.join(nodes[:8])}{' …' if len(nodes) > 8 else ''}",
                  domains="; ".join(notes) if notes else None)
