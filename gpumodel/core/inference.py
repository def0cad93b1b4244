"""Inference memory: weights (16-bit or quantized), KV cache, prefill and decode peaks.

:func:`inference_memory` models a Hugging Face causal LM in ``eval()`` under ``torch.no_grad``:

* **weights**: ``dtype`` bytes per parameter; for "int8"/"int4" the layer matmul weights are
  quantized with one 16-bit scale (and, for int4, one 16-bit zero point) per ``group_size`` weights,
  while embeddings, LM head and norms stay 16-bit.
* **KV cache**: ``2 x layers x kv_heads x head_dim x batch x tokens x kv bytes`` (GQA-aware).
* **prefill** (``mode="prefill"``, a plain ``model(input_ids, use_cache=True)``): the full logits
  ``batch x seq x vocab`` in the weight dtype are returned and held with the cache.
* **generate** (``mode="generate"``, ``model.generate``): Hugging Face computes only the last
  position's logits (``logits_to_keep=1``) and upcasts them to fp32; the peak is either the
  prefill's largest layer temporaries (the gated MLP's three ``tokens x ffn`` tensors, or the
  ``S x S`` scores of eager attention) or the end of decoding, when the grown cache is copied by
  ``torch.cat`` one layer at a time.

Examples
--------
>>> import gpumodel as gm
>>> m = gm.inference_memory("llama-2-7b", batch_size=1, seq_len=4096, dtype="bf16")
>>> round(m.weights_bytes / 1e9, 1), round(m.kv_cache_bytes / 2**30, 1)   # GB, GiB
(13.5, 2.0)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..base.reprs import ResultRecord, breakdown_html
from .activations import Attention
from ..records.dtypes import bytes_per_element
from ..base.errors import ArgumentError
from .memory import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, RESERVE_FACTOR
from ..records.transformer import MLPType, NormType, TransformerConfig
from ..vocabulary.parallel_rules import tensor_parallel
from ..vocabulary import (broadcastable, choice, nonnegative_int, nonnegative_number, positive_int, positive_number,
                         kv_cache_dtype, resolve_model, weight_dtype, within_positions)

__all__ = ["inference_memory", "InferenceMemory", "weight_bytes", "kv_cache_bytes"]

class Mode(str, enum.Enum):
    """What the serving call does: ``model.generate`` or one forward over the prompt."""

    GENERATE = "generate"
    PREFILL = "prefill"
    generate, prefill = GENERATE, PREFILL


def _bytes(name, what: str) -> float:
    """Bytes per element of a weight or KV-cache dtype argument [B]."""
    return float(bytes_per_element(weight_dtype(name, what)))


def weight_bytes(cfg: TransformerConfig, dtype: str = "bf16", group_size: int = 128) -> float:
    """Bytes of the weights; quantized dtypes (int8, int4, fp8) apply to layer matmul weights only,
    with a 16-bit scale per ``group_size`` weights (int4 also a 16-bit zero point)."""
    b = _bytes(dtype, "dtype")
    n = cfg.num_parameters()
    if b >= 2:
        return n * b
    q = cfg.num_layers * cfg.layer_matmul_parameters()
    per_group = 4.0 if b == 0.5 else 2.0
    return q * (b + per_group / group_size) + (n - q) * 2.0


def kv_cache_bytes(cfg: TransformerConfig, batch_size, tokens, kv_dtype: str = "bf16"):
    """Bytes of a KV cache holding ``tokens`` positions for ``batch_size`` sequences [B]."""
    return 2 * cfg.num_layers * cfg.kv_dim * np.asarray(batch_size, float) * np.asarray(tokens, float) * _bytes(kv_dtype, "kv_dtype")


@dataclass(frozen=True)
class InferenceMemory(ResultRecord):
    """Inference memory on one GPU [bytes]; arrays when inputs were arrays.

    ``peak_bytes`` is comparable to ``torch.cuda.max_memory_allocated``; ``breakdown`` says what is
    held at the peak and ``peak_moment`` when ("prefill" or "decode"). ``kv_cache_bytes`` is the cache
    at the end of generation (prompt + new tokens), while ``breakdown["kv_cache"]`` is the cache held at
    the peak, which during prefill covers the prompt only.
    """

    peak_bytes: float | np.ndarray
    weights_bytes: float
    kv_cache_bytes: float | np.ndarray
    prefill_bytes: float | np.ndarray
    decode_bytes: float | np.ndarray
    breakdown: Mapping[str, float | np.ndarray]
    peak_moment: str | np.ndarray
    reserved_bytes: float | np.ndarray
    total_bytes: float | np.ndarray

    def __repr__(self) -> str:
        if np.ndim(self.peak_bytes):
            return f"InferenceMemory(peak_bytes=array(shape={np.shape(self.peak_bytes)}), ...)"
        return (f"InferenceMemory(peak={self.peak_bytes / 2**30:.2f} GiB at {self.peak_moment}, "
                f"weights={self.weights_bytes / 2**30:.2f} GiB, kv_cache={self.kv_cache_bytes / 2**30:.2f} GiB)")

    def _repr_html_(self) -> str:
        return breakdown_html("InferenceMemory", self.peak_bytes, self.peak_moment, self.breakdown)


def inference_memory(model, batch_size, seq_len, dtype="bf16", kv_dtype=None, *, new_tokens=0, mode="generate",
                     attention="sdpa", group_size: int = 128, tp: int = 1,
                     cublas_workspace_bytes: float = CUBLAS_WORKSPACE_BYTES / 2,
                     cuda_context_bytes: float = CUDA_CONTEXT_BYTES,
                     reserve_factor: float = RESERVE_FACTOR) -> InferenceMemory:
    """Memory to serve a causal LM: weights, KV cache, and the prefill/decode peak.

    Parameters
    ----------
    model : TransformerConfig, str or dict
        A config, a preset name (``gm.model``) or a Hugging Face config dict.
    batch_size : int or array
        Sequences decoded together.
    seq_len : int or array
        Prompt length [tokens].
    dtype : {"bf16", "fp16", "fp32", "fp8", "int8", "int4"}
        Weight dtype (activations are 16-bit unless "fp32").
    kv_dtype : {"fp32", "bf16", "fp16", "fp8", "int8"}, optional
        KV-cache dtype (default: the activation dtype, fp32 with fp32 weights, else bf16;
        :func:`~gpumodel.vocabulary.kv_cache_dtype`). The serving time functions take the same values but
        int8, whose kernels they do not model.
    new_tokens : int
        Tokens generated after the prompt (the cache grows to ``seq_len + new_tokens``).
    mode : {"generate", "prefill"}
        "generate": ``model.generate`` (last-position logits only); "prefill": one forward returning
        the logits of every position.
    attention : {"sdpa", "flash", "cudnn", "efficient", "math", "eager"}
        :class:`~gpumodel.core.activations.Attention`; "eager" and "math" materialize ``batch x heads x S x S``
        scores in the prefill, the others do not.
    group_size : int
        Quantization group size for int8/int4 weights.
    tp : int
        Tensor-parallel degree (weights, cache and temporaries divide by it).
    cublas_workspace_bytes : float
        cuBLAS workspace held through the allocator [bytes] (default: one 32 MiB workspace, the forward's).
    cuda_context_bytes : float
        CUDA context and library handles outside the allocator [bytes] (default
        :data:`~gpumodel.core.memory.CUDA_CONTEXT_BYTES`).
    reserve_factor : float
        Allocator reserve over the allocated peak, >= 1 (default :data:`~gpumodel.core.memory.RESERVE_FACTOR`).

    Returns
    -------
    InferenceMemory
        One GPU's memory [bytes]: ``peak_bytes`` (as ``torch.cuda.max_memory_allocated``), ``weights_bytes``,
        ``kv_cache_bytes``, ``prefill_bytes``, ``decode_bytes``, ``reserved_bytes``, ``total_bytes`` (reserved
        plus the CUDA context), the ``breakdown`` at the peak and ``peak_moment`` ("prefill" or "decode");
        arrays where the inputs were arrays.
    """
    cfg = resolve_model(model)
    b = positive_int(batch_size, "batch_size")
    s = positive_int(seq_len, "seq_len")
    new_tokens = nonnegative_int(new_tokens, "new_tokens")
    mode = choice(Mode, mode, "mode")
    attention = choice(Attention, attention, "attention")
    group_size = positive_int(group_size, "group_size")
    tp = tensor_parallel(cfg, tp)
    broadcastable(batch_size=b, seq_len=s, new_tokens=new_tokens, group_size=group_size, tp=tp)
    replicated = np.asarray(tp) % cfg.num_kv_heads == 0  # more ranks than KV heads: each rank holds one
    cublas_workspace_bytes = nonnegative_number(cublas_workspace_bytes, "cublas_workspace_bytes")
    cuda_context_bytes = nonnegative_number(cuda_context_bytes, "cuda_context_bytes")
    reserve_factor = positive_number(reserve_factor, "reserve_factor")
    if np.any(np.asarray(reserve_factor) < 1):
        raise ArgumentError(f"reserve_factor must be >= 1, got {reserve_factor!r}")
    wbytes = _bytes(dtype, "dtype")
    a = 4.0 if wbytes == 4 else 2.0
    kv_dtype = kv_cache_dtype(kv_dtype, weight_dtype(dtype, "dtype"))
    within_positions(cfg, np.add(s, new_tokens), "seq_len + new_tokens")
    weights = weight_bytes(cfg, dtype, group_size) / tp
    kv_tp = np.where(replicated, np.minimum(tp, cfg.num_kv_heads), tp)  # replicated KV heads do not divide further
    h, i, V = cfg.hidden_size, cfg.intermediate_size / tp, cfg.vocab_size / tp
    T = b * s
    cache_prompt = kv_cache_bytes(cfg, b, s, kv_dtype) / kv_tp
    cache_final = kv_cache_bytes(cfg, b, s + new_tokens, kv_dtype) / kv_tp
    # the largest temporaries of one layer in the prefill (no autograd: freed as soon as consumed)
    if cfg.mlp == MLPType.GATED:
        mlp = 3 * a * i
    else:
        # gelu_new's Python formula keeps its input, 0.5*x and two temporaries alive at once
        mlp = (4 if cfg.activation == "gelu_new" else 2) * a * i
    if cfg.is_moe:
        mlp = cfg.experts_per_token * mlp + a * h
    attn_t = a * (2 * cfg.q_dim + 2 * cfg.kv_dim) / tp
    scores = (4 + a) * cfg.num_heads / tp * s if attention in (Attention.EAGER, Attention.MATH) else 0.0
    norm = 8 * h if cfg.norm == NormType.RMSNORM else 4 * h
    # held during a layer: the embedding output (a variable of the model's forward), the layer input
    # (the caller's loop variable), the residual and the normed input; plus the largest op temporaries
    layer_tmp = T * (4 * a * h + np.maximum(np.maximum(mlp, attn_t + scores), norm))
    if mode == Mode.PREFILL:
        logits = T * V * a
        # the LM head runs after the decoder returned: only its normed output is held with the logits
        prefill = weights + cache_prompt + np.maximum(layer_tmp, logits + a * h * T)
    else:
        logits = b * V * (a + 4)  # last position, then generate's fp32 copy
        prefill = weights + cache_prompt + np.maximum(layer_tmp, logits + a * h * T)
    one_layer_kv = cache_final / cfg.num_layers / 2
    generating = (mode == Mode.GENERATE) & (np.asarray(new_tokens) > 0)
    decode = weights + cache_final + np.where(generating, one_layer_kv + b * V * (a + 4), 0.0)
    peak = np.maximum(prefill, decode) + cublas_workspace_bytes
    at_prefill = prefill >= decode
    scalar = np.ndim(peak) == 0
    out = (lambda x: float(x)) if scalar else (lambda x: x)  # noqa: E731
    transient = np.where(at_prefill, prefill - weights - cache_prompt, decode - weights - cache_final)
    breakdown = {"weights": out(weights + 0 * peak), "kv_cache": out(np.where(at_prefill, cache_prompt, cache_final)),
                 "activations_and_logits": out(transient), "cublas_workspace": out(cublas_workspace_bytes + 0 * peak)}
    moment = ("prefill" if at_prefill else "decode") if scalar else np.where(at_prefill, "prefill", "decode")
    return InferenceMemory(peak_bytes=out(peak), weights_bytes=out(weights + 0 * peak), kv_cache_bytes=out(cache_final + 0 * peak),
                           prefill_bytes=out(prefill + 0 * peak), decode_bytes=out(decode + 0 * peak), breakdown=breakdown,
                           peak_moment=moment, reserved_bytes=out(peak * reserve_factor),
                           total_bytes=out(peak * reserve_factor + cuda_context_bytes))
