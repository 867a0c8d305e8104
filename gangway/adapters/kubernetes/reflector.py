"""List, then watch from the list's resourceVersion; list again when the watch is lost.

A ``Reflector`` keeps ``store`` (namespace/name → object) equal to the API server's view of one
resource type. Watches end normally every ``watch_timeout_s`` and are resumed from the last
resourceVersion seen (bookmarks included); a ``410 Gone`` (that version was compacted away) or any
other failure lists again — after an exponential backoff for failures — and calls ``on_relist`` so
the owner can reconcile what it may have missed.

A type the cluster does not serve (``404`` on its list: a CRD not installed, e.g. no JobSet or
Kubeflow training operator) is synced as empty — its owner goes on with the types it has, as Kueue
skips an integration whose CRD is missing — and is listed again every ``ABSENT_RELIST_S``, so a
CRD installed later is taken up (``absent`` says which it is meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Awaitable, Callable

from gangway.adapters.kubernetes.client import ApiError, Kube, Resource

log = logging.getLogger(__name__)
BACKOFF_MIN_S = 0.2
BACKOFF_MAX_S = 10.0
#: How often a type the cluster does not serve is listed again (s).
ABSENT_RELIST_S = 30.0


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or until ``stop``."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        pass


def key_of(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class Reflector:
    def __init__(self, kube: Kube, res: Resource, namespace: str | None = None, label_selector: str | None = None,
                 on_change: Callable[[str, dict], None] | None = None,
                 on_relist: Callable[[dict[str, dict]], Awaitable[None] | None] | None = None,
                 watch_timeout_s: int = 60):
        self.kube, self.res, self.namespace, self.label_selector = kube, res, namespace, label_selector
        self.on_change, self.on_relist = on_change, on_relist
        self.watch_timeout_s = watch_timeout_s
        self.store: dict[str, dict] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        #: The cluster does not serve this type (its last list was a 404).
        self.absent = False
        #: Lists made (the first one included) and watches that ended in 410 Gone.
        self.lists = 0
        self.gone = 0

    async def _absent(self) -> None:
        """The type is not served: an empty store, synced (said once until it is served again)."""
        if not self.absent:
            log.warning("%s (%s) is not served by this cluster (its CRD is not installed?): none is taken until it "
                        "is; listing again every %g s", self.res.plural, self.res.api_version, ABSENT_RELIST_S)
        self.absent = True
        for old in self.store.values():
            if self.on_change:
                self.on_change("DELETED", old)
        self.store = {}
        self.synced.set()

    async def _list(self) -> bool:
        """List (False: the type is not served, ``_absent``)."""
        try:
            items, rv = await self.kube.list(self.res, self.namespace, self.label_selector)
        except ApiError as exc:
            if not exc.not_found:
                raise
            await self._absent()
            return False
        if self.absent:
            log.info("%s (%s) is served now", self.res.plural, self.res.api_version)
            self.absent = False
        fresh = {key_of(o): o for o in items}
        for k, old in self.store.items():
            if k not in fresh and self.on_change:
                self.on_change("DELETED", old)
        for k, obj in fresh.items():
            if self.on_change and (self.store.get(k) or {}).get("metadata", {}).get("resourceVersion") != \
                    obj["metadata"].get("resourceVersion"):
                self.on_change("MODIFIED" if k in self.store else "ADDED", obj)
        self.store, self.resource_version = fresh, rv
        self.lists += 1
        self.synced.set()
        if self.on_relist is not None:
            result = self.on_relist(self.store)
            if asyncio.iscoroutine(result):
                await result
        return True

    async def run(self, stop: asyncio.Event) -> None:
        backoff = BACKOFF_MIN_S
        need_list = True
        while not stop.is_set():
            try:
                if need_list:
                    if not await self._list():
                        await _sleep(stop, ABSENT_RELIST_S)
                        continue
                    need_list = False
                await self._watch(stop)
                backoff = BACKOFF_MIN_S
            except ApiError as exc:
                need_list = True
                if exc.gone:
                    self.gone += 1
                    log.info("watch of %s expired (410 Gone); listing again", self.res.plural)
                    continue
                log.warning("watch of %s failed: %s; listing again in %.1f s", self.res.plural, exc, backoff)
            except (OSError, asyncio.TimeoutError, ValueError) as exc:
                need_list = True
                log.warning("watch of %s broke: %r; listing again in %.1f s", self.res.plural, exc, backoff)
            except Exception as exc:  # aiohttp's errors and the like: never let the reflector die
                if isinstance(exc, asyncio.CancelledError):
                    raise
                need_list = True
                log.warning("watch of %s broke: %r; listing again in %.1f s", self.res.plural, exc, backoff)
            await _sleep(stop, backoff * (0.5 + random.random()))
            backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def _watch(self, stop: asyncio.Event) -> None:
        stream = self.kube.watch(self.res, self.resource_version, self.namespace, self.label_selector,
                                 self.watch_timeout_s)
        stopper = asyncio.ensure_future(stop.wait())
        nxt = None
        try:
            while True:
                nxt = asyncio.ensure_future(stream.__anext__())
                done, _ = await asyncio.wait({nxt, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if nxt not in done:
                    return
                try:
                    kind, obj = nxt.result()
                except StopAsyncIteration:
                    nxt = None
                    return
                nxt = None
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self.resource_version = rv
                if kind == "BOOKMARK":
                    continue
                k = key_of(obj)
                if kind == "DELETED":
                    self.store.pop(k, None)
                else:
                    self.store[k] = obj
                if self.on_change:
                    self.on_change(kind, obj)
        finally:
            stopper.cancel()
            if nxt is not None and not nxt.done():
                nxt.cancel()
                try:
                    await nxt
                except BaseException:  # its cancellation, or what the stream raised meanwhile
                    pass
            await stream.aclose()
