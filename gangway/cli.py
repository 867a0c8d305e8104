"""The `gangway` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import signal
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from gangway import stack
from gangway.adapters.kafka import BrokerUnreachable
from gangway.benchmarks import cli as benchmarks_cli
from gangway.benchmarks.results import ReferenceDataMissing
from gangway.read.logfile import LogFileError, read_export, write_export

console = Console(highlight=False)


def _money_log_options(s) -> None:
    """--log and --unchecked of the commands that read money off a log (invoice, export, showback)."""
    s.add_argument("--log", help="an exported log (default: the broker's log); audited first (as `gangway replay`), "
                   "refused when it does not pass")
    s.add_argument("--unchecked", action="store_true", help="read --log even if it fails the audit (a warning says so)")


def _warn(line: str) -> None:
    """A warning line, whole (never wrapped: one line to grep), in yellow on a terminal."""
    console.print(f"[yellow]{escape(line)}[/yellow]", highlight=False, soft_wrap=True)


def _bootstrap() -> str:
    return stack.bootstrap_of_running_stack()


def cmd_broker(args) -> int:
    import gangway.adapters.kafka as kafka
    if args.kafka == "apache":
        from gangway.adapters.apache_kafka import ApacheKafka, kafka_version
        console.print(f"starting Apache Kafka {kafka_version()} (KRaft, one node; data in a temporary directory)…")
        broker = ApacheKafka(port=args.port)
    else:
        from gangway.adapters.broker import EmbeddedBroker
        broker = EmbeddedBroker(port=args.port)
    with broker:
        asyncio.run(kafka.ensure_topics(broker.bootstrap))
        console.print(f"broker ready at {broker.bootstrap} (topics created); Ctrl-C stops it")
        _wait_for_signal()
    return 0


def cmd_acls(args) -> int:
    from gangway.adapters import kafka, kafka_acls
    tenants = {}
    for item in args.tenant:
        namespace, sep, principal = item.partition("=")
        if not sep or not namespace or not principal:
            raise SystemExit(f"gangway: --tenant {item!r}: expected NAMESPACE=PRINCIPAL")
        tenants[namespace] = principal
    acls = kafka_acls.acl_model(args.service, args.admin, tenants)
    for acl in acls:
        print(acl)
    if args.apply:
        created = kafka_acls.apply_acls(_bootstrap(), acls, sorted(tenants), kafka.settings().rdkafka_config())
        console.print(f"{len(acls)} ACLs applied; topics created: {', '.join(created) or 'none'}"
                      + ("; restart the submission service to read new tenant topics" if created else ""))
    return 0


def _wait_for_signal() -> None:
    stopped = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.append(True))
    while not stopped:
        time.sleep(0.2)


def cmd_service(args) -> int:
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.name} %(levelname)s %(message)s")
    default_runtime_ms = int(args.default_runtime * 1000) if args.default_runtime else None
    pending = None
    if args.kubernetes:
        from gangway.read.explain import pending_report
        pending = pending_report
    service = stack.build_service(args.name, _bootstrap(), args.cluster, default_runtime_ms, _kubernetes(args), pending)
    stack.run_service(service)
    return 0


def _kubernetes(args) -> dict | None:
    """--kubernetes [--kubeconfig F] [--context C] (in-cluster config when in a pod and no file is named)."""
    if not getattr(args, "kubernetes", False):
        return None
    backoff = {"bind-backoff": args.bind_backoff, "bind-backoff-max": args.bind_backoff_max,
               "bind-backoff-limit": args.bind_backoff_limit, "pods-ready-timeout": args.pods_ready_timeout}
    webhook = {"webhook-port": args.webhook_port or None, "webhook-service": args.webhook_service,
               "webhook-configuration": args.webhook_configuration, "webhook-cert-dir": args.webhook_cert_dir,
               "webhook-host": args.webhook_host}
    return {"kubeconfig": args.kubeconfig, "context": args.context,
            **{k: str(v) for k, v in {**backoff, **webhook}.items() if v is not None}}


def _load_contract(path: str):
    """The contract of a file, its warnings printed (what Kueue would act on and gangway will not,
    or a kind it does not know: a misspelt ClusterQueue is named, not left to look undefined);
    every problem printed and exit 2 when it cannot be used (a file that is not UTF-8 is one such
    problem). Every command that reads a contract file reads it here, as `config validate` does
    (``read_contract_file``); each problem is one line, never wrapped."""
    from gangway.contract.kueue import ConfigError, read_contract_file
    try:
        contract, warnings = read_contract_file(path)
    except ConfigError as exc:
        for problem in exc.problems:
            console.print(f"[red]{escape(str(problem))}[/red]", highlight=False, soft_wrap=True)
        warnings = exc.warnings
        contract = None
    for warning in warnings:
        _warn(str(warning))
    if contract is None:
        raise SystemExit(2)
    return contract


def cmd_up(args) -> int:
    contract = _load_contract(args.config) if args.config else None
    if args.kubernetes and args.cluster:
        console.print("[red]--cluster (a simulated cluster) and --kubernetes (a real one) exclude each other[/red]")
        return 2
    if args.cluster:  # the binder's file: one it cannot read stops `up` here, before anything starts (as dry-run)
        from gangway.services.binder.cluster import read_cluster_file
        read_cluster_file(args.cluster)
    if not args.cluster and not args.kubernetes:
        console.print("[yellow]no --cluster FILE (a simulated cluster of its Node objects, e.g. gangway/demo/cluster.yaml) "
                      "and no --kubernetes: the cluster keeps the nodes already on the log, none on a new state "
                      "directory, and no job runs until some are reported[/yellow]")
    with stack.Stack(cluster_file=args.cluster, kubernetes=_kubernetes(args), time_scale=args.time_scale) as running:
        if contract is not None:
            asyncio.run(stack.publish_config(running.bootstrap, contract, args.config, running.clock.now_ms()))
        running.wait_ready()
        # The embedded broker refuses idempotent producers: a shell that takes this line takes that too.
        embedded = " GANGWAY_KAFKA_IDEMPOTENCE=false" if running.broker is not None else ""
        console.print(f"gangway is up: GANGWAY_KAFKA={running.bootstrap}{embedded}  (logs in {stack.state_dir() / 'logs'})")
        stopped = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stopped.append(True))
        while not stopped:
            running.supervise_once()
            time.sleep(0.5)
        console.print("stopping…")
    return 0


def cmd_down(args) -> int:
    pid = stack.stop_running_stack(args.timeout)
    where = stack.state_dir()
    console.print(f"stopped the gangway stack running from {where} (pid {pid})" if pid is not None
                  else f"no gangway stack runs from {where}: nothing to stop")
    return 0


def cmd_config(args) -> int:
    if args.action == "validate":
        from gangway.contract.kueue import check_file
        problems, warnings = check_file(args.file)
        for line in problems:
            console.print(f"[red]{escape(line)}[/red]", highlight=False, soft_wrap=True)
        for line in warnings:  # what Kueue would act on and gangway will not
            _warn(line)
        if not problems:
            name = "<stdin>" if args.file == "-" else args.file
            console.print(f"{name}: valid" + (f" ({len(warnings)} warning(s))" if warnings else ""))
        return 1 if problems else 0
    contract = _load_contract(args.file)
    from gangway.services.runtime.clock import ClusterClock
    bootstrap = _bootstrap()
    state = asyncio.run(stack.read_state(bootstrap))[0]
    _keeps_flavors_in_use(state, contract, args.file)
    _keeps_currency(state, contract, args.file)
    appended = asyncio.run(stack.publish_config(bootstrap, contract, args.file, ClusterClock.from_env().now_ms(),
                                                state=state))
    console.print("contract applied" if appended else "that contract is already in force")
    return 0


def _keeps_currency(state, contract, file: str) -> None:
    """Exit saying so when ``contract`` changes the currency while the billing period running now
    has charges (work holding nodes, or ended in it): an invoice is in one currency, and the money
    accrued so far would be relabelled, not converted."""
    from gangway.events.money import charged_in, settling_period
    before = state.contract
    if before is None or not before.prices or not contract.prices or before.currency == contract.currency:
        return
    period = settling_period(state)[0]
    if charged_in(state, period):  # (as the billing clock judges it: the period will be cut)
        raise SystemExit(f"gangway: {file} changes the currency from {before.currency} to {contract.currency} while "
                         f"billing period {period} has charges: an invoice is in one currency, and what is accrued "
                         f"would be relabelled, not converted; apply it once the period is cut and nothing runs")


def _keeps_flavors_in_use(state, contract, file: str) -> None:
    """Exit saying so when ``contract`` leaves out a ResourceFlavor that admitted work still uses:
    as Kueue's finalizer keeps such a flavor until its workloads end (that work's charge stopped at
    the change, its quota counted nowhere)."""
    kept = {f.name for f in contract.flavors}
    using: dict[str, list[str]] = {}
    for name in state.active:
        wl = state.workloads[name]
        for flavor in set(wl.admission.flavors.values()) if wl.admission is not None else ():
            if flavor not in kept:
                using.setdefault(flavor, []).append(name)
    if using:
        said = "; ".join(f"ResourceFlavor {flavor} by {len(names)} admitted workload(s) ({', '.join(sorted(names)[:3])}"
                         f"{', …' if len(names) > 3 else ''})" for flavor, names in sorted(using.items()))
        raise SystemExit(f"gangway: {file} leaves out flavors still in use — {said}: as Kueue keeps a flavor in use "
                         "until its workloads end, apply a contract that keeps them, and drop them once that work has "
                         "ended (a rename: add the new flavor beside the old one first)")


#: How much cluster time `gangway dry-run` simulates by default.
HORIZON_HOURS = 7 * 24
#: And at most ten years: the run's dates must stay dates (10^10 hours ran past the year 9999: a traceback).
HORIZON_HOURS_MAX = 10 * 8760

#: How long `gangway submit` keeps sending what a restarting broker did not acknowledge.
SUBMIT_RETRY_S = 60.0


def cmd_submit(args) -> int:
    from gangway.services.submission.manifests import ManifestError, load_jobs
    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    filename = "<stdin>" if args.file == "-" else args.file
    generated: dict[str, str] = {}
    unread: list[str] = []
    try:
        jobs = load_jobs(data, filename, on_generated=lambda prefix, name: generated.__setitem__(name, prefix),
                         on_unread=unread.append, checked=True)
    except ManifestError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]", soft_wrap=True)
        return 2
    if not jobs:  # `[]`, `null`, an empty file: nothing to submit is not a success
        console.print(f"[red]{escape(filename)}: no jobs in it[/red]")
        return 2
    for warning in unread:  # what Kueue would act on and gangway will not
        _warn(warning)
    asyncio.run(stack.publish_jobs(_bootstrap(), jobs, retry_s=SUBMIT_RETRY_S))
    for job in jobs:
        named = f" (name generated from generateName {generated[job.job_id]!r})" if job.job_id in generated else ""
        console.print(f"submitted {job.namespace}/{job.job_id} to queue {job.queue}{named}")
    return 0


def cmd_withdraw(args) -> int:
    """Take jobs back (JobWithdrawn on gangway.submissions); with --wait, say what became of each."""
    from gangway.events.catalogue import JobWithdrawn
    return _ask(args, lambda namespace, job_id: JobWithdrawn(job_id=job_id, namespace=namespace, reason=args.reason or ""),
                lambda name: f"withdrawal of {name} sent (`gangway explain {name}` says when it is withdrawn, or why not)",
                _withdrawn)


def cmd_move(args) -> int:
    """Send waiting jobs to another queue of their namespace (JobMoved on gangway.submissions); with
    --wait, say where each waits now, or why it was not moved."""
    from gangway.events.catalogue import JobMoved
    return _ask(args, lambda namespace, job_id: JobMoved(job_id=job_id, namespace=namespace, queue=args.queue,
                                                         reason=args.reason or ""),
                lambda name: f"move of {name} to queue {args.queue} sent (`gangway explain {name}` says where it waits)",
                lambda bootstrap, names, marks, wait_s: _moved(bootstrap, names, args.queue, marks, wait_s))


def _ask(args, make, sent, outcomes) -> int:
    """A producer's request about each of ``args.jobs`` (``make(namespace, job_id)``) sent on
    gangway.submissions; without --wait, ``sent(name)`` said of each; with it, what ``outcomes``
    found became of each (exit 1 unless every one did what was asked)."""
    requests = []
    for name in args.jobs:
        namespace, _, job_id = name.partition("/")
        if not namespace or not job_id or "/" in job_id:
            return _fail(f"{name!r}: name a job as NAMESPACE/JOB")
        requests.append(make(namespace, job_id))
    bootstrap = _bootstrap()
    if args.wait:  # what the log and the rejections hold before: what answers the requests comes after
        from gangway.adapters.archive import high_waters
        marks = asyncio.run(high_waters(bootstrap))
    asyncio.run(stack.publish_jobs(bootstrap, requests, retry_s=SUBMIT_RETRY_S))
    names = [f"{r.namespace}/{r.job_id}" for r in requests]
    if not args.wait:
        for name in names:
            console.print(sent(name))
        return 0
    outcome = asyncio.run(outcomes(bootstrap, names, marks, args.wait))
    for name in names:
        said, ok = outcome.get(name, (f"{name}: nothing on the log within {args.wait:g} s; `gangway explain {name}` "
                                      "says what became of it", False))
        console.print(escape(said) if ok else f"[red]{escape(said)}[/red]", soft_wrap=True)
    return 0 if all(outcome.get(name, ("", False))[1] for name in names) else 1


async def _moved(bootstrap: str, names: list[str], queue: str, marks: dict[str, int],
                 wait_s: float) -> dict[str, tuple[str, bool]]:
    """What became of each move sent after ``marks``: (what to say, whether it waits in ``queue``)."""
    from gangway.events.catalogue import WorkloadMoved

    def judge(state, name: str) -> tuple[str, bool]:
        wl = state.workloads[name]
        if wl.spec.queue == queue:
            return f"{name}: moved to queue {queue} (ClusterQueue {wl.spec.cluster_queue})", True
        return f"{name}: not moved: it was {wl.phase} (a workload keeps the queue it was admitted from)", False
    return await _outcomes(bootstrap, names, marks, wait_s, judge, lambda env: env.data.workload if isinstance(
        env.data, WorkloadMoved) and env.data.queue == queue else None)


async def _withdrawn(bootstrap: str, names: list[str], marks: dict[str, int], wait_s: float) -> dict[str, tuple[str, bool]]:
    """What became of each withdrawal sent after ``marks``: (what to say, whether it was withdrawn)."""
    from gangway.events.catalogue import WithdrawalRequested

    def judge(state, name: str) -> tuple[str, bool] | None:
        wl = state.workloads[name]
        if wl.withdrawn is not None:
            return f"{name}: withdrawn ({wl.withdrawn})", True
        if wl.phase == "finished":
            return f"{name}: it had ended already: nothing to withdraw", False
        return None  # (a running one is withdrawn once its pods are gone)
    return await _outcomes(bootstrap, names, marks, wait_s, judge,
                           lambda env: env.data.workload if isinstance(env.data, WithdrawalRequested) else None)


async def _outcomes(bootstrap: str, names: list[str], marks: dict[str, int], wait_s: float, judge,
                    asked_for) -> dict[str, tuple[str, bool]]:
    """What became of each request (for ``names``) sent when the topics held ``marks`` (topic →
    records), until all are known or ``wait_s`` has passed: refused (gangway.rejections), or
    ``judge(state, name)`` once the log has taken it (``asked_for(env)``, the workload a log event
    answers for; ``judge`` None: not yet). Only records after the marks answer: an older rejection
    or request of the same job does not (the events' times are the cluster's clock, not the
    command's). The log and the rejections are read once, then only what was added since."""
    from gangway.adapters import kafka
    from gangway.events import topics
    from gangway.events.fold import apply
    from gangway.events.state import State
    deadline, state, ends = time.monotonic() + wait_s, State(), {topics.LOG: 0, topics.REJECTIONS: marks.get(topics.REJECTIONS, 0)}
    found: dict[str, tuple[str, bool]] = {}
    taken: set[str] = set()
    while True:
        async for env in kafka.read_log(bootstrap, start=ends[topics.LOG]):
            apply(state, env)
            ends[topics.LOG] = env.offset + 1
            if env.offset >= marks.get(topics.LOG, 0) and (name := asked_for(env)) is not None:
                taken.add(name)
        async for env in kafka.read_log(bootstrap, start=ends[topics.REJECTIONS], topic=topics.REJECTIONS):
            ends[topics.REJECTIONS] = env.offset + 1
            name = f"{env.data.namespace}/{env.data.job_id}"
            if name in names:
                found[name] = (f"{name}: refused: {env.data.reason}: {env.data.message}", False)
        for name in (set(names) & taken) - set(found):
            if (said := judge(state, name)) is not None:
                found[name] = said
        if len(found) == len(names) or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.3)


