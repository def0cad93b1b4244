"""Training memory per GPU the way Megatron-Core, PyTorch FSDP and DeepSpeed hold a step.

Each engine keeps other tensors than eager Hugging Face training (:mod:`gpumodel.core.hf_memory`):

``megatron`` (Megatron-Core with Transformer Engine)
    Parameters in the 16-bit compute dtype, gradients in the data-parallel buffer (``main_grad``: fp32 with
    ``--bf16``, 16-bit with ``--fp16``), fp32 master weights and the optimizer's moments; the distributed
    optimizer (``zero=1``) shards master weights and moments over the ``dp * cp`` data-parallel ranks (the
    routed experts' over their ``dp * cp / ep`` expert-data-parallel ranks), so Adam costs
    ``2 + 4 + 12 / (dp cp)`` bytes per parameter with ``--bf16`` (``2 + 4 + 12`` without it: ``zero=0``;
    ``2 + 4 + 8 / (dp cp)`` with bf16 moments, ``optimizer_dtype="bf16"``: Megatron-Core's precision-aware optimizer).
    ``zero`` 2 and 3 are Megatron-FSDP's ``optim_grads`` and ``optim_grads_params`` sharding strategies
    (``--use-megatron-fsdp``): the gradients, then the weights too, shard over the same ranks, with one layer's
    gradients unsharded before their reduce-scatter and, at 3, two layers' weights gathered.
    Activations by the structure of Korthikanti et al. (2022), Table 2, generalised to the model's widths
    (:mod:`gpumodel.core.megatron_activations`): per layer and token, the two norm inputs and the two projection
    inputs (16-bit), the dropout masks (1 byte, where the model has dropout), query, key, value and the attention
    output, the attention kernel's fp32 log-sum-exp, the MLP's activation input and output (with unfused attention,
    the ``S x S`` softmax output and its dropout: the ``5 a s / h`` term); tensor parallelism divides the
    attention and MLP parts, sequence parallelism the rest; selective recomputation drops what the recomputed
    modules keep (Megatron-Core's ``--recompute-modules``; by default ``core_attn``: the scores), full
    recomputation keeps each layer's input alone. A mixture-of-experts layer keeps, per token and routed copy,
    the expert's input, its activation's input and output and the routing probability, plus the router's fp32
    scores and the shared expert; the all-to-all's send and receive buffers are transient. The loss is
    Megatron's vocabulary-parallel fused cross-entropy: 16-bit logits over ``V / tp`` and their gradient, no fp32
    copies. Pipeline stages follow the 1F1B schedule: stage ``i``
    holds ``min(pp - i, m)`` micro-batches of activations; the interleaved schedule with ``v`` chunks
    ``min(v pp + pp - 1 - 2 i, m v)`` chunk-micro-batches, all ``m v`` when ``m = pp`` (Narayanan et al. 2021;
    Megatron-Core's ``get_pp_rank_microbatches``; on the first stage the factor ``1 + (pp - 1) / (pp v)`` of
    Korthikanti et al.). The zero-bubble schedule ZB-H1 holds as many as 1F1B (Qi et al. 2024, section 2.1: it
    delays the weight gradients so that no stage holds more). DualPipe (DeepSeek-AI 2024, section 3.2.1 and
    Table 2: parameters 2x, activations ``pp + 1`` micro-batches) feeds micro-batches from both ends: GPU ``i``
    holds stages ``i`` and ``pp - 1 - i``, so the weights, gradients and optimizer states of both (the reference
    implementation keeps each stage as a module of its own), and at its peak ``pp - i`` micro-batches of the first
    and ``i + 1`` of the second; the first and last GPUs hold both the embedding and the LM head. The first stage
    holds the embedding, the last
    the LM head and the loss; each stage holds ``ceil(L / pp)`` layers unless the first and last stages
    are given fewer (:func:`~gpumodel.core.memory_parts.stage_layers`). Each of the first, a middle and the last stage
    is evaluated; the peak is the largest. Fused Adam: no optimizer temporaries.
``fsdp`` (PyTorch FSDP1 and FSDP2)
    ``zero`` 3: full shard (``FULL_SHARD``; FSDP2 ``reshard_after_forward=True``), 2: ``SHARD_GRAD_OP``
    (``reshard_after_forward=False``: a stage's parameters stay unsharded from its forward to its
    backward), both over ``shard_group`` ranks (``dp * cp`` unless HSDP shards within a smaller group and
    replicates across groups). With an amp precision the mixed-precision policy keeps fp32 sharded
    parameters, gradients and Adam moments (16 bytes per parameter over the group) and gathers 16-bit
    layers: the layer running and the one prefetched (two, forward and backward), plus in the backward
    the layer's unsharded gradient and the reduce-scatter's fp32 input; the root module (embedding,
    head) stays gathered through forward and backward. Activations are those of the model's own
    (Hugging Face) forward in the 16-bit dtype. ``zero`` 0 and 1: DDP (with ``ZeroRedundancyOptimizer``
    sharding the optimizer states at 1) running the eager model under autocast, plus DDP's gradient
    buckets, a second copy of the gradients (``gradient_as_bucket_view=False``, the default).
``deepspeed`` (DeepSpeed ZeRO 0-3 over ``dp * cp``)
    16-bit parameters and gradients, fp32 master weights and moments (``2 + 2 + 12`` bytes per
    parameter, sharded by stage as Rajbhandari et al. 2020, Figure 1), the fp32 gradient partition the
    optimizer step converts, and the buffers of DeepSpeed's configuration defaults (``DeepSpeedZeroConfig``):
    ``reduce_bucket_size`` and ``allgather_bucket_size`` 5e8 elements (``allreduce_bucket_size`` 5e8
    without ZeRO), doubled by ``overlap_comm`` (on by default at stage 3). At stage 3 DeepSpeed gathers each
    sub-module's own parameters when it runs (``partitioned_param_coordinator.py``, ``fetch_sub_module``: a
    linear layer's weight, not a whole decoder layer as FSDP's per-layer units do) and releases them after it
    unless their next use comes within ``stage3_max_reuse_distance`` (1e9 elements): inside a layer the largest
    module plus ``stage3_prefetch_bucket_size`` (5e7 elements) prefetched; at the turn from forward to backward
    also the model's tail, the LM head and the modules before it within half that distance (used again in the
    backward before 1e9 elements have been fetched), at most the whole model. Activations as for ``fsdp``: the
    model's forward in 16 bits (``"bf16": {"enabled": true}`` casts the model).

References
----------
V. Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", MLSys 2023 (arXiv 2022).
D. Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021.
P. Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024 (arXiv 2401.10241), section 2.1.
DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv 2412.19437 (2024), section 3.2.1 and Table 2; the reference
implementation ``deepseek-ai/DualPipe``.
S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC 2020.
Megatron-LM ``megatron/training/theoretical_memory_usage.py`` (``6 + 12 / dp`` bytes per parameter with the
distributed optimizer); DeepSpeed ``deepspeed/runtime/zero/config.py`` (bucket defaults); PyTorch FSDP2
``fully_shard`` and ``MixedPrecisionPolicy``.
"""

