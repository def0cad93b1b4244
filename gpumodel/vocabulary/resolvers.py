"""Resolvers: a GPU, system or model argument (a name, an alias or a record) turned into its record, once, at
the edge of each public function.

Examples
--------
>>> from gpumodel.vocabulary.resolvers import resolve_gpu
>>> resolve_gpu("H100 SXM5").name
'h100-sxm'
"""

from __future__ import annotations

import difflib
import numbers
from typing import Any, Mapping

from pydantic import ValidationError

from ..base.errors import ArgumentError, ArgumentTypeError
from ..records.gpu import GPU_CATALOG, GPUSpec
from ..records.specs import UnknownGPUError, describe_errors, normalize_name
from ..records.system import SYSTEM_CATALOG, SystemSpec, UnknownSystemError, node_system
from ..records.transformer import HFConfigError, TransformerConfig, model as model_lookup

__all__ = ["resolve_gpu", "resolve_gpu_or_cc", "resolve_system", "resolve_model", "resolve_gpus",
           "UnknownGPUOrSystemError"]


class UnknownGPUOrSystemError(UnknownSystemError, UnknownGPUError):
    """Neither a system nor a GPU of that name, where either is taken; the message lists close names of both."""


def _unknown_gpu_or_system(value: str, name: str) -> UnknownGPUOrSystemError:
    """The error for a name that is neither a system nor a GPU: close system and GPU names, closest first."""
    key = normalize_name(value)
    close = SYSTEM_CATALOG.close_names(value, 3) + GPU_CATALOG.close_names(value, 3)
    close.sort(key=lambda c: -difflib.SequenceMatcher(None, key, normalize_name(c)).ratio())  # stable: systems first
    if close:
        allowed = ", ".join(repr(c) for c in close)
        hint = f"did you mean {allowed}?"
    else:
        allowed = f"systems: {', '.join(SYSTEM_CATALOG.names())}; GPUs: {', '.join(GPU_CATALOG.names())}"
        hint = f"known {allowed}"
    return UnknownGPUOrSystemError(f"no system or GPU named {value!r}; {hint}", argument=name, value=value,
                                   allowed=allowed)


# ---------------------------------------------------------------------------------------------- records
def resolve_gpu(gpu: Any, name: str = "gpu"):
    """The :class:`~gpumodel.records.gpu.GPUSpec` a GPU argument names: a name, an alias or a record."""
    if isinstance(gpu, GPUSpec):
        return gpu
    if isinstance(gpu, str):
        return GPU_CATALOG.get(gpu)
    raise ArgumentTypeError(f"{name} must be a GPU name such as 'h100' or a GPUSpec, got {type(gpu).__name__}",
                            argument=name, value=gpu, allowed="a GPU name such as 'h100' or a GPUSpec")


def resolve_gpu_or_cc(value: Any, name: str = "gpu_or_cc"):
    """A GPU record, or a compute capability (``"9.0"``, ``(9, 0)``, ``9.0``) for the occupancy limits."""
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
                            f"got {type(value).__name__}", argument=name, value=value,
                            allowed="a GPU name, a GPUSpec or a compute capability such as '9.0'")


def resolve_system(value: Any, name: str = "system"):
    """The :class:`~gpumodel.records.system.SystemSpec` a system argument names.

    A system name or alias (``"dgx-h100"``, ``"p5.48xlarge"``), a record, or a GPU (name or
    :class:`~gpumodel.records.gpu.GPUSpec`): a bare GPU means one node of that GPU. A name that is
    neither raises :class:`UnknownGPUOrSystemError` (an ``UnknownSystemError`` and an ``UnknownGPUError``)
    suggesting close names of both kinds.

    >>> resolve_system("dgx-h1000", "gpu_or_system")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpumodel.vocabulary.resolvers.UnknownGPUOrSystemError: no system or GPU named 'dgx-h1000'; did you mean 'dgx-h100', ...
    """
    if isinstance(value, SystemSpec):
        return value
    if isinstance(value, GPUSpec):
        return node_system(value)
    if isinstance(value, str):
        if value in SYSTEM_CATALOG:
            return SYSTEM_CATALOG.get(value)
        if value in GPU_CATALOG:
            return node_system(value)
        raise _unknown_gpu_or_system(value, name)
    raise ArgumentError(f"{name} must be a system name such as 'dgx-h100', a GPU name, a SystemSpec or a GPUSpec, "
                        f"got {type(value).__name__}", argument=name, value=value,
                        allowed="a system name such as 'dgx-h100', a GPU name, a SystemSpec or a GPUSpec")


def resolve_model(model: Any, name: str = "model"):
    """The :class:`~gpumodel.records.transformer.TransformerConfig` a model argument names.

    A preset name (``"llama-3-8b"``), a record, or a Hugging Face ``config.json`` as a dict.
    """
    if isinstance(model, TransformerConfig):
        return model
    if isinstance(model, str):
        return model_lookup(model)
    if isinstance(model, Mapping):
        try:
            return TransformerConfig.from_hf(model)
        except HFConfigError as exc:
            raise HFConfigError(f"{name}: {exc}", argument=exc.argument or name, value=exc.value,
                                allowed=exc.allowed) from None
        except ValidationError as exc:  # a value out of range: the record's own checks
            raise HFConfigError(f"{name}: the Hugging Face config does not make a valid model: {describe_errors(exc)}",
                                argument=name, value=model) from None
    raise ArgumentTypeError(f"{name} must be a model name such as 'llama-3-8b', a TransformerConfig or a Hugging Face "
                            f"config dict, got {type(model).__name__}", argument=name, value=model,
                            allowed="a model name such as 'llama-3-8b', a TransformerConfig or a Hugging Face "
                                    "config dict")


def resolve_gpus(value: Any, name: str = "gpus") -> list:
    """A list of :class:`~gpumodel.records.gpu.GPUSpec` from a GPU argument that names several.

    One name or record means that GPU alone; an iterable gives one GPU per item. An empty list, a
    number or any other object is refused.

    >>> [g.name for g in resolve_gpus("h100")], [g.name for g in resolve_gpus(["h100", "a100"])]
    (['h100-sxm'], ['h100-sxm', 'a100-sxm4-80gb'])
    """
    if isinstance(value, (str, GPUSpec)):
        return [resolve_gpu(value, name)]
    if isinstance(value, (Mapping, bytes)) or not hasattr(value, "__iter__"):
        raise ArgumentTypeError(f"{name} must be a GPU name, a GPUSpec or a list of them, got {type(value).__name__}",
                                argument=name, value=value, allowed="a GPU name, a GPUSpec or a list of them")
    records = [resolve_gpu(item, name) for item in value]
    if not records:
        raise ArgumentError(f"{name} is empty; give at least one GPU name such as 'h100'", argument=name, value=value,
                            allowed="at least one GPU name such as 'h100'")
    return records
