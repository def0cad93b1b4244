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
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from gpumodel.base import readable
from gpumodel.base.errors import ArgumentError
from gpumodel.base.reprs import text_table

__all__ = [
    "parse_count", "parse_bytes", "parse_seconds", "parse_number", "count_type", "output_path", "input_path",
    "read_json_object", "refuse", "fill", "print_table", "print_json", "to_jsonable", "OptionError", "HelpFormatter",
    "wrap_values", "terminal_width",
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
class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """``--help`` that keeps the epilog's lines as written and ends each option's help with its default.

    Options without a default (None), switches (False) and positional arguments show none; a help text
    that already names ``%(default)s`` is left as it is.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if (not text or "%(default)" in text or not action.option_strings
                or action.default in (None, False, argparse.SUPPRESS)):
            return text
        return text + " (default: %(default)s)"


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


def terminal_width() -> int:
    """Columns of the terminal (``shutil.get_terminal_size``; 100 where there is none, as in a pipe)."""
    return shutil.get_terminal_size((100, 24)).columns


def wrap_values(rows: Iterable[Sequence[Any]], width: int | None = None) -> list[tuple[str, ...]]:
    """Rows of a two-column ``field | value`` table with long values wrapped onto continuation rows, so
    that the table fits in ``width`` columns (default: the terminal's, :func:`terminal_width`).

    >>> wrap_values([("notes", "one two three four five six"), ("name", "h100")], width=20)  # 20 at least
    [('notes', 'one two three four'), ('', 'five six'), ('name', 'h100')]
    """
    rows = [(str(k), str(v)) for k, v in rows]
    width = terminal_width() if width is None else width
    key_width = max((len(k) for k, _ in rows), default=0)
    room = max(width - key_width - 2, 20)          # two spaces between the columns; never narrower than 20
    out: list[tuple[str, ...]] = []
    for key, value in rows:
        lines = textwrap.wrap(value, room, break_long_words=False, break_on_hyphens=False) or [value]
        out += [(key, lines[0])] + [("", line) for line in lines[1:]]
    return out


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], file=None, align_numbers: bool = True) -> None:
    """A plain, aligned text table (:func:`gpumodel.base.reprs.text_table`) written to ``file`` (stdout)."""
    (file or sys.stdout).write(text_table(headers, rows, align_numbers) + "\n")


def progress(message: str, file=None) -> None:
    """Say what a command that takes over a second is about to do: ``message`` on one line of stderr.

    Written only when the stream (stderr) is a terminal, so that a pipe, a log file and the JSON of ``--json``
    (stdout in any case) stay clean.

    Parameters
    ----------
    message : str
        What is being worked on, e.g. ``"planning llama-3-70b on 64 GPUs of dgx-h100..."``.
    file : file-like, optional
        The stream (default: ``sys.stderr``).
    """
    stream = file or sys.stderr
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        stream.write(message + "\n")
        stream.flush()


def add_own_files(p: argparse.ArgumentParser, host: str) -> None:
    """``--calibration FILE`` and ``--host FILE``: the two files ``gpumodel calibrate`` writes (``host`` says what
    the host costs change here)."""
    p.add_argument("--calibration", metavar="FILE",
                   help="your GPU's calibration YAML (`gpumodel calibrate --out`): its kernel model prices every answer")
    p.add_argument("--host-costs", metavar="FILE", dest="host_costs",
                   help=f"your host's per-op costs YAML (`gpumodel calibrate --host-out`): {host}")


def own_files(args: argparse.Namespace) -> dict:
    """``calibration=`` and ``host=`` from :func:`add_own_files`' options, each checked to be a readable file."""
    out = {}
    if getattr(args, "calibration", None):
        out["calibration"] = str(input_path(args.calibration, "--calibration"))
    if getattr(args, "host_costs", None):
        out["host"] = str(input_path(args.host_costs, "--host-costs"))
    return out

