"""One resolver per argument kind: every public function enters through these.

A GPU, a model, a precision, a count, a flag: each kind of argument is read and checked here, once,
so that ``"h100"``, ``gm.gpu("h100")`` and a user's record mean the same thing everywhere and a bad
value always ends in the same typed error naming the argument and what is allowed
(:class:`~gpumodel.base.errors.ArgumentError`). The names and units of the arguments are listed in
``docs/nomenclature.md``. The checks of numeric arguments live in :mod:`gpumodel.base.numeric` and the
parallel-degree rules in :mod:`gpumodel.vocabulary.parallel_rules`; both are importable from here too.

Examples
--------
>>> from gpumodel.vocabulary import precision, positive_int, flag
>>> p = precision("amp_bf16")
>>> p.param_dtype.value, p.compute_dtype.value, p.is_amp
('fp32', 'bf16', True)
>>> positive_int(8, "batch_size")
8
>>> positive_int([1, 2, 4], "batch_size")
array([1, 2, 4])
>>> flag("no", "sparse")
Traceback (most recent call last):
...
gpumodel.base.errors.ArgumentError: sparse must be True or False, got 'no' (str)
"""

from __future__ import annotations

import enum
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, TypeVar

import numpy as np

from ..base.enums import StrEnum
from ..records.dtypes import DType, UnknownDTypeError, dtype as _dtype
from ..base.errors import ArgumentError, ArgumentTypeError
from ..base.numeric import (bounded_int, broadcastable, nonnegative_int, nonnegative_number, positive_int,  # re-exported
                      positive_number)
from ..base.readable import duration, token_count  # the readers of text arguments (re-exported)

__all__ = [
    "Precision", "PRECISIONS", "precision", "weight_dtype", "WEIGHT_DTYPES", "kv_cache_dtype", "KV_DTYPES",
    "TIMED_KV_DTYPES", "resolve_gpu", "resolve_model",
    "resolve_gpu_or_cc", "resolve_op", "resolve_system", "bounded_int", "positive_int", "nonnegative_int", "positive_number",
    "nonnegative_number", "flag", "choice", "scalar_or_array", "Optimizer", "Checkpointing", "ExpertsImplementation", "checkpointing_mode",
    "format_seconds", "deprecated_alias", "duration", "token_count",
    "resolve_gpus", "path_argument", "broadcastable", "passed_on", "within_positions",
    "divides", "parallel_degrees", "tensor_parallel", "splits_model",  # noqa: F822 (from parallel_rules, on first use)
]

E = TypeVar("E", bound=enum.Enum)


# ---------------------------------------------------------------------------------------------- precisions
@dataclass(frozen=True)
class Precision:
    """A training precision mode: which number format each tensor of a step is kept in.

    Attributes
    ----------
    name : str
        The name users type: ``"fp32"``, ``"amp_bf16"``, ``"amp_fp16"``, ``"bf16"``, ``"fp16"``.
    param_dtype : DType
        Weights, gradients and optimizer states (fp32 master weights under autocast).
    compute_dtype : DType
        Inputs and outputs of the matmuls and attention (what autocast casts to).
    residual_dtype : DType
        The residual stream, norms and the loss's input (fp32 under autocast).
    """

    name: str
    param_dtype: DType
    compute_dtype: DType
    residual_dtype: DType

    @property
    def is_amp(self) -> bool:
        """Whether the mode is autocast over fp32 parameters (``torch.autocast``)."""
        return self.name.startswith("amp_")

    @property
    def param_bytes(self) -> int:
        """Bytes per parameter, gradient and (for Adam-like optimizers) state element [B]."""
        return int(_BYTES[self.param_dtype])

    @property
    def compute_bytes(self) -> int:
        """Bytes per element of a matmul output [B]."""
        return int(_BYTES[self.compute_dtype])

    @property
    def residual_bytes(self) -> int:
        """Bytes per element of the residual stream [B]."""
        return int(_BYTES[self.residual_dtype])

    def __str__(self) -> str:
        return self.name


