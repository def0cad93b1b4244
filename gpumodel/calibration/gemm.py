"""The calibrated time model of GEMMs (``matmul``, ``bmm``): output tiles in waves over the SMs, split-K and
stream-K, the L2 feed of each tile, and the stream of a skinny product (part of
:mod:`gpumodel.calibration.model`, which re-exports these names; see its notes for the equations).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from gpumodel.core.opcost import OpName

from .predictors import CalibrationModel, Prediction, elem_bytes, farray, predictor, queued, soft_max
from ..records.gpu import UnsupportedDTypeError
from .composite import weight_only_matmul

#: candidate GEMM output tiles (rows x cols), as cuBLAS kernels for Hopper/Ampere use
TILES = ((128, 256), (256, 128), (128, 128), (64, 256), (128, 64), (64, 128), (64, 64))
SPLITS = (1, 2, 4, 8, 16)
#: the fixed edges of the output tiles of cuBLAS's own Hopper kernels (``nvjet_sm90_tst_<rows>x<cols>_...``), whose
#: other edge fits the matrix: any multiple of 8 up to NVJET_MAX_AREA / edge elements (512 at most); the profiler on the
#: H200 shows 64 x 136, 128 x 200, 128 x 288, 192 x 208, 256 x 144, 320 x 64, 512 x 64 among others
NVJET_EDGES = (64, 128, 192, 256)
#: fp32 accumulators of one nvjet tile: two consumer warpgroups of 128 threads, 160 registers each
NVJET_MAX_AREA = 256 * 160
#: the output tiles (rows x cols of C) of the Turing-generation CUTLASS kernels cuBLAS falls back to when an
#: operand is only 2-byte aligned (``cutlass_75_tensorop_*_s1688gemm_*_{128x128,256x128,64x64}_nn_align1`` in the
#: profiler on the H200; cuBLAS's column-major 256 x 128 tile spans 256 columns of PyTorch's row-major C)
TURING_TILES = ((128, 128), (128, 256), (64, 64))
#: the output tile of the CUTLASS ``wmma`` kernels cuBLAS runs small unaligned GEMMs with: on the H200 the profiler
#: shows ``cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_*_align2`` for 4- and 8-byte-aligned bf16,
#: ``cutlass_75_wmma_tensorop_f16_s161616gemm_f16_32x32_*_align1`` for fp16 at any alignment, and
#: ``sm80_xmma_gemm_*_tf32f32_*_tilesize32x32x64`` for 4-byte-aligned tf32 (8-byte-aligned tf32 showed only larger
#: CUTLASS tiles and CUDA-core kernels); a 2-byte-aligned bf16 GEMM has none (Turing's ``wmma`` has no bf16) and runs
#: the 64 x 64 ``s1688gemm`` tile however small
WMMA_TILE = (32, 32)
#: CTAs of a wmma kernel resident on one SM: 128 threads of up to 94 registers (96 allocated: 12288 of the SM's
#: 65536) and up to 37 KB of shared memory in the profiler on the H200: five, whose fixed times overlap
WMMA_CTAS_PER_SM = 5
#: CTAs of a CUTLASS fallback kernel (unaligned operands, and tf32 below 16-byte alignment) resident on one SM at once,
#: by output tile (rows x cols of C): the fewest that the SM's 65536 registers and 228 KB of shared memory allow
#: for the profiled kernels of that tile on the H200 (``cutlass_80_tensorop_*s16816gemm_*_128x128_64x3``: 128
#: threads of 240 registers and 96 KB, two; ``*_64x128_64x3`` / ``*_128x64_64x3``: 154 registers and 72 KB,
#: three; ``*_64x64_32x6`` and Turing's ``s1688gemm_*_64x64``: 88-96 registers and 16-48 KB, four; the 256-thread
#: ``128x256`` / ``256x128`` and the 64 x 256 tiles: one). cuBLAS splits K to fill these slots: its split-K calls
#: run 238-264 128 x 128 CTAs (two an SM): :func:`fill_split`
CUTLASS_CTAS_PER_SM = {(128, 128): 2, (64, 128): 3, (128, 64): 3, (64, 64): 4}
#: GEMM dtypes whose kernels run whole waves of tiles (no stream-K; split-K with a reduce kernel of their own): see
#: :func:`_gemm`
WHOLE_WAVE_DTYPES = ("tf32", "fp32")
#: a GEMM with m, n or k within the largest tile's edge covers that edge with one row (or column) of tiles, so it
#: reads its big operand once and may run as a stream (GEMV, small k, and the decode projections of a served
#: batch: on the H200 a 128 x 24576 x 6144 ``F.linear`` streams its 302 MB of weights at 3.6 TB/s, above the
#: tiled-GEMM traffic rate ``bw_eff_gemm``)
STREAM_MAX_EDGE = max(max(tile) for tile in TILES)
#: a batched GEMM (``bmm``) with an edge at most this may run as a stream: the strided-batched kernels cuBLAS runs
#: for them on the H200 (``nvjet_sm90_tst_256x128_64x4`` / ``128x128_64x6`` in the profiler) cover 128 rows,
#: columns or a whole k of 128 in one tile, so each batch's inputs are read and its output written once
BMM_STREAM_MAX_EDGE = 128


def _flops_param(params: Mapping[str, float], op: Any, gpu: Any = None) -> float:
    """The GEMM rate [FLOP/s] of the op's dtype; refused where the GPU (``gpu``, its record) or the model has none."""
    dt = op.dtype.value if hasattr(op.dtype, "value") else str(op.dtype)
    if dt in ("fp8_e4m3", "fp8_e5m2"):
        dt = "fp8"
    key = f"flops_{dt}"
    if key not in params:
        known = sorted(k[6:] for k in params if k.startswith("flops_") and not k.endswith("_mm"))
        if gpu is not None and hasattr(gpu, "supports") and not gpu.supports(dt):  # the hardware lacks it
            raise unsupported_gemm_dtype(gpu, dt)
        raise UnsupportedDTypeError(f"no GEMM rate for dtype {dt!r} in this model (known: {', '.join(known)}); "
                                    "for a calibrated GPU, calibrated=False gives the datasheet estimate",
                                    argument="dtype", value=dt, allowed=", ".join(known))
    return params[key]


