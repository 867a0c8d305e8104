"""Topology levels and domains (pure): network block → rack → node → NVLink island → GPU.

Levels are node label keys, coarsest first. Where they come from:

- a Kueue ``Topology`` (``spec.levels[].nodeLabel``) named by a ResourceFlavor's ``spec.topologyName``
  gives the levels of the nodes of that flavor (``node_levels``). A domain of one of its levels is
  the set of nodes sharing the values of that level *and of every coarser one*, so rack ``r1`` of
  block ``b1`` and rack ``r1`` of block ``b2`` are two domains; a node lacking one of those labels
  is in no domain of that level (Kueue assumes every node of a TAS flavor carries them all), and
  a level the Topology does not list, the node level included, has no domain among its nodes;
- without a Topology, a request names a label and the nodes that carry it are its domains, one per
  value. Kueue's default block and rack keys still nest (a rack domain is the rack *within its
  block* when the node carries a block label), so racks reused across blocks stay apart.

The node level (``kubernetes.io/hostname``) needs only the node (unless its Topology leaves it
out): every node is a domain of it, whatever else it carries (the label, when missing, is the node's name). Below the node, ``ISLAND``
asks for one NVLink island (nodes declaring ``gangway.io/nvlink-islands``).
A request for a level no candidate node carries can never be met: ``never_placeable`` says so in a
sentence naming the missing label, and admission reports it with its own reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gangway.events.contract import Contract
from gangway.events.freeindex import BLOCK, RACK

HOSTNAME = "kubernetes.io/hostname"
#: Asks for every pod of a pod set inside one NVLink island of one node.
ISLAND = "gangway.io/nvlink-island"
#: Node label (or annotation) giving a node's island sizes: ``"8"``, ``"4,4"``; none: PCIe only.
ISLANDS_LABEL = "gangway.io/nvlink-islands"
#: Kueue's documented TAS levels: the hierarchy used for racks and blocks when no Topology applies.
DEFAULT_LEVELS: tuple[str, ...] = (BLOCK, RACK, HOSTNAME)

Levels = tuple[str, ...]


def label_value(labels: Mapping[str, str], node: str, key: str) -> str | None:
    if key == HOSTNAME:
        return labels.get(key, node)
    return labels.get(key)


def domain_key(labels: Mapping[str, str], node: str, level: str,
               levels: Levels | None = None) -> tuple[str, ...] | None:
    """The domain of ``level`` a node belongs to (None: it belongs to none).

    ``levels``: the node's Topology levels (None: no Topology applies to the node). A level its
    Topology does not list is none of the node's, the node level too (Kueue: "no requested
    topology level")."""
    if levels is not None and level not in levels:
        return None
    if level == HOSTNAME:
        return ("", node)
    if levels is not None:
        keys = levels[: levels.index(level) + 1]
        values = tuple(labels.get(k) for k in keys if k != HOSTNAME)
        return None if any(v is None for v in values) else values
    value = labels.get(level)
    if value is None:
        return None
    if level in DEFAULT_LEVELS:  # no Topology: Kueue's default keys still nest where present
        coarser = DEFAULT_LEVELS[: DEFAULT_LEVELS.index(level)]
        return (*(labels.get(k, "") for k in coarser), value)
    return (level, value)


def domains(nodes: Iterable[tuple[str, Mapping[str, str]]], level: str,
            levels: Levels | None | Mapping[str, Levels] = None) -> dict[tuple[str, ...], list[str]]:
    """Domain → its node names (sorted), for every node that has one at ``level``. ``levels``:
    one Topology for every node, or each node's own (a mapping; a node not in it has none)."""
    out: dict[tuple[str, ...], list[str]] = {}
    per_node = isinstance(levels, Mapping)
    for name, labels in nodes:
        own = levels.get(name) if per_node else levels
        key = domain_key(labels, name, level, own)
        if key is not None:
            if per_node and own is not None and level in own:
                key = (own, *key)  # two Topologies never share a domain
            out.setdefault(key, []).append(name)
    return {k: sorted(v) for k, v in sorted(out.items(), key=lambda item: tuple(map(str, item[0])))}


