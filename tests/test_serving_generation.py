"""Generation time: a prefill, then decode steps over a growing cache."""

from __future__ import annotations

import pytest

import gpumodel as gm
from gpumodel.serving import generation as G


def test_parts_add_up():
    g = gm.generation_time("llama-3-8b", "h100", batch_size=4, prompt_len=256, new_tokens=64)
    assert g.ttft_s == pytest.approx(gm.prefill_time("llama-3-8b", "h100", batch_size=4, prompt_len=256).seconds)
    assert g.seconds == pytest.approx(g.ttft_s + 63 * g.tpot_s)
    assert g.tokens_per_s == pytest.approx(4 * 64 / g.seconds)
    assert g.tokens_per_s_per_sequence == pytest.approx(64 / g.seconds)
    assert g.first_decode.seq_len == 256 and g.last_decode.seq_len == 256 + 62   # cached tokens before the last step
    assert g.first_decode.seconds <= g.tpot_s <= g.last_decode.seconds
    assert float(g) == g.seconds and "TTFT" in repr(g) and "<table>" in g._repr_html_()
    assert g.to_dict()["prefill"]["phase"] == "prefill"


def test_one_new_token_is_the_prefill():
    g = gm.generation_time("llama-3.2-1b", "h200", batch_size=1, prompt_len=128, new_tokens=1)
    assert g.seconds == g.ttft_s and g.first_decode is None and g.tpot_s != g.tpot_s      # nan


def test_long_generations_sample_the_context_and_match_the_exact_sum():
    from gpumodel.serving.timing import resolve_serving_args

    args = dict(setup=resolve_serving_args("llama-3.2-1b", "h100", "bf16", None, 1, "graph"), batch_size=8,
                first_context=1000)
    exact, _, _ = G.decode_total(steps=G.EXACT_STEPS, **args)
    sampled, _, _ = G.decode_total(steps=G.EXACT_STEPS + 1, **args)
    assert sampled == pytest.approx(exact * (G.EXACT_STEPS + 1) / G.EXACT_STEPS, rel=0.01)


def test_scalars_only():
    with pytest.raises(gm.ArgumentError, match="scalars"):
        gm.generation_time("llama-3-8b", "h100", batch_size=[1, 2], prompt_len=128, new_tokens=8)
