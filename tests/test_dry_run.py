"""`gangway dry-run`: a contract, a cluster and jobs decided offline, as a user runs it (a process)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
import yaml

#: The LocalQueue team/lq of ClusterQueue cq, which every contract here ends with.
LOCAL_QUEUE = textwrap.dedent("""
    ---
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: LocalQueue
    metadata: {namespace: team, name: lq}
    spec: {clusterQueue: cq}
    """)
CONTRACT = textwrap.dedent("""
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ResourceFlavor
    metadata: {name: gpus}
    ---
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ClusterQueue
    metadata: {name: cq}
    spec:
      namespaceSelector: {}
      queueingStrategy: StrictFIFO
      resourceGroups:
      - coveredResources: [cpu, nvidia.com/gpu]
        flavors:
        - name: gpus
          resources:
          - {name: cpu, nominalQuota: 1000}
          - {name: nvidia.com/gpu, nominalQuota: 16}
    """) + LOCAL_QUEUE
NODE = """
- apiVersion: v1
  kind: Node
  metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}, annotations: {{gangway.io/nvlink-islands: "4,4"}}}}
  status: {{allocatable: {{cpu: "96", memory: 1000Gi, nvidia.com/gpu: "8", pods: "110"}}}}"""
CLUSTER = "apiVersion: v1\nkind: List\nitems:" + NODE.format(name="n0") + NODE.format(name="n1") + "\n"


def job(name: str, pods: int, gpus: int, runtime_s: int, annotations: dict[str, str] | None = None,
        priority_class: str | None = None) -> str:
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer", "resources": {
        "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}}]}
    if priority_class:
        pod["priorityClassName"] = priority_class
    return yaml.safe_dump({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                     "annotations": {"gangway.io/runtime-seconds": str(runtime_s)}},
        "spec": {"parallelism": pods, "completions": pods, "template": {
            "metadata": {"annotations": annotations or {}}, "spec": pod}},
    })


def assert_replays(log) -> None:
    """`gangway replay` reproduces every decision of the log."""
    replayed = gangway("replay", log.name, cwd=log.parent)
    decisions = re.search(r"(\d+) of (\d+) decisions reproduced", replayed.stdout.replace("\n", " "))
    assert replayed.returncode == 0 and decisions and decisions[1] == decisions[2], replayed.stdout


def gangway(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gangway", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def test_a_dry_run_says_where_each_job_goes_which_waits_and_why_and_its_log_replays(tmp_path):
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    island = {"kueue.x-k8s.io/podset-required-topology": "gangway.io/nvlink-island"}
    (tmp_path / "jobs.yaml").write_text("---\n".join([
        job("never", 1, 6, 600, island),  # no 4-GPU island takes 6 GPUs: set aside, not blocking the queue
        job("uneven", 4, 1, 600, {"kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname",
                                  "kueue.x-k8s.io/podset-slice-size": "3"}),
        job("wide", 2, 8, 3600),
        job("after", 1, 8, 600),  # waits for wide: both nodes are wide's
    ]))
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "jobs.yaml",
                     "--export", "log.jsonl", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr  # (uneven is refused)
    lines = result.stdout.splitlines()
    assert lines[0] == "team/never: pending"
    assert lines[1].startswith("    now pending (topology_unsatisfiable):") and "the largest, on n0, has 4 GPUs" in lines[1]
    assert "estimated start: never" in result.stdout
    assert lines[[i for i, line in enumerate(lines) if line.startswith("team/uneven")][0]].startswith(
        "team/uneven: rejected (invalid_field): pod_sets[0].topology.slice_size is 3: it must divide count (4)")
    assert "team/wide: finished on n0, n1 (admitted at +0 s; started at +0 s; finished at +3600 s)" in lines
    assert "team/after: finished on n0 (admitted at +3600 s; started at +3600 s; finished at +4200 s)" in lines \
        or "team/after: finished on n1 (admitted at +3600 s; started at +3600 s; finished at +4200 s)" in lines
    assert lines[-2].endswith("the last at +604800 s")  # (the clock ticked to the run's end: never still waits)
    assert_replays(tmp_path / "log.jsonl")
    explained = gangway("explain", "--log", "log.jsonl", "team/after", cwd=tmp_path)
    assert explained.returncode == 0 and "finished" in explained.stdout


def test_a_dry_run_refuses_a_file_that_is_not_a_contract_with_its_problems(tmp_path):
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "jobs.yaml").write_text(job("one", 1, 1, 60))
    result = gangway("dry-run", "--config", "cluster.yaml", "--cluster", "cluster.yaml", "jobs.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "no contract objects" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


#: Two flavors, h100 then a100, one node each; whenCanPreempt: Preempt; lower priorities preempted.
TWO_FLAVORS = textwrap.dedent("""
    apiVersion: scheduling.k8s.io/v1
    kind: PriorityClass
    metadata: {name: high}
    value: 1000
    ---
    apiVersion: scheduling.k8s.io/v1
    kind: PriorityClass
    metadata: {name: mid}
    value: 500
    ---
    apiVersion: scheduling.k8s.io/v1
    kind: PriorityClass
    metadata: {name: low}
    value: 100
    """) + "".join(textwrap.dedent(f"""
    ---
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ResourceFlavor
    metadata: {{name: {model}}}
    spec: {{nodeLabels: {{gpu-model: {model}}}}}
    """) for model in ("h100", "a100")) + textwrap.dedent("""
    ---
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: ClusterQueue
    metadata: {name: cq}
    spec:
      namespaceSelector: {}
      preemption: {withinClusterQueue: LowerPriority}
      flavorFungibility: {whenCanPreempt: Preempt}
      resourceGroups:
      - coveredResources: [cpu, nvidia.com/gpu]
        flavors:
        - name: h100
          resources: [{name: cpu, nominalQuota: 100}, {name: nvidia.com/gpu, nominalQuota: 8}]
        - name: a100
          resources: [{name: cpu, nominalQuota: 100}, {name: nvidia.com/gpu, nominalQuota: 8}]
    """) + LOCAL_QUEUE
TWO_NODES = "apiVersion: v1\nkind: List\nitems:" + "".join(f"""
- apiVersion: v1
  kind: Node
  metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}, gpu-model: {model}}}}}
  status: {{allocatable: {{cpu: "96", memory: 1000Gi, nvidia.com/gpu: "8", pods: "110"}}}}""" for name, model in (
    ("h0", "h100"), ("a0", "a100"))) + "\n"


@pytest.mark.parametrize("first, expected", [
    # Nobody in h100 may be preempted for it: the search goes on to a100, idle (Kueue's oracle).
    ("high", ["team/first: finished on h0 (admitted at +0 s; started at +0 s; finished at +3600 s)",
              "team/mid: finished on a0 (submitted at +60 s; admitted at +60 s; started at +60 s; finished at +660 s)"]),
    # first may be preempted: whenCanPreempt Preempt stops at h100, and first moves to a100.
    ("low", ["team/first: finished on a0 (evicted 1 time; admitted at +90 s; started at +90 s; finished at +3690 s)",
             "team/mid: finished on h0 (submitted at +60 s; admitted at +90 s; started at +90 s; finished at +690 s)"]),
])
def test_a_job_submitted_later_preempts_or_takes_the_next_flavor_as_kueue_would(tmp_path, first, expected):
    (tmp_path / "contract.yaml").write_text(TWO_FLAVORS)
    (tmp_path / "cluster.yaml").write_text(TWO_NODES)
    (tmp_path / "first.yaml").write_text(job("first", 1, 8, 3600, priority_class=first))
    (tmp_path / "mid.yaml").write_text(job("mid", 1, 8, 600, priority_class="mid"))
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "first.yaml",
                     "--later", "60", "mid.yaml", "--hours", "2", "--export", "log.jsonl", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[:2] == expected
    assert_replays(tmp_path / "log.jsonl")


def test_a_preemptor_takes_the_flavor_it_preempted_in_not_the_first(tmp_path):
    """h100 holds a job nobody may preempt, a100 one mid may: mid waits for a100, not for h100."""
    (tmp_path / "contract.yaml").write_text(TWO_FLAVORS)
    (tmp_path / "cluster.yaml").write_text(TWO_NODES)
    (tmp_path / "first.yaml").write_text(job("high", 1, 8, 3600, priority_class="high") + "---\n"
                                         + job("low", 1, 8, 3600, priority_class="low"))
    (tmp_path / "mid.yaml").write_text(job("mid", 1, 8, 600, priority_class="mid"))
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "first.yaml",
                     "--later", "60", "mid.yaml", "--hours", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[:3] == [
        "team/high: finished on h0 (admitted at +0 s; started at +0 s; finished at +3600 s)",
        "team/low: finished on a0 (evicted 1 time; admitted at +690 s; started at +690 s; finished at +4290 s)",
        "team/mid: finished on a0 (submitted at +60 s; admitted at +90 s; started at +90 s; finished at +690 s)"]


@pytest.mark.parametrize("args, said", [
    (["jobs.yaml", "--later", "soon", "jobs.yaml"], "'soon' is not a number of seconds"),
    (["jobs.yaml", "--later", "nan", "jobs.yaml"], "'nan' is not a number of seconds"),
    (["jobs.yaml", "--later", "7201", "jobs.yaml"], "the time must be from 0 to the run's 7200 s"),
    (["jobs.yaml", "--hours", "nan"], "--hours nan: a number of hours above 0"),
    (["jobs.yaml", "--hours", "0"], "--hours 0: a number of hours above 0"),
    (["jobs.yaml", "--hours", "1e10"], "--hours 1e+10: a number of hours above 0 and at most 87600 (ten years)"),
    ([], "no jobs: name job files, or --later SECONDS FILE"),
])
def test_a_dry_run_refuses_a_time_it_cannot_use(tmp_path, args, said):
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "jobs.yaml").write_text(job("one", 1, 1, 60))
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "--hours", "2", *args,
                     cwd=tmp_path)
    assert result.returncode == 2 and said in result.stderr + result.stdout  # (a usage error, as argparse's)
    assert "Traceback" not in result.stdout + result.stderr


def test_a_dry_run_names_a_misspelt_kind_not_only_what_it_left_undefined(tmp_path):
    (tmp_path / "contract.yaml").write_text(CONTRACT.replace("kind: ClusterQueue", "kind: ClusterQeue"))
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "jobs.yaml").write_text(job("one", 1, 1, 60))
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "jobs.yaml", cwd=tmp_path)
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2
    assert 'ClusterQueue "cq" is not defined' in out
    assert '"ClusterQeue" is no kind of kueue.x-k8s.io; did you mean ClusterQueue?' in out  # (kubectl fails on it too)


def test_what_still_waits_at_the_end_is_forecast_from_the_end_of_the_run(tmp_path):
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "jobs.yaml").write_text(job("wide", 2, 8, 3600) + "---\n" + job("after", 1, 8, 600))
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "jobs.yaml", "--hours", "0.5",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "team/after: pending" in result.stdout
    assert "(in 1800 s, if nothing else arrives)" in result.stdout  # wide ends at +3600: 1800 s after the run's end


def test_long_times_are_written_out_in_seconds(tmp_path):
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "jobs.yaml").write_text(job("month", 1, 8, 2_600_000))
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "jobs.yaml", "--hours", "800",
                     cwd=tmp_path)
    assert "team/month: finished on n0 (admitted at +0 s; started at +0 s; finished at +2600000 s)" in result.stdout, \
        result.stdout + result.stderr


def with_metadata(text: str, labels: dict | None = None, annotations: dict | None = None) -> str:
    """A job() manifest with these labels and annotations set (None: removed) on the Job."""
    doc = yaml.safe_load(text)
    for key, changes in (("labels", labels or {}), ("annotations", annotations or {})):
        mine = doc["metadata"].setdefault(key, {})
        for k, v in changes.items():
            mine.pop(k) if v is None else mine.__setitem__(k, v)
    return yaml.safe_dump(doc)


def test_a_dry_run_whose_files_hold_no_job_says_so_and_fails_as_submit_does(tmp_path):
    """A stranger's empty jobs file ran an empty dry run, exit 0, saying only "5 events …";
    `gangway submit` refuses such a file (exit 2). With nothing to run the dry run does too; an
    empty file beside others is a note and the run goes on (as a refused document is)."""
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    (tmp_path / "none.json").write_text("[]")
    (tmp_path / "jobs.yaml").write_text(job("first", 1, 8, 600))
    submitted = gangway("submit", "empty.yaml", cwd=tmp_path)
    assert submitted.returncode == 2 and "no jobs in it" in submitted.stdout, submitted.stdout + submitted.stderr
    alone = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "empty.yaml",
                    "--later", "60", "none.json", cwd=tmp_path)
    assert (alone.returncode, alone.stdout) == (2, ""), alone.stdout + alone.stderr
    assert alone.stderr.strip() == "gangway: no jobs in empty.yaml, none.json: nothing to run"
    beside = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "empty.yaml", "jobs.yaml",
                     cwd=tmp_path)
    assert beside.returncode == 0, beside.stdout + beside.stderr
    assert beside.stdout.splitlines()[:2] == ["no jobs in empty.yaml", "team/first: finished on n0 (admitted at +0 s; "
                                              "started at +0 s; finished at +600 s)"]


def test_a_manifest_that_cannot_be_read_is_refused_alone_and_the_dry_run_goes_on(tmp_path):
    """A stranger's dry-run stopped at the first unreadable manifest (no queue label, a runtime that is
    not a number, a min-parallelism above the Job's parallelism), though jobs the submission service
    refuses were refused one by one; and a file with no job said nothing."""
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    items = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        yaml.safe_load(job("listed", 1, 1, 60)),
        yaml.safe_load(with_metadata(job("unlisted", 1, 1, 60), labels={"kueue.x-k8s.io/queue-name": None}))]})
    (tmp_path / "jobs.yaml").write_text("---\n".join([
        with_metadata(job("no-queue", 1, 1, 60), labels={"kueue.x-k8s.io/queue-name": None}),
        job("first", 1, 8, 600),
        with_metadata(job("abc", 1, 1, 60), annotations={"gangway.io/runtime-seconds": "abc"}),
        with_metadata(job("seven", 6, 1, 60), annotations={"kueue.x-k8s.io/job-min-parallelism": "7"}),
        with_metadata(job("zero", 6, 1, 60), annotations={"kueue.x-k8s.io/job-min-parallelism": "0"}),
        job("Bad_Name", 1, 1, 60),  # (refused by the submission service, as before)
        items,
    ]))
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    (tmp_path / "broken.yaml").write_text(job("lost", 1, 1, 60) + "---\nkey: [unclosed\n")
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "jobs.yaml", "empty.yaml",
                     "broken.yaml", "--export", "log.jsonl", cwd=tmp_path)
    # (the others ran, and the log was written; a refused job fails the run, as a gate before publishing)
    assert result.returncode == 2 and result.stderr.endswith("gangway: 7 jobs would be refused (rejected above)\n"), \
        result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "no jobs in empty.yaml"
    refused = {line.split(":")[0]: line for line in lines if ": rejected (" in line}
    assert refused["team/no-queue"].startswith(
        "team/no-queue: rejected (missing_field): jobs.yaml: document 1 (Job no-queue): "
        "metadata.labels['kueue.x-k8s.io/queue-name']: missing")
    assert "'abc' is not a number of seconds" in refused["team/abc"]
    assert refused["team/seven"].endswith(
        "metadata.annotations['kueue.x-k8s.io/job-min-parallelism']: must be at least 1 and less than the Job's 6 pods, not 7")
    assert refused["team/zero"].endswith("must be at least 1 and less than the Job's 6 pods, not 0")
    assert refused["team/Bad_Name"].startswith("team/Bad_Name: rejected (invalid_field): job_id 'Bad_Name'")
    assert "items[1].metadata.labels['kueue.x-k8s.io/queue-name']: missing" in refused["team/unlisted"]
    assert "broken.yaml: document 2: rejected (malformed_yaml): not valid YAML at line" in result.stdout
    for name in ("first", "listed", "lost"):
        assert any(line.startswith(f"team/{name}: finished on") for line in lines), result.stdout
    explained = gangway("explain", "--log", "log.jsonl", "team/abc", cwd=tmp_path)
    assert "team/abc rejected (invalid_field): jobs.yaml: document 3 (Job abc)" in explained.stdout, explained.stdout
    assert_replays(tmp_path / "log.jsonl")


def test_explain_on_a_dry_run_s_export_tells_a_rejected_job_s_rejection(tmp_path):
    """The export ended with the log, without the rejections the dry run printed: explain --log said
    'no such job in the log' of them (a stranger test)."""
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    unknown = job("elsewhere", 1, 1, 60).replace("kueue.x-k8s.io/queue-name: lq", "kueue.x-k8s.io/queue-name: nope")
    (tmp_path / "jobs.yaml").write_text(job("runs", 1, 1, 60) + "---\n" + unknown)
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "jobs.yaml",
                     "--export", "log.jsonl", cwd=tmp_path)
    assert "team/elsewhere: rejected (unknown_queue)" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 2 and "1 job would be refused" in result.stderr
    explained = gangway("explain", "--log", "log.jsonl", "team/elsewhere", cwd=tmp_path)
    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert explained.stdout.startswith("[gangway.rejections 0] team/elsewhere rejected (unknown_queue): queue: no "
                                       "LocalQueue 'nope' in namespace 'team'")
    assert explained.stdout.rstrip().endswith("(record jobs.yaml#1)")
    assert gangway("explain", "--log", "log.jsonl", "other/elsewhere", cwd=tmp_path).returncode == 1
    assert gangway("explain", "--log", "log.jsonl", "team/runs", cwd=tmp_path).returncode == 0
    assert_replays(tmp_path / "log.jsonl")  # (the rejections are not the log's)


def test_a_job_too_big_for_a_submissions_record_is_refused_by_the_dry_run_as_by_the_service(tmp_path):
    """The service refuses a record over 1 MiB before reading it (oversized); the dry run ran such a
    job (a helper's find)."""
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    big = yaml.safe_load(job("huge", 1, 1, 60))
    big["metadata"]["labels"].update({f"label-{i}": "z" * 63 for i in range(17_000)})
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(big) + "---\n" + job("small", 1, 1, 60))
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "jobs.yaml", cwd=tmp_path)
    lines = result.stdout.splitlines()
    assert any(line.startswith("team/huge: rejected (oversized): its record would be ") and
               "over the 1048576-byte (1 MiB) limit" in line for line in lines), result.stdout + result.stderr
    assert any(line.startswith("team/small: finished on") for line in lines), result.stdout


def test_a_job_admitted_smaller_says_so_in_the_summary(tmp_path):
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "jobs.yaml").write_text(
        with_metadata(job("elastic", 4, 8, 60), annotations={"kueue.x-k8s.io/job-min-parallelism": "2"}))
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "jobs.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "team/elastic: finished on n0, n1 (2 of 4 pods of main; admitted at +0 s;" in result.stdout


def test_explain_tells_of_a_job_sent_again_and_refused(tmp_path):
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "jobs.yaml").write_text(job("one", 1, 1, 60) + "---\n" + job("one", 1, 2, 60))
    result = gangway("dry-run", "--config", "contract.yaml", "--cluster", "cluster.yaml", "jobs.yaml",
                     "--export", "log.jsonl", cwd=tmp_path)
    assert result.returncode == 2, result.stderr  # (one job refused)
    explained = gangway("explain", "team/one", "--log", "log.jsonl", cwd=tmp_path)
    out = explained.stdout
    assert "queued in" in out and "later requests refused (sent again, moved, withdrawn):" in out and "duplicate_job" in out, out
