"""The console's read model, its JSON API and /metrics, on logs made in memory (no broker, no browser).

The scene is the preemption incident of ``test_preemption_rules``: 64 GPUs in one cohort, batch
borrowing 40 GPUs with ten 4-GPU sweeps, then serving's 16-GPU ``serve-1`` reclaims 8 of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from builders import LogBuilder, cluster_queue, contract, node, workload
from gangway.console import model
from gangway.console.app import create_app
from gangway.console.metrics import METRICS, dashboard_series, declared_series
from gangway.events import catalogue as ev
from gangway.events.resources import GPU, total_request
from gangway.events.state import HOLDS_NODES
from gangway.read import rules
from gangway.read.reports import holding_intervals
from gangway.services.accounting.policy import usage_effects
from gangway.events.fold import apply
from gangway.events.state import State
from test_preemption_rules import incident, wl

DASHBOARD = Path(__file__).parent.parent / "infra" / "grafana" / "gangway.json"


@pytest.fixture(scope="module")
def reclaimed():
    """The incident after serve-1 reclaimed its guarantee (two sweeps preempted, back in their queue)."""
    sim = incident()
    sim.submit(wl("serve-1", "serving", 8, priority=1000, pods=2))
    sim.run(until_ms=sim.now_ms + 120_000)
    sim.submit(wl("big-wait", "research", 8, pods=6))  # 48 GPUs: cannot fit, waits with a reason
    sim.run(until_ms=sim.now_ms + 1_000)
    assert sim.state.workloads["serve-1"].phase == "running"
    return sim


@pytest.fixture(scope="module")
def client(reclaimed):
    with TestClient(create_app("unused:0", log=list(reclaimed.log))) as c:
        yield c


def folded_of(envs) -> model.Folded:
    folded = model.Folded()
    for env in envs:
        folded.add(env)
    return folded


def cells(view: dict):
    for block in view["blocks"]:
        for rack in block["racks"]:
            for n in rack["nodes"]:
                for g in n["gpus"]:
                    yield n["name"], g


def test_the_map_shows_each_gpu_held_by_its_workload_and_idle_ones_apart(reclaimed):
    view = model.gpu_map(folded_of(reclaimed.log))
    state = reclaimed.state
    held_by: dict[str, int] = {}
    for _node, g in cells(view):
        for h in g["holders"]:
            held_by[h["workload"]] = held_by.get(h["workload"], 0) + h["milli"]
    expected = {n: total_request(w.spec.pod_sets)[GPU] for n, w in state.workloads.items() if w.phase in HOLDS_NODES}
    assert held_by == expected and held_by["serve-1"] == 16_000
    idle = sum(1 for _n, g in cells(view) if g["status"] == "idle")
    assert idle == sum(n.free[GPU] // 1000 for n in state.nodes.values())
    assert {g["status"] for _n, g in cells(view)} <= {"idle", "held"}


def test_fractions_islands_and_unavailable_gpus_are_drawn_as_such():
    q = cluster_queue("q").gpus(16)
    log = LogBuilder().configure(contract(q)).nodes(node("n1").gpus(8), node("n2").gpus(8))
    log.running(workload("half").queue("q").pod_set("main", count=1, gpus=0.5))
    folded = folded_of(log.envelopes)
    shared = [g for _n, g in cells(model.gpu_map(folded)) if g["holders"]]
    assert [(g["status"], g["holders"][0]["milli"], g["free"]) for g in shared] == [("shared", 500, 500)]
    # a node offering 7 of its 8 GPUs (one unhealthy), then a node that leaves the cluster
    labels = {model.GPU_COUNT_LABEL: "8", model.RACK_LABEL: "r1", model.BLOCK_LABEL: "b1"}
    log.add(ev.NodeObserved(node="n3", allocatable={GPU: 7000}, labels=labels, islands=[4, 3]))
    log.add(ev.NodeRemoved(node="n2"))
    view = model.gpu_map(folded_of(log.envelopes))
    nodes = {n["name"]: n for b in view["blocks"] for r in b["racks"] for n in r["nodes"]}
    n3 = nodes["n3"]
    assert n3["islands"] == [[0, 4], [4, 7]]
    assert [g["status"] for g in n3["gpus"]] == ["idle"] * 7 + ["unavailable"]
    n2 = nodes["n2"]
    assert n2["removed"] and {g["status"] for g in n2["gpus"]} == {"unavailable"}


def test_queues_show_guaranteed_used_borrowed_lent_and_pending_reasons(client, reclaimed):
    view = client.get("/api/view").json()
    rows = {r["cluster_queue"]: r for r in view["queues"]["cluster_queues"] if r["resource"] == GPU}
    usage = {cq: reclaimed.state.usage.get(cq, {}).get(f"default:{GPU}", 0) for cq in rows}
    assert {cq: r["used"] for cq, r in rows.items()} == usage
    assert rows["batch"]["borrowed"] == usage["batch"] - 8000 > 0
    # what batch borrows is lent by the queues with unused guarantee, and no more than they have unused
    assert sum(r["lent"] for r in rows.values()) <= rows["batch"]["borrowed"]
    assert all(r["lent"] <= r["nominal"] - min(r["used"], r["nominal"]) for r in rows.values())
    pending = {p["workload"]: p for p in view["queues"]["pending"]}
    assert set(pending) == set(reclaimed.state.pending)
    assert pending["big-wait"]["code"] and pending["big-wait"]["reason"]
    assert pending["big-wait"]["cq_position"] >= 1


def test_the_job_page_of_a_preempted_job_names_its_preemptor_and_rule(client, reclaimed):
    victim = next(e.data for e in reclaimed.log if isinstance(e.data, ev.EvictionOrdered))
    job = client.get("/api/job", params={"name": victim.workload}).json()
    preempted = [s for s in job["timeline"] if s["step"] == "preempted"]
    assert preempted and preempted[0]["preemptor"] == "serve-1" and preempted[0]["rule"] == victim.reason
    assert any("preempted by serve-1" in line for line in job["explain"])
    assert client.get("/api/job", params={"name": "nobody"}).status_code == 404
    serve = client.get("/api/job", params={"name": "serve-1"}).json()
    assert sum(len(p["gpus"]) for p in serve["pods"]) == 16
    assert [s["victim"] for s in serve["timeline"] if s["step"] == "made room"] == ["sweep-9", "sweep-8"]


def test_the_stream_filters_by_kind_and_job(client):
    evictions = client.get("/api/stream", params={"kind": "EvictionOrdered"}).json()
    assert [e["job"] for e in evictions] == ["sweep-8", "sweep-9"]  # newest first
    about = client.get("/api/stream", params={"job": "sweep-9"}).json()
    assert about and all("sweep-9" in (e["job"] + e.get("preemptor", "")) for e in about)


def test_a_stream_limit_that_is_no_number_gets_the_first_ones_not_an_error(client):
    """'²' is a digit to str.isdigit and no number to int (a stranger's test: a 500)."""
    first = client.get("/api/stream").json()
    for limit in ("²", "٣", "abc", "-5", ""):
        answer = client.get("/api/stream", params={"limit": limit})
        assert answer.status_code == 200 and answer.json() == first, limit


def test_money_matches_the_holding_intervals_and_accounting(reclaimed):
    folded = folded_of(reclaimed.log)
    now = reclaimed.state.time_ms
    view = model.money(folded)
    expected = 0
    for wl_, start, end in holding_intervals(reclaimed.log, HOLDS_NODES):
        expected += total_request(wl_.spec.pod_sets)[GPU] * (end - start)
    for name in reclaimed.state.active:  # still holding: up to now
        w = reclaimed.state.workloads[name]
        if w.phase in HOLDS_NODES:
            expected += total_request(w.spec.pod_sets)[GPU] * (now - folded.usage.holding[name])
    got = sum(t["allocated_gpu_hours"] for t in view["teams"])
    assert got == pytest.approx(expected / 1000 / 3_600_000, abs=0.01)
    state, busy = State(), 0
    for env in reclaimed.log:
        busy += sum(iv.gpu_milli_ms for iv in usage_effects(state, env))
        apply(state, env)
    closed = sum(s.gpu_milli * (s.end_ms - s.start_ms) for s in folded.usage.busy)
    assert closed == busy
    assert view["teams"][0]["series"][-1] == pytest.approx(view["teams"][0]["allocated_gpu_hours"], abs=0.01)


def scrape(client) -> dict:
    text = client.get("/metrics").text
    return {f.name: f for f in text_string_to_metric_families(text)}, text


def sample(families, name: str, **labels) -> float:
    found = [s.value for f in families.values() for s in f.samples
             if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_metrics_are_kueues_names_with_values_from_the_log(client, reclaimed):
    families, text = scrape(client)
    log = reclaimed.log
    applied = [e for e in log if isinstance(e.data, ev.WorkloadAdmitted)]
    assert sample(families, "kueue_preempted_workloads_total", preempting_cluster_queue="serving",
                  reason="InCohortReclamation") == 2
    assert sample(families, "kueue_evicted_workloads_total", cluster_queue="batch", reason="Preempted") == 2
    admitted = sum(s.value for s in families["kueue_admitted_workloads"].samples if s.name.endswith("_total"))
    assert reclaimed.state.superseded == 0 and admitted == len(applied)  # the in-memory pipeline supersedes nothing
    count = sample(families, "kueue_admission_wait_time_seconds_count", cluster_queue="serving")
    assert count == sample(families, "kueue_admitted_workloads_total", cluster_queue="serving") == 2
    assert sample(families, "kueue_cluster_queue_nominal_quota", cluster_queue="serving", flavor="default",
                  resource=GPU) == 32
    assert sample(families, "kueue_cluster_queue_resource_usage", cluster_queue="batch", flavor="default",
                  resource=GPU) == reclaimed.state.usage["batch"][f"default:{GPU}"] / 1000
    pending = sum(s.value for s in families["kueue_pending_workloads"].samples)
    assert pending == len(reclaimed.state.pending)
    allocated = sum(s.value for s in families["gangway_node_gpus_allocated"].samples)
    free = sum(s.value for s in families["gangway_node_gpus_free"].samples)
    assert allocated + free == 64
    for name in METRICS:
        assert name.removesuffix("_total") in families, f"{name} not exported"


def test_health_rules_and_the_page_with_its_offline_assets(client, reclaimed):
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    state = reclaimed.state
    assert client.get("/rules").text == rules.as_html(rules.sections(state.contract, state.contract_digest))
    page = client.get("/").text
    assert "/static/vendor/chart.umd.min.js" in page and "http" not in page.split("<body>")[0]
    assert client.get("/static/vendor/chart.umd.min.js").text.startswith("/*!\n * Chart.js v4")
    assert client.get("/static/console.js").status_code == 200


def test_every_metric_the_grafana_dashboard_queries_is_exported(client):
    families, text = scrape(client)
    exported = declared_series(families.values())
    used = dashboard_series(json.loads(DASHBOARD.read_text()))
    assert len(used) >= 12
    assert not used - exported, f"the dashboard queries metrics nobody exports: {sorted(used - exported)}"


def test_spend_is_what_accounting_charges_at_the_contracts_prices_as_showback_counts_it():
    """Spend was allocated GPU-hours at the GPU price alone, where showback (and the invoices) bill
    the busy intervals at every priced resource's price: the two disagreed (a stranger's test)."""
    import msgspec
    from gangway.events.contract import Price
    base = contract(cluster_queue("q").gpus(16)).obj()
    flavor = base.cluster_queues[0].flavors[0].flavor
    priced = msgspec.structs.replace(base, currency="EUR",
                                     prices=[Price(flavor=flavor, resource=GPU, per_hour_micros=2_100_000)])
    log = LogBuilder(step_ms=600_000).configure(priced).nodes(node("n1").gpus(8))
    log.running(workload("train").queue("q").pod_set("main", count=1, gpus=2))
    placed = next(e.time_ms for e in log.envelopes if isinstance(e.data, ev.PlacementDecided))
    log.finish("train")
    hours = 2 * (log.envelopes[-1].time_ms - placed) / 3_600_000
    view = model.money(folded_of(log.envelopes))
    (row,) = view["teams"]
    assert view["currency"] == "EUR"
    assert row["allocated_gpu_hours"] == pytest.approx(hours, abs=1e-3)
    assert row["busy_gpu_hours"] < row["allocated_gpu_hours"]  # placed 10 min before it ran
    assert row["spend"] == pytest.approx(row["busy_gpu_hours"] * 2.10, abs=0.01)
    assert row["spend_series"][-1] == row["spend"]
    from gangway.read.money import team_figures
    from gangway.services.accounting.billing import books_of
    books = books_of(log.envelopes)
    (team,) = team_figures(books.known())
    assert row["spend"] == pytest.approx(team.list_cost_micros / 1e6, abs=0.005)


async def test_a_fold_that_fails_leaves_the_console_unready_and_says_where(monkeypatch, reclaimed):
    """The console's follower stopped at an event it could not fold while /readyz still said ready
    and the view said caught up (an operator's report: a drain's reason code it had no name for)."""
    from gangway.console import app as console_app

    log = reclaimed.log

    async def follow_log(_bootstrap):
        yield log[:5], len(log)
        yield log[5:], len(log)

    broken = log[7]
    real_add = model.Folded.add

    def add(self, env):
        if env is broken:
            raise KeyError("no such reason")
        real_add(self, env)

    monkeypatch.setattr(console_app, "follow_log", follow_log)
    monkeypatch.setattr(model.Folded, "add", add)
    console = console_app.Console("unused:9092")
    await console.follow()
    assert not console.caught_up
    assert console.error == f"following the log failed at offset {broken.offset}: KeyError('no such reason')"


async def test_a_broker_that_stops_answering_leaves_the_console_unready_and_says_so(monkeypatch):
    """A console left running while `gangway up` was stopped served the log as it was and said it
    was ready; now /readyz and the view say the broker has not answered (the process itself is
    alive: /healthz stays ok), and both are back once it answers again."""
    import asyncio

    from gangway.console import app as console_app

    answers = [False, False, True]

    class Offsets:
        def __init__(self, _bootstrap):
            self.answered = True

        async def read(self, groups):
            self.answered = answers.pop(0) if answers else True
            return {g: None for g in groups}

        async def close(self):
            pass

    monkeypatch.setattr(console_app, "CommittedOffsets", Offsets)
    monkeypatch.setattr(console_app, "SERVICES_EVERY_S", 0.01)
    monkeypatch.setattr(console_app, "SILENT_MAX_S", 0.0)
    console = console_app.Console("127.0.0.1:9")
    console.caught_up = True
    seen = []
    polling = asyncio.create_task(console.poll_services())
    while answers:
        seen.append(console.problem())
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)
    polling.cancel()
    said = [p for p in seen if p]
    assert said and said[0].startswith("the broker at 127.0.0.1:9 has not answered for 0 s (is `gangway up` running?): "
                                       "showing the log as it was at offset -1")
    assert console.problem() is None and console.view()["summary"]["problem"] is None
    console.silent_since = 0.0  # (long ago)
    assert console.view()["summary"]["problem"].startswith("the broker at 127.0.0.1:9 has not answered")
    monkeypatch.setattr(console_app.Console, "problem", lambda self: "the broker at … has not answered")
    with TestClient(create_app("127.0.0.1:9", log=[])) as client:
        assert (client.get("/readyz").status_code, client.get("/readyz").text) == (503, "the broker at … has not answered")
        assert client.get("/healthz").status_code == 200


def test_a_job_that_can_never_start_is_said_so_as_explain_says_it_not_not_within_a_week():
    """The console showed a null start as "not within a week" where explain says never and what
    would change that (a stranger's test); without a forecast (too many pending) it says so."""
    from gangway.read.explain import explain, pending_report
    log = LogBuilder().configure(contract(cluster_queue("q").gpus(8))).nodes(node("n1").gpus(8))
    log.queue(workload("huge").queue("q").pod_set("main", count=1, gpus=16))
    folded = folded_of(log.envelopes)
    report = pending_report(folded.state)
    [row] = model.queues_view(folded, report)["pending"]
    assert row["code"] == "quota_never_enough" and row["eta_ms"] is None
    told = explain(log.envelopes, "huge")[-1]
    assert told.startswith("estimated start: never") and told == f"estimated start: {row['start']}"
    log.queue(workload("small").queue("q").pod_set("main", count=1, gpus=4).runtime_s(60))
    folded = folded_of(log.envelopes)
    rows = model.queues_view(folded, pending_report(folded.state, forecast=False), forecast=False)["pending"]
    assert {r["workload"]: r["start"].split(",")[0] for r in rows} == {"huge": "never", "small": "not forecast (too many pending)"}


def test_the_readme_names_every_metric_family_the_console_exports():
    """A stranger's test found six families /metrics exports and the README never named."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert [name for name in METRICS if f"`{name}" not in readme] == []
