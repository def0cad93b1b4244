"""Data-parallel communication (gpumodel.cluster.dataparallel), expert-parallel all-to-alls, fp8 GEMMs and the
comm_overlap vocabulary, as the parallel step uses them."""

import warnings

import pytest

import gpumodel as gm
from gpumodel.cluster.collectives import system_collective_time
from gpumodel.cluster.composition import overlaps
from gpumodel.cluster.dataparallel import gradient_bytes, step_sync_exposed, zero3_layer_exposed
from gpumodel.cluster.step import parallel_training_step_time
from gpumodel.vocabulary import Framework, precision


def test_megatron_reduces_bf16_gradients_in_fp32():
    # megatron/training/arguments.py: "bfloat16 requires gradient accumulation and all-reduce to be done in fp32"
    assert gradient_bytes(Framework.MEGATRON, precision("amp_bf16")) == 4
    assert gradient_bytes(Framework.MEGATRON, precision("amp_fp16")) == 2
    assert gradient_bytes(Framework.FSDP, precision("amp_bf16")) == 4       # fp32 master gradients
    assert gradient_bytes(Framework.FSDP, precision("bf16")) == 2


def test_step_sync_megatron_exposes_the_reduction_unless_overlapped():
    s = gm.system("dgx-h100")
    n = 1e9   # parameters of the stage on one GPU
    rs = system_collective_time("reduce_scatter", n * 4, s, 16, 8)
    ag = system_collective_time("all_gather", n * 2, s, 16, 8)
    exposed = float(step_sync_exposed(Framework.MEGATRON, s, 1, n, 16, 8, 2, 4, 0.05, 0.02))
    assert exposed == pytest.approx(rs + ag)                      # after the flush: all of it
    hidden = float(step_sync_exposed(Framework.MEGATRON, s, 1, n, 16, 8, 2, 4, 0.05, 0.02, comm_overlap=True))
    assert hidden == pytest.approx(max(rs - 0.05, 0) + max(ag - 0.02, 0), rel=0.05) and hidden < exposed
    ar = system_collective_time("all_reduce", n * 4, s, 16, 8)
    assert float(step_sync_exposed(Framework.MEGATRON, s, 0, n, 16, 8, 2, 4, 0.05, 0.02)) == pytest.approx(ar)
    assert float(step_sync_exposed(Framework.MEGATRON, s, 1, n, 1, 8, 2, 4, 0.05, 0.02)) == 0.0   # one replica
    assert float(step_sync_exposed(Framework.FSDP, s, 3, n, 16, 8, 2, 4, 0.05, 0.02)) == 0.0       # ZeRO-3: per layer


def test_zero3_layer_gathers_under_compute_and_deepspeed_regathers_for_recomputation():
    s = gm.system("dgx-a100-80gb")
    p = 1.8e9   # one GPT-3 175B layer
    g = system_collective_time("all_gather", p * 2, s, 1536, 1)
    r = system_collective_time("reduce_scatter", p * 2, s, 1536, 1)
    assert float(zero3_layer_exposed(Framework.FSDP, s, p, 1536, 1, 2, 2, 1.0, 2.0, True)) == 0.0   # compute-bound
    fsdp = float(zero3_layer_exposed(Framework.FSDP, s, p, 1536, 1, 2, 2, 0.0, 0.0, True))
    ds = float(zero3_layer_exposed(Framework.DEEPSPEED, s, p, 1536, 1, 2, 2, 0.0, 0.0, True))
    assert fsdp == pytest.approx(2 * g + r) and ds == pytest.approx(3 * g + r)


def test_all_to_all_across_nodes_goes_through_each_ranks_nic():
    s = gm.system("dgx-h100")
    nbytes = 4096 * 7168 * 2 * 8.0
    t = system_collective_time("all_to_all", nbytes, s, 64, 1)   # 8 nodes of 8: 56/64 of the buffer leaves the node
    nic = s.inter_node.bandwidth * 0.9
    assert t == pytest.approx(56 / 64 * nbytes / nic, rel=0.05)   # and the ring-free latency of 63 steps
    inside = system_collective_time("all_to_all", nbytes, s, 8, 1)   # one node: NVLink
    assert inside < t / 4


def test_overlaps_vocabulary():
    assert overlaps(True) == {"tp", "dp", "pp"} and overlaps(False) == frozenset()
    assert overlaps("dp+pp+ep") == {"dp", "pp", "ep"} and overlaps(["tp"]) == {"tp"}
    with pytest.raises(gm.ArgumentError, match="comm_overlap"):
        overlaps("yes")
    with pytest.raises(gm.ArgumentError, match="comm_overlap"):
        overlaps(3)


