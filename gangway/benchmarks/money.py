"""`gangway bench money`: ledger throughput and invoice generation for a month of workloads.

The log: the Kueue ``baseline`` scenario's 15,000 workloads (from the reference data; a
synthetic mix of the same size and shape when the data is absent), their arrivals spread over
one billing month (November 2026) on a cluster large enough that nobody waits, each workload
queued, admitted, placed, bound, running and finished (six events each), with a price per CPU
and per GPU in the contract and a GPU sample per workload. Measured:

- the ledger: every event folded and its charges written to SQL in batches of 1,000 events,
  the running charges and the tracking row in the same transaction (the accounting shell's way),
  on SQLite and — when ``GANGWAY_PG_URL`` or the local server answers — PostgreSQL;
- invoices: the month cut from the books (every team's invoice), and the whole log derived again
  from scratch the auditor's way (``books_of``).
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from gangway.events import catalogue as ev
from gangway.events.contract import (
    Billing, ClusterQueue, Contract, FlavorQuotas, LocalQueue, Price, Quota, ResourceFlavor,
)
from gangway.events.fold import apply
from gangway.events.resources import GPU
from gangway.events.state import State
from gangway.services.accounting.billing import Books, books_of, invoices, period_bounds
from gangway.services.accounting.ledger import Ledger, metadata
from gangway.services.accounting.policy import open_allocations, usage_effects

PERIOD = "2026-11"
NODE_GPUS = 8


def _specs(data_dir: str | None, workloads: int) -> tuple[list[tuple[str, str, int, int, int]], str]:
    """(team, name, pods, GPUs per pod, runtime ms) per workload, and where they came from."""
    from gangway.benchmarks import kueue_scenarios
    from gangway.benchmarks.results import ReferenceDataMissing, reference_data
    try:
        baseline = reference_data(data_dir, "kueue-perf/baseline/generator.yaml") / "kueue-perf" / "baseline"
        sc = kueue_scenarios.load(baseline / "generator.yaml")
        out = [(s.namespace, s.name, s.pods, 1 + (s.per_pod_milli // 1000) % NODE_GPUS, s.runtime_ms * 60)
               for s in sc.specs[:workloads]]
        return out, "Kueue baseline scenario (CPU requests mapped to 1-8 GPUs, runtimes × 60)"
    except ReferenceDataMissing:  # the reference data is optional here
        rng = random.Random(7)
        return ([(f"team-{rng.randrange(15)}", f"w-{i}", 1, rng.choice((1, 2, 4, 8)), rng.randrange(60, 7200) * 1000)
                 for i in range(workloads)], "synthetic mix (reference data not found)")


def month_log(data_dir: str | None = None, workloads: int = 15_000) -> tuple[list[ev.Envelope], str]:
    specs, source = _specs(data_dir, workloads)
    teams = sorted({t for t, *_ in specs})
    start, end = period_bounds(PERIOD)
    contract = Contract(
        flavors=[ResourceFlavor(name="default")],
        cluster_queues=[ClusterQueue(name=t, flavors=[FlavorQuotas(flavor="default", resources={
            GPU: Quota(nominal=10**9), "cpu": Quota(nominal=10**9)})]) for t in teams],
        local_queues=[LocalQueue(namespace=t, name="main", cluster_queue=t) for t in teams],
        prices=[Price(flavor="default", resource=GPU, per_hour_micros=2_100_000),
                Price(flavor="default", resource="cpu", per_hour_micros=31_000)],
        currency="EUR", billing=Billing(period="monthly", settle_ms=0),
    )
    envs: list[ev.Envelope] = []
    state = State()

    def add(t: int, data) -> None:
        env = ev.Envelope(id=f"e{len(envs)}", source="bench", time_ms=t, data=data, offset=len(envs))
        apply(state, env)
        envs.append(env)

    add(start, ev.ConfigApplied(contract=contract, digest="bench"))
    longest = max(pods * gpus for _, _, pods, gpus, _ in specs)
    concurrency = 64
    nodes = max(1, concurrency * longest // NODE_GPUS + 1)
    for n in range(nodes):
        add(start, ev.NodeObserved(node=f"n{n}", allocatable={GPU: NODE_GPUS * 1000, "cpu": 96_000}))
    step = (end - start - 24 * 3_600_000) // len(specs)
    running: list[tuple[int, str]] = []
    for i, (team, name, pods, gpus, runtime) in enumerate(specs):
        t = start + 1 + i * step
        running.sort()
        while running and running[0][0] <= t:
            finish, w = running.pop(0)
            add(finish, ev.WorkloadFinished(workload=w, attempt=0))
        wl = f"{team}/{name}"
        pod_set = ev.PodSet(name="main", count=pods, resources={GPU: gpus * 1000, "cpu": gpus * 4000})
        add(t, ev.WorkloadQueued(workload=wl, namespace=team, queue="main", cluster_queue=team, priority_class=None,
                                 priority=0, kind="Job", pod_sets=[pod_set], runtime_ms=runtime))
        add(t, ev.WorkloadAdmitted(workload=wl, cluster_queue=team, usage={GPU: pods * gpus * 1000,
                                   "cpu": pods * gpus * 4000}, borrowed={}, based_on=len(envs) - 1))
        assignments, need = [], pods
        for node in sorted(state.nodes.values(), key=lambda n: -n.free.get(GPU, 0)):
            fit = min(need, node.free.get(GPU, 0) // (gpus * 1000))
            if fit:
                assignments.append(ev.PodAssignment(pod_set="main", node=node.name, count=fit))
                need -= fit
            if not need:
                break
        if need:
            raise RuntimeError("the benchmark cluster is too small")
        add(t, ev.PlacementDecided(workload=wl, assignments=assignments, based_on=len(envs) - 1))
        add(t, ev.WorkloadBound(workload=wl, attempt=0))
        add(t, ev.WorkloadRunning(workload=wl, attempt=0))
        node, gpu_list = assignments[0].node, state.workloads[wl].placement_gpus[0]
        add(t + runtime // 2, ev.GpuTelemetry(node=node, samples=[ev.GpuSample(gpu=g, sm_active=600) for g in gpu_list],
                                              observed_ms=t + runtime // 2))
        running.append((t + runtime, wl))
    for finish, w in sorted(running):
        add(finish, ev.WorkloadFinished(workload=w, attempt=0))
    add(end + 1, ev.ClockTicked(reason="the month is over"))
    return envs, source


def fold_into_ledger(envs: list[ev.Envelope], url: str, batch: int = 1000) -> tuple[float, float]:
    """Seconds (wall, and this process's CPU) to fold the log and write it to the ledger the
    accounting shell's way."""
    ledger = Ledger(url)
    books = Books(log_id="bench")
    state = State()
    started, cpu = time.perf_counter(), time.process_time()
    flushed = 0
    for i in range(0, len(envs), batch):
        for env in envs[i:i + batch]:
            books.charges.extend(usage_effects(state, env))
            apply(state, env)
            books.after(state, env)
        ledger.record("bench", state.offset, books.charges[flushed:], open_allocations(state, state.time_ms), state.last_id)
        flushed = len(books.charges)
    elapsed = time.perf_counter() - started, time.process_time() - cpu
    ledger.close()
    return elapsed


def _postgres_url() -> str | None:
    url = os.environ.get("GANGWAY_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    try:
        from sqlalchemy import create_engine, text
        engine = create_engine(url, connect_args={"connect_timeout": 2})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        metadata.drop_all(engine)
        engine.dispose()
        return url
    except Exception:  # noqa: BLE001 - reported as "not available"
        return None


def bench_money(data_dir: str | None = None, workloads: int = 15_000, runs: int = 3) -> dict:
    envs, source = month_log(data_dir, workloads)
    result: dict = {"workloads": workloads, "events": len(envs), "source": source, "period": PERIOD}
    sqlite_s = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            sqlite_s.append(fold_into_ledger(envs, f"sqlite:///{Path(tmp) / 'ledger.db'}"))
    result["ledger_sqlite_events_per_s"] = round(len(envs) / statistics.median(w for w, _ in sqlite_s))
    result["ledger_sqlite_events_per_cpu_s"] = round(len(envs) / statistics.median(c for _, c in sqlite_s))
    pg = _postgres_url()
    if pg is None:
        result["ledger_postgresql_events_per_s"] = "PostgreSQL not available (set GANGWAY_PG_URL)"
    else:
        pg_s = []
        for _ in range(runs):
            pg_s.append(fold_into_ledger(envs, pg))
            from sqlalchemy import create_engine
            engine = create_engine(pg)
            metadata.drop_all(engine)
            engine.dispose()
        result["ledger_postgresql_events_per_s"] = round(len(envs) / statistics.median(w for w, _ in pg_s))
        result["ledger_postgresql_events_per_cpu_s"] = round(len(envs) / statistics.median(c for _, c in pg_s))
    books = books_of(envs, log_id="bench")
    cut, derive = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        issued = invoices(books.charges, books.changes, books.state.contract, PERIOD, "bench", books.state.offset)
        cut.append((time.perf_counter() - t, time.process_time() - c))
        t, c = time.perf_counter(), time.process_time()
        again = books_of(envs, log_id="bench")
        derive.append((time.perf_counter() - t, time.process_time() - c))
    assert [i.invoice_id for i in again.issued] == [i.invoice_id for i in issued]
    result["invoices"] = len(issued)
    result["invoice_lines"] = sum(len(i.lines) for i in issued)
    result["invoice_cut_s"] = round(statistics.median(w for w, _ in cut), 3)
    result["invoice_cut_cpu_s"] = round(statistics.median(c for _, c in cut), 3)
    result["derive_month_from_log_s"] = round(statistics.median(w for w, _ in derive), 3)
    result["derive_month_from_log_cpu_s"] = round(statistics.median(c for _, c in derive), 3)
    result["billed_total_eur"] = f"{sum(i.billed_cost_micros for i in issued) / 1e6:.2f}"
    return result


def table(result: dict) -> str:
    rows = [
        ("log", f"{result['events']:,} events, {result['workloads']:,} workloads over {result['period']} ({result['source']})"),
        ("ledger on SQLite (fold + SQL, batches of 1,000)", f"{result['ledger_sqlite_events_per_s']:,} events/s "
                                                            f"({result['ledger_sqlite_events_per_cpu_s']:,} per CPU second)"),
        ("ledger on PostgreSQL", f"{result['ledger_postgresql_events_per_s']:,} events/s "
                                 f"({result['ledger_postgresql_events_per_cpu_s']:,} per CPU second of this process)"
         if isinstance(result["ledger_postgresql_events_per_s"], int) else result["ledger_postgresql_events_per_s"]),
        ("invoices for the month (cut from the books)", f"{result['invoice_cut_s']} s ({result['invoice_cut_cpu_s']} CPU s): "
                                                        f"{result['invoices']} invoices, {result['invoice_lines']:,} lines, "
                                                        f"{result['billed_total_eur']} EUR"),
        ("the month derived again from the log (auditor)",
         f"{result['derive_month_from_log_s']} s ({result['derive_month_from_log_cpu_s']} CPU s)"),
    ]
    return "\n".join(f"{a:<50} {b}" for a, b in rows)