from __future__ import annotations

import numpy as np

from ..records.transformer import MLPType, TransformerConfig
from ..vocabulary import Checkpointing, Precision
from .megatron_activations import megatron_layer_bytes
from .memory_parts import optimizer_state_bytes, stage_layers, stage_parameters

__all__ = ["MEGATRON_BUFFERS", "megatron_layer_bytes", "megatron_moments", "fsdp_static", "deepspeed_static",
           "DEEPSPEED_REDUCE_BUCKET", "DEEPSPEED_ALLGATHER_BUCKET", "DEEPSPEED_PREFETCH_BUCKET",
           "DEEPSPEED_MAX_REUSE"]

#: What Megatron-Core allocates once and keeps: its contiguous parameter and gradient buffers, the distributed
#: optimizer's shards, Transformer Engine's fp8 weight copies, cuBLAS's workspace (no allocator reserve on them).
MEGATRON_BUFFERS = ("weights", "fp8_weights", "gradients", "optimizer_states", "cublas_workspace")
#: DeepSpeed's ``reduce_bucket_size`` (and ``allreduce_bucket_size``) default [elements].
DEEPSPEED_REDUCE_BUCKET = 5e8
#: DeepSpeed's ``allgather_bucket_size`` default [elements].
DEEPSPEED_ALLGATHER_BUCKET = 5e8
#: DeepSpeed's ``stage3_prefetch_bucket_size`` default [elements].
DEEPSPEED_PREFETCH_BUCKET = 5e7
#: DeepSpeed's ``stage3_max_reuse_distance`` default: a gathered parameter whose next use comes within this many
#: parameter elements is not released [elements].
DEEPSPEED_MAX_REUSE = 1e9


