"""A calibration sized to a budget: every family measured at any budget, what it did not determine transferred,
the fit anchored where its points are thin, and the record saying which families it measured."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.calibration.budget import (DEFAULT_BUDGET_S, MIN_BUDGET_S, budget_plan, pool_cases, sample_cases,
                                         stratum)
from gpumodel.calibration.fit import _free_parameters, fit_calibration, fit_model, starting_parameters
from gpumodel.calibration.model import CalibrationModel, default_parameters, predict
from gpumodel.calibration.plan import strided_case
from gpumodel.calibration.points import family_of, point_set
from gpumodel.calibration.record import Calibration, calibration_for, load_calibration
from gpumodel.calibration.transfer import transfer_for

FAMILIES = {family_of(c) for c in pool_cases()}


@pytest.mark.parametrize("budget", [MIN_BUDGET_S, 120.0, DEFAULT_BUDGET_S, 600.0])
def test_every_budget_measures_every_family(budget):
    plan = budget_plan(budget)
    assert {family_of(c) for c in plan.cases} == FAMILIES
    assert {stratum(c) for c in plan.cases} == {stratum(c) for c in pool_cases()}    # every dtype and form too
    # the whole run: the kernels, their share of the fit, five sustained-load kernels and the host's costs
    assert plan.kernels * (0.14 + 0.8 * 0.17) + 5 * (plan.sustained_s + 2.5) <= budget or plan.kernels < 150


def test_a_larger_budget_measures_more_of_each_family():
    small, default, large = (budget_plan(b) for b in (60.0, DEFAULT_BUDGET_S, 600.0))
    assert small.kernels < default.kernels < large.kernels == len(pool_cases())
    assert 400 <= default.kernels <= 700                              # about what the full plan measured
    assert (small.sustained_s, small.host_calls) == (3.0, 500) and default.sustained_s == 6.0
    for fam in FAMILIES:
        assert (sum(family_of(c) == fam for c in small.cases) <= sum(family_of(c) == fam for c in default.cases)
                <= sum(family_of(c) == fam for c in large.cases)), fam


def test_no_fp8_kernels_for_a_gpu_without_them():
    plan = budget_plan(DEFAULT_BUDGET_S, fp8=False)
    assert not any("fp8" in (c["dtype"], c["shape"].get("weight_dtype")) for c in plan.cases)


def test_a_budget_under_a_minute_is_refused():
    with pytest.raises(ValueError, match="at least 60 s"):
        budget_plan(30.0)


def test_the_sample_keeps_a_floor_per_stratum_and_interleaves_them():
    pool = pool_cases()
    out = sample_cases(pool, 200, seed=1)
    strata = {stratum(c) for c in pool}
    assert 180 <= len(out) <= 200 and {stratum(c) for c in out} == strata
    assert {stratum(c) for c in out[:len(strata)]} == strata              # the first round spans every stratum
    assert sample_cases(pool, 200, seed=1) == out != sample_cases(pool, 200, seed=2)
    assert len({(c["op"], c["dtype"], str(c["shape"])) for c in out}) == len(out)


def test_the_budget_option_reads_minutes(capsys, tmp_path):
    from gpumodel.cli import main

    assert main(["calibrate", "--budget", "30s", "--out", str(tmp_path / "c.yaml")]) == 2
    assert "at least 60 s" in capsys.readouterr().err
    assert main(["calibrate", "--budget", "2m", "--quick", "--out", str(tmp_path / "c.yaml")]) == 2
    assert "--quick cannot be given with --budget" in capsys.readouterr().err
    assert gm.vocabulary.duration("2m", "budget") == 120.0


def _points(gpu, truth: CalibrationModel, seed: int = 0) -> list[dict]:
    """GEMMs and contiguous streams timed by ``truth`` with 2% noise: no strided or concatenating kernel."""
    rng = np.random.default_rng(seed)
    cases = [{"op": "matmul", "dtype": "bf16", "shape": {"m": int(m), "n": int(n), "k": int(k)}}
             for m, n, k in rng.integers(64, 8192, size=(30, 3)) // 8 * 8]
    cases += [{"op": "elementwise", "dtype": "bf16",
               "shape": {"numel": 2**e, "inputs": 2, "outputs": 1, "flops_per_element": 1}} for e in range(10, 29, 2)]
    ps = point_set([{**c, "time_s": 1.0} for c in cases])
    out = []
    for _, op, _, idx in ps.groups:
        for i, t in zip(idx, np.atleast_1d(predict(truth, op).time_s) * rng.lognormal(0, 0.02, len(idx))):
            out.append({**ps.points[i], "time_s": float(t)})
    return out


def test_every_parameter_the_run_did_not_determine_is_the_transfers():
    """A run without strided or concatenating elementwise kernels: every parameter of that family (its element and
    operand rates, its fixed and concatenation steps, its overlap) and every other one its points do not move is the
    shipped calibration carried to the H100, never a datasheet default."""
    h100 = gm.gpu("h100")
    moved = transfer_for(h100).model.params
    truth = CalibrationModel({**moved, "flops_bf16": 0.9 * moved["flops_bf16"], "bandwidth": 0.95 * moved["bandwidth"]},
                             h100.sm_count, gpu=h100)
    points = _points(h100, truth)
    cal = fit_calibration(points, h100, {"device_name": "NVIDIA H100 80GB HBM3"})
    free = set(_free_parameters(point_set(points), starting_parameters(h100)))
    strided = {"strided_elem_rate", "strided_step_s", "strided_operand_rate", "strided_overlap_p", "concat_step_s"}
    assert strided <= set(cal.parameters) and not strided & free
    defaults = default_parameters(h100)
    for name, value in cal.parameters.items():
        if name not in free and name != "flops_fp16":          # fp16 follows bf16 (tied)
            assert value == pytest.approx(moved[name], rel=1e-5), name
    assert any(moved[k] != pytest.approx(defaults[k], rel=1e-3) for k in strided)   # the transfer is not the default
    est = gm.estimate(gm.ops.concat(2**22, "bf16", strided=True), h100, calibration=cal)
    assert est.source == "calibrated" and "were measured" not in est.detail   # an elementwise op: measured, but not its concat rates
    assert cal.measured_families == ["elementwise", "matmul"]


def test_a_strided_kernel_prices_as_the_transfer_when_the_run_skipped_it():
    h100 = gm.gpu("h100")
    moved = transfer_for(h100).model
    cal = fit_calibration(_points(h100, moved, seed=3), h100, {"device_name": "NVIDIA H100 80GB HBM3"})
    case = strided_case("slice_neg", "bf16", 4096 * 2048)
    op = getattr(gm.ops, case["op"])(**case["shape"], dtype=case["dtype"])
    # the same truth as the transfer: the fit keeps the shared rates within the noise, the strided ones exactly
    assert float(predict(cal.model(), op).time_s) == pytest.approx(float(predict(moved, op).time_s), rel=0.03)


def test_the_anchor_keeps_what_the_points_cannot_tell_apart_where_it_started():
    """Large copies fix only bandwidth x bw_eff_elementwise: anchored, the two split the move evenly (in log) and the
    product fits the points; unanchored, the fit may leave either anywhere along that ridge."""
    h200 = gm.gpu("h200")
    start = CalibrationModel(default_parameters(h200), 132, calibrated=False, gpu=h200)
    points = [{"op": "elementwise", "dtype": "bf16", "shape": {"numel": 2**e, "inputs": 1, "outputs": 1,
                                                                "flops_per_element": 0}} for e in range(24, 30)]
    ps = point_set([{**p, "time_s": 1.0} for p in points])
    truth = start.replace(bandwidth=0.8 * start.params["bandwidth"])
    times = np.empty(len(points))
    for _, op, _, idx in ps.groups:
        times[idx] = predict(truth, op).time_s
    ps = point_set([{**p, "time_s": float(t)} for p, t in zip(points, times)])
    free = ["bandwidth", "bw_eff_elementwise"]
    model, _ = fit_model(ps, start, free=free, anchor=1.0)
    moves = [math.log(model.params[k] / start.params[k]) for k in free]
    assert moves[0] == pytest.approx(moves[1], abs=0.01)
    assert sum(moves) == pytest.approx(math.log(0.8), abs=0.01)


def test_records_say_which_families_they_measured_and_old_ones_still_load(tmp_path):
    shipped = calibration_for("h200")
    assert "attention_decode" in shipped.measured_families and "kv_cache_write" in shipped.measured_families
    old = shipped.model_dump(exclude={"measured_families"})
    old_path = tmp_path / "old.yaml"
    Calibration.model_validate(old).save(old_path)
    text = old_path.read_text()
    old_path.write_text("\n".join(x for x in text.splitlines() if not x.startswith("measured_families")))
    assert load_calibration(old_path).measured_families == []    # written before the field: loads, empty
    cal = Calibration.model_validate({**shipped.model_dump(), "points": [],
                                      "measured_families": ["matmul", "attention_decode"]})
    path = cal.save(tmp_path / "c.yaml")
    back = load_calibration(path)
    assert back.measured_families == ["matmul", "attention_decode"]
    m = back.model()                                             # no points: the families it says it measured
    assert m.covers(gm.ops.attention(1, 8, 1, 128, kv_seq=512)) and not m.covers(gm.ops.softmax(8, 8))


def test_the_check_stages_share_what_the_calibration_leaves():
    from benchscript import load_bench

    cc = load_bench("calibrate_and_check")
    b = cc.stage_budgets(330.0)
    assert b == {"kernels": 55.0, "serving": 70.0, "big_steps": 110.0, "mid_steps": 45.0}   # each at its cap
    small = cc.stage_budgets(100.0)
    assert sum(small.values()) <= 100.0 and min(small.values()) >= 5.0


@pytest.mark.slow
def test_calibrate_and_check_runs_end_to_end_on_the_cpu(tmp_path):
    """The device script's dry run: the calibration refitted from committed points, the checks tiny on the CPU; the
    scoring script reads what it wrote."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from benchscript import BENCH, load_bench

    subprocess.run([sys.executable, str(BENCH / "calibrate_and_check.py"), "--out", str(tmp_path), "--dry-run",
                    "--total-s", "400"], check=True, capture_output=True, timeout=600)
    folder = tmp_path / "cpu"
    assert {p.name for p in folder.iterdir()} == {"calibration.yaml", "kernels.jsonl", "serving.jsonl", "steps.jsonl",
                                                  "log.txt"}
    shutil.copy(Path(BENCH).parent / "specs" / "hosts" / "h200-sxm.yaml", folder / "host.yaml")
    res = load_bench("user_calibration").evaluate(folder)
    rows = {r["what"]: r for r in res["rows"]}
    assert rows["kernels, fresh"]["user"]["n"] > 100 and rows["serving, decode steps"]["user"]["n"] >= 2
    assert rows["training steps, 1-8B"]["user"]["n"] >= 4


