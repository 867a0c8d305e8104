"""Cut the reference subset in this folder from the full reference data.

    python tests/data/reference/cut.py FULL_DATA_DIR

Deterministic: the same full data gives the same bytes. README.md says what is kept and why.
"""

from __future__ import annotations

import csv
import datetime as dt
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Philly: the earliest jobs by submission time (the smoke simulation takes the first 150).
PHILLY_JOBS = 500
#: Alibaba openb: every EVERY-th pod of the traces the smoke runs use, so the mix of pod shapes is the
#: trace's (the first pods alone are mostly long-running CPU pods); arrivals are inflated from them.
POD_TRACES = ("gpushare100", "multigpu50")
EVERY = 4
#: FGD's own results: the traces above, the FGD policy only.
FGD_POLICY = "06-FGD"


def copy(full: Path, relative: str) -> None:
    (HERE / relative).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(full / relative, HERE / relative)


def write_rows(relative: str, header: list[str], rows: list[list[str]]) -> None:
    (HERE / relative).parent.mkdir(parents=True, exist_ok=True)
    with open(HERE / relative, "w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(header)
        out.writerows(rows)


def read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [r for r in rows[1:] if r]


def cut(full: Path) -> None:
    for scenario in ("baseline", "large-scale", "tas"):
        for name in ("generator.yaml", "rangespec.yaml"):
            copy(full, f"kueue-perf/{scenario}/{name}")
    copy(full, "philly/philly_vc.csv")
    header, rows = read_rows(full / "philly" / "philly.csv")
    at = header.index("timestamp")
    earliest = sorted(range(len(rows)), key=lambda i: (dt.datetime.fromisoformat(rows[i][at]), i))[:PHILLY_JOBS]
    write_rows("philly/philly.csv", header, [rows[i] for i in sorted(earliest)])
    copy(full, "alibaba-gpu-v2023/openb_node_list_all_node.csv")
    for trace in POD_TRACES:
        header, rows = read_rows(full / "alibaba-gpu-v2023" / f"openb_pod_list_{trace}.csv")
        write_rows(f"alibaba-gpu-v2023/openb_pod_list_{trace}.csv", header, rows[::EVERY])
    header, rows = read_rows(full / "fgd-results" / "analysis_allo_discrete.csv")
    wanted = {f"openb_pod_list_{t}" for t in POD_TRACES}
    kept = [r for r in rows if r[header.index("workload")] in wanted and r[header.index("sc_policy")] == FGD_POLICY]
    write_rows("fgd-results/analysis_allo_discrete.csv", header, kept)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.strip().splitlines()[2].strip())
    cut(Path(sys.argv[1]))
