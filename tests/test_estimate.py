"""gm.estimate_time / gm.estimate: calibrated where a calibration ships, honest where none does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpumodel as gm
from gpumodel.calibration.record import calibration_for


def test_h200_is_calibrated_and_others_say_they_are_not():
    op = gm.ops.matmul(4096, 4096, 4096, "bf16")
    h200 = gm.estimate(op, "h200")
    assert h200.calibrated and h200.source == "calibrated" and "calibrated on" in h200.detail
    a100 = gm.estimate(op, "a100-sxm4-80gb")  # no A100 calibration ships: the H200's, transferred
    assert not a100.calibrated and a100.source == "transferred" and "h200-sxm" in a100.detail
    off = gm.estimate(op, "h200", calibrated=False)
    assert not off.calibrated and off.source == "datasheet" and "uncalibrated" in off.detail
    assert gm.estimate(gm.ops.matmul(64, 64, 64, "fp16"), "v100").source == "datasheet"  # no Volta prior


def test_families_the_calibration_did_not_measure_are_labelled_uncalibrated():
    # every op of gm.ops has H200 measurements now; a fused kernel of several ops was never measured
    fused = gm.ops.fuse(gm.ops.elementwise(1 << 20), gm.ops.elementwise(1 << 20))
    est = gm.estimate(fused, "h200")
    assert not est.calibrated and est.source == "calibrated" and "no fused" in est.detail
    assert gm.estimate(gm.ops.softmax(4096, 32000), "h200").calibrated
    assert gm.estimate(gm.ops.cross_entropy(4096, 32000), "h200").calibrated


def test_vectorized_matches_scalar_calls():
    m = np.array([1, 64, 1000, 4096, 16384])
    vec = gm.estimate_time(gm.ops.matmul(m, 4096, 4096), "h200")
    one = [gm.estimate_time(gm.ops.matmul(int(x), 4096, 4096), "h200") for x in m]
    assert vec.shape == (5,)
    np.testing.assert_allclose(vec, one, rtol=1e-12)


def test_bounds_say_what_decided():
    assert gm.estimate(gm.ops.matmul(8192, 8192, 8192), "h200").bound == "compute"
    assert gm.estimate(gm.ops.elementwise(2**28, "bf16"), "h200").bound == "memory"
    assert gm.estimate(gm.ops.elementwise(16, "bf16"), "h200").bound == "launch"
    assert gm.estimate(gm.ops.matmul(1, 8192, 8192), "h200").bound == "memory"      # decode GEMV
    bounds = gm.estimate(gm.ops.elementwise(np.array([16, 2**28]), "bf16"), "h200").bound
    assert list(bounds) == ["launch", "memory"]


def test_large_copy_is_bytes_over_fitted_bandwidth_plus_launch():
    p = calibration_for("h200").parameters
    op = gm.ops.elementwise(2**28, "bf16", flops_per_element=0)
    expected = p["launch_s"] + 2 * 2**28 * 2 / p["bandwidth"]       # read + write, 2 bytes each
    assert gm.estimate_time(op, "h200") == pytest.approx(expected, rel=0.02)


def test_uncalibrated_defaults_follow_the_datasheet():
    # DEFAULT_EFFICIENCY: 87% of HBM bandwidth plus a 4 us launch
    op = gm.ops.elementwise(2**28, "bf16", flops_per_element=0)
    g = gm.gpu("a100-sxm4-80gb")
    expected = 4e-6 + 2 * 2**28 * 2 / (0.87 * g.memory_bandwidth)
    assert gm.estimate_time(op, g, calibrated=False) == pytest.approx(expected, rel=0.02)


def test_calibration_argument_path_and_gpu_mismatch(tmp_path):
    cal = calibration_for("h200")
    path = cal.save(tmp_path / "mine.yaml")
    op = gm.ops.softmax(4096, 32000)
    assert gm.estimate_time(op, "h200", calibration=path) == gm.estimate_time(op, "h200")
    with pytest.raises(ValueError, match="h200-sxm"):
        gm.estimate_time(op, "h100", calibration=cal)


def test_naive_attention_is_the_sum_of_its_kernels():
    # two batched GEMMs, the scale and softmax: never faster than its two GEMMs, slower than flash
    naive = gm.estimate_time(gm.ops.attention(1, 8, 1024, 64, impl="naive"), "h200")
    gemms = 2 * gm.estimate_time(gm.ops.bmm(8, 1024, 1024, 64), "h200")
    assert gemms < naive and gm.estimate_time(gm.ops.attention(1, 8, 1024, 64), "h200") < naive


def test_repr_names_bound_and_source():
    text = repr(gm.estimate(gm.ops.matmul(4096, 4096, 4096), "h200"))
    assert "compute-bound" in text and "calibrated on" in text


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 20000),
       dtype=st.sampled_from(["bf16", "fp16", "fp32", "tf32", "fp8"]), gpu=st.sampled_from(["h200", "h100", "a100"]))
def test_never_faster_than_the_datasheet_roofline(m, n, k, dtype, gpu):
    g = gm.gpu(gpu)
    if not g.supports(dtype):
        return
    op = gm.ops.matmul(m, n, k, dtype)
    assert gm.estimate_time(op, g) >= gm.roofline(op, g).seconds * (1 - 1e-9)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 50000), cols=st.integers(1, 200000),
       family=st.sampled_from(["softmax", "layer_norm", "rms_norm", "reduce_sum"]))
def test_row_ops_never_beat_the_roofline_and_grow_with_rows(rows, cols, family):
    f = getattr(gm.ops, family)
    t = gm.estimate_time(f(np.array([rows, 2 * rows]), cols), "h200")
    assert t[0] >= gm.roofline(f(rows, cols), "h200").seconds * (1 - 1e-9)
    assert t[1] >= t[0]


def test_cli_estimate_json(capsys, tmp_path):
    import json

    from gpumodel.cli import main

    assert main(["estimate", "--gpu", "h200,a100", "matmul", "4096", "4096", "4096", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    h200, a100 = out["results"]
    assert h200["calibrated"] and not a100["calibrated"]
    assert h200["seconds"] == pytest.approx(gm.estimate_time(gm.ops.matmul(4096, 4096, 4096), "h200"))
    path = calibration_for("h200").save(tmp_path / "c.yaml")
    assert main(["estimate", "--gpu", "h200", "softmax", "4096", "32000", "--calibration", str(path)]) == 0
    assert "calibrated on" in capsys.readouterr().out
    assert main(["estimate", "--gpu", "h100", "softmax", "8", "8", "--calibration", str(path)]) == 2


def test_fused_chain_with_a_norm_is_no_faster_than_the_norm():
    # a residual add fused into RMSNorm keeps the norm's one-row-per-block organisation
    norm = gm.ops.rms_norm(16, 4096)
    fused = gm.ops.fuse(gm.ops.elementwise(16 * 4096, inputs=2), norm)
    est = gm.estimate(fused, "h200")
    assert est.seconds >= gm.estimate_time(norm, "h200")
    assert est.calibrated is False and "no fused" in est.detail  # never measured: said so


def test_parallelism_label_only_when_row_slots_sit_idle():
    few = gm.estimate(gm.ops.rms_norm(16, 4096), "h200")        # 16 rows cannot fill 132 SMs
    many = gm.estimate(gm.ops.layer_norm(8192, 4096), "h200")   # every row slot busy
    assert few.bound == "parallelism" and few.parallelism < 1
    assert many.bound != "parallelism"


@pytest.mark.parametrize("gpu, dtype, instead", [("v100", "bf16", "fp16"), ("t4", "bf16", "fp16"), ("a100", "fp8", "bf16")])
@pytest.mark.parametrize("calibrated", [True, False])
def test_a_gemm_in_a_format_the_gpu_lacks_names_the_format_to_use(gpu, dtype, instead, calibrated):
    # not a calibration matter: calibrated=False gives the same error, not the datasheet estimate it suggested
    with pytest.raises(gm.UnsupportedError, match=f"has no {dtype} tensor-core rate .*use {instead} instead") as info:
        gm.estimate(gm.ops.matmul(4096, 4096, 4096, dtype), gpu, calibrated=calibrated)
    assert "calibrated=False" not in str(info.value) and gm.gpu(gpu).name in str(info.value)
    assert (info.value.argument, info.value.value, info.value.allowed) == ("dtype", dtype, instead)
    with pytest.raises(gm.UnsupportedError, match=f"has no {dtype} tensor-core rate"):
        gm.estimate_time(gm.ops.matmul(4096, 4096, 4096, dtype), gpu, calibrated=calibrated)


def test_bf16_on_a_v100_points_training_to_amp_fp16():
    with pytest.raises(gm.UnsupportedError, match="precision='amp_fp16'"):
        gm.estimate(gm.ops.matmul(4096, 4096, 4096, "bf16"), "v100")
    for calibrated in (True, False):
        with pytest.raises(gm.UnsupportedError, match="v100-sxm2-32gb has no bf16 tensor-core rate .*"
                                                      "use precision='amp_fp16' instead") as info:
            gm.training_step_time("gpt2", "v100", batch_size=1, seq_len=128, calibrated=calibrated)
        assert (info.value.argument, info.value.value) == ("precision", "amp_bf16")
    with pytest.raises(gm.UnsupportedError, match="use precision='fp16' instead"):
        gm.training_step_time("gpt2", "v100", batch_size=1, seq_len=128, precision="bf16")
    assert gm.training_step_time("gpt2", "v100", batch_size=1, seq_len=128, precision="amp_fp16").seconds > 0
