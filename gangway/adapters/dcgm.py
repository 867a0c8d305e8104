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

import math
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from gangway.events.catalogue import GpuSample, GpuTelemetry
from gangway.events.text import digits

SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FIELDS = (SM_ACTIVE, GPU_UTIL, FB_USED)
#: A GPU index past any node's (the cluster reader's limit is 1,024 GPUs a node).
GPU_INDEX_MAX = 1024


class ScrapeError(ValueError):
    """An exposition that is not Prometheus text or lacks what a sample needs."""


def fetch(url: str, timeout_s: float = 10.0) -> str:
    """The exposition at ``url`` (OSError when it cannot be fetched; ScrapeError when the URL is
    none, or what it serves is not UTF-8 text)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (an operator-given URL)
            return response.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError(f"not UTF-8 text ({exc.reason} at byte {exc.start}): not a Prometheus text exposition") from None
    except ValueError as exc:  # (urllib: "unknown url type")
        raise ScrapeError(f"not a URL to fetch: {exc}") from None


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
                if not digits(labels["gpu"]) or int(labels["gpu"]) >= GPU_INDEX_MAX:
                    raise ScrapeError(f"{sample.name}: gpu label {labels['gpu']!r} is not a GPU index")
                entry = per_gpu.setdefault((node, int(labels["gpu"])), {})
                # (NaN and ±Inf are legal in the format: no reading, as if the series were not there)
                entry[sample.name] = sample.value if math.isfinite(sample.value) else None
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
        if entry[SM_ACTIVE] is None:
            continue  # (its SM activity unknown: no figure for it this time)
        nodes.setdefault(node, []).append(GpuSample(
            gpu=index, sm_active=round(min(max(entry[SM_ACTIVE], 0.0), 1.0) * 1000),
            gpu_util=round(min(max(entry.get(GPU_UTIL) or 0.0, 0.0), 100.0)),
            fb_used_mib=round(max(entry.get(FB_USED) or 0.0, 0.0)), workload=entry.get("workload")))
    return [GpuTelemetry(node=node, samples=samples, observed_ms=observed_ms) for node, samples in sorted(nodes.items())]
