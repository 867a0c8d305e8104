"""Money and utilisation arithmetic shared by the fold and accounting (pure, integers only).

- What an attempt is charged for: the resources *admitted* (a partial admission pays for the pods
  it got), at the price of the flavor each resource was admitted in (``Contract.price_of``).
- Busy GPU time: each GPU sample (DCGM's SM activity, thousandths) stands for the time from the
  GPU's previous sample — or from the start of the charge — up to the sample; after the last
  sample its value is carried to the end. ``busy`` is in milli-GPU-milliseconds, the unit of
  allocated GPU time, so busy / allocated is the SM-active-weighted utilisation.
"""

from __future__ import annotations

import calendar
from fractions import Fraction
from datetime import datetime, timedelta, timezone

from gangway.events.contract import Contract
from gangway.events.resources import GPU, admitted_pod_sets, index_of, total_request
from gangway.events.text import digits

#: Resources counted in bytes are priced per GiB-hour; everything else per unit-hour.
BYTE_RESOURCES = ("memory", "ephemeral-storage")
GIB = 1 << 30
MS_PER_HOUR = 3_600_000
#: ISO 4217 currencies whose minor unit is not the cent (digits after the point); others have 2.
MINOR_DIGITS = {"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
                "RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
                "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3, "CLF": 4, "UYW": 4}


def minor_digits(currency: str) -> int:
    """Digits of ``currency``'s minor unit (2 for EUR and USD: the cent; 0 for JPY)."""
    return MINOR_DIGITS.get(currency, 2)


def to_minor_unit(micros: int, currency: str) -> int:
    """``micros`` (millionths) rounded half away from zero to ``currency``'s minor unit, still in
    millionths: what an invoice line bills (4.225 EUR bills 4.23, -4.225 bills -4.23)."""
    step = 10 ** (6 - minor_digits(currency))
    whole = (2 * abs(micros) + step) // (2 * step) * step
    return whole if micros >= 0 else -whole


def unit_of(resource: str) -> str:
    """The unit an invoice line's quantity is stated in: GPU-Hour, GiB-Hour (bytes), else <resource>-Hour."""
    if resource == GPU:
        return "GPU-Hour"
    return "GiB-Hour" if resource in BYTE_RESOURCES else f"{resource}-Hour"


def unit_hours(resource: str, quantity: int) -> Fraction:
    """An invoice line's quantity (milli-units × ms; memory in milli-bytes) in its stated unit
    (``unit_of``), exactly: quantity × unit price = list cost."""
    return Fraction(quantity, 1000 * MS_PER_HOUR * (GIB if resource in BYTE_RESOURCES else 1))


def admitted_request(wl) -> dict[str, int]:
    """The whole gang's resources as admitted (partial admission: the admitted pod counts)."""
    counts = wl.admission.counts if wl.admission is not None else {}
    return total_request(admitted_pod_sets(wl.spec.pod_sets, counts))


def flavors_of(contract: Contract | None, wl) -> dict[str, str]:
    """The flavor each resource of the workload was admitted in."""
    if wl.admission is None:
        return {}
    if wl.admission.flavors or contract is None:
        return dict(wl.admission.flavors)
    return index_of(contract).default_flavors(wl.spec.cluster_queue, admitted_request(wl))


def prices_of(contract: Contract | None, wl) -> dict[str, int]:
    """Per admitted resource, its price per unit-hour (millionths; resources without a price are left out)."""
    if contract is None:
        return {}
    flavors = flavors_of(contract, wl)
    out = {}
    for resource in sorted(admitted_request(wl)):
        price = contract.price_of(flavors.get(resource, ""), resource)
        if price is not None:
            out[resource] = price
    return out


def cost_micros(resource: str, quantity: int, per_hour_micros: int) -> int:
    """List cost of ``quantity`` milli-unit-milliseconds at ``per_hour_micros`` per unit-hour,
    rounded half up to the millionth (integer arithmetic: exact, the same on every replay)."""
    divisor = 1000 * MS_PER_HOUR * (GIB if resource in BYTE_RESOURCES else 1)
    return (2 * quantity * per_hour_micros + divisor) // (2 * divisor)


def held_gpus(wl) -> list[tuple[str, int]]:
    """(node, GPU index) of every GPU the workload's placement holds, in placement order."""
    if wl.placement is None:
        return []
    out = []
    for i, a in enumerate(wl.placement.assignments):
        indexes = wl.placement_gpus[i] if i < len(wl.placement_gpus) else []
        out.extend((a.node, g) for g in indexes)
    return out


def gpu_key(node: str, gpu: int) -> str:
    return f"{node}/{gpu}"


def busy_until(wl, end_ms: int) -> int:
    """Busy milli-GPU-ms of the current charge up to ``end_ms`` (last samples carried forward)."""
    busy = wl.busy_milli_ms
    for key, sm in wl.gpu_sm.items():
        seen = wl.gpu_seen_ms.get(key, end_ms)
        if end_ms > seen:
            busy += sm * (end_ms - seen)
    return busy


def mean_sm(wl) -> int | None:
    """Mean SM activity (thousandths) over the GPUs sampled so far in this attempt (None: no sample)."""
    if not wl.gpu_sm:
        return None
    return sum(wl.gpu_sm.values()) // len(wl.gpu_sm)


def gpu_milli(wl) -> int:
    return admitted_request(wl).get(GPU, 0)


# --- billing periods (UTC calendar) ---------------------------------------------------------------


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _ms(dt: datetime) -> int:
    return int(dt.timestamp()) * 1000


def period_of(kind: str, ms: int) -> str:
    """The name of the period holding ``ms``: 2026-11, 2026-W48, 2026-11-30 or 2026-11-30T10."""
    d = _dt(ms)
    if kind == "monthly":
        return f"{d.year:04d}-{d.month:02d}"
    if kind == "weekly":
        y, w, _ = d.isocalendar()
        return f"{y:04d}-W{w:02d}"
    if kind == "daily":
        return d.strftime("%Y-%m-%d")
    return d.strftime("%Y-%m-%dT%H")


def normal_period(period: str) -> str:
    """A period name written the way ``period_of`` writes it (2026-12-3T3 is 2026-12-03T03, 2026-W5
    is 2026-W05): the same period always has the same invoice ids. ValueError when it is none."""
    start, _ = period_bounds(period)
    return period_of(period_kind(period), start)


def period_kind(period: str) -> str:
    """Which kind of billing period a period name is: monthly, weekly, daily or hourly."""
    if "W" in period:
        return "weekly"
    if "T" in period:
        return "hourly"
    return "daily" if period.count("-") == 2 else "monthly"


#: The years a billing period may fall in: on the log's clock (from 1970), and with its end still a
#: date (9999-12-31T23's end is not; a year before 1000 is not written with four digits).
PERIOD_YEARS = (1970, 9998)


def period_bounds(period: str) -> tuple[int, int]:
    """[start, end) in ms of a period name (any of the four kinds); ValueError when it is none."""
    year = period.partition("-")[0]
    if digits(year) and not PERIOD_YEARS[0] <= int(year) <= PERIOD_YEARS[1]:
        raise ValueError(f"{period!r}: a billing period's year is from {PERIOD_YEARS[0]} to {PERIOD_YEARS[1]}")
    try:
        kind = period_kind(period)
        if kind == "weekly":
            year, week = period.split("-W")
            start = datetime.fromisocalendar(int(year), int(week), 1).replace(tzinfo=timezone.utc)
            return _ms(start), _ms(start + timedelta(days=7))
        if kind == "hourly":
            start = datetime.strptime(period, "%Y-%m-%dT%H").replace(tzinfo=timezone.utc)
            return _ms(start), _ms(start + timedelta(hours=1))
        if kind == "daily":
            start = datetime.strptime(period, "%Y-%m-%d").replace(tzinfo=timezone.utc)
            return _ms(start), _ms(start + timedelta(days=1))
        start = datetime.strptime(period, "%Y-%m").replace(tzinfo=timezone.utc)
        days = calendar.monthrange(start.year, start.month)[1]
        return _ms(start), _ms(start + timedelta(days=days))
    except ValueError:
        raise ValueError(f"{period!r} is not a billing period (2026-11, 2026-W48, 2026-11-30 or 2026-11-30T10)") from None


def settling_period(state) -> tuple[str, int]:
    """The billing period the log's clock is in or settling (the one holding ``time - settle``),
    and the cluster time at which it is cut (its end plus the settle time)."""
    billing = state.contract.billing
    period = period_of(billing.period, max(0, state.time_ms - billing.settle_ms))
    return period, period_bounds(period)[1] + billing.settle_ms


def last_finish_period(state) -> tuple[str, int]:
    """The billing period holding the log's last finish, and the cluster time at which it is cut
    (its end plus the settle time): what a reader waits for once every workload has ended. Not
    ``settling_period``: once that cut is ticked the clock stands at it, and the period settling is
    then the next one, which nothing ticks on an idle cluster."""
    billing = state.contract.billing
    last = max((wl.finished_ms for wl in state.workloads.values() if wl.finished_ms is not None), default=state.time_ms)
    period = period_of(billing.period, last)
    return period, period_bounds(period)[1] + billing.settle_ms


def billing_deadline(state) -> tuple[int, str] | None:
    """When the log's clock must next show time passing for a billing period to be cut: the end
    of the period holding the latest activity, plus the settle time — while a workload holds
    nodes or ended in that period (an idle cluster is not ticked forever). None: no prices."""
    contract = state.contract
    if contract is None or not contract.prices:
        return None
    period, cut_at = settling_period(state)
    if not charged_in(state, period):
        return None
    return cut_at, f"billing period {period} ends"


def charged_in(state, period: str) -> bool:
    """Has ``period`` (the one settling) charges: a workload holding nodes now, or one that ended in it?"""
    start = period_bounds(period)[0]
    return (any(state.workloads[n].phase in ("placed", "bound", "running", "evicting") for n in state.active)
            or any(wl.finished_ms is not None and wl.finished_ms >= start for wl in state.workloads.values()))
