"""The web console in a real browser, on a REAL stack (broker and six services as processes).

A stack of its own (the demo's 8 × 8-GPU cluster and contract, 600 cluster seconds per wall second)
and ``gangway console`` as a process; headless Chromium — Debian's ``chromium`` package, driven by
Playwright — opens the page and checks what a person would: research's 40-GPU gang on the map in
research's colour, a fraction of a shared GPU, a job that cannot fit waiting with its reason, the
page following the log without a reload, a preempted gang's page naming its preemptor. Screenshots
go to ``out/console-*.png``. ``/metrics`` is scraped and parsed with prometheus_client's parser.

Skipped, with the reason, when Chromium or Playwright is missing (``.ci/run`` installs Chromium).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import CLUSTER_FILE, CONTRACT_FILE, NODES, VENV_BIN, running_stack, uid
from gangway.adapters.broker import free_port
from gangway.console.metrics import METRICS, dashboard_series, declared_series
from gangway.events import catalogue as ev

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parent.parent.parent
OUT = ROOT / "out"
DASHBOARD = ROOT / "infra" / "grafana" / "gangway.json"
#: Long enough (cluster seconds) to keep running through the test: 36,000 s is 60 s of wall time.
LONG_S = 36_000.0
STACK_SERVICES = ("submission", "admission", "placement", "preemption", "accounting", "binder")


def browser_or_skip():
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium; .ci/run does it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    return chromium, sync_playwright


def job(job_id: str, namespace: str, gpus: float, count: int = 1, priority_class: str | None = None,
        runtime_s: float = LONG_S) -> dict:
    doc = {"job_id": job_id, "namespace": namespace, "queue": "default", "runtime_seconds": runtime_s,
           "pod_sets": [{"name": "main", "count": count,
                         "resources": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus}}]}
    if priority_class:
        doc["priority_class"] = priority_class
    return doc


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """Its own stack, and the console on it; yields (harness, console URL)."""
    with running_stack(tmp_path_factory.mktemp("console-state"), CLUSTER_FILE, CONTRACT_FILE, NODES) as gw:
        port = free_port()
        log_path = gw.state_dir / "console.log"
        env = dict(os.environ, GANGWAY_KAFKA=gw.bootstrap, GANGWAY_STATE_DIR=str(gw.state_dir / "console"))
        with open(log_path, "ab") as out:
            proc = subprocess.Popen([str(VENV_BIN / "gangway"), "console", "--port", str(port)], env=env,
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}/"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if urllib.request.urlopen(url + "readyz", timeout=2).status == 200:
                        break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the console did not get ready:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.2)
            yield gw, url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def outside_the_browser_loop(fn, *args, **kwargs):
    """Run ``fn`` in another thread: Playwright's sync API keeps an event loop running in this one,
    and the harness reads the log with ``asyncio.run``."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def rgb(hex_colour: str) -> str:
    h = hex_colour.lstrip("#")
    return "rgb({}, {}, {})".format(*(int(h[i:i + 2], 16) for i in (0, 2, 4)))


