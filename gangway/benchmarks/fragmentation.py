"""The FGD experiment, offline: gangway's fragmentation scoring against the paper's published results.

As the paper defines it ("Beware of Fragmentation", USENIX ATC'23): the Alibaba
openb nodes, the pods of one trace in a random order (seed 42..51), placed one by one and never
leaving, until the GPUs they ask reach 130 % of the cluster's 6,212. A trace asking for less than
that is inflated with pods drawn from it at random (same seed), as the paper's simulator does. At
each arrival level X % the figure is the GPU allocation ratio; "unallocated GPUs at 100 %" is
6212 × (1 − ratio). A pod fits a node when its CPU, memory and GPUs fit (a sharing pod takes
``gpu_milli`` of one GPU) on a GPU model its ``gpu_spec`` allows. No broker: a pure simulation.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from gangway.benchmarks.results import reference_data
from gangway.events.resources import GPU
from gangway.services.placement.scoring import MIB_MILLI
from gangway.services.placement.fragmentation import (
    WHOLE, Nodes, Shape, ShapeMix, ShapeTable, after_one_pod, best_fit_gpu, fits, fragmentation,
)

#: The openb trace families, each family's traces in the order the paper shows them.
FAMILIES = ("default", "cpu", "gpushare", "multigpu", "gpuspec")
TRACES = ("default", "multigpu50", "gpushare100", "cpu050", "gpuspec10", "gpuspec20")


def traces_present(root: Path | None = None) -> list[str]:
    """Every openb pod trace in the data folder (``--trace all``), family by family."""
    folder = reference_data(root, "alibaba-gpu-v2023/openb_node_list_all_node.csv") / "alibaba-gpu-v2023"
    found = sorted(p.name.removeprefix("openb_pod_list_").removesuffix(".csv")
                   for p in folder.glob("openb_pod_list_*.csv"))
    family = {name: next((i for i, f in enumerate(FAMILIES) if name.startswith(f)), len(FAMILIES)) for name in found}
    return sorted(found, key=lambda name: (family[name], len(name), name))
LEVELS = tuple(range(0, 131))
SHOWN_LEVELS = (50, 80, 90, 100, 110, 120, 130)
PAPER_POLICIES = ("01-Random", "05-BestFit", "06-FGD")
POLICIES = ("gangway", "fgd-like", "bestfit", "live")


class Cluster(NamedTuple):
    names: list[str]
    nodes: Nodes
    #: ``specs[i, model]``: may a pod with GPU-model restriction ``i`` use that model (0: any)?
    specs: np.ndarray
    spec_index: dict[frozenset[str], int]
    models: list[str]

    @property
    def gpus(self) -> int:
        return int((self.nodes.gpu == WHOLE).sum())


def load_cluster(path: Path, traces: list[list[dict]] = ()) -> Cluster:
    """Nodes from an openb node list; GPU-model restrictions from the traces' ``gpu_spec``."""
    rows = list(csv.DictReader(path.open()))
    models = sorted({r["model"] for r in rows if r["model"]})
    code = {m: i + 1 for i, m in enumerate(models)}  # 0: no GPU
    gpus_max = max(int(r["gpu"]) for r in rows)
    gpu = np.zeros((len(rows), max(1, gpus_max)), dtype=np.int64)
    for i, r in enumerate(rows):
        gpu[i, : int(r["gpu"])] = WHOLE
    nodes = Nodes(
        cpu=np.array([int(r["cpu_milli"]) for r in rows], dtype=np.int64),
        memory=np.array([int(r["memory_mib"]) for r in rows], dtype=np.int64),
        gpu=gpu, model=np.array([code.get(r["model"], 0) for r in rows], dtype=np.int64),
    )
    restrictions = sorted({spec_of(p) for pods in traces for p in pods} - {frozenset()}, key=sorted)
    spec_index = {frozenset(): 0, **{s: i + 1 for i, s in enumerate(restrictions)}}
    specs = np.ones((len(spec_index), len(models) + 1), dtype=bool)
    for s, i in spec_index.items():
        if s:
            specs[i] = [False] + [m in s for m in models]
    return Cluster([r["sn"] for r in rows], nodes, specs, spec_index, models)


