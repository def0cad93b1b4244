"""Composite ops are the sums of the kernels PyTorch launches; flash attention splits the keys when tiles are few."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pathlib import Path

import gpumodel as gm
from gpumodel.calibration.attention import bwd_side_bytes, flash_tiles, num_splits
from gpumodel.calibration.composite import MTA_CHUNK
from gpumodel.calibration.model import CalibrationModel, default_parameters, predict, predicted_ops, queued


@pytest.fixture(scope="module")
def model():
    return CalibrationModel(default_parameters(gm.gpu("h200")), 132, calibrated=False, gpu="h200")


def t(model, op):
    return float(predict(model, op).time_s)


def queued_saving(p, kernels):
    """What ``kernels`` kernels of one call save over as many lone launches: the later ones start after
    ``kernel_gap_s``, not ``launch_s``."""
    return (kernels - 1) * (p["launch_s"] - p["kernel_gap_s"])


def test_queued_kernels_cost_a_launch_then_gaps(model):
    p = model.params
    assert p["kernel_gap_s"] < p["launch_s"]                          # the defaults: 1.5 us after a 4 us launch
    assert float(queued(p, 1)) == p["launch_s"]
    assert float(queued(p, 4)) == pytest.approx(p["launch_s"] + 3 * p["kernel_gap_s"], rel=1e-12)
    assert float(queued({"launch_s": 4e-6}, 3)) == pytest.approx(12e-6)   # a record without the gap: lone launches


def test_every_op_has_a_time_model():
    assert set(gm.ops.list_ops()) <= set(predicted_ops())


def test_model_reads_the_gpu_record():
    h200 = CalibrationModel(default_parameters(gm.gpu("h200")), 132, gpu="h200")
    ada = CalibrationModel(default_parameters(gm.gpu("4090")), 128, gpu=gm.gpu("4090"))
    bare = CalibrationModel(default_parameters(gm.gpu("h200")), 132)
    assert (h200.threads_per_sm, ada.threads_per_sm, bare.threads_per_sm) == (2048, 1536, 2048)  # spec records
    assert h200.smem_per_block == 48 * 1024 and ada.replace(launch_s=1e-6).gpu is ada.gpu


def test_split_kv_heuristic_by_hand():
    # 64 tiles on 132 SMs, 32 key blocks: 1 split fills 48% of a wave, 2 splits 97%: the first within 85% of the best
    assert float(num_splits(64, 132, 32)) == 2
    assert float(num_splits(106, 132, 32)) == 1          # >= 0.8 * 132 tiles: no split
    assert float(num_splits(8, 132, 4)) == 4             # never more splits than key blocks
    # GQA decode packs the 4 query heads of a KV head into one tile of cuDNN's decode kernel: 8 * 8 tiles,
    # each split in 4 (the largest power of two with 64 * s <= 2 blocks x 132 SMs; 32 key blocks allow it)
    k = flash_tiles(gm.ops.attention(8, 32, 1, 128, kv_heads=8, kv_seq=4096), 132)
    assert (float(k["rows"]), float(k["splits"]), float(k["tiles"])) == (4.0, 4.0, 256.0)
    # a chunk of 64 queries runs FlashAttention-2, whose heuristic counts 2 x 132 slots: 8 tiles of 64 rows
    # over 32 key blocks -> 32 splits fill 256 of 264 (97%), the first within 85% of that
    chunk = flash_tiles(gm.ops.attention(1, 8, 64, 128, kv_seq=4096, causal=True), 132)
    assert float(chunk["splits"]) == 32 and not bool(chunk["decode"])


def test_split_counts_match_the_profiled_grids():
    """Every decode and chunk forward profiled on the H200 (tests/data/calibration/profile*.jsonl): the model's
    split count is the grid's (cuDNN's decode kernel: grid x; FlashAttention-2's split-KV kernel: grid y)."""
    import json

    data = Path(__file__).parent / "data" / "calibration"
    checked = 0
    for line in (line for path in sorted(data.glob("profile*.jsonl")) for line in path.read_text().splitlines()[1:]):
        pt = json.loads(line)
        s = pt["shape"]
        if pt["op"] != "attention" or s.get("backward") or s.get("impl", "flash") != "flash" or \
                s.get("kv_seq", s["seq"]) <= s["seq"]:
            continue
        main = next(k for k in pt["kernels"] if "fprop" in k["name"] or "flash_fwd" in k["name"])
        if "splitkv" in main["name"]:
            profiled = main["grid"][1]
        elif "fprop" in main["name"]:
            profiled = main["grid"][0]
        else:
            profiled = 1
        op = gm.ops.attention(s["batch"], s["heads"], s["seq"], s["head_dim"], kv_heads=s["kv_heads"],
                              kv_seq=s["kv_seq"], causal=s["causal"])
        assert float(flash_tiles(op, 132)["splits"]) == profiled, s
        checked += 1
    assert checked >= 100


