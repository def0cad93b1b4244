"""Carry a calibration measured on one GPU to a GPU nobody here can measure (numpy and pydantic only).

Each fitted parameter of :mod:`gpumodel.calibration.model` is re-expressed as a quantity that carries
across GPUs and scaled to the target with its datasheet and the per-architecture priors of
:mod:`gpumodel.calibration.priors`. The parameter table is read generically: every parameter is
classified by its unit and role (:func:`classify`), so a refitted reference with new parameters
transfers without changes here.

Notes
-----
For a parameter :math:`x_r` fitted on the reference GPU :math:`r`, the transferred value on the
target :math:`t` is

.. math::

    x_t = x_r \\, \\frac{D_t}{D_r} \\, \\frac{\\pi_t}{\\pi_r}

with :math:`D` the datasheet quantity the parameter is a fraction or a multiple of, and
:math:`\\pi` the architecture prior of that fraction (1 where the kind has none):

=================  ======================================  ==========================================
kind               :math:`D` (datasheet)                   :math:`\\pi` (prior)
=================  ======================================  ==========================================
``tensor_rate``    dense peak of the GEMM's dtype          achieved GEMM fraction of that dtype
``tensor_share``   dense bf16 (else fp16) peak             achieved bf16 GEMM fraction
``vector_rate``    fp32 peak (CUDA cores)                  1
``bandwidth``      device-memory bandwidth                 achieved copy fraction
``operand_feed``   SMs x boost clock (L2 and shared        1, or the bf16 GEMM
                   memory deliver bytes per SM per clock), fraction's where the
                   or the dense bf16 peak where that is    peak wins
                   larger
``chip_rate``      SMs x boost clock                       1
``sm_rate``        boost clock (one SM's issue rate)       1
``cycles``         1 / boost clock (a fixed number of      1
                   cycles: memory latency is ~400 cycles
                   on V100, A100 and H100 alike)
``residency``      resident threads per SM                 1
``capacity``       L2 size (a byte count naming the L2),   1
                   else shared memory per SM
``launch``         1 (host and driver, not the GPU:        1
                   launches, an optimizer step's Python)
``sm_stream``      SMs x boost clock / bandwidth (a        1
                   stream an SM's own work bounds)
``mma_sync_rate``  the ``mma.sync`` peak,                  1
                   min(tensor peak, 2048 x SMs x clock)
``dimensionless``  1 (overlap sharpness, efficiencies)     1
=================  ======================================  ==========================================

``sm_stream`` is the weight stream of the int4 weight-only GEMM (``bw_eff_int4_mm``): on the H200 it
reaches 42% of the memory bandwidth, where a plain stream reaches all of it, because each SM unpacks,
scales and shifts its int4 weights before the tensor-core MMA (PyTorch's tinygemm kernel). Its rate is the
SMs' dequantisation rate, so the achieved bytes per second carry with SMs x clock, and the efficiency, a
fraction of the bandwidth, with SMs x clock over the bandwidth (at most the reference's plain-stream
efficiency ``bw_eff_stream``).

``operand_feed`` is the rate at which GEMM tiles stream their operands from L2 and shared memory. Per SM and
clock it carries over from Ampere to Hopper (wider tiles took up Hopper's doubled tensor rate), but Blackwell's
tensor cores outgrew the SMs x clock again (2.3x the H200's dense peak on 1.1x its SMs x clock) and its GEMMs
widened their operand paths with them: two SMs share one MMA (``tcgen05`` with ``cta_group::2``, tiles of 256 x 256
whose A and B halves each SM loads once), TMA multicasts a tile's operands across a cluster, and the accumulators
live in tensor memory rather than registers (NVIDIA Blackwell architecture technical brief, 2024; CUTLASS 3.8
Blackwell GEMM examples). The feed of the largest tile is therefore taken as at least the tensor rate's share,
as it is on the reference, where the largest tile is tensor-bound (its fitted feed balances a 256 x 128 tile's math).

The ``mma_sync_rate`` kind is the rate of FlashAttention-2's kernels, written for Ampere with ``mma.sync``: they
run the same instructions on Hopper and Blackwell, which double their tensor rate only through wgmma and tcgen05.
Their rate carries with the ``mma.sync`` peak (:func:`mma_sync_peak`), not with the tensor peak.

Wave and tile quantisation need no parameter: the transferred model keeps the target's SM count,
so :math:`\\lceil N/P \\rceil` is evaluated on the target. The L2 size scales any byte-count
parameter that names the L2 (the present model has none: its kernels were timed with the L2
flushed). A GEMM rate of a CUDA-core dtype (fp32, fp64) has no tensor-core prior (ratio 1). A
parameter the target's datasheet model has and the reference lacks (a dtype the reference never
measured) takes its datasheet default (kind ``default``). Transferring the reference to itself
gives every ratio 1 and returns its parameters unchanged.

The expected error of a transferred estimate of op family :math:`f` combines the reference's own
validation error with the uncertainty of the prior ratio it used,
:math:`\\epsilon = \\sqrt{\\epsilon_{r,f}^2 + u_t^2 + u_r^2}` (the :math:`u` are zero when both GPUs
share the architecture, where the priors cancel).

The attention rate carries over as the reference's ratio of attention to GEMM rate: it assumes the
target's attention kernel is as efficient, relative to cuBLAS, as the one PyTorch's
``scaled_dot_product_attention`` ran on the reference. That holds for FlashAttention-2 on the A100
(``bench/published_kernels.py``), not for a library whose kernel on the target is of another kind
(FlashAttention-2 on the H100 uses no wgmma and reaches about 35% of the peak, FlashAttention-3
about 75%: Shah et al. 2024).

References
----------
S. Bekman, "Machine Learning Engineering", Maximum Achievable Matmul FLOPS table,
github.com/stas00/ml-engineering (the GEMM priors). NVIDIA, "Matrix Multiplication Background
User's Guide" (tile and wave quantization), docs.nvidia.com/deeplearning/performance, 2023.
T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023.
J. Shah et al., "FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision", 2024.

Examples
--------
>>> import gpumodel as gm
>>> t = transfer("h100")                     # same architecture as the H200: priors cancel
>>> round(t.model.params["bandwidth"] / t.parameters["bandwidth"]["reference"], 4)   # 3.35 / 4.8
0.6979
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from .loaded import own_slowdowns, transfer_row
from .model import PARAMETERS, CalibrationModel, default_parameters
from .predictors import handed_kind
from .priors import PRIORS, ArchPrior, prior_for
from .points import op_family
from ..base.errors import UnsupportedError
from ..vocabulary import resolve_gpu
from .record import Calibration, calibration_for

__all__ = ["ParameterKind", "Transfer", "classify", "transfer", "transfer_for", "mma_sync_peak", "REFERENCE",
           "MMA_SYNC_FLOP_PER_SM_CYCLE"]

#: the shipped calibration other GPUs are transferred from
REFERENCE = "h200-sxm"
_SIMT = ("fp32", "fp64")  # GEMMs on CUDA cores: no tensor-core prior


class ParameterKind(str, enum.Enum):
    """How a model parameter carries across GPUs (see the module Notes)."""

    TENSOR_RATE = "tensor_rate"
    TENSOR_SHARE = "tensor_share"
    VECTOR_RATE = "vector_rate"
    BANDWIDTH = "bandwidth"
    OPERAND_FEED = "operand_feed"
    CHIP_RATE = "chip_rate"
    SM_RATE = "sm_rate"
    CYCLES = "cycles"
    RESIDENCY = "residency"
    CAPACITY = "capacity"
    LAUNCH = "launch"
    SM_STREAM = "sm_stream"
    MMA_SYNC_RATE = "mma_sync_rate"
    DIMENSIONLESS = "dimensionless"


#: the math rates of the weight-only GEMM kernels: PyTorch's int4 kernel (tinygemm) multiplies on bf16 tensor
#: cores, its int8 kernel (``weight_int8pack_mm``) in fp32 on the CUDA cores
_WEIGHT_ONLY_RATES = {"flops_int4_mm": ParameterKind.TENSOR_SHARE, "flops_int8_mm": ParameterKind.VECTOR_RATE}
#: streams whose rate the SMs' own work sets, not the memory (module Notes, ``sm_stream``)
_SM_STREAMS = ("bw_eff_int4_mm",)
#: rates of FlashAttention-2's kernels, written with Ampere's ``mma.sync`` (module Notes, ``mma_sync_rate``)
_MMA_SYNC_RATES = ("attn_flops_fa2", "attn_flops_fa2_bwd")
#: dense 16-bit FLOPs one SM's tensor cores complete a clock through ``mma.sync``: Ampere's 1,024 FMA (NVIDIA A100
#: Tensor Core GPU Architecture whitepaper, 2020: 256 dense FP16 FMA a clock per tensor core, four an SM). Hopper
#: doubled the rate through wgmma alone: FlashAttention-2's forward, all mma.sync, reaches the same ~1,440 FLOP an
#: SM-clock on the H200 (``attn_flops_fa2`` of its calibration: 377 TFLOP/s / (132 SMs x 1.98 GHz)) as on the A100
#: (about 220 TFLOP/s at head_dim 128, FlashAttention-2 paper Fig. 5 and bench/published_kernels.py: / (108 x 1.41 GHz))
MMA_SYNC_FLOP_PER_SM_CYCLE = 2048.0


def classify(name: str) -> ParameterKind:
    """The :class:`ParameterKind` of a model parameter, from its unit in :data:`PARAMETERS` and its role.

    Examples
    --------
    >>> [classify(n).value for n in ("flops_bf16", "attn_flops_fwd", "bandwidth", "mem_latency_s")]
    ['tensor_rate', 'tensor_share', 'bandwidth', 'cycles']
    """
    if name in _SM_STREAMS:
        return ParameterKind.SM_STREAM
    if name in _MMA_SYNC_RATES:
        return ParameterKind.MMA_SYNC_RATE
    unit = PARAMETERS.get(name, ("FLOP/s" if name.startswith("flops_") else "1", ""))[0]
    K = ParameterKind
    if name == "launch_s" or "host" in name:   # host-side time (Python, driver): not the GPU's
        return K.LAUNCH
    if unit == "FLOP/s":
        if name in _WEIGHT_ONLY_RATES:
            return _WEIGHT_ONLY_RATES[name]
        if name.startswith("flops_"):
            return K.TENSOR_RATE
        return K.VECTOR_RATE if name.startswith("vector") else K.TENSOR_SHARE
    if unit == "bytes/s":
        if name.startswith("sm_"):
            return K.SM_RATE
        return K.OPERAND_FEED if "l2" in name else K.BANDWIDTH
    if unit == "s":
        return K.CYCLES
    if unit in ("bytes", "B"):
        return K.CAPACITY
    if unit in ("elements/s", "1/s"):
        return K.SM_RATE if name.startswith("row_rate") else K.CHIP_RATE
    return K.RESIDENCY if name.startswith("rows_per_sm") else K.DIMENSIONLESS


def _tensor_peak(g: Any) -> float:
    return g.peak_flops("bf16") if g.supports("bf16") else g.peak_flops("fp16")


def mma_sync_peak(g: Any) -> float:
    """Dense 16-bit tensor-core peak [FLOP/s] reachable through ``mma.sync`` (no wgmma, no tcgen05).

    ``min(tensor peak, 2048 x SMs x boost clock)``: the whole peak on Ampere and Ada (their only MMA path; the
    GeForce parts' half-rate fp32 accumulation included), half of Hopper's and less of Blackwell's.

    Examples
    --------
    >>> import gpumodel as gm
    >>> [round(mma_sync_peak(gm.gpu(n)) / 1e12) for n in ("a100", "h200", "b200", "rtx-4090")]
    [312, 535, 596, 165]
    """
    return min(_tensor_peak(g), MMA_SYNC_FLOP_PER_SM_CYCLE * g.sm_count * g.boost_clock)


@dataclass(frozen=True, repr=False)
class Transfer:
    """A model carried from a calibrated reference GPU to a target GPU, and how each parameter moved.

    Attributes
    ----------
    gpu, reference : str
        Canonical names of the target and of the calibrated reference GPU.
    model : CalibrationModel
        The target's model (``calibrated=False``: nothing was measured on the target).
    parameters : dict
        ``name -> {"kind", "reference", "value", "datasheet_ratio", "prior_ratio"}`` (SI units).
    prior, reference_prior : ArchPrior
        The architecture priors of the target and of the reference.
    reference_error : dict
        The reference calibration's validation median error per op family [1].
    dropped : tuple of str
        Reference parameters the target cannot use (a GEMM dtype it does not support).
    datasheet : tuple of str
        Parameter kinds taken from the target's datasheet with the default efficiencies, where its prior says the
        transfer does not beat them on the architecture's published figures.
    """

    gpu: str
    reference: str
    model: CalibrationModel
    parameters: Mapping[str, Mapping[str, Any]]
    prior: ArchPrior
    reference_prior: ArchPrior
    reference_error: Mapping[str, float] = field(default_factory=dict)
    dropped: tuple = ()
    datasheet: tuple = ()

    def _prior_u(self, kind: str, dtype: str = "bf16") -> float:
        if self.prior.name == self.reference_prior.name:
            return 0.0
        if kind == "gemm":
            if dtype in _SIMT:
                return 0.10
            return math.hypot(self.prior.gemm_fraction(dtype, self.gpu)[1],
                              self.reference_prior.gemm_fraction(dtype, self.reference)[1])
        if kind == "attention":
            return math.hypot(self._prior_u("gemm"), self.prior.attention.uncertainty)
        return math.hypot(self.prior.bandwidth_fraction(self.gpu)[1],
                          self.reference_prior.bandwidth_fraction(self.reference)[1])

    def expected_error(self, op: Any) -> float | None:
        """Expected median relative error of this model's time for ``op`` [1] (see the module Notes).

        ``None`` for an op family the reference calibration has no validation error for (its
        parameters there are defaults, not measurements: nothing backs a figure).

        Examples
        --------
        >>> import gpumodel as gm
        >>> t = transfer("a100")
        >>> op = gm.ops.matmul(4096, 4096, 4096)
        >>> bool(t.expected_error(op) > t.reference_error["matmul"])    # the H200's own error, plus the priors'
        True
        """
        dt = op.dtype.value if hasattr(op.dtype, "value") else str(op.dtype)
        key = op_family(op)
        handed = handed_kind(op)   # the kind the model's dispatch would hand to the datasheet
        base = self.reference_error.get(key)
        if handed in self.datasheet:   # the datasheet's default efficiencies price it: their published error too
            ds = self.prior.datasheet_error_for(handed, self.gpu)
            return None if base is None or ds is None else float(math.hypot(base, ds))
        if key in ("attention_fwd", "attention_bwd"):
            u = self._prior_u("attention")
        elif key in ("matmul", "bmm"):
            u = self._prior_u("gemm", "fp8" if "fp8" in dt else dt)
        else:
            u = self._prior_u("bandwidth")
        return None if base is None else float(math.hypot(base, u))

    def to_dict(self) -> dict:
        return {"gpu": self.gpu, "reference": self.reference, "prior": self.prior.name,
                "reference_prior": self.reference_prior.name, "sm_count": self.model.sm_count,
                "parameters": {k: dict(v) for k, v in self.parameters.items()}, "dropped": list(self.dropped)}

    def __repr__(self) -> str:
        p = self.model.params
        rates = ", ".join(f"{k[6:]} {p[k] / 1e12:.0f}" for k in p if k.startswith("flops_") and not k.endswith("_mm"))
        return (f"Transfer({self.reference} ({self.reference_prior.name}) -> {self.gpu} ({self.prior.name}): "
                f"bandwidth {p['bandwidth'] / 1e12:.2f} TB/s, TFLOP/s {rates}; {len(p)} parameters)")

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{k}</td><td>{v['kind']}</td><td>{v['reference']:.4g}</td><td>{v['value']:.4g}</td></tr>"
                       for k, v in self.parameters.items())
        return (f"<table><caption>{self.reference} &rarr; {self.gpu}</caption><tr><th>parameter</th><th>kind</th>"
                f"<th>reference</th><th>transferred</th></tr>{rows}</table>")


def _ratios(kind: ParameterKind, name: str, t: Any, r: Any, pt: ArchPrior, pr: ArchPrior) -> tuple[float, float] | None:
    """(datasheet ratio, prior ratio) of one parameter, or None when the target cannot use it."""
    K = ParameterKind
    clock = t.boost_clock / r.boost_clock
    if kind is K.TENSOR_RATE:
        dtype = name[len("flops_"):]
        if not (t.supports(dtype) and r.supports(dtype)):
            return None
        prior = 1.0 if dtype in _SIMT else pt.gemm_fraction(dtype, t.name)[0] / pr.gemm_fraction(dtype, r.name)[0]
        return t.peak_flops(dtype) / r.peak_flops(dtype), prior
    if kind is K.TENSOR_SHARE:
        return _tensor_peak(t) / _tensor_peak(r), pt.gemm_fraction("bf16", t.name)[0] / pr.gemm_fraction("bf16", r.name)[0]
    if kind is K.VECTOR_RATE:
        return t.peak_flops("fp32") / r.peak_flops("fp32"), 1.0
    if kind is K.BANDWIDTH:
        return t.memory_bandwidth / r.memory_bandwidth, pt.bandwidth_fraction(t.name)[0] / pr.bandwidth_fraction(r.name)[0]
    if kind is K.OPERAND_FEED:
        # the SMs' feed, or, where the tensor cores outgrew the SMs x clock (Blackwell), at least the tensor rate's
        # share: the largest tile of a generation's GEMMs is tensor-bound (module Notes)
        chip = t.sm_count / r.sm_count * clock
        tensor = _tensor_peak(t) / _tensor_peak(r), pt.gemm_fraction("bf16", t.name)[0] / pr.gemm_fraction("bf16", r.name)[0]
        return tensor if tensor[0] * tensor[1] > chip else (chip, 1.0)
    if kind is K.CHIP_RATE:
        return t.sm_count / r.sm_count * clock, 1.0
    if kind is K.SM_RATE:
        return clock, 1.0
    if kind is K.SM_STREAM:
        return t.sm_count / r.sm_count * clock * r.memory_bandwidth / t.memory_bandwidth, 1.0
    if kind is K.MMA_SYNC_RATE:
        return mma_sync_peak(t) / mma_sync_peak(r), 1.0
    if kind is K.CYCLES:
        return 1.0 / clock, 1.0
    if kind is K.RESIDENCY:
        return t.max_threads_per_sm / r.max_threads_per_sm, 1.0
    if kind is K.CAPACITY:
        if "l2" in name:
            return t.l2_bytes / r.l2_bytes, 1.0
        return t.shared_memory_per_sm / r.shared_memory_per_sm, 1.0
    return 1.0, 1.0


def transfer(gpu: Any, reference: Any = None) -> Transfer:
    """Carry a calibrated reference GPU's model to ``gpu`` with the datasheets and architecture priors.

    Parameters
    ----------
    gpu : GPUSpec or str
        The target GPU.
    reference : Calibration or str, optional
        The calibrated reference: a :class:`~gpumodel.calibration.record.Calibration`, or the name of a GPU
        with a shipped calibration. Default :data:`REFERENCE` (the H200).

    Returns
    -------
    Transfer

    Raises
    ------
    UnsupportedError
        The target's or the reference's architecture has no prior, or the reference has no calibration.

    Examples
    --------
    >>> t = transfer("a100")
    >>> t
    Transfer(h200-sxm (sm90) -> a100-sxm4-80gb (sm80): bandwidth 1.58 TB/s, TFLOP/s bf16 255, fp16 255, fp32 14, tf32 127, fp64 7, int8 477; 89 parameters)
    >>> t.model.sm_count, "flops_fp8" in t.dropped       # the A100 has no fp8 tensor cores
    (108, True)
    """
    target = resolve_gpu(gpu)
    cal = reference if isinstance(reference, Calibration) else calibration_for(resolve_gpu(reference or REFERENCE))
    if cal is None:
        raise UnsupportedError(f"reference {reference!r} has no calibration; calibrated GPUs: pass a Calibration")
    ref = resolve_gpu(cal.gpu)
    pt, pr = prior_for(target), prior_for(ref)
    for g, p in ((target, pt), (ref, pr)):
        if p is None:
            raise UnsupportedError(f"no architecture prior for {g.name} (compute capability {g.compute_capability}); "
                                   "priors exist for compute capabilities "
                                   f"{sorted(c for r in PRIORS.records() for c in r.compute_capabilities)}")
    params, table, dropped = {}, {}, []
    own_datasheet = pt.datasheet_kinds(target.name) if target.name != ref.name else ()
    defaults = default_parameters(target)
    for name, value in cal.parameters.items():
        kind = classify(name)
        ratios = _ratios(kind, name, target, ref, pt, pr)
        if ratios is None:
            dropped.append(name)
            continue
        new = value * ratios[0] * ratios[1]
        if kind is ParameterKind.SM_STREAM:   # no faster than a plain stream of the target's memory
            new = min(new, cal.parameters.get("bw_eff_stream", 1.0))
        params[name] = new
        table[name] = transfer_row(kind.value, value, new, *ratios)
    for name, value in defaults.items():
        if name not in params and name not in dropped:
            params[name] = value
            table[name] = transfer_row("default", float("nan"), value)
    sm = target.sm_count if target.name != ref.name else cal.sm_count
    own = pt.gpus.get(target.name)
    dropped += own_slowdowns(params, table, own, cal.parameters)   # the target's own, where measured
    # kinds of kernel the prior hands back: priced by the datasheet model, where the published figures say it does better
    sheet = (CalibrationModel(defaults, target.sm_count, calibrated=False, name=f"{target.name} datasheet", gpu=target)
             if own_datasheet else None)
    model = CalibrationModel(params, sm, calibrated=False, name=f"{target.name} transferred from {cal.gpu}",
                             gpu=target, handed=frozenset(own_datasheet), datasheet=sheet)
    err = {k: v.median for k, v in cal.validation_error.items()}
    return Transfer(target.name, cal.gpu, model, table, pt, pr, err, tuple(dropped), own_datasheet)


#: transfers made, by (GPU name, id of the reference calibration, id of the GPU's prior record)
_TRANSFERS: dict[tuple[str, int, int], Transfer | None] = {}


def transfer_for(gpu: Any) -> Transfer | None:
    """The transfer of the shipped reference calibration to ``gpu``, or ``None`` where no prior applies.

    Cached per GPU and per loaded reference calibration and prior record (reloading either, e.g.
    with another ``GPUMODEL_SPEC_PATH``, gives a fresh transfer).

    Parameters
    ----------
    gpu : GPUSpec or str
        The target GPU (a record, or a name resolved here).

    Returns
    -------
    Transfer or None
        The transferred model, or None where the reference has no calibration or either GPU no prior.
    """
    g = resolve_gpu(gpu)
    cal, prior = calibration_for(REFERENCE), prior_for(g)
    if cal is None or prior is None:
        return None
    key = (g.name, id(cal), id(prior))
    if key not in _TRANSFERS:
        _TRANSFERS[key] = transfer(g, cal) if prior_for(cal.gpu) is not None else None
    return _TRANSFERS[key]
