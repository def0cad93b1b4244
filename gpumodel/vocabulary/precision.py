"""Precisions, number formats of weights and KV caches, optimizers and recomputation modes: the training and
serving options' vocabulary.

Examples
--------
>>> from gpumodel.vocabulary.precision import precision
>>> p = precision("amp_bf16")
>>> p.param_dtype.value, p.compute_dtype.value, p.is_amp
('fp32', 'bf16', True)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base.arguments import choice, flag
from ..base.enums import StrEnum
from ..base.errors import ArgumentError
from ..base.numeric import positive_int
from ..records.dtypes import DType, UnknownDTypeError, dtype as _dtype
from ..records.gpu import UnsupportedDTypeError
from .parallel_rules import divides

__all__ = ["Precision", "PRECISIONS", "precision", "precision_on", "weight_dtype", "WEIGHT_DTYPES", "kv_cache_dtype", "KV_DTYPES",
           "TIMED_KV_DTYPES", "Optimizer", "Checkpointing", "ExpertsImplementation", "Framework", "checkpointing_mode",
           "FP8Recipe", "FP8_SEARCH", "fp8_recipe", "fp8_training"]


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
    allowed = ", ".join(map(repr, PRECISIONS))
    raise ArgumentError(f"{name}={value!r} is not one of {allowed}", argument=name, value=value, allowed=allowed)


def precision_on(value: Any, gpu: Any, name: str = "precision") -> Precision:
    """The :class:`Precision` a training-precision argument names, refused where ``gpu`` cannot compute in it.

    Parameters
    ----------
    value : str or Precision
        As :func:`precision` takes.
    gpu : GPUSpec
        The GPU record the step runs on.
    name : str
        The argument's name, for the error.

    Returns
    -------
    Precision
        The precision mode.

    Raises
    ------
    UnsupportedDTypeError
        The GPU has no tensor-core path for the mode's compute format (bf16 on a V100 or a T4); the message
        names the mode to use instead (``precision='amp_fp16'``).

    Examples
    --------
    >>> import gpumodel as gm
    >>> precision_on("amp_fp16", gm.gpu("v100")).name
    'amp_fp16'
    >>> precision_on("amp_bf16", gm.gpu("v100"))
    Traceback (most recent call last):
    ...
    gpumodel.records.gpu.UnsupportedDTypeError: v100-sxm2-32gb has no bf16 tensor-core rate (its datasheet has no bf16 execution path): use precision='amp_fp16' instead
    """
    prec = precision(value, name)
    if gpu.supports(prec.compute_dtype):
        return prec
    dt = prec.compute_dtype.value
    alt = gpu.instead_of(dt)
    usable = [n for n, p in PRECISIONS.items() if gpu.supports(p.compute_dtype)]
    instead = next((n for n, p in PRECISIONS.items() if p.compute_dtype.value == alt and p.is_amp == prec.is_amp),
                   None) or (usable[0] if usable else None)
    allowed = ", ".join(map(repr, usable))
    use = f": use {name}={instead!r} instead" if instead else ""
    raise UnsupportedDTypeError(f"{gpu.name} has no {dt} tensor-core rate (its datasheet has no {dt} execution "
                                f"path){use}", argument=name, value=value, allowed=allowed)


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
        names = ", ".join(repr(d.value) for d in allowed)
        raise ArgumentError(f"{name}={value!r} is not one of {names}", argument=name, value=value, allowed=names)
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
        names = ", ".join(repr(d.value) for d in TIMED_KV_DTYPES)
        raise ArgumentError(f"{name}={value!r} is not one of {names} here: "
                            f"the serving time model has no {dt.value} KV-cache kernels (inference_memory sizes an "
                            f"{dt.value} cache)", argument=name, value=value, allowed=names)
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


class Framework(StrEnum):
    """Training engines: ``hf`` (eager PyTorch / Hugging Face), ``megatron`` (Megatron-Core with Transformer Engine),
    ``fsdp`` (PyTorch FSDP1/FSDP2, DDP without sharding) and ``deepspeed`` (DeepSpeed ZeRO). The engine decides how
    kernels are fused, how communication overlaps, and what each GPU holds in memory."""

    HF = "hf"
    MEGATRON = "megatron"
    FSDP = "fsdp"
    DEEPSPEED = "deepspeed"


class GradReduce(StrEnum):
    """The format of Megatron-LM's gradient buffer and data-parallel reduction: fp32 (``--accumulate-allreduce-grads-in-fp32``,
    forced with ``--bf16``) or 16-bit (``--grad-reduce-in-bf16``; NeMo's distributed Adam ``grad_sync_dtype``)."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


def grad_reduce_dtype(value: Any, framework: Any, name: str = "grad_reduce_dtype") -> GradReduce | None:
    """``None`` (the engine's default) or a :class:`GradReduce` name, for ``framework="megatron"`` alone.

    >>> grad_reduce_dtype("bf16", Framework.MEGATRON), grad_reduce_dtype(None, Framework.FSDP)
    (<GradReduce.BF16: 'bf16'>, None)
    """
    if value is None:
        return None
    fmt = choice(GradReduce, value, name)
    if framework != Framework.MEGATRON:
        raise ArgumentError(f"{name}={fmt.value!r} sets Megatron-LM's gradient reduction; framework="
                            f"{getattr(framework, 'value', framework)!r} reduces in its own format",
                            argument=name, value=value, allowed="None, or framework='megatron'")
    return fmt


class Zero3Gather(StrEnum):
    """How ZeRO-3 gathers the sharded weights: ``prefetch`` (a layer's weights as one flat buffer, prefetched under
    compute: FSDP, DeepSpeed from v0.5.5) or ``per_parameter`` (DeepSpeed before v0.5.5: one synchronous list
    all-gather per parameter tensor, :mod:`gpumodel.cluster.zero3gather`)."""

    PREFETCH = "prefetch"
    PER_PARAMETER = "per_parameter"


def zero3_gather(value: Any, framework: Any, name: str = "zero3_gather") -> Zero3Gather:
    """A :class:`Zero3Gather` name; ``"per_parameter"`` with ``framework="deepspeed"`` alone.

    >>> zero3_gather("per_parameter", Framework.DEEPSPEED), zero3_gather("prefetch", Framework.FSDP)
    (<Zero3Gather.PER_PARAMETER: 'per_parameter'>, <Zero3Gather.PREFETCH: 'prefetch'>)
    """
    gather = choice(Zero3Gather, value, name)
    if gather == Zero3Gather.PER_PARAMETER and framework != Framework.DEEPSPEED:
        raise ArgumentError(f"{name}='per_parameter' is how DeepSpeed gathered before v0.5.5; framework="
                            f"{getattr(framework, 'value', framework)!r} gathers a layer's weights at once",
                            argument=name, value=value, allowed="'prefetch', or 'per_parameter' with framework='deepspeed'")
    return gather


def shard_group(value: Any, framework: Any, zero: Any, group: Any, name: str = "shard_group") -> Any:
    """``None`` (shard over all of ``group``), or FSDP's HSDP sharding group: a positive divisor of ``group``
    (``dp * cp``), with ``framework="fsdp"`` and ``zero`` 2 or 3 alone.

    >>> shard_group(8, Framework.FSDP, 3, 64), shard_group(None, Framework.MEGATRON, 1, 64)
    (8, None)
    """
    if value is None:
        return None
    if framework != Framework.FSDP or np.any(np.asarray(zero) < 2):
        raise ArgumentError(f"{name} is FSDP's (HSDP's) sharding group: framework='fsdp' with zero 2 or 3",
                            argument=name, value=value, allowed="None")
    shard = positive_int(value, name)
    divides(shard, group, name, "dp * cp")
    return shard


class FP8Recipe(StrEnum):
    """Transformer Engine's fp8 recipes (Megatron-Core's ``--fp8-recipe``): how each tensor's scale is found.

    * ``delayed``: one scale a tensor from the amax history of earlier steps (TE's ``DelayedScaling``, its and
      Megatron-Core's default); the cast that writes fp8 records this step's amax as it goes.
    * ``current``: one scale a tensor from its own amax (``Float8CurrentScaling``): a reduction pass over each
      16-bit tensor before its cast.
    * ``mxfp8``: a power-of-two scale for every 32 elements (``MXFP8BlockScaling``, Blackwell's block-scaled tensor
      cores): scales found inside the cast, the transposed copy quantised from the 16-bit tensor.
    * ``blockwise``: a scale for every 1 x 128 tile of activations and gradients and every 128 x 128 block of
      weights (``Float8BlockScaling``; DeepSeek-V3's "fine-grained" quantisation): scales found inside the cast, and
      on Hopper every GEMM promotes its partial sums to fp32 every 128 elements of ``k``.
    """

    DELAYED = "delayed"
    CURRENT = "current"
    MXFP8 = "mxfp8"
    BLOCKWISE = "blockwise"


#: The fp8 choices of a plan's search, by the word a user picks (``gpumodel plan --fp8``, the Plan page), as
#: ``plan_training(fp8=...)`` takes them: off, on (the default recipe), both searched, or one recipe by name.
FP8_SEARCH = {"off": False, "on": True, "both": [False, True], **{r.value: r.value for r in FP8Recipe}}

#: Other names of the recipes: DeepSeek-V3's and TE's class names.
_RECIPE_ALIASES = {"fine-grained": "blockwise", "fine_grained": "blockwise", "tensorwise": "current",
                   "delayedscaling": "delayed", "float8currentscaling": "current", "mxfp8blockscaling": "mxfp8",
                   "float8blockscaling": "blockwise"}


def fp8_recipe(value: Any, framework: Any, gpu: Any = None, name: str = "fp8") -> FP8Recipe | None:
    """The fp8 recipe ``fp8=`` asks for.

    Parameters
    ----------
    value : bool, str or None
        False (or None) for no fp8, True for Transformer Engine's default recipe (``"delayed"``), or a recipe's name
        (:class:`FP8Recipe`, any case; ``"fine-grained"`` is ``"blockwise"``, TE's class names are taken too).
    framework : Framework or str
        The training engine: only Megatron-Core (with Transformer Engine) is modelled with fp8.
    gpu : GPUSpec, optional
        The GPU, when known: one without fp8 tensor cores is refused, and ``"mxfp8"`` before Blackwell (compute
        capability 10.0).
    name : str
        The argument's name, for the errors.

    Returns
    -------
    FP8Recipe or None
        None for no fp8.

    Raises
    ------
    ArgumentError
        An unknown recipe, another framework, or a GPU that cannot run it (naming ``name``).

    Examples
    --------
    >>> fp8_recipe(True, Framework.MEGATRON), fp8_recipe("fine-grained", Framework.MEGATRON), fp8_recipe(False, "hf")
    (<FP8Recipe.DELAYED: 'delayed'>, <FP8Recipe.BLOCKWISE: 'blockwise'>, None)
    """
    if value is None or isinstance(value, (bool, np.bool_)) or not isinstance(value, str):
        recipe = FP8Recipe.DELAYED if flag(value if value is not None else False, name) else None
    else:
        key = value.strip().lower()
        recipe = choice(FP8Recipe, _RECIPE_ALIASES.get(key, key), name)
    if recipe is not None and framework != Framework.MEGATRON:
        raise ArgumentError(f"{name}={value!r} is Transformer Engine's fp8 recipe as Megatron-Core runs it; framework="
                            f"{getattr(framework, 'value', framework)!r} is not modelled with it", argument=name,
                            value=value, allowed="False, or framework='megatron'")
    if recipe is not None and gpu is not None and not gpu.supports("fp8"):
        raise ArgumentError(f"{name}={value!r} needs fp8 tensor cores; {gpu.name} has none", argument=name,
                            value=value, allowed="False on this GPU")
    if recipe == FP8Recipe.MXFP8 and gpu is not None and int(str(gpu.compute_capability or "0.0").split(".")[0]) < 10:
        raise ArgumentError(f"{name}='mxfp8' needs Blackwell's block-scaled tensor cores (compute capability 10.0 or "
                            f"later); {gpu.name} has {gpu.compute_capability}", argument=name, value=value,
                            allowed="'delayed', 'current' or 'blockwise' on this GPU")
    return recipe


def fp8_training(value: Any, framework: Any, gpu: Any = None, name: str = "fp8") -> bool:
    """Whether ``fp8=`` asks for fp8 training (:func:`fp8_recipe` checks it), as the memory model reads it.

    >>> fp8_training(True, Framework.MEGATRON), fp8_training("current", Framework.MEGATRON), fp8_training(False, Framework.HF)
    (True, True, False)
    """
    return fp8_recipe(value, framework, gpu, name) is not None


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
