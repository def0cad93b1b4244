"""Prefill and decode step times: hand arithmetic, properties, arrays, errors and the result record."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gpumodel as gm


def test_decode_batch1_is_at_least_the_weights_over_bandwidth():
    t = gm.decode_step_time("llama-3-8b", "h200", batch_size=1, context_len=1024)
    weights = gm.inference_memory("llama-3-8b", 1, 1).weights_bytes          # 8.03e9 params x 2 B
    assert weights == pytest.approx(16.06e9, rel=0.01)
    assert t.seconds > weights / 4.8e12                                       # 3.35 ms at the datasheet 4.8 TB/s
    assert t.seconds < 3 * weights / 4.8e12
    assert t.bounds["matmul"] == "memory" and t.breakdown["matmul"] > 0.5 * t.seconds
    assert t.tokens_per_s == pytest.approx(1 / t.seconds)
    assert "allreduce" not in t.breakdown and t.kernel_s == t.seconds and t.host_s == 0


def test_prefill_is_at_least_the_flops_over_peak():
    cfg = gm.model("llama-3-8b")
    t = gm.prefill_time(cfg, "h100", batch_size=4, prompt_len=2048)
    flops = 2 * cfg.num_layers * cfg.layer_matmul_parameters() * 4 * 2048    # 2 N T over the layer matmuls
    assert t.seconds > flops / 989.4e12
    assert t.bounds["matmul"] == "compute"
    assert t.tokens_per_s == pytest.approx(4 * 2048 / t.seconds)


def test_tensor_parallel_does_not_scale_batch1_decode_linearly():
    one = gm.decode_step_time("llama-3-8b", "h100", batch_size=1, context_len=512)
    eight = gm.decode_step_time("llama-3-8b", "h100", batch_size=1, context_len=512, tp=8)
    assert 1.2 < one.seconds / eight.seconds < 4
    assert eight.breakdown["allreduce"] > 0 and eight.bounds["allreduce"] == "latency"
    assert eight.weights_bytes == pytest.approx(one.weights_bytes / 8, rel=0.02)


def test_quantised_weights_and_fp8_cache_are_faster_where_they_should_be():
    kw = dict(batch_size=1, context_len=1024)
    bf16 = gm.decode_step_time("llama-2-7b", "a100", **kw).seconds
    int8 = gm.decode_step_time("llama-2-7b", "a100", dtype="int8", **kw).seconds
    int4 = gm.decode_step_time("llama-2-7b", "a100", dtype="int4", **kw).seconds
    assert bf16 > int8 > int4
    long = dict(batch_size=64, context_len=16384)
    assert (gm.decode_step_time("llama-3-8b", "h100", kv_dtype="fp8", **long).breakdown["attention"]
            < 0.7 * gm.decode_step_time("llama-3-8b", "h100", **long).breakdown["attention"])
    assert gm.prefill_time("llama-3-8b", "h100", batch_size=8, prompt_len=2048, dtype="fp8").seconds < \
        gm.prefill_time("llama-3-8b", "h100", batch_size=8, prompt_len=2048).seconds


def test_hf_engine_is_host_bound_for_small_models():
    hf = gm.decode_step_time("llama-3.2-1b", "h200", batch_size=1, context_len=128, engine="hf")
    graph = gm.decode_step_time("llama-3.2-1b", "h200", batch_size=1, context_len=128)
    assert hf.host_bound and hf.seconds == hf.host_s > graph.seconds


def test_arrays_broadcast_like_scalars():
    batches = np.array([1, 16, 128])
    arr = gm.decode_step_time("llama-3-8b", "h100", batch_size=batches, context_len=2048)
    assert arr.seconds.shape == (3,) and arr.bounds["matmul"].shape == (3,)
    for b, t in zip(batches, arr.seconds):
        assert t == pytest.approx(gm.decode_step_time("llama-3-8b", "h100", batch_size=int(b), context_len=2048).seconds)
    pre = gm.prefill_time("llama-3.2-1b", "h100", batch_size=1, prompt_len=[128, 1024])
    assert pre.seconds.shape == (2,) and pre.seconds[1] > pre.seconds[0]


@settings(max_examples=15, deadline=None)
@given(b=st.integers(1, 256), c=st.integers(1, 32768), db=st.integers(1, 64), dc=st.integers(1, 8192))
def test_decode_time_grows_with_batch_and_context(b, c, db, dc):
    t = gm.decode_step_time("llama-3.2-1b", "h200", batch_size=[b, b + db, b], context_len=[c, c, c + dc]).seconds
    # up to the steps of the kernels' launch choices: FlashAttention's split-KV heuristic may give a longer
    # cache more splits, and a GEMM of a few more rows other tiles (at most ~3% on a sweep of both)
    assert t[1] >= t[0] * (1 - 0.05) and t[2] >= t[0] * (1 - 0.05)


@pytest.mark.parametrize("kwargs, match", [
    (dict(dtype="int3"), "dtype"), (dict(kv_dtype="int4"), "kv_dtype"), (dict(tp=3), "tp"),
    (dict(engine="vllm"), "engine"), (dict(batch_size=0), "batch_size"), (dict(context_len=-1), "context_len"),
])
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(gm.ArgumentError, match=match):
        gm.decode_step_time("llama-3-8b", "h100", **{"batch_size": 1, "context_len": 128, **kwargs})


def test_record_converts_and_displays():
    t = gm.prefill_time("llama-3-8b", "h100", batch_size=2, prompt_len=512, tp=2)
    assert float(t) == t.seconds
    d = json.loads(json.dumps(t.to_dict(), default=float))
    assert d["phase"] == "prefill" and d["tp"] == 2 and set(d["breakdown"]) == set(t.bounds)
    assert "prefill of llama-3-8b" in repr(t) and "<table>" in t._repr_html_()
    with pytest.raises(Exception):
        t.seconds = 1.0                                                        # frozen


def test_kv_dtype_one_rule_for_memory_and_serving():
    from gpumodel.vocabulary import KV_DTYPES, TIMED_KV_DTYPES, kv_cache_dtype

    assert {d.value for d in KV_DTYPES} - {d.value for d in TIMED_KV_DTYPES} == {"int8"}
    # the same spellings and the same default in inference_memory and in the serving functions
    mem = gm.inference_memory("llama-3-8b", 1, 1024, kv_dtype="float8_e4m3fn")
    assert mem.kv_cache_bytes == pytest.approx(2 * 32 * 1024 * 1024 * 1)   # 2 x layers x kv_dim x tokens x 1 B
    assert gm.decode_step_time("llama-3-8b", "h100", batch_size=1, context_len=1024, kv_dtype="float8_e4m3fn").kv_dtype == "fp8"
    assert gm.decode_step_time("llama-3-8b", "h100", batch_size=1, context_len=1024, dtype="fp32").kv_dtype == kv_cache_dtype(
        None, gm.DType.FP32).value == "fp32"
    # int8: the memory is defined, the time is not modelled; the error names what the time model takes
    assert gm.inference_memory("llama-3-8b", 1, 1024, kv_dtype="int8").kv_cache_bytes == mem.kv_cache_bytes
    for call in (lambda: gm.decode_step_time("llama-3-8b", "h100", batch_size=1, context_len=1024, kv_dtype="int8"),
                 lambda: gm.serving_capacity("llama-3-8b", "h100", kv_dtype="int8"),
                 lambda: gm.generation_time("llama-3-8b", "h100", kv_dtype="int8")):
        with pytest.raises(gm.ArgumentError, match="'fp32', 'bf16', 'fp16', 'fp8' here: the serving time model has "
                                                   "no int8 KV-cache kernels"):
            call()


def test_internal_step_names_its_token_count_apart_from_new_tokens():
    # new_tokens (generation_time, inference_memory) is what a generation produces; one step feeds step_tokens
    import inspect

    from gpumodel.serving.timing import step_time

    params = inspect.signature(step_time).parameters
    assert "step_tokens" in params and "new_tokens" not in params
    g = gm.generation_time("llama-3-8b", "h100", batch_size=2, prompt_len=256, new_tokens=64)
    cap = gm.serving_capacity("llama-3-8b", "h100", prompt_len=256, output_len=64)
    assert g.new_tokens == cap.output_len == 64


def test_compiled_engine_fuses_each_run_of_memory_bound_kernels():
    """Per Llama layer the unfused step launches 2 norms and 14 elementwise kernels (10 of the rotary
    embedding, silu, the product, two residual adds); fused, the rotary chain, each residual add with the
    norm after it and silu * up are one kernel each: four per layer (16 kernels become 4), the layer's
    leading norm joined to the previous layer's last residual add."""
    from gpumodel.serving.steps import step_kernels
    from gpumodel.vocabulary import resolve_model

    cfg = resolve_model("llama-3-8b")
    plain = step_kernels(cfg, 1, 1, 100, gm.dtype("bf16"), None, 1, "graph")
    fused = step_kernels(cfg, 1, 1, 100, gm.dtype("bf16"), None, 1, "compiled")
    per_layer = lambda ks, fam: sum(k.family == fam for k in ks if k.launches == cfg.num_layers)  # noqa: E731
    assert (per_layer(plain, "norm"), per_layer(plain, "elementwise")) == (2, 14)
    assert (per_layer(fused, "norm"), per_layer(fused, "elementwise"), per_layer(fused, "fused")) == (0, 0, 4)
    assert [k.family for k in fused if k.launches == cfg.num_layers][0] == "matmul"   # QKV after the rotation
    g = gm.decode_step_time("llama-3-8b", "h200", batch_size=1, context_len=100)
    c = gm.decode_step_time("llama-3-8b", "h200", batch_size=1, context_len=100, engine="compiled")
    assert c.kernels == g.kernels - 12 * cfg.num_layers and float(c.seconds) < float(g.seconds)
    assert c.breakdown["matmul"] == g.breakdown["matmul"]                    # the GEMMs are the same kernels
