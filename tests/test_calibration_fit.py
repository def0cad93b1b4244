"""The fitted model against measured ground truth (tests/data/calibration, measured on an H200).

The fit set and the validation set are disjoint (different shapes); both are timed with the host kept
ahead of the GPU (the GPU's work alone); see tests/data/calibration/README.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpumodel.calibration.plan import case_key
import gpumodel as gm
from gpumodel.calibration.fit import (accuracy_table, datasheet_bounds, fit_calibration, fit_model, load_points,
                                      median_of_runs, repeat_files,
                                      point_set)
from gpumodel.calibration.model import CalibrationModel, default_parameters, predict
from gpumodel.calibration.record import calibration_for

DATA = Path(__file__).parent / "data" / "calibration"
#: the acceptance bar: median and 90th percentile of |predicted/measured - 1| on shapes not fitted
BAR_MEDIAN, BAR_P90 = 0.08, 0.25
#: families that do not meet the bar yet on the widened VALIDATION set (measured: see the data README's accuracy
#: table), each with the mechanism the kernel names and shapes point to; an entry that starts to pass fails
#: (strict xfail), so the list shrinks as the model improves
KNOWN_MISSES: dict[str, str] = {}
#: why the overall bar (median 5%, p90 15%) is missed, while it is (strict xfail); empty: met (measured 4.5% / 14.7% on
#: 4378 kernels once small unaligned GEMMs ran cuBLAS's wmma kernels in the model)
OVERALL_MISS = ""


@pytest.fixture(scope="module")
def h200():
    return gm.gpu("h200")


@pytest.fixture(scope="module")
def fit_points():
    env, pts = load_points(DATA / "fit.jsonl")
    return env, pts


VALIDATION_FILES = sorted(DATA.glob("validation*.jsonl"))


def _validation_points() -> list[dict]:
    """Every VALIDATION kernel, timed as the median over the runs that measured it."""
    return [pt for path in VALIDATION_FILES for pt in median_of_runs(path)]


@pytest.fixture(scope="module")
def validation():
    return point_set(_validation_points())


def test_fit_and_validation_sets_are_disjoint(fit_points):
    fit = {case_key(p) for p in fit_points[1]}
    val = [case_key(p) for p in _validation_points()]
    assert len(val) > 300 and not fit & set(val)


@pytest.mark.slow
def test_shipped_calibration_is_reproducible_from_committed_points(fit_points, h200):
    env, pts = fit_points
    refit = fit_calibration(pts, h200, env, keep_points=False)
    shipped = calibration_for("h200")
    # the well-determined rates must agree closely (the fit is deterministic; allow for BLAS rounding)
    for key in ("launch_s", "bandwidth", "vector_flops", "unaligned_flops", "attn_flops_fwd", "attn_flops_bwd",
                *(k for k in shipped.parameters if k.startswith("flops_"))):
        assert refit.parameters[key] == pytest.approx(shipped.parameters[key], rel=1e-2), key
    assert refit.fit_error["overall"].median == pytest.approx(shipped.fit_error["overall"].median, abs=0.005)
    assert len(shipped.points) == len(pts)


def test_fp16_follows_bf16_where_the_datasheet_gives_them_one_peak(h200):
    from gpumodel.calibration.fit import tied_rates

    assert tied_rates(h200) == {"flops_fp16": "flops_bf16"}        # H200: 989.4 TFLOP/s dense for both
    assert tied_rates(gm.gpu("v100")) == {}                         # no bf16 on Volta
    p = calibration_for("h200").parameters
    assert p["flops_fp16"] == p["flops_bf16"]


def test_fitted_rates_are_physical(h200):
    p = calibration_for("h200").parameters
    for dt in ("bf16", "fp16", "tf32", "fp8", "fp32"):
        # never above the dense datasheet peak; large GEMMs reach well over half of it
        assert 0.5 * h200.peak_flops(dt) < p[f"flops_{dt}"] <= h200.peak_flops(dt)
    assert 0.8 * h200.memory_bandwidth < p["bandwidth"] <= h200.memory_bandwidth   # issue: 85-90% measured
    assert 1e-6 < p["launch_s"] < 10e-6                                            # "a few microseconds"
    assert p["unaligned_flops"] < 0.3 * p["flops_bf16"]


FAMILIES = ["matmul", "bmm", "elementwise", "softmax", "layer_norm", "rms_norm", "reduce_sum", "attention_fwd",
            "attention_bwd", "attention_naive_fwd", "attention_naive_bwd", "attention_decode", "matmul_weight_only",
            "cross_entropy", "cross_entropy_bwd", "embedding", "embedding_bwd", "adamw_step", "kv_cache_write"]


@pytest.mark.parametrize("family", [*FAMILIES, "overall"])
def test_validation_accuracy_meets_the_bar(family, validation, request):
    table = accuracy_table(calibration_for("h200").model(), validation)
    if family not in table:
        pytest.skip(f"no validation points of {family}")
    row = table[family]
    if family == "overall":  # the overall bar is tighter than each family's
        if OVERALL_MISS and not (row["median"] <= 0.05 and row["p90"] <= 0.15):
            request.applymarker(pytest.mark.xfail(reason=OVERALL_MISS, strict=True))
        assert row["median"] <= 0.05 and row["p90"] <= 0.15, row
        return
    if family in KNOWN_MISSES and not (row["median"] <= BAR_MEDIAN and row["p90"] <= BAR_P90):
        request.applymarker(pytest.mark.xfail(reason=KNOWN_MISSES[family], strict=True))
    assert row["median"] <= BAR_MEDIAN and row["p90"] <= BAR_P90, row


def test_calibration_beats_the_datasheet(validation, h200):
    cal = accuracy_table(calibration_for("h200").model(), validation)["overall"]
    err = []
    for _, op, t, _ in validation.groups:
        err.append(np.abs(gm.roofline(op, h200).seconds / t - 1))
    datasheet = float(np.median(np.concatenate(err)))
    assert datasheet > 0.3            # measured: ~46% median error for the bare roofline
    assert cal["median"] < datasheet / 3


def test_fit_recovers_parameters_of_a_synthetic_gpu(h200):
    """Points generated by a known model (2% noise) give back its rates: the mechanisms are identifiable."""
    truth = CalibrationModel({**default_parameters(h200), "flops_bf16": 6.1e14, "bandwidth": 3.9e12,
                              "launch_s": 3.3e-6}, 132)
    rng = np.random.default_rng(0)
    points = []
    for m, n, k in rng.integers(64, 12000, size=(60, 3)) // 8 * 8:
        points.append({"op": "matmul", "dtype": "bf16", "shape": {"m": int(m), "n": int(n), "k": int(k)}})
    for e in range(4, 29, 2):
        points.append({"op": "elementwise", "dtype": "bf16",
                       "shape": {"numel": 2**e, "inputs": 1, "outputs": 1, "flops_per_element": 0}})
    ps = point_set([{**p, "time_s": 1.0} for p in points])
    times = np.empty(len(points))
    for _, op, _, idx in ps.groups:
        times[idx] = predict(truth, op).time_s * rng.lognormal(0, 0.02, len(idx))
    ps = point_set([{**p, "time_s": float(t)} for p, t in zip(points, times)])
    start = CalibrationModel(default_parameters(h200), 132, calibrated=False)
    free = ["flops_bf16", "bandwidth", "launch_s"]
    model, _ = fit_model(ps, start, free=free, upper=datasheet_bounds(h200))
    for key in free:
        assert model.params[key] == pytest.approx(truth.params[key], rel=0.05), key


@pytest.mark.slow
def test_quick_mode_points_fit_too(h200):
    env, pts = load_points(DATA / "do_bench" / "quick.jsonl")
    cal = fit_calibration(pts, h200, env, keep_points=False)
    assert cal.fit_error["overall"].median < 0.12
    # quick mode times each kernel for ~20 ms, before the power limit lowers the clock: its 4608^3 bf16 GEMM
    # runs at 2*4608**3 / 252.8 us = 774 TFLOP/s against ~690 sustained, so its rate sits above the full fit's
    big = next(p for p in pts if p["op"] == "matmul" and p["shape"] == {"m": 4608, "n": 4608, "k": 4608})
    assert 2 * 4608**3 / big["time_s"] < cal.parameters["flops_bf16"] <= h200.peak_flops("bf16")
    # the quick set holds too few GEMMs to pull the tensor rate apart from the tile feed and their overlap (the fit
    # is flat along that ridge), so compare what it predicts: big bf16 GEMMs within 20% of the full calibration's
    full, quick = calibration_for("h200").model(), cal.model()
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 2048), (2048, 14336, 4096), (16384, 4096, 4096)):
        op = gm.ops.matmul(m, n, k, "bf16")
        assert float(predict(quick, op).time_s) == pytest.approx(float(predict(full, op).time_s), rel=0.2)


def test_skinny_gemm_runs_as_one_stream(h200):
    """A batched decode GEMV (m = 1) is timed as one stream of its operand bytes plus fixed times.

    bmm(256, 1, 4096, 128) bf16: operands 256*(1*128 + 128*4096 + 1*4096)*2 B = 270.6 MB; the
    tiled candidates cost ~95 us (measured 75.6 us), the stream 270.6 MB / rate + launch + its fixed time.
    """
    m = CalibrationModel({**default_parameters(h200), "bandwidth": 4.0e12, "bw_eff_stream": 1.0, "bw_eff_gemm": 0.8,
                          "stream_overhead_s": 5e-6, "launch_s": 4e-6}, 132)   # tiles' traffic slower, as fitted
    op = gm.ops.bmm(256, 1, 4096, 128, "bf16")
    q = 256 * (128 + 128 * 4096 + 4096) * 2  # bytes
    assert float(op.bytes) == q
    assert float(predict(m, op).time_s) == pytest.approx(4e-6 + 5e-6 + q / 4.0e12, rel=1e-9)
    # a square GEMM (every edge > 64) never takes the stream candidate, however cheap it would be
    sq = gm.ops.matmul(4096, 4096, 4096, "bf16")
    assert float(predict(m.replace(stream_overhead_s=1e-9, bw_eff_stream=1e3), sq).time_s) == pytest.approx(
        float(predict(m, sq).time_s))


def test_sum_is_a_pipeline_over_its_waves_of_blocks(h200):
    """Many waves of blocks: the latency of a wave hides behind the others' streaming (max + min / W)."""
    from gpumodel.calibration.kernels import sum_plan

    p = {**default_parameters(h200), "launch_s": 4e-6, "bandwidth": 4.0e12, "bw_eff_reduce_sum": 1.0,
         "sum_block_s": 1e-6, "sum_step_s": 0.5e-6}
    m = CalibrationModel(p, 132)
    rows, cols = 8192, 32000  # fp32: 512-thread blocks, a block per row, 4 resident per SM
    k = sum_plan(rows, cols, 4, 132)
    assert float(k["blocks"]) == rows and float(k["ctas"]) == 1.0
    waves = np.ceil(rows / (132 * 4))                                        # 16 waves
    t_lat = np.ceil(rows / 132) * 1e-6 + waves * float(k["steps"]) * 0.5e-6  # 63 us + 16 * 16 * 0.5 us
    t_m = rows * (cols + 1) * 4 / 4.0e12                                     # 262 us of reads (and the sums)
    want = 4e-6 + max(t_m, t_lat) + min(t_m, t_lat) / waves
    assert float(predict(m, gm.ops.reduce_sum(rows, cols, "fp32")).time_s) == pytest.approx(want, rel=1e-9)