def cmd_dry_run(args) -> int:
    from gangway.read.dryrun import DryRunError, dry_run, report
    from gangway.services.binder.cluster import ClusterFileError
    # (what the command line asks that it cannot: a usage error, exit 2, as argparse's own)
    if not math.isfinite(args.hours) or not 0 < args.hours <= HORIZON_HOURS_MAX:
        return _fail(f"--hours {args.hours:g}: a number of hours above 0 and at most {HORIZON_HOURS_MAX} (ten years)", 2)
    if not args.jobs and not args.later:
        return _fail("no jobs: name job files, or --later SECONDS FILE", 2)
    later = []
    for at, path in args.later:
        try:
            seconds = float(at)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds):
            return _fail(f"--later {at} {path}: {at!r} is not a number of seconds", 2)
        later.append((seconds, path))
    contract = _load_contract(args.config)
    try:
        run = dry_run(contract, args.cluster, args.jobs, args.hours * 3600, later)
    except ClusterFileError as exc:
        return _fail(str(exc))
    except DryRunError as exc:  # (a --later time outside the run: the command line's)
        return _fail(str(exc), 2)
    if run.empty and not run.jobs:  # nothing to run is not a success, as `gangway submit` of such a file (exit 2)
        _fail(f"no jobs in {', '.join(dict.fromkeys(run.empty))}: nothing to run")
        return 2
    for warning in run.unread:  # what Kueue would act on and gangway will not
        _warn(warning)
    for line in report(run):
        print(line)
    if args.export:
        write_export(run.sim.log, args.export, run.rejections)
        print(f"log written to {args.export}: `gangway explain --log {args.export} NAMESPACE/JOB`, "
              f"`gangway replay {args.export}`")
    if run.rejections:  # (a gate before publishing fails on what would be refused; the rest still ran)
        count = len(run.rejections)
        print(f"gangway: {count} job{'s' * (count != 1)} would be refused (rejected above)", file=sys.stderr)
        return 2
    return 0


