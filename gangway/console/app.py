"""The web console: a Starlette app that follows the log and serves the pages, SSE and /metrics.

It keeps no state of its own: it folds the log from offset 0 like any reader (``Folded``) and
follows it; every page, every pushed update and every metric is computed from that fold. Live
updates go to the browser as server-sent events (``/api/live``), at most ``PUSH_EVERY_S`` apart.

Routes: ``/`` the page; ``/static/…`` its files (Chart.js vendored, no CDN); ``/api/view`` (map,
queues, money, summary), ``/api/stream`` (filtered decision stream), ``/api/job?name=`` (one job),
``/api/live`` (SSE); ``/rules`` (``gangway rules --html`` of the contract in force); ``/metrics``;
``/healthz`` (the follower runs) and ``/readyz`` (it has folded the log up to its end once, and the
broker answers: ``Console.problem``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import socket
import time
from importlib import resources

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gangway.adapters.kafka import BrokerUnreachable
from gangway.adapters.progress import CommittedOffsets, follow_log
from gangway.console import model
from gangway.console.metrics import GangwayCollector
from gangway.events.text import digits
from gangway.read.describe import declares_islands

log = logging.getLogger(__name__)
SERVICES = ("submission", "admission", "placement", "preemption", "accounting", "binder")
PUSH_EVERY_S = 0.5
SERVICES_EVERY_S = 1.0
#: A broker silent this long makes /readyz fail and the page say so (a restart of `gangway up` takes less).
SILENT_MAX_S = 10.0
#: Above this many pending workloads the queue page shows reasons without the forecast start.
FORECAST_PENDING_MAX = 200
STREAM_FIRST = 300


class Console:
    """The fold the console serves, and the browsers listening to it."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.folded = model.Folded()
        self.end: int | None = None
        self.caught_up = False
        self.services: dict[str, int | None] = {}
        self.services_end: int | None = None
        self.listeners: set[asyncio.Queue] = set()
        self.tasks: list[asyncio.Task] = []
        self._pending: tuple[int, dict] = (-2, {})
        #: Events already sent to the browsers (they keep the stream; a new one fetches /api/stream).
        self._sent = 0
        self._version: tuple = ()
        self.error: str | None = None
        #: Since when the broker has not answered (``CommittedOffsets.answered``), if it does not.
        self.silent_since: float | None = None

    # --- following the log ---------------------------------------------------------------

    async def follow(self) -> None:
        try:
            async for envs, end in follow_log(self.bootstrap):
                for env in envs:
                    self.folded.add(env)
                self.end = end
                if end is not None and self.folded.state.offset + 1 >= end:
                    self.caught_up = True
        except asyncio.CancelledError:
            raise
        except BrokerUnreachable as exc:  # (said in one line: no traceback for what the user can put right)
            self.error = f"following the log failed: {exc}"
            self.caught_up = False
            log.error("console: %s", self.error)
        except Exception as exc:  # reported by /healthz and /readyz; the process stays up to say so
            self.error = f"following the log failed at offset {self.folded.state.offset + 1}: {exc!r}"
            self.caught_up = False  # (what it shows stopped there: not ready, and /api/view says so)
            log.exception("console: following the log failed")

    def problem(self) -> str | None:
        """What keeps the console from serving the log as it is: following it failed, or the broker
        has not answered for ``SILENT_MAX_S`` (the view stands where the log was then)."""
        if self.error is not None:
            return self.error
        if self.silent_since is not None and time.monotonic() - self.silent_since >= SILENT_MAX_S:
            return (f"the broker at {self.bootstrap} has not answered for {time.monotonic() - self.silent_since:.0f} s "
                    f"(is `gangway up` running?): showing the log as it was at offset {self.folded.state.offset}")
        return None

    async def poll_services(self) -> None:
        offsets = CommittedOffsets(self.bootstrap)
        try:
            while True:
                end = self.end  # the end as it was when the offsets were read: lag = end - offset
                found = await offsets.read([f"gangway-{s}" for s in SERVICES])
                self.services = {name.removeprefix("gangway-"): off for name, off in found.items()}
                self.services_end = end
                if offsets.answered:
                    self.silent_since = None
                elif self.silent_since is None:
                    self.silent_since = time.monotonic()
                await asyncio.sleep(SERVICES_EVERY_S)
        finally:
            await offsets.close()

    async def push(self) -> None:
        """Send the new view to every browser whenever the fold moved (at most every PUSH_EVERY_S)."""
        while True:
            await asyncio.sleep(PUSH_EVERY_S)
            offset = self.folded.state.offset
            version = (offset, self.end, tuple(sorted(self.services.items())), self.problem() is None)
            if version == self._version or not self.listeners:
                continue
            envs = self.folded.envs
            islands = declares_islands(self.folded.state.nodes.values())
            fresh = [model.stream_item(e, islands) for e in envs[max(self._sent, len(envs) - STREAM_FIRST):]]
            self._sent, self._version = len(envs), version
            message = json.dumps({"view": self.view(), "events": fresh})
            for queue in list(self.listeners):
                if queue.qsize() < 4:
                    queue.put_nowait(message)

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self.follow()), asyncio.create_task(self.poll_services()),
                      asyncio.create_task(self.push())]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # --- what the pages show -------------------------------------------------------------

    def pending(self) -> dict:
        """The pending report (reasons, positions, forecast), once per folded offset."""
        from gangway.read.explain import pending_report
        state = self.folded.state
        if self._pending[0] != state.offset:
            report = pending_report(state, forecast=len(state.pending) <= FORECAST_PENDING_MAX) if state.pending else {}
            self._pending = (state.offset, report)
        return self._pending[1]

    def view(self) -> dict:
        folded = self.folded
        summary = folded.summary()
        summary.update(end=self.end, caught_up=self.caught_up, services=self.health_of_services(), problem=self.problem())
        forecast = len(folded.state.pending) <= FORECAST_PENDING_MAX
        return {"summary": summary, "map": model.gpu_map(folded),
                "queues": model.queues_view(folded, self.pending(), forecast), "money": model.money(folded)}

    def health_of_services(self) -> list[dict]:
        end = self.services_end
        return [{"service": name, "folded": off, "lag": None if off is None or end is None else max(0, end - off)}
                for name, off in sorted(self.services.items())]

    def job(self, name: str) -> dict | None:
        from gangway.read.explain import explain
        state = self.folded.state
        resolved = name if name in state.workloads else next(
            (w for w in state.workloads if w.rsplit("/", 1)[-1] == name), name)
        if resolved not in state.workloads:
            return None
        lines = explain(list(self.folded.envs), resolved, forecast=len(state.pending) <= FORECAST_PENDING_MAX)
        return model.job_view(self.folded, resolved, lines)

    def rules_html(self) -> str | None:
        from gangway.read import rules
        state = self.folded.state
        if state.contract is None:
            return None
        return rules.as_html(rules.sections(state.contract, state.contract_digest))

    def metrics_source(self):
        state = self.folded.state
        return self.folded, self.pending() if state.pending else {}, self.end, self.services, self.services_end


