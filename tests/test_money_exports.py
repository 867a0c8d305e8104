"""Money out: invoices through the CLI, the FOCUS export (checked by the FinOps validator), the
showback report, and dcgm-exporter telemetry scraped from a real HTTP endpoint."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from gangway.adapters import dcgm
from gangway.cli import main
from gangway.read import money
from gangway.events.money import period_of
from gangway.read.logfile import read_export, write_export
from gangway.services.accounting.billing import books_of
from money_story import night, serve_exposition

ROOT = Path(__file__).resolve().parents[1]
FOCUS_VALIDATOR = ROOT / ".venv-focus" / "bin" / "focus-validator"


@pytest.fixture(scope="module")
def night_log(tmp_path_factory):
    sim = night()
    path = tmp_path_factory.mktemp("money") / "night.jsonl"
    write_export(sim.log, str(path))
    return path, books_of(sim.log)


def test_invoice_command_formats_agree(night_log, capsys) -> None:
    path, books = night_log
    assert main(["invoice", "--period", "2026-11", "--log", str(path), "--format", "json"]) == 0
    issued = json.loads(capsys.readouterr().out)
    assert [i["invoice_id"] for i in issued] == [i.invoice_id for i in books.issued if i.period == "2026-11"]
    assert main(["invoice", "--period", "2026-11", "--team", "batch", "--log", str(path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["team"] for r in rows} == {"batch"}
    batch = next(i for i in books.issued if i.team == "batch" and i.period == "2026-11")
    assert sum(money.money(int(round(float(r["billed_cost"]) * 1e6)), 6) for r in rows) == money.money(batch.billed_cost_micros, 6)
    assert main(["invoice", "--period", "2026-11", "--log", str(path)]) == 0
    table = capsys.readouterr().out
    assert " 0.00 " in table and "-0.00" not in table  # a team without credits has none, not "-0.00"
    assert main(["invoice", "--period", "2027-01", "--log", str(path)]) == 0
    assert "draft" in capsys.readouterr().out
    assert main(["invoice", "--log", str(path)]) == 0  # without --period: which periods there are
    listed = capsys.readouterr().out
    for period in sorted({i.period for i in books.issued}):
        count = sum(i.period == period for i in books.issued)
        assert f"{period}: {count} invoice(s), " in listed, listed
    with pytest.raises(SystemExit):
        main(["invoice", "--period", "Nov", "--log", str(path)])


def test_focus_export_has_every_column_and_passes_the_finops_validator(night_log, tmp_path) -> None:
    path, books = night_log
    out = tmp_path / "focus.csv"
    assert main(["export", "focus", "--period", "2026-11", "--log", str(path), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert set(money.FOCUS_COLUMNS) <= set(rows[0])
    billed = sum(i.billed_cost_micros for i in books.issued if i.period == "2026-11")
    assert sum(round(float(r["BilledCost"]) * 1_000_000) for r in rows) == billed
    assert {r["ChargeCategory"] for r in rows} == {"Usage", "Credit"}
    # FOCUS 1.0: a unit price times PricingQuantity is the ListCost and the ContractedCost (no
    # negotiated discount); without one (a credit) both match the BilledCost
    for r in rows:
        if r["ContractedUnitPrice"]:
            product = Decimal(r["ContractedUnitPrice"]) * Decimal(r["PricingQuantity"])
            assert abs(product - Decimal(r["ContractedCost"])) < Decimal("0.00001"), r
            assert r["ContractedCost"] == r["ListCost"], r
        else:
            assert r["ContractedCost"] == r["ListCost"] == r["BilledCost"], r
    result = focus_validation(out)
    assert "Validation succeeded" in result, result
    broken = tmp_path / "broken.csv"
    broken.write_text(out.read_text().replace(",EUR,", ",EURO,"))
    assert "BillingCurrency" in focus_validation(broken), "the validator really checks"


def focus_validation(path: Path) -> str:
    """What the FinOps Foundation's validator says of a FOCUS CSV (the test skips without it)."""
    if not FOCUS_VALIDATOR.exists():
        pytest.skip("focus-validator is not installed (.venv-focus: `make test` installs it)")
    # The validator reads its currency list from a path relative to the working directory.
    site = next((ROOT / ".venv-focus" / "lib").glob("python*/site-packages"))
    result = subprocess.run([str(FOCUS_VALIDATOR), "--data-file", str(path), "--validate-version", "1.0"],
                            cwd=site, capture_output=True, text=True, timeout=300)
    return result.stdout + result.stderr