def _side_kernel_ratios(path, bandwidth):
    """Profiled time of a flash backward's ``dot(dO, O)`` and dQ conversion over ``bwd_side_bytes / bandwidth``."""
    import json

    ratios = []
    for line in path.read_text().splitlines()[1:]:
        pt = json.loads(line)
        s = pt["shape"]
        if pt["op"] != "attention" or not s.get("backward") or s.get("impl", "flash") != "flash":
            continue
        side_s = 1e-6 * sum(k["dur_us"] for k in pt["kernels"] if "dot_do_o" in k["name"] or "convert_dq" in k["name"])
        ratios.append(side_s * bandwidth / float(bwd_side_bytes(gm.ops.attention(**s, dtype=pt["dtype"]))))
    return np.array(ratios)


def test_backward_side_kernels_stream_their_bytes_on_the_h200_and_the_h100():
    """The profiler's ``dot(dO, O)`` and ``convert_dq_to_16bits`` kernels, every flash backward profiled on the
    H200 (held-out, round 6) and the H100 (round 7): their time follows the bytes they move over each GPU's
    bandwidth (fitted on the H200, transferred to the H100), by the same factor on both (launch and tail)."""
    from gpumodel.calibration.record import calibration_for
    from gpumodel.calibration.transfer import transfer

    data = Path(__file__).parent / "data" / "calibration"
    h200 = np.concatenate([_side_kernel_ratios(data / f, calibration_for("h200").parameters["bandwidth"])
                           for f in ("profile_heldout.jsonl", "profile_round6.jsonl")])
    h100 = _side_kernel_ratios(data / "h100" / "profile_round7.jsonl", transfer("h100").model.params["bandwidth"])
    assert len(h200) >= 50 and len(h100) >= 25
    assert 1.0 < np.median(h200) < 1.3 and 1.0 < np.median(h100) < 1.3     # measured: 1.17, 1.15
    assert np.median(h100) == pytest.approx(np.median(h200), rel=0.1)   # the H100's 30% less bandwidth carries


def test_backward_pays_its_side_kernels_in_series(model):
    op = gm.ops.attention(4, 24, 1024, 128, causal=True, backward=True)
    no_side = dataclasses.replace(model, params={**model.params, "bandwidth": 1e30})
    assert t(model, op) - t(no_side, op) == pytest.approx(float(bwd_side_bytes(op)) / model.params["bandwidth"], rel=1e-9)


def test_square_forward_is_a_memset_and_cudnns_kernel_without_splits(model):
    """The profiler on the H200: a square SDPA forward launches a Memset and cuDNN's fprop kernel, whatever its
    tiles; only queries over a longer cache (FlashAttention-2) split the keys."""
    few = gm.ops.attention(1, 8, 1024, 128)                          # 8 heads x 8 query tiles: half a wave
    assert float(flash_tiles(few, 132)["splits"]) == 1 and float(flash_tiles(few, 132)["tiles"]) == 64
    assert float(predict(model, few).overhead_s) == pytest.approx(float(queued(model.params, 2)), rel=1e-12)
    chunk = gm.ops.attention(1, 8, 64, 128, kv_seq=4096, causal=True)   # 8 tiles of 64 rows: split
    assert float(flash_tiles(chunk, 132)["splits"]) > 1


def test_decode_is_bound_by_the_kv_cache_and_the_busy_sms(model):
    p = model.params
    op = gm.ops.attention(1, 32, 1, 128, kv_heads=8, kv_seq=32768)   # 8 tiles, 128 splits max -> all SMs
    kv_read = float(op.bytes) / p["bandwidth"]
    assert kv_read < t(model, op) < kv_read + 20e-6
    few = gm.ops.attention(1, 8, 1, 128, kv_seq=256)                  # 8 tiles, 2 key blocks: 16 SMs busy
    assert t(model, few) > p["launch_s"] + float(few.bytes) / (16 * p["sm_bandwidth"])


