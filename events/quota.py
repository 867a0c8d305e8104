"""Quota as Kueue computes it: a tree of Cohorts over ClusterQueues, per flavor and resource.

Each ClusterQueue is a leaf and each Cohort an inner node (``parent``: hierarchical cohorts). For
every flavor-resource (``fr``, written ``"<flavor>:<resource>"``) a node has:

- ``subtree``: its own nominal quota plus what its children lend it (their subtree minus what they
  keep guaranteed);
- ``guaranteed``: what it keeps for itself and never lends: subtree − lendingLimit (0 without one);
- usage: a ClusterQueue's is what its admitted workloads hold; a Cohort's is the sum, over its
  children, of what each uses above its guaranteed part.

What a node can still take (Kueue's ``available``): at the root, subtree − usage; below, its unused
guaranteed part plus what its parent can still give — capped by its borrowing limit. A queue
*borrows* what it uses above its own nominal quota. Everything is integer milli units; the usage
dictionaries are the caller's (the fold's state or a cycle's private copies), updated in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gangway.events.contract import WEIGHT_ONE, Contract, FlavorQuotas
from gangway.events.quantity import format_amount
from gangway.events.reasons import C, Reason, reason

Usage = dict[str, dict[str, int]]


def fr_key(flavor: str, resource: str) -> str:
    return f"{flavor}:{resource}"


def split_fr(key: str) -> tuple[str, str]:
    flavor, _, resource = key.partition(":")
    return flavor, resource


@dataclass
class QuotaNode:
    name: str
    is_cohort: bool
    parent: str | None
    nominal: dict[str, int] = field(default_factory=dict)
    borrowing_limit: dict[str, int | None] = field(default_factory=dict)
    lending_limit: dict[str, int | None] = field(default_factory=dict)
    subtree: dict[str, int] = field(default_factory=dict)
    guaranteed: dict[str, int] = field(default_factory=dict)
    children: list["QuotaNode"] = field(default_factory=list)
    weight: int = WEIGHT_ONE


class QuotaStructure:
    """The static tree of one contract (built once per contract version)."""

    def __init__(self, contract: Contract):
        self.queues: dict[str, QuotaNode] = {}
        self.cohorts: dict[str, QuotaNode] = {}
        self._paths: dict[str, list[QuotaNode]] = {}
        self._ceilings: dict[tuple[str, str, int | None], int] = {}
        for cohort in contract.cohorts:
            self.cohorts[cohort.name] = _node(cohort.name, True, cohort.parent, cohort.flavors, cohort.fair_weight)
        for cq in contract.cluster_queues:
            self.queues[cq.name] = _node(cq.name, False, cq.cohort, cq.flavors, cq.fair_weight)
            if cq.cohort and cq.cohort not in self.cohorts:  # named only by its queues: implicit
                self.cohorts[cq.cohort] = QuotaNode(cq.cohort, True, None)
        for cohort in list(self.cohorts.values()):
            if cohort.parent and cohort.parent not in self.cohorts:
                self.cohorts[cohort.parent] = QuotaNode(cohort.parent, True, None)
        for node in sorted([*self.queues.values(), *self.cohorts.values()], key=lambda n: (n.is_cohort, n.name)):
            if node.parent:
                self.cohorts[node.parent].children.append(node)
        for name in sorted(self.cohorts):
            if self._cycle(name):
                raise ValueError(f"cohort {name} is its own ancestor")
        for node in self.queues.values():
            _finish(node, {})
        for root in sorted(n for n, c in self.cohorts.items() if not c.parent):
            self._finish_cohort(self.cohorts[root])

    def _cycle(self, name: str) -> bool:
        seen = set()
        while name:
            if name in seen:
                return True
            seen.add(name)
            name = self.cohorts[name].parent or ""
        return False

    def _finish_cohort(self, cohort: QuotaNode) -> None:
        lent: dict[str, int] = {}
        for child in cohort.children:
            if child.is_cohort:
                self._finish_cohort(child)
            for fr, amount in child.subtree.items():
                lent[fr] = lent.get(fr, 0) + amount - child.guaranteed.get(fr, 0)
        _finish(cohort, lent)

    def path(self, queue: str) -> list[QuotaNode]:
        """The queue and its ancestors, up to the root."""
        path = self._paths.get(queue)
        if path is None:
            node = self.queues[queue]
            path = [node]
            while node.parent:
                node = self.cohorts[node.parent]
                path.append(node)
            self._paths[queue] = path
        return path

    def ceiling(self, queue: str, fr: str, height: int | None = None) -> int:
        """The most of ``fr`` the queue could use with nothing else running: from the subtree
        ``height`` levels above it (0: its nominal quota; None: the whole tree). Remembered."""
        key = (queue, fr, height)
        found = self._ceilings.get(key)
        if found is None:
            empty = QuotaView(self, {}, {})
            found = self._ceilings[key] = (empty.available(queue, fr) if height is None
                                           else empty.available_within(queue, fr, height))
        return found

    def root_of(self, queue: str) -> str | None:
        top = self.path(queue)[-1]
        return top.name if top.is_cohort else None


def _node(name: str, is_cohort: bool, parent: str | None, flavors: list[FlavorQuotas], weight: int) -> QuotaNode:
    node = QuotaNode(name, is_cohort, parent, weight=weight)
    for fq in flavors:
        for resource, quota in fq.resources.items():
            fr = fr_key(fq.flavor, resource)
            node.nominal[fr] = quota.nominal
            node.borrowing_limit[fr] = quota.borrowing_limit
            node.lending_limit[fr] = quota.lending_limit
    return node


def _finish(node: QuotaNode, lent: dict[str, int]) -> None:
    node.subtree = {fr: node.nominal.get(fr, 0) + lent.get(fr, 0) for fr in sorted({*node.nominal, *lent})}
    for fr, limit in node.lending_limit.items():
        if limit is not None:
            node.guaranteed[fr] = max(0, node.subtree[fr] - limit)


class QuotaView:
    """Available quota and usage updates over one set of usage dictionaries (not copied), or, from
    ``over``/``copy``, over copies made on write: a queue's or cohort's dictionary is copied the first
    time ``add`` changes it (a cycle copying the usage of a thousand ClusterQueues whole, a few of
    which it changes, was a twentieth of admission's time in Kueue's large-scale scenario)."""

    def __init__(self, structure: QuotaStructure, usage: Usage, cohort_usage: Usage, history: Usage | None = None):
        self.structure = structure
        self.usage = usage
        self.cohort_usage = cohort_usage
        #: Queues' decayed average usage (usage-based fair share): shares count the larger of the two.
        self.history = history or {}
        #: The inner dictionaries this view may change in place, by (is cohort, name); None: all.
        self._owned: set[tuple[bool, str]] | None = None

    @classmethod
    def over(cls, structure: QuotaStructure, usage: Usage, cohort_usage: Usage,
             history: Usage | None = None) -> QuotaView:
        """A view whose changes never show in ``usage`` and ``cohort_usage`` (copy on write)."""
        view = cls(structure, dict(usage), dict(cohort_usage), history)
        view._owned = set()
        return view

    def copy(self) -> QuotaView:
        """A view of the same usage (no history) whose changes and this one's never show in the other."""
        self._owned = set()  # (what it changed in place is shared now: both copy before writing)
        return QuotaView.over(self.structure, self.usage, self.cohort_usage)

    def used(self, node: QuotaNode, fr: str) -> int:
        table = self.cohort_usage if node.is_cohort else self.usage
        return table.get(node.name, {}).get(fr, 0)

    def available(self, queue: str, fr: str) -> int:
        """How much more of ``fr`` the queue can take now (Kueue's ``available``)."""
        return self._available(self.structure.path(queue), 0, fr)

    def available_within(self, queue: str, fr: str, height: int) -> int:
        """How much more of ``fr`` the queue can take from the subtree ``height`` levels above it
        (0: its own nominal quota), borrowing nothing from beyond that subtree."""
        return self._available(self.structure.path(queue)[:height + 1], 0, fr)

    def _available(self, path: list[QuotaNode], i: int, fr: str) -> int:
        node = path[i]
        used = self.used(node, fr)
        if i + 1 == len(path):
            return node.subtree.get(fr, 0) - used
        guaranteed = node.guaranteed.get(fr, 0)
        local = max(0, guaranteed - used)
        parent = self._available(path, i + 1, fr)
        limit = node.borrowing_limit.get(fr)
        if limit is not None:
            stored = node.subtree.get(fr, 0) - guaranteed
            parent = min(parent, stored - max(0, used - guaranteed) + limit)
        return local + parent

    def add(self, queue: str, amounts: dict[str, int], sign: int = 1) -> None:
        """Take (sign 1) or give back (sign -1) ``amounts`` per fr, up the tree."""
        for fr, amount in amounts.items():
            delta = sign * amount
            for node in self.structure.path(queue):
                if delta == 0:
                    break
                table = self._writable(node)
                old = table.get(fr, 0)
                table[fr] = old + delta
                g = node.guaranteed.get(fr, 0)
                delta = max(0, old + delta - g) - max(0, old - g)

    def _writable(self, node: QuotaNode) -> dict[str, int]:
        tables = self.cohort_usage if node.is_cohort else self.usage
        table = tables.get(node.name)
        owned = self._owned
        if owned is None:
            return table if table is not None else tables.setdefault(node.name, {})
        key = (node.is_cohort, node.name)
        if key not in owned:
            table = tables[node.name] = dict(table) if table is not None else {}
            owned.add(key)
        return table

    def fit(self, queue: str, amounts: dict[str, int]) -> tuple[bool, dict[str, int], Reason | None]:
        """(fits, borrowed per fr, why not). Borrowed: what lands above the queue's nominal."""
        node = self.structure.queues.get(queue)
        if node is None:
            return False, {}, reason(C.UNKNOWN_CLUSTER_QUEUE, cluster_queue=queue)
        borrowed: dict[str, int] = {}
        for fr, amount in sorted(amounts.items()):
            if amount <= 0:
                continue
            if fr not in node.nominal:
                flavor, resource = split_fr(fr)
                return False, {}, reason(C.NO_QUOTA_IN_FLAVOR, cluster_queue=queue, resource=resource, flavor=flavor)
            available = self.available(queue, fr)
            used = self.used(node, fr)
            if amount > available:
                return False, {}, self.why_not(node, fr, used, amount, available)
            nominal = node.nominal[fr]
            over = max(0, used + amount - nominal) - max(0, used - nominal)
            if over:
                borrowed[fr] = over
        return True, borrowed, None

    def why_not(self, node: QuotaNode, fr: str, used: int, amount: int, available: int) -> Reason:
        flavor, resource = split_fr(fr)
        said = {"resource": resource, "flavor": flavor, "cluster_queue": node.name}
        nominal = node.nominal.get(fr, 0)

        def n(milli: int) -> str:
            return format_amount(resource, milli)
        if not node.parent:
            return reason(C.OVER_NOMINAL_QUOTA, **said, wanted=n(used + amount), nominal=n(nominal))
        limit = node.borrowing_limit.get(fr)
        if limit is not None and used + amount > nominal + limit:
            return reason(C.OVER_BORROWING_LIMIT, **said, wanted=n(used + amount), nominal=n(nominal), limit=n(limit))
        if used + amount <= nominal:
            return reason(C.NOMINAL_QUOTA_LENT_OUT, **said, cohort=node.parent)
        # (what it must borrow, beyond what is free of its own nominal quota, and what the cohort can
        # lend it beyond that: ``available`` counts the queue's own free quota too)
        own = max(0, nominal - used)
        return reason(C.COHORT_EXHAUSTED, **said, cohort=node.parent, available=n(max(0, available - own)),
                      amount=n(amount - own))

    def borrowing(self, queue: str, frs=None) -> bool:
        """Does the queue use more than its nominal quota of anything (of ``frs``, when given)?"""
        node = self.structure.queues.get(queue)
        if node is None:
            return False
        return any(used > node.nominal.get(fr, 0) for fr, used in self.usage.get(queue, {}).items()
                   if frs is None or fr in frs)

    def share(self, node: QuotaNode, extra: dict[str, int], weights: dict[str, int]) -> int:
        """Kueue's dominant resource share in thousandths, divided by the node's weight.

        For each fr the node would use above its subtree quota (with ``extra`` added), the amount
        weighted by the flavor's value, over what its parent could lend of that resource; the
        largest ratio wins. 0 when nothing is borrowed; a node of weight 0 borrows at infinite share.
        """
        parent = self.structure.cohorts.get(node.parent or "")
        if parent is None:
            return 0
        worst = 0
        past = {} if node.is_cohort else self.history.get(node.name, {})
        for fr in sorted({*extra, *node.subtree}):
            used = max(self.used(node, fr), past.get(fr, 0))
            above = used + extra.get(fr, 0) - node.subtree.get(fr, 0)
            if above <= 0:
                continue
            lendable = parent.subtree.get(fr, 0)
            weight = weights.get(fr, WEIGHT_ONE)
            ratio = above * weight // max(1, lendable)
            worst = max(worst, ratio)
        if worst == 0:
            return 0
        return worst * WEIGHT_ONE // node.weight if node.weight else 10**12
