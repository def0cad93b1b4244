"""The fitted efficiency model: time of one kernel from its :class:`~gpumodel.core.ops.OpCost` (numpy only).

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
split-K factor :math:`s` (:data:`~gpumodel.calibration.gemm.SPLITS`; for the CUTLASS kernels of unaligned or fp32 data also
:math:`\\lfloor P c / N_0 \\rfloor`, which fills the :math:`c` CTA slots of every SM once with the :math:`N_0` tiles:
:func:`~gpumodel.calibration.gemm.fill_split`), with :math:`P` SMs, :math:`R` the achievable FLOP/s of
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

from typing import Any

from . import attention, composite, gemm, streams  # noqa: F401  (each registers the predictors of its ops)
from .parameters import DEFAULT_EFFICIENCY, GEMM_DTYPES, PARAMETERS, ROW_FAMILIES, default_parameters
from .predictors import CalibrationModel, Prediction, dispatch, predicted_ops, predictor, queued

__all__ = [
    "CalibrationModel", "Prediction", "PARAMETERS", "DEFAULT_EFFICIENCY", "GEMM_DTYPES", "ROW_FAMILIES",
    "default_parameters", "predict", "predictor", "predicted_ops", "queued",
]


def predict(model: CalibrationModel, op: Any) -> Prediction:
    """Model time of ``op`` (an :class:`~gpumodel.core.ops.OpCost`) on the modelled GPU.

    The op's name picks its model from the registry filled by :func:`predictor`; an op of another
    name (a user's own :class:`~gpumodel.core.ops.OpCost`) is charged as a memory-bound stream.

    Examples
    --------
    >>> import gpumodel as gm
    >>> m = CalibrationModel(default_parameters(gm.gpu("h100")), 132, calibrated=False)
    >>> t = predict(m, gm.ops.elementwise(2**28, "bf16")).time_s    # 1 GiB of traffic
    >>> round(float(t) * 1e3, 3)                                     # 2**30 B / (0.87 * 3.35 TB/s) + 4 us
    0.372
    """
    return dispatch(model, op)