def _largest_module(cfg: TransformerConfig) -> float:
    """Parameters of a decoder layer's largest linear module (before tensor parallelism) [count]: an MLP
    projection (an expert's in a mixture), or the fused query-key-value projection where it is larger."""
    width = max(cfg.intermediate_size if not cfg.is_moe or cfg.num_dense_layers else 0, cfg.expert_size,
                cfg.shared_expert_intermediate_size)
    return float(max(cfg.hidden_size * width, cfg.hidden_size * (cfg.q_dim + 2 * cfg.kv_dim)))


def _layer_transient(cfg: TransformerConfig, tokens, c: int, tp, sp, moe: bool):
    """Largest backward temporary of one layer: hidden-state gradients, the widest input gradient, the input
    all-gathered again under sequence parallelism, a mixture of experts' all-to-all buffers [B]."""
    h = cfg.hidden_size
    width = cfg.expert_size * cfg.experts_per_token if moe else cfg.intermediate_size
    wide = np.maximum((2 if cfg.mlp == MLPType.GATED else 1) * width, cfg.q_dim + 2 * cfg.kv_dim) * c / tp
    regather = np.where(sp > 1, c * h, 0.0)
    routed = 2 * cfg.experts_per_token * c * h / sp if moe else 0.0
    return tokens * (2 * c * h / sp + wide + regather + routed)