def cmd_status(args) -> int:
    state, _ = asyncio.run(stack.read_state(_bootstrap()))
    from gangway.read.reports import status_tables
    for table in status_tables(state):
        console.print(table)
    console.print(f"log offset {state.offset}; {state.decisions} decisions applied, {state.superseded} superseded")
    return 0


def cmd_log(args) -> int:
    from gangway.read.reports import log_line
    if args.export and args.follow:
        console.print("[red]--follow and --export exclude each other: an export is the log up to now[/red]")
        return 2
    bootstrap = _bootstrap()
    if args.export:
        _, envs = asyncio.run(stack.read_state(bootstrap))
        try:
            write_export(envs, args.export)
        except OSError as exc:  # (a full disk, say: no file name in the error)
            return _fail(f"{args.export}: {exc.strerror or exc}")
        console.print(f"{len(envs)} events written to {args.export}")
        return 0
    try:
        asyncio.run(_print_log(bootstrap, args.follow, log_line))
    except KeyboardInterrupt:
        pass
    return 0


async def _print_log(bootstrap: str, follow: bool, line) -> None:
    import gangway.adapters.kafka as kafka
    from gangway.read.describe import IslandWatch
    t0, watch = None, IslandWatch()
    async for env in kafka.read_log(bootstrap, follow=follow):
        t0 = env.time_ms if t0 is None else t0
        print(line(env, t0, watch.see(env)), flush=True)


