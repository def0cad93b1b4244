"""Memory per GPU under Megatron-Core, FSDP and DeepSpeed, and expert parallelism in memory.

Hand arithmetic (the distributed optimizer's bytes per parameter, ZeRO's stages as Rajbhandari et al. 2020 count
them, Korthikanti et al. 2022's per-layer activations, the 1F1B and interleaved in-flight micro-batches),
properties (more data parallelism never needs more memory per GPU; expert parallelism divides the experts), and
the published layouts of ``bench/framework_memory.py``, which ran, so fit.
"""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gpumodel as gm
from benchscript import load_bench
from gpumodel.core.framework_memory import (DEEPSPEED_REDUCE_BUCKET, deepspeed_static, megatron_layer_bytes,
                                            megatron_moments)
from gpumodel.core.megatron_activations import megatron_saved_tensors, recomputed_tensors
from gpumodel.core.memory_parts import stage_layers, stage_parameters
from gpumodel.vocabulary import Checkpointing, precision

L8 = gm.model("llama-3-8b")
MIXTRAL = gm.model("mixtral-8x7b")
#: GPT-3-like layer of Korthikanti et al. (LayerNorm, 4h GeLU MLP, dropout 0.1, 64 heads)
GPT = gm.TransformerConfig(name="gpt-22b-like", hidden_size=6144, num_layers=48, num_heads=64, intermediate_size=24576,
                           vocab_size=51200, family="gpt2", mlp="plain", activation="gelu", norm="layernorm",
                           position="learned", max_position_embeddings=2048, attn_dropout=0.1, resid_dropout=0.1)


# ------------------------------------------------------------------ bytes per parameter
@pytest.mark.parametrize("dp", [1, 8, 64])
def test_distributed_optimizer_bytes_per_parameter(dp):
    # Megatron --bf16 with the distributed optimizer: bf16 weight 2 + fp32 main grad 4 + (fp32 master 4 + Adam 8) / dp
    n = L8.num_parameters()
    m = gm.training_memory(L8, 1, 1024, dp=dp, zero=1 if dp > 1 else 0, framework="megatron")
    assert m.breakdown["weights"] == pytest.approx(2 * n)
    assert m.breakdown["gradients"] == pytest.approx(4 * n)
    assert m.breakdown["optimizer_states"] == pytest.approx(12 * n / dp)
    assert m.breakdown.get("optimizer_temporaries", 0.0) == 0.0            # fused Adam
    # Megatron-LM's theoretical_memory_usage.py: 6 + 12 / dp bytes per parameter (18 without it)
    static = sum(m.breakdown[k] for k in ("weights", "gradients", "optimizer_states"))
    assert static / n == pytest.approx(6 + 12 / dp)


def test_megatron_fp16_keeps_fp16_gradients_and_casts_them_for_the_step():
    n = L8.num_parameters()
    m = gm.training_memory(L8, 1, 1024, precision="amp_fp16", dp=8, zero=1, framework="megatron")
    assert m.breakdown["gradients"] == pytest.approx(2 * n)                  # 2 + 2 + 12 / dp
    assert m.breakdown["optimizer_states"] == pytest.approx(12 * n / 8)
    fp32 = gm.training_memory(L8, 1, 1024, precision="fp32", framework="megatron")
    assert fp32.breakdown["weights"] == pytest.approx(4 * n) and fp32.breakdown["optimizer_states"] == pytest.approx(8 * n)


@pytest.mark.parametrize("zero, per_param", [(1, 2 + 2 + 12 / 8), (2, 2 + (2 + 12) / 8), (3, (2 + 2 + 12) / 8)])
def test_deepspeed_zero_stages_as_the_zero_paper_counts_them(zero, per_param):
    # Rajbhandari et al. 2020, Figure 1: 2 + 2 + K bytes per parameter (K = 12 for mixed-precision Adam), the
    # optimizer states, then the gradients, then the weights divided over N_d = 8 ranks; gradients held (accumulation)
    n = L8.num_parameters()
    m = gm.training_memory(L8, 1, 1024, dp=8, zero=zero, framework="deepspeed", gradient_accumulation_steps=2)
    static = sum(m.breakdown[k] for k in ("weights", "gradients", "optimizer_states"))
    assert static / n == pytest.approx(per_param)


def test_deepspeed_buckets_are_its_config_defaults():
    n = L8.num_parameters()
    moments = gm.training_memory(L8, 1, 1024, dp=8, zero=2, framework="deepspeed").moments
    without = gm.training_memory(L8, 1, 1024, dp=8, zero=2, framework="deepspeed", gradient_accumulation_steps=1)
    assert moments == without.moments
    assert 2 * DEEPSPEED_REDUCE_BUCKET < 2 * n                     # a 5e8-element bf16 bucket: 1 GB
    m = gm.training_memory(L8, 1, 64, dp=8, zero=1, framework="deepspeed")
    # the optimizer step: the allgather bucket (5e8 elements) and the fp32 gradient partition (4 / N_d bytes each)
    step = m.moments["optimizer_step"]
    assert step == pytest.approx((2 + 2 + 12 / 8 + 4 / 8) * n + 2 * 5e8 + gm.core.memory.CUBLAS_WORKSPACE_BYTES)