def unsupported_gemm_dtype(gpu: Any, dt: str) -> UnsupportedDTypeError:
    """The error for a GEMM in a number format the GPU has no execution path for, naming the format to use.

    >>> import gpumodel as gm
    >>> print(unsupported_gemm_dtype(gm.gpu("a100"), "fp8"))
    a100-sxm4-80gb has no fp8 tensor-core rate (its datasheet has no fp8 execution path): use bf16 instead
    """
    alt = gpu.instead_of(dt)
    what = " (precision='amp_fp16' for a training step)" if alt == "fp16" and dt == "bf16" else ""
    unit = "tensor-core rate" if dt not in ("fp32", "fp64") else "rate"
    have = ", ".join(k for k, v in gpu.peaks.model_dump().items() if v is not None)
    use = f": use {alt} instead{what}" if alt else f"; it has: {have}"
    return UnsupportedDTypeError(f"{gpu.name} has no {dt} {unit} (its datasheet has no {dt} execution path){use}",
                                 argument="dtype", value=dt, allowed=alt or have)


def _load_alignment(op: Any, k: np.ndarray, n: np.ndarray, e: float) -> np.ndarray:
    """The widest load [bytes] a GEMM's operands allow: the largest of 2, 4, 8, 16 dividing ``k*e`` and ``n*e``.

    ``k*e`` and ``n*e`` are the leading dimensions (in bytes) of row-major A, B and C. CUDA-core fp32
    GEMMs load 4-byte words and count as aligned (16).

    >>> from gpumodel import ops
    >>> [int(_load_alignment(ops.matmul(8, n, 4096, "bf16"), 4096.0, float(n), 2.0)) for n in (4096, 4100, 4098, 4097)]
    [16, 8, 4, 2]
    """
    if op.unit != "tensor" or (op.dtype.value if hasattr(op.dtype, "value") else str(op.dtype)) == "fp32":
        return np.full(np.broadcast(k, n).shape, 16.0)
    kb, nb = np.rint(k * e).astype(np.int64), np.rint(n * e).astype(np.int64)
    g = np.gcd(np.gcd(kb, nb), 16)
    return np.maximum(g, 1).astype(float)


