"""The measuring code: plans on any machine; a dry run where torch is installed; real timing where CUDA is."""

from __future__ import annotations

import json

import pytest

from gpumodel.calibration.bench import fit_cases
from gpumodel.calibration.plan import case_key
from benchscript import load_bench


def test_plans_cover_every_family_and_dtype():
    full, quick = fit_cases("full"), fit_cases("quick")
    assert len(quick) < len(full) / 2
    ops = {c["op"] for c in full}
    assert ops == {"matmul", "bmm", "elementwise", "softmax", "layer_norm", "rms_norm", "reduce_sum", "attention"}
    assert {c["dtype"] for c in full if c["op"] == "matmul"} == {"bf16", "fp16", "fp32", "tf32", "fp8"}
    assert any(c["op"] == "elementwise" and c["shape"]["numel"] == 1 for c in full)          # launch floor
    sizes = [c["shape"]["numel"] * 2 * (c["shape"]["inputs"] + 1) for c in full if c["op"] == "elementwise"]
    assert min(sizes) < 1e5 and max(sizes) > 10 * 60e6                                       # far below/above L2
    assert {c["shape"]["backward"] for c in full if c["op"] == "attention"} == {False, True}
    fp8 = [c["shape"] for c in full if c["dtype"] == "fp8"]
    assert all(s["k"] % 16 == 0 and s["n"] % 16 == 0 for s in fp8)                          # _scaled_mm needs this


def test_plan_is_reproducible_and_rejects_unknown_mode():
    assert fit_cases("full", seed=3) == fit_cases("full", seed=3)
    with pytest.raises(ValueError, match="mode"):
        fit_cases("medium")


def test_validation_shapes_are_not_fit_shapes():
    mk = load_bench("measure_kernels")
    fit = {case_key(c) for c in fit_cases("full")}
    val = [case_key(c) for c in mk.validation_cases()]
    assert not fit & set(val)
    from gpumodel.calibration.plan import sweep_cases

    assert not {case_key(c) for c in sweep_cases()} & set(val)          # the sweep is fit data too


def test_dry_run_on_cpu(tmp_path):
    pytest.importorskip("torch", reason="the dry run needs torch (any build)")
    from gpumodel.calibration.bench import run_benchmarks

    cases = fit_cases("quick")[::6]
    out = tmp_path / "points.jsonl"
    env, points = run_benchmarks(cases, dry_run=True, jsonl=out, show_progress=False)
    assert len(points) == len(cases)
    assert all(p["time_s"] > 0 for p in points), [p for p in points if not p.get("time_s")]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert "environment" in lines[0] and len(lines) == len(cases) + 1


def _cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="needs torch with a CUDA GPU")
def test_events_timing_on_gpu():
    import torch

    from gpumodel.calibration.bench import FLUSH_BYTES, measure

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    small = measure({"op": "matmul", "kernel": "mm", "dtype": "bf16", "shape": {"m": 256, "n": 256, "k": 256}},
                    flush=flush)
    big = measure({"op": "matmul", "kernel": "mm", "dtype": "bf16", "shape": {"m": 4096, "n": 4096, "k": 4096}},
                  flush=flush)
    assert 0 < small["time_s"] < big["time_s"]
    assert 2 * 4096**3 / big["time_s"] < 1.2e15          # below any dense bf16 peak of 2024-era GPUs


def test_device_names_map_to_gpu_specs():
    from gpumodel.calibration.fit import gpu_for_device

    assert gpu_for_device("NVIDIA H200").name == "h200-sxm"
    assert gpu_for_device("NVIDIA H100 80GB HBM3").name == "h100-sxm"


def test_cli_calibrate_without_a_gpu_says_so(capsys, tmp_path):
    pytest.importorskip("torch", reason="with no torch the message differs (tested below)")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from gpumodel.cli import main

    assert main(["calibrate", "--quick", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.slow
def test_cli_calibrate_from_points_needs_no_gpu(tmp_path, capsys):
    from pathlib import Path

    from gpumodel.calibration.record import load_calibration
    from gpumodel.cli import main

    data = Path(__file__).parent / "data" / "calibration" / "do_bench" / "quick.jsonl"
    out = tmp_path / "mine.yaml"
    assert main(["calibrate", "--from-points", str(data), "--out", str(out)]) == 0
    cal = load_calibration(out)
    assert cal.gpu == "h200-sxm" and len(cal.points) == 122
    assert "wrote" in capsys.readouterr().out


def _measure_kernels():
    mk = load_bench("measure_kernels")
    return mk


def test_widened_validation_is_disjoint_from_every_fit_plan():
    from gpumodel.calibration.plan import sweep_cases, widened_cases

    mk = _measure_kernels()
    fit = {case_key(c) for c in fit_cases("full") + sweep_cases() + widened_cases()}
    val = [case_key(c) for c in mk.widened_validation_cases()]
    assert not fit & set(val)
    assert len(set(val)) == len(val)
    ops = {c["op"] for c in mk.widened_validation_cases()}
    assert {"cross_entropy", "embedding", "adamw_step", "kv_cache_write", "attention"} <= ops
    shapes = [c["shape"] for c in mk.widened_validation_cases()]
    assert any(s.get("impl") == "naive" for s in shapes) and any(s.get("kv_seq") for s in shapes)
    assert {s.get("weight_dtype") for s in shapes} >= {"int8", "int4", "fp8"}


def test_fresh_rounds_draw_new_shapes_from_every_plan():
    mk = _measure_kernels()
    with pytest.raises(ValueError, match="round_"):
        mk.fresh_validation_cases(0)
    committed = mk.committed_keys()
    later = mk.fresh_validation_cases(7)     # seeds 80-86: a round no committed file holds
    keys = [case_key(c) for c in later]
    assert len(keys) > 300 and len(set(keys)) == len(keys) and not committed & set(keys)
    assert {"matmul", "bmm", "attention", "softmax", "layer_norm", "rms_norm"} <= {c["op"] for c in later}


@pytest.mark.slow
def test_widened_dry_run_on_cpu(tmp_path):
    pytest.importorskip("torch", reason="the dry run needs torch (any build)")
    from gpumodel.calibration.plan import widened_cases

    mk = _measure_kernels()
    fit, val = tmp_path / "fit.jsonl", tmp_path / "val.jsonl"
    # every op and variant of both sets, a few cases each, through the script's own entry point
    assert mk.main(["--set", "widened", "--fit-out", str(fit), "--out", str(val), "--dry-run",
                    "--budget-s", "60"]) == 0
    points = [json.loads(x) for x in fit.read_text().splitlines()[1:]]
    assert len(points) == len(widened_cases())
    assert all(p["time_s"] > 0 for p in points), [p for p in points if not p.get("time_s")][:3]
    assert len(val.read_text().splitlines()) == len(mk.widened_validation_cases()) + 1
