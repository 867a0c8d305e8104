"""Placement time per gang on a large cluster (`gangway bench placement`): wall clock, one process.

A cluster of ``gpus`` GPUs in 8-GPU NVLink nodes (half of them two 4-GPU islands), 32 nodes a rack,
8 racks a block, takes a seeded stream of gangs of mixed shapes and topology requests; the oldest
gangs leave whenever more than 85 % of the GPUs are taken, so the cluster stays busy and
fragmented. Single GPU pods are scored against the mix of pods so far, as in the service. Each
``place_gang`` call is timed, placed or not.
"""

from __future__ import annotations

import random
import statistics
import time

from gangway.events import catalogue as ev
from gangway.events import gpus
from gangway.events.fold import apply
from gangway.events.resources import GPU, add_into
from gangway.events.state import State
from gangway.services.placement.policy import Free, free_capacity, place_gang
from gangway.services.placement.scoring import scorer_of
from gangway.services.placement.topology import BLOCK, HOSTNAME, ISLAND, RACK

NODE_GPUS = 8
RACK_NODES = 32
BLOCK_RACKS = 8
BUSY_MAX_PCT = 85
#: The scorer's mix is rebuilt every this many gangs (once a cycle in the service), untimed.
CYCLE_GANGS = 100
#: (name, pods, GPUs per pod, topology request, weight)
SHAPES = [
    ("1 GPU", 1, 1, None, 30),
    ("2 GPUs", 1, 2, None, 20),
    ("4 GPUs in one island", 4, 1, ev.TopologyRequest(required=ISLAND), 10),
    ("8 GPUs in one node", 1, 8, ev.TopologyRequest(required=HOSTNAME), 15),
    ("4×8 GPUs preferring a rack", 4, 8, ev.TopologyRequest(preferred=RACK), 10),
    ("16×8 GPUs in one rack", 16, 8, ev.TopologyRequest(required=RACK), 5),
    ("32×8 GPUs in one block, slices of 8 nodes in a rack", 32, 8,
     ev.TopologyRequest(required=BLOCK, slice_required=RACK, slice_size=8), 3),
]


def cluster_state(gpus_total: int) -> State:
    state = State()
    for i in range(gpus_total // NODE_GPUS):
        rack, block = i // RACK_NODES, i // (RACK_NODES * BLOCK_RACKS)
        node = ev.NodeObserved(
            node=f"node-{i:05d}", allocatable={GPU: NODE_GPUS * 1000, "cpu": 96_000, "memory": 1 << 40},
            labels={BLOCK: f"b{block}", RACK: f"r{rack}"}, islands=[4, 4] if i % 2 else [8])
        apply(state, ev.Envelope(id=f"node/{i}", source="bench", time_ms=0, data=node, offset=i))
    return state


def _release(free: Free, pod_sets: list[ev.PodSet], assignments: list[ev.PodAssignment]) -> None:
    per_pod = {ps.name: ps.resources for ps in pod_sets}
    for a in assignments:
        room = free.own(a.node)
        add_into(room.free, {k: v * a.count for k, v in per_pod[a.pod_set].items()})
        if a.gpus:
            gpus.apply(room.gpus, a.gpus, per_pod[a.pod_set][GPU], +1)


def bench_placement(gpus: int = 16_384, gangs: int = 2000, seed: int = 42) -> dict:
    state = cluster_state(gpus)
    started = time.perf_counter()
    free = free_capacity(state)
    copy_ms = (time.perf_counter() - started) * 1000
    rng = random.Random(seed)
    weights = [s[4] for s in SHAPES]
    held: list[tuple[list[ev.PodSet], list[ev.PodAssignment], int]] = []
    busy = 0
    times: dict[str, list[float]] = {s[0]: [] for s in SHAPES}
    placed = {s[0]: 0 for s in SHAPES}
    pod_shapes: dict[str, int] = {}
    for i in range(gangs):
        name, pods, per_pod, request, _ = rng.choices(SHAPES, weights)[0]
        key = f"4000/0/{per_pod * 1000}"
        pod_shapes[key] = pod_shapes.get(key, 0) + pods
        if i % CYCLE_GANGS == 0:  # as decide does once a cycle, from the pods queued so far
            free.scorer = scorer_of(pod_shapes)
        pod_sets = [ev.PodSet(name="main", count=pods, resources={GPU: per_pod * 1000, "cpu": 4000},
                              topology=request)]
        t0 = time.perf_counter()
        assignments = place_gang(free, pod_sets)
        times[name].append((time.perf_counter() - t0) * 1000)
        if assignments is not None:
            placed[name] += 1
            held.append((pod_sets, assignments, pods * per_pod))
            busy += pods * per_pod
        while busy * 100 > gpus * BUSY_MAX_PCT:
            pod_sets, assignments, n = held.pop(0)
            _release(free, pod_sets, assignments)
            busy -= n
    every = [t for ts in times.values() for t in ts]
    return {
        "benchmark": "placement", "gpus": gpus, "nodes": len(state.nodes), "gangs": gangs, "seed": seed,
        "free_capacity_copy_ms": round(copy_ms, 2),
        "per_gang_ms": _stats(every),
        "by_shape": {name: {"placed": placed[name], "tried": len(ts), **_stats(ts)} for name, ts in times.items()},
    }


def _stats(ms: list[float]) -> dict:
    if not ms:
        return {}
    ordered = sorted(ms)
    return {"mean": round(statistics.fmean(ms), 3), "p50": round(ordered[len(ms) // 2], 3),
            "p99": round(ordered[min(len(ms) - 1, len(ms) * 99 // 100)], 3), "max": round(ordered[-1], 3)}


def table(result: dict) -> str:
    lines = [f"place_gang on {result['gpus']} GPUs ({result['nodes']} nodes), {result['gangs']} gangs, "
             f"free_capacity copy {result['free_capacity_copy_ms']} ms",
             f"{'shape':<54}{'placed/tried':>14}{'mean ms':>10}{'p50':>9}{'p99':>9}{'max':>9}"]
    rows = [*result["by_shape"].items(), ("every gang", {"placed": "", "tried": result["gangs"],
                                                         **result["per_gang_ms"]})]
    for name, s in rows:
        if not s.get("mean") and s.get("mean") != 0:
            continue
        lines.append(f"{name:<54}{str(s['placed']) + '/' + str(s['tried']):>14}{s['mean']:>10}{s['p50']:>9}"
                     f"{s['p99']:>9}{s['max']:>9}")
    return "\n".join(lines)
