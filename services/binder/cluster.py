"""The simulated cluster's nodes, read from Kubernetes Node objects (``kubectl get nodes -o yaml``).

Topology comes from the nodes' labels (block, rack, hostname: ``placement/topology.py``) and the
NVLink islands from the label or annotation ``gangway.io/nvlink-islands`` (``"8"``, ``"4,4"``).
A node takes no new pods (``NodeObserved.unavailable``) as Kubernetes' own scheduler sees it:
cordoned (``spec.unschedulable``), a Ready condition that is not True (False or Unknown), or a
``node.kubernetes.io/*`` NoSchedule/NoExecute taint (the ones Kubernetes sets: not-ready,
unreachable, unschedulable, …). Its other NoSchedule/NoExecute taints are left to the pods'
tolerations. The Kubernetes binder reads the live Node objects through the same ``_node``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gangway.contract.kueue import name_problem
from gangway.contract.yamldocs import documents
from gangway.events import gpus as gpu_slots
from gangway.events.catalogue import NodeObserved
from gangway.events.contract import KEEPS_OFF, TolerationError, taint_of
from gangway.events.quantity import QuantityError, is_extended_resource, parse_milli
from gangway.events.resources import GPU
from gangway.events.text import NotUtf8, digits, utf8_text
from gangway.services.placement.topology import ISLANDS_LABEL, parse_islands


#: The prefix of the taints Kubernetes itself sets (not-ready, unreachable, unschedulable…).
SYSTEM_TAINT_PREFIX = "node.kubernetes.io/"


class ClusterFileError(ValueError):
    """A cluster file that is not a list of Kubernetes Nodes."""


def _nodes_in(doc, filename: str) -> list[dict]:
    if not isinstance(doc, dict):
        raise ClusterFileError(f"{filename}: a document is not a mapping but {type(doc).__name__}: a cluster file "
                               "holds Kubernetes Nodes (kind: Node, or a List of them)")
    if doc.get("kind") in ("List", "NodeList"):
        return [item for item in doc.get("items") or []]
    return [doc]


def read_cluster_file(path: str | Path) -> list[NodeObserved]:
    """The nodes of a cluster file, read as every command reading one reads it (`gangway dry-run`,
    `gangway up`, the simulated binder): ClusterFileError, one line, for a file that is not UTF-8
    (``text.NotUtf8``'s words) or not Kubernetes Nodes; OSError for a file that cannot be read."""
    try:
        text = utf8_text(Path(path).read_bytes())
    except NotUtf8 as exc:
        raise ClusterFileError(f"{path}: {exc}") from None
    return load_nodes(text, str(path))


def load_nodes(text: str, filename: str = "<cluster>") -> list[NodeObserved]:
    try:
        # libyaml's loader where PyYAML has it: a 2,500-node cluster file took the binder 2 s to read
        docs = [d for d in documents(text, getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d is not None]
    except yaml.YAMLError as exc:  # (one line: where, and what)
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        column = f" (column {mark.column + 1})" if mark is not None else ""
        raise ClusterFileError(f"{filename}: {where}not YAML: {getattr(exc, 'problem', None) or exc}{column}") from None
    nodes: list[NodeObserved] = []
    for doc in docs:
        for i, item in enumerate(_nodes_in(doc, filename)):
            nodes.append(_node(item, filename, i))
    if not nodes:
        raise ClusterFileError(f"{filename}: no Node in it: a cluster file holds the cluster's Kubernetes Nodes "
                               "(kind: Node, or a List of them, as `kubectl get nodes -o yaml` writes)")
    seen: set[str] = set()
    repeated = sorted({n.node for n in nodes if n.node in seen or seen.add(n.node)})
    if repeated:
        raise ClusterFileError(f"{filename}: " + (f"node names {', '.join(repeated)} repeat" if len(repeated) > 1
                                                  else f"node name {repeated[0]} repeats")
                               + ": each Node must be named once")
    return nodes


def node_unavailable(node: dict) -> str:
    """Why a Node takes no new pods ('' when it does): cordoned, NotReady, or a Kubernetes taint."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    if spec.get("unschedulable") is True:
        return "cordoned (spec.unschedulable)"
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready" and cond.get("status") != "True":
            return f"NotReady ({cond.get('reason') or cond.get('status')})"
    for taint in spec.get("taints") or []:
        if isinstance(taint, dict) and str(taint.get("key", "")).startswith(SYSTEM_TAINT_PREFIX) \
                and taint.get("effect") in ("NoSchedule", "NoExecute"):
            return f"taint {taint['key']}:{taint['effect']}"
    return ""



def _node(item: dict, filename: str, index: int = 0) -> NodeObserved:
    if not isinstance(item, dict) or item.get("kind", "Node") != "Node":
        what = f"kind {item.get('kind')!r}" if isinstance(item, dict) else type(item).__name__
        name = item.get("metadata", {}).get("name") if isinstance(item, dict) and isinstance(item.get("metadata"), dict) else None
        raise ClusterFileError(f"{filename}: item {index + 1}{f' ({name})' if name else ''} is not a Node: {what}")
    meta = item.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ClusterFileError(f"{filename}: a Node has no metadata.name")
    if problem := name_problem(name):
        raise ClusterFileError(f"{filename}: Node metadata.name: {problem}")
    where = f"{filename}: Node {name}"
    status = item.get("status") or {}
    part = "allocatable" if status.get("allocatable") else "capacity"
    allocatable = status.get(part) or {}
    resources = {}
    for resource, quantity in sorted(allocatable.items()):
        field = f"{where}: status.{part}.{resource}"
        try:
            milli = parse_milli(quantity)
        except QuantityError as exc:
            raise ClusterFileError(f"{field}: {exc}") from exc
        if milli < 0:
            raise ClusterFileError(f"{field}: {quantity!r} is negative: a node has zero or more of a resource")
        if is_extended_resource(str(resource)) and milli % 1000:
            # Kubernetes counts extended resources (GPUs…) in whole devices
            raise ClusterFileError(f"{field}: {quantity!r} is not a whole number: "
                                   f"{'GPUs' if resource == GPU else resource} must be a whole "
                                   "non-negative number")
        if resource == GPU and milli > gpu_slots.MAX_PER_NODE * gpu_slots.WHOLE:
            raise ClusterFileError(f"{field}: {quantity!r} GPUs on one node: at most {gpu_slots.MAX_PER_NODE} "
                                   "(the largest nodes have 16; gangway keeps each GPU's use apart)")
        resources[str(resource)] = milli
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = meta.get("annotations") or {}
    layout = annotations.get(ISLANDS_LABEL, labels.get(ISLANDS_LABEL))
    islands = _islands(where, layout, resources.get(GPU, 0) // 1000, _capacity_gpus(status))
    spec = item.get("spec") or {}
    if not isinstance(spec, dict):
        raise ClusterFileError(f"{where}: spec must be a mapping")
    if spec.get("unschedulable") not in (None, True, False):
        raise ClusterFileError(f"{where}: spec.unschedulable must be true or false, not {spec['unschedulable']!r}")
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list) or not all(isinstance(c, dict) for c in conditions):
        raise ClusterFileError(f"{where}: status.conditions must be a list of conditions")
    taints = []
    for i, written in enumerate(spec.get("taints") or []):
        try:
            taint = taint_of(written)
        except TolerationError as exc:
            raise ClusterFileError(f"{where}: spec.taints[{i}]{'.' + exc.field if exc.field else ''}: {exc.why}") from None
        # Kubernetes' own taints (node.kubernetes.io/…) make the node unavailable (node_unavailable);
        # PreferNoSchedule keeps no pod off.
        if taint.effect in KEEPS_OFF and not taint.key.startswith(SYSTEM_TAINT_PREFIX):
            taints.append(taint)
    return NodeObserved(node=name, allocatable=resources, labels=labels, islands=islands,
                        unavailable=node_unavailable(item),
                        taints=sorted(taints, key=lambda t: (t.key, t.effect, t.value)))


def _capacity_gpus(status: dict) -> int | None:
    """The GPUs of a node's ``status.capacity`` (None: not given, or not a quantity)."""
    capacity = status.get("capacity")
    try:
        return parse_milli(capacity[GPU]) // 1000 if isinstance(capacity, dict) and GPU in capacity else None
    except QuantityError:
        return None


def _islands(where: str, layout, gpus: int, capacity: int | None = None) -> list[int]:
    """The NVLink islands of ``gangway.io/nvlink-islands`` (``"4,4"``), checked against the node's GPUs;
    unknown ([]) when they add up to its capacity and it has fewer allocatable — a device gone unhealthy
    (the device plugin takes it out of allocatable), and which one is not said."""
    if not layout:
        return []
    said = f"{where}: {ISLANDS_LABEL}={layout!r}"
    parts = [part.strip() for part in str(layout).split(",")]
    bad = next((part for part in parts if not digits(part)), None)
    if bad is not None:
        raise ClusterFileError(f"{said}: {bad!r} is not a number (island sizes in GPUs, comma-separated: \"4,4\")")
    if any(int(part) == 0 for part in parts):
        raise ClusterFileError(f"{said}: an island of 0 GPUs")
    islands = parse_islands(layout, gpus)
    if not islands and capacity is not None and gpus < capacity and parse_islands(layout, capacity):
        return []
    if not islands:
        raise ClusterFileError(f"{said}: adds up to {sum(map(int, parts))} GPUs, not the node's {gpus}")
    return islands
