"""The GPUs of one node, one by one: free milli per GPU, NVLink islands, and which GPUs pods take.

A node's ``nvidia.com/gpu`` allocatable (in milli) is ``n`` whole GPUs; each GPU has 0..1000 milli
free. A pod asking ``g`` milli takes ``g // 1000`` whole GPUs and, when ``g % 1000`` is not 0, that
fraction of one more GPU (GPU sharing, as in the Alibaba trace). An NVLink island is a run of GPU
indexes (``islands=[4, 4]``: GPUs 0-3 and 4-7); a node without islands is PCIe-only.

Choices are best fit and deterministic, shared by the placement service (which names the GPUs in
``PodAssignment.gpus``) and by the fold (for placements that did not name them):
- whole GPUs come from the island with the fewest free whole GPUs that still holds them all, so big
  islands stay whole; when no island holds them, from the emptiest islands first;
- a fraction goes to the GPU with the least free that still holds it (an already shared GPU before
  a whole one). Pure, standard library only.
"""

from __future__ import annotations

#: The extended resource GPUs are counted in (milli: ``WHOLE`` a GPU).
RESOURCE = "nvidia.com/gpu"
WHOLE = 1000
#: The most GPUs a node may have. The largest nodes have 16 (8 is usual); each GPU is an entry of
#: its own here (what each GPU holds), so a count far beyond any node's is refused where nodes are
#: read (``NodeObserved``, and a cluster file naming the field), never given a list that long.
MAX_PER_NODE = 1024


def slots(allocatable_milli: int) -> list[int]:
    """Free milli per GPU of a node with this much ``nvidia.com/gpu`` allocatable."""
    return [WHOLE] * (max(0, allocatable_milli) // WHOLE)


def island_ranges(islands: list[int], gpus: int) -> list[range]:
    """Index ranges of the islands; without a layout all GPUs form one group (islands unknown)."""
    if not islands or sum(islands) != gpus:
        return [range(gpus)] if gpus else []
    out, start = [], 0
    for size in islands:
        out.append(range(start, start + size))
        start += size
    return out


def per_pod(gpu_milli: int) -> tuple[int, int]:
    """(whole GPUs, fraction of one more GPU in milli) one pod takes."""
    return gpu_milli // WHOLE, gpu_milli % WHOLE


def indexes_per_pod(gpu_milli: int) -> int:
    whole, frac = per_pod(gpu_milli)
    return whole + (1 if frac else 0)


def _whole(free: list[int], ranges: list[range], n: int, within: range | None) -> list[int] | None:
    groups = [within] if within is not None else ranges
    full = [[i for i in r if free[i] == WHOLE] for r in groups]
    holding = sorted((len(f), k) for k, f in enumerate(full) if len(f) >= n)
    if holding:
        return full[holding[0][1]][:n]
    if within is not None:
        return None
    taken: list[int] = []
    for _, k in sorted((len(f), k) for k, f in enumerate(full) if f):
        taken += full[k][: n - len(taken)]
        if len(taken) == n:
            return taken
    return None


def _fraction(free: list[int], milli: int, within: range | None) -> int | None:
    pool = within if within is not None else range(len(free))
    fitting = [(free[i], i) for i in pool if free[i] >= milli]
    return min(fitting)[1] if fitting else None


def choose(free: list[int], islands: list[int], gpu_milli: int, count: int,
           within: range | None = None) -> list[int] | None:
    """GPU indexes for ``count`` pods of ``gpu_milli`` each (per pod: its whole GPUs, then its
    shared one), or None when they do not all fit. ``free`` is not changed. ``within`` keeps every
    GPU in one index range (an island)."""
    trial = list(free)
    ranges = island_ranges(islands, len(free))
    whole, frac = per_pod(gpu_milli)
    chosen: list[int] = []
    for _ in range(count):
        got = _whole(trial, ranges, whole, within) if whole else []
        if got is None:
            return None
        for i in got:
            trial[i] = 0
        if frac:
            j = _fraction(trial, frac, within)
            if j is None:
                return None
            trial[j] -= frac
            got = got + [j]
        chosen += got
    return chosen


def apply(free: list[int], indexes: list[int], gpu_milli: int, sign: int = -1) -> None:
    """Take (sign -1) or give back (+1) what pods of ``gpu_milli`` hold on ``indexes``."""
    whole, frac = per_pod(gpu_milli)
    if whole and not frac:  # whole GPUs only: every index is one whole GPU
        step = sign * WHOLE
        for i in indexes:
            free[i] += step
        return
    step = indexes_per_pod(gpu_milli)
    for start in range(0, len(indexes), max(1, step)):
        pod = indexes[start:start + step]
        for i in pod[:whole]:
            free[i] += sign * WHOLE
        if frac:
            free[pod[-1]] += sign * frac


def fits(free: list[int], indexes: list[int], gpu_milli: int, count: int) -> bool:
    """Do ``count`` pods of ``gpu_milli`` fit on exactly these GPU indexes?"""
    if len(indexes) != count * indexes_per_pod(gpu_milli) or (indexes and not 0 <= min(indexes) <= max(indexes) < len(free)):
        return False
    trial = list(free)
    apply(trial, indexes, gpu_milli)
    return all(trial[i] >= 0 for i in indexes)  # (another GPU may be below zero: taken over, not yet left)


def largest_free_island(free: list[int], islands: list[int]) -> int:
    """Whole GPUs free together in the node's best island (all free GPUs when islands are unknown)."""
    return max((sum(1 for i in r if free[i] == WHOLE) for r in island_ranges(islands, len(free))), default=0)
