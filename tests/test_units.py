"""Readable quantities at the YAML boundary: exact parsing, decimal vs binary prefixes, round trips."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumodel.base.units import DIMENSIONS, UnitError, format_quantity, parse_quantity


@pytest.mark.parametrize("text, dimension, expected", [
    ("3.35 TB/s", "bytes/s", 3.35e12),
    ("900 GB/s", "bytes/s", 900e9),
    ("80 GB", "bytes", 80e9),  # decimal: GB = 1e9
    ("80 GiB", "bytes", 80 * 2**30),  # binary: GiB = 2**30
    ("228 KiB", "bytes", 228 * 1024),
    ("50 MiB", "bytes", 50 * 2**20),
    ("132644864 B", "bytes", 132644864.0),
    ("1.98 GHz", "Hz", 1.98e9),
    ("989.4 TFLOP/s", "FLOP/s", 989.4e12),
    ("1978.9 TOPS", "FLOP/s", 1978.9e12),
    ("4.5 POPS", "FLOP/s", 4.5e15),
    ("2.25 PFLOP/s", "FLOP/s", 2.25e15),
    ("700 W", "W", 700.0),
    ("1.5 ks", "s", 1500.0),
    ("1e-3 s", "s", 1e-3),
    ("  12  ", "W", 12.0),
    (700, "W", 700.0),
    (3.35e12, "bytes/s", 3.35e12),
])
def test_parse(text, dimension, expected):
    assert parse_quantity(text, dimension) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text, dimension, match", [
    ("3.35 TB", "bytes/s", "not a unit of bytes/s"),
    ("80 GB/s", "bytes", "not a unit of bytes"),
    ("fast", "Hz", "cannot read 'fast'"),
    ("1.98 GHz extra", "Hz", "cannot read"),
    ("nan W", "W", "cannot read"),
    (float("inf"), "W", "not finite"),
    (True, "W", "expected a quantity"),
    (None, "W", "got NoneType"),
    ("1 W", "volts", "unknown dimension 'volts'"),
    ("3 XB", "bytes", "optional k/M/G/T/P or Ki/Mi/Gi/Ti prefix"),
])
def test_parse_errors_say_what_is_allowed(text, dimension, match):
    with pytest.raises(UnitError, match=match):
        parse_quantity(text, dimension)
    assert issubclass(UnitError, ValueError)


@pytest.mark.parametrize("value, unit, kwargs, expected", [
    (989.4e12, "FLOP/s", {}, "989.4 TFLOP/s"),
    (80e9, "B", {}, "80 GB"),
    (3.35e12, "B/s", {}, "3.35 TB/s"),
    (12 * 2**30, "B", {"binary": True}, "12 GiB"),
    (512, "B", {}, "512 B"),
    (float("nan"), "B", {}, "n/a"),
    (None, "B", {}, "n/a"),
])
def test_format(value, unit, kwargs, expected):
    assert format_quantity(value, unit, **kwargs) == expected


_UNITS = [("B", "bytes"), ("B/s", "bytes/s"), ("FLOP/s", "FLOP/s"), ("Hz", "Hz"), ("W", "W"), ("s", "s")]


@given(value=st.floats(min_value=1e-6, max_value=1e21, allow_nan=False), pair=st.sampled_from(_UNITS),
       binary=st.booleans())
def test_format_then_parse_round_trips(value, pair, binary):
    unit, dimension = pair
    if binary and unit != "B":
        binary = False  # binary prefixes are for byte counts
    text = format_quantity(value, unit, digits=15, binary=binary)
    assert parse_quantity(text, dimension) == pytest.approx(value, rel=1e-13)


@given(value=st.floats(min_value=1.0, max_value=1e18, allow_nan=False), pair=st.sampled_from(_UNITS))
def test_default_format_keeps_four_significant_digits(value, pair):
    unit, dimension = pair
    back = parse_quantity(format_quantity(value, unit), dimension)
    assert math.isclose(back, value, rel_tol=5e-4)


@given(number=st.floats(min_value=0, max_value=1e6, allow_nan=False),
       prefix=st.sampled_from([("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12),
                               ("Ki", 2.0**10), ("Mi", 2.0**20), ("Gi", 2.0**30), ("Ti", 2.0**40)]))
def test_prefixes_scale_exactly(number, prefix):
    symbol, factor = prefix
    assert parse_quantity(f"{number!r} {symbol}B", "bytes") == number * factor


def test_every_dimension_has_its_base_unit():
    for dimension, symbols in DIMENSIONS.items():
        assert 1.0 in symbols.values(), dimension
