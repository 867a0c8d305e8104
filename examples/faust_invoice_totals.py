"""A downstream accounting consumer: a faust-streaming app that reads ``gangway.invoices`` and keeps
each team's billed total per currency.

Invoices are CloudEvents (``io.gangway.invoice.issued.v1``, binary mode, key: the team); each is
decoded with ``gangway.events.codec.from_record``. Invoice ids are deterministic and an accounting
service that publishes again after a crash publishes the same invoice with the same id, so the
totals count each id once.

Run it against a running gangway (``gangway up`` prints ``GANGWAY_KAFKA``)::

    python examples/faust_invoice_totals.py --broker 127.0.0.1:9092

The totals live in memory: faust Tables recover from changelog end offsets, which the embedded
broker reports wrongly (KNOWN-BROKER-LIMITS.md). On Apache Kafka, swap ``InvoiceTotals`` for a
``app.Table("team-totals", default=int)`` keyed by team (and keep the set of ids seen in another).
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from dataclasses import dataclass, field
from decimal import Decimal

import faust

from gangway.events import codec, topics
from gangway.events.catalogue import InvoiceIssued


@dataclass
class InvoiceTotals:
    """Billed totals per (team, currency) in millionths, each invoice id counted once."""

    billed: dict[tuple[str, str], int] = field(default_factory=dict)
    invoices: dict[str, InvoiceIssued] = field(default_factory=dict)
    skipped: int = 0

    def add(self, invoice: InvoiceIssued) -> bool:
        if invoice.invoice_id in self.invoices:
            self.skipped += 1
            return False
        self.invoices[invoice.invoice_id] = invoice
        key = (invoice.team, invoice.currency)
        self.billed[key] = self.billed.get(key, 0) + invoice.billed_cost_micros
        return True

    def lines(self) -> list[str]:
        return [f"{team}: {Decimal(micros) / 1_000_000:.2f} {currency}"
                for (team, currency), micros in sorted(self.billed.items())]


def make_app(bootstrap: str, totals: InvoiceTotals, app_id: str | None = None, **settings) -> faust.App:
    """The faust App: one agent on ``gangway.invoices``, raw bytes in, no tables, no web server."""
    app = faust.App(
        app_id or f"gangway-invoice-totals-{uuid.uuid4().hex[:8]}",
        broker=f"kafka://{bootstrap}",
        store="memory://",
        web_enabled=False,
        autodiscover=False,
        consumer_auto_offset_reset="earliest",
        # The embedded broker answers a JoinGroup after half the session timeout: keep it short.
        broker_session_timeout=2.0,
        broker_heartbeat_interval=0.5,
        broker_rebalance_timeout=10.0,
        topic_disable_leader=True,
        topic_allow_declare=False,
        key_serializer="raw",
        value_serializer="raw",
        **settings,
    )
    invoices = app.topic(topics.INVOICES, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")

    @app.agent(invoices)
    async def keep_totals(stream):
        async for event in stream.events():
            env = codec.from_record(event.value, list(event.headers.items()), event.message.offset)
            if isinstance(env.data, InvoiceIssued):
                totals.add(env.data)

    return app


async def _main(bootstrap: str, every_s: float) -> None:
    totals = InvoiceTotals()
    app = make_app(bootstrap, totals)
    await app.start()
    try:
        while True:
            await asyncio.sleep(every_s)
            print("\n".join(totals.lines()) or "no invoices yet", flush=True)
    finally:
        await app.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", required=True, help="bootstrap address, host:port")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between printed totals")
    args = parser.parse_args()
    asyncio.run(_main(args.broker, args.every))
