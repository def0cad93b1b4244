"""What one decoder layer of Megatron-Core keeps for its backward, tensor by tensor, and what selective
recomputation by module (``--recompute-modules``) drops.

The layer is Megatron-Core's Transformer Engine layer (``get_gpt_layer_with_transformer_engine_spec``, Megatron-Core
0.13 and later, the releases that have ``--recompute-modules``): the input norm is fused into the QKV linear, except
under multi-latent attention (MLA), whose two down-projections read a separate norm's output; the pre-MLP norm is
fused into the first MLP linear, except in a mixture-of-experts (MoE) layer, whose router, token permutation and
shared expert read a separate norm's output. Each tensor is counted once, where the op that keeps it for its
backward keeps it (:func:`megatron_saved_tensors`).

fp8 (Transformer Engine): each linear layer keeps its own fp8 copy of its input (1 byte an element, cast by its
input quantizer; ``transformer_engine/pytorch/module/linear.py``), and the 16-bit tensor goes unless another op keeps
it: the flash-attention kernel keeps its 16-bit output beside the output projection's fp8 copy, and the MoE router
keeps its 16-bit input beside the shared expert's fp8 copy.

Selective recomputation: Megatron-Core runs the named submodules without keeping their tensors and re-runs them in
the backward. ``core_attn``, ``mlp``, ``moe`` and ``shared_experts`` are checkpoints that keep their inputs;
``layernorm``, ``moe_act`` and ``mla_up_proj`` discard their outputs once the next op has run, and the ops that read
those outputs keep the 16-bit original (``set_save_original_input``), discarded with it, instead of an fp8 copy.

References
----------
V. Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", MLSys 2023 (arXiv 2022).
Megatron-LM (Megatron-Core 0.13 and later): ``megatron/core/transformer/transformer_layer.py`` (``layernorm``,
``mlp``), ``megatron/core/transformer/multi_latent_attention.py`` (``mla_up_proj``),
``megatron/core/transformer/moe/experts.py`` (``moe_act``; ``TEGroupedMLP`` applies the routing probabilities in the
activation), ``megatron/core/transformer/moe/moe_layer.py`` (``moe``, ``shared_experts``),
``megatron/core/tensor_parallel/random.py`` (``CheckpointWithoutOutput``),
``megatron/core/models/gpt/gpt_layer_specs.py`` (which norms are fused). NVIDIA Transformer Engine
``transformer_engine/pytorch/module/linear.py`` (the fp8 input copy, ``save_original_input``) and
``transformer_engine/pytorch/attention/dot_product_attention/backends.py`` (the attention kernel keeps q, k, v and
its output).
"""

from __future__ import annotations

import numpy as np

from ..records.transformer import MLPType, TransformerConfig
from ..vocabulary import Checkpointing, RecomputeModule, scalar_or_array

__all__ = ["megatron_saved_tensors", "recomputed_tensors", "megatron_layer_bytes"]

_M = RecomputeModule


