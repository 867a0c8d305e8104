"""What every benchmark shares: where the reference data is, percentiles, and figures written as JSON."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import msgspec


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def to_json(result: dict) -> str:
    return msgspec.json.format(msgspec.json.encode(result), indent=2).decode() + "\n"


class ReferenceDataMissing(RuntimeError):
    """A long benchmark was not given the full reference data (or it lacks a file the benchmark reads)."""


def reference_data(data_dir: str | Path | None = None, needs: str | None = None) -> Path:
    """The full reference data of the long benchmarks: ``data_dir`` (``--data``), else ``$GANGWAY_DATA``.

    It is not in the repository (tests/data/reference/README.md says where each part comes from; the
    tests read the small subset there). ``needs``: a file the benchmark reads, relative to the folder.
    Raises ``ReferenceDataMissing``, whose message is one line saying what to give, when the folder is
    not given, is not a folder, or lacks ``needs``.
    """
    given = data_dir or os.environ.get("GANGWAY_DATA")
    if not given:
        raise ReferenceDataMissing("this benchmark reads the full reference data, which is not in the repository: "
                                   "give its folder with --data DIR or GANGWAY_DATA=DIR "
                                   "(tests/data/reference/README.md says where it comes from)")
    root = Path(given)
    if not root.is_dir():
        raise ReferenceDataMissing(f"reference data folder {root} does not exist (from --data or GANGWAY_DATA)")
    if needs is not None and not (root / needs).is_file():
        raise ReferenceDataMissing(f"reference data folder {root} has no {needs} (from --data or GANGWAY_DATA)")
    return root


def write_json(result: dict, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(to_json(result))


def print_json(result: dict) -> None:
    print(to_json(result), end="")


# --- text generated from the JSON figures (bench/README.md) --------------------------------------

#: ``<!-- generated: NAME -->`` … ``<!-- end generated -->``: a block of bench/README.md written by
#: ``readme_block(NAME, results)`` from the JSON in bench/results, so text and figures cannot disagree.
_BLOCK_START = "<!-- generated: {} -->"
_BLOCK_END = "<!-- end generated -->"


def _span(values: list[float], unit: str = " s", digits: int = 1) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}{unit}" if round(low, digits) == round(high, digits) else \
        f"{low:.{digits}f}–{high:.{digits}f}{unit}"


def kueue_tas_text(result: dict) -> str:
    """The sentence bench/README.md gives for ``bench kueue --scenario tas`` (kueue-tas.json): the
    median of the runs where there were several (the wall's run, and each class's own median)."""
    admission = result.get("median_admission_ms") or result["avg_time_to_admission_ms"]
    by_size = {size: [v / 1000 for k, v in admission.items() if k.startswith(size + "-")]
               for size in ("large", "medium", "small")}
    ratios = list((result.get("median_admission_vs_kueue") or result["admission_vs_kueue"]).values())
    walls = result.get("runs_wall_ms") or [result["wall_ms"]]
    held = result.get("median_quota_held_before_running_pct", result["quota_held_before_running_pct"])
    replay = result.get("replay") or {}
    replayed = (f", every decision reproduced on replay ({replay['verified']:,} of {replay['decisions']:,})"
                if replay and replay.get("mismatches") == 0 else "")
    return (f"wall {result['wall_ms'] / 1000:.1f} s (median of {len(walls)}: {_runs([w / 1000 for w in walls], 1)} s; "
            f"{result['wall_vs_lower_bound']:.2f} × the bound, "
            f"{result['wall_vs_kueue']:.2f} × Kueue's {result['kueue_published']['wall_ms'] / 1000:.1f} s), "
            f"usage {result['usage_pct']:.1f} %, average time to admission {_span(ratios, '', 2)} of Kueue's per "
            f"class (large {_span(by_size['large'])}, medium {_span(by_size['medium'])}, small "
            f"{_span(by_size['small'])}), {held:.1f} % of the quota-time held "
            f"before running{replayed} (`bench/results/kueue-tas.json`).")


def _runs(values: list[float], digits: int = 0) -> str:
    return ", ".join(f"{v:,.{digits}f}" for v in values)


def replay_text(result: dict) -> str:
    """``bench replay`` (replay-1m.json): the median speed beside the target, every run, the command."""
    runs = result.get("runs_events_per_s") or [result["events_per_s"]]
    workers = result.get("workers", 1)
    cpu = result.get("runs_cpu_seconds")
    per_cpu = (f"{result['events'] / statistics.median(cpu):,.0f} events per CPU second"
               f"{' of them all' if workers > 1 else ''}; " if cpu else "")
    return (f"{result['events_per_s']:,.0f} events/s verifying {result['events']:,} events "
            f"with {workers} process{'es' if workers > 1 else ''} "
            f"({per_cpu}{result['verified']:,} of {result['decisions']:,} decisions reproduced, {result['mismatches']} "
            f"mismatches; median of {len(runs)}: {_runs(runs)}) — target {result['target_events_per_s']:,}: "
            f"{result['ratio_to_target']:.2f}× (`{result.get('command', 'gangway bench replay --events 1000000')}`"
            f"{', load ' + result['uptime'] if result.get('uptime') else ''}).")


def core_depth_text(result: dict) -> str:
    """``bench core`` (core.json): each of issue 13's points at depth beside its target."""
    out = []
    for t in result.get("targets", []):
        runs = t.get("runs_per_s") or [t["admissions_placements_per_s"]]
        out.append(f"{t['gpus']:,} GPUs, {t['pending']:,} pending: {t['admissions_placements_per_s']:,.0f} "
                   f"admissions+placements/s (median of {len(runs)}: {_runs(runs)}) — target "
                   f"{t['target_per_s']:,}: {t['ratio_to_target']:.2f}×")
    return ("; ".join(out) + f" (`{result.get('command', 'gangway bench core')}`"
            f"{', load ' + result['uptime'] if result.get('uptime') else ''}).")