def _fitted_edge(size: np.ndarray, cap: float) -> np.ndarray:
    """The tile edge that covers ``size`` in the fewest tiles of at most ``cap``, evenly, rounded up to 8.

    >>> [int(_fitted_edge(np.float64(x), 256.0)) for x in (288, 320, 1000, 64)]
    [144, 160, 256, 64]
    """
    count = np.ceil(size / cap)
    return np.ceil(size / count / 8.0) * 8.0


def fill_split(base_tiles: np.ndarray, slots: Any, sm_count: float) -> np.ndarray:
    """The split-K factor that fills every CTA slot of the GPU once: ``floor(P * slots / tiles)``, at least 1.

    cuBLAS splits the k-loop of its CUTLASS fallback kernels (unaligned operands, fp32 data) this way: on
    the H200 (132 SMs) the profiler shows 238-264 CTAs of the 128 x 128 tile (two an SM) and 120-132 of the
    one-an-SM 128 x 256 tiles in its split-K calls. ``base_tiles`` are the output tiles before the split,
    ``slots`` the CTAs of the kernel an SM holds at once (:data:`CUTLASS_CTAS_PER_SM`). It matches the profiled
    split within one in 215 of the 244 profiled split-K calls of tiles 128 wide or more; the 64-wide tiles split
    less predictably (the model keeps the powers of two beside it).

    >>> [int(fill_split(np.float64(t), 2, 132)) for t in (27, 15, 9, 300)]    # 128 x 128: 264 slots
    [9, 17, 29, 1]
    """
    return np.maximum(np.floor(sm_count * np.asarray(slots, dtype=float) / base_tiles), 1.0)


def _rate(p: Mapping[str, float], op: Any, align: np.ndarray, e: float, gpu: Any = None) -> np.ndarray:
    """The tensor-core rate [FLOP/s] of a GEMM's kernel generation, chosen by its operands' alignment
    (``align``: :func:`_load_alignment`, bytes; ``e``: bytes per element).

    On Hopper, cuBLAS runs its own (TMA, wgmma) kernels only for 16-byte-aligned operands. Otherwise the
    profiler on the H200 shows CUTLASS kernels of older generations: ``cutlass_80_tensorop_*s16816gemm``
    (Ampere's ``mma.m16n8k16``) when both leading dimensions are multiples of 4 or 8 bytes, and
    ``cutlass_75_tensorop_*s1688gemm`` (Turing's ``mma.m16n8k8``) when one is only 2-byte aligned, at about
    a third and a sixth of the aligned rate. The 16-bit rates are ``unaligned_flops_wide`` and
    ``unaligned_flops``; tf32 data (4-byte elements, never 2-byte aligned) runs Ampere's tf32 kernels at
    ``unaligned_flops_wide`` times the ratio of the aligned tf32 and bf16 rates (the tensor cores' rate
    ratio of the two types).
    """
    full = _flops_param(p, op, gpu)
    wide = p.get("unaligned_flops_wide", p["unaligned_flops"])
    if e == 4.0:
        wide = wide * p.get("flops_tf32", full) / p.get("flops_bf16", full)
        return np.where(align >= 16, full, np.minimum(full, wide))
    return np.where(align >= 16, full, np.minimum(full, np.where(align >= 4, wide, p["unaligned_flops"])))


