"""The attention kernel library (``attention_kernel=``) reaches every time function that builds attention kernels.

On an H100 ``"fa2"`` (the flash-attn 2 package) runs FlashAttention-2's ``mma.sync`` kernels, slower than the
wgmma kernels PyTorch's SDPA dispatches to (``gm.ops.attention(..., kernel=)``): a long-sequence step, whose
attention is a large share of its time, is longer with it. ``"sdpa"`` is the default everywhere.
"""

from __future__ import annotations

import json
import warnings

import pytest

import gpumodel as gm
from gpumodel.calibration.estimate import estimate
from gpumodel.cli import main
from gpumodel.cluster.shard import shard_config

H100 = "h100-sxm"
SEQ = 16384
ONE_GPU = dict(batch_size=1, seq_len=SEQ, checkpointing=True)       # llama-3.2-1b fits one H100 so
LAYOUT = dict(batch_size=1, seq_len=SEQ, checkpointing=True, framework="megatron",
              parallelism=gm.Parallelism(dp=2, tp=4))
PLAN = dict(tokens="1B", global_batch=16, seq_len=SEQ, num_gpus=8, micro_batches=(1,), virtual_stages=(1,),
            zero_stages=(1,), checkpointing=("full",), top=3)


def _attention_s(cfg, kernel: str, backward: bool, heads: int, kv_heads: int, sustained: bool = True) -> float:
    """One causal attention kernel of a layer at ``SEQ`` tokens, timed alone or under sustained load [s]."""
    op = gm.ops.attention(1, heads, SEQ, cfg.head_dim, "bf16", causal=True, kv_heads=kv_heads, backward=backward,
                          kernel=kernel)
    return float(estimate(op, gm.gpu(H100), sustained=sustained).seconds)


def _layer_difference(cfg, heads: int, kv_heads: int, sustained: bool = True) -> float:
    """Step time fa2 adds over sdpa: per layer, the forward twice (full recomputation) and the backward once [s]."""
    fwd = (_attention_s(cfg, "fa2", False, heads, kv_heads, sustained)
           - _attention_s(cfg, "sdpa", False, heads, kv_heads, sustained))
    bwd = (_attention_s(cfg, "fa2", True, heads, kv_heads, sustained)
           - _attention_s(cfg, "sdpa", True, heads, kv_heads, sustained))
    return cfg.num_layers * (2 * fwd + bwd)


# ---------------------------------------------------------------------------------------------- training
def test_one_gpu_step_is_longer_by_the_attention_kernels_alone():
    cfg = gm.model("llama-3.2-1b")
    default = gm.training_step_time(cfg, H100, **ONE_GPU)
    sdpa = gm.training_step_time(cfg, H100, attention_kernel="sdpa", **ONE_GPU)
    fa2 = gm.training_step_time(cfg, H100, attention_kernel="FA2", **ONE_GPU)     # any case, as every choice
    assert default.seconds == sdpa.seconds and sdpa.fits
    assert (default.attention_kernel, fa2.attention_kernel) == ("sdpa", "fa2")
    assert fa2.to_dict()["attention_kernel"] == "fa2" and "attention fa2" in repr(fa2)
    # the GPU is busy throughout (not host-bound), so the step grows by the attention kernels' difference:
    # 16 layers x (2 forwards, one recomputed, + 1 backward) of 32 query heads over 8 KV heads, each kernel between
    # its time alone and under sustained load (the step takes its share of the slowdown: sustained.clock_share)
    assert not sdpa.host_bound
    grown = fa2.seconds - sdpa.seconds
    assert _layer_difference(cfg, 32, 8, sustained=False) < grown < _layer_difference(cfg, 32, 8)
    assert fa2.breakdown["optimizer"] == sdpa.breakdown["optimizer"]     # nothing but attention changes


def test_parallel_step_is_longer_by_the_shard_attention_kernels():
    default = gm.training_step_time("llama-3-8b", "dgx-h100", **LAYOUT)
    sdpa = gm.training_step_time("llama-3-8b", "dgx-h100", attention_kernel="sdpa", **LAYOUT)
    fa2 = gm.training_step_time("llama-3-8b", "dgx-h100", attention_kernel="fa2", **LAYOUT)
    assert default.seconds == sdpa.seconds and fa2.attention_kernel == "fa2" and fa2.num_gpus == 8
    # pp = cp = 1, one micro-batch, no overlap: the communication does not depend on the attention kernels, and
    # each GPU's step grows by its shard's attention: 32 layers of 32 / tp = 8 query heads over 8 / tp = 2 KV heads
    shard = shard_config(gm.model("llama-3-8b"), 4)
    assert fa2.breakdown["communication"] == pytest.approx(sdpa.breakdown["communication"], rel=1e-12)
    expected = _layer_difference(shard.model_copy(update=dict(num_layers=32)), shard.num_heads, shard.num_kv_heads)
    assert fa2.seconds - sdpa.seconds == pytest.approx(expected, rel=1e-6)


