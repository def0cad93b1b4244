"""Composing the step of a parallel layout from its shard's kernel times: one broadcasting function.

One optimizer step of a job laid out by :class:`~gpumodel.cluster.parallelism.Parallelism` on a
:class:`~gpumodel.records.system.SystemSpec` is composed as the engines run it (:func:`compose`):

* **Compute** of one micro-batch on the slowest pipeline stage (:mod:`gpumodel.cluster.pipeline`: its layers,
  with the LM head where the last stage is the slowest) from :mod:`gpumodel.cluster.shard`, the kernel model on
  the shard's shapes; activation recomputation adds a forward per layer ("full") or the recomputed submodules'
  forward ("selective": the attention core, or Megatron-Core's ``--recompute-modules``,
  :mod:`gpumodel.cluster.selective`).
* **Tensor parallelism** (Megatron): two all-reduces of the layer's activations (``b s h`` elements)
  in the forward and two in the backward, plus two per recomputed forward; with sequence
  parallelism an all-gather and a reduce-scatter of the same bytes replace each (the ring's time of
  one all-reduce, but no NVLink SHARP: NCCL reduces all-reduces in the NVSwitch of H100 and later
  nodes, and keeps the ring for all-gathers and reduce-scatters). They sit on the critical path (exposed).
* **Context parallelism**: each layer gathers the keys and values of the ``cp`` chunks (forward and
  recompute) and reduce-scatters their gradients (backward), overlapped with the attention kernels
  (ring attention): exposed ``max(0, t_comm - t_attention)``.
* **Expert parallelism**: two all-to-alls of the routed tokens per layer forward (dispatch and combine), two
  backward, over NVLink inside a node and the network across nodes; exposed unless ``comm_overlap`` hides them.
* **Pipeline parallelism** (:mod:`gpumodel.cluster.pipeline`): ``m`` micro-batches through ``pp`` stages take
  ``(m + (pp - 1) / v) t_stage`` (1F1B; or a named schedule: zero-bubble, DualPipe); the stage-to-stage
  sends, split over the tensor ranks by Megatron-LM and DeepSpeed. DeepSpeed's pipeline engine sends and
  receives synchronously (``deepspeed/runtime/pipe/p2p.py``), so both sides wait out each transfer: its order
  played op by op exposes about twice the send time that asynchronous sends do (``tests/deepspeed_schedulesim.py``),
  and the step counts its sends twice, never hidden.
* **Data parallelism** (:mod:`gpumodel.cluster.dataparallel`): the gradient reduction and ZeRO's gathers, per
  step (ZeRO 0-2) or per layer and micro-batch (ZeRO-3), with each engine's overlap.
* **Optimizer**: over the shard's parameters (``/ dp`` with ZeRO >= 1).
* **Communication overlap** (``comm_overlap``: True for all of Megatron-Core's ``--tp-comm-overlap``,
  ``--overlap-grad-reduce``, ``--overlap-param-gather`` and its overlapped pipeline sends, or a set of
  ``"tp"``, ``"dp"``, ``"pp"``: :func:`overlaps`): each tensor-parallel all-gather and reduce-scatter runs in
  chunks under the layer's GEMMs, exposed only where it outlasts them (``max(0, t_tp - t_gemm)`` per layer,
  the GEMMs being the layer's compute less its attention kernels); the gradient reduce-scatter runs bucket
  by bucket under the last micro-batch's backward and the parameter all-gather under the first micro-batch's
  forward; the pipeline's sends run under the next model chunk's compute (not DeepSpeed's, which block).
* **What hidden communication costs the compute**: a collective kernel that runs under compute keeps
  :data:`COLLECTIVE_CTAS` thread blocks resident, each on an SM, so the compute beside it runs on the rest and
  takes :func:`collective_sm_share` of the hidden collective's time longer (the context-parallel exchanges, hidden
  tensor-parallel and expert all-to-all traffic, ZeRO-3's and the data-parallel reduction's hidden part, hidden
  pipeline sends). The breakdown counts it as communication.

Collective times come from :mod:`gpumodel.cluster.collectives` with each group's placement (tensor
ranks innermost). Multi-GPU times are modelled, not measured here; ``python bench/published_runs.py``
compares them with published runs.

References
----------
D. Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021.
V. Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022.
S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC 2020.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.errors import ArgumentError
from ..vocabulary import Framework
from .collectives import system_collective_time as _coll
from .dataparallel import gradient_bytes, step_sync_times, zero3_layer_times
from .pipeline import p2p_time, pipeline_bubble, slowest_stage, stage_layers
from .zero3gather import per_parameter_layer_times

__all__ = ["PHASES", "OVERLAPS", "COLLECTIVE_CTAS", "overlaps", "compose", "collective_sm_share"]

#: thread blocks a collective kernel keeps resident while it runs, each on an SM of its own: an NVIDIA H100 profile of
#: an FSDP prefetch shows ``ncclAllGather`` launched with 24 blocks beside a GEMM, whose 132 tiles then ran in two
#: waves (NVIDIA developer forum, "Compute-Communication Overlap Causes Severe GEMM Performance Degradation because
#: of Tail Effect", 2025)
COLLECTIVE_CTAS = 24


def collective_sm_share(gpu: Any) -> float:
    """The share of ``gpu``'s SMs a collective kernel holds while it runs under compute [1].

    Compute that runs beside it has :math:`1 - c/S` of the SMs, so a stretch of compute that a hidden collective of
    :math:`t_c` seconds overlaps takes :math:`(c/S)\\, t_c` longer, to first order (``c`` =
    :data:`COLLECTIVE_CTAS`, ``S`` the SM count).

    >>> import gpumodel as gm
    >>> round(collective_sm_share(gm.gpu("h100")), 3), round(collective_sm_share(gm.gpu("a100")), 3)
    (0.182, 0.222)
    """
    return min(1.0, COLLECTIVE_CTAS / float(gpu.sm_count))

#: Phases of the step breakdown [s].
PHASES = ("forward", "backward", "recompute", "optimizer", "communication", "pipeline_bubble")
#: What ``comm_overlap`` may hide: tensor-parallel collectives, the data-parallel reduction and gathers, the
#: pipeline's sends, the expert-parallel all-to-alls.
OVERLAPS = ("tp", "dp", "pp", "ep")


def overlaps(comm_overlap: Any) -> frozenset:
    """The communication a ``comm_overlap`` argument hides under compute.

    Parameters
    ----------
    comm_overlap : bool, str or iterable of str
        True: Megatron-Core's ``--tp-comm-overlap``, ``--overlap-grad-reduce`` with ``--overlap-param-gather``,
        and its overlapped pipeline sends (``"tp"``, ``"dp"``, ``"pp"``); False: none; a string such as
        ``"dp,pp"`` or an iterable of names from :data:`OVERLAPS`: those (``"ep"``: the expert-parallel
        all-to-alls under another micro-batch's compute, as DualPipe runs them).

    Returns
    -------
    frozenset of str

    Examples
    --------
    >>> sorted(overlaps(True)), sorted(overlaps("dp,pp")), sorted(overlaps(False))
    (['dp', 'pp', 'tp'], ['dp', 'pp'], [])
    """
    if isinstance(comm_overlap, (bool, np.bool_)):
        return frozenset(("tp", "dp", "pp")) if comm_overlap else frozenset()
    parts = comm_overlap.replace("+", ",").split(",") if isinstance(comm_overlap, str) else comm_overlap
    try:
        names = frozenset(str(p).strip().lower() for p in parts if str(p).strip())
    except TypeError:
        names = None
    if names is None or not names <= set(OVERLAPS):
        raise ArgumentError(f"comm_overlap={comm_overlap!r} is not True, False or a set of 'tp', 'dp', 'pp', 'ep'",
                            argument="comm_overlap", value=comm_overlap,
                            allowed="True, False, or names from 'tp', 'dp', 'pp', 'ep' (e.g. 'dp,pp')")
    return names


def compose(cfg, sysm, prec, fw, st, *, tp, pp, cp, dp, ep, zero, sequence_parallel, virtual_stages, batch_size, seq_len,
            micro_batches, checkpointing, comm_overlap=False, first_stage_layers=None, last_stage_layers=None,
            pipeline_schedule="1f1b", grad_reduce_dtype=None, selective=None, zero3_gather="prefetch",
            shard_group=None) -> dict:
    """The step of a layout from its shard's kernel times: a pure function that broadcasts.

    ``st`` holds the shard's times (a :class:`~gpumodel.cluster.shard.ShardTimes`, or any object with the
    same attributes as arrays); the degrees, ``batch_size``, ``micro_batches`` and ``checkpointing``
    (0 none, 1 selective, 2 full) may be arrays of one shape; ``comm_overlap`` is what :func:`overlaps` reads;
    ``first_stage_layers`` and ``last_stage_layers`` cut the pipeline unevenly (:func:`~gpumodel.cluster.pipeline.stage_layers`);
    ``pipeline_schedule`` names the schedule (:func:`~gpumodel.cluster.pipeline.pipeline_bubble`);
    ``grad_reduce_dtype`` Megatron's gradient reduction format (:func:`~gpumodel.cluster.dataparallel.gradient_bytes`);
    ``selective`` what selective recomputation re-runs (a :class:`~gpumodel.cluster.selective.SelectiveRecompute`:
    its kernels' time and FLOPs, the tensor-parallel collectives and all-to-alls it repeats; None: the attention
    core alone, Korthikanti et al.'s); ``zero3_gather`` how ZeRO-3 gathers (``"per_parameter"``: DeepSpeed before
    v0.5.5, :func:`~gpumodel.cluster.zero3gather.per_parameter_layer_times`); ``shard_group`` HSDP's sharding group
    (None: the whole ``dp * cp``; else ZeRO 2/3 shard over it, ranks ``tp`` apart, and the shards are all-reduced
    across the ``dp * cp / shard_group`` replicas: :func:`~gpumodel.cluster.dataparallel.replica_all_reduce`).
    Returns the breakdown by :data:`PHASES` [s],
    ``"hardware_flops"`` (the FLOPs of the shard's kernels over all GPUs, full recomputation included) [FLOP]
    and ``"stage_parameters"`` (parameters per GPU before ZeRO).
    """
    A = np.asarray
    hide = overlaps(comm_overlap)
    tp, pp, cp, dp, v, b, m, ckpt, zero = (A(x) for x in (tp, pp, cp, dp, virtual_stages, batch_size, micro_batches,
                                                         checkpointing, zero))
    sp = A(sequence_parallel)
    full, sel = ckpt == 2, ckpt == 1
    s = seq_len
    s_loc = s // cp
    cut = stage_layers(cfg.num_layers, pp, first_stage_layers, last_stage_layers)
    c = prec.compute_bytes
    act_bytes = b * s_loc * cfg.hidden_size * c
    f_l, b_l, attn = A(st.layer_forward), A(st.layer_backward), A(st.attention_forward)

    # ---- one layer of one micro-batch: its compute and the communication it exposes
    sel_f, sel_attn, sel_tp, sel_moe, sel_flops = ((attn, True, 0.0, 0.0, 0.0) if selective is None else
                                                   (A(selective.forward_s), selective.attention, selective.tp_sublayers,
                                                    selective.moe_layers, A(selective.flops)))
    r_l = np.where(full, f_l, np.where(sel, sel_f, 0.0))
    tp_coll = np.where(sp, A(_coll("all_gather", act_bytes, sysm, tp, 1)) + A(_coll("reduce_scatter", act_bytes, sysm, tp, 1)),
                       A(_coll("all_reduce", act_bytes, sysm, tp, 1)))  # NCCL's pick for each (NVLS for the all-reduce)
    # forward, (recompute,) backward; a selectively recomputed MLP repeats its pair
    tp_layer = tp_coll * (2 * np.where(full, 3, 2) + np.where(sel, sel_tp, 0.0))
    kv_bytes = 2 * b * s * np.maximum(1, cfg.num_kv_heads // tp) * cfg.head_dim * c
    gather = A(_coll("all_gather", kv_bytes, sysm, cp, tp))
    scatter = A(_coll("reduce_scatter", kv_bytes, sysm, cp, tp))
    cp_layer = np.where(full, 2, 1) * np.maximum(0.0, gather - attn) + np.maximum(0.0, scatter - 2.5 * attn)
    cp_all = np.where(full, 2, 1) * gather + scatter
    routed = act_bytes * max(cfg.experts_per_token, 1)
    redo = np.where(full, 1.5, np.where(sel, 1 + sel_moe / 2, 1.0))    # a recomputed MoE layer dispatches again
    ep_layer = ep_all = 4 * A(_coll("all_to_all", routed, sysm, ep, tp)) * redo
    if "ep" in hide:  # dispatch and combine under another micro-batch's compute
        ep_layer = np.maximum(0.0, ep_layer - (f_l + b_l + r_l))
    tp_all = tp_layer
    if "tp" in hide:  # chunked under the layer's GEMMs: its compute less the attention kernels (backward 2.5x forward)
        gemm_l = np.maximum(0.0, f_l + b_l + r_l - attn * (3.5 + np.where(full | (sel & sel_attn), 1.0, 0.0)))
        tp_layer = np.maximum(0.0, tp_layer - gemm_l)
    group = dp * cp                                                    # gradients over dp * cp ranks, stride tp
    shard = group if shard_group is None else A(shard_group)           # HSDP: sharded over `shard`, replicated
    replicas = group // shard
    layer_params = cfg.layer_parameters() / tp
    if cfg.is_moe:
        layer_params = layer_params * (1 - 0.9 * (1 - 1 / A(ep)))     # expert weights are split over ep
    grad_bytes = gradient_bytes(fw, prec, grad_reduce_dtype)
    if zero3_gather == "per_parameter":
        z3_exposed, z3_all = per_parameter_layer_times(sysm, cfg, tp, group, tp, c, grad_bytes, b_l + r_l, full)
    else:
        z3_exposed, z3_all = zero3_layer_times(fw, sysm, layer_params, shard, tp, c, grad_bytes, f_l, b_l + r_l, full,
                                               replicas)
    sharded = (zero == 3) & (group > 1)
    zero3_l = np.where(sharded, z3_exposed, 0.0)
    # the collectives run under the layer's compute hold some of its SMs: the compute takes that much longer
    share = collective_sm_share(sysm.gpu)
    slowed_l = share * (tp_all - tp_layer + cp_all - cp_layer + ep_all - ep_layer
                        + np.where(sharded, z3_all - z3_exposed, 0.0))

    # ---- the slowest pipeline stage, the schedule and its sends
    head_f, head_b = A(st.head_forward), A(st.head_backward)
    layer_t = f_l + b_l + r_l + tp_layer + cp_layer + ep_layer + zero3_l + slowed_l
    layers, head = slowest_stage(layer_t, head_f + head_b + 2 * tp_coll, cut, pp)
    # DeepSpeed's pipeline engine sends and receives synchronously: both sides wait out each transfer, which so
    # shows twice (tests/deepspeed_schedulesim.py plays its order); nothing of it hides under compute
    blocking = fw == Framework.DEEPSPEED
    p2p = p2p_all = p2p_time(act_bytes, sysm, tp, tp * cp * dp, v, pp, sp,
                             fw in (Framework.MEGATRON, Framework.DEEPSPEED)) * (2.0 if blocking else 1.0)
    if "pp" in hide and not blocking:  # each send under the next model chunk's compute
        p2p = np.maximum(0.0, p2p - layers * (f_l + b_l + r_l))
    comm_mb = (layers * (tp_layer + cp_layer + ep_layer + zero3_l + slowed_l) + head * 2 * tp_coll + p2p
               + share * (p2p_all - p2p))
    t_mb = layers * (f_l + b_l + r_l) + head * (head_f + head_b) + comm_mb
    fwd_mb = layers * f_l + head * head_f + comm_mb * f_l / (f_l + b_l + r_l)   # its forward share

    # ---- once a step: the data-parallel reduction (ZeRO 0-2) and the optimizer
    n_stage = layer_params * np.max(np.broadcast_arrays(*cut), axis=0) + cfg.embedding_parameters() / tp
    dp_comm, dp_all = step_sync_times(fw, sysm, zero, n_stage, shard, tp, c, grad_bytes, layers * (b_l + r_l),
                                      layers * f_l, "dp" in hide, replicas)
    dp_comm = dp_comm + share * (dp_all - dp_comm)
    n_opt = n_stage / np.where(zero >= 1, shard, 1)
    layer_flops, head_flops = A(st.layer_flops), A(st.head_flops)
    # full: the forward's share of forward + backward FLOPs (1 : 2.5); selective: the recomputed kernels'
    rec_flops = np.where(full, layer_flops / 3.5, np.where(sel, sel_flops, 0.0))
    return {
        "forward": m * (layers * f_l + head * head_f),
        "backward": m * (layers * b_l + head * head_b),
        "recompute": m * layers * r_l,
        "optimizer": A(st.optimizer_per_param) * n_opt,
        "communication": m * comm_mb + dp_comm,
        "pipeline_bubble": pipeline_bubble(fwd_mb, t_mb - fwd_mb, pp, v, pipeline_schedule),
        "hardware_flops": (cfg.num_layers * (layer_flops + rec_flops) + head_flops) * tp * m * dp * cp,
        "stage_parameters": n_stage,
    }
