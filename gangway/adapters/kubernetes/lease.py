"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

The holder renews ``spec.renewTime`` every ``renew_s``; a candidate takes the Lease over when the
record it last saw has not changed for ``duration_s`` of its own clock (so clock skew between
replicas does not matter). Every write carries the resourceVersion read, so two candidates never
both win. ``leading`` says whether this replica may act; a holder that cannot renew within
``duration_s`` stops leading before anyone else may take over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone

from gangway.adapters.kubernetes.client import LEASES, ApiError, Kube

log = logging.getLogger(__name__)


def micro_time(t: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if t is None else t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, duration_s: float = 15.0,
                 renew_s: float | None = None):
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.duration_s = duration_s
        self.renew_s = renew_s if renew_s is not None else duration_s / 3
        self.leading = False
        self.changed = asyncio.Event()
        self._seen: tuple | None = None
        self._seen_at = 0.0
        self._renewed_at = 0.0

    def _spec(self, transitions: int, acquired: str | None = None) -> dict:
        now = micro_time()
        return {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, round(self.duration_s)),
                "acquireTime": acquired or now, "renewTime": now, "leaseTransitions": transitions}

    def _set(self, leading: bool) -> None:
        if leading != self.leading:
            self.leading = leading
            log.info("%s: %s the lease %s/%s", self.identity, "holds" if leading else "lost", self.namespace, self.name)
            self.changed.set()

    async def try_once(self) -> bool:
        """One round: create, renew or take over the Lease if allowed. Returns ``leading``."""
        now = time.monotonic()
        try:
            lease = await self.kube.get(LEASES, self.name, self.namespace)
        except ApiError as exc:
            if not exc.not_found:
                raise
            return await self._write(now, self.kube.create(LEASES, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace}, "spec": self._spec(0)}, self.namespace))
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._seen:
            self._seen, self._seen_at = record, now
        holder = spec.get("holderIdentity")
        if holder == self.identity:
            new_spec = dict(spec, renewTime=micro_time(), leaseDurationSeconds=max(1, round(self.duration_s)))
        elif not holder or now - self._seen_at >= self.duration_s:
            new_spec = self._spec(int(spec.get("leaseTransitions") or 0) + 1)
        else:
            self._set(False)
            return False
        lease["spec"] = new_spec
        return await self._write(now, self.kube.replace(LEASES, self.name, lease, self.namespace))

    async def _write(self, now: float, write) -> bool:
        """Create or update the Lease; a conflict means another candidate wrote first."""
        try:
            await write
        except ApiError as exc:
            if exc.conflict:
                self._set(False)
                return False
            raise
        self._renewed_at = now
        self._set(True)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.try_once()
            except Exception as exc:  # the API server unreachable: keep leading only while the lease lasts
                if isinstance(exc, asyncio.CancelledError):
                    raise
                log.warning("%s: lease %s/%s: %r", self.identity, self.namespace, self.name, exc)
                if time.monotonic() - self._renewed_at >= self.duration_s * 2 / 3:
                    self._set(False)
            try:
                await asyncio.wait_for(stop.wait(), self.renew_s)
            except asyncio.TimeoutError:
                pass
        await self.release()

    async def release(self) -> None:
        """Give the lease up on a clean stop, so a standby takes over at once."""
        if not self.leading:
            return
        self._set(False)
        try:
            lease = await self.kube.get(LEASES, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                await self.kube.replace(LEASES, self.name, lease, self.namespace)
        except Exception as exc:  # best effort: the lease expires anyway
            if isinstance(exc, asyncio.CancelledError):
                raise
            log.info("%s: could not release the lease: %r", self.identity, exc)
