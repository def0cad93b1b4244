"""``gpumodel roofline``: text, JSON, plot and errors."""

import json

import pytest

import gpumodel as gm
from gpumodel.cli import main


def test_matmul_text(capsys):
    assert main(["roofline", "--gpu", "h100", "matmul", "4096", "4096", "4096", "--dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "compute" in out and "295.3" in out and "2048 over bytes read" in out and "138.9 us" in out


def test_json_every_level(capsys):
    assert main(["roofline", "elementwise", "16777216", "--dtype", "fp16", "--level", "all", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["op"]["arithmetic_intensity_read"] == 0.5
    assert [r["level"] for r in data["results"]] == ["hbm", "l2", "shared"]
    hbm = data["results"][0]
    assert hbm["bound"] == "memory"
    assert hbm["seconds"] == pytest.approx(2 * 16777216 * 2 / 3.35e12)  # read + write, 2 bytes each


@pytest.mark.parametrize("argv", [
    ["bmm", "8", "64", "64", "64"], ["softmax", "4096", "4096"], ["layer_norm", "4096", "4096"],
    ["rms_norm", "4096", "4096"], ["reduce_sum", "4096", "4096"], ["embedding", "4096", "32000", "4096"],
    ["cross_entropy", "4096", "32000"], ["attention", "8", "32", "4096", "128", "--causal", "--backward"],
    ["attention", "1", "32", "2048", "128", "--impl", "naive", "--kv-heads", "8"],
    ["elementwise", "1e6", "--inputs", "2", "--flops-per-element", "3"],
])
def test_every_op(argv, capsys):
    assert main(["roofline", "--gpu", "h100,h200", *argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["gpu"] for r in data["results"]] == ["h100-sxm", "h200-sxm"]


def test_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.png"
    assert main(["roofline", "softmax", "4096", "4096", "--plot", str(out)]) == 0
    assert out.stat().st_size > 10_000


@pytest.mark.parametrize("argv, message", [
    (["matmul", "1", "2"], "matmul takes 3 sizes"),
    (["matmul", "1", "2", "-3"], "k='-3': must be >= 1"),
    (["matmal", "1", "2", "3"], "unknown op"),
    (["--gpu", "a100", "matmul", "8", "8", "8", "--dtype", "fp8"], "dtype 'fp8'"),
    (["matmul", "8", "8", "8", "--dtype", "fp9"], "unknown dtype"),
])
def test_errors(argv, message, capsys):
    assert main(["roofline", *argv]) == 2
    assert message in capsys.readouterr().err


def test_impl_takes_every_attention_kind_the_api_takes(capsys):
    from gpumodel.core.ops import AttentionImpl

    for impl in AttentionImpl:
        assert main(["roofline", "attention", "1", "32", "2048", "128", "--impl", impl.value, "--json"]) == 0
        got = json.loads(capsys.readouterr().out)["results"][0]["seconds"]
        want = gm.roofline(gm.ops.attention(1, 32, 2048, 128, impl=impl.value), "h100").seconds
        assert got == pytest.approx(want)
