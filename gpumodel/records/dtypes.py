"""Number formats: bit layouts, ranges and storage sizes.

Each :class:`DType` member's value is the name users type (``"bf16"``); :func:`dtype`
also accepts the names PyTorch and NumPy use (``"bfloat16"``, ``"torch.float16"``,
``"half"``). Floating-point properties follow IEEE 754 for fp16/fp32/fp64, the bfloat16
and TF32 layouts NVIDIA and Google publish, and the OCP 8-bit (OFP8, 2023) and MX
(OCP Microscaling v1.0, 2023) specifications for fp8 and fp4.

Examples
--------
>>> info("bf16").exponent_bits, info("bf16").mantissa_bits
(8, 7)
>>> info("fp16").max
65504.0
>>> bytes_per_element("int4")
0.5
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..base.enums import StrEnum
from ..base.errors import ArgumentError

__all__ = ["DType", "FormatInfo", "UnknownDTypeError", "dtype", "info", "bytes_per_element", "FORMATS"]


class UnknownDTypeError(ArgumentError):
    """A number-format name that gpumodel does not know."""


class DType(StrEnum):
    """Number formats, valued by the names users type in YAML and on the command line."""

    FP64 = "fp64"
    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"  # OCP E4M3, the format used for weights and activations
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    FP6 = "fp6"  # OCP MX E3M2
    FP4 = "fp4"  # OCP MX E2M1
    INT32 = "int32"
    INT8 = "int8"
    INT4 = "int4"


@dataclass(frozen=True)
class FormatInfo:
    """Bit layout and range of one number format.

    Attributes
    ----------
    dtype : DType
    bits : int
        Width of the logical format [bit].
    storage_bits : int
        Bits one element occupies in device memory (TF32 is stored as fp32).
    exponent_bits, mantissa_bits : int
        Explicitly stored exponent and fraction bits (0 for integers).
    max : float
        Largest finite value.
    smallest_normal : float
        Smallest positive normal value (1 for integers).
    eps : float
        Machine epsilon, the gap between 1 and the next value, ``2**-mantissa_bits`` (1 for integers).
    is_float : bool
    """

    dtype: DType
    bits: int
    storage_bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    eps: float
    is_float: bool

    @property
    def bytes(self) -> float:
        """Bytes one element occupies in device memory [byte]; a fraction for sub-byte formats."""
        return self.storage_bits / 8


def _ieee_like(dt: DType, exp: int, man: int, storage: int | None = None, max_value: float | None = None) -> FormatInfo:
    bias = 2 ** (exp - 1) - 1
    largest = (2 - 2.0**-man) * 2.0**bias if max_value is None else max_value
    bits = 1 + exp + man
    return FormatInfo(dt, bits, storage or bits, exp, man, float(largest), 2.0 ** (1 - bias), 2.0**-man, True)


def _integer(dt: DType, bits: int) -> FormatInfo:
    return FormatInfo(dt, bits, bits, 0, 0, float(2 ** (bits - 1) - 1), 1.0, 1.0, False)


#: Every format's layout. fp8 E4M3 and the MX formats have no infinities, which frees the
#: top exponent for finite values (max 448 rather than 240 for E4M3; 7.5 for E3M2; 6 for E2M1).
FORMATS: dict[DType, FormatInfo] = {
    DType.FP64: _ieee_like(DType.FP64, 11, 52),
    DType.FP32: _ieee_like(DType.FP32, 8, 23),
    DType.TF32: _ieee_like(DType.TF32, 8, 10, storage=32),
    DType.FP16: _ieee_like(DType.FP16, 5, 10),
    DType.BF16: _ieee_like(DType.BF16, 8, 7),
    DType.FP8: _ieee_like(DType.FP8, 4, 3, max_value=448.0),
    DType.FP8_E4M3: _ieee_like(DType.FP8_E4M3, 4, 3, max_value=448.0),
    DType.FP8_E5M2: _ieee_like(DType.FP8_E5M2, 5, 2),
    DType.FP6: _ieee_like(DType.FP6, 3, 2, max_value=28.0),
    DType.FP4: _ieee_like(DType.FP4, 2, 1, max_value=6.0),
    DType.INT32: _integer(DType.INT32, 32),
    DType.INT8: _integer(DType.INT8, 8),
    DType.INT4: _integer(DType.INT4, 4),
}

_ALIASES: dict[str, DType] = {
    "float64": DType.FP64, "double": DType.FP64, "f64": DType.FP64,
    "float32": DType.FP32, "float": DType.FP32, "f32": DType.FP32, "single": DType.FP32,
    "tensorfloat32": DType.TF32, "tensorfloat-32": DType.TF32,
    "float16": DType.FP16, "half": DType.FP16, "f16": DType.FP16,
    "bfloat16": DType.BF16, "bf16": DType.BF16,
    "float8": DType.FP8, "float8_e4m3fn": DType.FP8_E4M3, "e4m3": DType.FP8_E4M3,
    "float8_e5m2": DType.FP8_E5M2, "e5m2": DType.FP8_E5M2,
    "e3m2": DType.FP6, "float6": DType.FP6, "e2m1": DType.FP4, "float4": DType.FP4, "nvfp4": DType.FP4,
    "int": DType.INT32, "uint8": DType.INT8, "qint8": DType.INT8,
}


def dtype(name: DType | str | object) -> DType:
    """Resolve a format name, a :class:`DType`, or a torch/NumPy dtype to a :class:`DType`.

    Parameters
    ----------
    name : str, DType, torch.dtype or numpy.dtype
        A format name ("bf16", "fp8_e4m3", "torch.bfloat16"; case-insensitive), a :class:`DType`, or a
        torch or NumPy dtype.

    Returns
    -------
    DType
        The number format.

    Raises
    ------
    UnknownDTypeError
        The name is not a known number format; the message lists the known ones.

    Examples
    --------
    >>> dtype("torch.bfloat16")
    <DType.BF16: 'bf16'>
    >>> dtype("BF16") is DType.BF16
    True
    """
    if isinstance(name, DType):
        return name
    if isinstance(name, np.dtype) or (isinstance(name, type) and issubclass(name, np.generic)):
        name = np.dtype(name).name
    key = str(name).strip().lower().removeprefix("torch.").removeprefix("numpy.")
    try:
        return DType(key)
    except ValueError:
        pass
    if key in _ALIASES:
        return _ALIASES[key]
    known = ", ".join(d.value for d in DType)
    raise UnknownDTypeError(f"unknown dtype {name!r}; known number formats: {known}", argument="dtype", value=name,
                            allowed=known)


def info(name: DType | str) -> FormatInfo:
    """Layout and range of a number format (see :class:`FormatInfo`)."""
    return FORMATS[dtype(name)]


def bytes_per_element(name: DType | str) -> float:
    """Storage size of one element [byte]; ``0.5`` for 4-bit formats, never 0.

    Examples
    --------
    >>> bytes_per_element("bf16"), bytes_per_element("tf32")
    (2.0, 4.0)
    """
    return FORMATS[dtype(name)].bytes
