"""Transformer Engine's fp8 recipes: delayed and current scaling, MXFP8 (Blackwell) and blockwise scaling."""

import warnings

import pytest

import gpumodel as gm
from gpumodel.cluster import shard
from gpumodel.vocabulary import FP8Recipe, Framework, fp8_recipe

T, H, I = 4096, 4096, 11008          # Llama-2-7B at 4096 tokens: a = q/3 = h (no GQA), MLP 11008, gated


def _bytes(kernels):
    return sum(o.bytes for o in kernels)


def test_names_aliases_and_refusals():
    meg = Framework.MEGATRON
    assert fp8_recipe(True, meg) == FP8Recipe.DELAYED and fp8_recipe(False, meg) is None
    assert fp8_recipe("fine-grained", meg) == FP8Recipe.BLOCKWISE          # DeepSeek-V3's name
    assert fp8_recipe("Float8CurrentScaling", meg) == FP8Recipe.CURRENT     # Transformer Engine's class
    with pytest.raises(gm.ArgumentError, match="fp8.*'delayed', 'current', 'mxfp8', 'blockwise'"):
        fp8_recipe("e4m3", meg)
    with pytest.raises(gm.ArgumentError, match="framework"):
        fp8_recipe("current", Framework.FSDP)
    with pytest.raises(gm.ArgumentError, match="Blackwell"):
        fp8_recipe("mxfp8", meg, gm.gpu("h100"))
    assert fp8_recipe("mxfp8", meg, gm.gpu("b200")) == FP8Recipe.MXFP8
    with pytest.raises(gm.ArgumentError, match="fp8 tensor cores"):
        fp8_recipe("current", meg, gm.gpu("a100"))


def test_cast_bytes_by_hand():
    cfg = gm.model("llama-2-7b")
    casts, normed, grads = T * (H + I), T * 2 * H, T * (3 * H + 2 * H + 2 * I)
    delayed = shard.fp8_cast_kernels(cfg, T)
    assert _bytes(delayed["forward"]) == 4 * casts + 2 * normed and _bytes(delayed["backward"]) == 4 * grads
    # current: every cast input read once more for its amax (2 B), and the norm's output in 16 bits (1 B more
    # written, 1 B more read by its cast)
    cur = shard.fp8_cast_kernels(cfg, T, "current")
    assert _bytes(cur["forward"]) == 4 * casts + 2 * normed + 2 * (casts + normed) + 2 * normed
    assert _bytes(cur["backward"]) == 4 * grads + 2 * grads
    # mxfp8: both layouts quantised from 16 bits with a scale byte per 32 elements; the norm writes both layouts
    mx = shard.fp8_cast_kernels(cfg, T, "mxfp8")
    assert _bytes(mx["forward"]) == pytest.approx(casts * (2 + 2 + 2 / 32) + normed * (1 + 2 / 32))
    assert _bytes(mx["backward"]) == pytest.approx(grads * (2 + 2 + 2 / 32))
    # blockwise: the normalised inputs cast from 16 bits too (the norm writes 16 bits: 1 B more), 4 B per 128
    block = shard.fp8_cast_kernels(cfg, T, "blockwise")
    assert _bytes(block["forward"]) == pytest.approx((casts + normed) * (4 + 8 / 128) + normed)


def _step(fp8, system="dgx-h100"):
    kw = dict(batch_size=1, seq_len=4096, gradient_accumulation_steps=8, parallelism=gm.Parallelism(dp=8, tp=2),
              framework="megatron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        return gm.training_step_time("llama-2-7b", system, fp8=fp8, **kw)


def test_recipes_order_the_step():
    delayed, default = _step("delayed"), _step(True)
    assert delayed.seconds == default.seconds                       # True is Transformer Engine's default recipe
    current, block = _step("current"), _step("blockwise")
    assert current.seconds > delayed.seconds                        # amax passes
    assert block.breakdown["forward"] > delayed.breakdown["forward"]  # the forward GEMMs promote every 128 of k
    assert _step(False).seconds > max(current.seconds, block.seconds)
    assert _step("mxfp8", "dgx-b200").seconds > 0
    with pytest.raises(gm.ArgumentError, match="mxfp8"):
        _step("mxfp8")


def test_blockwise_forward_takes_the_split_accumulator():
    cfg = shard.shard_config(gm.model("llama-2-7b"))
    kw = dict(micro_batch=1, seq_local=4096, cp=1, precision="amp_bf16", optimizer="adamw", framework="megatron")
    delayed = shard.shard_times(cfg, "h100-sxm", fp8="delayed", **kw)
    block = shard.shard_times(cfg, "h100-sxm", fp8="blockwise", **kw)
    assert shard.FP8_SPLIT_PHASES["blockwise"] == ("forward", "backward")
    assert shard.FP8_SPLIT_PHASES["delayed"] == ("backward",)
    assert block.layer_forward > delayed.layer_forward
    assert shard.shard_times(cfg, "h100-sxm", fp8=True, **kw) == delayed


def test_memory_takes_a_recipe_as_fp8():
    kw = dict(framework="megatron", tp=2, dp=4, zero=1)
    on = gm.training_memory("llama-2-7b", 1, 4096, fp8=True, **kw)
    assert gm.training_memory("llama-2-7b", 1, 4096, fp8="current", **kw).peak_bytes == on.peak_bytes


def test_plan_names_the_recipe():
    plan = gm.plan_training("llama-3-8b", "dgx-h100", tokens="1T", global_batch=256, seq_len=4096, num_gpus=16,
                            fp8=[True, "current"], top=None)
    recipes = {r["fp8"] for r in plan.rows}
    assert recipes == {True, "current"}
    r = next(r for r in plan.rows if r["fp8"] == "current")
    assert "fp8-current" in gm.cluster.planresult.layout_label(r)
