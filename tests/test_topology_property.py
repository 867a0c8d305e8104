"""Property: a gang that fits an empty cluster under its topology request is placed on it.

Random clusters (GPUs, CPUs, NVLink islands, random subsets of block / rack / zone labels), with or
without a Kueue Topology over a random order of those labels, and random single-pod-set gangs
asking for nothing, a required or preferred level, slices, or one NVLink island, with or without
preferred node affinity (which only orders: the contract's ``preferred_domains`` on or off). The oracle below
restates the rules (``services/placement/topology.py``) from scratch: node capacity in pods, the
domains of each level, and what "fits" means for each kind of request. Placement must succeed
exactly when the oracle says the gang fits, land inside one domain when one is required, and
``never_placeable`` may only speak for gangs that do not fit.
"""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from builders import cluster_queue, config_event, contract, node
from gangway.events import catalogue as ev
from gangway.events.contract import ResourceFlavor, Topology
from gangway.events.fold import apply
from gangway.events.freeindex import BLOCK, RACK
from gangway.events.resources import GPU
from gangway.events.state import State
from gangway.services.placement.policy import free_capacity, never_placeable, place_gang
from gangway.services.placement.topology import HOSTNAME, ISLAND

ZONE = "example.com/zone"
KEYS = (BLOCK, RACK, ZONE)
LEVELS = (*KEYS, HOSTNAME)
LAYOUTS = {0: [[]], 4: [[], [4], [2, 2]], 8: [[], [8], [4, 4], [2, 2, 4]]}


@st.composite
def clusters(draw):
    nodes = []
    for i in range(draw(st.integers(1, 9))):
        gpus = draw(st.sampled_from((0, 4, 8, 8)))
        labels = {k: draw(st.sampled_from("ab")) for k in KEYS if draw(st.booleans())}
        max_pods = draw(st.sampled_from((None, None, 2, 4)))  # (the kubelet's max-pods; None: any number)
        nodes.append((f"n{i}", gpus, draw(st.sampled_from((8, 32, 96))), draw(st.sampled_from(LAYOUTS[gpus])), labels,
                      max_pods))
    topology = None
    if draw(st.booleans()):
        order = draw(st.permutations(KEYS))[: draw(st.integers(1, 3))]
        topology = (*order, HOSTNAME) if draw(st.booleans()) else tuple(order)
    return nodes, topology


@st.composite
def gangs(draw):
    count = draw(st.integers(1, 6))
    gpu = draw(st.sampled_from((500, 1000, 2000, 4000, 8000)))
    cpu = draw(st.sampled_from((1000, 4000)))
    kind = draw(st.sampled_from(("none", "required", "preferred", "slices", "island")))
    level = draw(st.sampled_from(LEVELS))
    topology = None
    if kind in ("required", "preferred"):
        topology = ev.TopologyRequest(**{kind: level})
    elif kind == "slices":
        size = draw(st.sampled_from([d for d in range(1, count + 1) if count % d == 0]))
        outer = {draw(st.sampled_from(("required", "preferred"))): draw(st.sampled_from(LEVELS))}
        topology = ev.TopologyRequest(**outer, slice_required=level, slice_size=size)
    elif kind == "island":
        topology = ev.TopologyRequest(required=ISLAND)
    # preferred node affinity (some label's value weighed) orders nodes and, under the contract's
    # preferred_domains, domains: it never changes whether the gang is placed
    preferred = [ev.PreferredSchedulingTerm(weight=draw(st.integers(1, 100)), preference=ev.NodeSelectorTerm(
        match_expressions=[ev.NodeSelectorRequirement(key=draw(st.sampled_from(KEYS)), operator="In",
                                                      values=[draw(st.sampled_from("ab"))])]))
                 for _ in range(draw(st.integers(0, 2)))]
    return ev.PodSet(name="main", count=count, resources={GPU: gpu, "cpu": cpu}, topology=topology,
                     preferred_affinity=preferred)


# --- the oracle -------------------------------------------------------------------------------


