"""A small asynchronous Kubernetes client on kubernetes-asyncio: JSON in, JSON out, any resource.

kubernetes-asyncio gives the connection (kubeconfig, context or in-cluster service account; TLS;
tokens that refresh); this module gives what the binder needs on top: requests on any resource by
(group, version, plural) — core kinds and custom resources alike — returning plain dicts, typed
errors carrying the API server's Status, timeouts on every call, a streamed watch, and a record of
every (verb, resource) used so the RBAC manifest can be checked against the code (``used``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from gangway.events import kubeflow, rayjob

log = logging.getLogger(__name__)
#: Seconds any single request may take (watches excepted: they are bounded by timeoutSeconds).
REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Resource:
    """A resource type: ``group`` "" is the core API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base


NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
JOBS = Resource("batch", "v1", "jobs", "Job")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
#: The Kubeflow training kinds (``gangway.events.kubeflow``), by kind.
TRAINING_JOBS = {k.kind: Resource(kubeflow.GROUP, k.version, k.plural, k.kind) for k in kubeflow.TRAINING_KINDS.values()}
RAYJOBS = Resource(*rayjob.API_VERSION.split("/"), rayjob.PLURAL, rayjob.KIND)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
BY_KIND: dict[str, Resource] = {r.kind: r for r in (NODES, PODS, EVENTS, NAMESPACES, JOBS, JOBSETS, *TRAINING_JOBS.values(),
                                                    RAYJOBS, LEASES, PDBS, CRDS, SERVICE_ACCOUNTS, PRIORITY_CLASSES)}


class ApiError(Exception):
    """The API server refused a request: HTTP status, its Status reason and message."""

    def __init__(self, status: int, reason: str, message: str, body: dict | None = None):
        self.status, self.reason, self.message, self.body = status, reason, message, body or {}
        super().__init__(f"{status} {reason}: {message}")

    @property
    def gone(self) -> bool:
        """410: the resourceVersion asked for is too old (a watch must list again)."""
        return self.status == 410

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def too_many(self) -> bool:
        """429: throttled, or an eviction a PodDisruptionBudget does not allow now."""
        return self.status == 429


def _error(status: int, raw: bytes) -> ApiError:
    try:
        body = json.loads(raw)
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    return ApiError(status, str(body.get("reason") or ""), str(body.get("message") or raw[:300].decode("utf-8", "replace")), body)


@dataclass
class Kube:
    """One connection to an API server. ``used`` collects (verb, "group/resource[/sub]") pairs."""

    api: Any
    used: set[tuple[str, str]] = field(default_factory=set)
    timeout_s: float = REQUEST_TIMEOUT_S

    # --- connecting -------------------------------------------------------------------------

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, context: str | None = None,
                      in_cluster: bool | None = None) -> "Kube":
        """From a kubeconfig file and context (default: $KUBECONFIG or ~/.kube/config, its current
        context), or from the pod's service account when ``in_cluster`` (None: when running in a pod
        and no kubeconfig was named)."""
        configuration = k8s_client.Configuration()
        if in_cluster is None:
            import os
            in_cluster = kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ
        if in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            await k8s_config.load_kube_config(config_file=kubeconfig, context=context,
                                              client_configuration=configuration)
        return cls(k8s_client.ApiClient(configuration))

    async def close(self) -> None:
        await self.api.close()

    # --- requests ----------------------------------------------------------------------------

    def _note(self, verb: str, res: Resource, sub: str | None) -> None:
        self.used.add((verb, f"{res.group}/{res.plural}" + (f"/{sub}" if sub else "")))

    async def _call(self, method: str, path: str, query: dict | None = None, body: Any = None,
                    content_type: str = "application/json", timeout: float | None = None):
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        try:
            return await self.api.call_api(path, method, query_params=params, header_params=headers, body=body,
                                           auth_settings=["BearerToken"], _preload_content=False,
                                           _request_timeout=timeout or self.timeout_s)
        except asyncio.TimeoutError:
            raise ApiError(504, "Timeout", f"{method} {path}: no answer in {timeout or self.timeout_s} s") from None

    async def _json(self, method: str, path: str, **kwargs) -> dict:
        resp = await self._call(method, path, **kwargs)
        try:
            raw = await resp.read()
        finally:
            resp.release()
        if not 200 <= resp.status <= 299:
            raise _error(resp.status, raw)
        return json.loads(raw) if raw else {}

    async def get(self, res: Resource, name: str, namespace: str | None = None, sub: str | None = None) -> dict:
        self._note("get", res, sub)
        return await self._json("GET", res.path(namespace, name, sub))

    async def list(self, res: Resource, namespace: str | None = None, label_selector: str | None = None,
                   field_selector: str | None = None, limit: int = 500) -> tuple[list[dict], str]:
        """Every object (pages of ``limit`` followed), and the list's resourceVersion."""
        self._note("list", res, None)
        items: list[dict] = []
        token = None
        while True:
            page = await self._json("GET", res.path(namespace), query={
                "labelSelector": label_selector, "fieldSelector": field_selector, "limit": limit, "continue": token})
            for item in page.get("items") or []:  # list items come without their kind
                item.setdefault("kind", res.kind)
                item.setdefault("apiVersion", res.api_version)
                items.append(item)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items, str((page.get("metadata") or {}).get("resourceVersion") or "")

    async def create(self, res: Resource, obj: dict, namespace: str | None = None, sub: str | None = None,
                     name: str | None = None) -> dict:
        self._note("create", res, sub)
        return await self._json("POST", res.path(namespace, name, sub), body=obj)

    async def patch(self, res: Resource, name: str, patch: dict | list, namespace: str | None = None,
                    sub: str | None = None, kind: str = "merge") -> dict:
        """``kind``: "merge" (RFC 7386), "json" (RFC 6902) or "strategic"."""
        self._note("patch", res, sub)
        content = {"merge": "application/merge-patch+json", "json": "application/json-patch+json",
                   "strategic": "application/strategic-merge-patch+json"}[kind]
        return await self._json("PATCH", res.path(namespace, name, sub), body=patch, content_type=content)

    async def replace(self, res: Resource, name: str, obj: dict, namespace: str | None = None,
                      sub: str | None = None) -> dict:
        self._note("update", res, sub)
        return await self._json("PUT", res.path(namespace, name, sub), body=obj)

    async def delete(self, res: Resource, name: str, namespace: str | None = None,
                     grace_seconds: int | None = None, uid: str | None = None,
                     propagation: str | None = None) -> dict | None:
        """Delete (None when it was already gone). ``uid``: only that incarnation of the name."""
        self._note("delete", res, None)
        body: dict = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        if uid:
            body["preconditions"] = {"uid": uid}
        if propagation:
            body["propagationPolicy"] = propagation
        try:
            return await self._json("DELETE", res.path(namespace, name), body=body)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def watch(self, res: Resource, resource_version: str, namespace: str | None = None,
                    label_selector: str | None = None, timeout_s: int = 60) -> AsyncIterator[tuple[str, dict]]:
        """(type, object) pairs from resourceVersion on, until the server ends the watch after
        about ``timeout_s``. An ERROR event raises ApiError (410: list again)."""
        self._note("watch", res, None)
        resp = await self._call("GET", res.path(namespace), query={
            "watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
            "labelSelector": label_selector, "timeoutSeconds": timeout_s}, timeout=timeout_s + 15)
        try:
            if resp.status != 200:
                raise _error(resp.status, await resp.read())
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise ApiError(int(obj.get("code") or 500), str(obj.get("reason") or ""),
                                   str(obj.get("message") or ""), obj)
                yield kind, obj
        finally:
            resp.release()
