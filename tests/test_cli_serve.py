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


# ---------------------------------------------------------------------------------------------- runs that cannot exist
def _refused(argv, capsys):
    """``gpumodel serve ...`` is refused: exit 2, nothing on stdout, one stderr line; that line."""
    code = main(argv)
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert code == 2 and captured.out == "" and len(err) == 1, (code, captured.out, err)
    assert err[0].startswith("gpumodel serve: error: ") and "internal error" not in err[0]
    return err[0]


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_405b_on_one_h100_is_refused_with_what_would_fit(extra, capsys):
    line = _refused(["serve", "llama-3-405b", "--gpu", "h100", "--rate", "10", *extra], capsys)
    # what one request needs (the allocated peak: 811 GB of weights) and what the GPU offers
    need = gm.inference_memory("llama-3-405b", 1, 512, new_tokens=127).peak_bytes
    assert "llama-3-405b does not fit on h100-sxm" in line
    assert f"needs {need / 2**30:,.1f} GiB per GPU, more than the 79.2 GiB one h100-sxm offers" in line
    # 16-way tensor parallelism is the smallest that fits (8 ways: 811 GB / 8 = 101 GB per GPU)
    per16 = gm.inference_memory("llama-3-405b", 1, 512, new_tokens=127, tp=16).peak_bytes
    assert f"--tp 16 ({per16 / 2**30:,.1f} GiB per GPU)" in line and "--tp 8" not in line


def test_a_billion_token_prompt_is_refused(capsys):
    line = _refused(["serve", "llama-3-405b", "--gpu", "h100", "--prompt", "1e9"], capsys)
    assert "1,000,000,000 prompt + 128 output tokens" in line and "shorten --prompt or --output" in line
    line = _refused(["serve", "llama-3-8b", "--gpu", "h100", "--prompt", "1e9"], capsys)
    longest = gm.max_seq_len("llama-3-8b", "h100", 1, training=False, new_tokens=127,
                             capacity_bytes=gm.gpu("h100").usable_memory_bytes * 1.1 + 768 * 2**20)
    assert f"--prompt {longest:,} or shorter" in line


def test_70b_on_a_4090_suggests_tensor_parallelism_and_a_larger_gpu(capsys):
    line = _refused(["serve", "llama-3-70b", "--gpu", "4090"], capsys)
    assert "more than the 24.0 GiB one rtx-4090 offers" in line
    # 141 GB of weights: 8 x 4090 (17.6 GB each) or one H200 (139.8 GiB); int4 (about 40 GB) would not fit
    assert "--tp 8 (" in line and "--gpu h200-sxm (139.8 GiB)" in line and "--dtype" not in line


def test_a_kv_cache_without_room_for_one_request_is_refused(capsys):
    # 70B on one H200 with 15,000-token prompts: the request alone fits (139.3 of 139.8 GiB), but the weights
    # and the 15,000-token prefill workspace leave the KV cache less than the request's 4.6 GiB
    cap = gm.serving_capacity("llama-3-70b", "h200", prompt_len=15000, output_len=128)
    assert cap.max_concurrency == 0
    line = _refused(["serve", "llama-3-70b", "--gpu", "h200", "--prompt", "15000"], capsys)
    assert "the KV cache has no room for its" in line and "--tp 2" in line


def test_a_request_that_fits_is_served_without_a_warning(capsys):
    assert main(["serve", "llama-3-70b", "--gpu", "h200"]) == 0
    captured = capsys.readouterr()
    assert "one request alone" in captured.out and captured.err == ""


def test_serve_help_lists_defaults_and_json_keys(capsys):
    assert main(["serve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: h100)" in text and "(default: 512)" in text and "(default: graph)" in text
    for key in ("max_concurrency", "output_tokens_per_s_per_gpu", "single_request", "gpus_for_rate", "prefill_chunks"):
        assert key in text


def test_serve_takes_your_calibration_and_host_costs(capsys):
    """--calibration and --host-costs reach the API as calibration= and host= (a user H100's files, committed)."""
    from pathlib import Path

    own = Path(__file__).parent / "data" / "calibration" / "user_h100"
    cal, host = str(own / "calibration.yaml"), str(own / "host.yaml")
    assert main(["serve", "llama-3-8b", "--gpu", "h100", "--engine", "hf", "--calibration", cal, "--host-costs", host,
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    cap = gm.serving_capacity("llama-3-8b", "h100", engine="hf", calibration=cal, host=host)
    assert d["output_tokens_per_s"] == pytest.approx(cap.output_tokens_per_s)
    assert d["output_tokens_per_s"] != pytest.approx(gm.serving_capacity("llama-3-8b", "h100",
                                                                          engine="hf").output_tokens_per_s)
    # CUDA-graph replay has no per-step host dispatch: host costs are refused there, naming the option
    assert main(["serve", "llama-3-8b", "--gpu", "h100", "--host-costs", host]) == 2
    assert "host" in capsys.readouterr().err
