"""Topology levels and domains (pure): network block → rack → node → NVLink island → GPU.

Levels are node label keys, coarsest first (Kueue's ``Topology`` levels; the defaults are those of
Kueue's TAS documentation). A *domain* of a level is the set of nodes sharing the values of that
level and of every coarser one, so rack ``r1`` of block ``b1`` and rack ``r1`` of block ``b2`` are
two domains. A request may also name a label key that is not a level: its domains are the nodes
sharing that label's value. The node level (``kubernetes.io/hostname``) falls back to the node's
name when the label is missing. Below the node, ``ISLAND`` asks for one NVLink island.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gangway.events.freeindex import BLOCK, RACK

HOSTNAME = "kubernetes.io/hostname"
#: Asks for every pod of a pod set inside one NVLink island of one node.
ISLAND = "gangway.io/nvlink-island"
#: Node label (or annotation) giving a node's island sizes: ``"8"``, ``"4,4"``; none: PCIe only.
ISLANDS_LABEL = "gangway.io/nvlink-islands"
DEFAULT_LEVELS: tuple[str, ...] = (BLOCK, RACK, HOSTNAME)


def label_value(labels: Mapping[str, str], node: str, key: str) -> str | None:
    if key == HOSTNAME:
        return labels.get(key, node)
    return labels.get(key)


def domain_key(labels: Mapping[str, str], node: str, level: str,
               levels: tuple[str, ...] = DEFAULT_LEVELS) -> tuple[str, ...] | None:
    """The domain of ``level`` a node belongs to (None: the node lacks a label on the way)."""
    keys = levels[: levels.index(level) + 1] if level in levels else (level,)
    values = tuple(label_value(labels, node, k) for k in keys)
    return None if any(v is None for v in values) else values


def domains(nodes: Iterable[tuple[str, Mapping[str, str]]], level: str,
            levels: tuple[str, ...] = DEFAULT_LEVELS) -> dict[tuple[str, ...], list[str]]:
    """Domain → its node names (sorted), for every node that has one at ``level``."""
    out: dict[tuple[str, ...], list[str]] = {}
    for name, labels in nodes:
        key = domain_key(labels, name, level, levels)
        if key is not None:
            out.setdefault(key, []).append(name)
    return {k: sorted(v) for k, v in sorted(out.items())}


def fallbacks(preferred: str, levels: tuple[str, ...] = DEFAULT_LEVELS) -> list[str | None]:
    """Where a preferred level falls back to: each coarser level in turn, then anywhere (None)."""
    if preferred == ISLAND:
        return [ISLAND, *reversed(levels), None]
    if preferred not in levels:
        return [preferred, None]
    return [*reversed(levels[: levels.index(preferred) + 1]), None]


def parse_islands(text: str | None, gpus: int) -> list[int]:
    """``"4,4"`` → [4, 4]; a layout that does not add up to the node's GPUs is ignored ([])."""
    if not text:
        return []
    try:
        sizes = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        return []
    return sizes if sizes and all(s > 0 for s in sizes) and sum(sizes) == gpus else []


def describe(level: str | None, key: tuple[str, ...] | None) -> str:
    if level is None or key is None:
        return ""
    return f" in {level}={key[-1]}"