_BYTES = {DType.FP32: 4, DType.BF16: 2, DType.FP16: 2}

#: The training precision modes, by the name users type.
PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", DType.FP32, DType.FP32, DType.FP32),
    "amp_bf16": Precision("amp_bf16", DType.FP32, DType.BF16, DType.FP32),
    "amp_fp16": Precision("amp_fp16", DType.FP32, DType.FP16, DType.FP32),
    "bf16": Precision("bf16", DType.BF16, DType.BF16, DType.BF16),
    "fp16": Precision("fp16", DType.FP16, DType.FP16, DType.FP16),
}


def precision(value: Any, name: str = "precision") -> Precision:
    """The :class:`Precision` a training-precision argument names.

    Accepts a :class:`Precision`, one of the names in :data:`PRECISIONS`, or a dtype name that
    :func:`gpumodel.dtype` reads as fp32, bf16 or fp16 (``"torch.bfloat16"`` means pure bf16).
    """
    if isinstance(value, Precision):
        return value
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str):
        key = value.strip().lower()
        if key in PRECISIONS:
            return PRECISIONS[key]
        try:
            dt = _dtype(key)
        except UnknownDTypeError:
            dt = None
        if dt is not None and dt.value in PRECISIONS:
            return PRECISIONS[dt.value]
    raise ArgumentError(f"{name}={value!r} is not one of {', '.join(map(repr, PRECISIONS))}")


#: Number formats a model's weights may be stored in for inference (int8/int4 are weight-only).
WEIGHT_DTYPES = (DType.FP32, DType.BF16, DType.FP16, DType.FP8, DType.INT8, DType.INT4)


def weight_dtype(value: Any, name: str = "dtype", allowed: tuple[DType, ...] = WEIGHT_DTYPES) -> DType:
    """The :class:`~gpumodel.records.dtypes.DType` an inference ``dtype``/``kv_dtype`` argument names.

    Accepts every spelling :func:`gpumodel.dtype` does (``"bf16"``, ``"bfloat16"``, ``"torch.bfloat16"``).
    """
    try:
        dt = _dtype(value)
    except (UnknownDTypeError, TypeError, AttributeError):
        dt = None
    if dt == DType.FP8_E4M3:
        dt = DType.FP8
    if dt is None or dt not in allowed:
        raise ArgumentError(f"{name}={value!r} is not one of {', '.join(repr(d.value) for d in allowed)}")
    return dt


#: Number formats of a KV cache. ``inference_memory`` sizes all of them; the serving time model
#: (``prefill_time``, ``decode_step_time``, ``generation_time``, ``serving_capacity``) has attention and
#: cache-write kernels for the floating-point ones only (:data:`TIMED_KV_DTYPES`): an int8 cache would need
#: its own kernel model (quantising writes, dequantising attention reads).
KV_DTYPES = (DType.FP32, DType.BF16, DType.FP16, DType.FP8, DType.INT8)
TIMED_KV_DTYPES = (DType.FP32, DType.BF16, DType.FP16, DType.FP8)


def kv_cache_dtype(value: Any, weights: DType, name: str = "kv_dtype", *, timed: bool = False) -> DType:
    """The :class:`~gpumodel.records.dtypes.DType` of a KV cache: the one rule of ``kv_dtype`` arguments.

    ``None`` means the activations' format: fp32 with fp32 weights, else bf16 (the weights' ``dtype``
    is the resolved one). With ``timed`` (the serving time model) only :data:`TIMED_KV_DTYPES` are taken.

    >>> kv_cache_dtype(None, DType.BF16).value, kv_cache_dtype("float8_e4m3fn", DType.BF16).value
    ('bf16', 'fp8')
    >>> kv_cache_dtype("int8", DType.BF16, timed=True)
    Traceback (most recent call last):
    ...
    gpumodel.base.errors.ArgumentError: kv_dtype='int8' is not one of 'fp32', 'bf16', 'fp16', 'fp8' here: the serving time model has no int8 KV-cache kernels (inference_memory sizes an int8 cache)
    """
    if value is None:
        return DType.FP32 if weights == DType.FP32 else DType.BF16
    dt = weight_dtype(value, name, KV_DTYPES)
    flag(timed, "timed")
    if timed and dt not in TIMED_KV_DTYPES:
        raise ArgumentError(f"{name}={value!r} is not one of {', '.join(repr(d.value) for d in TIMED_KV_DTYPES)} here: "
                            f"the serving time model has no {dt.value} KV-cache kernels (inference_memory sizes an "
                            f"{dt.value} cache)")
    return dt


