"""The `gangway` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from pathlib import Path

from rich.console import Console

from gangway import stack
from gangway.benchmarks import cli as benchmarks_cli
from gangway.read.logfile import LogFileError, read_export, write_export

console = Console(highlight=False)


def _kafka() -> str:
    try:
        return stack.bootstrap_of_running_stack()
    except stack.NoBrokerError as exc:
        raise SystemExit(f"gangway: {exc}")


def cmd_broker(args) -> int:
    import gangway.adapters.kafka as kafka
    from gangway.adapters.broker import EmbeddedBroker
    with EmbeddedBroker(port=args.port) as broker:
        asyncio.run(kafka.ensure_topics(broker.bootstrap))
        console.print(f"broker ready at {broker.bootstrap} (topics created); Ctrl-C stops it")
        _wait_for_signal()
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
    service = stack.build_service(args.name, _kafka(), args.cluster, default_runtime_ms)
    stack.run_service(service)
    return 0


def _load_contract(path: str):
    from gangway.contract.kueue import ConfigError, load_contract
    try:
        return load_contract(Path(path).read_text(), path)
    except ConfigError as exc:
        for problem in exc.problems:
            console.print(f"[red]{problem}[/red]")
        raise SystemExit(2)


def cmd_up(args) -> int:
    contract = _load_contract(args.config) if args.config else None
    with stack.Stack(cluster_file=args.cluster, time_scale=args.time_scale) as running:
        if contract is not None:
            asyncio.run(stack.publish_config(running.bootstrap, contract, args.config, running.clock.now_ms()))
        running.wait_ready()
        console.print(f"gangway is up: GANGWAY_KAFKA={running.bootstrap}  (logs in {stack.state_dir() / 'logs'})")
        stopped = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stopped.append(True))
        while not stopped:
            running.supervise_once()
            time.sleep(0.5)
        console.print("stopping…")
    return 0


def cmd_config(args) -> int:
    if args.action == "validate":
        from gangway.contract.kueue import check_file
        problems, warnings = check_file(args.file)
        for line in problems:
            console.print(f"[red]{line}[/red]", highlight=False)
        for line in warnings:  # what Kueue would act on and gangway will not
            console.print(f"[yellow]{line}[/yellow]", highlight=False)
        if not problems:
            console.print(f"{args.file}: valid" + (f" ({len(warnings)} warning(s))" if warnings else ""))
        return 1 if problems else 0
    contract = _load_contract(args.file)
    from gangway.services.runtime.clock import ClusterClock
    appended = asyncio.run(stack.publish_config(_kafka(), contract, args.file, ClusterClock.from_env().now_ms()))
    console.print("contract applied" if appended else "that contract is already in force")
    return 0


def cmd_submit(args) -> int:
    from gangway.services.submission.manifests import ManifestError, load_jobs
    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    try:
        jobs = load_jobs(text, "<stdin>" if args.file == "-" else args.file)
    except ManifestError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    asyncio.run(stack.publish_jobs(_kafka(), jobs))
    for job in jobs:
        console.print(f"submitted {job.namespace}/{job.job_id} to queue {job.queue}")
    return 0


def cmd_status(args) -> int:
    state, _ = asyncio.run(stack.read_state(_kafka()))
    from gangway.read.reports import status_tables
    for table in status_tables(state):
        console.print(table)
    console.print(f"log offset {state.offset}; {state.decisions} decisions applied, {state.superseded} superseded")
    return 0


def cmd_log(args) -> int:
    from gangway.read.reports import log_line
    bootstrap = _kafka()
    if args.export:
        _, envs = asyncio.run(stack.read_state(bootstrap))
        write_export(envs, args.export)
        console.print(f"{len(envs)} events written to {args.export}")
        return 0
    try:
        asyncio.run(_print_log(bootstrap, args.follow, log_line))
    except KeyboardInterrupt:
        pass
    return 0


async def _print_log(bootstrap: str, follow: bool, line) -> None:
    import gangway.adapters.kafka as kafka
    t0 = None
    async for env in kafka.read_log(bootstrap, follow=follow):
        t0 = env.time_ms if t0 is None else t0
        print(line(env, t0), flush=True)


def cmd_replay(args) -> int:
    from rich.progress import Progress

    from gangway.services.audit.replay import verify
    try:
        envs = read_export(args.file) if args.file else asyncio.run(stack.read_state(_kafka()))[1]
    except LogFileError as exc:
        raise SystemExit(f"gangway: {exc}")
    with Progress(console=console, transient=True, disable=len(envs) < 20_000) as progress:
        task = progress.add_task("replaying", total=len(envs))
        started = time.perf_counter()
        report = verify(envs, progress=lambda n: progress.advance(task, n))
        elapsed = time.perf_counter() - started
    for mismatch in report.mismatches:
        print(f"NOT REPRODUCED {mismatch}")
    rate = report.events / elapsed if elapsed > 0 else 0.0
    console.print(f"{report.events} events replayed in {elapsed:.2f} s ({rate:,.0f} events/s); "
                  f"{report.verified} of {report.decisions} decisions reproduced; {report.superseded} superseded")
    return 0 if report.ok else 1


def _log_of(args) -> list:
    """The log to read: an exported file (``--log``) or the running stack's."""
    try:
        return read_export(args.log) if args.log else asyncio.run(stack.read_state(_kafka()))[1]
    except LogFileError as exc:
        raise SystemExit(f"gangway: {exc}")


