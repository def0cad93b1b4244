"""Mixture-of-experts layers and multi-head latent attention as Hugging Face runs them in eager PyTorch.

A MoE layer routes each of ``T`` tokens to ``k`` of ``E`` experts: a router matmul, softmax (or
sigmoid with a bias and group-limited top-k, DeepSeek-V3) in fp32, top-k, and then the experts in one
of the two implementations transformers v5 ships (``experts_implementation``):

* ``"grouped_mm"`` (the default): sort the ``T k`` (token, expert) pairs by expert, gather their
  hidden states, ``histc`` + ``cumsum`` for the group offsets, two grouped matmuls (gate/up, down)
  around the gated activation, weight by the router, scatter back and sum over ``k``. ``grouped_mm``
  is not autocast-enabled: its input is cast to the weights' dtype, so under ``amp_*`` (fp32 weights)
  the expert matmuls run in fp32, where PyTorch has no grouped kernel: ATen reads the group offsets
  back to the host (a synchronisation) and runs one ``mm`` per expert, and so do the two grouped
  matmuls of its backward. In bf16/fp16 one grouped kernel runs, with no synchronisation.
* ``"eager"``: a one-hot mask, ``nonzero`` over the experts that received tokens, and a Python loop
  over them; per expert ``torch.where`` (a ``nonzero``), a gather, two ``F.linear`` on slices of the
  3-D expert weights (autocast casts each slice again: slices are not cached), the activation,
  router weighting and ``index_add_``. Each ``nonzero``, ``bool(tensor)`` and index by the 0-dim CUDA
  tensor ``expert_idx`` (the two weight slices) makes the host wait for the GPU, so the loop runs host
  and device in turn: the profiled tiny models copy device to host five times per iteration
  (``tests/data/steptime/step_times_v3.jsonl``, ``layers`` records with ``experts_requested="eager"``). In the backward each weight slice's gradient
  is a full-size zero tensor with the slice written (``select_backward``) that autograd sums over
  the experts, and each gather's gradient is a full ``T x h`` tensor summed likewise.

``expert_load`` gives the fraction of the ``T k`` assignments each expert receives (balanced, the
default, is ``1/E`` each).

References
----------
Hugging Face transformers v5 ``integrations/moe.py`` (``grouped_mm_experts_forward``),
``models/mixtral/modeling_mixtral.py`` (``MixtralExperts``, ``MixtralTopKRouter``),
``models/qwen2_moe`` (shared expert and its sigmoid gate), ``models/deepseek_v3`` (router with
``e_score_correction_bias``, ``MLA``). DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import ops
from .layer import Layer, add_cast_for_matmul, add_linear, add_mlp, add_norm, add_rope, memory_kernel
from ..records.transformer import TransformerConfig

__all__ = ["moe_block", "mla_projections", "expert_tokens"]


def expert_tokens(cfg: TransformerConfig, tokens: int, expert_load: Any = None) -> np.ndarray:
    """Token-expert assignments each expert receives: ``tokens * k * load`` (balanced by default)."""
    e = cfg.num_experts
    load = np.full(e, 1.0 / e) if expert_load is None else np.asarray(expert_load, float)
    return tokens * cfg.experts_per_token * load / load.sum()


def _whole_tokens(counts: np.ndarray) -> list[int]:
    """Expert token counts as whole tokens with the same total: floors, and one more for the largest remainders
    (an fp32 expert's GEMM is one ``mm`` of a whole number of rows).

    >>> _whole_tokens(np.array([2.5, 2.5, 3.0]))
    [3, 2, 3]
    """
    base = np.floor(counts).astype(int)
    extra = int(round(float(counts.sum()))) - int(base.sum())
    order = np.argsort(-(counts - base), kind="stable")[:max(0, extra)]
    base[order] += 1
    return base.tolist()


def _router(L: Layer, cfg: TransformerConfig, t: int, n: int, c: int, p: int) -> None:
    e, k = cfg.num_experts, cfg.experts_per_token
    add_linear(L, t, e, cfg.hidden_size, n, c, p)
    L.mem(t * e, c, 4)                         # logits.float()
    if cfg.family == "deepseek_v3":            # sigmoid, + correction bias, group top-k, gather, normalise, scale
        for _ in range(8):
            L.mem(t * e, 4, 4, grad=False)
        L.mem(t * e, 4, 4)
        L.mem(t * k, 8, 4)
    else:
        L.add(ops.softmax(t, e, "fp32"), [(memory_kernel(t * e, 8, 4), 1)])
    L.mem(t * e, 4, 4 * k / e + 8 * k / e)     # top-k: values and indices
    L.mem(t * k, 4, 4)                         # normalise the top-k weights (or scale)
    L.mem(t * k, 4, c)                         # .to(router dtype)
    L.modules += 2
    L.views += 4


def _grouped(L: Layer, cfg: TransformerConfig, t: int, n: int, r: int, c: int, p: int, load: Any = None) -> None:
    h, k, i = cfg.hidden_size, cfg.experts_per_token, cfg.expert_size
    tk = t * k
    w = p                                      # grouped_mm runs in the weights' dtype
    wdt = {4: "fp32", 2: L.dt}[w]
    for _ in range(5):                         # sort (radix passes), perm // k
        L.mem(tk, 8, 8, grad=False)
    L.mem(tk * h, n, n)                        # gather hidden_states[perm // k]
    L.mem(tk, 4, 4)                            # sample_weights[perm]
    L.mem(tk, 8, 4, grad=False)                # histc
    L.mem(cfg.num_experts, 4, 4, grad=False)   # cumsum
    if n != w:
        L.cast(tk * h, n, w)
    groups = [m for m in _whole_tokens(expert_tokens(cfg, t, load)) if m > 0]
    for m_out, m_in in ((2 * i, h), (h, i)):
        if m_out == h:
            L.mem(tk * i, w, w, 4)             # act(gate)
            L.mem(tk * i, 2 * w, w, inputs=2)  # * up
        if w != 4:
            L.mm(tk, m_out, m_in, wdt)
            continue
        # fp32 has no grouped kernel: ATen copies the offsets to the host (a synchronisation) and runs one
        # mm per expert, dispatched from C++; the backward's two grouped mms (input and weight gradients) do
        # the same. Backward entries are listed in reverse: the layer's backward list runs reversed.
        L.sync()
        for m in groups:
            L.add(ops.matmul(m, m_out, m_in, "fp32"), kind="launch")
        L.backward += [(ops.matmul(m_in, m_out, m, "fp32"), 1, "launch") for m in reversed(groups)] + [(None, 1)]
        L.backward += [(ops.matmul(m, m_in, m_out, "fp32"), 1, "launch") for m in reversed(groups)] + [(None, 1)]
    L.mem(tk * h, w + 4, w, inputs=2)          # * routing weights
    L.mem(tk, 8, 8, grad=False)                # inverse permutation (arange, scatter)
    L.mem(tk * h, w, w)                        # weighted_out[inv_perm]
    L.add(ops.reduce_sum(t, k * h, wdt), [(memory_kernel(tk * h, w, w), 1)])  # view(T, k, h).sum(1)
    if w != r:
        L.mem(t * h, w, r)
    L.views += 10


def _eager(L: Layer, cfg: TransformerConfig, t: int, n: int, r: int, c: int, p: int, load: Any) -> None:
    h, e, i = cfg.hidden_size, cfg.num_experts, cfg.expert_size
    tk = t * cfg.experts_per_token
    L.mem(tk * (e + 1), 8, 8, grad=False)      # one_hot (int64)
    L.mem(tk * (e + 1), 8, 8 / tk, grad=False)  # sum over tokens
    L.mem(e, 8, 1, grad=False)                 # greater
    L.mem(e, 1, 8, grad=False)                 # nonzero
    L.kinds[-1] = "nonzero"
    L.sync()
    L.mem(t * h, 0, r, grad=False)             # zeros_like(hidden_states)
    full_up, full_down = e * 2 * i * h, e * h * i
    for m in expert_tokens(cfg, t, load):
        if m <= 0:
            continue
        n0, b0, g0 = len(L.forward), len(L.backward), (L.modules, L.views)
        L.mem(1, 8, 1, grad=False)             # expert_idx == num_experts
        L.sync()
        L.mem(tk, 1, 16, grad=False)           # torch.where(expert_mask[idx]): nonzero
        L.kinds[-1] = "nonzero"
        L.sync()
        L.mem(m * h, n, n)                     # hidden_states[token_idx]
        L.backward.append((memory_kernel(t * h, 0, n), 1))   # its gradient: a full zero tensor...
        L.backward.append((memory_kernel(t * h, 2 * n, n), 1))  # ...summed into the input's gradient
        # index backward is index_put_(accumulate=True), which sorts the indices and reads a count back to
        # the host before its last kernel (one "Memcpy DtoH" per expert in the backward profiled on the H200)
        L.backward.append((None, 1))
        for m_out, m_in, full in ((2 * i, h, full_up), (h, i, full_down)):
            if m_out == h:
                L.mem(m * i, c, c, 4)          # act(gate)
                L.mem(m * i, 2 * c, c, inputs=2)  # * up
            add_cast_for_matmul(L, m * m_in, n if m_out != h else c, c)
            L.sync()                           # the weight slice ``w[expert_idx]``: a 0-dim CUDA index, read back
            if p != c:
                L.cast(m_out * m_in, p, c)     # the weight slice, cast again for every expert
            L.mm(m, m_out, m_in)
            L.backward.append((memory_kernel(full, 0, p), 1))        # select_backward: zeros of the 3-D weight
            L.backward.append((memory_kernel(full, 2 * p, p), 1))    # summed over the experts
        L.mem(m, 16, 4)                        # top_k_weights[token_idx, top_k_pos]
        L.mem(m * h, c + 4, c, inputs=2)       # * routing weight
        if c != r:
            L.mem(m * h, c, r)                 # .to(final dtype)
        L.mem(m * h, r + 8, r)                 # index_add_
        L.views += 8
        L.modules += 1
        # one iteration of the loop, which a host with measured per-expert costs prices as a whole
        L.experts.append(((n0, len(L.forward)), (b0, len(L.backward)), (L.modules - g0[0], L.views - g0[1])))


def moe_block(L: Layer, cfg: TransformerConfig, t: int, n: int, r: int, c: int, p: int, experts: str,
              expert_load: Any) -> None:
    """Append a MoE feed-forward (router, experts, shared expert) to the layer ``L``."""
    L.modules += 2
    _router(L, cfg, t, n, c, p)
    if experts == "eager":
        _eager(L, cfg, t, n, r, c, p, expert_load)
    else:
        _grouped(L, cfg, t, n, r, c, p, expert_load)
    if cfg.shared_expert_intermediate_size:
        add_mlp(L, cfg, t, n, c, p, cfg.shared_expert_intermediate_size)
        if cfg.shared_expert_gate:
            add_linear(L, t, 1, cfg.hidden_size, n, c, p)
            L.mem(t, c, c)                     # sigmoid
            L.mem(t * cfg.hidden_size, c + c, c, inputs=2)  # gate * shared
        L.mem(t * cfg.hidden_size, r + c, r, inputs=2)      # + routed experts


def mla_projections(L: Layer, cfg: TransformerConfig, t: int, n: int, r: int, c: int, p: int) -> None:
    """Multi-head latent attention's projections, norms and rotary part (DeepSeek-V3 in HF)."""
    h, heads = cfg.hidden_size, cfg.num_heads
    rope, nope = cfg.qk_rope_head_dim, cfg.head_dim - cfg.qk_rope_head_dim
    v = cfg.v_head_dim or cfg.head_dim
    if cfg.q_lora_rank:
        add_linear(L, t, cfg.q_lora_rank, h, n, c, p, cfg.qkv_bias)
        qn = add_norm(L, cfg, t, c, p, cfg.q_lora_rank)
        add_linear(L, t, heads * cfg.head_dim, cfg.q_lora_rank, qn, c, p)
    else:
        add_linear(L, t, heads * cfg.head_dim, h, n, c, p)
    add_linear(L, t, cfg.kv_lora_rank + rope, h, n, c, p, cfg.qkv_bias)
    kn = add_norm(L, cfg, t, c, p, cfg.kv_lora_rank)
    add_linear(L, t, heads * (nope + v), cfg.kv_lora_rank, kn, c, p)
    add_rope(L, t, (heads * rope, rope), r, c)
    L.mem(t * heads * cfg.head_dim, 2 * c, c, inputs=2)  # cat(q_pass, q_rot)
    L.mem(t * heads * cfg.head_dim, 2 * c, c, inputs=2)  # cat(k_pass, k_rot.expand)
    L.views += 10