def test_records_fitted_before_the_new_mechanisms_still_load(h200):
    """A calibration without the stream / sum-pipeline / norm-overlap parameters predicts as before them."""
    p = default_parameters(h200)
    old = {k: v for k, v in p.items() if k not in ("stream_overhead_s", "bw_eff_stream", "bw_eff_gemm",
                                                    "sum_block_s", "sum_step_s", "norm_overlap_p")}
    m = CalibrationModel(old, 132)
    for op in (gm.ops.bmm(256, 1, 4096, 128, "bf16"), gm.ops.reduce_sum(4096, 32000, "bf16"),
               gm.ops.layer_norm(4096, 4096, "bf16")):
        assert np.isfinite(float(predict(m, op).time_s))


def test_the_timer_repeats_far_within_the_bar():
    """A second run of the widened VALIDATION kernels (repeat_widened.jsonl) repeats every family to at most 2.0%
    median and 9.3% p90 (kv_cache_write; the rest 0.0-0.4% / 0.1-7.4%): the misses are the model's. Timed by do_bench
    instead (do_bench/), the host's issue time made short attention calls repeat to 29-33% median, 107-181% p90."""
    from benchscript import load_bench

    rep = load_bench("calibration_accuracy").repeatability
    ahead = rep(DATA / "validation_widened.jsonl", *repeat_files(DATA / "validation_widened.jsonl"))
    assert len(ahead) == 18 and all(r["median"] < 0.025 and r["p90"] < 0.10 for r in ahead.values()), ahead
    old = DATA / "do_bench" / "validation_widened.jsonl"
    do_bench = rep(old, *repeat_files(old))
    assert do_bench["attention_fwd"]["median"] > 0.25 and do_bench["attention_bwd"]["p90"] > 1.0


