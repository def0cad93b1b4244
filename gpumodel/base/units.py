"""Readable units at the YAML boundary, SI inside.

Spec files may say ``"3.35 TB/s"``, ``"80 GiB"``, ``"1.98 GHz"`` or ``"989.4 TFLOP/s"``;
everything inside gpumodel is in SI base units (bytes, bytes/s, FLOP/s, Hz, W, s).
Decimal prefixes are powers of 1000 (``GB = 1e9``), binary prefixes powers of 1024
(``GiB = 2**30``), as in IEC 80000-13.

Examples
--------
>>> parse_quantity("3.35 TB/s", "bytes/s")
3350000000000.0
>>> parse_quantity("80 GiB", "bytes")
85899345920.0
>>> format_quantity(989.4e12, "FLOP/s")
'989.4 TFLOP/s'
"""

from __future__ import annotations

import math
import re

__all__ = ["UnitError", "parse_quantity", "format_quantity", "DIMENSIONS"]


from .errors import UnitError  # noqa: E402  (re-exported)


_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

#: dimension name -> accepted unit symbols (after the prefix) -> factor to the SI base unit
DIMENSIONS: dict[str, dict[str, float]] = {
    "bytes": {"B": 1.0, "byte": 1.0, "bytes": 1.0},
    "bytes/s": {"B/s": 1.0, "byte/s": 1.0, "bytes/s": 1.0, "Bps": 1.0},
    "FLOP/s": {"FLOP/s": 1.0, "FLOPS": 1.0, "flop/s": 1.0, "OP/s": 1.0, "OPS": 1.0, "IOPS": 1.0},
    "Hz": {"Hz": 1.0},
    "W": {"W": 1.0},
    "s": {"s": 1.0},
}

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_PATTERN = re.compile(rf"^\s*(?P<num>{_NUMBER})\s*(?P<unit>[A-Za-z/]*)\s*$")


def _split_prefix(unit: str, symbols: dict[str, float]) -> float | None:
    if unit in symbols:
        return symbols[unit]
    for table in (_BINARY, _DECIMAL):
        for prefix, factor in table.items():
            if prefix and unit.startswith(prefix) and unit[len(prefix):] in symbols:
                return factor * symbols[unit[len(prefix):]]
    return None


def parse_quantity(value: object, dimension: str) -> float:
    """Parse a number or a ``"<number> <unit>"`` string into SI base units.

    Parameters
    ----------
    value : float, int or str
        A bare number is taken to be in SI base units already.
    dimension : str
        One of the keys of :data:`DIMENSIONS`.

    Returns
    -------
    float
        The value in SI base units of ``dimension``.

    Raises
    ------
    UnitError
        The string is not a number followed by a unit of ``dimension``.

    Examples
    --------
    >>> parse_quantity("1.98 GHz", "Hz")
    1980000000.0
    >>> parse_quantity(700, "W")
    700.0
    """
    if dimension not in DIMENSIONS:
        raise UnitError(f"unknown dimension {dimension!r}; known: {sorted(DIMENSIONS)}", argument="dimension",
                        value=dimension, allowed=", ".join(sorted(DIMENSIONS)))
    if isinstance(value, bool):
        raise UnitError(f"expected a quantity in {dimension}, got {value!r}", value=value,
                        allowed=f"a quantity in {dimension}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if match is None:
            raise UnitError(f"cannot read {value!r} as a quantity in {dimension} (e.g. '3.35 TB/s')", value=value,
                            allowed=f"a number and a unit of {dimension}")
        unit = match.group("unit")
        factor = 1.0 if unit == "" else _split_prefix(unit, DIMENSIONS[dimension])
        if factor is None:
            allowed = ", ".join(sorted(DIMENSIONS[dimension]))
            raise UnitError(
                f"unit {unit!r} in {value!r} is not a unit of {dimension}; "
                f"use one of {allowed} with an optional k/M/G/T/P or Ki/Mi/Gi/Ti prefix",
                value=value, allowed=f"{allowed} with an optional k/M/G/T/P or Ki/Mi/Gi/Ti prefix",
            )
        number = float(match.group("num")) * factor
    else:
        raise UnitError(f"expected a number or a string with a unit of {dimension}, got {type(value).__name__}",
                        value=value, allowed=f"a number or a string with a unit of {dimension}")
    if not math.isfinite(number):
        raise UnitError(f"{value!r} is not finite", value=value, allowed=f"a finite quantity in {dimension}")
    return number


def format_quantity(value: float, unit: str, digits: int = 4, binary: bool = False) -> str:
    """Format an SI value with a decimal (or binary) prefix, e.g. ``'3.35 TB/s'``.

    Examples
    --------
    >>> format_quantity(80e9, "B")
    '80 GB'
    >>> format_quantity(2**30 * 12, "B", binary=True)
    '12 GiB'
    """
    if value is None or not math.isfinite(value):
        return "n/a"
    table = [("Pi", 2.0**50), ("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20), ("Ki", 2.0**10)] if binary else [
        ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)]
    for prefix, factor in table:
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"
