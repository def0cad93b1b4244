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


def test_flush_writeback_by_hand():
    """0.62 of the H100's 50 MiB L2 at most, reached on the scale of 61 MB touched, written back at 3 TB/s:
    a 117.5 MB GEMV: 0.62 x 52,428,800 x (1 - e^(-117.5/61)) / 3e12 = 9.3 us; 1 GB: 10.8 us; nothing touched: 0."""
    h100 = gm.gpu("h100")
    t = K.flush_writeback_s(np.array([0.0, 117.5e6, 1e9]), h100, 3.0e12)
    cap = 0.62 * 52_428_800 / 3.0e12
    assert t[0] == 0.0
    assert t[1] == pytest.approx(cap * (1 - np.exp(-117.5 / 61)), rel=1e-9) and t[1] == pytest.approx(9.3e-6, abs=0.05e-6)
    assert t[2] == pytest.approx(cap, rel=1e-6)
    # the H200's 60 MiB L2 leaves more to write back
    assert K.flush_writeback_s(1e9, gm.gpu("h200"), 3.0e12) > t[2]


def test_clean_l2_saving_decode_all_of_it_long_prefill_none():
    """A decode GEMV writes a few rows: it saves the whole write-back; a prefill's elementwise op over 8192 x 14336
    bf16 values writes 235 MB, more than the L2's share: it saves none; in between, in proportion."""
    h100 = gm.gpu("h100")
    gemv = gm.ops.matmul(1, 14336, 4096)
    assert K.written_bytes(gemv) == pytest.approx(1 * 14336 * 2)
    assert K.clean_l2_saving_s(gemv, h100, 3e12) == pytest.approx(
        K.flush_writeback_s(gemv.bytes, h100, 3e12) * (1 - 28672 / (0.62 * h100.l2_bytes)))
    big = gm.ops.elementwise(8192 * 14336, inputs=2, outputs=1)
    assert K.written_bytes(big) == pytest.approx(8192 * 14336 * 2)
    assert K.clean_l2_saving_s(big, h100, 3e12) == 0.0
    half = gm.ops.elementwise(int(0.31 * h100.l2_bytes / 2), inputs=1, outputs=1)   # writes half the share
    assert K.clean_l2_saving_s(half, h100, 3e12) == pytest.approx(
        0.5 * K.flush_writeback_s(half.bytes, h100, 3e12), rel=1e-3)
