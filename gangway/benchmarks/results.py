"""What every benchmark shares: where the reference data is, percentiles, and figures written as JSON."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def to_json(result: dict) -> str:
    return msgspec.json.format(msgspec.json.encode(result), indent=2).decode() + "\n"


def shared_data(data_dir: str | None = None) -> Path:
    """The full reference data of the long benchmarks: ``data_dir`` (``--data``), else ``$GANGWAY_DATA``,
    else ``../shared/data`` beside the project (or beside the working directory).

    Raises ``SystemExit`` with a clear message (exit status 2) when none of them is a folder.
    """
    given = data_dir or os.environ.get("GANGWAY_DATA")
    if given:
        if not Path(given).is_dir():
            raise SystemExit(f"gangway: reference data folder {given} does not exist (from --data or GANGWAY_DATA)")
        return Path(given)
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        candidate = root.parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    raise SystemExit("gangway: this benchmark needs the full reference data, which is not in the repository; "
                     "give its folder with --data DIR or GANGWAY_DATA=DIR (see bench/README.md)")


def write_json(result: dict, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(to_json(result))


def print_json(result: dict) -> None:
    print(to_json(result), end="")
