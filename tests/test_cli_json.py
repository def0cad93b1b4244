"""Every command's ``--json`` is strict JSON (no NaN or Infinity), in SI units, with its keys in ``--help``."""

import json
from pathlib import Path

import pytest

from gpumodel.cli import main

DATA = Path(__file__).parent / "data" / "calibration"


def strict(text: str):
    """``json.loads`` that refuses NaN, Infinity and -Infinity."""
    def refuse(constant):
        raise AssertionError(f"{constant} in JSON output")

    return json.loads(text, parse_constant=refuse)


def json_of(argv, capsys):
    assert main([str(a) for a in argv]) == 0
    return strict(capsys.readouterr().out)


def help_of(command, capsys) -> str:
    assert main([command, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())


def keys(value, nested=("op", "results", "next_step", "options")):
    """Top-level keys, and the keys of the nested objects the epilogs document."""
    if isinstance(value, list):
        return set().union(*(keys(v, nested) for v in value)) if value and isinstance(value[0], dict) else set()
    out = set(value)
    for k in nested:
        if isinstance(value.get(k), dict) and k != "options":
            out |= set(value[k])
        elif isinstance(value.get(k), list):
            out |= keys(value[k], ())
    return out


CASES = [
    ["gpus"],
    ["gpus", "--vendor", "amd"],
    ["gpu", "h100"],
    ["gpu", "h100,a100,4090"],
    ["gpu", "mi300x"],
    ["memory", "llama-3-8b", "--batch", "8", "--seq", "4096"],
    ["memory", "llama-3-70b", "--gpu", "4090"],  # does not fit: negative headroom, max batch 0
    ["memory", "llama-3-8b", "--inference", "--dtype", "int4", "--new-tokens", "64"],
    ["memory", "--list"],
    ["roofline", "matmul", "4096", "4096", "4096"],
    ["roofline", "--gpu", "h100,mi300x", "elementwise", "16Mi", "--level", "all"],
    ["roofline", "attention", "1", "32", "2048", "128", "--causal", "--kv-heads", "8"],
    ["estimate", "--gpu", "h200,a100", "matmul", "4096", "4096", "4096"],
    ["estimate", "softmax", "1", "1"],
    ["occupancy", "--threads", "256", "--regs", "64", "--smem", "48KiB"],
    ["occupancy", "--cc", "8.6", "--threads", "1024", "--regs", "0"],  # registers set no limit
]


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(a) for a in CASES])
def test_json_is_strict_and_documented(argv, capsys):
    data = json_of([*argv, "--json"], capsys)
    documented = help_of(argv[0], capsys)
    missing = {k for k in keys(data) if k not in documented}
    if argv[:2] == ["memory", "--list"]:
        assert isinstance(data, list) and "gpt2" in data
    else:
        assert not missing, f"keys not in `gpumodel {argv[0]} --help`: {sorted(missing)}"