def test_deepspeed_zero3_gathers_a_module_at_a_time():
    # DeepSpeed fetches each sub-module's own parameters (a linear layer), not a decoder layer: Llama-3-8B's largest
    # module is an MLP projection, 4096 x 14336 = 58.7M, plus the 5e7-element prefetch bucket, in bf16
    n, layer = L8.num_parameters(), L8.layer_parameters()
    static, _ = deepspeed_static(L8, precision("amp_bf16"), "adamw", (n, 0.0, layer), zero=3, group=8, ep=1, tp=1,
                                 micro_batches=2)
    module = 4096 * 14336
    assert static["layer_backward"]["gathered_weights"] == pytest.approx(2 * (module + 5e7))
    assert static["layer_backward"]["gathered_weights"] < 2 * layer             # less than FSDP's unit of a layer
    # forward to backward: the LM head (128256 x 4096) and the 5e8 elements before it (reused within the 1e9-element
    # distance) stay gathered, with the module whose backward runs
    assert static["backward_start"]["gathered_weights"] == pytest.approx(2 * (128256 * 4096 + 5e8 + module))
    # a model smaller than that stays gathered whole through the turn
    tiny_n = 2e8
    small, _ = deepspeed_static(L8, precision("amp_bf16"), "adamw", (tiny_n, 0.0, layer), zero=3, group=8, ep=1,
                                tp=1, micro_batches=2)
    assert small["backward_start"]["gathered_weights"] == pytest.approx(2 * tiny_n)


def test_fsdp_full_shard_holds_sixteen_bytes_over_the_group_and_two_gathered_layers():
    n, h = L8.num_parameters(), L8.hidden_size
    m = gm.training_memory(L8, 1, 1024, dp=8, zero=3, framework="fsdp", gradient_accumulation_steps=2)
    assert m.breakdown["weights"] == pytest.approx(4 * n / 8)       # fp32 sharded parameters
    assert m.breakdown["gradients"] == pytest.approx(4 * n / 8)     # fp32 sharded gradients
    assert m.breakdown["optimizer_states"] == pytest.approx(8 * n / 8)
    assert m.breakdown["autocast_weight_copies"] == 0.0             # the policy's bf16 all-gather is the cast
    layer, root = L8.layer_parameters(), L8.embedding_parameters()
    assert m.peak_moment == "backward_start"
    assert m.breakdown["gathered_weights"] == pytest.approx(2 * 2 * layer + 2 * root)
    assert h > 0


def test_hsdp_shards_over_its_group_only():
    hsdp = gm.training_memory(L8, 1, 1024, dp=64, zero=3, framework="fsdp", shard_group=8)
    fsdp8 = gm.training_memory(L8, 1, 1024, dp=8, zero=3, framework="fsdp")
    assert hsdp.peak_bytes == pytest.approx(fsdp8.peak_bytes)
    with pytest.raises(gm.ArgumentError, match="shard_group"):
        gm.training_memory(L8, 1, 1024, dp=64, zero=3, framework="fsdp", shard_group=3)
    with pytest.raises(gm.ArgumentError, match="shard_group"):
        gm.training_memory(L8, 1, 1024, dp=64, zero=1, framework="deepspeed", shard_group=8)


def test_fsdp_without_sharding_is_ddp_with_its_gradient_buckets():
    hf = gm.training_memory(L8, 1, 1024, dp=8, zero=1)
    ddp = gm.training_memory(L8, 1, 1024, dp=8, zero=1, framework="fsdp")
    assert ddp.peak_bytes == pytest.approx(hf.peak_bytes + 4 * L8.num_parameters())   # fp32 bucket copies


# ------------------------------------------------------------------ activations (Korthikanti et al. 2022)
S, B, H, A = 2048, 1, 6144, 64


@pytest.mark.parametrize("t", [1, 2, 8])
def test_korthikanti_per_layer_activations(t):
    sbh = S * B * H
    scores = 5 * A * S * S * B                                    # 5 a s^2 b: softmax, its dropout mask and output
    kw = dict(tp=t, scores=True)
    # tensor parallelism alone: s b h (10 + 24 / t + 5 a s / (h t))
    assert float(megatron_layer_bytes(GPT, S, S, **kw)) == pytest.approx(sbh * (10 + 24 / t) + scores / t)
    # with sequence parallelism: s b h (34 + 5 a s / h) / t
    assert float(megatron_layer_bytes(GPT, S, S, sequence_parallel=t > 1, **kw)) == pytest.approx(
        (34 * sbh + scores) / t if t > 1 else 34 * sbh + scores)
    # selective recomputation drops the 5 a s / h term; full keeps the layer's input, 2 s b h / t
    sel = megatron_layer_bytes(GPT, S, S, sequence_parallel=t > 1, checkpointing=Checkpointing.SELECTIVE, **kw)
    assert float(sel) == pytest.approx(34 * sbh / t)
    full = megatron_layer_bytes(GPT, S, S, sequence_parallel=t > 1, checkpointing=Checkpointing.FULL, **kw)
    assert float(full) == pytest.approx(2 * sbh / t)