def cmd_explain(args) -> int:
    from gangway.read.explain import explain
    lines = explain(_log_of(args), args.job, forecast=not args.no_forecast)
    for line in lines:
        print(line)
    return 1 if lines[0].endswith("no such job in the log") else 0


def cmd_rules(args) -> int:
    from gangway.read import rules
    from gangway.contract import ConfigError, contract_digest, load_contract_file
    if args.config:
        try:
            contract = load_contract_file(args.config)
        except (ConfigError, OSError) as exc:
            raise SystemExit(f"gangway: {exc}")
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


def cmd_demo(args) -> int:
    from gangway.demo import run_demo
    return run_demo(console, time_scale=args.time_scale, out=args.out)


def cmd_schemas(args) -> int:
    from gangway.read import schemas
    return schemas.main(write=args.write)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gangway", description="GPU batch scheduling for shared Kubernetes clusters")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("broker", help="run the embedded Kafka-compatible broker and create the topics")
    s.add_argument("--port", type=int, default=0)
    s.set_defaults(func=cmd_broker)
    s = sub.add_parser("service", help="run one service (what `up` starts)")
    s.add_argument("name", choices=stack.SERVICES)
    s.add_argument("--cluster", help="binder: cluster file of Kubernetes Node objects")
    s.add_argument("--default-runtime", type=float, help="binder: seconds a job without a declared runtime runs")
    s.set_defaults(func=cmd_service)
    s = sub.add_parser("up", help="broker (unless GANGWAY_KAFKA) and the six services")
    s.add_argument("--config", help="Kueue YAML contract to apply")
    s.add_argument("--cluster", help="cluster file of Kubernetes Node objects (simulated cluster)")
    s.add_argument("--time-scale", type=float, default=1.0, help="cluster seconds per wall second")
    s.set_defaults(func=cmd_up)
    s = sub.add_parser("config", help="validate or apply a contract")
    s.add_argument("action", choices=("validate", "apply"))
    s.add_argument("file")
    s.set_defaults(func=cmd_config)
    s = sub.add_parser("submit", help="publish jobs (gangway YAML/JSON, Job, JobSet, PyTorchJob)")
    s.add_argument("file", help="a file, or - for standard input")
    s.set_defaults(func=cmd_submit)
    s = sub.add_parser("status", help="queues, running workloads, free GPUs per node")
    s.set_defaults(func=cmd_status)
    s = sub.add_parser("log", help="the decision log, readable")
    s.add_argument("--follow", action="store_true")
    s.add_argument("--export", metavar="FILE", help="write one structured CloudEvent per line")
    s.set_defaults(func=cmd_log)
    s = sub.add_parser("replay", help="audit: re-derive every decision of a log")
    s.add_argument("file", nargs="?", help="an exported log (default: the broker's log)")
    s.set_defaults(func=cmd_replay)
    s = sub.add_parser("explain", help="why a job waits, or what happened to it (decisions and reasons)")
    s.add_argument("job", help="namespace/job, or a job id")
    s.add_argument("--log", help="an exported log (default: the broker's log)")
    s.add_argument("--no-forecast", action="store_true", help="skip the estimated start time")
    s.set_defaults(func=cmd_explain)
    s = sub.add_parser("rules", help="the published contract, in words (from a config file or the log)")
    s.add_argument("--config", help="a Kueue YAML contract (default: the contract in force on the log)")
    s.add_argument("--log", help="an exported log (default: the broker's log)")
    s.add_argument("--html", action="store_true")
    s.add_argument("--out", help="write to this file")
    s.set_defaults(func=cmd_rules)
    s = sub.add_parser("demo", help="the whole system on a simulated 64-GPU cluster")
    s.add_argument("--time-scale", type=float, default=120.0)
    s.add_argument("--out", default="out/demo-log.jsonl")
    s.set_defaults(func=cmd_demo)
    benchmarks_cli.add_parsers(sub)
    s = sub.add_parser("schemas", help="check (or --write) the JSON Schemas and AsyncAPI document")
    s.add_argument("--write", action="store_true")
    s.set_defaults(func=cmd_schemas)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)