def fallbacks(preferred: str, levels: Levels | None = None) -> list[str | None]:
    """Where a preferred level falls back to: each coarser level in turn, then anywhere (None)."""
    chain = levels if levels is not None else DEFAULT_LEVELS
    if preferred == ISLAND:
        return [ISLAND, HOSTNAME, *[lv for lv in reversed(chain) if lv != HOSTNAME], None]
    if preferred == HOSTNAME:
        return [HOSTNAME, *[lv for lv in reversed(chain) if lv != HOSTNAME], None]
    if preferred not in chain:
        return [preferred, None]
    return [*reversed(chain[: chain.index(preferred) + 1]), None]


_LEVELS_CACHE: dict[tuple, tuple[object, dict[str, Levels], object]] = {}


def node_levels(contract: Contract | None, nodes: Mapping[str, object], epoch: int) -> dict[str, Levels]:
    """Each node's Topology levels: those of the first flavor (by name) that selects the node and
    names a Topology defined in the contract. Nodes of no such flavor are left out. ``nodes`` maps
    names to objects with ``labels``; ``epoch`` changes whenever a node does (a memo key)."""
    if contract is None or not contract.topologies:
        return {}
    key = (id(contract), id(nodes), epoch)
    cached = _LEVELS_CACHE.get(key)
    if cached is not None and cached[0] is nodes and cached[2] is contract:  # (the references keep the ids unique)
        return cached[1]
    topologies = {t.name: tuple(t.levels) for t in contract.topologies}
    flavors = sorted((f for f in contract.flavors if f.topology_name in topologies), key=lambda f: f.name)
    out: dict[str, Levels] = {}
    for name, node in nodes.items():
        labels = node.labels
        for flavor in flavors:
            if all(labels.get(k) == v for k, v in flavor.node_labels.items()):
                out[name] = topologies[flavor.topology_name]
                break
    if len(_LEVELS_CACHE) > 16:
        _LEVELS_CACHE.clear()
    _LEVELS_CACHE[key] = (nodes, out, contract)
    return out


def common_levels(names: Sequence[str], levels: Mapping[str, Levels]) -> Levels | None:
    """The one Topology of ``names`` (None: none applies, or they differ): what fallbacks climb."""
    if not levels:
        return None
    found = {levels.get(n) for n in names}
    return next(iter(found)) if len(found) == 1 else None


def missing_label(nodes: Iterable[tuple[str, Mapping[str, str], int]], level: str,
                  levels: Mapping[str, Levels], none: str = "no node") -> str | None:
    """Why no node of ``nodes`` (name, labels, NVLink island count) can be a domain of ``level``,
    naming the label none of them carries; None when at least one can. ``none`` names the nodes
    in the sentence: "no node of its flavor" when they are a flavor's."""
    absent: dict[str, None] = {}
    not_listed: dict[Levels, None] = {}
    for name, labels, islands in nodes:
        if level == ISLAND:
            if islands:
                return None
            continue
        own = levels.get(name)
        if own is not None and level not in own:
            not_listed[own] = None
            continue
        if level == HOSTNAME:
            return None
        keys = own[: own.index(level) + 1] if own is not None else (level,)
        lacking = [k for k in keys if k != HOSTNAME and k not in labels]
        if not lacking:
            return None
        absent.update(dict.fromkeys(lacking))
    if level == ISLAND:
        return f"{none} declares NVLink islands (label or annotation {ISLANDS_LABEL})"
    if not absent and not_listed:
        return f"it is no level of its nodes' Topology ({'; '.join(', '.join(levels) for levels in not_listed)})"
    if not absent:
        return "there are no nodes to place it on"
    names = [k for k in absent if k == level] or list(absent)
    return f"{none} carries the label {names[0]}" + (
        "" if names[0] == level else f" (a coarser level of {level} in its Topology)")


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
