"""`gangway demo`: the whole system on a simulated 8 × 8-GPU cluster with three teams."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import time
from importlib import resources
from pathlib import Path

from rich.console import Console

from gangway import stack
from gangway.events import catalogue as ev
from gangway.events.quantity import parse_milli
from gangway.events.resources import GPU, total_request
from gangway.events.state import State
from gangway.read.describe import IslandWatch
from gangway.read.reports import log_line, team_table

#: The canary comes this long after the night fills the cluster: before the night's evals end (15
#: minutes after they start), after which it would fit without taking GPUs back.
MORNING_AFTER_MS = 5 * 60_000
WALL_TIMEOUT_S = 160.0
#: The events the timeline shows (node and config events are summarised, binder steps folded).
TIMELINE = (ev.ConfigApplied, ev.WorkloadQueued, ev.WorkloadAdmitted, ev.PlacementDecided,
            ev.EvictionOrdered, ev.WorkloadEvicted, ev.WorkloadRunning, ev.WorkloadFinished)


def demo_file(name: str) -> str:
    return str(resources.files("gangway.demo") / name)


def _all_done(state: State, expected: int) -> bool:
    done = [wl for wl in state.workloads.values() if wl.phase == "finished"]
    return len(state.workloads) >= expected and len(done) == len(state.workloads)


async def _filled_at(bootstrap: str, room: int, deadline: float, tick) -> int:
    """The cluster time at which the running workloads first leave less than ``room`` GPUs
    (milli) free, found by following the log event by event (a reader polling the log now and
    then misses a short full spell on a busy machine)."""
    from gangway.adapters.kafka import log_fetches
    from gangway.events.fold import apply
    state = State()
    async with contextlib.aclosing(log_fetches(bootstrap, idle_ms=100)) as fetches:
        async for envs, _, _ in fetches:
            for env in envs:
                apply(state, env)
                if isinstance(env.data, ev.WorkloadRunning) and _free_gpus(state) < room:
                    return env.time_ms
            tick()
            if time.monotonic() > deadline:
                raise TimeoutError("demo: timed out waiting for the night to fill the cluster")
    raise AssertionError("unreachable: the log is followed forever")


def _free_gpus(state: State) -> int:
    held = sum(total_request(wl.spec.pod_sets).get(GPU, 0) for wl in state.workloads.values() if wl.phase == "running")
    return sum(node.allocatable.get(GPU, 0) for node in state.nodes.values()) - held


def _wait(bootstrap: str, until, deadline: float, what: str, tick=lambda: None) -> tuple[State, list[ev.Envelope]]:
    while True:
        tick()
        state, envs = asyncio.run(stack.read_state(bootstrap))
        if until(state, envs):
            return state, envs
        if time.monotonic() > deadline:
            from gangway.read.reports import status_tables
            for table in status_tables(state):
                Console(stderr=True).print(table)
            raise TimeoutError(f"demo: timed out waiting for {what}")
        time.sleep(0.5)


def run_demo(console: Console, time_scale: float = 120.0, out: str = "out/demo-log.jsonl",
             console_socket: socket.socket | None = None) -> int:
    """The demo's story; with ``console_socket`` (listening: ``console.app.listen``), the stack and
    the web console on it then keep running until Ctrl-C (the address is printed)."""
    from gangway.contract import load_contract_file
    from gangway.services.submission.manifests import load_jobs

    sdir = Path(os.environ.get("GANGWAY_STATE_DIR", ".gangway")) / "demo"
    shutil.rmtree(sdir, ignore_errors=True)
    os.environ["GANGWAY_STATE_DIR"] = str(sdir)
    night = load_jobs(Path(demo_file("jobs-night.yaml")).read_text(), "jobs-night.yaml")
    morning = load_jobs(Path(demo_file("jobs-morning.yaml")).read_text(), "jobs-morning.yaml")
    contract = load_contract_file(demo_file("contract.yaml"))
    started = time.monotonic()
    deadline = started + WALL_TIMEOUT_S
    console.print(f"[bold]gangway demo[/bold]: 8 nodes × 8 GPUs, teams serving / research / batch, time × {time_scale:g}")
    with stack.Stack(cluster_file=demo_file("cluster.yaml"), time_scale=time_scale) as running:
        bootstrap = running.bootstrap
        running.wait_ready()
        t0 = running.clock.now_ms()
        asyncio.run(stack.publish_config(bootstrap, contract, "gangway/demo/contract.yaml", t0))
        _wait(bootstrap, lambda s, e: len(s.nodes) == 8, deadline, "the binder's nodes", running.supervise_once)
        asyncio.run(stack.publish_jobs(bootstrap, night))
        console.print(f"submitted {len(night)} jobs for the night; the morning's canary comes {MORNING_AFTER_MS // 60_000} "
                      "minutes after they fill the cluster (cluster time)")
        # The canary comes once the night leaves no room for it, so that it has to take its GPUs
        # back: measured from the log, not from the wall clock, which a busy machine stretches.
        canary = sum(ps.count * parse_milli(ps.resources.get(GPU, 0)) for job in morning for ps in job.pod_sets)
        filled_ms = asyncio.run(_filled_at(bootstrap, canary, deadline, running.supervise_once))
        time.sleep(running.clock.wall_seconds_until(filled_ms + MORNING_AFTER_MS))
        asyncio.run(stack.publish_jobs(bootstrap, morning))
        expected = len(night) + len(morning)
        state, envs = _wait(bootstrap, lambda s, e: _all_done(s, expected), deadline, "every job to finish",
                            running.supervise_once)
        from gangway.events.money import last_finish_period
        from gangway.services.accounting.billing import log_identity
        from gangway.services.accounting.ledger import Ledger, default_url
        ledger = Ledger(default_url(str(sdir)))
        log_id = log_identity(envs[0])
        # The night's last period is invoiced once it has settled (the binder ticks the log to that
        # time): the period of the last finish, which the binder ticks for (``billing_deadline``).
        last_period, cut_at = last_finish_period(state)
        state, envs = _wait(bootstrap, lambda s, e: s.time_ms >= cut_at, deadline,
                            "the billing period's end on the log", running.supervise_once)
        _wait_ledger(ledger, log_id, envs, deadline)
        rows = ledger.team_usage(log_id)
        issued = _wait_invoices(ledger, log_id, last_period, deadline)
        ledger.close()
        ok = _tell(console, envs, rows, issued, out, started)
        if console_socket is not None:
            _keep_console(console, running, console_socket)
    return 0 if ok else 1


def _tell(console: Console, envs: list[ev.Envelope], rows, issued, out: str, started: float) -> bool:
    """The demo's printout: timeline, team usage, an explained eviction, the money, the seed story, the replay."""
    from gangway.read.logfile import write_export
    write_export(envs, out)
    console.rule("timeline (cluster time)")
    watch = IslandWatch()
    for env in envs:
        islands = watch.see(env)
        if isinstance(env.data, TIMELINE):
            print(log_line(env, envs[0].time_ms, islands))
    console.print(team_table(rows))
    _explain_first_eviction(console, envs, out)
    _money(console, envs, issued, out)
    from gangway.demo import seed
    console.rule("topology: the seed story, greedy placement beside gangway's (in memory)")
    for line in seed.lines():
        print(line)
    from gangway.services.audit.replay import verify
    report = verify(envs)
    console.print(f"{len(envs)} events written to {out}; replay reproduced {report.verified} of {report.decisions} "
                  f"decisions ({report.superseded} superseded); `gangway replay {out}` checks it again")
    console.print(f"demo took {time.monotonic() - started:.1f} s of wall time")
    return report.ok


