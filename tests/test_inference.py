"""Inference memory: KV-cache arithmetic, quantized weights, measured H200 runs."""

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.core.memory import CUBLAS_WORKSPACE_BYTES, MemoryArgumentError

DATA = Path(__file__).parent / "data" / "memory"


def test_kv_cache_hand_arithmetic():
    # llama-2-7b, 1 x 4096 tokens, bf16: 2 (k,v) * 32 layers * 4096 (32 heads x 128) * 4096 tokens * 2 B = 2 GiB
    m = gm.inference_memory("llama-2-7b", 1, 4096)
    assert m.kv_cache_bytes == 2 * 32 * 4096 * 4096 * 2 == 2 * 2**30
    # GQA: llama-3-8b has 8 KV heads -> a quarter of that per token
    assert gm.inference_memory("llama-3-8b", 1, 4096).kv_cache_bytes == 2 * 32 * 1024 * 4096 * 2


def test_kv_dtype_and_new_tokens():
    a = gm.inference_memory("llama-3-8b", 4, 1000, new_tokens=24)
    b = gm.inference_memory("llama-3-8b", 4, 1000, kv_dtype="fp8", new_tokens=24)
    assert b.kv_cache_bytes == a.kv_cache_bytes / 2
    assert a.kv_cache_bytes == gm.inference_memory("llama-3-8b", 4, 1024).kv_cache_bytes


def test_quantized_weights():
    cfg = gm.model("llama-2-7b")
    bf16 = gm.inference_memory(cfg, 1, 16, dtype="bf16").weights_bytes
    int8 = gm.inference_memory(cfg, 1, 16, dtype="int8").weights_bytes
    int4 = gm.inference_memory(cfg, 1, 16, dtype="int4").weights_bytes
    q = cfg.num_layers * cfg.layer_matmul_parameters()
    # int4: 0.5 B + (scale + zero point) 4 B / 128 per quantized weight; the rest stays bf16
    assert int4 == pytest.approx(q * (0.5 + 4 / 128) + (cfg.num_parameters() - q) * 2)
    assert int4 < int8 < bf16


def test_prefill_holds_full_logits():
    cfg = gm.model("gpt2")
    m = gm.inference_memory(cfg, 8, 1024, mode="prefill")
    assert m.prefill_bytes >= m.weights_bytes + 8 * 1024 * 50257 * 2  # bf16 logits of every position


def test_broadcast():
    m = gm.inference_memory("llama-3-8b", np.array([1, 8, 64]), 2048)
    assert m.peak_bytes.shape == (3,) and np.all(np.diff(m.peak_bytes) > 0)


@pytest.mark.parametrize("kwargs,match", [(dict(dtype="int3"), "dtype='int3'"), (dict(batch_size=0), "batch_size"),
                                          (dict(mode="train"), "mode='train'")])
def test_bad_input(kwargs, match):
    args = dict(model="gpt2", batch_size=1, seq_len=16) | kwargs
    with pytest.raises(MemoryArgumentError, match=match):
        gm.inference_memory(**args)


def test_one_attention_enum_for_training_and_inference():
    import gpumodel.core.inference as inference
    from gpumodel.core.activations import Attention

    assert not hasattr(inference, "_Attention")
    assert [m.name for m in Attention] == ["SDPA", "FLASH", "CUDNN", "EFFICIENT", "MATH", "EAGER"]
    assert Attention.eager is Attention.EAGER                       # the former member names still answer
    eager = gm.inference_memory("llama-3.2-1b", 1, 2048, attention=Attention.EAGER)
    assert eager.peak_bytes == gm.inference_memory("llama-3.2-1b", 1, 2048, attention="eager").peak_bytes
    assert eager.peak_bytes > gm.inference_memory("llama-3.2-1b", 1, 2048, attention=Attention.SDPA).peak_bytes
    with pytest.raises(gm.ArgumentError, match="'sdpa', 'flash', 'cudnn', 'efficient', 'math', 'eager'"):
        gm.inference_memory("llama-3.2-1b", 1, 2048, attention="paged")


def test_measured_inference():
    shapes = json.loads((DATA / "shapes.json").read_text())
    rows = [json.loads(x) for x in (DATA / "runs.jsonl").read_text().splitlines()]
    errs = []
    for r in rows:
        if r["kind"] != "infer" or r["status"] != "ok":
            continue
        cfg = gm.TransformerConfig.from_hf(shapes[r["shape"]]["hf_config"])
        for mode, key in (("prefill", "peak_prefill"), ("generate", "peak_generate")):
            m = gm.inference_memory(cfg, r["batch"], r["seq"], new_tokens=r["new_tokens"], mode=mode)
            errs.append(abs((m.peak_bytes - CUBLAS_WORKSPACE_BYTES / 2) / r[key] - 1))
    assert len(errs) == 20
    assert statistics.median(errs) <= 0.03
    assert max(errs) <= 0.10


def test_repr_and_html():
    m = gm.inference_memory("gpt2", 2, 128)
    assert "GiB" in repr(m) and "<table>" in m._repr_html_()


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 64), s=st.integers(1, 8192), new=st.integers(0, 512),
       dtype=st.sampled_from(["bf16", "fp32", "int8", "int4"]), mode=st.sampled_from(["generate", "prefill"]))
def test_inference_monotone(b, s, new, dtype, mode):
    cfg = gm.model("llama-3.2-1b")
    m = gm.inference_memory(cfg, b, s, dtype=dtype, new_tokens=new, mode=mode).peak_bytes
    assert gm.inference_memory(cfg, b + 1, s, dtype=dtype, new_tokens=new, mode=mode).peak_bytes >= m
    assert gm.inference_memory(cfg, b, s + 1, dtype=dtype, new_tokens=new, mode=mode).peak_bytes >= m
    assert gm.inference_memory(cfg, b, s, dtype=dtype, new_tokens=new + 1, mode=mode).peak_bytes >= m
