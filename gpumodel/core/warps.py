"""SIMT warp efficiency: partly filled warps and branch divergence.

A GPU issues one instruction for a whole warp of 32 threads. A thread block whose size is
not a multiple of the warp size leaves lanes of its last warp idle (Brenndoerfer's
48-thread block: two warps, 48 of 64 lanes busy, 75%). Threads of one warp that take
different branch paths are serialised: the warp runs every path in turn with the other
lanes masked off, so ``k`` equally long paths leave each lane busy ``1/k`` of the time
(two paths: 50%; 32 paths: 1/32).

All functions broadcast over numpy arrays.

References
----------
NVIDIA, *CUDA C++ Programming Guide*, Sec. "SIMT Architecture" (warp size 32, divergent paths
executed serially with inactive threads disabled).

M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores", 2026,
https://mbrenndoerfer.com/writing/gpu-architecture-memory-hierarchy-cuda-tensor-cores
(the 48-thread block example).

Examples
--------
>>> warp_efficiency(48)
0.75
>>> divergence_efficiency(2)
0.5
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.errors import ArgumentError
from ..vocabulary import bounded_int

__all__ = ["WARP_SIZE", "warps_per_block", "warp_efficiency", "padded_block_size", "divergence_efficiency",
           "branch_efficiency"]

#: threads per warp on every NVIDIA GPU to date (CUDA Programming Guide; ``warpSize``)
WARP_SIZE = 32


def _out(x: Any) -> Any:
    return x.item() if np.ndim(x) == 0 else x


def _positive_int(value: Any, name: str, low: int = 1) -> np.ndarray:
    """Whole numbers >= ``low`` as floats (see :func:`gpumodel.vocabulary.bounded_int`)."""
    return bounded_int(value, name, low).astype(float)


def warps_per_block(threads_per_block: Any, warp_size: int = WARP_SIZE) -> Any:
    """Warps a block occupies, ``ceil(threads / warp_size)``.

    >>> warps_per_block(48)
    2
    >>> warps_per_block(np.array([32, 33, 1024]))
    array([ 1,  2, 32])
    """
    t = _positive_int(threads_per_block, "threads_per_block")
    w = _positive_int(warp_size, "warp_size")
    return _out((-(-t // w)).astype(int))


def warp_efficiency(threads_per_block: Any, warp_size: int = WARP_SIZE) -> Any:
    """Fraction of the lanes of a block's warps that hold a thread.

    Parameters
    ----------
    threads_per_block : int or array_like
        Threads per block (>= 1).
    warp_size : int
        Threads per warp (32).

    Returns
    -------
    float or ndarray
        In (0, 1]; 1 for multiples of the warp size.

    Notes
    -----
    .. math:: \\eta = \\frac{t}{w \\lceil t / w \\rceil}

    Examples
    --------
    >>> warp_efficiency(48)            # 48 / (2 * 32), Brenndoerfer's example
    0.75
    >>> warp_efficiency([64, 100, 1])  # 64/64, 100/128, 1/32
    array([1.     , 0.78125, 0.03125])
    """
    t = _positive_int(threads_per_block, "threads_per_block")
    w = _positive_int(warp_size, "warp_size")
    return _out(t / (w * -(-t // w)))


def padded_block_size(threads_per_block: Any, warp_size: int = WARP_SIZE) -> Any:
    """Smallest multiple of the warp size that holds ``threads_per_block`` threads.

    >>> padded_block_size(48)          # Brenndoerfer: pad 48 to 64
    64
    """
    t = _positive_int(threads_per_block, "threads_per_block")
    w = _positive_int(warp_size, "warp_size")
    return _out((w * -(-t // w)).astype(int))


def divergence_efficiency(paths: Any, warp_size: int = WARP_SIZE) -> Any:
    """Lane efficiency of a warp whose threads split over ``paths`` equally long branch paths.

    The warp executes the paths one after another, each with only its own threads active, so
    every lane does useful work during one path of ``paths``, however the threads are split.

    Parameters
    ----------
    paths : int or array_like
        Distinct control-flow paths taken within one warp, 1 .. ``warp_size``.
    warp_size : int
        Threads per warp (32).

    Returns
    -------
    float or ndarray
        Fraction of lane-cycles doing useful work, ``1 / paths``, in (0, 1].

    Notes
    -----
    .. math:: \\eta = 1 / k

    Examples
    --------
    >>> divergence_efficiency([1, 2, 32])    # no divergence, an if/else, every thread its own path
    array([1.     , 0.5    , 0.03125])
    """
    k = _positive_int(paths, "paths")
    w = _positive_int(warp_size, "warp_size")
    if (k > w).any():
        raise ArgumentError(f"paths must be between 1 and warp_size={int(w)} (one path per thread at most)")
    return _out(1.0 / k)


def branch_efficiency(threads_per_path: Any, cycles_per_path: Any = None, warp_size: int = WARP_SIZE) -> float:
    """Lane efficiency of one warp with given threads and run time on each branch path.

    Parameters
    ----------
    threads_per_path : sequence of int
        Threads taking each path; they sum to at most ``warp_size`` (fewer: a partly filled warp).
    cycles_per_path : sequence of float, optional
        Run time of each path [cycle]; equal when omitted.
    warp_size : int

    Notes
    -----
    With :math:`n_i` threads on path :math:`i` of length :math:`L_i`, the warp spends
    :math:`\\sum_i L_i` cycles on all :math:`w` lanes and does :math:`\\sum_i n_i L_i` lane-cycles of work:

    .. math:: \\eta = \\frac{\\sum_i n_i L_i}{w \\sum_i L_i}

    Examples
    --------
    >>> branch_efficiency([16, 16])              # an even if/else split: half the throughput
    0.5
    >>> branch_efficiency([28, 4], [10, 30])     # (28*10 + 4*30) / (32 * 40)
    0.3125
    """
    n = np.asarray(threads_per_path, dtype=float).ravel()
    if n.size == 0 or not np.isfinite(n).all() or (n < 0).any():
        raise ArgumentError(f"threads_per_path must be non-empty counts >= 0, got {threads_per_path!r}")
    w = float(_positive_int(warp_size, "warp_size"))
    if n.sum() > w:
        raise ArgumentError(f"threads_per_path sums to {n.sum():g}, more than warp_size={w:g}")
    lengths = np.ones_like(n) if cycles_per_path is None else np.asarray(cycles_per_path, dtype=float).ravel()
    if lengths.shape != n.shape or not np.isfinite(lengths).all() or (lengths < 0).any() or lengths.sum() <= 0:
        raise ArgumentError("cycles_per_path must give one length >= 0 per path (not all 0)")
    return float((n * lengths).sum() / (w * lengths.sum()))