def test_credit_carried_between_periods_is_an_adjustment_the_finops_validator_takes(night_log, tmp_path) -> None:
    """An invoice whose credits are more than it bills carries the rest (billing.carry): its FOCUS
    rows still add up to what it bills (0), the carried line an Adjustment, and the validator takes it."""
    import msgspec

    from gangway.services.accounting.billing import carry
    _, books = night_log
    invoice = next(i for i in books.issued if i.credits_micros)
    credit = next(line for line in invoice.lines if line.kind == "credit")
    bigger = msgspec.structs.replace(credit, billed_cost_micros=credit.billed_cost_micros - invoice.billed_cost_micros - 5_000_000)
    carried: dict[str, int] = {}
    lines = carry([line if line is not credit else bigger for line in invoice.lines], carried, invoice.team,
                  invoice.period_start_ms, invoice.period_end_ms)
    assert carried == {invoice.team: 5_000_000}
    negative = msgspec.structs.replace(invoice, lines=lines, credits_micros=-bigger.billed_cost_micros,
                                       carried_micros=5_000_000, billed_cost_micros=0)
    out = tmp_path / "focus.csv"
    out.write_text(money.focus_csv([negative]))
    rows = list(csv.DictReader(out.open()))
    assert sum(round(float(r["BilledCost"]) * 1_000_000) for r in rows) == 0
    [adjustment] = [r for r in rows if r["ChargeCategory"] == "Adjustment"]
    assert (adjustment["BilledCost"], adjustment["ResourceId"]) == ("5.000000", f"carried/{invoice.team}")
    result = focus_validation(out)
    assert "Validation succeeded" in result, result


def test_showback_html_has_charts_and_the_idle_notebook(night_log, tmp_path, capsys) -> None:
    path, _ = night_log
    html = tmp_path / "showback.html"
    assert main(["showback", "--log", str(path), "--html", str(html)]) == 0
    text = html.read_text()
    assert text.count("data:image/png;base64,") == 2
    assert "research/notebook" in text and "allocated vs busy" in text
    out = capsys.readouterr().out
    assert "research" in out and "38%" in out


def test_read_api_spend_over_time_adds_up(night_log) -> None:
    _, books = night_log
    charges = books.known()
    start = min(c.start_ms for c in charges)
    end = max(c.end_ms for c in charges)
    series = money.spend_over_time(charges, start, end, 3_600_000)
    total = {t.team: t.list_cost_micros for t in money.team_figures(charges)}
    for team, values in series.items():
        assert abs(sum(values) - total[team]) <= len(values) * 2, "per-step rounding only"


EXPOSITION = """# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="n0",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="research",pod="train-0"} 71
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1b6e",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="n0",DCGM_FI_DRIVER_VERSION="550.54.15"} 0
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="n0",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="research",pod="train-0"} 61234
# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned (in %).
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="n0",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="research",pod="train-0"} 0.812
DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-1b6e",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="n0",DCGM_FI_DRIVER_VERSION="550.54.15"} 0
"""


@pytest.fixture
def exporter():
    body = {"text": EXPOSITION}
    server = serve_exposition(body)
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics", body
    server.shutdown()
    server.server_close()


