"""Smoke versions of the benchmarks: they run end to end on small inputs and their figures hold
together (every decision reproduced, every workload placed). Speed is never asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from gangway.benchmarks import core as bench_core, pipeline as bench
from gangway.cli import main

#: The small reference subset shipped with the tests (its README says where it comes from).
REFERENCE = Path(__file__).parent / "data" / "reference"


def test_replay_benchmark_exports_reads_back_and_reproduces_every_decision():
    result = bench.bench_replay(events=3_000, workers=2)
    assert result["events"] >= 3_000
    assert result["mismatches"] == 0 and result["integrity"] == 0  # (the export's own checks too)
    assert result["verified"] == result["decisions"] > 0
    assert result["peak_rss_mib"] > 0 and result["generate_seconds"] > 0
    assert result["workers"] == 2 and all(cpu > 0 for cpu in result["runs_cpu_seconds"])
    assert "with 2 processes" in bench.replay_line(result) and "events per CPU second" in bench.replay_line(result)


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


@pytest.mark.broker
def test_a_shrunk_kueue_scenario_runs_end_to_end_and_every_workload_finishes(tmp_path, capsys):
    from gangway.benchmarks import kueue_scenarios as bench_kueue
    out = tmp_path / "kueue.json"
    assert main(["bench", "kueue", "--scenario", "baseline", "--shrink", "0.05", "--data", str(REFERENCE), "--out", str(out),
                 "--quick"]) == 0
    result = json.loads(out.read_text())
    assert result["runs_wall_ms"] == [result["wall_ms"]] and result["command"].startswith("gangway") and result["uptime"]
    sc = bench_kueue.load(REFERENCE / "kueue-perf" / "baseline" / "generator.yaml", 0.05)
    assert result["workloads"] == len(sc.specs)
    assert set(result["avg_time_to_admission_ms"]) == {"large", "medium", "small"}
    assert result["wall_ms"] >= result["lower_bound_ms"] * 0.95  # no run beats the bound (clock jitter aside)
    assert 0 < result["usage_pct"] <= 100.5
    assert result["replay"]["mismatches"] == 0
    assert "avg ms to admission small" in capsys.readouterr().out


def test_a_kueue_scenario_run_several_times_keeps_the_run_with_the_median_wall_and_every_runs_figures():
    from gangway.benchmarks.kueue_scenarios import median_run
    runs = [{"wall_ms": w, "avg_time_to_admission_ms": {"large": w / 10}, "quota_held_before_running_pct": w / 1000,
             "run": i} for i, w in enumerate([80_000, 76_000, 83_000])]
    kept = median_run(runs)
    assert kept["run"] == 0 and kept["runs_wall_ms"] == [80_000, 76_000, 83_000]
    assert kept["runs_admission_ms"] == [{"large": 8000.0}, {"large": 7600.0}, {"large": 8300.0}]
    assert kept["runs_quota_held_before_running_pct"] == [80.0, 76.0, 83.0]
    runs[0]["avg_time_to_admission_ms"] = {"large": 9000.0}  # the kept run's class is not the median
    assert median_run(runs)["median_admission_ms"] == {"large": 8300.0}
    assert median_run(runs)["median_quota_held_before_running_pct"] == 80.0
    assert median_run(runs[:2])["run"] == 1  # of two, the lower
    assert "runs_wall_ms" not in runs[0]  # the runs themselves are left as they were


def test_a_kueue_scenario_prints_each_goal_beside_the_median_of_its_figure_over_the_runs():
    """Each figure's own median (not the kept run's), the ratio to the goal, met or not, and whose goal."""
    from gangway.benchmarks.kueue_scenarios import goals, goals_report, median_run
    runs = [{"scenario": "baseline", "wall_ms": w, "wall_vs_lower_bound": w / 66_000, "usage_pct": u,
             "quota_held_before_running_pct": 6.0, "avg_time_to_admission_ms": {"large": 1.0, "small": 1.0},
             "admission_vs_kueue": {"large": large, "small": small}, "shrink": None}
            for w, u, large, small in [(72_600, 97.0, 0.13, 0.18), (73_800, 98.0, 0.19, 0.17), (72_800, 99.0, 0.09, 0.23)]]
    rows = {(r["figure"], r["source"]): r for r in median_run(runs)["goals"]}
    wall = rows[("wall / lower bound", "issue 13")]
    assert wall["median"] == 72_800 / 66_000 and wall["goal"] == 1.10 and not wall["met"]
    assert rows[("wall / lower bound", "issue 5")]["met"] and rows[("ClusterQueue usage %", "issue 5")]["met"]
    small = rows[("avg time to admission small / Kueue's", "issue 13")]
    assert (small["median"], small["runs"], small["met"]) == (0.18, [0.18, 0.17, 0.23], True)
    assert abs(small["ratio"] - 0.9) < 1e-9
    assert rows[("avg time to admission large / Kueue's", "issue 13")]["median"] == 0.13
    said = goals_report(median_run(runs)["goals"])
    assert said.splitlines()[0].startswith("median of 3 runs beside each goal")
    assert "wall / lower bound" in said and "≤ 1.1" in said and "NOT MET (issue 13)" in said
    assert goals("baseline", [{**r, "shrink": 0.05} for r in runs]) == []  # (no published figures to compare)


def test_kueue_scenarios_load_as_kueue_defines_them():
    from gangway.benchmarks import kueue_scenarios as bench_kueue
    sc = bench_kueue.load(REFERENCE / "kueue-perf" / "baseline" / "generator.yaml")
    assert len(sc.specs) == 15_000 and len(sc.contract.cluster_queues) == 30
    assert bench_kueue.lower_bound_ms(sc)["lower_bound_ms"] == 66_000
    large = bench_kueue.load(REFERENCE / "kueue-perf" / "large-scale" / "generator.yaml")
    assert len(large.specs) == 50_000 and len(large.contract.cluster_queues) == 1_000


def test_a_philly_prefix_runs_under_three_policies_and_every_job_finishes(tmp_path, capsys):
    assert main(["simulate", "--trace", "philly", "--jobs", "150", "--data", str(REFERENCE), "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "philly-150.json").read_text())
    assert [r["policy"] for r in result["results"]] == ["greedy-fifo", "kueue-like", "gangway"]
    for r in result["results"]:
        assert r["jobs"] == 150
        assert 0 < r["gpu_utilization_pct"] <= 100
        assert r["avg_jct_s"] >= r["avg_queueing_s"] >= 0
    assert (tmp_path / "philly-150-jct.png").exists()
    assert "average queueing delay per team" in capsys.readouterr().out


def philly(tmp_path, *jobs: str) -> Path:
    """A Philly trace folder of these job lines (timestamp,duration,num_gpus,gpu_time,cluster), one team of 2 nodes."""
    folder = tmp_path / "data" / "philly"
    folder.mkdir(parents=True)
    (folder / "philly_vc.csv").write_text("vc,node num\nteam,2\n")
    (folder / "philly.csv").write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "".join(j + "\n" for j in jobs))
    return folder.parent


@pytest.mark.parametrize("line, said", [
    ("2017-13-09 07:01:55,66.0,1,66.0,team", "philly.csv:2: timestamp '2017-13-09 07:01:55' is not a time"),
    ("2017-10-09 07:01:55,nan,1,66.0,team", "philly.csv:2: duration 'nan' is not a number of at least 0"),
    ("2017-10-09 07:01:55,-5,1,66.0,team", "philly.csv:2: duration '-5' is not a number of at least 0"),
    ("2017-10-09 07:01:55,66.0,1.5,66.0,team", "philly.csv:2: num_gpus '1.5' is not a whole number of at least 1"),
    ("2017-10-09 07:01:55,66.0,0,66.0,team", "philly.csv:2: num_gpus '0' is not a whole number of at least 1"),
    (None, "philly.csv: no jobs in it"),
    # a stranger's test: tracebacks, or wrong times
    ("2017-10-09 07:01:55,66,1", "philly.csv:2: not the 5 fields of the header"),
    ("2017-10-09 07:01:55,66,1,66,", "philly.csv:2: no cluster (the job's team)"),
    ("1969-12-31 23:00:00,66,1,66,team", "philly.csv:2: timestamp '1969-12-31 23:00:00' is before 1970"),
])
def test_a_trace_line_that_is_not_a_job_stops_simulate_in_one_line(tmp_path, line, said):
    data = philly(tmp_path, *([line] if line else []))
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--data", str(data), "--out", str(tmp_path / "out")])
    assert str(exc.value).startswith("gangway: ") and said in str(exc.value)


def test_a_trace_that_is_not_utf8_or_repeats_a_team_stops_in_one_line_and_a_time_with_an_offset_is_its_own(tmp_path):
    data = philly(tmp_path, "2017-10-09 07:01:55,60,1,60,team")
    (data / "philly" / "philly_vc.csv").write_text("vc,node num\nteam,2\nteam,5\n")
    with pytest.raises(SystemExit, match="philly_vc.csv:3: team 'team' a second time"):
        main(["simulate", "--data", str(data), "--out", str(tmp_path / "out")])
    (data / "philly" / "philly_vc.csv").write_text("vc,node num\nteam,2\n")
    (data / "philly" / "philly.csv").write_bytes(b"\xef\xbb\xbftimestamp,duration,num_gpus,gpu_time,cluster\n"
                                                 b"2017-10-09T07:01:55+05:00,60,1,60,team\n2017-10-09 07:01:55,60,1,60,t\xe9am\n")
    with pytest.raises(SystemExit, match="philly.csv: not UTF-8 text"):
        main(["simulate", "--data", str(data), "--out", str(tmp_path / "out")])
    from gangway.benchmarks.trace_simulation import load_trace
    (data / "philly" / "philly.csv").write_bytes(b"\xef\xbb\xbftimestamp,duration,num_gpus,gpu_time,cluster\n"
                                                 b"2017-10-09T07:01:55+05:00,60,1,60,team\n")
    [job], _ = load_trace(data)  # (the byte-order mark is no part of the header; +05:00 is five hours before UTC)
    assert job.submit_ms == 1_507_514_515_000


def test_a_job_bigger_than_the_cluster_is_left_out_and_said(tmp_path, capsys):
    data = philly(tmp_path, "2017-10-09 07:01:55,60,1,60,team", "2017-10-09 07:02:00,60,64,3840,team")
    assert main(["simulate", "--data", str(data), "--out", str(tmp_path / "out")]) == 0
    assert "left out: 1 job(s) asking more GPUs than the whole cluster has (16; the largest team/j00001, 64)" in \
        capsys.readouterr().out
    result = json.loads((tmp_path / "out" / "philly.json").read_text())
    assert [r["jobs"] for r in result["results"]] == [1, 1, 1]
    for option in (["--jobs", "-3"], ["--jobs", "0"], ["--capacity", "nan"], ["--capacity", "0"]):
        with pytest.raises(SystemExit):
            main(["simulate", "--data", str(data), *option])


def test_kueue_like_admits_at_most_one_workload_per_cluster_queue_per_cycle():
    from gangway.benchmarks.trace_simulation import first_admission_per_queue

    class Admitted:
        def __init__(self, workload, cluster_queue):
            self.workload, self.cluster_queue = workload, cluster_queue

    decide = first_admission_per_queue(lambda state: [Admitted("a/1", "a"), Admitted("a/2", "a"), Admitted("b/1", "b")])
    assert [d.workload for d in decide(None)] == ["a/1", "b/1"]


def test_bench_readme_figures_are_the_json_ones():
    """bench/README.md's generated blocks say what bench/results/*.json say (`make bench-readme`)."""
    from pathlib import Path

    from gangway.benchmarks.results import _span, readme_with_figures
    root = Path(__file__).resolve().parents[1]
    text = (root / "bench" / "README.md").read_text()
    assert "<!-- generated: kueue-tas -->" in text
    assert readme_with_figures(text, root / "bench" / "results") == text, "run `make bench-readme`"
    tas = msgspec.json.decode((root / "bench" / "results" / "kueue-tas.json").read_bytes())
    admission = tas.get("median_admission_ms") or tas["avg_time_to_admission_ms"]  # (each class's median of the runs)
    small = [v / 1000 for k, v in admission.items() if k.startswith("small-")]
    # kueue-tas.json's small classes, not the ≈ 82 s once written by hand
    assert f"small {_span(small)}" in text  # (one figure when the classes' medians agree)
    seconds = [v / 1000 for v in admission.values()]
    assert f"| avg time to admission, 9 classes | {_span(seconds)} |" in text


