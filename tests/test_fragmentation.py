"""Fragmentation scoring and the offline FGD simulator: the measure, the choices it makes, a smoke run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangway.benchmarks import fragmentation as fgd
from gangway.events.state import (
    GPU_MODEL_LABEL, POD_SHAPE_UNIT, POD_SHAPES_HALF_LIFE_MS, State, count_pod_shape, pod_shape_counts, pod_shape_key,
)
from gangway.services.placement.fragmentation import (
    WEIGHT_UNIT, WHOLE, Nodes, Shape, ShapeMix, ShapeTable, fragmentation, stranded,
)

ANY = np.ones((1, 3), dtype=bool)  # spec 0: any of models 0 (none), 1, 2
ONLY_MODEL_2 = np.array([[True, True, True], [False, False, True]])
#: The small reference subset shipped with the tests (its README says where it comes from).
REFERENCE = Path(__file__).parent / "data" / "reference"


def one_node(gpus: list[int], cpu: int = 64_000, memory: int = 256_000, model: int = 1) -> Nodes:
    return Nodes(np.array([cpu]), np.array([memory]), np.array([gpus]), np.array([model]))


FRAGMENTATION_CASES = [
    ("a sharing shape cannot use GPUs with less free than it asks",
     one_node([1000, 300, 600, 0]), Shape(4000, 1000, 1, 500), ANY, 300),
    ("a whole-GPU shape cannot use partly used GPUs",
     one_node([1000, 300, 600, 0]), Shape(4000, 1000, 1, WHOLE), ANY, 900),
    ("a shape asking more whole GPUs than are free wastes every free GPU",
     one_node([1000, 300, 600, 0]), Shape(4000, 1000, 2, WHOLE), ANY, 1900),
    ("a shape that does not fit the node's CPU wastes every free GPU",
     one_node([1000, 300, 600, 0], cpu=2000), Shape(4000, 1000, 1, 200), ANY, 1900),
    ("a shape that does not fit the node's memory wastes every free GPU",
     one_node([1000, 1000], memory=500), Shape(4000, 1000, 1, WHOLE), ANY, 2000),
    ("a GPU model the shape may not use wastes every free GPU",
     one_node([1000, 1000], model=1), Shape(0, 0, 1, WHOLE, spec=1), ONLY_MODEL_2, 2000),
    ("a GPU model the shape may use is usable",
     one_node([1000, 1000], model=2), Shape(0, 0, 1, WHOLE, spec=1), ONLY_MODEL_2, 0),
    ("a CPU-only shape counts no fragmentation",
     one_node([1000, 300], cpu=0), Shape(4000, 1000, 0, 0), ANY, 0),
]


@pytest.mark.parametrize("nodes,shape,specs,expected", [c[1:] for c in FRAGMENTATION_CASES],
                         ids=[c[0] for c in FRAGMENTATION_CASES])
def test_fragmentation_of_one_node_for_one_shape(nodes, shape, specs, expected):
    assert fragmentation(nodes, ShapeTable.of([shape], specs))[0, 0] == expected


def test_stranded_capacity_is_what_free_cpu_or_memory_cannot_accompany():
    # The mix asks 10 cores per GPU (10_000 cpu milli per 1000 GPU milli) and 1 GiB per GPU.
    nodes = Nodes(np.array([80_000, 10_000]), np.array([10**6, 10**6]),
                  np.array([[1000] * 8, [1000] * 4 + [0] * 4]), np.array([1, 1]))
    assert list(stranded(nodes, (10_000, 1000), (1, 1000))) == [0, 3000]


def tiny_cluster(tmp_path: Path, rows: list[str]) -> fgd.Cluster:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "\n".join(rows) + "\n")
    return fgd.load_cluster(path)


def place_all(cluster: fgd.Cluster, shapes: list[Shape], policy: str = "gangway") -> tuple[fgd.Simulator, list[int]]:
    sim = fgd.Simulator(cluster, policy)
    return sim, [sim.place(s) for s in shapes]


def test_a_sharing_pod_joins_an_already_shared_gpu_instead_of_breaking_a_whole_one(tmp_path):
    cluster = tiny_cluster(tmp_path, ["a,64000,262144,2,G2", "b,64000,262144,2,G2"])
    half = Shape(4000, 1000, 1, 500)
    whole = Shape(8000, 1000, 1, WHOLE)
    sim, placed = place_all(cluster, [whole, whole, half, half])
    assert placed[2] == placed[3], "the second half-GPU pod shares the first one's GPU"
    assert (sim.nodes.gpu == WHOLE).sum() == 1, "one whole GPU stays free"


def test_a_cpu_hungry_pod_goes_where_cpu_is_plenty_and_keeps_gpus_usable(tmp_path):
    # Node a: 8 GPUs and 24 cores; node b: 8 GPUs and 128 cores. Four light pods (2 cores per GPU)
    # fill a first; then a pod asks 14 cores: on a it would leave 3 GPUs with 2 cores between them.
    cluster = tiny_cluster(tmp_path, ["a,24000,262144,8,G2", "b,128000,262144,8,G2"])
    light = Shape(2000, 1000, 1, WHOLE)
    hungry = Shape(14000, 1000, 1, WHOLE)
    sim, placed = place_all(cluster, [light] * 4 + [hungry])
    assert [cluster.names[i] for i in placed] == ["a"] * 4 + ["b"]
    _, best_fit = place_all(cluster, [light] * 4 + [hungry], policy="bestfit")
    assert cluster.names[best_fit[-1]] == "a", "plain best fit strands a's GPUs"


def test_a_pod_that_fits_nowhere_is_not_placed_and_changes_nothing(tmp_path):
    cluster = tiny_cluster(tmp_path, ["a,16000,65536,2,G2"])
    sim, placed = place_all(cluster, [Shape(1000, 1000, 4, WHOLE)])
    assert placed == [-1]
    assert (sim.nodes.gpu == WHOLE).all() and sim.nodes.cpu[0] == 16000


def test_the_mix_weighs_shapes_by_how_often_they_came_and_classes_restricted_ones():
    mix = ShapeMix()
    for shape in [Shape(1, 1, 1, 100)] * 5 + [Shape(1, 1, 8, WHOLE)] + [Shape(1, 1, 0, 0)] * 9:
        mix.see(shape)
    # GPU shapes by popularity (FGD's weights); CPU-only shapes never fragment GPUs: left out.
    assert [mix.shapes[i] for i in mix.top()] == [Shape(1, 1, 1, 100), Shape(1, 1, 8, WHOLE)]
    # Restricted shapes of one class (GPUs, restriction) take part as one column, weighing them all.
    for shape in [Shape(2, 1, 1, WHOLE, spec=1)] * 2 + [Shape(3, 1, 1, WHOLE, spec=1)] * 3 + [Shape(3, 1, 2, WHOLE, 1)]:
        mix.see(shape)
    columns = mix._columns()
    assert [(mix.shapes[i], w) for i, w, _ in columns[2:]] == [
        (Shape(3, 1, 1, WHOLE, 1), 5 * WEIGHT_UNIT), (Shape(3, 1, 2, WHOLE, 1), WEIGHT_UNIT)]


def test_pods_arrive_in_a_seeded_order_inflated_to_the_asked_capacity():
    pods = [Shape(1, 1, 1, WHOLE), Shape(1, 1, 1, 500), Shape(1, 1, 0, 0)]
    order = fgd.arrivals(pods, seed=42, gpu_milli_max=10_000)
    assert order == fgd.arrivals(pods, seed=42, gpu_milli_max=10_000)
    assert sorted(order[:3]) == sorted(pods)
    assert sum(s.gpus * s.milli for s in order) >= 10_000
    assert fgd.arrivals(pods, seed=43, gpu_milli_max=10_000) != order


def test_smoke_one_trace_one_seed_up_to_forty_percent_places_everything_and_overbooks_nothing():
    cluster, pods = fgd._inputs(REFERENCE, "gpushare100")
    result = fgd.run(cluster, pods, seed=42, levels=(20, 40))
    assert (result["failed_pods"], result["overbooked_nodes"]) == (0, 0)
    for level, ratio in result["ratios"].items():
        assert level <= ratio < level + 1, (level, ratio)
    assert fgd.paper_results(REFERENCE)["gpushare100"]["06-FGD"][100] == pytest.approx(86.64, abs=0.01)


SHAPE_CASES = [
    ("a whole-GPU pod is scored as whole GPUs", (4000, 2**20 * 1000 * 16, 2000), Shape(4000, 16, 2, WHOLE)),
    ("a fraction of one GPU is a sharing shape", (4000, 0, 300), Shape(4000, 0, 1, 300)),
    ("a GPU and a half is not scored", (4000, 0, 1500), None),
    ("a pod without GPUs is not scored", (4000, 0, 0), None),
]


@pytest.mark.parametrize("request_,expected", [c[1:] for c in SHAPE_CASES], ids=[c[0] for c in SHAPE_CASES])
def test_live_pods_as_scored_shapes(request_, expected):
    from gangway.services.placement.scoring import shape_of
    assert shape_of(*request_) == expected


def test_the_live_scorer_weighs_the_pods_queued_so_far():
    from gangway.services.placement.scoring import scorer_of
    unit = POD_SHAPE_UNIT
    assert scorer_of({"1000/0/0": 5 * unit}) is None, "no GPU pod yet: best fit"
    live = scorer_of({"1000/0/1000": 3 * unit, "1000/0/8000": unit, "1000/0/500": 2 * unit})
    table = live.scorer.table
    assert sorted(zip(table.gpus.tolist(), table.milli.tolist(), live.scorer.weights.tolist())) == \
        [(1, 500, 2 * WEIGHT_UNIT), (1, 1000, 3 * WEIGHT_UNIT), (8, 1000, WEIGHT_UNIT)]
    # A day later (one half-life) the same counts weigh half as much: only the ratios matter.
    later = scorer_of({"1000/0/1000": 4 * unit}, 0, POD_SHAPES_HALF_LIFE_MS)
    assert later.scorer.weights.tolist() == [2 * WEIGHT_UNIT]


def test_the_mix_forgets_old_shapes_with_a_half_life_on_the_log_clock():
    state = State()
    count_pod_shape(state, "a", 4, 1_000)
    count_pod_shape(state, "b", 1, 1_000 + 2 * POD_SHAPES_HALF_LIFE_MS)  # two half-lives later
    counts = pod_shape_counts(state.pod_shapes, state.pod_shapes_ms, 1_000 + 2 * POD_SHAPES_HALF_LIFE_MS)
    assert counts == {"a": 1.0, "b": 1.0}
    # Long after, the counts are brought to the present: same ratio, bounded integers.
    count_pod_shape(state, "b", 1, 1_000 + 40 * POD_SHAPES_HALF_LIFE_MS)
    assert state.pod_shapes_ms == 1_000 + 40 * POD_SHAPES_HALF_LIFE_MS and state.pod_shapes == {"b": POD_SHAPE_UNIT}


def test_a_restricted_shape_keeps_unrestricted_pods_off_its_gpu_model():
    """Two identical nodes but for their GPU model; the T4 one is all the T4-only pods may use."""
    from gangway.services.placement.scoring import order, scorer_of
    shapes = {pod_shape_key({"cpu": 1000, "nvidia.com/gpu": 1000}): 10 * POD_SHAPE_UNIT,
              pod_shape_key({"cpu": 1000, "nvidia.com/gpu": 1000}, ("T4",)): 10 * POD_SHAPE_UNIT}
    nodes = ([8000, 8000], [0, 0], [[WHOLE] * 4, [WHOLE] * 4], [{GPU_MODEL_LABEL: "T4"}, {GPU_MODEL_LABEL: "G2"}])
    pod = Shape(1000, 0, 1, WHOLE)
    assert order(scorer_of(shapes, node_models=["G2", "T4"]), pod, *nodes) == [1, 0]
    # Without restricted pods in the mix the two nodes tie: the first (T4) wins.
    plain = {k: v for k, v in shapes.items() if k.count("/") == 2}
    assert order(scorer_of(plain, node_models=["G2", "T4"]), pod, *nodes) == [0, 1]


def test_smoke_the_live_place_gang_runs_the_fgd_experiment_to_twenty_percent():
    cluster, pods = fgd._inputs(REFERENCE, "multigpu50")
    result = fgd.run(cluster, pods, seed=42, policy="live", levels=(10, 20))
    assert (result["failed_pods"], result["overbooked_nodes"]) == (0, 0)
    assert 20 <= result["ratios"][20] < 21


def test_a_gang_of_several_pods_takes_the_scored_order_too():
    """Two pods that may use any model go to the G2 node: the T4 one is what T4-only pods need."""
    from gangway.events.catalogue import PodSet
    from gangway.services.placement.policy import Free, NodeRoom, place_gang
    from gangway.services.placement.scoring import scorer_of
    free = Free({name: NodeRoom({"cpu": 16_000, "nvidia.com/gpu": 4000}, [WHOLE] * 4, labels={GPU_MODEL_LABEL: model})
                 for name, model in (("a-t4", "T4"), ("b-g2", "G2"))})
    one_gpu = {"cpu": 1000, "nvidia.com/gpu": 1000}
    free.scorer = scorer_of({pod_shape_key(one_gpu): 10 * POD_SHAPE_UNIT,
                             pod_shape_key(one_gpu, ("T4",)): 10 * POD_SHAPE_UNIT}, node_models=["G2", "T4"])
    placed = place_gang(free, [PodSet(name="main", count=2, resources=one_gpu)])
    assert [(a.node, a.count) for a in placed] == [("b-g2", 2)]


@pytest.mark.parametrize("g2_nodes", [3, 69], ids=["scored-order", "by-kind-of-node"])
def test_a_gpu_model_keeps_free_what_the_pods_that_may_use_only_it_will_need(g2_nodes):
    """One G3 node beside G2 ones. The score draws a pod that may use any model to G3 (taking it
    lowers the fragmentation the G2-only pods see; the G3-only pods are fewer): with the model
    reserve it goes there only while G3 keeps free its share of the demand (G3-only pods ask
    ``share`` of it) times the GPUs left free; with a contract before the field, always."""
    from gangway.events.catalogue import PodSet
    from gangway.services.placement.policy import KINDS_FROM, Free, NodeRoom, place_gang
    from gangway.services.placement.scoring import scorer_of
    one_gpu = {"cpu": 1000, "nvidia.com/gpu": 1000}
    models = ["G3"] + ["G2"] * g2_nodes

    def placed_on(share_pct: int, reserve: bool) -> str:
        free = Free({f"n{i:03}": NodeRoom({"cpu": 16_000, "nvidia.com/gpu": 4000}, [WHOLE] * 4,
                                          labels={GPU_MODEL_LABEL: model}) for i, model in enumerate(models)})
        free.indexed = len(free) > KINDS_FROM  # (as a Free of the state's nodes: filed by kind)
        free.model_reserve = reserve
        free.scorer = scorer_of({pod_shape_key(one_gpu): (100 - 2 * share_pct) * POD_SHAPE_UNIT,
                                 pod_shape_key(one_gpu, ("G2",)): share_pct * POD_SHAPE_UNIT,
                                 pod_shape_key(one_gpu, ("G3",)): share_pct * POD_SHAPE_UNIT}, node_models=["G2", "G3"])
        [assignment] = place_gang(free, [PodSet(name="main", count=1, resources=one_gpu)])
        return free[assignment.node].labels[GPU_MODEL_LABEL]

    gpus_after = 4 * len(models) - 1
    big = next(p for p in range(1, 50) if p * gpus_after > 300)  # G3's 3 GPUs left short of its share
    small = next(p for p in range(50, 0, -1) if p * gpus_after <= 300)
    assert placed_on(big, reserve=False) == placed_on(small, reserve=False) == "G3"
    assert placed_on(big, reserve=True) == "G2"
    assert placed_on(small, reserve=True) == "G3"


def test_a_contract_read_now_keeps_the_model_reserve_and_the_placer_follows_it():
    """The contract reader sets ``model_reserve``; a contract recorded before it decodes False; the
    free capacity placement starts from carries the contract's choice."""
    import msgspec
    from builders import LogBuilder, cluster_queue, contract
    from gangway import demo
    from gangway.contract.kueue import load_contract_file
    from gangway.events.contract import Contract
    from gangway.services.placement.policy import copy_free, free_capacity
    read = load_contract_file(Path(demo.__file__).parent / "contract.yaml")
    assert read.model_reserve
    recorded = msgspec.json.encode(contract(cluster_queue("q").gpus(8)).obj())
    assert msgspec.json.decode(recorded.replace(b',"model_reserve":false', b""), type=Contract).model_reserve is False
    for reserve in (True, False):
        log = LogBuilder().configure(msgspec.structs.replace(read, model_reserve=reserve))
        assert free_capacity(log.state).model_reserve is copy_free(free_capacity(log.state)).model_reserve is reserve


