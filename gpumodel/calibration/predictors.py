"""The base of the calibrated time model: the model record, a prediction, the predictor registry and the
arithmetic the predictors share (numpy only).

The predictors of each op family (:mod:`~gpumodel.calibration.gemm`, :mod:`~gpumodel.calibration.attention`,
:mod:`~gpumodel.calibration.streams`, :mod:`~gpumodel.calibration.composite`) import this module and register
themselves with :func:`predictor`; :mod:`gpumodel.calibration.model` imports them all and is the face of the
model (:func:`~gpumodel.calibration.model.predict`). Nothing here imports a predictor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..base.errors import GpumodelError
from ..core.occupancy import occupancy
from ..core.opcost import OpName
from ..records.arch import arch_limits
from ..records.dtypes import bytes_per_element
from ..vocabulary import resolve_gpu
from .kernels import MAX_THREADS_PER_SM, SMEM_PER_BLOCK
from .sustained import COMPUTE_RATE_PREFIXES, FP8_SLOWDOWN

__all__ = ["CalibrationModel", "Prediction", "PREDICTORS", "predictor", "fallback", "dispatch", "handed_kind",
           "predicted_ops",
           "queued", "farray", "elem_bytes", "soft_max"]


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
    #: kinds of kernel (``"tensor_rate"``: GEMMs; ``"bandwidth"``: memory streams) this model hands to ``datasheet``,
    #: the GPU's datasheet model, where that prices them better (a transfer's prior says so)
    handed: frozenset = frozenset()
    datasheet: Any = None

    def __post_init__(self) -> None:
        bad = [k for k, v in self.params.items() if not (np.isfinite(v) and v > 0)]
        if bad:
            raise ValueError(f"model parameters must be finite and > 0: {', '.join(bad)}")
        if int(self.sm_count) < 1:
            raise ValueError(f"sm_count must be >= 1, got {self.sm_count!r}")
        if isinstance(self.gpu, str):  # a name: the catalog's record, or none for a GPU the catalog lacks
            try:
                object.__setattr__(self, "gpu", resolve_gpu(self.gpu))
            except GpumodelError:
                object.__setattr__(self, "gpu", None)

    def replace(self, **params: float) -> "CalibrationModel":
        return CalibrationModel({**self.params, **params}, self.sm_count, self.calibrated, self.name, self.measured,
                                self.gpu, self.handed, self.datasheet)

    def sustained(self) -> "CalibrationModel":
        """The model of work that keeps the GPU busy for seconds (a training step): every compute rate
        (:data:`~gpumodel.calibration.sustained.COMPUTE_RATE_PREFIXES`) divided by ``sustained_slowdown``,
        the power limit's toll on the SM clock, the fp8 GEMM rate by ``sustained_slowdown_fp8`` where the model has
        it (:func:`gpumodel.calibration.loaded.model_slowdowns`); memory rates unchanged. A model without either is
        returned as is.

        >>> m = CalibrationModel({"launch_s": 4e-6, "bandwidth": 4e12, "flops_bf16": 7e14,
        ...                       "sustained_slowdown": 1.25}, 132)
        >>> s = m.sustained().params
        >>> s["flops_bf16"] / 1e12, s["bandwidth"] / 1e12, s["sustained_slowdown"]
        (560.0, 4.0, 1.0)
        """
        slow = float(self.params.get("sustained_slowdown", 1.0))
        slow8 = float(self.params.get(FP8_SLOWDOWN, slow))
        if slow == 1.0 and slow8 == 1.0:
            return self
        rates = {k: v / (slow8 if k == "flops_fp8" else slow) for k, v in self.params.items()
                 if k.startswith(COMPUTE_RATE_PREFIXES)}
        return self.replace(**rates, sustained_slowdown=1.0, **{FP8_SLOWDOWN: 1.0})

    @property
    def threads_per_sm(self) -> int:
        """Resident threads per SM (the GPU record's ``max_threads_per_sm``)."""
        return int(self.gpu.max_threads_per_sm) if self.gpu is not None else MAX_THREADS_PER_SM

    def blocks_per_sm(self, threads: Any, registers: Any) -> np.ndarray:
        """Resident blocks per SM of a kernel of ``threads``-thread blocks taking ``registers`` registers a
        thread (either may be an array), on this model's GPU (:func:`gpumodel.occupancy`; without a GPU record, 64 K registers and
        :attr:`threads_per_sm`)."""
        if self.gpu is not None and self.gpu.compute_capability:
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


def farray(x: Any) -> np.ndarray:
    """``x`` as a float array (the predictors' arithmetic broadcasts over arrays of shapes)."""
    return np.asarray(x, dtype=float)


def elem_bytes(op: Any) -> float:
    """Bytes per element of the op's dtype."""
    return float(bytes_per_element(op.dtype))


def queued(p: Mapping[str, float], kernels: Any) -> Any:
    """Launch time [s] of ``kernels`` kernels of one call queued back to back: ``launch_s`` for the first,
    ``kernel_gap_s`` for each other (records fitted without the gap: ``launch_s`` each).

    >>> round(float(queued({"launch_s": 4e-6, "kernel_gap_s": 1e-6}, 3)) * 1e6, 9)
    6.0
    """
    kernels = np.asarray(kernels, dtype=float)
    return p["launch_s"] + np.maximum(kernels - 1.0, 0.0) * p.get("kernel_gap_s", p["launch_s"])


def soft_max(a: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
    """A smooth maximum of ``a`` and ``b``: the ``p``-norm of the two (``p`` large: the larger one)."""
    hi = np.maximum(a, b)
    hi = np.where(hi > 0, hi, 1.0)
    return hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


#: op name -> the function that predicts its time (see :func:`predictor`)
PREDICTORS: dict[str, Callable[[CalibrationModel, Any], Prediction]] = {}


def predictor(*names: OpName) -> Callable:
    """Decorator: the model of the ops named ``names`` (members of :class:`~gpumodel.core.opcost.OpName`)."""

    def deco(func: Callable[[CalibrationModel, Any], Prediction]) -> Callable:
        for name in names:
            key = OpName(name).value
            if key in PREDICTORS:
                raise ValueError(f"op {key!r} already has a time model ({PREDICTORS[key].__qualname__})")
            PREDICTORS[key] = func
        return func

    return deco


def fallback(func: Callable[[CalibrationModel, Any], Prediction]) -> Callable:
    """Decorator: the model of every op without one of its own (a memory-bound stream)."""
    global _FALLBACK
    _FALLBACK = func
    return func


_FALLBACK: Callable[[CalibrationModel, Any], Prediction] | None = None


def dispatch(model: CalibrationModel, op: Any) -> Prediction:
    """Model time of ``op`` from the registry: the predictor of its name, else the fallback.

    The predictors register themselves when :mod:`gpumodel.calibration.model` imports them; call
    :func:`gpumodel.calibration.model.predict`, which guarantees that, rather than this.
    """
    if model.handed and model.datasheet is not None and handed_kind(op) in model.handed:
        model = model.datasheet
    return PREDICTORS.get(op.name, _FALLBACK)(model, op)


def handed_kind(op: Any) -> str | None:
    """The kind of kernel an op is for :attr:`CalibrationModel.handed`: ``"tensor_rate"`` (a GEMM), ``"bandwidth"``
    (a memory stream: every other op but attention) or None (attention).

    >>> import gpumodel as gm
    >>> handed_kind(gm.ops.matmul(8, 8, 8)), handed_kind(gm.ops.softmax(8, 8)), handed_kind(gm.ops.attention(1, 1, 8, 8))
    ('tensor_rate', 'bandwidth', None)
    """
    if op.name in ("matmul", "bmm"):
        return "tensor_rate"
    return None if op.name == "attention" else "bandwidth"


def predicted_ops() -> list[str]:
    """Names of the ops with a time model of their own (others are charged as a memory-bound stream)."""
    return sorted(PREDICTORS)
