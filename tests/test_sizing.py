"""Sizing: fits, largest batch / sequence, fewest GPUs, GPU ranking, CLI."""

import json

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.cli import main


def test_fits_matches_total_bytes():
    g = gm.gpu("h100")
    m = gm.training_memory("llama-3.2-1b", 4, 2048)
    assert bool(gm.fits("llama-3.2-1b", g, 4, 2048)) == (m.total_bytes <= g.memory_bytes)
    arr = gm.fits("llama-3.2-1b", "h100", np.array([1, 4, 64, 512]), 2048)
    assert arr.dtype == bool and list(arr) == sorted(arr, reverse=True)


def test_max_batch_size_is_the_boundary():
    b = gm.max_batch_size("llama-3.2-1b", "h100", seq_len=2048)
    assert b > 0
    assert gm.fits("llama-3.2-1b", "h100", b, 2048)
    assert not gm.fits("llama-3.2-1b", "h100", b + 1, 2048)
    assert gm.max_batch_size("llama-3-70b", "h100", seq_len=2048) == 0


def test_max_seq_len():
    s = gm.max_seq_len("llama-3.2-1b", "h100", batch_size=2, multiple_of=64)
    assert s > 0 and s % 64 == 0
    assert gm.fits("llama-3.2-1b", "h100", 2, s) and not gm.fits("llama-3.2-1b", "h100", 2, s + 64)


def test_inference_fits():
    assert gm.fits("llama-2-7b", "h100", 1, 4096, training=False)
    assert not gm.fits("llama-2-70b", "h100", 1, 4096, training=False)


def test_min_gpus_plan_fits():
    plan = gm.min_gpus("llama-2-7b", "h100", batch_size=1, seq_len=4096)
    assert plan is not None and plan.num_gpus > 1
    assert plan.dp * plan.tp * plan.pp == plan.num_gpus
    assert plan.per_gpu_bytes <= gm.gpu("h100").memory_bytes
    assert gm.min_gpus("gpt2", "h100", 1, 1024).num_gpus == 1


def test_rank_gpus_sorted_by_count():
    plans = gm.rank_gpus("llama-3-8b", 1, 4096, gpus=["h100", "h200", "a100-sxm4-40gb", "rtx-4090"])
    counts = [p.num_gpus for p in plans]
    assert counts == sorted(counts)
    assert plans[0].gpu == "h200-sxm"


def test_cli_memory_json(capsys):
    assert main(["memory", "llama-3-8b", "--gpu", "h100", "--batch", "8", "--seq", "4096",
                 "--precision", "amp_bf16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and out["max_batch_size"] >= 0
    assert sum(out["breakdown"].values()) == pytest.approx(out["peak_bytes"])


def test_cli_memory_table_and_hf_config(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                                "vocab_size": 50257, "n_positions": 1024}))
    assert main(["memory", "--hf-config", str(path), "--gpu", "h100", "--batch", "4", "--seq", "1024"]) == 0
    text = capsys.readouterr().out
    assert "fits in h100-sxm" in text and "largest batch" in text
    assert main(["memory", "llama-3-8b", "--inference", "--batch", "4"]) == 0
    assert main(["memory", "no-such-model"]) == 2


def test_max_seq_len_stops_at_learned_positions():
    assert gm.max_seq_len("gpt2", "h200", batch_size=1) == 1024  # n_positions


def test_cli_bad_config_path(tmp_path, capsys):
    assert main(["memory", "--hf-config", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=15, deadline=None)
@given(s=st.integers(64, 8192))
@pytest.mark.filterwarnings("ignore:seq_len=.* is beyond the 1024 learned positions of gpt2-medium")  # s > 1024
def test_max_batch_never_grows_with_sequence(s):
    assert gm.max_batch_size("gpt2-medium", "a100-sxm4-40gb", s) >= gm.max_batch_size("gpt2-medium", "a100-sxm4-40gb", s + 64)


def test_capacity_override():
    # what torch reports for an H200 (150,109,880,320 B) admits a larger batch than the 141 GB datasheet value
    big = gm.max_batch_size("llama-3.2-1b", "h200", 2048, capacity_bytes=150_109_880_320)
    assert big >= gm.max_batch_size("llama-3.2-1b", "h200", 2048)
    assert not gm.fits("gpt2", "h200", 1, 128, capacity_bytes=1e9)


def test_rank_gpus_leaves_out_gpus_without_the_compute_format():
    # amp_bf16 needs bf16 tensor cores: the V100 and T4 have fp16 only
    names = {p.gpu for p in gm.rank_gpus("gpt2", 1, 128)}
    assert "v100-sxm2-32gb" not in names and "t4" not in names
    fp16 = {p.gpu for p in gm.rank_gpus("gpt2", 1, 128, precision="amp_fp16")}
    assert {"v100-sxm2-32gb", "t4"} <= fp16