def _step(model="llama-3-8b", **kw):
    args = dict(batch_size=1, seq_len=4096, gradient_accumulation_steps=4, framework="megatron",
                parallelism=gm.Parallelism(dp=8, zero=1))
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        return parallel_training_step_time(model, "dgx-h100", **args)


def test_fp8_speeds_up_the_layers_gemms_not_attention_or_the_head():
    bf16, fp8 = _step(), _step(fp8=True)
    assert 0.5 * bf16.breakdown["forward"] < fp8.breakdown["forward"] < 0.8 * bf16.breakdown["forward"]
    assert fp8.hardware_flops == pytest.approx(bf16.hardware_flops, rel=1e-3)   # the same GEMMs, and the casts
    with pytest.raises(gm.ArgumentError, match="fp8"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gm.DoesNotFitWarning)
            parallel_training_step_time("llama-3-8b", "dgx-a100-80gb", 1, 4096, fp8=True,
                                        parallelism=gm.Parallelism(dp=8), framework="megatron")


def test_expert_all_to_all_hidden_only_where_asked():
    par = gm.Parallelism(dp=8, ep=8, zero=1)
    plain = _step("mixtral-8x7b", parallelism=par)
    hidden = _step("mixtral-8x7b", parallelism=par, comm_overlap="ep")
    assert hidden.breakdown["communication"] < plain.breakdown["communication"]
    assert hidden.breakdown["forward"] == pytest.approx(plain.breakdown["forward"])


def test_public_step_takes_the_parallel_options():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        st = gm.training_step_time("llama-3-8b", "dgx-h100", batch_size=1, seq_len=4096, fp8=True, comm_overlap=True,
                                   parallelism=gm.Parallelism(dp=8, zero=1), framework="megatron")
    assert st.num_gpus == 8 and st.seconds > 0