def megatron_saved_tensors(cfg: TransformerConfig, compute_bytes: int = 2, *, seq_len=1, tp=1,
                           sequence_parallel=False, moe: bool | None = None, scores: bool = False,
                           fp8: bool = False) -> dict:
    """Bytes per token each kind of tensor one Megatron-Core decoder layer keeps for its backward, on one GPU [B].

    Parameters
    ----------
    cfg : TransformerConfig
    compute_bytes : int
        Bytes of a 16-bit (or fp32) activation element, ``c`` [B].
    seq_len : int or array
        Keys each query attends to [tokens] (the scores of unfused attention).
    tp : int or array
        Tensor-parallel degree: divides the attention and MLP tensors.
    sequence_parallel : bool or array
        The norms' tensors, dropout masks, MLA latents and the routing's tensors divided by ``tp`` as well.
    moe : bool, optional
        A mixture-of-experts layer (default: the model's kind) or a dense one.
    scores : bool
        Unfused attention: the softmax output and its dropout kept, ``S x S`` per head.
    fp8 : bool
        Transformer Engine's fp8 linear layers: each keeps an fp8 copy of its input, ``g = 1`` byte an element
        (``g = c`` without fp8).

    Returns
    -------
    dict
        Tensor kind -> bytes per token [B/token] (floats, arrays where an argument was one; see Notes); a kind
        the layer does not have is absent.

    Notes
    -----
    Per token, before the division by ``tp`` (attention and MLP) or ``sp`` (the rest); ``h`` hidden, ``q`` and
    ``kv`` the query and key/value widths, ``n`` heads, ``I`` the MLP width (``I_e`` an expert's, ``I_s`` the
    shared experts'), ``u = 2`` for a gated MLP (else 1), ``k`` experts a token, ``e`` experts:

    ============================  =============================================  ================================
    kind                          bytes per token                                kept by
    ============================  =============================================  ================================
    ``norm_inputs``               ``2 c h``                                      the two norms
    ``dropout_masks``             ``2 h`` (residual dropout only)                bias-dropout-add
    ``attention_norm_output``     ``g h``; MLA: ``c h``, with fp8 ``2 g h``      QKV linear; MLA down-projections
    ``mla_latents``               ``c (r_q + r_kv + d_rope)``                    MLA up-projections' fused norms
    ``mla_latents_normed``        ``g (r_q + r_kv)``                             MLA up-projections
    ``qkv``                       ``c (q + 2 kv)``; MLA ``c n (2 d_qk + d_v)``   the attention kernel
    ``attention_output``          ``g q`` (MLA ``g n d_v``)                      output projection
    ``attention_kernel_output``   ``c q`` with fp8 and flash attention           the flash kernel
    ``softmax_stats``             ``4 n`` (flash attention)                      the flash kernel (log-sum-exp)
    ``scores``                    ``n S (c + 1 + c)`` (unfused attention)        softmax, dropout
    ``mlp_norm_output``           ``g h``; MoE ``c h``                           fc1; MoE: the router (16-bit)
    ``activation_input``          ``u c I``                                      the activation
    ``activation_output``         ``g I``                                        fc2
    ``router``                    ``9 e``                                        fp32 logits, probabilities, map
    ``expert_inputs``             ``k (g h + 4)``                                experts' fc1; fp32 probability
    ``expert_activation_input``   ``k u c I_e``                                  the weighted activation
    ``expert_activation_output``  ``k g I_e``                                    experts' fc2
    ``shared_expert_input``       ``g h`` with fp8                               shared experts' fc1 (fp8 copy)
    ``shared_expert_activation``  ``(u c + g) I_s``                              shared experts
    ============================  =============================================  ================================

    Without fp8 and for GPT (LayerNorm, 4h GeLU MLP, dropout, unfused attention, no parallelism) the sum is
    Korthikanti et al.'s ``34 h + 5 a s`` bytes a token (:func:`megatron_layer_bytes`). The routed experts'
    output is not kept: Megatron-Core 0.13 and later apply the routing probabilities in the experts' activation
    (``weighted_bias_swiglu``), not in the unpermutation.

    Examples
    --------
    >>> import gpumodel as gm
    >>> t = megatron_saved_tensors(gm.model("llama-3-8b"))
    >>> t["qkv"] == 2 * (4096 + 2 * 1024), t["activation_input"] == 2 * 2 * 14336, "router" in t
    (True, True, False)
    """
    c, h = compute_bytes, cfg.hidden_size
    tp = np.asarray(tp)
    sp = np.where(np.asarray(sequence_parallel, bool), tp, 1)
    moe = cfg.is_moe if moe is None else moe
    g = 1 if fp8 else c
    heads = cfg.num_heads / tp
    rep = {"norm_inputs": 2 * c * h, "dropout_masks": 2 * h if cfg.resid_dropout > 0 else 0}
    out = {}
    if cfg.is_mla:
        rep["attention_norm_output"] = 2 * g * h if fp8 else c * h   # each down-projection its fp8 copy, or one tensor
        rep["mla_latents"] = c * (cfg.q_lora_rank + cfg.kv_lora_rank + cfg.qk_rope_head_dim)
        rep["mla_latents_normed"] = g * (cfg.q_lora_rank + cfg.kv_lora_rank)
        v = cfg.v_head_dim or cfg.head_dim
        out["qkv"] = c * heads * (2 * cfg.head_dim + v)
        width = heads * v
    else:
        rep["attention_norm_output"] = g * h
        out["qkv"] = c * (cfg.q_dim / tp + 2 * np.maximum(cfg.num_kv_heads / tp, 1) * cfg.head_dim)
        width = cfg.q_dim / tp
    out["attention_output"] = g * width
    if scores:
        dropout = (1 + c) if cfg.attn_dropout > 0 else 0
        out["scores"] = heads * np.asarray(seq_len, float) * (c + dropout)
    else:
        out["softmax_stats"] = 4 * heads
        if fp8:
            out["attention_kernel_output"] = c * width
    u = 2 if cfg.mlp == MLPType.GATED else 1
    if moe:
        k, e, shared = cfg.experts_per_token, cfg.num_experts, cfg.shared_expert_intermediate_size
        rep["mlp_norm_output"] = c * h
        if fp8 and shared:
            rep["shared_expert_input"] = g * h
        rep["router"] = 9 * e
        rep["expert_inputs"] = k * (g * h + 4)
        out["expert_activation_input"] = k * u * c * cfg.expert_size / tp
        out["expert_activation_output"] = k * g * cfg.expert_size / tp
        if shared:
            out["shared_expert_activation"] = (u * c + g) * shared / tp
    else:
        rep["mlp_norm_output"] = g * h
        out["activation_input"] = u * c * cfg.intermediate_size / tp
        out["activation_output"] = g * cfg.intermediate_size / tp
    return {k: scalar_or_array(v) for k, v in {**{k: v / sp for k, v in rep.items()}, **out}.items()}


