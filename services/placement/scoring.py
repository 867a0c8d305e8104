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
    parsed = []
    for key, count in sorted(pod_shape_counts(pod_shapes, pod_shapes_ms, now_ms).items()):
        cpu, memory, gpu, *rest = key.split("/")
        parsed.append((int(cpu), int(memory), int(gpu), tuple(rest[0].split("|")) if rest else (), count))
    models = sorted(set(node_models) | {m for *_, allowed, _ in parsed for m in allowed})
    codes = {m: i + 1 for i, m in enumerate(models)}
    restricted = sorted({allowed for *_, allowed, _ in parsed if allowed})
    restrictions = {(): 0, **{allowed: i + 1 for i, allowed in enumerate(restricted)}}
    specs = np.ones((len(restrictions), len(models) + 1), dtype=bool)
    for allowed, row in restrictions.items():
        if allowed:
            specs[row] = [False] + [m in allowed for m in models]
    mix = ShapeMix()
    for cpu, memory, gpu, allowed, count in parsed:
        shape = shape_of(cpu, memory, gpu, restrictions[allowed])
        if shape is not None:
            mix.see(shape, count)
    return LiveScorer(mix.scorer(specs), codes) if mix.shapes else None


def order(live: LiveScorer, shape: Shape, cpu: Sequence[int], memory: Sequence[int],
          gpus: Sequence[Sequence[int]], labels: Sequence[Mapping[str, str]] = ()) -> list[int]:
    """Candidate indexes (each fits one pod of ``shape``), lowest score first, then the least GPU
    capacity left, then the least CPU left, then index. ``labels``: the candidates' node labels
    (their GPU model)."""
    width = max(1, max(len(g) for g in gpus))
    model = [live.codes.get(lb.get(GPU_MODEL_LABEL, ""), 0) for lb in labels] if labels else [0] * len(cpu)
    before = Nodes(np.array(cpu, dtype=np.int64), np.array(memory, dtype=np.int64) // MIB_MILLI,
                   np.array([list(g) + [0] * (width - len(g)) for g in gpus], dtype=np.int64),
                   np.array(model, dtype=np.int64))
    after = after_one_pod(before, shape)
    score = live.scorer.score(before, after, fragmentation(before, live.scorer.table))
    keys = (np.arange(len(cpu)), after.cpu, after.gpu.sum(axis=1), score)
    return [int(i) for i in np.lexsort(keys)]
