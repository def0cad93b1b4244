"""The parts every training-memory model shares: the result record, the runtime constants, the optimizer
states, and the parameters one GPU holds once tensor, expert and pipeline parallelism have split the model.

:func:`gpumodel.training_memory` evaluates, for each moment of a step where the peak can occur, the bytes
held then (a dict of components), and :func:`assemble` turns those moments into a :class:`TrainingMemory`.
The engines' models (:mod:`gpumodel.core.hf_memory`, :mod:`gpumodel.core.framework_memory`) differ in what
they hold; the parameter split below is common to all of them.

Examples
--------
>>> import gpumodel as gm
>>> mixtral = gm.model("mixtral-8x7b")
>>> shared, experts = stage_parameters(mixtral, layers=32, tp=1, ep=8, embedding=True, head=True)
>>> round(float(experts) / 1e9, 2), round(float(shared + experts) / 1e9, 2)   # 1 of 8 experts per layer on each GPU
(5.64, 7.24)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..base.errors import ArgumentError
from ..base.reprs import ResultRecord, breakdown_html
from ..records.transformer import PositionType, TransformerConfig
from ..vocabulary import Optimizer, choice, nonnegative_int

__all__ = ["TrainingMemory", "assemble", "optimizer_state_bytes", "matrix_shapes",
           "stage_parameters", "stage_layers", "COMPONENTS", "CUBLAS_WORKSPACE_BYTES", "CUDA_CONTEXT_BYTES",
           "RESERVE_FACTOR", "MemoryArgumentError"]

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

#: The components of a breakdown, in the order they are shown.
COMPONENTS = ["weights", "fp8_weights", "gathered_weights", "gradients", "optimizer_states", "optimizer_temporaries", "activations",
              "autocast_weight_copies", "kv_cache", "logits_and_loss", "model_outputs", "backward_temporaries",
              "communication_buffers", "cublas_workspace"]


def matrix_shapes(cfg: TransformerConfig) -> list[tuple[int, int, int]]:
    """(rows, cols, count) of the weight matrices of ``cfg`` (for Adafactor's factored states)."""
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


def dense_mlp_width(cfg: TransformerConfig) -> int:
    """Intermediate size of the widest dense MLP a decoder layer of ``cfg`` has [count].

    A dense model's MLP; for a mixture of experts its shared expert (Qwen2-MoE) and, where the first layers are
    dense (DeepSeek-V3), theirs; 0 for one whose layers have neither (Mixtral, Qwen3-MoE: ``intermediate_size``
    is then the experts' width or an unused default).

    Examples
    --------
    >>> import gpumodel as gm
    >>> dense_mlp_width(gm.model("llama-3.2-1b")), dense_mlp_width(gm.model("mixtral-8x7b"))
    (8192, 0)
    """
    if not cfg.is_moe:
        return cfg.intermediate_size
    return max(cfg.shared_expert_intermediate_size, cfg.intermediate_size if cfg.first_dense_layers else 0)


def largest_layer_tensor(cfg: TransformerConfig, experts: bool = True) -> int:
    """Elements of the largest parameter tensor of a decoder layer [count].

    A mixture of experts keeps its routed experts' gate and up projections in one ``E x 2I x h`` tensor
    (``transformers`` 5); a dense layer's largest is an MLP matrix (gate and up fused where the model fuses
    them) or the fused QKV projection. ``experts=False`` leaves a mixture of experts' routed experts out (their
    gradients are made in the experts' own backward, :mod:`gpumodel.core.moe_backward`): its attention, its
    router or a dense MLP (:func:`dense_mlp_width`).

    Examples
    --------
    >>> import gpumodel as gm
    >>> largest_layer_tensor(gm.model("llama-3.2-1b"))     # one 8192 x 2048 MLP matrix
    16777216
    >>> largest_layer_tensor(gm.model("mixtral-8x7b"), experts=False)     # q_proj, 4096 x 4096
    16777216
    """
    h, i = cfg.hidden_size, cfg.intermediate_size
    gated = 2 if cfg.mlp.value == "gated" else 1
    attn = (cfg.q_dim + 2 * cfg.kv_dim) * h if cfg.fused_qkv else max(cfg.q_dim, cfg.kv_dim) * h
    mlp = (gated if cfg.fused_gate_up else 1) * i * h
    if cfg.is_moe and experts:
        mlp = max(mlp, cfg.num_experts * gated * cfg.expert_size * h)
    elif cfg.is_moe:
        mlp = max((gated if cfg.fused_gate_up else 1) * dense_mlp_width(cfg) * h, cfg.num_experts * h)
    return int(max(attn, mlp))


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
    mats = matrix_shapes(cfg)
    in_mats = sum(r * c * k for r, c, k in mats)
    factored = sum((r + c) * k for r, c, k in mats)
    largest = max(r * c for r, c, _ in mats)
    return 4.0 * (factored + (n - in_mats)), 2 * 4.0 * largest


def stage_layers(num_layers: int, pp, first_stage_layers: int | None = None,
                 last_stage_layers: int | None = None) -> tuple:
    """Decoder layers on the first, a middle and the last pipeline stage: ``(first, middle, last)`` [count].

    Every stage holds ``ceil(num_layers / pp)`` unless the first and last are given (Megatron-Core's
    ``--decoder-first-pipeline-num-layers`` and ``--decoder-last-pipeline-num-layers``), the rest then spread
    over the middle stages (a middle stage holds ``ceil`` of its share; 0 without one). Llama 3 405B runs its
    126 layers on 16 stages with one fewer on the first and the last, which hold the embedding and the LM
    head (Dubey et al. 2024, section 3.3.2). The parallel step splits its stages with this same function
    (re-exported as :func:`gpumodel.cluster.pipeline.stage_layers`).

    >>> [int(x) for x in stage_layers(126, 16, 7, 7)], [int(x) for x in stage_layers(61, 16)]
    ([7, 8, 7], [4, 4, 4])
    """
    pp = np.asarray(pp)
    even = np.ceil(num_layers / pp)
    if first_stage_layers is None and last_stage_layers is None:
        return even, even, even
    if np.ndim(pp):
        raise ArgumentError("first_stage_layers and last_stage_layers take one pipeline degree, not an array",
                            argument="first_stage_layers", value=first_stage_layers, allowed="one layout")
    p = int(pp)
    first = num_layers // p if first_stage_layers is None else nonnegative_int(first_stage_layers, "first_stage_layers")
    last = num_layers // p if last_stage_layers is None else nonnegative_int(last_stage_layers, "last_stage_layers")
    rest = num_layers - first - last
    if p < 2 or rest < 0 or (p == 2 and rest) or (p > 2 and rest < p - 2):
        raise ArgumentError(f"first_stage_layers={first_stage_layers}, last_stage_layers={last_stage_layers} do not "
                            f"split {num_layers} layers over pp={p} stages (the middle stages need at least one "
                            "layer each)", argument="first_stage_layers",
                            value=(first_stage_layers, last_stage_layers),
                            allowed=f"pp >= 2 and first + last <= {num_layers} - (pp - 2)")
    middle = float(np.ceil(rest / (p - 2))) if p > 2 else 0.0
    return np.asarray(float(first)), np.asarray(middle), np.asarray(float(last))


def stage_parameters(cfg: TransformerConfig, layers, tp=1, ep=1, *, embedding=True, head=True, dense_layers=0) -> tuple:
    """Parameters one GPU holds of a pipeline stage: ``(shared, experts)`` [count].

    ``layers`` decoder layers, ``dense_layers`` of them dense (a mixture of experts' ``first_dense_layers``);
    tensor parallelism divides every layer's matrices by ``tp`` (a rank of more ranks than key/value heads
    holds a whole copy of one); expert parallelism divides the routed experts of the MoE layers by ``ep``
    (``experts``); the attention, norms, router and shared experts are the ``shared`` part. ``embedding`` and
    ``head``: the stage holds the token embedding (the first stage) and the LM head with the final norm (the
    last stage), each split over ``tp`` (the vocabulary-parallel embedding); a tied head on another stage
    than the embedding is a second copy, as Megatron-LM keeps it.
    """
    h = cfg.hidden_size
    tp, ep = np.asarray(tp), np.asarray(ep)
    layers = np.asarray(layers)
    dense = np.minimum(np.asarray(dense_layers), layers) if cfg.is_moe else layers
    moe = layers - dense
    kv_extra = 0.0
    if not cfg.is_mla:   # more ranks than key/value heads: each rank holds a whole copy of one (k and v weights)
        copies = np.maximum(cfg.num_kv_heads / tp, 1) - cfg.num_kv_heads / tp
        kv_extra = 2 * (h + cfg.qkv_bias) * cfg.head_dim * copies
    e = cfg.expert_parameters()
    shared = (dense * cfg.layer_parameters(moe=False) + moe * (cfg.layer_parameters() - e)) / tp + layers * kv_extra
    experts = moe * e / (ep * tp)
    token = cfg.vocab_size * h
    positions = cfg.max_position_embeddings * h if cfg.position == PositionType.LEARNED else 0
    final_norm = h * (2 if cfg.norm_bias else 1)
    embedding, head = np.asarray(embedding, bool), np.asarray(head, bool)
    ends = np.where(embedding & head, cfg.embedding_parameters() / tp + final_norm,
                    np.where(embedding, (token + positions) / tp, np.where(head, token / tp + final_norm, 0.0)))
    return shared + ends, experts + 0.0 * shared


@dataclass(frozen=True)
class TrainingMemory(ResultRecord):
    """Memory of one training step on one GPU [bytes]; arrays when inputs were arrays.

    Attributes
    ----------
    peak_bytes : comparable to ``torch.cuda.max_memory_allocated`` over a whole step.
    steady_bytes : held between steps (weights, optimizer states; gradients are set to None).
    breakdown : component -> bytes held at the moment of the peak.
    peak_moment : the moment of the peak ("forward_loss", "backward_start", "layer_backward", "backward_end",
        "embedding_backward", "optimizer_step").
    moments : moment -> total bytes at that moment (the largest over the pipeline stages).
    reserved_bytes : estimate of ``torch.cuda.max_memory_reserved`` (``peak_bytes * reserve_factor``).
    total_bytes : reserved plus the CUDA context and the NCCL communicators' buffers: what a fits-or-not question
        compares with the card.
    peak_stage : the pipeline stage of the peak ("first", "middle", "last") where the engine's stages
        differ (``framework="megatron"``); None where every stage is counted alike.
    communicator_bytes : NCCL's buffers outside the allocator (:func:`gpumodel.core.communicators.communicator_bytes`;
        0 on one GPU), counted in ``total_bytes``.
    """

    peak_bytes: float | np.ndarray
    steady_bytes: float | np.ndarray
    breakdown: Mapping[str, float | np.ndarray]
    peak_moment: str | np.ndarray
    moments: Mapping[str, float | np.ndarray]
    reserved_bytes: float | np.ndarray
    total_bytes: float | np.ndarray
    inputs: Mapping[str, object] = field(default_factory=dict)
    peak_stage: str | np.ndarray | None = None
    communicator_bytes: float | np.ndarray = 0.0

    def __repr__(self) -> str:
        if np.ndim(self.peak_bytes):
            return f"TrainingMemory(peak_bytes=array(shape={np.shape(self.peak_bytes)}), ...)"
        parts = ", ".join(f"{k}={v / 2**30:.2f}" for k, v in self.breakdown.items() if v)
        where = self.peak_moment + (f" ({self.peak_stage} stage)" if self.peak_stage else "")
        comm = float(self.communicator_bytes)
        nccl = f" with {comm / 2**30:.2f} of NCCL's" if comm else ""
        return (f"TrainingMemory(peak={self.peak_bytes / 2**30:.2f} GiB at {where}, "
                f"steady={self.steady_bytes / 2**30:.2f} GiB, total={self.total_bytes / 2**30:.2f} GiB{nccl}; {parts} GiB)")

    def _repr_html_(self) -> str:
        return breakdown_html("TrainingMemory", self.peak_bytes, self.peak_moment, self.breakdown)


def assemble(moments: Mapping[str, Mapping[str, object]], steady, *, reserve_factor, cuda_context_bytes,
             inputs: Mapping[str, object], contiguous: tuple[str, ...] = (), communicator_bytes=0.0) -> TrainingMemory:
    """The :class:`TrainingMemory` of a step from the bytes held at each of its moments.

    ``moments`` maps a moment (``"layer_backward"``, or ``"layer_backward@first"`` for one pipeline stage) to its
    components [bytes] (scalars or arrays of one broadcast shape); the peak is the largest moment, elementwise.
    ``contiguous`` names components the engine allocates once, as buffers it keeps for the whole run (Megatron-Core's
    parameter and gradient buffers, its optimizer's shards): the caching allocator's reserve over the allocated
    bytes (``reserve_factor``) applies to the rest, the blocks freed and allocated again step after step.
    ``communicator_bytes`` (NCCL's buffers) and ``cuda_context_bytes`` add to ``total_bytes`` outside the allocator.
    """
    shape = np.broadcast_shapes(*(np.shape(v) for m in moments.values() for v in m.values()), np.shape(steady))
    z = np.zeros(shape)
    names = list(moments)
    totals = np.stack([sum(np.asarray(v, float) for v in m.values()) + z for m in moments.values()])
    idx = np.argmax(totals, axis=0)
    peak = np.max(totals, axis=0)
    components = sorted({c for m in moments.values() for c in m}, key=COMPONENTS.index)
    breakdown = {c: np.choose(idx, [np.asarray(moments[k].get(c, 0.0), float) + z for k in names]) for c in components}
    base = [n.split("@")[0] for n in names]
    per_moment = {b: np.max(np.stack([t for n, t in zip(base, totals) if n == b]), axis=0) for b in dict.fromkeys(base)}
    staged = any("@" in n for n in names)
    stage = [n.split("@")[1] if "@" in n else "" for n in names]
    scalar = not shape
    out = (lambda x: float(x)) if scalar else (lambda x: x)
    kept = sum((breakdown[c] for c in contiguous if c in breakdown), z)
    reserved = kept + (peak - kept) * reserve_factor
    comm = np.asarray(communicator_bytes, float) + z
    return TrainingMemory(
        peak_bytes=out(peak), steady_bytes=out(np.asarray(steady, float) + z),
        breakdown={k: out(v) for k, v in breakdown.items()},
        peak_moment=base[int(idx)] if scalar else np.asarray(base)[idx],
        moments={k: out(t) for k, t in per_moment.items()}, reserved_bytes=out(reserved),
        total_bytes=out(reserved + cuda_context_bytes + comm), inputs=dict(inputs), communicator_bytes=out(comm),
        peak_stage=(stage[int(idx)] if scalar else np.asarray(stage)[idx]) if staged else None)