def test_fp8_casts_are_transformer_engines_cast_transposes():
    from gpumodel.cluster.shard import fp8_cast_kernels
    k = fp8_cast_kernels(gm.model("llama-2-7b"), 4096)
    t, h, i = 4096, 4096, 11008
    # forward: cast_transpose of the attention output and the activation (read 2 B, write 2 x 1 B), and the
    # transposed fp8 copies of the two normalised inputs (read 1, write 1)
    assert sum(o.bytes for o in k["forward"]) == 4 * t * (h + i) + 2 * t * 2 * h
    # backward: cast_transpose of every GEMM's output gradient: QKV (3h, no GQA), attention out (h), gate+up (2i), down (h)
    assert sum(o.bytes for o in k["backward"]) == 4 * t * (3 * h + 2 * h + 2 * i)
    gqa = fp8_cast_kernels(gm.model("llama-3-8b"), t)   # 8 key/value heads of 32: QKV width h + 2 h / 4
    assert sum(o.bytes for o in gqa["backward"]) == 4 * t * (h + h // 2 + 2 * h + 2 * 14336)


def test_fp8_casts_add_to_megatrons_fused_kernels():
    """The casts are kernels of their own: the fused-kernel scaling of Megatron's memory-bound kernels must not
    absorb them (an fp8 layer costs its GEMMs at the fp8 rate plus the casts)."""
    from gpumodel.cluster.kernelprice import price_kernels
    from gpumodel.cluster.shard import fp8_cast_kernels, shard_config, shard_times
    cfg = shard_config(gm.model("llama-2-7b"))
    bf16 = shard_times(cfg, "h100-sxm", 1, 4096, 1, "amp_bf16", "adamw", "megatron")
    fp8 = shard_times(cfg, "h100-sxm", 1, 4096, 1, "amp_bf16", "adamw", "megatron", fp8=True)
    casts = fp8_cast_kernels(cfg, 4096)
    fwd_casts = sum(p.seconds for p in price_kernels(casts["forward"], "h100-sxm"))
    assert fwd_casts > 0.02 * (bf16.layer_forward - bf16.attention_forward)
    assert fp8.layer_forward > fwd_casts + 0.4 * (bf16.layer_forward - bf16.attention_forward)


def test_bf16_gradient_reduction_moves_half_the_bytes():
    par = gm.Parallelism(dp=64, tp=1, zero=1)
    kw = dict(batch_size=1, seq_len=4096, gradient_accumulation_steps=2, parallelism=par, framework="megatron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        fp32 = gm.training_step_time("llama-3-8b", "dgx-h100", **kw)
        bf16 = gm.training_step_time("llama-3-8b", "dgx-h100", grad_reduce_dtype="bf16", **kw)
        with pytest.raises(gm.ArgumentError, match="grad_reduce_dtype"):
            gm.training_step_time("llama-3-8b", "dgx-h100", 1, 4096, parallelism=par, framework="fsdp",
                                  grad_reduce_dtype="bf16")
    assert bf16.breakdown["communication"] < 0.75 * fp32.breakdown["communication"]
    assert bf16.breakdown["forward"] == fp32.breakdown["forward"]
    assert bf16.peak_bytes < fp32.peak_bytes
    with pytest.raises(gm.ArgumentError, match="fp8"):
        gm.training_step_time("llama-3-8b", "dgx-h100", 1, 4096, parallelism=par, framework="fsdp", fp8=True)


def test_split_accumulation_is_the_measured_backward_ratio():
    """FP8_SPLIT_ACCUMULATION is the median split/fast ratio of the committed H100 backward GEMMs, and it slows the
    fp8 backward GEMMs alone: the forward is unchanged."""
    import json
    from pathlib import Path
    import numpy as np
    from gpumodel.cluster import shard
    path = Path(__file__).parent / "data" / "calibration" / "fp8" / "h100" / "fp8.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if '"pass_"' in x]
    ratio = [r["e5m2_split_s"] / r["e5m2_fast_s"] for r in rows if r["pass_"] != "fprop"]
    assert len(ratio) >= 80 and np.median(ratio) == pytest.approx(shard.FP8_SPLIT_ACCUMULATION, abs=0.01)
    cfg = shard.shard_config(gm.model("llama-2-7b"))
    kw = dict(micro_batch=1, seq_local=4096, cp=1, precision="amp_bf16", optimizer="adamw", framework="megatron")
    fp8 = shard.shard_times(cfg, "h100-sxm", fp8=True, **kw)
    old, shard.FP8_SPLIT_ACCUMULATION = shard.FP8_SPLIT_ACCUMULATION, 1.0
    try:
        shard._shard_times.cache_clear()
        fast = shard.shard_times(cfg, "h100-sxm", fp8=True, **kw)
    finally:
        shard.FP8_SPLIT_ACCUMULATION = old
        shard._shard_times.cache_clear()
    assert fp8.layer_forward == pytest.approx(fast.layer_forward)
    # the backward's GEMMs are most of its time: between 2% and 6% slower in all
    assert 1.02 * fast.layer_backward < fp8.layer_backward < 1.06 * fast.layer_backward


def test_hsdp_layer_collectives_by_hand():
    # HSDP over 8 GPUs of a node, 16 replicas: a layer's 1e9 parameters gathered (bf16) and reduce-scattered (fp32)
    # inside the node, then each rank's 1/8 gradient shard all-reduced across the 16 replicas, ranks 8 apart
    from gpumodel.cluster.dataparallel import replica_all_reduce, zero3_layer_times
    s, n = gm.system("dgx-h100"), 1e9
    g = float(system_collective_time("all_gather", n * 2, s, 8, 1))
    r = float(system_collective_time("reduce_scatter", n * 4, s, 8, 1))
    a = float(system_collective_time("all_reduce", n * 4 / 8, s, 16, 8))
    assert float(replica_all_reduce(s, n * 4 / 8, 16, 8)) == pytest.approx(a)
    assert float(replica_all_reduce(s, n * 4 / 8, 1, 8)) == 0.0
    exposed, total = zero3_layer_times(Framework.FSDP, s, n, 8, 1, 2, 4, 0.0, 0.0, False, replicas=16)
    assert float(total) == pytest.approx(2 * g + r + a)          # forward gather; backward gather, RS, all-reduce
    assert float(exposed) == pytest.approx(2 * g + r + a)        # nothing to hide under


def test_hsdp_step():
    par = gm.Parallelism(dp=256, zero=3)
    kw = dict(batch_size=2, seq_len=4096, checkpointing=True, parallelism=par, framework="fsdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        full = gm.training_step_time("llama-3-70b", "dgx-h100", **kw)
        same = gm.training_step_time("llama-3-70b", "dgx-h100", shard_group=256, **kw)
        hsdp = gm.training_step_time("llama-3-70b", "dgx-h100", shard_group=32, **kw)
        assert same.seconds == full.seconds and same.peak_bytes == full.peak_bytes
        # the optimizer's shard is 8x larger over 32 ranks than over 256; so is its memory
        assert hsdp.breakdown["optimizer"] == pytest.approx(8 * full.breakdown["optimizer"])
        assert hsdp.peak_bytes > full.peak_bytes
        assert hsdp.breakdown["communication"] > full.breakdown["communication"]   # the replicas' all-reduce
        assert hsdp.breakdown["forward"] == full.breakdown["forward"]
        for bad, fw in ((7, "fsdp"), (32, "megatron")):
            with pytest.raises(gm.ArgumentError, match="shard_group"):
                gm.training_step_time("llama-3-70b", "dgx-h100", shard_group=bad,
                                      **dict(kw, framework=fw, parallelism=gm.Parallelism(dp=256, zero=1)
                                             if fw == "megatron" else par))
