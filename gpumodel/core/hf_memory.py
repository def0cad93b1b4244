"""Training memory of a Hugging Face causal LM trained in eager PyTorch: the bytes held at each moment of a step.

What ``torch.cuda.max_memory_allocated`` reports over a step, moment by moment (the peak is the largest):

``forward_loss``
    weights, optimizer states, saved activations, autocast's bf16 weight copies (none of a mixture of experts'
    routed experts, which run in fp32 under autocast: ``torch._grouped_mm`` has no autocast rule), and the loss:
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
    A mixture of experts' layer runs its routed experts' backward first, with everything the layer saved
    and no more of the head's, their largest moment (:mod:`gpumodel.core.moe_backward`: Mixtral's fp32
    routing product, or the down projection's backward with its new expert gradient), then the rest of
    the layer's, with the routed experts' saved tensors gone and their gradients made.
``backward_end``
    the backward of the first layer: all gradients exist, one layer's activations remain (a mixture of
    experts: its routed experts' backward before its own gradients are made, then the rest).
``embedding_backward``
    the input embedding's gradient, made after the first layer's backward (untied embeddings): every
    gradient exists and no activation is left; with gradient accumulation the new gradient sits beside
    the held one until it is added.
``optimizer_step``
    weights, gradients, optimizer states and the step's temporaries (foreach Adam/AdamW allocate
    one parameter-sized ``sqrt(v)`` buffer).

Distributed options divide per GPU: ZeRO-1 shards optimizer states over ``dp * cp``, ZeRO-2 also
gradients, ZeRO-3 (FSDP full shard) also weights, plus two gathered layers; tensor parallelism
(``tp``) divides layer and embedding weights, attention/MLP activations and logits; sequence
parallelism divides the rest of the activations by ``tp``; context parallelism (``cp``) divides the
tokens; expert parallelism (``ep``) divides the routed experts, whose states shard over ``dp * cp / ep``;
pipeline parallelism (``pp``) keeps ``ceil(L / pp)`` layers per stage, and the first stage holds
``min(pp, micro-batches)`` micro-batches of activations (1F1B). The distributed terms follow
Rajbhandari et al. (2020) and Korthikanti et al. (2022); they are not measured here.

References
----------
S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", 2020.
V. Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022.
"""

from __future__ import annotations

import numpy as np

from ..records.transformer import MLPType, NormType, PositionType, TransformerConfig
from ..vocabulary import Checkpointing, Optimizer, Precision
from .activations import (Attention, checkpoint_bytes, head_activation_bytes, input_activation_bytes,
                          layer_activation_bytes, routed_activation_bytes,
                          precision_bytes, resolve_attention)
from .memory_parts import dense_mlp_width, largest_layer_tensor, matrix_shapes, optimizer_state_bytes
from .moe_backward import routed_backward_bytes

__all__ = ["hf_moments"]


