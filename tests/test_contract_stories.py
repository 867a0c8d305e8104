"""Issue 3's stories in the pure core (Simulation: exact cluster times, no broker).

The same stories run through the real broker and services in tests/integration/test_stories_on_the_stack.py.
"""

from __future__ import annotations

from pathlib import Path

from builders import node
from gangway.events.reasons import ReasonCode
from gangway.contract import load_contract_file
from gangway.events import catalogue as ev
from gangway.events.resources import GPU
from gangway.sim import Simulation
from gangway.services.submission.manifests import load_jobs
from gangway.services.submission.policy import queue_job

FOUR_TEAMS = Path(__file__).parent / "data" / "four-teams.yaml"
HOUR_S = 3600


def four_team_jobs(team: str, count: int, runtime_s: int = 10 * HOUR_S) -> str:
    """``count`` 8-GPU jobs of one team, as a producer writes them."""
    return "\n---\n".join(
        f"job_id: {team}-{i}\nnamespace: team-{team}\nqueue: default\npriority_class: standard\n"
        f"runtime_seconds: {runtime_s}\npod_sets: [{{name: main, count: 1, resources: {{nvidia.com/gpu: 8}}}}]"
        for i in range(count))


def submit(sim: Simulation, text: str) -> None:
    for job in load_jobs(text, "jobs.yaml"):
        sim.submit(queue_job(job, sim.state, {}, f"test/{job.job_id}"))


def gpus_in_use(state) -> int:
    return sum(n.allocatable.get(GPU, 0) - n.free.get(GPU, 0) for n in state.nodes.values()) // 1000


def test_four_teams_no_gpu_idles_while_anyone_waits_and_a_returning_team_gets_its_guarantee():
    sim = Simulation()
    sim.configure(load_contract_file(FOUR_TEAMS))
    sim.add_nodes([node(f"n{i:02}").gpus(8).cpu(96).obj() for i in range(64)])
    for team in "abc":
        submit(sim, four_team_jobs(team, 30))
    sim.run(until_ms=sim.now_ms + 60_000)
    assert len(sim.state.pending) == 90 - 64
    assert gpus_in_use(sim.state) == 512  # no GPU idle while 26 jobs wait

    start = len(sim.log)
    submit(sim, four_team_jobs("d", 16))
    sim.run(until_ms=sim.now_ms + 120_000)
    queued = {e.data.workload: e.time_ms for e in sim.log[start:] if isinstance(e.data, ev.WorkloadQueued)}
    admitted = {e.data.workload: e.time_ms for e in sim.log[start:] if isinstance(e.data, ev.WorkloadAdmitted)
                and e.data.workload in queued}
    assert sorted(admitted) == sorted(queued)
    # One scheduling cycle orders the evictions; the victims get their 30 s grace; then d runs.
    assert {admitted[w] - queued[w] for w in queued} == {30_000}
    held = {cq: sum(v for fr, v in u.items() if fr.endswith(GPU)) // 1000 for cq, u in sim.state.usage.items()}
    assert held["team-d"] == 128 and sum(held.values()) == 512
    evicted = [e.data for e in sim.log[start:] if isinstance(e.data, ev.EvictionOrdered)]
    assert len(evicted) == 16 and all(o.reason_code == ReasonCode.RECLAIM_WITHIN_COHORT
                                      and o.reason_params["policy"] == "Any" for o in evicted)
