"""The simulated cluster's nodes, read from Kubernetes Node objects (``kubectl get nodes -o yaml``).

Topology comes from the nodes' labels (block, rack, hostname: ``placement/topology.py``) and the
NVLink islands from the label or annotation ``gangway.io/nvlink-islands`` (``"8"``, ``"4,4"``).
"""

from __future__ import annotations

import yaml

from gangway.events.catalogue import NodeObserved, Taint
from gangway.events.quantity import QuantityError, parse_milli
from gangway.services.placement.topology import ISLANDS_LABEL, parse_islands


#: The prefix of the taints Kubernetes itself sets (not-ready, unreachable, unschedulable…).
SYSTEM_TAINT_PREFIX = "node.kubernetes.io/"


class ClusterFileError(ValueError):
    """A cluster file that is not a list of Kubernetes Nodes."""


def _nodes_in(doc) -> list[dict]:
    if not isinstance(doc, dict):
        raise ClusterFileError("a document is not a mapping")
    if doc.get("kind") in ("List", "NodeList"):
        return [item for item in doc.get("items") or []]
    return [doc]


def load_nodes(text: str, filename: str = "<cluster>") -> list[NodeObserved]:
    try:
        # libyaml's loader where PyYAML has it: a 2,500-node cluster file took the binder 2 s to read
        docs = [d for d in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d is not None]
    except yaml.YAMLError as exc:
        raise ClusterFileError(f"{filename}: not YAML: {exc}") from exc
    nodes: list[NodeObserved] = []
    for doc in docs:
        for item in _nodes_in(doc):
            nodes.append(_node(item, filename))
    names = [n.node for n in nodes]
    if len(set(names)) != len(names):
        raise ClusterFileError(f"{filename}: node names repeat")
    return nodes


def _node(item: dict, filename: str) -> NodeObserved:
    if not isinstance(item, dict) or item.get("kind", "Node") != "Node":
        raise ClusterFileError(f"{filename}: an item is not a Node")
    meta = item.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ClusterFileError(f"{filename}: a Node has no metadata.name")
    status = item.get("status") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    resources = {}
    for resource, quantity in sorted(allocatable.items()):
        try:
            resources[str(resource)] = parse_milli(quantity)
        except QuantityError as exc:
            raise ClusterFileError(f"{filename}: Node {name}: status.allocatable.{resource}: {exc}") from exc
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = meta.get("annotations") or {}
    layout = annotations.get(ISLANDS_LABEL, labels.get(ISLANDS_LABEL))
    islands = parse_islands(layout, resources.get("nvidia.com/gpu", 0) // 1000)
    if layout and not islands:
        raise ClusterFileError(f"{filename}: Node {name}: {ISLANDS_LABEL}={layout!r} does not add up to its GPUs")
    taints = []
    for taint in (item.get("spec") or {}).get("taints") or []:
        if not isinstance(taint, dict) or not isinstance(taint.get("key"), str):
            raise ClusterFileError(f"{filename}: Node {name}: a taint without a key")
        # Kubernetes' own taints (node.kubernetes.io/…) say the node is unavailable (objects.py);
        # PreferNoSchedule keeps no pod off.
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not taint["key"].startswith(SYSTEM_TAINT_PREFIX):
            taints.append(Taint(key=taint["key"], effect=taint["effect"], value=str(taint.get("value") or "")))
    return NodeObserved(node=name, allocatable=resources, labels=labels, islands=islands,
                        taints=sorted(taints, key=lambda t: (t.key, t.effect, t.value)))
