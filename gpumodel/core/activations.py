"""Activation memory: the bytes autograd saves in a Hugging Face transformer forward pass.

Counted op by op from what each PyTorch op saves for its backward, for the Hugging Face
implementations of llama-style (pre-RMSNorm, gated MLP, RoPE) and gpt2-style (LayerNorm, plain
MLP, learned positions) decoders, following the method of Korthikanti et al. (2022) but for the
real dtypes of each precision mode:

* ``amp`` (fp32 weights under ``torch.autocast``): the residual stream and norms stay fp32, every
  matmul input gets its own bf16 copy (autocast caches only leaf weights, so ``q``, ``k`` and ``v``
  projections each save a separate cast of the normed input), matmul outputs are bf16. The routed
  experts of a mixture of experts are the exception: ``torch._grouped_mm`` has no autocast rule and
  ``transformers`` casts the routed tokens to the expert weights' dtype, so they run in fp32
  (:func:`expert_bytes`).
* ``bf16``/``fp16``: everything in 2 bytes except RMSNorm's fp32 upcast and norm statistics.
* ``fp32``: everything in 4 bytes.

Attention: ``sdpa`` picks cuDNN/flash (16-bit) or memory-efficient (fp32) kernels that save
``q, k, v, out`` and a fp32 log-sum-exp per head; with fp32 and grouped KV heads PyTorch falls back
to the ``math`` kernel (no GQA in the efficient kernel), which saves the ``S x S`` probabilities;
``eager`` saves the fp32 softmax output and its cast.

The per-op accounting was checked against every tensor autograd saved (via
``torch.autograd.graph.saved_tensors_hooks``) in the measured runs of ``tests/data/memory``.

References
----------
V. Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022.
"""

from __future__ import annotations

import enum

import numpy as np

from ..vocabulary import Precision, choice, precision as _precision
from ..records.transformer import MLPType, NormType, PositionType, TransformerConfig

__all__ = ["Precision", "Attention", "layer_activation_bytes", "checkpoint_bytes", "head_activation_bytes",
           "input_activation_bytes", "routed_activation_bytes", "resolve_attention", "precision_bytes",
           "expert_bytes"]


class Attention(str, enum.Enum):
    """Attention implementation: ``sdpa`` (PyTorch picks), ``flash``/``cudnn``/``efficient``/``math``
    (one SDPA kernel), ``eager`` (Hugging Face's matmul-softmax-matmul).

    The one enum of attention implementations of a training or inference forward (``training_memory``,
    ``inference_memory``). Members are upper case; the former lower-case names are aliases
    (``Attention.flash is Attention.FLASH``).
    """

    SDPA = "sdpa"
    FLASH = "flash"
    CUDNN = "cudnn"
    EFFICIENT = "efficient"
    MATH = "math"
    EAGER = "eager"
    sdpa, flash, cudnn, efficient, math, eager = SDPA, FLASH, CUDNN, EFFICIENT, MATH, EAGER


def precision_bytes(precision: Precision) -> tuple[int, int, int]:
    """(weight bytes, matmul-output bytes, residual-stream bytes) of a precision mode."""
    return precision.param_bytes, precision.compute_bytes, precision.residual_bytes


def resolve_attention(cfg: TransformerConfig, precision: Precision, attention: Attention) -> Attention:
    """The kernel SDPA runs: 16-bit -> cuDNN/flash; fp32 -> memory-efficient, or math when KV heads
    are grouped (the efficient kernel takes no ``enable_gqa``)."""
    if attention != Attention.SDPA:
        return attention
    if precision.name == "fp32":
        return Attention.MATH if cfg.num_kv_heads != cfg.num_heads else Attention.EFFICIENT
    return Attention.FLASH


def expert_bytes(precision: Precision) -> int:
    """Bytes of an element of the routed experts' computation [B]: their weights' dtype.

    ``transformers`` 5 runs the routed experts through ``torch._grouped_mm``, which has no autocast rule
    (pytorch/pytorch#174763), after casting the routed tokens to the weights' dtype
    (``transformers/integrations/moe.py``, ``_grouped_mm``: ``input.to(weight.dtype)``). With fp32 weights under
    autocast the experts therefore run in fp32: autocast makes no 16-bit copy of their weights, and the gate-up
    output, the SiLU output, the product and the down output are fp32.

    >>> from gpumodel.vocabulary import precision
    >>> expert_bytes(precision("amp_bf16")), expert_bytes(precision("bf16"))
    (4, 2)
    """
    return precision.param_bytes


