"""Measured calibration points: reading measurement files, medians over runs, reporting families, and the
grouping of points into broadcast ops that a fit evaluates (part of :mod:`gpumodel.calibration.fit`, which
re-exports these names).

A point is a dict ``{"op", "dtype", "shape", "time_s", ...}`` as :mod:`~gpumodel.calibration.bench`
writes it; ``op``, ``shape`` and ``dtype`` are the arguments of the :mod:`gpumodel.core.ops`
constructor of that name. Points are grouped by (op, dtype, direction) into broadcast
:class:`~gpumodel.core.ops.OpCost` arrays, so one model evaluation is a few dozen numpy calls.
"""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from ..core import ops
from ..core.opcost import lookup_formula
from .cases import call_key
from .runners import strided_layout

__all__ = ["PointSet", "load_points", "median_time", "median_of_runs", "repeat_files", "point_set", "family_of",
           "op_family"]


def load_points(path: str | Path) -> tuple[dict, list[dict]]:
    """Read a JSON-lines measurement file: ``(environment, points)``; failed points are dropped."""
    env: dict = {}
    points = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if "environment" in row:
            env = env or row["environment"]
        elif row.get("time_s"):
            points.append(row)
    return env, points


def repeat_files(path: str | Path) -> list[Path]:
    """Further runs of a measurement file: ``repeat_<name>*.jsonl`` beside ``validation_<name>.jsonl``."""
    path = Path(path)
    name = path.stem.removeprefix("validation_")
    return sorted(path.parent.glob(f"repeat_{name}*.jsonl")) if name != path.stem else []


def median_time(times: Iterable[float]) -> float:
    """The median of a kernel's times over several runs; of an even count, the geometric mean of the middle two
    (of two runs, their geometric mean).

    >>> median_time([1.0, 3.0, 2.0]), round(median_time([1.0, 4.0]), 12)
    (2.0, 2.0)
    """
    logs = sorted(math.log(t) for t in times)
    mid = len(logs) // 2
    return math.exp(logs[mid] if len(logs) % 2 else 0.5 * (logs[mid - 1] + logs[mid]))


def median_of_runs(path: str | Path, repeats: Iterable[str | Path] | None = None) -> list[dict]:
    """The points of ``path``, each timed as the median over the runs that measured it (``runs`` says how many).

    ``repeats`` (default: :func:`repeat_files`) are further runs of the same plan. A kernel is the same
    PyTorch call on the same shape; the median of an even count is the geometric mean of the middle two.
    The median of three runs stands for the kernel where one run's host was slow (a call bound by its host
    times the host, which moves by 2-3x between runs on the H200's machine).
    """
    points = load_points(path)[1]
    runs: dict = {call_key(p): [p["time_s"]] for p in points}
    for other in (repeat_files(path) if repeats is None else repeats):
        for p in load_points(other)[1]:
            if call_key(p) in runs:
                runs[call_key(p)].append(p["time_s"])
    return [{**p, "time_s": median_time(runs[call_key(p)]), "runs": len(runs[call_key(p)])} for p in points]


@dataclass(frozen=True)
class PointSet:
    """Measured points grouped into broadcast ops: ``groups[i] = (family, op, times[s], indices)``."""

    groups: tuple
    points: tuple

    @property
    def times(self) -> np.ndarray:
        out = np.empty(len(self.points))
        for _, _, t, idx in self.groups:
            out[idx] = t
        return out

    def families(self) -> np.ndarray:
        out = np.empty(len(self.points), dtype=object)
        for fam, _, _, idx in self.groups:
            out[idx] = fam
        return out


#: shape entries that are one value per group of points (flags, names, the dropout probability)
_SCALAR_KEYS = ("dropout", "concat")


def _scalar_key(key: str, value: Any) -> bool:
    return isinstance(value, (bool, str)) or value is None or key in _SCALAR_KEYS


