"""The step of a parallel layout: dispatch, breakdown, communication and bubble arithmetic, fit."""

import warnings

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.cluster.collectives import system_collective_time
from gpumodel.cluster.step import PHASES, parallel_training_step_time

CFG = gm.model("llama-3.2-1b")


def step(par, system="dgx-h100", **kw):
    args = dict(batch_size=2, seq_len=2048, gradient_accumulation_steps=4, parallelism=par, framework="megatron")
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        return gm.training_step_time(CFG, system, **args)


def test_dispatch_and_breakdown_keys():
    st = step(gm.Parallelism(dp=8))
    assert st.num_gpus == 8 and set(PHASES) <= set(st.breakdown)
    assert float(st) == pytest.approx(sum(st.breakdown.values()))
    assert st.tokens_per_s == pytest.approx(2 * 2048 * 4 * 8 / st.seconds)
    one = gm.training_step_time(CFG, "h100", batch_size=2, seq_len=2048)      # a bare GPU: the one-GPU model
    assert one.num_gpus == 1 and "communication" not in one.breakdown
    by_system = gm.training_step_time(CFG, "dgx-h100", batch_size=2, seq_len=2048)  # a system: the cluster model
    assert "communication" in by_system.breakdown and by_system.num_gpus == 1


def test_tensor_parallel_communication_matches_hand_arithmetic():
    # dp=1, pp=1, no recomputation: per micro-batch 2 all-reduces per layer forward + 2 backward, + 2 at the head
    st = step(gm.Parallelism(tp=4))
    act = 2 * 2048 * CFG.hidden_size * 2  # b s h bytes (bf16)
    ar = system_collective_time("all_reduce", act, "dgx-h100", 4, 1)
    assert st.breakdown["communication"] == pytest.approx(4 * (CFG.num_layers * 4 * ar + 2 * ar), rel=1e-6)


def test_pipeline_bubble_is_p_minus_1_over_v_micro_batches():
    for v in (1, 2):
        st = step(gm.Parallelism(pp=4, virtual_stages=v))  # dp=1: no gradient reduction
        per_mb = (st.seconds - st.breakdown["pipeline_bubble"] - st.breakdown["optimizer"]) / 4
        assert st.breakdown["pipeline_bubble"] == pytest.approx(3 / v * per_mb, rel=1e-6)


def test_more_gpus_less_time_per_step_and_tensor_parallel_splits_compute():
    t1 = step(gm.Parallelism(dp=1))
    t2 = step(gm.Parallelism(tp=2))
    assert t2.breakdown["forward"] < 0.7 * t1.breakdown["forward"]
    assert step(gm.Parallelism(dp=8)).tokens_per_s > 5 * t1.tokens_per_s


def test_recomputation_and_selective():
    none = step(gm.Parallelism(dp=2))
    full = step(gm.Parallelism(dp=2), checkpointing=True)
    sel = step(gm.Parallelism(dp=2), checkpointing="selective")
    assert none.breakdown["recompute"] == 0 < sel.breakdown["recompute"] < full.breakdown["recompute"]
    assert full.hfu > full.mfu and full.hardware_flops > none.hardware_flops


def test_recompute_modules_add_their_forward_to_the_backward():
    """Megatron-Core's --recompute-modules: the named submodules' forward runs again (recompute time, HFU), the model
    FLOPs (MFU) stay; core_attn alone is the default selective recomputation."""
    par = gm.Parallelism(dp=2)
    sel = step(par, checkpointing="selective", recompute_modules=["core_attn"])
    assert step(par, checkpointing="selective").seconds == pytest.approx(sel.seconds)
    mlp = step(par, checkpointing="selective", recompute_modules=["core_attn", "mlp"])
    assert mlp.breakdown["recompute"] > sel.breakdown["recompute"] and mlp.seconds > sel.seconds
    assert mlp.model_flops == sel.model_flops and mlp.mfu < sel.mfu
    # HFU over MFU: (model FLOPs + recomputed FLOPs) / model FLOPs, the MLPs' 2 x 3 h I a layer and token
    h, i, L, s = CFG.hidden_size, CFG.intermediate_size, CFG.num_layers, 2048
    model = gm.training.steptime.model_flops_per_token(CFG, s)
    assert mlp.hfu / mlp.mfu == pytest.approx((model + 4 * L * h * s + 2 * L * 3 * h * i) / model)
    nothing = step(par, checkpointing="selective", recompute_modules=[])
    assert nothing.breakdown["recompute"] == 0 and nothing.hfu == pytest.approx(nothing.mfu)
    assert mlp.hardware_flops > sel.hardware_flops > nothing.hardware_flops
    with pytest.raises(gm.ArgumentError, match="recompute_modules"):
        step(par, checkpointing="full", recompute_modules=["mlp"])


