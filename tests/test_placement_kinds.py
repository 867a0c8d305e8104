"""Property: on big clusters placement orders pods by kind of node (``_Kinds``), and lands
exactly where walking every node would.

Random clusters of more than ``KINDS_FROM`` nodes (GPU counts, NVLink islands, CPU, GPU models),
partly filled by earlier gangs, with or without the fragmentation scorer; random gangs of pod
sets (whole or shared GPUs or none, CPU, several pods, several pod sets). Each gang is placed twice on
copies of one ``Free`` — by kind, and node by node (the threshold raised past the cluster) — and
the assignments, and the room left, must be the same; then the next gang goes on.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangway.events import catalogue as ev
from gangway.events.fold import apply
from gangway.events.state import GPU_MODEL_LABEL, State
from gangway.services.placement import policy
from gangway.services.placement.policy import copy_free, free_capacity, place_gang, release_nodes
from gangway.services.placement.scoring import scorer_of

GPU = "nvidia.com/gpu"


@st.composite
def clusters(draw):
    count = draw(st.integers(policy.KINDS_FROM + 1, policy.KINDS_FROM + 40))
    state = State()
    for i in range(count):
        gpus = draw(st.sampled_from((0, 4, 8, 8, 8)))
        islands = draw(st.sampled_from(([], [4, 4]) if gpus == 8 else ([],)))
        labels = {GPU_MODEL_LABEL: draw(st.sampled_from(("a100", "h100")))} if draw(st.booleans()) else {}
        # (some nodes say how many pods they take: the count makes kinds of nodes otherwise alike)
        pods = draw(st.sampled_from(({}, {}, {"pods": 3000}, {"pods": 110_000})))
        node = ev.NodeObserved(node=f"n{i:03d}", allocatable={GPU: gpus * 1000, "cpu": draw(st.sampled_from((16, 96))) * 1000,
                                                               **pods},
                               labels=labels, islands=islands)
        apply(state, ev.Envelope(id=f"node/{i}", source="test", time_ms=0, data=node, offset=i))
    return state


@st.composite
def gangs(draw):
    sets = []
    for k in range(draw(st.integers(1, 2))):
        gpu = draw(st.sampled_from((0, 250, 500, 1000, 2000, 4000, 8000)))
        cpu = draw(st.sampled_from((1000, 4000, 12_000, 16_000)))
        sets.append(ev.PodSet(name=f"p{k}", count=draw(st.integers(1, 5)),
                              resources={GPU: gpu, "cpu": cpu} if gpu else {"cpu": cpu}))
    return sets


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                                  HealthCheck.data_too_large])
@given(clusters(), st.lists(gangs(), min_size=1, max_size=12), st.booleans(), st.data())
def test_placing_by_kind_lands_where_walking_every_node_does(state, gang_list, scored, data):
    by_kind = free_capacity(state, scored=False)
    if scored:
        by_kind.scorer = scorer_of({"4000/0/1000": 5000, "1000/0/2000": 2000, "12000/0/8000": 1000, "1000/0/500": 700})
    placed = []
    for pod_sets in gang_list:
        walked = copy_free(by_kind)
        got = place_gang(by_kind, pod_sets)
        saved = policy.KINDS_FROM
        policy.KINDS_FROM = 10**9
        try:
            expected = place_gang(walked, pod_sets)
        finally:
            policy.KINDS_FROM = saved
        assert got == expected
        assert dict(by_kind) == dict(walked)
        if got is not None:
            placed.append((pod_sets, got))
        if placed and data.draw(st.booleans()):  # room comes back too (a finished gang)
            pod_sets, assignments = placed.pop(0)
            wl = _held(pod_sets, assignments)
            release_nodes(by_kind, wl)
    assert by_kind.kinds is not None  # the kind index was used


def _held(pod_sets, assignments):
    """A placed workload holding ``assignments`` (what ``release_nodes`` gives back)."""
    from gangway.events.state import WorkloadState
    spec = ev.WorkloadQueued(workload="w", namespace="ns", queue="q", cluster_queue="cq", priority_class=None,
                             priority=0, kind="Job", runtime_ms=None, pod_sets=pod_sets)
    return WorkloadState(spec=spec, phase="running", seq=0, queued_ms=0,
                         placement=ev.PlacementDecided(workload="w", assignments=assignments, based_on=0),
                         placement_gpus=[list(a.gpus) for a in assignments])


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                                  HealthCheck.data_too_large])
@given(clusters(), st.lists(gangs(), min_size=1, max_size=10), st.data())
def test_the_kind_index_kept_from_cycle_to_cycle_is_the_one_built_afresh(state, gang_list, data):
    """The kind index of the state's rooms is kept from one cycle to the next (``_state_kinds``)
    while the fold takes and gives back room on the nodes in place; a cycle that placed a gang
    before it first asked for the index files that gang's nodes. Each cycle's index must be the
    one built from scratch on its rooms."""
    held = []
    for pod_sets in gang_list:
        free = free_capacity(state, scored=False)
        if data.draw(st.booleans()):  # a trial placement before the index is asked for
            saved, policy.KINDS_FROM = policy.KINDS_FROM, 10**9
            try:
                place_gang(free, pod_sets)
            finally:
                policy.KINDS_FROM = saved
            assert free.kinds is None
        kinds, fresh = free.by_kind(), policy._Kinds(free)
        assert kinds.members == fresh.members and kinds.kind_of == fresh.kind_of
        got = place_gang(free_capacity(state, scored=False), pod_sets)
        if got is not None:  # the fold takes the gang's room on the state's nodes
            _fold_room(state, pod_sets, got, -1)
            held.append((pod_sets, got))
        if held and data.draw(st.booleans()):  # an earlier gang finishes: its room comes back
            _fold_room(state, *held.pop(0), +1)


def _fold_room(state, pod_sets, assignments, sign):
    """Take (-1) or give back (+1) a placed gang's room on the state's nodes, in place, as the fold does."""
    from gangway.events import gpus
    from gangway.events.resources import add_into, assignment_use
    milli = {ps.name: ps.resources.get(GPU, 0) for ps in pod_sets}
    for a, (name, used) in zip(assignments, assignment_use(pod_sets, assignments)):
        add_into(state.nodes[name].free, used, sign)
        if a.gpus:
            gpus.apply(state.nodes[name].gpus, list(a.gpus), milli[a.pod_set], sign)
