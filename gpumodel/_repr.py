"""Small HTML builders shared by the result records' ``_repr_html_`` (notebook display)."""

from __future__ import annotations

import html
from typing import Iterable, Mapping

import numpy as np

__all__ = ["html_table", "breakdown_html"]


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