def test_recompute_modules_of_a_mixture_of_experts_rerun_its_dispatch():
    # a recomputed MoE layer dispatches and combines again: its all-to-alls grow by half (two more of the four)
    cfg = gm.model("mixtral-8x7b").model_copy(update=dict(num_layers=4))
    par = gm.Parallelism(dp=8, ep=8, zero=1)
    kw = dict(batch_size=1, seq_len=4096, gradient_accumulation_steps=2, parallelism=par, framework="megatron",
              checkpointing="selective")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        act = gm.training_step_time(cfg, "dgx-h100", recompute_modules=["moe_act"], **kw)
        moe = gm.training_step_time(cfg, "dgx-h100", recompute_modules=["moe"], **kw)
        none = gm.training_step_time(cfg, "dgx-h100", recompute_modules=[], **kw)
    assert 0 < act.breakdown["recompute"] < moe.breakdown["recompute"]
    assert act.breakdown["communication"] == pytest.approx(none.breakdown["communication"])
    assert moe.breakdown["communication"] > none.breakdown["communication"]
    assert moe.peak_bytes < act.peak_bytes < none.peak_bytes


def test_overlapped_frameworks_expose_less_gradient_reduction():
    kw = dict(precision="bf16", gradient_accumulation_steps=1)
    meg = step(gm.Parallelism(dp=64), **kw)
    hf = step(gm.Parallelism(dp=64), **{**kw, "framework": "fsdp"})
    assert hf.breakdown["communication"] < meg.breakdown["communication"]


def test_zero_changes_memory_and_fit():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z0 = step(gm.Parallelism(dp=8), batch_size=1, framework="fsdp")
        z3 = step(gm.Parallelism(dp=8, zero=3), batch_size=1, framework="fsdp")   # Megatron runs ZeRO-1 at most
    assert z3.peak_bytes < z0.peak_bytes and z3.fits


def test_context_parallel_multiplies_attention_per_chunk():
    st = step(gm.Parallelism(cp=4), seq_len=16384, batch_size=1)
    assert st.num_gpus == 4 and st.breakdown["forward"] > 0


def test_errors():
    with pytest.raises(gm.ArgumentError, match="framework"):
        step(gm.Parallelism(dp=2), framework="jax")
    with pytest.raises(gm.ArgumentError, match="cp=3"):
        step(gm.Parallelism(cp=3))
    with pytest.raises(gm.ArgumentError, match="parallelism"):
        gm.training_step_time(CFG, "dgx-h100", batch_size=1, seq_len=128, parallelism={"dp": 2})
    with pytest.raises(gm.ArgumentError, match="network"):
        step(gm.Parallelism(dp=16), system="l4")


def test_does_not_fit_warns():
    with pytest.warns(gm.DoesNotFitWarning):
        parallel_training_step_time("llama-3-70b", "dgx-h100", 1, 4096, parallelism=gm.Parallelism(dp=8))


def test_to_dict_and_repr():
    st = step(gm.Parallelism(dp=2, tp=2))
    assert "on 4 GPUs" in repr(st) and st.to_dict()["num_gpus"] == 4
    assert np.isfinite(st.to_dict()["tokens_per_s_per_gpu"])


