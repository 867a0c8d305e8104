"""The fragmentation score in the live placement service: which nodes a GPU pod should take.

The mix is the pods queued lately (``State.pod_shapes``, kept by the fold, forgetting old shapes
with a half-life on the log's clock); the score is the offline benchmark's (``fragmentation.py``):
the rise in expected fragmentation plus the GPUs stranded by CPU or memory. GPU models count: a
shape whose ClusterQueue may only use some models (its flavors select ``nvidia.com/gpu.product``)
sees every other model's GPUs as fragmented, so a pod that may use any model keeps off the scarce
models such shapes need. Memory is scored in MiB so products stay inside int64. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from gangway.events.state import GPU_MODEL_LABEL, pod_shape_counts
from gangway.services.placement.fragmentation import (  # noqa: F401 (Shape: re-exported)
    WHOLE, Nodes, Scorer, Shape, ShapeMix, after_one_pod, fragmentation,
)

MIB_MILLI = 1000 * 2**20


class LiveScorer(NamedTuple):
    """A scorer and the code of each GPU model it knows (0: a node with no model label)."""

    scorer: Scorer
    codes: dict[str, int]
    #: GPU model → the share of the mix's GPU demand that only it may take, as (demand, all the
    #: demand): what its model-restricted classes ask, a class of k models counting 1/k of its
    #: demand on each (``demand_shares``; empty when no class is restricted).
    shares: dict[str, tuple[int, int]] = {}


def shape_of(cpu: int, memory: int, gpu: int, spec: int = 0) -> Shape | None:
    """One pod as a scored shape: whole GPUs, or a fraction of one GPU (else not scored)."""
    if gpu <= 0:
        return None
    if gpu % WHOLE == 0:
        return Shape(cpu, memory // MIB_MILLI, gpu // WHOLE, WHOLE, spec)
    if gpu < WHOLE:
        return Shape(cpu, memory // MIB_MILLI, 1, gpu, spec)
    return None


def scorer_of(pod_shapes: Mapping[str, int], pod_shapes_ms: int = 0, now_ms: int = 0,
              node_models: Iterable[str] = ()) -> LiveScorer | None:
    """The scorer for the pods queued so far, as of ``now_ms`` (None before any GPU pod)."""
    node_models = tuple(node_models)
    parsed = [(*_parsed(key), count) for key, count in sorted(pod_shape_counts(pod_shapes, pod_shapes_ms, now_ms).items())]
    codes, restrictions, specs = _specs(node_models, tuple(sorted({allowed for *_, allowed, _ in parsed if allowed})))
    mix = ShapeMix()
    for cpu, memory, gpu, allowed, count in parsed:
        shape = shape_of(cpu, memory, gpu, restrictions[allowed])
        if shape is not None:
            mix.see(shape, count)
    if not mix.shapes:
        return None
    scorer = mix.scorer(specs)
    return LiveScorer(scorer, codes, demand_shares(scorer, {m: codes[m] for m in node_models if m in codes}))


def demand_shares(scorer: Scorer, codes: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """GPU model (of ``codes``: the nodes' models) → (the GPU demand, milli times weight, of the
    restricted classes that may use it, a class that may use k of the nodes' models counting 1/k
    on each; the demand of every shape the scorer weighs)."""
    table = scorer.table
    if not table.restricted.any():
        return {}
    demand = [w * g * m for w, g, m in zip(scorer.weights.tolist(), table.gpus.tolist(), table.milli.tolist())]
    model_of = {code: model for model, code in codes.items()}
    shares: dict[str, int] = {}
    for row, restricted, asked in zip(table.allowed.tolist(), table.restricted.tolist(), demand):
        if restricted:
            allowed = [code for code, ok in enumerate(row) if ok and code in model_of]
            for code in allowed:
                shares[model_of[code]] = shares.get(model_of[code], 0) + asked // len(allowed)
    total = sum(demand)
    return {model: (amount, total) for model, amount in shares.items()}


_PARSED: dict[str, tuple[int, int, int, tuple[str, ...]]] = {}


def _parsed(key: str) -> tuple[int, int, int, tuple[str, ...]]:
    """A pod shape key (``State.pod_shapes``) as (cpu, memory, gpu, allowed models); memo."""
    found = _PARSED.get(key)
    if found is None:
        cpu, memory, gpu, *rest = key.split("/")
        found = (int(cpu), int(memory), int(gpu), tuple(rest[0].split("|")) if rest else ())
        if len(_PARSED) > 4096:
            _PARSED.clear()
        _PARSED[key] = found
    return found


_SPECS: dict[tuple, tuple[dict[str, int], dict[tuple[str, ...], int], np.ndarray]] = {}


def _specs(node_models: tuple[str, ...], restricted: tuple[tuple[str, ...], ...]):
    """(model → code, restriction → row, rows ``[restrictions, models + 1]`` of the models each
    restriction may use) for the nodes' models and the restrictions queued; memo (read only)."""
    key = (node_models, restricted)
    found = _SPECS.get(key)
    if found is not None:
        return found
    models = sorted(set(node_models) | {m for allowed in restricted for m in allowed})
    codes = {m: i + 1 for i, m in enumerate(models)}
    restrictions = {(): 0, **{allowed: i + 1 for i, allowed in enumerate(restricted)}}
    specs = np.ones((len(restrictions), len(models) + 1), dtype=bool)
    for allowed, row in restrictions.items():
        if allowed:
            specs[row] = [False] + [m in allowed for m in models]
    specs.flags.writeable = False
    if len(_SPECS) > 256:
        _SPECS.clear()
    found = _SPECS[key] = (codes, restrictions, specs)
    return found