def _static(name: str) -> str:
    return (resources.files("gangway.console") / "static" / name).read_text()


def create_app(bootstrap: str, log: list | None = None) -> Starlette:
    """The app following ``bootstrap``'s log; or, given ``log`` (envelopes), serving that log as it
    is, following nothing (tests, and pages about an exported log)."""
    console = Console(bootstrap)
    if log is not None:
        for env in log:
            console.folded.add(env)
        console.end = console.folded.state.offset + 1
        console.caught_up = True
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GangwayCollector(console.metrics_source))

    async def index(request: Request) -> Response:
        return HTMLResponse(_static("index.html"))

    async def api_view(request: Request) -> Response:
        return JSONResponse(console.view())

    async def api_stream(request: Request) -> Response:
        q = request.query_params
        limit = min(2_000, max(1, int(q.get("limit", STREAM_FIRST)) if digits(q.get("limit", "")) else STREAM_FIRST))
        return JSONResponse(model.stream(console.folded, q.get("team", ""), q.get("kind", ""), q.get("job", ""), limit))

    async def api_job(request: Request) -> Response:
        name = request.query_params.get("name", "")
        view = console.job(name) if name else None
        if view is None:
            return JSONResponse({"error": f"no job {name!r} on the log"}, status_code=404)
        return JSONResponse(view)

    async def api_live(request: Request) -> Response:
        queue: asyncio.Queue = asyncio.Queue()
        console.listeners.add(queue)
        # a new listener gets a fresh view at the next push, with the latest events again (browsers
        # drop the ones they have), so nothing between its /api/stream and its first push is missed
        console._version = ()
        console._sent = max(0, console._sent - STREAM_FIRST)

        async def events():
            try:
                while True:
                    if await request.is_disconnected():
                        return
                    try:
                        data = await asyncio.wait_for(queue.get(), timeout=15)
                    except asyncio.TimeoutError:
                        continue
                    yield {"event": "view", "data": data}
            finally:
                console.listeners.discard(queue)
        return EventSourceResponse(events(), ping=10)

    async def rules_page(request: Request) -> Response:
        html = console.rules_html()
        if html is None:
            return HTMLResponse("<p>No contract has been applied on this log yet.</p>", status_code=404)
        return HTMLResponse(html)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        alive = (log is not None or (console.tasks and not console.tasks[0].done())) and console.error is None
        return PlainTextResponse("ok" if alive else (console.error or "not following the log"),
                                 status_code=200 if alive else 503)

    async def readyz(request: Request) -> Response:
        problem = console.problem()
        if problem is not None:
            return PlainTextResponse(problem, status_code=503)
        if console.caught_up:
            return PlainTextResponse(f"ready: folded to offset {console.folded.state.offset}")
        return PlainTextResponse(f"catching up: offset {console.folded.state.offset} of {console.end}", status_code=503)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if log is None:
            console.start()
        try:
            yield
        finally:
            await console.stop()

    static = StaticFiles(directory=str(resources.files("gangway.console") / "static"))
    app = Starlette(routes=[
        Route("/", index), Route("/api/view", api_view), Route("/api/stream", api_stream),
        Route("/api/job", api_job), Route("/api/live", api_live), Route("/rules", rules_page),
        Route("/metrics", metrics), Route("/healthz", healthz), Route("/readyz", readyz),
        Mount("/static", static, name="static"),
    ], lifespan=lifespan)
    app.state.console = console
    return app


class ListenError(Exception):
    """The console cannot listen where it was asked: the sentence says why (port in use, an address
    that is not this machine's, a host name that does not resolve)."""


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (0: any free port) for ``serve``: bound here, so that
    a port taken by another program is a ``ListenError`` now, and one bound once stays the console's
    (``gangway demo --console`` holds it from its start)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as uvicorn binds)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(f"port {port} is in use: pick another with --port") from None
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)  # (the demo hands it to its console process)
    return sock


def serve(bootstrap: str, sock: socket.socket, host: str = "127.0.0.1", announce=None) -> None:
    """Serve the console on ``sock`` (``listen``) until SIGINT/SIGTERM (uvicorn). ``announce(url)``
    is called once it serves."""
    import uvicorn

    config = uvicorn.Config(create_app(bootstrap), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)

    async def main() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started and announce is not None:
            announce(f"http://{host}:{sock.getsockname()[1]}/")
        await task

    started = time.monotonic()
    asyncio.run(main())
    log.info("console served for %.0f s", time.monotonic() - started)