def recomputed_tensors(cfg: TransformerConfig, modules, moe: bool | None = None) -> frozenset:
    """The tensor kinds of :func:`megatron_saved_tensors` that selective recomputation of ``modules`` drops.

    Parameters
    ----------
    cfg : TransformerConfig
    modules : iterable of RecomputeModule or str
        Megatron-Core's ``--recompute-modules`` (:func:`gpumodel.vocabulary.recompute_modules` checks them).
    moe : bool, optional
        A mixture-of-experts layer (default: the model's kind) or a dense one.

    Returns
    -------
    frozenset of str

    Notes
    -----
    ``core_attn``: the kernel's own tensors (scores, log-sum-exp, its 16-bit output under fp8); its inputs stay.
    ``layernorm``: an unfused norm's output (MLA's input norm, an MoE layer's pre-MLP norm), with the fp8 copies
    its readers would keep; a norm fused into a linear layer is not recomputed (Megatron-Core skips an
    ``IdentityOp``). ``mla_up_proj``: the queries, keys and values and the up-projections' inputs; the latents
    stay as the checkpoint's inputs. ``mlp`` (dense layers): the MLP's tensors; its input, the norm's input, stays.
    ``moe`` (MoE layers): all but its 16-bit input. ``shared_experts``: the shared experts' tensors.
    ``moe_act``: the routed experts' activation output; its input stays.

    Examples
    --------
    >>> import gpumodel as gm
    >>> sorted(recomputed_tensors(gm.model("llama-3-8b"), ["layernorm", "mlp"]))   # its norms are fused
    ['activation_input', 'activation_output', 'mlp_norm_output']
    """
    moe = cfg.is_moe if moe is None else moe
    names = {RecomputeModule(m) for m in modules}
    drop = set()
    if _M.CORE_ATTN in names:
        drop |= {"scores", "softmax_stats", "attention_kernel_output"}
    if _M.LAYERNORM in names:
        drop |= ({"attention_norm_output"} if cfg.is_mla else set()) | (
            {"mlp_norm_output", "shared_expert_input"} if moe else set())
    if _M.MLA_UP_PROJ in names and cfg.is_mla:
        drop |= {"qkv", "mla_latents_normed"}
    if _M.MLP in names and not moe:
        drop |= {"mlp_norm_output", "activation_input", "activation_output"}
    if _M.MOE in names and moe:
        drop |= {"router", "expert_inputs", "expert_activation_input", "expert_activation_output",
                 "shared_expert_input", "shared_expert_activation"}
    if _M.SHARED_EXPERTS in names and moe:
        drop |= {"shared_expert_input", "shared_expert_activation"}
    if _M.MOE_ACT in names and moe:
        drop |= {"expert_activation_output"}
    return frozenset(drop)