def test_expert_parallel_adds_all_to_all_and_moe_compute_counts_top_k():
    kw = dict(batch_size=1, seq_len=2048, gradient_accumulation_steps=2, framework="megatron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        ep = gm.training_step_time("mixtral-8x7b", "dgx-h100", parallelism=gm.Parallelism(dp=8, ep=8, zero=1), **kw)
        dense = gm.training_step_time("mixtral-8x7b", "dgx-h100", parallelism=gm.Parallelism(dp=8, zero=1), **kw)
    assert ep.breakdown["forward"] == pytest.approx(dense.breakdown["forward"])  # same work per token
    assert ep.breakdown["optimizer"] < dense.breakdown["optimizer"]              # experts split over ep
    assert 0 < ep.mfu < 0.8


def test_comm_overlap_hides_tensor_and_data_parallel_communication():
    # Megatron-Core's --tp-comm-overlap / --overlap-grad-reduce / --overlap-param-gather: never slower, and on a
    # node of H100s the TP collectives of a 1B model (b s h = 8 MB per all-reduce) hide under its GEMMs
    par = gm.Parallelism(tp=8, dp=4, zero=1, sequence_parallel=True)
    kw = dict(batch_size=2, seq_len=2048, gradient_accumulation_steps=4, parallelism=par, framework="megatron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        plain = parallel_training_step_time(CFG, "dgx-h100", **kw)
        hidden = parallel_training_step_time(CFG, "dgx-h100", comm_overlap=True, **kw)
    assert hidden.seconds < plain.seconds
    assert hidden.breakdown["communication"] < 0.5 * plain.breakdown["communication"]
    for k in ("forward", "backward", "recompute", "optimizer", "pipeline_bubble"):  # only the exposure changes
        assert hidden.breakdown[k] == pytest.approx(plain.breakdown[k])
    with pytest.raises(gm.ArgumentError, match="comm_overlap"):
        parallel_training_step_time(CFG, "dgx-h100", comm_overlap="yes", **kw)


def test_a_moe_shard_runs_the_experts_width_not_the_dense_width():
    # Qwen1.5-MoE-A2.7B (config.json): 60 routed experts of width 1408, 4 a token, a shared expert of 5632; the dense
    # width 5632 is not an expert's. Per token each layer's MLP is 4 x 1408 + 5632 = 11264 wide (before: 4 x 5632).
    from gpumodel.cluster.shard import shard_config

    qwen_moe = gm.TransformerConfig.from_hf(dict(
        model_type="qwen2_moe", hidden_size=2048, num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=16,
        intermediate_size=5632, moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_experts=60,
        num_experts_per_tok=4, vocab_size=151936, max_position_embeddings=8192, tie_word_embeddings=False))
    assert shard_config(qwen_moe).intermediate_size == 4 * 1408 + 5632
    assert shard_config(qwen_moe, tp=2).intermediate_size == (4 * 1408 + 5632) // 2
    # the kernels then do about the model's FLOPs (6 x active parameters), not twice them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st = gm.training_step_time(qwen_moe, "dgx-h100", batch_size=1, seq_len=4096, precision="bf16",
                                   parallelism=gm.Parallelism(dp=8), framework="megatron")
    assert 0.7 < st.hardware_flops / st.model_flops < 1.1


def test_hidden_collectives_slow_the_compute_beside_them(monkeypatch):
    """A collective hidden under compute holds 24 of the SMs (``COLLECTIVE_CTAS``): the step pays that share of the
    hidden time, no more than the share of all of the communication, and nothing where nothing is hidden."""
    from gpumodel.cluster import composition

    par = gm.Parallelism(tp=8, dp=4, zero=1, sequence_parallel=True)
    kw = dict(batch_size=2, seq_len=2048, gradient_accumulation_steps=4, parallelism=par, framework="megatron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        hidden = parallel_training_step_time(CFG, "dgx-h100", comm_overlap=True, **kw)
        plain = parallel_training_step_time(CFG, "dgx-h100", **kw)
        monkeypatch.setattr(composition, "COLLECTIVE_CTAS", 0)
        free = parallel_training_step_time(CFG, "dgx-h100", comm_overlap=True, **kw)
        plain_free = parallel_training_step_time(CFG, "dgx-h100", **kw)
    share = 24 / 132                                          # an H100's SMs
    # what overlap hides: the exposed communication it takes away (the same collectives, priced once)
    hidden_s = plain_free.breakdown["communication"] - free.breakdown["communication"]
    paid = hidden.seconds - free.seconds
    assert 0 < paid and paid == pytest.approx(share * hidden_s, rel=1e-6)    # one stage: no bubble to carry it
    assert paid < share * plain_free.breakdown["communication"]
    # the context-parallel exchange is hidden under attention in either mode; here there is none, so nothing is paid
    assert plain.seconds == pytest.approx(plain_free.seconds, rel=1e-9)