def test_flash_attention_keeps_no_scores_and_gated_mlps_keep_three_widths():
    # llama: no dropout; q, k, v, output 2 (q + 2 kv + q); SwiGLU 2 (2 I + I); norms and projection inputs 8 h
    h, q, kv, i, heads = L8.hidden_size, L8.q_dim, L8.kv_dim, L8.intermediate_size, L8.num_heads
    per_token = 8 * h + 2 * (2 * q + 2 * kv) + 4 * heads + 6 * i
    assert float(megatron_layer_bytes(L8, 4096, 4096)) == pytest.approx(4096 * per_token)
    # selective (core_attn) with a flash kernel: only the kernel's fp32 log-sum-exp goes, 4 bytes a head and token
    sel = megatron_layer_bytes(L8, 4096, 4096, checkpointing=Checkpointing.SELECTIVE)
    assert float(megatron_layer_bytes(L8, 4096, 4096) - sel) == 4096 * 4 * heads


def test_moe_activations_follow_the_routing_not_the_expert_count():
    # per routed copy: the expert's input (2 h, bf16) and fp32 routing probability (4), the expert's SwiGLU (6 I_e);
    # no expert output: Megatron-Core 0.13+ weights by the probabilities in the activation, not in the unpermutation
    h, k, e, i = MIXTRAL.hidden_size, MIXTRAL.experts_per_token, MIXTRAL.num_experts, MIXTRAL.expert_size
    dense = megatron_layer_bytes(MIXTRAL, 1, 4096, moe=False)
    moe = megatron_layer_bytes(MIXTRAL, 1, 4096, moe=True)
    assert float(moe - dense) == pytest.approx(9 * e + k * (2 * h + 4) + (k - 1) * 6 * i)


def _megatron(cfg, **kw):
    args = dict(micro_batches=8, dp=1, tp=1, pp=4, cp=1, ep=1, zero=0, sequence_parallel=False, virtual_stages=1,
                cublas_workspace_bytes=0.0)
    args.update(kw)
    return megatron_moments(cfg, 1, 4096, precision("amp_bf16"), "adamw", Checkpointing.NONE, False, **args)[0]


def test_one_f_one_b_holds_pp_micro_batches_on_the_first_stage():
    layer = float(megatron_layer_bytes(L8, 4096, 4096))
    per_stage = 32 / 4
    first = _megatron(L8)["layer_backward@first"]["activations"]
    assert float(first) == pytest.approx(4 * (per_stage * layer + 8 * 4096))   # 4 in flight; token ids
    middle = _megatron(L8)["layer_backward@middle"]["activations"]
    assert float(middle) == pytest.approx(3 * per_stage * layer)               # stage 1 of 4: 3 in flight
    few = _megatron(L8, micro_batches=2)["layer_backward@first"]["activations"]
    assert float(few) == pytest.approx(2 * (per_stage * layer + 8 * 4096))     # fewer micro-batches than stages


def test_interleaved_schedule_factor():
    # Korthikanti et al. section 4.2.3: the first stage of the interleaved schedule holds 1 + (p - 1) / (p v) times
    # the activations of plain 1F1B
    plain = float(_megatron(L8, micro_batches=16)["layer_backward@first"]["activations"])
    inter = float(_megatron(L8, micro_batches=16, virtual_stages=2)["layer_backward@first"]["activations"])
    assert inter / plain == pytest.approx(1 + 3 / (4 * 2))
    # as many micro-batches as stages: Megatron-Core runs them all forward first, on every stage
    last = float(_megatron(L8, micro_batches=4, virtual_stages=2)["layer_backward@last"]["activations"])
    assert last > 4 * 8 * float(megatron_layer_bytes(L8, 4096, 4096))


def test_dualpipe_holds_two_stages_and_pp_plus_one_micro_batches():
    """DeepSeek-AI 2024 (DeepSeek-V3 report), section 3.2.1 and Table 2: DualPipe keeps two copies of the parameters
    (GPU i holds stages i and pp - 1 - i) and pp + 1 micro-batches of activations: pp - i of its own stage, i + 1 of
    the other (DualPipe.step's warm-up). Here pp = 4, 8 layers a stage, 8 micro-batches, 4 from each end."""
    layer = float(megatron_layer_bytes(L8, 4096, 4096))
    stage = 32 / 4 * layer
    one, dual = _megatron(L8), _megatron(L8, pipeline_schedule="dualpipe")
    middle = dual["layer_backward@middle"]
    assert float(middle["activations"]) == pytest.approx((3 + 2) * stage)       # stages 1 and 2: 3 + 2 in flight
    assert float(one["layer_backward@middle"]["activations"]) == pytest.approx(3 * stage)
    # the first GPU holds stage 0 (4 micro-batches, token ids) and stage 3 (1, with the head's inputs and labels)
    head = 4096 * (2 * 2 * L8.hidden_size + 12)
    assert float(dual["layer_backward@first"]["activations"]) == pytest.approx(4 * (stage + 8 * 4096) + stage + head)
    assert dual["layer_backward@last"]["activations"] == pytest.approx(dual["layer_backward@first"]["activations"])
    for k in ("weights", "gradients", "optimizer_states"):
        assert float(middle[k]) == pytest.approx(2 * float(one["layer_backward@middle"][k]))
        assert float(dual["layer_backward@first"][k]) == pytest.approx(
            float(one["layer_backward@first"][k]) + float(one["layer_backward@last"][k]))