def test_the_fit_prices_with_the_gpu_record_the_estimates_use(fit_points, h200, monkeypatch):
    """The model the fit starts from carries the GPU record (its L2 size and occupancy), as every estimate's model
    does: a term that needs the L2 size (a norm's second read of its row) is fitted as it is then priced."""
    import gpumodel.calibration.fit as fit

    seen = {}

    def stop(ps, start, **kw):
        seen["start"] = start
        raise RuntimeError("stop")

    monkeypatch.setattr(fit, "fit_model", stop)
    with pytest.raises(RuntimeError, match="stop"):
        fit.fit_calibration(fit_points[1][:50], h200, fit_points[0], keep_points=False)
    assert seen["start"].gpu.l2_bytes == h200.l2_bytes == calibration_for("h200").model().gpu.l2_bytes


def test_a_norms_second_read_of_its_row_misses_l2_once_the_rows_in_flight_outgrow_it(h200):
    """vectorized_layer_norm_kernel reads a row twice; hand arithmetic on the H200 (60 MiB of L2): RMS norm holds
    ``rows_per_sm_rms_norm`` rows an SM, so 132 x that rows are in flight, read and written."""
    from gpumodel.calibration.streams import _norm_vector_reread_s

    m = calibration_for("h200").model()
    p = m.params
    flight_rows = 132 * p["rows_per_sm_rms_norm"]                       # about 2120
    short = gm.ops.rms_norm(16384, 4096)                                  # 2 x 2120 x 8 KB = 35 MB < 60 MiB
    assert float(_norm_vector_reread_s(m, short, "rms_norm", p["bw_eff_rms_norm"])) == 0.0
    wide = gm.ops.rms_norm(16384, 32000)                                  # 2 x 2120 x 64 KB = 272 MB
    miss = 1 - h200.l2_bytes / (2 * flight_rows * 32000 * 2)              # 0.77
    want = miss * 16384 * 32000 * 2 / (p["bandwidth"] * p["bw_eff_rms_norm"])
    assert float(_norm_vector_reread_s(m, wide, "rms_norm", p["bw_eff_rms_norm"])) == pytest.approx(want, rel=1e-9)
    assert 0.7 < miss < 0.8
