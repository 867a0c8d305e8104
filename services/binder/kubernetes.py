"""The binder against a real cluster: what the log decided becomes pods on nodes, and what the
cluster does comes back onto the log.

``KubernetesBinder.step(state)`` is one pass, level-based (it compares the cluster, as the
reflectors see it, with the folded log, and acts on the difference), so a restart or a lost watch
needs nothing special — the next pass reconciles. It returns the reports to append to the log and
the submissions to publish. Only the replica holding the Lease acts; the others keep their caches warm.

- Nodes → NodeObserved (``unavailable`` when cordoned, NotReady or tainted by Kubernetes; what pods
  gangway does not manage request there left out: ``held_by_others``) / NodeRemoved.
- PriorityClasses → PriorityClassObserved (a job's pod template may name one of the cluster's).
- Job, JobSet and Kubeflow job objects (PyTorchJob, TFJob, MPIJob…) with a queue label, created
  suspended → JobSubmitted (through the injected ``intake``, which also says why a manifest is
  refused: a Warning Event and a condition on the object). Deleted → WorkloadWithdrawn.
- PlacementDecided → the object resumed with gangway's scheduler in its pod templates; once all its
  pods exist, every one is bound (``pods/binding``) to its node, GPU indexes in an annotation. All or
  none: pods missing after ``pods_timeout_s`` or any bind refused → the pods deleted, the object
  suspended again, WorkloadEvicted with the reason (the workload requeues).
- Pods and the object's conditions → WorkloadBound / WorkloadRunning / WorkloadFinished (with what
  Kubernetes said) / WorkloadEvicted when a pod of the gang is lost.
- EvictionOrdered → the Eviction API per pod (PodDisruptionBudgets honoured; a 429 is retried with
  backoff until the grace period ends, then the pod is deleted), then the object suspended again;
  WorkloadEvicted once no pod of it is left on a node.
- Events and a ``GangwayScheduling`` condition on the user's object: admitted, preempted, pending
  with the position in its ClusterQueue, rejected, rolled back.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from gangway.adapters.kubernetes import ApiError, Kube, LeaseElector, Reflector
from gangway.adapters.kubernetes import client as api
from gangway.adapters.kubernetes.lease import micro_time
from gangway.events.codec import format_time
from gangway.events.catalogue import (
    ClockTicked, ClusterReconciled, JobRejected, JobSubmitted, NodeRemoved, PriorityClassObserved, Toleration,
    WorkloadBound, WorkloadEvicted, WorkloadFinished, WorkloadRunning, WorkloadWithdrawn,
)
from gangway.events.contract import PodsReady
from gangway.events.reasons import C, Reason, reason
from gangway.events.quantity import MILLI, format_resource
from gangway.events.resources import PODS, admitted_pod_sets, index_of
from gangway.events.state import HOLDS_NODES, State, WorkloadState, handing_over
from gangway.services.binder import objects as ob
from gangway.services.binder.policy import RequeueBackoff, bind_failed, deactivating, rule_deadlines

log = logging.getLogger(__name__)
RESOURCES = {"Job": api.JOBS, "JobSet": api.JOBSETS, **api.TRAINING_JOBS, "RayJob": api.RAYJOBS}
#: Proposal: (event id, cluster time ms, event).
Report = tuple[str, int, object]
#: intake(object, state) → the JobSubmitted it becomes and what of it gangway ignores (sentences), or
#: its rejection (for gangway.rejections: why, and the object as written).
Intake = Callable[[dict, State], "tuple[JobSubmitted, list[str]] | JobRejected"]
SUBMIT_RETRY_S = 30.0
#: A gang that lost a pod waits for the rest of its pods this long past their grace period before
#: deleting what is left at once.
LOST_GRACE_MARGIN_S = 5.0
#: Kueue's waitForPodsReady timeout, on by default here: a gang's GPUs are too dear to hold for a pod
#: that cannot start (an image that does not pull, a device that fails).
PODS_READY_TIMEOUT_S = 600.0
#: Writes of gangway's condition that met a newer object (409 Conflict) before it gives up until
#: the next change it tells of.
CONDITION_TRIES = 4
#: What a bind of a pod that no longer exists, or is being deleted, returns (not a refusal: the pod is being
#: re-created, and the next pass binds its replacement).
GONE = "gone"
EVICT_BACKOFF_MAX_S = 5.0
#: A waiting object's position is told again at most this often.
PENDING_EVERY_S = 10.0


@dataclass
class Step:
    reports: list[Report] = field(default_factory=list)
    submissions: list[JobSubmitted] = field(default_factory=list)
    #: Objects the intake refused, once per version of the object and of the contract.
    rejections: list[JobRejected] = field(default_factory=list)
    #: Waiting objects submitted again under another queue-name label, each with the object's
    #: resourceVersion (which tells this change from an earlier one: a new CloudEvent id).
    moves: list[tuple[JobSubmitted, str]] = field(default_factory=list)


def submission_id(job: JobSubmitted, version: str | None = None) -> str:
    """The CloudEvent id an object's submission is sent with: its uid; submitted again under another
    queue-name label (a move), its uid and the resourceVersion of that change."""
    uid = job.labels.get(ob.UID_LABEL, job.job_id)
    return f"k8s/{uid}" if version is None else f"k8s/{uid}/{version}"


@dataclass
class Gang:
    started: float
    resumed: bool = False
    #: The pods this binder bound for the attempt (uids): an unbound pod of the gang that is not
    #: one of them is a replacement for one that was lost.
    bound: frozenset[str] = frozenset()
    #: Since when (monotonic s) the running gang has been short of a pod, if it is (kept on the object
    #: too: its ``Recovering`` condition).
    short_since: float | None = None


@dataclass
class Evicting:
    deadline: float
    told: bool = False
    retry_at: dict[str, float] = field(default_factory=dict)
    backoff: dict[str, float] = field(default_factory=dict)
    #: Pods deleted with no grace left (once each).
    killed: set[str] = field(default_factory=set)


class KubernetesBinder:
    def __init__(self, kube: Kube, identity: str, intake: Intake | None = None, namespace: str = "gangway-system",
                 lease_name: str = "gangway-binder", lease_s: float = 15.0, pods_timeout_s: float = 60.0,
                 scheduler: str = ob.SCHEDULER_NAME, bind_concurrency: int = 32, kinds: tuple[str, ...] = ob.KINDS,
                 watch_timeout_s: int = 60, pending: Callable[[State], dict] | None = None,
                 backoff: RequeueBackoff | None = None, gate: str = ob.GATE,
                 pods_ready_timeout_s: float | None = None):
        self.kube, self.identity, self.intake = kube, identity, intake
        #: pending(state) → workload → an object with reason and eta_ms (gangway explain's pending report).
        self.pending = pending
        self.scheduler, self.pods_timeout_s = scheduler, pods_timeout_s
        #: How a gang whose bind failed is requeued (None: as the contract's waitForPodsReady says, else
        #: ``RequeueBackoff()``); the scheduling gate of objects whose pods cannot name gangway's scheduler.
        self.backoff, self.gate = backoff, gate
        #: A bound gang whose pods are not all running this long after its admission, or a running one
        #: short of a pod this long, is rolled back and requeued with its backoff (Kueue's
        #: waitForPodsReady timeout and recoveryTimeout; 0: never; None: as the contract's
        #: waitForPodsReady says, else ``PODS_READY_TIMEOUT_S`` for both).
        self.pods_ready_timeout_s = pods_ready_timeout_s
        #: What this step goes by (``_pods_ready``): ``requeue`` (the backoff), ``ready_s`` and
        #: ``recovery_s`` (the two timeouts, s; 0: never).
        self._pods_ready(None)
        self.wake = asyncio.Event()
        self.reflectors: dict[str, Reflector] = {
            kind: Reflector(kube, res, on_change=self._changed, on_relist=self._relisted,
                            watch_timeout_s=watch_timeout_s)
            for kind, res in [("Node", api.NODES), ("Pod", api.PODS), ("PriorityClass", api.PRIORITY_CLASSES)]
            + [(k, RESOURCES[k]) for k in kinds]}
        self.elector = LeaseElector(kube, namespace, lease_name, identity, duration_s=lease_s)
        #: (uid, resourceVersion) of each pod gangway does not manage → what it requests (``_held_by_others``).
        self.pod_requests: dict[tuple, dict[str, int]] = {}
        self.gangs: dict[tuple[str, int], Gang] = {}
        self.evicting: dict[tuple[str, int], Evicting] = {}
        #: (uid, None) → when an object was last submitted at intake; (uid, queue) → when a waiting one was
        #: last submitted again under that queue-name label (a move). Either is asked again after SUBMIT_RETRY_S.
        self.submitting: dict[tuple[str, str | None], float] = {}
        self.told: dict[str, tuple[str, str]] = {}
        #: (workload, attempt) → (why, deadline): gangs that lost a pod, requeued once the rest of their
        #: pods are gone (deleted at once past the deadline: their grace period).
        self.losing: dict[tuple[str, int], tuple[str, float]] = {}
        #: uid → (kind, namespace, name) of each job object seen: its pods are found by these once it is deleted.
        self.names: dict[str, tuple[str, str, str]] = {}
        self.told_at: dict[str, float] = {}
        self.rejected: dict[str, tuple] = {}
        #: uid → the queue-name label an admitted object was told it cannot move to.
        self.move_ignored: dict[str, str] = {}
        self.bind_sem = asyncio.Semaphore(bind_concurrency)
        self.scheduler_immutable: set[str] = set()
        #: Seconds from a placement first seen to its last pod bound, per gang bound (for the benchmark).
        self.bind_latencies: list[float] = []
        self.pods_bound = 0
        #: (pods, start, end) of every round of binds (monotonic s): the binder's own binding rate.
        self.bind_phases: list[tuple[int, float, float]] = []
        #: What reconciling found and fixed (also on the log, logged and told on the objects), and the
        #: findings already reported (the cache may show a fixed object once more).
        self.found: list[str] = []
        self.reported: dict[tuple, str] = {}
        self._tasks: list[asyncio.Task] = []

    # --- running ---------------------------------------------------------------------------------

    def _changed(self, kind: str, obj: dict) -> None:
        self.wake.set()

    def _relisted(self, store: dict) -> None:
        self.wake.set()

    def start(self, stop: asyncio.Event) -> None:
        self._tasks = [asyncio.create_task(r.run(stop)) for r in self.reflectors.values()]
        self._tasks.append(asyncio.create_task(self.elector.run(stop)))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors.values())

    async def wait_synced(self, timeout_s: float = 30.0) -> None:
        await asyncio.wait_for(asyncio.gather(*(r.synced.wait() for r in self.reflectors.values())), timeout_s)

    # --- one pass ----------------------------------------------------------------------------------

    async def step(self, state: State, now_ms: int | None = None) -> Step:
        out = Step()
        self.wake.clear()
        if not self.elector.leading or not self.synced:
            return out
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        self._pods_ready(state.contract.pods_ready if state.contract is not None else None)
        self._ticks(state, out, now_ms)
        objs, by_uid = self._objects(state)
        clusters = self._ray_clusters()
        pods = self._pods(clusters)
        self._nodes(state, out, now_ms, self._held_by_others(by_uid, clusters))
        if not self._priority_classes(state, out, now_ms):  # (a job naming a class it reports waits for it)
            await self._intake(state, by_uid, out)
        await self._moves(state, objs, out)
        await self._withdrawals(state, objs, pods, out, now_ms)
        work = []
        for name in list(state.active):
            wl, obj = state.workloads[name], objs.get(name)
            if obj is None:
                continue
            its_pods = _pods_of(pods, obj)
            if wl.phase == "placed" and handing_over(state, wl):
                continue  # a hand-over: its pods start once the work it takes over has ended
            if wl.phase == "placed" and ob.finished(obj) is None:  # (one that ended is withdrawn: _withdrawals)
                tolerations = index_of(state.contract).flavor_tolerations(wl.admission.flavors)
                work.append(self._bind_gang(wl, obj, its_pods, out, now_ms, tolerations))
            elif wl.phase in ("bound", "running"):
                work.append(self._follow(wl, obj, its_pods, out, now_ms, state))
            elif wl.phase == "evicting":
                work.append(self._evict(wl, obj, its_pods, out, now_ms))
        await asyncio.gather(*work)
        await self._reconcile(state, by_uid, pods, out, now_ms)
        await self._tell_pending(state, objs)
        self._forget(state)
        return out

    # --- the log's clock -------------------------------------------------------------------------------

    def _ticks(self, state: State, out: Step, now_ms: int) -> None:
        """Time-based rules that came due with nothing else on the log (a requeue backoff ended, a
        minimum runtime ended): one ClockTicked at the latest deadline passed, so the deciders see it."""
        due = [(t, why) for t, why in rule_deadlines(state) if t <= now_ms]
        if due:
            t = due[-1][0]
            out.reports.append((f"tick/{t}", t, ClockTicked(reason="; ".join(why for _, why in due))))

    # --- nodes ---------------------------------------------------------------------------------------

    def _nodes(self, state: State, out: Step, now_ms: int, held: dict[str, dict[str, int]]) -> None:
        seen = set()
        for obj in self.reflectors["Node"].store.values():
            node = ob.node_observed(obj)
            if isinstance(node, str):
                log.warning("%s; left out", node)
                continue
            node = ob.without_others(node, held.get(node.node, {}))
            seen.add(node.node)
            if node.unavailable:
                changed = state.unavailable.get(node.node) != node.unavailable
            else:
                known = state.nodes.get(node.node)
                changed = known is None or (known.allocatable, known.labels, known.islands, known.taints) != (
                    node.allocatable, node.labels, node.islands, node.taints)
            if changed:
                digest = hashlib.sha256(repr(node).encode()).hexdigest()[:12]
                out.reports.append((f"node/{node.node}/{digest}/{state.offset}", now_ms, node))
        for name in sorted((set(state.nodes) | set(state.unavailable)) - seen):
            out.reports.append((f"node-removed/{name}/{state.offset}", now_ms, NodeRemoved(node=name)))

    # --- objects ---------------------------------------------------------------------------------------

    def _objects(self, state: State) -> tuple[dict[str, dict], dict[str, dict]]:
        """Workload → its object, and uid → object (every job object with a queue label)."""
        by_uid = {}
        for kind in RESOURCES:
            if kind in self.reflectors:
                for obj in self.reflectors[kind].store.values():
                    m = ob.meta(obj)
                    if ob.queued_object(obj):
                        by_uid[m.get("uid")] = obj
                        self.names[m.get("uid")] = (kind, m.get("namespace"), m.get("name"))
        objs = {}
        for name in list(state.pending) + list(state.active):
            uid = state.workloads[name].spec.labels.get(ob.UID_LABEL)
            if uid in by_uid:
                objs[name] = by_uid[uid]
        return objs, by_uid

    def _priority_classes(self, state: State, out: Step, now_ms: int) -> bool:
        """Report the cluster's PriorityClasses the log does not have as they are (and those deleted);
        True when it reported one."""
        seen = {}
        for obj in self.reflectors["PriorityClass"].store.values():
            name, value = ob.meta(obj).get("name"), obj.get("value")
            if isinstance(name, str) and isinstance(value, int) and not isinstance(value, bool):
                seen[name] = (value, obj.get("globalDefault") is True)
        reported = False
        for name, (value, default) in sorted(seen.items()):
            if state.cluster_priority_classes.get(name) != value or (state.cluster_default_class == name) != default:
                out.reports.append((f"priorityclass/{name}/{value}/{default}/{state.offset}", now_ms,
                                    PriorityClassObserved(name=name, value=value, global_default=default)))
                reported = True
        for name in sorted(set(state.cluster_priority_classes) - set(seen)):
            out.reports.append((f"priorityclass-gone/{name}/{state.offset}", now_ms,
                                PriorityClassObserved(name=name, value=state.cluster_priority_classes[name], gone=True)))
            reported = True
        return reported

    def _held_by_others(self, by_uid: dict[str, dict], clusters: dict[tuple[str, str], str]) -> dict[str, dict[str, int]]:
        """Node → what the pods gangway does not manage hold there (milli): pods bound to it and not
        ended that are neither of a queued object (``by_uid``) nor bound by gangway (its GPU-indexes
        annotation, which a pod of a deleted object keeps while it terminates)."""
        ours = {(ob.kind_of(obj), ob.meta(obj).get("namespace"), ob.meta(obj).get("name")) for obj in by_uid.values()}
        held: dict[str, dict[str, int]] = {}
        known, self.pod_requests = self.pod_requests, {}
        for pod in self.reflectors["Pod"].store.values():
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if ob.GPUS_ANNOTATION in (ob.meta(pod).get("annotations") or {}):
                continue
            ns = ob.meta(pod).get("namespace")
            if any((kind, ns, name) in ours for kind, name in ob.owners(pod, clusters)):
                continue
            # (read once per version of the pod: every pass looks at every pod of the cluster)
            key = (ob.meta(pod).get("uid"), ob.meta(pod).get("resourceVersion"))
            asked = known[key] if key in known else ob.pod_requests(pod)
            if all(key):
                self.pod_requests[key] = asked
            on_node = held.setdefault(node, {})
            for resource, milli in asked.items():
                on_node[resource] = on_node.get(resource, 0) + milli
            on_node[PODS] = on_node.get(PODS, 0) + MILLI  # (one of the node's max-pods, whatever it asks)
        return held

    def _ray_clusters(self) -> dict[tuple[str, str], str]:
        """(namespace, RayCluster) → the RayJob that made it (its ``status.rayClusterName``)."""
        reflector = self.reflectors.get("RayJob")
        return {} if reflector is None else {
            (ob.meta(obj).get("namespace"), cluster): ob.meta(obj).get("name") for obj in reflector.store.values()
            if (cluster := (obj.get("status") or {}).get("rayClusterName"))}

    def _pods(self, clusters: dict[tuple[str, str], str]) -> dict[tuple[str, str, str], list[dict]]:
        """Each object's pods, by (kind, namespace, name); ``clusters``: ``_ray_clusters``."""
        found: dict[tuple[str, str, str], list[dict]] = {}
        for pod in self.reflectors["Pod"].store.values():
            ns = ob.meta(pod).get("namespace")
            for kind, name in ob.owners(pod, clusters):
                if name:
                    found.setdefault((kind, ns, name), []).append(pod)
        return found

    async def _intake(self, state: State, by_uid: dict[str, dict], out: Step) -> None:
        if self.intake is None:
            return
        known = {wl.spec.labels.get(ob.UID_LABEL) for wl in state.workloads.values()}
        now = time.monotonic()
        for uid, obj in by_uid.items():
            m = ob.meta(obj)
            if uid in known or m.get("deletionTimestamp") or now - self.submitting.get((uid, None), -1e9) < SUBMIT_RETRY_S:
                continue
            if ob.needs_suspending(obj):  # (what got past the webhook, or ran without one)
                await self._suspend(obj, "created without spec.suspend: suspended until gangway admits it")
                continue
            if not ob.is_suspended(obj):
                continue
            result = await self._checked(obj, state, out)
            if result is None:
                continue
            job, ignored = result
            if ignored:  # it runs, without what those keys ask: the owner hears it once, at intake
                await self.tell(obj, "Warning", "KeysIgnored", "Ignored by gangway: " + "; ".join(ignored), status="False")
            self.submitting[(uid, None)] = now
            out.submissions.append(job)

    async def _checked(self, obj: dict, state: State, out: Step) -> tuple[JobSubmitted, list[str]] | None:
        """The intake's answer for ``obj``; None if it refuses it (the refusal kept for
        ``gangway.rejections`` and told on the object) or refused this version of it before."""
        m = ob.meta(obj)
        uid = m.get("uid")
        # Refused once, asked again only when the object or the contract changes.
        # (by what its owner wrote — the spec's generation, labels and annotations: gangway's own
        # condition on its status does not make it new)
        version = (m.get("generation"), _frozen(m.get("labels")), _frozen(m.get("annotations")))
        if self.rejected.get(uid) == (version, state.contract_digest):
            return None
        result = self.intake(obj, state)
        if isinstance(result, JobRejected):
            self.rejected[uid] = (version, state.contract_digest)
            out.rejections.append(result)
            await self.tell(obj, "Warning", "Rejected", f"Rejected by gangway: {result.reason}: {result.message}",
                            status="False")
            return None
        return result

    async def _moves(self, state: State, objs: dict[str, dict], out: Step) -> None:
        """An object whose ``kueue.x-k8s.io/queue-name`` label names another LocalQueue than its
        workload's: while the workload waits, the object is submitted again and the submission
        service moves it (``WorkloadMoved``; a queue it cannot go to is refused as at intake, and it
        waits where it was). An admitted one keeps its queue, as in Kueue: its owner is told once."""
        if self.intake is None:
            return
        now = time.monotonic()
        for name, obj in objs.items():
            wl, m = state.workloads[name], ob.meta(obj)
            queue, uid = (m.get("labels") or {}).get(ob.QUEUE_LABEL), m.get("uid")
            if queue == wl.spec.queue or m.get("deletionTimestamp") or wl.withdrawing is not None:
                continue
            if wl.phase != "pending":
                if self.move_ignored.get(uid) != queue:
                    self.move_ignored[uid] = queue
                    await self.tell(obj, "Warning", "QueueChangeIgnored",
                                    f"Ignored by gangway: the queue-name label says {queue}, but {name} is "
                                    f"{wl.phase} from queue {wl.spec.queue}; a workload changes queue only while it "
                                    "waits (as in Kueue), so it stays there", status=None)
                continue
            if now - self.submitting.get((uid, queue), -1e9) < SUBMIT_RETRY_S:
                continue
            result = await self._checked(obj, state, out)
            if result is not None:
                self.submitting[(uid, queue)] = now
                out.moves.append((result[0], str(m.get("resourceVersion") or "")))

    async def _withdrawals(self, state: State, objs: dict[str, dict], pods: dict, out: Step, now_ms: int) -> None:
        for name in list(state.pending) + list(state.active):
            wl = state.workloads[name]
            uid = wl.spec.labels.get(ob.UID_LABEL)
            if uid is None and wl.withdrawing is not None:  # (no object, so no pod: taken back by its producer)
                out.reports.append((f"withdrawn/{name}/{wl.attempt}", now_ms, WorkloadWithdrawn(workload=name,
                                                                                          reason=wl.withdrawing)))
                continue
            if uid is None or wl.spec.kind not in self.reflectors:
                continue
            obj = objs.get(name)
            if obj is None or ob.meta(obj).get("deletionTimestamp"):
                if wl.phase in HOLDS_NODES and self._still_on_nodes(wl, pods):
                    # Its pods terminate for their grace period: their quota and GPUs stay taken on
                    # the log until they are gone, so no other gang is bound beside them meanwhile.
                    continue
                gone = "its queue-name label removed: gangway schedules it no more" if self._unlabelled(uid) else "deleted"
                out.reports.append((f"withdrawn/{name}/{uid}", now_ms, WorkloadWithdrawn(
                    workload=name, reason=f"{wl.spec.kind} {name} (uid {uid}) {gone}")))
                continue
            ended = ob.finished(obj) if wl.phase in ("pending", "admitted", "placed") else None
            if ended is not None and wl.phase == "placed" and _holding(_pods_of(pods, obj)):
                continue  # (its controller is taking its last pods away: their nodes stay taken until then)
            if ended is not None:  # it ended outside gangway (failed or completed while it waited): out of its queue
                said = f"{ended[2]} while gangway held it {wl.phase}"
                out.reports.append((f"withdrawn/{name}/{uid}", now_ms, WorkloadWithdrawn(workload=name, reason=said)))
                # (its condition said where it waited: now it waits no more)
                await self.tell(obj, "Normal", "Withdrawn", f"Withdrawn by gangway: {said}", status="False")

    def _unlabelled(self, uid: str) -> bool:
        """Is the object of ``uid`` still there, its queue-name label taken off?"""
        kind, ns, name = self.names.get(uid) or (None, None, None)
        obj = self.reflectors[kind].store.get(f"{ns}/{name}") if kind in self.reflectors else None
        return (obj is not None and ob.meta(obj).get("uid") == uid and not ob.meta(obj).get("deletionTimestamp")
                and not ob.queued_object(obj))

    def _still_on_nodes(self, wl: WorkloadState, pods: dict[tuple[str, str, str], list[dict]]) -> bool:
        """Does a pod of ``wl``'s object (deleted: found by the name it had, ``names``) still hold its
        node: bound and neither succeeded nor failed, terminating included?"""
        uid = wl.spec.labels.get(ob.UID_LABEL)
        kind, ns, name = self.names.get(uid) or (wl.spec.kind, wl.spec.namespace, wl.spec.workload.partition("/")[2])
        return bool(_holding(pods.get((kind, ns, name), [])))

    # --- placements: the gang, all or nothing ------------------------------------------------------------

    def _expected(self, wl: WorkloadState) -> dict[str, int]:
        return {ps.name: ps.count for ps in admitted_pod_sets(wl.spec.pod_sets, wl.admission.counts)}

    async def _bind_gang(self, wl: WorkloadState, obj: dict, pods: list[dict], out: Step, now_ms: int,
                         tolerations: list[Toleration]) -> None:
        name, kind = wl.spec.workload, ob.kind_of(obj)
        key = (name, wl.attempt)
        gang = self.gangs.get(key)
        if gang is None:
            gang = self.gangs[key] = Gang(started=time.monotonic())
        annotations = ob.meta(obj).get("annotations") or {}
        if not gang.resumed:
            if ob.is_suspended(obj) or annotations.get(ob.ATTEMPT_ANNOTATION) != str(wl.attempt):
                try:
                    await self._resume(wl, obj, tolerations)
                except ApiError as exc:
                    await self._roll_back(wl, obj, pods, out, now_ms, f"resuming the {kind} failed: {exc}")
                    return
                nodes = sorted({a.node for a in wl.placement.assignments})
                await self.tell(obj, "Normal", "Admitted",
                                f"Admitted by gangway: {wl.admission.reason or 'quota available'}; "
                                f"placed on {', '.join(nodes)}", status="True")
            gang.resumed = True
        want = self._expected(wl)
        mine = [p for p in pods if ob.live(p)]
        by_set: dict[str, list[dict]] = {}
        for pod in mine:
            ps = ob.pod_set_of(kind, pod, list(want))
            if ps in want:
                by_set.setdefault(ps, []).append(pod)
        short = {ps: (len(by_set.get(ps, [])), n) for ps, n in want.items() if len(by_set.get(ps, [])) < n}
        if short:
            if time.monotonic() - gang.started > self.pods_timeout_s:
                said = ", ".join(f"{ps}: {have} of {n}" for ps, (have, n) in sorted(short.items()))
                await self._roll_back(wl, obj, pods, out, now_ms,
                                      f"pods did not all appear within {self.pods_timeout_s:g} s ({said})")
            return
        by_set = {ps: sorted(p, key=ob.pod_order)[:want[ps]] for ps, p in by_set.items()}
        plan = ob.bindings(by_set, wl.placement.assignments, wl.placement_gpus)
        todo = [(pod, node, gpus) for pod, node, gpus in plan if (pod.get("spec") or {}).get("nodeName") != node]
        began = time.monotonic()
        results = await asyncio.gather(*(self._bind(pod, node, gpus) for pod, node, gpus in todo))
        self.bind_phases.append((len(todo), began, time.monotonic()))
        failed = [r for r in results if r and r != GONE]
        self.pods_bound += sum(1 for r in results if not r)
        if GONE in results and not failed:
            return  # a pod our cache still showed was gone (deleted and being re-created): the next pass binds it
        if failed:
            await self._roll_back(wl, obj, pods, out, now_ms, f"{len(failed)} of {len(plan)} binds refused: {failed[0]}")
            return
        self.bind_latencies.append(time.monotonic() - gang.started)
        gang.bound = frozenset(ob.meta(pod).get("uid") for pod, _, _ in plan)
        out.reports.append((f"bound/{name}/{wl.attempt}", now_ms, WorkloadBound(workload=name, attempt=wl.attempt)))

    async def _resume(self, wl: WorkloadState, obj: dict, tolerations: list[Toleration]) -> None:
        """Resume the object for this attempt: its pods named for gangway's scheduler, or — where the
        template cannot take a scheduler (a batch/v1 Job) — created behind gangway's scheduling gate;
        with the tolerations its flavors give its pods."""
        kind, m = ob.kind_of(obj), ob.meta(obj)
        gated = (kind == "Job" or kind in self.scheduler_immutable) and not ob.names_scheduler(obj, self.scheduler)
        counts = wl.admission.counts
        extra = [ob.toleration_object(t) for t in tolerations]

        def patch(gate: str | None) -> dict:
            p = ob.suspend_patch(obj, False, wl.spec.workload, wl.attempt, self.scheduler, gate=gate,
                                 tolerations=extra)
            if kind == "Job" and counts:  # partial admission: run as many pods as were admitted, as Kueue does
                p["spec"]["parallelism"] = sum(counts.values())
            return p
        try:
            await self.kube.patch(RESOURCES[kind], m["name"], patch(self.gate if gated else None), m.get("namespace"))
        except ApiError as exc:
            # (422 from the API server's own validation; 403 from the kind's admission webhook, as
            # JobSet's, which allows gates, node selectors and tolerations on a suspended JobSet)
            if gated or exc.status not in (403, 422) or "immutable" not in exc.message:
                raise
            # This kind's pod templates take no new scheduler: its pods are gated instead.
            log.warning("%s pod templates are immutable: their pods are created behind the scheduling gate %s",
                        kind, self.gate)
            self.scheduler_immutable.add(kind)
            await self.kube.patch(RESOURCES[kind], m["name"], patch(self.gate), m.get("namespace"))

    async def _bind(self, pod: dict, node: str, gpus: list[int]) -> str:
        """'' when bound, else what the API server said."""
        m = ob.meta(pod)
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": m["name"], "namespace": m.get("namespace"),
                             "annotations": {ob.GPUS_ANNOTATION: ",".join(map(str, gpus))} if gpus else {}},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        async with self.bind_sem:
            gates = ob.gates(pod)
            if self.gate in gates:  # pinned to its node and ungated first: a gated pod cannot be bound
                try:
                    await self.kube.patch(api.PODS, m["name"], ob.ungate_patch(pod, node, gpus, self.gate),
                                          m.get("namespace"))
                except ApiError as exc:
                    if exc.not_found:
                        return GONE
                    return f"pod {m['name']} to {node}: lifting its scheduling gate: {exc}"
            others = [g for g in gates if g != self.gate]
            if others:
                return f"pod {m['name']} to {node}: held by scheduling gate(s) {', '.join(others)}"
            try:
                await self.kube.create(api.PODS, body, m.get("namespace"), sub="binding", name=m["name"])
            except ApiError as exc:
                if exc.not_found or (exc.conflict and "is being deleted" in exc.message):
                    return GONE  # going (deleted after our cache last saw it): its replacement is bound next pass
                if exc.conflict and f'already assigned to node "{node}"' in exc.message:
                    return ""  # the default scheduler bound the ungated pod first, where it was pinned
                return f"pod {m['name']} to {node}: {exc}"
        return ""

    def _pods_ready(self, ready: PodsReady | None) -> None:
        """The timeouts and backoff of this step: the binder's own where given, else the contract's
        waitForPodsReady, else gangway's defaults."""
        if self.backoff is not None:
            self.requeue = self.backoff
        elif ready is not None:
            self.requeue = RequeueBackoff(ready.backoff_base_ms / 1000, ready.backoff_max_ms / 1000, ready.backoff_limit)
        else:
            self.requeue = RequeueBackoff()
        if self.pods_ready_timeout_s is not None:
            self.ready_s = self.recovery_s = self.pods_ready_timeout_s
        elif ready is not None:
            self.ready_s = ready.timeout_ms / 1000
            self.recovery_s = (ready.recovery_timeout_ms or 0) / 1000
        else:
            self.ready_s = self.recovery_s = PODS_READY_TIMEOUT_S

    async def _roll_back(self, wl: WorkloadState, obj: dict, pods: list[dict], out: Step, now_ms: int,
                         why: str, failed: str = "gang not bound") -> None:
        """The gang did not bind whole (or did not start in time): delete its pods, suspend the object,
        requeue the workload after its backoff."""
        # Suspended first, as an eviction: pods deleted under a running Job count against its
        # backoffLimit (a Job of backoffLimit 0 would fail for good instead of being requeued).
        await self._suspend(obj, "")
        removed = await self._delete_pods(pods, grace=0)
        said = f"{failed}: {why}; {removed} pod(s) deleted and the {ob.kind_of(obj)} suspended again"
        report = bind_failed(wl, now_ms, said, self.requeue)
        if report.reason_code == C.BIND_FAILURES_EXCEEDED:
            await self.tell(obj, "Warning", "Deactivated", f"Deactivated by gangway: {report.reason}; delete and "
                            f"create the {ob.kind_of(obj)} again to retry", status="False")
        else:
            await self.tell(obj, "Warning", "GangRolledBack", f"{said}; back in its queue; {Reason(report.reason_code, report.reason_params).message}",
                            status="False")
        self.gangs.pop((wl.spec.workload, wl.attempt), None)
        out.reports.append((f"rolled-back/{wl.spec.workload}/{wl.attempt}", now_ms, report))

    async def _delete_pods(self, pods: list[dict], grace: int | None) -> int:
        async def one(pod):
            m = ob.meta(pod)
            try:
                return await self.kube.delete(api.PODS, m["name"], m.get("namespace"), grace_seconds=grace,
                                              uid=m.get("uid")) is not None
            except ApiError as exc:
                if exc.conflict:  # another incarnation of the name: not ours to delete
                    return False
                raise
        return sum(await asyncio.gather(*(one(p) for p in pods)))

    async def _suspend(self, obj: dict, why: str) -> None:
        m = ob.meta(obj)
        try:
            await self.kube.patch(RESOURCES[ob.kind_of(obj)], m["name"], ob.suspend_patch(obj, True), m.get("namespace"))
        except ApiError as exc:
            if not exc.not_found:
                raise
        if why:
            await self.tell(obj, "Normal", "Suspended", why, status="False")

    # --- status -------------------------------------------------------------------------------------------

    async def _follow(self, wl: WorkloadState, obj: dict, pods: list[dict], out: Step, now_ms: int,
                      state: State) -> None:
        name, attempt = wl.spec.workload, wl.attempt
        if (name, attempt) in self.losing:
            await self._requeue_lost(wl, pods, out, now_ms)
            return
        done = ob.finished(obj)
        if done is not None:
            _, succeeded, said = done
            out.reports.append((f"finished/{name}/{attempt}", now_ms, WorkloadFinished(
                workload=name, attempt=attempt, succeeded=succeeded, reason=said)))
            await self.tell(obj, "Normal" if succeeded else "Warning", "Finished", f"Finished: {said}",
                            status="False")
            return
        gang = self.gangs.get((name, attempt))
        if gang is None:  # (bound by another leader, or before this binder's restart)
            gang = self.gangs[(name, attempt)] = Gang(started=time.monotonic(), resumed=True)
        if not await self._bind_replacements(wl, obj, pods, gang, out, now_ms, state):
            return
        if ob.successive(obj):  # its pods are work items, not a gang that fails whole: running once those there run
            active = [p for p in pods if ob.live(p) and (p.get("status") or {}).get("phase") != "Succeeded"]
            if wl.phase == "bound" and all((p.get("status") or {}).get("phase") == "Running" for p in active):
                out.reports.append((f"running/{name}/{attempt}", now_ms, WorkloadRunning(workload=name, attempt=attempt)))
            return
        want = sum(self._expected(wl).values())
        alive = sorted((p for p in pods if ob.live(p)), key=ob.pod_order)
        starting = [p for p in alive if not (p.get("spec") or {}).get("nodeName")
                    or (p.get("status") or {}).get("phase") not in ("Running", "Succeeded")]
        short = want - (len(alive) - len(starting))
        if short <= 0:
            if gang.short_since is not None or ob.condition(obj).get("reason") == RECOVERING:
                await self.tell(obj, "Normal", "Recovered", f"Recovered: all {want} pods running again", status="True")
            gang.short_since = None
            if wl.phase == "bound":
                out.reports.append((f"running/{name}/{attempt}", now_ms, WorkloadRunning(workload=name, attempt=attempt)))
            return
        if not (self.ready_s if wl.phase == "bound" else self.recovery_s):
            return
        first = (f"{ob.meta(starting[0]).get('name')}: {ob.waiting_reason(starting[0])}" if starting
                 else "no replacement made by its controller")
        if wl.phase == "bound":
            # Half a gang running at its rendezvous holds every GPU of it: give them back, try again later.
            if wl.admitted_ms is not None and now_ms - wl.admitted_ms > self.ready_s * 1000:
                await self._roll_back(wl, obj, pods, out, now_ms, f"{short} of its {want} pods not running "
                                      f"{self.ready_s:g} s after its admission ({first})",
                                      failed="gang not running")
            return
        # Running, and short of a pod (failed, deleted): its controller's replacement takes the place
        # left (_bind_replacements); a gang not whole again in time gives its GPUs back (Kueue's
        # waitForPodsReady recoveryTimeout).
        if gang.short_since is None:
            gang.short_since = _short_since(obj)
            if gang.short_since is None:  # (the condition keeps the time for a leader to come)
                gang.short_since = time.monotonic()
                await self.tell(obj, "Warning", RECOVERING, f"{RECOVERING}: {short} of its {want} pods not running "
                                f"({first}); back in its queue unless whole again within {self.recovery_s:g} s",
                                status="True")
        elif time.monotonic() - gang.short_since > self.recovery_s:
            await self._roll_back_lost(wl, obj, pods, out, now_ms, short, f"gang not whole again: {short} of its {want} "
                                       f"pods not running {self.recovery_s:g} s after it lost one ({first})")

    async def _bind_replacements(self, wl: WorkloadState, obj: dict, pods: list[dict], gang: Gang, out: Step,
                                 now_ms: int, state: State) -> bool:
        """A pod of a bound gang that failed, succeeded (a Job of more completions than parallelism)
        or was deleted leaves its place — its node and GPUs — to the pod its controller creates next,
        which is bound there: the controller retries within its own limits (a Job's backoffLimit, a
        JobSet's maxRestarts), as with Kueue. A place is free once the pod in it has stopped (a
        terminating pod still holds its GPUs). A place on a node that became unavailable (cordoned,
        drained, not ready) or no longer has the room it was given (``_place_lost``: a device gone
        unhealthy) is not retried: the gang is requeued once its pods are gone. False when the gang was
        rolled back."""
        waiting = sorted((p for p in pods if ob.live(p) and not (p.get("spec") or {}).get("nodeName")
                          and ob.meta(p).get("uid") not in gang.bound), key=ob.pod_order)
        plan = self._free_places(wl, obj, _holding(pods), waiting) if waiting else []
        if not plan:
            return True
        lost = next(((node, why) for node in sorted({node for _, node, _ in plan}) if (why := _place_lost(state, node))),
                    None)
        if lost is not None:  # (a node cordoned, drained, not ready, short of a device: the gang is placed anew)
            node, why = lost
            await self._roll_back_lost(wl, obj, pods, out, now_ms, len(plan), f"{len(plan)} pod(s) of the gang lost, "
                                       f"their place on node {node} unavailable ({why})")
            return False
        results = await asyncio.gather(*(self._bind(pod, node, gpus) for pod, node, gpus in plan))
        refused = [r for r in results if r and r != GONE]
        if refused:
            await self._roll_back(wl, obj, pods, out, now_ms, f"{len(refused)} of its replacement pods' binds refused: "
                                  f"{refused[0]}")
            return False
        placed = [(pod, node) for (pod, node, _), r in zip(plan, results) if not r]
        gang.bound |= {ob.meta(pod).get("uid") for pod, _ in placed}
        if placed and not ob.successive(obj):
            left = sorted(ob.meta(p).get("name") for p in pods if not ob.live(p))
            found = reason(C.PODS_REPLACED, kind=ob.kind_of(obj), object=_name(obj), pods=len(placed),
                           workload=wl.spec.workload)
            self._found(out, now_ms, obj, found, wl, pods=[ob.meta(p).get("name") for p, _ in placed],
                        nodes=[node for _, node in placed],
                        action="each bound in the place its predecessor left" + (f" ({', '.join(left)})" if left else ""))
        return True

    def _free_places(self, wl: WorkloadState, obj: dict, bound: list[dict], waiting: list[dict]) -> list[tuple[dict, str, list[int]]]:
        """(pod, node, GPU indexes) for the waiting pods, in the placement's places that no bound pod
        holds (a place: a node and one pod's share of its GPUs), in index order."""
        places: list[tuple[str, str, list[int]]] = []
        gpus = wl.placement_gpus
        for i, a in enumerate(wl.placement.assignments):
            places += [(a.pod_set, a.node, share) for share in ob.split_gpus(gpus[i] if i < len(gpus) else [], a.count)]
        pod_sets = list(self._expected(wl))
        for pod in bound:  # its own place first (same node and GPUs), else any place on its node
            node, held = pod["spec"]["nodeName"], ob.gpus_of(pod)
            at = next((k for k, (_, n, g) in enumerate(places) if n == node and g == held), None)
            at = at if at is not None else next((k for k, (_, n, _) in enumerate(places) if n == node), None)
            if at is not None:
                del places[at]
        plan = []
        for pod in waiting:
            pod_set = ob.pod_set_of(ob.kind_of(obj), pod, pod_sets)
            at = next((k for k, (ps, _, _) in enumerate(places) if ps == pod_set), None)
            if at is None:
                break  # (more pods than places: the next pass, once one succeeds)
            _, node, share = places.pop(at)
            plan.append((pod, node, share))
        return plan

    async def _roll_back_lost(self, wl, obj, pods, out, now_ms, gone: int, why: str) -> None:
        failed = [ob.meta(p).get("name") for p in pods if (p.get("status") or {}).get("phase") == "Failed"]
        started, unstarted = [], []
        for p in pods:
            if not ob.meta(p).get("deletionTimestamp"):
                (started if (p.get("status") or {}).get("phase") == "Running" else unstarted).append(p)
        # (a pod that never started has nothing to stop: it goes at once, the others take their grace)
        await self._suspend(obj, "")  # (first: the healthy pods deleted count as no failure of the Job)
        removed = await self._delete_pods(started, grace=None) + await self._delete_pods(unstarted, grace=0)
        action = f"{removed} pod(s) deleted and the {ob.kind_of(obj)} suspended again"
        said = f"{why}; {action}"
        await self.tell(obj, "Warning", "PodLost", f"{said}; back in its queue", status="False")
        found = reason(C.PODS_VANISHED, kind=ob.kind_of(obj), object=_name(obj), pods=gone, workload=wl.spec.workload)
        self._found(out, now_ms, obj, found, wl, pods=failed, nodes=sorted({a.node for a in wl.placement.assignments}),
                    action=action + "; the workload requeued")
        grace = max([_grace_s(p) for p in started], default=0)
        self.losing[(wl.spec.workload, wl.attempt)] = (said, time.monotonic() + grace + LOST_GRACE_MARGIN_S)
        await self._requeue_lost(wl, pods, out, now_ms)

    async def _requeue_lost(self, wl: WorkloadState, pods: list[dict], out: Step, now_ms: int) -> None:
        """A gang that lost a pod goes back to its queue once the rest of its pods are gone: while
        they terminate (their own grace period) their quota and GPUs stay taken on the log. Pods
        still there past their grace period (a kubelet that does not answer) are deleted at once."""
        said, deadline = self.losing[(wl.spec.workload, wl.attempt)]
        holding = _holding(pods)
        if holding:
            if time.monotonic() >= deadline:
                await self._delete_pods(holding, grace=0)
            return
        del self.losing[(wl.spec.workload, wl.attempt)]
        out.reports.append((f"lost/{wl.spec.workload}/{wl.attempt}", now_ms,
                            WorkloadEvicted(workload=wl.spec.workload, attempt=wl.attempt, reason=said)))

    # --- evictions ------------------------------------------------------------------------------------------

    async def _evict(self, wl: WorkloadState, obj: dict, pods: list[dict], out: Step, now_ms: int) -> None:
        name, attempt, order = wl.spec.workload, wl.attempt, wl.eviction
        now = time.monotonic()
        ev = self.evicting.setdefault((name, attempt), Evicting(deadline=now + order.grace_ms / 1000))
        if not ev.told:
            # Suspended first, as Kueue does: the Job controller then takes its pods away without
            # counting them as failed (evicting the pods of a running Job counted each against its
            # backoffLimit and had replacements made during the grace period).
            await self._suspend(obj, "")
            lost = f"; work lost {order.work_lost_ms / 1000:.0f} s" if order.work_lost_ms else ""
            by = order.ordered_by()
            kind = {C.QUEUE_DRAINED: "Drained", C.MAX_EXECUTION_TIME_EXCEEDED: "Deactivated"}.get(order.reason_code,
                                                                                                  "Preempted")
            await self.tell(obj, "Warning", kind,
                            f"{by[0].upper()}{by[1:]}: {order.reason or 'eviction ordered'}{lost}; "
                            f"{order.grace_ms / 1000:g} s grace", status="False")
            ev.told = True
        on_nodes = _holding(pods)
        if not on_nodes:
            await self._suspend(obj, "")
            await self._delete_pods(pods, grace=None)  # what a Job controller would do once suspended
            self.evicting.pop((name, attempt), None)
            out.reports.append((f"evicted/{name}/{attempt}", now_ms, WorkloadEvicted(
                workload=name, attempt=attempt, preemptor=order.preemptor,
                **deactivating(order, f"{order.ordered_by()}: {order.reason or 'eviction ordered'}; pods gone"))))
            return
        await asyncio.gather(*(self._evict_pod(p, ev, now) for p in on_nodes))

    async def _evict_pod(self, pod: dict, ev: Evicting, now: float) -> None:
        m = ob.meta(pod)
        pname, ns = m["name"], m.get("namespace")
        if now < ev.retry_at.get(pname, 0):
            return
        if now >= ev.deadline:  # the grace period is over: PodDisruptionBudgets no longer hold it, nor its own grace
            if pname not in ev.killed:
                ev.killed.add(pname)
                await self.kube.delete(api.PODS, pname, ns, grace_seconds=0, uid=m.get("uid"))
            return
        if m.get("deletionTimestamp"):  # leaving already (the Job controller, once suspended): the deadline ends it
            return
        # The contract's grace period, not the pod's own terminationGracePeriodSeconds.
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pname, "namespace": ns},
                "deleteOptions": {"gracePeriodSeconds": max(0, math.ceil(ev.deadline - now))}}
        try:
            await self.kube.create(api.PODS, body, ns, sub="eviction", name=pname)
        except ApiError as exc:
            if exc.not_found:
                return
            if not exc.too_many:
                log.warning("evicting pod %s/%s: %s", ns, pname, exc)
            delay = min(EVICT_BACKOFF_MAX_S, ev.backoff.get(pname, 0.1) * 2)
            ev.backoff[pname] = delay
            ev.retry_at[pname] = now + delay

    # --- reconciling: the cluster is the truth about what runs ----------------------------------------------

    async def _reconcile(self, state: State, by_uid: dict[str, dict], pods: dict, out: Step, now_ms: int) -> None:
        uid_wl = {wl.spec.labels.get(ob.UID_LABEL): wl for name in list(state.pending) + list(state.active)
                  for wl in (state.workloads[name],)}
        for uid, obj in by_uid.items():
            m = ob.meta(obj)
            workload = (m.get("annotations") or {}).get(ob.WORKLOAD_ANNOTATION)
            wl = uid_wl.get(uid)
            # (an object never resumed by gangway carries no workload annotation, but one of a workload
            # on the log is gangway's all the same: resumed by hand while it waits, it is suspended again)
            if (not workload and wl is None) or ob.finished(obj) is not None or m.get("deletionTimestamp"):
                continue
            in_force = wl is not None and wl.phase in HOLDS_NODES and \
                (m.get("annotations") or {}).get(ob.ATTEMPT_ANNOTATION) == str(wl.attempt)
            its = pods.get((ob.kind_of(obj), m.get("namespace"), m.get("name")), [])
            if in_force:
                continue
            on_nodes = [p for p in its if (p.get("spec") or {}).get("nodeName") and not ob.meta(p).get("deletionTimestamp")]
            if ob.is_suspended(obj) and not on_nodes:
                continue
            code = C.PODS_BOUND_WITHOUT_PLACEMENT if ob.is_suspended(obj) else C.RESUMED_WITHOUT_PLACEMENT
            found = reason(code, kind=ob.kind_of(obj), object=_name(obj), pods=len(on_nodes),
                           workload_phase=f"{wl.spec.workload} is {wl.phase}" if wl else None)
            key = (uid, code, m.get("resourceVersion"), tuple(sorted(ob.meta(p).get("name") for p in on_nodes)))
            if key in self.reported:
                continue  # fixed already: the cache has not caught up yet
            self.found.append(found.message)
            log.warning("reconcile: %s: suspending it and deleting its pods", found.message)
            await self._suspend(obj, f"Reconciled by gangway: {found.message}; suspended again and its pods deleted")
            removed = await self._delete_pods(its, grace=None)  # (after: no failure counted against the Job)
            self.reported[key] = uid
            self._found(out, now_ms, obj, found, wl, pods=[ob.meta(p).get("name") for p in on_nodes],
                        nodes=[p["spec"]["nodeName"] for p in on_nodes],
                        action=f"suspended again, {removed} pod(s) deleted")
        for key in [k for k, uid in self.reported.items() if uid not in by_uid]:
            del self.reported[key]

    def _found(self, out: Step, now_ms: int, obj: dict, found: Reason, wl: WorkloadState | None,
               pods: list[str], nodes: list[str], action: str) -> None:
        """What reconciling found, onto the log."""
        m = ob.meta(obj)
        digest = hashlib.sha256(repr((found.params, pods, action)).encode()).hexdigest()[:12]
        out.reports.append((f"reconciled/{found.code}/{m.get('uid')}/{m.get('resourceVersion')}/{digest}", now_ms,
                            ClusterReconciled(
                                kind=ob.kind_of(obj), namespace=str(m.get("namespace") or ""), name=str(m.get("name")),
                                uid=str(m.get("uid")), reason=found.message, reason_code=found.code,
                                reason_params=found.params, workload=wl.spec.workload if wl else None,
                                attempt=wl.attempt if wl else None, pods=sorted(pods), nodes=sorted(set(nodes)),
                                action=action)))

    # --- telling users -------------------------------------------------------------------------------------

    async def _tell_pending(self, state: State, objs: dict[str, dict]) -> None:
        now = time.monotonic()
        due = []
        for keys in state.pending_order.values():
            waiting = [state.workloads[key[3]] for key in keys]
            for i, wl in enumerate(waiting, start=1):
                obj = objs.get(wl.spec.workload)
                if obj is None or ob.finished(obj) is not None:  # (ended: withdrawn, and told so)
                    continue
                uid = ob.meta(obj).get("uid")
                if self.told.get(uid, ("",))[0] == "Pending" and now - self.told_at.get(uid, 0) < PENDING_EVERY_S:
                    continue  # a queue that moves does not flood the API server with Events
                due.append((wl, obj, i, len(waiting)))
        if not due:
            return
        # Why each waits and when it should start (gangway explain's answer, when one was given).
        report = self.pending(state) if self.pending is not None else {}
        for wl, obj, i, n in due:
            said = report.get(wl.spec.workload)
            eta = f", estimated start {format_time(said.eta_ms)[11:16]} UTC" if said and said.eta_ms else ""
            why = f": {said.reason}" if said else (f"; last decision: {wl.superseded}" if wl.superseded else "")
            await self.tell(obj, "Normal", "Pending",
                            f"Pending: position {i} of {n} in ClusterQueue {wl.spec.cluster_queue}{eta}{why}",
                            status="False")

    async def tell(self, obj: dict, type_: str, reason: str, message: str, status: str | None) -> None:
        """A Kubernetes Event on the object and gangway's condition on it (once per change; status
        None: the Event alone, the condition left as it is)."""
        m = ob.meta(obj)
        uid = m.get("uid")
        if self.told.get(uid) == (reason, message):
            return
        self.told[uid] = (reason, message)
        self.told_at[uid] = time.monotonic()
        said = ob.condition(obj)
        if (said.get("status"), said.get("reason"), said.get("message")) == (status, reason, message[:1024]):
            return  # (told before this binder started: a restart, or another replica that held the lease)
        now = micro_time()
        stamp = now[:19] + "Z"
        name = f"{m['name']}.gangway.{hashlib.sha256(f'{uid}{reason}{message}{now}'.encode()).hexdigest()[:10]}"
        event = {"apiVersion": "v1", "kind": "Event",
                 "metadata": {"name": name, "namespace": m.get("namespace")},
                 "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": ob.kind_of(obj), "name": m["name"],
                                    "namespace": m.get("namespace"), "uid": uid},
                 "reason": reason, "message": message[:1024], "type": type_, "count": 1,
                 "firstTimestamp": stamp, "lastTimestamp": stamp, "source": {"component": "gangway"},
                 "reportingComponent": "gangway", "reportingInstance": self.identity}
        kind = ob.kind_of(obj)
        try:
            await self.kube.create(api.EVENTS, event, m.get("namespace"))
            if status is not None:
                await self._set_condition(obj, status, reason, message, stamp)
        except ApiError as exc:
            if not exc.not_found:
                log.warning("telling %s %s/%s (%s): %s", kind, m.get("namespace"), m["name"], reason, exc)

    async def _set_condition(self, obj: dict, status: str, reason: str, message: str, stamp: str) -> None:
        """gangway's condition on the object, the others kept as they are now: the patch carries the
        resourceVersion its conditions were read at, and when the object changed meanwhile (its
        controller wrote a condition: 409 Conflict) it is read again and the patch made anew."""
        kind, m = ob.kind_of(obj), ob.meta(obj)
        for attempt in range(CONDITION_TRIES):
            patch: dict = {"status": {"conditions": ob.with_condition(obj, status, reason, message, stamp)}}
            version = ob.meta(obj).get("resourceVersion")
            if version:
                patch["metadata"] = {"resourceVersion": version}
            try:
                await self.kube.patch(RESOURCES[kind], m["name"], patch, m.get("namespace"), sub="status")
                return
            except ApiError as exc:
                if not exc.conflict or attempt == CONDITION_TRIES - 1:
                    raise
            found, _ = await self.kube.list(RESOURCES[kind], m.get("namespace"), field_selector=f"metadata.name={m['name']}")
            if not found:
                return  # (deleted meanwhile: nothing to tell)
            obj = found[0]

    def _forget(self, state: State) -> None:
        """Drop progress about attempts the log has moved past, and submissions old enough to be asked again."""
        now = time.monotonic()
        self.submitting = {key: t for key, t in self.submitting.items() if now - t < SUBMIT_RETRY_S}
        for key in [k for k in self.gangs if _moved_on(state, *k, "placed", "bound", "running")]:
            del self.gangs[key]
        for key in [k for k in self.evicting if _moved_on(state, *k, "evicting")]:
            del self.evicting[key]
        for key in [k for k in self.losing if _moved_on(state, *k, "bound", "running")]:
            del self.losing[key]
        if len(self.names) > 2 * (len(state.pending) + len(state.active)) + 1024:  # (seen anew while they exist)
            waiting = {state.workloads[n].spec.labels.get(ob.UID_LABEL) for n in list(state.pending) + list(state.active)}
            self.names = {uid: found for uid, found in self.names.items() if uid in waiting}
            self.move_ignored = {uid: queue for uid, queue in self.move_ignored.items() if uid in waiting}