# ---------------------------------------------------------------------------------------------- training options
class Optimizer(StrEnum):
    """Optimizers, valued by the names users type (lower-case member names are kept as aliases)."""

    ADAMW = "adamw"
    ADAM = "adam"
    SGD = "sgd"
    SGD_MOMENTUM = "sgd_momentum"
    ADAFACTOR = "adafactor"
    ADAMW_8BIT = "adamw_8bit"
    adamw, adam, sgd, sgd_momentum, adafactor, adamw_8bit = ADAMW, ADAM, SGD, SGD_MOMENTUM, ADAFACTOR, ADAMW_8BIT


class Checkpointing(StrEnum):
    """Activation recomputation: none, full (every decoder layer) or selective (attention's core only)."""

    NONE = "none"
    FULL = "full"
    SELECTIVE = "selective"
    none, full, selective = NONE, FULL, SELECTIVE


class ExpertsImplementation(StrEnum):
    """How Hugging Face runs a mixture-of-experts layer (transformers ``experts_implementation``)."""

    GROUPED_MM = "grouped_mm"
    EAGER = "eager"


def checkpointing_mode(value: Any, name: str = "checkpointing") -> Checkpointing:
    """``False``/``True`` or a :class:`Checkpointing` name; ``True`` means ``"full"``.

    >>> checkpointing_mode("none"), checkpointing_mode(True)
    (<Checkpointing.NONE: 'none'>, <Checkpointing.FULL: 'full'>)
    """
    if isinstance(value, (bool, np.bool_)):
        return Checkpointing.FULL if value else Checkpointing.NONE
    if value is None:
        return Checkpointing.NONE
    return choice(Checkpointing, value, name)


# ---------------------------------------------------------------------------------------------- records
def resolve_gpu(gpu: Any, name: str = "gpu"):
    """The :class:`~gpumodel.records.gpu.GPUSpec` a GPU argument names: a name, an alias or a record."""
    from ..records.gpu import GPUSpec

    if isinstance(gpu, GPUSpec):
        return gpu
    if isinstance(gpu, str):
        from .gpus import gpu as lookup

        return lookup(gpu)
    raise ArgumentTypeError(f"{name} must be a GPU name such as 'h100' or a GPUSpec, got {type(gpu).__name__}")


def resolve_gpu_or_cc(value: Any, name: str = "gpu_or_cc"):
    """A GPU record, or a compute capability (``"9.0"``, ``(9, 0)``, ``9.0``) for the occupancy limits."""
    from ..records.gpu import GPUSpec

    if isinstance(value, (GPUSpec, str)):
        try:
            return resolve_gpu(value, name)
        except LookupError:
            if isinstance(value, str) and value.replace(".", "", 1).isdigit():
                return value
            raise
    if isinstance(value, (tuple, list)) or (isinstance(value, numbers.Real) and not isinstance(value, bool)):
        return value
    raise ArgumentTypeError(f"{name} must be a GPU name, a GPUSpec or a compute capability such as '9.0', "
                        f"got {type(value).__name__}")


