"""How far the log has grown and how far each service has folded it (for the console and /metrics).

- ``follow_log``: the log's envelopes in order, batch by batch, forever, each batch with the log's
  end (the fetch high-water mark) seen with it — a reader that follows and knows its own lag.
- ``CommittedOffsets``: the log offset each service has committed to its consumer group
  (``gangway-<service>``). A service commits the next offset it will fold at most once a second
  (``LogService.commit_folded``), so ``end - committed`` is its lag in events — the same figure any
  Kafka consumer-lag exporter shows for those groups.
"""

from __future__ import annotations

import contextlib
import logging

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError, RequestTimedOutError

from gangway.adapters.kafka import LOG_PARTITION, admin_client, log_fetches

log = logging.getLogger(__name__)
#: What aiokafka raises when nothing answers at the address (the broker is gone, or restarting).
_NO_ANSWER = (KafkaConnectionError, NodeNotReadyError, KafkaTimeoutError, RequestTimedOutError)


async def follow_log(bootstrap: str, start: int = 0, idle_ms: int = 500):
    """Yield ``(envelopes, end)`` for every fetch that brings records or moves the end, forever
    (``end``: the log's high-water mark after the fetch, None until the broker has answered one)."""
    last_end: int | None = None
    async with contextlib.aclosing(log_fetches(bootstrap, start, idle_ms)) as fetches:
        async for envs, end, _ in fetches:
            if envs or end != last_end:
                last_end = end
                yield envs, end


class CommittedOffsets:
    """Reads the committed log offset of consumer groups with one admin client kept open."""

    def __init__(self, bootstrap: str):
        self.admin = admin_client(bootstrap)  # the connection settings (TLS, SASL) of every client
        self.started = False
        #: Did the broker answer the last ``read`` (for one group at least)? A reader left running
        #: while the broker is gone (`gangway up` stopped) learns it here: its fetches just wait.
        self.answered = True

    async def read(self, groups: list[str]) -> dict[str, int | None]:
        """Group → committed offset on the log (the next offset it will fold), None if it has none
        (or the broker did not answer)."""
        if not self.started:
            await self.admin.start()
            self.started = True
        out: dict[str, int | None] = {}
        lost = 0
        for group in groups:
            try:
                offsets = await self.admin.list_consumer_group_offsets(group, partitions=[LOG_PARTITION])
                meta = offsets.get(LOG_PARTITION)
                out[group] = meta.offset if meta is not None and meta.offset >= 0 else None
            except Exception as exc:  # a broker without the group (or restarting): no figure
                log.debug("committed offset of %s not read: %s", group, exc)
                out[group] = None
                lost += isinstance(exc, _NO_ANSWER)
        self.answered = lost < len(groups) or not groups
        return out

    async def close(self) -> None:
        if self.started:
            await self.admin.close()
            self.started = False