def test_scrape_maps_pods_to_workloads_and_rejects_bad_expositions(exporter) -> None:
    url, body = exporter
    (event,) = dcgm.parse(dcgm.fetch(url), frozenset({"research/train", "research/tr"}), observed_ms=5)
    assert event.node == "n0" and event.observed_ms == 5
    assert [(s.gpu, s.sm_active, s.gpu_util, s.fb_used_mib, s.workload) for s in event.samples] == [
        (0, 812, 71, 61234, "research/train"), (1, 0, 0, 0, None)]
    body["text"] = "DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\"} 0.5\n"
    with pytest.raises(dcgm.ScrapeError, match="Hostname"):
        dcgm.parse(dcgm.fetch(url))
    body["text"] = "this is { not prometheus\n"
    with pytest.raises(dcgm.ScrapeError):
        dcgm.parse(dcgm.fetch(url))
    body["text"] = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n0"} 5\n'
    with pytest.raises(dcgm.ScrapeError, match="SM_ACTIVE"):
        dcgm.parse(dcgm.fetch(url))
    # (a stranger's test: each of these was a traceback, and killed the scraping loop)
    body["text"] = ('DCGM_FI_PROF_SM_ACTIVE{gpu="0",Hostname="n0"} NaN\nDCGM_FI_PROF_SM_ACTIVE{gpu="1",Hostname="n0"} 0.5\n'
                    'DCGM_FI_DEV_FB_USED{gpu="1",Hostname="n0"} +Inf\n')
    (event,) = dcgm.parse(dcgm.fetch(url))  # NaN and ±Inf are no reading: GPU 0 has none this time
    assert [(s.gpu, s.sm_active, s.fb_used_mib) for s in event.samples] == [(1, 500, 0)]
    for label in ("-1", "99999999999999999999999", "²"):
        body["text"] = f'DCGM_FI_PROF_SM_ACTIVE{{gpu="{label}",Hostname="n0"}} 0.5\n'
        with pytest.raises(dcgm.ScrapeError, match="is not a GPU index"):
            dcgm.parse(dcgm.fetch(url))
    body["text"] = b"\xff\xfe not text"
    with pytest.raises(dcgm.ScrapeError, match="not UTF-8"):
        dcgm.fetch(url)
    with pytest.raises(dcgm.ScrapeError, match="not a URL"):
        dcgm.fetch("notaurl")


def test_the_validator_is_pinned_in_the_makefile() -> None:
    text = (ROOT / "Makefile").read_text()
    assert "focus-validator==1.0.0" in text and "multimethod<1.11" in text
    assert shutil.which("python3")


def unpriced_log(path: Path) -> Path:
    """A log whose contract sets no prices (and bills monthly, the default): one 4-GPU hour."""
    from builders import cluster_queue, contract, node, workload
    from gangway.sim import Simulation
    sim = Simulation()
    sim.configure(contract(cluster_queue("q").gpus(8)).obj())
    sim.add_nodes([node("n1").gpus(8).obj()])
    sim.submit(workload("w").queue("q").gpus(4).runtime_ms(3_600_000).obj())
    sim.run()
    write_export(sim.log, str(path))
    return path


def test_showback_says_so_when_the_contract_sets_no_prices(night_log, tmp_path, capsys) -> None:
    unpriced = unpriced_log(tmp_path / "unpriced.jsonl")
    assert main(["showback", "--log", str(unpriced)]) == 0
    out = capsys.readouterr().out
    assert "no prices in the contract: every cost is 0" in out and "4.00" in out  # 4 GPU-hours, unpriced
    assert main(["showback", "--log", str(night_log[0])]) == 0
    assert "no prices in the contract" not in capsys.readouterr().out