def test_zero_bubble_holds_what_1f1b_holds():
    # Qi et al. 2024, section 2.1: ZB-H1 delays the weight gradients within 1F1B's peak memory
    par = gm.Parallelism(dp=8, tp=8, pp=2, zero=1, sequence_parallel=True)
    kw = dict(gradient_accumulation_steps=16, parallelism=par, framework="megatron")
    one = gm.training_memory("llama-3-70b", 1, 4096, **kw)
    zb = gm.training_memory("llama-3-70b", 1, 4096, pipeline_schedule="zero_bubble", **kw)
    dual = gm.training_memory("llama-3-70b", 1, 4096, pipeline_schedule="dualpipe", **kw)
    assert zb.peak_bytes == one.peak_bytes and zb.breakdown == one.breakdown
    assert dual.breakdown["weights"] == pytest.approx(2 * one.breakdown["weights"])   # pp = 2: the whole model
    assert dual.inputs["pipeline_schedule"] == "dualpipe" and "pipeline_schedule" not in one.inputs


@pytest.mark.parametrize("kw, words", [
    (dict(pp=3, gradient_accumulation_steps=6), "even pp"),
    (dict(pp=2, gradient_accumulation_steps=3), "even number of at least 2 pp"),
    (dict(pp=4, gradient_accumulation_steps=4), "even number of at least 2 pp"),
    (dict(pp=2, virtual_stages=2, gradient_accumulation_steps=8), "virtual_stages=1"),
    (dict(pp=2, gradient_accumulation_steps=8, framework="fsdp", zero=0), "framework='megatron' only"),
    (dict(pipeline_schedule="gpipe"), "is not one of"),
])
def test_a_schedule_the_layout_cannot_run_is_refused(kw, words):
    args = dict(pipeline_schedule="dualpipe", dp=2, framework="megatron")
    args.update(kw)
    with pytest.raises(gm.ArgumentError, match=words) as info:
        gm.training_memory("llama-3-8b", 1, 4096, **args)
    assert info.value.argument == "pipeline_schedule"


def test_vocabulary_parallel_cross_entropy_keeps_no_fp32_copies():
    moments = _megatron(L8, tp=8, pp=2)
    T, V = 4096, L8.vocab_size
    assert float(moments["backward_start@last"]["logits_and_loss"]) == pytest.approx(2 * 2 * T * V / 8)
    assert float(moments["backward_start@first"]["logits_and_loss"]) == 0.0
    # Hugging Face at the start of its backward: the fp32 log_softmax output (4), its gradient and its input's (8)
    hf = gm.training_memory(L8, 1, 4096, tp=8, pp=2, gradient_accumulation_steps=8, sequence_parallel=True)
    assert hf.peak_moment == "backward_start"
    assert hf.breakdown["logits_and_loss"] == pytest.approx(3 * float(moments["backward_start@last"]["logits_and_loss"]))


def test_uneven_stages_and_the_embedding_and_head():
    assert [int(x) for x in stage_layers(126, 16, 7, 7)] == [7, 8, 7]
    assert [int(x) for x in stage_layers(126, 16)] == [8, 8, 8]
    with pytest.raises(gm.ArgumentError, match="first_stage_layers"):
        stage_layers(126, 16, 70, 70)
    cfg = gm.model("llama-3-405b")
    first = stage_parameters(cfg, 7, 8, embedding=True, head=False)
    middle = stage_parameters(cfg, 8, 8, embedding=False, head=False)
    assert sum(first) == pytest.approx((7 * cfg.layer_parameters() + cfg.vocab_size * cfg.hidden_size) / 8)
    assert sum(middle) == pytest.approx(8 * cfg.layer_parameters() / 8)
    par = gm.Parallelism(dp=128, tp=8, pp=16, zero=1, sequence_parallel=True)
    even = gm.training_memory(cfg, 1, 8192, gradient_accumulation_steps=16, parallelism=par, framework="megatron")
    uneven = gm.training_memory(cfg, 1, 8192, gradient_accumulation_steps=16, parallelism=par, framework="megatron",
                                first_stage_layers=7, last_stage_layers=7)
    assert uneven.peak_stage == "middle" and uneven.peak_bytes <= even.peak_bytes


# ------------------------------------------------------------------ expert parallelism
@pytest.mark.parametrize("framework", ["hf", "megatron", "fsdp", "deepspeed"])
def test_expert_parallelism_divides_the_experts(framework):
    e = MIXTRAL.expert_parameters() * MIXTRAL.num_layers
    zero = 3 if framework == "fsdp" else 1
    one = gm.training_memory(MIXTRAL, 1, 1024, dp=8, zero=zero, framework=framework, gradient_accumulation_steps=2)
    eight = gm.training_memory(MIXTRAL, 1, 1024, dp=8, ep=8, zero=zero, framework=framework,
                               gradient_accumulation_steps=2)
    if framework in ("megatron", "deepspeed"):   # 16-bit weights on every rank: the experts' 7/8 leave
        assert one.breakdown["weights"] - eight.breakdown["weights"] == pytest.approx(2 * e * 7 / 8)
    assert eight.peak_bytes < one.peak_bytes


def test_expert_states_shard_over_the_expert_data_parallel_ranks():
    # ep = dp = 8: each expert lives on one rank, its master weights and moments unsharded; the rest over 8 ranks
    shared, experts = stage_parameters(MIXTRAL, 32, 1, 8)
    m = gm.training_memory(MIXTRAL, 1, 1024, dp=8, ep=8, zero=1, framework="megatron")
    assert m.breakdown["optimizer_states"] == pytest.approx(12 * (shared / 8 + experts / 1))
    assert float(experts) == pytest.approx(MIXTRAL.expert_parameters() * 32 / 8)


