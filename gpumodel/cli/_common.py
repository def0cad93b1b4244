"""Helpers shared by the sub-commands: the option parsers, file checks, tables and JSON output.

Every option of every command that takes a count, a size in bytes or a duration is read by
:func:`parse_count`, :func:`parse_bytes` or :func:`parse_seconds`. Each raises an
:class:`~gpumodel.errors.ArgumentError` that lists the accepted forms; the error is also an
:class:`argparse.ArgumentTypeError`, so the functions can be given to ``add_argument(type=...)``
directly and argparse prints their message.

Examples
--------
>>> parse_count("1T"), parse_count("4Ki"), parse_count("16_777_216")
(1000000000000, 4096, 16777216)
>>> parse_bytes("80GiB"), parse_bytes("48KiB"), parse_bytes("4096")
(85899345920, 49152, 4096)
>>> parse_seconds("50ms"), parse_seconds("1s")
(0.05, 1.0)
>>> parse_bytes("32KB", "--smem", binary_only=True)
Traceback (most recent call last):
...
gpumodel.cli._common._OptionError: --smem='32KB': shared-memory sizes are binary:
write 32KiB (or 32768) for 32 x 1024 bytes; decimal kB/MB/GB are not accepted here
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable, Sequence

from gpumodel.errors import ArgumentError

__all__ = [
    "parse_count", "parse_bytes", "parse_seconds", "parse_number", "output_path", "input_path",
    "read_json_object", "refuse", "fill", "print_table", "print_json", "to_jsonable",
]

_NUMBER = re.compile(r"^\s*(?P<num>[+-]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[A-Za-zµ]*)\s*$")
_MAX_INT = 2 ** 63 - 1

_COUNT_UNITS = {"": 1, "k": 10 ** 3, "K": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "B": 10 ** 9, "T": 10 ** 12,
                "P": 10 ** 15, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}
_DECIMAL_BYTES = {"kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12, "pb": 10 ** 15}
_BINARY_BYTES = {"kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40, "pib": 2 ** 50}
_SECONDS = {"": Decimal(1), "s": Decimal(1), "ms": Decimal("1e-3"), "us": Decimal("1e-6"), "µs": Decimal("1e-6"),
            "ns": Decimal("1e-9"), "min": Decimal(60), "h": Decimal(3600)}

_COUNT_FORMS = "a whole number such as 4096, 1e6, 16_777_216, 8Ki (8192), 7B or 1T (10**12)"
_BYTES_FORMS = "a size in bytes such as 4096, 48KiB, 80GiB or 80GB (KiB/MiB/GiB = 1024-based, kB/MB/GB = 1000-based)"
_BINARY_FORMS = "a size in bytes such as 4096, 48KiB or 1MiB (KiB = 1024 bytes)"
_SECONDS_FORMS = "a duration such as 0.05, 50ms, 200us, 1s, 2min or 1h (a plain number is seconds)"


class _OptionError(ArgumentError, argparse.ArgumentTypeError):
    """An option value the command line cannot read (argparse prints its message)."""


def _fail(text: Any, name: str | None, what: str) -> _OptionError:
    return _OptionError(f"{name}={text!r}: {what}" if name else f"{text!r}: {what}")


def _split(text: Any, name: str | None, forms: str) -> tuple[Decimal, str]:
    match = _NUMBER.match(text) if isinstance(text, str) else None
    if match is None:
        raise _fail(text, name, f"expected {forms}")
    try:
        number = Decimal(match.group("num").replace("_", ""))
    except InvalidOperation:
        raise _fail(text, name, f"expected {forms}") from None
    return number, match.group("unit")


def _whole(value: Decimal, text: str, name: str | None, forms: str, minimum: int, unit: str) -> int:
    if value != value.to_integral_value():
        raise _fail(text, name, f"is not a whole number of {unit}; expected {forms}")
    if value < minimum:
        raise _fail(text, name, f"must be >= {minimum}; expected {forms}")
    if value > _MAX_INT:
        raise _fail(text, name, f"is too large (more than 2**63 - 1 {unit})")
    return int(value)


def parse_count(text: str, name: str | None = None, *, minimum: int = 0) -> int:
    """A count on the command line (tokens, sizes, degrees): ``4096``, ``1e6``, ``16_777_216``, ``1T``.

    Suffixes k/K (10**3), M (10**6), G or B (10**9), T (10**12), P (10**15), and Ki, Mi, Gi, Ti
    (powers of 1024). The result must be a whole number >= ``minimum``.

    Raises
    ------
    ArgumentError
        The text is not such a count; the message names ``name`` and the accepted forms.
    """
    number, unit = _split(text, name, _COUNT_FORMS)
    if unit not in _COUNT_UNITS:
        raise _fail(text, name, f"unknown suffix {unit!r}; expected {_COUNT_FORMS}")
    return _whole(number * _COUNT_UNITS[unit], text, name, _COUNT_FORMS, minimum, "items")


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
                                    "not accepted here")
        decimal = f"{_plain(number)}{'k' if prefix == 'k' else prefix.upper()}B"
        raise _fail(text, name, f"{unit!r} is ambiguous: {binary} bytes, or {decimal} for 1000-based")
    else:
        raise _fail(text, name, f"unknown unit {unit!r}; expected {forms}")
    return _whole(number * factor, text, name, forms, minimum, "bytes")


def _plain(number: Decimal) -> str:
    return format(number.normalize(), "f") if number == number.to_integral_value() else str(number)


def parse_seconds(text: str, name: str | None = None) -> float:
    """A duration [s]: ``0.05``, ``50ms``, ``200us``, ``1s``, ``2min``, ``1h``; a plain number is seconds.

    Returns a finite float >= 0.
    """
    number, unit = _split(text, name, _SECONDS_FORMS)
    if unit not in _SECONDS:
        raise _fail(text, name, f"unknown unit {unit!r}; expected {_SECONDS_FORMS}")
    value = float(number * _SECONDS[unit])
    if not math.isfinite(value) or value < 0:
        raise _fail(text, name, f"must be a finite duration >= 0; expected {_SECONDS_FORMS}")
    return value


def parse_number(text: str, name: str | None = None, *, minimum: float = 0.0) -> float:
    """A plain finite number >= ``minimum`` (a ratio, a FLOP count per element); no units."""
    number, unit = _split(text, name, "a number such as 1, 0.5 or 2e3")
    value = float(number)
    if unit or not math.isfinite(value) or value < minimum:
        raise _fail(text, name, f"expected a finite number >= {minimum:g} such as 1, 0.5 or 2e3")
    return value


# ---------------------------------------------------------------------------------------------- files
def output_path(path: str, option: str) -> Path:
    """Check, before any work is done, that ``path`` can be written: its folder exists and it is no folder."""
    p = Path(path)
    folder = p.parent
    if p.is_dir():
        raise ArgumentError(f"{option} {path}: is a folder; give a file name")
    if not folder.is_dir():
        raise ArgumentError(f"{option} {path}: folder {str(folder)!r} does not exist; create it first")
    if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ArgumentError(f"{option} {path}: not writable (permission denied)")
    return p


def input_path(path: str, option: str) -> Path:
    """Check that ``path`` is a readable file."""
    p = Path(path)
    if not p.is_file():
        why = "a folder, not a file" if p.is_dir() else "no such file"
        raise ArgumentError(f"{option} {path}: cannot read: {why}")
    return p


def read_json_object(path: str, option: str) -> dict:
    """The JSON object (``{...}``) in the file ``path``, or an ArgumentError naming the option."""
    p = input_path(path, option)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ArgumentError(f"{option} {path}: cannot read a JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise ArgumentError(f"{option} {path}: expected a JSON object ({{...}}), got a JSON {type(data).__name__}")
    return data


def refuse(given: Iterable[str], needs: str) -> None:
    """Refuse options that the other options make meaningless: ``--dtype needs --inference``."""
    given = list(given)
    if given:
        raise ArgumentError(f"{given[0]} {needs}")


# ---------------------------------------------------------------------------------------------- output
def fill(text: str, width: int = 88) -> str:
    """A paragraph wrapped for ``--help`` (the parsers keep their epilogs' lines as written)."""
    import textwrap

    return textwrap.fill(" ".join(text.split()), width)


def to_jsonable(value: Any) -> Any:
    """Numbers, numpy scalars and arrays, records and enums as plain JSON values (NaN/inf -> null)."""
    if hasattr(value, "model_dump"):
        return to_jsonable(value.model_dump(mode="json"))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return to_jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "value") and isinstance(getattr(value, "value"), str):
        return value.value
    return value


def print_json(value: Any, file=None) -> None:
    """Write ``value`` as strict JSON (no NaN or Infinity: non-finite numbers are null)."""
    json.dump(to_jsonable(value), file or sys.stdout, indent=2, allow_nan=False)
    (file or sys.stdout).write("\n")


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], file=None, align_numbers: bool = True) -> None:
    """A plain, aligned text table; numbers right-aligned unless ``align_numbers`` is false."""
    rows = [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def fmt(cells):
        out = []
        for i, c in enumerate(cells):
            numeric = align_numbers and c[:1].isdigit() or c[:1] in "-." and c[1:2].isdigit() and align_numbers
            out.append(c.rjust(widths[i]) if numeric and i else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    out = file or sys.stdout
    out.write(fmt(headers) + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for r in rows:
        out.write(fmt(r) + "\n")
