"""`gangway dry-run`: a contract, a cluster and jobs decided offline, as a user runs it (a process)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import yaml

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
    ---
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: LocalQueue
    metadata: {namespace: team, name: lq}
    spec: {clusterQueue: cq}
    """)
NODE = """
- apiVersion: v1
  kind: Node
  metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}, annotations: {{gangway.io/nvlink-islands: "4,4"}}}}
  status: {{allocatable: {{cpu: "96", memory: 1000Gi, nvidia.com/gpu: "8", pods: "110"}}}}"""
CLUSTER = "apiVersion: v1\nkind: List\nitems:" + NODE.format(name="n0") + NODE.format(name="n1") + "\n"


def job(name: str, pods: int, gpus: int, runtime_s: int, annotations: dict[str, str] | None = None) -> str:
    return yaml.safe_dump({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                     "annotations": {"gangway.io/runtime-seconds": str(runtime_s)}},
        "spec": {"parallelism": pods, "completions": pods, "template": {
            "metadata": {"annotations": annotations or {}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer", "resources": {
                "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}}]}}},
    })


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
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "team/never: pending"
    assert lines[1].startswith("    now pending (topology_unsatisfiable):") and "the largest, on n0, has 4 GPUs" in lines[1]
    assert "estimated start: never" in result.stdout
    assert lines[[i for i, line in enumerate(lines) if line.startswith("team/uneven")][0]].startswith(
        "team/uneven: rejected (invalid_field): pod_sets[0].topology.slice_size is 3: it must divide count (4)")
    assert "team/wide: finished on n0, n1 (admitted at +0 s; started at +0 s; finished at +3600 s)" in lines
    assert "team/after: finished on n0 (admitted at +3600 s; started at +3600 s; finished at +4200 s)" in lines \
        or "team/after: finished on n1 (admitted at +3600 s; started at +3600 s; finished at +4200 s)" in lines
    assert lines[-2].endswith("the last at +4200 s; simulated up to +604800 s")
    replayed = gangway("replay", "log.jsonl", cwd=tmp_path)
    decisions = re.search(r"(\d+) of (\d+) decisions reproduced", replayed.stdout.replace("\n", " "))
    assert replayed.returncode == 0 and decisions and decisions[1] == decisions[2], replayed.stdout
    explained = gangway("explain", "--log", "log.jsonl", "team/after", cwd=tmp_path)
    assert explained.returncode == 0 and "finished" in explained.stdout


def test_a_dry_run_refuses_a_file_that_is_not_a_contract_with_its_problems(tmp_path):
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "jobs.yaml").write_text(job("one", 1, 1, 60))
    result = gangway("dry-run", "--config", "cluster.yaml", "--cluster", "cluster.yaml", "jobs.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "no contract objects" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
