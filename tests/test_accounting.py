"""Accounting: usage intervals from the fold, and the SQL ledger (SQLite and PostgreSQL)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable

import msgspec
import pytest
from sqlalchemy import create_engine

from gangway.events import catalogue as ev
from gangway.events.contract import ClusterQueue, Contract, FlavorQuotas, LocalQueue, Quota, ResourceFlavor
from gangway.events.fold import apply
from gangway.events.resources import GPU, total_request
from gangway.events.state import HOLDS_NODES, State
from gangway.services.accounting.ledger import MILLI_GPU_MS_PER_HOUR, Ledger, default_url, metadata
from gangway.services.accounting.policy import Interval, open_allocations, usage_effects


CONTRACT = Contract(
    flavors=[ResourceFlavor(name="h100")],
    cluster_queues=[
        ClusterQueue(
            name="cq-main",
            flavors=[FlavorQuotas(flavor="h100", resources={GPU: Quota(nominal=64_000), "cpu": Quota(nominal=1_000_000)})],
        )
    ],
    local_queues=[LocalQueue(namespace=team, name="main", cluster_queue="cq-main") for team in ("team-a", "team-b")],
)


# --- a log built by folding real envelopes -------------------------------------------------------


@dataclass
class Log:
    """Appends envelopes, folds them, and keeps what ``usage_effects`` said about each offset.

    Every append also checks that the policy agrees with the fold: the allocations it reports as
    ended are exactly the (workload, attempt) pairs that held nodes before and do not after.
    """

    prefix: str = "ev"
    state: State = field(default_factory=State)
    envelopes: list[ev.Envelope] = field(default_factory=list)
    effects: dict[int, list[Interval]] = field(default_factory=dict)

    def add(self, data, at_ms: int, event_id: str | None = None) -> ev.Envelope:
        offset = len(self.envelopes)
        env = ev.Envelope(id=event_id or f"{self.prefix}-{offset}", source="test", time_ms=at_ms, data=data, offset=offset)
        held = _held(self.state)
        effects = usage_effects(self.state, env)
        apply(self.state, env)
        assert {(iv.workload, iv.attempt) for iv in effects} == held - _held(self.state)
        self.envelopes.append(env)
        self.effects[offset] = effects
        return env

    @property
    def intervals(self) -> list[Interval]:
        return [iv for offset in sorted(self.effects) for iv in self.effects[offset]]

    # fluent steps -------------------------------------------------------------------------------

    def setup(self, nodes: dict[str, int], at_ms: int = 0) -> Log:
        self.add(ev.ConfigApplied(contract=CONTRACT, digest="d1"), at_ms)
        for name, gpus in nodes.items():
            self.add(ev.NodeObserved(node=name, allocatable={GPU: gpus * 1000, "cpu": 128_000}), at_ms)
        return self

    def queue(self, name: str, team: str, gpu_milli: int, pods: int = 1, at_ms: int = 0) -> Log:
        pod_set = ev.PodSet(name="main", count=pods, resources={GPU: gpu_milli, "cpu": 4000})
        self.add(ev.WorkloadQueued(
            workload=name, namespace=team, queue="main", cluster_queue="cq-main", priority_class="batch",
            priority=0, kind="Job", pod_sets=[pod_set],
        ), at_ms)
        return self

    def admit(self, name: str, at_ms: int = 0) -> Log:
        usage = total_request(self.state.workloads[name].spec.pod_sets)
        self.add(ev.WorkloadAdmitted(
            workload=name, cluster_queue="cq-main", usage=usage, borrowed={}, based_on=self.state.offset,
        ), at_ms)
        return self

    def place(self, name: str, nodes: dict[str, int], at_ms: int = 0) -> Log:
        assignments = [ev.PodAssignment(pod_set="main", node=node, count=n) for node, n in nodes.items()]
        self.add(ev.PlacementDecided(workload=name, assignments=assignments, based_on=self.state.offset), at_ms)
        return self

    def bind(self, name: str, at_ms: int = 0) -> Log:
        self.add(ev.WorkloadBound(workload=name, attempt=self.state.workloads[name].attempt), at_ms)
        return self

    def run(self, name: str, at_ms: int) -> Log:
        self.add(ev.WorkloadRunning(workload=name, attempt=self.state.workloads[name].attempt), at_ms)
        return self

    def start(self, name: str, team: str, gpu_milli: int, nodes: dict[str, int], at_ms: int) -> Log:
        """Queue, admit, place, bind and run ``name`` (pods per node in ``nodes``), running at ``at_ms``."""
        self.queue(name, team, gpu_milli, pods=sum(nodes.values()), at_ms=at_ms).admit(name, at_ms)
        return self.place(name, nodes, at_ms).bind(name, at_ms).run(name, at_ms)

    def restart(self, name: str, nodes: dict[str, int], at_ms: int) -> Log:
        """Admit, place, bind and run an evicted (requeued) workload again."""
        return self.admit(name, at_ms).place(name, nodes, at_ms).bind(name, at_ms).run(name, at_ms)

    def finish(self, name: str, at_ms: int, attempt: int | None = None, event_id: str | None = None) -> Log:
        attempt = self.state.workloads[name].attempt if attempt is None else attempt
        self.add(ev.WorkloadFinished(workload=name, attempt=attempt), at_ms, event_id=event_id)
        return self

    def order_eviction(self, name: str, at_ms: int) -> Log:
        self.add(ev.EvictionOrdered(workload=name, preemptor="other", based_on=self.state.offset, grace_ms=0), at_ms)
        return self

    def evicted(self, name: str, at_ms: int, attempt: int | None = None) -> Log:
        attempt = self.state.workloads[name].attempt if attempt is None else attempt
        self.add(ev.WorkloadEvicted(workload=name, attempt=attempt, preemptor="other"), at_ms)
        return self

    def remove_node(self, node: str, at_ms: int) -> Log:
        self.add(ev.NodeRemoved(node=node), at_ms)
        return self


def _held(state: State) -> set[tuple[str, int]]:
    return {(name, wl.attempt) for name, wl in state.workloads.items() if wl.phase in HOLDS_NODES}


def _summary(intervals: list[Interval]) -> list[tuple]:
    return [(iv.workload, iv.attempt, iv.team, iv.outcome, iv.start_ms, iv.end_ms, iv.gpu_milli) for iv in intervals]


# --- usage_effects -------------------------------------------------------------------------------

NODES = {"node-a": 8, "node-b": 8}
Case = tuple[str, Callable[[Log], Log], list[tuple]]

CASES: list[Case] = [
    (
        "a finished workload is charged from running to finish",
        lambda log: log.start("a", "team-a", 2000, {"node-a": 1}, 2_000).finish("a", 5_000),
        [("a", 0, "team-a", "finished", 2_000, 5_000, 2000)],
    ),
    (
        "an evicted workload is charged up to the report of its eviction",
        lambda log: log.start("a", "team-a", 1000, {"node-a": 1}, 2_000).order_eviction("a", 4_000).evicted("a", 6_000),
        [("a", 0, "team-a", "evicted", 2_000, 6_000, 1000)],
    ),
    (
        "a gang is charged for every pod on every node",
        lambda log: log.start("g", "team-b", 2000, {"node-a": 2, "node-b": 2}, 1_000).finish("g", 2_000),
        [("g", 0, "team-b", "finished", 1_000, 2_000, 8000)],
    ),
    (
        "a stale report about an old attempt costs nothing",
        lambda log: (
            log.start("a", "team-a", 1000, {"node-a": 1}, 1_000).evicted("a", 3_000)
            .restart("a", {"node-b": 1}, 4_000).finish("a", 5_000, attempt=0).finish("a", 7_000)
        ),
        [("a", 0, "team-a", "evicted", 1_000, 3_000, 1000), ("a", 1, "team-a", "finished", 4_000, 7_000, 1000)],
    ),
    (
        "a re-delivered WorkloadFinished costs nothing",
        lambda log: log.start("a", "team-a", 1000, {"node-a": 1}, 1_000).finish("a", 2_000).finish("a", 2_500),
        [("a", 0, "team-a", "finished", 1_000, 2_000, 1000)],
    ),
    (
        "a WorkloadFinished re-delivered with its own id costs nothing",
        lambda log: log.start("a", "team-a", 1000, {"node-a": 1}, 1_000).finish("a", 2_000, event_id="fin").finish("a", 2_000, event_id="fin"),
        [("a", 0, "team-a", "finished", 1_000, 2_000, 1000)],
    ),
    (
        "a re-delivered WorkloadEvicted costs nothing",
        lambda log: log.start("a", "team-a", 1000, {"node-a": 1}, 1_000).evicted("a", 2_000).evicted("a", 2_500, attempt=0),
        [("a", 0, "team-a", "evicted", 1_000, 2_000, 1000)],
    ),
    (
        "removing a node ends every allocation on it and no other",
        lambda log: (
            log.start("a", "team-a", 1000, {"node-a": 1}, 1_000).start("b", "team-b", 2000, {"node-a": 1, "node-b": 1}, 2_000)
            .start("c", "team-b", 4000, {"node-b": 1}, 3_000).remove_node("node-a", 10_000)
        ),
        [("a", 0, "team-a", "node_lost", 1_000, 10_000, 1000), ("b", 0, "team-b", "node_lost", 2_000, 10_000, 4000)],
    ),
    (
        "removing a node nobody observed costs nothing",
        lambda log: log.start("a", "team-a", 1000, {"node-a": 1}, 1_000).remove_node("node-z", 2_000),
        [],
    ),
    (
        "a workload evicted before it ran is recorded with zero length",
        lambda log: log.queue("a", "team-a", 1000).admit("a").place("a", {"node-a": 1}).bind("a").evicted("a", 3_000),
        [("a", 0, "team-a", "evicted", 3_000, 3_000, 1000)],
    ),
    (
        "a finish reported for a placed, unbound workload is ignored by the fold and costs nothing",
        lambda log: log.queue("a", "team-a", 1000).admit("a").place("a", {"node-a": 1}).finish("a", 3_000),
        [],
    ),
    (
        "an eviction ordered before placement costs nothing",
        lambda log: log.queue("a", "team-a", 1000).admit("a").order_eviction("a", 3_000),
        [],
    ),
    (
        "a report dated before the start gives a zero-length interval, not a negative one",
        lambda log: log.start("a", "team-a", 1000, {"node-a": 1}, 5_000).finish("a", 4_000),
        [("a", 0, "team-a", "finished", 4_000, 4_000, 1000)],
    ),
]


@pytest.mark.parametrize("name, scenario, expected", CASES, ids=[c[0] for c in CASES])
def test_usage_effects(name: str, scenario: Callable[[Log], Log], expected: list[tuple]) -> None:
    log = scenario(Log().setup(NODES))
    assert _summary(log.intervals) == expected


def test_interval_carries_offset_queue_class_and_cpu() -> None:
    log = Log().setup(NODES).start("a", "team-a", 1000, {"node-a": 2}, 1_000).finish("a", 3_000)
    (iv,) = log.intervals
    assert (iv.offset, iv.cluster_queue, iv.priority_class) == (log.envelopes[-1].offset, "cq-main", "batch")
    assert (iv.cpu_milli, iv.gpu_milli_ms, iv.cpu_milli_ms) == (8000, 2000 * 2_000, 8000 * 2_000)


def test_only_work_lost_to_preemption_or_a_lost_node_is_waste_not_a_requeue_nobody_ordered() -> None:
    """A gang the binder requeued (it was not whole again in time: its own pod failed) lost its work
    to itself, as a crash does; a preemption's, a lost node's and a drained node's loss is not the
    team's doing."""
    log = Log().setup(NODES).start("mine", "team-a", 1000, {"node-a": 1}, 1_000).evicted("mine", 5_000)
    log.start("ordered", "team-a", 1000, {"node-a": 1}, 1_000)
    log.add(ev.EvictionOrdered(workload="ordered", preemptor="other", based_on=log.state.offset, grace_ms=0,
                               work_lost_ms=3_000), 4_000)
    log.evicted("ordered", 5_000)
    log.start("node", "team-b", 1000, {"node-b": 1}, 2_000).remove_node("node-b", 6_000)
    # drained: its node cordoned, its pods evicted, the gang requeued by the binder (nobody ordered it)
    log.setup({"node-c": 8}, 1_000).start("drained", "team-b", 1000, {"node-c": 1}, 1_000)
    log.add(ev.NodeObserved(node="node-c", allocatable={GPU: 8000, "cpu": 128_000}, unavailable="cordoned"), 2_000)
    log.evicted("drained", 7_000)
    lost = {iv.workload: (iv.outcome, iv.waste_ms) for iv in log.intervals}
    assert lost["mine"] == ("evicted", 0)
    assert lost["ordered"] == ("evicted", 3_000)
    assert lost["node"] == ("node_lost", 4_000)
    assert lost["drained"] == ("node_lost", 6_000)


