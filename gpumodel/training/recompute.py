"""What Megatron-Core's selective recomputation re-runs in the backward, module by module (``--recompute-modules``):
the forward work of each recomputed submodule, in the model-FLOPs convention and as kernels of one GPU's shard.

The submodules are those of :class:`gpumodel.vocabulary.RecomputeModule`; what each drops from memory is in
:mod:`gpumodel.core.megatron_activations`. A submodule exists in some layers only: ``layernorm`` re-runs the norms
that are not fused into a linear layer (multi-latent attention's input norm, a mixture-of-experts layer's pre-MLP
norm), ``mlp`` the dense layers' MLPs, ``moe``, ``moe_act`` and ``shared_experts`` the mixture-of-experts layers'.

References
----------
Megatron-LM ``megatron/core/transformer/transformer_config.py`` (``recompute_modules``),
``megatron/core/transformer/transformer_layer.py``, ``multi_latent_attention.py``, ``moe/experts.py``,
``moe/moe_layer.py``. A. Chowdhery et al., "PaLM: Scaling Language Modeling with Pathways", 2022, appendix B (the
FLOPs convention).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import ops
from ..records.transformer import MLPType, TransformerConfig
from ..vocabulary import RecomputeModule
from .layer import memory_kernel

__all__ = ["module_flops_per_token", "recompute_kernels"]

_M = RecomputeModule


def _layer_counts(cfg: TransformerConfig) -> tuple[int, int]:
    """(dense layers, mixture-of-experts layers)."""
    return cfg.num_dense_layers, cfg.num_layers - cfg.num_dense_layers


def _mla_up_parameters(cfg: TransformerConfig) -> int:
    """Weights of MLA's two up-projections and their fused norms."""
    v = cfg.v_head_dim or cfg.head_dim
    nope = cfg.head_dim - cfg.qk_rope_head_dim
    q_up = cfg.q_lora_rank * cfg.num_heads * cfg.head_dim + cfg.q_lora_rank if cfg.q_lora_rank else 0
    return q_up + cfg.kv_lora_rank * cfg.num_heads * (nope + v) + cfg.kv_lora_rank


def _mlp_parameters(cfg: TransformerConfig, width: int) -> int:
    return (3 if cfg.mlp == MLPType.GATED else 2) * cfg.hidden_size * width


def module_flops_per_token(cfg: TransformerConfig, seq_len: Any, modules) -> Any:
    """The forward FLOPs that recomputing ``modules`` repeats, over the whole model [FLOP/token].

    In the convention of :func:`gpumodel.training.steptime.model_flops_per_token` (PaLM's: two FLOPs per weight a
    token passes through, ``4 h s`` a layer for the attention scores and their product with the values).

    Parameters
    ----------
    cfg : TransformerConfig
    seq_len : int or array
        Sequence length [tokens].
    modules : iterable of RecomputeModule or str
        The recomputed submodules.

    Returns
    -------
    float or ndarray
        [FLOP/token]: the sum over ``modules`` of ``core_attn`` ``4 L h s``; ``layernorm`` ``2 h`` a recomputed
        norm (the unfused ones); ``mla_up_proj`` ``2 L`` x the up-projections' weights; ``mlp`` ``2 L_dense`` x the
        MLP's; ``moe`` ``2 L_moe (k P_e + P_s + h e)``; ``shared_experts`` ``2 L_moe P_s``; ``moe_act`` nothing
        (an activation function holds no weights).

    Examples
    --------
    >>> import gpumodel as gm
    >>> cfg = gm.model("llama-3-8b")
    >>> module_flops_per_token(cfg, 4096, ["mlp"]) == 2 * 32 * 3 * 4096 * 14336
    True
    >>> module_flops_per_token(cfg, 4096, ["layernorm", "moe_act"])    # fused norms, no experts
    0.0
    """
    names = {RecomputeModule(m) for m in modules}
    L, h = cfg.num_layers, cfg.hidden_size
    dense, moe = _layer_counts(cfg)
    out = 0.0 * np.asarray(seq_len, float)
    if _M.CORE_ATTN in names:
        out = out + 4.0 * L * h * np.asarray(seq_len, float)
    if _M.LAYERNORM in names:
        out = out + 2.0 * h * (L * cfg.is_mla + moe)
    if _M.MLA_UP_PROJ in names and cfg.is_mla:
        out = out + 2.0 * L * _mla_up_parameters(cfg)
    if _M.MLP in names:
        out = out + 2.0 * dense * _mlp_parameters(cfg, cfg.intermediate_size)
    shared = _mlp_parameters(cfg, cfg.shared_expert_intermediate_size) if cfg.is_moe else 0
    if _M.MOE in names and cfg.is_moe:
        out = out + 2.0 * moe * (cfg.experts_per_token * _mlp_parameters(cfg, cfg.expert_size) + shared
                                 + h * cfg.num_experts)
    elif _M.SHARED_EXPERTS in names:
        out = out + 2.0 * moe * shared
    return float(out) if np.ndim(out) == 0 else out


