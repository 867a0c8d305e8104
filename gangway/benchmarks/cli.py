"""`gangway bench` and `gangway simulate`: the benchmark commands, which print figures beside their targets.

They are commands, never timed unit tests; their results and notes are in ``bench/``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from gangway.benchmarks import results

TOPOLOGY_BENCHES = ("fgd", "placement")
DURABILITY_BENCHES = ("restore", "loss", "faults", "fuzz")


def _provenance(result: dict) -> dict:
    """The command that produced ``result`` and the machine's load average then (1, 5, 15 min)."""
    import os
    import shlex
    import sys
    result["command"] = shlex.join(["gangway", *sys.argv[1:]])
    result["uptime"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return result


def cmd_bench(args) -> int:
    if args.what in TOPOLOGY_BENCHES:
        return cmd_bench_topology(args)
    if args.what == "core":
        from gangway.benchmarks import core
        out = args.out or "bench/results/core.json"
        result = core.bench_core(**({"gpu_steps": (64, 512), "pending_steps": (100, 1000)} if args.quick else {}),
                                 runs=args.repeat or (1 if args.quick else 3))
        print(core.table(result))
        results.write_json(_provenance(result), out)
        core.plot(result, str(Path(out).with_suffix(".png")))
        return 0
    if args.what == "console":
        from gangway.benchmarks import console
        result = console.bench_console(workloads=args.workloads or 4000, runs=1 if args.quick else 3)
        print(console.table(result))
        if args.out:
            results.write_json(result, args.out)
        return 0
    if args.what == "money":
        from gangway.benchmarks import money
        result = money.bench_money(args.data, workloads=args.workloads or 15_000, runs=1 if args.quick else 3)
        print(money.table(result))
        if args.out:
            results.write_json(result, args.out)
        return 0
    if args.what in DURABILITY_BENCHES:
        return cmd_bench_durability(args)
    if args.what == "kueue":
        from gangway.benchmarks import kueue_scenarios
        return kueue_scenarios.main(args.scenario, args.out, shrink=args.shrink, data_dir=args.data,
                                    runs=args.repeat or (1 if args.quick else 3), provenance=_provenance,
                                    simulated=args.simulated, quota_holds=args.quota_holds,
                                    aging_s=args.priority_aging)
    from gangway.benchmarks import pipeline
    if args.what == "pipeline":
        brokers = pipeline.BROKERS if args.broker == "both" else (args.broker,)
        if brokers == ("embedded",) and (args.repeat or 1) == 1:
            result = pipeline.bench_pipeline(jobs=args.jobs, rate=args.rate)
        else:
            result = pipeline.bench_brokers(args.jobs, args.rate, brokers, args.repeat or 1)
    else:
        result = pipeline.bench_replay(workloads=args.workloads, events=args.events, load=args.load,
                                       repeat=args.repeat or 3, log=args.log, workers=args.workers)
    results.print_json(_provenance(result))
    if args.what == "replay":
        print(pipeline.replay_line(result))
    else:
        print(pipeline.pipeline_line(result))
    if args.out:
        results.write_json(result, args.out)
    return 0


def cmd_bench_durability(args) -> int:
    if args.what == "restore":
        from gangway.benchmarks import durability
        result = durability.bench_restore(events=args.events or 1_000_000, runs=args.runs or 3)
        print(durability.report_restore(result))
    elif args.what == "loss":
        from gangway.benchmarks import durability
        result = durability.bench_loss(rate=args.rate if args.rate != 100.0 else 2000.0, runs=args.runs or 5)
        print(durability.report_loss(result))
    elif args.what == "faults":
        from gangway.benchmarks import faults
        brokers = ("embedded", "apache-kafka") if args.broker == "both" else (args.broker,)
        runs = {broker: faults.main(shrink=args.shrink or 0.1, data_dir=args.data, span_s=args.span, broker=broker)
                for broker in brokers}
        print("\n\n".join(faults.report(r) for r in runs.values()))
        result = runs[brokers[0]] if len(runs) == 1 else {"brokers": runs, "ok": all(r["ok"] for r in runs.values())}
    else:
        from gangway.benchmarks import fuzz
        result = fuzz.bench_fuzz(examples=args.examples, only=args.decoder)
        print(fuzz.report(result))
    if args.out:
        results.write_json(result, args.out)
    return 0 if result.get("ok", True) else 1


def cmd_simulate(args) -> int:
    from gangway.benchmarks import trace_simulation
    return trace_simulation.main(args.trace, jobs=args.jobs, out_dir=args.out, data_dir=args.data,
                                 capacity=args.capacity)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number above 0")
    return value


def _seeds(text: str) -> list[int]:
    """``42`` or ``42-51`` (an argparse type: anything else is a usage error)."""
    first, _, last = text.partition("-")
    last = last or first
    if not (first.isascii() and first.isdigit() and last.isascii() and last.isdigit() and int(first) <= int(last)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed (42) or a range of seeds (42-51)")
    return list(range(int(first), int(last) + 1))


def _bounded_int(low: int, high: int, said: str = ""):
    """An argparse type: a whole number from ``low`` to ``high``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: {said or f'a whole number from {low} to {high}'}")
        return value
    return parse


def _gpus(text: str) -> int:
    """The placement bench's cluster: whole 8-GPU nodes, at least one."""
    value = _bounded_int(8, 1_048_576, "a cluster of 8 to 1,048,576 GPUs in whole 8-GPU nodes")(text)
    if value % 8:
        raise argparse.ArgumentTypeError(f"{text!r}: a cluster of whole 8-GPU nodes (a multiple of 8)")
    return value


def cmd_bench_topology(args) -> int:
    if args.what == "fgd":
        from gangway.benchmarks import fragmentation as fgd
        traces = fgd.traces_present(args.data) if args.trace == "all" else [args.trace]
        try:
            result = fgd.bench_fgd(traces, args.seeds, policy=args.policy, root=args.data, workers=args.workers,
                                   levels=tuple(range(0, args.upto + 1)))
        except fgd.TraceError as exc:
            print(f"gangway: {exc}", file=sys.stderr)
            return 1
        print(fgd.table(result))
        out = args.out
    else:
        from gangway.benchmarks import placement_speed
        result = placement_speed.bench_placement(gpus=args.gpus, gangs=args.gangs)
        print(placement_speed.table(result))
        out = args.out
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(results.to_json(result))
    return 0


def add_topology_bench_options(s: argparse.ArgumentParser) -> None:
    s.add_argument("--trace", default="default", help="fgd: an openb trace (default, multigpu50, gpushare100, cpu050, "
                   "gpuspec10, …) or all (every trace in the data folder)")
    s.add_argument("--seeds", type=_seeds, default="42-51", help="fgd: seeds, e.g. 42-51 or 42")
    s.add_argument("--policy", default="gangway", choices=("gangway", "fgd-like", "bestfit", "live"),
                   help="fgd: gangway, fgd-like (FGD's score alone), bestfit, or live (the live service's place_gang)")
    s.add_argument("--workers", type=_positive_int, default=2,
                   help="fgd: processes; replay: processes checking the log (default 2; 1: this one alone)")
    s.add_argument("--upto", type=_bounded_int(10, 130, "an arrival level from 10 to 130 (%% of the GPUs)"), default=130,
                   help="fgd: the last arrival level (%% of the GPUs) simulated, 10 to 130 (the paper's last)")
    s.add_argument("--gpus", type=_gpus, default=16_384, help="placement: cluster size in GPUs (whole 8-GPU nodes)")
    s.add_argument("--gangs", type=_positive_int, default=2000, help="placement: gangs placed")


def add_parsers(sub) -> None:
    """Add `bench` and `simulate` to the `gangway` command's subparsers."""
    s = sub.add_parser("bench", help="benchmarks that print figures (pipeline, replay, core, kueue, money, fgd, "
                                     "placement, restore, loss, faults, fuzz, console)")
    s.add_argument("what", choices=("pipeline", "replay", "core", "kueue", "money", "console", *TOPOLOGY_BENCHES, *DURABILITY_BENCHES))
    s.add_argument("--jobs", type=int, default=1000, help="pipeline: jobs per phase")
    s.add_argument("--rate", type=float, default=100.0, help="pipeline: jobs/s in the paced phase; loss: appends/s (default 2000)")
    s.add_argument("--broker", choices=("embedded", "apache-kafka", "both"), default="embedded",
                   help="pipeline, faults: the broker (apache-kafka: started from the Maven jars; both: side by side)")
    s.add_argument("--repeat", type=int, help="pipeline: runs per broker (medians reported; default 1); "
                                              "replay, core: runs whose median is reported (default 3); kueue: runs, the one "
                                              "with the median wall kept with every run's figures (default 3)")
    s.add_argument("--log", help="replay: verify this exported log (one CloudEvent per line) instead of generating one")
    s.add_argument("--workloads", type=int, help="replay: workloads in the generated log (in memory, deep queues); "
                                                 "money: workloads in the month (default 15,000); console: in the log (default 4,000)")
    s.add_argument("--events", type=int, help="replay, restore: events in the generated log")
    s.add_argument("--load", type=float, default=0.85, help="replay --events: offered GPU load of the generated log")
    s.add_argument("--quick", action="store_true", help="core: a small grid only; kueue: one run")
    s.add_argument("--scenario", default="baseline", help="kueue: baseline, large-scale or tas")
    s.add_argument("--simulated", type=int, metavar="MS",
                   help="kueue: run the scenario on the in-process simulation, MS ms of cluster time a deciding "
                        "round (0: the policy alone, without the pipeline's round trips); one run, deterministic")
    s.add_argument("--quota-holds", type=int, metavar="N",
                   help="kueue: the contract's backfill.quotaHoldsPerTree (default: the contract default, 8)")
    s.add_argument("--priority-aging", type=float, metavar="SECONDS",
                   help="kueue: the contract's priorityAging.secondsPerPoint (default: none, strict priority)")
    s.add_argument("--shrink", type=float, help="kueue: keep this fraction of queues and workloads, runtimes too; "
                                                "faults: of workloads only (default 0.1)")
    s.add_argument("--data", help="kueue, fgd, money, faults: the full reference data folder (default: $GANGWAY_DATA)")
    s.add_argument("--span", type=float, help="faults: compress the workloads' creation into this many seconds")
    s.add_argument("--runs", type=int, help="loss: kill -9 runs (default 5); restore: restores of the archive (default 3)")
    s.add_argument("--examples", type=_positive_int, default=100_000,
                   help="fuzz: generated inputs per decoder (the log reader, without --decoder, a fifth of them)")
    s.add_argument("--decoder", choices=("submission", "telemetry", "log"), help="fuzz: this decoder only")
    s.add_argument("--out", help="also write the figures as JSON to this file (core: by default "
                                 "bench/results/core.json)")
    add_topology_bench_options(s)
    s.set_defaults(func=cmd_bench)
    s = sub.add_parser("simulate", help="a real trace through decide and apply under a simulated clock")
    s.add_argument("--trace", choices=("philly",), default="philly",
                   help="the trace: Microsoft's Philly (DATA/philly/philly.csv and philly_vc.csv; openb traces run "
                        "with `gangway bench fgd`)")
    s.add_argument("--jobs", type=_positive_int, help="only the earliest N jobs of the trace, by submission time")
    s.add_argument("--capacity", type=_positive_float, default=1.0,
                   help="nodes per team: this fraction of philly_vc.csv's (at least one node a team)")
    s.add_argument("--data", help="the full reference data folder (default: $GANGWAY_DATA)")
    s.add_argument("--out", default="bench/results", help="folder for the JSON and the plots (default bench/results)")
    s.set_defaults(func=cmd_simulate)