def routed_activation_bytes(cfg: TransformerConfig, tokens, precision="amp_bf16", tp: int = 1) -> np.ndarray:
    """Bytes autograd saves for the routed experts of one mixture-of-experts layer [B] (0 for a dense model).

    Per routed copy (``k`` a token): the gathered normed input (and its cast to the experts' dtype where that
    differs), the gate-up output, the SiLU output and the product (the down projection's input), the down
    output (saved for the routing-weight multiply), all in the experts' dtype (:func:`expert_bytes`), and int64
    indices. They are released once the experts' backward has run, before the router's, the shared expert's and
    the attention's backward.

    >>> import gpumodel as gm
    >>> float(routed_activation_bytes(gm.model("mixtral-8x7b"), 1, "bf16"))   # 2 x (2h + 8I + 2h + 24)
    262192.0
    """
    prec = _precision(precision)
    if not cfg.is_moe:
        return np.zeros_like(np.asarray(tokens, dtype=float))
    r, ew = prec.residual_bytes, expert_bytes(prec)
    gathered = r * cfg.hidden_size + (ew * cfg.hidden_size if ew != r else 0)
    per_copy = _ffn_bytes(cfg, prec, ew, cfg.expert_size) + gathered + ew * cfg.hidden_size + 24
    return np.asarray(tokens, dtype=float) * cfg.experts_per_token * per_copy / tp


def _mlp_bytes(cfg: TransformerConfig, precision: Precision, a: int) -> float:
    if not cfg.is_moe:
        return _ffn_bytes(cfg, precision, a, cfg.intermediate_size)
    # the routed copies (routed_activation_bytes); per token: fp32 router softmax, top-k indices and weights
    n = float(routed_activation_bytes(cfg, 1, precision)) + 4 * cfg.num_experts + 36
    if cfg.shared_expert_intermediate_size:  # the shared expert (qwen2_moe, deepseek_v3) and its sigmoid gate
        n += _ffn_bytes(cfg, precision, a, cfg.shared_expert_intermediate_size) + a * cfg.hidden_size + 2 * a
    return n


def _ffn_bytes(cfg: TransformerConfig, precision: Precision, a: int, i: int) -> float:
    amp = precision.is_amp
    if cfg.mlp == MLPType.GATED:
        # gate out (saved by act), act out and up out (saved by mul), product (down input)
        return 4 * a * i
    if cfg.activation == "gelu_new":
        # HF NewGELUActivation: 0.5*x*(1+tanh(c*(x+0.044715*x**3))); under autocast pow runs in fp32
        return (4 * i * 3 + 2 * i + 2 * i) if amp else 5 * a * i
    return 2 * a * i  # exact or tanh GELU through F.gelu: saves its input; the output is the down input


def _attention_bytes(cfg: TransformerConfig, precision: Precision, attn: Attention, seq_len, a: int,
                     use_cache: bool, tp: int) -> np.ndarray:
    q, kv, nh = cfg.q_dim / tp, cfg.kv_dim / tp, cfg.num_heads / tp
    p = cfg.attn_dropout
    if attn in (Attention.FLASH, Attention.CUDNN, Attention.EFFICIENT):
        core = a * (q + 2 * kv) + a * q + 4 * nh  # q, k, v, out (= o_proj input), fp32 log-sum-exp
    elif attn == Attention.MATH:
        # scaled q, scaled expanded k, expanded v, probabilities, o_proj input copy
        core = a * 4 * q + a * nh * seq_len
        if p > 0:
            core = core + (1 + a) * nh * seq_len
    else:  # eager: q, repeated k and v, softmax out (fp32 for llama-style), its cast, o_proj input
        soft = 4 if (precision.is_amp or cfg.position == PositionType.ROPE) else a
        scores = soft + ((1 + a) if p > 0 else (a if soft != a else 0))
        core = a * 4 * q + scores * nh * seq_len
    if cfg.fused_qkv:
        if cfg.position == PositionType.ROPE:
            # RoPE's cat makes q, k contiguous per head: the output projection saves a relayout copy;
            # without the cache's copy, v stays a view that keeps the fused output alive
            core = core + a * q + (0 if use_cache else a * (q + kv))
        elif use_cache and attn in (Attention.FLASH, Attention.CUDNN, Attention.EFFICIENT):
            # the fused output stays alive through q's view, and the cache's copies of k and v are saved;
            # eager/math reshape q for their matmuls (a copy), so only the copies are kept there
            core = core + a * 2 * kv
    return np.asarray(core, dtype=float)


