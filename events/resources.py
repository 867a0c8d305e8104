"""Resource arithmetic shared by the fold and the deciders: requests, quota and fit.

All functions are pure; dictionaries map resource names to integer milli units.
"""

from __future__ import annotations

import msgspec

from gangway.events import gpus
from gangway.events.catalogue import PodAssignment, PodSet
from gangway.events.contract import Contract, FlavorQuotas, Quota, Taint, Toleration
from gangway.events.quantity import MILLI
from gangway.events.quota import QuotaStructure, fr_key, split_fr

GPU = gpus.RESOURCE
Resources = dict[str, int]


def total_request(pod_sets: list[PodSet]) -> Resources:
    """What a whole gang asks for: per-pod resources times pod count, summed over pod sets."""
    total: Resources = {}
    for ps in pod_sets:
        for name, amount in ps.resources.items():
            total[name] = total.get(name, 0) + amount * ps.count
    return total


#: Kubernetes' count of pods: a node's ``pods`` allocatable (the kubelet's max-pods, 110 by
#: default) bounds how many pods run there, each taking one whatever it asks; Kueue's ``pods``
#: quota (``ClusterQueue`` ``coveredResources: [pods]``) counts them against a queue.
PODS = "pods"


def node_use(per_pod: Resources, count: int) -> Resources:
    """What ``count`` pods asking ``per_pod`` each take on their node: what they ask, and one of
    the node's ``pods`` each."""
    used = {k: v * count for k, v in per_pod.items()}
    used[PODS] = count * MILLI
    return used


def assignment_use(pod_sets: list[PodSet], assignments: list[PodAssignment]) -> list[tuple[str, Resources]]:
    """(node, resources) that each assignment of a placement takes on its node (``node_use``)."""
    per_pod = {ps.name: ps.resources for ps in pod_sets}
    return [(a.node, node_use(per_pod[a.pod_set], a.count)) for a in assignments]


def add_into(target: Resources, delta: Resources, sign: int = 1) -> None:
    for name, amount in delta.items():
        target[name] = target.get(name, 0) + sign * amount


def add_on_node(free: Resources, used: Resources, sign: int = 1) -> None:
    """``add_into`` for a node's free room: the pods count only where the node says how many it
    takes (a node without ``pods`` allocatable, as a simulated one, takes any number)."""
    for name, amount in used.items():
        if name != PODS or PODS in free:
            free[name] = free.get(name, 0) + sign * amount


#: How many pods asking for nothing fit a node: no resource bounds them (Kubernetes' BestEffort
#: pods; Kueue admits them, counting them only against a ``pods`` quota).
UNBOUNDED = 1 << 30


