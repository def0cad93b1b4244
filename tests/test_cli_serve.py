"""``gpumodel serve``: the capacity table, JSON, the GPUs for a rate and the plot."""

from __future__ import annotations

import json

import pytest

import gpumodel as gm
from gpumodel.cli import main


def test_serve_table(capsys):
    args = ["serve", "llama-3-70b", "--gpu", "h100", "--tp", "4", "--prompt", "2048", "--output", "256",
            "--ttft", "1s", "--tpot", "50ms", "--rate", "20"]
    assert main(args) == 0
    out = capsys.readouterr().out
    cap = gm.serving_capacity("llama-3-70b", "h100", prompt_len=2048, output_len=256, tp=4, ttft_slo=1.0,
                              tpot_slo=0.05)
    assert "4 x h100-sxm" in out and f"{cap.max_concurrency:,}" in out and "TPOT <= 50.00 ms" in out
    assert f"need {cap.gpus_for(20)} GPUs" in out


def test_serve_json_matches_the_api(capsys):
    assert main(["serve", "llama-3-8b", "--gpu", "h200", "--dtype", "fp8", "--kv-dtype", "fp8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    cap = gm.serving_capacity("llama-3-8b", "h200", dtype="fp8", kv_dtype="fp8")
    assert d["output_tokens_per_s"] == pytest.approx(cap.output_tokens_per_s)
    assert d["single_request"]["ttft_s"] > 0 and d["limiter"] == cap.limiter


def test_serve_bad_target_is_a_clear_error(capsys):
    assert main(["serve", "llama-3-8b", "--tpot", "soon"]) == 2
    assert "tpot_slo='soon' is not a time" in capsys.readouterr().err


def test_serve_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "curve.png"
    assert main(["serve", "llama-3.2-1b", "--gpu", "l4", "--tpot", "30ms", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
