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
split-K factor :math:`s` (:data:`SPLITS`; for the CUTLASS kernels of unaligned or fp32 data also
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

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from gpumodel.core.opcost import OpName

from .kernels import MAX_THREADS_PER_SM, SMEM_PER_BLOCK
from .parameters import (DEFAULT_EFFICIENCY, GEMM_DTYPES, PARAMETERS, ROW_FAMILIES,
                         default_parameters)

__all__ = [
    "CalibrationModel", "Prediction", "PARAMETERS", "DEFAULT_EFFICIENCY", "GEMM_DTYPES", "ROW_FAMILIES",
    "default_parameters", "predict", "predictor", "predicted_ops",
]



@dataclass(frozen=True)
class CalibrationModel:
    """A GPU's named model parameters (see :data:`PARAMETERS`), its SM count and its record.

    ``gpu`` is the :class:`~gpumodel.records.gpu.GPUSpec` (or its name) the model describes; the
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
            from gpumodel.base.errors import GpumodelError
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

    def blocks_per_sm(self, threads: Any, registers: Any) -> np.ndarray:
        """Resident blocks per SM of a kernel of ``threads``-thread blocks taking ``registers`` registers a
        thread (either may be an array), on this model's GPU (:func:`gpumodel.occupancy`; without a GPU record, 64 K registers and
        :attr:`threads_per_sm`)."""
        if self.gpu is not None and self.gpu.compute_capability:
            from gpumodel.core.occupancy import occupancy

            try:
                return np.asarray(occupancy(self.gpu, threads, registers).blocks_per_sm, dtype=float)
            except Exception:  # noqa: BLE001 - an architecture without a record: the common limits below
                pass
        regs = np.floor(65536.0 / (threads * np.ceil(np.asarray(registers, dtype=float) / 8.0) * 8.0))
        return np.minimum(np.floor(self.threads_per_sm / np.asarray(threads, dtype=float)), regs)

    @property
    def smem_per_block(self) -> int:
        """Default shared memory per block [byte] (the architecture record's ``shared_memory_per_block``)."""
        if self.gpu is None or not self.gpu.compute_capability:
            return SMEM_PER_BLOCK
        from gpumodel.records.arch import arch_limits

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
    from gpumodel.records.dtypes import bytes_per_element

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


#: op name -> the function that predicts its time (see :func:`predictor`)
_PREDICTORS: dict[str, Callable[[CalibrationModel, Any], Prediction]] = {}


def predictor(*names: OpName) -> Callable:
    """Decorator: the model of the ops named ``names`` (members of :class:`~gpumodel.core.opcost.OpName`)."""

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
    return _PREDICTORS.get(op.name, _memory_bound)(model, op)


from .streams import NORM_VEC_SIZE, _memory_bound  # noqa: E402,F401  (the memory-bound kernels; registers theirs)
from . import attention as _attention_models, composite as _composite_models  # noqa: E402,F401  (register theirs)
from .gemm import (BMM_STREAM_MAX_EDGE, SPLITS, STREAM_MAX_EDGE, TILES, WHOLE_WAVE_DTYPES,  # noqa: E402,F401
                   _flops_param, _gemm, _load_alignment)  # the GEMM model (registers matmul and bmm), re-exported
