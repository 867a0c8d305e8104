"""What a user can put right ends in one line and a non-zero exit, never a traceback: a Kafka that does
not answer (a wrong GANGWAY_KAFKA, or a .gangway/bootstrap left by a `gangway up` that was killed), and
the long benchmarks run without their reference data. Each command runs as a user runs it: a process."""

from __future__ import annotations

import os
import socket
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gangway.adapters.broker import free_port

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "gangway" / "demo"

#: Every command that talks to the broker (the ones that start a stack are given an outside Kafka).
BROKER_COMMANDS = {
    "status": ["status"],
    "log": ["log"],
    "log --follow": ["log", "--follow"],
    "log --export": ["log", "--export", "out.jsonl"],
    "replay without a file": ["replay"],
    "explain without --log": ["explain", "research/sweep-3"],
    "rules without --config": ["rules"],
    "submit": ["submit", str(DEMO / "jobs-night.yaml")],
    "config apply": ["config", "apply", str(DEMO / "contract.yaml")],
    "service admission": ["service", "admission"],
    "service submission": ["service", "submission"],
    "bench pipeline": ["bench", "pipeline", "--jobs", "10"],
    "up": ["up"],
}
#: Some of those that find the broker through the state directory's bootstrap file (all of them do it
#: through one function, and all fail through one error).
STACK_COMMANDS = ["status", "submit", "service submission"]


