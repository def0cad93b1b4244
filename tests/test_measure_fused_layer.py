"""The fused-layer measuring script (bench/measure_fused_layer.py) and its comparison (bench/fused_layer_accuracy.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from benchscript import load_bench

ROOT = Path(__file__).resolve().parents[1]


def test_plan_measures_each_case_fused_and_eager(tmp_path):
    out = tmp_path / "plan.jsonl"
    subprocess.run([sys.executable, str(ROOT / "bench/measure_fused_layer.py"), "--out", str(out), "--dry-run"],
                   check=True, capture_output=True, timeout=120)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    mod = load_bench("measure_fused_layer")
    variants = ("fused", "hf", "attention", "attention_dropout")
    assert len(rows) == len(variants) * len(mod.CASES)
    assert {(r["shape"], r["batch"], r["seq"], r["variant"]) for r in rows} == \
        {(s, b, q, v) for s, b, q in mod.CASES for v in variants}
    for r in rows:
        assert r["heads"] % r["kv_heads"] == 0
        if r["shape"] != "llama-3-70b-tp4":   # whole layers: the heads span the hidden size
            assert r["heads"] * r["head_dim"] == r["hidden"]
    # Llama 3 70B (hidden 8192, 64 heads, 8 KV heads, FFN 28672) cut over 4 tensor-parallel ranks
    assert mod.SHAPES["llama-3-70b-tp4"] == (8192, 64 // 4, 8 // 4, 28672 // 4, 128)


def test_unknown_case_is_refused(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "bench/measure_fused_layer.py"), "--out", str(tmp_path / "x"),
                          "--dry-run", "--cases", "llama-9:1:64"], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "unknown shape" in res.stderr and "llama-2-7b" in res.stderr


def test_fused_layer_computes_the_llama_layer():
    """The fused layer is the Hugging Face Llama layer's function: same weights, same output (CPU, float32)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    mod = load_bench("measure_fused_layer")
    row = mod.plan((("tiny", 2, 16),))
    fused_stack, fused = mod.build(torch, row[0], 1, "cpu", torch.float32)
    hf_stack, hf = mod.build(torch, row[1], 1, "cpu", torch.float32)
    a, f = hf_stack[0], fused_stack[0]
    with torch.no_grad():
        f.ln1.copy_(a.input_layernorm.weight)
        f.ln2.copy_(a.post_attention_layernorm.weight)
        f.qkv.weight.copy_(torch.cat([a.self_attn.q_proj.weight, a.self_attn.k_proj.weight, a.self_attn.v_proj.weight]))
        f.proj.weight.copy_(a.self_attn.o_proj.weight)
        f.fc1.weight.copy_(torch.cat([a.mlp.gate_proj.weight, a.mlp.up_proj.weight]))
        f.fc2.weight.copy_(a.mlp.down_proj.weight)
        x = torch.randn(2, 16, 256)
        assert torch.allclose(fused(x), hf(x), atol=1e-4, rtol=1e-4)


def _fake_measurements(tmp_path) -> Path:
    out = tmp_path / "plan.jsonl"
    subprocess.run([sys.executable, str(ROOT / "bench/measure_fused_layer.py"), "--out", str(out), "--dry-run"],
                   check=True, capture_output=True, timeout=120)
    fake = tmp_path / "fake.jsonl"
    lines = [json.dumps({"environment": {"device_name": "NVIDIA H100 80GB HBM3"}})]
    lines += [json.dumps(dict(json.loads(x), status="ok", layer_forward_s=1e-3, layer_step_s=3e-3))
              for x in out.read_text().splitlines()]
    fake.write_text("\n".join(lines) + "\n")
    return fake


def test_comparison_prices_each_variant_with_its_framework(tmp_path):
    acc = load_bench("fused_layer_accuracy")
    env, rows = acc.load(_fake_measurements(tmp_path))
    import gpumodel as gm

    res = acc.table(rows, gm.gpu(env["device_name"]))
    by = {(r["shape"], r["batch"], r["seq"], r["variant"]): r for r in res}
    f, h = by[("llama-2-7b", 1, 4096, "fused")], by[("llama-2-7b", 1, 4096, "hf")]
    # the GEMMs alone floor a layer's forward: 2 FLOPs a weight a token at the dense bf16 peak,
    # 2 x 4096 tokens x 202.4M weights (4 x 4096^2 + 3 x 4096 x 11008) / 989.4 TFLOP/s = 1.68 ms
    floor = 2 * 4096 * (4 * 4096**2 + 3 * 4096 * 11008) / 989.4e12
    assert f["model_forward_s"] > floor and h["model_forward_s"] > f["model_forward_s"]
    # fusion only removes memory-bound bytes: a fused layer is faster, never by more than its memory-bound share
    assert all(1.0 < r["speedup_model"] < 2.0 for r in res if "speedup_model" in r)
    assert f["step_error"] == pytest.approx(f["model_step_s"] / 3e-3 - 1)
    assert all(r["variant"] in ("fused", "hf") for r in res)     # the attention kernels alone are not layers


def test_dropout_ratio_pairs_the_attention_kernels():
    acc = load_bench("fused_layer_accuracy")
    rows = [dict(shape="s", batch=1, seq=4096, variant="attention", layer_step_s=2e-3),
            dict(shape="s", batch=1, seq=4096, variant="attention_dropout", layer_step_s=2.5e-3),
            dict(shape="s", batch=2, seq=4096, variant="attention", layer_step_s=4e-3)]   # no pair: left out
    assert acc.dropout_ratios(rows) == [dict(shape="s", batch=1, seq=4096, ratio=pytest.approx(1.25))]
