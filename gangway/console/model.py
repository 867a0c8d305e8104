"""The console's read model: the log folded like any reader does, plus what the pages show.

``Folded.add`` takes events in log order (the same ``apply`` as every service), and keeps the few
running counts the metrics need (admissions, preemptions, evictions, admission waits) and the
money intervals. The view functions turn it into JSON-ready dictionaries: the GPU map, the queues,
a job's story, the decision stream. No I/O, no clock: the server feeds it, the tests feed it too.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from gangway.console.money import Usage, money_view
from gangway.events import catalogue as ev
from gangway.events.fold import apply
from gangway.events.reasons import C, sentence
from gangway.events.gpus import WHOLE, indexes_per_pod, island_ranges, per_pod
from gangway.events.quota import split_fr
from gangway.events.resources import GPU, total_request
from gangway.events.state import EVICT_FROM, HOLDS_NODES, NodeState, State
from gangway.read.describe import declares_islands, describe

BLOCK_LABEL = "cloud.provider.com/topology-block"
RACK_LABEL = "cloud.provider.com/topology-rack"
#: GPUs a node has (NVIDIA's GPU feature discovery): more than it offers means some are unhealthy.
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
#: Colour-blind-friendly team colours (Okabe-Ito, then Tableau), given to teams in name order.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#4E79A7",
           "#59A14F", "#B07AA1", "#9C755F", "#EDC948"]
#: Kueue's admission wait histogram buckets: 1 s doubling 14 times.
WAIT_BUCKETS_S = [float(2 ** i) for i in range(14)]
#: Pending workloads the queue page lists (the heads of every queue first).
PENDING_SHOWN = 300


def team_of(name: str) -> str:
    return name.split("/", 1)[0] if "/" in name else ""


#: Kueue's preemption reason for each of gangway's preemption codes (``kueue_preempted_workloads_total``).
KUEUE_PREEMPTION_REASONS = {
    C.WITHIN_QUEUE_LOWER_PRIORITY: "InClusterQueue",
    C.WITHIN_QUEUE_NEWER_EQUAL_PRIORITY: "InClusterQueue",
    C.RECLAIM_WITHIN_COHORT: "InCohortReclamation",
    C.BORROW_WITHIN_COHORT: "InCohortReclaimWhileBorrowing",
    C.FAIR_SHARING: "InCohortFairSharing",
    C.DEFRAGMENTATION: "Defragmentation",
}
#: Kueue's eviction reason (``kueue_evicted_workloads_total``) of an order that is not a preemption:
#: a queue stopped with HoldAndDrain, by the kind of queue it names (``preemption.drained``).
KUEUE_STOPPED_REASONS = {"ClusterQueue": "ClusterQueueStopped", "LocalQueue": "LocalQueueStopped"}


def preemption_reason(eviction: ev.EvictionOrdered, same_queue: bool) -> str:
    """Kueue's preemption reason for an eviction, read from its reason code (an eviction recorded
    before codes existed says only whether it was within the queue)."""
    if eviction.reason_code is None:
        return "InClusterQueue" if same_queue else "InCohortReclamation"
    return KUEUE_PREEMPTION_REASONS[eviction.reason_code]


@dataclass
class Folded:
    state: State = field(default_factory=State)
    envs: list[ev.Envelope] = field(default_factory=list)
    #: Nodes that left the cluster (kept to show their GPUs as unavailable).
    removed: dict[str, NodeState] = field(default_factory=dict)
    admitted: Counter = field(default_factory=Counter)
    #: (preempting ClusterQueue, reason) → count.
    preempted: Counter = field(default_factory=Counter)
    #: (ClusterQueue, reason) → count.
    evicted: Counter = field(default_factory=Counter)
    #: ClusterQueue → admission waits in seconds (cluster time, queued or requeued → admitted).
    waits: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    usage: Usage = field(default_factory=Usage)

    def add(self, env: ev.Envelope) -> None:
        state, data = self.state, env.data
        touched = [n for n in (getattr(data, "workload", None),) if n]
        before = {n: state.workloads[n].phase for n in touched if n in state.workloads}
        if isinstance(data, ev.NodeRemoved):
            node = state.nodes.get(data.node)
            if node is not None:
                self.removed[data.node] = node
                touched = [n for n in state.active]
                before = {n: state.workloads[n].phase for n in touched}
        elif isinstance(data, ev.NodeObserved):
            self.removed.pop(data.node, None)
        self.usage.before(state, env)
        apply(state, env)
        self.envs.append(env)
        self.usage.after(state, env, touched)
        wl = state.workloads.get(touched[0]) if touched else None
        if isinstance(data, ev.WorkloadAdmitted) and wl is not None and wl.admission_id == env.id:
            self.admitted[wl.spec.cluster_queue] += 1
            since = wl.queued_ms if wl.requeued_ms is None else wl.requeued_ms  # (its place may be older)
            self.waits[wl.spec.cluster_queue].append(max(0, (wl.admitted_ms or env.time_ms) - since) / 1000)
        elif isinstance(data, ev.EvictionOrdered) and wl is not None and wl.eviction_id == env.id \
                and data.reason_code != C.QUEUE_DRAINED:
            preemptor = state.workloads.get(data.preemptor)
            pq = preemptor.spec.cluster_queue if preemptor else ""
            self.preempted[(pq, preemption_reason(data, pq == wl.spec.cluster_queue))] += 1
        for name in touched:
            now = state.workloads.get(name)
            if before.get(name) in EVICT_FROM and now is not None and now.phase == "pending":
                stopped = KUEUE_STOPPED_REASONS.get(now.evictions[-1][0].partition("/")[0]) if now.evictions else None
                reason = "NodeFailures" if isinstance(data, ev.NodeRemoved) else (
                    stopped or ("Preempted" if now.evictions else "Evicted"))
                self.evicted[(now.spec.cluster_queue, reason)] += 1

    # --- views -------------------------------------------------------------------------------

    def teams(self) -> dict[str, str]:
        """Team (namespace) → colour, stable for one contract and set of workloads."""
        names = {wl.spec.namespace for wl in self.state.workloads.values()}
        if self.state.contract is not None:
            names |= {lq.namespace for lq in self.state.contract.local_queues}
        return {team: PALETTE[i % len(PALETTE)] for i, team in enumerate(sorted(names))}

    def summary(self) -> dict:
        s = self.state
        return {"offset": s.offset, "time_ms": s.time_ms, "events": len(self.envs), "decisions": s.decisions,
                "superseded": s.superseded, "pending": len(s.pending), "active": len(s.active),
                "nodes": len(s.nodes), "contract": s.contract_digest[:12]}


def gpu_holders(state: State) -> dict[str, dict[int, list[dict]]]:
    """Node → GPU index → the workloads holding (part of) it, with how much (milli) and their phase."""
    out: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for name in state.active:
        wl = state.workloads[name]
        if wl.phase not in HOLDS_NODES or wl.placement is None:
            continue
        per_set = {ps.name: ps.resources.get(GPU, 0) for ps in wl.spec.pod_sets}
        for a, indexes in zip(wl.placement.assignments, wl.placement_gpus):
            milli = per_set.get(a.pod_set, 0)
            whole, frac = per_pod(milli)
            step = max(1, indexes_per_pod(milli))
            for pod, start in enumerate(range(0, len(indexes), step)):
                chunk = indexes[start:start + step]
                for k, i in enumerate(chunk):
                    share = WHOLE if k < whole else frac
                    out[a.node][i].append({"workload": name, "team": wl.spec.namespace, "milli": share,
                                           "phase": wl.phase, "pod": f"{a.pod_set}-{pod}"})
    return out


def gpu_map(folded: Folded) -> dict:
    """Blocks → racks → nodes → GPUs, with NVLink islands and who holds each GPU."""
    state = folded.state
    holders = gpu_holders(state)
    blocks: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    nodes = [(n, False) for n in state.nodes.values()] + [(n, True) for n in folded.removed.values()]
    for node, removed in sorted(nodes, key=lambda x: x[0].name):
        block = node.labels.get(BLOCK_LABEL, "(no block)")
        rack = node.labels.get(RACK_LABEL, "(no rack)")
        blocks[block][rack].append(_node_view(node, holders.get(node.name, {}), removed))
    return {"blocks": [{"name": b, "racks": [{"name": r, "nodes": ns} for r, ns in sorted(racks.items())]}
                       for b, racks in sorted(blocks.items())],
            "teams": folded.teams()}


def _node_view(node: NodeState, holders: dict[int, list[dict]], removed: bool) -> dict:
    offered = len(node.gpus)
    try:
        present = max(offered, int(node.labels.get(GPU_COUNT_LABEL, offered)))
    except ValueError:
        present = offered
    gpus = []
    for i in range(present):
        if removed or i >= offered:
            gpus.append({"i": i, "status": "unavailable", "free": 0, "holders": [],
                         "why": "node removed from the cluster" if removed else "not allocatable (unhealthy)"})
            continue
        held = holders.get(i, [])
        free = node.gpus[i]
        status = "idle" if not held else ("shared" if free > 0 or len(held) > 1 else "held")
        gpus.append({"i": i, "status": status, "free": free, "holders": held})
    islands = [[r.start, r.stop] for r in island_ranges(node.islands, offered)] if node.islands else []
    return {"name": node.name, "gpus": gpus, "islands": islands, "removed": removed,
            "gpus_free": sum(1 for g in gpus if g["status"] == "idle"), "gpus_total": present}


def queues_view(folded: Folded, pending: dict | None = None, forecast: bool = True) -> dict:
    """Per ClusterQueue and cohort, per flavor and resource: guaranteed, used, borrowed, lent; and
    the pending workloads in queue order with reason, position and estimated start."""
    state = folded.state
    if state.contract is None:
        return {"cluster_queues": [], "cohorts": [], "pending": []}
    rows = []
    for cq in state.contract.cluster_queues:
        used = state.usage.get(cq.name, {})
        for fq in cq.flavors:
            for resource, quota in sorted(fq.resources.items()):
                key = f"{fq.flavor}:{resource}"
                u = used.get(key, 0)
                rows.append({"cluster_queue": cq.name, "cohort": cq.cohort or "", "flavor": fq.flavor,
                             "resource": resource, "nominal": quota.nominal, "used": u,
                             "borrowed": max(0, u - quota.nominal), "borrowing_limit": quota.borrowing_limit,
                             "lending_limit": quota.lending_limit, "lent": 0,
                             "lendable": max(0, min(quota.nominal - min(u, quota.nominal),
                                                    quota.nominal if quota.lending_limit is None else quota.lending_limit))})
    cohorts = _lend(rows, state)
    waiting = []
    for name, p in (pending or {}).items():
        wl = state.workloads.get(name)
        if wl is None:
            continue
        waiting.append({"workload": name, "team": wl.spec.namespace, "cluster_queue": wl.spec.cluster_queue,
                        "local_queue": f"{wl.spec.namespace}/{wl.spec.queue}", "priority": wl.spec.priority,
                        "gpus": total_request(wl.spec.pod_sets).get(GPU, 0) / 1000,
                        "code": str(getattr(p, "code", "")), "reason": getattr(p, "reason", ""),
                        "lq_position": getattr(p, "lq_position", 0), "cq_position": getattr(p, "cq_position", 0),
                        "eta_ms": getattr(p, "eta_ms", None), "queued_ms": wl.queued_ms,
                        # (explain's words when it has no start: never, and what would change that)
                        "start": _start(p, wl, state.time_ms, forecast)})
    waiting.sort(key=lambda w: (w["cq_position"], w["cluster_queue"]))
    # the heads of every queue first; a page lists at most PENDING_SHOWN of them
    shown = sorted(waiting[:PENDING_SHOWN], key=lambda w: (w["cluster_queue"], w["cq_position"]))
    return {"cluster_queues": rows, "cohorts": cohorts, "pending": shown, "pending_total": len(waiting)}


def _lend(rows: list[dict], state: State) -> list[dict]:
    """What the members of each cohort borrow is lent by the others' unused quota (and the cohort's
    own quota first): each lender is credited in proportion to what it could lend."""
    own: dict[tuple[str, str], int] = defaultdict(int)
    for cohort in state.contract.cohorts:
        for fq in cohort.flavors:
            for resource, quota in fq.resources.items():
                own[(cohort.name, f"{fq.flavor}:{resource}")] += quota.nominal
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        if row["cohort"]:
            groups[(row["cohort"], f"{row['flavor']}:{row['resource']}")].append(row)
    out = []
    for (cohort, fr), members in sorted(groups.items()):
        borrowed = sum(r["borrowed"] for r in members)
        to_lend = max(0, borrowed - own.get((cohort, fr), 0))
        lendable = sum(r["lendable"] for r in members if not r["borrowed"])
        for r in members:
            if lendable and not r["borrowed"]:
                r["lent"] = min(r["lendable"], to_lend * r["lendable"] // lendable)
        flavor, resource = split_fr(fr)
        out.append({"cohort": cohort, "flavor": flavor, "resource": resource, "members": [r["cluster_queue"] for r in members],
                    "nominal": sum(r["nominal"] for r in members) + own.get((cohort, fr), 0),
                    "used": sum(r["used"] for r in members), "borrowed": borrowed,
                    "usage_above_guaranteed": state.cohort_usage.get(cohort, {}).get(fr, 0)})
    return out


def stream_item(env: ev.Envelope, islands: bool = True) -> dict:
    """One event of the decision stream, with what the filters look at (``islands``: does some node
    of the cluster declare NVLink islands, for a placement's "largest free island")."""
    name = getattr(env.data, "workload", None) or getattr(env.data, "job_id", None) or ""
    item = {"offset": env.offset, "time_ms": env.time_ms, "kind": type(env.data).__name__,
            "team": team_of(name), "job": name, "text": describe(env, islands=islands)}
    if isinstance(env.data, ev.EvictionOrdered):
        item["preemptor"] = env.data.preemptor
    return item


def stream(folded: Folded, team: str = "", kind: str = "", job: str = "", limit: int = 200) -> list[dict]:
    """The latest events, newest first, filtered by team, kind and job (substring)."""
    out = []
    islands = declares_islands(folded.state.nodes.values())
    for env in reversed(folded.envs):
        item = stream_item(env, islands)
        if team and item["team"] != team and team_of(item.get("preemptor", "")) != team:
            continue
        if kind and item["kind"] != kind:
            continue
        if job and job not in item["job"] and job not in item.get("preemptor", ""):
            continue
        out.append(item)
        if len(out) >= limit:
            break
    return out


def job_view(folded: Folded, name: str, explain_lines: list[str]) -> dict | None:
    """One job's story as a timeline, what ``gangway explain`` says, and its pods on the map."""
    state = folded.state
    if "/" not in name:
        name = next((w for w in state.workloads if w.rsplit("/", 1)[-1] == name), name)
    wl = state.workloads.get(name)
    if wl is None:
        return None
    steps = []
    islands = declares_islands(state.nodes.values())
    for env in folded.envs:
        d = env.data
        if getattr(d, "workload", None) != name and not (isinstance(d, ev.EvictionOrdered) and d.preemptor == name):
            continue
        step = {"offset": env.offset, "time_ms": env.time_ms, "kind": type(d).__name__,
                "text": describe(env, islands=islands)}
        if isinstance(d, ev.EvictionOrdered) and d.workload == name:
            step.update(step="preempted", preemptor=d.preemptor, rule=sentence(d), grace_s=d.grace_ms / 1000,
                        work_lost_s=d.work_lost_ms / 1000)
        elif isinstance(d, ev.EvictionOrdered):
            step.update(step="made room", victim=d.workload, rule=sentence(d))
        else:
            step["step"] = {"WorkloadQueued": "queued", "WorkloadAdmitted": "admitted", "PlacementDecided": "placed",
                            "WorkloadBound": "bound", "WorkloadRunning": "running", "WorkloadFinished": "finished",
                            "WorkloadEvicted": "evicted", "CheckpointSaved": "checkpoint",
                            "ClusterReconciled": "reconciled"}.get(step["kind"], step["kind"])
        steps.append(step)
    pods = [{"node": node, "gpus": sorted(gpus)} for node, gpus in
            sorted(_pods_of(state, name).items())]
    return {"workload": name, "team": wl.spec.namespace, "phase": wl.phase, "cluster_queue": wl.spec.cluster_queue,
            "priority": wl.spec.priority, "gpus": total_request(wl.spec.pod_sets).get(GPU, 0) / 1000,
            "attempt": wl.attempt, "timeline": steps, "explain": explain_lines, "pods": pods,
            "evictions": [{"preemptor": p, "rule": r, "work_lost_s": lost / 1000} for p, r, lost in wl.evictions],
            "colour": folded.teams().get(wl.spec.namespace, "#888")}


def _pods_of(state: State, name: str) -> dict[str, set[int]]:
    out: dict[str, set[int]] = defaultdict(set)
    for node, by_gpu in gpu_holders(state).items():
        for i, held in by_gpu.items():
            if any(h["workload"] == name for h in held):
                out[node].add(i)
    return out


def money(folded: Folded) -> dict:
    view = money_view(folded.usage, folded.state)
    colours = folded.teams()
    for row in view["teams"]:
        row["colour"] = colours.get(row["team"], "#888")
    return view


def _start(report, wl, now_ms: int, forecast: bool) -> str:
    """The estimated start as ``gangway explain`` says it; without a forecast (too many pending),
    said so, unless the workload can never start as things stand."""
    from gangway.read.explain import NEVER_STARTS, start_words
    if not forecast and report.code not in NEVER_STARTS:
        return "not forecast (too many pending)"
    return start_words(report, wl, now_ms)
