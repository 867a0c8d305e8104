"""Fluent builders for the tests: contracts, nodes, workloads, and logs folded with real envelopes.

In Kueue's style (``MakeClusterQueue("cq").Cohort("all").ResourceGroup(...).Obj()``)::

    contract = (ContractBuilder()
                .cluster_queue(cluster_queue("team-a").cohort("all").gpus(8, borrowing=4))
                .priority_class("high", 100).obj())
    wl = workload("train").queue("team-a").priority(100).pod_set("main", count=2, gpus=4).obj()
    log = LogBuilder().configure(contract).nodes(node("n1").gpus(8)).queue(wl).admit("train")

Whole GPUs and CPUs are given to the builders and converted to milli units; memory in GiB.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import msgspec

from gangway.events import catalogue as ev
from gangway.events.codec import from_structured_line
from gangway.events.contract import (
    BorrowWithinCohort, ClusterQueue, Cohort, Contract, FairSharing, FlavorFungibility, FlavorQuotas, LocalQueue,
    Preemption, PriorityClass, Quota, ResourceFlavor,
)
from gangway.events.fold import apply
from gangway.events.quantity import MILLI
from gangway.events.reasons import ReasonCode
from gangway.events.fold import quota_view
from gangway.events.resources import GPU, by_flavor, by_resource, index_of, total_request
from gangway.events.state import State
from gangway.services.placement.policy import free_capacity, place_gang
from gangway.services.placement.topology import BLOCK, RACK

NAMESPACE = "ns"
START_MS = 1_700_000_000_000
GI = 2**30


def milli(amount: int | float) -> int:
    """Whole units (GPUs, CPUs) to milli units."""
    value = round(amount * MILLI)
    assert value == amount * MILLI, f"{amount} is not a whole number of milli units"
    return value


def resources(gpus: float = 0, cpu: float = 0, memory_gi: float = 0, **other: float) -> dict[str, int]:
    """Per-pod or per-node resources in milli units, leaving out zeros."""
    result: dict[str, int] = {}
    if gpus:
        result[GPU] = milli(gpus)
    if cpu:
        result["cpu"] = milli(cpu)
    if memory_gi:
        result["memory"] = round(memory_gi * GI) * MILLI
    for name, amount in other.items():
        result[name] = milli(amount)
    return result


# --- contract ----------------------------------------------------------------------------------


class ClusterQueueBuilder:
    def __init__(self, name: str):
        self._name = name
        self._cohort: str | None = None
        #: (flavor, quotas) in list order; quota methods fill the last one.
        self._flavors: list[tuple[str, dict[str, Quota]]] = [("default", {})]
        self._within = "Never"
        self._reclaim = "Never"
        self._borrow = BorrowWithinCohort()
        self._strategy = "BestEffortFIFO"
        self._fungibility = FlavorFungibility()
        self._weight = 1000

    def cohort(self, cohort: str) -> ClusterQueueBuilder:
        self._cohort = cohort
        return self

    def flavor(self, flavor: str) -> ClusterQueueBuilder:
        """Name the current flavor (if it has no quota yet) or start the next one: later quotas go there."""
        if not self._flavors[-1][1]:
            self._flavors[-1] = (flavor, {})
        else:
            self._flavors.append((flavor, {}))
        return self

    def quota(self, resource: str, nominal: int, borrowing: int | None = None,
              lending: int | None = None) -> ClusterQueueBuilder:
        """Quota for one resource of the current flavor, in milli units."""
        self._flavors[-1][1][resource] = Quota(nominal=nominal, borrowing_limit=borrowing, lending_limit=lending)
        return self

    def fungibility(self, when_can_borrow: str = "MayStopSearch", when_can_preempt: str = "TryNextFlavor"):
        self._fungibility = FlavorFungibility(when_can_borrow, when_can_preempt)
        return self

    def borrow_within_cohort(self, policy: str = "LowerPriority", max_priority: int | None = None):
        self._borrow = BorrowWithinCohort(policy, max_priority)
        return self

    def weight(self, weight: float) -> ClusterQueueBuilder:
        self._weight = milli(weight)
        return self

    def gpus(self, nominal: float, borrowing: float | None = None, lending: float | None = None) -> ClusterQueueBuilder:
        return self.quota(GPU, milli(nominal), None if borrowing is None else milli(borrowing),
                          None if lending is None else milli(lending))

    def cpu(self, nominal: float, borrowing: float | None = None, lending: float | None = None) -> ClusterQueueBuilder:
        return self.quota("cpu", milli(nominal), None if borrowing is None else milli(borrowing),
                          None if lending is None else milli(lending))

    def memory_gi(self, nominal: float) -> ClusterQueueBuilder:
        return self.quota("memory", resources(memory_gi=nominal)["memory"])

    def preemption(self, within: str = "Never", reclaim: str = "Never") -> ClusterQueueBuilder:
        self._within, self._reclaim = within, reclaim
        return self

    def strict_fifo(self) -> ClusterQueueBuilder:
        self._strategy = "StrictFIFO"
        return self

    def best_effort_fifo(self) -> ClusterQueueBuilder:
        self._strategy = "BestEffortFIFO"
        return self

    def obj(self) -> ClusterQueue:
        return ClusterQueue(
            name=self._name,
            flavors=[FlavorQuotas(flavor=f, resources=dict(q)) for f, q in self._flavors],
            cohort=self._cohort,
            preemption=Preemption(within_cluster_queue=self._within, reclaim_within_cohort=self._reclaim,
                                  borrow_within_cohort=self._borrow),
            queueing_strategy=self._strategy, flavor_fungibility=self._fungibility, fair_weight=self._weight,
        )


def cluster_queue(name: str) -> ClusterQueueBuilder:
    return ClusterQueueBuilder(name)


class ContractBuilder:
    def __init__(self):
        self._flavors: dict[str, ResourceFlavor] = {}
        self._cqs: list[ClusterQueue] = []
        self._lqs: list[LocalQueue] = []
        self._pcs: list[PriorityClass] = []
        self._default_priority = 0
        self._default_grace_ms = 30_000
        self._cohorts: list[Cohort] = []
        self._extra: dict = {}

    def cluster_queue(self, cq: ClusterQueueBuilder | ClusterQueue, local_queue: bool = True) -> ContractBuilder:
        """Add a ClusterQueue and (by default) a LocalQueue of the same name in ``NAMESPACE``."""
        obj = cq.obj() if isinstance(cq, ClusterQueueBuilder) else cq
        self._cqs.append(obj)
        for f in obj.flavors:
            self._flavors.setdefault(f.flavor, ResourceFlavor(name=f.flavor))
        if local_queue:
            self.local_queue(obj.name, obj.name)
        return self

    def local_queue(self, name: str, cq: str, namespace: str = NAMESPACE) -> ContractBuilder:
        self._lqs.append(LocalQueue(namespace=namespace, name=name, cluster_queue=cq))
        return self

    def priority_class(self, name: str, value: int, grace_ms: int | None = None,
                       min_runtime_ms: int | None = None) -> ContractBuilder:
        self._pcs.append(PriorityClass(name=name, value=value, grace_ms=grace_ms, min_runtime_ms=min_runtime_ms))
        return self

    def cohort(self, name: str, parent: str | None = None, gpus: float | None = None,
               weight: float = 1) -> ContractBuilder:
        """A Cohort object: its parent, its own GPU quota (flavor "default") and its weight."""
        flavors = [] if gpus is None else [FlavorQuotas("default", {GPU: Quota(nominal=milli(gpus))})]
        self._cohorts.append(Cohort(name=name, parent=parent, flavors=flavors, fair_weight=milli(weight)))
        return self

    def flavor_labels(self, flavor: str, labels: dict[str, str]) -> ContractBuilder:
        old = self._flavors.get(flavor, ResourceFlavor(name=flavor))
        self._flavors[flavor] = msgspec.structs.replace(old, node_labels=dict(labels))
        return self

    def flavor_tolerations(self, flavor: str, *tolerations) -> ContractBuilder:
        old = self._flavors.get(flavor, ResourceFlavor(name=flavor))
        self._flavors[flavor] = msgspec.structs.replace(old, tolerations=list(tolerations))
        return self

    def flavor_taints(self, flavor: str, *taints) -> ContractBuilder:
        old = self._flavors.get(flavor, ResourceFlavor(name=flavor))
        self._flavors[flavor] = msgspec.structs.replace(old, node_taints=list(taints))
        return self

    def flavor_weight(self, flavor: str, resource: str, weight: float) -> ContractBuilder:
        old = self._flavors.get(flavor, ResourceFlavor(name=flavor))
        self._flavors[flavor] = msgspec.structs.replace(old, resource_weights={**old.resource_weights, resource: milli(weight)})
        return self

    def fair_sharing(self, *strategies: str, half_life_ms: int | None = None) -> ContractBuilder:
        kwargs = {"preemption_strategies": list(strategies)} if strategies else {}
        self._extra["fair_sharing"] = FairSharing(enable=True, usage_half_life_ms=half_life_ms, **kwargs)
        return self

    def checkpoint_aware(self, on: bool) -> ContractBuilder:
        self._extra["checkpoint_aware"] = on
        return self

    def default_priority(self, value: int) -> ContractBuilder:
        self._default_priority = value
        return self

    def default_grace_ms(self, value: int) -> ContractBuilder:
        self._default_grace_ms = value
        return self

    def obj(self) -> Contract:
        return Contract(
            flavors=sorted(self._flavors.values(), key=lambda f: f.name), cluster_queues=list(self._cqs),
            local_queues=list(self._lqs), priority_classes=list(self._pcs),
            default_priority=self._default_priority, default_grace_ms=self._default_grace_ms,
            cohorts=list(self._cohorts), **self._extra,
        )


def contract(*cqs: ClusterQueueBuilder | ClusterQueue) -> ContractBuilder:
    builder = ContractBuilder()
    for cq in cqs:
        builder.cluster_queue(cq)
    return builder


def config_event(c: Contract) -> ev.ConfigApplied:
    return ev.ConfigApplied(contract=c, digest=hashlib.sha256(msgspec.json.encode(c)).hexdigest())


# --- nodes and workloads -----------------------------------------------------------------------


class NodeBuilder:
    def __init__(self, name: str):
        self._name = name
        self._alloc: dict[str, int] = {}
        self._labels: dict[str, str] = {}
        self._islands: list[int] = []

    def islands(self, *sizes: int) -> NodeBuilder:
        """NVLink islands, sizes in GPU index order."""
        self._islands = list(sizes)
        return self

    def at(self, block: str, rack: str) -> NodeBuilder:
        """Network block and rack (the default topology labels)."""
        return self.label(BLOCK, block).label(RACK, rack)

    def gpus(self, n: float) -> NodeBuilder:
        self._alloc[GPU] = milli(n)
        return self

    def cpu(self, n: float) -> NodeBuilder:
        self._alloc["cpu"] = milli(n)
        return self

    def memory_gi(self, n: float) -> NodeBuilder:
        self._alloc.update(resources(memory_gi=n))
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self._labels[key] = value
        return self

    def obj(self) -> ev.NodeObserved:
        return ev.NodeObserved(node=self._name, allocatable=dict(self._alloc), labels=dict(self._labels),
                               islands=list(self._islands))


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


class WorkloadBuilder:
    def __init__(self, name: str):
        self._name = name
        self._queue = "cq"
        self._cq: str | None = None
        self._priority = 0
        self._pc: str | None = None
        self._pod_sets: list[ev.PodSet] = []
        self._runtime_ms: int | None = None
        self._kind = "Job"

    def queue(self, cluster_queue: str, local_queue: str | None = None) -> WorkloadBuilder:
        """The ClusterQueue (and LocalQueue, by default of the same name) the workload waits in."""
        self._cq = cluster_queue
        self._queue = local_queue or cluster_queue
        return self

    def priority(self, value: int, priority_class: str | None = None) -> WorkloadBuilder:
        self._priority, self._pc = value, priority_class
        return self

    def pod_set(self, name: str = "main", count: int = 1, gpus: float = 0, cpu: float = 0,
                memory_gi: float = 0, topology: ev.TopologyRequest | None = None) -> WorkloadBuilder:
        self._pod_sets.append(ev.PodSet(name=name, count=count, resources=resources(gpus, cpu, memory_gi),
                                        topology=topology))
        return self

    def gpus(self, per_pod: float, pods: int = 1) -> WorkloadBuilder:
        """Shorthand: one pod set ``main`` of ``pods`` pods with ``per_pod`` GPUs each."""
        return self.pod_set("main", count=pods, gpus=per_pod)

    def runtime_s(self, seconds: float) -> WorkloadBuilder:
        self._runtime_ms = round(seconds * 1000)
        return self

    def runtime_ms(self, ms: int) -> WorkloadBuilder:
        self._runtime_ms = ms
        return self

    def obj(self) -> ev.WorkloadQueued:
        return ev.WorkloadQueued(
            workload=self._name, namespace=NAMESPACE, queue=self._queue, cluster_queue=self._cq or self._queue,
            priority_class=self._pc, priority=self._priority, kind=self._kind,
            pod_sets=list(self._pod_sets) or [ev.PodSet(name="main", count=1, resources=resources(gpus=1))],
            runtime_ms=self._runtime_ms,
        )


def workload(name: str) -> WorkloadBuilder:
    return WorkloadBuilder(name)


# --- logs ---------------------------------------------------------------------------------------


def state_bytes(state: State, ignore: tuple[str, ...] = ()) -> bytes:
    """The state's msgpack bytes, with the named top-level fields reset to their defaults."""
    if ignore:
        state = msgspec.structs.replace(state, **{f: getattr(State(), f) for f in ignore})
    return msgspec.msgpack.encode(state)


