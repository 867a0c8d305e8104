"""The binder's shell in Kubernetes mode (``gangway up --kubernetes``): the log in, the cluster acted on.

The shell folds the log as every service does; when caught up and nothing of ours is in flight it
runs one ``KubernetesBinder.step`` on the folded state, appends its reports to the log and publishes
its submissions on ``gangway.submissions`` (binary-mode CloudEvents, as any producer). Every replica
folds and watches; only the holder of the ``coordination.k8s.io`` Lease acts, so the Kafka-side
standby of the other services is not used here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path
from typing import Awaitable, Callable

from gangway.adapters import kafka
from gangway.adapters.kubernetes import Kube
from gangway.events import codec, topics
from gangway.events.catalogue import Envelope, JobRejected
from gangway.events.state import State
from gangway.services.binder import webhook as webhook_mod
from gangway.services.binder.kubernetes import Intake, KubernetesBinder, submission_id
from gangway.services.runtime.clock import ClusterClock
from gangway.services.runtime.shell import LogService, Proposal

log = logging.getLogger(__name__)
#: Longest wait between two passes over the cluster when the log is quiet.
STEP_EVERY_S = 0.2


class KubernetesBinderService(LogService):
    name = "binder"

    def __init__(self, bootstrap: str, connect: Callable[[], Awaitable[Kube]], intake: Intake,
                 state_dir: str | Path = ".gangway", clock: ClusterClock | None = None,
                 webhook: webhook_mod.Options | None = None, check: webhook_mod.Check | None = None,
                 **binder_options):
        super().__init__(bootstrap, state_dir, clock)
        self.connect, self.intake, self.binder_options = connect, intake, binder_options
        #: the webhook's check of an object as it is created (``webhook.review``)
        self.webhook, self.check = webhook, check
        self.binder: KubernetesBinder | None = None
        self.outbox: list[Proposal] = []
        self.submit_producer = None

    async def run(self, stop: asyncio.Event, standby: bool = False) -> None:
        kube = await self.connect()
        identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        namespace = os.environ.get("POD_NAMESPACE", "gangway")
        self.binder = KubernetesBinder(kube, identity, intake=self.intake, namespace=namespace, **self.binder_options)
        serving = None
        if self.webhook is not None:  # (every replica serves: the webhook decides nothing)
            server = webhook_mod.WebhookServer(await self.webhook.certs(kube, namespace), self.webhook.port,
                                               check=self.check, refused=self._rejected)
            serving = await server.start(stop)
            log.info("webhook: serving HTTPS on port %d", self.webhook.port)
        self.binder.start(stop)
        self.submit_producer = kafka.producer(self.bootstrap)
        await self.submit_producer.start()
        try:
            await super().run(stop, standby=False)  # the Lease, not Kafka, says who acts
        finally:
            if serving is not None:
                stop.set()
                await serving
            await self.binder.stop()
            await self.binder.elector.release()
            await self.submit_producer.stop()
            await kube.close()

    async def _decide_and_append(self, producer) -> float:
        if self.binder is not None and not self.in_flight and not self.outbox:
            now_ms = max(self.clock.now_ms(), self.state.time_ms)
            out = await self.binder.step(self.state, now_ms)
            self.outbox.extend(out.reports)
            for r in out.rejections:
                self._rejected(r, now_ms)
            for job, version in [(job, None) for job in out.submissions] + out.moves:
                env = Envelope(id=submission_id(job, version), source="gangway/binder", time_ms=self.clock.now_ms(),
                               data=job)
                value, headers = codec.to_binary(env)
                await self.submit_producer.send_and_wait(topics.SUBMISSIONS, value=value, key=job.job_id.encode(),
                                                         headers=headers, partition=0)
        waited = await super()._decide_and_append(producer)
        return min(waited, STEP_EVERY_S)

    def _rejected(self, rejection: JobRejected, now_ms: int | None = None) -> None:
        """Put ``rejection`` on gangway.rejections (where `gangway explain` finds a job that never
        reached the log) with what is appended next: the intake's, and the webhook's (any replica's)."""
        version = (self.state.contract_digest or "")[:12]
        self.outbox.append(Proposal(f"rejected/{rejection.submission}/{self.state.offset}/{version}",
                                    self.clock.now_ms() if now_ms is None else now_ms, rejection, topics.REJECTIONS))

    def decide(self, state: State) -> list[Proposal]:
        out, self.outbox = self.outbox, []
        return out