def _keep_console(console: Console, running: stack.Stack, sock: socket.socket) -> None:
    """Run ``gangway console`` on the demo's stack and listening socket until Ctrl-C, supervising
    the stack meanwhile."""
    import signal
    import sys
    import urllib.request

    from gangway.adapters import processes
    port = sock.getsockname()[1]
    env = dict(os.environ, GANGWAY_KAFKA=running.bootstrap)
    proc = processes.spawn([sys.executable, "-m", "gangway", "console", "--fd", str(sock.fileno())],
                           log_path=stack.state_dir() / "logs" / "console.log", env=env, pass_fds=(sock.fileno(),))
    url = f"http://127.0.0.1:{port}/"
    stopped: list[bool] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.append(True))
    try:
        deadline = time.monotonic() + 30
        while not stopped:
            try:
                urllib.request.urlopen(url + "readyz", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the console did not start; see {stack.state_dir() / 'logs' / 'console.log'}")
                time.sleep(0.2)
        console.print(f"[bold]gangway console at {url}[/bold] (metrics at {url}metrics); the stack keeps running: Ctrl-C stops both")
        while not stopped and proc.poll() is None:
            running.supervise_once()
            time.sleep(0.5)
    finally:
        processes.stop([proc], grace_s=10)
        console.print("stopping…")


def _explain_first_eviction(console: Console, envs: list[ev.Envelope], out: str) -> None:
    """What `gangway explain` says about the first workload the demo preempted."""
    from gangway.read.explain import explain
    victim = next((e.data.workload for e in envs if isinstance(e.data, ev.EvictionOrdered)), None)
    if victim is None:
        return
    console.rule(f"gangway explain {victim} --log {out}")
    for line in explain(envs, victim, forecast=False):
        print(line)


def _wait_ledger(ledger, log_id: str, envs: list[ev.Envelope], deadline: float) -> None:
    last = envs[-1].offset
    while ledger.position(log_id) < last:
        if time.monotonic() > deadline:
            raise TimeoutError("demo: timed out waiting for accounting")
        time.sleep(0.3)


def _wait_invoices(ledger, log_id: str, last_period: str, deadline: float) -> list:
    while True:
        issued = ledger.invoices(log_id)
        if any(i.period == last_period for i in issued):
            return issued
        if time.monotonic() > deadline:
            raise TimeoutError("demo: timed out waiting for the period's invoices")
        time.sleep(0.3)


def _money(console: Console, envs: list[ev.Envelope], issued: list, out: str) -> None:
    """The night priced: per team, the canary's preemption waste, the idle flags, the invoices
    accounting issued — and the same invoices derived again from the log."""
    from gangway.read import money
    from gangway.services.accounting.billing import books_of
    books = books_of(envs)
    charges = books.known()
    currency = books.state.contract.currency
    console.rule("money: the night at list prices (gangway showback)")
    console.print(money.figures_table(money.team_figures(charges), currency))
    canary = [e.data for e in envs if isinstance(e.data, ev.EvictionOrdered) and "canary" in e.data.preemptor]
    for order in canary:
        lost = [c for c in books.charges if c.workload == order.workload and c.work_lost_ms]
        waste = sum(c.waste_micros for c in lost)
        print(f"the canary's preemption waste: {order.workload} lost {order.work_lost_ms / 60_000:.1f} min of work "
              f"since its last checkpoint = {money.money(waste)} {currency} at list price (credited on its invoice)")
    flagged = [e for e in envs if isinstance(e.data, ev.WorkloadIdle)]
    teams = sorted({e.data.workload.split("/")[0] for e in flagged})
    for team in teams:
        names = [e.data.workload for e in flagged if e.data.workload.startswith(team + "/")]
        fig = next(f for f in money.team_figures(charges) if f.team == team)
        ratio = "—" if fig.busy_ratio is None else f"{fig.busy_ratio:.0%}"
        print(f"idle GPUs: team {team} held {money.hours(fig.allocated_gpu_milli_ms)} GPU-hours with SMs {ratio} busy; "
              f"{len(names)} workload(s) flagged idle ({flagged[0].data.rule}), e.g. {names[0]}")
    console.print(money.invoices_table(issued))
    again = [i for i in books.issued if i.period in {x.period for x in issued}]
    same = [a.invoice_id for a in again] == [i.invoice_id for i in sorted(issued, key=lambda i: (i.period, i.team))] \
        and all(a == i for a, i in zip(again, sorted(issued, key=lambda i: (i.period, i.team))))
    print(f"{len(issued)} invoice(s) issued on gangway.invoices by accounting; derived again from the log: "
          f"{'identical' if same else 'DIFFERENT'}")
    base = Path(out).with_suffix("")
    Path(f"{base}-showback.html").write_text(money.showback_html(
        books, min(c.start_ms for c in charges), books.state.time_ms, 5 * 60_000, "gangway demo: showback"))
    Path(f"{base}-focus.csv").write_text(money.focus_csv([i for i in issued if i.period == issued[-1].period]))
    print(f"showback with charts: {base}-showback.html; FOCUS 1.0 export of the last hour: {base}-focus.csv; "
          f"`gangway invoice --period {issued[-1].period} --log {out}` prints its invoices again")