def gangway(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("GANGWAY_KAFKA", "GANGWAY_DATA", "GANGWAY_STATE_DIR")}
    return subprocess.run([sys.executable, "-m", "gangway", *args], cwd=cwd, env={**clean, **env},
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def assert_one_line_failure(result: subprocess.CompletedProcess, *expected: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for text in expected:
        assert text in lines[0]
    return lines[0]


@pytest.mark.parametrize("command", list(BROKER_COMMANDS))
def test_a_wrong_gangway_kafka_fails_in_one_line_naming_the_address_and_what_to_do(command, tmp_path):
    address = f"127.0.0.1:{free_port()}"
    result = gangway(BROKER_COMMANDS[command], tmp_path, GANGWAY_KAFKA=address, GANGWAY_STATE_DIR=str(tmp_path / "s"))
    line = assert_one_line_failure(result, f"cannot reach Kafka at {address}", "check GANGWAY_KAFKA")
    assert line.startswith("gangway: ")


@pytest.mark.parametrize("command", STACK_COMMANDS)
def test_a_stale_bootstrap_file_fails_in_one_line_saying_the_stack_is_gone(command, tmp_path):
    address = f"127.0.0.1:{free_port()}"
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "bootstrap").write_text(address + " embedded\n")  # as `gangway up` writes it
    result = gangway(BROKER_COMMANDS[command], tmp_path, GANGWAY_STATE_DIR=str(tmp_path / "state"))
    assert_one_line_failure(result, f"cannot reach Kafka at {address}", "no longer running", "gangway up")


def test_without_a_stack_a_command_says_how_to_get_one(tmp_path):
    result = gangway(["status"], tmp_path, GANGWAY_STATE_DIR=str(tmp_path / "none"))
    assert_one_line_failure(result, "set GANGWAY_KAFKA or start the stack with `gangway up`")


def test_an_address_that_is_not_kafka_is_told_apart_from_one_where_nothing_listens(tmp_path):
    # A server of another kind, which hangs up on what it does not understand.
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = "127.0.0.1:%d" % server.server_address[1]
        result = gangway(["status"], tmp_path, GANGWAY_KAFKA=address)
    finally:
        server.shutdown()
        server.server_close()
    assert_one_line_failure(result, f"cannot reach Kafka at {address}", "does not answer as Kafka")


LONG_BENCHMARKS = {
    "bench kueue": ["bench", "kueue"],
    "bench fgd": ["bench", "fgd", "--seeds", "42"],
    "simulate": ["simulate", "--jobs", "10"],
}


@pytest.mark.parametrize("command", list(LONG_BENCHMARKS))
def test_a_long_benchmark_without_its_reference_data_says_how_to_give_it(command, tmp_path):
    result = gangway(LONG_BENCHMARKS[command], tmp_path)
    assert_one_line_failure(result, "--data DIR or GANGWAY_DATA=DIR")
    result = gangway(LONG_BENCHMARKS[command], tmp_path, GANGWAY_DATA=str(tmp_path / "nowhere"))
    assert_one_line_failure(result, f"{tmp_path / 'nowhere'} does not exist")
    result = gangway([*LONG_BENCHMARKS[command], "--data", str(tmp_path)], tmp_path)
    assert_one_line_failure(result, f"reference data folder {tmp_path} has no ")


FILE_COMMANDS = {
    "replay": ["replay", "{f}"],
    "explain --log": ["explain", "--log", "{f}", "team/x"],
    "showback --log": ["showback", "--log", "{f}"],
    "config apply": ["config", "apply", "{f}"],
    "submit": ["submit", "{f}"],
}


@pytest.mark.parametrize("command", list(FILE_COMMANDS))
def test_a_file_that_is_not_there_or_is_a_folder_fails_in_one_line_naming_it(command, tmp_path):
    for path, why in ((tmp_path / "nope", "No such file or directory"), (tmp_path, "Is a directory")):
        args = [a.replace("{f}", str(path)) for a in FILE_COMMANDS[command]]
        result = gangway(args, tmp_path, GANGWAY_KAFKA=f"127.0.0.1:{free_port()}")
        assert_one_line_failure(result, f"gangway: {path}: {why}")


def test_a_reader_that_stops_early_gets_no_traceback():
    """`gangway rules … | head -1`: the pipe closes before the text is written."""
    proc = subprocess.Popen([sys.executable, "-m", "gangway", "rules", "--config", str(DEMO / "contract.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err, err


#: Files `gangway submit` refuses whole, before it talks to any broker (exit 2): what it says.
REFUSED_SUBMISSIONS = {
    "not UTF-8": (b'\xff\xfe{"job_id":"x"}', "document 1: not UTF-8 text: invalid start byte at line 1, byte 0"),
    "an empty list": (b"[]", "no jobs in it"),
    "null": (b"null", "no jobs in it"),
    "empty": (b"", "no jobs in it"),
    "one job twice": (b"job_id: y06\nnamespace: batch\nqueue: default\npod_sets: [{name: m, count: 1, resources: "
                      b"{nvidia.com/gpu: 1}}]\n---\njob_id: y06\nnamespace: batch\nqueue: default\npod_sets: "
                      b"[{name: m, count: 2, resources: {nvidia.com/gpu: 2}}]\n",
                      "document 2 (y06): job batch/y06 is also document 1"),
    "an infinite runtime": (b'{"job_id": "rt-2", "namespace": "research", "queue": "default", "runtime_seconds": '
                            b'1e400, "pod_sets": [{"name": "main", "count": 1, "resources": {"nvidia.com/gpu": 1}}]}',
                            "document 1 (rt-2): runtime_seconds: Number out of range (invalid_field, as the "
                            "submission service would reject it)"),
    "over 1 MiB": (b'{"job_id": "huge-1", "namespace": "batch", "queue": "default", "labels": {"l": "'
                   + b"x" * 1_100_000 + b'"}, "pod_sets": [{"name": "m", "count": 1, "resources": {"nvidia.com/gpu": 1}}]}',
                   "over the 1048576-byte (1 MiB) limit"),
}


@pytest.mark.parametrize("case", list(REFUSED_SUBMISSIONS))
def test_submit_refuses_a_file_it_cannot_send_whole_with_its_reason_and_exit_2(case, tmp_path):
    data, expected = REFUSED_SUBMISSIONS[case]
    path = tmp_path / "jobs.json"
    path.write_bytes(data)
    for args, stdin in ((["submit", str(path)], None), (["submit", "-"], data)):
        clean = {k: v for k, v in os.environ.items() if k not in ("GANGWAY_KAFKA", "GANGWAY_STATE_DIR")}
        result = subprocess.run([sys.executable, "-m", "gangway", *args], cwd=tmp_path, input=stdin,
                                env={**clean, "GANGWAY_KAFKA": f"127.0.0.1:{free_port()}", "COLUMNS": "400"},
                                capture_output=True, timeout=60)
        out = (result.stdout + result.stderr).decode()
        assert result.returncode == 2, out
        assert "Traceback" not in out and "cannot reach" not in out, out  # (refused before any broker)
        name = str(path) if stdin is None else "<stdin>"
        assert f"{name}: " in out and expected in out, out


#: Every command that reads a contract file (each reads it through one reader), and its exit status
#: for a contract it cannot use (`config validate` says 1, as for any invalid contract; the others 2).
CONTRACT_COMMANDS = {
    "config validate": (["config", "validate", "{f}"], 1),
    "config apply": (["config", "apply", "{f}"], 2),
    "rules --config": (["rules", "--config", "{f}"], 2),
    "dry-run --config": (["dry-run", "--config", "{f}", "--cluster", str(DEMO / "cluster.yaml"),
                          str(DEMO / "jobs-night.yaml")], 2),
    "up --config": (["up", "--config", "{f}"], 2),
}


@pytest.mark.parametrize("command", list(CONTRACT_COMMANDS))
def test_a_contract_file_that_is_not_utf8_is_one_line_the_same_for_every_command(command, tmp_path):
    path = tmp_path / "contract.yaml"
    path.write_bytes(b"# the contract\n\xff\xfe")
    args, status = CONTRACT_COMMANDS[command]
    result = gangway([a.replace("{f}", str(path)) for a in args], tmp_path, GANGWAY_KAFKA=f"127.0.0.1:{free_port()}",
                     GANGWAY_STATE_DIR=str(tmp_path / "state"))
    out = result.stdout + result.stderr
    assert result.returncode == status and "Traceback" not in out, out  # (refused before any broker or stack)
    assert out.strip().splitlines() == [
        f"{path}: not UTF-8 text: invalid start byte at line 2, byte 15 (b'\\xff'); save the file as UTF-8"], out


NODE = ("apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\n"
        "status: {{allocatable: {{cpu: '96', nvidia.com/gpu: '{gpus}'}}}}\n")
#: Cluster files no command can use, and what `gangway dry-run` and `gangway up` say of each after "FILE: ".
BAD_CLUSTER_FILES = {
    "not UTF-8": (b"apiVersion: v1\n\xff", "not UTF-8 text: invalid start byte at line 2, byte 15 (b'\\xff'); "
                                           "save the file as UTF-8"),
    "not YAML": (b"items: [\n", "line 2: not YAML: did not find expected node content (column 1)"),
    "a GPU count no node has": (NODE.format(name="n0", gpus="100000000000").encode(),
                                "Node n0: status.allocatable.nvidia.com/gpu: '100000000000' GPUs on one node: at most "
                                "1024 (the largest nodes have 16; gangway keeps each GPU's use apart)"),
    "a node named twice": ((NODE.format(name="n0", gpus=8) + "---\n" + NODE.format(name="n0", gpus=8)).encode(),
                           "node name n0 repeats: each Node must be named once"),
    "no such file": (None, "No such file or directory"),
    "no Node in it": (b"# nodes to come\n", "no Node in it: a cluster file holds the cluster's Kubernetes Nodes (kind: "
                                            "Node, or a List of them, as `kubectl get nodes -o yaml` writes)"),
    "a node name Kubernetes refuses": (NODE.format(name="Bad_Name", gpus=8).encode(),
                                       "Node metadata.name: \"Bad_Name\" is not a valid name (lowercase letters, "
                                       "digits, '-' and '.', starting and ending with a letter or digit)"),
    "a Pod among the Nodes": ((NODE.format(name="n0", gpus=8) + "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\n").encode(),
                              "item 1 (p) is not a Node: kind 'Pod'"),
}


@pytest.mark.parametrize("case", list(BAD_CLUSTER_FILES))
def test_a_cluster_file_that_cannot_be_read_stops_dry_run_and_up_in_the_same_one_line(case, tmp_path):
    """`gangway up --cluster F` reads F before it starts anything (it started the stack, and the binder
    crash-looped until `up` died with a traceback); a file that is not UTF-8 or names more GPUs than
    any node has was a traceback in dry-run too (UnicodeDecodeError, MemoryError)."""
    data, said = BAD_CLUSTER_FILES[case]
    path = tmp_path / "nodes.yaml"
    if data is not None:
        path.write_bytes(data)
    dry_run = gangway(["dry-run", "--config", str(DEMO / "contract.yaml"), "--cluster", str(path),
                       str(DEMO / "jobs-night.yaml")], tmp_path)
    line = assert_one_line_failure(dry_run, f"gangway: {path}: {said}")
    assert dry_run.returncode == 1
    state = tmp_path / "state"
    up = gangway(["up", "--cluster", str(path)], tmp_path, GANGWAY_KAFKA=f"127.0.0.1:{free_port()}",
                 GANGWAY_STATE_DIR=str(state))
    assert assert_one_line_failure(up) == line and up.returncode == 1
    assert not state.exists()  # (nothing started: no broker asked, no service spawned)


def test_up_ends_in_one_line_naming_a_service_that_keeps_dying_and_its_log(tmp_path):
    """A service that dies at every start (here accounting, given a database URL it cannot use): `up`
    restarts it, then stops the stack and says which service and where its log is (it ended in a
    RuntimeError traceback)."""
    state = tmp_path / "state"
    result = gangway(["up"], tmp_path, GANGWAY_STATE_DIR=str(state), GANGWAY_DB="nosuchdb://x")
    out = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in out, out
    assert result.stderr.strip().splitlines()[-1] == (
        f"gangway: service accounting keeps dying (exit 1); see {state / 'logs' / 'accounting.log'}")
    assert "nosuchdb" in (state / "logs" / "accounting.log").read_text()


#: Numbers no command can use: a usage error (exit 2) naming the option and what it must be, as
#: `replay --workers 0` is, before anything starts (`up --time-scale 0` started a stack whose clock
#: never moved; `console --port 99999` was an OverflowError traceback).
BAD_NUMBERS = {
    "up --time-scale 0": (["up", "--time-scale", "0"], "argument --time-scale: must be above 0 and at most 100000"),
    "up --time-scale -5": (["up", "--time-scale", "-5"], "argument --time-scale: must be above 0"),
    "up --time-scale nan": (["up", "--time-scale", "nan"], "argument --time-scale: must be above 0"),
    "up --time-scale inf": (["up", "--time-scale", "inf"], "argument --time-scale: must be above 0 and at most"),
    "up --bind-backoff -1": (["up", "--kubernetes", "--bind-backoff", "-1"],
                             "argument --bind-backoff: must be from 0 to 31622400 seconds (366 days), not -1"),
    "up --bind-backoff-max nan": (["up", "--kubernetes", "--bind-backoff-max", "nan"],
                                  "argument --bind-backoff-max: must be from 0 to 31622400 seconds"),
    "up --bind-backoff-limit -1": (["up", "--kubernetes", "--bind-backoff-limit", "-1"],
                                   "argument --bind-backoff-limit: must be 0 or more, not -1"),
    "demo --time-scale 0": (["demo", "--time-scale", "0"], "argument --time-scale: must be above 0"),
    "console --port 99999": (["console", "--port", "99999"],
                             "argument --port: must be a port from 1 to 65535 (0: any free one), not 99999"),
    "console --port -1": (["console", "--port", "-1"], "argument --port: must be a port from 1 to 65535"),
    "demo --console --port 70000": (["demo", "--console", "--port", "70000"], "argument --port: must be a port"),
    "telemetry --interval 0": (["telemetry", "scrape", "http://127.0.0.1:1/metrics", "--interval", "0"],
                               "argument --interval: must be above 0"),
}


@pytest.mark.parametrize("case", list(BAD_NUMBERS))
def test_a_number_an_option_cannot_take_is_a_usage_error_before_anything_starts(case, tmp_path):
    args, said = BAD_NUMBERS[case]
    state = tmp_path / "state"
    result = gangway(args, tmp_path, GANGWAY_KAFKA=f"127.0.0.1:{free_port()}", GANGWAY_STATE_DIR=str(state))
    assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr, result.stderr
    error = result.stderr.strip().splitlines()[-1]  # (after argparse's usage)
    assert error.startswith(f"gangway {args[0]}: error: {said}") and error.endswith(f", not {args[-1]}"), error
    assert not state.exists()


def test_the_console_on_a_port_in_use_or_an_address_not_here_says_so_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = gangway(["console", "--port", str(port)], tmp_path, GANGWAY_KAFKA=f"127.0.0.1:{free_port()}")
        # the demo binds its console's port before its story: taken, it says so before starting anything
        demo = gangway(["demo", "--console", "--port", str(port)], tmp_path, GANGWAY_STATE_DIR=str(tmp_path / "state"))
    assert_one_line_failure(result, f"gangway: port {port} is in use: pick another with --port")
    assert result.returncode == 1
    assert_one_line_failure(demo, f"gangway: port {port} is in use: pick another with --port")
    assert demo.returncode == 1 and not (tmp_path / "state").exists()
    result = gangway(["console", "--host", "192.0.2.1", "--port", str(free_port())], tmp_path,
                     GANGWAY_KAFKA=f"127.0.0.1:{free_port()}")  # (TEST-NET-1: no machine's own address)
    assert_one_line_failure(result, "gangway: cannot listen on 192.0.2.1:", "Cannot assign requested address")


def test_log_follow_and_export_together_are_refused_not_follow_ignored(tmp_path):
    """An export is the log up to now: --follow beside it was ignored in silence (a stranger's test)."""
    result = gangway(["log", "--follow", "--export", "x.jsonl"], tmp_path, GANGWAY_KAFKA=f"127.0.0.1:{free_port()}")
    assert result.returncode == 2 and "--follow and --export exclude each other" in result.stdout + result.stderr
    assert not (tmp_path / "x.jsonl").exists()


BAD_BENCH_OPTIONS = {
    "fgd --seeds abc": (["bench", "fgd", "--seeds", "abc"], "argument --seeds: 'abc' is not a seed"),
    "fgd --seeds 51-42": (["bench", "fgd", "--seeds", "51-42"], "argument --seeds: '51-42' is not a seed"),
    "fgd --upto 131": (["bench", "fgd", "--upto", "131"], "argument --upto: '131': an arrival level from 10 to 130"),
    "fgd --upto -5": (["bench", "fgd", "--upto", "-5"], "argument --upto: '-5': an arrival level"),
    "fgd --policy foo": (["bench", "fgd", "--policy", "foo"], "argument --policy: invalid choice: 'foo'"),
    "fgd --workers 0": (["bench", "fgd", "--workers", "0"], "argument --workers: '0' is not a whole number of at least 1"),
    "placement --gpus 12": (["bench", "placement", "--gpus", "12"], "argument --gpus: '12': a cluster of whole 8-GPU nodes"),
    "placement --gpus -8": (["bench", "placement", "--gpus", "-8"], "argument --gpus: '-8': a cluster of 8 to"),
    "placement --gangs 0": (["bench", "placement", "--gangs", "0"], "argument --gangs: '0' is not a whole number"),
    "fuzz --examples 0": (["bench", "fuzz", "--examples", "0"], "argument --examples: '0' is not a whole number"),
}


@pytest.mark.parametrize("case", list(BAD_BENCH_OPTIONS))
def test_a_bench_option_it_cannot_take_is_a_usage_error_not_a_traceback_or_a_silent_run(case, tmp_path):
    """A stranger's test: each was a traceback after the run, or ran anyway (--policy foo: the gangway
    figures under the label foo)."""
    args, said = BAD_BENCH_OPTIONS[case]
    result = gangway(args, tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert said in result.stderr.strip().splitlines()[-1], result.stderr


def test_an_openb_trace_the_experiment_cannot_run_is_one_line_not_a_hang(tmp_path):
    """A trace with no GPU pod drew arrivals for ever (the cluster's GPUs are never asked); an empty
    one, a missing column or a word for a number were tracebacks (a stranger's test)."""
    folder = tmp_path / "data" / "alibaba-gpu-v2023"
    folder.mkdir(parents=True)
    (folder / "openb_node_list_all_node.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,8,G2\n")
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    cases = {
        "cpuonly": (header + "p0,1000,1024,0,0,,LS,Running,0,10,0\n", "no pod asks for a GPU"),
        "empty": (header, "no pod asks for a GPU"),
        "missingcol": ("name,cpu_milli,memory_mib,num_gpu\np0,1,1,1\n", "no column gpu_milli"),
        "badnum": (header + "p0,abc,1024,1,1000,,LS,Running,0,10,0\n", ":2: cpu_milli 'abc' is not a whole number"),
        "neggpu": (header + "p0,1000,1024,-2,1000,,LS,Running,0,10,0\n", ":2: num_gpu '-2' is not a whole number"),
    }
    for trace, (text, said) in cases.items():
        (folder / f"openb_pod_list_{trace}.csv").write_text(text)
        result = gangway(["bench", "fgd", "--data", str(tmp_path / "data"), "--trace", trace, "--seeds", "42",
                          "--upto", "10", "--workers", "1"], tmp_path)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert said in result.stderr, (trace, result.stderr)
    # some published traces (multigpu30) have the five columns alone: no gpu_spec, no pod phases
    (folder / "openb_pod_list_fivecols.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                                        "p0,1000,1024,1,500\np1,2000,2048,2,1000\n")
    result = gangway(["bench", "fgd", "--data", str(tmp_path / "data"), "--trace", "fivecols", "--seeds", "42",
                      "--upto", "10", "--workers", "1"], tmp_path)
    assert result.returncode == 0 and "== fivecols" in result.stdout, result.stderr