def test_the_fold_keys_queued_pods_by_the_gpu_models_their_queue_may_use():
    from builders import LogBuilder, cluster_queue, contract, workload
    c = (contract(cluster_queue("t4-only").flavor("t4").gpus(8).cpu(64), cluster_queue("any").gpus(8).cpu(64),
                  cluster_queue("mixed").flavor("t4").gpus(4).flavor("v100").gpus(4))
         .flavor_labels("t4", {GPU_MODEL_LABEL: "T4"}).flavor_labels("v100", {GPU_MODEL_LABEL: "V100"}))
    log = LogBuilder().configure(c).queue(*(workload(q).queue(q).gpus(1) for q in ("t4-only", "any", "mixed")))
    assert sorted(k.split("/", 3)[3:] for k in log.state.pod_shapes) == [[], ["T4"], ["T4|V100"]]


def test_trace_all_finds_every_openb_trace_in_the_data_folder_family_by_family(tmp_path):
    from gangway.benchmarks.fragmentation import traces_present
    from gangway.benchmarks.results import ReferenceDataMissing
    assert traces_present(REFERENCE) == ["gpushare100", "multigpu50"]
    folder = tmp_path / "alibaba-gpu-v2023"
    folder.mkdir()
    for name in ("openb_node_list_all_node", "openb_pod_list_gpuspec20", "openb_pod_list_default",
                 "openb_pod_list_cpu050", "openb_pod_list_gpuspec10"):
        (folder / f"{name}.csv").write_text("")
    assert traces_present(tmp_path) == ["default", "cpu050", "gpuspec10", "gpuspec20"]
    with pytest.raises(ReferenceDataMissing, match="has no alibaba-gpu-v2023"):
        traces_present(tmp_path / "alibaba-gpu-v2023")  # a folder, but not the data folder


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.data())
def test_the_live_scores_are_the_numpy_scores(data):
    """``scoring.keys`` (plain integers, GPUs memoized as sorted multisets) gives, node by node, the
    score ``Scorer.score`` computes with numpy on the nodes as they are (GPUs in their own order),
    for random mixes with model-restricted shapes, random nodes and a random pod."""
    from gangway.services.placement import scoring
    from gangway.services.placement.fragmentation import after_one_pod
    slots = st.sampled_from([0, 250, 500, 750, WHOLE])
    gpu_shape = st.tuples(st.sampled_from([1000, 2000, 4000]), st.sampled_from([0, 2 ** 30, 2 ** 32]),
                          st.sampled_from([250, 500, 1000, 2000, 4000]))
    mix = {}
    for cpu, memory, gpu in data.draw(st.lists(gpu_shape, min_size=1, max_size=6)):
        allowed = data.draw(st.sampled_from([(), ("T4",), ("A100", "T4")]))
        mix[pod_shape_key({"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpu}, allowed)] = \
            data.draw(st.integers(1, 50)) * POD_SHAPE_UNIT
    live = scoring.scorer_of(mix, node_models=["A100", "T4"])
    pod = scoring.shape_of(*data.draw(gpu_shape))
    n = data.draw(st.integers(1, 6))
    cpu = [data.draw(st.integers(pod.cpu, 64_000)) for _ in range(n)]
    memory = [data.draw(st.integers(pod.memory, 2 ** 38)) for _ in range(n)]
    gpus = [data.draw(st.lists(slots, min_size=4, max_size=4).filter(
        lambda g: (g.count(WHOLE) >= pod.gpus) if pod.milli == WHOLE else max(g) >= pod.milli)) for _ in range(n)]
    models = [data.draw(st.sampled_from(["A100", "T4", ""])) for _ in range(n)]
    scoring._EFFECTS.clear()
    got = scoring.keys(live, pod, cpu, memory, gpus, models)
    scorer = live.scorer
    before = Nodes(np.array(cpu), np.array([m // scoring.MIB_MILLI for m in memory]), np.array(gpus),
                   np.array([live.codes.get(m, 0) for m in models]))
    after = after_one_pod(before, pod)
    want = scorer.score(before, after, fragmentation(before, scorer.table))
    assert [k[0] for k in got] == want.tolist()
    assert [k[1] for k in got] == after.gpu.sum(axis=1).tolist() and [k[2] for k in got] == after.cpu.tolist()