def capacity(n, ps: ev.PodSet) -> int:
    """Pods of ``ps`` an empty node holds (whole GPUs may span islands)."""
    _, gpus, cpus, _, _, max_pods = n
    gpu = ps.resources[GPU]
    by_gpu = gpus // (gpu // 1000) if gpu >= 1000 else gpus * (1000 // gpu)
    return min(by_gpu, cpus * 1000 // ps.resources["cpu"], by_gpu if max_pods is None else max_pods)


def domain(n, level: str, topology) -> tuple | None:
    name, _, _, _, labels, _ = n
    if topology is not None and level not in topology:  # (Kueue: "no requested topology level")
        return None
    if level == HOSTNAME:
        return (name,)
    if topology is not None:
        keys = [k for k in topology[: topology.index(level) + 1] if k != HOSTNAME]
        return tuple(labels[k] for k in keys) if all(k in labels for k in keys) else None
    if level not in labels:
        return None
    return (labels.get(BLOCK, ""), labels[RACK]) if level == RACK else (labels[level],)


def groups(nodes, level, topology) -> list[list]:
    out: dict = {}
    for n in nodes:
        key = domain(n, level, topology)
        if key is not None:
            out.setdefault(key, []).append(n)
    return list(out.values())


def slices_fit(nodes, ps, topology) -> bool:
    t = ps.topology
    if t is None or t.slice_required is None:
        return sum(capacity(n, ps) for n in nodes) >= ps.count
    rooms = (sum(capacity(n, ps) for n in g) for g in groups(nodes, t.slice_required, topology))
    return sum(room // t.slice_size for room in rooms) >= ps.count // t.slice_size


def fits_empty(nodes, ps: ev.PodSet, topology) -> bool:
    t = ps.topology
    if t is not None and t.required == ISLAND:
        gpu = ps.resources[GPU]
        per_gpu = 1000 // gpu if gpu < 1000 else None
        return any(capacity(n, ps) >= ps.count and any(
            (size * per_gpu if per_gpu else size // (gpu // 1000)) >= ps.count for size in n[3]) for n in nodes)
    if t is not None and t.required is not None:
        return any(slices_fit(g, ps, topology) for g in groups(nodes, t.required, topology))
    return slices_fit(nodes, ps, topology)  # nothing asked, or preferred: anywhere is the last resort


# --- the property -----------------------------------------------------------------------------


def empty_state(nodes, topology, preferred_domains: bool = True) -> State:
    state = State()
    c = msgspec.structs.replace(contract(cluster_queue("q").gpus(1000).cpu(10_000)).obj(),
                                preferred_domains=preferred_domains)
    if topology is not None:
        c = c.__class__(**{f: getattr(c, f) for f in c.__struct_fields__ if f not in ("flavors", "topologies")},
                        flavors=[ResourceFlavor(name=f.name, topology_name="t") for f in c.flavors],
                        topologies=[Topology(name="t", levels=list(topology))])
    events = [config_event(c)]
    for name, gpus, cpus, islands, labels, max_pods in nodes:
        b = node(name).gpus(gpus).cpu(cpus).memory_gi(256).islands(*islands)
        for k, v in labels.items():
            b.label(k, v)
        obj = b.obj()
        if max_pods is not None:
            obj = msgspec.structs.replace(obj, allocatable={**obj.allocatable, "pods": max_pods * 1000})
        events.append(obj)
    for i, data in enumerate(events):
        apply(state, ev.Envelope(id=f"e{i}", source="test", time_ms=1_000 + i, data=data, offset=i))
    return state


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), gangs(), st.booleans())
def test_a_gang_that_fits_the_empty_cluster_under_its_request_is_placed(cluster, ps, preferred_domains):
    nodes, topology = cluster
    free = free_capacity(empty_state(nodes, topology, preferred_domains))
    expected = fits_empty(nodes, ps, topology)
    placed = place_gang(free, [ps])
    kind = "none" if ps.topology is None else "island" if ps.topology.required == ISLAND else \
        "slices" if ps.topology.slice_required else "required" if ps.topology.required else "preferred"
    event(f"{kind}: {'placed' if expected else 'does not fit'}")
    assert (placed is not None) == expected, (nodes, topology, ps)
    if placed is not None:
        assert sum(a.count for a in placed) == ps.count
        t = ps.topology
        if t is not None and t.required is not None and t.required != ISLAND:
            where = {domain(next(n for n in nodes if n[0] == a.node), t.required, topology) for a in placed}
            assert len(where) == 1 and None not in where
        if t is not None and t.required == ISLAND:
            assert len({a.node for a in placed}) == 1
    else:
        state = empty_state(nodes, topology)
        why = never_placeable(free_capacity(state), [ps], None, state)
        # Never placeable is a claim about every future: it must at least hold on the empty cluster.
        assert why is None or not expected
        event("never placeable" if why else "placeable later")
