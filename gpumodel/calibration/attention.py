"""Time model of attention: flash attention (prefill, chunked prefill, decode) and the naive form.

Flash attention forward runs one thread block per tile of query rows of one head; each block
walks the keys in blocks, keeping the scores on chip. The kernels behind ``scaled_dot_product_attention``
depend on the shapes; on the H200 with torch 2.11 the profiler (``tests/data/calibration/profile.jsonl``,
``bench/profile_kernels.py``) shows three:

* a square attention (``seq == kv_seq``): a ``Memset`` and cuDNN's sm90 (wgmma) fprop kernel over the
  query tiles, the keys never split;
* decode (one query a sequence over a cache): cuDNN's sm90 decode kernel, 16 query rows a tile (the query
  heads that share a KV head packed into one tile), 128 keys a block, two blocks an SM. With few tiles it
  splits each tile's keys (:func:`decode_splits`) and a ``lean_reduction_kernel`` merges the parts;
* a chunk of queries over a longer cache (``1 < seq < kv_seq``): FlashAttention-2's ``flash_fwd_kernel``, or
  with few tiles ``flash_fwd_splitkv_kernel`` and its combine kernel (*split-KV*, the "flash-decoding"
  scheme), about half as fast per FLOP on Hopper (``attn_flops_fa2``); the split count follows its
  ``num_splits_heuristic`` (:func:`num_splits`: the fewest splits whose wave efficiency is within 85% of the
  best, none when the tiles fill 80% of the slots), where PyTorch counts two slots an SM.

The FlashAttention-2 and decode kernels stream a tile's keys after its fixed work (no warp
specialisation over the cache): their tile time and the cache stream add. With more decode tiles than an SM
wave holds, only the first wave's tile time adds whole: a tile of a later wave sets up while the SM's previous
tile still streams, and each later wave adds the fitted share ``attn_decode_wave_share`` of it (0.66 on the
H200; measured on an H100, many tiles stream the cache at 3.0-3.2 TB/s plus about 1.3 us a wave,
``tests/data/calibration/h100/decode_short.jsonl``). The backward pass (cuDNN's, on the
H200 and the H100) runs four kernels one after another: a ``Memset``, ``dot(dO, O)`` (which also clears the
fp32 dQ accumulator), the main kernel (a block per tile of keys, looping over the queries) and the dQ
conversion to 16 bits. The two side kernels stream :func:`bwd_side_bytes` at the memory bandwidth; they
add to the main kernel's time (a quarter of the call at 512 tokens, a tenth at 2k on the H200's profiles)
and, being memory-bound, they grow on a GPU of less bandwidth while the main kernel does not. The model prices the GPU's work alone: the host's
time to issue the call (autograd, the backend's plan lookup, about 0.1 ms on the H200's host) is
:mod:`gpumodel.training.hostcost`'s, and is hidden when the host runs ahead.

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

from gpumodel.base.errors import UnsupportedError
from gpumodel.records.dtypes import bytes_per_element
from gpumodel.core.opcost import OpName

from .priors import prior_for
from .predictors import CalibrationModel, Prediction, farray, predictor, queued, soft_max
from .composite import math_attention, naive_attention

__all__ = ["num_splits", "decode_splits", "flash_tiles", "bwd_side_bytes", "BLOCK_M", "SPLIT_BLOCK_M", "MAX_SPLITS", "BWD_KERNELS"]

BLOCK_M = 128        # query rows per tile of the forward kernel (head_dim <= 128)
SPLIT_BLOCK_M = 64   # query rows per tile of the split-KV kernel
MAX_SPLITS = 128     # the heuristic's cap on splits
BWD_KERNELS = 4      # cuDNN's (the profiler on the H200): a Memset, dot(dO, O), the main kernel, the dQ conversion
SQUARE_FWD_KERNELS = 2  # cuDNN's square forward (the profiler on the H200): a Memset, then the fprop kernel
#: cuDNN's sm90 decode kernel (one query a sequence; ``..._16x128x128_...`` in the profiler on the H200): query
#: rows a tile, keys a block, blocks resident an SM (86 KB of shared memory each), and the longest cache it
#: leaves unsplit
DECODE_BLOCK_M, DECODE_BLOCK_N, DECODE_CTAS_PER_SM, DECODE_SPLIT_MIN_KEYS = 16, 128, 2, 512
#: a square causal attention's tiles form ramps (tile i of N does i + 1 key blocks); handed out in order to whichever
#: SM is free (the hardware's block scheduler, or cuDNN's persistent kernel, 132 CTAs on the H200), they finish
#: about this fraction of the longest tile after the average SM's share of the work: the median over greedy
#: list schedules of 1 to 512 ramps of 2 to 128 tiles on 132 SMs (0.58 to 0.66 from the 10th to the 90th
#: percentile; ``max(longest, average + 0.63 longest)`` is within 2.7% of the simulated schedule at the 90th)
LIST_SCHEDULE_TAIL = 0.63
#: FlashAttention-2's backward as PyTorch vendors it: ``flash_bwd_dot_do_o_kernel`` (which clears dQ's fp32
#: accumulator), the main ``flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel`` and ``flash_bwd_convert_dq_kernel``
FA2_BWD_KERNELS = 3
#: FlashAttention-2's backward FLOP rate over its forward's (both in the papers' FLOP convention): on an H100 SXM5 at
#: head_dim 128, 16k tokens, no mask, 322 TFLOP/s backward against 370 forward (J. Shah et al., "FlashAttention-3",
#: 2024, fp16 forward and backward figures; one pair of bars, ``bench/published_kernels.py`` scores the others)
FA2_BWD_TO_FWD = 322.0 / 370.0
#: FlashAttention-2's forward blocks (128 threads) resident on one SM at once; its split heuristic counts
#: ``2 x multiProcessorCount`` slots for that reason (``set_params_splitkv``)
FA2_CTAS_PER_SM = 2


def _kv_block(head_dim: np.ndarray) -> np.ndarray:
    """Keys per block of the split-KV kernel: 256 up to head_dim 64, 128 up to 128, else 64."""
    return np.where(head_dim <= 64, 256.0, np.where(head_dim <= 128, 128.0, 64.0))


def _fa2_kv_block(head_dim: np.ndarray) -> np.ndarray:
    """Keys per block of FlashAttention-2's unsplit forward kernel on sm80/sm90: 128 up to head_dim 64, else 64
    (``run_mha_fwd_hdim*`` in ``flash_fwd_launch_template.h``)."""
    return np.where(head_dim <= 64, 128.0, 64.0)


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
    tiles, kv_blocks = np.broadcast_arrays(farray(tiles), farray(kv_blocks))
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


def decode_splits(tiles: Any, sm_count: int, kv_seq: Any) -> np.ndarray:
    """How many parts cuDNN's sm90 decode kernel splits the keys of each tile into, as the profiler shows it.

    None up to :data:`DECODE_SPLIT_MIN_KEYS` keys or when the tiles already take half the SMs; otherwise the
    largest power of two that keeps ``tiles x splits`` within two blocks an SM and gives each part at least one
    whole block of keys (the lean reduction kernel then merges the parts).

    >>> [int(decode_splits(t, 132, 32768)) for t in (8, 16, 40, 64, 128)]
    [32, 16, 4, 4, 1]
    >>> int(decode_splits(8, 132, 512)), int(decode_splits(8, 132, 558))
    (1, 4)
    """
    tiles, kv_seq = np.broadcast_arrays(farray(tiles), farray(kv_seq))
    cap = np.minimum(DECODE_CTAS_PER_SM * sm_count / np.maximum(tiles, 1.0), np.floor(kv_seq / DECODE_BLOCK_N))
    pow2 = 2.0 ** np.floor(np.log2(np.maximum(cap, 1.0)))
    return np.where((kv_seq > DECODE_SPLIT_MIN_KEYS) & (tiles <= sm_count / 2), pow2, 1.0)


def flash_tiles(op: Any, sm_count: int, decode_kernel: bool = True) -> dict[str, np.ndarray]:
    """Tiles, splits and rows per tile of a flash-attention forward (see the module notes).

    ``decode_kernel``: one query a sequence runs cuDNN's decode kernel (PyTorch's choice on Hopper); False
    prices it as FlashAttention-2's split-KV kernel, as the flash-attn 2 package runs it.
    """
    s = op.shape
    b, h, seq, d = farray(s["batch"]), farray(s["heads"]), farray(s["seq"]), farray(s["head_dim"])
    kvh, skv = farray(s.get("kv_heads", s["heads"])), farray(s.get("kv_seq", s["seq"]))
    decode = (seq == 1) & (skv > 1) & bool(decode_kernel)
    packed = (seq == 1) & (skv > 1) & (h > kvh)      # GQA decode: a KV head's query heads in one tile
    rows, heads = np.where(packed, h / kvh, seq), np.where(packed, kvh, h)
    split_tiles = b * heads * np.ceil(rows / SPLIT_BLOCK_M)
    slots = FA2_CTAS_PER_SM * sm_count
    splits = np.where(seq < skv, num_splits(split_tiles, slots, np.ceil(skv / _kv_block(d))), 1.0)
    tiles = np.where(splits > 1, split_tiles * splits, b * heads * np.ceil(rows / BLOCK_M))
    # decode: cuDNN's kernel, 16 query rows a tile, its own split of the keys
    decode_tiles = b * heads * np.ceil(rows / DECODE_BLOCK_M)
    dsplits = decode_splits(decode_tiles, sm_count, skv)
    splits = np.where(decode, dsplits, splits)
    tiles = np.where(decode, decode_tiles * dsplits, tiles)
    return {"tiles": tiles, "splits": splits, "rows": rows, "decode": decode}


def bwd_side_bytes(op: Any) -> np.ndarray:
    """Bytes the flash-attention backward's side kernels move [B], ``(8 + 3 e) * batch * heads * seq * head_dim``.

    ``dot(dO, O)`` reads dO and O (``e`` bytes an element each) and clears the fp32 dQ accumulator (4 bytes);
    the conversion reads the accumulator (4) and writes dQ (``e``). The per-row sums ``dot(dO, O)`` writes are
    ``head_dim`` times fewer and left out.

    Examples
    --------
    >>> import gpumodel as gm
    >>> int(bwd_side_bytes(gm.ops.attention(4, 24, 1024, 128, causal=True, backward=True)))  # 14 B x 12.6M
    176160768
    """
    s = op.shape
    e = float(bytes_per_element(op.dtype))
    return (8.0 + 3.0 * e) * farray(s["batch"]) * farray(s["heads"]) * farray(s["seq"]) * farray(s["head_dim"])


def kernel_path(kernel: str, gpu: Any) -> str:
    """Which kernels price an attention ``kernel`` on ``gpu``: ``"sdpa"`` (PyTorch's own dispatch), ``"native"``
    (the architecture's own flash kernels for every shape: cuDNN, FlashAttention-3, FlashInfer's and Triton's
    prefill on Hopper) or ``"fa2"`` (FlashAttention-2's ``mma.sync`` kernels for every shape, forward and
    backward: the flash-attn 2 package on Hopper and Blackwell).

    On Ampere and Ada every library runs FlashAttention-2-class kernels, as PyTorch does: all price as ``"sdpa"``.

    Raises
    ------
    UnsupportedError
        ``kernel="fa3"`` on a GPU that is not Hopper (FlashAttention-3 is written for sm90 alone).

    Examples
    --------
    >>> import gpumodel as gm
    >>> kernel_path("fa2", gm.gpu("h100")), kernel_path("fa2", gm.gpu("a100")), kernel_path("fa3", gm.gpu("h200"))
    ('fa2', 'sdpa', 'native')
    """
    major = _cc_major(gpu)
    if kernel == "fa3" and major != 9:
        name = getattr(gpu, "name", gpu)
        raise UnsupportedError(f"kernel='fa3' (FlashAttention-3) runs on Hopper (sm90) alone, not on {name}; use "
                               f"'fa2', 'cudnn' or 'sdpa'", argument="kernel", value=kernel,
                               allowed="'sdpa', 'cudnn', 'fa2', 'flashinfer', 'triton' off Hopper")
    if kernel == "sdpa" or major < 9:
        return "sdpa"
    return "fa2" if kernel == "fa2" else "native"


def _library_rate(kernel: str, gpu: Any) -> float:
    """The fraction of the native attention rate a library reaches on the GPU's architecture (its prior)."""
    prior = prior_for(gpu) if gpu is not None else None
    return 1.0 if prior is None else prior.attention.library_rate(kernel)


def _cc_major(gpu: Any) -> int:
    """The compute capability's major number of a GPU record (9, Hopper's, for a model without one)."""
    cc = getattr(gpu, "compute_capability", None)
    return int(str(cc).split(".")[0]) if cc else 9


@predictor(OpName.ATTENTION)
def _attention(model: CalibrationModel, op: Any) -> Prediction:
    impl = str(op.shape.get("impl", "flash"))
    if impl != "flash":
        return math_attention(model, op) if impl == "math" else naive_attention(model, op)
    p, P = model.params, float(model.sm_count)
    s = op.shape
    b, h, seq = farray(s["batch"]), farray(s["heads"]), farray(s["seq"])
    skv = farray(s.get("kv_seq", s["seq"]))
    causal = bool(s.get("causal", False))
    bwd = bool(s.get("backward", False))
    path = kernel_path(str(s.get("kernel", "sdpa")), model.gpu)
    # PyTorch's backend choice: queries over a longer cache (seq < kv_seq: chunked prefill, decode) run
    # FlashAttention-2's kernels (flash_fwd_kernel, flash_fwd_splitkv_kernel); a square attention runs cuDNN's
    # sm90 wgmma kernels on the H200 with torch 2.11 (the backend attn_flops_fwd was fitted to). The flash-attn 2
    # package runs FlashAttention-2's kernels for every shape, and its backward too; the architecture-native
    # libraries (cuDNN, FlashAttention-3, ...) their own kernels for every shape but decode
    fa2 = {"sdpa": (seq < skv) & (seq > 1), "native": np.zeros_like(seq, dtype=bool),
           "fa2": np.ones_like(seq, dtype=bool)}[path]
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
        k = flash_tiles(op, model.sm_count, decode_kernel=path != "fa2")
        tiles, splits = k["tiles"], k["splits"]
    decode = (seq == 1) & (skv > 1) & (not bwd) & (path != "fa2")
    fa2_bwd = bwd and path == "fa2"
    # FlashAttention-2's forward holds two tiles an SM at once (they share its tensor cores and overlap their
    # latencies); cuDNN's kernels and the backward one
    resident = np.clip(np.ceil(tiles / P), 1.0, FA2_CTAS_PER_SM) if not bwd else 1.0
    resident = np.where(fa2 | decode, resident, 1.0)
    waves = np.ceil(tiles / (resident * P))
    # a library of its own kernels on this architecture (Triton's on Hopper): its published fraction of the
    # native rate (specs/priors)
    library = _library_rate(str(s.get("kernel", "sdpa")), model.gpu) if path == "native" else 1.0
    if fa2_bwd:  # FlashAttention-2's backward: its forward's rate times the two kernels' measured ratio
        rate = p.get("attn_flops_fa2_bwd", p.get("attn_flops_fa2", p["attn_flops_bwd"]) * FA2_BWD_TO_FWD)
    elif bwd:
        rate = p["attn_flops_bwd"]
    else:
        rate = np.where(fa2, p.get("attn_flops_fa2", p["attn_flops_fwd"]), p["attn_flops_fwd"])
    rate = rate * library
    if bwd:
        pad = np.ones_like(scores)
    else:  # a tile computes all its query rows: fewer queries than a tile's rows (a short chunk) still cost the tile
        block = np.where(splits > 1, SPLIT_BLOCK_M, BLOCK_M)
        pad = np.where(seq > 1, np.ceil(k["rows"] / block) * block / np.maximum(k["rows"], 1.0), 1.0)
    per_sm = pad * soft_max(farray(op.flops) * (frac / op_frac) / rate, scores / p[f"attn_score_rate_{d}"], p["attn_overlap_p"])
    per_tile = resident * per_sm * P / np.maximum(tiles, 1.0)
    if not bwd and "attn_kv_block_s" in p:
        # a forward tile walks its key blocks one after another (load K, scores, softmax, load V, P V): with few
        # rows a tile (decode, a short chunk) each block's latency, not its math, sets the pace
        hd = farray(s["head_dim"])
        kv_block = np.where(decode, float(DECODE_BLOCK_N),
                            np.where(splits > 1, _kv_block(hd), np.where(fa2, _fa2_kv_block(hd), float(BLOCK_M))))
        blocks = np.ceil(np.ceil(skv * frac / kv_block) / splits)
        per_tile = soft_max(per_tile, blocks * p["attn_kv_block_s"], p["attn_overlap_p"])
    overhead = p[f"attn_tile_overhead_{d}_s"]
    if not bwd and "attn_tile_overhead_fa2_s" in p:  # FlashAttention-2's kernels: their own fixed time a tile
        overhead = np.where(fa2 & (seq < skv), p["attn_tile_overhead_fa2_s"], overhead)
        overhead = np.where(decode, p.get("attn_tile_overhead_decode_s", p["attn_tile_overhead_fa2_s"]), overhead)
    t_c = per_tile * waves
    if causal:  # square causal: the tiles are uneven (1 .. N key blocks), and each free SM takes the next one
        longest = per_tile * np.where(seq == skv, (n_blocks + p.get("attn_causal_diag", 0.0)) / (frac * n_blocks), 1.0)
        slots = resident * P
        # a greedy list schedule of the ramp ends LIST_SCHEDULE_TAIL of the longest tile after the average slot's work
        spread = per_tile * tiles / slots + LIST_SCHEDULE_TAIL * longest
        t_c = np.where((seq == skv) & (tiles > slots), np.maximum(longest, spread), np.maximum(t_c, longest))
    t_c = t_c + waves * overhead
    # the decode kernel over many tiles: a tile of a later wave sets up (loads its query, starts its first key
    # block) while the SM's previous tile still streams, so after the first wave only a share of each wave's tile
    # time adds to the cache stream (measured: many tiles stream at 3.0-3.2 TB/s plus ~1.3 us a wave on an H100)
    share = p.get("attn_decode_wave_share", 1.0)
    t_c = np.where(decode, t_c / waves * (1.0 + (waves - 1.0) * share), t_c)
    # a few busy SMs cannot pull the whole bandwidth (decode of few sequences)
    t_m = farray(op.bytes) / np.minimum(p["bandwidth"] * p.get("bw_eff_attention", 1.0),
                                    np.minimum(tiles, P) * p["sm_bandwidth"])
    # FlashAttention-2's kernels over a longer cache (decode, chunks) stream a tile's keys only once its fixed work
    # is done (no warp specialisation): their tile time and the cache stream add; cuDNN's square-attention kernels
    # overlap them (the larger of the two)
    body = np.where((fa2 | decode) & (seq < skv) & ("attn_tile_overhead_fa2_s" in p), t_c + t_m, np.maximum(t_c, t_m))
    # split-KV: + the combine kernel; cuDNN's square forward (never split): a Memset, then the fprop kernel
    kernels = (FA2_BWD_KERNELS if fa2_bwd else BWD_KERNELS) if bwd else np.where(fa2 | decode, 1.0 + (splits > 1),
                                                                                  SQUARE_FWD_KERNELS)
    combine = np.where(splits > 1, b * h * seq * farray(s["head_dim"]) * 4.0 * (splits + 1) / p["bandwidth"], 0.0)
    launch = queued(p, kernels) * np.ones_like(body)
    # the backward's dot(dO, O) before its main kernel and the dQ conversion after it: memory-bound, in series
    side = bwd_side_bytes(op) / p["bandwidth"] if bwd else 0.0
    total = launch + body + combine + side
    return Prediction(total, t_c, t_m + side, launch, tiles / (waves * P), {"splits": splits},
                      kernels * np.ones_like(body))