def resolve_system(value: Any, name: str = "system"):
    """The :class:`~gpumodel.records.system.SystemSpec` a system argument names.

    A system name or alias (``"dgx-h100"``, ``"p5.48xlarge"``), a record, or a GPU (name or
    :class:`~gpumodel.records.gpu.GPUSpec`): a bare GPU means one node of that GPU.
    """
    from ..records.system import SYSTEM_CATALOG, SystemSpec, node_system
    from ..records.gpu import GPUSpec

    if isinstance(value, SystemSpec):
        return value
    if isinstance(value, GPUSpec):
        return node_system(value)
    if isinstance(value, str):
        if value in SYSTEM_CATALOG:
            return SYSTEM_CATALOG.get(value)
        from .gpus import GPU_CATALOG

        if value in GPU_CATALOG:
            return node_system(value)
        return SYSTEM_CATALOG.get(value)  # raises UnknownSystemError listing close names
    raise ArgumentError(f"{name} must be a system name such as 'dgx-h100', a GPU name, a SystemSpec or a GPUSpec, "
                        f"got {type(value).__name__}")


def resolve_model(model: Any, name: str = "model"):
    """The :class:`~gpumodel.records.transformer.TransformerConfig` a model argument names.

    A preset name (``"llama-3-8b"``), a record, or a Hugging Face ``config.json`` as a dict.
    """
    from ..records.transformer import TransformerConfig, model as lookup

    if isinstance(model, TransformerConfig):
        return model
    if isinstance(model, str):
        return lookup(model)
    if isinstance(model, Mapping):
        from pydantic import ValidationError

        from ..records.specs import _describe_errors
        from ..records.transformer import HFConfigError

        try:
            return TransformerConfig.from_hf(model)
        except HFConfigError as exc:
            raise HFConfigError(f"{name}: {exc}") from None
        except ValidationError as exc:  # a value out of range: the record's own checks
            raise HFConfigError(f"{name}: the Hugging Face config does not make a valid model: {_describe_errors(exc)}") from None
    raise ArgumentTypeError(f"{name} must be a model name such as 'llama-3-8b', a TransformerConfig or a Hugging Face "
                        f"config dict, got {type(model).__name__}")


def resolve_gpus(value: Any, name: str = "gpus") -> list:
    """A list of :class:`~gpumodel.records.gpu.GPUSpec` from a GPU argument that names several.

    One name or record means that GPU alone; an iterable gives one GPU per item. An empty list, a
    number or any other object is refused.

    >>> [g.name for g in resolve_gpus("h100")], [g.name for g in resolve_gpus(["h100", "a100"])]
    (['h100-sxm'], ['h100-sxm', 'a100-sxm4-80gb'])
    """
    from ..records.gpu import GPUSpec

    if isinstance(value, (str, GPUSpec)):
        return [resolve_gpu(value, name)]
    if isinstance(value, (Mapping, bytes)) or not hasattr(value, "__iter__"):
        raise ArgumentTypeError(f"{name} must be a GPU name, a GPUSpec or a list of them, got {type(value).__name__}")
    records = [resolve_gpu(item, name) for item in value]
    if not records:
        raise ArgumentError(f"{name} is empty; give at least one GPU name such as 'h100'")
    return records


def path_argument(value: Any, name: str = "path"):
    """A file or folder argument as a :class:`pathlib.Path`: a ``str`` or an ``os.PathLike``, not empty."""
    import os
    from pathlib import Path

    if isinstance(value, str) and not value.strip():
        raise ArgumentError(f"{name} is empty; give the path of a file or folder")
    if not isinstance(value, (str, os.PathLike)):
        raise ArgumentTypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}")
    return Path(value)


def passed_on(options: Mapping, to: Any, caller: str, *, taken: tuple = ()) -> dict:
    """Check the keyword ``options`` that ``caller`` passes on to the function ``to``; returns them.

    An option ``to`` does not take, or one that ``caller`` sets itself (``taken``), is refused naming it.
    """
    import inspect

    params = inspect.signature(to).parameters
    allowed = [p for p, v in params.items() if v.kind in (v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY) and p not in taken
               and p != "model"]
    for key in options:
        if key in taken:
            raise ArgumentTypeError(f"{caller} sets {key} itself; drop the {key}= argument")
        if key not in allowed:
            raise ArgumentTypeError(f"{caller} got an unexpected option {key}=; it passes options on to "
                                    f"{to.__name__}, which takes: {', '.join(allowed)}")
    return dict(options)