def test_naive_attention_is_the_sum_of_its_kernels(model):
    b, h, s, d = 2, 8, 1024, 64
    bh, n = b * h, b * h * s * s
    p = model.params
    fwd = gm.ops.attention(b, h, s, d, impl="naive", causal=True)
    parts = [gm.ops.bmm(bh, s, s, d), gm.ops.elementwise(n), gm.ops.softmax(bh * s, s), gm.ops.bmm(bh, s, d, s),
             gm.ops.elementwise(n)]                                    # QK^T, scale, softmax, PV, the scores' copy
    fill = gm.ops.elementwise(n)                                      # masked_fill_ over the broadcast mask:
    fill_s = t(model, gm.ops.elementwise(n, strided=True))           # a strided kernel: its traffic against
    launch = p["launch_s"] + 4 * p["strided_step_s"]                   # its issue time, overlapping partly
    #                                                                 (plus the chain of a thread's 4 elements)
    issue = n / p["strided_elem_rate"] + 2 * n / p["strided_operand_rate"] + n / p["vector_flops"]
    traffic = float(fill.bytes) / (p["bandwidth"] * p["bw_eff_elementwise"])
    q = p["strided_overlap_p"]
    assert fill_s == pytest.approx(launch + (issue ** q + traffic ** q) ** (1 / q))
    assert fill_s > launch + max(issue, t(model, fill) - p["launch_s"])
    assert t(model, fwd) == pytest.approx(sum(t(model, x) for x in parts) + fill_s - queued_saving(p, 6), rel=1e-12)
    plain = gm.ops.attention(b, h, s, d, impl="naive")
    assert t(model, fwd) - t(model, plain) == pytest.approx(t(model, parts[-1]) + fill_s - queued_saving(p, 3), rel=1e-9)
    drop = gm.ops.attention(b, h, s, d, impl="naive", causal=True, dropout=0.1)
    assert t(model, drop) > t(model, fwd)
    assert t(model, gm.ops.attention(b, h, s, d, impl="naive", causal=True, backward=True)) > t(model, fwd)


def test_naive_attention_backward_is_its_kernels_alone(model):
    """No host floor: a tiny backward costs its ~10 kernels' launches, not autograd's ~0.1-0.5 ms walk."""
    p = model.params
    tiny = gm.ops.attention(1, 1, 64, 64, impl="naive", backward=True)
    assert float(queued(p, 8)) < t(model, tiny) < float(queued(p, 20))
    big = gm.ops.attention(1, 32, 4096, 128, impl="naive", backward=True)
    assert t(model, big) > 10 * t(model, tiny)


def test_bmm_with_a_128_edge_streams(model):
    """``bmm(32, 2048, 2048, 128)`` (measured 89 us on the H200, 3.4 TB/s of its 302 MB) runs as a stream."""
    from gpumodel.calibration.gemm import BMM_STREAM_MAX_EDGE

    p = model.params
    op = gm.ops.bmm(32, 2048, 2048, 128)
    stream = p["launch_s"] + p["stream_overhead_s"] + max(float(op.bytes) / (p["bandwidth"] * p["bw_eff_stream"]),
                                                          float(op.flops) / p["flops_bf16"])
    assert BMM_STREAM_MAX_EDGE == 128
    assert t(model, op) <= stream * (1 + 1e-12)
    assert t(model, gm.ops.matmul(2048, 2048, 128)) >= t(model, gm.ops.bmm(1, 2048, 2048, 128))


