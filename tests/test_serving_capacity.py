"""Serving capacity: KV memory, continuous batching within targets, GPUs for a load."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gpumodel as gm
from gpumodel.serving import capacity as C


def test_max_concurrency_is_the_kv_memory_over_one_request():
    cap = gm.serving_capacity("llama-3-8b", "h100", prompt_len=1024, output_len=256)
    per = gm.inference_memory("llama-3-8b", 1, 1024, new_tokens=256).kv_cache_bytes
    assert cap.kv_bytes_per_request == pytest.approx(per)           # 2 L kv_dim (1024+256) x 2 B = 168 MB
    assert per == pytest.approx(2 * 32 * 1024 * 1280 * 2)
    assert cap.max_concurrency == int(cap.kv_budget_bytes // per)
    free = gm.gpu("h100").usable_memory_bytes - gm.inference_memory("llama-3-8b", 1, 1).weights_bytes
    assert 0.8 * free * C.KV_MEMORY_FRACTION < cap.kv_budget_bytes < free * C.KV_MEMORY_FRACTION
    # the best throughput is at the KV-memory limit, or below it where more sequences per step cost more per token
    # (8B on an H100: 252 sequences, the last batch whose projections stream the weights once; 257 and more run
    # the tiled GEMMs, 13% slower per token, as the H200's measured m = 200 vs 400 projections show)
    assert cap.concurrency <= cap.max_concurrency
    assert cap.limiter == "memory" or (cap.limiter == "throughput"
                                       and cap.requests_per_s >= cap.curve["requests_per_s"][-1])


def test_tensor_parallel_replicas_leave_the_nccl_communicator_out_of_the_kv_cache():
    # the same weights and workspace per GPU: Llama-3-70B's shard on 4 and on 8 H200s differs, so compare one
    # shape's budget with the hand sum: usable - weights - prefill workspace - NCCL, times the fraction
    MiB = 2 ** 20
    for tp, nccl in ((1, 0.0), (2, 544 * MiB), (8, 688 * MiB)):
        cap = gm.serving_capacity("llama-3-70b", "h200", prompt_len=1024, output_len=128, tp=tp)
        one = gm.inference_memory("llama-3-70b", 1, 1024, new_tokens=128, tp=tp)
        work = gm.inference_memory("llama-3-70b", 1, cap.max_num_tokens, new_tokens=0, tp=tp)
        workspace = work.peak_bytes - work.weights_bytes - work.breakdown["kv_cache"]
        free = gm.gpu("h200").usable_memory_bytes - one.weights_bytes - workspace - nccl
        assert cap.kv_budget_bytes == pytest.approx(max(free, 0.0) * C.KV_MEMORY_FRACTION)


def test_targets_are_met_and_cost_throughput():
    free = gm.serving_capacity("llama-3-70b", "h200", prompt_len=2048, output_len=256, tp=4)
    slo = gm.serving_capacity("llama-3-70b", "h200", prompt_len=2048, output_len=256, tp=4, tpot_slo="30ms",
                              ttft_slo="1s")
    assert slo.tpot_s <= 0.030 and slo.ttft_s <= 1.0 and slo.limiter == "tpot_slo"
    assert slo.output_tokens_per_s < free.output_tokens_per_s
    assert slo.requests_per_s == pytest.approx(slo.output_tokens_per_s / 256)
    assert slo.gpus_for(10 * slo.requests_per_s) == 40 and slo.replicas_for(slo.requests_per_s / 2) == 1
    c = slo.curve
    assert np.all(np.diff(c["concurrency"]) > 0)
    # throughput rises with concurrency, up to the small steps of the GEMMs' tile quantisation (from 243 to
    # 277 sequences a decode GEMM needs a third row of 128-row tiles: 2.1% less throughput)
    rps = np.asarray(c["requests_per_s"])
    assert rps[-1] > 2 * rps[0] and np.all(np.diff(rps) > -0.03 * rps[:-1])
    # TPOT grows with concurrency, up to the split-KV heuristic's steps (19 sequences can get fewer splits and
    # run a hair faster than 17)
    tpot = np.asarray(c["tpot_s"])
    assert tpot[-1] > 10 * tpot[0] and np.all(np.diff(tpot) > -0.01 * tpot[:-1])


def test_unreachable_target_serves_nothing():
    cap = gm.serving_capacity("llama-3-70b", "h100", prompt_len=512, output_len=64, tp=2, tpot_slo="1ms")
    assert cap.limiter == "slo_unreachable" and cap.requests_per_s == 0
    with pytest.raises(gm.ArgumentError, match="meets the targets"):
        cap.gpus_for(1.0)


def test_model_that_does_not_fit_has_no_concurrency():
    cap = gm.serving_capacity("llama-3-70b", "l4", prompt_len=512, output_len=64)
    assert cap.max_concurrency == 0 and cap.limiter == "memory" and cap.output_tokens_per_s == 0


@settings(max_examples=4, deadline=None)
@given(slo_ms=st.floats(8, 200))
def test_tighter_tpot_never_raises_throughput(slo_ms):
    a = gm.serving_capacity("llama-3.2-1b", "h100", prompt_len=512, output_len=128, tpot_slo=slo_ms / 1e3)
    b = gm.serving_capacity("llama-3.2-1b", "h100", prompt_len=512, output_len=128, tpot_slo=slo_ms / 2e3)
    assert b.output_tokens_per_s <= a.output_tokens_per_s
    assert math.isnan(a.tpot_s) or a.limiter == "slo_unreachable" or a.tpot_s <= slo_ms / 1e3


def test_record_and_arguments():
    cap = gm.serving_capacity("llama-3-8b", "h100", prompt_len=256, output_len=64, max_batch_size=32)
    assert cap.concurrency == 32 and cap.limiter == "max_batch_size" and cap.max_concurrency > 32
    d = cap.to_dict()
    assert d["curve"]["concurrency"][-1] == 32 and d["output_tokens_per_s_per_gpu"] == cap.output_tokens_per_s
    assert "ServingCapacity" in repr(cap) and "<table>" in cap._repr_html_()
    with pytest.raises(gm.ArgumentError, match="tpot_slo"):
        gm.serving_capacity("llama-3-8b", "h100", tpot_slo="fast")
    with pytest.raises(gm.ArgumentError, match="requests_per_s"):
        cap.gpus_for(-1)


# ---------------------------------------------------------------------------------------------- chunked prefill
def _setup(model="llama-3-8b", gpu="h100"):
    from gpumodel.serving.timing import resolve_serving_args

    return resolve_serving_args(model, gpu, "bf16", None, 1, "graph")


def _step(setup, tokens, cached):
    from gpumodel.serving.timing import step_time

    return float(step_time(setup, 1, tokens, cached, "prefill").seconds)


def test_chunked_prefill_is_the_sum_of_its_chunk_steps():
    setup = _setup()
    # 2048 tokens in chunks of 1024: tokens 0-1023 on an empty cache, then 1024-2047 over those 1024
    assert C.chunked_prefill_time(setup, 2048, 1024) == pytest.approx(_step(setup, 1024, 0) + _step(setup, 1024, 1024))
    # 2500 tokens: two chunks of 1024 and the rest, 452 tokens over 2048 cached
    assert C.chunked_prefill_time(setup, 2500, 1024) == pytest.approx(
        _step(setup, 1024, 0) + _step(setup, 1024, 1024) + _step(setup, 452, 2048))
    # one chunk is the plain prefill
    assert C.chunked_prefill_time(setup, 2048, 2048) == pytest.approx(
        float(gm.prefill_time("llama-3-8b", "h100", batch_size=1, prompt_len=2048).seconds))


def test_chunks_attend_to_the_tokens_before_them():
    # causal attention of chunk j over its own 1024 queries and the j * 1024 keys before them: the two chunks'
    # FLOPs add up to the whole prompt's, 4 b h d s^2 / 2 (FlashAttention-2 convention)
    from gpumodel.serving import kernels as K

    first = K.attention(1, 32, 1024, 128, causal=True, kv_seq=1024).flops
    second = K.attention(1, 32, 1024, 128, causal=True, kv_seq=2048).flops
    whole = K.attention(1, 32, 2048, 128, causal=True).flops
    assert first + second == pytest.approx(whole) and whole == pytest.approx(4 * 32 * 128 * 2048 ** 2 / 2)


def test_many_chunks_are_sampled_and_match_the_exact_sum():
    from gpumodel.serving.generation import EXACT_STEPS
    from gpumodel.serving.timing import step_time

    setup = _setup("llama-3.2-1b")
    chunks = 2 * EXACT_STEPS                     # 64 chunks of 64 tokens: beyond the exact sum
    exact = float(np.sum(step_time(setup, 1, 64, 64 * np.arange(chunks), "prefill").seconds))
    assert C.chunked_prefill_time(setup, 64 * chunks, 64) == pytest.approx(exact, rel=0.01)


def test_serving_capacity_prices_a_prompt_longer_than_max_num_tokens_in_chunks():
    setup = _setup()
    whole = gm.serving_capacity("llama-3-8b", "h100", prompt_len=2048, output_len=128)
    chunked = gm.serving_capacity("llama-3-8b", "h100", prompt_len=2048, output_len=128, max_num_tokens=512)
    assert (whole.prefill_chunks, whole.max_num_tokens) == (1, 8192)
    assert (chunked.prefill_chunks, chunked.max_num_tokens) == (4, 512)
    assert "prefill in 4 chunks of 512 tokens" in chunked._rows()[1][1]
    # a lone request waits for the decode step under way (batch 1 at context 2048 + 64), then its 4 chunks run
    t_d = float(gm.decode_step_time("llama-3-8b", "h100", batch_size=1, context_len=2048 + 64).seconds)
    assert chunked.curve["ttft_s"][0] == pytest.approx(C.chunked_prefill_time(setup, 2048, 512) + t_d)
    # each chunk reads the weights again: four 512-token steps cost more than one 2048-token step
    assert chunked.curve["ttft_s"][0] > whole.curve["ttft_s"][0]
    assert chunked.curve["requests_per_s"][0] < whole.curve["requests_per_s"][0]
    # 100 tokens a step: 21 chunks (20 of 100 and one of 48), priced, not one prefill
    tiny = gm.serving_capacity("llama-3-8b", "h100", prompt_len=2048, output_len=128, max_num_tokens=100)
    assert tiny.prefill_chunks == 21 and tiny.ttft_s > chunked.ttft_s
    # the prefill workspace is that of one chunk: more room for the KV cache
    assert chunked.kv_budget_bytes > whole.kv_budget_bytes


def test_default_max_num_tokens_takes_a_long_prompt_whole():
    # left unset: 8192 tokens a step, or the whole prompt when longer (no chunking, as before)
    cap = gm.serving_capacity("llama-3.2-1b", "h100", prompt_len=10000, output_len=16)
    same = gm.serving_capacity("llama-3.2-1b", "h100", prompt_len=10000, output_len=16, max_num_tokens=10000)
    assert cap.prefill_chunks == 1 and cap.max_num_tokens == 10000
    assert cap.output_tokens_per_s == same.output_tokens_per_s and cap.ttft_s == same.ttft_s
    two = gm.serving_capacity("llama-3.2-1b", "h100", prompt_len=10000, output_len=16, max_num_tokens=C.MAX_NUM_TOKENS)
    assert two.prefill_chunks == 2 and two.max_num_tokens == 8192


# ---------------------------------------------------------------------------------------------- one argument per error
@pytest.mark.parametrize("kwargs, argument, allowed", [
    (dict(kv_memory_fraction=1.5), "kv_memory_fraction", "a number in (0, 1]"),
    (dict(kv_memory_fraction=[0.5, 0.9]), "kv_memory_fraction", "a number in (0, 1]"),
    (dict(prompt_len=[512, 1024]), "prompt_len", "a positive integer"),
    (dict(output_len=[64, 128]), "output_len", "a positive integer"),
    (dict(max_num_tokens=[512, 1024]), "max_num_tokens", "a positive integer"),
])
def test_each_refusal_names_its_argument_alone(kwargs, argument, allowed):
    with pytest.raises(gm.ArgumentError) as info:
        gm.serving_capacity("llama-3-8b", "h100", **kwargs)
    exc = info.value
    assert (exc.argument, exc.allowed) == (argument, allowed)
    others = {"prompt_len", "output_len", "max_num_tokens", "kv_memory_fraction"} - {argument}
    assert argument in str(exc) and not any(name in str(exc) for name in others), str(exc)
    if argument == "kv_memory_fraction" and not isinstance(kwargs[argument], list):
        assert exc.value == 1.5 and "(0, 1]" in str(exc)