def megatron_layer_bytes(cfg: TransformerConfig, tokens, seq_len, compute_bytes: int = 2, *, tp=1,
                         sequence_parallel=False, moe: bool | None = None, scores: bool = False,
                         checkpointing: Checkpointing = Checkpointing.NONE, fp8: bool = False,
                         recompute_modules=None):
    """Bytes one decoder layer keeps for its backward in Megatron-Core, per GPU [B].

    Parameters
    ----------
    cfg : TransformerConfig
    tokens : int or array
        Tokens of the micro-batch on this GPU, ``b s / cp``.
    seq_len : int or array
        Keys each query attends to [tokens] (the ``S x S`` terms of unfused attention).
    compute_bytes : int
        Bytes of an activation element [B] (2 for bf16/fp16).
    tp : int or array
        Tensor-parallel degree: divides attention and MLP activations.
    sequence_parallel : bool or array
        Norms, dropout masks and projection inputs divided by ``tp`` as well.
    moe : bool, optional
        A mixture-of-experts layer (default: the model's kind) or a dense one.
    scores : bool
        Unfused attention: the softmax output (and its dropout) are kept, ``S x S`` per head.
    checkpointing : Checkpointing
        "full" keeps the layer's input alone; "selective" drops what ``recompute_modules`` recompute.
    fp8 : bool
        Transformer Engine's fp8 linear layers keep fp8 copies of their inputs (:func:`megatron_saved_tensors`).
    recompute_modules : iterable of RecomputeModule or str, optional
        With "selective", the submodules recomputed (Megatron-Core's ``--recompute-modules``; default
        ``core_attn``, Korthikanti et al.'s selective recomputation); ignored otherwise.

    Returns
    -------
    ndarray
        Bytes [B].

    Notes
    -----
    With ``b_t`` the bytes per token of tensor kind ``t`` (:func:`megatron_saved_tensors`) and ``D(R)`` the kinds
    the recomputed modules ``R`` drop (:func:`recomputed_tensors`; empty without selective recomputation):

    .. math:: M = T \\sum_{t \\notin D(R)} b_t, \\qquad M_{full} = T c h / sp

    For GPT (LayerNorm, 4h GeLU MLP, dropout, unfused attention) without parallelism it is Korthikanti
    et al.'s ``s b h (34 + 5 a s / h)`` (b = 1):

    >>> import gpumodel as gm
    >>> gpt = gm.TransformerConfig(hidden_size=6144, num_layers=48, num_heads=64, intermediate_size=24576,
    ...                            vocab_size=51200, family="gpt2", mlp="plain", activation="gelu", norm="layernorm",
    ...                            position="learned", attn_dropout=0.1, resid_dropout=0.1)
    >>> s, h, a = 2048, 6144, 64
    >>> float(megatron_layer_bytes(gpt, s, s, scores=True)) == s * h * 34 + 5 * a * s * s
    True

    DeepSeek-V3's MoE layer in fp8, one token, without recomputation and with RMSNorm, the MLA up-projections and
    the experts' SwiGLU recomputed [KiB]:

    >>> v3 = gm.TransformerConfig(name="v3", num_layers=61, hidden_size=7168, num_heads=128, num_kv_heads=128,
    ...                           head_dim=192, v_head_dim=128, q_lora_rank=1536, kv_lora_rank=512,
    ...                           qk_rope_head_dim=64, intermediate_size=18432, vocab_size=129280, num_experts=256,
    ...                           experts_per_token=8, moe_intermediate_size=2048, shared_expert_intermediate_size=2048,
    ...                           first_dense_layers=3)
    >>> [float(megatron_layer_bytes(v3, 1, 4096, fp8=True, checkpointing=ck, recompute_modules=r)) / 1024
    ...  for ck, r in ((Checkpointing.NONE, None), (Checkpointing.SELECTIVE, ["layernorm", "mla_up_proj", "moe_act"]))]
    [393.90625, 212.90625]
    """
    tokens = np.asarray(tokens, float)
    if checkpointing == Checkpointing.FULL:
        sp = np.where(np.asarray(sequence_parallel, bool), np.asarray(tp), 1)
        return tokens * compute_bytes * cfg.hidden_size / sp
    terms = megatron_saved_tensors(cfg, compute_bytes, seq_len=seq_len, tp=tp, sequence_parallel=sequence_parallel,
                                   moe=moe, scores=scores, fp8=fp8)
    drop = frozenset()
    if checkpointing == Checkpointing.SELECTIVE:
        drop = recomputed_tensors(cfg, [_M.CORE_ATTN] if recompute_modules is None else recompute_modules, moe)
    return tokens * sum(v for k, v in terms.items() if k not in drop)