def hf_moments(cfg: TransformerConfig, b, s, prec: Precision, opt: Optimizer, attn: Attention, ckpt: Checkpointing, *,
               use_cache: bool, keep_outputs: bool, micro_batches, state_bytes: float, foreach: bool, fused: bool,
               zero, dp, tp, pp, cp=1, ep=1, sequence_parallel: bool = False, cublas_workspace_bytes: float = 0.0):
    """``(moments, steady, params)``: the bytes held at each moment of a Hugging Face training step on one GPU [bytes].

    Parameters
    ----------
    cfg : TransformerConfig
    b, s : int or array
        Micro-batch [sequences] and sequence length [tokens] (the whole sequence; ``cp`` divides it).
    prec, opt, attn, ckpt :
        Resolved precision, optimizer, attention implementation and checkpointing mode.
    use_cache, keep_outputs, micro_batches, state_bytes, foreach, fused :
        As in :func:`gpumodel.training_memory` (``micro_batches`` is ``gradient_accumulation_steps``;
        ``state_bytes`` [B] the optimizer-state element size).
    zero, dp, tp, pp, cp, ep, sequence_parallel :
        The checked parallel degrees; ZeRO shards over ``dp * cp`` ranks.
    cublas_workspace_bytes : float
        Runtime workspace held throughout [B].

    Returns
    -------
    tuple
        ``moments`` (moment -> component -> bytes), ``steady`` (bytes held between steps) and the rank's
        parameters ``(shared, experts, layer)`` [count]: all but the routed experts, the routed experts, and
        one decoder layer's.
    """
    wb, a, r = precision_bytes(prec)
    T = b * s / cp
    V, h, L = cfg.vocab_size, cfg.hidden_size, cfg.num_layers
    layers = np.ceil(L / pp)
    in_flight = np.where(pp > 1, np.minimum(pp, micro_batches), 1)
    group = dp * cp

    # ---- parameters (per GPU): experts split over ep, their states over the ep-th part of the group
    n_experts = cfg.expert_parameters() * layers / (tp * ep)
    n_layer = (cfg.layer_parameters() - cfg.expert_parameters()) * layers / tp
    if not cfg.is_mla:  # more ranks than key/value heads: each rank holds a whole copy of one (k and v weights)
        kv_copies = np.maximum(cfg.num_kv_heads / tp, 1) - cfg.num_kv_heads / tp
        n_layer = n_layer + 2 * (h + cfg.qkv_bias) * cfg.head_dim * kv_copies * layers
    n_embed = cfg.embedding_parameters() / tp + h * (2 if cfg.norm_bias else 1)
    n_shared = n_layer + n_embed
    shard = np.where(zero >= 1, group, 1)
    shard_e = np.maximum(shard / ep, 1)

    def sharded(stage):   # bytes per parameter -> bytes of the rank's part, sharded from ZeRO stage ``stage`` on
        return n_shared / np.where(zero >= stage, group, 1) + n_experts / np.where(zero >= stage, shard_e, 1)

    weights = sharded(3) * wb
    grads = sharded(2) * wb
    total_states, temps = optimizer_state_bytes(cfg, opt, state_bytes)
    per_param, temps_per_param = total_states / cfg.num_parameters(), temps / cfg.num_parameters()
    states = per_param * sharded(1)
    temps = temps_per_param * sharded(1)
    if opt in (Optimizer.ADAM, Optimizer.ADAMW) and (fused or not foreach):
        # fused kernels need no temporary; the for-loop implementation one of the largest parameter
        temps = 0.0 if fused else max(r_ * c_ for r_, c_, _ in matrix_shapes(cfg)) / tp * state_bytes / shard
    layer_here = (cfg.layer_parameters() - cfg.expert_parameters() * (1 - 1 / ep)) / tp
    gathered = np.where((zero >= 3) & (group > 1), 2 * layer_here * wb, 0.0)
    held_grads = np.where(micro_batches > 1, grads, 0.0)

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
    cast_shard = np.where(zero >= 3, group, 1)  # FSDP casts its own shard (mixed-precision policy)
    # autocast's bf16 copy of each weight a matmul reads; not the routed experts', which run in their weights'
    # dtype (torch._grouped_mm has no autocast rule: activations.expert_bytes)
    routed_mm = cfg.num_experts * (3 if cfg.mlp == MLPType.GATED else 2) * h * cfg.expert_size if cfg.is_moe else 0
    layer_casts = (cfg.layer_matmul_parameters() - routed_mm) / tp / cast_shard * 2 if prec.is_amp else 0.0
    head_cast = V * h / tp / cast_shard * 2 if prec.is_amp else 0.0
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

    z = np.zeros(np.broadcast_shapes(*(np.shape(x) for x in (T, dp, tp, pp, zero, micro_batches, cp, ep))))
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
    # the gradients of a dense MLP's gate and up outputs (a mixture of experts: of its shared expert, if any)
    transient = np.maximum(transient, 2 * a * dense_mlp_width(cfg) / tp * T) + 2 * r * h * T
    # gradient accumulation: a weight's new gradient exists beside the held one until AccumulateGrad adds it (a
    # mixture of experts makes its routed experts' gradients in their own backward, below)
    transient = transient + np.where(micro_batches > 1, largest_layer_tensor(cfg, experts=False) / tp * wb, 0.0)
    new_embed_grad = 0.0 if cfg.tie_word_embeddings else V * h / tp * wb
    # a mixture of experts makes its large expert gradients while the embedding's is not yet made (checked
    # against the allocator traces); dense runs peak at the end of backward with it (measured), so keep it there
    embed_grad = new_embed_grad / np.where(zero >= 2, group, 1) if cfg.is_moe else 0.0
    head_grads = (V * h / tp + h) * wb
    # a mixture of experts' layer runs the backward of its attention (and shared expert) after its routed experts':
    # their saved tensors are gone and their gradients made (the routed experts' own backward: below)
    expert_grads = n_experts / np.where(zero >= 2, shard_e, 1) / layers * wb    # one layer's
    routed_saved = routed_activation_bytes(cfg, T, prec, tp)
    moments["layer_backward"] = dict(
        weights=weights, optimizer_states=states, gradients=np.maximum(held_grads, head_grads + expert_grads) + z,
        activations=acts + head + (one_layer if ckpt == Checkpointing.FULL else 0.0) - routed_saved,
        autocast_weight_copies=casts_saved + (layer_casts if ckpt == Checkpointing.FULL else 0.0),
        backward_temporaries=transient, gathered_weights=gathered, cublas_workspace=runtime)
    # backward of the first layer, the last to go: all other gradients but the input embedding's exist, one
    # layer's activations (recomputed from its checkpoint when checkpointing) and its weight copies remain
    moments["backward_end"] = dict(
        weights=weights, optimizer_states=states, gradients=grads - np.where(micro_batches > 1, 0.0, embed_grad),
        activations=head + one_layer - (0.0 if cfg.first_dense_layers else routed_saved),
        autocast_weight_copies=head_cast + layer_casts,
        backward_temporaries=transient, gathered_weights=gathered, cublas_workspace=runtime)
    if cfg.is_moe:      # one layer's gradients, sharded as the gradients are
        layer_grads = (n_layer / np.where(zero >= 2, group, 1) + n_experts / np.where(zero >= 2, shard_e, 1)) / layers * wb
        _routed_experts_backward(moments, cfg, T, s, prec, ckpt, micro_batches, acts, one_layer, layer_casts, layers,
                                 expert_grads, layer_grads, tp, ep, sequence_parallel)
    # then the embedding's backward (a dense V x h gradient): all gradients, no activations
    moments["embedding_backward"] = dict(
        weights=weights, optimizer_states=states, gradients=grads + z,
        backward_temporaries=np.where(micro_batches > 1, new_embed_grad, 0.0) + z,
        gathered_weights=gathered, cublas_workspace=runtime)
    if keep_outputs:
        for key in ("backward_start", "layer_backward", "backward_end", "embedding_backward", "optimizer_step"):
            moments[key]["model_outputs"] = held_out
    steady = weights + states + gathered + runtime + z
    return moments, steady, (n_shared, n_experts, layer_here)