def test_a_gemm_within_one_row_of_tiles_streams_its_weights():
    """A served batch's projection (m = 128 tokens, a 24576 x 6144 bf16 weight of 302 MB; measured 84 us on the
    H200, 3.6 TB/s) reads its weights once: the largest tile (256) covers m, so it may run as a stream."""
    from gpumodel.calibration import calibration_for
    from gpumodel.calibration.gemm import STREAM_MAX_EDGE, TILES

    model = calibration_for("h200").model()
    p = model.params
    assert STREAM_MAX_EDGE == 256 == max(max(tile) for tile in TILES)
    op = gm.ops.matmul(128, 24576, 6144)
    stream = p["launch_s"] + p["stream_overhead_s"] + max(float(op.bytes) / (p["bandwidth"] * p["bw_eff_stream"]),
                                                          float(op.flops) / p["flops_bf16"])
    assert t(model, op) <= stream * (1 + 1e-12)
    assert float(op.bytes) / t(model, op) > p["bandwidth"] * p["bw_eff_gemm"]   # above the tiled traffic rate
    assert t(model, gm.ops.matmul(257, 24576, 6144)) > t(model, op)               # past one row of tiles


def test_cross_entropy_is_cast_log_softmax_and_one_block_nll(model):
    tokens, vocab, p = 4096, 32000, model.params
    fwd = gm.ops.cross_entropy(tokens, vocab, "bf16")                 # logits cast to fp32 first
    n, bw = tokens * vocab, p["bandwidth"]
    cast = p["launch_s"] + n * (2 + 4) / (bw * p["bw_eff_cast_copy"])  # unrolled copy: 2 B read, 4 B written
    # cunn_SoftMaxForward over 128 KB fp32 rows (no shared-memory copy): three row reads and one write;
    # beside it 4096 / (132 SMs x 2 blocks) = 16 waves of 3 passes x ceil(32000 / 4096) = 8 loads a thread
    stream = 4 * n * 4 / (bw * p["bw_eff_log_softmax"])
    lat = 16 * (p["block_sync_s"] + 3 * 8 * p["mem_latency_s"])
    nll = p["launch_s"] + tokens / 32 * p["nll_step_s"]              # 32 threads walk 4096 targets: 128 steps
    want = cast + p["launch_s"] + max(stream, lat) + nll - queued_saving(p, 3)    # three kernels, queued
    assert t(model, fwd) == pytest.approx(want, rel=1e-12)
    no_cast = gm.ops.cross_entropy(tokens, vocab, "bf16", upcast=False)
    assert t(model, no_cast) < t(model, fwd)
    assert t(model, gm.ops.cross_entropy(tokens, vocab, "fp32")) == t(model, gm.ops.cross_entropy(
        tokens, vocab, "fp32", upcast=False))                        # fp32 logits: nothing to cast
    # backward: the same log-softmax kernel shape plus a zero fill of the logits' gradient
    assert t(model, gm.ops.cross_entropy(tokens, vocab, "bf16", upcast=False, backward=True)) > t(model, no_cast)


def test_cross_entropy_backward_of_few_tokens_is_its_launches(model):
    """No host floor: 8000 logits take the four kernels' launches (zero, NLL, log-softmax, cast back) and little more."""
    p = model.params
    small = gm.ops.cross_entropy(8, 1000, "bf16", backward=True)
    assert float(queued(p, 4)) < t(model, small) < float(queued(p, 4)) + 10e-6


def test_embedding_backward_writes_the_whole_table(model):
    small = gm.ops.embedding(512, 128256, 4096, "bf16", backward=True)
    zero = t(model, gm.ops.elementwise(128256 * 4096, "bf16", inputs=0, outputs=1, flops_per_element=0))
    assert t(model, small) > zero > t(model, gm.ops.embedding(512, 128256, 4096, "bf16"))


def test_embedding_backward_feature_kernel_runs_two_blocks_per_sm(model):
    # 5120 / 32 = 160 blocks of 1024 threads fit 132 SMs x 2 at once: one wave, as 4096 / 32 = 128 blocks
    wide, narrow = (gm.ops.embedding(1024, 32000, h, "bf16", backward=True) for h in (5120, 4096))
    zero = lambda h: t(model, gm.ops.elementwise(32000 * h, "bf16", inputs=0, outputs=1, flops_per_element=0))  # noqa: E731
    assert t(model, wide) - zero(5120) == pytest.approx(t(model, narrow) - zero(4096), rel=1e-12)


def test_embedding_backward_segments_run_at_an_element_rate(model):
    p = model.params
    ops = [gm.ops.embedding(tok, 32000, 4096, "bf16", backward=True) for tok in (16384, 32768)]
    slope = (t(model, ops[1]) - t(model, ops[0])) / (16384 * 4096)  # [s] per gradient element
    rows = (2 * 2 + 8) / (p["bandwidth"] * p["bw_eff_embedding"])   # its bytes: bf16 in and out, fp32 partials
    assert slope == pytest.approx(max(1 / p["embedding_segment_rate"], rows + 16 / 4096 / (
        p["bandwidth"] * p["bw_eff_embedding"])), rel=1e-9)


