"""A preemption cycle found by tests/test_properties.py once pod sets carried topology requests.

w15 (queue a, priority 0) evicts w16 (queue b, priority 100) to reclaim a's nominal quota; once
w15 runs, w16 evicts w15 to reclaim b's. Run: .venv/bin/python tests/repro/preemption_cycle_with_topology.py
(prints the cycle and the decisions about w15/w16). Not collected by pytest."""

import sys

sys.path.insert(0, "tests")

import test_properties as tp  # noqa: E402
from test_properties import ImmediateEvictionMachine, preemption_cycles  # noqa: E402
from gangway.events.catalogue import TopologyRequest  # noqa: E402,F401
from gangway.reports import log_line  # noqa: E402

tp.event = lambda *a, **k: None
state = ImmediateEvictionMachine()
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=25)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.apply_config(variant=0)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.submit(jobs=[('c', True, [(2, 2, 4, None)], 21),
 ('solo',
     False,
     [(3,
          4,
          4,
          TopologyRequest(required=None, preferred='gangway.io/nvlink-island', slice_required=None, slice_size=None)),
      (2,
          2,
          1,
          TopologyRequest(required='kubernetes.io/hostname', preferred=None, slice_required=None, slice_size=None))],
     1),
 ('solo',
     False,
     [(2,
          4,
          16,
          TopologyRequest(required=None, preferred='cloud.provider.com/topology-rack', slice_required=None, slice_size=None))],
     8),
 ('b',
     True,
     [(3,
          1,
          4,
          TopologyRequest(required='kubernetes.io/hostname', preferred=None, slice_required=None, slice_size=None))],
     10)])
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=29)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=5)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.submit(jobs=[('b',
     False,
     [(2,
          0,
          4,
          TopologyRequest(required=None, preferred=None, slice_required='kubernetes.io/hostname', slice_size=1)),
      (2,
          2,
          1,
          TopologyRequest(required=None, preferred='gangway.io/nvlink-island', slice_required=None, slice_size=None))],
     15),
 ('b',
     False,
     [(3,
          0,
          0,
          TopologyRequest(required=None, preferred=None, slice_required='kubernetes.io/hostname', slice_size=1))],
     5),
 ('a', False, [(3, 2, 16, None), (1, 4, 4, None)], 26),
 ('c',
     False,
     [(2, 1, 16, None),
      (1,
          1,
          16,
          TopologyRequest(required='cloud.provider.com/topology-rack', preferred=None, slice_required=None, slice_size=None))],
     30)])
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.apply_config(variant=2)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=0)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.submit(jobs=[('solo',
     False,
     [(2,
          2,
          16,
          TopologyRequest(required='kubernetes.io/hostname', preferred=None, slice_required=None, slice_size=None))],
     22),
 ('b',
     True,
     [(3,
          2,
          1,
          TopologyRequest(required='gangway.io/nvlink-island', preferred=None, slice_required=None, slice_size=None)),
      (3,
          1,
          0,
          TopologyRequest(required='kubernetes.io/hostname', preferred=None, slice_required=None, slice_size=None))],
     20),
 ('b',
     True,
     [(1,
          2,
          16,
          TopologyRequest(required=None, preferred=None, slice_required='kubernetes.io/hostname', slice_size=1))],
     15),
 ('b', False, [(1, 1, 16, None)], 22)])
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.apply_config(variant=0)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=0)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=0)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=1)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.apply_config(variant=0)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.apply_config(variant=0)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=1)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.submit(jobs=[('b',
     False,
     [(1,
          4,
          4,
          TopologyRequest(required=None, preferred=None, slice_required='kubernetes.io/hostname', slice_size=1)),
      (2,
          1,
          4,
          TopologyRequest(required=None, preferred='cloud.provider.com/topology-rack', slice_required=None, slice_size=None))],
     8),
 ('b',
     False,
     [(1,
          4,
          4,
          TopologyRequest(required=None, preferred='gangway.io/nvlink-island', slice_required=None, slice_size=None)),
      (3,
          8,
          0,
          TopologyRequest(required='cloud.provider.com/topology-rack', preferred=None, slice_required=None, slice_size=None))],
     5)])
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.submit(jobs=[('a',
     False,
     [(1, 8, 0, None),
      (2,
          0,
          4,
          TopologyRequest(required='cloud.provider.com/topology-rack', preferred=None, slice_required=None, slice_size=None))],
     11),
 ('b',
     True,
     [(3,
          2,
          4,
          TopologyRequest(required='kubernetes.io/hostname', preferred=None, slice_required=None, slice_size=None))],
     27)])
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=1)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.submit(jobs=[('a',
     False,
     [(3,
          2,
          4,
          TopologyRequest(required=None, preferred='gangway.io/nvlink-island', slice_required=None, slice_size=None)),
      (3,
          1,
          16,
          TopologyRequest(required='gangway.io/nvlink-island', preferred=None, slice_required=None, slice_size=None))],
     1)])
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.submit(jobs=[('solo',
     False,
     [(1,
          8,
          4,
          TopologyRequest(required=None, preferred=None, slice_required='kubernetes.io/hostname', slice_size=1)),
      (3,
          1,
          1,
          TopologyRequest(required='cloud.provider.com/topology-rack', preferred=None, slice_required=None, slice_size=None))],
     30),
 ('a',
     False,
     [(2,
          2,
          1,
          TopologyRequest(required='cloud.provider.com/topology-rack', preferred=None, slice_required=None, slice_size=None))],
     20),
 ('c',
     True,
     [(1, 1, 16, None),
      (2,
          1,
          4,
          TopologyRequest(required=None, preferred=None, slice_required='kubernetes.io/hostname', slice_size=1))],
     30)])
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=12)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.apply_config(variant=0)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=2)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.apply_config(variant=0)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.submit(jobs=[('b',
     False,
     [(2,
          1,
          16,
          TopologyRequest(required=None, preferred=None, slice_required='kubernetes.io/hostname', slice_size=1))],
     11),
 ('solo', False, [(3, 1, 1, None), (3, 1, 4, None)], 6)])
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=32)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=10)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
state.advance(minutes=3)
state.every_event_keeps_quota_and_nodes_sound()
state.folding_again_gives_the_same_state()
log = state.sim.log
print(preemption_cycles(log))
for e in log:
    if e.subject() in ("w15", "w16") or type(e.data).__name__ in ("EvictionOrdered",):
        print(log_line(e, log[0].time_ms))