def test_expert_parallel_degree_is_checked():
    with pytest.raises(gm.ArgumentError, match="ep"):
        gm.training_memory(MIXTRAL, 1, 1024, dp=12, ep=3, framework="megatron")      # 3 does not divide 8 experts
    with pytest.raises(gm.ArgumentError, match="ep"):
        gm.training_memory(MIXTRAL, 1, 1024, dp=2, ep=4, framework="megatron")       # nor is it within dp x cp
    with pytest.raises(gm.ArgumentError, match="ep"):
        gm.training_memory(L8, 1, 1024, dp=2, ep=2)                                  # a dense model


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.sampled_from([1, 2, 4, 8]), st.sampled_from(["megatron", "fsdp"]),
       st.sampled_from([1, 2, 4]), st.sampled_from([1024, 4096]))
def test_more_data_parallelism_never_needs_more_memory(dp, ep, framework, pp, seq):
    # a property of the sharded engines: doubling the data-parallel ranks never raises memory per GPU
    zero = 1 if framework == "megatron" else 3
    kw = dict(ep=ep, pp=pp, zero=zero, framework=framework, gradient_accumulation_steps=8)
    small = gm.training_memory(MIXTRAL, 1, seq, dp=max(dp, ep), **kw)
    big = gm.training_memory(MIXTRAL, 1, seq, dp=2 * max(dp, ep), **kw)
    assert big.peak_bytes <= small.peak_bytes * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]))
def test_more_expert_parallelism_never_needs_more_memory(ep):
    kw = dict(dp=16, zero=1, framework="megatron", pp=2, gradient_accumulation_steps=4)
    assert gm.training_memory(MIXTRAL, 1, 2048, ep=ep, **kw).peak_bytes >= \
        gm.training_memory(MIXTRAL, 1, 2048, ep=min(2 * ep, 8), **kw).peak_bytes


# ------------------------------------------------------------------ arguments
def test_a_layout_gives_the_degrees():
    par = gm.Parallelism(dp=4, tp=2, pp=2, cp=2, ep=1, zero=1, sequence_parallel=True, virtual_stages=2)
    a = gm.training_memory(L8, 1, 8192, parallelism=par, framework="megatron", gradient_accumulation_steps=8)
    b = gm.training_memory(L8, 1, 8192, dp=4, tp=2, pp=2, cp=2, zero=1, sequence_parallel=True, virtual_stages=2,
                           framework="megatron", gradient_accumulation_steps=8)
    assert a.peak_bytes == b.peak_bytes and a.inputs["cp"] == 2
    with pytest.raises(gm.ArgumentError, match="not both"):
        gm.training_memory(L8, 1, 8192, parallelism=par, dp=4)
    with pytest.raises(gm.ArgumentError, match="parallelism"):
        gm.training_memory(L8, 1, 8192, parallelism=(4, 2))
    with pytest.raises(gm.ArgumentError, match="framework"):
        gm.training_memory(L8, 1, 1024, framework="jax")
    with pytest.raises(gm.ArgumentError, match="keep_outputs"):
        gm.training_memory(L8, 1, 1024, framework="megatron", keep_outputs=True)
    with pytest.raises(gm.ArgumentError, match="optimizer_dtype"):
        gm.training_memory(L8, 1, 1024, framework="deepspeed", optimizer_dtype="bf16")


def test_megatron_precision_aware_optimizer_keeps_lower_precision_moments():
    # Megatron-Core's --use-precision-aware-optimizer with --exp-avg-dtype/--exp-avg-sq-dtype bf16: the two Adam
    # moments at 2 bytes, the fp32 master weights kept; over the distributed optimizer's 8 ranks
    n = L8.num_parameters()
    fp32 = gm.training_memory(L8, 1, 1024, dp=8, zero=1, framework="megatron")
    bf16 = gm.training_memory(L8, 1, 1024, dp=8, zero=1, framework="megatron", optimizer_dtype="bf16")
    assert fp32.breakdown["optimizer_states"] == pytest.approx((4 + 2 * 4) * n / 8)
    assert bf16.breakdown["optimizer_states"] == pytest.approx((4 + 2 * 2) * n / 8)
    assert bf16.breakdown["gradients"] == fp32.breakdown["gradients"]      # the gradient buffer is not the states'
    with pytest.raises(gm.ArgumentError, match="optimizer_dtype"):
        gm.training_memory(L8, 1, 1024, framework="megatron", optimizer="sgd", optimizer_dtype="bf16")


def test_context_parallelism_splits_the_tokens():
    one = gm.training_memory(L8, 1, 8192, dp=8, zero=1, framework="megatron")
    cp = gm.training_memory(L8, 1, 8192, dp=2, cp=4, zero=1, framework="megatron")
    assert cp.breakdown["activations"] == pytest.approx(one.breakdown["activations"] / 4, rel=0.01)
    assert cp.breakdown["optimizer_states"] == pytest.approx(one.breakdown["optimizer_states"])   # over dp x cp