def test_adamw_launches_one_kernel_per_320_chunks(model):
    p = model.params
    op = gm.ops.adamw_step(10**9, "fp32", tensors=290)
    chunks = np.ceil(1e9 / MTA_CHUNK) + 289                           # 15259 + a chunk start per extra tensor
    launches = np.ceil(chunks / 320) + np.ceil(290 / 110)              # 49 fused launches + 3 step-counter ones
    assert float(predict(model, op).overhead_s) == pytest.approx(p["launch_s"] + (launches - 1) * p["kernel_gap_s"])
    stream = 28e9 / (p["bandwidth"] * p["bw_eff_adamw_step"])         # 7 fp32 words a parameter
    assert t(model, op) == pytest.approx(stream + float(queued(p, launches)), rel=0.05)


def test_bf16_adamw_is_bound_by_its_element_rate(model):
    p = model.params
    fp32, bf16 = (gm.ops.adamw_step(2**27, dt, tensors=1) for dt in ("fp32", "bf16"))
    rate = 2**27 / p["adamw_elem_rate"]                               # 4 elements a thread and step
    assert t(model, bf16) >= rate and t(model, bf16) > 0.5 * t(model, fp32)


def test_kv_cache_write_is_two_index_copies(model):
    p = model.params
    small = gm.ops.kv_cache_write(8, 8, 16, 128)
    n = 8 * 8 * 16 * 128                                              # 131072 elements each of K and V
    half = gm.ops.elementwise(n, "bf16")
    # each index_copy_ is a copy of n elements, unless its element rate (index arithmetic, no vector loads) is slower,
    # after two dependent loads (the index, then the element)
    body = max(t(model, half) - p["launch_s"], n / p["index_copy_rate"]) + 2 * p["mem_latency_s"]
    assert t(model, small) == pytest.approx(2 * (p["launch_s"] + body) - queued_saving(p, 2))
    big = gm.ops.kv_cache_write(64, 8, 4096, 128)                     # 268M elements each
    assert t(model, big) == pytest.approx(float(queued(p, 2)) + 2 * (64 * 8 * 4096 * 128 / p["index_copy_rate"]
                                                                      + 2 * p["mem_latency_s"]))


@pytest.mark.parametrize("w", ["int8", "int4", "fp8"])
def test_weight_only_decode_is_faster_than_bf16_for_big_weights(model, w):
    big = (1, 28672, 8192)
    if w == "int8":  # PyTorch's weight_int8pack_mm: an fp32 CUDA-core kernel, slower than the bf16 GEMM
        assert t(model, gm.ops.matmul(*big, weight_dtype=w)) > t(model, gm.ops.matmul(*big))
    else:
        assert t(model, gm.ops.matmul(*big, weight_dtype=w)) < 2 * t(model, gm.ops.matmul(*big))


def test_int8_weight_only_is_casts_and_the_int8pack_kernel(model):
    p = model.params
    m, n, k = 16, 6144, 4096
    op = gm.ops.matmul(m, n, k, weight_dtype="int8")
    casts = [gm.ops.elementwise(m * k, "fp32", inputs=0.5, outputs=1), gm.ops.elementwise(n, "fp32", inputs=0.5),
             gm.ops.elementwise(m * n, "bf16", inputs=2, outputs=1)]                 # x, scales to fp32; out to bf16
    stream = (n * k + 2 * n + m * k * 2 + m * n * 2) / (p["bandwidth"] * p["bw_eff_int8_mm"])
    math = 2 * m * n * k / p["flops_int8_mm"]
    q = p["overlap_p"]
    kernel = p["launch_s"] + max(stream, math) * ((min(stream, math) / max(stream, math)) ** q + 1) ** (1 / q)
    assert t(model, op) == pytest.approx(sum(t(model, c) for c in casts) + kernel - queued_saving(p, 4))
    assert float(predict(model, op).overhead_s) == pytest.approx(float(queued(p, 4)))  # four kernels, as profiled