def test_open_allocations_report_running_workloads_up_to_now() -> None:
    log = Log().setup(NODES).start("a", "team-a", 1000, {"node-a": 1}, 1_000).start("done", "team-a", 1000, {"node-a": 1}, 1_000)
    log.finish("done", 2_000).queue("waiting", "team-b", 1000).admit("waiting").place("waiting", {"node-b": 1})
    opened = open_allocations(log.state, 9_000)
    assert _summary(opened) == [("a", 0, "team-a", "open", 1_000, 9_000, 1000)]
    assert opened[0].offset == log.state.offset


# --- the ledger ----------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/state/accounting.db"
        return
    url = request.getfixturevalue("pg_url")
    yield url
    engine = create_engine(url)
    metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture
def open_ledger(db_url):
    """Opens ledgers on the test's database and closes them all at the end."""
    opened: list[Ledger] = []

    def _open() -> Ledger:
        opened.append(Ledger(db_url))
        return opened[-1]

    yield _open
    for ledger in opened:
        ledger.close()


def feed(ledger: Ledger, log_id: str, log: Log, start: int = 0, batch: int = 1) -> int:
    """Record ``log`` from offset ``start`` in batches, as the shell would; returns rows written."""
    written = 0
    offsets = [env.offset for env in log.envelopes if env.offset >= start]
    for i in range(0, len(offsets), batch):
        chunk = offsets[i:i + batch]
        written += ledger.record(log_id, chunk[-1], [iv for o in chunk for iv in log.effects[o]])
    return written


