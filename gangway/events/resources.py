"""Resource arithmetic shared by the fold and the deciders: requests, quota and fit.

All functions are pure; dictionaries map resource names to integer milli units.
"""

from __future__ import annotations

from gangway.events.catalogue import PodAssignment, PodSet
from gangway.events.contract import ClusterQueue, Contract, Quota

GPU = "nvidia.com/gpu"
Resources = dict[str, int]


def total_request(pod_sets: list[PodSet]) -> Resources:
    """What a whole gang asks for: per-pod resources times pod count, summed over pod sets."""
    total: Resources = {}
    for ps in pod_sets:
        for name, amount in ps.resources.items():
            total[name] = total.get(name, 0) + amount * ps.count
    return total


def assignment_use(pod_sets: list[PodSet], assignments: list[PodAssignment]) -> list[tuple[str, Resources]]:
    """(node, resources) that each assignment of a placement takes on its node."""
    per_pod = {ps.name: ps.resources for ps in pod_sets}
    return [(a.node, {k: v * a.count for k, v in per_pod[a.pod_set].items()}) for a in assignments]


def add_into(target: Resources, delta: Resources, sign: int = 1) -> None:
    for name, amount in delta.items():
        target[name] = target.get(name, 0) + sign * amount


def pods_that_fit(free: Resources, per_pod: Resources) -> int:
    """How many pods with ``per_pod`` resources fit in ``free`` (a pod asking for nothing: 0)."""
    fit = None
    for name, amount in per_pod.items():
        if amount <= 0:
            continue
        n = free.get(name, 0) // amount
        fit = n if fit is None else min(fit, n)
        if fit <= 0:
            return 0
    return fit or 0


class ContractIndex:
    """Look-ups derived from one contract (built once per contract version, never mutated)."""

    def __init__(self, contract: Contract):
        self.contract = contract
        self.cluster_queues = {cq.name: cq for cq in contract.cluster_queues}
        self.local_queues = {(lq.namespace, lq.name): lq for lq in contract.local_queues}
        self.priority_classes = {pc.name: pc for pc in contract.priority_classes}
        members: dict[str, list[str]] = {}
        for cq in sorted(contract.cluster_queues, key=lambda c: c.name):
            if cq.cohort:
                members.setdefault(cq.cohort, []).append(cq.name)
        self.cohort_members = members
        self.quotas: dict[str, dict[str, Quota]] = {}
        for cq in contract.cluster_queues:
            names = sorted({r for f in cq.flavors for r in f.resources})
            self.quotas[cq.name] = {r: cq.quota(r) for r in names}

    def grace_ms(self, priority_class: str | None) -> int:
        pc = self.priority_classes.get(priority_class or "")
        if pc is not None and pc.grace_ms is not None:
            return pc.grace_ms
        return self.contract.default_grace_ms


_INDEXES: dict[int, ContractIndex] = {}


def index_of(contract: Contract) -> ContractIndex:
    """The index of a contract, built once (contracts are immutable; the index holds its key alive)."""
    idx = _INDEXES.get(id(contract))
    if idx is None or idx.contract is not contract:
        if len(_INDEXES) >= 64:
            _INDEXES.clear()
        idx = _INDEXES[id(contract)] = ContractIndex(contract)
    return idx


def _lendable(quota: Quota) -> int:
    return quota.nominal if quota.lending_limit is None else min(quota.lending_limit, quota.nominal)


def quota_fit(
    idx: ContractIndex, usage: dict[str, Resources], cq_name: str, request: Resources
) -> tuple[bool, Resources, str]:
    """Would ``request`` fit ``cq_name``'s quota given current ``usage``?

    Returns (fits, borrowed, reason). Without a cohort a queue has its nominal quota and nothing
    more. In a cohort, the members' lendable quota (nominal, or the lending limit) is one pool:
    a queue may use more than its nominal (borrow) up to its borrowing limit while the pool has
    room — and even within its nominal it can be short while others borrow what it lent, until
    preemption reclaims it. ``borrowed`` is how much of this request sits above nominal.
    """
    cq: ClusterQueue | None = idx.cluster_queues.get(cq_name)
    if cq is None:
        return False, {}, f"ClusterQueue {cq_name} does not exist"
    quotas = idx.quotas[cq_name]
    own = usage.get(cq_name, {})
    borrowed: Resources = {}
    for resource, amount in sorted(request.items()):
        if amount <= 0:
            continue
        quota = quotas.get(resource)
        if quota is None:
            return False, {}, f"ClusterQueue {cq_name} has no quota for {resource}"
        used = own.get(resource, 0)
        after = used + amount
        if cq.cohort is None:
            if after > quota.nominal:
                return False, {}, f"{resource}: {after} over nominal quota {quota.nominal} of {cq_name}"
            continue
        if quota.borrowing_limit is not None and after > quota.nominal + quota.borrowing_limit:
            return False, {}, (
                f"{resource}: {after} over nominal {quota.nominal} + borrowing limit "
                f"{quota.borrowing_limit} of {cq_name}"
            )
        pool, pool_used = _cohort_pool(idx, usage, cq.cohort, cq_name, resource, after)
        if pool_used > pool:
            if after <= quota.nominal:
                return False, {}, (f"{resource}: within the nominal quota of {cq_name}, but cohort {cq.cohort} "
                                   f"lent it to queues that borrow (to be reclaimed)")
            left = pool - _cohort_pool(idx, usage, cq.cohort, cq_name, resource, used)[1]
            return False, {}, f"{resource}: cohort {cq.cohort} has {max(0, left)} left to lend, {cq_name} needs {amount}"
        borrowed[resource] = max(0, after - quota.nominal) - max(0, used - quota.nominal)
    return True, {k: v for k, v in borrowed.items() if v}, ""


def _cohort_pool(idx: ContractIndex, usage: dict[str, Resources], cohort: str, cq_name: str,
                 resource: str, after: int) -> tuple[int, int]:
    """(lendable pool, pool in use) of one resource in a cohort, with ``cq_name`` using ``after``."""
    pool = pool_used = 0
    for member in idx.cohort_members[cohort]:
        q = idx.quotas[member].get(resource)
        if q is None:
            continue
        guaranteed = q.nominal - _lendable(q)
        pool += _lendable(q)
        member_used = after if member == cq_name else usage.get(member, {}).get(resource, 0)
        pool_used += max(0, member_used - guaranteed)
    return pool, pool_used


def is_borrowing(idx: ContractIndex, usage: dict[str, Resources], cq_name: str) -> bool:
    """Does the queue use more than its nominal quota of any resource?"""
    for resource, used in usage.get(cq_name, {}).items():
        quota = idx.quotas.get(cq_name, {}).get(resource)
        if quota is not None and used > quota.nominal:
            return True
    return False
