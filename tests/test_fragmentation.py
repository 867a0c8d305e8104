"""Fragmentation scoring and the offline FGD simulator: the measure, the choices it makes, a smoke run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gangway.benchmarks import fragmentation as fgd
from gangway.services.placement.fragmentation import (
    WHOLE, Nodes, Shape, ShapeMix, ShapeTable, fragmentation, stranded,
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


def test_the_mix_weighs_shapes_by_count_times_gpu_capacity_and_keeps_the_heaviest():
    mix = ShapeMix()
    for shape in [Shape(1, 1, 1, 100)] * 5 + [Shape(1, 1, 8, WHOLE)] + [Shape(1, 1, 0, 0)] * 9:
        mix.see(shape)
    assert [mix.shapes[i] for i in mix.top()] == [Shape(1, 1, 8, WHOLE), Shape(1, 1, 1, 100), Shape(1, 1, 0, 0)]


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
    assert scorer_of({"1000/0/0": 5}) is None, "no GPU pod yet: best fit"
    scorer = scorer_of({"1000/0/1000": 3, "1000/0/8000": 1, "1000/0/500": 2})
    assert sorted(zip(scorer.table.gpus.tolist(), scorer.table.milli.tolist(), scorer.weights.tolist())) == \
        [(1, 500, 1000), (1, 1000, 3000), (8, 1000, 8000)]


def test_smoke_the_live_place_gang_runs_the_fgd_experiment_to_twenty_percent():
    cluster, pods = fgd._inputs(REFERENCE, "multigpu50")
    result = fgd.run(cluster, pods, seed=42, policy="live", levels=(10, 20))
    assert (result["failed_pods"], result["overbooked_nodes"]) == (0, 0)
    assert 20 <= result["ratios"][20] < 21
