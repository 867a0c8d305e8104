"""Kubernetes quantities as exact integers of milli units (Kubernetes' own examples first)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangway.events.quantity import MILLI_MAX, QuantityError, format_milli, format_resource, parse_milli

GI = 2**30

PARSE = [
    ("500m is half a unit", "500m", 500),
    ("1.5 is one and a half units", "1.5", 1500),
    ("16Gi is 16 binary gigabytes", "16Gi", 16 * GI * 1000),
    ("1e3 is a thousand", "1e3", 1_000_000),
    ("1E3 is a thousand too", "1E3", 1_000_000),
    ("1k is a thousand", "1k", 1_000_000),
    ("1M is a million", "1M", 10**9),
    ("1Ki is 1024", "1Ki", 1024 * 1000),
    ("1Mi is 1024 Ki", "1Mi", 2**20 * 1000),
    ("1.5Gi is exact", "1.5Gi", 3 * 2**29 * 1000),
    ("128974848 bytes", "128974848", 128974848000),
    ("129e6 bytes", "129e6", 129 * 10**9),
    ("123Mi", "123Mi", 123 * 2**20 * 1000),
    ("0.1 is 100m", "0.1", 100),
    (".5 with no leading digit", ".5", 500),
    ("1000u is one milli", "1000u", 1),
    ("1000000n is one milli", "1000000n", 1),
    ("a whole number with a trailing dot", "5.", 5000),
    ("zero", "0", 0),
    ("an explicit plus sign", "+2", 2000),
    ("negative quantities parse (Kubernetes allows them)", "-1", -1000),
    ("surrounding blanks are ignored", " 8 ", 8000),
    ("1P is one peta", "1P", 10**15 * 1000),
    ("2T is two tera", "2T", 2 * 10**12 * 1000),
    ("a negative exponent", "25e-1", 2500),
    ("an int counts whole units", 8, 8000),
    ("a float counts whole units", 0.25, 250),
    ("a float with a milli part", 1.5, 1500),
    ("the largest accepted quantity", f"{MILLI_MAX}m", MILLI_MAX),
]


@pytest.mark.parametrize(("text", "milli"), [c[1:] for c in PARSE], ids=[c[0] for c in PARSE])
def test_parse_milli(text, milli: int):
    assert parse_milli(text) == milli


REJECT = [
    ("0.1m is finer than one thousandth", "0.1m", "finer than one thousandth"),
    ("1n is finer than one thousandth", "1n", "finer than one thousandth"),
    ("1u is finer than one thousandth", "1u", "finer than one thousandth"),
    ("a float finer than one thousandth", 0.0001, "finer than one thousandth"),
    ("an unknown suffix", "1K", "not a Kubernetes quantity"),
    ("a lowercase binary suffix", "1gi", "not a Kubernetes quantity"),
    ("two suffixes", "1Gim", "not a Kubernetes quantity"),
    ("a space inside", "1 Gi", "not a Kubernetes quantity"),
    ("empty text", "", "not a Kubernetes quantity"),
    ("words", "eight", "not a Kubernetes quantity"),
    ("a lone dot", ".", "not a Kubernetes quantity"),
    ("a suffix alone", "Gi", "not a Kubernetes quantity"),
    ("a hexadecimal number", "0x10", "not a Kubernetes quantity"),
    ("a boolean", True, "not a quantity"),
    ("None", None, "not a quantity"),
    ("a list", [1], "not a quantity"),
    ("NaN", float("nan"), "not a finite quantity"),
    ("infinity", float("inf"), "not a finite quantity"),
    ("minus infinity", float("-inf"), "not a finite quantity"),
    ("an exponent beyond 30", "1e31", "exponent out of range"),
    ("a negative exponent beyond 30", "1e-31", "exponent out of range"),
    ("one milli beyond the largest", f"{MILLI_MAX + 1}m", "quantity too large"),
    ("8Ei is too large", "8Ei", "quantity too large"),
    ("1E is one exa (a suffix, not an exponent), too large", "1E", "quantity too large"),
    ("a huge int", 2**70, "quantity too large"),
    ("a huge negative int", -(2**70), "quantity too large"),
]


@pytest.mark.parametrize(("value", "message"), [c[1:] for c in REJECT], ids=[c[0] for c in REJECT])
def test_parse_milli_rejects(value, message: str):
    with pytest.raises(QuantityError, match=message):
        parse_milli(value)


def test_quantity_error_is_a_value_error():
    assert issubclass(QuantityError, ValueError)


FORMAT = [
    ("whole units print without a suffix", 8000, "8"),
    ("zero", 0, "0"),
    ("a fraction prints in milli", 500, "500m"),
    ("one and a half units print in milli", 1500, "1500m"),
    ("negative whole units", -2000, "-2"),
]


@pytest.mark.parametrize(("milli", "text"), [c[1:] for c in FORMAT], ids=[c[0] for c in FORMAT])
def test_format_milli(milli: int, text: str):
    assert format_milli(milli) == text


RESOURCE = [
    ("GPUs", "nvidia.com/gpu", 8000, "8 nvidia.com/gpu"),
    ("milli CPUs", "cpu", 500, "500m cpu"),
    ("memory in Gi", "memory", 256 * GI * 1000, "256Gi memory"),
    ("memory in Ti", "memory", 2 * 2**40 * 1000, "2Ti memory"),
    ("memory not a whole Gi falls back to Mi", "memory", 1536 * 2**20 * 1000, "1536Mi memory"),
    ("memory in Ki", "memory", 3 * 1024 * 1000, "3Ki memory"),
    ("memory in bytes", "memory", 1000 * 1000, "1000 memory"),
    ("storage like memory", "ephemeral-storage", 2**40 * 1000, "1Ti ephemeral-storage"),
]


@pytest.mark.parametrize(("name", "milli", "text"), [c[1:] for c in RESOURCE], ids=[c[0] for c in RESOURCE])
def test_format_resource(name: str, milli: int, text: str):
    assert format_resource(name, milli) == text


@settings(max_examples=300, derandomize=True)
@given(st.integers(min_value=-MILLI_MAX, max_value=MILLI_MAX))
def test_format_then_parse_gives_the_same_milli_units(milli: int):
    assert parse_milli(format_milli(milli)) == milli


@settings(max_examples=300, derandomize=True)
@given(st.integers(min_value=0, max_value=2**40), st.sampled_from(["", "k", "M", "G", "Ki", "Mi", "Gi"]))
def test_integer_with_suffix_is_exact(n: int, suffix: str):
    scale = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}[suffix]
    if n * scale * 1000 > MILLI_MAX:
        with pytest.raises(QuantityError):
            parse_milli(f"{n}{suffix}")
    else:
        assert parse_milli(f"{n}{suffix}") == n * scale * 1000
