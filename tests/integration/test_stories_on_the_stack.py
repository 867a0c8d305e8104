"""Issue 3's stories through the REAL broker and the six REAL services (processes).

- The incident, on the session's demo stack (64 GPUs: serving 32, research 24, batch 8).
- Four teams on 512 GPUs, on a stack of its own (64 nodes × 8 GPUs).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import running_stack
from gangway.events import catalogue as ev
from gangway.events.resources import GPU
from gangway.read.explain import explain

pytestmark = pytest.mark.broker

FOUR_TEAMS = Path(__file__).parent.parent / "data" / "four-teams.yaml"
#: The four-team stack runs at 20 cluster seconds per wall second: a 30 s grace period is 1.5 s.
FOUR_TEAMS_SCALE = 20.0


def gpu_job(job_id: str, namespace: str, gpus: int, count: int = 1, runtime_s: float = 3600.0,
            priority_class: str | None = None) -> dict:
    doc = {"job_id": job_id, "namespace": namespace, "queue": "default", "runtime_seconds": runtime_s,
           "pod_sets": [{"name": "main", "count": count, "resources": {"nvidia.com/gpu": gpus}}]}
    if priority_class:
        doc["priority_class"] = priority_class
    return doc


@pytest.mark.both_brokers
def test_the_incident_serving_reclaims_exactly_8_gpus_and_explain_says_why(gw):
    gw.wait_idle()
    u = gw.uid()
    serve0, serve1 = f"serve0-{u}", f"serve1-{u}"
    sweeps = [f"sweep{i}-{u}" for i in range(10)]
    started = lambda *names: lambda s, _e: all(  # noqa: E731
        n in s.workloads and s.workloads[n].phase in ("running", "finished") for n in names)
    gw.produce_jobs([gpu_job(serve0, "serving", 8, count=2, runtime_s=3000, priority_class="production")])
    gw.wait_until(f"{serve0} to run", started(f"serving/{serve0}"), 20, about=[f"serving/{serve0}"])
    # Ten best-effort sweeps, in this order: batch grows to 40 GPUs, 32 of them borrowed.
    gw.produce_jobs([gpu_job(sweep, "batch", 4, runtime_s=3000, priority_class="best-effort") for sweep in sweeps])
    gw.wait_until("the sweeps to run", started(*(f"batch/{s}" for s in sweeps)), 20, about=[f"batch/{s}" for s in sweeps])
    start = len(gw.log())
    gw.produce_jobs([gpu_job(serve1, "serving", 8, count=2, runtime_s=60, priority_class="production")])
    gw.wait_until(f"{serve1} to run", started(f"serving/{serve1}"), 30, about=[f"serving/{serve1}", *sweeps])
    orders = [e.data for e in gw.envs[start:] if isinstance(e.data, ev.EvictionOrdered)]
    assert [o.workload for o in orders] == [f"batch/{sweeps[9]}", f"batch/{sweeps[8]}"], gw.lines(gw.envs[start:])
    lines = explain(gw.envs, f"batch/{sweeps[9]}", forecast=False)
    assert any(f"preempted by serving/{serve1}: reclaimWithinCohort Any: batch is borrowing" in line
               for line in lines), lines
    gw.wait_finished([f"serving/{serve0}", f"serving/{serve1}", *(f"batch/{s}" for s in sweeps)], timeout_s=60)


def node_list(count: int) -> dict:
    return {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"gpu-{i:02}"},
         "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}}}
        for i in range(count)]}


@pytest.fixture(scope="module")
def four_teams(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("four-teams")
    cluster = state_dir / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(node_list(64)))
    with running_stack(state_dir, str(cluster), str(FOUR_TEAMS), 64, time_scale=FOUR_TEAMS_SCALE) as harness:
        yield harness


def test_four_teams_on_512_gpus_no_idle_gpu_and_the_guarantee_back_within_a_cycle_and_the_grace(four_teams):
    gw = four_teams
    jobs = [gpu_job(f"{t}{i}", f"team-{t}", 8, runtime_s=36_000, priority_class="standard")
            for t in "abc" for i in range(30)]
    gw.produce_jobs(jobs)

    def all_gpus_busy(state, _envs) -> bool:
        used = sum(n.allocatable.get(GPU, 0) - n.free.get(GPU, 0) for n in state.nodes.values())
        return len(state.workloads) == 90 and used == 512_000

    gw.wait_until("512 GPUs busy with 90 jobs queued", all_gpus_busy, 60)
    assert len(gw.state.pending) == 26  # the rest wait: nothing idles while they do

    start = len(gw.log())
    names = [f"team-d/d{i}" for i in range(16)]
    gw.produce_jobs([gpu_job(f"d{i}", "team-d", 8, runtime_s=36_000, priority_class="standard") for i in range(16)])
    gw.wait_until("team d's 16 jobs admitted", lambda s, _e: all(
        n in s.workloads and s.workloads[n].admission is not None for n in names), 60, about=names)
    envs = gw.envs[start:]
    queued = {e.data.workload: e.time_ms for e in envs if isinstance(e.data, ev.WorkloadQueued)}
    admitted = {e.data.workload: e.time_ms for e in envs if isinstance(e.data, ev.WorkloadAdmitted)
                and e.data.workload in queued}
    waits_s = sorted((admitted[n] - queued[n]) / 1000 for n in names)
    # The 30 s grace period, plus the cycles on either side of it (cluster time at 20×: 1 s wall = 20 s).
    assert 30 <= waits_s[0] and waits_s[-1] <= 30 + 40, waits_s
    evictions = [e.data for e in envs if isinstance(e.data, ev.EvictionOrdered)]
    assert len(evictions) == 16, gw.lines(envs)


def test_four_teams_a_queue_drained_by_its_stop_policy_waits_and_comes_back_when_resumed(four_teams, tmp_path):
    """After the story above: team-d's ClusterQueue stopped with HoldAndDrain through `gangway config
    apply` — the preemption service orders out its 16 running jobs (nothing pending asks it to), they
    wait in their queue, and the contract without the policy brings them back."""
    gw = four_teams
    names = [f"team-d/d{i}" for i in range(16)]
    drained = tmp_path / "drained.yaml"
    text = FOUR_TEAMS.read_text()
    header = "kind: ClusterQueue\nmetadata:\n  name: team-d\nspec:\n"
    assert header in text
    drained.write_text(text.replace(header, header + "  stopPolicy: HoldAndDrain\n"))
    gw.wait_until("team d's jobs running", lambda s, _e: all(s.workloads[n].phase == "running" for n in names), 60,
                  about=names)
    start = len(gw.log())
    applied = gw.cli("config", "apply", str(drained))
    assert applied.returncode == 0, applied.stderr
    gw.wait_until("team d drained back to its queue", lambda s, _e: all(
        s.workloads[n].phase == "pending" for n in names), 60, about=names)
    orders = [e.data for e in gw.envs[start:] if isinstance(e.data, ev.EvictionOrdered)]
    assert sorted(o.workload for o in orders) == sorted(names)
    assert {(o.preemptor, o.reason_code) for o in orders} == {("ClusterQueue/team-d", "queue_drained")}
    lines = explain(gw.envs, names[0], forecast=False)
    assert any(line.startswith("now pending (queue_stopped): ClusterQueue team-d is stopped (stopPolicy "
                               "HoldAndDrain)") for line in lines), lines

    resumed = gw.cli("config", "apply", str(FOUR_TEAMS))
    assert resumed.returncode == 0, resumed.stderr
    gw.wait_until("team d admitted again", lambda s, _e: all(
        s.workloads[n].phase in ("admitted", "placed", "bound", "running") for n in names), 90, about=names)
    # A contract renaming the flavor that work runs on is refused while it does (Kueue's finalizer)
    flavor = next(iter(gw.state.workloads[names[0]].admission.flavors.values()))
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(text.replace(f"name: {flavor}\n", f"name: {flavor}-new\n"))
    refused = gw.cli("config", "apply", str(renamed))
    assert refused.returncode != 0 and f"leaves out flavors still in use — ResourceFlavor {flavor} by " in refused.stderr, \
        refused.stderr
