"""Helpers shared by the sub-commands: tables and JSON output."""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Iterable, Sequence

__all__ = ["print_table", "print_json", "to_jsonable"]


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
    json.dump(to_jsonable(value), file or sys.stdout, indent=2)
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