def test_bench_console_times_every_page_on_a_folded_log(tmp_path, capsys):
    out = tmp_path / "console.json"
    assert main(["bench", "console", "--quick", "--workloads", "150", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["events"] > 0 and result["fold_events_per_s"] > 0
    assert {path.split("?")[0] for path in result["pages_ms"]} == {"/api/view", "/metrics", "/api/stream", "/api/job"}
    assert "× the target" in capsys.readouterr().out


@pytest.mark.broker
def test_the_durability_benches_run_small_restore_every_offset_and_measure_a_loss(tmp_path, capsys):
    out = tmp_path / "restore.json"
    assert main(["bench", "restore", "--events", "3000", "--runs", "2", "--out", str(out)]) == 0
    restore = json.loads(out.read_text())
    assert restore["offsets_checked"] == 3000 and len(restore["restore_s_runs"]) == 2
    assert "× the target" in capsys.readouterr().out
    from gangway.benchmarks import durability
    loss = durability.bench_loss(rate=500, runs=1, run_s=1.0)
    assert loss["restored_equals_archived"] and loss["runs"][0]["acked"] > 0


def test_a_kueue_scenario_simulated_in_process_gives_the_policys_own_figures(tmp_path, capsys):
    out = tmp_path / "kueue.json"
    assert main(["bench", "kueue", "--scenario", "baseline", "--shrink", "0.05", "--data", str(REFERENCE),
                 "--simulated", "0", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["simulated_cycle_ms"] == 0 and len(result["runs_wall_ms"]) == 1
    assert result["wall_ms"] >= result["lower_bound_ms"]
    assert set(result["avg_time_to_admission_ms"]) == {"large", "medium", "small"}
    assert result["quota_held_before_running_pct"] == 0  # no round trips between admission and running
    assert "in-process simulation, 0 ms a deciding round" in capsys.readouterr().out
