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


def test_70b_on_a_4090_does_not_fit_and_warns_once():
    # 70.6B parameters x 2 B = 141 GB of bf16 weights on a 24 GB card
    with pytest.warns(gm.DoesNotFitWarning) as record:
        g = gm.generation_time("llama-3-70b", "4090", batch_size=1, prompt_len=1024, new_tokens=16)
    hits = [w for w in record if issubclass(w.category, gm.DoesNotFitWarning)]
    assert len(hits) == 1 and hits[0].filename == __file__
    assert "generation at batch_size=1, prompt_len=1024, new_tokens=16" in str(hits[0].message)
    assert "24.0 GiB rtx-4090 offers" in str(hits[0].message)
    assert g.fits is False and g.prefill.fits is False and g.last_decode.fits is False
    assert g.peak_bytes == max(g.prefill.peak_bytes, g.last_decode.peak_bytes) > 141e9
    assert "DOES NOT FIT" in repr(g) and "DOES NOT FIT" in g._repr_html_() and g.to_dict()["fits"] is False


def test_generation_memory_is_the_prefill_and_the_last_decode_step():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", gm.DoesNotFitWarning)
        g = gm.generation_time("llama-3-8b", "h100", batch_size=4, prompt_len=256, new_tokens=64)
    assert g.fits is True and "DOES NOT FIT" not in repr(g)
    # the prefill holds 256 positions; the last decode step (over 256 + 62 cached tokens) 256 + 63
    assert g.prefill.peak_bytes == gm.inference_memory("llama-3-8b", 4, 256).peak_bytes
    assert g.last_decode.peak_bytes == gm.inference_memory("llama-3-8b", 4, 1, new_tokens=256 + 62).peak_bytes
    # together: what inference_memory gives for the generation of 63 tokens after the prompt
    assert g.peak_bytes == gm.inference_memory("llama-3-8b", 4, 256, new_tokens=63).peak_bytes


def test_a_cache_that_outgrows_the_gpu_is_caught_at_the_last_decode_step():
    # 80 sequences: the prefill of 80 x 128 tokens fits; 80 caches of 8127 positions x 131,072 B (85 GB) do not
    with pytest.warns(gm.DoesNotFitWarning, match="the last decode step"):
        g = gm.generation_time("llama-3-8b", "h100", batch_size=80, prompt_len=128, new_tokens=8000)
    assert g.prefill.fits is True and g.last_decode.fits is False and g.fits is False
    assert g.last_decode.peak_bytes > 80 * 8127 * 131072 == 85_217_771_520