def megatron_moments(cfg: TransformerConfig, b, s, prec: Precision, optimizer, ckpt: Checkpointing, scores: bool, *,
                     micro_batches, dp, tp, pp, cp, ep, zero, sequence_parallel, virtual_stages,
                     cublas_workspace_bytes: float, first_stage_layers=None, last_stage_layers=None, fp8: bool = False,
                     grad_reduce_dtype=None, recompute_modules=None, pipeline_schedule="1f1b",
                     state_bytes: float = 4.0):
    """``(moments, steady)`` of a Megatron-Core step: moment@stage -> component -> bytes, for the first, a middle
    and the last pipeline stage (see the module notes). ``fp8``: Transformer Engine's fp8 linear layers keep their
    GEMM inputs in fp8 (:func:`megatron_layer_bytes`) and an fp8 copy of each decoder weight and its transpose,
    cast on a step's first micro-batch and kept for the others (``fp8_weights``, 2 bytes a decoder parameter).
    ``grad_reduce_dtype``: the gradient buffer's format ("fp32", "bf16", "fp16"; None: Megatron-LM's default).
    ``recompute_modules``: with selective ``ckpt``, the submodules recomputed (:func:`megatron_layer_bytes`; None:
    ``core_attn``); a layer's backward holds what they drop again while it runs. ``pipeline_schedule``: "1f1b" and
    "zero_bubble" hold 1F1B's micro-batches, "dualpipe" two stages a GPU (see the module notes). ``state_bytes``: the
    bytes of an optimizer-state element (4; 2 or 1 with Megatron-Core's precision-aware optimizer), the fp32 master
    weights apart."""
    dualpipe = pipeline_schedule == "dualpipe"
    c = prec.compute_bytes
    h, V, L = cfg.hidden_size, cfg.vocab_size, cfg.num_layers
    wb = 2 if c == 2 else 4
    gb = 4 if (c == 4 or prec.compute_dtype.value == "bf16") else 2
    if grad_reduce_dtype is not None:     # --grad-reduce-in-bf16, or fp32 asked for explicitly
        gb = 4 if grad_reduce_dtype == "fp32" else 2
    master = 4 if wb == 2 else 0
    states_total, _ = optimizer_state_bytes(cfg, optimizer, state_bytes)
    per_param = states_total / cfg.num_parameters() + master
    group = np.where(zero >= 1, dp * cp, 1)
    group_e = np.maximum(group / ep, 1)
    sp = np.where(np.asarray(sequence_parallel, bool), tp, 1)
    T = b * s / cp
    m, v = np.asarray(micro_batches), np.asarray(virtual_stages)
    dense_total = cfg.num_dense_layers
    first, middle, last = stage_layers(L, pp, first_stage_layers, last_stage_layers)
    runtime = float(cublas_workspace_bytes)
    z = np.zeros(np.broadcast_shapes(*(np.shape(x) for x in (T, dp, tp, pp, cp, ep, zero, m, v, sp))))
    moments, steady = {}, []
    one_dense = megatron_layer_bytes(cfg, T, s, c, tp=tp, sequence_parallel=sequence_parallel, moe=False,
                                     scores=scores, fp8=fp8)
    one_moe = megatron_layer_bytes(cfg, T, s, c, tp=tp, sequence_parallel=sequence_parallel, moe=True, scores=scores,
                                   fp8=fp8)
    kept = dict(tp=tp, sequence_parallel=sequence_parallel, scores=scores, checkpointing=ckpt, fp8=fp8,
                recompute_modules=recompute_modules)
    kept_dense = megatron_layer_bytes(cfg, T, s, c, moe=False, **kept)
    kept_moe = megatron_layer_bytes(cfg, T, s, c, moe=cfg.is_moe, **kept)
    # Megatron-FSDP (zero 2, 3): one layer's gradients unsharded before their reduce-scatter; at 3 also two
    # layers' weights gathered (the one running and the one prefetched)
    one = [sum(stage_parameters(cfg, 1, tp, ep, embedding=False, head=False, dense_layers=d)) for d in (0, 1)]
    layer_params = np.maximum(*one)
    unsharded_grads = np.where(zero >= 2, gb * layer_params, 0.0)
    gathered = np.where(zero >= 3, 2 * wb * layer_params, 0.0)

    def stage(i, layers, start):
        """What a GPU holds of pipeline stage ``i`` (its ``layers`` from layer ``start``): the static terms, one
        micro-batch's activations, and the backward's recomputed tensors and temporaries."""
        dense = np.clip(dense_total - start, 0, layers) if cfg.is_moe else layers
        embedding, head = i == 0, i == pp - 1
        shared, experts = stage_parameters(cfg, layers, tp, ep, embedding=embedding, head=head, dense_layers=dense)
        decoder = sum(stage_parameters(cfg, layers, tp, ep, embedding=False, head=False, dense_layers=dense))
        # the layer whose backward runs holds its recomputed tensors: all of them (full), or what selective dropped
        recompute = np.where(layers > dense, one_moe, one_dense)
        if ckpt == Checkpointing.SELECTIVE:
            recompute = recompute - np.where(layers > dense, kept_moe, kept_dense)
        return dict(
            weights=wb * (shared / np.where(zero >= 3, group, 1) + experts / np.where(zero >= 3, group_e, 1)),
            fp8_weights=np.where(fp8, 2.0, 0.0) * decoder,
            gradients=gb * (shared / np.where(zero >= 2, group, 1) + experts / np.where(zero >= 2, group_e, 1)),
            optimizer_states=per_param * (shared / group + experts / group_e),
            temporaries=np.where(gb == 2, 4.0, 0.0) * (shared / group + experts / group_e),  # fp16 grads cast
            micro_batch=dense * kept_dense + (layers - dense) * kept_moe
            + np.where(embedding, T * (8 + (h / sp if cfg.embd_dropout > 0 else 0)), 0.0),
            head=head, recompute=np.where(ckpt == Checkpointing.NONE, 0.0, recompute),
            transient=np.maximum(_layer_transient(cfg, T, c, tp, sp, False),
                                 _layer_transient(cfg, T, c, tp, sp, cfg.is_moe) * (layers > dense)))

    def layers_of(j):
        """Layers of stage ``j`` and the index of its first layer (first, middle or last stage)."""
        return (np.where(j == 0, first, np.where(j == pp - 1, last, middle)),
                np.where(j == 0, 0, np.where(j == pp - 1, L - last, first + (j - 1) * middle)))

    held = ("weights", "fp8_weights", "gradients", "optimizer_states", "temporaries")
    for name, i in (("first", 0), ("middle", np.minimum(1, pp - 1)), ("last", pp - 1)):
        own = stage(i, *layers_of(i))
        if dualpipe:
            # DualPipe: this GPU also holds stage pp - 1 - i, whose micro-batches flow the other way (two copies of
            # the parameters); in flight at its peak, pp - i micro-batches of its own stage and i + 1 of the other,
            # pp + 1 in all (DeepSeek-AI 2024, Table 2; DualPipe.step's warm-up), out of m / 2 each way
            mirror = stage(pp - 1 - i, *layers_of(pp - 1 - i))
            acts = (np.minimum(pp - i, m // 2) * own["micro_batch"] + np.minimum(i + 1, m // 2) * mirror["micro_batch"])
            parts = {k: own[k] + mirror[k] for k in held}
            head = own["head"] | mirror["head"]
            recompute = np.maximum(own["recompute"], mirror["recompute"])
            transient = np.maximum(own["transient"], mirror["transient"])
            waiting = 0
        else:
            # in flight [micro-batches]: 1F1B's warm-up plus one; interleaved, its chunks' (all when m = pp)
            warmup = np.where(m == pp, m * v, np.minimum(v * pp + pp - 1 - 2 * i, m * v))
            chunks = np.where(v > 1, warmup / v, np.minimum(pp - i, m))
            acts = chunks * own["micro_batch"]
            parts = {k: own[k] for k in held}
            head, recompute, transient = own["head"], own["recompute"], own["transient"]
            # the logits of the micro-batches whose backward waits (none in 1F1B, which runs each one's backward
            # right after its forward)
            waiting = np.where((v > 1) & (m == pp), m - 1, 0)
        # the last stage: final norm and head inputs, labels and loss, and the waiting logits
        acts = acts + np.where(head, T * (2 * c * h / sp + 12) + waiting * T * V / tp * c, 0.0)
        temps = parts.pop("temporaries")
        static = dict(parts, gathered_weights=gathered, cublas_workspace=runtime)
        moments[f"layer_backward@{name}"] = dict(static, activations=acts + recompute + z,
                                                 backward_temporaries=transient + unsharded_grads)
        logits = T * V / tp * c
        moments[f"forward_loss@{name}"] = dict(static, activations=acts + z,
                                               logits_and_loss=np.where(head, logits + 8 * T, 0.0))
        moments[f"backward_start@{name}"] = dict(static, activations=acts + z,
                                                 logits_and_loss=np.where(head, 2 * logits, 0.0))
        moments[f"optimizer_step@{name}"] = dict(static, gathered_weights=0.0, optimizer_temporaries=temps + z)
        steady.append(sum(parts.values()) + runtime + z)
    return moments, np.max(np.stack(steady), axis=0)


def fsdp_static(cfg: TransformerConfig, prec: Precision, optimizer, params, *, zero, shard_group, ep, tp,
                micro_batches, foreach: bool, fused: bool, state_bytes: float | None = None) -> tuple[dict, object]:
    """What FSDP (``zero`` 2 or 3) holds besides the activations, per moment: ``({moment: {component: bytes}},
    steady)``. ``params``: the rank's ``(shared, experts, layer)`` parameters after tensor and expert
    parallelism (:func:`gpumodel.core.hf_memory.hf_moments`); ``state_bytes``: the optimizer states' element size
    (default: the sharded parameters'); see the module notes."""
    shared, experts, layer = params
    c, pb = prec.compute_bytes, prec.param_bytes
    reduce_bytes = 4 if prec.is_amp else c
    part = shared / shard_group + experts / np.maximum(shard_group / ep, 1)
    weights = grads = part * pb
    total, temps = optimizer_state_bytes(cfg, optimizer, pb if state_bytes is None else state_bytes)
    states = total / cfg.num_parameters() * part
    temps = 0.0 if (fused or not foreach) else temps / cfg.num_parameters() * part
    root = cfg.embedding_parameters() / tp * c
    forward = np.where(zero >= 3, 2 * layer * c, (shared + experts) * c) + root
    backward = forward + layer * (c + reduce_bytes)       # the layer's unsharded gradient, the reduce-scatter input
    end = 2 * layer * c + root + layer * (c + reduce_bytes)
    held = np.where(np.asarray(micro_batches) > 1, grads, 0.0)
    base = dict(weights=weights, optimizer_states=states, autocast_weight_copies=0.0)
    out = {"forward_loss": dict(base, gradients=held, gathered_weights=forward),
           "backward_start": dict(base, gradients=held, gathered_weights=forward),
           "layer_backward": dict(base, gradients=held, gathered_weights=backward),
           "backward_end": dict(base, gradients=grads, gathered_weights=end),
           "optimizer_step": dict(base, gradients=grads, gathered_weights=0.0, optimizer_temporaries=temps)}
    return out, weights + states


def deepspeed_static(cfg: TransformerConfig, prec: Precision, optimizer, params, *, zero, group, ep, tp,
                     micro_batches) -> tuple[dict, object]:
    """What DeepSpeed ZeRO holds besides the activations, per moment: ``({moment: {component: bytes}}, steady)``
    (see the module notes; ``group`` is the ZeRO group, ``dp * cp``)."""
    shared, experts, layer = params
    pb = 2 if prec.compute_bytes == 2 else 4
    group_e = np.maximum(group / ep, 1)

    def part(stage):
        return shared / np.where(zero >= stage, group, 1) + experts / np.where(zero >= stage, group_e, 1)

    weights, grads = part(3) * pb, part(2) * pb
    total, _ = optimizer_state_bytes(cfg, optimizer, 4)
    master = 4 if pb == 2 else 0
    states = (total / cfg.num_parameters() + master) * part(1)
    temps = master * part(1)                               # the fp32 gradient partition of the step
    n = shared + experts
    reduce = np.minimum(DEEPSPEED_REDUCE_BUCKET, n) * pb * np.where(zero >= 3, 2, 1)   # overlap_comm at stage 3
    allgather = np.where((zero >= 1) & (zero <= 2), np.minimum(DEEPSPEED_ALLGATHER_BUCKET, n) * pb, 0.0)
    # ZeRO-3 gathers a sub-module's own parameters when it runs: its largest module and the prefetch bucket; at the
    # turn from forward to backward also the tail of the model kept for its backward (reuse within the distance)
    module = _largest_module(cfg) / tp
    gathered = np.where(zero >= 3, (module + np.minimum(DEEPSPEED_PREFETCH_BUCKET, layer)) * pb, 0.0)
    head = cfg.vocab_size * cfg.hidden_size / tp
    turn = np.where(zero >= 3, np.minimum(n, head + DEEPSPEED_MAX_REUSE / 2 + module) * pb, 0.0)
    held = np.where(np.asarray(micro_batches) > 1, grads, 0.0)
    base = dict(weights=weights, optimizer_states=states, autocast_weight_copies=0.0)
    out = {"forward_loss": dict(base, gradients=held, gathered_weights=turn),
           "backward_start": dict(base, gradients=held, gathered_weights=turn),
           "layer_backward": dict(base, gradients=held, gathered_weights=gathered,
                                  communication_buffers=np.where(zero >= 1, reduce, 0.0)),
           "backward_end": dict(base, gradients=grads, gathered_weights=gathered, communication_buffers=reduce),
           "optimizer_step": dict(base, gradients=grads, gathered_weights=0.0, optimizer_temporaries=temps,
                                  communication_buffers=allgather)}
    return out, weights + states
