"""The fitted efficiency model: time of one kernel from its :class:`~gpumodel.ops.OpCost` (numpy only).

A datasheet roofline is a ceiling; a kernel runs slower because (1) the achievable tensor
and memory rates are below the datasheet's (clocks drop under sustained load: a power limit),
(2) a GEMM is cut into output tiles spread over the SMs in whole *waves* (133 tiles on 132 SMs
take two tile times) unless the library splits the k-loop (split-K, stream-K) at the price of a
fix-up pass, (3) a tile streams its operands from L2/shared memory at a finite rate per SM, so
small tiles cannot reach the tensor-core rate, (4) operands whose rows are not multiples of 16
bytes cannot use the vectorized (TMA) kernels, (5) every launch costs a fixed time, (6) a few
SMs cannot pull the whole memory bandwidth, (7) a row-wise kernel (softmax, norms,
reductions) works on a row per block, so a few long rows keep a few SMs busy, and (8) PyTorch
picks the softmax and sum kernels by row length (:mod:`gpumodel.calibration.kernels`): a
thread that keeps one 16-byte load in flight needs one memory latency per load, so a row that
gives each thread many loads is latency-bound however few bytes it has. The model has a
named parameter per mechanism (:data:`PARAMETERS`); its values are fitted to measurements
(:mod:`gpumodel.calibration.fit`) or, for a GPU with no calibration, set from the datasheet with
the default efficiencies of :data:`DEFAULT_EFFICIENCY`. Times are those of a kernel timed the way
``triton.testing.do_bench`` times it (L2 flushed before each run, median).

Notes
-----
GEMM (``matmul``, ``bmm``), for each candidate tile :math:`T_m \\times T_n` (:data:`TILES`) and
split-K factor :math:`s` (:data:`SPLITS`), with :math:`P` SMs, :math:`R` the achievable FLOP/s of
the dtype (capped at :math:`R_u` when operands are not 16-byte aligned) and :math:`B_{L2}` the
operand-feed bandwidth:

.. math::

    N = b \\lceil m/T_m \\rceil \\lceil n/T_n \\rceil s, \\quad
    W = \\lceil N / P \\rceil, \\quad k_s = \\lceil k/s \\rceil

    t_{tile} = t_0 + \\max\\left(\\frac{2 T_m T_n k_s}{R / P},
               \\frac{(\\min(T_m, m) + \\min(T_n, n)) k_s e}{B_{L2} / P}\\right)

    t_c = W t_{tile}, \\quad t_m = \\frac{Q + [s>1]\\, 8 b m n s}{\\min(\\epsilon_g B, \\min(N, P) B_{SM})}

    t = t_{launch} + \\min\\left(\\min_{T, s} \\left[(t_c^p + t_m^p)^{1/p} + [s>1]\\, t_{split}\\right],\\
        t_{stream} + \\max\\left(\\frac{Q}{\\epsilon_s B}, \\frac{2bmnk}{R}\\right)\\right)

with :math:`e` bytes per element, :math:`Q` the op's minimal traffic, :math:`B` the achievable
memory bandwidth, :math:`\\epsilon_g` the rate of a tiled GEMM's traffic, :math:`B_{SM}` what one
SM can pull and :math:`p` the sharpness of the compute/memory overlap. A stream-K candidate
replaces :math:`W` by :math:`N/P` (work shared evenly) and pays :math:`t_{split}`. The last
candidate exists only for a skinny product (:math:`\\min(m, n, k) \\le 64`, one tile edge: a
batched decode GEMV, a projection of a few tokens, a small-k product): its big operand (or its
output) is then touched exactly once, so cuBLAS's GEMV and small-k kernels run as one stream at
their own rate :math:`\\epsilon_s B` plus a fixed time :math:`t_{stream}`, unless the math at the
full rate takes longer (fp32-data GEMMs have no such kernel: cuBLAS tiles them). Besides the tiles of
:data:`TILES`, aligned 16-bit and fp8 GEMMs may take cuBLAS's own Hopper tiles, whose one edge (64, 128, 192,
256) is fixed and whose other fits the matrix (:data:`~gpumodel.calibration.gemm.NVJET_EDGES`). Memory-bound ops (elementwise, norms, cross entropy):

.. math::

    t = t_{launch} + \\max_q\\left(\\frac{Q}{\\epsilon_f \\alpha B},\\ \\frac{F}{R_v},\\
        \\max\\left(1, \\frac{r}{P \\rho_f}\\right)\\left(\\tau + \\frac{c}{\\alpha v_f}\\right)\\right)

(for the norms the row term joins through the wave pipeline :math:`P_W` below, sharpness :math:`q_n`) with :math:`\\epsilon_f` the family's bandwidth efficiency, :math:`\\alpha` its rate factor for
rows that are not 16-byte multiples (1 otherwise), :math:`R_v` the CUDA-core rate of the op's
FLOPs, :math:`r` rows of :math:`c` elements, :math:`\\rho_f` rows in flight per SM,
:math:`\\tau` a fixed time per row, :math:`v_f` the rate at which one block works through a row and
:math:`\\max_q` the soft maximum of sharpness :math:`q`. PyTorch's generic elementwise kernel (strided or
broadcast operands) issues an index decomposition per element and an offset and access per operand, beside the
element's arithmetic; its loads overlap the traffic only partly:

.. math::

    t_{strided} = t_{launch} + t_{s} + \\max_{q_s}\\left(\\frac{Q}{\\epsilon B},\\
        \\frac{n}{E_s} + \\frac{n\\,o}{E_o} + \\frac{F}{R_v}\\right)

with :math:`n` elements, :math:`o` operands (inputs and outputs; ``shape["operands"]`` where bytes stand for
tensors), :math:`E_s` and :math:`E_o` the element and operand rates and :math:`t_s` its extra fixed time. Softmax and sum, with :math:`L` the
memory latency of one load step, :math:`\\tau_b` the fixed time of a block (its reductions),
:math:`s` the 16-byte loads per thread and pass, :math:`\\pi` the passes over global memory and
:math:`k` the kernel (:func:`~gpumodel.calibration.kernels.softmax_plan`,
:func:`~gpumodel.calibration.kernels.sum_plan`):

.. math::

    t_{lat} = [\\text{shared rows}]\\lceil n_b/P \\rceil \\tau_s + [\\text{own rows}]\\, W_b \\tau_w + W_b s L_s
        + [\\text{split rows}]\\, t_{global}, \\quad
    W_b = \\lceil n_b / (P \\beta) \\rceil

    t_{sum} = t_{launch} + \\max\\left(\\frac{Q}{\\epsilon B}, t_{lat}\\right)
        + \\frac{1}{W_b} \\min\\left(\\frac{Q}{\\epsilon B}, t_{lat}\\right)

    t_{softmax} = t_{launch} + P_{W_k}\\left(\\max_{q_r}\\left(\\frac{Q}{\\epsilon B},\\ \\frac{r\\,c_k}{E_k}\\right),\\
        W_k (\\tau_b + \\ell_k)\\right), \\quad
    P_W(a, b) = \\max(a, b) + \\frac{\\max_q(a, b) - \\max(a, b)}{W}

with :math:`n_b` blocks, :math:`\\beta` blocks resident per SM, :math:`\\tau_s` and :math:`L_s` the
sum's block time and load step. Blocks whose warps share a row end in a block-wide reduction, and an
SM works through those one after another (:math:`\\tau_s` per block); blocks whose warps each own a
row (short rows, e.g. 128 columns) reduce with warp shuffles only, which overlap across the resident
blocks: :math:`\\tau_w` per wave. The sum is a two-stage pipeline over its :math:`W_b` waves of
blocks (:math:`W_b \\max(a, b) + \\min(a, b)` for per-wave times :math:`a, b`): within one wave a
thread's dependent loads queue behind the stream (the two add up), while from wave to wave the
latency of one wave hides behind the streaming of the next, so a sum of many waves streams at the
full read rate (4.1-4.25 TB/s on the H200, above the copy rate: a read-only stream has no
read/write turnarounds); blocks whose warps own short rows take the larger of that and the
soft maximum (sharpness :math:`q_s`) of the two, since each wave's loads queue behind its own
short fixed work, :math:`E_k` the element rate of
kernel :math:`k` over :math:`c_k` elements a row (the warp-per-row kernel: :math:`c`; the register
kernel: :math:`1024 \\lceil c/1024 \\rceil`, padding included; the block kernels: :math:`c`),
:math:`W_k` the waves of rows (warp kernel: :math:`\\max(1, r / P\\rho)`; 1024-thread kernels:
:math:`\\lceil r / 2P \\rceil`) and :math:`\\ell_k` a row's serial work (warp kernel: the
:math:`2^{\\lceil \\log_2 c \\rceil}/32` elements of a lane times a step; register kernel: its
registers times a step; block kernels: :math:`\\pi s L`). Flash attention, with
:math:`N = b h \\lceil s/128 \\rceil` tiles, :math:`F` FLOPs and :math:`S` score elements (halved when
causal), per direction :math:`d \\in \\{fwd, bwd\\}`:

.. math::

    t = n_k t_{launch} + \\max\\left(\\frac{\\lceil N/P \\rceil P}{N} \\max_{p_a}\\left(\\frac{F}{R_d},
        \\frac{S}{R_{s,d}}\\right) + \\lceil N/P \\rceil t_{0,d},\\ \\frac{Q}{B}\\right)

with :math:`N` the tiles after FlashAttention's split of the keys (decode, short prefills) and
:math:`B` capped by what the busy SMs can pull; see :mod:`gpumodel.calibration.attention`. Ops
PyTorch runs as several kernels (naive attention, cross-entropy, embedding backward, the fused
AdamW step, KV-cache writes, weight-only GEMMs) are the sums of their kernels' times
(:mod:`gpumodel.calibration.composite`). Each op name has one model, registered with
:func:`predictor`; :func:`predict` looks it up.

References
----------
S. Williams, A. Waterman, D. Patterson, "Roofline: an insightful visual performance model for
multicore architectures", CACM 52(4), 2009. NVIDIA, "Matrix Multiplication Background User's
Guide" (tile and wave quantization), docs.nvidia.com/deeplearning/performance, 2023.
M. Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense Matrix-Matrix
Multiplication on the GPU", PPoPP 2023. T. Dao, "FlashAttention-2", 2023.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from gpumodel.opcost import OpName

from .kernels import MAX_THREADS_PER_SM, SMEM_PER_BLOCK, softmax_plan, sum_plan
from .parameters import (DEFAULT_EFFICIENCY, GEMM_DTYPES, NORM_PASS_THREADS, PARAMETERS, ROW_FAMILIES,
                         default_parameters)

__all__ = [
    "CalibrationModel", "Prediction", "PARAMETERS", "DEFAULT_EFFICIENCY", "GEMM_DTYPES", "ROW_FAMILIES",
    "default_parameters", "predict", "predictor", "predicted_ops",
]



@dataclass(frozen=True)
class CalibrationModel:
    """A GPU's named model parameters (see :data:`PARAMETERS`), its SM count and its record.

    ``gpu`` is the :class:`~gpumodel.hardware.GPUSpec` (or its name) the model describes; the
    launch limits the kernel plans need (resident threads per SM, shared memory per block) are
    read from it and its architecture record. Without one, those of sm_70..sm_90 data-center
    GPUs are used (:data:`~gpumodel.calibration.kernels.MAX_THREADS_PER_SM`,
    :data:`~gpumodel.calibration.kernels.SMEM_PER_BLOCK`).
    """

    params: Mapping[str, float]
    sm_count: int
    calibrated: bool = True
    name: str = ""
    #: what the parameters were fitted to: op names, and ``"matmul:<dtype>"`` for GEMM dtypes;
    #: empty means "everything" for a calibrated model
    measured: frozenset = frozenset()
    gpu: Any = None

    def __post_init__(self) -> None:
        bad = [k for k, v in self.params.items() if not (np.isfinite(v) and v > 0)]
        if bad:
            raise ValueError(f"model parameters must be finite and > 0: {', '.join(bad)}")
        if int(self.sm_count) < 1:
            raise ValueError(f"sm_count must be >= 1, got {self.sm_count!r}")
        if isinstance(self.gpu, str):  # a name: the catalog's record, or none for a GPU the catalog lacks
            from gpumodel.errors import GpumodelError
            from gpumodel.vocabulary import resolve_gpu

            try:
                object.__setattr__(self, "gpu", resolve_gpu(self.gpu))
            except GpumodelError:
                object.__setattr__(self, "gpu", None)

    def replace(self, **params: float) -> "CalibrationModel":
        return CalibrationModel({**self.params, **params}, self.sm_count, self.calibrated, self.name, self.measured,
                                self.gpu)

    def sustained(self) -> "CalibrationModel":
        """The model of work that keeps the GPU busy for seconds (a training step): every compute rate
        (:data:`~gpumodel.calibration.sustained.COMPUTE_RATE_PREFIXES`) divided by ``sustained_slowdown``,
        the power limit's toll on the SM clock; memory rates unchanged. A model without it is returned as is.

        >>> m = CalibrationModel({"launch_s": 4e-6, "bandwidth": 4e12, "flops_bf16": 7e14,
        ...                       "sustained_slowdown": 1.25}, 132)
        >>> s = m.sustained().params
        >>> s["flops_bf16"] / 1e12, s["bandwidth"] / 1e12, s["sustained_slowdown"]
        (560.0, 4.0, 1.0)
        """
        from .sustained import COMPUTE_RATE_PREFIXES

        slow = float(self.params.get("sustained_slowdown", 1.0))
        if slow == 1.0:
            return self
        rates = {k: v / slow for k, v in self.params.items() if k.startswith(COMPUTE_RATE_PREFIXES)}
        return self.replace(**rates, sustained_slowdown=1.0)

    @property
    def threads_per_sm(self) -> int:
        """Resident threads per SM (the GPU record's ``max_threads_per_sm``)."""
        return int(self.gpu.max_threads_per_sm) if self.gpu is not None else MAX_THREADS_PER_SM

    @property
    def smem_per_block(self) -> int:
        """Default shared memory per block [byte] (the architecture record's ``shared_memory_per_block``)."""
        if self.gpu is None or not self.gpu.compute_capability:
            return SMEM_PER_BLOCK
        from gpumodel.arch import arch_limits

        try:
            return int(arch_limits(self.gpu).shared_memory_per_block)
        except Exception:  # noqa: BLE001 - an architecture without a record keeps the common default
            return SMEM_PER_BLOCK

    def covers(self, op: Any) -> bool:
        """Whether this op's family (and, for GEMMs, dtype) was among the measured kernels."""
        if not self.calibrated:
            return False
        if not self.measured:
            return True
        if op.name in ("matmul", "bmm"):
            dt = op.dtype.value if hasattr(op.dtype, "value") else str(op.dtype)
            return op.name in self.measured and f"matmul:{dt}" in self.measured
        if op.name == "fused":
            return False  # no fused kernel was measured; its parts' parameters are used as they are
        return op.name in self.measured


@dataclass(frozen=True)
class Prediction:
    """Model time of an op [s] and its parts (all broadcast arrays or floats)."""

    time_s: Any
    compute_s: Any
    memory_s: Any
    overhead_s: Any
    parallelism: Any = 1.0  # fraction of the SMs' tile slots doing useful work (wave efficiency)
    extra: Mapping[str, Any] = field(default_factory=dict)
    kernels: Any = 1.0      # GPU kernels one call launches (queued back to back: :func:`queued`)


def _f(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=float)


def _bpe(op: Any) -> float:
    from gpumodel.dtypes import bytes_per_element

    return float(bytes_per_element(op.dtype))


def queued(p: Mapping[str, float], kernels: Any) -> Any:
    """Launch time [s] of ``kernels`` kernels of one call queued back to back: ``launch_s`` for the first,
    ``kernel_gap_s`` for each other (records fitted without the gap: ``launch_s`` each).

    >>> round(float(queued({"launch_s": 4e-6, "kernel_gap_s": 1e-6}, 3)) * 1e6, 9)
    6.0
    """
    kernels = np.asarray(kernels, dtype=float)
    return p["launch_s"] + np.maximum(kernels - 1.0, 0.0) * p.get("kernel_gap_s", p["launch_s"])


def _soft_max(a: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
    hi = np.maximum(a, b)
    hi = np.where(hi > 0, hi, 1.0)
    return hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


def _waves(blocks: np.ndarray, per_sm: Any, P: float) -> np.ndarray:
    return np.ceil(np.maximum(blocks, 1.0) / (P * per_sm))


def _row_kernel(model: CalibrationModel, op: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Softmax or sum beside the traffic: the latency of the rows in flight, the element rate and the waves.

    Returns ``(t_lat, t_rate, waves)``: the latency-bound time, the element-rate time (0 for the sum)
    and the waves of resident blocks (or, for the warp softmax, of rows) the kernel goes through.
    """
    p, P = model.params, float(model.sm_count)
    rows, cols, e = _f(op.shape["rows"]), _f(op.shape["cols"]), _bpe(op)
    L, tau = p["mem_latency_s"], p["block_sync_s"]
    if op.name == "reduce_sum":
        k = sum_plan(rows, cols, e, model.sm_count, model.threads_per_sm)
        per_sm = np.minimum(4.0, np.floor(model.threads_per_sm / k["threads"]))  # __launch_bounds__(nt, 4)
        waves = _waves(k["blocks"], per_sm, P)
        # warps sharing a row end in a block-wide reduction, and an SM works through those one after another
        # while the loads of its resident blocks overlap; warps owning a row each reduce with shuffles, and
        # a wave of such blocks costs one shuffle tree
        serial = np.where(k["split"], np.ceil(k["blocks"] / P) * p.get("sum_block_s", tau),
                          waves * p.get("sum_warp_s", 0.0))
        t_lat = (serial + waves * k["steps"] * p.get("sum_step_s", L)
                 + np.where(k["ctas"] > 1, p["global_reduce_s"], 0.0))
        return t_lat, 0.0 * t_lat, waves
    k = softmax_plan(rows, cols, e, model.smem_per_block)
    per_sm = model.threads_per_sm / 1024.0
    warp_waves = np.maximum(rows / (P * p["rows_per_sm_softmax"]), 1.0)
    block_waves = _waves(rows, per_sm, P)
    t_warp = warp_waves * (tau + k["lane_elems"] * p["softmax_warp_step_s"])
    t_reg = block_waves * (tau + k["regs"] * p["softmax_reg_step_s"])
    t_block = block_waves * (tau + k["passes"] * k["steps"] * L)
    t_lat = np.where(k["warp"], t_warp, np.where(k["reg"], t_reg, t_block))
    t_rate = np.where(k["warp"], rows * cols / p["elem_rate_softmax_warp"],
                      np.where(k["reg"], rows * k["regs"] * 1024.0 / p["elem_rate_softmax_reg"],
                               rows * cols / p["elem_rate_softmax_block"]))
    return t_lat, t_rate, np.where(k["warp"], warp_waves, block_waves)


def _pipeline(a: np.ndarray, b: np.ndarray, q: float, waves: np.ndarray) -> np.ndarray:
    """Traffic ``a`` and latency ``b`` of a kernel of ``waves`` waves of blocks.

    Within one wave the two overlap partly (the soft maximum of sharpness ``q``); from wave to wave
    the latency of one wave hides behind the streaming of the next, so only ``1/waves`` of that
    partial overlap remains: ``max(a, b) + (softmax_q(a, b) - max(a, b)) / waves``.
    """
    hi = np.maximum(a, b)
    return hi + (_soft_max(a, b, q) - hi) / np.maximum(waves, 1.0)


def _norm_reread_s(model: CalibrationModel, op: Any, eff: Any) -> Any:
    """Extra time [s] of a norm's two-kernel path reading its input a second time: the second read finds it in
    L2 as far as L2 holds it, the rest comes from memory again (30058 x 5259 bf16 runs at 0.9 TB/s of traffic
    counted once); none for a model without its GPU's L2 size."""
    l2 = getattr(model.gpu, "l2_bytes", None)
    if not l2:
        return 0.0
    x = _f(op.shape["rows"]) * _f(op.shape["cols"]) * _bpe(op)
    return np.maximum(x - l2, 0.0) / (model.params["bandwidth"] * eff)


def _norm_two_pass_rows_s(model: CalibrationModel, rows: Any, cols: Any) -> Any:
    """Row time [s] of a norm's two-kernel path: each kernel gives a row a block of NORM_PASS_THREADS threads
    and walks it element by element (``norm_<kernel>_row_s`` plus ``cols / row_rate_norm_<kernel>`` a row, as many
    rows an SM as its blocks fit); the two passes' times add."""
    p, P = model.params, float(model.sm_count)
    total = 0.0
    for k, threads in NORM_PASS_THREADS.items():
        per_sm = np.floor(model.threads_per_sm / threads)
        total = total + np.maximum(rows / (P * per_sm), 1.0) * (p[f"norm_{k}_row_s"] + cols / p[f"row_rate_norm_{k}"])
    return total


def _memory_bound(model: CalibrationModel, op: Any) -> Prediction:
    p, P = model.params, float(model.sm_count)
    fam = op.name if f"bw_eff_{op.name}" in p else "elementwise"
    if fam in ("softmax", "reduce_sum") and "rows" in op.shape:
        t_m = _f(op.bytes) / (p["bandwidth"] * p[f"bw_eff_{fam}"])
        t_lat, t_rate, waves = _row_kernel(model, op)
        q = p["row_overlap_p"]
        if fam == "reduce_sum":  # a two-stage pipeline over W waves: W max(a, b) + min(a, b)
            body = np.maximum(t_m, t_lat) + np.minimum(t_m, t_lat) / waves
            if "sum_overlap_p" in p:  # warps owning short rows: a wave's loads queue behind its fixed work
                own = ~sum_plan(_f(op.shape["rows"]), _f(op.shape["cols"]), _bpe(op), model.sm_count,
                                model.threads_per_sm)["split"]
                body = np.where(own, np.maximum(body, _soft_max(t_m, t_lat, p["sum_overlap_p"])), body)
        else:
            body = _pipeline(_soft_max(t_m, t_rate, q), t_lat, q, waves)
        launch = p["launch_s"] * np.ones_like(body)
        return Prediction(launch + body, t_rate, np.maximum(t_m, t_lat), launch, 1.0, {"row_limited_s": t_lat})
    eff, two_pass = p[f"bw_eff_{fam}"], False
    if "rows" in op.shape and "cols" in op.shape and f"unaligned_eff_{fam}" in p:
        # PyTorch's norms load rows of a multiple of NORM_VEC_SIZE elements as vectors in one kernel; other rows
        # take RowwiseMomentsCUDAKernel, then LayerNormForwardCUDAKernel (the profiler on the H200): two kernels
        two_pass = np.mod(_f(op.shape["cols"]), NORM_VEC_SIZE) != 0
        eff = eff * np.where(two_pass, p[f"unaligned_eff_{fam}"], 1.0)
    kernels = np.where(two_pass, 2.0, 1.0)
    t_m = _f(op.bytes) / (p["bandwidth"] * eff)
    if np.any(two_pass):
        t_m = t_m + np.where(two_pass, _norm_reread_s(model, op, eff), 0.0)
    t_c = _f(op.flops) / p["vector_flops"] if fam == "elementwise" else 0.0 * t_m
    q = p["vector_overlap_p"]
    if "rows" in op.shape and f"rows_per_sm_{fam}" in p:
        rows, cols = _f(op.shape["rows"]), _f(op.shape["cols"])
        slots = P * p[f"rows_per_sm_{fam}"]
        waves = np.maximum(rows / slots, 1.0)  # rows stream through the slots; continuous, not whole waves
        t_rows = waves * (p["row_latency_s"] + cols / (p[f"row_rate_{fam}"] * eff / p[f"bw_eff_{fam}"]))
        if np.any(two_pass) and "row_rate_norm_moments" in p:
            t_rows = np.where(two_pass, _norm_two_pass_rows_s(model, rows, cols), t_rows)
        par = rows / (waves * slots)
        body = _pipeline(_soft_max(t_m, t_c, q), t_rows, p.get("norm_overlap_p", q), waves)
    else:
        t_rows, par = 0.0 * t_m, np.ones_like(t_m)
        body = _soft_max(t_m, t_c, q)
    extra_launch = 0.0
    if fam == "elementwise" and op.shape.get("strided"):
        # PyTorch's generic elementwise_kernel (strided or broadcast operands): no vector loads, every
        # operand's offset computed from the index; an element rate bounds it unless the traffic does
        n = _f(op.shape["numel"])
        t_rows = n / p["strided_elem_rate"] + 0.0 * t_m
        if "strided_operand_rate" in p:
            # every element decomposes its index once and adds an offset per operand; these instructions
            # issue beside the element's arithmetic, and the loads they address overlap the traffic only partly
            operands = _f(op.shape.get("operands", _f(op.shape["inputs"]) + _f(op.shape["outputs"])))
            t_rows = t_rows + n * operands / p["strided_operand_rate"] + t_c
            body = _soft_max(t_m, t_rows, p["strided_overlap_p"])
        else:
            body = np.maximum(body, t_rows)
        extra_launch = p.get("strided_launch_s", 0.0)
    launch = (queued(p, kernels) + extra_launch) * np.ones_like(body)
    return Prediction(launch + body, t_c, np.maximum(t_m, t_rows), launch, par, {"row_limited_s": t_rows},
                      kernels * np.ones_like(body))


#: elements a row of a layer or RMS norm must be a multiple of for PyTorch's vectorised kernel
#: (``vec_size`` in aten/src/ATen/native/cuda/layer_norm_kernel.cu)
NORM_VEC_SIZE = 4

#: op name -> the function that predicts its time (see :func:`predictor`)
_PREDICTORS: dict[str, Callable[[CalibrationModel, Any], Prediction]] = {}


def predictor(*names: OpName) -> Callable:
    """Decorator: the model of the ops named ``names`` (members of :class:`~gpumodel.opcost.OpName`)."""

    def deco(func: Callable[[CalibrationModel, Any], Prediction]) -> Callable:
        for name in names:
            key = OpName(name).value
            if key in _PREDICTORS:
                raise ValueError(f"op {key!r} already has a time model ({_PREDICTORS[key].__qualname__})")
            _PREDICTORS[key] = func
        return func

    return deco


def predicted_ops() -> list[str]:
    """Names of the ops with a time model of their own (others are charged as a memory-bound stream)."""
    return sorted(_PREDICTORS)


def predict(model: CalibrationModel, op: Any) -> Prediction:
    """Model time of ``op`` (an :class:`~gpumodel.ops.OpCost`) on the modelled GPU.

    The op's name picks its model from the registry filled by :func:`predictor`; an op of another
    name (a user's own :class:`~gpumodel.ops.OpCost`) is charged as a memory-bound stream.

    Examples
    --------
    >>> import gpumodel as gm
    >>> m = CalibrationModel(default_parameters(gm.gpu("h100")), 132, calibrated=False)
    >>> t = predict(m, gm.ops.elementwise(2**28, "bf16")).time_s    # 1 GiB of traffic
    >>> round(float(t) * 1e3, 3)                                     # 2**30 B / (0.87 * 3.35 TB/s) + 4 us
    0.372
    """
    return _PREDICTORS.get(op.name, _memory_bound)(model, op)


predictor(OpName.ELEMENTWISE, OpName.SOFTMAX, OpName.LAYER_NORM, OpName.RMS_NORM, OpName.REDUCE_SUM)(
    lambda model, op: _memory_bound(model, op))


@predictor(OpName.FUSED)
def _fused_op(model: CalibrationModel, op: Any) -> Prediction:
    if op.unit == "tensor":
        from ..errors import UnsupportedError

        raise UnsupportedError("a fused op with tensor-core parts has no calibrated model; estimate its parts")
    return _fused(model, op)


def _fused(model: CalibrationModel, op: Any) -> Prediction:
    """A fused chain streams its external traffic once, but is no faster than its slowest row-wise part.

    A fused kernel keeps each part's organisation (one block per row for a norm or softmax), so the
    row-limited body of every row-wise part is a floor under the fused body.
    """
    whole = _memory_bound(model, op)
    body = _f(whole.time_s) - _f(whole.overhead_s)
    row_parts = [_memory_bound(model, part) for part in op.parts if "rows" in part.shape]
    if not row_parts:
        return whole
    floor = np.max(np.stack(np.broadcast_arrays(*[_f(r.time_s) - _f(r.overhead_s) for r in row_parts])), axis=0)
    par = np.min(np.stack(np.broadcast_arrays(*[_f(r.parallelism) for r in row_parts])), axis=0)
    return Prediction(whole.overhead_s + np.maximum(body, floor), whole.compute_s, np.maximum(whole.memory_s, floor),
                      whole.overhead_s, par, {"row_limited_s": floor})


from . import attention as _attention_models, composite as _composite_models  # noqa: E402,F401  (register theirs)
from .gemm import (BMM_STREAM_MAX_EDGE, SPLITS, STREAM_MAX_EDGE, TILES, WHOLE_WAVE_DTYPES,  # noqa: E402,F401
                   _flops_param, _gemm, _load_alignment)  # the GEMM model (registers matmul and bmm), re-exported
