"""Small HTML builders shared by the result records' ``_repr_html_`` (notebook display)."""

from __future__ import annotations

import dataclasses
import enum
import html
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

__all__ = ["text_table", "html_table", "breakdown_html", "plain", "record_dict", "ResultRecord"]


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align_numbers: bool = True) -> str:
    """A plain, aligned text table; numbers right-aligned (but in the first column) unless ``align_numbers`` is false.

    >>> print(text_table(["gpu", "TB/s"], [["h100-sxm", 3.35], ["a100", 2.0]]))
    gpu       TB/s
    --------  ----
    h100-sxm  3.35
    a100       2.0
    """
    rows = [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def fmt(cells):
        out = []
        for i, c in enumerate(cells):
            numeric = align_numbers and c[:1].isdigit() or c[:1] in "-." and c[1:2].isdigit() and align_numbers
            out.append(c.rjust(widths[i]) if numeric and i else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    lines = [fmt(headers), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows]
    return "\n".join(lines)


def html_table(caption: str, rows: Iterable[tuple[str, str]]) -> str:
    """A two-column table (name, value) under a caption; every string is escaped."""
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table><caption>{html.escape(caption)}</caption>{body}</table>"


def breakdown_html(title: str, peak_bytes, moment: str, breakdown: Mapping[str, object]) -> str:
    """A memory result: its peak [GiB], when it occurs, and the non-zero components [GiB]."""
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td style='text-align:right'>{np.max(v) / 2**30:.3f}</td></tr>"
                   for k, v in breakdown.items() if np.any(v))
    return (f"<b>{html.escape(title)}</b>: peak {np.max(peak_bytes) / 2**30:.2f} GiB at "
            f"{html.escape(str(moment))}<table><tr><th>component</th><th>GiB</th></tr>{rows}</table>")


def plain(value: Any) -> Any:
    """A value as plain Python for JSON or a DataFrame: arrays to lists, NumPy scalars and enums to Python."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return record_dict(value)
    if hasattr(value, "model_dump"):
        return plain(value.model_dump(mode="json"))
    return value


def record_dict(record: Any, exclude: Iterable[str] = ()) -> dict:
    """The fields of a dataclass result as plain Python (SI units, as the fields are)."""
    skip = set(exclude)
    return {f.name: plain(getattr(record, f.name)) for f in dataclasses.fields(record) if f.name not in skip}


class ResultRecord:
    """What every result record offers: ``to_dict()`` and, for sweeps, ``to_pandas()`` (pandas optional)."""

    _dict_exclude: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """The result's fields as plain Python: numbers in SI units, arrays as lists, nested results as dicts."""
        return record_dict(self, self._dict_exclude)

    def to_pandas(self):
        """A ``pandas.DataFrame``: one row per configuration of a sweep (one row for a scalar result).

        Array fields become columns; nested mappings (breakdowns) become ``<name>.<key>`` columns.
        """
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("to_pandas() needs pandas: pip install pandas") from exc
        flat: dict[str, Any] = {}
        for key, value in self.to_dict().items():
            if isinstance(value, dict):
                flat.update({f"{key}.{k}": v for k, v in value.items()})
            else:
                flat[key] = value
        columns = {k: np.asarray(v) for k, v in flat.items()
                   if not isinstance(v, (dict, type(None))) and np.asarray(v).dtype != object}
        sized = [a.shape for a in columns.values() if a.size > 1]
        shape = max(sized, key=len) if sized else ()
        data = {}
        for key, a in columns.items():
            try:
                data[key] = np.broadcast_to(a, shape).reshape(-1)
            except ValueError:  # a field of another shape (a list of names...) is not a column
                continue
        return pd.DataFrame(data, index=range(int(np.prod(shape, dtype=int))))
