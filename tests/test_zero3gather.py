"""ZeRO-3 gathered the way DeepSpeed did before v0.5.5 (gpumodel.cluster.zero3gather)."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gpumodel as gm
from gpumodel.base.errors import ArgumentError
from gpumodel.cluster.collectives import system_collective_time
from gpumodel.cluster.zero3gather import (PER_RANK_S, PERSISTENCE_THRESHOLD, layer_tensor_elements,
                                          per_parameter_gather_time, per_parameter_layer_times)

GPT = gm.TransformerConfig(name="gpt-175b", hidden_size=12288, num_layers=96, num_heads=96, num_kv_heads=96,
                           intermediate_size=49152, vocab_size=51200, mlp="plain", activation="gelu", norm="layernorm",
                           qkv_bias=True, o_bias=True, mlp_bias=True, norm_bias=True)
A100 = gm.system("dgx-a100-80gb")


@pytest.mark.parametrize("name", ["llama-3-8b", "qwen2.5-7b", "mixtral-8x7b", "gpt2"])
def test_layer_tensors_add_up_to_the_layer(name):
    cfg = gm.model(name)
    assert layer_tensor_elements(cfg).sum() == cfg.layer_parameters()


def test_gpt_layer_tensors():
    # Megatron's GPT layer: QKV 3h x h and its bias 3h, projection h x h and bias h, fc1 4h x h and bias 4h,
    # fc2 h x 4h and bias h, two layer norms of weight and bias h
    h = 12288
    t = sorted(layer_tensor_elements(GPT).tolist())
    assert t == sorted([3 * h * h, 3 * h, h * h, h, 4 * h * h, 4 * h, 4 * h * h, h, h, h, h, h])
    # only the four weight matrices reach DeepSpeed's persistence threshold (10^5 elements)
    assert sum(x >= PERSISTENCE_THRESHOLD for x in t) == 4


def test_gather_by_hand():
    # one gather of the 175B layer over 1,536 ranks: the four matrices' NCCL all-gathers (2 bytes an element), 4 x 1536
    # views and copies at PER_RANK_S, and 3 x 2 bytes an element through the A100's memory (zeros, read, write)
    h, n = 12288, 1536
    mats = [3 * h * h, h * h, 4 * h * h, 4 * h * h]
    nccl = sum(float(system_collective_time("all_gather", 2 * x, A100, n, 1)) for x in mats)
    host = 4 * n * (PER_RANK_S["view"] + PER_RANK_S["copy"])
    hbm = 3 * 2 * sum(mats) / A100.gpu.memory_bandwidth
    assert float(per_parameter_gather_time(A100, GPT, 1, n, 1, 2)) == pytest.approx(nccl + host + hbm, rel=1e-9)
    assert float(per_parameter_gather_time(A100, GPT, 1, 1, 1, 2)) == 0.0


def test_layer_times_by_hand():
    g = float(per_parameter_gather_time(A100, GPT, 1, 768, 1, 2))
    # the gradients: one reduce-scatter a weight matrix (2 bytes an element), 4 x 768 views and copies into NCCL's
    # flat buffer, and that buffer written and read (2 x 2 bytes an element)
    h, n = 12288, 768
    mats = [3 * h * h, h * h, 4 * h * h, 4 * h * h]
    red = (sum(float(system_collective_time("reduce_scatter", 2 * x, A100, n, 1)) for x in mats)
           + 4 * n * (PER_RANK_S["view"] + PER_RANK_S["copy"]) + 2 * 2 * sum(mats) / A100.gpu.memory_bandwidth)
    exposed, total = per_parameter_layer_times(A100, GPT, 1, 768, 1, 2, 2, 0.05, True)
    # forward, recomputed forward and backward: three gathers, nothing hidden; the reduce-scatters under 50 ms of
    # backward
    assert float(total) == pytest.approx(3 * g + red)
    assert float(exposed) == pytest.approx(3 * g + max(0.0, red - 0.05))
    exposed2, _ = per_parameter_layer_times(A100, GPT, 1, 768, 1, 2, 2, 0.05, False)
    assert float(exposed2) == pytest.approx(2 * g + max(0.0, red - 0.05))


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 4096), st.sampled_from([1, 2, 4, 8]))
def test_more_ranks_never_gather_faster(n, tp):
    # the host work grows with the ranks and the ring's latency with them: one more rank never speeds a gather
    a = float(per_parameter_gather_time(A100, GPT, tp, n, tp, 2))
    b = float(per_parameter_gather_time(A100, GPT, tp, n + 1, tp, 2))
    assert b >= a > 0


def test_broadcasts():
    t = per_parameter_gather_time(A100, GPT, np.array([1, 2, 4]), np.array([384, 768, 1536]), 1, 2)
    one = [float(per_parameter_gather_time(A100, GPT, tp, n, 1, 2)) for tp, n in ((1, 384), (2, 768), (4, 1536))]
    assert np.allclose(t, one)


def test_step_takes_it_for_deepspeed_alone():
    par = gm.Parallelism(dp=768, zero=3)
    kw = dict(batch_size=2, seq_len=2048, precision="amp_fp16", checkpointing="full", parallelism=par)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        new = gm.training_step_time(GPT, "dgx-a100-80gb", framework="deepspeed", **kw)
        old = gm.training_step_time(GPT, "dgx-a100-80gb", framework="deepspeed", zero3_gather="per_parameter", **kw)
        with pytest.raises(ArgumentError, match="zero3_gather"):
            gm.training_step_time(GPT, "dgx-a100-80gb", framework="fsdp", zero3_gather="per_parameter", **kw)
        with pytest.raises(ArgumentError, match="zero3_gather"):
            gm.training_step_time(GPT, "dgx-a100-80gb", framework="deepspeed", zero3_gather="flat", **kw)
        # the compute is the same; DeepSpeed's 2021 gathers expose far more communication
        for k in ("forward", "backward", "recompute"):
            assert old.breakdown[k] == new.breakdown[k]
        assert old.breakdown["communication"] > 5 * new.breakdown["communication"]
        # without ZeRO-3 nothing changes
        kw["parallelism"] = gm.Parallelism(dp=96, tp=8, zero=1)
        a = gm.training_step_time(GPT, "dgx-a100-80gb", framework="deepspeed", **kw)
        b = gm.training_step_time(GPT, "dgx-a100-80gb", framework="deepspeed", zero3_gather="per_parameter", **kw)
        assert a.seconds == b.seconds


def test_gather_host_script_plans_the_sc21_cases(tmp_path):
    # the measuring script's cases: the SC21 models' gathered matrices (and a bias and a norm) at each run's ranks
    import json
    from benchscript import load_bench
    out = tmp_path / "g.jsonl"
    assert load_bench("measure_gather_host").main(["--out", str(out), "--dry-run"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert {r["ranks"] for r in rows} == {384, 640, 768, 1120, 1536, 2240}
    assert {4 * 12288 ** 2, 4 * 20480 ** 2} <= {r["numel"] for r in rows}
    assert all(r["partition"] * r["ranks"] >= r["numel"] for r in rows)


def test_per_rank_costs_are_the_h100_hosts_medians():
    # PER_RANK_S is what bench/measure_gather_host.py measured on an H100 machine's host: the medians over its cases
    import json
    import statistics
    from pathlib import Path
    rows = [json.loads(x) for x in (Path(__file__).parent / "data" / "cluster" / "gather_host" / "h100.jsonl")
            .read_text().splitlines()]
    cases = [r for r in rows if "numel" in r]
    assert len(cases) == 60 and "H100" in rows[0]["environment"]["device_name"]
    assert PER_RANK_S["view"] == pytest.approx(statistics.median(r["narrow_s"] for r in cases), rel=0.01)
    assert PER_RANK_S["copy"] == pytest.approx(statistics.median(r["copy_s"] for r in cases), rel=0.01)
