"""What people read: one line per event, the status tables, the team usage table."""

from __future__ import annotations

from collections import Counter

from rich.table import Table

from gangway.events import catalogue as ev
from gangway.events.codec import format_time
from gangway.events.freeindex import measure
from gangway.events.quantity import format_milli
from gangway.events.resources import GPU, by_resource, index_of
from gangway.events.state import State, handing_over
from gangway.read.describe import describe, gpus


def clock(ms: int) -> str:
    seconds = ms // 1000
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def log_line(env: ev.Envelope, t0_ms: int, islands: bool = True) -> str:
    """One line of ``gangway log``; ``islands``: does some node declare NVLink islands (``IslandWatch``)?"""
    return f"{env.offset:>6}  +{clock(env.time_ms - t0_ms)}  {type(env.data).__name__:<17} {describe(env, islands=islands)}"


def status_tables(state: State) -> list[Table]:
    queues = Table(title="ClusterQueues")
    for column in ("queue", "pending", "admitted", "running", "GPUs in use"):
        queues.add_column(column)
    phases: dict[str, Counter] = {cq.name: Counter() for cq in state.contract.cluster_queues} if state.contract else {}
    for wl in state.workloads.values():  # one pass, however many queues the contract has
        phases.setdefault(wl.spec.cluster_queue, Counter())[wl.phase] += 1
    idx = index_of(state.contract) if state.contract else None
    for cq in sorted(phases.keys() | state.usage.keys()):
        seen = phases.get(cq, Counter())
        count = lambda *names: str(sum(seen[name] for name in names))  # noqa: E731
        name = cq
        if idx is not None and cq not in idx.cluster_queues:
            name = f"{cq} (not in the contract)"
        elif idx is not None and cq in idx.stopped:
            name = f"{cq} (stopped: {idx.stopped[cq]})"
        queues.add_row(name, count("pending"), count("admitted", "placed", "bound"), count("running", "evicting"),
                       format_milli(by_resource(state.usage.get(cq, {})).get(GPU, 0)))
    running = Table(title="Running workloads")
    for column in ("workload", "queue", "priority", "GPUs", "phase", "nodes"):
        running.add_column(column)
    for name in state.active:
        wl = state.workloads[name]
        nodes = sorted({a.node for a in wl.placement.assignments}) if wl.placement else []
        running.add_row(name, wl.spec.cluster_queue, str(wl.spec.priority), gpus(wl.spec.pod_sets), wl.phase, ", ".join(nodes))
    pending = _pending_table(state)
    nodes = Table(title="Nodes")
    for column in ("node", "GPUs free", "GPUs total"):
        nodes.add_column(column)
    for name in sorted(state.nodes):
        node = state.nodes[name]
        nodes.add_row(name, format_milli(node.free.get(GPU, 0)), format_milli(node.allocatable.get(GPU, 0)))
    tables = [queues, running, pending, nodes, fragmentation_table(state)]
    idle = [wl.idle for _, wl in sorted(state.workloads.items()) if wl.idle is not None]
    if idle:
        flagged = Table(title="Idle GPUs (the contract's idle rule)")
        for column in ("workload", "GPUs", "SM active", "since", "rule"):
            flagged.add_column(column)
        for flag in idle:
            flagged.add_row(flag.workload, format_milli(flag.gpu_milli), f"{flag.sm_active / 10:g} %", format_time(flag.since_ms),
                            flag.rule)
        tables.append(flagged)
    return tables


#: Above this many pending workloads, status shows reasons but skips the forecast of start times.
FORECAST_PENDING_MAX = 200


def _pending_table(state: State) -> Table:
    from gangway.read.explain import pending_report

    report = pending_report(state, forecast=len(state.pending) <= FORECAST_PENDING_MAX)
    table = Table(title="Pending workloads")
    for column in ("workload", "queue", "position (LQ/CQ)", "why", "estimated start"):
        table.add_column(column)
    for name, p in report.items():
        wl = state.workloads[name]
        eta = "-" if p.eta_ms is None else f"+{clock(p.eta_ms - state.time_ms)}"
        table.add_row(name, wl.spec.cluster_queue, f"{p.lq_position}/{p.cq_position}", f"{p.code}: {p.reason}", eta)
    return table


def fragmentation_table(state: State) -> Table:
    """Whole GPUs free in one piece per level, and how many common shapes still fit."""
    f = measure(state.free_index)
    table = Table(title="Free GPUs in one piece (fragmentation)")
    for column in ("free", "largest island", "largest node", "largest rack", "largest block",
                   *(f"{k}-GPU pods that fit" for k in f.fits)):
        table.add_column(column)
    table.add_row(*(str(v) for v in (f.gpus_free, f.largest_island, f.largest_node, f.largest_rack,
                                     f.largest_block, *f.fits.values())))
    return table


def team_table(rows) -> Table:
    table = Table(title="GPU-hours allocated per team")
    table.add_column("team")
    table.add_column("GPU-hours", justify="right")
    table.add_column("workloads", justify="right")
    for row in rows:
        table.add_row(row.team, f"{row.gpu_hours:.2f}", str(row.workloads))
    return table


def holding_intervals(envs, phases: tuple[str, ...], hand_over: bool = False):
    """Fold a log and yield (workload, from ms, to ms) for every stretch a workload spent in
    ``phases`` (quota held: HOLDS_QUOTA; nodes held: HOLDS_NODES). With ``hand_over``, a hand-over's
    stretch starts once the work it takes over has gone: until then that work's stretch counts the
    same quota (``WorkloadAdmitted.after``)."""
    from gangway.events.fold import apply
    state = State()
    since: dict[str, int] = {}
    handing: set[str] = set()  # hand-overs in ``phases`` whose work taken over is still there
    for env in envs:
        name = getattr(env.data, "workload", None)
        apply(state, env)
        if handing:
            for other in [n for n in handing if not handing_over(state, state.workloads[n])]:
                handing.discard(other)
                since.setdefault(other, env.time_ms)
        wl = state.workloads.get(name) if name else None
        if wl is None:
            continue
        if wl.phase in phases:
            if name in since or name in handing:
                continue
            if hand_over and handing_over(state, wl):
                handing.add(name)
            else:
                since[name] = env.time_ms
        elif name in since:
            yield wl, since.pop(name), env.time_ms
        else:
            handing.discard(name)  # (it left before the work it takes over did)
