"""Training-step time of a parallel layout: the shard's kernels, the exposed communication, the bubble.

One optimizer step of a job laid out by :class:`~gpumodel.cluster.parallelism.Parallelism` on a
:class:`~gpumodel.records.system.SystemSpec`: the shard's kernel times (:mod:`gpumodel.cluster.shard`) composed
by :func:`gpumodel.cluster.composition.compose` with the tensor-, context- and expert-parallel collectives, the
pipeline schedule (:mod:`gpumodel.cluster.pipeline`) and the data-parallel reduction
(:mod:`gpumodel.cluster.dataparallel`), each exposed as the engine exposes it. This module checks the arguments,
calls them and reports the result (MFU, HFU, memory).

Multi-GPU times are modelled, not measured here; ``python bench/published_runs.py`` compares them with
published runs.

References
----------
D. Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021.
V. Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022.
S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC 2020.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..base.errors import ArgumentError, DoesNotFitWarning
from ..calibration.bands import PARALLEL_STEP_REGIME, band_and_error
from ..calibration.estimate import resolve_calibration
from ..core.memory import training_memory
from ..records.gpu import GPU_CATALOG
from ..records.system import SYSTEM_CATALOG, SystemSpec
from ..records.transformer import TransformerConfig
from ..training.layer import attention_kernel_on
from ..training.steptime import StepTime, model_flops_per_token, recompute_flops_per_token, single_gpu_step_time
from ..vocabulary import (Checkpointing, Framework, Optimizer, checkpointing_mode, choice, flag,
                          fp8_recipe, grad_reduce_dtype as grad_reduce_dtype_of, positive_int,
                          precision as _precision, recompute_modules as recompute_modules_of, resolve_model,
                          resolve_system, zero3_gather as zero3_gather_of, shard_group as shard_group_of)
from .composition import PHASES, compose, overlaps
from .parallelism import Parallelism
from .pipeline import check_schedule, stage_layers
from .selective import selective_recompute
from .shard import shard_config, shard_times

__all__ = ["Framework", "framework_rules", "training_step_time", "parallel_training_step_time", "model_flops_per_token", "compose", "PHASES"]


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
                                calibration: Any = None, comm_overlap: Any = False,
                                expandable_segments: bool = False, attention_kernel: str = "sdpa",
                                first_stage_layers: int | None = None, last_stage_layers: int | None = None,
                                fp8: bool = False, pipeline_schedule: str = "1f1b",
                                grad_reduce_dtype: str | None = None, recompute_modules: Any = None,
                                zero3_gather: str = "prefetch", shard_group: int | None = None) -> StepTime:
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
        Micro-batches per step on each replica (with ``pp``, those of the pipeline schedule; a multiple of ``pp`` with
        ``virtual_stages > 1``, as Megatron-LM's interleaved schedule asserts). The global batch is
        ``batch_size * gradient_accumulation_steps * dp`` sequences.
    parallelism : Parallelism, optional
        The layout (default: one GPU).
    framework : {"hf", "megatron", "fsdp", "deepspeed"}
        "megatron": fused kernels, gradients reduced after the pipeline flush. Others: eager PyTorch
        kernels, the gradient reduction bucketed under the backward.
    attention : {"flash", "naive"}
        Attention kernels: FlashAttention, or the scores written to memory (Megatron-LM before 2022).
    attention_kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"}
        The library whose flash kernels run the shard's 16-bit attention (``attention="flash"`` only).
    comm_overlap : bool, str or set of str
        Communication hidden under compute: True for all of Megatron-Core's (``--tp-comm-overlap``,
        ``--overlap-grad-reduce``, ``--overlap-param-gather`` and the interleaved schedule's overlapped sends):
        tensor-parallel collectives under the GEMMs, the data-parallel reduce-scatter and all-gather under
        the backward and forward, the pipeline's sends under the next chunk; or some of them, named
        ``"tp"``, ``"dp"``, ``"pp"`` (``"dp,pp"``: FSDP's prefetched gathers with asynchronous pipeline sends),
        and ``"ep"``: the expert-parallel all-to-alls under another micro-batch's compute.
        Default False (all exposed, as Megatron-LM before 2023).
    fp8 : bool or str
        Transformer Engine's fp8 training: the decoder layers' linear layers run fp8 GEMMs (forward, input and
        weight gradients) with a cast of each GEMM's input; attention, the embedding and the LM head stay in the
        compute dtype (:func:`gpumodel.cluster.shard.fp8_linear`). True is TE's default recipe, ``"delayed"``
        scaling; ``"current"``, ``"mxfp8"`` (Blackwell) and ``"blockwise"`` (``"fine-grained"``, DeepSeek-V3's)
        change what the casts move and, for ``"blockwise"``, the forward GEMMs' accumulation
        (:func:`gpumodel.cluster.shard.fp8_cast_kernels`, :data:`~gpumodel.cluster.shard.FP8_SPLIT_PHASES`). Its
        memory: :func:`gpumodel.training_memory` with ``fp8=True``. Refused on a GPU without an fp8 tensor-core
        rate, ``"mxfp8"`` before Blackwell, and with a framework other than "megatron".
    grad_reduce_dtype : {None, "fp32", "bf16", "fp16"}
        Megatron-LM's gradient buffer and data-parallel reduction format (``framework="megatron"`` only; None: its
        default, fp32 for bf16 training): "bf16" halves the reduction's bytes and the gradients' memory.
    recompute_modules : None, str or iterable of str
        Megatron-Core's ``--recompute-modules`` with ``checkpointing="selective"`` (``framework="megatron"`` only):
        "core_attn", "layernorm", "mla_up_proj", "mlp", "moe", "moe_act", "shared_experts". Their forward kernels
        run again in the backward (:mod:`gpumodel.cluster.selective`; a recomputed MLP repeats its tensor-parallel
        collectives, a recomputed mixture-of-experts layer its all-to-alls), HFU counts their FLOPs
        (:func:`~gpumodel.training.steptime.recompute_flops_per_token`), and the memory drops what they keep
        (:func:`gpumodel.training_memory`). None: the attention core (Korthikanti et al.'s selective recomputation).
    pipeline_schedule : {"1f1b", "zero_bubble", "dualpipe"}
        The pipeline schedule: 1F1B (interleaved with ``virtual_stages > 1``), zero-bubble (ZB-H1) or DeepSeek's
        DualPipe (:func:`gpumodel.cluster.pipeline.pipeline_bubble`); DualPipe hides the expert-parallel
        all-to-alls only where ``comm_overlap`` names ``"ep"``. Zero-bubble and DualPipe take ``virtual_stages=1``;
        DualPipe an even ``pp``, an even ``gradient_accumulation_steps`` of at least ``2 pp`` (half the
        micro-batches enter from each end) and ``framework="megatron"``, whose memory model holds its two copies of
        the parameters and ``pp + 1`` micro-batches (:func:`gpumodel.training_memory`).
    first_stage_layers, last_stage_layers : int, optional
        Decoder layers of the first and last pipeline stage (Megatron-Core's
        ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``; Llama 3 405B: 7 of
        126 on each end of 16 stages, which balances the embedding and the LM head); the rest are spread over
        the middle stages (:func:`gpumodel.cluster.pipeline.stage_layers`). Default: ``ceil(L / pp)`` each.
    zero3_gather : {"prefetch", "per_parameter"}
        How ZeRO-3 (``zero=3``) gathers the weights: "prefetch" (default), one flat buffer a layer prefetched under
        the previous layer's compute, as FSDP and DeepSpeed from v0.5.5 run it
        (:func:`~gpumodel.cluster.dataparallel.zero3_layer_times`); "per_parameter", DeepSpeed before v0.5.5 (2021):
        one synchronous list all-gather per parameter tensor with host work per rank, nothing hidden
        (:mod:`gpumodel.cluster.zero3gather`; ``framework="deepspeed"`` only).
    shard_group : int, optional
        FSDP's hybrid sharding (HSDP; ``framework="fsdp"`` with ``zero`` 2 or 3): the ranks that shard one replica, a
        divisor of ``dp * cp`` (typically the GPUs of a node). The weights are gathered and the gradients
        reduce-scattered within it, and each gradient shard is all-reduced across the ``dp * cp / shard_group``
        replicas in the backward (:func:`~gpumodel.cluster.dataparallel.replica_all_reduce`); the memory shards over
        it (:func:`gpumodel.training_memory`). None: the whole ``dp * cp``.
    expandable_segments : bool
        The allocator setting ``fits`` and ``peak_bytes`` assume (:func:`gpumodel.training_memory`).

    Returns
    -------
    StepTime
        With ``num_gpus``, ``fits``/``peak_bytes`` per GPU and a breakdown of "forward", "backward",
        "recompute", "optimizer", "communication" (exposed, with the compute that hidden collectives slow:
        :func:`~gpumodel.cluster.composition.collective_sm_share`) and "pipeline_bubble" [s]. MFU and HFU in the
        convention of :class:`~gpumodel.training.steptime.StepTime`: HFU adds the recomputed forward work
        (full: each layer's forward; selective: the recomputed submodules', by default the attention core), so it
        equals MFU without recomputation.
        With ``fp8`` both are against the GPU's dense fp8 peak, the rate of the run's GEMMs.

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
    modules = recompute_modules_of(recompute_modules, ckpt, fw, cfg)
    calibrated = flag(calibrated, "calibrated")
    reduce_fmt = grad_reduce_dtype_of(grad_reduce_dtype, fw)
    overlap = overlaps(comm_overlap)
    gather = zero3_gather_of(zero3_gather, fw)
    shard_group = shard_group_of(shard_group, fw, par.zero, par.dp * par.cp)
    stage_layers(cfg.num_layers, par.pp, first_stage_layers, last_stage_layers)   # refuses a split that does not add up
    b = positive_int(batch_size, "batch_size")
    s = positive_int(seq_len, "seq_len")
    m = positive_int(gradient_accumulation_steps, "gradient_accumulation_steps")
    if not all(isinstance(x, int) for x in (b, s, m)):
        raise ArgumentError("batch_size, seq_len and gradient_accumulation_steps must be scalars here; "
                            "gm.plan_training sweeps layouts")
    schedule = check_schedule(pipeline_schedule, par.pp, par.virtual_stages, m, fw)
    if par.virtual_stages > 1 and m % par.pp:
        raise ArgumentError(f"the interleaved schedule (virtual_stages={par.virtual_stages}) takes a multiple of pp={par.pp} "
                            f"micro-batches a step, got gradient_accumulation_steps={m} (Megatron-LM asserts it; fewer "
                            "leave the first stage waiting for each micro-batch's return)",
                            argument="gradient_accumulation_steps", value=m, allowed=f"a multiple of {par.pp}")
    if s % par.cp:
        raise ArgumentError(f"cp={par.cp} must divide seq_len ({s})")
    g = sysm.gpu
    recipe = fp8_recipe(fp8, fw, g)
    fp8 = recipe is not None
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
                     kernel.value, fp8=recipe.value if fp8 else False)
    code = {Checkpointing.NONE: 0, Checkpointing.SELECTIVE: 1, Checkpointing.FULL: 2}[ckpt]
    selective = None if recompute_modules is None or ckpt != Checkpointing.SELECTIVE else selective_recompute(
        cfg, modules, st, g, micro_batch=b, seq_local=s_loc, cp=cp, tp=tp, sequence_parallel=par.sequence_parallel,
        dtype=prec.compute_dtype.value, fp8=fp8, calibrated=calibrated, calibration=calibration)
    out = compose(cfg, sysm, prec, fw, st, tp=tp, pp=pp, cp=cp, dp=dp, ep=par.ep, zero=par.zero,
                  sequence_parallel=par.sequence_parallel, virtual_stages=v, batch_size=b, seq_len=s,
                  micro_batches=m, checkpointing=code, comm_overlap=overlap, first_stage_layers=first_stage_layers,
                  last_stage_layers=last_stage_layers, pipeline_schedule=schedule,
                  grad_reduce_dtype=None if reduce_fmt is None else reduce_fmt.value, selective=selective,
                  zero3_gather=gather.value, shard_group=shard_group)
    breakdown = {k: float(out[k]) for k in PHASES}
    seconds = sum(breakdown.values())
    tokens = b * s * m * dp
    model_flops = model_flops_per_token(cfg, s) * tokens
    named = None if recompute_modules is None else modules
    used_flops = model_flops + recompute_flops_per_token(cfg, s, ckpt, named) * tokens   # HFU: MFU's convention
    hardware_flops = float(out["hardware_flops"])
    peak = g.peak_flops("fp8" if fp8 else prec.compute_dtype.value)   # an fp8 run: its GEMMs' dense peak
    n = par.num_gpus
    mem = training_memory(cfg, b, s, precision=prec.name, optimizer=opt.value, checkpointing=ckpt.value,
                          gradient_accumulation_steps=m, parallelism=par, framework=fw.value,
                          attention="flash" if attention == "flash" else "eager", first_stage_layers=first_stage_layers,
                          last_stage_layers=last_stage_layers, expandable_segments=expandable_segments, fp8=fp8,
                          grad_reduce_dtype=reduce_fmt, recompute_modules=recompute_modules,
                          pipeline_schedule=schedule, shard_group=shard_group)
    fits = bool(mem.total_bytes <= g.usable_memory_bytes)
    if not fits:
        warnings.warn(f"{cfg.name} with {par} needs {mem.total_bytes / 2**30:.1f} GiB per GPU, more than the "
                      f"{g.usable_memory_bytes / 2**30:.1f} GiB of a {g.name}: the time is for a run that does not fit",
                      DoesNotFitWarning, stacklevel=3)
    return StepTime(seconds=seconds, tokens_per_s=tokens / seconds, mfu=model_flops / seconds / (n * peak),
                    model_flops=model_flops, breakdown=breakdown, calibrated=st.calibrated, kernels=0,
                    hardware_flops=hardware_flops, hfu=used_flops / seconds / (n * peak), num_gpus=n,
                    fits=fits, peak_bytes=float(mem.peak_bytes), attention_kernel=kernel.value,
                    source=st.source,
                    **band_and_error(seconds, None if st.source == "datasheet" else PARALLEL_STEP_REGIME))


def training_step_time(model: TransformerConfig | str, gpu: Any, batch_size: int, seq_len: int,
                       precision: str = "amp_bf16", optimizer: str = "adamw", checkpointing: Any = False, *,
                       fused: bool = False, foreach: bool = True, gradient_accumulation_steps: int = 1,
                       clip_grad_norm: float | None = None, compile: bool = False,
                       experts_implementation: str = "grouped_mm", expert_load: Any = None,
                       calibrated: bool = True, calibration: Any = None, host: Any = None,
                       parallelism: Any = None, framework: str = "hf", expandable_segments: bool = False,
                       attention_kernel: str = "sdpa", comm_overlap: Any = False, fp8: bool = False,
                       pipeline_schedule: str = "1f1b", first_stage_layers: int | None = None,
                       last_stage_layers: int | None = None, grad_reduce_dtype: str | None = None,
                       recompute_modules: Any = None, zero3_gather: str = "prefetch",
                       shard_group: int | None = None) -> StepTime:
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
    comm_overlap, fp8, pipeline_schedule, first_stage_layers, last_stage_layers, grad_reduce_dtype, recompute_modules, zero3_gather, shard_group :
        Options of the parallel model (:func:`parallel_training_step_time`): communication hidden under compute,
        fp8 GEMMs, the pipeline schedule, an uneven cut of the pipeline's stages, Megatron's gradient reduction
        format, the submodules its selective recomputation re-runs, how ZeRO-3 gathers and HSDP's sharding group. Giving one
        selects it.

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
    layout = {"comm_overlap": comm_overlap, "fp8": fp8, "pipeline_schedule": pipeline_schedule,
              "first_stage_layers": first_stage_layers, "last_stage_layers": last_stage_layers,
              "grad_reduce_dtype": grad_reduce_dtype, "recompute_modules": recompute_modules,
              "zero3_gather": zero3_gather, "shard_group": shard_group}
    defaults = {"comm_overlap": False, "fp8": False, "pipeline_schedule": "1f1b", "first_stage_layers": None,
                "last_stage_layers": None, "grad_reduce_dtype": None, "recompute_modules": None,
                "zero3_gather": "prefetch", "shard_group": None}
    if (parallelism is not None or fw != Framework.HF or isinstance(gpu, SystemSpec)
            or (isinstance(gpu, str) and gpu in SYSTEM_CATALOG)
            or any(layout[k] is not defaults[k] and layout[k] != defaults[k] for k in layout)):
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
                                           expandable_segments=expandable_segments, attention_kernel=attention_kernel,
                                           **layout)
    return single_gpu_step_time(model, gpu, batch_size, seq_len, precision, optimizer, checkpointing, fused=fused,
                                foreach=foreach, gradient_accumulation_steps=gradient_accumulation_steps,
                                clip_grad_norm=clip_grad_norm, compile=compile,
                                experts_implementation=experts_implementation, expert_load=expert_load,
                                calibrated=calibrated, calibration=calibration, host=host,
                                expandable_segments=expandable_segments, attention_kernel=attention_kernel)
