"""dcgm-exporter in: a Prometheus text exposition (parsed with prometheus_client's parser) to
``GpuTelemetry`` events, one per node, with each GPU's workload from its pod labels.

dcgm-exporter labels each series with ``gpu`` (the index), ``Hostname`` (the node) and, when a
pod uses the GPU, ``namespace`` and ``pod``. A pod belongs to the workload ``namespace/job``
whose job name is the longest prefix of the pod's name (``llm-pretrain-worker-3`` →
``research/llm-pretrain``); GPUs of pods that match no workload keep no workload name (the fold
then maps them by placement). Values are DCGM's: SM activity 0-1, GPU utilisation in percent,
framebuffer used in MiB.
"""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from gangway.events.catalogue import GpuSample, GpuTelemetry

SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FIELDS = (SM_ACTIVE, GPU_UTIL, FB_USED)


class ScrapeError(ValueError):
    """An exposition that is not Prometheus text or lacks what a sample needs."""


def fetch(url: str, timeout_s: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (an operator-given URL)
        return response.read().decode("utf-8")


def workload_of(namespace: str, pod: str, workloads: set[str] | frozenset[str]) -> str | None:
    best = None
    for name in workloads:
        ns, _, job = name.partition("/")
        if ns == namespace and (pod == job or pod.startswith(job + "-")):
            if best is None or len(name) > len(best):
                best = name
    return best


def parse(text: str, workloads: set[str] | frozenset[str] = frozenset(), observed_ms: int = 0) -> list[GpuTelemetry]:
    """The GPU figures of an exposition, one event per node (sorted by node, GPUs by index)."""
    per_gpu: dict[tuple[str, int], dict] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name not in FIELDS:
                    continue
                labels = sample.labels
                node = labels.get("Hostname") or labels.get("hostname") or labels.get("node")
                if not node or "gpu" not in labels:
                    raise ScrapeError(f"{sample.name}: a series without Hostname or gpu labels ({labels})")
                try:
                    index = int(labels["gpu"])
                except ValueError:
                    raise ScrapeError(f"{sample.name}: gpu label {labels['gpu']!r} is not an index") from None
                entry = per_gpu.setdefault((node, index), {})
                entry[sample.name] = sample.value
                if labels.get("pod") and labels.get("namespace"):
                    entry["workload"] = workload_of(labels["namespace"], labels["pod"], workloads)
    except ValueError as exc:
        if isinstance(exc, ScrapeError):
            raise
        raise ScrapeError(f"not a Prometheus text exposition: {exc}") from exc
    nodes: dict[str, list[GpuSample]] = {}
    for (node, index), entry in sorted(per_gpu.items()):
        if SM_ACTIVE not in entry:
            raise ScrapeError(f"{node} GPU {index}: no {SM_ACTIVE} (enable DCGM profiling metrics in dcgm-exporter)")
        nodes.setdefault(node, []).append(GpuSample(
            gpu=index, sm_active=round(min(max(entry[SM_ACTIVE], 0.0), 1.0) * 1000),
            gpu_util=round(min(max(entry.get(GPU_UTIL, 0.0), 0.0), 100.0)), fb_used_mib=round(max(entry.get(FB_USED, 0.0), 0.0)),
            workload=entry.get("workload")))
    return [GpuTelemetry(node=node, samples=samples, observed_ms=observed_ms) for node, samples in sorted(nodes.items())]