def test_invoice_says_why_a_period_has_none_no_prices_or_a_kind_of_period_the_contract_does_not_cut(
        night_log, tmp_path, capsys) -> None:
    unpriced = unpriced_log(tmp_path / "unpriced.jsonl")
    end = max(e.time_ms for e in read_export(str(unpriced)))
    hour = period_of("hourly", end)
    for command in (["invoice"], ["export", "focus"]):  # (invoices of it would carry ids no invoice has)
        with pytest.raises(SystemExit) as exc:
            main([*command, "--period", hour, "--log", str(unpriced)])
        assert str(exc.value) == (f"gangway: the contract cuts monthly periods (like {period_of('monthly', end)}), and "
                                  f"{hour} is not one: no invoice is ever issued for it (`gangway showback --period "
                                  f"{hour}` gives its figures)")
    assert main(["invoice", "--period", period_of("monthly", end), "--log", str(unpriced), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [] and "cuts monthly periods" not in err and "no prices" in err
    path, books = night_log
    assert main(["invoice", "--period", books.issued[0].period, "--log", str(path)]) == 0
    assert capsys.readouterr().err == ""


def test_a_bad_period_is_one_line_in_showback_as_in_invoice(night_log, capsys) -> None:
    for command in ("showback", "invoice"):
        with pytest.raises(SystemExit) as exc:
            main([command, "--log", str(night_log[0]), "--period", "bogus"])
        assert str(exc.value).startswith("gangway: 'bogus' is not a billing period (2026-11, 2026-W48")
    # a year whose period ends past 9999, or is not written with four digits: one line too, in every command
    for command in ("showback", "invoice", "export"):
        for period in ("9999-12-31T23", "9999-W52", "0999-01-01", "0001-01-01T00"):
            with pytest.raises(SystemExit) as exc:
                main([command, *(["focus"] if command == "export" else []), "--log", str(night_log[0]),
                      "--period", period])
            assert str(exc.value) == f"gangway: {period!r}: a billing period's year is from 1970 to 9998", period


def test_printed_money_rounds_half_up_as_the_invoices_amounts_do() -> None:
    from gangway.read.money import money
    assert str(money(4_225_000)) == "4.23" and str(money(16_825_000)) == "16.83" and str(money(-4_225_000)) == "-4.23"


def test_money_is_not_read_off_a_log_with_lines_missing_or_its_contract_edited(night_log, tmp_path, capsys) -> None:
    path, books = night_log
    lines = path.read_text().splitlines(keepends=True)
    gap = tmp_path / "gap.jsonl"
    gap.write_text("".join(lines[:40] + lines[41:]))
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(lines[40:]))
    edited = tmp_path / "edited.jsonl"
    head = json.loads(lines[0])
    assert head["type"] == "io.gangway.config.applied.v1"
    head["data"]["contract"]["currency"] = "XXX" if head["data"]["contract"].get("currency") != "XXX" else "EUR"
    edited.write_text(json.dumps(head) + "\n" + "".join(lines[1:]))
    # A decision's reason rewritten: the whole audit runs first (the file's own checks alone let it by).
    decided = tmp_path / "decided.jsonl"
    at = next(i for i, line in enumerate(lines) if '"io.gangway.workload.admitted.v1"' in line)
    admitted = json.loads(lines[at])
    admitted["data"]["reason"] = "fits, trust me"
    decided.write_text("".join(lines[:at]) + json.dumps(admitted) + "\n" + "".join(lines[at + 1:]))
    period = books.issued[0].period
    for log, why in ((gap, "missing"), (partial, "a partial export"), (edited, "the contract was changed"),
                     (decided, "reason text is not its code's")):
        for command in (["invoice", "--period", period], ["export", "focus", "--period", period], ["showback"]):
            with pytest.raises(SystemExit) as exc:
                main([*command, "--log", str(log)])
            assert f"{log} does not pass the audit (" in str(exc.value) and why in str(exc.value)
    assert main(["invoice", "--period", period, "--log", str(gap), "--unchecked", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert "read anyway (--unchecked)" in out.err and json.loads(out.out)


def test_amounts_are_printed_in_their_currencys_minor_unit(night_log) -> None:
    """3 decimals for BHD, none for JPY, 2 for EUR: list − credits + idle = billed as printed."""
    import msgspec
    from rich.console import Console
    _, books = night_log
    invoice = next(i for i in books.issued if i.credits_micros)
    for currency, places in (("BHD", 3), ("JPY", 0), ("EUR", 2)):
        console = Console(width=200, record=True)
        console.print(money.invoices_table([msgspec.structs.replace(invoice, currency=currency)]))
        row = next(line for line in console.export_text().splitlines() if invoice.team in line).split()
        figures = [str(money.money(m, places)) for m in (invoice.list_cost_micros, -invoice.credits_micros,
                                                         invoice.idle_cost_micros, invoice.billed_cost_micros)]
        assert row[row.index(invoice.team) + 4:row.index(invoice.team) + 11:2] == figures, (currency, row)
        assert all(len(f.partition(".")[2]) == places for f in figures)


def test_a_period_outside_the_log_is_said_by_showback_and_export_and_invoice_lists_one_teams_periods(
        night_log, capsys) -> None:
    path, books = night_log
    assert main(["showback", "--log", str(path), "--period", "2030-01"]) == 0
    assert "period 2030-01 is outside the log (2026-11-30T21:00:00.000Z to " in capsys.readouterr().out
    assert main(["export", "focus", "--period", "2026-10", "--log", str(path)]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and "ended before this log began" in err  # (the header alone, and why)
    team = books.issued[0].team
    assert main(["invoice", "--log", str(path), "--team", team]) == 0
    listed = capsys.readouterr().out
    periods = sorted({i.period for i in books.issued})
    counts = {p: sum(i.period == p and i.team == team for i in books.issued) for p in periods}
    assert 0 in counts.values()  # (a period only other teams were invoiced for: not listed for this one)
    for period, count in counts.items():
        assert (f"{period}: {count} invoice(s), " in listed) == (count > 0), listed
