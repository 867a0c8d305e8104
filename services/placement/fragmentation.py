"""Expected GPU fragmentation of nodes for the mix of pod shapes seen so far (pure, numpy).

A node's free GPU capacity is *fragmented for a pod shape* when that shape cannot use it: all of
it when the shape does not fit the node at all (CPU, memory, GPU model or GPUs short), else the
partly used GPUs a whole-GPU shape cannot take, or the GPUs with less free than a sharing shape
asks. Weighted by how often each shape has been seen, it is the GPU capacity (milli) expected to be
wasted on the node: FGD's measure ("Beware of Fragmentation", ATC'23). CPU-only shapes never use
GPUs and count nothing. Placing a pod where this rises least keeps GPUs usable for what comes next.

gangway's score adds what FGD misses: GPUs *stranded* by CPU or memory. A node whose free CPU (or
memory) is short of what its free GPUs would need at the mix's average CPU per GPU strands the
difference, whichever shapes come. The score of a placement is the rise in expected fragmentation
plus ``STRANDED_WEIGHT`` times the rise in stranded GPU capacity; it steers CPU-hungry pods to
CPU-rich nodes before CPU runs out next to idle GPUs (measured: a tenth fewer unallocated GPUs
than FGD on the Alibaba traces, see ``gangway bench fgd``).

GPU models: a shape that may use only some models sees every other model's free GPUs as
fragmented (as in FGD). Restricted shapes are many and each is light, so they take part as classes
(same GPUs, same restriction), and their mean fragmentation weighs ``RESTRICTED_WEIGHT`` as much as
stranding: a pod that may use any model keeps off the scarce models restricted pods need (the
``gpuspec`` traces: fewer GPUs left unallocated than FGD's, where plain scoring did like best fit).

The mix is *learned*: shapes are counted as pods arrive (no look at the future), each weighs by
how often it came (FGD's popularity), and only the ``SHAPES_MAX`` heaviest take part, a bound on
the work per decision. Scores are integer arithmetic.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: GPU capacity of one whole GPU, in milli.
WHOLE = 1000
#: At most this many shapes weigh in a score (the heaviest ones).
SHAPES_MAX = 48
#: Weight of stranded GPU capacity against expected fragmentation (measured: 1 to 3 do well).
STRANDED_WEIGHT = 2
#: A shape's weight counts pods in this many parts (a forgetting mix counts fractions of pods).
WEIGHT_UNIT = 16
#: At most this many classes of model-restricted shapes weigh in a score (the heaviest ones).
CLASSES_MAX = 16
#: Weight of the model-restricted classes' mean fragmentation (as much as stranded capacity):
#: what keeps pods that may use any model off the scarce models restricted pods need.
RESTRICTED_WEIGHT = 2


class Shape(NamedTuple):
    """What one pod asks of one node. ``milli`` is per GPU (``WHOLE`` for whole GPUs, 0 for none)."""

    cpu: int
    memory: int
    gpus: int
    milli: int
    #: Index of the GPU-model restriction in the cluster's ``specs`` (0: any model).
    spec: int = 0


class Nodes(NamedTuple):
    """Free resources of some nodes: cpu and memory ``[C]``, GPU milli free per GPU ``[C, G]``
    (a GPU a node does not have counts as 0 free), and each node's GPU model code ``[C]``."""

    cpu: np.ndarray
    memory: np.ndarray
    gpu: np.ndarray
    model: np.ndarray

    def take(self, idx: np.ndarray) -> "Nodes":
        return Nodes(self.cpu[idx], self.memory[idx], self.gpu[idx], self.model[idx])


class ShapeTable(NamedTuple):
    """Shapes as arrays ``[S]``; ``allowed[S, models]`` says which GPU models each may use."""

    cpu: np.ndarray
    memory: np.ndarray
    gpus: np.ndarray
    milli: np.ndarray
    allowed: np.ndarray
    #: Which shapes may use only some GPU models ``[S] bool``.
    restricted: np.ndarray

    @staticmethod
    def of(shapes: list[Shape], specs: np.ndarray) -> "ShapeTable":
        col = np.array([[s.cpu, s.memory, s.gpus, s.milli, s.spec] for s in shapes], dtype=np.int64).reshape(-1, 5)
        return ShapeTable(col[:, 0], col[:, 1], col[:, 2], col[:, 3], specs[col[:, 4]], col[:, 4] != 0)


def fits(nodes: Nodes, shape: Shape, specs: np.ndarray) -> np.ndarray:
    """Which nodes can take one pod of ``shape`` now ``[C] bool``."""
    ok = (nodes.cpu >= shape.cpu) & (nodes.memory >= shape.memory)
    if shape.gpus == 0:
        return ok
    ok &= specs[shape.spec][nodes.model]
    if shape.milli < WHOLE:
        return ok & (nodes.gpu.max(axis=1) >= shape.milli)
    return ok & ((nodes.gpu == WHOLE).sum(axis=1) >= shape.gpus)


