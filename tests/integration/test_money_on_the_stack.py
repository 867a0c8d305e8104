"""Money on the real stack: dcgm-exporter figures scraped by `gangway telemetry scrape` reach the
log through submission's relay and land on the workload holding those GPUs."""

from __future__ import annotations

import pytest

from gangway.events import catalogue as ev
from money_story import serve_exposition

pytestmark = pytest.mark.broker


def test_scraped_dcgm_figures_reach_the_workload_that_holds_the_gpus(gw):
    gw.wait_idle()
    name = f"scraped-{gw.uid()}"
    workload = f"research/{name}"
    # 18,000 cluster seconds: 30 s of wall time at the harness's time scale.
    gw.produce_jobs([gw.job(name, namespace="research", gpus=2, runtime_s=18_000)])
    gw.wait_until(f"{workload} running", lambda s, _e: s.workloads.get(workload) is not None
                  and s.workloads[workload].phase == "running", 30)
    wl = gw.state.workloads[workload]
    node = wl.placement.assignments[0].node
    gpus = wl.placement_gpus[0]
    series = "\n".join(
        f'DCGM_FI_PROF_SM_ACTIVE{{gpu="{g}",UUID="GPU-{g}",device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",'
        f'Hostname="{node}",container="main",namespace="research",pod="{name}-0"}} 0.42\n'
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",Hostname="{node}",namespace="research",pod="{name}-0"}} 55'
        for g in gpus)
    server = serve_exposition({"text": "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
                                       + series + "\n"})
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        result = gw.cli("telemetry", "scrape", url, "--once")
        assert result.returncode == 0 and "1 node(s) of GPU figures published" in result.stdout, result.stdout + result.stderr
    finally:
        server.shutdown()
        server.server_close()

    def sampled(s, envs) -> bool:
        held = s.workloads[workload]
        return any(isinstance(e.data, ev.GpuTelemetry) and e.data.node == node for e in envs) \
            and set(held.gpu_sm.values()) == {420} and held.busy_milli_ms > 0

    gw.wait_until(f"the scraped figures on {workload}", sampled, 30)
    on_log = [e.data for e in gw.log() if isinstance(e.data, ev.GpuTelemetry) and e.data.node == node]
    assert [(s.gpu, s.sm_active, s.gpu_util, s.workload) for s in on_log[-1].samples] == [
        (g, 420, 55, workload) for g in sorted(gpus)]
    # (its GPUs back for the next tests, not in 30 s)
    assert gw.cli("withdraw", workload).returncode == 0