def busy_log(prefix: str = "ev") -> Log:
    """Two teams, odd quantities: a finish, an eviction and a restart, a node loss, one still running."""
    log = Log(prefix=prefix).setup(NODES, at_ms=1_000)
    log.start("a", "team-a", 1500, {"node-a": 1}, 1_001).start("b", "team-b", 250, {"node-b": 3}, 1_500)
    log.evicted("b", 2_777).restart("b", {"node-a": 3}, 3_000).start("c", "team-a", 1000, {"node-b": 1}, 3_100)
    log.finish("a", 4_601).remove_node("node-a", 5_003)
    log.finish("c", 7_654).restart("b", {"node-b": 1}, 8_000)
    return log


# gpu_milli * duration_ms of each allocation busy_log ends (b's last attempt is still running).
EXPECTED_MILLI_MS = {
    "team-a": 1500 * (4_601 - 1_001) + 1000 * (7_654 - 3_100),
    "team-b": 750 * (2_777 - 1_500) + 750 * (5_003 - 3_000),
}


def totals(ledger: Ledger, log_id: str | None = None) -> list[tuple]:
    return [tuple(row) for row in ledger.team_usage(log_id)]


def expected_totals(times: int = 1) -> list[tuple]:
    workloads = {"team-a": 2, "team-b": 1}
    return [(team, times * ms / MILLI_GPU_MS_PER_HOUR, workloads[team]) for team, ms in sorted(EXPECTED_MILLI_MS.items())]