def fragmentation(nodes: Nodes, table: ShapeTable) -> np.ndarray:
    """GPU milli fragmented on each node for each shape ``[C, S]`` (int64)."""
    gpu = nodes.gpu
    total = gpu.sum(axis=1)[:, None]
    whole, levels, which = _thresholds(table)
    partial = (gpu[:, :, None] * (gpu[:, :, None] < levels[None, None, :])).sum(axis=1)[:, which]
    full = (gpu == WHOLE).sum(axis=1)[:, None]
    gpu_ok = np.where(whole, full >= table.gpus, gpu.max(axis=1)[:, None] >= table.milli)
    host = (nodes.cpu[:, None] >= table.cpu) & (nodes.memory[:, None] >= table.memory)
    host &= table.allowed[:, nodes.model].T
    frag = np.where(host & gpu_ok, partial, total)
    return np.where(table.gpus == 0, 0, frag).astype(np.int64)


_THRESHOLDS: dict[int, tuple[ShapeTable, np.ndarray, np.ndarray, np.ndarray]] = {}


def _thresholds(table: ShapeTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which shapes take whole GPUs, and the distinct thresholds below which a GPU's free capacity
    is no use to a shape with each shape's index among them (memo per table)."""
    found = _THRESHOLDS.get(id(table))
    if found is not None and found[0] is table:
        return found[1:]
    whole = table.milli >= WHOLE
    threshold = np.where(whole, WHOLE, table.milli)
    # Free capacity on GPUs with less free than the shape's threshold, per distinct threshold.
    levels, which = np.unique(threshold, return_inverse=True)
    if len(_THRESHOLDS) > 256:
        _THRESHOLDS.clear()
    _THRESHOLDS[id(table)] = (table, whole, levels, which)
    return whole, levels, which


def after_one_pod(nodes: Nodes, shape: Shape) -> Nodes:
    """Each node as it would be with one more pod of ``shape`` (every node must fit it); a sharing
    pod takes the GPU that fits it best."""
    gpu = nodes.gpu.copy()
    if shape.gpus and shape.milli < WHOLE:
        gpu[np.arange(len(gpu)), best_fit_gpu(gpu, shape.milli)] -= shape.milli
    elif shape.gpus:
        full = gpu == WHOLE
        gpu[full & (np.cumsum(full, axis=1) <= shape.gpus)] = 0
    return Nodes(nodes.cpu - shape.cpu, nodes.memory - shape.memory, gpu, nodes.model)


def best_fit_gpu(gpu: np.ndarray, milli: int) -> np.ndarray:
    """Per node, the GPU with the least free that still holds ``milli`` (lowest index on ties)."""
    return np.where(gpu >= milli, gpu, WHOLE + 1).argmin(axis=1)


def stranded(nodes: Nodes, cpu_per_gpu: tuple[int, int], memory_per_gpu: tuple[int, int]) -> np.ndarray:
    """GPU milli free on each node without the CPU or memory to go with it ``[C]``; ``x_per_gpu``
    is the mix's average as a fraction (amount, GPU milli)."""
    return stranded_of(nodes.gpu.sum(axis=1), nodes.cpu, nodes.memory, cpu_per_gpu, memory_per_gpu)


def stranded_of(free: np.ndarray, cpu: np.ndarray, memory: np.ndarray, cpu_per_gpu: tuple[int, int],
                memory_per_gpu: tuple[int, int]) -> np.ndarray:
    """``stranded`` from each node's free GPU milli (summed), CPU and memory ``[C]``."""
    cpu_short = free - cpu * cpu_per_gpu[1] // max(1, cpu_per_gpu[0])
    memory_short = free - memory * memory_per_gpu[1] // max(1, memory_per_gpu[0])
    return np.maximum(0, cpu_short) + np.maximum(0, memory_short)


class Scorer(NamedTuple):
    """What a placement is scored against: the heaviest shapes of the mix and their weights."""

    table: ShapeTable
    columns: list[int]
    weights: np.ndarray
    cpu_per_gpu: tuple[int, int]
    memory_per_gpu: tuple[int, int]

    def score(self, before: Nodes, after: Nodes, frag_before: np.ndarray) -> np.ndarray:
        """Rise in weighted fragmentation plus weighted rise in stranded capacity, per node ``[C]``.
        ``frag_before`` is ``fragmentation(before, self.table)`` (kept by the caller)."""
        rise = fragmentation(after, self.table) - frag_before
        strand = stranded(after, self.cpu_per_gpu, self.memory_per_gpu)
        strand -= stranded(before, self.cpu_per_gpu, self.memory_per_gpu)
        return self.combine(rise, strand)

    def combine(self, rise: np.ndarray, strand: np.ndarray) -> np.ndarray:
        """The score from the rise in fragmentation per shape ``[C, S]`` and in stranded capacity ``[C]``."""
        delta = rise @ self.weights
        total = int(self.weights.sum())
        score = delta + STRANDED_WEIGHT * total * strand
        restricted = self.table.restricted
        if restricted.any():
            weights = np.where(restricted, self.weights, 0)
            score += RESTRICTED_WEIGHT * total * (rise @ weights) // max(1, int(weights.sum()))
        return score

    def combine_rows(self, rise: list[list[int]], strand: list[int]) -> list[int]:
        """``combine`` in plain integers, for a few nodes (the live scorer's kinds of node: a handful,
        where numpy's fixed cost per operation is most of the work); the same figures."""
        weights = self.weights.tolist()
        total = sum(weights)
        restricted = [w if r else 0 for w, r in zip(weights, self.table.restricted.tolist())]
        share = max(1, sum(restricted))
        out = []
        for row, stranded_by in zip(rise, strand):
            score = sum(r * w for r, w in zip(row, weights)) + STRANDED_WEIGHT * total * stranded_by
            if any(restricted):
                score += RESTRICTED_WEIGHT * total * sum(r * w for r, w in zip(row, restricted)) // share
            out.append(score)
        return out


class ShapeMix:
    """The shapes seen so far and how often: the weights of the expected fragmentation.

    ``counts`` may be fractional (a mix that forgets old shapes scales them down); weights are
    rounded to integers when a scorer is built, so scores stay integer arithmetic."""

    def __init__(self) -> None:
        self.shapes: list[Shape] = []
        self.index: dict[Shape, int] = {}
        self.counts: list[float] = []

    def see(self, shape: Shape, count: float = 1) -> int:
        i = self.index.get(shape)
        if i is None:
            i = self.index[shape] = len(self.shapes)
            self.shapes.append(shape)
            self.counts.append(0)
        self.counts[i] += count
        return i

    def weight(self, i: int) -> int:
        """How much a shape weighs: how often it came (FGD's popularity; in 1/``WEIGHT_UNIT`` pods)."""
        return max(1, round(self.counts[i] * WEIGHT_UNIT))

    def top(self) -> list[int]:
        """Indexes of the shapes a scorer weighs: the ``SHAPES_MAX`` heaviest shapes that may use
        any GPU model, then one shape per class of model-restricted shapes (same GPUs, same
        restriction; its most frequent shape stands for the class). A restricted shape is rarely
        heavy alone, but the class is what keeps unrestricted pods off the models it needs."""
        return [i for i, _, _ in self._columns()]

    def _columns(self) -> list[tuple[int, int, float]]:
        """(shape index, weight, count) of each column of the scorer."""
        plain = sorted((i for i, s in enumerate(self.shapes) if s.spec == 0 and s.gpus),
                       key=lambda i: (-self.weight(i), i))
        out = [(i, self.weight(i), self.counts[i]) for i in plain[:SHAPES_MAX]]
        classes: dict[tuple[int, int, int], list[int]] = {}
        for i, s in enumerate(self.shapes):
            if s.spec and s.gpus:
                classes.setdefault((s.gpus, s.milli, s.spec), []).append(i)
        ranked = sorted(classes.values(), key=lambda members: (-sum(self.weight(i) for i in members), members[0]))
        for members in ranked[:CLASSES_MAX]:
            first = min(members, key=lambda i: (-self.counts[i], i))
            out.append((first, sum(self.weight(i) for i in members), sum(self.counts[i] for i in members)))
        return out

    def scorer(self, specs: np.ndarray) -> Scorer:
        chosen = self._columns()
        columns = [i for i, _, _ in chosen]
        shapes = [self.shapes[i] for i in columns]
        count = {i: c for i, _, c in chosen}
        gpu = round(sum(count[i] * s.gpus * s.milli for i, s in zip(columns, shapes)))
        cpu = round(sum(count[i] * s.cpu for i, s in zip(columns, shapes) if s.gpus))
        memory = round(sum(count[i] * s.memory for i, s in zip(columns, shapes) if s.gpus))
        weights = np.array([w for _, w, _ in chosen], dtype=np.int64)
        return Scorer(_table(shapes, specs), columns, weights, (cpu, gpu), (memory, gpu))


_TABLES: dict[tuple, tuple[np.ndarray, ShapeTable]] = {}


def _table(shapes: list[Shape], specs: np.ndarray) -> ShapeTable:
    """``ShapeTable.of``, memo: the mix's weights change with every pod, its shapes seldom (the
    table is only read)."""
    key = (tuple(shapes), specs.shape, specs.tobytes())
    found = _TABLES.get(key)
    if found is None:
        table = ShapeTable.of(shapes, specs)
        for column in table:
            column.flags.writeable = False
        if len(_TABLES) > 256:
            _TABLES.clear()
        found = _TABLES[key] = (specs, table)
    return found[1]