#: families whose model launches exactly the kernels the profiler recorded for every profiled call
EXACT_KERNEL_COUNTS = ("adamw_step", "attention_bwd", "attention_decode", "attention_fwd", "elementwise", "embedding",
                       "kv_cache_write", "layer_norm", "rms_norm", "softmax")
#: where the model's kernel count differs from the profiler's, and why: kernels it leaves out (PyTorch's paths for
#: rare shapes, Memsets of workspaces) ...
KERNEL_COUNT_GAPS = {
    "reduce_sum": "a Memset before a reduction split over blocks of one row",
    "cross_entropy": "tensors over 2^31 elements run as several kernels", "cross_entropy_bwd": "the same",
    "embedding_bwd": "the sorting path's radix sort and segment kernels (about 30)",
    "matmul_weight_only": "the dynamic fp8 recipe's Memset",
}
#: ... and families with GEMMs, whose split-K reduce kernel follows the model's choice of tiles and splits, not
#: cuBLAS's (which also puts a Memset before its persistent and serial split-K kernels)
GEMM_CHOICE = ("matmul", "bmm", "attention_naive_fwd", "attention_naive_bwd")


def test_kernel_counts_match_the_profiler():
    """Every profiled call (tests/data/calibration/profile*.jsonl): the model's ``kernels`` is the number of kernels
    PyTorch launched in every family of EXACT_KERNEL_COUNTS; in KERNEL_COUNT_GAPS it leaves out only the kernels
    named there (never counts more than were launched); with GEMMs it agrees on most calls."""
    import json

    from gpumodel.calibration.fit import point_set
    from gpumodel.calibration.record import calibration_for

    data = Path(__file__).parent / "data" / "calibration"
    rows = [json.loads(line) for path in sorted(data.glob("profile*.jsonl")) for line in path.read_text().splitlines()[1:]]
    ps = point_set([{**r, "time_s": 1.0} for r in rows if r.get("kernels")])
    model = calibration_for("h200-sxm").model()
    fams = ps.families()
    agree: dict[str, list] = {}
    for _, op, _, idx in ps.groups:
        counted = np.broadcast_to(predict(model, op).kernels, idx.shape)
        launched = np.array([len(ps.points[i]["kernels"]) for i in idx])
        fam = fams[idx[0]]
        if fam in EXACT_KERNEL_COUNTS:
            assert np.array_equal(counted, launched), (fam, ps.points[idx[0]]["shape"])
        elif fam in KERNEL_COUNT_GAPS:
            assert np.all((counted >= 1) & (counted <= launched)), (fam, ps.points[idx[0]]["shape"])
        else:
            assert fam in GEMM_CHOICE, fam
            agree.setdefault(fam, []).extend(counted == launched)
    # measured: matmul 931 of 1482 calls, bmm 116 of 195, naive attention 12 of 24 and 18 of 46 (its backward's
    # GEMMs: cuBLAS's Memsets and split-K reduce kernels, which the model's tile and split choice does not follow)
    assert all(np.mean(v) > 0.35 for v in agree.values()), {k: np.mean(v) for k, v in agree.items()}


def test_fp32_data_gemms_never_stream(model):
    """cuBLAS tiles tf32 GEMMs however thin (the profiler: ``sm90_xmma_..._tilesize64x128x32`` for 13440 x 192 x
    2880): no streaming candidate, so the tiled compute time is what the estimate carries; bf16 of the same shape
    streams (compute 0)."""
    thin = (13440, 192, 2880)
    assert float(predict(model, gm.ops.matmul(*thin, "tf32")).compute_s) > 0
    assert float(predict(model, gm.ops.matmul(*thin, "bf16")).compute_s) == 0


def test_fitted_nvjet_tiles_spare_the_padding_of_odd_row_counts(model):
    """288 rows: power-of-two tiles pad to 384 or 512 (the measured 288 x 28672 x 8192 ran a 384 x 96 nvjet tile);
    a fitted 144-row edge covers them in two tiles, so 288 rows cost less than 2 x 128 + 1 tile and at most 384 rows."""
    from gpumodel.calibration.gemm import NVJET_EDGES, NVJET_MAX_AREA, _fitted_edge

    assert int(_fitted_edge(np.float64(288), NVJET_MAX_AREA / 256)) == 144      # 288 / ceil(288 / 160)
    assert int(_fitted_edge(np.float64(200), NVJET_MAX_AREA / 128)) == 200      # one tile of 200 (<= 320)
    assert NVJET_EDGES == (64, 128, 192, 256)
    t288, t384 = t(model, gm.ops.matmul(288, 28672, 8192)), t(model, gm.ops.matmul(384, 28672, 8192))
    assert t288 < t384
    # unaligned operands keep the CUTLASS tiles: the fitted edges are never theirs
    assert t(model, gm.ops.matmul(288, 28673, 8192)) > t(model, gm.ops.matmul(288, 28672, 8192))


