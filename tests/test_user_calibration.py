"""Where a user's H100 calibration and the transfer part on prefill steps (``bench/user_calibration.py --detail``), on
the committed run of ``tests/data/calibration/user_h100/``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from benchscript import load_bench

FOLDER = Path(__file__).resolve().parent / "data" / "calibration" / "user_h100"


@pytest.fixture(scope="module")
def uc():
    return load_bench("user_calibration")


@pytest.fixture(scope="module")
def cal(uc):
    return uc.current_calibration(FOLDER)


@pytest.fixture(scope="module")
def models(cal):
    from gpumodel.calibration.estimate import model_for

    return {"transfer": model_for(cal.gpu)[0], "user": cal.model()}


def test_the_gemms_are_the_family_the_two_calibrations_part_on(uc, cal):
    d = uc.prefill_families(FOLDER, cal.gpu, cal)
    fams = d["families"]
    assert d["n"] == 57 and d["measured_s"] == pytest.approx(sum(r["seconds"] for r in uc._prefill_rows(FOLDER)))
    # the family's time moves by the ratio of the two bf16 rates (761.7 / 800.2 TFLOP/s = 0.952), less what the
    # user's larger back-to-back slowdown over its faster rates gives back (at most 1.106 / 1.069 = 1.035)
    from gpumodel.calibration.estimate import model_for, sustained_slowdown_for

    rate = model_for(cal.gpu)[0].params["flops_bf16"] / cal.parameters["flops_bf16"]
    back = sustained_slowdown_for(cal.gpu, calibration=cal) / sustained_slowdown_for(cal.gpu)
    assert 1.02 < back < 1.05
    assert rate + 0.005 < fams["matmul"]["ratio"] < rate * back
    others = sum(abs(r["moves"]) for f, r in fams.items() if f != "matmul")
    assert fams["matmul"]["moves"] < -0.01 and abs(fams["matmul"]["moves"]) > 3 * others
    for r in fams.values():   # moves = (user - transfer) / measured, summed
        assert r["moves"] == pytest.approx((r["user_s"] - r["transfer_s"]) / d["measured_s"])


def test_prefill_errors_fall_with_the_steps_length(uc, cal):
    bins = uc.prefill_by_length(FOLDER, cal.gpu, cal)
    assert [b["n"] for b in bins] == [10, 10, 19, 18]
    for who in ("transfer", "user"):
        assert bins[-1][who] < bins[0][who] - 0.02      # steps of 100 ms and more: 2+ points more too fast
    assert all(b["user"] < b["transfer"] for b in bins)


def test_gemms_of_a_millisecond_and_more_run_slower_than_shorter_ones(uc, cal, models):
    bins = uc.gemms_by_duration(uc.kernel_sets(FOLDER), models, cal.gpu)
    short, mid, long = bins
    assert long["n"] >= 10 and mid["n"] >= 20
    for who in ("transfer", "user"):
        assert long[who] < mid[who] - 0.04
    # the user's rate is right on the GEMMs under a millisecond, the transfer's 3-6% slow
    assert abs(short["user"]) < 0.02 and abs(mid["user"]) < 0.02
    assert 0.02 < short["transfer"] < 0.07 and 0.02 < mid["transfer"] < 0.07


def test_gemms_by_duration_on_hand_made_points(uc, models):
    from gpumodel.calibration.model import predict
    from gpumodel import ops

    shapes = [(3072, 3072, 3072), (8192, 8192, 8192)]   # about 80 us and 1.4 ms, both at full tensor-core rate
    exact = [float(predict(models["user"], ops.matmul(m, n, k, "bf16")).time_s) for m, n, k in shapes]
    pts = [{"op": "matmul", "kernel": "mm", "dtype": "bf16", "shape": {"m": m, "n": n, "k": k}, "time_s": t * f}
           for (m, n, k), t, f in zip(shapes, exact, (1.0, 1.25))]
    short, mid, long = uc.gemms_by_duration(pts, {"user": models["user"]}, "h100")
    assert (short["n"], mid["n"], long["n"]) == (1, 0, 1)
    assert short["user"] == pytest.approx(0.0, abs=1e-12) and long["user"] == pytest.approx(1 / 1.25 - 1)
    assert np.isnan(mid["user"])


def test_what_each_model_makes_of_the_sustained_load_run(uc, models):
    s = uc.sustained_carried(FOLDER / "sustained.jsonl", models)
    assert len(s["kernels"]) == 4                        # three GEMMs and the attention backward; not the copy
    assert 1.10 < float(np.median(s["sustained_over_isolated"])) < 1.14     # the record's 1.12
    assert s["transfer"]["median_model_over_isolated"] > s["user"]["median_model_over_isolated"] + 0.02
    for who in ("transfer", "user"):
        r = s[who]
        prod = np.array(r["model_over_isolated"]) * np.array(r["sustained_over_model"])
        assert np.allclose(prod, s["sustained_over_isolated"])   # (model / alone) (back to back / model)


@pytest.mark.parametrize("name", ["user_h100", "user_h100_rerun", "user_h100_sustained"])
def test_three_users_h100_calibrations_against_what_was_measured_after_them(uc, name):
    """Each committed run: a fresh ``gpumodel calibrate``, then kernels, serving and training steps measured after
    it in separate processes (the third with its serving steps timed at the loaded clock). The issue's serving and
    training bars hold under the user's own calibration, and on training steps it beats the transfer; decode is
    left to the bench, where it is a few tenths worse than the transfer on all three."""
    res = uc.evaluate(FOLDER.parent / name)
    rows = {r["what"]: r for r in res["rows"]}
    for kind in ("decode", "prefill"):
        assert rows[f"serving, {kind} steps"]["user"]["n"] >= 40
        assert rows[f"serving, {kind} steps"]["user"]["median"] <= 0.05
    train = rows["training steps, 1-8B"]
    assert train["user"]["median"] <= 0.10
    assert train["user"]["median"] < train["transfer"]["median"]
    assert rows["kernels, held out of the fit"]["user"]["median"] < rows["kernels, held out of the fit"]["transfer"]["median"]