#: What a re-delivered event may change: where the fold is, and the count of ignored events.
REDELIVERY_FIELDS = ("offset", "last_id", "ignored")


class LogBuilder:
    """A log of real envelopes (offsets 0.., one id each, time advancing), folded as it grows."""

    def __init__(self, start_ms: int = START_MS, step_ms: int = 1000):
        self.state = State()
        self.envelopes: list[ev.Envelope] = []
        self.now_ms = start_ms
        self.step_ms = step_ms

    # raw appends

    def envelope(self, data, event_id: str | None = None, at_ms: int | None = None) -> ev.Envelope:
        """The envelope the next append would get (nothing is appended)."""
        offset = len(self.envelopes)
        time_ms = self.now_ms + self.step_ms if at_ms is None else at_ms
        return ev.Envelope(id=event_id or f"ev-{offset}", source="test", time_ms=time_ms, data=data, offset=offset)

    def add(self, data, event_id: str | None = None, at_ms: int | None = None) -> LogBuilder:
        self.append(self.envelope(data, event_id, at_ms))
        return self

    def append(self, env: ev.Envelope) -> LogBuilder:
        assert env.offset == len(self.envelopes), "envelopes must come with the next offset"
        self.envelopes.append(env)
        self.now_ms = max(self.now_ms, env.time_ms)
        apply(self.state, env)
        return self

    def redeliver(self, offset: int) -> LogBuilder:
        """Append the event at ``offset`` again: same id, same time, the next offset."""
        old = self.envelopes[offset]
        return self.append(msgspec.structs.replace(old, offset=len(self.envelopes)))

    def advance(self, ms: int) -> LogBuilder:
        """Move the clock of the next events forward."""
        self.now_ms += ms
        return self

    def at(self, time_ms: int) -> LogBuilder:
        """Set the clock of the next events (with ``step_ms=0`` they happen exactly then)."""
        self.now_ms = time_ms
        return self

    @property
    def offset(self) -> int:
        return len(self.envelopes) - 1

    # the usual facts

    def configure(self, c: Contract | ContractBuilder) -> LogBuilder:
        return self.add(config_event(c.obj() if isinstance(c, ContractBuilder) else c))

    def nodes(self, *builders: NodeBuilder | ev.NodeObserved) -> LogBuilder:
        for b in builders:
            self.add(b.obj() if isinstance(b, NodeBuilder) else b)
        return self

    def queue(self, *wls: WorkloadBuilder | ev.WorkloadQueued) -> LogBuilder:
        for w in wls:
            spec = w.obj() if isinstance(w, WorkloadBuilder) else w
            self.add(spec, event_id=f"queued/{spec.workload}")
        return self

    def admission(self, name: str, based_on: int | None = None) -> ev.WorkloadAdmitted:
        """A faithful admission of ``name`` (borrowing computed from the current usage)."""
        spec = self.state.workloads[name].spec
        request = total_request(spec.pod_sets)
        flavors = index_of(self.state.contract).default_flavors(spec.cluster_queue, request)
        _, borrowed, _ = quota_view(self.state).fit(spec.cluster_queue, by_flavor(request, flavors))
        return ev.WorkloadAdmitted(workload=name, cluster_queue=spec.cluster_queue, usage=request,
                                   borrowed=by_resource(borrowed), based_on=self.offset if based_on is None else based_on,
                                   flavors=flavors)

    def admit(self, *names: str) -> LogBuilder:
        for name in names:
            self.add(self.admission(name), event_id=f"admit/{name}/{self.offset}")
        return self

    def placement(self, name: str, on: list[tuple[str, str, int]] | None = None) -> ev.PlacementDecided:
        """A placement of ``name``: ``on`` as (pod set, node, count), or best fit on free capacity."""
        if on is None:
            assignments = place_gang(free_capacity(self.state), self.state.workloads[name].spec.pod_sets)
            assert assignments is not None, f"{name} does not fit anywhere"
        else:
            assignments = [ev.PodAssignment(pod_set=p, node=n, count=c) for p, n, c in on]
        return ev.PlacementDecided(workload=name, assignments=assignments, based_on=self.offset)

    def place(self, name: str, on: list[tuple[str, str, int]] | None = None) -> LogBuilder:
        return self.add(self.placement(name, on), event_id=f"place/{name}/{self.offset}")

    def bind(self, name: str) -> LogBuilder:
        attempt = self.state.workloads[name].attempt
        return (self.add(ev.WorkloadBound(workload=name, attempt=attempt))
                .add(ev.WorkloadRunning(workload=name, attempt=attempt)))

    def running(self, *wls: WorkloadBuilder | ev.WorkloadQueued,
                on: list[tuple[str, str, int]] | None = None) -> LogBuilder:
        """Queue, admit, place (best fit, or ``on``) and start each workload."""
        for w in wls:
            spec = w.obj() if isinstance(w, WorkloadBuilder) else w
            self.queue(spec).admit(spec.workload).place(spec.workload, on).bind(spec.workload)
        return self

    def admitted(self, *wls: WorkloadBuilder | ev.WorkloadQueued) -> LogBuilder:
        """Queue and admit each workload (not placed)."""
        for w in wls:
            spec = w.obj() if isinstance(w, WorkloadBuilder) else w
            self.queue(spec).admit(spec.workload)
        return self

    def order_eviction(self, name: str, preemptor: str, grace_ms: int = 30_000,
                       code: ReasonCode | None = None, based_on: int | None = None) -> LogBuilder:
        """A preemption decision (not checked against any policy), for the rule ``code`` says, on the
        state at ``based_on`` (default: the last event's)."""
        return self.add(ev.EvictionOrdered(workload=name, preemptor=preemptor, grace_ms=grace_ms, reason_code=code,
                                           based_on=self.offset if based_on is None else based_on))

    def finish(self, name: str) -> LogBuilder:
        return self.add(ev.WorkloadFinished(workload=name, attempt=self.state.workloads[name].attempt))

    def evicted(self, name: str) -> LogBuilder:
        return self.add(ev.WorkloadEvicted(workload=name, attempt=self.state.workloads[name].attempt))

    def phase(self, name: str) -> str:
        return self.state.workloads[name].phase


