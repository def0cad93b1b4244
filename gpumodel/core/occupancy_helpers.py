"""What a kernel author asks next: the best block size, the registers or shared memory for the next step.

Built on :func:`gpumodel.occupancy` (module :mod:`gpumodel.core.occupancy`):

* :func:`max_potential_block_size` picks the block size as ``cudaOccupancyMaxPotentialBlockSize`` does;
* :func:`max_dynamic_shared_memory` is the most dynamic shared memory that keeps N blocks per SM
  (``cudaOccupancyAvailableDynamicSMemPerBlock``, or its corrected form);
* :func:`next_occupancy_step` says which change buys one more block per SM;
* :func:`occupancy_curves` gives the classic calculator's three charts as data
  (plots: :mod:`gpumodel.plots.occupancy`).

Examples
--------
>>> import gpumodel as gm
>>> best = gm.max_potential_block_size("h100", registers_per_thread=64)
>>> best.block_size, best.blocks_per_sm, best.min_grid_size    # 64 regs: 1024 threads/SM at most
(1024, 1, 132)
>>> print(gm.next_occupancy_step("9.0", threads_per_block=256, registers_per_thread=72))
4 blocks/SM needs <= 64 registers/thread; 224 threads/block gives more resident threads
>>> gm.max_dynamic_shared_memory("9.0", 2, threads_per_block=256, registers_per_thread=32)   # (228 KiB / 2) - 1 KiB
115712
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..base.errors import ArgumentError, ArgumentTypeError, UnknownNameError  # noqa: F401
from ..base.reprs import ResultRecord

from .occupancy import carveout_bytes, occupancy, preferred_carveout, resolve_arch
from ..vocabulary import bounded_int, flag

__all__ = ["max_potential_block_size", "PotentialBlockSize", "max_dynamic_shared_memory", "next_occupancy_step",
           "NextStep", "occupancy_curves", "OccupancyCurve"]


@dataclass(frozen=True)
class PotentialBlockSize(ResultRecord):
    """The block size with the most resident threads per SM (the largest such size on a tie)."""

    block_size: Any  #: threads per block; 0 when no block size can launch
    blocks_per_sm: Any
    occupancy: Any  #: active warps / max warps per SM at that block size
    min_grid_size: Any  #: blocks_per_sm x SM count (None when only a compute capability was given)

    def __repr__(self) -> str:
        if np.ndim(self.block_size):
            return f"PotentialBlockSize({np.size(self.block_size)} kernels, block sizes {np.unique(self.block_size)})"
        grid = f", min grid {self.min_grid_size}" if self.min_grid_size is not None else ""
        return (f"PotentialBlockSize({self.block_size} threads x {self.blocks_per_sm} blocks/SM = "
                f"{self.occupancy:.0%} occupancy{grid})")


def max_potential_block_size(gpu_or_cc: Any, registers_per_thread: Any, static_shared_bytes: Any = 0,
                             dynamic_shared_bytes: Any | Callable[[np.ndarray], Any] = 0, block_size_limit: Any = 0,
                             carveout: Any = None, *, max_dynamic_shared_bytes: Any = None,
                             max_threads_per_block: Any = None) -> PotentialBlockSize:
    """The block size ``cudaOccupancyMaxPotentialBlockSize`` suggests, and its minimum grid size.

    Parameters
    ----------
    gpu_or_cc : GPUSpec, str
        GPU (gives ``min_grid_size``) or compute capability.
    registers_per_thread, static_shared_bytes : int
        The kernel's ``numRegs`` and ``sharedSizeBytes`` [bytes].
    dynamic_shared_bytes : int or callable
        Dynamic shared memory per block [bytes], or a function of the block size
        (``cudaOccupancyMaxPotentialBlockSizeVariableSMem``); it is called with an array of block sizes
        and may return an array, or is called per size if that fails.
    block_size_limit : int
        Largest block size to consider; 0 = no limit beyond the device's (as in the runtime).
    carveout, max_dynamic_shared_bytes
        As in :func:`gpumodel.occupancy`.
    max_threads_per_block : int, optional
        The kernel's ``maxThreadsPerBlock`` (e.g. from ``__launch_bounds__``).

    Returns
    -------
    PotentialBlockSize
        ``block_size`` [threads] (0 when no block size can launch), ``blocks_per_sm``, ``occupancy`` (active
        warps / max warps per SM) and ``min_grid_size`` [blocks] (``blocks_per_sm`` x SM count; None when
        only a compute capability was given); arrays where the inputs were arrays.

    Notes
    -----
    The runtime tries block sizes from the limit (rounded up to a warp) downwards in steps of 32 and
    keeps a size only if it has strictly more resident threads (block size x blocks per SM) than every
    larger one tried: the answer is the largest block size reaching the most resident threads.
    """
    limits, gpu = resolve_arch(gpu_or_cc)
    warp = limits.warp_size
    limit = np.full(np.shape(block_size_limit), limits.max_threads_per_block, dtype=np.int64)
    L = bounded_int(block_size_limit, "block_size_limit", 0, None, ">= 0 (0 = no limit)")
    limit = np.where(L > 0, np.minimum(limit, L), limit)
    if max_threads_per_block is not None:
        limit = np.minimum(limit, bounded_int(max_threads_per_block, "max_threads_per_block", 1, None, ">= 1"))
    aligned = -(-limit // warp) * warp
    steps = np.arange(limits.max_threads_per_block // warp) * warp
    cand = aligned[..., None] - steps  # descending candidates, as the runtime tries them
    valid = cand > 0
    sizes = np.where(valid, np.minimum(limit[..., None], cand), 1)
    if callable(dynamic_shared_bytes):
        try:
            dyn = np.broadcast_to(np.asarray(dynamic_shared_bytes(sizes.copy()), dtype=np.int64), sizes.shape)
        except Exception:
            try:
                dyn = np.vectorize(lambda b: int(dynamic_shared_bytes(int(b))), otypes=[np.int64])(sizes)
            except (TypeError, ValueError, OverflowError) as exc:
                raise ArgumentError(f"dynamic_shared_bytes: the function of the block size must return whole "
                                    f"numbers of bytes ({type(exc).__name__}: {exc})") from None
    else:
        dyn = np.asarray(dynamic_shared_bytes)[..., None]
    extra = lambda v: None if v is None else np.asarray(v)[..., None]  # noqa: E731
    r = occupancy(limits, sizes, np.asarray(registers_per_thread)[..., None], np.asarray(static_shared_bytes)[..., None],
                  dyn, extra(carveout), max_dynamic_shared_bytes=extra(max_dynamic_shared_bytes))
    blocks_all = np.where(valid, r.blocks_per_sm, 0)
    sizes = np.broadcast_to(sizes, blocks_all.shape)
    threads = blocks_all * sizes
    best = np.argmax(threads, axis=-1)[..., None]  # first maximum = largest block size
    top = np.take_along_axis(threads, best, -1)[..., 0]
    size = np.where(top > 0, np.take_along_axis(sizes, best, -1)[..., 0], 0)
    blocks = np.where(top > 0, np.take_along_axis(blocks_all, best, -1)[..., 0], 0)
    occ = blocks * (-(-size // warp)) / limits.max_warps_per_sm
    grid = blocks * gpu.sm_count if gpu is not None else None
    if size.ndim == 0:
        return PotentialBlockSize(int(size), int(blocks), float(occ), None if grid is None else int(grid))
    return PotentialBlockSize(size, blocks, occ, grid)


def max_dynamic_shared_memory(gpu_or_cc: Any, num_blocks: Any, threads_per_block: Any, registers_per_thread: Any,
                              static_shared_bytes: Any = 0, carveout: Any = None, *,
                              max_dynamic_shared_bytes: Any = None, runtime: bool = False) -> Any:
    """Most dynamic shared memory per block [bytes] that keeps ``num_blocks`` blocks resident per SM.

    Parameters
    ----------
    gpu_or_cc : GPUSpec, str or ArchLimits
        As in :func:`gpumodel.occupancy`.
    num_blocks : int or array_like
        Blocks per SM wanted (>= 1).
    threads_per_block, registers_per_thread, static_shared_bytes, carveout, max_dynamic_shared_bytes
        As in :func:`gpumodel.occupancy`.
    runtime : bool
        Return exactly what ``cudaOccupancyAvailableDynamicSMemPerBlock`` returns. The runtime does not
        subtract the per-block reservation (1 KiB from 8.0 on), so on those GPUs its answer, launched,
        fits one block fewer than asked when shared memory is the limit (measured on an H200). The
        default (False) subtracts it: the answer then always keeps ``num_blocks`` blocks.

    Returns
    -------
    int or ndarray
        Bytes; -1 where ``num_blocks`` blocks cannot be resident even without dynamic shared memory
        (the runtime returns an error there).

    Notes
    -----
    With one block the whole opt-in per-block limit is available; with more, the preferred carveout
    (its smallest non-zero size if the preference is 0) is split evenly, rounded down to the allocation
    unit, capped by the per-block limit and the kernel's max-dynamic attribute.
    """
    limits, _ = resolve_arch(gpu_or_cc)
    runtime = flag(runtime, "runtime")
    N = bounded_int(num_blocks, "num_blocks", 1, None, ">= 1")
    r = occupancy(limits, threads_per_block, registers_per_thread, static_shared_bytes, 0, carveout,
                  max_dynamic_shared_bytes=max_dynamic_shared_bytes)
    scalar = np.ndim(N) == 0 and np.ndim(r.blocks_per_sm) == 0
    S = np.asarray(r.static_shared_bytes)
    reserved = limits.reserved_shared_memory_per_block if limits.major >= 8 else 0
    per_block = limits.shared_memory_per_block_optin + reserved
    pref = preferred_carveout(limits, np.asarray(r.carveout))
    pref = np.where(pref == 0, carveout_bytes(limits, np.ones_like(pref)), pref)
    per_sm = np.where(N == 1, per_block, pref)
    unit = limits.shared_memory_allocation_unit
    avail = np.minimum((per_sm // N) // unit * unit, per_block) - S
    if not runtime:
        avail = avail - limits.reserved_shared_memory_per_block
    if max_dynamic_shared_bytes is None:
        cap = limits.shared_memory_per_block_optin - S
    else:
        cap = bounded_int(max_dynamic_shared_bytes, "max_dynamic_shared_bytes", 0, None, ">= 0 bytes")
    avail = np.minimum(avail, cap)
    out = np.where(np.asarray(r.blocks_per_sm) < N, -1, np.maximum(avail, -1))
    return int(out) if scalar else out


@dataclass(frozen=True)
class NextStep(ResultRecord):
    """What one more resident block per SM needs, resource by resource.

    ``registers_per_thread`` / ``dynamic_shared_bytes``: the most a block may use for ``target_blocks``
    to fit (None where that resource already allows it). ``reachable`` is False where warps, the block
    cap or the barriers already stop at ``blocks_per_sm`` (or no register count / size gets there).
    """

    blocks_per_sm: int  #: now
    limiter: str  #: what limits now
    target_blocks: int  #: blocks_per_sm + 1
    reachable: bool
    registers_per_thread: int | None  #: at most this many registers per thread, if registers must change
    dynamic_shared_bytes: int | None  #: at most this much dynamic shared memory [bytes], if it must change
    threads_per_block: int | None  #: a smaller block (multiple of 32) with more resident threads, if any

    def __str__(self) -> str:
        if not self.reachable:
            text = f"{self.blocks_per_sm} blocks/SM: no more blocks at this block size ({self.limiter} limit)"
        else:
            needs = []
            if self.registers_per_thread is not None:
                needs.append(f"<= {self.registers_per_thread} registers/thread")
            if self.dynamic_shared_bytes is not None:
                needs.append(f"<= {self.dynamic_shared_bytes} B dynamic shared memory")
            text = f"{self.target_blocks} blocks/SM needs " + " and ".join(needs)
        if self.threads_per_block is not None:
            text += f"; {self.threads_per_block} threads/block gives more resident threads"
        return text


def _one_configuration(function: str, **arguments: Any) -> None:
    """Refuse arrays where a function takes one launch configuration, naming the argument."""
    for name, value in arguments.items():
        if np.ndim(value):
            raise ArgumentError(f"{name} must be a single value: {function} takes one configuration, not arrays")


def _first_reaching(candidates: np.ndarray, blocks: np.ndarray, target: int) -> tuple[int | None, bool]:
    """The first of ``candidates`` whose ``blocks`` per SM reach ``target`` (None if none does), and whether
    one does."""
    ok = np.flatnonzero(blocks >= target)
    return (int(candidates[ok[0]]) if ok.size else None), ok.size > 0


def next_occupancy_step(gpu_or_cc: Any, threads_per_block: int, registers_per_thread: int,
                        static_shared_bytes: int = 0, dynamic_shared_bytes: int = 0, carveout: int | None = None,
                        *, max_dynamic_shared_bytes: int | None = None) -> NextStep:
    """What buys the next occupancy step (one more block per SM) for one launch configuration.

    For each limiting resource, the largest usage that still allows ``blocks_per_sm + 1`` blocks: the
    register count per thread and the dynamic shared memory per block (with the carveout preference
    kept). Also a smaller block size (a multiple of 32) with more resident threads, if one exists.

    Parameters
    ----------
    gpu_or_cc : GPUSpec, str or ArchLimits
        A GPU record or name ("h100") or a compute capability ("9.0", "sm_86").
    threads_per_block : int
        Block size [threads], 1..1024.
    registers_per_thread : int
        Registers per thread (``numRegs``), 0..255.
    static_shared_bytes, dynamic_shared_bytes : int
        Static and dynamic shared memory per block [bytes].
    carveout : int or None
        Preferred shared-memory carveout [percent], 0..100; None or -1 = default.
    max_dynamic_shared_bytes : int or None
        The kernel's maximum dynamic shared memory attribute [bytes]; None = opted in to the maximum.

    Returns
    -------
    NextStep
        ``blocks_per_sm`` and ``limiter`` now, ``target_blocks`` (one more), whether it is ``reachable``, and
        the most ``registers_per_thread`` and ``dynamic_shared_bytes`` [bytes] that reach it (None where that
        resource need not change), plus a smaller ``threads_per_block`` with more resident threads (or None).
    """
    limits, _ = resolve_arch(gpu_or_cc)
    kw = dict(max_dynamic_shared_bytes=max_dynamic_shared_bytes)
    now = occupancy(limits, threads_per_block, registers_per_thread, static_shared_bytes, dynamic_shared_bytes,
                    carveout, **kw)
    _one_configuration("next_occupancy_step", threads_per_block=threads_per_block,
                       registers_per_thread=registers_per_thread, static_shared_bytes=static_shared_bytes,
                       dynamic_shared_bytes=dynamic_shared_bytes, carveout=carveout,
                       max_dynamic_shared_bytes=max_dynamic_shared_bytes)
    target = now.blocks_per_sm + 1
    fixed_cap = min(now.blocks_by_warps, now.blocks_by_block_cap, now.blocks_by_barriers)
    reachable = target <= fixed_cap
    regs = smem = None
    if reachable and now.blocks_by_registers < target:
        cand = np.arange(int(registers_per_thread) - 1, -1, -1)
        by = occupancy(limits, threads_per_block, cand, static_shared_bytes, dynamic_shared_bytes, carveout, **kw)
        regs, reachable = _first_reaching(cand, by.blocks_by_registers, target)
    if reachable and now.blocks_by_shared_memory < target:
        unit = limits.shared_memory_allocation_unit
        base = int(static_shared_bytes) + limits.reserved_shared_memory_per_block
        k = np.arange(-(-base // unit), limits.shared_memory_per_sm // unit + 1)
        cand = k * unit - base  # the largest dynamic size of each allocation step
        cand = cand[(cand >= 0) & (cand < int(dynamic_shared_bytes))][::-1]
        by = occupancy(limits, threads_per_block, registers_per_thread, static_shared_bytes, cand, carveout, **kw)
        smem, reachable = _first_reaching(cand, by.blocks_by_shared_memory, target)
    sizes = np.arange(limits.warp_size, int(threads_per_block), limits.warp_size)
    thr_step = None
    if sizes.size:
        by_t = occupancy(limits, sizes, registers_per_thread, static_shared_bytes, dynamic_shared_bytes, carveout, **kw)
        gain = np.flatnonzero(np.asarray(by_t.active_threads) > now.active_threads)
        thr_step = int(sizes[gain[-1]]) if gain.size else None
    return NextStep(now.blocks_per_sm, now.limiter, target, bool(reachable), regs if reachable else None,
                    smem if reachable else None, thr_step)


@dataclass(frozen=True)
class OccupancyCurve(ResultRecord):
    """Occupancy as one input varies, the others held (one chart of the classic calculator)."""

    variable: str  #: "threads_per_block" | "registers_per_thread" | "shared_memory_per_block"
    x: np.ndarray
    occupancy: np.ndarray
    blocks_per_sm: np.ndarray
    current: int  #: the configuration's own x

    def __repr__(self) -> str:
        return (f"OccupancyCurve({self.variable}: {len(self.x)} points {self.x[0]}..{self.x[-1]}, "
                f"occupancy {self.occupancy.min():.2f}..{self.occupancy.max():.2f}, current {self.current})")


def occupancy_curves(gpu_or_cc: Any, threads_per_block: int, registers_per_thread: int, static_shared_bytes: int = 0,
                     dynamic_shared_bytes: int = 0, carveout: int | None = None) -> dict[str, OccupancyCurve]:
    """Occupancy over block size (1..1024), registers per thread (0..255) and shared memory per block.

    Shared memory varies the dynamic part from 0 to the opt-in maximum in allocation units; its curve's
    x is static + dynamic [bytes].

    Parameters
    ----------
    gpu_or_cc : GPUSpec, str or ArchLimits
        A GPU record or name ("h100") or a compute capability ("9.0", "sm_86").
    threads_per_block : int
        Block size [threads], 1..1024.
    registers_per_thread : int
        Registers per thread (``numRegs``), 0..255.
    static_shared_bytes, dynamic_shared_bytes : int
        Static and dynamic shared memory per block [bytes].
    carveout : int or None
        Preferred shared-memory carveout [percent], 0..100; None or -1 = default.

    Returns
    -------
    dict of str to OccupancyCurve
        Keys "threads_per_block", "registers_per_thread" and "shared_memory_per_block"; each curve holds
        ``x`` (threads, registers or bytes), ``occupancy`` and ``blocks_per_sm`` at each x, and ``current``,
        the configuration's own x.
    """
    limits, _ = resolve_arch(gpu_or_cc)
    _one_configuration("occupancy_curves", threads_per_block=threads_per_block,
                       registers_per_thread=registers_per_thread, static_shared_bytes=static_shared_bytes,
                       dynamic_shared_bytes=dynamic_shared_bytes, carveout=carveout)
    occupancy(limits, threads_per_block, registers_per_thread, static_shared_bytes, dynamic_shared_bytes, carveout)
    t = np.arange(1, limits.max_threads_per_block + 1)
    r = np.arange(0, 256)
    unit = limits.shared_memory_allocation_unit
    d = np.arange(0, limits.shared_memory_per_block_optin - int(static_shared_bytes) + 1, unit)
    base = (static_shared_bytes, dynamic_shared_bytes, carveout)
    ot = occupancy(limits, t, registers_per_thread, *base)
    orr = occupancy(limits, threads_per_block, r, *base)
    od = occupancy(limits, threads_per_block, registers_per_thread, static_shared_bytes, d, carveout)
    return {
        "threads_per_block": OccupancyCurve("threads_per_block", t, ot.occupancy, ot.blocks_per_sm, int(threads_per_block)),
        "registers_per_thread": OccupancyCurve("registers_per_thread", r, orr.occupancy, orr.blocks_per_sm,
                                               int(registers_per_thread)),
        "shared_memory_per_block": OccupancyCurve("shared_memory_per_block", d + int(static_shared_bytes), od.occupancy,
                                                  od.blocks_per_sm, int(static_shared_bytes) + int(dynamic_shared_bytes)),
    }
