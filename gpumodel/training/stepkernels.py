"""The kernels one training step of a Hugging Face decoder launches in eager PyTorch, in order.

Matmuls and attention are the :mod:`gpumodel.core.ops` records; memory-bound kernels are written out
one by one as eager PyTorch runs them (no fusion), with the bytes each reads and writes in its own
dtypes: under autocast the residual stream stays fp32 (the parameters are fp32), Llama's RMSNorm
computes in fp32 and its rotary embedding multiplies by fp32 ``cos``/``sin``, each projection casts
its input to 16 bits, GPT-2's ``gelu_new`` is eight elementwise kernels, and the loss up-casts the
logits to fp32. Mixture-of-experts layers are :mod:`gpumodel.training.moe`.

Backward of a memory-bound kernel that reads ``n`` tensors is ``n`` kernels, each reading the
output gradient and one saved tensor and writing one input gradient; of a matmul, two matmuls;
of attention, the attention backward kernel.

Beside each kernel the layer records what the host does to launch it (a forward op under
autograd, an autocast cast, a backward node) and the Python glue around it (module calls and
views), which :mod:`gpumodel.training.steptime` prices with :class:`gpumodel.training.hostcost.HostCosts`.

References
----------
Hugging Face transformers ``modeling_llama.py`` and ``modeling_gpt2.py`` (v4.40-v5), PyTorch
``torch/optim/adamw.py`` (``_multi_tensor_adamw``).
"""

from __future__ import annotations

from ..records.transformer import MLPType, PositionType, TransformerConfig
from .layer import (ELEMENT_BYTES, COMPUTE_DTYPE, PARAM_DTYPE, Layer, add_linear, add_mlp, add_norm, add_rope,
                    add_split_backward, memory_kernel)
from .moe import mla_projections, moe_block

__all__ = ["OPTIMIZER_PASSES", "FUSED_PASSES", "attention_block", "decoder_layer", "parameter_tensors"]

#: Passes over all parameters of one optimizer step in PyTorch's default (foreach) implementation,
#: each as (tensors read, tensors written), every tensor of the parameter dtype.
OPTIMIZER_PASSES = {
    # weight decay p*=(1-lr*wd); m.lerp_(g); v.mul_(b2); v.addcmul_(g, g); d = v.sqrt(); d.div_(bc2);
    # d.add_(eps); p.addcdiv_(m, d)
    "adamw": ((1, 1), (2, 1), (1, 1), (2, 1), (1, 1), (1, 1), (1, 1), (3, 1)),
    "adam": ((2, 1), (1, 1), (2, 1), (1, 1), (1, 1), (1, 1), (3, 1)),
    "sgd": ((2, 1),),                      # p.add_(g, alpha=-lr)
    "sgd_momentum": ((2, 1), (2, 1)),     # buf.mul_(m).add_(g); p.add_(buf)
    "adafactor": ((2, 1), (2, 1), (3, 1)),  # row/col statistics, update, apply (factored states are small)
    "adamw_8bit": ((2, 1), (2, 1)),       # one fused kernel over 1-byte states, plus the apply
}
#: The fused (``fused=True``) optimizers: one kernel reading and writing each state once.
FUSED_PASSES = {"adamw": ((4, 3),), "adam": ((4, 3),), "sgd": ((2, 1),), "sgd_momentum": ((3, 2),)}


def attention_block(L: Layer, cfg: TransformerConfig, b: int, s: int, n: int, r: int, c: int, p: int) -> None:
    t, h = b * s, cfg.hidden_size
    q, kv = cfg.q_dim, cfg.kv_dim
    if cfg.is_mla:
        mla_projections(L, cfg, t, n, r, c, p)
    elif cfg.fused_qkv:
        add_linear(L, t, q + 2 * kv, h, n, c, p, cfg.qkv_bias)
        L.views += 4
        add_split_backward(L, cfg, t, (q, kv, kv), c)
    else:
        for width in (q, kv, kv):
            add_linear(L, t, width, h, n, c, p, cfg.qkv_bias)
        L.views += 6
    if cfg.qk_norm != "none":
        for width in (q, kv):
            add_norm(L, cfg, t * width // (cfg.head_dim if cfg.qk_norm == "head" else width), c, p,
                  cfg.head_dim if cfg.qk_norm == "head" else width)
    if cfg.position == PositionType.rope and not cfg.is_mla:
        add_rope(L, t, (q, kv), r, c)
    v_dim = cfg.num_heads * (cfg.v_head_dim or cfg.head_dim)
    L.attention(b, cfg.num_heads, s, cfg.head_dim, cfg.num_kv_heads)
    L.mem(t * v_dim, c, c, 0)                  # transpose(1, 2).contiguous()
    L.views += 2
    add_linear(L, t, h, v_dim, c, c, p, cfg.o_bias)


