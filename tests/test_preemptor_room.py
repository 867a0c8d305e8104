"""The placer keeps a waiting preemptor's room where it will be once the gangs admitted before it
are placed, as admission's snapshot finds it (``Contract.preemptor_room_after_admitted``).

tests/data/preemptor-room.jsonl is a run the property tests found (random seeds, 16x their
examples), up to the moment it went wrong: w40 (queue a, 2 GPUs + 16 CPUs, and 16 more CPUs)
waits for its victims w30 and w38 of queue c; w38 has left, w30 is leaving; a gang admitted
before is not placed yet. The placer kept w40's room on n1, in GPUs that gang was about to take,
so w38, admitted again, was placed on n2 — w40's real room; w40 ordered it out again, and so on at
every return (a livelock: the simulation never settled).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import fold_file
from gangway.events import catalogue as ev
from gangway.events.state import State
from gangway.services.placement.policy import Placer
from gangway.sim import Simulation

LOG = Path(__file__).parent / "data" / "preemptor-room.jsonl"


def folded(after_admitted: bool) -> State:
    return fold_file(LOG, preemptor_room_after_admitted=after_admitted)


@pytest.mark.parametrize("after_admitted, cpus_left_on_n2", [(True, 46), (False, 54)])
def test_the_placer_keeps_the_room_admission_kept(after_admitted, cpus_left_on_n2):
    state = folded(after_admitted)
    assert state.workloads["w38"].phase == "pending" and state.workloads["w30"].phase == "evicting"
    assert state.unplaced  # (a gang admitted and not yet placed)
    placer = Placer(state, admitted={"w38"})
    assert placer.free["n2"].free["cpu"] == cpus_left_on_n2 * 1000  # w40 keeps 8 of n2's 54 free CPUs


def test_the_preemptor_is_admitted_once_its_victims_left_and_nobody_is_ordered_out_twice():
    sim = Simulation(state=folded(True))
    sim.run(until_ms=sim.now_ms + 60_000)
    assert sim.state.workloads["w40"].phase == "running"
    assert not any(isinstance(e.data, ev.EvictionOrdered) for e in sim.log)
    # a contract recorded before the field: w38 comes back into w40's room and is ordered out again
    sim = Simulation(state=folded(False))
    sim.run(until_ms=sim.now_ms + 60_000)
    again = [e.data.workload for e in sim.log if isinstance(e.data, ev.EvictionOrdered) and e.data.preemptor == "w40"]
    assert again.count("w38") >= 3 and sim.state.workloads["w40"].phase == "pending"
