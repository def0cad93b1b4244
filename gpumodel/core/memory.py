"""Training memory: what ``torch.cuda.max_memory_allocated`` reports over a Hugging Face training step.

:func:`training_memory` evaluates the memory held at each moment of a step where the peak can
occur and returns the largest, with a breakdown of what is held then:

``forward_loss``
    weights, optimizer states, saved activations, autocast's bf16 weight copies, and the loss:
    the logits in the model dtype, their fp32 upcast (Hugging Face's ``ForCausalLMLoss`` calls
    ``logits.float()``) and ``log_softmax``'s fp32 output; under amp with ``use_cache`` also the
    fp32 KV cache the forward builds.
``backward_start``
    everything saved, plus the gradient of the ``log_softmax`` output and of its input, both fp32
    ``tokens x vocab`` (``nll_loss`` and ``log_softmax`` backward).
``layer_backward``
    the backward of the last layer: everything saved except the loss buffers, the LM head's
    gradients, the hidden-state gradients and the layer's largest backward temporary (with
    math/eager attention two ``S x S`` buffers per head, plus the math kernel's boolean mask); with
    checkpointing, one layer's recomputed activations and weight copies on top of the checkpoints.
``backward_end``
    the backward of the first layer: all gradients exist, one layer's activations remain.
``optimizer_step``
    weights, gradients, optimizer states and the step's temporaries (foreach Adam/AdamW allocate
    one parameter-sized ``sqrt(v)`` buffer).

Distributed options divide per GPU: ZeRO-1 shards optimizer states over ``dp``, ZeRO-2 also
gradients, ZeRO-3 (FSDP full shard) also weights, plus two gathered layers; tensor parallelism
(``tp``) divides layer and embedding weights, attention/MLP activations and logits; sequence
parallelism divides the rest of the activations by ``tp``; pipeline parallelism (``pp``) keeps
``ceil(L / pp)`` layers per stage, and the first stage holds ``min(pp, micro-batches)`` micro-batches
of activations (1F1B). The distributed terms follow Rajbhandari et al. (2020) and Korthikanti et al.
(2022); they are not measured here.

References
----------
S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", 2020.
V. Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..base.reprs import ResultRecord, breakdown_html
from ..base.errors import ArgumentError
from ..vocabulary import (Checkpointing, Optimizer, broadcastable, checkpointing_mode, choice, deprecated_alias, flag,
                         nonnegative_number, positive_int, positive_number, precision as _precision,
                         resolve_model, within_positions)
from ..vocabulary.parallel_rules import parallel_degrees
from .activations import (Attention, checkpoint_bytes, head_activation_bytes, layer_activation_bytes,
                          precision_bytes, resolve_attention)
from ..records.transformer import PositionType, TransformerConfig
from ..records.dtypes import UnknownDTypeError, bytes_per_element

__all__ = ["training_memory", "TrainingMemory", "Optimizer", "Checkpointing", "optimizer_state_bytes",
           "CUBLAS_WORKSPACE_BYTES", "CUDA_CONTEXT_BYTES", "RESERVE_FACTOR", "MemoryArgumentError"]

MiB = 2 ** 20
#: cuBLAS workspace PyTorch allocates through its caching allocator, one per thread that runs matmuls
#: (the forward's and autograd's): 32 MiB each on compute capability 9.0 (measured: 33,554,432 B).
CUBLAS_WORKSPACE_BYTES = 2 * 32 * MiB
#: CUDA context and library handles outside the allocator, measured on an H200 with torch 2.11 / CUDA 13
#: (``mem_get_info`` used minus ``memory_reserved`` after the first matmul: 718 MB), rounded up.
CUDA_CONTEXT_BYTES = 768 * MiB
#: Allocator reserve over the allocated peak (segments, rounding, fragmentation): median of the measured
#: ``max_memory_reserved / max_memory_allocated`` over the development runs was 1.13.
RESERVE_FACTOR = 1.10


#: Former name of :class:`~gpumodel.base.errors.ArgumentError` for memory arguments (kept for one release).
MemoryArgumentError = ArgumentError


def _matrix_shapes(cfg: TransformerConfig) -> list[tuple[int, int, int]]:
    """(rows, cols, count) of the weight matrices (for Adafactor's factored states)."""
    h, q, kv, i, L = cfg.hidden_size, cfg.q_dim, cfg.kv_dim, cfg.intermediate_size, cfg.num_layers
    e = max(cfg.num_experts, 1)
    n_mlp = 3 if cfg.mlp.value == "gated" else 2
    attn = [(q + 2 * kv, h, L)] if cfg.fused_qkv else [(q, h, L), (kv, h, 2 * L)]
    if cfg.fused_gate_up:
        mlp = [(2 * i, h, L * e), (h, i, L * e)]
    else:
        mlp = [(i, h, n_mlp * L * e)]
    mats = attn + [(h, q, L)] + mlp + [(cfg.vocab_size, h, 1)]
    if not cfg.tie_word_embeddings:
        mats.append((cfg.vocab_size, h, 1))
    if cfg.position == PositionType.LEARNED:
        mats.append((cfg.max_position_embeddings, h, 1))
    return mats


def optimizer_state_bytes(cfg: TransformerConfig, optimizer="adamw", state_bytes: float = 4) -> tuple[float, float]:
    """(state bytes, step temporaries bytes) of an optimizer over all parameters of ``cfg``.

    adam/adamw: two moments; foreach implementation allocates one parameter-sized temporary.
    sgd: none; sgd_momentum: one buffer. adafactor (no first moment): row and column statistics of
    each matrix in fp32, full statistics for vectors; per-parameter update temporaries of the largest
    matrix. adamw_8bit (bitsandbytes): one byte per moment plus a fp32 absmax per 256-element block.
    """
    opt = choice(Optimizer, optimizer, "optimizer")
    n = cfg.num_parameters()
    if opt in (Optimizer.ADAMW, Optimizer.ADAM):
        return 2 * n * state_bytes, n * state_bytes
    if opt == Optimizer.SGD:
        return 0.0, 0.0
    if opt == Optimizer.SGD_MOMENTUM:
        return n * state_bytes, 0.0
    if opt == Optimizer.ADAMW_8BIT:
        return 2 * n * (1 + 4 / 256), 0.0
    mats = _matrix_shapes(cfg)
    in_mats = sum(r * c * k for r, c, k in mats)
    factored = sum((r + c) * k for r, c, k in mats)
    largest = max(r * c for r, c, _ in mats)
    return 4.0 * (factored + (n - in_mats)), 2 * 4.0 * largest


@dataclass(frozen=True)
class TrainingMemory(ResultRecord):
    """Memory of one training step on one GPU [bytes]; arrays when inputs were arrays.

    Attributes
    ----------
    peak_bytes : comparable to ``torch.cuda.max_memory_allocated`` over a whole step.
    steady_bytes : held between steps (weights, optimizer states; gradients are set to None).
    breakdown : component -> bytes held at the moment of the peak.
    peak_moment : the moment of the peak ("forward_loss", "backward_start", "layer_backward", "backward_end",
        "optimizer_step").
    moments : moment -> total bytes at that moment.
    reserved_bytes : estimate of ``torch.cuda.max_memory_reserved`` (``peak_bytes * reserve_factor``).
    total_bytes : reserved plus the CUDA context: what a fits-or-not question compares with the card.
    """

    peak_bytes: float | np.ndarray
    steady_bytes: float | np.ndarray
    breakdown: Mapping[str, float | np.ndarray]
    peak_moment: str | np.ndarray
    moments: Mapping[str, float | np.ndarray]
    reserved_bytes: float | np.ndarray
    total_bytes: float | np.ndarray
    inputs: Mapping[str, object] = field(default_factory=dict)

    def __repr__(self) -> str:
        if np.ndim(self.peak_bytes):
            return f"TrainingMemory(peak_bytes=array(shape={np.shape(self.peak_bytes)}), ...)"
        parts = ", ".join(f"{k}={v / 2**30:.2f}" for k, v in self.breakdown.items() if v)
        return (f"TrainingMemory(peak={self.peak_bytes / 2**30:.2f} GiB at {self.peak_moment}, "
                f"steady={self.steady_bytes / 2**30:.2f} GiB, total={self.total_bytes / 2**30:.2f} GiB; {parts} GiB)")

    def _repr_html_(self) -> str:
        return breakdown_html("TrainingMemory", self.peak_bytes, self.peak_moment, self.breakdown)


def training_memory(model, batch_size, seq_len, precision="amp_bf16", optimizer="adamw", checkpointing=False,
                    attention="sdpa", *, use_cache: bool = True, keep_outputs: bool = False,
                    gradient_accumulation_steps: int = 1,
                    optimizer_dtype: str | None = None, foreach: bool = True, fused: bool = False,
                    zero: int = 0, dp: int = 1,
                    tp: int = 1, pp: int = 1, sequence_parallel: bool = False, zero_stage: int | None = None,
                    cublas_workspace_bytes: float = CUBLAS_WORKSPACE_BYTES,
                    cuda_context_bytes: float = CUDA_CONTEXT_BYTES,
                    reserve_factor: float | None = None, expandable_segments: bool = False) -> TrainingMemory:
    """Peak memory of one training step of a Hugging Face causal LM on one GPU.

    Parameters
    ----------
    model : TransformerConfig or str
        A config or a preset name (``gm.model``).
    batch_size : int or array
        Micro-batch size per GPU [sequences].
    seq_len : int or array
        Sequence length [tokens].
    precision : {"fp32", "amp_bf16", "amp_fp16", "bf16", "fp16"}
        fp32: fp32 everything; amp_*: fp32 weights, grads and states, forward under autocast;
        bf16/fp16: weights, grads and optimizer states in that dtype (``model.to(dtype)``).
    optimizer : {"adamw", "adam", "sgd", "sgd_momentum", "adafactor", "adamw_8bit"}
    checkpointing : bool or {"none", "full", "selective"}
        ``True``/"full": Hugging Face gradient checkpointing of every decoder layer.
        "selective": recompute only the attention score terms (Korthikanti et al.); the same as "none"
        with flash/cuDNN/efficient attention, which save no scores.
    attention : {"sdpa", "flash", "cudnn", "efficient", "math", "eager"}
    use_cache : bool
        Hugging Face builds a KV cache in a training forward unless ``use_cache=False``.
    keep_outputs : bool
        The loop keeps the model's output object (logits, KV cache) alive through backward and the
        optimizer step (``out = model(...); out.loss.backward()``) instead of taking ``.loss`` only.
    gradient_accumulation_steps : int
        Micro-batches per optimizer step; from the second on, gradients are held during forward/backward.
    optimizer_dtype : str, optional
        Optimizer-state dtype of adamw, adam and sgd_momentum (default: the weights' dtype, as ``torch.optim``
        does); refused for the optimizers whose states it does not set (sgd, adamw_8bit, adafactor).
    foreach, fused : bool
        ``torch.optim`` implementation of Adam/AdamW: foreach (the default on CUDA) allocates one
        temporary as large as all parameters together, the for-loop one (``foreach=False``) one as
        large as the largest parameter, the fused kernel (``fused=True``) none.
    zero, dp, tp, pp, sequence_parallel
        Distributed degrees (per-GPU division; see module notes), named as in :class:`gpumodel.Parallelism`:
        ``zero`` is the ZeRO stage (0-3). Not measured.
    zero_stage : int, optional
        Deprecated name of ``zero``.
    cublas_workspace_bytes, cuda_context_bytes, reserve_factor
        Runtime terms (module constants give the measured defaults). ``reserve_factor`` [ratio] is what the
        caching allocator reserves over the allocated peak: :data:`RESERVE_FACTOR` by default, 1 with
        ``expandable_segments``.
    expandable_segments : bool
        ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``: the allocator maps 2 MiB pages into one
        growing segment and unmaps free ones before it gives up, so a step needs its allocated peak and no
        more (``reserve_factor`` 1): on 38 H100 runs near the card's capacity it failed exactly where the
        allocated peak plus the CUDA context exceeded the memory the card reports
        (``bench/edge_accuracy.py``).

    Returns
    -------
    TrainingMemory

    Examples
    --------
    >>> import gpumodel as gm
    >>> m = gm.training_memory("llama-3.2-1b", batch_size=4, seq_len=1024, precision="amp_bf16")
    >>> m.peak_moment, round(m.peak_bytes / 2**30, 1)
    ('backward_start', 30.0)
    """
    cfg = resolve_model(model)
    prec = _precision(precision)
    opt = choice(Optimizer, optimizer, "optimizer")
    attn = choice(Attention, attention, "attention")
    ckpt = checkpointing_mode(checkpointing)
    b = positive_int(batch_size, "batch_size")
    s = positive_int(seq_len, "seq_len")
    gradient_accumulation_steps = positive_int(gradient_accumulation_steps, "gradient_accumulation_steps")
    use_cache, keep_outputs = flag(use_cache, "use_cache"), flag(keep_outputs, "keep_outputs")
    foreach, fused = flag(foreach, "foreach"), flag(fused, "fused")
    if zero_stage is not None:  # the former name: refused together with a ZeRO stage given as zero
        zero = deprecated_alias("zero_stage", "zero", zero_stage, None if np.ndim(zero) == 0 and zero == 0 else zero)
    dp, tp, pp, zero = parallel_degrees(cfg, dp=dp, tp=tp, pp=pp, zero=zero)
    sequence_parallel = flag(sequence_parallel, "sequence_parallel")
    if sequence_parallel and np.all(np.asarray(tp) == 1):
        raise ArgumentError("sequence_parallel needs tensor parallelism (tp > 1)")
    broadcastable(batch_size=b, seq_len=s, gradient_accumulation_steps=gradient_accumulation_steps, dp=dp, tp=tp, pp=pp,
                  zero=zero)
    expandable_segments = flag(expandable_segments, "expandable_segments")
    if reserve_factor is None:
        reserve_factor = 1.0 if expandable_segments else RESERVE_FACTOR
    reserve_factor = positive_number(reserve_factor, "reserve_factor")
    if np.any(np.asarray(reserve_factor) < 1):
        raise ArgumentError(f"reserve_factor must be >= 1, got {reserve_factor!r}")
    cublas_workspace_bytes = nonnegative_number(cublas_workspace_bytes, "cublas_workspace_bytes")
    cuda_context_bytes = nonnegative_number(cuda_context_bytes, "cuda_context_bytes")

    wb, a, r = precision_bytes(prec)
    sb = wb if optimizer_dtype is None else _dtype_bytes(optimizer_dtype)
    if optimizer_dtype is not None and opt in (Optimizer.SGD, Optimizer.ADAMW_8BIT, Optimizer.ADAFACTOR):
        kept = {"sgd": "no state", "adamw_8bit": "int8 states", "adafactor": "fp32 factored states"}[opt.value]
        raise ArgumentError(f"optimizer_dtype applies to adamw, adam and sgd_momentum; {opt.value} keeps {kept} "
                            f"(drop optimizer_dtype)")
    within_positions(cfg, s)
    T = b * s
    V, h, L = cfg.vocab_size, cfg.hidden_size, cfg.num_layers
    layers = np.ceil(L / pp)
    in_flight = np.where(pp > 1, np.minimum(pp, gradient_accumulation_steps), 1)

    # ---- parameters (per GPU)
    n_layer = cfg.layer_parameters() * layers / tp
    if not cfg.is_mla:  # more ranks than key/value heads: each rank holds a whole copy of one (k and v weights)
        kv_copies = np.maximum(cfg.num_kv_heads / tp, 1) - cfg.num_kv_heads / tp
        n_layer = n_layer + 2 * (h + cfg.qkv_bias) * cfg.head_dim * kv_copies * layers
    n_embed = cfg.embedding_parameters() / tp + h * (2 if cfg.norm_bias else 1)
    n = n_layer + n_embed
    frac = n / cfg.num_parameters()
    weights = n * wb / np.where(zero >= 3, dp, 1)
    grads = n * wb / np.where(zero >= 2, dp, 1)
    states, temps = optimizer_state_bytes(cfg, opt, sb)
    states, temps = states * frac, temps * frac
    if opt in (Optimizer.ADAM, Optimizer.ADAMW) and (fused or not foreach):
        # fused kernels need no temporary; the for-loop implementation one of the largest parameter
        temps = 0.0 if fused else max(r_ * c_ for r_, c_, _ in _matrix_shapes(cfg)) / tp * sb
    states, temps = states / np.where(zero >= 1, dp, 1), temps / np.where(zero >= 1, dp, 1)
    gathered = np.where((zero >= 3) & (dp > 1), 2 * cfg.layer_parameters() / tp * wb, 0.0)
    held_grads = np.where(gradient_accumulation_steps > 1, grads, 0.0)

    # ---- activations
    if ckpt == Checkpointing.FULL:
        acts = layers * in_flight * checkpoint_bytes(cfg, T, prec, tp, sequence_parallel)
    else:
        acts = layers * in_flight * layer_activation_bytes(cfg, T, s, prec, attn, use_cache, tp, sequence_parallel)
        if ckpt == Checkpointing.SELECTIVE and attn in (Attention.MATH, Attention.EAGER):
            flash = layer_activation_bytes(cfg, T, s, prec, Attention.FLASH, use_cache, tp, sequence_parallel)
            acts = layers * in_flight * flash
    head = head_activation_bytes(cfg, T, s, prec)
    one_layer = layer_activation_bytes(cfg, T, s, prec, attn, use_cache, tp, sequence_parallel)
    shard = np.where(zero >= 3, dp, 1)  # FSDP casts its own shard (mixed-precision policy)
    layer_casts = cfg.layer_matmul_parameters() / tp / shard * 2 if prec.is_amp else 0.0
    head_cast = V * h / tp / shard * 2 if prec.is_amp else 0.0
    casts_saved = head_cast + (0.0 if ckpt == Checkpointing.FULL else layers * layer_casts)
    casts_forward = head_cast + layers * layer_casts
    logit_bytes = T * V / tp
    loss_saved = 4 * logit_bytes  # log_softmax output
    logits_forward = (a * logit_bytes) + (4 * logit_bytes if a != 4 else 0) + loss_saved
    # under amp, RoPE makes k fp32 and the cache (created with k's dtype) promotes v to fp32 too; the cache
    # lives until the output object is dropped. Without RoPE (gpt2) its bf16 copies are the saved k, v.
    fp32_cache = prec.is_amp and use_cache and ckpt != Checkpointing.FULL and cfg.position == PositionType.ROPE
    kv_transient = layers * T * 8 * cfg.kv_dim / tp if fp32_cache else 0.0
    held_out = (a * logit_bytes + kv_transient) if keep_outputs else 0.0
    runtime = float(cublas_workspace_bytes)
    base = weights + states + gathered + runtime

    z = np.zeros(np.broadcast_shapes(*(np.shape(x) for x in (T, dp, tp, pp, zero, gradient_accumulation_steps))))
    T = T + z
    moments: dict[str, dict] = {
        "forward_loss": dict(weights=weights, optimizer_states=states, gradients=held_grads, activations=acts + head,
                             autocast_weight_copies=casts_forward, logits_and_loss=logits_forward,
                             kv_cache=kv_transient, gathered_weights=gathered, cublas_workspace=runtime),
        "backward_start": dict(weights=weights, optimizer_states=states, gradients=held_grads, activations=acts + head,
                               autocast_weight_copies=casts_saved, logits_and_loss=loss_saved + 8 * logit_bytes,
                               gathered_weights=gathered, cublas_workspace=runtime),
        "optimizer_step": dict(weights=weights, optimizer_states=states, gradients=grads,
                               optimizer_temporaries=temps, gathered_weights=gathered, cublas_workspace=runtime),
    }
    # backward of one layer: gradients of the hidden states in and out, plus the largest transient
    # (math/eager attention: gradients of the probabilities and of the scores, S x S per head)
    attn_kernel = resolve_attention(cfg, prec, attn)
    nh, s_bytes = cfg.num_heads / tp, (4 if (prec.is_amp or a == 4 or cfg.position == PositionType.ROPE) else a)
    if attn_kernel == Attention.MATH:  # _safe_softmax also builds a bool "row fully masked" map
        transient = (2 * s_bytes + 1) * nh * s * T
    elif attn_kernel == Attention.EAGER:
        transient = 2 * s_bytes * nh * s * T
    else:
        transient = a * (cfg.q_dim + 2 * cfg.kv_dim) / tp * T
    transient = np.maximum(transient, 2 * a * cfg.intermediate_size / tp * T) + 2 * r * h * T
    head_grads = (V * h / tp + h) * wb
    moments["layer_backward"] = dict(
        weights=weights, optimizer_states=states, gradients=np.maximum(held_grads, head_grads) + z,
        activations=acts + head + (one_layer if ckpt == Checkpointing.FULL else 0.0),
        autocast_weight_copies=casts_saved + (layer_casts if ckpt == Checkpointing.FULL else 0.0),
        backward_temporaries=transient, gathered_weights=gathered, cublas_workspace=runtime)
    # backward of the first layer, the last to go: all other gradients exist, one layer's activations
    # (recomputed from its checkpoint when checkpointing) and its weight copies remain
    moments["backward_end"] = dict(
        weights=weights, optimizer_states=states, gradients=grads, activations=head + one_layer,
        autocast_weight_copies=head_cast + layer_casts, backward_temporaries=transient,
        gathered_weights=gathered, cublas_workspace=runtime)
    if keep_outputs:
        for key in ("backward_start", "layer_backward", "backward_end", "optimizer_step"):
            moments[key]["model_outputs"] = held_out
    names = list(moments)
    totals = np.stack([np.broadcast_to(sum(np.asarray(v, float) for v in m.values()) + z, np.shape(T))
                       for m in moments.values()])
    idx = np.argmax(totals, axis=0)
    peak = np.max(totals, axis=0)
    components = sorted({c for m in moments.values() for c in m}, key=_ORDER.index)
    breakdown = {c: np.choose(idx, [np.broadcast_to(np.asarray(moments[k].get(c, 0.0), float) + z, np.shape(T))
                                    for k in names]) for c in components}
    steady = base + z
    scalar = np.ndim(T) == 0
    out = lambda x: float(x) if scalar else x  # noqa: E731
    reserved = peak * reserve_factor
    return TrainingMemory(
        peak_bytes=out(peak), steady_bytes=out(steady), breakdown={k: out(v) for k, v in breakdown.items()},
        peak_moment=names[int(idx)] if scalar else np.asarray(names)[idx],
        moments={k: out(t) for k, t in zip(names, totals)}, reserved_bytes=out(reserved),
        total_bytes=out(reserved + cuda_context_bytes),
        inputs=dict(model=cfg.name, precision=prec.name, optimizer=opt.value, checkpointing=ckpt.value,
                    attention=attn.value, zero=zero, dp=dp, tp=tp, pp=pp))


_ORDER = ["weights", "gathered_weights", "gradients", "optimizer_states", "optimizer_temporaries", "activations",
          "autocast_weight_copies", "kv_cache", "logits_and_loss", "model_outputs", "backward_temporaries", "cublas_workspace"]


def _dtype_bytes(name: str, arg: str = "optimizer_dtype") -> float:
    try:
        return float(bytes_per_element(name))
    except UnknownDTypeError as exc:
        raise UnknownDTypeError(f"{arg}: {exc}", argument=arg, value=name, allowed=exc.allowed) from None