def test_busy_log_ends_the_allocations_it_should() -> None:
    assert [(iv.workload, iv.attempt, iv.outcome) for iv in busy_log().intervals] == [
        ("b", 0, "evicted"), ("a", 0, "finished"), ("b", 1, "node_lost"), ("c", 0, "finished"),
    ]


def test_team_totals_are_right_to_the_milli(open_ledger) -> None:
    ledger = open_ledger()
    feed(ledger, "log-1", busy_log())
    assert totals(ledger, "log-1") == expected_totals()
    per_workload = {(w.workload, w.attempts, w.gpu_milli_ms) for w in ledger.workload_usage("log-1")}
    assert per_workload == {
        ("a", 1, 1500 * 3_600), ("b", 2, 750 * 1_277 + 750 * 2_003), ("c", 1, 1000 * 4_554),
    }
    assert [w.workload for w in ledger.workload_usage(team="team-a")] == ["a", "c"]


def test_recording_twice_does_not_double_count(open_ledger) -> None:
    ledger, log = open_ledger(), busy_log()
    assert feed(ledger, "log-1", log) == 4
    assert feed(ledger, "log-1", log) == 0
    assert totals(ledger) == expected_totals()
    assert ledger.position("log-1") == log.envelopes[-1].offset


def test_an_overlapping_batch_writes_only_what_is_new(open_ledger) -> None:
    ledger, log = open_ledger(), busy_log()
    feed(ledger, "log-1", log, batch=7)
    middle = ledger.position("log-1") // 2
    feed(ledger, "log-1", log, start=middle, batch=5)
    assert totals(ledger) == expected_totals()