def test_training_time_multiplies_the_longer_step():
    kw = dict(tokens="1B", **ONE_GPU)
    sdpa = gm.training_time("llama-3.2-1b", H100, **kw)
    assert gm.training_time("llama-3.2-1b", H100, attention_kernel="sdpa", **kw).seconds == sdpa.seconds
    fa2 = gm.training_time("llama-3.2-1b", H100, attention_kernel="fa2", **kw)
    # the same steps (the same tokens a step), each longer
    assert fa2.steps == sdpa.steps and fa2.seconds > sdpa.seconds
    assert fa2.step.attention_kernel == "fa2" and fa2.to_dict()["step"]["attention_kernel"] == "fa2"


def test_plan_ranks_slower_layouts_and_keeps_the_kernels_apart_in_its_cache():
    sdpa = gm.plan_training("llama-3-8b", "dgx-h100", **PLAN)
    fa2 = gm.plan_training("llama-3-8b", "dgx-h100", attention_kernel="fa2", **PLAN)
    again = gm.plan_training("llama-3-8b", "dgx-h100", attention_kernel="sdpa", **PLAN)
    # every layout's attention runs slower kernels: the best step is longer; the sdpa answer after the fa2 one is
    # the first one (the cached shard times are keyed by the kernel)
    assert fa2.best["seconds"] > sdpa.best["seconds"] == again.best["seconds"]
    assert (sdpa.attention_kernel, fa2.attention_kernel) == ("sdpa", "fa2")
    assert fa2.to_dict()["attention_kernel"] == "fa2" and "attention fa2" in repr(fa2)


# ---------------------------------------------------------------------------------------------- serving
def test_serving_functions_take_the_kernel():
    kw = dict(prompt_len=SEQ)
    sdpa = gm.prefill_time("llama-3-8b", H100, **kw)
    assert gm.prefill_time("llama-3-8b", H100, attention_kernel="sdpa", **kw).seconds == sdpa.seconds
    fa2 = gm.prefill_time("llama-3-8b", H100, attention_kernel="fa2", **kw)
    # a 16k-token prompt: its causal attention is about a fifth of the prefill, and it changes; the GEMMs move only
    # by the step's clock-bound share of the sustained slowdown, which the slower attention shifts (under 1%)
    assert fa2.seconds > sdpa.seconds
    assert fa2.breakdown["matmul"] == pytest.approx(sdpa.breakdown["matmul"], rel=0.01)
    assert fa2.breakdown["attention"] > sdpa.breakdown["attention"] and fa2.attention_kernel == "fa2"
    gen = gm.generation_time("llama-3-8b", H100, prompt_len=SEQ, new_tokens=4, attention_kernel="fa2")
    assert gen.prefill.attention_kernel == gen.last_decode.attention_kernel == "fa2"
    assert gen.ttft_s == fa2.seconds                                   # the same prefill
    cap = dict(prompt_len=SEQ, output_len=64)
    slow = gm.serving_capacity("llama-3-8b", H100, attention_kernel="fa2", **cap)
    # each request's 16k-token prefill takes longer: fewer tokens a second at the same concurrency limit
    assert slow.output_tokens_per_s < gm.serving_capacity("llama-3-8b", H100, **cap).output_tokens_per_s
    assert slow.attention_kernel == "fa2" == slow.to_dict()["attention_kernel"]