#: The reason of gangway's condition on an object whose running gang is short of a pod: its
#: ``lastProbeTime`` says since when, for whichever binder leads when the timeout comes.
RECOVERING = "Recovering"


def _place_lost(state: State, node: str) -> str | None:
    """Why a place on ``node`` cannot be taken again by a replacement pod, or None: the node is
    unavailable (cordoned, not ready…), or it has less room than gangway's placements there hold — its
    allocatable shrank (the device plugin reports fewer healthy GPUs) or another scheduler's pods took
    some — so the kubelet would refuse the pod."""
    if node in state.unavailable:
        return state.unavailable[node]
    known = state.nodes.get(node)
    short = sorted(r for r, free in (known.free.items() if known else ()) if free < 0)
    if not short:
        return None
    r = short[0]
    return (f"{format_resource(r, known.allocatable.get(r, 0))} left to gangway there, "
            f"{format_resource(r, known.allocatable.get(r, 0) - known.free[r])} placed: a device gone unhealthy, "
            "or taken by another scheduler's pods")


def _short_since(obj: dict) -> float | None:
    """Since when (monotonic s) ``obj``'s gang has been short of a pod, as its ``Recovering``
    condition says (written by this binder or an earlier leader); None without one."""
    said = ob.condition(obj)
    if said.get("reason") != RECOVERING:
        return None
    try:
        then = datetime.fromisoformat(str(said.get("lastProbeTime")).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return time.monotonic() - max(0.0, time.time() - then)


def _frozen(strings: dict | None) -> frozenset:
    return frozenset((strings or {}).items())


def _grace_s(pod: dict) -> float:
    """The pod's own grace period (Kubernetes' default: 30 s)."""
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(value) if isinstance(value, (int, float)) else 30.0


def _pods_of(pods: dict[tuple[str, str, str], list[dict]], obj: dict) -> list[dict]:
    """The pods of ``obj`` among ``KubernetesBinder._pods``' (by kind, namespace and name)."""
    return pods.get((ob.kind_of(obj), ob.meta(obj).get("namespace"), ob.meta(obj).get("name")), [])


def _holding(pods: list[dict]) -> list[dict]:
    """The pods that hold their node: bound and neither succeeded nor failed (terminating included)."""
    return [p for p in pods if (p.get("spec") or {}).get("nodeName")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def _moved_on(state: State, name: str, attempt: int, *phases: str) -> bool:
    wl = state.workloads.get(name)
    return wl is None or wl.attempt != attempt or wl.phase not in phases


def _name(obj: dict) -> str:
    m = ob.meta(obj)
    return f"{m.get('namespace')}/{m.get('name')}"
