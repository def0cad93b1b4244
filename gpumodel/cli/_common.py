"""Helpers shared by the sub-commands: the option parsers, file checks, tables and JSON output.

Every option of every command that takes a count, a size in bytes or a duration is read by
:func:`parse_count`, :func:`parse_bytes` or :func:`parse_seconds`: the package's own readers
(:mod:`gpumodel.base.readable`, which the Python API uses too), whose
:class:`~gpumodel.base.errors.ArgumentError` is re-raised here as one that is also an
:class:`argparse.ArgumentTypeError`, so the functions can be given to ``add_argument(type=...)``
directly and argparse prints their message.

Examples
--------
>>> parse_count("1T"), parse_seconds("50ms")
(1000000000000, 0.05)
>>> parse_bytes("32KB", "--smem", binary_only=True)
Traceback (most recent call last):
...
gpumodel.cli._common.OptionError: --smem='32KB': shared-memory sizes are binary:
write 32KiB (or 32768) for 32 x 1024 bytes; decimal kB/MB/GB are not accepted here
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from gpumodel.base import readable
from gpumodel.base.errors import ArgumentError
from gpumodel.base.reprs import text_table

__all__ = [
    "parse_count", "parse_bytes", "parse_seconds", "parse_number", "count_type", "output_path", "input_path",
    "read_json_object", "refuse", "fill", "print_table", "print_json", "to_jsonable", "OptionError",
]


class OptionError(ArgumentError, argparse.ArgumentTypeError):
    """An option value the command line cannot read (argparse prints its message)."""


def _option(parse: Callable) -> Callable:
    """``parse`` with its ArgumentError raised as an :class:`OptionError` (for argparse's ``type=``)."""

    @functools.wraps(parse)
    def wrapper(*args, **kwargs):
        try:
            return parse(*args, **kwargs)
        except ArgumentError as exc:
            raise OptionError(str(exc), argument=exc.argument, value=exc.value, allowed=exc.allowed) from None

    return wrapper


parse_count = _option(readable.parse_count)
parse_bytes = _option(readable.parse_bytes)
parse_seconds = _option(readable.parse_seconds)
parse_number = _option(readable.parse_number)


def count_type(minimum: int):
    """An argparse ``type`` reading a count >= ``minimum`` (:func:`parse_count`).

    >>> count_type(1)("8Ki")
    8192
    """

    def read(text: str) -> int:
        return parse_count(text, minimum=minimum)

    read.__name__ = "count"
    return read


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
    """A plain, aligned text table (:func:`gpumodel.base.reprs.text_table`) written to ``file`` (stdout)."""
    (file or sys.stdout).write(text_table(headers, rows, align_numbers) + "\n")