def test_arrays_broadcast():
    dp = np.array([2, 4, 8, 16])
    m = gm.training_memory(L8, 1, 4096, dp=dp, zero=1, pp=2, gradient_accumulation_steps=8, framework="megatron")
    scalar = [gm.training_memory(L8, 1, 4096, dp=int(d), zero=1, pp=2, gradient_accumulation_steps=8,
                                 framework="megatron").peak_bytes for d in dp]
    assert np.allclose(m.peak_bytes, scalar) and m.peak_stage.shape == (4,)


def test_the_step_reports_the_frameworks_memory():
    par = gm.Parallelism(dp=4, tp=8, pp=2, zero=1, sequence_parallel=True)
    kw = dict(checkpointing="selective", gradient_accumulation_steps=8)
    for framework in ("megatron", "deepspeed"):
        st_ = gm.training_step_time("llama-3-70b", "dgx-h100", 1, 4096, parallelism=par, framework=framework, **kw)
        mem = gm.training_memory("llama-3-70b", 1, 4096, parallelism=par, framework=framework, attention="flash", **kw)
        assert st_.peak_bytes == pytest.approx(mem.peak_bytes) and st_.fits


# ------------------------------------------------------------------ published layouts
@pytest.fixture(scope="module")
def bench():
    return load_bench("framework_memory")


def test_published_layouts_fit_under_megatron(bench):
    # every bf16/fp16 Megatron layout of the table, and Megatron-Core's Mixtral mappings; the FP8 runs (fp8 weights,
    # bf16 gradient reduction: not modelled), Llama 3 and DeepSeek-V3 are checked below
    rows = [r for r in bench.load_rows() + bench.moe_layouts()
            if r["source"] not in ("llama3-405b", "deepseek-v3") and not r.get("fp8")
            and (r.get("framework") or "megatron") == "megatron"]
    assert len(rows) >= 30 and {"mcore-moe-readme", "megatron-sc21", "megascale-megatron"} <= {r["source"] for r in rows}
    for r in bench.table(rows):
        assert r["fits"]["megatron"], (r["source"], r["label"], r["total_bytes"]["megatron"] / 2**30)


def test_llama3_fits_with_its_gradients_sharded(bench):
    # Dubey et al. 2024, section 3.3.2: the data-parallel ranks shard optimizer states and gradients (ZeRO-2, here
    # Megatron-FSDP's optim_grads), no activation recomputation at 8K. With Megatron-Core's full fp32 gradient buffer
    # (ZeRO-1) the same layout needs about 12 GiB more.
    row = next(r for r in bench.load_rows() if r["source"] == "llama3-405b" and r["label"] == "16384 GPUs")
    cfg, gpu = bench.model_of(row), gm.gpu("h100")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zero1 = bench.memory(row, cfg, "megatron")
        zero2 = bench.memory(dict(row, zero=2), cfg, "megatron")
    assert zero1.breakdown["gradients"] - zero2.breakdown["gradients"] > 11 * 2**30
    assert zero2.peak_bytes + gm.core.memory.CUDA_CONTEXT_BYTES < gpu.usable_memory_bytes
    assert zero2.peak_stage == "middle"


def test_deepseek_v3_fits_with_recomputation(bench):
    # with full recomputation of each layer the layout fits with room to spare
    row = next(r for r in bench.load_rows() if r["source"] == "deepseek-v3")
    cfg = bench.model_of(row)
    assert round(cfg.num_parameters() / 1e9) == 671 and round(cfg.active_parameters() / 1e9) == 38
    m = bench.memory(dict(row, checkpointing="full", schedule=""), cfg, "megatron")
    assert m.total_bytes < 0.5 * gm.gpu("h800").usable_memory_bytes
    dual = bench.memory(dict(row, checkpointing="full"), cfg, "megatron")   # DualPipe: two stages' weights a GPU
    assert m.total_bytes < dual.total_bytes < gm.gpu("h800").usable_memory_bytes


def test_deepseek_v3_published_recomputation(bench):
    """DeepSeek-V3 recomputes RMSNorm, the MLA up-projections (report section 3.2.3) and the MoE's SwiGLU (section
    3.3.3): Megatron-Core's layernorm, mla_up_proj and moe_act. They take the Megatron-Core model from 120 GiB a GPU
    to 77; the allocated peak (71 GiB, the first stage: the embedding and 4 layers, 3 of them dense, whose
    18432-wide MLP none of the three recomputes) fits an H800, not with the allocator's reserve on top."""
    row = next(r for r in bench.load_rows() if r["source"] == "deepseek-v3")
    assert row["checkpointing"] == "selective" and row["recompute_modules"] == "layernorm+mla_up_proj+moe_act"
    cfg, usable = bench.model_of(row), gm.gpu("h800").usable_memory_bytes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = bench.memory(dict(row, checkpointing="none", recompute_modules="", schedule=""), cfg, "megatron")
        sel = bench.memory(dict(row, schedule=""), cfg, "megatron")
        dual = bench.memory(row, cfg, "megatron")
    assert plain.total_bytes > 1.5 * usable and plain.peak_stage == "middle"
    assert sel.total_bytes < 0.7 * plain.total_bytes
    assert sel.peak_stage == "first" and sel.peak_bytes + gm.core.memory.CUDA_CONTEXT_BYTES < usable < sel.total_bytes
    # as published, under DualPipe (two stages a GPU, pp + 1 micro-batches in flight): above the card, which the run
    # was not; DeepSeek's own savings (fp8 and E5M6 activation caches, bf16 moments) are not Megatron-Core's
    assert row["schedule"] == "dualpipe" and dual.total_bytes > sel.total_bytes + 10 * 2**30