def pods_that_fit(free: Resources, per_pod: Resources) -> int:
    """How many pods with ``per_pod`` resources fit in ``free``: bounded by each resource they ask
    and by the node's ``pods`` where it has that (pods asking for nothing on a node that does
    not: ``UNBOUNDED``)."""
    fit = UNBOUNDED
    for name, amount in per_pod.items():
        if amount <= 0:
            continue
        n = free.get(name, 0) // amount
        if n < fit:
            if n <= 0:
                return 0
            fit = n
    room = free.get(PODS)
    if room is not None and room < fit * MILLI:
        return max(0, room // MILLI)
    return fit


class ContractIndex:
    """Look-ups derived from one contract (built once per contract version, never mutated)."""

    def __init__(self, contract: Contract):
        self.contract = contract
        self.cluster_queues = {cq.name: cq for cq in contract.cluster_queues}
        self.local_queues = {(lq.namespace, lq.name): lq for lq in contract.local_queues}
        self.priority_classes = {pc.name: pc for pc in contract.priority_classes}
        self.flavors = {f.name: f for f in contract.flavors}
        #: Does any flavor give its pods tolerations? (Most contracts: no, and ``flavored`` is free.)
        self.tolerating = any(f.tolerations for f in contract.flavors)
        #: The taints each flavor declares its nodes carry that keep pods off (``nodeTaints``).
        self.flavor_taints = {f.name: f.keeping_off for f in contract.flavors}
        self.tainting = any(self.flavor_taints.values())
        self._flavor_nodes: dict[tuple, tuple[dict, frozenset[str]]] = {}
        self.tree = QuotaStructure(contract)
        #: Per queue, per resource: the quota summed over flavors (what "covers" a resource).
        self.quotas: dict[str, dict[str, Quota]] = {}
        #: Per queue, its resource groups: the flavors, in order, that cover the same resources.
        self.groups: dict[str, list[list[FlavorQuotas]]] = {}
        for cq in contract.cluster_queues:
            names = sorted({r for f in cq.flavors for r in f.resources})
            self.quotas[cq.name] = {r: cq.quota(r) for r in names}
            groups: dict[frozenset, list[FlavorQuotas]] = {}
            for fq in cq.flavors:
                groups.setdefault(frozenset(fq.resources), []).append(fq)
            self.groups[cq.name] = list(groups.values())
        #: The queues that cover Kueue's ``pods``: a workload there asks for one of it per pod.
        self.counting_pods = {cq for cq, quotas in self.quotas.items() if PODS in quotas}
        #: Value of one unit of each flavor-resource in fair shares (thousandths).
        self.weights = {fr_key(f.name, r): w for f in contract.flavors for r, w in f.resource_weights.items()}
        #: The queues stopped by their stopPolicy (Hold, HoldAndDrain): ClusterQueues by name,
        #: LocalQueues by (namespace, name).
        self.stopped = {cq.name: cq.stop_policy for cq in contract.cluster_queues if cq.stop_policy != "None"}
        self.stopped_local = {(lq.namespace, lq.name): lq.stop_policy for lq in contract.local_queues
                              if lq.stop_policy != "None"}
        #: Does some queue order out what it admitted (HoldAndDrain)?
        self.drains = "HoldAndDrain" in (*self.stopped.values(), *self.stopped_local.values())

    def stop_of(self, spec) -> tuple[str, str, str] | None:
        """What stops a workload's queue, as (kind, queue, stopPolicy): its ClusterQueue's or its
        LocalQueue's stopPolicy, HoldAndDrain before Hold (the ClusterQueue's first when equal);
        None when neither is stopped. ``spec``: a ``WorkloadSpec``."""
        if not self.stopped and not self.stopped_local:
            return None
        found = []
        policy = self.stopped.get(spec.cluster_queue)
        if policy is not None:
            found.append((policy != "HoldAndDrain", "ClusterQueue", spec.cluster_queue, policy))
        policy = self.stopped_local.get((spec.namespace, spec.queue))
        if policy is not None:
            found.append((policy != "HoldAndDrain", "LocalQueue", f"{spec.namespace}/{spec.queue}", policy))
        return min(found)[1:] if found else None

    def grace_ms(self, priority_class: str | None) -> int:
        pc = self.priority_classes.get(priority_class or "")
        if pc is not None and pc.grace_ms is not None:
            return pc.grace_ms
        return self.contract.default_grace_ms

    def min_runtime_ms(self, priority_class: str | None) -> int:
        pc = self.priority_classes.get(priority_class or "")
        return pc.min_runtime_ms or 0 if pc is not None else 0

    def quota_request(self, cq_name: str, pod_sets: list[PodSet]) -> Resources:
        """What pod sets ask of ``cq_name``'s quota: what their containers request, and, where the
        queue covers ``pods``, one pod each (as Kueue counts them: containers cannot ask for it)."""
        total = total_request(pod_sets)
        if cq_name in self.counting_pods:
            total[PODS] = sum(ps.count for ps in pod_sets) * MILLI
        return total

    def asked(self, wl) -> Resources:
        """``quota_request`` of a whole workload in its ClusterQueue (its ``request`` as it is where
        the queue does not count pods)."""
        if wl.spec.cluster_queue not in self.counting_pods:
            return wl.request
        return self.quota_request(wl.spec.cluster_queue, wl.spec.pod_sets)

    def default_flavors(self, cq_name: str, request: Resources) -> dict[str, str]:
        """The first flavor covering each requested resource (decisions written before flavors)."""
        chosen: dict[str, str] = {}
        for group in self.groups.get(cq_name, []):
            for resource in group[0].resources:
                if request.get(resource, 0) > 0:
                    chosen[resource] = group[0].flavor
        return chosen

    def flavored(self, pod_sets: list[PodSet], flavors: dict[str, str]) -> list[PodSet]:
        """The pod sets as they run under a flavor assignment: with the tolerations of its flavors
        added (Kueue's ``ResourceFlavor.spec.tolerations``); the same list when they add none."""
        extra = self.flavor_tolerations(flavors) if self.tolerating else None
        if not extra:
            return pod_sets
        return [msgspec.structs.replace(ps, tolerations=ps.tolerations + [t for t in extra if t not in ps.tolerations])
                for ps in pod_sets]

    def flavor_tolerations(self, flavors: dict[str, str]) -> list[Toleration]:
        """The tolerations the flavors of an assignment give its pods."""
        return [t for name in sorted(set(flavors.values())) if name in self.flavors for t in self.flavors[name].tolerations]

    def tolerated(self, group: list[FlavorQuotas], pod_sets: list[PodSet]) -> list[FlavorQuotas]:
        """The flavors of a resource group whose nodeTaints every pod set tolerates, with the flavor's
        own tolerations (Kueue's flavor assigner passes over the others); the group itself when no
        flavor declares taints."""
        if not self.tainting:
            return group
        return [fq for fq in group if self.untolerated(fq.flavor, pod_sets) is None]

    def untolerated(self, flavor: str, pod_sets: list[PodSet]) -> tuple[str, Taint] | None:
        """The first (pod set, taint) of a flavor's nodeTaints that a pod set does not tolerate, with
        the flavor's tolerations added (None: every pod set tolerates them all)."""
        taints = self.flavor_taints.get(flavor)
        if not taints:
            return None
        given = self.flavors[flavor].tolerations
        for taint in taints:
            for ps in pod_sets:
                if not any(t.tolerates(taint) for t in (*ps.tolerations, *given)):
                    return ps.name, taint
        return None

    def nodes_of(self, flavors: dict[str, str], state) -> frozenset[str] | None:
        """The state's nodes with the labels of every flavor in a flavor assignment (None: all)."""
        allowed = None
        for flavor in sorted(set(flavors.values())):
            nodes = self.flavor_nodes(flavor, state)
            if nodes is not None:
                allowed = nodes if allowed is None else allowed & nodes
        return allowed

    def flavor_nodes(self, flavor: str, state) -> frozenset[str] | None:
        """Names of the state's nodes with all of a flavor's labels (None: the flavor selects no labels)."""
        rf = self.flavors.get(flavor)
        if rf is None or not rf.node_labels:
            return None
        key = (flavor, id(state.nodes), state.node_epoch)
        cached = self._flavor_nodes.get(key)
        if cached is not None and cached[0] is state.nodes:  # the reference keeps the id unique
            return cached[1]
        if len(self._flavor_nodes) > 256:
            self._flavor_nodes.clear()
        want = rf.node_labels.items()
        found = frozenset(n for n, node in state.nodes.items() if want <= node.labels.items())
        self._flavor_nodes[key] = (state.nodes, found)
        return found


_INDEXES: dict[int, ContractIndex] = {}


def index_of(contract: Contract) -> ContractIndex:
    """The index of a contract, built once (contracts are immutable; the index holds its key alive)."""
    idx = _INDEXES.get(id(contract))
    if idx is None or idx.contract is not contract:
        if len(_INDEXES) >= 64:
            _INDEXES.clear()
        idx = _INDEXES[id(contract)] = ContractIndex(contract)
    return idx


def by_flavor(request: Resources, flavors: dict[str, str]) -> Resources:
    """A per-resource request keyed by flavor-resource, under a flavor assignment."""
    return {fr_key(flavors[r], r): v for r, v in request.items() if v > 0 and r in flavors}


def by_resource(amounts: Resources) -> Resources:
    """Flavor-resource amounts summed per resource."""
    out: Resources = {}
    for fr, v in amounts.items():
        resource = split_fr(fr)[1]
        out[resource] = out.get(resource, 0) + v
    return out


def admitted_pod_sets(pod_sets: list[PodSet], counts: dict[str, int]) -> list[PodSet]:
    """The pod sets as admitted: a partial admission runs fewer pods of some sets."""
    if not counts:
        return pod_sets
    return [msgspec.structs.replace(ps, count=counts[ps.name]) if ps.name in counts else ps for ps in pod_sets]
