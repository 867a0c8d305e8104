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
