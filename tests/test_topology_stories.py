"""The topology stories, told twice: on the placement policy beside a greedy baseline, and through
the whole pipeline in memory (submission order, admission, placement, binder: ``gangway.sim``).

1. 8 nodes × 8 NVLink GPUs, a flurry of 2-GPU jobs, then an 8-GPU tensor-parallel fine-tune that
   must sit inside one NVLink island. Greedy scattering leaves 16 GPUs free and no island larger
   than 2; gangway keeps nodes whole and places it.
2. A 256-GPU job lands inside one network block, or waits.
3. Two 64-GPU jobs with 96 GPUs free: one runs, the other waits whole; nothing is half-placed.
"""

from __future__ import annotations

from builders import LogBuilder, cluster_queue, contract, decide_pure, node, workload
from gangway.events import catalogue as ev
from gangway.events import freeindex
from gangway.services.audit.replay import verify
from gangway.services.placement.policy import decide_placement
from gangway.services.placement.topology import BLOCK, ISLAND
from gangway.sim import Simulation

CONTRACT = contract(cluster_queue("q").gpus(4096).cpu(100_000).memory_gi(100_000))
HOUR_S = 3600


def nvlink_nodes(count: int, block: str = "b1", first: int = 1) -> list[ev.NodeObserved]:
    return [node(f"n{i:02d}").gpus(8).cpu(96).memory_gi(1024).at(block, f"r{block}").islands(8).obj()
            for i in range(first, first + count)]


def job(name: str, pods: int, gpus: int, runtime_s: float = HOUR_S, **topology) -> ev.WorkloadQueued:
    request = ev.TopologyRequest(**topology) if topology else None
    return (workload(name).queue("q").pod_set("main", count=pods, gpus=gpus, cpu=4, topology=request)
            .runtime_s(runtime_s).obj())


FLURRY = [job(f"small-{i:02d}", 1, 2) for i in range(24)]
FINE_TUNE = job("fine-tune", 1, 8, required=ISLAND)


def spread(log: LogBuilder, wl: ev.WorkloadQueued) -> None:
    """The greedy baseline: each pod to the node with the most GPUs free (first by name on ties)."""
    free = {name: n.free.get("nvidia.com/gpu", 0) for name, n in log.state.nodes.items()}
    name = min(free, key=lambda n: (-free[n], n))
    log.queue(wl).admit(wl.workload).place(wl.workload, on=[("main", name, 1)]).bind(wl.workload)


def test_seed_story_greedy_scattering_strands_sixteen_gpus_in_twos():
    log = LogBuilder().configure(CONTRACT).nodes(*nvlink_nodes(8))
    for wl in FLURRY:
        spread(log, wl)
    f = freeindex.measure(log.state.free_index)
    assert (f.gpus_free, f.largest_island, f.fits["8"]) == (16, 2, 0)
    log.admitted(FINE_TUNE)
    assert decide_pure(decide_placement, log.state) == [], "no island holds the fine-tune"


def test_seed_story_gangway_keeps_nodes_whole_and_places_the_fine_tune():
    log = LogBuilder().configure(CONTRACT).nodes(*nvlink_nodes(8))
    for wl in FLURRY:
        log.admitted(wl)
        [d] = decide_pure(decide_placement, log.state)
        log.add(d).bind(wl.workload)
    f = freeindex.measure(log.state.free_index)
    assert (f.gpus_free, f.largest_island, f.fits["8"]) == (16, 8, 2)
    log.admitted(FINE_TUNE)
    [d] = decide_pure(decide_placement, log.state)
    assert [(a.count, a.gpus) for a in d.assignments] == [(1, list(range(8)))]
    assert d.fragmentation.largest_island == 8 and d.fragmentation.gpus_free == 8


def simulation(nodes: list[ev.NodeObserved]) -> Simulation:
    sim = Simulation()
    sim.configure(CONTRACT.obj())
    sim.add_nodes(nodes)
    return sim


def phase(sim: Simulation, name: str) -> str:
    return sim.state.workloads[name].phase


def test_seed_story_through_the_pipeline_the_fine_tune_runs_on_one_whole_node():
    sim = simulation(nvlink_nodes(8))
    for wl in FLURRY:
        sim.submit(wl)
    sim.run(until_ms=sim.now_ms + 60_000)
    assert all(phase(sim, wl.workload) == "running" for wl in FLURRY)
    sim.submit(FINE_TUNE)
    sim.run(until_ms=sim.now_ms + 60_000)
    assert phase(sim, "fine-tune") == "running"
    [a] = sim.state.workloads["fine-tune"].placement.assignments
    assert a.gpus == list(range(8))
    report = verify(sim.log)
    assert report.ok and report.verified == report.decisions, "the auditor re-derives every decision"


def test_a_256_gpu_job_waits_until_one_network_block_holds_it_then_lands_inside_it():
    sim = simulation(nvlink_nodes(33, "b1", first=1) + nvlink_nodes(33, "b2", first=34))
    sim.submit(job("blocker-1", 2, 8, runtime_s=600, required=BLOCK))
    sim.submit(job("blocker-2", 32, 8, runtime_s=3600, required=BLOCK))
    sim.submit(job("pretrain", 32, 8, required=BLOCK))
    sim.run(until_ms=sim.now_ms + 60_000)
    assert (phase(sim, "blocker-1"), phase(sim, "blocker-2")) == ("running", "running")
    f = freeindex.measure(sim.state.free_index)
    assert (f.gpus_free, f.largest_block) == (256, 248), "256 GPUs free, but no block holds them"
    assert phase(sim, "pretrain") == "pending", "the job waits whole"
    sim.run(until_ms=sim.now_ms + 700_000)
    assert phase(sim, "pretrain") == "running"
    placed = {sim.state.nodes[a.node].labels[BLOCK] for a in sim.state.workloads["pretrain"].placement.assignments}
    assert placed == {"b1"}


def test_two_64_gpu_jobs_on_96_free_gpus_one_runs_and_the_other_waits_whole():
    sim = simulation(nvlink_nodes(12))
    sim.submit(job("first", 8, 8, runtime_s=600))
    sim.submit(job("second", 8, 8, runtime_s=600))
    sim.run(until_ms=sim.now_ms + 60_000)
    assert (phase(sim, "first"), phase(sim, "second")) == ("running", "pending")
    assert sim.state.workloads["second"].placement is None, "nothing of it is placed"
    assert freeindex.measure(sim.state.free_index).gpus_free == 32
    sim.run(until_ms=sim.now_ms + 700_000)
    assert phase(sim, "second") == "running"


def test_the_demo_tells_the_seed_story_side_by_side():
    from gangway.demo import seed
    greedy, gangway = seed.tell(greedy=True), seed.tell(greedy=False)
    assert greedy == {"gpus_free": 16, "largest_island": 2, "fits_8": 0, "fine_tune": "pending"}
    assert gangway == {"gpus_free": 16, "largest_island": 8, "fits_8": 2, "fine_tune": "running"}
    assert seed.lines()[-1].split()[-2:] == ["pending", "running"]
