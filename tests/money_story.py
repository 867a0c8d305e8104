"""A small night with money in it, run in memory: shared by the money tests."""

from __future__ import annotations

import msgspec

from gangway.events import catalogue as ev
from gangway.events.contract import (
    Billing, ClusterQueue, Contract, FlavorQuotas, IdleRule, LocalQueue, Preemption, Price, PriorityClass, Quota,
    ResourceFlavor,
)
from gangway.events.resources import GPU
from gangway.sim import Simulation

HOUR = 3_600_000
#: 2026-11-30T21:00:00Z: the night crosses into December, so November's invoices are cut.
START_MS = 1_796_072_400_000
PRICE = 2_100_000  # 2.10 EUR per GPU-hour


def contract(price: int = PRICE, idle_cost: str = "weighted", credit: bool = True) -> Contract:
    def cq(name: str, gpus: int) -> ClusterQueue:
        return ClusterQueue(name=name, cohort="org", flavors=[FlavorQuotas(flavor="h100", resources={
            GPU: Quota(nominal=gpus * 1000), "cpu": Quota(nominal=gpus * 12_000)})],
            preemption=Preemption(reclaim_within_cohort="Any", within_cluster_queue="LowerPriority"))
    return Contract(
        flavors=[ResourceFlavor(name="h100")],
        cluster_queues=[cq("batch", 8), cq("research", 8)],
        local_queues=[LocalQueue(namespace=t, name="default", cluster_queue=t) for t in ("batch", "research")],
        priority_classes=[PriorityClass(name="research", value=100), PriorityClass(name="batch", value=10)],
        prices=[Price(flavor="h100", resource=GPU, per_hour_micros=price),
                Price(flavor="h100", resource="cpu", per_hour_micros=10_000)],
        currency="EUR",
        billing=Billing(period="monthly", settle_ms=600_000, idle_cost=idle_cost, credit_preemption_waste=credit),
        idle_rule=IdleRule(sm_active_below=100, for_ms=1_800_000, preempt_first=True),
    )


def job(team: str, name: str, gpus_per_pod: int, pods: int, runtime_s: int, profile: dict[str, str],
        min_count: int | None = None, priority: int = 10) -> ev.WorkloadQueued:
    pod_set = ev.PodSet(name="main", count=pods, resources={GPU: gpus_per_pod * 1000, "cpu": 12_000 * gpus_per_pod},
                        min_count=min_count)
    return ev.WorkloadQueued(workload=f"{team}/{name}", namespace=team, queue="default", cluster_queue=team,
                             priority_class=None, priority=priority, kind="Job", pod_sets=[pod_set],
                             runtime_ms=runtime_s * 1000, labels=profile)


def night(price_change_at_ms: int | None = None, new_price: int = 4_200_000, **kw) -> Simulation:
    """research borrows the whole cluster with an idle 8-GPU notebook and a busy 8-GPU training;
    batch comes back for its quota an hour later and evicts the idle borrower first."""
    sim = Simulation(start_ms=START_MS)
    sim.configure(contract(**kw))
    sim.add_nodes([ev.NodeObserved(node=f"n{i}", allocatable={GPU: 8000, "cpu": 96_000}, islands=[8])
                   for i in range(3)])
    sim.submit(job("research", "train", 8, 1, 4 * 3600, {
        "gangway.io/sm-active": "0.8", "gangway.io/tokens-per-second": "1000", "gangway.io/checkpoint-seconds": "900"},
        priority=100))
    sim.submit(job("research", "notebook", 8, 1, 4 * 3600, {"gangway.io/sm-active": "0.04"}, priority=100))
    sim.run(until_ms=START_MS + HOUR)
    if price_change_at_ms is not None:
        sim.run(until_ms=price_change_at_ms)
        sim.configure(msgspec.structs.replace(contract(**kw), prices=[
            Price(flavor="h100", resource=GPU, per_hour_micros=new_price),
            Price(flavor="h100", resource="cpu", per_hour_micros=10_000)]))
    sim.submit(job("batch", "sweep", 2, 4, 3600, {"gangway.io/sm-active": "0.5", "gangway.io/tokens-per-second": "500"},
                   min_count=2))
    sim.run()
    return sim


def serve_exposition(body: dict):
    """A small HTTP server on a free loopback port serving ``body["text"]`` as a Prometheus text
    exposition (change the text between requests; bytes are served as they are); call
    ``shutdown()`` and ``server_close()``."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            data = body["text"] if isinstance(body["text"], bytes) else body["text"].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
