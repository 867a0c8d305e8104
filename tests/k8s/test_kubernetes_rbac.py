"""Least privilege, checked: the verbs and resources the binder really used (recorded by the adapter in
every binder this session ran as the ServiceAccount) against infra/k8s/binder-rbac.yaml."""

from __future__ import annotations

import pytest
import yaml

from conftest import RBAC, USED
from gangway.adapters.kubernetes import ApiError, Kube
from gangway.adapters.kubernetes import client as api
from gangway.services.binder.webhook import SECRETS, WEBHOOK_CONFIGURATIONS

pytestmark = pytest.mark.kubernetes


def granted() -> set[tuple[str, str]]:
    out = set()
    for doc in yaml.safe_load_all(RBAC.read_text()):
        for rule in doc.get("rules") or []:
            for group in rule["apiGroups"]:
                for res in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((verb, f"{group}/{res}"))
    return out


def test_the_manifest_names_the_binders_own_verbs_only():
    rules = granted()
    assert ("create", "/pods/binding") in rules and ("create", "/pods/eviction") in rules
    assert not [r for r in rules if r[0] in ("*", "escalate", "bind", "impersonate") or r[1].endswith("/*")]
    assert not [r for r in rules if r[1] == "/configmaps"]
    # Secrets: the webhook's certificate only, in gangway's namespace, read and renewed by its name
    for doc in yaml.safe_load_all(RBAC.read_text()):
        for rule in doc.get("rules") or []:
            if "secrets" in rule["resources"]:
                assert doc["kind"] == "Role" and doc["metadata"]["namespace"] == "gangway", doc["metadata"]
                assert rule["verbs"] == ["create"] or rule.get("resourceNames") == ["gangway-webhook-cert"], rule


async def test_what_the_binder_used_is_what_the_manifest_grants(binder_kubeconfig, make_binder):
    binder = await make_binder("rbac-probe")
    used = USED | binder.kube.used
    assert used <= granted(), f"used but not granted: {sorted(used - granted())}"
    if ("patch", "kubeflow.org/pytorchjobs") not in used or ("create", "/pods/eviction") not in used:
        pytest.skip("run with the other tests of tests/k8s to compare the whole manifest with what was used")
    assert granted() <= used, f"granted but never used (drop them from the manifest): {sorted(granted() - used)}"


async def test_the_service_account_can_do_nothing_else(binder_kubeconfig, kube):
    sa = await Kube.connect(kubeconfig=binder_kubeconfig)
    try:
        for call in (lambda: sa.create(api.JOBS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
                                                  "spec": {}}, "default"),
                     lambda: sa.list(api.SERVICE_ACCOUNTS, "gangway"),
                     lambda: sa.get(api.LEASES, "somebody-elses", "kube-system"),
                     lambda: sa.list(SECRETS, "gangway"), lambda: sa.get(SECRETS, "gangway-db", "gangway"),
                     lambda: sa.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}, "default"),
                     lambda: sa.get(WEBHOOK_CONFIGURATIONS, "somebody-elses")):
            with pytest.raises(ApiError) as refused:
                await call()
            assert refused.value.status == 403
    finally:
        await sa.close()