def test_a_step_takes_the_share_of_the_slowdown_its_compute_bound_kernels_give_it():
    from gpumodel.calibration.sustained import clock_share

    assert clock_share(1.0, 0.12, 1.12) == pytest.approx(1.0)          # all of it in clock-bound kernels
    assert clock_share(1.0, 0.0, 1.12) == 0.0                            # memory-bound: the clock does not matter
    assert np.allclose(clock_share(np.array([2.0, 4.0]), np.array([0.12, 0.12]), 1.12), [0.5, 0.25])
    assert clock_share(1.0, 0.5, 1.0) == 0.0                              # no slowdown measured
    # past a threshold share f0 the clock falls in proportion to the share past it: (f - f0) / (1 - f0)
    assert clock_share(1.0, 0.06, 1.12, threshold=0.5) == pytest.approx(0.0)   # f = 0.5: still at the boost clock
    assert clock_share(1.0, 0.09, 1.12, threshold=0.5) == pytest.approx(0.5)   # f = 0.75: half of it
    assert clock_share(1.0, 0.12, 1.12, threshold=0.5) == pytest.approx(1.0)
    # an 8B model's step, about half its time in clock-bound kernels (f ~ 0.5): on a GPU without a measured threshold
    # (the H200) its clock slows by (s - 1) f, those kernels by as much, so the step by about (s - 1) f^2; on the
    # H100, whose mixes stay at the boost clock up to f0 = 0.47 (tests/data/calibration/duty_clock), by (s - 1) f g
    # with g = (f - 0.47) / 0.53 at most 0.25 for f <= 0.6
    from gpumodel.calibration.estimate import power_share_threshold_for, sustained_slowdown_for

    kw = dict(batch_size=1, seq_len=2048, precision="bf16", optimizer="sgd")
    ratio = {}
    for g in ("h200", "h100"):
        big = gm.training_step_time("llama-3-8b", g, **kw)
        alone = gm.training_step_time("llama-3-8b", g, calibration=_without_slowdown(g), **kw)
        ratio[g] = big.seconds / alone.seconds
    excess = sustained_slowdown_for("h200") - 1.0                       # 0.102
    assert power_share_threshold_for("h200") == 0.0
    assert 1.0 + excess * 0.4**2 < ratio["h200"] < 1.0 + excess * 0.6**2
    excess = sustained_slowdown_for("h100") - 1.0                       # 0.069
    assert power_share_threshold_for("h100") == 0.47
    assert 1.0 <= ratio["h100"] < 1.0 + excess * 0.6 * 0.25


