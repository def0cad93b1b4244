"""Number formats against Brenndoerfer (2026), IEEE 754 (through NumPy), torch.finfo and the OCP specs.

Brenndoerfer (2026): M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores",
https://mbrenndoerfer.com/writing/gpu-architecture-memory-hierarchy-cuda-tensor-cores
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumodel.records.dtypes import FORMATS, DType, UnknownDTypeError, bytes_per_element, dtype, info

FLOATS = [d for d in DType if FORMATS[d].is_float]


# ------------------------------------------------------------------ Brenndoerfer's (2026) table
def test_brenndoerfer_fp16():
    f = info("fp16")
    assert (f.exponent_bits, f.mantissa_bits, f.bits) == (5, 10, 16)
    assert f.max == 65504.0  # (2 - 2**-10) * 2**15
    assert f.smallest_normal == pytest.approx(6.1e-5, rel=1e-2)  # 2**-14


def test_brenndoerfer_bf16():
    f = info("bf16")
    assert (f.exponent_bits, f.mantissa_bits, f.bits) == (8, 7, 16)
    assert f.max == pytest.approx(3.39e38, rel=1e-3)  # (2 - 2**-7) * 2**127: fp32's range
    assert f.smallest_normal == info("fp32").smallest_normal


def test_brenndoerfer_tf32():
    f = info("tf32")
    assert (f.exponent_bits, f.mantissa_bits, f.bits) == (8, 10, 19)  # 1 + 8 + 10 bits
    assert f.storage_bits == 32 and bytes_per_element("tf32") == 4.0  # held in fp32 registers/memory


def test_brenndoerfer_fp32():
    f = info("fp32")
    assert (f.exponent_bits, f.mantissa_bits) == (8, 23)
    assert f.max == pytest.approx(3.4e38, rel=1e-2)
    assert f.smallest_normal == pytest.approx(1.2e-38, rel=3e-2)  # 2**-126 = 1.18e-38


# ------------------------------------------------------------------ independent references
@pytest.mark.parametrize("name, np_type", [("fp16", np.float16), ("fp32", np.float32), ("fp64", np.float64)])
def test_ieee_formats_match_numpy(name, np_type):
    f, ref = info(name), np.finfo(np_type)
    assert f.max == float(ref.max)
    assert f.smallest_normal == float(ref.smallest_normal)
    assert f.eps == float(ref.eps)
    assert (f.exponent_bits, f.mantissa_bits, f.bits) == (ref.nexp, ref.nmant, ref.bits)
    assert bytes_per_element(name) == np.dtype(np_type).itemsize


@pytest.mark.parametrize("name, attr", [("bf16", "bfloat16"), ("fp8_e4m3", "float8_e4m3fn"),
                                        ("fp8_e5m2", "float8_e5m2"), ("fp16", "float16")])
def test_formats_match_torch_finfo(name, attr):
    torch = pytest.importorskip("torch")
    ref = torch.finfo(getattr(torch, attr))
    f = info(name)
    assert f.max == ref.max and f.smallest_normal == ref.smallest_normal and f.eps == ref.eps
    assert f.bits == ref.bits


def test_ocp_8_bit_and_mx_formats():
    # OCP 8-bit Floating Point Specification (OFP8) rev 1.0, Table 1; OCP Microscaling Formats v1.0, Table 1
    assert info("fp8_e4m3").max == 448.0 and info("fp8_e4m3").smallest_normal == 2.0**-6
    assert info("fp8_e5m2").max == 57344.0 and info("fp8_e5m2").smallest_normal == 2.0**-14
    e4m3, fp8 = info("fp8_e4m3"), info("fp8")  # plain "fp8" means E4M3, the weights/activations format
    assert (fp8.exponent_bits, fp8.mantissa_bits, fp8.max) == (e4m3.exponent_bits, e4m3.mantissa_bits, e4m3.max)
    assert info("fp6").max == 28.0 and info("fp6").smallest_normal == 0.25  # E3M2: 1.75 * 2**4, 2**(1-3)
    assert info("fp4").max == 6.0 and info("fp4").smallest_normal == 1.0  # E2M1: 1.5 * 2**2, 2**0


def test_bytes_per_element():
    assert bytes_per_element("int4") == 0.5 and bytes_per_element("fp4") == 0.5  # never 0 (4 // 8 == 0 bug)
    assert bytes_per_element("fp6") == 0.75
    assert bytes_per_element("int8") == 1 and bytes_per_element("fp8") == 1
    assert bytes_per_element("bf16") == 2 and bytes_per_element("int32") == 4
    assert all(bytes_per_element(d) > 0 for d in DType)


def test_integers():
    assert info("int8").max == 127 and info("int4").max == 7 and info("int32").max == 2**31 - 1
    assert not info("int8").is_float


# ------------------------------------------------------------------ names
@pytest.mark.parametrize("alias, expected", [
    ("bfloat16", "bf16"), ("torch.bfloat16", "bf16"), ("BF16", "bf16"), ("half", "fp16"), ("float16", "fp16"),
    ("torch.float32", "fp32"), ("float", "fp32"), ("double", "fp64"), ("float8_e4m3fn", "fp8_e4m3"),
    ("float8_e5m2", "fp8_e5m2"), ("nvfp4", "fp4"), (" fp8 ", "fp8"), (np.float16, "fp16"),
    (np.dtype("float32"), "fp32"), (DType.INT8, "int8"),
])
def test_names_users_type(alias, expected):
    assert dtype(alias) is DType(expected)


def test_torch_dtype_objects():
    torch = pytest.importorskip("torch")
    assert dtype(torch.bfloat16) is DType.BF16 and dtype(torch.float16) is DType.FP16


def test_unknown_dtype_lists_names():
    with pytest.raises(UnknownDTypeError) as e:
        dtype("fp12")
    message = str(e.value)
    assert "'fp12'" in message
    for d in DType:
        assert d.value in message
    assert isinstance(e.value, ValueError)
    with pytest.raises(UnknownDTypeError):
        bytes_per_element("int3")


def test_str_is_the_value():
    assert str(DType.BF16) == "bf16" and DType("bf16") == "bf16"


# ------------------------------------------------------------------ properties
@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_float_layout_properties(d):
    f = FORMATS[d]
    assert f.bits == 1 + f.exponent_bits + f.mantissa_bits
    assert f.eps == 2.0**-f.mantissa_bits
    bias = 2 ** (f.exponent_bits - 1) - 1
    assert f.smallest_normal == 2.0 ** (1 - bias)
    assert f.max > 1 >= f.smallest_normal > 0  # E2M1 (fp4): smallest normal is exactly 1
    assert f.storage_bits >= f.bits


@given(st.sampled_from(FLOATS), st.sampled_from(FLOATS))
def test_more_exponent_bits_never_shrink_the_range(a, b):
    fa, fb = FORMATS[a], FORMATS[b]
    if fa.exponent_bits > fb.exponent_bits:
        assert fa.max > fb.max and fa.smallest_normal < fb.smallest_normal
    if fa.mantissa_bits > fb.mantissa_bits:
        assert fa.eps < fb.eps


@given(st.sampled_from(list(DType)))
def test_every_format_resolves_from_its_value_in_any_case(d):
    assert dtype(d.value.upper()) is d and dtype(f"torch.{d.value}") is d
