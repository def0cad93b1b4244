"""The kernels of one serving step (a prefill or one decode step) of a decoder-only transformer.

:func:`step_kernels` returns ``(family, OpCost, launches)`` for one GPU of a tensor-parallel group:
every matmul's output (QKV, gate/up) or input (output projection, down projection) width and the
heads are divided by ``tp``; the LM head is split over the vocabulary.

``engine="graph"`` is a lean decoder whose step is replayed as one CUDA graph (vLLM, TensorRT-LLM,
gpt-fast, and ``bench/measure_serving.py``): per layer ``rms_norm``, one fused QKV matmul, rotary
embedding as PyTorch's elementwise kernels (``q*cos``, ``-x2``, ``cat``, ``*sin``, ``+``, for q and k; all over
slices, head-transposed views or broadcasts, so all run the generic strided kernel: ``strided=True``),
the KV-cache write, flash attention over the cache, the output projection, the residual add,
``rms_norm``, one fused gate/up matmul, ``silu(gate)``, ``* up`` (both over halves: strided), the down projection and the residual
add; then the final norm and the LM head on the last position of each sequence only.

``engine="compiled"`` is the same step after a compiler has fused it (gpt-fast's ``torch.compile``,
TensorRT-LLM's fused kernels), replayed as a CUDA graph: every run of norms and elementwise kernels
between two matmul, attention or KV-write kernels becomes one kernel (:func:`gpumodel.core.ops.fuse`: its
external traffic once, no strided-kernel penalty, a row-wise part's floor kept).

``engine="hf"`` is Hugging Face ``generate`` in eager mode: separate q/k/v and gate/up projections, the
RMSNorm of ``modeling_llama`` (fp32 cast, ``pow``, ``mean``, ``rsqrt``, two multiplies, cast back),
and a dynamic cache that concatenates each step's keys and values onto the cache (``torch.cat``
copies the whole cache per layer and step).

Families: ``"matmul"``, ``"attention"``, ``"kv_write"``, ``"norm"``, ``"elementwise"``, ``"embedding"``,
``"logits"``, and ``"fused"`` (the compiled engine's fused chains). The all-reduce is not a kernel here (see :func:`gpumodel.serving.kernels.allreduce_time`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..base.arguments import renamed_arguments
from ..core import ops
from ..records.dtypes import DType
from ..training.layer import with_operands
from ..records.transformer import MLPType, NormType, PositionType, TransformerConfig
from . import kernels as K

__all__ = ["Kernel", "step_kernels", "host_ops", "allreduces_per_step"]


class Kernel(NamedTuple):
    family: str
    op: ops.OpCost
    launches: Any          # launches per step (an array where it depends on the batch: MoE experts reached)


def _mem(numel: float, read: float, write: float, flops: float = 1.0, strided: bool = False,
         operands: int | None = None) -> ops.OpCost:
    """A streaming kernel over ``numel`` elements reading/writing the given bytes per element; ``strided``:
    over slices, transposed or broadcast operands (PyTorch's generic, non-vectorised kernel) of ``operands``
    tensors (:func:`gpumodel.training.layer.memory_kernel`)."""
    op = ops.elementwise(numel, "int8", inputs=read, outputs=write, flops_per_element=flops, strided=strided)
    return with_operands(op, operands, write if strided else None)


def _act_dtype(dtype: DType) -> str:
    """Activations and attention run in 16 bits for every weight format but fp32 (fp8 GEMMs keep bf16 I/O
    in this model: the activation quantisation kernel is folded into the GEMM's read)."""
    return "fp32" if dtype == DType.FP32 else ("fp16" if dtype == DType.FP16 else "bf16")


@renamed_arguments(batch="batch_size", new_tokens="step_tokens")
def step_kernels(cfg: TransformerConfig, batch_size: int, step_tokens: int, cached: int, dtype: DType,
                 kv_dtype: DType | None, tp: int = 1, engine: str = "graph", group_size: int = 128, *,
                 attention_kernel: str = "sdpa") -> list[Kernel]:
    """Kernels of one step that feeds ``step_tokens`` tokens per sequence on top of ``cached`` ones.

    A prefill is ``step_tokens = prompt_len, cached = 0``; a decode step ``step_tokens = 1,
    cached = context_len``. ``attention_kernel`` is the library whose flash kernels run the attention
    (:class:`~gpumodel.core.ops.AttentionKernel`). ``batch`` and ``new_tokens`` are the former names of
    ``batch_size`` and ``step_tokens`` (deprecated).
    """
    act = _act_dtype(dtype)
    a = 4.0 if act == "fp32" else 2.0
    gemm_dt = "fp8" if dtype == DType.FP8 else act
    wdt = None if dtype in (DType.FP8, DType.FP32, DType.BF16, DType.FP16) else dtype
    kv_dt = kv_dtype if kv_dtype is not None else DType(act)
    hf = engine == "hf"
    b, s, c = batch_size, step_tokens, cached
    t = b * s
    h, i, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    hd, nh, nkv = cfg.head_dim, cfg.num_heads // tp, max(cfg.num_kv_heads // tp, 1)
    q, kv = nh * hd, nkv * hd
    out: list[Kernel] = []
    L = cfg.num_layers

    def add(family: str, op: ops.OpCost, n: int = L) -> None:
        out.append(Kernel(family, op, n))

    def gemm(m: float, n: float, k: float) -> ops.OpCost:
        return K.matmul(m, n, k, gemm_dt, wdt, group_size)

    def mm(m: float, n: float, k: float, family: str = "matmul", count: int = L) -> None:
        add(family, gemm(m, n, k), count)

    def norm(rows: float, count: int = L) -> None:
        if cfg.norm != NormType.rmsnorm:
            add("norm", ops.layer_norm(rows, h, act), count)
        elif not hf:
            add("norm", ops.rms_norm(rows, h, act), count)
        else:  # modeling_llama's LlamaRMSNorm, eager
            for numel, rd, wr in ((rows * h, a, 4), (rows * h, 4, 4), (rows, 4, 4), (rows * h, 8, 4),
                                  (rows * h, 4, a), (rows * h, 2 * a, a)):
                add("norm", _mem(numel, rd, wr), count)
            add("norm", ops.reduce_sum(rows, h, "fp32"), count)

    # ---- one decoder layer
    norm(t)
    if hf:
        for width in (q, kv, kv):
            mm(t, width, h)
    else:
        mm(t, q + 2 * kv, h)
    if cfg.position == PositionType.rope:
        for width in (q, kv):
            # -x2, cat, q*cos, rot*sin (cos/sin: one row per position, broadcast over batch and heads), add:
            # every operand is a half slice, a head-transposed view or a broadcast, and the sum's two
            # operands differ in layout, so all five run PyTorch's generic (strided) kernel
            for numel, rd, wr, n in ((t * width / 2, a, a, 2), (t * width, a, a, 2),
                                     (t * width, a, a, 2), (t * width, 2 * a, a, 3)):
                add("elementwise", _mem(numel, rd, wr, strided=True, operands=n))
            add("elementwise", ops.concat(t * width, act, strided=True))   # cat: CatArrayBatchedCopy
    if hf:  # DynamicCache.update: torch.cat([cache, new]) for keys and values, the whole cache copied
        cache_numel = b * nkv * (c + s) * hd
        add("kv_write", _mem(cache_numel, a, a, 0), 2 * L)
    else:
        for op in K.kv_cache_write(b, nkv, s, hd, act, kv_dt.value):
            add("kv_write", op)
    # a prefill (nothing cached) or a chunk of several tokens is causal; one new token over a cache sees it all
    causal = bool(np.all(np.asarray(c) == 0) or np.any(np.asarray(s) > 1))
    add("attention", K.attention(b, nh, s, hd, act, causal=causal, kv_heads=nkv, kv_seq=c + s,
                                 kv_dtype=None if hf else kv_dt.value, kernel=attention_kernel))
    if hf and s > 1:
        add("elementwise", _mem(t * q, a, a, 0))          # transpose(1, 2).contiguous()
    mm(t, h, q)
    add("elementwise", _mem(t * h, 2 * a, a))                # residual add
    norm(t)
    if cfg.is_moe:
        _experts(add, gemm, cfg, t, tp, a)
    elif cfg.mlp == MLPType.gated:
        if hf:
            mm(t, i // tp, h)
            mm(t, i // tp, h)
        else:
            mm(t, 2 * (i // tp), h)
        # a fused gate/up output is chunked: silu reads one half, the product the other (strided views)
        add("elementwise", _mem(t * i / tp, a, a, 4, strided=not hf, operands=2))     # silu(gate)
        add("elementwise", _mem(t * i / tp, 2 * a, a, strided=not hf, operands=3))    # * up
    else:
        mm(t, i // tp, h)
        add("elementwise", _mem(t * i / tp, a, a, 8))
    mm(t, h, i // tp)
    add("elementwise", _mem(t * h, 2 * a, a))                # residual add

    # ---- outside the layers
    add("embedding", ops.embedding(t, V, h, act), 1)
    norm(t if hf else b, count=1)                            # HF normalises every position
    mm(b, V // tp, h, family="logits", count=1)              # logits of the last position only
    return _fuse_chains(out) if engine == "compiled" else out


#: the kernel families a compiler fuses into one kernel when they run back to back
FUSIBLE = ("norm", "elementwise")


def _fuse_chains(kernels: list[Kernel]) -> list[Kernel]:
    """Each run of fusible kernels launched the same number of times becomes one ``"fused"`` kernel.

    The layers run back to back, so a layer's leading norm follows the previous layer's residual add:
    the leading fusible kernels of the layer are moved behind its last ones before the runs are fused.
    """
    end = next(i for i, k in enumerate(kernels) if k.family == "embedding")   # the layer's kernels come first
    lead = next(i for i, k in enumerate(kernels[:end]) if k.family not in FUSIBLE)
    kernels = kernels[lead:end] + kernels[:lead] + kernels[end:]
    out: list[Kernel] = []
    chain: list[Kernel] = []

    def flush() -> None:
        if len(chain) == 1:
            out.append(chain[0])
        elif chain:
            out.append(Kernel("fused", ops.fuse(*(k.op for k in chain)), chain[0].launches))
        chain.clear()

    for k in kernels:
        if k.family in FUSIBLE and (not chain or np.array_equal(k.launches, chain[0].launches)):
            chain.append(k)
            continue
        flush()
        (chain if k.family in FUSIBLE else out).append(k)
    flush()
    return out


def _experts(add, gemm, cfg: TransformerConfig, t, tp: int, a: float) -> None:
    """A mixture-of-experts MLP: router, the experts the step's tokens reach, and the weighted sum.

    With uniform routing of ``t`` tokens to ``k`` of ``E`` experts, :math:`E_t = E (1 - (1 - k/E)^t)`
    experts are reached, each by :math:`t k / E_t` tokens; each reached expert reads its weights once
    (one gate/up and one down GEMM of :math:`\\lceil t k / E_t \\rceil` rows: a kernel has whole rows).
    """
    E, k, h, i = cfg.num_experts, cfg.experts_per_token, cfg.hidden_size, cfg.intermediate_size // tp
    reached = E * (1.0 - (1.0 - k / E) ** np.asarray(t, dtype=float))
    rows = np.ceil(t * k / reached - 1e-9)
    L = cfg.num_layers
    add("matmul", ops.matmul(t, E, h, "bf16"), L)              # router logits (kept in 16 bits)
    add("elementwise", _mem(t * E, a, a, 4))                 # softmax + top-k over E (one small kernel)
    add("matmul", gemm(rows, 2 * i, h), L * reached)
    add("matmul", gemm(rows, h, i), L * reached)
    add("elementwise", _mem(t * k * i, 2 * a, a, 4))         # silu(gate) * up
    add("elementwise", _mem(t * k * h, 2 * a, a, 2))         # weighted sum of the k expert outputs


def allreduces_per_step(cfg: TransformerConfig) -> int:
    """All-reduces of the hidden state per step under tensor parallelism (after attention and MLP)."""
    return 2 * cfg.num_layers


def host_ops(cfg: TransformerConfig, prefill: bool) -> int:
    """Python-level torch ops one eager HF Llama-style forward dispatches (views and casts included).

    Per layer: RMSNorm 8 (``to``, ``pow``, ``mean``, ``+eps``, ``rsqrt``, ``*``, ``to``, ``*weight``) x 2;
    q/k/v projections, views and transposes 9; rotary ``apply_rotary_pos_emb`` 14 (unsqueeze x 2, per q
    and k: mul, two slices, neg, cat, mul, add); cache update 2; SDPA with its mask slice and
    ``repeat_kv``-free GQA 3; transpose/reshape/contiguous 3; output projection 1; residual adds 2;
    MLP 5 (gate, up, act, mul, down). Outside the layers: embedding, rotary cos/sin (about 10),
    causal-mask construction (about 10, prefill), final norm, LM head, slicing, ``float()``.
    """
    per_layer = 16 + 9 + 14 + 2 + 3 + 3 + 1 + 2 + 5
    outside = 1 + 10 + 8 + 1 + 2 + (10 if prefill else 2)
    return cfg.num_layers * per_layer + outside