def _gemm(model: CalibrationModel, op: Any) -> Prediction:
    p, P = model.params, float(model.sm_count)
    s = op.shape
    m, n, k = farray(s["m"]), farray(s["n"]), farray(s["k"])
    batch = farray(s.get("batch", 1.0))
    e = elem_bytes(op)
    align = _load_alignment(op, k, n, e)
    rate = _rate(p, op, align, e, model.gpu) / P
    # the older kernels an unaligned GEMM falls back to do not overlap a tile's prologue and epilogue with
    # the previous tile's math (no TMA, no warp specialisation): their own fixed time per tile
    overhead = np.where(align >= 16, p["tile_overhead_s"],
                        p.get("unaligned_tile_overhead_s", p["tile_overhead_s"]))
    feed = p["l2_bandwidth"] / P
    bytes_min = farray(op.bytes)
    best = best_c = best_m = best_par = None
    # fp32-data GEMMs (tf32 on tensor cores, fp32 on CUDA cores) run as whole waves of output tiles:
    # the H200's tf32 times step with the waves of 128 x 128 tiles at one rate (1024^3: 1 wave of 64
    # tiles, 1536^3: 2 waves of 144, 2048^3: 2 of 256), no stream-K evening them out; where they split K,
    # a reduce kernel of their own sums the partials (the profiler: 24 of 56 unaligned tf32 calls)
    dt = op.dtype.value if hasattr(op.dtype, "value") else str(op.dtype)
    cutlass_only = dt in WHOLE_WAVE_DTYPES
    # (a parameter set without the wmma kernels' fixed time has no wmma candidate)
    candidates = [(tm, tn, "cutlass") for tm, tn in TILES]
    if "wmma_tile_overhead_s" in p:
        candidates.append((*WMMA_TILE, "wmma"))
    if not cutlass_only:  # cuBLAS's own Hopper tiles, one edge fitted to the matrix
        for edge in NVJET_EDGES:
            cap = min(512.0, NVJET_MAX_AREA / edge)
            candidates += [(float(edge), _fitted_edge(n, cap), "nvjet"), (_fitted_edge(m, cap), float(edge), "nvjet")]
    # split-K: the CUTLASS kernels of unaligned operands (and every fp32-data GEMM) reduce in a kernel of their own
    own_reduce = (align < 16) | cutlass_only
    for tm, tn, family in candidates:
        # the operands a tile's kernel serves: a fitted nvjet tile aligned ones only; 2-byte-aligned operands only
        # the Turing CUTLASS tiles
        runs = (align >= 16) if family == "nvjet" else np.logical_not((align < 4) & ((tm, tn) not in TURING_TILES))
        tile_over, resident, tile_rate = overhead, 1.0, rate
        # CTA slots of an SM for the split-K choice: a CUTLASS fallback holds as many CTAs as its registers and
        # shared memory allow (CUTLASS_CTAS_PER_SM), the aligned kernels one
        slots = float(CUTLASS_CTAS_PER_SM.get((tm, tn), 1)) if family == "cutlass" else 1.0
        if family == "wmma":  # unaligned operands only (no bf16 at 2 bytes), at a rate and fixed time of their own,
            # with WMMA_CTAS_PER_SM tiles resident on an SM at once (their fixed times overlap)
            runs = (align < 16) & {"bf16": align >= 4, "tf32": align == 4}.get(dt, True)
            tile_over, resident = p["wmma_tile_overhead_s"], float(WMMA_CTAS_PER_SM)
            tile_rate = np.minimum(rate, p["wmma_flops"] / P)
            slots = resident
        base_tiles = batch * np.ceil(m / tm) * np.ceil(n / tn)
        # the CUTLASS fallbacks' tiles run concurrently on an SM, and the SM reaches its rate only with
        # ``unaligned_sm_fill`` four-warp CTAs (eight-warp 128 x 256 tiles count twice): fewer tiles an SM
        # (few tiles, or one wave) leave it short of its rate; cuBLAS splits K to fill it (the profiled split-K
        # calls hold a median 1.9 four-warp or 1.3 eight-warp CTAs an SM)
        fill = np.where(align >= 16, 1.0, p.get("unaligned_sm_fill", 1.0) * np.where(tm * tn >= 128 * 256, 0.5, 1.0))
        # split-K factors: the powers of two, and for the kernels of unaligned or fp32 data the one that fills
        # every CTA slot of the SMs once (cuBLAS's choice in the profiler: 3, 5, 6, 7, 9, 11, 13, 17, 22 ...)
        filled = np.where((align < 16) | cutlass_only, fill_split(base_tiles, np.where(align < 16, slots, 1.0), P), 1.0)
        for split in (*SPLITS, filled):
            fixed_split = np.ndim(split) == 0 and split > 1
            if fixed_split and np.all(base_tiles >= P):
                continue
            if np.ndim(split) > 0 and np.all(split <= 1):
                continue
            split = np.asarray(split, dtype=float)
            split_many = split > 1
            tiles = base_tiles * split
            waves = np.ceil(tiles / P)
            ks = np.ceil(k / split)
            t_work = np.maximum(2.0 * tm * tn * ks / tile_rate, (np.minimum(tm, m) + np.minimum(tn, n)) * ks * e / feed)
            t_tile = tile_over + t_work
            t_c = np.ceil(tiles / (P * resident)) * tile_over + np.maximum(waves, fill) * t_work
            extra = np.where(split_many, 8.0 * batch * m * n * split, 0.0)
            bw = np.minimum(p["bandwidth"] * p.get("bw_eff_gemm", 1.0), np.minimum(tiles, P) * p["sm_bandwidth"])
            t_m = (bytes_min + extra) / bw
            # split-K: the partial sums' fix-up; the CUTLASS kernels of unaligned operands reduce them in a
            # kernel of their own (``cublasLt::splitKreduce_kernel`` in the profiler): one more launch
            # (that kernel reads the fp32 partials and writes the output after the GEMM: its traffic adds)
            reduce_s = batch * m * n * (4.0 * split + e) / p["bandwidth"]
            fixup = np.where(split_many, p["split_overhead_s"] + np.where(own_reduce, reduce_s, 0.0), 0.0)
            kernels = np.where(split_many & own_reduce, 2.0, 1.0) * np.ones_like(align)
            t = soft_max(t_c, t_m, p["overlap_p"]) + fixup
            t = np.where(runs, t, np.inf)
            if fixed_split:   # no fixed split-K where the tiles fill the SMs, element by element as for one GEMM
                t = np.where(base_tiles >= P, np.inf, t)
            par = tiles / (waves * P)
            # (the reduce kernel's launch, queued behind the GEMM's, is priced with the launches below)
            t = t + (queued(p, kernels) - p["launch_s"])
            cands = [(t, t_c, t_m, par, kernels)]
            if split.ndim == 0 and split == 1 and not cutlass_only:  # stream-K: the k-loops shared evenly by all SMs,
                # plus a fix-up pass
                # (cuBLAS's own Hopper kernels only: the CUTLASS fallbacks of unaligned operands run whole tiles)
                t_c2 = base_tiles / P * t_tile
                t2 = np.where(runs & (align >= 16), soft_max(t_c2, t_m, p["overlap_p"]) + p["split_overhead_s"], np.inf)
                cands.append((t2, t_c2, t_m, np.ones_like(t2), np.ones_like(t2)))
            for t, t_c, t_m, par, kern in cands:
                if best is None:
                    best, best_c, best_m, best_par, best_k = t, t_c, t_m, par, kern
                else:
                    take = t < best
                    best = np.where(take, t, best)
                    best_c, best_m = np.where(take, t_c, best_c), np.where(take, t_m, best_m)
                    best_par, best_k = np.where(take, par, best_par), np.where(take, kern, best_k)
    # a skinny product (m, n or k within one tile edge) reads its big operand (or writes its output) once: a stream
    # at its own rate, or its math at the full rate, plus a fixed time (cuBLAS's GEMV and small-k kernels)
    if "stream_overhead_s" in p:  # (records fitted before this candidate existed lack its parameters)
        edge = BMM_STREAM_MAX_EDGE if op.name == "bmm" else STREAM_MAX_EDGE
        # the streaming kernels are Hopper's own (16-byte loads); unaligned operands get the CUTLASS tiles, except a
        # GEMV (m or n of 1), whose kernel reads element by element anyway
        # (fp32-data GEMMs have no such kernel: cuBLAS tiles them however thin, GEMVs aside)
        streams = (np.minimum(np.minimum(m, n), k) <= edge) & ((align >= 16) | (np.minimum(m, n) <= 1))
        streams = streams & (not cutlass_only or np.minimum(m, n) <= 1)
        t_v = np.where(streams,
                       p["stream_overhead_s"] + np.maximum(bytes_min / (p["bandwidth"] * p["bw_eff_stream"]),
                                                           farray(op.flops) / (rate * P)), np.inf)
    else:
        t_v = np.full_like(best, np.inf)
    take = t_v < best
    best, best_m = np.where(take, t_v, best), np.where(take, t_v, best_m)
    best_c, best_par = np.where(take, 0.0, best_c), np.where(take, 1.0, best_par)
    best_k = np.where(take, 1.0, best_k)
    launch = queued(p, best_k) * np.ones_like(best)
    return Prediction(p["launch_s"] + best, best_c, best_m, launch, best_par, kernels=best_k)


@predictor(OpName.MATMUL, OpName.BMM)
def _matmul(model: CalibrationModel, op: Any) -> Prediction:
    if op.shape.get("weight_dtype") is not None:
        return weight_only_matmul(model, op)
    return _gemm(model, op)