def test_a_restart_resumes_at_the_right_position(open_ledger) -> None:
    log = busy_log()
    first = open_ledger()
    cut = log.envelopes[len(log.envelopes) // 2].offset
    feed(first, "log-1", Log(envelopes=log.envelopes[: cut + 1], effects=log.effects), batch=3)
    first.close()
    second = open_ledger()
    assert second.position("log-1") == cut
    feed(second, "log-1", log, start=second.position("log-1") + 1, batch=3)
    assert totals(second) == expected_totals()


def test_a_replay_of_the_whole_log_writes_the_same_totals(open_ledger) -> None:
    ledger, log = open_ledger(), busy_log()
    feed(ledger, "log-1", log, batch=4)
    before = totals(ledger)
    assert feed(open_ledger(), "log-1", log, start=0, batch=1) == 0
    assert totals(ledger) == before == expected_totals()


def test_two_log_ids_are_kept_apart(open_ledger) -> None:
    ledger = open_ledger()
    feed(ledger, "log-1", busy_log("first"))
    assert ledger.position("log-2") == -1, "a fresh log (new first event id) starts from nothing"
    feed(ledger, "log-2", busy_log("second"), batch=2)
    assert totals(ledger, "log-1") == totals(ledger, "log-2") == expected_totals()
    assert [(team, hours) for team, hours, _ in totals(ledger)] == [(t, h) for t, h, _ in expected_totals(times=2)]
    assert [n for _, _, n in totals(ledger)] == [4, 2]
    assert [log_id for log_id, _ in ledger.logs()] == ["log-1", "log-2"]


def test_an_interval_past_the_recorded_offset_is_refused(open_ledger) -> None:
    ledger, log = open_ledger(), busy_log()
    (first, *_) = log.intervals
    with pytest.raises(ValueError):
        ledger.record("log-1", first.offset - 1, [first])
    assert ledger.position("log-1") == -1


def test_default_url_prefers_gangway_db(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("GANGWAY_DB", raising=False)
    assert default_url(str(tmp_path)) == f"sqlite:///{tmp_path}/accounting.db"
    monkeypatch.setenv("GANGWAY_DB", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    assert default_url(str(tmp_path)) == "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def test_the_policy_stays_pure() -> None:
    code = "import sys, gangway.services.accounting.policy; print(sorted(m for m in sys.modules if m.split('.')[0] in {'sqlalchemy', 'psycopg', 'aiokafka'}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_books_capacity_follows_nodes_and_contracts_like_a_full_recount():
    """The books keep the capacity node by node; after each event it equals ``capacity(state)``
    counted afresh: nodes observed, observed again with other GPUs or labels, removed, contracts
    that change which flavor a label means."""
    import random

    from builders import node
    from gangway.services.accounting.billing import Books, capacity

    rng = random.Random(7)
    two = Contract(flavors=[ResourceFlavor(name="a100", node_labels={"gpu": "a100"}), ResourceFlavor(name="plain")])
    one = Contract(flavors=[ResourceFlavor(name="h100", node_labels={"gpu": "h100"})])
    books, state = Books(), State()
    for offset in range(400):
        roll = rng.random()
        if roll < 0.05:
            c = rng.choice([two, one])
            data = ev.ConfigApplied(contract=c, digest=str(offset))
        elif roll < 0.25 and state.nodes:
            data = ev.NodeRemoved(node=rng.choice(sorted(state.nodes)))
        else:
            n = node(f"n{rng.randrange(12)}").gpus(rng.choice([0, 4, 8]))
            data = n.label("gpu", rng.choice(["a100", "h100", "t4"])).obj()
        env = ev.Envelope(id=f"e{offset}", source="gangway/binder", time_ms=offset, data=data, offset=offset)
        apply(state, env)
        books.after(state, env)
        if isinstance(data, (ev.NodeObserved, ev.NodeRemoved, ev.ConfigApplied)):
            assert books.changes[-1][1] == capacity(state), f"after event {offset}: {data}"


def test_a_preempted_attempt_loses_from_its_last_checkpoint_to_its_eviction_under_the_contract() -> None:
    """``Contract.credit_lost_at_exit``: the loss runs to the eviction, not to the order — a
    checkpoint saved in the grace period is counted, and so is the work done after the order."""
    def lost(at_exit: bool, checkpoint_ms: int | None) -> int:
        log = Log()
        log.add(ev.ConfigApplied(contract=msgspec.structs.replace(CONTRACT, credit_lost_at_exit=at_exit), digest="d1"), 0)
        log.add(ev.NodeObserved(node="node-a", allocatable={GPU: 8000, "cpu": 128_000}), 0)
        log.start("a", "team-a", 1000, {"node-a": 1}, 1_000)
        log.add(ev.EvictionOrdered(workload="a", preemptor="other", based_on=log.state.offset, grace_ms=30_000,
                                   work_lost_ms=3_000), 4_000)
        if checkpoint_ms is not None:
            log.add(ev.CheckpointSaved(workload="a", saved_ms=checkpoint_ms), checkpoint_ms)
        log.evicted("a", 10_000)
        (iv,) = log.intervals
        return iv.waste_ms
    assert lost(True, 9_000) == 1_000 and lost(True, None) == 9_000
    assert lost(False, 9_000) == lost(False, None) == 3_000  # a contract recorded before the field: the order's figure
