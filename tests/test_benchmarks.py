"""Smoke versions of the benchmarks: they run end to end on small inputs and their figures hold
together (every decision reproduced, every workload placed). Speed is never asserted here."""

from __future__ import annotations

import json

from gangway import bench, bench_core
from gangway.cli import main


def test_replay_benchmark_exports_reads_back_and_reproduces_every_decision():
    result = bench.bench_replay(events=3_000)
    assert result["events"] >= 3_000
    assert result["mismatches"] == 0
    assert result["verified"] == result["decisions"] > 0
    assert result["peak_rss_mib"] > 0 and result["generate_seconds"] > 0


def test_core_cycle_fills_the_freed_room_from_a_deep_queue():
    row = bench_core.measure(gpus=64, pending=200)
    assert row["admitted"] == row["placed"] > 0
    assert row["admitted"] <= row["gpus_freed"]


def test_bench_core_writes_a_table_json_and_a_plot(tmp_path, capsys):
    out = tmp_path / "core.json"
    assert main(["bench", "core", "--quick", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert len(result["rows"]) == 4
    assert result["memory"]["pending_bytes_per_workload"] > 0
    assert (tmp_path / "core.png").stat().st_size > 0
    assert "admissions+placements/s" in capsys.readouterr().out
