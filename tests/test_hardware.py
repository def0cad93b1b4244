"""GPUSpec: peak lookup, sparsity, the datasheet cross-checks, strictness."""

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import gpumodel as gm
from gpumodel.records.gpu import PEAK_TOLERANCE, GPUSpec, UnsupportedDTypeError


def _record(**changes):
    """A valid record (the H100 SXM5 as a plain dict) with some fields replaced."""
    data = gm.gpu("h100").model_dump()
    data = copy.deepcopy(data)
    data.update(name="test-gpu", aliases=(), memory_hierarchy=())
    peaks = changes.pop("peaks", {})
    data["peaks"].update(peaks)
    data.update(changes)
    return data


# ------------------------------------------------------------------ peak lookup
def test_peak_flops_is_dense_and_in_flops():
    h100 = gm.gpu("h100")
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12)  # datasheet 1,979 sparse / 2
    assert h100.peak_flops("torch.bfloat16") == h100.peak_flops("bf16")
    assert h100.peak_flops("fp8_e4m3") == h100.peak_flops("fp8") == pytest.approx(1978.9e12)
    assert h100.peak_flops("fp64_tensor") == pytest.approx(66.9e12)


def test_sparse_doubles_only_where_supported():
    h100, a100 = gm.gpu("h100"), gm.gpu("a100")
    assert h100.peak_flops("bf16", sparse=True) == pytest.approx(2 * 989.4e12)  # datasheet 1,979
    assert a100.peak_flops("int8", sparse=True) == pytest.approx(2 * 624e12)  # datasheet 1,248 TOPS
    with pytest.raises(UnsupportedDTypeError, match="sparse"):
        h100.peak_flops("fp32", sparse=True)  # CUDA cores: no structured sparsity
    with pytest.raises(UnsupportedDTypeError, match="sparse"):
        h100.peak_flops("fp64_tensor", sparse=True)
    with pytest.raises(UnsupportedDTypeError, match="sparse"):
        gm.gpu("v100").peak_flops("fp16", sparse=True)  # Volta predates 2:4 sparsity
    with pytest.raises(UnsupportedDTypeError, match="sparse"):
        gm.gpu("t4").peak_flops("int8", sparse=True)


def test_fp8_on_a100_is_an_error_naming_what_exists():
    with pytest.raises(UnsupportedDTypeError) as info:
        gm.gpu("a100").peak_flops("fp8")
    assert "a100-sxm4-80gb" in str(info.value) and "bf16" in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(UnsupportedDTypeError):
        gm.gpu("v100").peak_flops("bf16")
    with pytest.raises(UnsupportedDTypeError, match="int32"):
        gm.gpu("h100").peak_flops("int32")


def test_a_missing_peak_names_the_format_to_use_instead():
    with pytest.raises(UnsupportedDTypeError, match=r"v100-sxm2-32gb has no bf16 .*\(use fp16 instead\)") as info:
        gm.gpu("v100").peak_flops("bf16")
    assert info.value.argument == "dtype"
    with pytest.raises(UnsupportedDTypeError, match=r"\(use bf16 instead\)"):
        gm.gpu("a100").peak_flops("fp8")
    assert gm.gpu("v100").instead_of("bf16") == "fp16" and gm.gpu("t4").instead_of("bf16") == "fp16"
    assert gm.gpu("a100").instead_of("fp8") == "bf16" and gm.gpu("h100").instead_of("fp4") == "fp8"
    assert gm.gpu("h100").instead_of("bf16") is None  # it has bf16


def test_visible_memory_above_the_installed_memory_is_refused_in_code():
    with pytest.raises(gm.RecordError, match="memory_bytes_visible .* exceeds memory_bytes") as info:
        GPUSpec(**_record(memory_bytes=24 * 2**30, memory_bytes_visible=25 * 2**30))
    assert info.value.argument == "memory_bytes_visible"
    # every shipped record, rebuilt from its fields, still validates (decimal "GB" read as up to GiB)
    for g in gm.all_gpus():
        assert GPUSpec(**g.model_dump()) == g


