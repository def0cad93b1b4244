"""Training-step time of a parallel layout: the shard's kernels, the exposed communication, the bubble.

One optimizer step of a job laid out by :class:`~gpumodel.cluster.parallelism.Parallelism` on a
:class:`~gpumodel.records.system.SystemSpec` is composed as the engines run it:

* **Compute** of one micro-batch on the slowest pipeline stage, ``ceil(L / pp)`` layers plus the
  embedding and LM head (:mod:`gpumodel.cluster.shard`, the kernel model on the shard's shapes);
  activation recomputation adds a forward per layer ("full") or the attention forward ("selective").
* **Tensor parallelism** (Megatron): two all-reduces of the layer's activations (``b s h`` elements)
  in the forward and two in the backward, plus two per recomputed forward; with sequence
  parallelism an all-gather and a reduce-scatter of the same bytes replace each (the ring's time of
  one all-reduce, but no NVLink SHARP: NCCL reduces all-reduces in the NVSwitch of H100 and later
  nodes, and keeps the ring for all-gathers and reduce-scatters). They sit on the critical path (exposed).
* **Context parallelism**: each layer gathers the keys and values of the ``cp`` chunks (forward and
  recompute) and reduce-scatters their gradients (backward), overlapped with the attention kernels
  (ring attention): exposed ``max(0, t_comm - t_attention)``.
* **Expert parallelism**: two all-to-alls of the routed tokens per layer forward, two backward (exposed).
* **Pipeline parallelism**: ``m`` micro-batches through ``pp`` stages take ``(m + (pp - 1) / v) t_mb``
  (1F1B, ``v`` virtual stages interleaved; Narayanan et al. 2021, eq. 1-2); each micro-batch sends its
  activations to the next stage and the gradients back (``v`` times when interleaved).
* **Data parallelism**: gradients all-reduced (ZeRO-0), or reduce-scattered and the parameters
  all-gathered after the update (ZeRO-1/2); ZeRO-3/FSDP all-gathers each layer's parameters in the
  forward and again in the backward, prefetched under the previous layer's compute. Megatron-LM
  reduces gradients after the pipeline flushes (exposed); PyTorch DDP/FSDP and DeepSpeed bucket the
  reduction under the backward of the last micro-batch (exposed: what the backward cannot hide).
* **Optimizer**: over the shard's parameters (``/ dp`` with ZeRO >= 1).
* **Communication overlap** (``comm_overlap=True``, Megatron-Core's ``--tp-comm-overlap``,
  ``--overlap-grad-reduce`` and ``--overlap-param-gather``): each tensor-parallel all-gather and
  reduce-scatter runs in chunks under the layer's GEMMs, exposed only where it outlasts them
  (``max(0, t_tp - t_gemm)`` per layer, the GEMMs being the layer's compute less its attention
  kernels); the gradient reduce-scatter runs bucket by bucket under the last micro-batch's backward
  and the parameter all-gather under the first micro-batch's forward, each exposed where it outlasts
  them, and at least one bucket (:data:`MEGATRON_BUCKET_PARAMS`).

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

import warnings
from typing import Any

import numpy as np

from ..base.enums import StrEnum
from ..base.errors import ArgumentError, DoesNotFitWarning
from ..calibration.estimate import resolve_calibration
from ..core.memory import training_memory
from ..records.gpu import GPU_CATALOG
from ..records.system import SYSTEM_CATALOG, SystemSpec
from ..records.transformer import TransformerConfig
from ..training.layer import attention_kernel_on
from ..training.steptime import StepTime, model_flops_per_token, recompute_flops_per_token, single_gpu_step_time
from ..vocabulary import (Checkpointing, Optimizer, checkpointing_mode, choice, flag, positive_int,
                          precision as _precision, resolve_model, resolve_system)
from .collectives import system_collective_time as _coll
from .parallelism import Parallelism
from .shard import shard_config, shard_times

__all__ = ["Framework", "framework_rules", "training_step_time", "parallel_training_step_time", "model_flops_per_token", "compose", "PHASES"]

#: Phases of the step breakdown [s].
PHASES = ("forward", "backward", "recompute", "optimizer", "communication", "pipeline_bubble")
#: PyTorch DDP's default gradient bucket (``bucket_cap_mb=25``): the last bucket's reduction is never hidden [B].
DDP_BUCKET_BYTES = 25 * 2**20
#: Megatron-Core's gradient bucket with ``--overlap-grad-reduce`` (``--ddp-bucket-size`` default, 40M parameters).
MEGATRON_BUCKET_PARAMS = 40_000_000


class Framework(StrEnum):
    """Training engines: how kernels are fused and whether the gradient reduction overlaps the backward."""

    HF = "hf"
    MEGATRON = "megatron"
    FSDP = "fsdp"
    DEEPSPEED = "deepspeed"


def framework_rules(framework: Framework, zero: int, pp: int) -> None:
    """Refuse a layout its training engine does not run.

    Megatron-Core's distributed optimizer shards the optimizer states and fp32 master weights over the
    data-parallel ranks, ZeRO-1 (it has no ZeRO-2 or -3); DeepSpeed refuses ZeRO-2 and ZeRO-3 with pipeline
    parallelism (its pipeline engine supports ZeRO-1 only).

    Parameters
    ----------
    framework : Framework
        The training engine.
    zero : int
        The ZeRO stage (0-3).
    pp : int
        Pipeline-parallel degree.

    Returns
    -------
    None
        Or raises :class:`~gpumodel.base.errors.ArgumentError` naming ``parallelism``.

    References
    ----------
    Megatron-Core's ``DistributedOptimizer`` (megatron/core/optimizer/distrib_optimizer.py); DeepSpeed's
    ``PipelineEngine``, which asserts ``zero_optimization_stage() < 2``.
    """
    if framework == Framework.MEGATRON and zero >= 2:
        raise ArgumentError(f"framework='megatron' runs ZeRO-1 at most (its distributed optimizer shards the optimizer "
                            f"states), got zero={zero}; use framework='deepspeed' or 'fsdp' for ZeRO-{zero}",
                            argument="parallelism", value=f"zero={zero}", allowed="zero 0 or 1 with megatron")
    if framework == Framework.DEEPSPEED and zero >= 2 and pp > 1:
        raise ArgumentError(f"DeepSpeed refuses ZeRO-{zero} with pipeline parallelism (pp={pp}): its pipeline engine "
                            "runs ZeRO-1 at most", argument="parallelism", value=f"zero={zero}, pp={pp}",
                            allowed="zero 0 or 1 with pp > 1")


def parallel_training_step_time(model: Any, system: Any, batch_size: int, seq_len: int, precision: str = "amp_bf16",
                                optimizer: str = "adamw", checkpointing: Any = False, *,
                                gradient_accumulation_steps: int = 1, parallelism: Parallelism | None = None,
                                framework: str = "hf", attention: str = "flash", calibrated: bool = True,
                                calibration: Any = None, comm_overlap: bool = False,
                                expandable_segments: bool = False, attention_kernel: str = "sdpa") -> StepTime:
    """Modelled time of one training step of a parallel layout on a system.

    Parameters
    ----------
    model : TransformerConfig, str or dict
    system : SystemSpec, str or GPU
        ``gm.system`` name or record; a GPU means one node of it.
    batch_size : int
        Micro-batch per model replica [sequences] (as in ``training_memory``).
    seq_len : int
        Sequence length [tokens].
    precision, optimizer, checkpointing :
        As in :func:`gpumodel.training_step_time`.
    calibrated : bool
        Time the shard's kernels with the GPU's shipped calibration where there is one (default); False: the
        datasheet with default efficiencies.
    calibration : Calibration or path, optional
        A calibration of the system's GPU (a :class:`~gpumodel.calibration.record.Calibration` or the path of a
        YAML file ``gpumodel calibrate`` wrote, read once) that prices every kernel instead of the shipped one;
        one for another GPU is refused (:class:`~gpumodel.base.errors.ArgumentError` naming ``calibration``).
        The parallel model has no host side: it takes no ``host``.
    gradient_accumulation_steps : int
        Micro-batches per step on each replica (with ``pp``, those of the pipeline schedule). The global
        batch is ``batch_size * gradient_accumulation_steps * dp`` sequences.
    parallelism : Parallelism, optional
        The layout (default: one GPU).
    framework : {"hf", "megatron", "fsdp", "deepspeed"}
        "megatron": fused kernels, gradients reduced after the pipeline flush. Others: eager PyTorch
        kernels, the gradient reduction bucketed under the backward.
    attention : {"flash", "naive"}
        Attention kernels: FlashAttention, or the scores written to memory (Megatron-LM before 2022).
    attention_kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"}
        The library whose flash kernels run the shard's 16-bit attention (``attention="flash"`` only).
    comm_overlap : bool
        Megatron-Core's communication overlap (``--tp-comm-overlap``, ``--overlap-grad-reduce``,
        ``--overlap-param-gather``): tensor-parallel collectives under the GEMMs, the data-parallel
        reduce-scatter and all-gather under the backward and forward. Default False (all exposed, as
        Megatron-LM before 2023).
    expandable_segments : bool
        The allocator setting ``fits`` and ``peak_bytes`` assume (:func:`gpumodel.training_memory`).

    Returns
    -------
    StepTime
        With ``num_gpus``, ``fits``/``peak_bytes`` per GPU and a breakdown of "forward", "backward",
        "recompute", "optimizer", "communication" (exposed) and "pipeline_bubble" [s]. MFU and HFU in the
        convention of :class:`~gpumodel.training.steptime.StepTime`: HFU adds the recomputed forward work
        (full: each layer's forward; selective: the attention core), so it equals MFU without recomputation.

    Examples
    --------
    >>> import gpumodel as gm
    >>> par = gm.Parallelism(dp=4, tp=8, pp=2, zero=1, sequence_parallel=True)
    >>> st = gm.training_step_time("llama-3-70b", "dgx-h100", batch_size=1, seq_len=4096, checkpointing=True,
    ...                            gradient_accumulation_steps=16, parallelism=par, framework="megatron")
    >>> st.num_gpus, st.fits, 0.2 < st.mfu < 0.7, sorted(st.breakdown)[:2]
    (64, True, True, ['backward', 'communication'])
    """
    cfg = resolve_model(model)
    sysm = resolve_system(system)
    par = parallelism if parallelism is not None else Parallelism()
    if not isinstance(par, Parallelism):
        raise ArgumentError(f"parallelism must be a gm.Parallelism, got {type(par).__name__}")
    par.check(cfg)
    fw = choice(Framework, framework, "framework")
    framework_rules(fw, zero=par.zero, pp=par.pp)
    prec = _precision(precision)
    opt = choice(Optimizer, optimizer, "optimizer")
    ckpt = checkpointing_mode(checkpointing)
    calibrated = flag(calibrated, "calibrated")
    overlap = flag(comm_overlap, "comm_overlap")
    b = positive_int(batch_size, "batch_size")
    s = positive_int(seq_len, "seq_len")
    m = positive_int(gradient_accumulation_steps, "gradient_accumulation_steps")
    if not all(isinstance(x, int) for x in (b, s, m)):
        raise ArgumentError("batch_size, seq_len and gradient_accumulation_steps must be scalars here; "
                            "gm.plan_training sweeps layouts")
    if s % par.cp:
        raise ArgumentError(f"cp={par.cp} must divide seq_len ({s})")
    g = sysm.gpu
    calibration = resolve_calibration(calibration, g)   # a path read once; another GPU's record refused
    if par.num_gpus > sysm.gpus_per_node and sysm.inter_node is None:
        raise ArgumentError(f"{par.num_gpus} GPUs exceed one node of {sysm.name}, which has no network")
    tp, pp, cp, dp, v = par.tp, par.pp, par.cp, par.dp, par.virtual_stages
    s_loc = s // cp
    shard = shard_config(cfg, tp, par.ep)
    if attention not in ("flash", "naive"):
        raise ArgumentError(f"attention={attention!r} is not one of 'flash', 'naive'")
    kernel = attention_kernel_on(attention_kernel, g, prec.compute_dtype.value)
    if attention == "naive" and kernel.value != "sdpa":
        raise ArgumentError(f"attention_kernel={kernel.value!r} is a flash-attention library; attention='naive' takes "
                            "attention_kernel='sdpa'", argument="attention_kernel", value=kernel.value,
                            allowed="'sdpa' with attention='naive'")
    st = shard_times(shard, g, b, s_loc, cp, prec.name, opt.value, fw.value, calibrated, calibration, attention,
                     kernel.value)
    code = {Checkpointing.NONE: 0, Checkpointing.SELECTIVE: 1, Checkpointing.FULL: 2}[ckpt]
    out = compose(cfg, sysm, prec, fw, st, tp=tp, pp=pp, cp=cp, dp=dp, ep=par.ep, zero=par.zero,
                  sequence_parallel=par.sequence_parallel, virtual_stages=v, batch_size=b, seq_len=s,
                  micro_batches=m, checkpointing=code, comm_overlap=overlap)
    breakdown = {k: float(out[k]) for k in PHASES}
    seconds = sum(breakdown.values())
    tokens = b * s * m * dp
    model_flops = model_flops_per_token(cfg, s) * tokens
    used_flops = model_flops + recompute_flops_per_token(cfg, s, ckpt) * tokens   # HFU: MFU's convention
    hardware_flops = float(out["hardware_flops"])
    peak = g.peak_flops(prec.compute_dtype.value)
    n = par.num_gpus
    mem = training_memory(cfg, b, s_loc, precision=prec.name, optimizer=opt.value, checkpointing=ckpt.value,
                          gradient_accumulation_steps=m, zero=par.zero, dp=dp * cp, tp=tp, pp=pp,
                          sequence_parallel=par.sequence_parallel, attention="flash",
                          expandable_segments=expandable_segments)
    fits = bool(mem.total_bytes <= g.usable_memory_bytes)
    if not fits:
        warnings.warn(f"{cfg.name} with {par} needs {mem.total_bytes / 2**30:.1f} GiB per GPU, more than the "
                      f"{g.usable_memory_bytes / 2**30:.1f} GiB of a {g.name}: the time is for a run that does not fit",
                      DoesNotFitWarning, stacklevel=3)
    return StepTime(seconds=seconds, tokens_per_s=tokens / seconds, mfu=model_flops / seconds / (n * peak),
                    model_flops=model_flops, breakdown=breakdown, calibrated=st.calibrated, kernels=0,
                    hardware_flops=hardware_flops, hfu=used_flops / seconds / (n * peak), num_gpus=n,
                    fits=fits, peak_bytes=float(mem.peak_bytes), attention_kernel=kernel.value)


def compose(cfg, sysm, prec, fw, st, *, tp, pp, cp, dp, ep, zero, sequence_parallel, virtual_stages, batch_size, seq_len,
            micro_batches, checkpointing, comm_overlap=False) -> dict:
    """The step of a layout from its shard's kernel times: a pure function that broadcasts.

    ``st`` holds the shard's times (a :class:`~gpumodel.cluster.shard.ShardTimes`, or any object with the
    same attributes as arrays); the degrees, ``batch_size``, ``micro_batches`` and ``checkpointing``
    (0 none, 1 selective, 2 full) may be arrays of one shape; ``comm_overlap`` is a bool. Returns the breakdown by :data:`PHASES` [s],
    ``"hardware_flops"`` (the FLOPs of the shard's kernels over all GPUs, full recomputation included) [FLOP]
    and ``"stage_parameters"`` (parameters per GPU before ZeRO).
    """
    A = np.asarray
    tp, pp, cp, dp, v, b, m, ckpt, zero = (A(x) for x in (tp, pp, cp, dp, virtual_stages, batch_size, micro_batches,
                                                         checkpointing, zero))
    sp = A(sequence_parallel)
    full, sel = ckpt == 2, ckpt == 1
    s = seq_len
    s_loc = s // cp
    layers = np.ceil(cfg.num_layers / pp)
    c = prec.compute_bytes
    act_bytes = b * s_loc * cfg.hidden_size * c
    f_l, b_l, attn = A(st.layer_forward), A(st.layer_backward), A(st.attention_forward)

    # ---- per micro-batch on the slowest stage
    r_l = np.where(full, f_l, np.where(sel, attn, 0.0))
    tp_coll = np.where(sp, A(_coll("all_gather", act_bytes, sysm, tp, 1)) + A(_coll("reduce_scatter", act_bytes, sysm, tp, 1)),
                       A(_coll("all_reduce", act_bytes, sysm, tp, 1)))  # NCCL's pick for each (NVLS for the all-reduce)
    tp_layer = 2 * tp_coll * np.where(full, 3, 2)                      # forward, (recompute,) backward
    kv_bytes = 2 * b * s * np.maximum(1, cfg.num_kv_heads // tp) * cfg.head_dim * c
    gather = A(_coll("all_gather", kv_bytes, sysm, cp, tp))
    scatter = A(_coll("reduce_scatter", kv_bytes, sysm, cp, tp))
    cp_layer = np.where(full, 2, 1) * np.maximum(0.0, gather - attn) + np.maximum(0.0, scatter - 2.5 * attn)
    routed = act_bytes * max(cfg.experts_per_token, 1)
    ep_layer = 4 * A(_coll("all_to_all", routed, sysm, ep, tp)) * np.where(full, 1.5, 1.0)
    p2p_bytes = act_bytes / np.where(sp, tp, 1)
    p2p = np.where(pp > 1, 2 * v * A(_coll("send_recv", p2p_bytes, sysm, 2, tp * cp * dp)), 0.0)
    compute_mb = layers * (f_l + b_l + r_l) + A(st.head_forward) + A(st.head_backward)
    if comm_overlap:  # chunked under the layer's GEMMs: its compute less the attention kernels (backward 2.5x forward)
        gemm_l = np.maximum(0.0, f_l + b_l + r_l - attn * (3.5 + np.where(full | sel, 1.0, 0.0)))
        tp_layer = np.maximum(0.0, tp_layer - gemm_l)
    comm_mb = layers * (tp_layer + cp_layer + ep_layer) + 2 * tp_coll + p2p

    # ---- data parallel: gradients over dp * cp ranks (stride tp), ZeRO
    n_stage = (cfg.layer_parameters() * layers + cfg.embedding_parameters()) / tp
    if cfg.is_moe:
        n_stage = n_stage * (1 - 0.9 * (1 - 1 / A(ep)))                 # expert weights are split over ep
    grad_bytes = c if fw == Framework.MEGATRON else prec.param_bytes
    group = dp * cp
    g_bytes = n_stage * grad_bytes
    all_reduce = A(_coll("all_reduce", g_bytes, sysm, group, tp))
    reduce_scatter = A(_coll("reduce_scatter", g_bytes, sysm, group, tp))
    gather_params = A(_coll("all_gather", n_stage * c, sysm, group, tp))
    gather_layer = A(_coll("all_gather", cfg.layer_parameters() / tp * c, sysm, group, tp))
    dp_comm = np.where(zero == 0, all_reduce, reduce_scatter + np.where(zero < 3, gather_params, 0.0))
    zero3_mb = np.where(zero == 3, layers * (np.maximum(0.0, gather_layer - f_l) + np.maximum(0.0, gather_layer - b_l)), 0.0)
    if fw != Framework.MEGATRON:  # buckets reduced under the last micro-batch's backward; the last one exposed
        last = A(_coll("all_reduce", np.minimum(DDP_BUCKET_BYTES, g_bytes), sysm, group, tp))
        dp_comm = np.where(group > 1, np.maximum(dp_comm - layers * b_l, last), 0.0)
    elif comm_overlap:  # reduce-scatter under the last backward, all-gather under the first forward, by buckets
        bucket = np.minimum(MEGATRON_BUCKET_PARAMS / tp, n_stage)
        red = np.where(zero == 0, all_reduce, reduce_scatter)
        red_b = np.where(zero == 0, A(_coll("all_reduce", bucket * grad_bytes, sysm, group, tp)),
                         A(_coll("reduce_scatter", bucket * grad_bytes, sysm, group, tp)))
        gat = np.where(zero == 0, 0.0, np.where(zero < 3, gather_params, 0.0))
        gat_b = np.where(gat > 0, A(_coll("all_gather", bucket * c, sysm, group, tp)), 0.0)
        dp_comm = np.where(group > 1, np.maximum(red - layers * b_l, red_b) + np.maximum(gat - layers * f_l, gat_b), 0.0)
    t_mb = compute_mb + comm_mb + zero3_mb
    bubble = (pp - 1) / v * t_mb
    n_opt = n_stage / np.where(zero >= 1, group, 1)
    layer_flops, head_flops = A(st.layer_flops), A(st.head_flops)
    rec_flops = np.where(full, layer_flops / 3.5, 0.0)  # the forward's share of forward + backward FLOPs (1 : 2.5)
    return {
        "forward": m * (layers * f_l + A(st.head_forward)),
        "backward": m * (layers * b_l + A(st.head_backward)),
        "recompute": m * layers * r_l,
        "optimizer": A(st.optimizer_per_param) * n_opt,
        "communication": m * (comm_mb + zero3_mb) + dp_comm,
        "pipeline_bubble": bubble,
        "hardware_flops": (cfg.num_layers * (layer_flops + rec_flops) + head_flops) * tp * m * dp * cp,
        "stage_parameters": n_stage,
    }


def training_step_time(model: TransformerConfig | str, gpu: Any, batch_size: int, seq_len: int,
                       precision: str = "amp_bf16", optimizer: str = "adamw", checkpointing: Any = False, *,
                       fused: bool = False, foreach: bool = True, gradient_accumulation_steps: int = 1,
                       clip_grad_norm: float | None = None, compile: bool = False,
                       experts_implementation: str = "grouped_mm", expert_load: Any = None,
                       calibrated: bool = True, calibration: Any = None, host: Any = None,
                       parallelism: Any = None, framework: str = "hf", expandable_segments: bool = False,
                       attention_kernel: str = "sdpa") -> StepTime:
    """Estimate the time of one training step (one optimizer update) of a decoder-only transformer.

    On one GPU, the step of eager PyTorch / Hugging Face on a host/device timeline; with a
    ``parallelism``, a system (``gm.system``) or a ``framework`` other than "hf", the step of a parallel
    layout (:func:`parallel_training_step_time`, modelled, not measured). This function chooses between the
    two (:func:`gpumodel.training.steptime.single_gpu_step_time` is the one-GPU model).

    Parameters
    ----------
    model : TransformerConfig, str or dict
        A config, a preset name (``gm.model``) or a Hugging Face config dict.
    gpu : GPUSpec, SystemSpec or str
        A GPU (the one-GPU model), or a system (``gm.system``) for a parallel layout.
    batch_size, seq_len : int
        Micro-batch size [sequences] and sequence length [tokens].
    precision : {"amp_bf16", "amp_fp16", "bf16", "fp16", "fp32"}
    optimizer : {"adamw", "adam", "sgd", "sgd_momentum", "adafactor", "adamw_8bit"}
    checkpointing : bool or {"none", "full", "selective"}
        Activation checkpointing per decoder layer (``True`` means "full": the forward is recomputed in
        the backward).
    fused : bool
        ``torch.optim.AdamW(..., fused=True)`` (one kernel per step; adamw, adam, sgd, sgd_momentum).
    foreach : bool
        ``foreach=False``: the optimizer loops over the parameter tensors (ignored when ``fused``).
    gradient_accumulation_steps : int
        Forward/backward passes per optimizer step.
    clip_grad_norm : float or None
        ``torch.nn.utils.clip_grad_norm_(params, clip_grad_norm)`` before the optimizer step.
    compile : bool
        The model is ``torch.compile``d (fused memory-bound kernels, no per-op dispatch); the optimizer
        stays eager.
    experts_implementation : {"grouped_mm", "eager"}
        How a MoE layer runs (transformers v5: ``grouped_mm`` by default).
    expert_load : array of float, optional
        Share of the routed tokens each expert receives (``num_experts`` values; balanced by default).
    calibrated : bool
        Time the kernels with the GPU's shipped calibration where there is one (default); False: the
        datasheet with default efficiencies.
    calibration : Calibration or path, optional
        Your own calibration of the GPU (a :class:`~gpumodel.calibration.record.Calibration` or the path of a
        YAML file ``gpumodel calibrate`` wrote, read once): every kernel of the step is priced with it
        (:func:`gpumodel.calibration.estimate.estimate`). One measured on another GPU is refused
        (:class:`~gpumodel.base.errors.ArgumentError` naming ``calibration``).
    host : HostCosts or path, optional
        Per-op host costs (a :class:`~gpumodel.training.hostcost.HostCosts` or the path of a host-cost YAML
        file; default: the shipped ``specs/hosts/<gpu>.yaml`` measured on that GPU's machine, else
        :data:`gpumodel.training.hostcost.DEFAULT_HOST`). One-GPU model only: refused with a parallel layout.
    parallelism : Parallelism, optional
        A multi-GPU layout (``gm.Parallelism``); ``gpu`` may then be a system. The options of eager
        PyTorch's host side (``fused``, ``foreach``, ``clip_grad_norm``, ``compile``, ``experts_implementation``,
        ``expert_load``, ``host``) belong to the one-GPU model and cannot be combined with it.
    framework : {"hf", "megatron", "fsdp", "deepspeed"}
        The training engine; anything but "hf" uses the parallel model (on one GPU when no layout is given).
    expandable_segments : bool
        ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``: ``fits`` and ``peak_bytes`` come from
        :func:`gpumodel.training_memory` with no allocator reserve (see there).
    attention_kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"}
        The library whose flash kernels run the 16-bit attention forward and backward
        (:class:`~gpumodel.core.ops.AttentionKernel`): PyTorch SDPA's own choice, cuDNN, flash-attn 2
        (``mma.sync``, about half Hopper's attention rate), FlashAttention-3 (Hopper alone), FlashInfer or Triton.

    Returns
    -------
    StepTime
        ``.seconds``, ``.tokens_per_s``, ``.mfu``, ``.hfu``, ``.host_bound``, ``.fits`` and a ``breakdown``
        that splits kernel time by phase from host wait. A run that does not fit in the GPU's memory still
        gets a time, with ``fits=False`` and a :class:`DoesNotFitWarning`.

    Notes
    -----
    The step is a timeline of two resources (:func:`gpumodel.training.hostcost.timeline`): the host dispatches
    each kernel of :func:`gpumodel.training.stepplan.step_plan` for its per-op host cost, the GPU runs it for
    its estimated time once it has been launched and the previous kernel is done, and the step ends
    with a synchronisation. Accuracy on Hugging Face steps measured on an H200 is printed by
    ``bench/step_time_accuracy.py``.

    Examples
    --------
    >>> import gpumodel as gm
    >>> st = gm.training_step_time("llama-3.2-1b", "h200", batch_size=8, seq_len=1024)
    >>> 0.05 < st.seconds < 1.0 and 0.0 < st.mfu < 1.0 and 0.0 < st.hfu < 1.0, st.fits
    (True, True)
    >>> abs(sum(st.breakdown.values()) - st.seconds) < 1e-9
    True
    """
    fw = choice(Framework, framework, "framework")
    if isinstance(gpu, str) and gpu not in SYSTEM_CATALOG and gpu not in GPU_CATALOG:
        resolve_system(gpu, "gpu")   # neither: the error suggests close system and GPU names
    if (parallelism is not None or fw != Framework.HF or isinstance(gpu, SystemSpec)
            or (isinstance(gpu, str) and gpu in SYSTEM_CATALOG)):
        eager = {"fused": fused is not False, "foreach": foreach is not True, "clip_grad_norm": clip_grad_norm is not None,
                 "compile": compile is not False, "experts_implementation": experts_implementation != "grouped_mm",
                 "expert_load": expert_load is not None, "host": host is not None}
        given = [name for name, on in eager.items() if on]
        if given:
            raise ArgumentError(f"{', '.join(given)}: options of the one-GPU model of eager PyTorch; they cannot be "
                                f"combined with a parallel layout, a system or framework={fw.value!r}")
        return parallel_training_step_time(model, gpu, batch_size, seq_len, precision, optimizer, checkpointing,
                                           calibrated=calibrated, calibration=calibration, gradient_accumulation_steps=gradient_accumulation_steps,
                                           parallelism=parallelism, framework=framework,
                                           expandable_segments=expandable_segments, attention_kernel=attention_kernel)
    return single_gpu_step_time(model, gpu, batch_size, seq_len, precision, optimizer, checkpointing, fused=fused,
                                foreach=foreach, gradient_accumulation_steps=gradient_accumulation_steps,
                                clip_grad_norm=clip_grad_norm, compile=compile,
                                experts_implementation=experts_implementation, expert_load=expert_load,
                                calibrated=calibrated, calibration=calibration, host=host,
                                expandable_segments=expandable_segments, attention_kernel=attention_kernel)
