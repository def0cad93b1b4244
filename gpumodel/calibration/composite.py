"""Time models of the ops PyTorch runs as several kernels: each is the sum of its kernels' times.

Every function here lists the kernels one PyTorch call launches (read from PyTorch's source, and
checked against the kernel names the profiler records in the measurements) and prices each with
the calibrated model of its kind: a batched GEMM, an elementwise pass, a softmax, a reduction.
Only the mechanisms no other kernel shows get parameters of their own (see
:data:`~gpumodel.calibration.parameters.PARAMETERS`): NLL's one-block loop over the tokens,
log-softmax's three-pass stream, the unvectorised dtype cast, the embedding backward's sort and
segment rate, the optimizer step's element rate. Every time is the GPU's work alone: the host's
time to issue a call (autograd's graph walk, an optimizer's Python) is :mod:`gpumodel.training.hostcost`'s.

* **naive attention** (``impl="naive"``): ``Q K^T`` (bmm), the scale, the causal ``masked_fill``
  (out of place: a copy of the scores, then a non-vectorised kernel over the broadcast mask, priced
  at its own element rate ``strided_elem_rate``), softmax, dropout (a pass that also writes a
  one-byte mask), ``P V`` (bmm). Backward: ``dP = dO V^T`` and ``dV = P^T dO``, a binary pass over
  the scores, dropout's and the mask's backward (the same copy and masked fill), softmax backward
  (the warp kernel up to 1024 columns, one more score read than the forward's; longer rows a
  streaming kernel, ``cunn_SoftMaxBackwardSmem``), the scale's backward, ``dQ = dS K`` and ``dK = dS^T Q``.
* **cross-entropy**: with ``upcast``, a cast of the 16-bit logits to fp32 (a dtype-converting copy,
  ``unrolled_elementwise_kernel``: no vectorised loads, its own rate); log-softmax, which over rows of
  a vocabulary runs ``cunn_SoftMaxForward`` (three row reads and a write; not ``torch.softmax``'s
  one-pass kernel); ``nll_loss``, whose reducing kernel is one block of 32 threads walking the
  tokens (``NLL_LOSS_THREADS``). Backward: zero the logits' gradient, NLL's one-block scatter,
  ``cunn_SoftMaxBackward`` (again three reads and a write), and the cast back.
* **embedding** backward (``embedding_dense_backward``): zero the dense gradient; up to 3072
  tokens one kernel over feature columns walks all tokens (1024-thread blocks, two resident per SM),
  more tokens are sorted (a radix sort of the ids) and reduced by segments, whose kernels gather one
  scalar a thread through the sorted ids: an element rate.
* **fused AdamW** (``torch.optim.AdamW(fused=True).step()``): ``_foreach_add_`` on the step
  counters and the fused kernel, launched per group of at most 36 tensors or 320 chunks of 65536
  elements (``multi_tensor_apply`` at depth 4), bound by its bytes or, for 16-bit parameters, by an
  element rate (4 elements a thread and step: 8-byte loads), or by its waves of chunks: a block per
  chunk of up to 65536 elements, which one SM works through at its share of those rates.
* **KV-cache write**: two ``index_copy_`` kernels (keys, values), each at the element rate of an
  indexing kernel.
* **weight-only GEMMs**: as :data:`WEIGHT_ONLY_PATH` says PyTorch runs them (kernel time only: the
  dynamic fp8 recipe's eight Python calls can keep the GPU waiting on the host at small sizes).

References
----------
PyTorch, aten/src/ATen/native/cuda: NLLLoss.cu (``NLL_LOSS_THREADS``), SoftMax.cu (``host_softmax``:
``use_fast_softmax`` only for softmax, not log-softmax), Embedding.cu (``embedding_backward_feature_kernel``,
a 32 x 32 block) and
EmbeddingBackwardKernel.cu (the 3072-token switch), MultiTensorApply.cuh (``depth_to_max_tensors``,
``kChunkSize``), FusedAdamWKernel.cu, github.com/pytorch/pytorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpumodel.core import ops
from gpumodel.records.dtypes import bytes_per_element
from gpumodel.core.opcost import OpName

from .kernels import softmax_plan
from .predictors import CalibrationModel, Prediction, dispatch, farray, predictor, soft_max
from .streams import memory_bound

__all__ = ["naive_attention", "math_attention", "WEIGHT_ONLY_PATH", "EMBEDDING_SORT_MIN_TOKENS", "NLL_THREADS"]

SOFTMAX_WARP_BWD_MAX_COLS = 1024  # softmax_warp_backward up to this many columns and 4096 bytes a row
NLL_THREADS = 32                  # NLL_LOSS_THREADS: the one block of the reducing NLL kernels
EMBEDDING_SORT_MIN_TOKENS = 3072  # embedding_dense_backward sorts the ids above this many tokens
MTA_MAX_TENSORS, MTA_MAX_BLOCKS, MTA_CHUNK = 36, 320, 65536   # multi_tensor_apply at depth 4
FOREACH_MAX_TENSORS = 110         # multi_tensor_apply at depth 1 (the step counters)
#: what PyTorch (2.11, CUDA) runs for a weight-only GEMM of each weight format (the kernel names the
#: profiler recorded on the H200: ``weight_int8pack_mm_kernel(float const*, signed char const*, float
#: const*, float*, ...)`` between fp32 casts of the input and scales and a bf16 cast of the output)
WEIGHT_ONLY_PATH = {"int8": "weight_int8pack_mm", "int4": "weight_int4pack_mm", "fp8": "scaled_mm_dynamic"}



def _t(model: CalibrationModel, op: Any) -> np.ndarray:
    return farray(dispatch(model, op).time_s)


def _sum(model: CalibrationModel, parts: list) -> tuple[np.ndarray, ...]:
    """Total time of a list of ops, its compute, memory and launch parts [s], and the ops' kernels: each op's
    pieces (one a part, each priced as launched alone) and the GPU kernels they launch."""
    total = compute = memory = launch = kernels = 0.0
    for part in parts:
        pred = dispatch(model, part)
        total, launch = total + farray(pred.time_s), launch + farray(pred.overhead_s)
        compute, memory = compute + farray(pred.compute_s), memory + farray(pred.memory_s)
        kernels = kernels + farray(pred.kernels)
    return (*(np.asarray(x, dtype=float) for x in (total, compute, memory, launch)), float(len(parts)),
            np.asarray(kernels, dtype=float))


def _pred(model: CalibrationModel, total: Any, compute: Any, memory: Any, launch: Any, pieces: Any, kernels: Any,
          extra_s: Any = 0.0, extra_launch_s: Any = 0.0, extra_kernels: Any = 0.0, **extra: Any) -> Prediction:
    """A composite's prediction: its parts' totals (``pieces`` ops launching ``kernels`` kernels) plus ``extra_s``
    of ``extra_kernels`` kernels priced on their own (``extra_launch_s`` of it their launches).

    Each piece is priced as if launched alone (``launch_s`` for its first kernel); the kernels of one call run
    queued, so every piece after the first starts after ``kernel_gap_s`` instead (:func:`queued`):
    ``(pieces - 1) x (launch_s - kernel_gap_s)`` comes off.
    """
    p = model.params
    pieces, kernels = farray(pieces) + farray(extra_kernels), farray(kernels) + farray(extra_kernels)
    saved = np.maximum(pieces - 1.0, 0.0) * (p["launch_s"] - p.get("kernel_gap_s", p["launch_s"]))
    total = np.asarray(total + extra_s, dtype=float) - saved
    launch = np.broadcast_to(np.asarray(launch + extra_launch_s, dtype=float) - saved, total.shape)
    memory = np.broadcast_to(np.asarray(memory + extra_s - extra_launch_s, dtype=float), total.shape)
    kernels = np.broadcast_to(kernels, total.shape)
    if not total.shape:
        launch, memory, kernels = float(launch), float(memory), float(kernels)
    return Prediction(total, compute, memory, launch, 1.0, extra, kernels)


def _softmax_backward(model: CalibrationModel, rows: Any, cols: Any, dtype: Any) -> np.ndarray:
    """Softmax backward: the forward's kernel with one more row read (dY and Y in, dX out: 3/2 the traffic).

    The row stays in registers, so the extra read costs time only where the traffic sets it: the larger of the
    forward's time (its passes over each row) and 3/2 of its bytes at the softmax's bandwidth."""
    op = ops.softmax(rows, cols, dtype)
    pred, p = dispatch(model, op), model.params
    traffic = 1.5 * farray(op.bytes) / (p["bandwidth"] * p.get("bw_eff_softmax", 1.0))
    return farray(pred.overhead_s) + np.maximum(farray(pred.time_s) - farray(pred.overhead_s), traffic)


def _attention_softmax_backward(model: CalibrationModel, rows: Any, cols: Any, dtype: Any) -> np.ndarray:
    """Softmax backward over attention scores as ``host_softmax_backward`` dispatches it: rows of at most
    1024 elements and 4096 bytes run the warp kernel (:func:`_softmax_backward`); longer rows run
    ``cunn_SoftMaxBackward(Smem)``, a block per row, which streams ``dY`` and ``Y`` in and ``dX`` out
    (not the forward's per-element register kernel)."""
    warp = _softmax_backward(model, rows, cols, dtype)
    stream = _t(model, ops.elementwise(farray(rows) * farray(cols), dtype, inputs=2, outputs=1))
    fits = (farray(cols) <= SOFTMAX_WARP_BWD_MAX_COLS) & (farray(cols) * bytes_per_element(dtype) <= 4096)
    return np.where(fits, warp, stream)


def _masked_fill(model: CalibrationModel, n: Any, dt: Any) -> list:
    """``masked_fill`` out of place with a broadcast mask: a copy of the scores (``Memcpy DtoD``), then
    ``masked_fill_`` as a non-vectorised ``elementwise_kernel<128, 4>`` (the mask is broadcast over batch and
    heads, so each element's offsets are computed: a strided elementwise op, bound by ``strided_elem_rate``
    unless its traffic takes longer). Returns ``[kernels priced as ops, extra seconds, extra launch seconds]``."""
    fill = dispatch(model, ops.elementwise(n, dt, strided=True))
    return [ops.elementwise(n, dt), farray(fill.time_s), farray(fill.overhead_s)]


def naive_attention(model: CalibrationModel, op: Any) -> Prediction:
    """Naive attention as the sum of its kernels (module notes)."""
    s, dt, p = op.shape, op.dtype, model.params
    bh = farray(s["batch"]) * farray(s["heads"])
    seq, skv, d = farray(s["seq"]), farray(s.get("kv_seq", s["seq"])), farray(s["head_dim"])
    n = bh * seq * skv
    e = bytes_per_element(dt)
    causal, drop = bool(s.get("causal", False)), float(s.get("dropout", 0.0)) > 0
    score_pass = ops.elementwise(n, dt)                                  # read and write the scores once
    mask_bytes = 1.0 / e                                                 # a bool per score, in score elements
    extra, extra_launch = 0.0, 0.0
    if causal:                                                           # the copy, then masked_fill_
        copy, extra, extra_launch = _masked_fill(model, n, dt)
    if not s.get("backward", False):
        parts = [ops.bmm(bh, seq, skv, d, dt), score_pass, ops.softmax(bh * seq, skv, dt), ops.bmm(bh, seq, d, skv, dt)]
        if causal:
            parts.append(copy)
        if drop:
            parts.append(ops.elementwise(n, dt, inputs=1, outputs=1 + mask_bytes))
        return _pred(model, *_sum(model, parts), extra, extra_launch, float(causal))
    parts = [ops.bmm(bh, seq, skv, d, dt), ops.bmm(bh, skv, d, seq, dt),       # dP = dO V^T, dV = P^T dO
             ops.elementwise(n, dt, inputs=2, outputs=1),                      # the binary pass before softmax's
             score_pass,                                                        # the scale's backward
             ops.bmm(bh, seq, d, skv, dt), ops.bmm(bh, skv, d, seq, dt)]        # dQ = dS K, dK = dS^T Q
    if causal:
        parts.append(copy)
    if drop:
        parts.append(ops.elementwise(n, dt, inputs=1 + mask_bytes, outputs=1))
    sm = _attention_softmax_backward(model, bh * seq, skv, dt)
    return _pred(model, *_sum(model, parts), sm + extra, p["launch_s"] + extra_launch, 1.0 + causal)


def math_attention(model: CalibrationModel, op: Any) -> Prediction:
    """``scaled_dot_product_attention``'s math backend (``impl="math"``) as the kernels it launches.

    For 16-bit inputs it works in fp32 (the profiler on the H200: ``direct_copy_kernel`` casts,
    ``sm80_xmma_gemm_f32f32`` CUDA-core GEMMs, fp32 softmax): cast Q, K, V to fp32, scale Q and K
    by ``d^-1/4`` each, build the causal mask (``(seq, kv_seq)``: a bool fill, ``triu``, two fills and
    a ``where`` into an additive fp32 bias), ``Q K^T``, add the bias (a broadcast, non-vectorised
    kernel), softmax; with a mask its "safe" softmax (``isneginf``, an ``all`` reduction, a fill and a
    ``where`` over the scores), the probabilities' round trip through 16 bits, ``P V`` and the output's
    cast. Backward: the cast of ``dO``, ``dP = dO V^T``, ``dV = P^T dO``, a binary pass, softmax
    backward, ``dQ``, ``dK``, the two scales' backward and three casts of the gradients.
    """
    s, dt = op.shape, op.dtype
    e = bytes_per_element(dt)
    if e >= 4:                      # fp32 inputs: nothing to cast; the maths is the naive form's
        return naive_attention(model, op)
    bh = farray(s["batch"]) * farray(s["heads"])
    seq, skv, d = farray(s["seq"]), farray(s.get("kv_seq", s["seq"])), farray(s["head_dim"])
    n, nq, nkv = bh * seq * skv, bh * seq * d, bh * skv * d
    causal = bool(s.get("causal", False))
    f32 = "fp32"
    up = lambda x: ops.elementwise(x, f32, inputs=e / 4.0, outputs=1)          # noqa: E731  16-bit -> fp32
    down = lambda x: ops.elementwise(x, dt, inputs=4.0 / e, outputs=1)         # noqa: E731  fp32 -> 16-bit
    if not s.get("backward", False):
        parts = [up(nq), up(nkv), up(nkv), ops.elementwise(nq, f32), ops.elementwise(nkv, f32),
                 ops.bmm(bh, seq, skv, d, f32), ops.softmax(bh * seq, skv, f32),
                 ops.elementwise(n, f32, inputs=1, outputs=e / 4.0),           # P to 16 bits and back
                 ops.bmm(bh, seq, d, skv, f32), down(nq)]
        extra = launch = 0.0
        if causal:
            mask = seq * skv
            parts += [ops.elementwise(mask, f32, inputs=0, outputs=0.25, flops_per_element=0),
                      ops.elementwise(mask, f32, inputs=0.25, outputs=0.25),
                      *[ops.elementwise(mask, f32, inputs=0, outputs=1, flops_per_element=0)] * 2,
                      ops.elementwise(mask, f32, inputs=1.25, outputs=1),
                      ops.elementwise(n, f32, inputs=1, outputs=0.25),           # isneginf
                      ops.elementwise(n / 4.0, f32, inputs=1, outputs=0),        # all() over the rows
                      ops.elementwise(n, f32, inputs=0, outputs=1, flops_per_element=0)]
            adds = [ops.elementwise(n, f32, strided=True),                                 # + bias, where
                    ops.elementwise(n, f32, inputs=2.25, outputs=1, strided=True)]
            extra = sum(_t(model, x) for x in adds)
            launch = 2 * model.params["launch_s"]
        return _pred(model, *_sum(model, parts), extra, launch, 2.0 * causal)
    parts = [up(nq), ops.bmm(bh, seq, skv, d, f32), ops.bmm(bh, skv, d, seq, f32),
             ops.elementwise(n, f32, inputs=2, outputs=1),
             ops.bmm(bh, seq, d, skv, f32), ops.bmm(bh, skv, d, seq, f32),
             ops.elementwise(nq, f32), ops.elementwise(nkv, f32), down(nq), down(nkv), down(nkv)]
    sm = _attention_softmax_backward(model, bh * seq, skv, f32)
    return _pred(model, *_sum(model, parts), sm, model.params["launch_s"], 1.0)


def _nll(model: CalibrationModel, tokens: np.ndarray) -> np.ndarray:
    """NLL's reducing kernel: one block of 32 threads, each walking ``tokens / 32`` targets."""
    p = model.params
    return p["launch_s"] + np.ceil(tokens / NLL_THREADS) * p["nll_step_s"]


def _log_softmax(model: CalibrationModel, rows: Any, cols: Any, dtype: Any) -> np.ndarray:
    """Log-softmax forward or backward kernel over ``rows`` x ``cols`` [s].

    ``log_softmax`` does not take ``torch.softmax``'s one-pass online kernel (``cunn_SoftMaxForwardGmem``,
    ``use_fast_softmax`` is false for it): rows too long for the register or shared-memory kernels run
    ``cunn_SoftMaxForward`` (max, sum of exponentials, write) or ``cunn_SoftMaxBackward`` (sum of the
    gradient, then gradient and output in, input gradient out), one 1024-thread block per row. Either
    reads a row three times and writes it once:

    .. math::

        t = t_{launch} + \\max\\left(\\frac{4 r c e}{\\epsilon_{ls} B},\\
            W (\\tau_b + 3 s L)\\right), \\quad W = \\lceil r / (P \\cdot 2048/1024) \\rceil

    with :math:`s` the 16-byte loads of a thread per pass. Rows that the other kernels take are
    priced as :func:`torch.softmax`'s (the softmax model).
    """
    p, P = model.params, float(model.sm_count)
    e = bytes_per_element(dtype)
    rows, cols = farray(rows), farray(cols)
    k = softmax_plan(rows, cols, e, model.smem_per_block)
    three = k["block"] & (k["passes"] == 3.0)
    stream = 4.0 * rows * cols * e / (p["bandwidth"] * p["bw_eff_log_softmax"])
    waves = np.ceil(np.maximum(rows, 1.0) / (P * model.threads_per_sm / 1024.0))
    lat = waves * (p["block_sync_s"] + 3.0 * k["steps"] * p["mem_latency_s"])
    own = p["launch_s"] + np.maximum(stream, lat)
    return np.where(three, own, _t(model, ops.softmax(rows, cols, dtype)))


def _cast_copy(model: CalibrationModel, n: Any, src: Any, dst: Any) -> np.ndarray:
    """``x.to(dst)`` of ``n`` elements as ``unrolled_elementwise_kernel`` runs it (no vectorised loads) [s]."""
    p = model.params
    nbytes = farray(n) * (bytes_per_element(src) + bytes_per_element(dst))
    return p["launch_s"] + nbytes / (p["bandwidth"] * p["bw_eff_cast_copy"])


@predictor(OpName.CROSS_ENTROPY)
def _cross_entropy(model: CalibrationModel, op: Any) -> Prediction:
    """Cross-entropy as PyTorch runs it (module notes): forward ``[logits.float()]``, log-softmax, NLL;
    backward: zero fill, NLL's scatter, log-softmax backward, ``[the cast back]`` (the kernel names the
    profiler recorded on the H200: ``direct_copy_kernel_cuda`` in ``unrolled_elementwise_kernel``,
    ``cunn_SoftMaxForward``, ``nll_loss_forward_reduce_cuda_kernel_2d``; ``FillFunctor``,
    ``nll_loss_backward_reduce_cuda_kernel_2d``, ``cunn_SoftMaxBackward``, ``bfloat16_copy_kernel_cuda``)."""
    s, dt, p = op.shape, op.dtype, model.params
    t, v = farray(s["tokens"]), farray(s["vocab"])
    e = bytes_per_element(dt)
    up = bool(s.get("upcast", True)) and e < 4
    work = "fp32" if up else dt
    n = t * v
    launch = p["launch_s"]
    ls = _log_softmax(model, t, v, work)
    if not s.get("backward", False):
        cast = _cast_copy(model, n, dt, "fp32") if up else 0.0
        return _pred(model, *_sum(model, []), cast + ls + _nll(model, t), (2 + up) * launch, 2.0 + up)
    back = [ops.elementwise(n, dt, inputs=4.0 / e, outputs=1)] if up else []     # the cast back (vectorised)
    zero = ops.elementwise(n, work, inputs=0, outputs=1, flops_per_element=0)
    total, compute, memory, kl, pieces, kernels = _sum(model, [zero, *back])
    return _pred(model, 0.0, compute, 0.0, kl, pieces, kernels, total + ls + _nll(model, t), 2 * launch, 2.0)


@predictor(OpName.EMBEDDING)
def _embedding(model: CalibrationModel, op: Any) -> Prediction:
    s, dt, p = op.shape, op.dtype, model.params
    if not s.get("backward", False):
        return memory_bound(model, op)
    t, v, h = farray(s["tokens"]), farray(s["vocab"]), farray(s["hidden"])
    e = bytes_per_element(dt)
    zero = _t(model, ops.elementwise(v * h, dt, inputs=0, outputs=1, flops_per_element=0))
    # few tokens: 32 x 32-thread blocks of 32 feature columns each walk every token; as many of them run at
    # once on an SM as its resident threads allow (2 on sm_80..sm_90), so the waves are of that many per SM
    blocks = np.ceil(h / 32.0)
    per_sm = max(1.0, np.floor(model.threads_per_sm / 1024.0))
    feature = p["launch_s"] + np.ceil(blocks / (model.sm_count * per_sm)) * t * p["embedding_token_s"]
    # many tokens: sort the ids, then reduce the gradient rows segment by segment (fp32 partial sums):
    # compute_grad_weight gathers the rows of each segment through the sorted ids, one scalar per thread
    # and id (a dependent load, not a vectorised stream), and sum_and_scatter adds the partial sums into
    # the weight's rows: an element rate of their own, unless the bytes take longer
    rows = t * h * (2.0 * e + 8.0) + 16.0 * t
    sort = p["embedding_sort_s"] + np.maximum(rows / (p["bandwidth"] * p["bw_eff_embedding"]),
                                              t * h / p["embedding_segment_rate"])
    body = np.where(t <= EMBEDDING_SORT_MIN_TOKENS, feature, sort)
    return _pred(model, zero + body, 0.0 * body, zero + body - 2 * p["launch_s"], 2 * p["launch_s"], 2.0, 2.0)


@predictor(OpName.ADAMW_STEP)
def _adamw(model: CalibrationModel, op: Any) -> Prediction:
    s, p = op.shape, model.params
    numel, tensors = farray(s["numel"]), farray(s["tensors"])
    chunks = np.ceil(numel / MTA_CHUNK) + np.maximum(tensors - 1.0, 0.0)        # each tensor starts a chunk
    launches = np.maximum(np.ceil(tensors / MTA_MAX_TENSORS), np.ceil(chunks / MTA_MAX_BLOCKS))
    launches = launches + np.ceil(tensors / FOREACH_MAX_TENSORS)                 # the step counters
    # the fused kernel works through kILP = 4 elements a thread and step whatever their width: 16-bit
    # parameters and states load 8 bytes a step, so a bf16 step is bound by an element rate, not the bytes
    body = np.maximum(farray(op.bytes) / (p["bandwidth"] * p["bw_eff_adamw_step"]), numel / p["adamw_elem_rate"])
    # one block a chunk, on one SM: each wave of chunks lasts as long as its largest chunk takes one SM, at
    # the SM's share of the element rate or its own byte rate (the profiler on the H200: one fp32 tensor of
    # 65536 parameters, one chunk, is 36 us of kernels; eight tensors of 8192, 8 us)
    chunk = np.minimum(numel / np.maximum(tensors, 1.0), MTA_CHUNK)
    per_chunk = np.maximum(chunk * farray(op.bytes) / numel / p["sm_bandwidth"],
                           chunk / (p["adamw_elem_rate"] / model.sm_count))
    body = np.maximum(body, np.ceil(chunks / model.sm_count) * per_chunk)
    total = launches * p["launch_s"] + body
    return _pred(model, total, 0.0 * total, body, launches * p["launch_s"], launches, launches)


@predictor(OpName.KV_CACHE_WRITE)
def _kv_cache_write(model: CalibrationModel, op: Any) -> Prediction:
    """Two ``index_copy_`` kernels (keys, values). Each is an indexing kernel: one element per thread
    and step with its index arithmetic, no vectorised loads, so it moves elements at a rate of its
    own (``index_copy_rate``; about 0.3 G elements/us, 1.2 TB/s of bf16 read and write, on the H200)
    unless the traffic takes longer; and every thread first loads its index, then the element it
    addresses: two dependent memory latencies (``mem_latency_s``) before anything streams."""
    s, p = op.shape, model.params
    numel = farray(s["batch"]) * farray(s["kv_heads"]) * farray(s["tokens"]) * farray(s["head_dim"])
    half = dispatch(model, ops.elementwise(numel, op.dtype))
    launch = farray(half.overhead_s)
    body = np.maximum(farray(half.time_s) - launch, numel / p["index_copy_rate"]) + 2.0 * p["mem_latency_s"]
    total = 2.0 * (launch + body)
    return _pred(model, total, 0.0 * total, total - 2.0 * launch, 2.0 * launch, 2.0, 2.0)


def weight_only_matmul(model: CalibrationModel, op: Any) -> Prediction:
    """A GEMM with quantised weights, as :data:`WEIGHT_ONLY_PATH` says PyTorch runs it."""
    s, dt, p = op.shape, op.dtype, model.params
    m, n, k = farray(s["m"]), farray(s["n"]), farray(s["k"])
    wdt = s["weight_dtype"]
    path = WEIGHT_ONLY_PATH[wdt]
    if path == "scaled_mm_dynamic" and "flops_fp8" not in p:   # no fp8 tensor cores: dequantise instead
        path = "dequant_linear"
    e = bytes_per_element(dt)
    linear = ops.matmul(m, n, k, dt)
    if path == "scaled_mm_dynamic":   # |x|, amax, to fp32, clamp, /448, x / scale, to fp8, then the fp8 GEMM
        x = ops.elementwise(m * k, dt)
        tiny = [ops.elementwise(1, "fp32")] * 3
        parts = [x, ops.reduce_sum(1, m * k, dt), *tiny, x, ops.elementwise(m * k, dt, outputs=1.0 / e),
                 ops.matmul(m, n, k, "fp8")]
        # (the recipe is eight Python-level calls: for small products the GPU waits on the host, which this
        # kernel model leaves out; the H200 runs measured that host floor at ~90 us in one run, ~280 us in another)
        return _pred(model, *_sum(model, parts))
    if path == "weight_int8pack_mm":  # x and the scales to fp32, the fp32 kernel, the output to dtype
        casts = [ops.elementwise(m * k, "fp32", inputs=e / 4.0, outputs=1), ops.elementwise(n, "fp32", inputs=0.5),
                 ops.elementwise(m * n, dt, inputs=4.0 / e, outputs=1)]
        body = _weight_stream(model, op, wdt)
        return _pred(model, *_sum(model, casts), p["launch_s"] + body, p["launch_s"], 1.0)
    if path == "dequant_linear":       # w.to(dtype) * scale, then the GEMM
        nk = n * k
        wb = 0.5 if wdt == "int4" else 1.0      # packed bytes per weight
        parts = [ops.elementwise(nk, dt, inputs=wb / e, outputs=1), ops.elementwise(nk, dt, inputs=1, outputs=1),
                 linear]
        return _pred(model, *_sum(model, parts))
    # a weight-streaming kernel (tinygemm): the packed weight read once, its math on tensor cores
    body = _weight_stream(model, op, wdt)
    return Prediction(p["launch_s"] + body, 0.0 * body, body, p["launch_s"] + 0.0 * body, 1.0, {})


def _weight_stream(model: CalibrationModel, op: Any, wdt: str) -> np.ndarray:
    """Body of a weight-only GEMM kernel: its weight stream and its math at the kernel's own rates.

    ``weight_int4pack_mm`` (tinygemm) multiplies on tensor cores; ``weight_int8pack_mm`` is a
    CUDA-core fp32 kernel whose weight loads are not coalesced (about 0.1 TB/s and 1 TFLOP/s on the
    H200), so its time grows with ``m`` from a handful of tokens on.
    """
    p = model.params
    stream = farray(op.bytes) / (p["bandwidth"] * p[f"bw_eff_{wdt}_mm"])
    math = farray(op.flops) / p[f"flops_{wdt}_mm"]
    return soft_max(stream, math, p["overlap_p"])
