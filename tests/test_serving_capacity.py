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