def within_positions(cfg: Any, seq_len: Any, name: str = "seq_len") -> None:
    """Warn of sequence lengths beyond a model's learned position embeddings (gpt2: 1024 positions).

    Rotary and ALiBi positions extend; a learned table does not: the model as configured cannot run such
    a sequence (its embedding lookup fails), though the memory of one with a longer table is close to the
    answer. A :class:`~gpumodel.base.errors.GpumodelWarning` says so.
    """
    from ..base.errors import GpumodelWarning

    learned = getattr(cfg.position, "value", cfg.position) == "learned"
    if learned and np.any(np.asarray(seq_len) > cfg.max_position_embeddings):
        warnings.warn(f"{name}={np.max(seq_len)} is beyond the {cfg.max_position_embeddings} learned positions of "
                      f"{cfg.name} (max_position_embeddings): the model as configured cannot run it",
                      GpumodelWarning, stacklevel=3)


def resolve_op(op: Any, name: str = "op"):
    """An :class:`~gpumodel.core.opcost.OpCost` (the record ``gm.ops.<op>(...)`` returns); anything else is refused."""
    from ..core.opcost import OpCost

    if isinstance(op, OpCost):
        return op
    hint = f"; build one with gm.ops.{op}(...)" if isinstance(op, str) else ""
    raise ArgumentTypeError(f"{name} must be an OpCost from gm.ops, e.g. gm.ops.matmul(4096, 4096, 4096), "
                            f"got {type(op).__name__}{hint}")


# ---------------------------------------------------------------------------------------------- flags and choices
def flag(value: Any, name: str) -> bool:
    """A real boolean: ``True``/``False`` (or NumPy's). Strings such as ``"no"`` are refused."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ArgumentError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")


def choice(kind: type[E], value: Any, name: str) -> E:
    """The member of the enum ``kind`` that ``value`` names (a member, or its value, any case)."""
    if isinstance(value, kind):
        return value
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "_")
        for member in kind:
            if str(member.value).lower().replace("-", "_") == key:
                return member
    allowed = ", ".join(repr(m.value) for m in kind)
    raise ArgumentError(f"{name}={value!r} is not one of {allowed}")


# ---------------------------------------------------------------------------------------------- results
def scalar_or_array(x: Any) -> Any:
    """A Python ``float`` for a 0-d value, the array otherwise: the return convention of the pure functions."""
    return float(x) if np.ndim(x) == 0 else np.asarray(x)


def format_seconds(t: float) -> str:
    """A time for people: four significant digits in ns, us, ms, s, min, h or days.

    >>> format_seconds(2.053e-4), format_seconds(3.5), format_seconds(7200), format_seconds(float("nan"))
    ('205.3 us', '3.500 s', '2.000 h', 'nan')
    """
    t = float(t)
    if not np.isfinite(t):
        return "nan" if np.isnan(t) else "inf"
    for unit, scale, above in (("days", 86400.0, 2.0), ("h", 3600.0, 1.5), ("min", 60.0, 1.5)):
        if t >= above * scale:
            return _fixed(t / scale, unit)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return _fixed(t / scale, unit)
    return _fixed(t / 1e-9, "ns")


def _fixed(x: float, unit: str) -> str:
    digits = 3 - min(int(np.floor(np.log10(abs(x)))) if x else 0, 3)
    return f"{x:.{max(digits, 0)}f} {unit}"


def deprecated_alias(old: str, new: str, value: Any, current: Any, default: Any = None) -> Any:
    """Take a renamed keyword: warn once per call when the old name is used, refuse both together."""
    if value is default:
        return current
    if current is not default:
        raise ArgumentError(f"give {new} only; {old} is its old name")
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)
    return value


#: the parallel-degree rules live in :mod:`gpumodel.vocabulary.parallel_rules`; their names are kept here
_PARALLEL_RULES = ("divides", "tensor_parallel", "splits_model", "parallel_degrees")


def __getattr__(name: str) -> Any:  # PEP 562: imported on first use (parallel_rules imports this module)
    if name in _PARALLEL_RULES:
        from . import parallel_rules

        return getattr(parallel_rules, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