def _build(op: str, dtype: str, shapes: list[Mapping[str, Any]]):
    """One broadcast :class:`~gpumodel.core.ops.OpCost` for points sharing op, dtype and flags."""
    first = shapes[0]
    arrays = {k: np.array([float(s[k]) for s in shapes]) for k in first if not _scalar_key(k, first[k])}
    flags = {k: v for k, v in first.items() if _scalar_key(k, v) and v is not None}
    func = lookup_formula(op)
    params = inspect.signature(func).parameters
    dt_name = "dtype" if "dtype" in params else next(n for n in params if n.endswith("dtype"))
    return getattr(ops, op)(**arrays, **flags, **{dt_name: dtype})


def family_of(point: Mapping[str, Any]) -> str:
    """Reporting family of a point: the op name; attention by form and direction, weight-only GEMMs apart.

    >>> family_of({"op": "attention", "shape": {"seq": 1, "kv_seq": 4096, "backward": False}})
    'attention_decode'
    """
    s = point["shape"]
    if point["op"] == "attention":
        if s.get("impl", "flash") in ("naive", "math"):
            return "attention_naive_bwd" if s.get("backward") else "attention_naive_fwd"
        if s.get("kv_seq") is not None and s["kv_seq"] != s["seq"]:
            return "attention_decode"
        return "attention_bwd" if s.get("backward") else "attention_fwd"
    if point["op"] == "matmul" and s.get("weight_dtype"):
        return "matmul_weight_only"
    if point["op"] in ("cross_entropy", "embedding") and s.get("backward"):
        return f"{point['op']}_bwd"
    return point["op"]


def op_family(op: Any) -> str:
    """The reporting family (:func:`family_of`) of an op record, e.g. to look up its validation error.

    >>> from gpumodel import ops
    >>> op_family(ops.attention(8, 32, 1, 128, kv_heads=8, kv_seq=4096))
    'attention_decode'
    """
    shape = {k: (v if isinstance(v, (bool, str)) or v is None else
                 (float(np.ravel(v)[0]) if np.size(v) else None)) for k, v in op.shape.items()}
    if op.name == "attention" and "kv_seq" in op.shape:
        differ = np.any(np.asarray(op.shape["kv_seq"]) != np.asarray(op.shape["seq"]))
        shape["kv_seq"], shape["seq"] = (1.0, 0.0) if differ else (0.0, 0.0)
    return family_of({"op": op.name, "shape": shape})


def _as_run(point: Mapping[str, Any]) -> Mapping[str, Any]:
    """A measured point as PyTorch ran it: a strided case whose views were contiguous is a contiguous kernel
    (:func:`gpumodel.calibration.runners.strided_layout`); ``cat_halves`` is a concatenation
    (:func:`gpumodel.core.ops.concat`)."""
    s = point["shape"]
    if point["op"] == "elementwise" and s.get("strided") and point.get("kernel"):
        if not strided_layout(point["kernel"], s["numel"]):
            return {**point, "shape": {**s, "strided": False}}
        if point["kernel"] == "cat_halves":  # torch.cat of two half-width slices
            return {**point, "shape": {**s, "concat": 2}}
    return point


def point_set(points: Iterable[Mapping[str, Any]]) -> PointSet:
    """Group points into broadcast ops (one per op, dtype, flags and set of arguments)."""
    points = tuple(_as_run(p) for p in points if p.get("time_s"))
    buckets: dict[tuple, list[int]] = {}
    for i, pt in enumerate(points):
        shape = pt["shape"]
        flags = tuple(sorted((k, str(v)) for k, v in shape.items() if _scalar_key(k, v)))
        key = (pt["op"], pt["dtype"], flags, tuple(sorted(shape)))
        buckets.setdefault(key, []).append(i)
    groups = []
    for (op, dtype, _, _), idx in buckets.items():
        shapes = [points[i]["shape"] for i in idx]
        cost = _build(op, dtype, shapes)
        times = np.array([points[i]["time_s"] for i in idx], dtype=float)
        groups.append((family_of(points[idx[0]]), cost, times, np.array(idx)))
    return PointSet(tuple(groups), points)
