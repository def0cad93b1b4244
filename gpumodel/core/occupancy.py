"""Occupancy: how many blocks of a kernel fit on one SM, what limits them, as the CUDA runtime computes it.

:func:`occupancy` reproduces ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` for every compute
capability in ``specs/arch/`` (see :mod:`gpumodel.records.arch`), broadcasting over numpy arrays of every
numeric argument. The per-SM block count is the smallest of five limits:

* **warps**: ``max_warps_per_sm // ceil(threads / 32)`` (0 above 1024 threads per block);
* **registers**: registers are handed out per warp in units of 256, and each of the SM's four
  sub-partitions holds ``(registers_per_sm / 4) // regs_per_warp`` warps; a block whose registers,
  with its warps rounded up to a multiple of 4, exceed the per-block register file cannot launch;
* **shared memory**: the block's static + dynamic shared memory plus the driver's per-block
  reservation, rounded up to the allocation unit, divided into the shared-memory carveout the SM is
  configured with: the preferred carveout (percent of the maximum) rounded up to a supported size,
  or the smallest supported size that fits one block if the preference is smaller;
* **blocks**: the resident-block cap of the architecture;
* **barriers** (9.0 and later): barriers per SM over the barriers a block uses (1 by default).

Examples
--------
>>> import gpumodel as gm
>>> r = gm.occupancy("9.0", threads_per_block=256, registers_per_thread=32)
>>> r.blocks_per_sm, r.active_warps, r.occupancy, r.limiter     # 32 x 2048 = 64K registers: full
(8, 64, 1.0, 'warps')
>>> gm.occupancy("h100", threads_per_block=256, registers_per_thread=64).active_threads   # half the threads
1024
>>> r = gm.occupancy("9.0", threads_per_block=128, registers_per_thread=40, dynamic_shared_bytes=48 * 1024)
>>> r.blocks_per_sm, r.limiter, r.shared_memory_per_block      # (48 + 1 reserved) KiB per block in 228 KiB
(4, 'shared_memory', 50176)

References
----------
NVIDIA, ``cuda_occupancy.h`` (CUDA Toolkit 13.0): ``cudaOccMaxActiveBlocksPerMultiprocessor``.
NVIDIA, CUDA C++ Best Practices Guide, "Occupancy"; CUDA C++ Programming Guide, "Shared Memory".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..base.reprs import ResultRecord, plain
from ..base.errors import ArgumentError
from ..vocabulary import bounded_int, broadcastable

from ..records.arch import ArchLimits, arch_limits, compute_capability_of
from ..vocabulary.gpus import gpu as _gpu

__all__ = ["occupancy", "Occupancy", "LIMITERS", "UNLIMITED", "resolve_arch", "carveout_bytes", "preferred_carveout"]

#: Limit reported for a resource the kernel does not use (the runtime's INT_MAX).
UNLIMITED = int(np.iinfo(np.int32).max)

#: Limiter names, in the order the runtime's limiting-factor bits are defined (the first that binds is reported).
LIMITERS = ("warps", "registers", "shared_memory", "blocks", "barriers")


def resolve_arch(gpu_or_cc: Any) -> tuple[ArchLimits, Any]:
    """(ArchLimits, GPUSpec or None) for a GPUSpec, a GPU name, a compute capability or an ArchLimits."""
    if isinstance(gpu_or_cc, ArchLimits):
        return gpu_or_cc, None
    limits = arch_limits(gpu_or_cc)
    gpu = None
    if hasattr(gpu_or_cc, "sm_count"):
        gpu = gpu_or_cc
    elif isinstance(gpu_or_cc, str) and compute_capability_of(gpu_or_cc) is None:
        gpu = _gpu(gpu_or_cc)
    return limits, gpu


def _int_array(name: str, value: Any, low: int, high: int | None, allowed: str) -> np.ndarray:
    """See :func:`gpumodel.vocabulary.bounded_int` (the one check of whole numbers in a range)."""
    return bounded_int(value, name, low, high, allowed)


def _carveout_array(carveout: Any) -> np.ndarray:
    """Carveout preference in percent; None, -1 and NaN mean the runtime's default (-1)."""
    if carveout is None:
        return np.asarray(-1, dtype=np.int64)
    arr = np.asarray(carveout, dtype=object if isinstance(carveout, (list, tuple)) else None)
    if arr.dtype == object:
        arr = np.array([-1 if c is None else c for c in arr.ravel()], dtype=float).reshape(arr.shape)
    if np.issubdtype(arr.dtype, np.floating):
        arr = np.where(np.isnan(arr), -1.0, arr)
    return _int_array("carveout", arr, -1, 100, "a percent 0..100, or None / -1 for the runtime's default")