def _bounded(kind: type, low: float, high: float, said: str = "", above: bool = False):
    """An argparse type: a finite number of ``kind`` from ``low`` (``above``: over it) to ``high``.
    Anything else is a usage error (exit 2) saying what it must be (``said``, or the bounds)."""
    def parse(text: str):
        value = kind(text)  # (not a number: argparse says "invalid float value: 'x'")
        if not (math.isfinite(value) and (value > low if above else value >= low) and value <= high):
            must = said or f"must be {'above' if above else 'from'} {low:g} {'and at most' if above else 'to'} {high:g}"
            raise argparse.ArgumentTypeError(f"{must}, not {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


_positive_int = _bounded(int, 1, sys.maxsize, "must be 1 or more")
#: Cluster seconds per wall second: frozen (0) or backwards (below 0) nothing would ever be admitted;
#: at most 100,000 (28 cluster hours a wall second), whose clock passes the year 9999 only after a month.
_time_scale = _bounded(float, 0, 1e5, "must be above 0 and at most 100000 (cluster seconds per wall second)",
                       above=True)
#: A wait in seconds, 0 (or, positive, over 0) up to 366 days (the longest runtime a job may declare).
_seconds = _bounded(float, 0, 366 * 86400, "must be from 0 to 31622400 seconds (366 days)")
_positive_seconds = _bounded(float, 0, 366 * 86400, "must be above 0 and at most 31622400 seconds (366 days)",
                             above=True)
_port = _bounded(int, 0, 65535, "must be a port from 1 to 65535 (0: any free one)")


def cmd_replay(args) -> int:
    from rich.progress import Progress

    from gangway.read.logfile import read_log_file
    from gangway.services.audit.replay import verify
    lines, quarantined, end, misplaced = None, [], None, []
    if args.file:
        log = read_log_file(args.file)
        envs, lines, quarantined, end, what = log.envs, log.lines, log.quarantined, log.end, args.file
        misplaced = log.misplaced
    else:
        envs, what = asyncio.run(stack.read_state(_bootstrap()))[1], "the broker's log"
    if not envs and not quarantined:
        return _fail(f"no events in {what}: nothing to replay")
    with Progress(console=console, transient=True, disable=len(envs) < 20_000) as progress:
        task = progress.add_task("replaying", total=len(envs))
        started = time.perf_counter()
        report = verify(envs, progress=lambda n: progress.advance(task, n), workers=args.workers,
                        lines=lines, quarantined=quarantined, end=end, misplaced=misplaced)
        elapsed = time.perf_counter() - started
    for finding in report.integrity:
        print(f"INTEGRITY {finding}")
    for mismatch in report.mismatches:
        print(f"NOT REPRODUCED {mismatch}")
        if args.verbose and mismatch.detail:
            print(f"    {mismatch.detail}")
    rate = report.events / elapsed if elapsed > 0 else 0.0
    console.print(f"{report.events} events replayed in {elapsed:.2f} s ({rate:,.0f} events/s); "
                  f"{report.verified} of {report.decisions} decisions reproduced; {report.superseded} superseded; "
                  f"{len(report.integrity)} integrity failure(s)", highlight=False)
    for line in _coverage(report, lines, end, bool(args.file)):
        console.print(line, highlight=False)
    unmarked = bool(args.file) and report.last_offset is not None and end is None and not args.unmarked_end
    if unmarked:
        print("INTEGRITY the export does not mark its end: it may be cut after a line (`--unmarked-end` passes one "
              "written before exports marked it)")
    from gangway.read.money import money
    from gangway.services.accounting.billing import books_of
    books = books_of(envs)
    for inv in books.issued:
        console.print(f"invoice {inv.invoice_id}: {inv.team} {inv.period} billed {money(inv.billed_cost_micros)} "
                      f"{inv.currency} ({len(inv.lines)} lines) re-derived from the log")
    if not books.issued:
        console.print("no billing period is over on this log's clock: no invoice to re-derive")
    return 0 if report.ok and not unmarked else 1


def _coverage(report, lines: list[int] | None, end: int | None, from_file: bool) -> list[str]:
    """What the audit covered: the offsets, lines and clock checked, and whether the end is known."""
    if report.last_offset is None:
        return []
    from gangway.events.codec import format_time
    span = f"offsets {report.first_offset}–{report.last_offset}"
    if lines:
        span += f" (lines {lines[0]}–{lines[-1]})"
    said = [f"checked {span}, up to the log's clock {format_time(report.last_time_ms)}"]
    if report.partial:
        said.append("a partial log: its decisions were not re-derived (replay the log from offset 0)")
    if not from_file:
        said.append("read from the broker up to its end when the replay started")
    elif end is not None and end == report.last_offset + 1:
        said.append(f"the export marks its end at offset {end}: nothing is cut after its last line")
    else:
        said.append("the export does not mark its end (written before exports did, or cut): events after "
                    f"offset {report.last_offset} would not show here")
    return said


def _log_of(args) -> list:
    """The log to read: an exported file (``--log``) or the running stack's."""
    return read_export(args.log) if args.log else asyncio.run(stack.read_state(_bootstrap()))[1]


def cmd_explain(args) -> int:
    from gangway.read.explain import explain, rejected_lines
    rejections: list = []
    log = read_export(args.log, rejections) if args.log else _log_of(args)
    lines = explain(log, args.job, forecast=not args.no_forecast)
    # Refused at submission? Its rejections are on gangway.rejections (a dry run's export ends with
    # them): all of it for a job that never reached the log, else the later requests refused
    # (the same job sent again: duplicate_job; a move or a withdrawal it could not take).
    refused = rejected_lines(rejections if args.log else asyncio.run(stack.read_rejections(_bootstrap())), args.job)
    if lines[0].endswith("no such job in the log"):
        lines = refused or lines
    elif refused:
        lines += ["later requests refused (sent again, moved, withdrawn):", *(f"    {line}" for line in refused)]
    for line in lines:
        print(line)
    return 1 if lines[0].endswith("no such job in the log") else 0


def cmd_rules(args) -> int:
    from gangway.read import rules
    from gangway.contract import contract_digest
    if args.config:
        contract = _load_contract(args.config)
        digest = contract_digest(contract)
    else:
        from gangway.events.fold import apply
        from gangway.events.state import State
        state = State()
        for env in _log_of(args):
            apply(state, env)
        if state.contract is None:
            raise SystemExit("gangway: no contract has been applied on this log")
        contract, digest = state.contract, state.contract_digest
    parts = rules.sections(contract, digest)
    text = rules.as_html(parts) if args.html else rules.as_text(parts)
    if args.out:
        Path(args.out).write_text(text)
        console.print(f"rules written to {args.out}")
    else:
        print(text)
    return 0


def _books(args):
    from gangway.services.accounting.billing import books_of
    return books_of(_checked_log(args) if args.log else _log_of(args))


def _checked_log(args) -> list:
    """The exported log ``--log`` names, if it passes the audit (``verify``: its lines, its contract's
    digests, every decision re-derived, the facts' order); else exit saying what is wrong — money
    is not read off a log with lines missing, repeated or edited, nor one whose decisions do not
    come out again (a deleted order, an edited fact) (``--unchecked``: read it anyway, saying so)."""
    from gangway.read.logfile import read_log_file
    from gangway.services.audit.replay import verify
    log = read_log_file(args.log)
    found = _audit_findings(verify(log.envs, workers=2, lines=log.lines, quarantined=log.quarantined, end=log.end,
                                   misplaced=log.misplaced))
    if found:
        said = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
        if not args.unchecked:
            raise SystemExit(f"gangway: {args.log} does not pass the audit ({said}): no money is read off it "
                             f"(`gangway replay {args.log}` says more; --unchecked reads it anyway)")
        print(f"gangway: warning: {args.log} does not pass the audit ({said}); read anyway (--unchecked)",
              file=sys.stderr)
    return log.envs


def _audit_findings(report) -> list[str]:
    """What keeps a log from passing the audit, one line each: its integrity, then its decisions."""
    if report.partial or not report.events:
        return [str(f) for f in report.integrity] or ["no events"]
    return [*(str(f) for f in report.integrity), *(f"not reproduced: {m}" for m in report.mismatches)]


def _period_invoices(books, period: str, team: str | None):
    """The period's invoices as issued on the log's clock, or, for a period not cut yet, a draft
    (running work, and idle capacity, accrued up to the log's time)."""
    from gangway.services.accounting.billing import invoices
    issued = [i for i in books.issued if i.period == period and (team is None or i.team == team)]
    if issued or any(i.period == period for i in books.issued):
        return issued, False
    return invoices(books.known(), books.changes, books.state.contract, period, books.log_id, books.state.offset, team,
                    now_ms=books.state.time_ms, carried=dict(books.carried), contracts=books.contracts), True


def _period(period: str) -> tuple[str, int, int]:
    """A billing period named as the books name it (2026-12-3T3 is 2026-12-03T03) and its (start,
    end) ms, or exit with one line saying what a period looks like."""
    from gangway.events.money import normal_period, period_bounds
    try:
        name = normal_period(period)
    except ValueError as exc:
        raise SystemExit(f"gangway: {exc}")
    return (name, *period_bounds(name))


def _known_team(books, team: str | None) -> None:
    """Exit with the teams there are when ``team`` is none of them (a namespace of the contract's
    LocalQueues, or one charged on the log)."""
    if team is None:
        return
    contract = books.state.contract
    teams = {lq.namespace for lq in contract.local_queues} if contract is not None else set()
    teams |= {c.team for c in books.known()}
    if team not in teams:
        raise SystemExit(f"gangway: unknown team {team!r}; the teams on this log: {', '.join(sorted(teams)) or 'none'}")


def _invoice_periods(books, team: str | None = None) -> int:
    """Without --period: the periods invoiced on the log (``team``'s invoices only, if given), and
    the one running now (a draft)."""
    from gangway.events.money import minor_digits, period_of
    from gangway.read.money import money
    by_period: dict[str, list] = {}
    for inv in books.issued:
        if team is None or inv.team == team:
            by_period.setdefault(inv.period, []).append(inv)
    for period, issued in sorted(by_period.items()):
        billed = money(sum(inv.billed_cost_micros for inv in issued), minor_digits(issued[0].currency))
        console.print(f"{period}: {len(issued)} invoice(s), {billed} {issued[0].currency} billed")
    if not by_period:
        console.print("no invoices issued on the log yet")
    contract = books.state.contract
    if contract is not None and books.state.time_ms:
        running = period_of(contract.billing.period, books.state.time_ms)
        if running not in by_period:
            console.print(f"{running}: running (a draft: gangway invoice --period {running})")
        for note in _billing_notes(books, running)[1]:
            print(f"gangway: {note}", file=sys.stderr)
    return 0


def _refuse_uncut(books, period: str) -> None:
    """Exit saying so when the contract never cuts ``period`` (a month of hourly billing): invoices
    of it would carry ids no invoice ever has."""
    from gangway.events.money import period_kind, period_of
    contract = books.state.contract
    if contract is not None and period_kind(period) != contract.billing.period:
        kind = contract.billing.period
        raise SystemExit(f"gangway: the contract cuts {kind} periods (like {period_of(kind, books.state.time_ms)}), "
                         f"and {period} is not one: no invoice is ever issued for it (`gangway showback --period "
                         f"{period}` gives its figures)")


def _billing_notes(books, period: str) -> tuple[bool, list[str]]:
    """(is ``period`` of the kind the contract cuts?, why its invoices may be empty: the contract
    sets no prices, prices only resources no queue uses, or cuts another kind of period)."""
    from gangway.contract.kueue import stray_prices
    from gangway.events.money import period_kind, period_of
    contract = books.state.contract
    if contract is None:
        return True, []
    notes = []
    kind = contract.billing.period
    cut = period_kind(period) == kind
    if not cut:
        notes.append(f"the contract cuts {kind} periods (like {period_of(kind, books.state.time_ms)}), "
                     f"and {period} is not one: no invoice is ever issued for it")
    if not contract.prices:
        notes.append(f"no prices in the contract: invoices have no lines ({_PRICES_SET_BY})")
    elif len(stray := stray_prices(contract)) == len(contract.prices):
        notes.append("the contract prices nothing its queues use (" + "; ".join(why for _, why in stray)
                     + "): invoices have no lines")
    return cut, notes


def _draft_status(books, period: str, start: int, end: int) -> str:
    """What a period without issued invoices is, on the log's clock: over before the log began,
    cut with nothing to invoice, or still running (a draft)."""
    from gangway.events.codec import format_time
    first = books.first_ms
    if first is not None and end <= first:
        return f"period {period} ended before this log began ({format_time(first)}): nothing to invoice"
    contract = books.state.contract
    settle = contract.billing.settle_ms if contract is not None else 0
    if books.state.time_ms >= end + settle:
        return f"period {period} is over on the log's clock ({format_time(books.state.time_ms)}) and nothing in it was invoiced"
    return f"draft: period {period} is not cut yet on the log's clock (running work accrued so far)"


#: Where prices come from, for the notes that say there are none.
_PRICES_SET_BY = "a SchedulingPolicy's prices.perHour sets them, per flavor and resource"


def cmd_invoice(args) -> int:
    from gangway.read import money
    books = _books(args)
    _known_team(books, args.team)
    if args.period is None and args.format != "table":  # every invoice issued on the log, as data
        issued = [inv for inv in books.issued if args.team is None or inv.team == args.team]
        if args.format == "json":
            print(money.invoices_json(issued))
        else:
            print(money.invoices_csv(issued), end="")
        return 0
    if args.period is None:
        return _invoice_periods(books, args.team)
    period, start, end = _period(args.period)
    _refuse_uncut(books, period)
    found, draft = _period_invoices(books, period, args.team)
    if args.format == "json":
        print(money.invoices_json(found))
    elif args.format == "csv":
        print(money.invoices_csv(found), end="")
    else:
        console.print(money.invoices_table(found))
    cut, notes = _billing_notes(books, period)
    if draft and cut:
        status = _draft_status(books, period, start, end)
        if args.format == "table":
            console.print(status)
        else:
            notes = [status, *notes]
    for note in notes:  # (on stderr: json and csv stay data)
        print(f"gangway: {note}", file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    from gangway.read import money
    books = _books(args)
    period, start, end = _period(args.period)
    _refuse_uncut(books, period)
    found, draft = _period_invoices(books, period, None)
    notes = _billing_notes(books, period)[1]
    if not any(inv.lines for inv in found):  # (a header alone: say why)
        notes.insert(0, _draft_status(books, period, start, end))
    for note in notes:
        print(f"gangway: {note}", file=sys.stderr)
    text = money.focus_csv(found)
    if args.out:
        Path(args.out).write_text(text)
        console.print(f"FOCUS 1.0 dataset: {len(text.splitlines()) - 1} rows written to {args.out}"
                      + (" (draft period)" if draft else ""))
    else:
        print(text, end="")
    return 0


def cmd_showback(args) -> int:
    from gangway.read import money
    books = _books(args)
    if not books.state.time_ms:
        raise SystemExit("gangway: the log is empty")
    if args.period:
        period, start, end = _period(args.period)
        first = books.first_ms if books.first_ms is not None else books.state.time_ms
        if end <= first or start >= books.state.time_ms:
            from gangway.events.codec import format_time
            console.print(f"period {period} is outside the log ({format_time(first)} to "
                          f"{format_time(books.state.time_ms)}): nothing to show")
            return 0
        end = min(end, books.state.time_ms)
    else:
        start = min((c.start_ms for c in books.known()), default=books.state.time_ms)
        end = books.state.time_ms
    currency = books.state.contract.currency if books.state.contract else ""
    charges = books.known(end)
    console.print(money.figures_table(money.team_figures(charges, start, end), currency))
    if books.state.contract is not None and not books.state.contract.prices:
        console.print(f"no prices in the contract: every cost is 0 ({_PRICES_SET_BY}); GPU-hours and busy figures stand")
    from rich.table import Table
    table = Table(title="most wasteful runs (preemption waste + idle GPU time, list price)")
    for col in ("run", "attempts", "GPU-h", "busy", "cost", "preemption waste", "flagged idle"):
        table.add_column(col)
    for r in money.run_figures(charges, books.state, start, end, books.idle_spans)[:10]:
        table.add_row(r.workload, str(r.attempts), str(money.hours(r.allocated_gpu_milli_ms)),
                      "—" if r.busy_ratio is None else f"{r.busy_ratio:.0%}", str(money.money(r.list_cost_micros)),
                      str(money.money(r.waste_micros)), "yes" if r.idle_flagged else "")
    console.print(table)
    if args.html:
        step = max(60_000, (end - start) // 24)
        Path(args.html).write_text(money.showback_html(books, start, end, step))
        console.print(f"showback written to {args.html}")
    return 0


def cmd_telemetry(args) -> int:
    import gangway.adapters.kafka as kafka
    from gangway.adapters import dcgm
    from gangway.events import topics
    from gangway.events.catalogue import Envelope
    bootstrap = _bootstrap()

    async def once(n: int) -> int:
        state, _ = await stack.read_state(bootstrap)
        try:
            # No time of its own (dcgm-exporter gives none): the relay stamps it with the cluster's clock.
            events = dcgm.parse(dcgm.fetch(args.url), frozenset(state.workloads))
        except (OSError, dcgm.ScrapeError) as exc:
            console.print(f"[red]scrape {args.url}: {exc}[/red]")
            return -1
        prod = kafka.producer(bootstrap)
        await prod.start()
        try:
            now = int(time.time() * 1000)
            await kafka.append(prod, [Envelope(id=f"dcgm/{e.node}/{now}/{n}", source="gangway/dcgm-scrape",
                                               time_ms=now, data=e) for e in events], topic=topics.TELEMETRY)
        finally:
            await prod.stop()
        return len(events)

    n = 0
    while True:
        sent = asyncio.run(once(n))
        if sent >= 0:  # (submission copies the valid ones onto the log, and refuses the others whole)
            console.print(f"{sent} node(s) of GPU figures published on {topics.TELEMETRY}")
        n += 1
        if args.once:
            return 0 if sent >= 0 else 1
        time.sleep(args.interval)


def cmd_demo(args) -> int:
    from gangway.console.app import ListenError, listen
    from gangway.demo import run_demo
    sock = None
    if args.console:  # its port is the demo's from the start: nothing can take it meanwhile
        try:
            sock = listen("127.0.0.1", args.port)
        except ListenError as exc:
            return _fail(str(exc))
    try:
        return run_demo(console, time_scale=args.time_scale, out=args.out, console_socket=sock)
    finally:
        if sock is not None:
            sock.close()


def cmd_console(args) -> int:
    import socket

    from gangway.console.app import ListenError, listen, serve
    try:
        # (--fd: a socket the demo bound and handed over)
        sock = socket.socket(fileno=args.fd) if args.fd is not None else listen(args.host, args.port)
    except ListenError as exc:
        return _fail(str(exc))
    bootstrap = _bootstrap()
    serve(bootstrap, sock, host=args.host,
          announce=lambda url: console.print(f"gangway console at {url}  (metrics at {url}metrics; Ctrl-C stops it)"))
    return 0


def cmd_schemas(args) -> int:
    from gangway.read import schemas
    return schemas.main(write=args.write)


def _kubernetes_flags(s) -> None:
    s.add_argument("--kubernetes", action="store_true",
                   help="binder: act on a real cluster (Jobs in, pods bound) instead of a cluster file")
    s.add_argument("--kubeconfig", help="with --kubernetes: kubeconfig file (default $KUBECONFIG, ~/.kube/config; "
                                        "in a pod: its service account)")
    s.add_argument("--context", help="with --kubernetes: kubeconfig context (default: the current one)")
    s.add_argument("--bind-backoff", type=_seconds, metavar="SECONDS",
                   help="with --kubernetes: a gang whose bind failed waits this long before admission tries it "
                        "again, doubling with each failed bind in a row (default: the contract's Kueue Configuration "
                        "waitForPodsReady.requeuingStrategy, else 10; any of the three --bind-backoff flags given, "
                        "they win over the contract's, gangway's defaults for the others)")
    s.add_argument("--bind-backoff-max", type=_seconds, metavar="SECONDS",
                   help="with --kubernetes: the longest such wait (default 3600)")
    s.add_argument("--bind-backoff-limit", type=_bounded(int, 0, sys.maxsize, "must be 0 or more"), metavar="N",
                   help="with --kubernetes: after N failed binds in a row the workload is deactivated "
                        "(default 8; 0: never)")
    s.add_argument("--pods-ready-timeout", type=_seconds, metavar="SECONDS",
                   help="with --kubernetes: a bound gang whose pods are not all running this long after its admission "
                        "(an image that does not pull, a device that fails) gives its nodes back and is requeued with the "
                        "bind backoff, as Kueue's waitForPodsReady; a running gang not whole again this long after it "
                        "lost a pod is requeued too, as its recoveryTimeout (default: the contract's Kueue Configuration "
                        "waitForPodsReady timeout and recoveryTimeout, else 600 for both; given, it wins over the "
                        "contract's for both; 0: never)")
    s.add_argument("--webhook-port", type=_port, metavar="PORT",
                   help="with --kubernetes: serve the mutating webhook (HTTPS) on PORT, which stores a Job, JobSet or "
                        "Kubeflow job created with a queue label and not suspended as suspended (infra/k8s/binder-webhook.yaml "
                        "registers it); without it such an object is suspended at the binder's next pass")
    s.add_argument("--webhook-service", metavar="NAME",
                   help="with --webhook-port: the webhook's Service in the binder's namespace, which gangway's own "
                        "certificate names (default gangway-binder-webhook)")
    s.add_argument("--webhook-configuration", metavar="NAME",
                   help="with --webhook-port: the MutatingWebhookConfiguration whose caBundle gangway writes its CA "
                        "into (default gangway)")
    s.add_argument("--webhook-host", metavar="NAME",
                   help="with --webhook-port: a host name or IP address the API server calls the webhook by (a binder "
                        "outside the cluster, its MutatingWebhookConfiguration naming a URL); gangway's own certificate "
                        "names it beside the Service")
    s.add_argument("--webhook-cert-dir", metavar="DIR",
                   help="with --webhook-port: serve tls.crt and tls.key of DIR (e.g. cert-manager's Secret, mounted) "
                        "instead of gangway's own certificate; the caBundle is then left to the platform")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gangway", description="GPU batch scheduling for shared Kubernetes clusters")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("broker", help="run a broker on loopback (the embedded one, or Apache Kafka) and create the topics")
    s.add_argument("--port", type=_port, default=0)
    s.add_argument("--kafka", choices=("embedded", "apache"), default="embedded",
                   help="apache: Apache Kafka from Maven Central (needs java, and mvn the first time)")
    s.set_defaults(func=cmd_broker)
    s = sub.add_parser("acls", help="the Kafka ACLs of who may write what (--apply: create them and the tenant topics)")
    s.add_argument("--service", default="User:gangway", help="the services' principal")
    s.add_argument("--admin", default="User:gangway-admin", help="the operators' principal (config apply)")
    s.add_argument("--tenant", action="append", default=[], metavar="NAMESPACE=PRINCIPAL")
    s.add_argument("--apply", action="store_true", help="apply with the GANGWAY_KAFKA_* credentials (a super user)")
    s.set_defaults(func=cmd_acls)
    s = sub.add_parser("service", help="run one service (what `up` starts)")
    s.add_argument("name", choices=stack.SERVICES)
    s.add_argument("--cluster", help="binder: cluster file of Kubernetes Node objects")
    s.add_argument("--default-runtime", type=_positive_seconds, help="binder: seconds a job without a declared runtime runs")
    _kubernetes_flags(s)
    s.set_defaults(func=cmd_service)
    s = sub.add_parser("up", help="broker (unless GANGWAY_KAFKA) and the six services")
    s.add_argument("--config", help="Kueue YAML contract to apply")
    s.add_argument("--cluster", help="cluster file of Kubernetes Node objects (simulated cluster)")
    s.add_argument("--time-scale", type=_time_scale, default=1.0,
                   help="cluster seconds per wall second (above 0, at most 100000)")
    _kubernetes_flags(s)
    s.set_defaults(func=cmd_up)
    s = sub.add_parser("down", help="stop the stack `gangway up` runs from this state directory (GANGWAY_STATE_DIR)")
    s.add_argument("--timeout", type=_seconds, default=stack.DOWN_TIMEOUT_S, metavar="SECONDS",
                   help="how long to wait for it to stop (default 60)")
    s.set_defaults(func=cmd_down)
    s = sub.add_parser("config", help="validate or apply a contract")
    s.add_argument("action", choices=("validate", "apply"),
                   help="validate: check the file and say what gangway ignores in it (no broker); apply: publish "
                        "it to the running stack's log (ConfigApplied), what every decision after it follows")
    s.add_argument("file", help="Kueue YAML: ResourceFlavors, ClusterQueues, LocalQueues, Cohorts, Topologies, "
                                "WorkloadPriorityClasses, gangway's SchedulingPolicy")
    s.set_defaults(func=cmd_config)
    s = sub.add_parser("submit", help="publish jobs (gangway YAML/JSON, Job, JobSet, Kubeflow PyTorchJob, TFJob, MPIJob…, RayJob)")
    s.add_argument("file", help="a file, or - for standard input")
    s.set_defaults(func=cmd_submit)
    s = sub.add_parser("withdraw", help="take jobs back, waiting or running (JobWithdrawn on gangway.submissions)")
    s.add_argument("jobs", nargs="+", metavar="NAMESPACE/JOB")
    s.add_argument("--reason", help="why (on the log and in `gangway explain`)")
    s.add_argument("--wait", type=_seconds, default=10.0, metavar="SECONDS",
                   help="wait this long for each job to be withdrawn, or refused, and say which (default 10; 0: "
                        "send and return)")
    s.set_defaults(func=cmd_withdraw)
    s = sub.add_parser("move", help="send waiting jobs to another queue of their namespace (JobMoved on "
                                    "gangway.submissions), as changing a Kubernetes Job's queue-name label does")
    s.add_argument("jobs", nargs="+", metavar="NAMESPACE/JOB")
    s.add_argument("--queue", required=True, help="the LocalQueue of their namespace to wait in")
    s.add_argument("--reason", help="why (on the log and in `gangway explain`)")
    s.add_argument("--wait", type=_seconds, default=10.0, metavar="SECONDS",
                   help="wait this long for each job to be moved, or refused, and say which (default 10; 0: "
                        "send and return)")
    s.set_defaults(func=cmd_move)
    s = sub.add_parser("dry-run", help="where jobs would go, which would wait and why: a contract, a cluster "
                       "and jobs decided offline on a simulated clock (no broker)")
    s.add_argument("jobs", nargs="*", help="job files (gangway YAML/JSON, Job, JobSet, Kubeflow PyTorchJob, TFJob, MPIJob…, RayJob), submitted at once")
    s.add_argument("--config", required=True, help="Kueue YAML contract")
    s.add_argument("--cluster", required=True, help="cluster file of Kubernetes Node objects")
    s.add_argument("--hours", type=float, default=HORIZON_HOURS,
                   help=f"cluster time to simulate (default {HORIZON_HOURS:g}: a week)")
    s.add_argument("--later", nargs=2, action="append", default=[], metavar=("SECONDS", "FILE"),
                   help="submit FILE's jobs SECONDS of cluster time after the start (repeatable)")
    s.add_argument("--export", metavar="FILE", help="write the run's log, one structured CloudEvent per line")
    s.set_defaults(func=cmd_dry_run)
    s = sub.add_parser("status", help="queues, running workloads, free GPUs per node")
    s.set_defaults(func=cmd_status)
    s = sub.add_parser("log", help="the decision log, readable")
    s.add_argument("--follow", action="store_true")
    s.add_argument("--export", metavar="FILE", help="write one structured CloudEvent per line")
    s.set_defaults(func=cmd_log)
    s = sub.add_parser("replay", help="audit: re-derive every decision of a log")
    s.add_argument("file", nargs="?", help="an exported log (default: the broker's log)")
    s.add_argument("--workers", type=_positive_int, default=1,
                   help="processes checking the log, each its own stretch of it (default 1)")
    s.add_argument("--verbose", action="store_true",
                   help="after each differing decision's fields, the recorded and derived decisions whole (JSON)")
    s.add_argument("--unmarked-end", action="store_true",
                   help="pass an export whose last line does not mark its end (one written before exports marked "
                        "it); without it such a file, as one cut after a line, fails")
    s.set_defaults(func=cmd_replay)
    s = sub.add_parser("explain", help="why a job waits, or what happened to it (decisions and reasons)")
    s.add_argument("job", help="namespace/job, or a job id")
    s.add_argument("--log", help="an exported log (default: the broker's log)")
    s.add_argument("--no-forecast", action="store_true", help="skip the estimated start time")
    s.set_defaults(func=cmd_explain)
    s = sub.add_parser("rules", help="the published contract, in words (from a config file or the log)")
    source = s.add_mutually_exclusive_group()
    source.add_argument("--config", help="a Kueue YAML contract (default: the contract in force on the log)")
    source.add_argument("--log", help="an exported log (default: the broker's log)")
    s.add_argument("--html", action="store_true")
    s.add_argument("--out", help="write to this file")
    s.set_defaults(func=cmd_rules)
    s = sub.add_parser("demo", help="the whole system on a simulated 64-GPU cluster")
    s.add_argument("--time-scale", type=_time_scale, default=120.0)
    s.add_argument("--out", default="out/demo-log.jsonl")
    s.add_argument("--console", action="store_true", help="afterwards keep the stack and the web console running until Ctrl-C")
    s.add_argument("--port", type=_port, default=8080, help="the console's port (with --console; 0: any free one)")
    s.set_defaults(func=cmd_demo)
    s = sub.add_parser("console", help="the web console and /metrics of the running stack (read-only)")
    s.add_argument("--port", type=_port, default=8080, help="port to listen on (0: any free one)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    s.add_argument("--fd", type=int, help=argparse.SUPPRESS)  # a listening socket handed over (the demo's)
    s.set_defaults(func=cmd_console)
    s = sub.add_parser("invoice", help="a billing period's invoices (as issued, or a draft while it runs)")
    s.add_argument("--period", help="2026-11 (monthly), 2026-W48, 2026-11-30 or 2026-11-30T10 "
                   "(without it: the periods invoiced, and the one running)")
    s.add_argument("--team")
    s.add_argument("--format", choices=("table", "json", "csv"), default="table",
                   help="json, csv: the period's invoices as data (without --period: every invoice issued)")
    _money_log_options(s)
    s.set_defaults(func=cmd_invoice)
    s = sub.add_parser("export", help="export billing data (FinOps FOCUS 1.0 CSV)")
    s.add_argument("format", choices=("focus",))
    s.add_argument("--period", required=True)
    s.add_argument("--out", help="write to this file (default: standard output)")
    _money_log_options(s)
    s.set_defaults(func=cmd_export)
    s = sub.add_parser("showback", help="spend per team, allocated vs busy GPU-hours, idle GPUs, wasteful runs")
    s.add_argument("--period", help="a billing period (default: the whole log)")
    s.add_argument("--html", metavar="FILE", help="also write an HTML report with charts")
    _money_log_options(s)
    s.set_defaults(func=cmd_showback)
    s = sub.add_parser("telemetry", help="GPU telemetry in: scrape a dcgm-exporter endpoint onto gangway.telemetry")
    s.add_argument("action", choices=("scrape",))
    s.add_argument("url", help="the exporter's metrics URL, e.g. http://node:9400/metrics")
    s.add_argument("--interval", type=_positive_seconds, default=30.0, help="seconds between scrapes")
    s.add_argument("--once", action="store_true", help="scrape once and exit")
    s.set_defaults(func=cmd_telemetry)
    benchmarks_cli.add_parsers(sub)
    s = sub.add_parser("schemas", help="check (or --write) the JSON Schemas and AsyncAPI document")
    s.add_argument("--write", action="store_true")
    s.set_defaults(func=cmd_schemas)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command. What a user can put right (no broker, an unreachable one, a bad log file,
    missing reference data) ends in one line on stderr and exit status 1, never a traceback."""
    args = parser().parse_args(argv)
    from gangway.adapters.archive import ArchiveBehind
    from gangway.adapters.kafka import CONNECTION_FAILED, CREDENTIALS_REFUSED, NOT_AUTHORISED, KafkaConfigError
    from gangway.services.accounting.billing import ClockJump
    from gangway.services.binder.cluster import ClusterFileError
    from gangway.services.binder.errors import WebhookError
    from gangway.services.runtime.shell import ServiceSettingError
    try:
        return args.func(args)
    except BrokerUnreachable as exc:
        return _fail(f"{exc}; {stack.what_to_do(exc)}")
    except (stack.NoBrokerError, stack.StackRunning, stack.ServiceFailed, stack.ContractNotRelayed, ArchiveBehind,
            LogFileError, ReferenceDataMissing, KafkaConfigError, ServiceSettingError, ClusterFileError,
            ClockJump, WebhookError) as exc:
        return _fail(str(exc))
    except CREDENTIALS_REFUSED as exc:
        return _fail(f"Kafka refused the credentials (GANGWAY_KAFKA_USERNAME/PASSWORD): {exc}")
    except NOT_AUTHORISED as exc:
        who = os.environ.get("GANGWAY_KAFKA_USERNAME") or "ANONYMOUS"
        hint = (" `gangway config apply` needs the admin principal (README: Who may write what)"
                if args.command == "config" else "")
        return _fail(f"not authorised: Kafka denied principal User:{who} ({type(exc).__name__}: {exc}).{hint}")
    except CONNECTION_FAILED as exc:
        return _fail(f"cannot connect to Kafka ({exc}): check GANGWAY_KAFKA, the listener's "
                     "GANGWAY_KAFKA_SECURITY_PROTOCOL and the credentials (GANGWAY_KAFKA_USERNAME/PASSWORD)")
    except BrokenPipeError:  # the reader went away (`gangway explain … | head`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (and no error at exit's flush)
        return 0
    except OSError as exc:
        if exc.filename is None:  # (not a file the user named, or one of the state directory's)
            raise
        return _fail(f"{exc.filename}: {exc.strerror or exc}")


def _fail(message: str, status: int = 1) -> int:
    print(f"gangway: {message}", file=sys.stderr)
    return status