# ---------------------------------------------------------------------------------------------- errors
CALLS = {
    "training_step_time": lambda **kw: gm.training_step_time("llama-3.2-1b", GPU["gpu"], batch_size=1, seq_len=512, **kw),
    "parallel step": lambda **kw: gm.training_step_time("llama-3.2-1b", GPU["system"], batch_size=1, seq_len=512,
                                                        framework="megatron", parallelism=gm.Parallelism(tp=2), **kw),
    "training_time": lambda **kw: gm.training_time("llama-3.2-1b", GPU["gpu"], tokens="1B", batch_size=1, seq_len=512,
                                                   **kw),
    "plan_training": lambda **kw: gm.plan_training("gpt2", GPU["system"], tokens="1B", global_batch=8, seq_len=512,
                                                   num_gpus=2, top=1, **kw),
    "prefill_time": lambda **kw: gm.prefill_time("llama-3.2-1b", GPU["gpu"], prompt_len=512, **kw),
    "decode_step_time": lambda **kw: gm.decode_step_time("llama-3.2-1b", GPU["gpu"], context_len=512, **kw),
    "generation_time": lambda **kw: gm.generation_time("llama-3.2-1b", GPU["gpu"], new_tokens=4, **kw),
    "serving_capacity": lambda **kw: gm.serving_capacity("llama-3.2-1b", GPU["gpu"], **kw),
}
GPU = {"gpu": "h100", "system": "dgx-h100"}     # of the calls above (an A100 and its DGX below)


@pytest.mark.parametrize("name", CALLS)
def test_an_unknown_kernel_is_refused_naming_attention_kernel(name):
    with pytest.raises(gm.ArgumentError, match="attention_kernel='fa9' is not one of 'sdpa', 'cudnn'") as err:
        CALLS[name](attention_kernel="fa9")
    assert err.value.argument == "attention_kernel" and "triton" in err.value.allowed


@pytest.mark.parametrize("name", CALLS)
def test_fa3_off_hopper_is_unsupported(name, monkeypatch):
    monkeypatch.setitem(GPU, "gpu", "a100")
    monkeypatch.setitem(GPU, "system", "dgx-a100-80gb")
    # FlashAttention-3 is written for sm90 alone: an A100 (sm80) is refused before any kernel is timed
    with pytest.raises(gm.UnsupportedError, match="attention_kernel='fa3'.*Hopper") as err:
        CALLS[name](attention_kernel="fa3")
    assert err.value.argument == "attention_kernel"


def test_fp32_attention_has_no_library_choice():
    # fp32 training runs SDPA's fp32 path (no flash kernel): the flash libraries have 16-bit kernels only
    with pytest.raises(gm.UnsupportedError, match="16-bit") as err:
        gm.training_step_time("llama-3.2-1b", H100, batch_size=1, seq_len=512, precision="fp32",
                              attention_kernel="fa2")
    assert err.value.argument == "attention_kernel"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        assert gm.prefill_time("llama-3.2-1b", H100, prompt_len=512, dtype="fp32", attention_kernel="sdpa").seconds > 0


def test_the_naive_attention_of_the_parallel_step_takes_sdpa_only():
    from gpumodel.cluster.step import parallel_training_step_time

    with pytest.raises(gm.ArgumentError, match="attention='naive'") as err:
        parallel_training_step_time("llama-3.2-1b", "dgx-h100", 1, 512, attention="naive", attention_kernel="fa2")
    assert err.value.argument == "attention_kernel"


# ---------------------------------------------------------------------------------------------- CLI
PLAN_ARGS = ["plan", "llama-3-8b", "--system", "dgx-h100", "--gpus", "8", "--seq", str(SEQ), "--global-batch", "16",
             "--tokens", "1B", "--top", "1", "--json"]


def _plan_json(capsys, *extra: str) -> dict:
    assert main([*PLAN_ARGS, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_plan_takes_and_echoes_the_attention_kernel(capsys):
    default = _plan_json(capsys)
    sdpa = _plan_json(capsys, "--attention-kernel", "sdpa")
    fa2 = _plan_json(capsys, "--attention-kernel", "fa2")
    assert default["attention_kernel"] == sdpa["attention_kernel"] == "sdpa" and fa2["attention_kernel"] == "fa2"
    assert default["rows"][0]["seconds"] == sdpa["rows"][0]["seconds"] < fa2["rows"][0]["seconds"]
    assert main([*PLAN_ARGS[:-1], "--attention-kernel", "fa2"]) == 0
    assert "fa2 attention" in capsys.readouterr().out


def test_cli_refuses_unknown_and_unsupported_kernels(capsys):
    assert main([*PLAN_ARGS, "--attention-kernel", "fa9"]) == 2        # argparse: not one of the choices
    assert "--attention-kernel" in capsys.readouterr().err
    assert main(["plan", "llama-3-8b", "--system", "dgx-a100-80gb", "--gpus", "8", "--attention-kernel", "fa3"]) == 2
    assert "attention_kernel='fa3'" in capsys.readouterr().err
    assert main(["serve", "llama-3.2-1b", "--gpu", "a100", "--attention-kernel", "fa3"]) == 2
    assert "Hopper" in capsys.readouterr().err