def layer_activation_bytes(cfg: TransformerConfig, tokens, seq_len, precision="amp_bf16", attention="sdpa",
                           use_cache: bool = True, tp: int = 1, sequence_parallel: bool = False) -> np.ndarray:
    """Bytes autograd saves in one decoder layer for ``tokens`` tokens (batch x sequence).

    Parameters
    ----------
    cfg : TransformerConfig
    tokens : int or array
        Tokens in the micro-batch, ``batch_size * seq_len``.
    seq_len : int or array
        Sequence length (the ``S x S`` terms of math/eager attention).
    precision : str
        "fp32", "amp_bf16", "amp_fp16", "bf16" or "fp16".
    attention : str
        "sdpa", "flash", "cudnn", "efficient", "math" or "eager".
    use_cache : bool
        Hugging Face's ``use_cache`` in the training forward (its KV-cache copies).
    tp : int
        Tensor-parallel degree: attention and MLP internals divide by it.
    sequence_parallel : bool
        With ``tp``, norms, dropout and residual terms divide by ``tp`` as well (Korthikanti et al.).

    Returns
    -------
    ndarray
        Bytes [B] per layer.

    Notes
    -----
    Per token, llama-style under amp (h hidden, I FFN, q/kv projection widths, n heads):

    .. math:: 2(8h + 4) + 6h + 4h + 2(q + 2kv) + 2q + 4n + 8I

    Examples
    --------
    >>> import gpumodel as gm
    >>> cfg = gm.model("llama-2-7b")
    >>> float(layer_activation_bytes(cfg, 4096, 4096, "bf16")) / 2**20   # MiB per layer, 1 x 4096 tokens
    728.53125
    """
    prec = _precision(precision)
    attn = resolve_attention(cfg, prec, choice(Attention, attention, "attention"))
    _, a, r = precision_bytes(prec)
    h = cfg.hidden_size
    seq_len = np.asarray(seq_len, dtype=float)
    tokens = np.asarray(tokens, dtype=float)
    sp = tp if sequence_parallel else 1
    norm = _norm_bytes(cfg, r)
    norm2 = 8.0 if cfg.parallel_residual else norm  # parallel residual: both norms read the same input
    n_mlp_in = 1 if (cfg.mlp == MLPType.PLAIN or cfg.fused_gate_up) else 2
    if cfg.is_moe:  # the router, and the shared expert's gate-up and sigmoid gate; the routed experts cast nothing
        n_mlp_in = 1 + (n_mlp_in if cfg.shared_expert_intermediate_size else 0) + int(cfg.shared_expert_gate)
    n_qkv_in = 1 if cfg.fused_qkv else 3
    if prec.is_amp:  # every matmul casts its activation input separately
        lin_in = 2 * h * (n_qkv_in + n_mlp_in)
    else:  # the norm output is shared by the projections that read it
        lin_in = a * h * 2
    drop = 2 * h if cfg.resid_dropout > 0 else 0
    # gemma2/3 norm the attention and MLP outputs too (16-bit inputs; olmo2's post-norms replace the
    # pre-norms and are counted as those); qwen3, gemma3 and olmo2
    # norm q and k (per head or over all heads) before RoPE
    extra = cfg.extra_norms * _norm_bytes(cfg, a) if cfg.extra_norms else 0.0
    if cfg.qk_norm != "none":
        extra += (4 + a) * (cfg.q_dim + cfg.kv_dim) / tp
    # without sequence parallelism the norms, dropout masks and projection inputs are replicated
    replicated = (norm + norm2 + drop + lin_in + extra) / sp
    sharded = _attention_bytes(cfg, prec, attn, seq_len, a, use_cache, tp) + _mlp_bytes(cfg, prec, a) / tp
    return tokens * (replicated + sharded)


def _norm_bytes(cfg: TransformerConfig, r: int) -> float:
    """Per token: RMSNorm saves its fp32 input, rsqrt and normalized x (fp32 in Gemma's ``(1 + w)``
    variant, else in the input dtype); LayerNorm its input, mean and rstd."""
    h = cfg.hidden_size
    if cfg.norm == NormType.RMSNORM:
        return (4 + (4 if cfg.family.startswith("gemma") else r)) * h + 4
    return r * h + 8


def checkpoint_bytes(cfg: TransformerConfig, tokens, precision="amp_bf16", tp: int = 1,
                     sequence_parallel: bool = False) -> np.ndarray:
    """Bytes one checkpointed layer keeps: its input hidden states (residual-stream dtype)."""
    _, _, r = precision_bytes(_precision(precision))
    sp = tp if sequence_parallel else 1
    return np.asarray(tokens, dtype=float) * r * cfg.hidden_size / sp


def head_activation_bytes(cfg: TransformerConfig, tokens, seq_len, precision="amp_bf16") -> np.ndarray:
    """Saved bytes outside the layers, excluding the loss: token ids, embedding dropout mask,
    final norm, LM-head input and the RoPE tables."""
    prec = _precision(precision)
    _, a, r = precision_bytes(prec)
    h = cfg.hidden_size
    tokens = np.asarray(tokens, dtype=float)
    norm = _norm_bytes(cfg, r)
    head_in = 2 * h if prec.is_amp else a * h
    per_token = norm + head_in + (h if cfg.embd_dropout > 0 else 0) + 16  # labels, shifted labels
    return tokens * per_token + input_activation_bytes(cfg, tokens, seq_len, prec)


def input_activation_bytes(cfg: TransformerConfig, tokens, seq_len, precision="amp_bf16") -> np.ndarray:
    """Bytes outside the layers that a layer's backward still finds: the int64 token ids and the RoPE tables
    (the final norm's and the LM head's saved tensors went when their backward ran)."""
    _, _, r = precision_bytes(_precision(precision))
    rope = 2 * np.asarray(seq_len, dtype=float) * cfg.head_dim * (2 if r == 2 else 4) if cfg.position == PositionType.ROPE else 0
    return 8 * np.asarray(tokens, dtype=float) + rope