def recompute_kernels(cfg: TransformerConfig, tokens, modules, *, tp: int = 1, sequence_parallel: bool = False,
                      dtype: str = "bf16", fp8: bool = False) -> list:
    """The kernels one GPU re-runs for ``modules`` in an average decoder layer, for one micro-batch.

    Parameters
    ----------
    cfg : TransformerConfig
        The whole model (its dense and mixture-of-experts layers are averaged over).
    tokens : int or array
        Tokens of the micro-batch on the GPU (micro-batch x local sequence).
    modules : iterable of RecomputeModule or str
        The recomputed submodules; ``core_attn`` is left out (the shard's attention forward times it).
    tp : int
        Tensor-parallel degree: divides heads and MLP widths.
    sequence_parallel : bool
        The norms run on ``tokens / tp`` tokens.
    dtype : str
        The compute dtype ("bf16", "fp16", "fp32").
    fp8 : bool
        The linear layers' GEMMs in fp8 (Transformer Engine).

    Returns
    -------
    list of (OpCost, float)
        Each kernel and its launches per average layer (the share of the layers that have the submodule). The
        kernels are Megatron-Core's fused ones: a norm reads and writes the hidden state once, the activation
        reads its input and writes its output, MLA's rotary embedding reads the up-projections' outputs and writes
        the queries, keys and values, the routed experts' grouped GEMMs run ``k`` tokens a token (balanced
        routing), their permutation reads and writes each routed copy.

    Examples
    --------
    >>> import gpumodel as gm
    >>> [(o.name, n) for o, n in recompute_kernels(gm.model("llama-3-8b"), 4096, ["mlp"])]
    [('elementwise', 1.0), ('matmul', 1.0), ('elementwise', 1.0), ('matmul', 1.0)]
    """
    names = {RecomputeModule(m) for m in modules}
    L, h = cfg.num_layers, cfg.hidden_size
    dense, moe = _layer_counts(cfg)
    c = 4 if dtype == "fp32" else 2
    gemm = "fp8" if fp8 else dtype
    u = 2 if cfg.mlp == MLPType.GATED else 1
    sp = tp if sequence_parallel else 1
    out = []

    def mlp(t, width, share):
        width = -(-width // tp)
        return [(ops.matmul(t, u * width, h, gemm), share), (memory_kernel(t * width, u * c, c), share),
                (ops.matmul(t, h, width, gemm), share)]

    if _M.LAYERNORM in names and (cfg.is_mla or moe):
        out.append((memory_kernel(tokens * h / sp, c, c), (L * cfg.is_mla + moe) / L))
    if _M.MLA_UP_PROJ in names and cfg.is_mla:
        v, heads = cfg.v_head_dim or cfg.head_dim, -(-cfg.num_heads // tp)
        nope = cfg.head_dim - cfg.qk_rope_head_dim
        out += [(memory_kernel(tokens * (cfg.q_lora_rank + cfg.kv_lora_rank), c, c), 1.0),
                (ops.matmul(tokens, heads * cfg.head_dim, cfg.q_lora_rank, gemm), 1.0),
                (ops.matmul(tokens, heads * (nope + v), cfg.kv_lora_rank, gemm), 1.0),
                (memory_kernel(tokens * heads, c * (cfg.head_dim + nope + v), c * (2 * cfg.head_dim + v)), 1.0)]
    if _M.MLP in names and dense:
        out += [(memory_kernel(tokens * h / sp, c, c), dense / L)] + mlp(tokens, cfg.intermediate_size, dense / L)
    if cfg.is_moe and moe:
        share, k, width = moe / L, cfg.experts_per_token, cfg.expert_size
        if _M.MOE in names:
            out += [(ops.matmul(tokens, cfg.num_experts, h, dtype), share),
                    (memory_kernel(2 * tokens * k * h, c, c), share)] + mlp(tokens * k, width, share)
        elif _M.MOE_ACT in names:
            out.append((memory_kernel(tokens * k * -(-width // tp), u * c, c), share))
        if cfg.shared_expert_intermediate_size and (_M.MOE in names or _M.SHARED_EXPERTS in names):
            out += mlp(tokens, cfg.shared_expert_intermediate_size, share)
    return out