def test_gpu_comparison_has_one_column_per_gpu(capsys):
    assert main(["gpu", "h100,a100,4090"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header == ["GPU", "h100-sxm", "a100-sxm4-80gb", "rtx-4090"]
    records = json_of(["gpu", "h100,a100", "--json"], capsys)
    assert [r["name"] for r in records] == ["h100-sxm", "a100-sxm4-80gb"]
    assert records[1]["memory_bandwidth"] == pytest.approx(2.039e12, rel=1e-3)  # A100 80GB SXM: 2,039 GB/s


def test_json_numbers_are_si(capsys):
    mem = json_of(["memory", "gpt2", "--batch", "4", "--seq", "512", "--json"], capsys)
    assert mem["peak_bytes"] == sum(mem["breakdown"].values()) or mem["peak_bytes"] > 1e6  # bytes, not GiB
    assert mem["gpu_memory_bytes"] > 70 * 2 ** 30
    roof = json_of(["roofline", "matmul", "4096", "4096", "4096", "--json"], capsys)["results"][0]
    assert roof["seconds"] == pytest.approx(2 * 4096 ** 3 / 989.4e12, rel=1e-3)  # 2*m*n*k / dense bf16 peak [s]
    assert roof["peak_flops"] == pytest.approx(989.4e12) and roof["bandwidth"] == pytest.approx(3.35e12)
    occ = json_of(["occupancy", "--threads", "256", "--regs", "64", "--smem", "48KiB", "--json"], capsys)
    assert occ["dynamic_shared_bytes"] == 48 * 1024 and 0 < occ["occupancy"] <= 1


def test_unlimited_resources_are_null_not_a_sentinel(capsys):
    occ = json_of(["occupancy", "--threads", "128", "--regs", "0", "--json"], capsys)
    assert occ["blocks_by_registers"] is None and occ["blocks_by_warps"] == 16  # 64 warps / 4 per block


def test_non_finite_numbers_become_null(capsys):
    from gpumodel.cli._common import print_json
    import io
    import numpy as np

    buf = io.StringIO()
    print_json({"a": float("nan"), "b": [np.float32("inf"), -np.inf], "c": np.array([1.0, np.nan])}, file=buf)
    assert strict(buf.getvalue()) == {"a": None, "b": [None, None], "c": [1.0, None]}


def test_plot_with_json_keeps_stdout_json(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "m.png"
    data = json_of(["memory", "gpt2", "--batch", "2", "--seq", "256", "--plot", png, "--json"], capsys)
    assert data["plot"] == str(png) and png.stat().st_size > 1000


def test_calibrate_json_is_strict_and_documented(tmp_path, monkeypatch, capsys):
    # the fit itself takes tens of seconds and is tested in test_calibration_bench; here only its report
    import gpumodel.calibration.fit as fit
    from gpumodel.calibration.record import calibration_for

    monkeypatch.setattr(fit, "fit_calibration", lambda points, g, env, **kw: calibration_for("h200"))
    out = tmp_path / "c.yaml"
    data = json_of(["calibrate", "--from-points", DATA / "do_bench" / "quick.jsonl", "--out", out, "--json"], capsys)
    assert data["file"] == str(out) and out.exists() and data["gpu"] == "h200-sxm"
    documented = help_of("calibrate", capsys)
    assert all(k in documented for k in data)
    assert 0 < data["parameters"]["launch_s"] < 1e-4  # seconds, not microseconds
    assert data["host_file"] is None and data["sustained_slowdown"] is None   # not measured from points
    assert data["transfer_validation_error"] == {}                            # no held-out points given


def test_calibrate_reports_the_transfer_on_the_held_out_points(tmp_path, monkeypatch, capsys):
    """With held-out points, the report sets the fit's error beside the transfer's on the same kernels (here the
    H200's own shipped calibration carried to itself: the fit and the transfer are the same model)."""
    import gpumodel.calibration.fit as fit
    from gpumodel.calibration.record import calibration_for

    monkeypatch.setattr(fit, "fit_calibration", lambda points, g, env, **kw: calibration_for("h200"))
    quick = DATA / "do_bench" / "quick.jsonl"
    data = json_of(["calibrate", "--from-points", quick, "--validation", quick, "--out", tmp_path / "c.yaml",
                    "--gpu", "h200", "--json"], capsys)
    t = data["transfer_validation_error"]
    assert t["overall"]["n"] > 10 and "matmul" in t          # per family, as the fit's own errors
    assert 0 < t["overall"]["median"] < 0.5


SLOW_CASES = [
    ["serve", "llama-3.2-1b", "--gpu", "l4", "--tpot", "30ms", "--rate", "5"],
    ["plan", "llama-3.2-1b", "--gpus", "8", "--seq", "2048", "--tokens", "100B", "--top", "2"],
    ["systems", "--gpu", "h100"],
    ["system", "gb200-nvl72"],
    ["memory", "llama-3-70b", "--gpu", "h100"],   # does not fit: suggestions
]


@pytest.mark.parametrize("argv", SLOW_CASES, ids=[" ".join(a) for a in SLOW_CASES])
def test_serving_planning_and_systems_json_is_strict_and_documented(argv, capsys):
    data = json_of([*argv, "--json"], capsys)
    documented = help_of(argv[0], capsys)
    nested = ("rows", "single_request", "curve", "intra_node", "inter_node", "suggestions")
    missing = {k for k in keys(data, nested) if k not in documented}
    assert not missing, f"keys not in `gpumodel {argv[0]} --help`: {sorted(missing)}"
