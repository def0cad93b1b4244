"""Which kernel PyTorch launches for a row-wise op, and its launch shape (numpy only, no torch).

The time of a softmax or a sum over rows depends less on the bytes than on the kernel PyTorch
picks from the row length and on how much one thread has to do: a thread that keeps one
16-byte load in flight streams at ``16 B / memory latency`` (Little's law), so a row of
``s`` loads per thread takes ``s`` latencies however wide the GPU is. These functions mirror
PyTorch's dispatch (torch 2.x, CUDA) so that :mod:`gpumodel.calibration.model` can charge each
kernel its passes, its steps per thread and the rows or blocks it keeps in flight.

References
----------
PyTorch, aten/src/ATen/native/cuda/SoftMax.cu (``host_softmax``, ``SoftMaxForward_getBlockSize``,
``potential_register_count``), PersistentSoftmax.cuh (``dispatch_softmax_forward``) and
Reduce.cuh (``setReduceConfig``), github.com/pytorch/pytorch.
J. D. C. Little, "A proof for the queuing formula L = lambda W", Operations Research 9(3), 1961.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["softmax_plan", "sum_plan", "MAX_THREADS_PER_SM", "SMEM_PER_BLOCK"]

#: resident threads per SM on sm_70..sm_90 data-center GPUs (CUDA C++ Programming Guide, "Technical
#: Specifications per Compute Capability"); a model of a known GPU takes its record's ``max_threads_per_sm``
MAX_THREADS_PER_SM = 2048
#: default shared memory per block (``cudaDeviceProp.sharedMemPerBlock``, the same guide's table); a model of a
#: known GPU takes its architecture record's ``shared_memory_per_block``
SMEM_PER_BLOCK = 48 * 1024


def softmax_plan(rows: Any, cols: Any, e: float, smem_per_block: int = SMEM_PER_BLOCK) -> dict[str, np.ndarray]:
    """Which kernel ``torch.softmax(x, -1)`` runs for rows of ``cols`` elements of ``e`` bytes, and its shape.

    From PyTorch's ``host_softmax`` (aten/src/ATen/native/cuda/SoftMax.cu): rows of at most 2048
    elements and 8 KiB go to the warp-per-row kernel (a lane holds ``next_pow2(cols)/32`` elements);
    longer rows get one 1024-thread block each, holding ``ceil(cols/1024)`` elements a thread in
    registers while that is below 10 (``cunn_SoftMaxForwardReg``), else caching the row in shared
    memory when it fits in 48 KiB and ``cols`` is a multiple of the 16-byte vector
    (``cunn_SoftMaxForwardSmem``: one pass over global memory), else reading it three times
    (``cunn_SoftMaxForward``: max, sum, write). Returns boolean masks ``warp``, ``reg``, ``block``,
    ``passes`` over global memory and ``steps``: the 16-byte loads one thread issues per pass.

    Examples
    --------
    >>> k = softmax_plan(4096, [1024, 4096, 16384, 32000], 2)   # bf16 rows
    >>> k["warp"].tolist(), k["reg"].tolist(), k["passes"].tolist()
    ([True, False, False, False], [False, True, False, False], [3.0, 3.0, 1.0, 3.0])
    """
    rows, cols = np.asarray(rows, dtype=float), np.asarray(cols, dtype=float)
    vec = 16.0 / e
    warp = (cols <= 2048) & (cols * e <= 8192)
    regs = np.ceil(cols / 1024.0)
    reg = ~warp & (regs < 10)
    block = ~warp & ~reg
    smem = block & (cols * e < smem_per_block - 128) & (np.mod(cols, vec) == 0)
    return {"warp": warp, "reg": reg, "block": block, "regs": regs, "passes": np.where(smem, 1.0, 3.0),
            "lane_elems": 2.0 ** np.ceil(np.log2(np.maximum(cols, 32.0))) / 32.0,
            "steps": np.ceil(cols / (1024.0 * vec))}


def sum_plan(rows: Any, cols: Any, e: float, sm_count: int,
             threads_per_sm: int = MAX_THREADS_PER_SM) -> dict[str, np.ndarray]:
    """The launch ``x.sum(-1)`` gets from PyTorch's ``setReduceConfig`` (aten/src/ATen/native/cuda/Reduce.cuh).

    The reduced (contiguous) dimension maps to ``block.x`` lanes and rows to ``block.y`` warps
    (512 threads at most; few rows widen ``block.x``). Each thread sums ``cols / block.x`` values
    with 16-byte loads from 128 columns on (``dim0 >= 128``: 8 elements a load for 16-bit types,
    4 for fp32), one element a load below (4 unrolled); when that leaves at least ``16 * block.y`` (or 256) values, the warps of a
    block share one row instead of taking one row each, and when a thread still has 256 or more
    and the grid is small, each row is split over several blocks (``ctas``) that combine through
    global memory. Returns ``blocks``, ``threads``, ``ctas``, ``steps`` (loads per thread) and
    ``split`` (whether the warps of a block share a row, and so end in a block-wide reduction).

    Examples
    --------
    32 bf16 rows of 4096 take a warp each (two blocks, 16 loads a lane); rows of 8192 take a
    block each (32 blocks, 2 loads a thread), which is why the longer rows are summed faster:

    >>> k = sum_plan(32, [4096, 8192], 2, sm_count=132)
    >>> k["blocks"].tolist(), k["steps"].tolist()
    ([2.0, 32.0], [16.0, 2.0])
    """
    rows, cols = np.asarray(rows, dtype=float), np.asarray(cols, dtype=float)
    vec = np.where(cols >= 128, 16.0 / e, 4.0)  # vectorized along the row from 128 on, else 4 loads unrolled
    pow2 = lambda d: np.where(d < 512, 2.0 ** np.floor(np.log2(np.maximum(d, 1.0))), 512.0)  # noqa: E731
    d0, d1 = pow2(np.where(cols >= 128, cols / vec, cols)), pow2(rows)
    bh = np.minimum(d1, 512.0 / np.minimum(d0, 32.0))
    bw = np.minimum(d0, 512.0 / bh)
    threads = bw * bh
    vpt = np.ceil(cols / bw)
    split = (vpt >= 16 * bh) | (vpt >= 256)
    vpt = np.where(split, np.ceil(cols / (bw * bh)), vpt)
    blocks = np.where(split, rows, np.ceil(rows / bh))
    target = sm_count * np.floor(threads_per_sm / threads)
    ctas = np.where(split & (vpt >= 256) & (blocks <= target),
                    np.maximum(np.minimum(np.ceil(target / blocks), np.ceil(vpt / 16)), np.ceil(vpt / 256)), 1.0)
    return {"blocks": blocks * ctas, "threads": threads, "ctas": ctas, "steps": np.ceil(np.ceil(vpt / ctas) / vec),
            "split": split}
