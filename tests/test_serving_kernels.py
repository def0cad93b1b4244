"""The serving kernel adapter: decode attention, KV write, weight-only matmuls, all-reduce."""

from __future__ import annotations

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.serving import kernels as K


def test_decode_attention_reads_the_cache():
    op = K.attention(8, 32, 1, 128, "bf16", kv_heads=8, kv_seq=4097)
    assert op.flops == pytest.approx(4 * 8 * 32 * 1 * 4097 * 128)            # 4 b h s_q s_kv d
    kv = 2 * 8 * 8 * 4097 * 128 * 2                                           # K and V, bf16
    q = 8 * 32 * 128 * 2
    assert op.bytes_read == pytest.approx(q + kv)
    fp8 = K.attention(8, 32, 1, 128, "bf16", kv_heads=8, kv_seq=4097, kv_dtype="fp8")
    assert fp8.bytes_read == pytest.approx(q + kv / 2)


def test_prefill_attention_is_the_ops_record():
    a = K.attention(2, 16, 512, 64, "bf16", causal=True, kv_heads=4)
    b = gm.ops.attention(2, 16, 512, 64, causal=True, kv_heads=4)
    assert a.flops == b.flops and a.bytes == b.bytes


def test_weight_only_matmul_streams_packed_weights():
    bf16 = K.matmul(1, 4096, 4096, "bf16")
    int8 = K.matmul(1, 4096, 4096, "bf16", "int8")
    int4 = K.matmul(1, 4096, 4096, "bf16", "int4", group_size=32)
    w = 4096 * 4096
    assert bf16.bytes_read - int8.bytes_read == pytest.approx(w * 2 - w * (1 + 2 / 128))
    assert int4.breakdown["b"] == pytest.approx(w * (0.5 + 4 / 32))        # nibble + scale and zero per 32
    assert int8.flops == bf16.flops                                          # 16-bit math either way


def test_kv_write_moves_new_tokens():
    ops = K.kv_cache_write(4, 8, 1, 128, "bf16", "fp8")
    # K and V: read bf16, write fp8; plus the int64 cache position of the one new token
    assert sum(float(o.bytes) for o in ops) == pytest.approx(2 * 4 * 8 * 128 * (2 + 1) + 8)
    assert [o.name for o in ops] == ["kv_cache_write"]


def test_adapter_uses_the_ops_records():
    dec = K.attention(8, 32, 1, 128, "bf16", kv_heads=8, kv_seq=4096)
    assert dec.shape["kv_seq"] == 4096 and dec.shape["seq"] == 1                 # the split-KV decode model
    mixed = K.attention(1, 32, np.array([1, 512]), 128, causal=np.array([False, True]), kv_seq=np.array([4096, 512]))
    assert mixed.shape["causal"] is True                                          # one query: the mask masks nothing
    assert K.matmul(1, 4096, 4096, "bf16", "int4").shape["weight_dtype"] == "int4"
    assert "weight_dtype" not in K.matmul(1, 4096, 4096, "bf16", "int8").shape   # a fused dequantising GEMM


def test_allreduce_is_nccls_on_one_node_by_hand():
    h100, a100 = gm.gpu("h100"), gm.gpu("a100")
    assert K.allreduce_time(1e6, 1, h100) == 0.0
    # one token's hidden state over 8 A100s (DGX A100: NVSwitch, 300 GB/s a direction, 80% of it as bus
    # bandwidth): NCCL's LL protocol, 6.6 us + 2 (8 - 1) x 0.6 us, at half the bandwidth for its bytes
    expect = 6.6e-6 + 14 * 0.6e-6 + 14 / 8 * 8192 / (0.8 * 300e9 * 0.5)
    assert K.allreduce_time(8192, 8, a100) == pytest.approx(expect)
    from gpumodel.cluster.collectives import system_collective_time
    assert K.allreduce_time(64e6, 8, h100) == system_collective_time("all_reduce", 64e6, "dgx-h100", 8)
    assert K.link_bandwidth(gm.gpu("l40s")) == 32e9                         # PCIe 4.0 x16, no NVLink
    big = K.allreduce_time(np.array([1e3, 1e9]), 4, h100)
    assert big.shape == (2,) and big[1] > 100 * big[0]