def test_a_person_sees_the_gang_the_waiting_job_and_the_preemptor(scene):
    chromium, sync_playwright = browser_or_skip()
    gw, url = scene
    OUT.mkdir(exist_ok=True)
    u = uid()
    pretrain, notebook, waiting, canary = (f"research/pretrain-{u}", f"batch/notebook-{u}", f"research/wait-{u}",
                                           f"serving/canary-{u}")
    gw.produce_jobs([job(f"pretrain-{u}", "research", 8, count=5, priority_class="research"),
                     job(f"notebook-{u}", "batch", 0.5, priority_class="best-effort")])
    running = lambda *names: lambda s, _e: all(  # noqa: E731
        n in s.workloads and s.workloads[n].phase == "running" for n in names)
    gw.wait_until("the gang and the notebook to run", running(pretrain, notebook), 30, about=[pretrain, notebook])

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        try:
            page.goto(url)
            # the GPU map: the gang's 40 GPUs, each in research's colour (the legend's)
            cells = page.locator(f'.gpu[data-workload="{pretrain}"]')
            cells.first.wait_for(timeout=15_000)
            assert cells.count() == 40
            colour = page.evaluate("() => VIEW.map.teams.research")
            styles = cells.evaluate_all("els => els.map(e => getComputedStyle(e).backgroundColor)")
            assert set(styles) == {rgb(colour)}, styles
            legend = page.locator("#legend span", has_text="research").locator("i")
            assert legend.evaluate("e => getComputedStyle(e).backgroundColor") == rgb(colour)
            # the notebook's half GPU: a shared GPU showing the fraction
            shared = page.locator(f'.gpu[data-workload="{notebook}"]')
            assert shared.count() == 1 and shared.get_attribute("data-status") == "shared"
            assert shared.inner_text().strip() == "0.5"
            shared.hover()
            assert notebook in page.locator("#tip").inner_text()
            # NVLink islands outlined: every node of the demo is one island of 8
            assert page.locator(".island:not(.pcie)").count() == NODES
            page.screenshot(path=str(OUT / "console-map.png"), full_page=True)

            # a job that cannot fit waits: the queues page (already open, no reload) shows why
            page.click("nav a[data-tab=queues]")
            gw.produce_jobs([job(f"wait-{u}", "research", 8, count=4, priority_class="research")])
            row = page.locator(f'#pending-table tr[data-workload="{waiting}"]')
            row.wait_for(timeout=15_000)
            reason = row.locator("td.reason").inner_text()
            outside_the_browser_loop(gw.log)
            assert gw.state.workloads[waiting].phase == "pending"
            assert len(reason) > 20, reason
            assert "estimated start" in page.locator("#pending-table").inner_text()
            page.screenshot(path=str(OUT / "console-queues.png"), full_page=True)

            # serving's canary reclaims its guarantee from research's borrowed GPUs
            time.sleep(1.2)  # research's minimum runtime (600 cluster s) has passed
            gw.produce_jobs([job(f"canary-{u}", "serving", 8, count=3, priority_class="production")])
            ordered = outside_the_browser_loop(
                gw.wait_until, "the canary to preempt the gang and run",
                lambda s, e: running(canary)(s, e) and [x for x in e if isinstance(x.data, ev.EvictionOrdered)
                                                        and x.data.workload == pretrain], 40, about=[pretrain, canary])
            page.goto(url + f"#job={pretrain}")
            detail = page.locator("#timeline li.preempted .detail")
            detail.first.wait_for(timeout=15_000)
            text = detail.first.inner_text()
            assert f"preempted by {canary}" in text and ordered[0].data.reason in text
            assert "preempted by " + canary in page.locator("#explain").inner_text()
            page.screenshot(path=str(OUT / "console-job.png"), full_page=True)

            # the canary's pods on the map, in serving's colour
            page.goto(url + "#map")
            mine = page.locator(f'.gpu[data-workload="{canary}"]')
            mine.first.wait_for(timeout=15_000)
            serving = page.evaluate("() => VIEW.map.teams.serving")
            assert mine.count() == 24
            assert set(mine.evaluate_all("els => els.map(e => getComputedStyle(e).backgroundColor)")) == {rgb(serving)}
            page.screenshot(path=str(OUT / "console-map-after.png"), full_page=True)

            # the decision stream, filtered by kind and by job
            page.click("nav a[data-tab=decisions]")
            page.select_option("#f-kind", "EvictionOrdered")
            kinds = page.locator("#stream tr[data-kind]").evaluate_all("rs => rs.map(r => r.dataset.kind)")
            assert kinds and set(kinds) == {"EvictionOrdered"}
            page.select_option("#f-kind", "")
            page.fill("#f-job", f"canary-{u}")
            assert page.locator("#stream tr[data-kind]").count() >= 4  # queued, ordered out, admitted, placed, …
            page.screenshot(path=str(OUT / "console-decisions.png"), full_page=True)

            # money: allocated GPU-hours per team, research's the largest so far
            page.click("nav a[data-tab=money]")
            page.locator('#money-table tr[data-team="research"]').wait_for(timeout=15_000)  # rendered, not just shown
            hours = {r.get_attribute("data-team"): float(r.locator("td").nth(1).inner_text())
                     for r in page.locator("#money-table tr[data-team]").all()}
            assert hours["research"] > 0 and hours["serving"] >= 0, hours
            page.screenshot(path=str(OUT / "console-money.png"), full_page=True)

            # the rules, one click away
            with page.context.expect_page() as popup:
                page.click("#rules-link")
            rules = popup.value
            rules.wait_for_load_state()
            assert "serving" in rules.content() and "research" in rules.content()
        finally:
            browser.close()


def scrape(url: str) -> dict:
    text = urllib.request.urlopen(url + "metrics", timeout=10).read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families, name: str, **labels) -> float | None:
    for family in families.values():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def test_metrics_are_scraped_and_each_services_folded_offset_and_lag_shows(scene):
    gw, url = scene
    gw.log()
    deadline = time.monotonic() + 20
    while True:  # every service commits its folded offset within a second or so of folding
        families = scrape(url)
        end = value(families, "gangway_log_end_offset")
        lags = {s: value(families, "gangway_service_lag_events", service=s) for s in STACK_SERVICES}
        folded = {s: value(families, "gangway_service_folded_offset", service=s) for s in STACK_SERVICES}
        # The log goes on growing (the binder's telemetry): done when every service has folded all the
        # test saw and reports a lag.
        if end is not None and all(f is not None and f >= gw.envs[-1].offset + 1 for f in folded.values()) \
                and all(v is not None for v in lags.values()):
            break
        if time.monotonic() > deadline:
            pytest.fail(f"services never folded what the test saw: end {end}, folded {folded}, lags {lags}")
        time.sleep(0.5)
    seen = gw.envs[-1].offset + 1
    for s in STACK_SERVICES:
        assert seen <= value(families, "gangway_service_folded_offset", service=s) <= end
    assert seen <= value(families, "gangway_console_folded_offset") <= end
    assert sum(s.value for s in families["gangway_node_gpus"].samples) == 64
    assert value(families, "kueue_cluster_queue_borrowing_limit", cluster_queue="serving", flavor="default",
                 resource="nvidia.com/gpu") == 0
    for name in METRICS:
        assert name.removesuffix("_total") in families, name
    health = urllib.request.urlopen(url + "healthz", timeout=5)
    assert health.status == 200
    # the Grafana dashboard only asks for series this exposition declares
    dashboard = json.loads(DASHBOARD.read_text())
    assert not dashboard_series(dashboard) - declared_series(families.values())
    assert re.search(r"^kueue_admission_wait_time_seconds_bucket", urllib.request.urlopen(url + "metrics").read().decode(), re.M)