def _routed_experts_backward(moments, cfg, T, s, prec, ckpt, micro_batches, acts, one_layer, layer_casts, layers,
                             expert_grads, layer_grads, tp, ep, sequence_parallel) -> None:
    """The routed experts' backward in the last layer (``layer_backward``) and the first (``backward_end``, unless
    it is dense) of a mixture of experts: each of those moments is the larger of the layer's other backward and
    this one.

    Held then: the layer's saved tensors (its recomputation from the checkpoint when checkpointing), the other
    layers' checkpoints or saved tensors, the token ids and RoPE tables (the final norm's and the LM head's saved
    tensors are gone), the layer's autocast weight copies, the gradient of the layer's output hidden states and
    the experts' largest backward moment (:func:`~gpumodel.core.moe_backward.routed_backward_bytes`) with the
    expert gradients it has made: beside the held ones with gradient accumulation, else the parameters' first
    (the first layer's own gradients are not made yet: the moment holds the others but the embedding's).
    """
    full = ckpt == Checkpointing.FULL
    _, _, r = precision_bytes(prec)
    h = cfg.hidden_size
    inputs = input_activation_bytes(cfg, T, s, prec)
    checkpoint = checkpoint_bytes(cfg, T, prec, tp, sequence_parallel) if full else 0.0
    # an fp32 residual stream: the first RMSNorm's x.float() is x itself, so the recomputed layer saves its checkpoint
    recomputed = one_layer - (checkpoint if r == 4 and cfg.norm == NormType.RMSNORM else 0.0)
    experts = r * h * T + routed_backward_bytes(cfg, T, prec, new_gradients=True, kept_gradients=micro_batches == 1,
                                                recomputed=full, tp=tp, ep=ep)
    first_grads = np.where(micro_batches > 1, 0.0, 1.0)     # without accumulation: not made before this backward
    routed = {
        "layer_backward": dict(gradients=moments["layer_backward"]["gradients"] - first_grads * expert_grads,
                               activations=acts + inputs + (recomputed if full else 0.0),
                               autocast_weight_copies=layer_casts * (1 if full else layers),
                               backward_temporaries=experts),
        "backward_end": dict(gradients=moments["backward_end"]["gradients"] - first_grads * layer_grads,
                             activations=inputs + checkpoint + recomputed, autocast_weight_copies=layer_casts,
                             backward_temporaries=experts),
    }
    if cfg.first_dense_layers:      # the first layer is a dense one (DeepSeek-V3): no routed experts there
        del routed["backward_end"]
    for key, parts in routed.items():
        other = moments[key]
        mine = dict(other, **parts)
        larger = sum(mine.values()) > sum(other.values())
        moments[key] = {k: np.where(larger, mine[k], other[k]) for k in other}
