"""The fragmentation score in the live placement service: which node one GPU pod should take.

The mix is the pods queued so far (``State.pod_shapes``, kept by the fold); the score is the
offline benchmark's (``fragmentation.py``): the rise in expected fragmentation plus the GPUs
stranded by CPU or memory. Memory is scored in MiB so products stay inside int64. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gangway.services.placement.fragmentation import (  # noqa: F401 (Scorer, Shape: re-exported)
    WHOLE, Nodes, Scorer, Shape, ShapeMix, after_one_pod, fragmentation,
)

MIB_MILLI = 1000 * 2**20
#: The GPU model restriction of every live shape (ResourceFlavors restrict nodes instead).
ANY_MODEL = np.ones((1, 1), dtype=bool)


def shape_of(cpu: int, memory: int, gpu: int) -> Shape | None:
    """One pod as a scored shape: whole GPUs, or a fraction of one GPU (else not scored)."""
    if gpu <= 0:
        return None
    if gpu % WHOLE == 0:
        return Shape(cpu, memory // MIB_MILLI, gpu // WHOLE, WHOLE)
    if gpu < WHOLE:
        return Shape(cpu, memory // MIB_MILLI, 1, gpu)
    return None


def scorer_of(pod_shapes: dict[str, int]) -> Scorer | None:
    """The scorer for the pods queued so far (None before any GPU pod)."""
    mix = ShapeMix()
    for key, count in sorted(pod_shapes.items()):
        cpu, memory, gpu = (int(part) for part in key.split("/"))
        shape = shape_of(cpu, memory, gpu)
        if shape is not None:
            i = mix.see(shape)
            mix.counts[i] += count - 1
    return mix.scorer(ANY_MODEL) if mix.shapes else None


def order(scorer: Scorer, shape: Shape, cpu: Sequence[int], memory: Sequence[int],
          gpus: Sequence[Sequence[int]]) -> list[int]:
    """Candidate indexes (each fits one pod of ``shape``), lowest score first, then the least GPU
    capacity left, then the least CPU left, then index."""
    width = max(1, max(len(g) for g in gpus))
    before = Nodes(np.array(cpu, dtype=np.int64), np.array(memory, dtype=np.int64) // MIB_MILLI,
                   np.array([list(g) + [0] * (width - len(g)) for g in gpus], dtype=np.int64),
                   np.zeros(len(cpu), dtype=np.int64))
    after = after_one_pod(before, shape)
    score = scorer.score(before, after, fragmentation(before, scorer.table))
    keys = (np.arange(len(cpu)), after.cpu, after.gpu.sum(axis=1), score)
    return [int(i) for i in np.lexsort(keys)]