def fold_file(path, **contract_fields) -> State:
    """The state a structured log file folds to, its contract's ``contract_fields`` replaced (a run
    the property tests found, under a switch set one way or the other)."""
    state = State()
    for offset, raw in enumerate(Path(path).read_bytes().splitlines()):
        apply(state, from_structured_line(raw, offset))
    state.contract = msgspec.structs.replace(state.contract, **contract_fields)
    return state


def fold(events: Iterable, start_ms: int = START_MS, step_ms: int = 1000) -> State:
    """Fold events (bare events, or (id, event) pairs) into a State with proper envelopes."""
    log = LogBuilder(start_ms, step_ms)
    for item in events:
        if isinstance(item, tuple):
            log.add(item[1], event_id=item[0])
        else:
            log.add(item)
    return log.state


# --- reading a state ----------------------------------------------------------------------------


def whole(amount: int) -> int | float:
    """Milli units back to whole units (an int when exact)."""
    return amount // MILLI if amount % MILLI == 0 else amount / MILLI


def summary(state: State) -> dict:
    """What the tests compare: phases, queues, GPU usage and free GPUs in whole units, counters."""
    return {
        "phases": {name: wl.phase for name, wl in state.workloads.items()},
        "pending": list(state.pending),
        "active": list(state.active),
        "usage_gpus": {cq: whole(by_resource(res).get(GPU, 0)) for cq, res in state.usage.items() if any(res.values())},
        "free_gpus": {name: whole(n.free.get(GPU, 0)) for name, n in state.nodes.items()},
        "decisions": state.decisions,
        "superseded": state.superseded,
        "ignored": state.ignored,
    }


def decide_pure(decide, state: State) -> list:
    """Run a ``decide`` and check it left the state exactly as it found it (msgpack bytes)."""
    before = msgspec.msgpack.encode(state)
    decisions = decide(state)
    assert msgspec.msgpack.encode(state) == before, f"{decide.__name__} changed the state"
    return decisions


def line_of(lines: list[str], prefix: str) -> str:
    """The first of ``lines`` (``explain``'s) that starts with ``prefix`` ("now pending", "estimated start")."""
    return next((line for line in lines if line.startswith(prefix)), f"(no line starts with {prefix!r}: {lines})")
