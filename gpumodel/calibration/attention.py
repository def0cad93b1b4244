"""Time model of attention: flash attention (prefill, chunked prefill, split-KV decode) and the naive form.

Flash attention forward runs one thread block per tile of query rows of one head; each block
walks the keys in blocks, keeping the scores on chip. With too few tiles to fill the GPU (decode:
one query a sequence; short prefills of few heads) FlashAttention-2 splits the keys of each tile
over several blocks and merges their partial results in a second kernel (*split-KV*, the
"flash-decoding" scheme); the number of splits follows its ``num_splits_heuristic``: the fewest
splits whose wave efficiency is within 85% of the best, none when the tiles already fill 80% of
the SMs. For grouped-query decode the query heads that share a KV head are packed into the rows
of one tile (``seqlenq_ngroups_swapped``), so the KV cache is read once per KV head. The backward
pass runs three kernels: ``dot(dO, O)`` (which also clears the fp32 dQ accumulator), the main
kernel (a block per tile of keys, looping over the queries) and the dQ conversion. The model prices
the GPU's work alone: the host's time to issue the call (autograd, the backend's plan lookup, about
0.1 ms on the H200's host) is :mod:`gpumodel.hostcost`'s, and is hidden when the host runs ahead.

The kernels behind ``scaled_dot_product_attention`` depend on the shapes: on the H200 with torch 2.11
the profiler shows cuDNN's sm90 (wgmma) kernels for a square attention (``seq == kv_seq``) and
FlashAttention-2's ``flash_fwd_kernel`` / ``flash_fwd_splitkv_kernel`` for queries over a longer cache
(chunked prefill, decode), about half as fast per FLOP on Hopper (``attn_flops_fa2``).
For a square attention the profiler shows a ``Memset`` and cuDNN's fprop kernel, no split of the keys
and no combine kernel: the model prices those two queued kernels over the query tiles alone. (Before the
Memset was counted, keeping FlashAttention-2's split count for square attention fitted better: it stood in
for the missing kernel's time.)

The naive form and SDPA's math backend are the compositions of their kernels
(:mod:`gpumodel.calibration.composite`).

References
----------
T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023;
``csrc/flash_attn/flash_api.cpp`` (``num_splits_heuristic``, ``set_params_splitkv``, the
``seqlenq_ngroups_swapped`` path) and ``flash_bwd_launch_template.h``, github.com/Dao-AILab/flash-attention,
vendored by PyTorch in aten/src/ATen/native/transformers/cuda/flash_attn.
T. Dao, D. Haziza, F. Massa, G. Sizov, "Flash-Decoding for long-context inference", 2023.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpumodel.opcost import OpName

from .model import CalibrationModel, Prediction, _f, _soft_max, predictor, queued

__all__ = ["num_splits", "flash_tiles", "BLOCK_M", "SPLIT_BLOCK_M", "MAX_SPLITS", "BWD_KERNELS"]

BLOCK_M = 128        # query rows per tile of the forward kernel (head_dim <= 128)
SPLIT_BLOCK_M = 64   # query rows per tile of the split-KV kernel
MAX_SPLITS = 128     # the heuristic's cap on splits
BWD_KERNELS = 3      # dot(dO, O) + clear dQ accumulator, the main kernel, the dQ conversion
SQUARE_FWD_KERNELS = 2  # cuDNN's square forward (the profiler on the H200): a Memset, then the fprop kernel


def _kv_block(head_dim: np.ndarray) -> np.ndarray:
    """Keys per block of the split-KV kernel: 256 up to head_dim 64, 128 up to 128, else 64."""
    return np.where(head_dim <= 64, 256.0, np.where(head_dim <= 128, 128.0, 64.0))


def num_splits(tiles: Any, sm_count: int, kv_blocks: Any, max_splits: int = MAX_SPLITS) -> np.ndarray:
    """FlashAttention-2's ``num_splits_heuristic``, over arrays.

    Parameters
    ----------
    tiles : array_like
        ``batch * heads * query blocks``.
    sm_count : int
    kv_blocks : array_like
        Key blocks per tile.

    Examples
    --------
    Decode of 8 sequences over 8 KV heads (64 tiles on 132 SMs) and 4096 keys (32 blocks of 128):

    >>> int(num_splits(64, 132, 32))
    2
    >>> int(num_splits(132, 132, 32))     # the tiles fill the SMs: no split
    1
    """
    tiles, kv_blocks = np.broadcast_arrays(_f(tiles), _f(kv_blocks))
    cap = np.minimum(np.minimum(float(max_splits), float(sm_count)), kv_blocks)
    effs = []
    for s in range(1, max_splits + 1):
        eligible = (s == 1) | (np.ceil(kv_blocks / s) != np.ceil(kv_blocks / max(s - 1, 1)))
        waves = tiles * s / sm_count
        eff = np.where(eligible & (s <= cap), waves / np.ceil(waves), 0.0)
        effs.append(eff)
    effs = np.stack(effs)
    best = effs.max(axis=0)
    ok = effs >= 0.85 * best
    first = np.argmax(ok, axis=0) + 1.0
    return np.where(tiles >= 0.8 * sm_count, 1.0, first)


def flash_tiles(op: Any, sm_count: int) -> dict[str, np.ndarray]:
    """Tiles, splits and rows per tile of a flash-attention forward (see the module notes)."""
    s = op.shape
    b, h, seq, d = _f(s["batch"]), _f(s["heads"]), _f(s["seq"]), _f(s["head_dim"])
    kvh, skv = _f(s.get("kv_heads", s["heads"])), _f(s.get("kv_seq", s["seq"]))
    packed = (seq == 1) & (h > kvh)                      # GQA decode: a KV head's query heads in one tile
    rows, heads = np.where(packed, h / kvh, seq), np.where(packed, kvh, h)
    split_tiles = b * heads * np.ceil(rows / SPLIT_BLOCK_M)
    splits = np.where(seq < skv, num_splits(split_tiles, sm_count, np.ceil(skv / _kv_block(d))), 1.0)
    tiles = np.where(splits > 1, split_tiles * splits, b * heads * np.ceil(rows / BLOCK_M))
    return {"tiles": tiles, "splits": splits, "rows": rows}


@predictor(OpName.ATTENTION)
def _attention(model: CalibrationModel, op: Any) -> Prediction:
    impl = str(op.shape.get("impl", "flash"))
    if impl != "flash":
        from .composite import math_attention, naive_attention

        return math_attention(model, op) if impl == "math" else naive_attention(model, op)
    p, P = model.params, float(model.sm_count)
    s = op.shape
    b, h, seq = _f(s["batch"]), _f(s["heads"]), _f(s["seq"])
    skv = _f(s.get("kv_seq", s["seq"]))
    causal = bool(s.get("causal", False))
    bwd = bool(s.get("backward", False))
    # PyTorch's backend choice: queries over a longer cache (seq < kv_seq: chunked prefill, decode) run
    # FlashAttention-2's kernels (flash_fwd_kernel, flash_fwd_splitkv_kernel); a square attention runs cuDNN's
    # sm90 wgmma kernels on the H200 with torch 2.11 (the backend attn_flops_fwd was fitted to)
    fa2 = seq < skv
    frac = op_frac = 1.0 - seq / (2.0 * skv) if causal else 1.0
    if causal:  # square causal: tile i of N walks i + 1 key blocks, the diagonal one masked element by element
        n_blocks = np.ceil(skv / BLOCK_M)
        frac = np.where(seq == skv, (n_blocks + 1.0) / (2.0 * n_blocks) + p.get("attn_causal_diag", 0.0) / n_blocks,
                        frac)
    scores = b * h * seq * skv * frac
    d = "bwd" if bwd else "fwd"
    if bwd:  # a block per tile of keys
        tiles, splits = b * h * np.ceil(skv / BLOCK_M), np.ones_like(scores)
    else:
        k = flash_tiles(op, model.sm_count)
        tiles, splits = k["tiles"], k["splits"]
    waves = np.ceil(tiles / P)
    rate = p[f"attn_flops_{d}"] if bwd else np.where(fa2, p.get("attn_flops_fa2", p["attn_flops_fwd"]),
                                                       p["attn_flops_fwd"])
    if bwd:
        pad = np.ones_like(scores)
    else:  # a tile computes all its query rows: fewer queries than a tile's rows (a short chunk) still cost the tile
        block = np.where(splits > 1, SPLIT_BLOCK_M, BLOCK_M)
        pad = np.where(seq > 1, np.ceil(k["rows"] / block) * block / np.maximum(k["rows"], 1.0), 1.0)
    per_sm = pad * _soft_max(_f(op.flops) * (frac / op_frac) / rate, scores / p[f"attn_score_rate_{d}"], p["attn_overlap_p"])
    per_tile = per_sm * P / np.maximum(tiles, 1.0)
    if not bwd and "attn_kv_block_s" in p:
        # a forward tile walks its key blocks one after another (load K, scores, softmax, load V, P V): with few
        # rows a tile (decode, a short chunk) each block's latency, not its math, sets the pace
        kv_block = np.where(splits > 1, _kv_block(_f(s["head_dim"])), float(BLOCK_M))
        blocks = np.ceil(np.ceil(skv * frac / kv_block) / splits)
        per_tile = _soft_max(per_tile, blocks * p["attn_kv_block_s"], p["attn_overlap_p"])
    overhead = p[f"attn_tile_overhead_{d}_s"]
    if not bwd and "attn_tile_overhead_fa2_s" in p:  # FlashAttention-2's kernels: their own fixed time a tile
        overhead = np.where(fa2, p["attn_tile_overhead_fa2_s"], overhead)
    t_c = per_tile * waves
    if causal:  # square causal: the tiles are uneven (1 .. N key blocks); a wave lasts as long as its longest tile
        longest = np.where(seq == skv, (n_blocks + p.get("attn_causal_diag", 0.0)) / (frac * n_blocks), 1.0)
        t_c = np.maximum(t_c, per_tile * longest)
    t_c = t_c + waves * overhead
    # a few busy SMs cannot pull the whole bandwidth (decode of few sequences)
    t_m = _f(op.bytes) / np.minimum(p["bandwidth"] * p.get("bw_eff_attention", 1.0),
                                    np.minimum(tiles, P) * p["sm_bandwidth"])
    # FlashAttention-2's kernels over a longer cache (decode, chunks) stream a tile's keys only once its fixed work
    # is done (no warp specialisation): their tile time and the cache stream add; cuDNN's square-attention kernels
    # overlap them (the larger of the two)
    body = np.where(fa2 & ("attn_tile_overhead_fa2_s" in p), t_c + t_m, np.maximum(t_c, t_m))
    # split-KV: + the combine kernel; cuDNN's square forward (never split): a Memset, then the fprop kernel
    kernels = BWD_KERNELS if bwd else np.where(fa2, 1.0 + (splits > 1), SQUARE_FWD_KERNELS)
    combine = np.where(splits > 1, b * h * seq * _f(s["head_dim"]) * 4.0 * (splits + 1) / p["bandwidth"], 0.0)
    launch = queued(p, kernels) * np.ones_like(body)
    total = launch + body + combine
    return Prediction(total, t_c, t_m, launch, tiles / (waves * P), {"splits": splits})
