"""The roofline model: arithmetic intensity, ridge points, attainable throughput and time bounds.

An op doing :math:`F` FLOPs over :math:`B` bytes of memory traffic cannot run faster than
its compute floor :math:`F / P` (peak throughput :math:`P`) or its memory floor :math:`B / \\beta`
(bandwidth :math:`\\beta`). Its attainable throughput is :math:`\\min(P, I \\beta)` with arithmetic
intensity :math:`I = F / B`; the ridge point :math:`P / \\beta` is the intensity where the two
ceilings meet. The same holds at each level of the memory hierarchy (``"hbm"``, ``"l2"``,
``"shared"``) with that level's bandwidth: a hierarchical roofline.

Every function broadcasts over numpy arrays.

References
----------
S. Williams, A. Waterman, D. Patterson, "Roofline: an insightful visual performance model for
multicore architectures", Communications of the ACM 52(4), 2009.

M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores", 2026,
https://mbrenndoerfer.com/writing/gpu-architecture-memory-hierarchy-cuda-tensor-cores
(the H100 ridge point and the matmul and ReLU examples).

Examples
--------
>>> import gpumodel as gm
>>> round(gm.ridge_point("h100", "bf16"))             # 989.4e12 / 3.35e12 = 295 (Brenndoerfer 2026)
295
>>> r = gm.roofline(gm.ops.elementwise(4096 * 4096, "fp16"), "h100")
>>> r.bound, gm.arithmetic_intensity(r.op, over="read")   # Brenndoerfer's ReLU: 0.5 FLOP/byte
('memory', 0.5)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base.callmodule import make_callable

from ..base.reprs import ResultRecord, html_table
from ..base.errors import ArgumentError
from ..vocabulary import broadcastable, flag, format_seconds, nonnegative_number, positive_number, resolve_gpu, \
    scalar_or_array
from .opcost import resolve_op
from ..records.dtypes import DType
from ..records.gpu import GPUSpec, UnsupportedDTypeError
from .ops import OpCost
from ..base.units import format_quantity as fq

__all__ = [
    "RooflineResult", "arithmetic_intensity", "ridge_point", "attainable_flops", "peak_for", "roofline",
    "levels", "LEVELS",
]

#: memory levels a roofline can be drawn against (where the GPU record gives a bandwidth)
LEVELS = ("hbm", "l2", "shared")


def arithmetic_intensity(op: OpCost, over: str = "total") -> Any:
    """FLOPs per byte of device-memory traffic [FLOP/byte].

    Parameters
    ----------
    op : OpCost
        From :mod:`gpumodel.core.ops` (arrays of shapes give arrays).
    over : {"total", "read"}
        Divide by all traffic (reads + writes, the roofline's convention) or by bytes read only
        (the convention of Brenndoerfer 2026 for its matmul and ReLU examples).

    Returns
    -------
    float or ndarray
        Arithmetic intensity [FLOP/byte]; ``inf`` for an op with FLOPs and no traffic, ``nan`` for one
        with neither.

    Examples
    --------
    >>> import gpumodel as gm
    >>> op = gm.ops.matmul(4096, 4096, 4096, "fp16")
    >>> arithmetic_intensity(op, over="read")    # 2*4096**3 / ((4096**2 + 4096**2) * 2)
    2048.0
    >>> round(arithmetic_intensity(op), 1)       # 2*4096**3 / (3 * 4096**2 * 2)
    1365.3
    """
    if over not in ("total", "read"):
        raise ArgumentError(f"over={over!r} is not one of 'total', 'read'")
    op = resolve_op(op)
    denom = op.bytes if over == "total" else op.bytes_read
    with np.errstate(divide="ignore", invalid="ignore"):
        return scalar_or_array(np.divide(op.flops, denom))


def ridge_point(gpu: GPUSpec | str, dtype: DType | str = "bf16", level: str = "hbm", *, sparse: bool = False) -> float:
    """Intensity where the compute and memory ceilings meet, ``peak / bandwidth`` [FLOP/byte].

    Parameters
    ----------
    gpu : GPUSpec or str
        A GPU record or name (``gm.gpu``).
    dtype : str
        Picks the peak (see :meth:`gpumodel.records.gpu.GPUSpec.peak_flops`): "bf16" the tensor rate,
        "fp32" the CUDA-core rate.
    level : {"hbm", "l2", "shared"}
        Memory level whose bandwidth is the slope.
    sparse : bool
        Use the 2:4 sparse tensor peak (an error where the GPU has none).

    Returns
    -------
    float
        ``peak / bandwidth`` [FLOP/byte].

    Notes
    -----
    .. math:: I^* = P / \\beta

    Examples
    --------
    >>> round(ridge_point("h100", "fp32"), 1)     # 66.9e12 / 3.35e12
    20.0
    >>> round(ridge_point("h100", "bf16", level="l2"), 1)   # 989.4e12 / 12e12
    82.5
    """
    g = resolve_gpu(gpu)
    return g.peak_flops(dtype, sparse=sparse) / _bandwidth(g, level)


def attainable_flops(intensity: Any, peak: Any, bandwidth: Any) -> Any:
    """Roofline throughput ``min(peak, intensity * bandwidth)`` [FLOP/s]; broadcasts.

    Parameters
    ----------
    intensity : float or array_like
        Arithmetic intensity [FLOP/byte].
    peak : float or array_like
        Compute ceiling [FLOP/s].
    bandwidth : float or array_like
        Memory bandwidth [byte/s].

    Returns
    -------
    float or ndarray
        Attainable throughput [FLOP/s], broadcast over the arguments.

    Examples
    --------
    >>> attainable_flops([0.5, 2048.0], 989.4e12, 3.35e12) / 1e12
    array([  1.675, 989.4  ])
    """
    intensity = nonnegative_number(intensity, "intensity")
    peak, bandwidth = positive_number(peak, "peak"), positive_number(bandwidth, "bandwidth")
    broadcastable(intensity=intensity, peak=peak, bandwidth=bandwidth)
    return scalar_or_array(np.minimum(peak, np.multiply(intensity, bandwidth)))


def peak_for(op: OpCost, gpu: GPUSpec | str, *, sparse: bool = False) -> float:
    """Compute ceiling for an op on a GPU [FLOP/s].

    Tensor ops (``op.unit == "tensor"``) use the tensor-core peak of ``op.dtype`` ("tf32" for fp32
    data on tensor cores; "fp32" itself means the CUDA-core rate; "fp64" the FP64 tensor rate where
    there is one). Vector ops use the CUDA-core fp32 rate (fp64 ops the fp64 rate): packed
    half-precision vector math is not assumed. ``sparse`` doubles the tensor peak (2:4 sparsity)
    and has no effect on vector ops.

    Raises
    ------
    UnsupportedDTypeError
        The GPU has no tensor-core path for ``op.dtype`` (fp8 on an A100), or no 2:4 sparsity.

    Examples
    --------
    >>> import gpumodel as gm
    >>> peak_for(gm.ops.matmul(8, 8, 8, "tf32"), "h100") / 1e12
    494.7
    >>> peak_for(gm.ops.softmax(8, 8, "bf16"), "h100") / 1e12     # CUDA cores, fp32 rate
    66.9
    """
    g = resolve_gpu(gpu)
    op, sparse = resolve_op(op), flag(sparse, "sparse")
    dt = op.dtype
    if op.unit == "tensor" and dt not in (DType.FP32, DType.INT32):
        key = "fp64_tensor" if dt is DType.FP64 and g.supports("fp64_tensor") else dt
        try:
            return g.peak_flops(key, sparse=sparse)
        except UnsupportedDTypeError as exc:
            raise UnsupportedDTypeError(f"dtype {dt.value!r} of the {op.name} op: {exc}") from None
    if op.unit == "tensor" and sparse:
        raise UnsupportedDTypeError(f"dtype {dt.value!r} of the {op.name} op runs on CUDA cores: no 2:4 sparse path")
    if dt is DType.FP64:
        try:
            return g.peak_flops("fp64")
        except UnsupportedDTypeError as exc:
            raise UnsupportedDTypeError(f"dtype 'fp64' of the {op.name} op: {exc}") from None
    return g.peak_flops("fp32")


def _bandwidth(g: GPUSpec, level: str) -> float:
    if level not in LEVELS and level not in ("device", "dram", "memory", "l1", "registers"):
        raise ArgumentError(f"level={level!r} is not one of {', '.join(map(repr, LEVELS))}")
    return g.bandwidth(level)


def levels(gpu: GPUSpec | str) -> dict[str, float]:
    """Memory levels of a GPU that have a bandwidth, fastest last: ``{level: bandwidth [byte/s]}``.

    >>> {k: v / 1e12 for k, v in levels("h100").items()}
    {'hbm': 3.35, 'l2': 12.0, 'shared': 33.0}
    """
    g = resolve_gpu(gpu)
    out = {}
    for name in LEVELS:
        try:
            out[name] = g.bandwidth(name)
        except ValueError:
            continue
    return out


@dataclass(frozen=True, repr=False, eq=False)
class RooflineResult(ResultRecord):
    """Roofline bound of an op (or an array of ops) on one GPU at one memory level.

    Attributes
    ----------
    op : OpCost
    gpu : str
        Canonical GPU name.
    level : str
        Memory level whose bandwidth was used.
    seconds : float or ndarray
        Lower bound on run time, ``max(compute_s, memory_s)`` [s]; ``float(r)`` gives it. ``time_s`` is its
        former name (deprecated).
    bound : str or ndarray of str
        ``"compute"`` where the compute floor is the larger, else ``"memory"``.
    attainable_flops : float or ndarray
        ``min(peak, intensity * bandwidth)`` [FLOP/s].
    arithmetic_intensity : float or ndarray
        FLOPs per byte of total traffic [FLOP/byte].
    ridge_point : float
        ``peak_flops / bandwidth`` [FLOP/byte].
    compute_s, memory_s : float or ndarray
        ``flops / peak_flops`` and ``bytes / bandwidth`` [s], named as in
        :class:`~gpumodel.calibration.estimate.TimeEstimate`. ``compute_time_s`` and ``memory_time_s`` are their
        former names (deprecated).
    peak_flops : float
        Compute ceiling used [FLOP/s] (see :func:`peak_for`).
    bandwidth : float
        Memory bandwidth used [byte/s].
    """

    op: OpCost
    gpu: str
    level: str
    seconds: Any
    bound: Any
    attainable_flops: Any
    arithmetic_intensity: Any
    ridge_point: float
    compute_s: Any
    memory_s: Any
    peak_flops: float
    bandwidth: float

    @property
    def time_s(self) -> Any:
        """Deprecated name of :attr:`seconds`."""
        warnings.warn("RooflineResult.time_s is deprecated; use seconds", DeprecationWarning, stacklevel=2)
        return self.seconds

    @property
    def compute_time_s(self) -> Any:
        """Deprecated name of :attr:`compute_s`."""
        warnings.warn("RooflineResult.compute_time_s is deprecated; use compute_s", DeprecationWarning, stacklevel=2)
        return self.compute_s

    @property
    def memory_time_s(self) -> Any:
        """Deprecated name of :attr:`memory_s`."""
        warnings.warn("RooflineResult.memory_time_s is deprecated; use memory_s", DeprecationWarning, stacklevel=2)
        return self.memory_s

    def __float__(self) -> float:
        """Seconds (scalar results only)."""
        return float(self.seconds)

    def _lines(self) -> tuple[str, list[tuple[str, str]]]:
        head = f"{self.op.name} {self.op.dtype.value} on {self.gpu} [{self.level}]"
        ceil = [("peak", fq(self.peak_flops, "FLOP/s")), ("bandwidth", fq(self.bandwidth, "B/s")),
                ("ridge point", f"{self.ridge_point:.4g} FLOP/B")]
        if np.ndim(self.seconds) == 0:
            ratio = self.arithmetic_intensity / self.ridge_point
            rows = [("bound", str(self.bound)), ("time", format_seconds(self.seconds)),
                    ("intensity", f"{self.arithmetic_intensity:.4g} FLOP/B ({ratio:.3g}x the ridge point)"),
                    ("compute floor", format_seconds(self.compute_s)),
                    ("memory floor", format_seconds(self.memory_s)),
                    ("attainable", fq(float(self.attainable_flops), "FLOP/s"))]
        else:
            n = int(np.size(self.seconds))
            nc = int(np.count_nonzero(self.bound == "compute"))
            t = np.asarray(self.seconds, dtype=float)
            rows = [("configs", str(n)), ("bound", f"{nc} compute, {n - nc} memory"),
                    ("time", f"{format_seconds(float(t.min()))} .. {format_seconds(float(t.max()))}")]
        return head, rows + ceil

    def __repr__(self) -> str:
        head, rows = self._lines()
        return f"RooflineResult({head}: " + ", ".join(f"{k} {v}" for k, v in rows) + ")"

    def _repr_html_(self) -> str:
        head, rows = self._lines()
        return html_table(f"Roofline: {head}", rows)


def roofline(op: OpCost, gpu: GPUSpec | str, level: str = "hbm", *, sparse: bool = False) -> RooflineResult:
    """Roofline bound of ``op`` on ``gpu``: time, bound, attainable throughput; broadcasts.

    Parameters
    ----------
    op : OpCost
        From :mod:`gpumodel.core.ops`; arrays of shapes give arrays of results.
    gpu : GPUSpec or str
        A GPU record or name (``gm.gpu``).
    level : {"hbm", "l2", "shared"}
        Memory level whose bandwidth bounds the traffic. The op's minimal device-memory bytes are
        used at every level, so ``"l2"`` and ``"shared"`` answer "how fast if only this level's
        bandwidth limited it" (real kernels move at least as many bytes through the faster levels).
    sparse : bool
        2:4 structured sparsity: doubles the tensor-core peak where the GPU supports it.

    Returns
    -------
    RooflineResult
        ``.seconds`` (the lower bound ``max(compute_s, memory_s)`` [s]), ``.bound`` ("compute" or
        "memory"), ``.attainable_flops`` [FLOP/s], ``.arithmetic_intensity`` and ``.ridge_point``
        [FLOP/byte]; arrays where the op holds arrays.

    Notes
    -----
    .. math::

        t = \\max\\left(\\frac{F}{P}, \\frac{B}{\\beta}\\right), \\qquad
        P_{att} = \\min(P, I \\beta), \\qquad I = F / B

    Examples
    --------
    >>> import gpumodel as gm
    >>> r = gm.roofline(gm.ops.matmul(4096, 4096, 4096, "fp16"), "h100")
    >>> r.bound, round(r.seconds * 1e6, 1)    # 2*4096**3 / 989.4e12 s
    ('compute', 138.9)
    >>> gm.roofline(gm.ops.matmul(np.array([16, 8192]), 8192, 8192), "h100").bound
    array(['memory', 'compute'], dtype='<U7')
    """
    op = resolve_op(op)
    g = resolve_gpu(gpu)
    peak = peak_for(op, g, sparse=sparse)
    bw = _bandwidth(g, level)
    compute = np.divide(op.flops, peak)
    memory = np.divide(op.bytes, bw)
    time = np.maximum(compute, memory)
    bound = np.where(compute > memory, "compute", "memory")
    ai = arithmetic_intensity(op)
    att = np.nan_to_num(np.minimum(peak, np.multiply(ai, bw)), nan=0.0)  # an op with no work attains 0
    scalar = np.ndim(time) == 0
    return RooflineResult(
        op=op, gpu=g.name, level=level,
        seconds=scalar_or_array(time), bound=str(bound) if scalar else bound,
        attainable_flops=scalar_or_array(att), arithmetic_intensity=ai, ridge_point=peak / bw,
        compute_s=scalar_or_array(compute), memory_s=scalar_or_array(memory),
        peak_flops=peak, bandwidth=bw,
    )


make_callable(__name__, roofline)