def spec_of(pod: dict) -> frozenset[str]:
    return frozenset(m for m in (pod.get("gpu_spec") or "").split("|") if m)


class TraceError(ValueError):
    """An openb pod trace the experiment cannot run: the file, the line and the field, in one sentence."""


#: The columns of an openb pod trace the experiment needs, all whole numbers (``gpu_spec``, the GPU
#: models a pod may use, is read when there: some published traces have only these five columns).
POD_COLUMNS = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


def load_pods(path: Path) -> list[dict]:
    """The pods of an openb trace, checked: every column read is there, the numbers are whole and
    not negative, a pod's share of one GPU is at most 1000 thousandths, and some pod asks for GPUs
    (else the arrivals, drawn until they ask the cluster's GPUs, would never end)."""
    try:
        with path.open(encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in POD_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceError(f"{path}: no column {', '.join(missing)} (an openb pod trace has "
                                 f"{', '.join(POD_COLUMNS)}, and gpu_spec where pods name GPU models)")
            pods = list(reader)
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for line, pod in enumerate(pods, 2):
        for column in POD_COLUMNS:
            value = pod[column] or ""
            if not (value.isascii() and value.isdigit()):
                raise TraceError(f"{path}:{line}: {column} {value!r} is not a whole number of 0 or more")
        if int(pod["gpu_milli"]) > 1000:
            raise TraceError(f"{path}:{line}: gpu_milli {pod['gpu_milli']} is over 1000 (thousandths of one GPU)")
    if not any(int(p["num_gpu"]) and (int(p["gpu_milli"]) or int(p["num_gpu"]) > 1) for p in pods):
        raise TraceError(f"{path}: no pod asks for a GPU: the experiment fills the cluster's GPUs with the trace's pods")
    return pods


def shape_of(pod: dict, cluster: Cluster) -> Shape:
    gpus = int(pod["num_gpu"])
    milli = int(pod["gpu_milli"]) if gpus == 1 else (WHOLE if gpus else 0)
    return Shape(int(pod["cpu_milli"]), int(pod["memory_mib"]), gpus, milli, cluster.spec_index[spec_of(pod)])


def arrivals(pods: list[Shape], seed: int, gpu_milli_max: int) -> list[Shape]:
    """The pods in a random order, inflated with random draws until they ask ``gpu_milli_max``."""
    rng = np.random.default_rng(seed)
    order = [pods[i] for i in rng.permutation(len(pods))]
    asked = sum(s.gpus * s.milli for s in order)
    while asked < gpu_milli_max:
        s = pods[int(rng.integers(len(pods)))]
        order.append(s)
        asked += s.gpus * s.milli
    return order


class Simulator:
    """One cluster filling up; ``place`` chooses a node for one pod with the given policy."""

    def __init__(self, cluster: Cluster, policy: str = "gangway"):
        self.cluster = cluster
        self.policy = policy
        n = cluster.nodes
        self.nodes = Nodes(n.cpu.copy(), n.memory.copy(), n.gpu.copy(), n.model.copy())
        self.mix = ShapeMix()
        self.frag = np.zeros((len(n.cpu), 0), dtype=np.int64)

    def see(self, shape: Shape) -> None:
        """Count the shape; a shape seen for the first time gets its fragmentation column."""
        known = len(self.mix.shapes)
        self.mix.see(shape)
        if len(self.mix.shapes) > known:
            column = fragmentation(self.nodes, ShapeTable.of([shape], self.cluster.specs))
            self.frag = np.concatenate([self.frag, column], axis=1)

    def place(self, shape: Shape) -> int:
        """Place one pod: the node index, or -1 when no node fits it."""
        self.see(shape)
        candidates = np.flatnonzero(fits(self.nodes, shape, self.cluster.specs))
        if len(candidates) == 0:
            return -1
        before = self.nodes.take(candidates)
        after = after_one_pod(before, shape)
        best = int(candidates[self._choose(before, after, candidates)])
        self._commit(best, shape)
        return best

    def _choose(self, before: Nodes, after: Nodes, candidates: np.ndarray) -> int:
        """Lowest score, then the least GPU capacity left (best fit), then the least CPU, then index."""
        gpu_left = after.gpu.sum(axis=1)
        if self.policy == "bestfit":
            return int(np.lexsort((candidates, after.cpu, gpu_left))[0])
        scorer = self.mix.scorer(self.cluster.specs)
        frag_before = self.frag[candidates][:, scorer.columns]
        if self.policy == "fgd-like":
            counts = np.array([round(c) for _, _, c in self.mix._columns()], dtype=np.int64)
            delta = (fragmentation(after, scorer.table) - frag_before) @ counts
            return int(np.lexsort((candidates, delta))[0])
        score = scorer.score(before, after, frag_before)
        return int(np.lexsort((candidates, after.cpu, gpu_left, score))[0])

    def _commit(self, i: int, shape: Shape) -> None:
        n = self.nodes
        n.cpu[i] -= shape.cpu
        n.memory[i] -= shape.memory
        if shape.gpus and shape.milli < WHOLE:
            n.gpu[i, best_fit_gpu(n.gpu[i:i + 1], shape.milli)[0]] -= shape.milli
        elif shape.gpus:
            full = np.flatnonzero(n.gpu[i] == WHOLE)[: shape.gpus]
            n.gpu[i, full] = 0
        table = ShapeTable.of(self.mix.shapes, self.cluster.specs)
        self.frag[i] = fragmentation(n.take(np.array([i])), table)[0]


class LiveSimulator:
    """The live placement service's own ``place_gang`` (best fit, GPU by GPU), one pod at a time;
    a pod's GPU-model restriction becomes the ``nodes`` it may use."""

    def __init__(self, cluster: Cluster):
        from gangway.events.state import GPU_MODEL_LABEL, State
        from gangway.services.placement.policy import Free, NodeRoom
        self.cluster = cluster
        n = cluster.nodes
        self.free = Free()
        self.free.model_reserve = True  # (as a contract written today: ``Contract.model_reserve``)
        for i, name in enumerate(cluster.names):
            gpus = int((n.gpu[i] == WHOLE).sum())
            room = {"cpu": int(n.cpu[i]), "memory": int(n.memory[i]) * MIB_MILLI} | ({GPU: gpus * WHOLE} if gpus else {})
            model = cluster.models[n.model[i] - 1] if n.model[i] else None
            self.free[name] = NodeRoom(room, [WHOLE] * gpus, labels={GPU_MODEL_LABEL: model} if model else {})
        self.index = {name: i for i, name in enumerate(cluster.names)}
        #: The fold's pod-shape mix, kept as the fold keeps it (every pod arrives at one instant).
        self.state = State()
        self.allowed = {spec: frozenset(name for i, name in enumerate(cluster.names)
                                        if cluster.specs[spec][n.model[i]]) for spec in range(len(cluster.specs))}
        by_index = {i: s for s, i in cluster.spec_index.items()}
        #: Each restriction as the GPU models a flavor would select (() for any).
        self.models = {i: tuple(sorted(by_index[i])) for i in by_index}

    def place(self, shape: Shape) -> int:
        from gangway.events.catalogue import PodSet
        from gangway.events.state import count_pod_shape, pod_shape_key
        from gangway.services.placement.policy import place_gang
        from gangway.services.placement.scoring import scorer_of
        resources = {"cpu": shape.cpu, "memory": shape.memory * MIB_MILLI} | (
            {GPU: shape.gpus * shape.milli} if shape.gpus else {})
        count_pod_shape(self.state, pod_shape_key(resources, self.models[shape.spec] if shape.gpus else ()), 1, 0)
        self.free.scorer = scorer_of(self.state.pod_shapes, self.state.pod_shapes_ms, 0, self.cluster.models)
        nodes = self.allowed[shape.spec] if shape.spec else None
        placed = place_gang(self.free, [PodSet(name="pod", count=1, resources=resources)], nodes=nodes)
        return -1 if placed is None else self.index[placed[0].node]

    @property
    def nodes(self) -> Nodes:
        rooms = [self.free[name] for name in self.cluster.names]
        width = self.cluster.nodes.gpu.shape[1]
        return Nodes(np.array([r.free["cpu"] for r in rooms]), np.array([r.free["memory"] // MIB_MILLI for r in rooms]),
                     np.array([r.gpus + [0] * (width - len(r.gpus)) for r in rooms]), self.cluster.nodes.model)


def run(cluster: Cluster, pods: list[Shape], seed: int, policy: str = "gangway",
        levels: tuple[int, ...] = LEVELS) -> dict:
    """Allocation ratio (%) at each arrival level, for one seed."""
    capacity = cluster.gpus * WHOLE
    order = arrivals(pods, seed, capacity * max(levels) // 100)
    sim = LiveSimulator(cluster) if policy == "live" else Simulator(cluster, policy)
    asked = allocated = failed = 0
    ratios: dict[int, float] = {}
    targets = iter(levels)
    target = next(targets)
    for shape in order:
        need = shape.gpus * shape.milli
        if sim.place(shape) >= 0:
            allocated += need
        else:
            failed += 1
        asked += need
        while target is not None and asked * 100 >= target * capacity:
            ratios[target] = 100 * allocated / capacity
            target = next(targets, None)
        if target is None:
            break
    n = sim.nodes
    overbooked = (n.cpu < 0) | (n.memory < 0) | (n.gpu < 0).any(axis=1)
    return {"seed": seed, "ratios": ratios, "failed_pods": failed, "overbooked_nodes": int(overbooked.sum())}


def paper_results(root: Path) -> dict[str, dict[str, dict[int, float]]]:
    """trace → policy → level → mean allocation ratio (%) over the paper's seeds."""
    sums: dict[tuple[str, str, int], list[float]] = {}
    path = root / "fgd-results" / "analysis_allo_discrete.csv"
    if not path.exists():  # (a team's own traces: no paper figures beside them)
        return {}
    with path.open() as f:
        for row in csv.DictReader(f):
            trace = row["workload"].removeprefix("openb_pod_list_")
            for level in LEVELS:
                sums.setdefault((trace, row["sc_policy"], level), []).append(float(row[str(level)]))
    out: dict[str, dict[str, dict[int, float]]] = {}
    for (trace, policy, level), values in sums.items():
        out.setdefault(trace, {}).setdefault(policy, {})[level] = sum(values) / len(values)
    return out


def _run_one(job: tuple) -> dict:
    root, trace, seed, policy, levels = job
    cluster, pods = _inputs(Path(root), trace)
    return run(cluster, pods, seed, policy, levels)


_CACHE: dict[tuple[str, str], tuple[Cluster, list[Shape]]] = {}


def _inputs(root: Path, trace: str) -> tuple[Cluster, list[Shape]]:
    key = (str(root), trace)
    if key not in _CACHE:
        raw = load_pods(root / "alibaba-gpu-v2023" / f"openb_pod_list_{trace}.csv")
        cluster = load_cluster(root / "alibaba-gpu-v2023" / "openb_node_list_all_node.csv", [raw])
        _CACHE[key] = (cluster, [shape_of(p, cluster) for p in raw])
    return _CACHE[key]


def bench_fgd(traces: list[str], seeds: list[int], policy: str = "gangway", root: str | Path | None = None,
              workers: int = 2, levels: tuple[int, ...] = LEVELS) -> dict:
    """Every trace × seed (in ``workers`` processes), averaged, beside the paper's figures.

    ``root``: the reference data folder (default ``$GANGWAY_DATA``; see ``results.reference_data``)."""
    root = reference_data(root, "alibaba-gpu-v2023/openb_node_list_all_node.csv").resolve()
    for trace in traces:
        reference_data(root, f"alibaba-gpu-v2023/openb_pod_list_{trace}.csv")
        _inputs(root, trace)  # (a trace it cannot run is said here, before any process starts)
    jobs = [(str(root), t, s, policy, levels) for t in traces for s in seeds]
    started = time.perf_counter()
    if workers > 1 and len(jobs) > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(workers) as pool:
            runs = list(pool.map(_run_one, jobs))
    else:
        runs = [_run_one(j) for j in jobs]
    elapsed_s = time.perf_counter() - started
    paper = paper_results(root)
    gpus = _inputs(root, traces[0])[0].gpus
    result = {"experiment": "fgd", "policy": policy, "seeds": seeds, "gpus": gpus,
              "elapsed_s": round(elapsed_s, 1), "traces": {}}
    for trace in traces:
        mine = [r for r, j in zip(runs, jobs) if j[1] == trace]
        result["traces"][trace] = _summary(trace, mine, paper.get(trace, {}), gpus, levels)
    return result


def _summary(trace: str, runs: list[dict], paper: dict[str, dict[int, float]], gpus: int,
             levels: tuple[int, ...]) -> dict:
    def unalloc(ratio: float) -> int:
        return round(gpus * (1 - ratio / 100))
    reached = [lv for lv in levels if all(lv in r["ratios"] for r in runs)]
    mean = {lv: sum(r["ratios"][lv] for r in runs) / len(runs) for lv in reached}
    out = {"gangway": {"allocation_pct": {lv: round(v, 2) for lv, v in mean.items()},
                       "unallocated_gpus": {lv: unalloc(v) for lv, v in mean.items()},
                       "failed_pods_mean": sum(r["failed_pods"] for r in runs) / len(runs)}}
    for policy in PAPER_POLICIES:
        if policy in paper:
            out[policy] = {"allocation_pct": {lv: round(paper[policy][lv], 2) for lv in reached},
                           "unallocated_gpus": {lv: unalloc(paper[policy][lv]) for lv in reached}}
    if 100 in mean and "06-FGD" in paper:
        out["beats_fgd_at_100"] = unalloc(mean[100]) < unalloc(paper["06-FGD"][100])
    return out


def table(result: dict) -> str:
    """The figures as text: allocation % (unallocated GPUs) at each shown level."""
    lines = [f"FGD experiment, {result['gpus']} GPUs, seeds {result['seeds'][0]}-{result['seeds'][-1]} "
             f"({len(result['seeds'])}), gangway policy '{result['policy']}', {result['elapsed_s']} s"]
    for trace, summary in result["traces"].items():
        shown = [lv for lv in SHOWN_LEVELS if lv in summary["gangway"]["allocation_pct"]]
        lines.append(f"\n== {trace}")
        lines.append(f"{'policy':<12}" + "".join(f"{'@' + str(lv) + '%':>16}" for lv in shown))
        for policy in ("gangway", *PAPER_POLICIES):
            if policy not in summary:
                continue
            s = summary[policy]
            label = result["policy"] if policy == "gangway" else policy
            lines.append(f"{label:<12}" + "".join(
                f"{s['allocation_pct'][lv]:>9.2f} ({s['unallocated_gpus'][lv]:>4})" for lv in shown))
        if "beats_fgd_at_100" in summary:
            lines.append(f"fewer unallocated GPUs than FGD at 100 %: {'yes' if summary['beats_fgd_at_100'] else 'NO'}")
    return "\n".join(lines)