def test_unknown_dtype_is_an_error():
    with pytest.raises(gm.UnknownDTypeError, match="known number formats"):
        gm.gpu("h100").peak_flops("fp12")


def test_supports():
    a100 = gm.gpu("a100")
    assert a100.supports("bf16") and a100.supports("tf32") and not a100.supports("fp8")
    assert not a100.supports("nonsense")
    assert gm.gpu("b200").supports("fp4") and not gm.gpu("h100").supports("fp4")


def test_supports_is_false_for_formats_without_a_peak_field():
    assert not gm.gpu("a100").supports("int32")


def test_geforce_fp16_accumulate_path():
    g = gm.gpu("4090")
    assert g.peak_flops("fp16") == pytest.approx(165.2e12)  # Ada whitepaper: FP16 w/ FP32 accumulate
    assert g.peak_flops("fp16", accumulate="fp16") == pytest.approx(330.3e12)  # w/ FP16 accumulate
    assert g.peak_flops("fp16_fp16acc") == pytest.approx(330.3e12)
    h100 = gm.gpu("h100")  # no separate rate: the same peak either way
    assert h100.peak_flops("fp16", accumulate="fp16") == h100.peak_flops("fp16")


def test_nvlink_and_levels():
    assert gm.gpu("h100").nvlink_bandwidth == 900e9
    assert gm.gpu("b200").nvlink_bandwidth == 1.8e12
    assert gm.gpu("4090").nvlink_bandwidth == 0.0
    assert gm.gpu("h100").bandwidth() == 3.35e12
    assert gm.gpu("4090").bandwidth("hbm") == gm.gpu("4090").bandwidth("device") == 1008e9
    assert gm.gpu("h100").bandwidth("l2") == 12e12  # Brenndoerfer (2026)
    with pytest.raises(ValueError, match="no published bandwidth for level='l2'"):
        gm.gpu("a100").bandwidth("l2")


def test_repr_is_readable():
    text = repr(gm.gpu("h200"))
    assert "h200-sxm" in text and "141 GB" in text and "4.8 TB/s" in text and "989.4 TFLOP/s" in text


def test_records_are_frozen():
    with pytest.raises(ValidationError):
        gm.gpu("h100").sm_count = 1


# ------------------------------------------------------------------ validation and cross-checks
def test_valid_record_round_trips():
    assert GPUSpec.model_validate(_record()).peaks.bf16 == pytest.approx(989.4e12)


def test_fp32_contradicting_cores_fails_with_the_numbers():
    with pytest.raises(ValidationError) as info:
        GPUSpec.model_validate(_record(peaks={"fp32": 80e12}))
    message = str(info.value)
    assert "fp32 peak 80.00 TFLOP/s" in message
    assert "132 x 128 x 2 x 1.980 GHz = 66.91 TFLOP/s" in message  # 132*128*2*1.98e9


def test_sparse_figure_entered_as_dense_fails():
    # the datasheet's 3,958 "with sparsity" typed into fp8 while bf16 is dense: fp8 = 4 x bf16, not 2 x
    with pytest.raises(ValidationError, match="fp8 peak 3958.0 is not 2 x .* check dense vs sparse"):
        GPUSpec.model_validate(_record(peaks={"fp8": 3958e12}))


@pytest.mark.parametrize("field, value, expected", [
    ("tf32", 989e12, "tf32 peak 989.0 is not 0.5 x"),
    ("bf16", 900e12, "bf16 900.0 != fp16 989.4"),
    ("int8", 1000e12, "int8 peak 1000.0 is not 2 or 4 x"),
    ("fp64_tensor", 100e12, "fp64_tensor peak 100.0 is not 1 or 2 x the fp64 peak 33.5"),
    ("fp16_fp16acc", 1500e12, "fp16_fp16acc peak 1500.0 is not 2 x"),
])
def test_each_published_ratio_is_checked(field, value, expected):
    with pytest.raises(ValidationError, match=expected):
        GPUSpec.model_validate(_record(peaks={field: value}))