def _without_slowdown(gpu: str) -> Calibration:
    """The H200 calibration's record carried to ``gpu`` as a user's record, with no sustained-load slowdown."""
    moved = transfer_for(gpu).model
    ref = calibration_for("h200")
    return Calibration.model_validate({**ref.model_dump(), "gpu": gm.gpu(gpu).name, "points": [],
                                       "parameters": {**moved.params, "sustained_slowdown": 1.0}})


def test_the_committed_h100_calibration_against_the_transfer():
    """``bench/user_calibration.py`` on ``tests/data/calibration/user_h100/``: kernels and training steps better than
    the transfer, the steps within the bar; the serving steps within theirs."""
    from benchscript import load_bench

    from pathlib import Path

    folder = Path(__file__).parent / "data" / "calibration" / "user_h100"
    res = load_bench("user_calibration").evaluate(folder)
    rows = {r["what"]: r for r in res["rows"]}
    # the slowdown over the fitted model (gpumodel calibrate now), not the record's 1.12 over the isolated timings
    assert len(res["measured_families"]) == 19 and res["sustained_slowdown"] == pytest.approx(1.106, abs=5e-4)
    for what in ("kernels, fresh", "kernels, held out of the fit", "training steps, 1-8B"):
        assert rows[what]["user"]["median"] < rows[what]["transfer"]["median"], what
    # not the prefills: with the H100's power threshold they read a few percent fast under the user's calibration
    # (tests/data/calibration/duty_clock/README.md), within the bar but behind the transfer
    steps = rows["training steps, 1-8B"]["user"]
    assert steps["n"] == 12 and steps["median"] <= 0.10 and abs(steps["signed"]) <= 0.05
    assert rows["serving, decode steps"]["user"]["median"] <= 0.05
    assert rows["serving, prefill steps"]["user"]["median"] <= 0.05