def has_scored_shapes(pod_shapes: Mapping[str, int]) -> bool:
    """Would ``scorer_of`` these counts give a scorer (some shape it scores)? Without building it."""
    for key in pod_shapes:
        cpu, memory, gpu, *_ = key.split("/")
        if shape_of(int(cpu), int(memory), int(gpu)) is not None:
            return True
    return False


def order(live: LiveScorer, shape: Shape, cpu: Sequence[int], memory: Sequence[int],
          gpus: Sequence[Sequence[int]], labels: Sequence[Mapping[str, str]] = ()) -> list[int]:
    """Candidate indexes (each fits one pod of ``shape``), lowest score first, then the least GPU
    capacity left, then the least CPU left, then index. ``labels``: the candidates' node labels
    (their GPU model).

    A node's score depends only on its free room and GPU model: nodes alike are scored once (a
    big cluster has a few kinds of node state, not thousands)."""
    kinds: dict[tuple, int] = {}
    kind_of: list[int] = []
    for i, g in enumerate(gpus):
        key = (cpu[i], memory[i], tuple(g), labels[i].get(GPU_MODEL_LABEL, "") if labels else "")
        k = kinds.get(key)
        if k is None:
            k = kinds[key] = len(kinds)
        kind_of.append(k)
    first = list(kinds)
    keyed = keys(live, shape, [k[0] for k in first], [k[1] for k in first], [k[2] for k in first],
                 [k[3] for k in first])
    return sorted(range(len(kind_of)), key=lambda i: (*keyed[kind_of[i]], i))


def keys(live: LiveScorer, shape: Shape, cpu: Sequence[int], memory: Sequence[int],
          gpus: Sequence[Sequence[int]], models: Sequence[str]) -> list[tuple[int, int, int]]:
    """(score, GPU capacity left, CPU left) of each node with one more pod of ``shape``.

    What one more pod does to a kind of node (its rise in fragmentation per shape, and what it
    leaves) depends on the scorer's shapes, not on their weights, which change pod by pod: it is
    kept per shape table (``_effects``); only the weighing is done for each call."""
    scorer = live.scorer
    mib = [m // MIB_MILLI for m in memory]
    effects = _effects(scorer.table, shape, cpu, mib, gpus, [live.codes.get(m, 0) for m in models])
    if not effects:
        return []
    # (plain integers, as ``stranded_of`` and ``Scorer.combine`` compute them: a handful of kinds)
    (cpu_amount, cpu_gpu), (memory_amount, memory_gpu) = scorer.cpu_per_gpu, scorer.memory_per_gpu
    cpu_amount, memory_amount = max(1, cpu_amount), max(1, memory_amount)

    def stranded(gpu: int, c: int, m: int) -> int:
        return max(0, gpu - c * cpu_gpu // cpu_amount) + max(0, gpu - m * memory_gpu // memory_amount)

    strand = [stranded(g, c, m) - stranded(sum(before), c0, m0)
              for (_, g, c, m), before, c0, m0 in zip(effects, gpus, cpu, mib)]
    score = scorer.combine_rows([e[0] for e in effects], strand)
    return [(s, e[1], e[2]) for s, e in zip(score, effects)]


#: id of a shape table → (the table, (shape, cpu, memory MiB, GPUs, model code) → (rise in
#: fragmentation per shape, GPU milli, CPU and memory left)). Several tables: the scorer's columns
#: are its heaviest shapes in order of weight, so two shapes of about one weight swap columns (and
#: tables) back and forth as the mix moves; one memo per table keeps both.
_EFFECTS: dict[int, tuple[object, dict]] = {}
_EFFECTS_TABLES_MAX = 32


def _effects(table, shape: Shape, cpu: Sequence[int], mib: Sequence[int], gpus: Sequence[Sequence[int]],
             codes: Sequence[int]) -> list[tuple[list[int], int, int, int]]:
    """Each node's (rise in fragmentation per shape of ``table``, GPU milli, CPU and memory left)
    with one more pod of ``shape``: computed (numpy) for the kinds not seen with this table yet. A
    kind's GPUs count as a sorted multiset: these figures do not depend on which GPU is which (one
    more pod takes whole free GPUs, or the one that fits a sharing pod best, by their room)."""
    found = _EFFECTS.get(id(table))
    if found is None or found[0] is not table or len(found[1]) > 65_536:
        if len(_EFFECTS) >= _EFFECTS_TABLES_MAX:
            _EFFECTS.clear()
        found = _EFFECTS[id(table)] = (table, {})
    memo = found[1]
    kinds = [(shape, c, m, tuple(sorted(g)), code) for c, m, g, code in zip(cpu, mib, gpus, codes)]
    new = list({kind: i for i, kind in enumerate(kinds) if kind not in memo}.values())
    if new:
        rows = [kinds[i][3] for i in new]
        widths = {len(g) for g in rows}
        width = max(1, max(widths))
        if widths == {width}:  # every node as wide: no padding
            gpu = np.array(rows, dtype=np.int64).reshape(len(rows), width)
        else:  # (padding adds GPUs with nothing free: no node's figures change)
            gpu = np.array([list(g) + [0] * (width - len(g)) for g in rows], dtype=np.int64)
        before = Nodes(np.array([cpu[i] for i in new], dtype=np.int64), np.array([mib[i] for i in new], dtype=np.int64),
                       gpu, np.array([codes[i] for i in new], dtype=np.int64))
        after = after_one_pod(before, shape)
        rise = (fragmentation(after, table) - fragmentation(before, table)).tolist()
        left = zip(after.gpu.sum(axis=1).tolist(), after.cpu.tolist(), after.memory.tolist())
        for i, r, (g, c, m) in zip(new, rise, left):
            memo[kinds[i]] = (r, g, c, m)
    return [memo[kind] for kind in kinds]
