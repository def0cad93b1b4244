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
``potential_register_count``), PersistentSoftmax.cuh (``dispatch_softmax_forward``),
Reduce.cuh (``setReduceConfig``), Loops.cuh (``gpu_kernel_impl_nocast``'s unroll of the generic
``elementwise_kernel``) and Shape.cu (``CatArrayBatchedCopy``'s grid), github.com/pytorch/pytorch.
J. D. C. Little, "A proof for the queuing formula L = lambda W", Operations Research 9(3), 1961.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["softmax_plan", "sum_plan", "generic_unroll", "concat_steps", "CAT_BLOCKS_PER_SM", "CAT_THREADS",
           "MAX_THREADS_PER_SM", "SMEM_PER_BLOCK"]

#: resident threads per SM on sm_70..sm_90 data-center GPUs (CUDA C++ Programming Guide, "Technical
#: Specifications per Compute Capability"); a model of a known GPU takes its record's ``max_threads_per_sm``
MAX_THREADS_PER_SM = 2048
#: default shared memory per block (``cudaDeviceProp.sharedMemPerBlock``, the same guide's table); a model of a
#: known GPU takes its architecture record's ``shared_memory_per_block``
SMEM_PER_BLOCK = 48 * 1024
#: blocks per SM and threads per block of PyTorch's ``CatArrayBatchedCopy`` for each input of a ``torch.cat``
#: (``getCatGrid``: twice the SM count; the profiler on the H200 shows a [264, inputs] grid of 512 threads)
CAT_BLOCKS_PER_SM, CAT_THREADS = 2, 512


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

    Also ``batch``, the rows a warp of the warp kernel holds (``WARP_BATCH``: 2 for rows of at most 128
    elements, 1 above; the profiler shows 8 rows a 128-thread block at 128 columns, 4 at 512), and
    ``registers``, the registers a thread of the kernel takes, which set how many blocks an SM holds.
    They grow with the values a thread holds: the profiler on the H200 (torch 2.11) shows 24-32 for
    warp kernels of up to 16 values a lane, 48 at 32 and 80 at 64 (``16 + values``), and 28-31 for the
    register kernel of up to 6 values, 34, 37 and 38-40 at 7, 8 and 9 (``3 values + 13``); the block
    kernels take 32.

    Examples
    --------
    >>> k = softmax_plan(4096, [1024, 4096, 16384, 32000], 2)   # bf16 rows
    >>> k["warp"].tolist(), k["reg"].tolist(), k["passes"].tolist()
    ([True, False, False, False], [False, True, False, False], [3.0, 3.0, 1.0, 3.0])
    >>> softmax_plan(1, [128, 2048, 8192], 2)["registers"].tolist()
    [32.0, 80.0, 37.0]
    """
    rows, cols = np.asarray(rows, dtype=float), np.asarray(cols, dtype=float)
    vec = 16.0 / e
    warp = (cols <= 2048) & (cols * e <= 8192)
    regs = np.ceil(cols / 1024.0)
    reg = ~warp & (regs < 10)
    block = ~warp & ~reg
    smem = block & (cols * e < smem_per_block - 128) & (np.mod(cols, vec) == 0)
    lane = 2.0 ** np.ceil(np.log2(np.maximum(cols, 32.0))) / 32.0
    batch = np.where(lane <= 4.0, 2.0, 1.0)
    registers = np.where(warp, np.maximum(32.0, 16.0 + batch * lane),
                         np.where(reg, np.maximum(30.0, 3.0 * regs + 13.0), 32.0))
    return {"warp": warp, "reg": reg, "block": block, "regs": regs, "passes": np.where(smem, 1.0, 3.0),
            "lane_elems": lane, "batch": batch, "registers": registers,
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


def generic_unroll(out_bytes: Any) -> np.ndarray:
    """Elements one thread of PyTorch's generic ``elementwise_kernel`` handles, one after another.

    ``gpu_kernel_impl_nocast`` (aten/src/ATen/native/cuda/Loops.cuh) launches
    ``elementwise_kernel<128, unroll>`` with an unroll of 4 for results narrower than 4 bytes and 2
    otherwise (``elementwise_kernel<128, 4, ...>`` for bf16, ``<128, 2, ...>`` for fp32 in the profiler on
    the H200). Every element's store may alias the next one's loads, so a thread's elements are one
    dependent chain: a small launch lasts ``unroll`` loads and stores.

    >>> generic_unroll([2, 4, 1]).tolist()
    [4.0, 2.0, 4.0]
    """
    return np.where(np.asarray(out_bytes, dtype=float) >= 4, 2.0, 4.0)


def concat_steps(numel: Any, pieces: Any, sm_count: int) -> np.ndarray:
    """Elements one thread of PyTorch's ``CatArrayBatchedCopy`` copies, one after another, for a ``torch.cat``
    of ``pieces`` equal strided inputs into ``numel`` elements.

    Each input gets :data:`CAT_BLOCKS_PER_SM` blocks an SM of :data:`CAT_THREADS` threads whatever its size,
    and they stride over it: the copy is a chain of ``numel / (pieces x 2 x SMs x 512)`` dependent
    steps a thread (the profiled bf16 copies stream at 1.8 TB/s at 134 M elements, half the bandwidth).

    >>> concat_steps([1024, 2**27], 2, 132).tolist()
    [1.0, 497.0]
    """
    per_input = np.asarray(numel, dtype=float) / np.asarray(pieces, dtype=float)
    return np.maximum(np.ceil(per_input / (CAT_BLOCKS_PER_SM * sm_count * CAT_THREADS)), 1.0)
