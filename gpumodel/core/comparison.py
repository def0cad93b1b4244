"""Side-by-side comparison of GPUs on the spec-sheet metrics that matter for training.

The four metrics of Brenndoerfer (2026) — memory capacity, memory bandwidth, dense 16-bit tensor
throughput and TDP — plus FP32 throughput and the bf16 ridge point
(peak / bandwidth, see :func:`gpumodel.core.roofline.ridge_point`).

References
----------
M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores", 2026,
https://mbrenndoerfer.com/writing/gpu-architecture-memory-hierarchy-cuda-tensor-cores.

Examples
--------
>>> import gpumodel as gm
>>> table = gm.compare(["h100", "h200"])
>>> table["ridge_bf16"]
[295.3, 206.1]
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Iterable

from ..base.errors import ArgumentError, ArgumentTypeError, UnknownNameError  # noqa: F401
from ..base.reprs import ResultRecord, text_table
from ..vocabulary.gpus import all_gpus
from ..records.gpu import GPUSpec
from ..vocabulary import resolve_gpus

__all__ = ["Comparison", "compare", "COLUMNS"]

#: column key -> (header, unit, function of the record)
COLUMNS = {
    "name": ("GPU", "", lambda g: g.name),
    "memory_gb": ("Memory", "GB", lambda g: round(g.memory_bytes / 1e9, 1)),
    "memory_type": ("Type", "", lambda g: g.memory_type),
    "bandwidth_tbs": ("Bandwidth", "TB/s", lambda g: round(g.memory_bandwidth / 1e12, 2)),
    "bf16_tflops": ("BF16 dense", "TFLOP/s", lambda g: _maybe(g, "bf16", 1e12)),
    "fp32_tflops": ("FP32", "TFLOP/s", lambda g: _maybe(g, "fp32", 1e12)),
    "ridge_bf16": ("Ridge bf16", "FLOP/B", lambda g: _ridge(g)),
    "tdp_w": ("TDP", "W", lambda g: round(g.tdp_watts)),
}


def _maybe(g: GPUSpec, dt: str, scale: float) -> float | None:
    key = dt if g.supports(dt) else ("fp16" if dt == "bf16" and g.supports("fp16") else None)
    return None if key is None else round(g.peak_flops(key) / scale, 1)


def _ridge(g: GPUSpec) -> float | None:
    peak = _maybe(g, "bf16", 1.0)
    return None if peak is None else round(peak / g.memory_bandwidth, 1)


@dataclass(frozen=True)
class Comparison(ResultRecord):
    """A table of GPUs (rows) by metric (columns) with text and HTML reprs.

    ``table[column]`` is a list of that column's values; ``table.rows`` the rows as dicts.
    BF16 falls back to the FP16 tensor rate on GPUs without bf16 (V100, T4).
    """

    gpus: tuple[GPUSpec, ...]
    columns: tuple[str, ...] = field(default=tuple(COLUMNS))

    def __getitem__(self, column: str) -> list:
        if column not in COLUMNS:
            raise UnknownNameError(f"unknown column {column!r}; columns: {', '.join(COLUMNS)}", argument="column",
                                   value=column, allowed=", ".join(COLUMNS))
        return [COLUMNS[column][2](g) for g in self.gpus]

    @property
    def rows(self) -> list[dict]:
        return [{c: COLUMNS[c][2](g) for c in self.columns} for g in self.gpus]

    def headers(self) -> list[str]:
        return [f"{COLUMNS[c][0]} [{COLUMNS[c][1]}]" if COLUMNS[c][1] else COLUMNS[c][0] for c in self.columns]

    def _cells(self) -> list[list[str]]:
        return [["-" if v is None else str(v) for v in row.values()] for row in self.rows]

    def __repr__(self) -> str:
        return text_table(self.headers(), self._cells())

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers())
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in self._cells())
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def compare(gpus: Iterable[str | GPUSpec] | None = None, columns: Iterable[str] | None = None) -> Comparison:
    """Compare GPUs (names or records; all known GPUs when omitted) on the spec-sheet metrics.

    Parameters
    ----------
    gpus : iterable of (str or GPUSpec), str, GPUSpec or None
        The GPUs, one row each in this order; one name or record means that GPU alone; None: every
        known GPU, sorted by name.
    columns : iterable of str, str or None
        Keys of :data:`COLUMNS` ("name", "memory_gb" [GB], "memory_type", "bandwidth_tbs" [TB/s],
        "bf16_tflops" and "fp32_tflops" [TFLOP/s], "ridge_bf16" [FLOP/byte], "tdp_w" [W]), in this
        order; None: all of them.

    Returns
    -------
    Comparison
        The table: ``table[column]`` is that column's values (one per GPU, None where a GPU lacks the
        metric), ``table.rows`` the rows as dicts; text and HTML reprs.
    """
    records = tuple(all_gpus() if gpus is None else resolve_gpus(gpus, "gpus"))
    if isinstance(columns, str):
        columns = [columns]
    if columns is not None and not hasattr(columns, "__iter__"):
        raise ArgumentTypeError(f"columns must be a list of column names, got {type(columns).__name__}")
    cols = tuple(columns) if columns is not None else tuple(COLUMNS)
    if not cols:
        raise ArgumentError(f"columns is empty; columns: {', '.join(COLUMNS)}")
    for c in cols:
        if c not in COLUMNS:
            raise ArgumentError(f"unknown column {c!r}; columns: {', '.join(COLUMNS)}")
    return Comparison(records, cols)