def decoder_layer(cfg: TransformerConfig, b: int, s: int, precision: str, moe: bool | None = None,
           experts: str = "grouped_mm", expert_load=None, attention_kernel: str = "sdpa") -> Layer:
    """One decoder layer's kernels; ``attention_kernel`` is the library of its 16-bit flash attention."""
    dt, t, h = COMPUTE_DTYPE[precision], b * s, cfg.hidden_size
    c, p = ELEMENT_BYTES[dt], ELEMENT_BYTES[PARAM_DTYPE[precision]]
    r = max(c, p)  # residual stream: fp32 under autocast (fp32 parameters), else the compute dtype
    L = Layer(dt, attention_kernel)
    L.modules += 2                             # the decoder layer and its attention module
    L.views += 4                               # kwargs, position embeddings, residual bookkeeping
    post_norm = cfg.family == "olmo2"
    n = r if post_norm else add_norm(L, cfg, t, r, p)
    attention_block(L, cfg, b, s, n, r, c, p)
    if post_norm or cfg.extra_norms:
        add_norm(L, cfg, t, c, p)                 # post-attention norm (olmo2, gemma2/3)
    dropout = cfg.resid_dropout > 0
    if dropout:
        L.mem(t * h, c, c + 1)                 # dropout: output and mask
    L.mem(t * h, r + c, r, 1, inputs=2)        # residual add
    L.backward.append((memory_kernel(t * h, 2 * r, r), 1))  # the residual's two gradients meeting
    n = r if post_norm else add_norm(L, cfg, t, r, p)
    if cfg.parallel_residual:
        pass
    moe = cfg.is_moe if moe is None else moe
    if moe:
        moe_block(L, cfg, t, n, r, c, p, experts, expert_load)
    else:
        add_mlp(L, cfg, t, n, c, p, cfg.intermediate_size)
    if post_norm or cfg.extra_norms:
        add_norm(L, cfg, t, c, p)                 # post-feedforward norm
    if dropout:
        L.mem(t * h, c, c + 1)
    L.mem(t * h, r + c, r, 1, inputs=2)        # residual add
    L.backward.append((memory_kernel(t * h, 2 * r, r), 1))
    return L


def parameter_tensors(cfg: TransformerConfig) -> int:
    """Parameter tensors of the Hugging Face model (what foreach optimizers and ``zero_grad`` loop over)."""
    nb = 2 if cfg.norm_bias else 1
    attn = (1 if cfg.fused_qkv else 3) * (1 + cfg.qkv_bias) + 1 + cfg.o_bias
    if cfg.is_mla:
        attn = (3 if cfg.q_lora_rank else 1) + 3 + 1 + (2 if cfg.q_lora_rank else 1) * cfg.qkv_bias + cfg.o_bias
    attn += 2 if cfg.qk_norm != "none" else 0
    mats = (2 if cfg.fused_gate_up else 3) if cfg.mlp == MLPType.gated else 2
    dense = mats * (1 + cfg.mlp_bias)
    moe = 3 + (dense + cfg.shared_expert_gate if cfg.shared_expert_intermediate_size else 0)  # experts, router
    n_dense = cfg.num_dense_layers
    layers = (2 + cfg.extra_norms) * nb * cfg.num_layers + cfg.num_layers * attn
    layers += n_dense * dense + (cfg.num_layers - n_dense) * moe
    embed = 1 + (cfg.position == PositionType.learned) + (not cfg.tie_word_embeddings)
    return layers + embed + nb
