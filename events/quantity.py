"""Kubernetes resource quantities as exact integers.

Every quantity in gangway is an integer count of *thousandths* of the resource's unit ("milli"):
``cpu: 500m`` is 500, ``nvidia.com/gpu: 8`` is 8000, ``memory: 1Gi`` is 1073741824000. One rule for
every resource name keeps resources open-ended (as in Kubernetes) and lets a pod ask for a fraction
of a GPU later without a second representation.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
    "P": Decimal(10**15), "E": Decimal(10**18),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(?:[eE]([+-]?[0-9]+))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")
MILLI = 1000
#: Largest quantity accepted (in milli units): 2**62, far beyond any real request, small enough
#: that sums over a whole cluster stay exact and fit a 64-bit SQL column.
MILLI_MAX = 2**62


class QuantityError(ValueError):
    """A resource quantity that is not a valid, representable Kubernetes quantity."""


def parse_milli(value: str | int | float) -> int:
    """Parse a Kubernetes quantity (``"500m"``, ``"16Gi"``, ``8``) into integer milli units.

    Raises QuantityError for malformed text, non-finite numbers, fractions of a milli-unit, and
    values beyond MILLI_MAX. Booleans are refused (``True`` is not a quantity).
    """
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"not a finite quantity: {value!r}")
        number = Decimal(repr(value))
    elif isinstance(value, str):
        match = _QUANTITY.match(value.strip())
        if not match:
            raise QuantityError(f"not a Kubernetes quantity: {value!r}")
        mantissa, exponent, suffix = match.groups()
        try:
            number = Decimal(mantissa) * _SUFFIX[suffix]
            if exponent:
                if abs(int(exponent)) > 30:
                    raise QuantityError(f"exponent out of range: {value!r}")
                number = number.scaleb(int(exponent))
        except InvalidOperation as exc:  # pragma: no cover - regex admits only valid decimals
            raise QuantityError(f"not a Kubernetes quantity: {value!r}") from exc
    else:
        raise QuantityError(f"not a quantity: {value!r}")
    milli = number * MILLI
    if milli != milli.to_integral_value():
        raise QuantityError(f"finer than one thousandth: {value!r}")
    result = int(milli)
    if abs(result) > MILLI_MAX:
        raise QuantityError(f"quantity too large: {value!r}")
    return result


def is_extended_resource(name: str) -> bool:
    """An extended resource (``nvidia.com/gpu``), as Kubernetes tells one: not its own (cpu, memory,
    ``*kubernetes.io/…``). Kubernetes counts it in whole units and never overcommits it."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def format_milli(milli: int) -> str:
    """Render milli units the short way a person reads them: 8000 → "8", 500 → "500m"."""
    if milli % MILLI == 0:
        return str(milli // MILLI)
    return f"{milli}m"


def format_resource(name: str, milli: int) -> str:
    """An amount of a named resource as people write it: ``8 nvidia.com/gpu``, ``256Gi memory``."""
    return f"{format_amount(name, milli)} {name}"


def format_amount(name: str, milli: int) -> str:
    """An amount of resource ``name`` without its name: ``8`` (GPUs), ``256Gi`` (memory)."""
    if name == "memory" or name.endswith("-storage"):
        units = milli // MILLI
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units >= size and units % size == 0:
                return f"{units // size}{suffix}"
        return str(units)
    return format_milli(milli)
