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
    long = dict(batch_size=16, context_len=16384)   # a bf16 cache of 32 GiB: fits an H100 (64 sequences would not)
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


@pytest.mark.filterwarnings("ignore::gpumodel.base.errors.DoesNotFitWarning")  # a property of the time alone:
@settings(max_examples=15, deadline=None)                                     # the sweep reaches caches no GPU holds
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


# ---------------------------------------------------------------------------------------------- memory: fits
GiB = 2 ** 30


def _one_warning(record, cls=gm.DoesNotFitWarning):
    """The single warning of ``cls`` recorded, pointing at this file (the caller's line, not the library's)."""
    hits = [w for w in record if issubclass(w.category, cls)]
    assert len(hits) == 1, [str(w.message) for w in hits]
    assert hits[0].filename == __file__
    return str(hits[0].message)


def test_prefill_of_405b_on_one_h100_does_not_fit_and_warns():
    # 405B parameters x 2 B = 811 GB of bf16 weights on an 80 GB card (79.2 GiB usable)
    with pytest.warns(gm.DoesNotFitWarning) as record:
        t = gm.prefill_time("llama-3-405b", "h100", batch_size=1, prompt_len=1024)
    text = _one_warning(record)
    assert "prefill at batch_size=1, prompt_len=1024" in text and "79.2 GiB h100-sxm offers" in text
    assert t.fits is False and "DOES NOT FIT" in repr(t) and "DOES NOT FIT" in t._repr_html_()
    weights = gm.model("llama-3-405b").num_parameters() * 2
    assert t.peak_bytes > weights > 9 * gm.gpu("h100").usable_memory_bytes
    assert t.peak_bytes == gm.inference_memory("llama-3-405b", 1, 1024).peak_bytes
    assert f"needs {t.peak_bytes / GiB:,.1f} GiB per GPU" in text         # the graph engine: the allocated peak
    assert t.seconds > 0                                                  # the time is still given
    d = t.to_dict()
    assert d["fits"] is False and d["peak_bytes"] == t.peak_bytes


def test_prefill_of_ten_million_tokens_does_not_fit():
    # the KV cache alone: 2 (K, V) x 32 layers x 1024 (8 KV heads x 128) x 10**7 tokens x 2 B = 1.31 TB
    with pytest.warns(gm.DoesNotFitWarning, match="prompt_len=10000000"):
        t = gm.prefill_time("llama-3-8b", "h100", batch_size=1, prompt_len=10**7)
    assert t.fits is False and t.peak_bytes > 2 * 32 * 1024 * 10**7 * 2 == 1.31072e12


def test_decode_of_a_million_sequences_does_not_fit():
    # 10**6 caches of 4097 positions x 131,072 B each: 537 TB
    with pytest.warns(gm.DoesNotFitWarning, match="decode step at batch_size=1000000, context_len=4096"):
        t = gm.decode_step_time("llama-3-8b", "h100", batch_size=10**6, context_len=4096)
    assert t.fits is False and t.peak_bytes > 10**6 * 4097 * 131072


def test_a_step_that_fits_says_so_without_a_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", gm.DoesNotFitWarning)
        t = gm.decode_step_time("llama-3-8b", "h100", batch_size=1, context_len=1024)
        p = gm.prefill_time("llama-3-8b", "h100", batch_size=1, prompt_len=1024)
    assert t.fits is True and p.fits is True and "DOES NOT FIT" not in repr(t)
    # a decode step holds the weights (16.06 GB), the cache of 1025 positions (1025 x 131,072 B) and its logits:
    # inference_memory of one prompt token generating 1024 more
    assert t.peak_bytes == gm.inference_memory("llama-3-8b", 1, 1, new_tokens=1024).peak_bytes
    assert 16.06e9 + 1025 * 131072 < t.peak_bytes < 16.06e9 + 1025 * 131072 + 0.2e9
    assert p.peak_bytes == gm.inference_memory("llama-3-8b", 1, 1024).peak_bytes


def test_arrays_of_sizes_check_each_configuration():
    with pytest.warns(gm.DoesNotFitWarning, match="1 of 2 configurations of the prefill need up to") as record:
        t = gm.prefill_time("llama-3-8b", "h100", batch_size=[1, 10**4], prompt_len=4096)
    _one_warning(record)
    assert t.fits.tolist() == [True, False] and np.shape(t.peak_bytes) == (2,)
    assert t.pick(0).fits is True and t.pick(1).fits is False and "1 DO NOT FIT" in repr(t)


def test_tensor_parallelism_checks_the_memory_per_gpu():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", gm.DoesNotFitWarning)
        t = gm.prefill_time("llama-3-405b", "h100", batch_size=1, prompt_len=1024, tp=16)
    assert t.fits is True and t.peak_bytes == gm.inference_memory("llama-3-405b", 1, 1024, tp=16).peak_bytes


def test_eager_hf_is_checked_with_the_allocator_reserve():
    # eager generate runs through PyTorch's caching allocator: its reserve and the CUDA context count too
    from gpumodel.serving.timing import memory_check, resolve_serving_args

    graph = resolve_serving_args("llama-3-8b", "h100", "bf16", None, 1, "graph")
    hf = resolve_serving_args("llama-3-8b", "h100", "bf16", None, 1, "hf")
    m = gm.inference_memory("llama-3-8b", 8, 512)
    assert memory_check(graph, 8, 512) == (True, m.peak_bytes, m.peak_bytes)
    assert memory_check(hf, 8, 512) == (True, m.peak_bytes, m.total_bytes)


def test_internal_steps_are_not_checked_and_do_not_warn():
    # serving_capacity and generation_time time steps in loops through step_time: no memory check, no warning
    import warnings

    from gpumodel.serving.timing import resolve_serving_args, step_time

    setup = resolve_serving_args("llama-3-405b", "h100", "bf16", None, 1, "graph")
    with warnings.catch_warnings():
        warnings.simplefilter("error", gm.DoesNotFitWarning)
        t = step_time(setup, 1, 1024, 0, "prefill")
        cap = gm.serving_capacity("llama-3-405b", "h100")
    assert t.fits is None and t.peak_bytes != t.peak_bytes and cap.max_concurrency == 0
