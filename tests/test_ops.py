"""Op cost formulas: hand arithmetic, Brenndoerfer's (2026) worked numbers, properties and bad input.

Brenndoerfer (2026): M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores",
https://mbrenndoerfer.com/writing/gpu-architecture-memory-hierarchy-cuda-tensor-cores
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gpumodel as gm
from gpumodel import ops
from gpumodel.records.dtypes import UnknownDTypeError
from gpumodel.core.ops import DuplicateOpError, OpArgumentError, OpCost, UnknownOpError

sizes = st.integers(min_value=1, max_value=1 << 16)
dtypes = st.sampled_from(["fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4"])


# ------------------------------------------------------------------ hand arithmetic
def test_matmul_hand_arithmetic():
    op = ops.matmul(128, 256, 64, "bf16")
    assert op.flops == 2 * 128 * 256 * 64  # 2*m*n*k
    assert op.bytes_read == (128 * 64 + 64 * 256) * 2  # (m*k + k*n) * 2 bytes
    assert op.bytes_written == 128 * 256 * 2  # m*n * 2 bytes
    assert op.bytes == op.bytes_read + op.bytes_written
    assert op.unit == "tensor" and op.name == "matmul" and op.dtype is gm.DType.BF16
    assert op.breakdown["a"] + op.breakdown["b"] == op.bytes_read
    assert dict(op.shape) == {"m": 128, "n": 256, "k": 64}


def test_tf32_matmul_moves_fp32_data():
    op = ops.matmul(10, 10, 10, "tf32")
    assert op.bytes_read == (100 + 100) * 4  # tf32 is stored as fp32: 4 bytes


def test_fp8_matmul_reads_one_byte_and_writes_bf16():
    # torch._scaled_mm(a_fp8, b_fp8, out_dtype=torch.bfloat16): the output is 2 bytes an element
    op = ops.matmul(1024, 512, 64, "fp8")
    assert op.bytes_read == 1024 * 64 * 1 + 64 * 512 * 1
    assert op.bytes_written == 1024 * 512 * 2


def test_int4_matmul_has_no_integer_division_bug():
    op = ops.matmul(8, 8, 8, "int4")
    assert op.bytes_read == (64 + 64) * 0.5  # half a byte per element, never 0


def test_brenndoerfer_matmul_4096_intensity_over_bytes_read():
    # Brenndoerfer (2026): 2*4096^3 ~ 137e9 FLOP over ~64 MB read (two 4096^2 fp16 matrices) ~ 2,000+ FLOP/byte
    op = ops.matmul(4096, 4096, 4096, "fp16")
    assert op.flops == pytest.approx(137.4e9, rel=1e-3)
    assert op.bytes_read == 2 * 4096**2 * 2
    assert op.flops / op.bytes_read == 2048.0


def test_brenndoerfer_relu_4096_intensity_over_bytes_read():
    # Brenndoerfer (2026): ReLU on 4096x4096 fp16 reads 32 MB, ~16e6 FLOP -> 0.5 FLOP/byte
    op = ops.elementwise(4096 * 4096, "fp16")
    assert op.bytes_read == 4096**2 * 2
    assert op.flops / op.bytes_read == 0.5


def test_bmm_is_batch_times_matmul():
    one, many = ops.matmul(32, 48, 16, "fp16"), ops.bmm(12, 32, 48, 16, "fp16")
    for attr in ("flops", "bytes_read", "bytes_written"):
        assert getattr(many, attr) == 12 * getattr(one, attr)
    assert many.unit == "tensor" and many.shape["batch"] == 12


def test_elementwise_inputs_outputs():
    op = ops.elementwise(1000, "fp32", inputs=2, outputs=1, flops_per_element=3)  # a fused a*x + b style op
    assert (op.flops, op.bytes_read, op.bytes_written) == (3000, 2 * 1000 * 4, 1000 * 4)
    assert op.unit == "vector"


def test_softmax_and_norms_hand_arithmetic():
    r, c = 16, 1024
    sm = ops.softmax(r, c, "bf16")
    assert (sm.flops, sm.bytes_read, sm.bytes_written) == (5 * r * c, r * c * 2, r * c * 2)
    ln = ops.layer_norm(r, c, "bf16")
    assert ln.bytes_read == (r * c + 2 * c) * 2  # x + gamma + beta
    assert ln.bytes_written == r * c * 2 and ln.flops == 7 * r * c
    rms = ops.rms_norm(r, c, "bf16")
    assert rms.bytes_read == (r * c + c) * 2 and rms.flops == 4 * r * c  # x + gamma
    red = ops.reduce_sum(r, c, "fp32")
    assert (red.flops, red.bytes_read, red.bytes_written) == (r * c, r * c * 4, r * 4)


def test_embedding_and_cross_entropy_hand_arithmetic():
    emb = ops.embedding(4096, 32000, 4096, "bf16")
    assert emb.flops == 0
    assert emb.bytes_read == 4096 * 4096 * 2 + 4096 * 8  # gathered rows + int64 ids
    assert emb.bytes_written == 4096 * 4096 * 2
    ce = ops.cross_entropy(4096, 32000, "bf16")
    assert ce.bytes_read == 4096 * 32000 * 2 + 4096 * 8  # logits + int64 targets
    assert ce.bytes_written == 4096 * 2  # one loss per token
    assert ce.flops == 4 * 4096 * 32000


def test_attention_flash_forward_hand_arithmetic():
    b, h, s, d = 2, 16, 1024, 64
    op = ops.attention(b, h, s, d, dtype="fp16")
    assert op.flops == 4 * b * h * s * s * d  # QK^T and PV
    qkv = b * h * s * d * 2
    assert op.bytes_read == 3 * qkv  # Q, K, V
    assert op.bytes_written == qkv + b * h * s * 4  # O + fp32 log-sum-exp
    assert op.unit == "tensor"


def test_attention_conventions():
    b, h, s, d = 1, 8, 2048, 128
    fwd = ops.attention(b, h, s, d)
    assert ops.attention(b, h, s, d, causal=True).flops == fwd.flops / 2
    # FlashAttention-2 paper: backward = 2.5 x forward FLOPs (5 matmuls vs 2)
    assert ops.attention(b, h, s, d, backward=True).flops == 2.5 * fwd.flops
    assert ops.attention(b, h, s, d, impl="naive", backward=True).flops == 2 * fwd.flops


def test_naive_attention_moves_the_score_matrix():
    b, h, s, d = 1, 8, 2048, 128
    flash, naive = ops.attention(b, h, s, d), ops.attention(b, h, s, d, impl="naive")
    assert naive.flops == flash.flops
    score = b * h * s * s * 2  # one bf16 s x s matrix per head
    qkvo = 4 * b * h * s * d * 2
    assert naive.bytes == qkvo + 4 * score  # S written, read; P written, read
    # a causal mask does not shrink the materialised buffers
    assert ops.attention(b, h, s, d, causal=True, impl="naive").bytes == naive.bytes


def test_grouped_query_attention_reads_fewer_kv_bytes():
    mha = ops.attention(1, 32, 4096, 128)
    gqa = ops.attention(1, 32, 4096, 128, kv_heads=8)
    assert gqa.flops == mha.flops
    q = 32 * 4096 * 128 * 2
    assert mha.bytes_read - gqa.bytes_read == 2 * q * (1 - 8 / 32)  # K and V shrink 4x


def test_fuse_relu_dropout_reads_once_writes_once():
    relu = ops.elementwise(1 << 20, "fp16")
    dropout = ops.elementwise(1 << 20, "fp16", flops_per_element=2)
    fused = ops.fuse(relu, dropout)
    assert fused.bytes_read == relu.bytes_read and fused.bytes_written == dropout.bytes_written
    assert fused.flops == relu.flops + dropout.flops
    assert fused.name == "fused" and fused.parts == (relu, dropout)


def test_fuse_counts_extra_inputs_of_later_ops():
    n = 1000
    scale = ops.elementwise(n, "fp32")
    residual_add = ops.elementwise(n, "fp32", inputs=2)
    fused = ops.fuse(scale, residual_add)
    assert fused.bytes_read == n * 4 + n * 4  # scale's input + the residual; the intermediate stays on chip
    assert fused.bytes_written == n * 4


def test_fuse_matmul_epilogue_runs_on_tensor_cores():
    mm, bias_gelu = ops.matmul(512, 512, 512), ops.elementwise(512 * 512, inputs=1, flops_per_element=9)
    fused = ops.fuse(mm, bias_gelu)
    assert fused.unit == "tensor" and fused.bytes == mm.bytes


# ------------------------------------------------------------------ properties
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(sizes, sizes, sizes), min_size=1, max_size=6), dtypes)
def test_vector_call_equals_loop_of_scalars(shapes, dt):
    m, n, k = (np.array(c, dtype=float) for c in zip(*shapes))
    vec = ops.matmul(m, n, k, dt)
    for i, (mi, ni, ki) in enumerate(shapes):
        one = ops.matmul(mi, ni, ki, dt)
        assert isinstance(one.flops, float)
        assert (vec.flops[i], vec.bytes_read[i], vec.bytes_written[i]) == (one.flops, one.bytes_read, one.bytes_written)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(sizes, sizes, st.integers(16, 256)), min_size=1, max_size=4), st.booleans(),
       st.sampled_from(["flash", "naive"]), st.booleans())
def test_attention_vector_equals_loop(shapes, causal, impl, backward):
    b, s, d = (np.array(c, dtype=float) for c in zip(*shapes))
    vec = ops.attention(b, 4, s, d, causal=causal, impl=impl, backward=backward)
    for i, (bi, si, di) in enumerate(shapes):
        one = ops.attention(bi, 4, si, di, causal=causal, impl=impl, backward=backward)
        assert vec.bytes[i] == pytest.approx(one.bytes) and vec.flops[i] == pytest.approx(one.flops)


def _ai(op):
    return op.flops / op.bytes


unary = st.builds(lambda n, f: ops.elementwise(4096, "bf16", flops_per_element=n and f), st.integers(0, 1),
                  st.integers(1, 20))


@settings(max_examples=60, deadline=None)
@given(st.lists(unary, min_size=2, max_size=6))
def test_fused_unary_chain_intensity_at_least_each_part(chain):
    fused = ops.fuse(*chain)
    for part in chain:
        assert _ai(fused) >= _ai(part)


any_memory_op = st.one_of(
    st.builds(lambda n, i, f: ops.elementwise(n, "bf16", inputs=i, flops_per_element=f), sizes, st.integers(1, 3),
              st.integers(0, 10)),
    st.builds(lambda r, c: ops.softmax(r, c, "bf16"), st.integers(1, 512), st.integers(1, 512)),
    st.builds(lambda r, c: ops.rms_norm(r, c, "bf16"), st.integers(1, 512), st.integers(1, 512)),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(any_memory_op, min_size=2, max_size=5))
def test_fused_chain_never_moves_more_and_is_at_least_as_intense(chain):
    fused = ops.fuse(*chain)
    total_bytes = sum(op.bytes for op in chain)
    total_flops = sum(op.flops for op in chain)
    assert fused.flops == total_flops
    assert fused.bytes <= total_bytes
    assert _ai(fused) >= total_flops / total_bytes  # the unfused chain's intensity
    assert _ai(fused) >= min(_ai(op) for op in chain)


# ------------------------------------------------------------------ registry and record
def test_registry_duplicate_guard():
    with pytest.raises(DuplicateOpError, match="matmul"):
        ops.register("matmul")(lambda m: None)
    assert "matmul" in ops.list_ops()


def test_cost_by_name_and_unknown_op():
    assert ops.cost("matmul", 4, 5, 6, dtype="fp16").flops == 2 * 4 * 5 * 6
    with pytest.raises(UnknownOpError, match="matmal.*known ops: .*matmul"):
        ops.cost("matmal", 1, 2, 3)
    assert ops.size_arguments("bmm") == ["batch", "m", "n", "k"]


def test_opcost_is_frozen_and_validated():
    op = ops.matmul(2, 2, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.flops = 0
    with pytest.raises(OpArgumentError, match="flops"):
        OpCost("custom", "bf16", -1.0, 0.0, 0.0)
    with pytest.raises(OpArgumentError, match="unit"):
        OpCost("custom", "bf16", 1.0, 1.0, 1.0, unit="gpu")
    custom = OpCost("optimizer_step", "fp32", 10.0, 40.0, 20.0)
    assert custom.bytes == 60.0 and custom.dtype is gm.DType.FP32


def test_repr_and_html_say_what_the_op_is():
    op = ops.matmul(4096, 4096, 4096, "fp16")
    text = repr(op)
    assert "matmul fp16" in text and "m=4096" in text and "1365 FLOP/B" in text
    assert "<table>" in op._repr_html_()
    assert "configs 3" in repr(ops.matmul(np.array([1, 2, 3]), 4, 4))


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "many", [1, -2]])
def test_bad_sizes_name_the_argument(bad):
    with pytest.raises(OpArgumentError, match="^n must be"):
        ops.matmul(4, bad, 4)


def test_bad_dtype_impl_and_heads():
    with pytest.raises(UnknownDTypeError, match="fp9"):
        ops.matmul(4, 4, 4, "fp9")
    with pytest.raises(OpArgumentError, match="impl"):
        ops.attention(1, 8, 16, 16, impl="paged")
    with pytest.raises(OpArgumentError, match="kv_heads"):
        ops.attention(1, 8, 16, 16, kv_heads=3)
    with pytest.raises(OpArgumentError, match="causal"):
        ops.attention(1, 8, 16, 16, causal="yes")
    with pytest.raises(OpArgumentError, match="fuse"):
        ops.fuse()
    assert issubclass(OpArgumentError, ValueError) and issubclass(UnknownOpError, ValueError)


@pytest.mark.parametrize("op", [
    ops.matmul(64, 128, 32), ops.bmm(4, 64, 128, 32), ops.layer_norm(64, 512), ops.rms_norm(64, 512),
    ops.embedding(100, 32000, 256), ops.cross_entropy(100, 32000),
    *[ops.attention(2, 8, 256, 64, impl=i, backward=b, kv_heads=2) for i in ("flash", "naive") for b in (False, True)],
], ids=lambda op: op.label + (f" {op.shape.get('impl', '')} bwd={op.shape.get('backward', '')}"))
def test_breakdown_adds_up_to_the_traffic(op):
    assert sum(op.breakdown.values()) == pytest.approx(op.bytes)


def test_label_names_op_and_sizes():
    assert ops.matmul(4096, 4096, 4096).label == "matmul m=4096 n=4096 k=4096"


# ------------------------------------------------------------------ keyword-only flags, serving and training ops
def test_flags_are_keyword_only_and_dtype_is_the_fifth_argument():
    op = ops.attention(1, 32, 4096, 128, "bf16")                  # issue: this used to be read as causal="bf16"
    assert op.dtype.value == "bf16" and op.shape["causal"] is False
    with pytest.raises(TypeError):
        ops.attention(1, 32, 4096, 128, "bf16", True)              # flags are keyword-only
    with pytest.raises(TypeError):
        ops.matmul(4, 4, 4, "bf16", "int8")
    for bad in ("yes", 1, None):
        with pytest.raises(OpArgumentError, match="backward"):
            ops.cross_entropy(8, 100, backward=bad)
        with pytest.raises(OpArgumentError, match="backward"):
            ops.embedding(8, 100, 16, backward=bad)


def test_sizes_are_positive_integers():
    for bad in (0, 1.5, -3, True, "8"):
        with pytest.raises(OpArgumentError, match="tokens"):
            ops.kv_cache_write(1, 8, bad, 128)
    assert ops.matmul(np.int64(8), 8.0, 8).flops == 2 * 8**3


def test_decode_attention_reads_the_kv_cache():
    # Llama-3-8B decode: 32 query heads, 8 KV heads, 4096 cached tokens, batch 8, bf16
    op = ops.attention(8, 32, 1, 128, kv_heads=8, kv_seq=4096)
    kv = 2 * 8 * 8 * 4096 * 128 * 2                              # K and V: 128 MiB
    q = 8 * 32 * 1 * 128 * 2
    assert op.bytes_read == kv + q and op.flops == 4 * 8 * 32 * 1 * 4096 * 128
    # a causal chunk of 512 queries over 4096 keys: the queries see 3585..4096 keys, 1 - 512/(2*4096) of all
    chunk = ops.attention(1, 32, 512, 128, causal=True, kv_seq=4096)
    assert chunk.flops == pytest.approx(4 * 32 * 512 * 4096 * 128 * (1 - 512 / 8192))
    with pytest.raises(OpArgumentError, match="kv_seq"):
        ops.attention(1, 32, 512, 128, causal=True, kv_seq=256)
    with pytest.raises(OpArgumentError, match="dropout"):
        ops.attention(1, 8, 64, 64, impl="naive", dropout=1.0)


def test_weight_only_matmul_reads_the_packed_weight():
    m, n, k = 1, 4096, 4096
    bf16 = ops.matmul(m, n, k)
    int8 = ops.matmul(m, n, k, weight_dtype="int8")
    int4 = ops.matmul(m, n, k, weight_dtype="int4")
    assert int8.breakdown["b"] == n * k + 2 * n                    # one byte a weight + a bf16 scale per channel
    assert int4.breakdown["b"] == n * k / 2 + 2 * 2 * n * k / 128  # half a byte + scale and zero per 128 weights
    assert int8.flops == bf16.flops and int4.shape["weight_dtype"] == "int4"
    with pytest.raises(OpArgumentError, match="weight_dtype"):
        ops.matmul(m, n, k, weight_dtype="int3")


def test_adamw_and_kv_cache_write_costs():
    op = ops.adamw_step(10**6, "bf16", tensors=10)
    assert (op.bytes_read, op.bytes_written) == (4 * 2e6, 3 * 2e6)  # p, g, m, v in; p, m, v out (bf16)
    kv = ops.kv_cache_write(4, 8, 16, 128, "fp16")
    assert kv.bytes_written == 2 * 4 * 8 * 16 * 128 * 2
    assert {"adamw_step", "kv_cache_write"} <= set(ops.list_ops())


def test_backward_costs_of_embedding_and_cross_entropy():
    bwd = ops.embedding(4096, 32000, 4096, "bf16", backward=True)
    assert bwd.bytes_written == 32000 * 4096 * 2                   # the dense table gradient
    ce = ops.cross_entropy(4096, 32000, "bf16", backward=True)
    assert ce.bytes_written == 4096 * 32000 * 2 and ce.shape["upcast"] is True


def test_docstrings_name_the_article_their_examples_come_from():
    # "the seed's example" means nothing to a reader: an example from the article names it
    import re
    from pathlib import Path

    text = Path(ops.__file__).read_text(encoding="utf-8")
    assert not re.search(r"\bthe seed'?s?\b", text, flags=re.IGNORECASE)
    assert "Brenndoerfer" in ops.matmul.__doc__ and "Brenndoerfer" in ops.fuse.__doc__
