"""Counts, byte sizes and durations as people write them: the one reader of each.

Part of the vocabulary layer (:mod:`gpumodel.vocabulary` re-exports :func:`duration` and
:func:`token_count`). The command line reads every count, size and duration option with
:func:`parse_count`, :func:`parse_bytes` and :func:`parse_seconds`; the Python API reads the arguments
that may be given as text (``tokens="1T"``, ``tpot_slo="50ms"``) with :func:`token_count` and
:func:`duration`, which use the same parsers. So ``"1T"`` or ``"50ms"`` means the same on the command line
and in a notebook. Each raises an :class:`~gpumodel.base.errors.ArgumentError` that names the argument and
lists the accepted forms.

Examples
--------
>>> parse_count("1T"), parse_count("4Ki"), parse_count("16_777_216")
(1000000000000, 4096, 16777216)
>>> parse_bytes("80GiB"), parse_bytes("48KiB"), parse_bytes("4096")
(85899345920, 49152, 4096)
>>> parse_seconds("50ms"), parse_seconds("1s")
(0.05, 1.0)
>>> token_count("300B"), duration("50ms", "tpot_slo"), duration(2, "ttft_slo")
(300000000000.0, 0.05, 2.0)
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from .errors import ArgumentError
from .numeric import positive_number

__all__ = ["parse_count", "parse_bytes", "parse_seconds", "parse_number", "token_count", "duration", "format_count"]

_NUMBER = re.compile(r"^\s*(?P<num>[+-]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[A-Za-zµ]*)\s*$")
_MAX_INT = 2 ** 63 - 1

#: count suffixes, any case: k, M, G or B (billion), T, P are powers of 1000; Ki, Mi, Gi, Ti of 1024
_COUNT_UNITS = {"": 1, "k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "b": 10 ** 9, "t": 10 ** 12, "p": 10 ** 15,
                "ki": 2 ** 10, "mi": 2 ** 20, "gi": 2 ** 30, "ti": 2 ** 40}
_DECIMAL_BYTES = {"kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12, "pb": 10 ** 15}
_BINARY_BYTES = {"kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40, "pib": 2 ** 50}
#: duration units, any case; a plain number is seconds
_SECONDS = {"": Decimal(1), "s": Decimal(1), "sec": Decimal(1), "ms": Decimal("1e-3"), "us": Decimal("1e-6"),
            "µs": Decimal("1e-6"), "ns": Decimal("1e-9"), "m": Decimal(60), "min": Decimal(60), "h": Decimal(3600)}

_COUNT_FORMS = "a whole number such as 4096, 1e6, 16_777_216, 8Ki (8192), 7B or 1T (10**12)"
_BYTES_FORMS = "a size in bytes such as 4096, 48KiB, 80GiB or 80GB (KiB/MiB/GiB = 1024-based, kB/MB/GB = 1000-based)"
_BINARY_FORMS = "a size in bytes such as 4096, 48KiB or 1MiB (KiB = 1024 bytes)"
_SECONDS_FORMS = "a duration such as 0.05, 50ms, 200us, 1s, 2m (or 2min) or 1h (a plain number is seconds)"


def _label(text: Any, name: str | None) -> str:
    return f"{name}={text!r}" if name else repr(text)


def _fail(text: Any, name: str | None, what: str, allowed: str | None = None) -> ArgumentError:
    return ArgumentError(f"{_label(text, name)}: {what}", argument=name, value=text, allowed=allowed)


def _split(text: Any, name: str | None, forms: str) -> tuple[Decimal, str]:
    match = _NUMBER.match(text) if isinstance(text, str) else None
    if match is None:
        raise _fail(text, name, f"expected {forms}", forms)
    try:
        number = Decimal(match.group("num").replace("_", ""))
    except InvalidOperation:
        raise _fail(text, name, f"expected {forms}", forms) from None
    return number, match.group("unit")


def _whole(value: Decimal, text: str, name: str | None, forms: str, minimum: int, unit: str) -> int:
    if value != value.to_integral_value():
        raise _fail(text, name, f"is not a whole number of {unit}; expected {forms}", forms)
    if value < minimum:
        raise _fail(text, name, f"must be >= {minimum}; expected {forms}", f"{forms}, >= {minimum}")
    if value > _MAX_INT:
        raise _fail(text, name, f"is too large (more than 2**63 - 1 {unit})", f"at most 2**63 - 1 {unit}")
    return int(value)


def format_count(n: float) -> str:
    """A count as people write it and :func:`parse_count` reads it back: ``1T``, ``300B``, ``1.5M`` (four
    significant digits at most; K, M, B, T).

    >>> format_count(1e12), format_count(3e11), format_count(15.6e12), format_count(123456), format_count(512)
    ('1T', '300B', '15.6T', '123.5K', '512')
    >>> parse_count(format_count(15.6e12)) == 15.6e12
    True
    """
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.4g}{unit}"
    return f"{n:.4g}"


def parse_count(text: str, name: str | None = None, *, minimum: int = 0) -> int:
    """A count written as text (tokens, sizes, degrees): ``4096``, ``1e6``, ``16_777_216``, ``1T``.

    Suffixes, in any case: k (10**3), M (10**6), G or B (10**9), T (10**12), P (10**15), and Ki, Mi,
    Gi, Ti (powers of 1024). The value is read exactly (``"1.5T"`` is 1_500_000_000_000) and must be a
    whole number >= ``minimum``. Thousands separators other than ``_`` are refused (``"1,5T"`` would
    mean 1.5T to some readers and 15T to others).

    Raises
    ------
    ArgumentError
        The text is not such a count; the message names ``name`` and the accepted forms.
    """
    number, unit = _split(text, name, _COUNT_FORMS)
    if unit.lower() not in _COUNT_UNITS:
        raise _fail(text, name, f"unknown suffix {unit!r}; expected {_COUNT_FORMS}", _COUNT_FORMS)
    return _whole(number * _COUNT_UNITS[unit.lower()], text, name, _COUNT_FORMS, minimum, "items")


def parse_bytes(text: str, name: str | None = None, *, binary_only: bool = False, minimum: int = 0) -> int:
    """A size in bytes [B]: ``4096``, ``48KiB``, ``80GiB``, ``80GB``; a plain number is bytes.

    KiB/MiB/GiB/TiB are powers of 1024 and kB/MB/GB/TB powers of 1000 (any case). A lone
    ``K``/``M``/``G`` is refused as ambiguous. With ``binary_only`` (shared memory, registers and
    every other size a kernel author gives) decimal units are refused with a message that says
    what to write instead, since ``32KB`` there always means 32 x 1024 bytes to the writer.
    """
    forms = _BINARY_FORMS if binary_only else _BYTES_FORMS
    number, unit = _split(text, name, forms)
    key = unit.lower()
    if key in ("", "b"):
        factor = 1
    elif key in _BINARY_BYTES:
        factor = _BINARY_BYTES[key]
    elif key in _DECIMAL_BYTES and not binary_only:
        factor = _DECIMAL_BYTES[key]
    elif key in _DECIMAL_BYTES or key in ("k", "m", "g", "t", "p"):
        prefix = key[0]
        exact = number * _BINARY_BYTES[prefix + "ib"]
        plain = f" (or {_plain(exact)})" if exact == exact.to_integral_value() else ""
        binary = f"write {_plain(number)}{prefix.upper()}iB{plain} for {_plain(number)} x 1024"
        binary += "" if prefix == "k" else "**" + str("kmgtp".index(prefix) + 1)
        if binary_only:
            raise _fail(text, name, f"shared-memory sizes are binary: {binary} bytes; decimal kB/MB/GB are "
                                    "not accepted here", forms)
        decimal = f"{_plain(number)}{'k' if prefix == 'k' else prefix.upper()}B"
        raise _fail(text, name, f"{unit!r} is ambiguous: {binary} bytes, or {decimal} for 1000-based", forms)
    else:
        raise _fail(text, name, f"unknown unit {unit!r}; expected {forms}", forms)
    return _whole(number * factor, text, name, forms, minimum, "bytes")


def _plain(number: Decimal) -> str:
    return format(number.normalize(), "f") if number == number.to_integral_value() else str(number)


def parse_seconds(text: str, name: str | None = None) -> float:
    """A duration [s]: ``0.05``, ``50ms``, ``200us``, ``1s``, ``2m`` (or ``2min``), ``1h``; a plain number is seconds.

    Units in any case: ns, us (or µs), ms, s (or sec), m (or min: minutes, as in ``--budget 2m``), h. Returns a
    finite float >= 0.

    >>> parse_seconds("2m"), parse_seconds("10min")
    (120.0, 600.0)
    """
    try:
        number, unit = _split(text, name, _SECONDS_FORMS)
    except ArgumentError:
        raise ArgumentError(f"{_label(text, name)} is not a time; expected {_SECONDS_FORMS}", argument=name,
                            value=text, allowed=_SECONDS_FORMS) from None
    if unit.lower() not in _SECONDS:
        raise _fail(text, name, f"unknown unit {unit!r}; expected {_SECONDS_FORMS}", _SECONDS_FORMS)
    value = float(number * _SECONDS[unit.lower()])
    if not math.isfinite(value) or value < 0:
        raise _fail(text, name, f"must be a finite duration >= 0; expected {_SECONDS_FORMS}", _SECONDS_FORMS)
    return value


def parse_number(text: str, name: str | None = None, *, minimum: float = 0.0) -> float:
    """A plain finite number >= ``minimum`` (a ratio, a FLOP count per element); no units."""
    number, unit = _split(text, name, "a number such as 1, 0.5 or 2e3")
    value = float(number)
    if unit or not math.isfinite(value) or value < minimum:
        raise _fail(text, name, f"expected a finite number >= {minimum:g} such as 1, 0.5 or 2e3",
                    f"a finite number >= {minimum:g}")
    return value


def token_count(value: Any, name: str = "tokens") -> float:
    """A positive token count [tokens]: a number, or text :func:`parse_count` reads (``"1T"``, ``"300B"``).

    >>> token_count("1T"), token_count("15.6T"), token_count(2e9)
    (1000000000000.0, 15600000000000.0, 2000000000.0)
    """
    if isinstance(value, str):
        return float(parse_count(value, name, minimum=1))
    out = positive_number(value, name)
    if not isinstance(out, float):
        raise ArgumentError(f"{name} must be one token count, got an array", argument=name, value=value,
                            allowed="one token count >= 1")
    if out < 1:
        raise ArgumentError(f"{name} must be a token count >= 1, got {value!r}", argument=name, value=value,
                            allowed="a token count >= 1")
    return out


def duration(value: Any, name: str) -> float:
    """A positive time [s]: a number of seconds, or text :func:`parse_seconds` reads (``"50ms"``, ``"1 s"``).

    >>> duration("50ms", "tpot_slo"), duration(2, "ttft_slo"), duration("1.5 min", "t")
    (0.05, 2.0, 90.0)
    """
    if isinstance(value, str):
        seconds = parse_seconds(value, name)
        if seconds <= 0:
            raise ArgumentError(f"{_label(value, name)}: must be a time > 0", argument=name, value=value,
                                allowed="a time > 0")
        return seconds
    out = positive_number(value, name)
    if not isinstance(out, float):
        raise ArgumentError(f"{name} must be a single time, got an array", argument=name, value=value,
                            allowed="a single time > 0")
    return out