def test_a_calibration_keeps_the_power_threshold_its_mixes_give():
    """``gpumodel calibrate``'s sustained rows end with power mixes (``op`` "power_mix"): the fit keeps their threshold
    as ``power_share_threshold``, the slowdown leaves them out, and every answer on that GPU takes it. The mixes are
    the committed H100 run's (tests/data/calibration/duty_clock/h100.jsonl: its own fit is 0.49)."""
    import json
    from pathlib import Path

    from gpumodel.calibration.estimate import power_share_threshold_for
    from gpumodel.calibration.powermix import MIX_OP

    h100 = gm.gpu("h100")
    moved = transfer_for(h100).model
    path = Path(__file__).parent / "data" / "calibration" / "duty_clock" / "h100.jsonl"
    mixes = [{**json.loads(x), "op": MIX_OP} for x in path.read_text().splitlines()[1:] if x.strip()]
    gemm = {"op": "matmul", "dtype": "bf16", "shape": {"m": 8192, "n": 8192, "k": 8192}}
    price = float(predict(moved, gm.ops.matmul(8192, 8192, 8192, dtype="bf16")).time_s)
    sustained = [{**gemm, "isolated_s": price, "sustained": [{"per_call_s": 1.1 * price}] * 8}]
    cal = fit_calibration(_points(h100, moved, seed=5), h100, {"device_name": "NVIDIA H100 80GB HBM3"},
                          sustained_rows=sustained + mixes)
    assert cal.parameters["power_share_threshold"] == 0.49
    assert cal.parameters["sustained_slowdown"] == pytest.approx(1.1, abs=0.02)   # the GEMM alone, as fitted
    assert power_share_threshold_for(h100, calibration=cal) == 0.49
    without = fit_calibration(_points(h100, moved, seed=5), h100, {"device_name": "NVIDIA H100 80GB HBM3"},
                              sustained_rows=sustained)
    assert "power_share_threshold" not in without.parameters
    assert power_share_threshold_for(h100, calibration=without) == 0.47                 # the prior's