def pipeline_burst_text(result: dict) -> str:
    """``bench pipeline --jobs 10000 --repeat 3`` (pipeline-burst.json): the burst beside its target."""
    target = 1_500
    median = result["embedded"]["median"]["burst"]["workloads_per_s"]
    runs = [r["burst"]["workloads_per_s"] for r in result["embedded"]["runs"]]
    return (f"burst of {result['jobs']:,} jobs on {2 * result['jobs'] + 10:,} GPUs through the six processes: "
            f"{median:,.0f} workloads/s end to end (median of {len(runs)}: {_runs(runs)}) — target {target:,}: "
            f"{median / target:.2f}× (`{result.get('command', 'gangway bench pipeline')}`"
            f"{', load ' + result['uptime'] if result.get('uptime') else ''}).")


def kueue_simulated_text(result: dict) -> str:
    """``bench kueue --simulated MS`` (kueue-<scenario>-simulated-<MS>ms.json): the policy's figures
    without the pipeline's round trips, each class beside Kueue's."""
    classes = ", ".join(f"{c} {v / 1000:.1f} s = {result['admission_vs_kueue'][c]:.3f}"
                        for c, v in result["avg_time_to_admission_ms"].items())
    return (f"{result['simulated_cycle_ms']} ms a deciding round: wall {result['wall_ms'] / 1000:.1f} s "
            f"({result['wall_vs_lower_bound']:.3f} × the bound), average time to admission {classes} of Kueue's, "
            f"{result['quota_held_before_running_pct']:.1f} % of the quota-time held before running "
            f"(`{result.get('command', 'gangway bench kueue --simulated')}`)")


def kueue_aged_text(result: dict) -> str:
    """``bench kueue --priority-aging S`` (kueue-<scenario>-aging-<ms>ms.json): each class's median
    wait of the runs beside Kueue's and ⅕ of it, every run's, the wall and what was held."""
    runs = result.get("runs_admission_ms") or [result["avg_time_to_admission_ms"]]
    kueue = result["kueue_published"]["admission_ms"]
    classes = ", ".join(
        f"{c} {v / 1000:.1f} s = {result['median_admission_vs_kueue'][c]:.3f} "
        f"(runs {_runs([run[c] / kueue[c] for run in runs], 3)})"
        for c, v in result["median_admission_ms"].items())
    walls = result.get("runs_wall_ms") or [result["wall_ms"]]
    return (f"one priority point per {result['aging_ms_per_point'] / 1000:g} s waited: wall "
            f"{result['wall_ms'] / 1000:.1f} s (median of {len(walls)}: {_runs([w / 1000 for w in walls], 1)} s; "
            f"{result['wall_vs_lower_bound']:.3f} × the bound), average time to admission {classes} of Kueue's, "
            f"{result['median_quota_held_before_running_pct']:.1f} % of the quota-time held before running "
            f"(`{result['command']}`, load {result.get('uptime', '?')})")


_BLOCKS = {"kueue-tas": ("kueue-tas.json", kueue_tas_text), "replay": ("replay-1m.json", replay_text),
           "replay-one-process": ("replay-1m-one-process.json", replay_text),
           "core-depth": ("core.json", core_depth_text), "pipeline-burst": ("pipeline-burst.json", pipeline_burst_text),
           "kueue-baseline-simulated-0ms": ("kueue-baseline-simulated-0ms.json", kueue_simulated_text),
           "kueue-baseline-simulated-10ms": ("kueue-baseline-simulated-10ms.json", kueue_simulated_text),
           "kueue-baseline-aging-450ms": ("kueue-baseline-aging-450ms.json", kueue_aged_text)}


def readme_with_figures(text: str, results_dir: Path) -> str:
    """``text`` (bench/README.md) with every generated block rewritten from its JSON."""
    for name, (file, render) in _BLOCKS.items():
        start = _BLOCK_START.format(name)
        while start in text:
            head, _, rest = text.partition(start)
            _, found, tail = rest.partition(_BLOCK_END)
            if not found:
                raise ValueError(f"{start} has no {_BLOCK_END}")
            body = render(msgspec.json.decode((results_dir / file).read_bytes()))
            text = head + "\0" + body + _BLOCK_END + tail
        text = text.replace("\0", start)
    return text


def write_readme(readme: str = "bench/README.md", results_dir: str = "bench/results") -> bool:
    """Rewrite the generated blocks of ``readme`` from the JSON; True when something changed."""
    path = Path(readme)
    text = path.read_text()
    updated = readme_with_figures(text, Path(results_dir))
    if updated != text:
        path.write_text(updated)
    return updated != text