def test_strided_elementwise_costs_an_offset_per_operand(model):
    """The generic kernel's issue time grows with its operands; fp32 traffic adds partly (a soft maximum) to it."""
    p = model.params
    n = 2**25
    two = t(model, gm.ops.elementwise(n, "bf16", inputs=1, outputs=1, flops_per_element=0, strided=True))
    three = t(model, gm.ops.elementwise(n, "bf16", inputs=2, outputs=1, flops_per_element=0, strided=True))
    # by hand: the third operand adds n / strided_operand_rate of issue time, of which the soft maximum keeps part
    assert 0 < three - two <= n / p["strided_operand_rate"] + (2**25 * 2) / p["bandwidth"]
    f32 = t(model, gm.ops.elementwise(n, "fp32", inputs=1, outputs=1, flops_per_element=0, strided=True))
    issue = n / p["strided_elem_rate"] + 2 * n / p["strided_operand_rate"]
    traffic = 2 * n * 4 / (p["bandwidth"] * p["bw_eff_elementwise"])
    assert f32 > max(issue, traffic) + p["launch_s"]            # both limits at once: slower than either alone
    assert f32 <= issue + traffic + p["launch_s"] + 2 * p["strided_step_s"] + 1e-12   # fp32: 2 elements a thread


@pytest.mark.parametrize("heads,tiles_per_head", [(1, 24), (8, 32), (12, 12), (64, 5), (40, 28)])
def test_causal_tail_matches_a_simulated_greedy_schedule(heads, tiles_per_head):
    """``max(longest, average + LIST_SCHEDULE_TAIL x longest)`` against a greedy list schedule of the ramps on 132
    SMs (each free SM takes the next tile), for ramps of more tiles than SMs."""
    import heapq

    from gpumodel.calibration.attention import LIST_SCHEDULE_TAIL

    work = np.tile(np.arange(tiles_per_head) + 0.55, heads)
    if work.size <= 132:
        pytest.skip("one wave: the longest tile alone")
    free = [0.0] * 132
    for w in work:
        heapq.heappush(free, heapq.heappop(free) + w)
    simulated = max(free)
    approx = max(work.max(), work.sum() / 132 + LIST_SCHEDULE_TAIL * work.max())
    assert approx == pytest.approx(simulated, rel=0.1)


def test_causal_square_forward_pays_its_tail(model):
    """1 x 8 x 4096 x 64 causal (256 ramped tiles on 132 SMs; measured 69.5 us, its non-causal twin about 1.7x):
    the causal forward costs more than half the non-causal one, by the tail of its schedule."""
    causal = t(model, gm.ops.attention(1, 8, 4096, 64, causal=True))
    full = t(model, gm.ops.attention(1, 8, 4096, 64, causal=False))
    assert 0.5 * full < causal < full


