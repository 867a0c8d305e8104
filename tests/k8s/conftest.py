"""Fixtures of the Kubernetes tests: one real control plane per session (etcd + kube-apiserver,
``envtest.py``), the CRDs of JobSet, the Kubeflow kinds and RayJob installed, the binder's RBAC applied from
``infra/k8s/binder-rbac.yaml``, and binders that run as its ServiceAccount."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml

from gangway.adapters.kubernetes import ApiError, Kube
from gangway.adapters.kubernetes import client as api
from gangway.events import kubeflow, rayjob
from gangway.events.kubeflow import TRAINING_KINDS, TrainingKind
from gangway.services.binder.kubernetes import KubernetesBinder
from gangway.services.submission.kubernetes import job_from_object
import k8s_envtest as envtest

DATA = Path(__file__).resolve().parents[1] / "data"
RBAC = envtest.ROOT / "infra" / "k8s" / "binder-rbac.yaml"
BINDER_NAMESPACE = "gangway"
BINDER_SA = "gangway-binder"
#: Every (verb, resource) the binders of this session used, for the RBAC comparison.
USED: set[tuple[str, str]] = set()


def stand_in_crd(group: str, version: str, kind: str, plural: str) -> dict:
    """A small stand-in for a Kubeflow kind's or KubeRay's RayJob's CRD (the real ones carry the full
    OpenAPI schema): enough for the API server to store, watch and patch such objects and their status."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                     "versions": [{"name": version, "served": True, "storage": True, "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


def training_crd(kind: TrainingKind) -> dict:
    return stand_in_crd(kubeflow.GROUP, kind.version, kind.kind, kind.plural)


def rayjob_crd() -> dict:
    group, version = rayjob.API_VERSION.split("/")
    return stand_in_crd(group, version, rayjob.KIND, rayjob.PLURAL)


@pytest.fixture(scope="session")
def control_plane():
    why = envtest.missing()
    if why:
        pytest.skip(f"no Kubernetes control plane: {why}")
    started = time.monotonic()
    cp = envtest.ControlPlane(envtest.binaries_dir()).start()
    try:
        crds = [yaml.safe_load(crd.read_text()) for crd in sorted((DATA / "crds").glob("*.yaml"))]
        for crd in crds + [training_crd(k) for k in TRAINING_KINDS.values()] + [rayjob_crd()]:
            cp.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        _wait_served(cp, ["/apis/jobset.x-k8s.io/v1alpha2/jobsets",
                          *(f"/apis/{k.api_version}/{k.plural}" for k in TRAINING_KINDS.values()),
                          f"/apis/{rayjob.API_VERSION}/{rayjob.PLURAL}"])
        cp.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": BINDER_NAMESPACE}})
        for doc in yaml.safe_load_all(RBAC.read_text()):
            _create(cp, doc)
        print(f"\ncontrol plane up in {time.monotonic() - started:.1f} s at {cp.server}")
        yield cp
    finally:
        cp.stop()


def _wait_served(cp, paths: list[str], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    for path in paths:
        while True:
            try:
                cp.request("GET", path)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def _create(cp, doc: dict) -> None:
    kind = doc["kind"]
    ns = doc["metadata"].get("namespace")
    path = {"ServiceAccount": f"/api/v1/namespaces/{ns}/serviceaccounts",
            "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
            "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"}[kind]
    cp.request("POST", path, doc)


@pytest.fixture(scope="session")
def binder_kubeconfig(control_plane, tmp_path_factory) -> str:
    """A kubeconfig for the binder's ServiceAccount (a token from the TokenRequest API)."""
    token = control_plane.request(
        "POST", f"/api/v1/namespaces/{BINDER_NAMESPACE}/serviceaccounts/{BINDER_SA}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )["status"]["token"]
    path = tmp_path_factory.mktemp("binder") / "kubeconfig"
    path.write_text(yaml.safe_dump(envtest.kubeconfig(control_plane.server, token, "gangway-binder")))
    return str(path)


@pytest.fixture
async def kube(control_plane):
    """An admin client; everything the test made is deleted afterwards (cluster-scoped nodes too)."""
    k = await Kube.connect(kubeconfig=str(control_plane.kubeconfig_path))
    try:
        yield k
    finally:
        await _clean(k)
        await k.close()


async def _clean(k: Kube) -> None:
    for res in (api.JOBS, api.JOBSETS, *api.TRAINING_JOBS.values(), api.PDBS):
        items, _ = await k.list(res)
        await asyncio.gather(*(k.delete(res, o["metadata"]["name"], o["metadata"]["namespace"], grace_seconds=0,
                                        propagation="Background") for o in items))
    pods, _ = await k.list(api.PODS)
    await asyncio.gather(*(k.delete(api.PODS, p["metadata"]["name"], p["metadata"]["namespace"], grace_seconds=0)
                           for p in pods))
    nodes, _ = await k.list(api.NODES)
    await asyncio.gather(*(k.delete(api.NODES, n["metadata"]["name"]) for n in nodes))
    classes, _ = await k.list(api.PRIORITY_CLASSES)  # (a globalDefault one would give later pods its value)
    await asyncio.gather(*(k.delete(api.PRIORITY_CLASSES, c["metadata"]["name"]) for c in classes
                           if not c["metadata"]["name"].startswith("system-")))
    try:
        await k.delete(api.LEASES, "gangway-binder", BINDER_NAMESPACE)
    except ApiError:
        pass


@pytest.fixture
async def make_binder(binder_kubeconfig):
    """make_binder(identity, **options) → a started KubernetesBinder running as the binder's ServiceAccount."""
    made: list[tuple[KubernetesBinder, asyncio.Event]] = []

    async def make(identity: str = "binder-0", **options) -> KubernetesBinder:
        k = await Kube.connect(kubeconfig=binder_kubeconfig)
        options.setdefault("lease_s", 2.0)
        options.setdefault("pods_timeout_s", 10.0)
        b = KubernetesBinder(k, identity, intake=job_from_object, namespace=BINDER_NAMESPACE, **options)
        stop = asyncio.Event()
        b.start(stop)
        made.append((b, stop))
        await b.wait_synced()
        return b

    yield make
    for b, stop in made:
        stop.set()
        await asyncio.sleep(0)
        await b.stop()
        USED.update(b.kube.used)
        await b.kube.close()


async def kill(binder: KubernetesBinder) -> None:
    """Stop a binder as a crash would: no lease release, nothing more sent."""
    for t in binder._tasks:
        t.cancel()
    await asyncio.gather(*binder._tasks, return_exceptions=True)
    binder._tasks = []
    binder.elector.leading = False
    USED.update(binder.kube.used)


async def wait_leading(*binders: KubernetesBinder, timeout_s: float = 10.0) -> KubernetesBinder:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for b in binders:
            if b.elector.leading:
                return b
        await asyncio.sleep(0.05)
    raise TimeoutError("no binder took the lease")
