"""The documented downstream consumer (examples/faust_invoice_totals.py) keeps per-team totals
from ``gangway.invoices`` on a real embedded broker — counting a re-published invoice once."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

from gangway.adapters.broker import EmbeddedBroker
from gangway.adapters.kafka import append, ensure_topics, producer
from gangway.events import catalogue as ev
from gangway.events import topics
from gangway.services.accounting.billing import books_of
from money_story import night

pytest.importorskip("faust")
pytestmark = pytest.mark.broker

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "faust_invoice_totals.py"


def _example():
    spec = importlib.util.spec_from_file_location("faust_invoice_totals", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


async def test_faust_app_keeps_per_team_totals_of_the_invoices(tmp_path):
    example = _example()
    issued = books_of(night().log).issued
    envs = [ev.Envelope(id=i.invoice_id, source="gangway/accounting", time_ms=i.period_end_ms, data=i) for i in issued]
    with EmbeddedBroker() as broker:
        await ensure_topics(broker.bootstrap)
        prod = producer(broker.bootstrap)
        await prod.start()
        try:
            await append(prod, envs + envs[:1], topic=topics.INVOICES)  # the first one published twice
        finally:
            await prod.stop()
        totals = example.InvoiceTotals()
        app = example.make_app(broker.bootstrap, totals, datadir=str(tmp_path / "faust"))
        await app.start()
        try:
            deadline = asyncio.get_running_loop().time() + 60
            while len(totals.invoices) + totals.skipped < len(envs) + 1:
                assert asyncio.get_running_loop().time() < deadline, "faust did not read the invoices in 60 s"
                await asyncio.sleep(0.05)
        finally:
            await app.stop()
    expected: dict[tuple[str, str], int] = {}
    for i in issued:
        expected[(i.team, i.currency)] = expected.get((i.team, i.currency), 0) + i.billed_cost_micros
    assert totals.billed == expected and totals.skipped == 1
    assert totals.lines()[0] == "batch: 26.16 EUR"