def test_small_unaligned_gemms_run_the_wmma_tile():
    """cuBLAS runs small GEMMs with 4- or 8-byte-aligned bf16 (and fp16, tf32) operands as 32 x 32 wmma tiles, five
    resident a SM; 2-byte-aligned bf16 has no wmma kernel and keeps the 64 x 64 Turing tile (the profiler on the H200)."""
    from gpumodel.calibration.gemm import WMMA_CTAS_PER_SM, WMMA_TILE
    from gpumodel.calibration.record import calibration_for

    cal = calibration_for("h200").model()
    p, P = cal.params, 132.0
    # by hand: 20 x 338 x 84 bf16 (k * 2 = 168 bytes: 8-byte aligned) is ceil(20/32) * ceil(338/32) = 11 tiles of
    # 32 x 32, one resident wave: a fixed time, then each tile's 2 * 32 * 32 * 84 FLOP at an SM's share of the wmma
    # rate, at most `unaligned_sm_fill` of them an SM at a time, all behind the launch
    assert WMMA_TILE == (32, 32) and 11 <= P * WMMA_CTAS_PER_SM
    work = 2 * 32 * 32 * 84 / (p["wmma_flops"] / P)
    feed = (20 + 32) * 84 * 2 / (p["l2_bandwidth"] / P)
    bound = p["launch_s"] + p["wmma_tile_overhead_s"] + max(1.0, p["unaligned_sm_fill"]) * max(work, feed)
    small = gm.ops.matmul(20, 338, 84, "bf16")
    assert t(cal, small) <= bound * 1.3          # (the soft maximum with the traffic adds a little)
    # measured on the H200 (fit.jsonl): 6.1 us; 2-byte aligned (k = 83), the Turing tile: about 9 us
    assert t(cal, gm.ops.matmul(20, 338, 83, "bf16")) > 1.2 * t(cal, small)
    # fp16 has Turing wmma kernels at any alignment: 2-byte-aligned fp16 is as quick as the 8-byte-aligned bf16
    assert t(cal, gm.ops.matmul(20, 338, 83, "fp16")) < 1.1 * t(cal, small)
    # aligned operands never take it: without the wmma parameters an aligned GEMM costs the same
    bare = dataclasses.replace(cal, params={k: v for k, v in p.items() if not k.startswith("wmma_")})
    for shape in ((20, 336, 64), (4096, 4096, 4096), (333, 1024, 96)):
        assert t(bare, gm.ops.matmul(*shape, "bf16")) == t(cal, gm.ops.matmul(*shape, "bf16"))
    # nor 2-byte-aligned bf16 (no bf16 wmma in Turing's kernels), nor 8-byte-aligned tf32 (k, n even: the profiler
    # showed it larger CUTLASS tiles); 4-byte-aligned tf32 (odd k) takes it
    assert t(bare, gm.ops.matmul(20, 338, 83, "bf16")) == t(cal, gm.ops.matmul(20, 338, 83, "bf16"))
    assert t(bare, gm.ops.matmul(24, 82, 30, "tf32")) == t(cal, gm.ops.matmul(24, 82, 30, "tf32"))
    assert t(cal, gm.ops.matmul(24, 82, 31, "tf32")) < t(bare, gm.ops.matmul(24, 82, 31, "tf32"))


def test_split_k_of_the_cutlass_fallbacks_fills_the_cta_slots():
    """Every split-K call of cuBLAS's CUTLASS fallback kernels with a 128-wide tile profiled on the H200
    (tests/data/calibration/profile*.jsonl: the ``splitKreduce_kernel`` beside it, the split in the grid's z): the
    split is ``fill_split`` of its tiles (two 128 x 128 CTAs an SM, one of 128 x 256), within one, nearly always."""
    import json
    import math
    import re

    from gpumodel.calibration.gemm import CUTLASS_CTAS_PER_SM, fill_split

    data = Path(__file__).parent / "data" / "calibration"
    hits = total = 0
    for line in (line for path in sorted(data.glob("profile*.jsonl")) for line in path.read_text().splitlines()[1:]):
        rec = json.loads(line)
        if rec.get("kernel") != "mm" or not any("splitKreduce" in k["name"] for k in rec["kernels"]):
            continue
        main = next((k for k in rec["kernels"] if re.search(r"cutlass_(75|80)_tensorop", k["name"])), None)
        tile = main and re.search(r"gemm_(?:[a-z0-9]+_)?(\d+)x(\d+)_", main["name"])
        if tile is None or max(int(tile[1]), int(tile[2])) < 128 or min(int(tile[1]), int(tile[2])) < 128:
            continue
        # cuBLAS names the tile of its column-major C: rows x cols of PyTorch's row-major C are swapped
        tm, tn = int(tile[2]), int(tile[1])
        s = rec["shape"]
        base = math.ceil(s["m"] / tm) * math.ceil(s["n"] / tn)
        total += 1
        hits += abs(float(fill_split(float(base), CUTLASS_CTAS_PER_SM.get((tm, tn), 1), 132)) - main["grid"][2]) <= 1
    assert total >= 200                   # 244 such calls in the committed profiles
    assert hits >= 0.85 * total           # 215 of them
