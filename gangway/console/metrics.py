"""``/metrics``: the folded log in Prometheus's exposition format (``prometheus_client``).

Named after Kueue's metrics where one exists, with Kueue's labels, so dashboards built for Kueue
carry over; gangway's own figures are ``gangway_*``. Every figure is computed at scrape time from
the console's fold (a custom collector): the console keeps no state of its own, and two consoles on
one log export the same numbers.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from gangway.console.model import WAIT_BUCKETS_S, Folded, gpu_holders
from gangway.events.resources import GPU

#: Pending reasons Kueue would count as "active" (still being tried) rather than "inadmissible".
ACTIVE_PENDING = {"admissible", "behind_higher_priority", "strict_fifo", "waiting_for_victims", "reservation_held"}

#: Every metric family this module exports (the Grafana dashboard test checks against it).
METRICS = (
    "kueue_pending_workloads", "kueue_admitted_active_workloads", "kueue_reserving_active_workloads",
    "kueue_admitted_workloads_total", "kueue_quota_reserved_workloads_total", "kueue_admission_wait_time_seconds",
    "kueue_preempted_workloads_total", "kueue_evicted_workloads_total", "kueue_cluster_queue_resource_usage",
    "kueue_cluster_queue_resource_reservation", "kueue_cluster_queue_nominal_quota",
    "kueue_cluster_queue_borrowing_limit", "kueue_cluster_queue_lending_limit", "kueue_cluster_queue_status",
    "gangway_node_gpus", "gangway_node_gpus_free", "gangway_node_gpus_allocated", "gangway_node_gpus_busy",
    "gangway_log_end_offset", "gangway_console_folded_offset", "gangway_service_folded_offset",
    "gangway_service_lag_events", "gangway_decisions_total", "gangway_decisions_superseded_total",
    "gangway_team_gpu_hours_allocated_total", "gangway_team_gpu_hours_busy_total",
)


class GangwayCollector(Collector):
    """Reads the live fold through ``source()`` at every scrape.

    ``source`` returns (folded, pending report or None, log end offset or None, service → committed
    offset or None, the log end offset when those were read)."""

    def __init__(self, source):
        self.source = source

    def collect(self):
        folded, pending, end, services, services_end = self.source()
        yield from _queues(folded, pending or {})
        yield from _nodes(folded)
        yield from _health(folded, end, services, services_end)
        yield from _money(folded)


def _queues(folded: Folded, pending: dict):
    state = folded.state
    contract = state.contract
    cqs = [cq.name for cq in contract.cluster_queues] if contract else []
    cohort = {cq.name: cq.cohort or "" for cq in contract.cluster_queues} if contract else {}
    g = GaugeMetricFamily("kueue_pending_workloads", "Pending workloads per ClusterQueue and status",
                          labels=["cluster_queue", "status"])
    counts = {(cq, s): 0 for cq in cqs for s in ("active", "inadmissible")}
    for name in state.pending:
        wl = state.workloads[name]
        code = str(getattr(pending.get(name), "code", "admissible"))
        key = (wl.spec.cluster_queue, "active" if code in ACTIVE_PENDING else "inadmissible")
        counts[key] = counts.get(key, 0) + 1
    for (cq, status), n in sorted(counts.items()):
        g.add_metric([cq, status], n)
    yield g
    admitted = {cq: 0 for cq in cqs}
    reserving = {cq: 0 for cq in cqs}
    for name in state.active:
        wl = state.workloads[name]
        target = admitted if wl.phase in ("running", "bound", "evicting") else reserving
        target[wl.spec.cluster_queue] = target.get(wl.spec.cluster_queue, 0) + 1
    for metric, values, doc in (
            ("kueue_admitted_active_workloads", admitted, "Admitted workloads whose pods run (bound, running or leaving)"),
            ("kueue_reserving_active_workloads", reserving, "Workloads holding quota, not running yet (admitted or placed)")):
        g = GaugeMetricFamily(metric, doc, labels=["cluster_queue"])
        for cq, n in sorted(values.items()):
            g.add_metric([cq], n)
        yield g
    for metric, doc in (("kueue_admitted_workloads_total", "Workloads admitted, per ClusterQueue"),
                        ("kueue_quota_reserved_workloads_total", "Workloads that reserved quota, per ClusterQueue")):
        c = CounterMetricFamily(metric.removesuffix("_total"), doc, labels=["cluster_queue"])
        for cq in sorted(set(cqs) | set(folded.admitted)):
            c.add_metric([cq], folded.admitted.get(cq, 0))
        yield c
    h = HistogramMetricFamily("kueue_admission_wait_time_seconds",
                              "Cluster-time seconds from (re)queueing to admission, per ClusterQueue",
                              labels=["cluster_queue"])
    for cq in sorted(set(cqs) | set(folded.waits)):
        waits = folded.waits.get(cq, [])
        buckets = [(_le(b), sum(1 for w in waits if w <= b)) for b in WAIT_BUCKETS_S] + [("+Inf", len(waits))]
        h.add_metric([cq], buckets, sum_value=sum(waits))
    yield h
    c = CounterMetricFamily("kueue_preempted_workloads", "Workloads preempted, by the preemptor's ClusterQueue and reason",
                            labels=["preempting_cluster_queue", "reason"])
    for (cq, reason), n in sorted(folded.preempted.items()):
        c.add_metric([cq, reason], n)
    yield c
    c = CounterMetricFamily("kueue_evicted_workloads", "Workloads evicted (back in their queue), per ClusterQueue and reason",
                            labels=["cluster_queue", "reason"])
    for (cq, reason), n in sorted(folded.evicted.items()):
        c.add_metric([cq, reason], n)
    yield c
    labels = ["cohort", "cluster_queue", "flavor", "resource"]
    usage = GaugeMetricFamily("kueue_cluster_queue_resource_usage",
                              "Quota in use (admitted workloads), in the resource's units", labels=labels)
    reservation = GaugeMetricFamily("kueue_cluster_queue_resource_reservation",
                                    "Quota reserved by workloads (admitted, placed or running), in the resource's units",
                                    labels=labels)
    nominal = GaugeMetricFamily("kueue_cluster_queue_nominal_quota", "Nominal quota", labels=labels)
    borrowing = GaugeMetricFamily("kueue_cluster_queue_borrowing_limit", "Borrowing limit (absent: no limit)", labels=labels)
    lending = GaugeMetricFamily("kueue_cluster_queue_lending_limit", "Lending limit (absent: all of it)", labels=labels)
    status = GaugeMetricFamily("kueue_cluster_queue_status", "ClusterQueue status (1 for the current one)",
                               labels=["cluster_queue", "status"])
    for cq in contract.cluster_queues if contract else []:
        status.add_metric([cq.name, "active"], 1)
        for fq in cq.flavors:
            for resource, quota in sorted(fq.resources.items()):
                lv = [cohort[cq.name], cq.name, fq.flavor, resource]
                used = state.usage.get(cq.name, {}).get(f"{fq.flavor}:{resource}", 0) / 1000
                usage.add_metric(lv, used)
                reservation.add_metric(lv, used)
                nominal.add_metric(lv, quota.nominal / 1000)
                if quota.borrowing_limit is not None:
                    borrowing.add_metric(lv, quota.borrowing_limit / 1000)
                if quota.lending_limit is not None:
                    lending.add_metric(lv, quota.lending_limit / 1000)
    yield from (usage, reservation, nominal, borrowing, lending, status)


def _le(bound: float) -> str:
    return f"{bound:g}" if bound != int(bound) else f"{bound:.1f}"


def _nodes(folded: Folded):
    state = folded.state
    holders = gpu_holders(state)
    labels = ["node"]
    total = GaugeMetricFamily("gangway_node_gpus", "GPUs the node offers (allocatable)", labels=labels)
    free = GaugeMetricFamily("gangway_node_gpus_free", "GPUs free on the node (fractions count)", labels=labels)
    allocated = GaugeMetricFamily("gangway_node_gpus_allocated", "GPUs held by placed workloads", labels=labels)
    busy = GaugeMetricFamily("gangway_node_gpus_busy", "GPUs held by workloads whose pods run", labels=labels)
    for name in sorted(state.nodes):
        node = state.nodes[name]
        held = [h for gpu in holders.get(name, {}).values() for h in gpu]
        total.add_metric([name], node.allocatable.get(GPU, 0) / 1000)
        free.add_metric([name], node.free.get(GPU, 0) / 1000)
        allocated.add_metric([name], sum(h["milli"] for h in held) / 1000)
        busy.add_metric([name], sum(h["milli"] for h in held if h["phase"] in ("running", "evicting")) / 1000)
    yield from (total, free, allocated, busy)


def _health(folded: Folded, end: int | None, services: dict[str, int | None], services_end: int | None):
    g = GaugeMetricFamily("gangway_log_end_offset", "Offset the log's next event will get (its high-water mark)")
    if end is not None:
        g.add_metric([], end)
    yield g
    g = GaugeMetricFamily("gangway_console_folded_offset", "Next log offset the console will fold")
    g.add_metric([], folded.state.offset + 1)
    yield g
    folded_g = GaugeMetricFamily("gangway_service_folded_offset",
                                 "Next log offset each service will fold (its committed offset, group gangway-<service>)",
                                 labels=["service"])
    lag = GaugeMetricFamily("gangway_service_lag_events", "Events on the log a service has not folded yet",
                            labels=["service"])
    for name, offset in sorted(services.items()):
        if offset is None:
            continue
        folded_g.add_metric([name], offset)
        if services_end is not None:
            lag.add_metric([name], max(0, services_end - offset))
    yield folded_g
    yield lag
    c = CounterMetricFamily("gangway_decisions", "Decisions applied by the fold")
    c.add_metric([], folded.state.decisions)
    yield c
    c = CounterMetricFamily("gangway_decisions_superseded", "Decisions that no longer held where they landed")
    c.add_metric([], folded.state.superseded)
    yield c


def _money(folded: Folded):
    from gangway.console.model import money
    view = money(folded)
    allocated = CounterMetricFamily("gangway_team_gpu_hours_allocated", "GPU-hours held by a team's placed workloads",
                                    labels=["team"])
    busy = CounterMetricFamily("gangway_team_gpu_hours_busy", "GPU-hours a team's pods ran (what accounting bills)",
                               labels=["team"])
    for row in view["teams"]:
        allocated.add_metric([row["team"]], row["allocated_gpu_hours"])
        busy.add_metric([row["team"]], row["busy_gpu_hours"])
    yield allocated
    yield busy


def dashboard_series(dashboard: dict) -> set[str]:
    """Every gangway or Kueue series a Grafana dashboard's queries name (panels and variables)."""
    import re
    exprs = [t.get("expr", "") for panel in dashboard.get("panels", []) for t in panel.get("targets", [])]
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query", "")
        exprs.append(query.get("query", "") if isinstance(query, dict) else str(query))
    return {m for e in exprs for m in re.findall(r"\b((?:kueue|gangway)_[a-z_]+)", e)}


def declared_series(families) -> set[str]:
    """The series names a parsed exposition declares (a family with no sample yet still does)."""
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
    return {f.name + s for f in families for s in suffixes.get(f.type, [""])}