# ------------------------------------------------------------------ selective recomputation by module
#: DeepSeek-V3's shape (MLA, 256 routed experts of 2048, a shared expert, 3 dense layers)
V3 = gm.TransformerConfig(name="v3-like", num_layers=61, hidden_size=7168, num_heads=128, num_kv_heads=128,
                          head_dim=192, v_head_dim=128, q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64,
                          intermediate_size=18432, vocab_size=129280, num_experts=256, experts_per_token=8,
                          moe_intermediate_size=2048, shared_expert_intermediate_size=2048, first_dense_layers=3)
MODULES = ["core_attn", "layernorm", "mla_up_proj", "mlp", "moe", "moe_act", "shared_experts"]


def _sel(cfg, modules, **kw):
    return float(megatron_layer_bytes(cfg, 1, 4096, checkpointing=Checkpointing.SELECTIVE, recompute_modules=modules,
                                      **kw))


def test_deepseek_v3_recompute_modules_drop_their_tensors_per_token():
    """DeepSeek-V3's MoE layer with fp8 GEMM inputs (g = 1 byte, c = 2), per token (h 7168, 128 heads of 192 for q
    and k and 128 for v, latents 1536 and 512, 8 experts of 2048)."""
    none = float(megatron_layer_bytes(V3, 1, 4096, fp8=True))
    h, n = 7168, 128
    # layernorm: both norms are unfused here: MLA's input norm (each down-projection's fp8 copy, 2 g h) and the
    # pre-MLP norm (the router's 16-bit input c h, the shared expert's fp8 copy g h)
    assert none - _sel(V3, ["layernorm"], fp8=True) == 2 * h + 2 * h + h
    # mla_up_proj: q, k, v (c n (2 x 192 + 128)) and the up-projections' fp8 inputs (1536 + 512)
    assert none - _sel(V3, ["mla_up_proj"], fp8=True) == 2 * n * (2 * 192 + 128) + (1536 + 512)
    # moe_act: each routed copy's activation output, fc2's fp8 input (k g I_e)
    assert none - _sel(V3, ["moe_act"], fp8=True) == 8 * 2048
    # core_attn with flash attention under fp8: the kernel's log-sum-exp (4 n) and its 16-bit output (c n d_v)
    assert none - _sel(V3, ["core_attn"], fp8=True) == 4 * n + 2 * n * 128
    # the report's three together: 393.9 KiB -> 212.9 KiB a token
    assert none - _sel(V3, ["layernorm", "mla_up_proj", "moe_act"], fp8=True) == 5 * h + 133120 + 16384
    # moe keeps its 16-bit input (the router's, c h) and the norms' and attention's tensors
    moe = _sel(V3, ["moe"], fp8=True)
    t = megatron_saved_tensors(V3, fp8=True)
    assert moe == pytest.approx(none - sum(t[k] for k in ("router", "expert_inputs", "expert_activation_input",
                                                            "expert_activation_output", "shared_expert_input",
                                                            "shared_expert_activation")))


def test_recompute_modules_follow_megatrons_fused_norms_and_layer_kinds():
    # llama: both norms fused into the next linear (no layernorm recompute); mlp drops the fc1 input (2 h) and the
    # SwiGLU's input and output (2 x 2 I + 2 I); moe, moe_act and shared_experts have nothing to act on
    i = L8.intermediate_size
    assert _sel(L8, ["layernorm", "moe", "moe_act", "shared_experts"]) == _sel(L8, [])
    assert _sel(L8, []) - _sel(L8, ["mlp"]) == 2 * 4096 + 6 * i
    # mlp leaves a mixture-of-experts layer alone, moe a dense one
    assert _sel(V3, ["mlp"], moe=True) == _sel(V3, [], moe=True)
    assert _sel(V3, ["moe"], moe=False) == _sel(V3, [], moe=False)
    assert sorted(recomputed_tensors(V3, ["shared_experts"])) == ["shared_expert_activation", "shared_expert_input"]


@settings(max_examples=40, deadline=None)
@given(st.sets(st.sampled_from(MODULES)), st.sets(st.sampled_from(MODULES)), st.booleans(),
       st.sampled_from(["v3", "mixtral", "llama"]))
def test_more_recomputed_modules_never_need_more_memory(some, more, fp8, name):
    cfg = {"v3": V3, "mixtral": MIXTRAL, "llama": L8}[name]
    some = some - {"mla_up_proj"} if not cfg.is_mla else some
    more = (some | more) - ({"mla_up_proj"} if not cfg.is_mla else set())
    assert _sel(cfg, sorted(more), fp8=fp8) <= _sel(cfg, sorted(some), fp8=fp8)
    par = gm.Parallelism(dp=8, pp=2, ep=8 if cfg.is_moe else 1, zero=1)
    kw = dict(checkpointing="selective", gradient_accumulation_steps=4, parallelism=par, framework="megatron", fp8=fp8)
    cfg1 = cfg.model_copy(update=dict(num_layers=8, first_dense_layers=min(cfg.first_dense_layers, 2)))
    a = gm.training_memory(cfg1, 1, 2048, recompute_modules=sorted(some), **kw)
    b = gm.training_memory(cfg1, 1, 2048, recompute_modules=sorted(more), **kw)
    assert b.peak_bytes <= a.peak_bytes