def carveout_bytes(limits: ArchLimits, requested: np.ndarray) -> np.ndarray:
    """Smallest supported shared-memory carveout >= ``requested`` bytes [bytes] (``cudaOccAlignUpShmemSizeVoltaPlus``).

    Sizes above the largest carveout map to the largest.
    """
    configs = np.asarray(limits.shared_memory_carveouts, dtype=np.int64)
    idx = np.searchsorted(configs, np.asarray(requested, dtype=np.int64), side="left")
    return configs[np.minimum(idx, len(configs) - 1)]


def preferred_carveout(limits: ArchLimits, pct: np.ndarray) -> np.ndarray:
    """The supported carveout [bytes] that ``pct`` percent of the SM's shared memory selects (< 0: the default)."""
    per_sm = limits.shared_memory_per_sm
    size = np.where(pct < 0, per_sm, (pct * per_sm) // 100)
    return carveout_bytes(limits, size)


def _round_up(x: np.ndarray, unit: int) -> np.ndarray:
    return -(-x // unit) * unit


@dataclass(frozen=True, repr=False, eq=False)
class Occupancy(ResultRecord):
    """Result of :func:`occupancy`: resident blocks per SM and the limit that decided them.

    Array-valued fields broadcast over the inputs. Per-resource limits are blocks per SM;
    :data:`UNLIMITED` marks a resource the kernel does not use (no registers, no shared memory).
    """

    compute_capability: str
    threads_per_block: Any
    registers_per_thread: Any
    static_shared_bytes: Any
    dynamic_shared_bytes: Any
    carveout: Any  #: the preference in percent, -1 = runtime default
    blocks_per_sm: Any
    warps_per_block: Any
    active_warps: Any
    active_threads: Any
    occupancy: Any  #: active warps / max warps per SM
    limiter: Any  #: "warps" | "registers" | "shared_memory" | "blocks" | "barriers"
    blocks_by_warps: Any
    blocks_by_registers: Any
    blocks_by_shared_memory: Any
    blocks_by_block_cap: Any
    blocks_by_barriers: Any
    registers_per_block: Any  #: registers allocated to one block
    shared_memory_per_block: Any  #: bytes allocated to one block: static + dynamic + reserved, rounded up
    shared_memory_carveout: Any  #: the SM's shared-memory configuration chosen [bytes]
    max_warps_per_sm: int = 0
    gpu_name: str | None = None
    _scalar: bool = field(default=True)

    @property
    def shape(self) -> tuple[int, ...]:
        return np.shape(self.blocks_per_sm)

    @property
    def limits(self) -> dict[str, Any]:
        """Blocks per SM allowed by each resource alone."""
        return {"warps": self.blocks_by_warps, "registers": self.blocks_by_registers,
                "shared_memory": self.blocks_by_shared_memory, "blocks": self.blocks_by_block_cap,
                "barriers": self.blocks_by_barriers}

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain Python (arrays as lists)."""
        return {k: plain(getattr(self, k)) for k in self.__dataclass_fields__ if not k.startswith("_")}

    def _describe_limit(self, value: int) -> str:
        return "unlimited" if value >= UNLIMITED else str(value)

    def __repr__(self) -> str:
        where = f"{self.gpu_name} (cc {self.compute_capability})" if self.gpu_name else f"cc {self.compute_capability}"
        if self._scalar:
            lim = ", ".join(f"{k} {self._describe_limit(v)}" for k, v in self.limits.items())
            return (f"Occupancy({where}: {self.threads_per_block} threads x {self.registers_per_thread} regs, "
                    f"{self.shared_memory_per_block} B smem/block -> {self.blocks_per_sm} blocks/SM, "
                    f"{self.active_warps}/{self.max_warps_per_sm} warps = {self.occupancy:.0%}, "
                    f"limited by {self.limiter}; blocks by {lim}; carveout {self.shared_memory_carveout // 1024} KiB)")
        occ = np.asarray(self.occupancy)
        names, counts = np.unique(np.asarray(self.limiter), return_counts=True)
        share = ", ".join(f"{n} {c / occ.size:.0%}" for n, c in sorted(zip(names, counts), key=lambda t: -t[1]))
        return (f"Occupancy({where}: {occ.size} configurations {self.shape}, occupancy min {occ.min():.2f} "
                f"mean {occ.mean():.2f} max {occ.max():.2f}; limited by {share})")

    __str__ = __repr__

    def _repr_html_(self) -> str:
        if not self._scalar:
            return f"<pre>{self!r}</pre>"
        rows = [("blocks / SM", self.blocks_per_sm), ("active warps", f"{self.active_warps} / {self.max_warps_per_sm}"),
                ("occupancy", f"{self.occupancy:.1%}"), ("limiter", f"<b>{self.limiter}</b>")]
        rows += [(f"blocks by {k}", self._describe_limit(v)) for k, v in self.limits.items()]
        rows += [("registers / block", self.registers_per_block), ("shared memory / block [B]", self.shared_memory_per_block),
                 ("carveout [KiB]", self.shared_memory_carveout // 1024)]
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{v}</td></tr>" for k, v in rows)
        title = (f"{self.gpu_name or 'cc ' + self.compute_capability}: {self.threads_per_block} threads, "
                 f"{self.registers_per_thread} regs/thread")
        return f"<table><caption>{title}</caption>{body}</table>"


def occupancy(gpu_or_cc: Any, threads_per_block: Any, registers_per_thread: Any, static_shared_bytes: Any = 0,
              dynamic_shared_bytes: Any = 0, carveout: Any = None, *, max_dynamic_shared_bytes: Any = None,
              block_barriers: int = 1) -> Occupancy:
    """Resident blocks per SM, as ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` answers.

    Parameters
    ----------
    gpu_or_cc : GPUSpec, str or ArchLimits
        A GPU record or name ("h100") or a compute capability ("9.0", "sm_86").
    threads_per_block : int or array_like
        Block size [threads], 1..1024.
    registers_per_thread : int or array_like
        Registers per thread as ``cudaFuncGetAttributes`` reports them (``numRegs``), 0..255.
    static_shared_bytes, dynamic_shared_bytes : int or array_like
        Static (``sharedSizeBytes``, at most 48 KiB) and dynamic (launch argument) shared memory per block
        [bytes].
    carveout : int, array_like or None
        ``cudaFuncAttributePreferredSharedMemoryCarveout`` in percent (0..100); None or -1 = default.
    max_dynamic_shared_bytes : int, array_like or None
        The kernel's ``cudaFuncAttributeMaxDynamicSharedMemorySize`` [bytes]; a launch asking for more
        dynamic shared memory gets 0 blocks. None = opted in to the maximum (opt-in limit - static).
    block_barriers : int
        Named barriers a block uses, 0..16 (1 for any kernel described by ``cudaFuncAttributes``).

    Returns
    -------
    Occupancy
        ``blocks_per_sm``, ``active_warps``, ``active_threads``, ``occupancy`` (of the SM's warps),
        ``limiter``, the per-resource limits and the shared-memory carveout chosen [bytes].

    Raises
    ------
    ValueError
        An input that no launch can have: threads_per_block outside 1..1024, registers_per_thread
        outside 0..255, negative sizes, static shared memory above the architecture's static cap (48 KiB),
        NaN, a carveout outside -1..100.

    Notes
    -----
    With :math:`w = \\lceil T/32 \\rceil` warps per block and :math:`r_w = \\lceil 32 R / 256 \\rceil 256`
    registers per warp,

    .. math::

        B = \\min\\Big(\\Big\\lfloor \\frac{W_{SM}}{w} \\Big\\rfloor,\\;
            \\Big\\lfloor \\frac{4 \\lfloor R_{SM} / 4 / r_w \\rfloor}{w} \\Big\\rfloor,\\;
            \\Big\\lfloor \\frac{C}{S} \\Big\\rfloor,\\; B_{max}\\Big)

    where :math:`S` is static + dynamic + reserved shared memory rounded up to the allocation unit
    and :math:`C` the carveout. Launches the runtime refuses (registers of the block beyond the
    per-block file, with warps rounded up to 4; shared memory beyond the opt-in limit or beyond
    ``max_dynamic_shared_bytes``) get 0.
    """
    limits, gpu = resolve_arch(gpu_or_cc)
    T = _int_array("threads_per_block", threads_per_block, 1, limits.max_threads_per_block,
                   f"1..{limits.max_threads_per_block}")
    R = _int_array("registers_per_thread", registers_per_thread, 0, 255, "0..255")
    S = _int_array("static_shared_bytes", static_shared_bytes, 0, None, ">= 0 bytes")
    _static_within_cap(limits, S)
    D = _int_array("dynamic_shared_bytes", dynamic_shared_bytes, 0, None, ">= 0 bytes")
    C = _carveout_array(carveout)
    if max_dynamic_shared_bytes is None:
        M = np.maximum(limits.shared_memory_per_block_optin - S, 0)
    else:
        M = _int_array("max_dynamic_shared_bytes", max_dynamic_shared_bytes, 0, None, ">= 0 bytes")
    block_barriers = bounded_int(block_barriers, "block_barriers", 0, 16,
                                 "0..16 (a block has 16 named barriers, bar.sync 0..15)")
    if np.ndim(block_barriers):
        raise ArgumentError("block_barriers must be one integer >= 0, not an array")
    scalar = all(np.ndim(a) == 0 for a in (T, R, S, D, C, M))
    broadcastable(threads_per_block=T, registers_per_thread=R, static_shared_bytes=S, dynamic_shared_bytes=D,
                  carveout=C, max_dynamic_shared_bytes=M)
    T, R, S, D, C, M = np.broadcast_arrays(T, R, S, D, C, M)
    raw = _limits(limits, T, R, S, D, C, M, int(block_barriers))
    blocks = raw["blocks"]
    warps = raw["warps_per_block"]
    active_warps = blocks * warps
    occ = active_warps / limits.max_warps_per_sm
    limiter = _limiter_names(raw)

    def out(a):
        a = np.asarray(a)
        return a.item() if scalar else a

    return Occupancy(
        compute_capability=limits.compute_capability, threads_per_block=out(T), registers_per_thread=out(R),
        static_shared_bytes=out(S), dynamic_shared_bytes=out(D), carveout=out(C), blocks_per_sm=out(blocks),
        warps_per_block=out(warps), active_warps=out(active_warps), active_threads=out(blocks * T),
        occupancy=out(occ), limiter=out(limiter), blocks_by_warps=out(raw["warps"]),
        blocks_by_registers=out(raw["registers"]), blocks_by_shared_memory=out(raw["shared_memory"]),
        blocks_by_block_cap=out(np.broadcast_to(raw["blocks_cap"], blocks.shape)),
        blocks_by_barriers=out(np.broadcast_to(raw["barriers"], blocks.shape)),
        registers_per_block=out(raw["registers_per_block"]), shared_memory_per_block=out(raw["smem_per_block"]),
        shared_memory_carveout=out(raw["carveout_bytes"]), max_warps_per_sm=limits.max_warps_per_sm,
        gpu_name=getattr(gpu, "name", None), _scalar=scalar,
    )


def _static_within_cap(limits: ArchLimits, static: np.ndarray) -> None:
    """Refuse static shared memory beyond the per-block cap (48 KiB): no such kernel compiles.

    A block gets more only as dynamic shared memory, after the kernel opts in with
    ``cudaFuncAttributeMaxDynamicSharedMemorySize`` (CUDA C++ Programming Guide, "Shared Memory").
    """
    cap = limits.max_static_shared_memory_per_block
    over = static > cap
    if np.any(over):
        first = int(static[over].flat[0])
        raise ArgumentError(f"static_shared_bytes = {first} exceeds the {cap // 1024} KiB ({cap} B) of static shared "
                            f"memory a block can declare (cc {limits.compute_capability}); give the shared memory "
                            f"beyond it as dynamic_shared_bytes (the kernel opts in with "
                            f"cudaFuncAttributeMaxDynamicSharedMemorySize)", argument="static_shared_bytes",
                            value=first, allowed=f"0..{cap} bytes (more as dynamic_shared_bytes)")


def _limits(a: ArchLimits, T, R, S, D, C, M, block_barriers: int) -> dict[str, np.ndarray]:
    """The runtime's per-resource limits (``cudaOccMaxBlocksPerSM*Limit``) on validated int64 arrays."""
    warps = -(-T // a.warp_size)
    by_warps = np.where(T > a.max_threads_per_block, 0, a.max_warps_per_sm // warps)

    # registers: per warp in allocation units; per sub-partition packing; per-block hardware check
    reg_warp = _round_up(R * a.warp_size, a.register_allocation_unit)
    reg_block = reg_warp * warps
    reg_assumed = reg_warp * _round_up(warps, a.warp_allocation_granularity)
    refused = (reg_assumed > a.registers_per_block) | (reg_block > a.registers_per_block) | (R > a.max_registers_per_thread)
    per_partition = a.registers_per_sm // a.sub_partitions_per_sm
    warps_sm = (per_partition // np.maximum(reg_warp, 1)) * a.sub_partitions_per_sm
    by_regs = np.where(refused, 0, np.where(reg_warp > 0, warps_sm // warps, UNLIMITED))

    # shared memory: reservation, allocation unit, opt-in limit, carveout
    reserved = a.reserved_shared_memory_per_block
    static_total = S + reserved
    alloc = _round_up(static_total + D, a.shared_memory_allocation_unit)
    # The driver enforces the kernel's max-dynamic attribute only above the default per-block limit: an
    # attribute set below it does not shrink what a launch may use (measured on sm_90; cuda_occupancy.h
    # would refuse such launches).
    M = np.maximum(M, a.shared_memory_per_block - S)
    max_usage = static_total + M
    per_block_limit = np.where(max_usage > a.shared_memory_per_block, a.shared_memory_per_block_optin,
                               a.shared_memory_per_block) + (reserved if a.major >= 8 else 0)
    smem_refused = (D > M) | (alloc > per_block_limit)
    preferred = preferred_carveout(a, C)
    config = np.where(preferred >= alloc, preferred, carveout_bytes(a, alloc))
    by_smem = np.where(smem_refused, 0, np.where(alloc > 0, config // np.maximum(alloc, 1), UNLIMITED))

    blocks = np.minimum(np.minimum(by_regs, by_smem), np.minimum(by_warps, a.max_blocks_per_sm))
    if a.major >= 9 and a.barriers_per_sm is not None and block_barriers > 0:
        by_bars = a.barriers_per_sm // block_barriers
        blocks = np.minimum(blocks, by_bars)
    else:
        by_bars = UNLIMITED
    return {"blocks": blocks, "warps_per_block": warps, "warps": by_warps, "registers": by_regs,
            "shared_memory": by_smem, "blocks_cap": np.int64(a.max_blocks_per_sm), "barriers": np.int64(by_bars),
            "registers_per_block": reg_block, "smem_per_block": alloc,
            "carveout_bytes": np.where(smem_refused, preferred, config)}


def _limiter_names(raw: dict[str, np.ndarray]) -> np.ndarray:
    blocks = raw["blocks"]
    names = np.full(blocks.shape, LIMITERS[-1], dtype=object)
    decided = np.zeros(blocks.shape, dtype=bool)
    for name, key in zip(LIMITERS, ("warps", "registers", "shared_memory", "blocks_cap", "barriers")):
        hit = (np.broadcast_to(raw[key], blocks.shape) == blocks) & ~decided
        names[hit] = name
        decided |= hit
    return names.astype(str)