def test_fp4_four_times_fp8_only_on_geforce_style_records():
    # RTX Blackwell whitepaper: RTX 5090 FP4 1,676 = 4 x FP8-with-FP32-accumulate 419 (dense)
    assert gm.gpu("5090").peak_flops("fp4") == pytest.approx(4 * gm.gpu("5090").peak_flops("fp8"))
    with pytest.raises(ValidationError, match="fp4 peak .* is not 2 x the fp8 peak"):
        GPUSpec.model_validate(_record(peaks={"fp4": 4 * 1978.9e12}))  # a data-center record: 2 x only
    geforce = _record(peaks={"fp4": 4 * 1978.9e12, "fp16_fp16acc": 2 * 989.4e12})
    assert GPUSpec.model_validate(geforce).peaks.fp4 == pytest.approx(7915.6e12)


def test_tolerance_is_three_percent():
    assert PEAK_TOLERANCE == 0.03
    GPUSpec.model_validate(_record(peaks={"fp32": 66.9e12 * 1.025}))  # within rounding of published figures
    with pytest.raises(ValidationError):
        GPUSpec.model_validate(_record(peaks={"fp32": 66.9e12 * 1.04}))


@pytest.mark.parametrize("changes, field", [
    ({"sm_count": 0}, "sm_count"),
    ({"memory_bandwidth": "-3.35 TB/s"}, "memory_bandwidth"),
    ({"memory_bandwidth": "3.35 TB"}, "memory_bandwidth"),  # bytes, not bytes/s
    ({"boost_clock": "fast"}, "boost_clock"),
    ({"source": "TODO"}, "source"),
    ({"source": ""}, "source"),
    ({"compute_capability": "nine"}, "compute_capability"),
    ({"name": "H100 SXM"}, "name"),
    ({"pcie_generation": 2}, "pcie_generation"),
    ({"sparsity": "4:8"}, "sparsity"),
])
def test_bad_fields_are_named(changes, field):
    with pytest.raises(ValidationError) as info:
        GPUSpec.model_validate(_record(**changes))
    assert field in str(info.value)


def test_unknown_field_is_rejected():
    with pytest.raises(ValidationError, match="bandwith"):
        GPUSpec.model_validate(_record(bandwith="3 TB/s"))
    with pytest.raises(ValidationError, match="bf61"):
        GPUSpec.model_validate(_record(peaks={"bf61": 1.0}))


def test_vendor_rules():
    with pytest.raises(ValidationError, match="needs compute_capability"):
        GPUSpec.model_validate(_record(compute_capability=None))
    with pytest.raises(ValidationError, match="occupancy_note"):
        GPUSpec.model_validate(_record(vendor="amd", compute_capability=None))
    with pytest.raises(ValidationError, match="max_shared_memory_per_block exceeds"):
        GPUSpec.model_validate(_record(max_shared_memory_per_block="300 KiB"))


# ------------------------------------------------------------------ property: the fp32 cross-check
@settings(max_examples=60, deadline=None)
@given(sms=st.integers(1, 400), lanes=st.sampled_from([64, 128]), ghz=st.floats(0.5, 3.0),
       error=st.floats(-0.2, 0.2))
def test_fp32_check_accepts_exactly_the_consistent_records(sms, lanes, ghz, error):
    exact = sms * lanes * 2 * ghz * 1e9
    data = _record(sm_count=sms, fp32_cores_per_sm=lanes, boost_clock=ghz * 1e9, peaks={"fp32": exact * (1 + error)})
    off_by = abs(error) / max(1.0, 1 + error)  # math.isclose is relative to the larger value
    if off_by <= PEAK_TOLERANCE * 0.99:
        assert GPUSpec.model_validate(data).fp32_peak_from_cores == pytest.approx(exact)
    elif off_by >= PEAK_TOLERANCE * 1.01:
        with pytest.raises(ValidationError, match="sm_count x fp32_cores_per_sm"):
            GPUSpec.model_validate(data)