def test_recompute_modules_are_megatrons_selective_option():
    kw = dict(batch_size=1, seq_len=4096, framework="megatron", dp=8, zero=1, checkpointing="selective")
    default = gm.training_memory(L8, **kw)
    assert gm.training_memory(L8, recompute_modules=["core_attn"], **kw).peak_bytes == default.peak_bytes
    assert gm.training_memory(L8, recompute_modules="core_attn,mlp", **kw).peak_bytes < default.peak_bytes
    with pytest.raises(gm.ArgumentError, match="recompute_modules") as err:
        gm.training_memory(L8, recompute_modules=["norm"], **kw)
    assert "'layernorm'" in err.value.allowed and err.value.argument == "recompute_modules"
    with pytest.raises(gm.ArgumentError, match="checkpointing='selective'"):
        gm.training_memory(L8, 1, 4096, framework="megatron", checkpointing="full", recompute_modules=["mlp"])
    with pytest.raises(gm.ArgumentError, match="framework='megatron'"):
        gm.training_memory(L8, 1, 4096, checkpointing="selective", recompute_modules=["mlp"])
    with pytest.raises(gm.ArgumentError, match="mla_up_proj"):
        gm.training_memory(L8, recompute_modules=["mla_up_proj"], **kw)


# ------------------------------------------------------------------ fp8, gradient format, Megatron's buffers
def test_fp8_keeps_gemm_inputs_in_one_byte():
    """Transformer Engine keeps the four GEMM inputs of a layer in fp8: the two norm outputs (h each), the attention
    output (q_dim) and the activation's output (i), one byte instead of two (Llama-3-8B: h 4096, q_dim 4096,
    i 14336); the flash kernel keeps its 16-bit output besides, which the bf16 run shares with the projection."""
    t = 4096
    bf16 = megatron_layer_bytes(L8, t, t, 2)
    fp8 = megatron_layer_bytes(L8, t, t, 2, fp8=True)
    # the norms' outputs 2 -> 1 byte each (2 h), the attention output 2 -> 2 + 1 (- q), the activation's 2 -> 1 (i)
    assert float(bf16 - fp8) == t * (2 * 4096 - 4096 + 14336)


def test_fp8_adds_an_fp8_weight_and_its_transpose_per_decoder_parameter():
    par = gm.Parallelism(dp=8, tp=2, pp=2, zero=1, sequence_parallel=True)
    kw = dict(batch_size=1, seq_len=4096, gradient_accumulation_steps=8, parallelism=par, framework="megatron")
    plain, fp8 = gm.training_memory(L8, **kw), gm.training_memory(L8, fp8=True, **kw)
    layers = stage_layers(32, 2)[0]          # 16 a stage
    decoder = sum(stage_parameters(L8, layers, 2, 1, embedding=False, head=False, dense_layers=layers))
    assert fp8.breakdown["fp8_weights"] == pytest.approx(2 * decoder)
    assert "fp8_weights" not in plain.breakdown or plain.breakdown["fp8_weights"] == 0
    assert fp8.breakdown["activations"] < plain.breakdown["activations"]
    with pytest.raises(gm.ArgumentError, match="fp8"):
        gm.training_memory(L8, 1, 4096, framework="fsdp", zero=3, dp=8, fp8=True)


def test_bf16_gradient_buffer_halves_megatrons_gradients():
    par = gm.Parallelism(dp=8, tp=2, zero=1, sequence_parallel=True)
    kw = dict(batch_size=1, seq_len=4096, gradient_accumulation_steps=8, parallelism=par, framework="megatron")
    fp32, bf16 = gm.training_memory(L8, **kw), gm.training_memory(L8, grad_reduce_dtype="bf16", **kw)
    assert bf16.breakdown["gradients"] == pytest.approx(fp32.breakdown["gradients"] / 2)   # 4 -> 2 bytes
    assert gm.training_memory(L8, grad_reduce_dtype="fp32", **kw).breakdown["gradients"] == fp32.breakdown["gradients"]
    with pytest.raises(gm.ArgumentError, match="grad_reduce_dtype"):
        gm.training_memory(L8, 1, 4096, framework="hf", grad_reduce_dtype="bf16")
    with pytest.raises(gm.ArgumentError, match="grad_reduce_dtype"):
        gm.training_memory(L8, grad_reduce_dtype="int8", **kw)


def test_megatron_buffers_take_no_allocator_reserve():
    """Megatron-Core's parameter and gradient buffers and the optimizer's shards are allocated once: the
    allocator's reserve applies to the rest (reserved = buffers + (peak - buffers) x factor)."""
    par = gm.Parallelism(dp=8, tp=2, pp=2, zero=1, sequence_parallel=True)
    m = gm.training_memory(L8, 1, 4096, gradient_accumulation_steps=8, parallelism=par, framework="megatron",
                           reserve_factor=1.25)
    b = m.breakdown
    kept = b["weights"] + b["gradients"] + b["optimizer_states"] + b["cublas_workspace"]
    assert m.reserved_bytes == pytest.approx(kept + (m.peak_bytes - kept) * 1.25)
    hf = gm.training_memory(L8, 1, 4096, framework="hf", reserve_factor=1.25)
    assert hf.reserved_bytes == pytest.approx(1.25 * hf.peak_bytes)
