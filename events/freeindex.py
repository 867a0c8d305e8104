"""How fragmented the free GPUs are, kept up to date by the fold one node change at a time.

The index counts whole free GPUs only (a partly used GPU is not room for a whole-GPU pod):
- ``islands``: how many NVLink islands have exactly k whole GPUs free (a node without an island
  layout counts as one island), so "how many k-GPU tensor-parallel pods still fit, each inside one
  island" is a sum over a few keys, and the largest free island is the largest key;
- ``nodes``: the same per node;
- ``domains``: whole GPUs free per rack and per network block.
``measure`` turns it into the published ``Fragmentation``. Pure, standard library and msgspec only.
"""

from __future__ import annotations

import msgspec

from gangway.events import gpus
from gangway.events.catalogue import Fragmentation

BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
#: Job shapes the measure counts (whole GPUs inside one NVLink island).
COMMON_SHAPES = (1, 2, 4, 8)


class FreeIndex(msgspec.Struct):
    islands: dict[int, int] = {}
    nodes: dict[int, int] = {}
    #: "block/<b>" or "rack/<b>/<r>" → whole GPUs free there.
    domains: dict[str, int] = {}


def _domains(labels: dict[str, str]) -> list[str]:
    block, rack = labels.get(BLOCK), labels.get(RACK)
    out = [f"block/{block}"] if block is not None else []
    return out + ([f"rack/{block or ''}/{rack}"] if rack is not None else [])


def _bump(counts: dict, key, by: int) -> None:
    # Keys are never removed (a count may be 0): the dict's order then depends only on which keys
    # ever appeared, so folding an event delivered twice gives the same bytes.
    counts[key] = counts.get(key, 0) + by


def change(index: FreeIndex, free: list[int], islands: list[int], labels: dict[str, str], sign: int) -> None:
    """Count a node in (sign +1) or out (-1) of the index, as it is now."""
    if not free:
        return
    if not islands:  # one island: the whole node (``gpus.island_ranges``)
        whole = free.count(gpus.WHOLE)
        _bump(index.islands, whole, sign)
    else:
        per_island = [free[r.start:r.stop].count(gpus.WHOLE) for r in gpus.island_ranges(islands, len(free))]
        for k in per_island:
            _bump(index.islands, k, sign)
        whole = sum(per_island)
    _bump(index.nodes, whole, sign)
    if labels:
        for domain in _domains(labels):
            _bump(index.domains, domain, sign * whole)


def measure(index: FreeIndex) -> Fragmentation:
    """The published measure: largest free room per level and how many common shapes still fit."""
    def largest(prefix: str) -> int:
        return max((v for k, v in index.domains.items() if k.startswith(prefix)), default=0)
    islands = [(k, n) for k, n in index.islands.items() if n]  # (an island count of 0 adds nothing)
    return Fragmentation(
        gpus_free=sum(k * n for k, n in index.nodes.items()),
        largest_island=max((k for k, n in islands if n > 0), default=0),
        largest_node=max((k for k, n in index.nodes.items() if n > 0), default=0),
        largest_rack=largest("rack/"), largest_block=largest("block/"),
        fits={key: sum((k // s) * n for k, n in islands) for key, s in _SHAPE_KEYS},
    )


_SHAPE_KEYS = [(str(s), s) for s in COMMON_SHAPES]
