"""Training memory per GPU: what one step of a training engine holds at its peak.

:func:`training_memory` evaluates the bytes held at each moment of a step where the peak can occur
(the end of the forward with the loss, the start of the backward, a layer's backward, the end of the
backward, the optimizer step) and returns the largest, with a breakdown of what is held then. What is
held depends on the training engine (``framework``):

* ``"hf"`` (the default): a Hugging Face causal LM in eager PyTorch, counted op by op from what
  autograd saves and measured on GPUs (:mod:`gpumodel.core.hf_memory`, ``tests/data/memory``);
  distributed degrees divide it per GPU.
* ``"megatron"``, ``"fsdp"``, ``"deepspeed"``: the tensors Megatron-Core, PyTorch FSDP (and DDP) and
  DeepSpeed ZeRO keep (:mod:`gpumodel.core.framework_memory`); modelled, not measured.

The parts every model shares (the result record, runtime constants, optimizer states, the parameters a
GPU holds under tensor, expert and pipeline parallelism) are in :mod:`gpumodel.core.memory_parts`.

References
----------
S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", 2020.
V. Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.errors import ArgumentError
from ..records.dtypes import UnknownDTypeError, bytes_per_element
from ..vocabulary import (Checkpointing, Framework, Optimizer, PipelineSchedule, broadcastable, check_pipeline_schedule,
                          checkpointing_mode, choice,
                          deprecated_alias, divides, flag, fp8_training, grad_reduce_dtype as grad_reduce_dtype_of,
                          shard_group as shard_group_of, nonnegative_number, positive_int, positive_number,
                          precision as _precision, recompute_modules as recompute_modules_of, resolve_model,
                          within_positions)
from ..vocabulary.parallel_rules import parallel_degrees
from .activations import Attention, resolve_attention
from .communicators import communicator_bytes as nccl_bytes
from .framework_memory import MEGATRON_BUFFERS, deepspeed_static, fsdp_static, megatron_moments
from .hf_memory import hf_moments
from .memory_parts import (CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, RESERVE_FACTOR, MemoryArgumentError,
                           TrainingMemory, assemble, optimizer_state_bytes)

__all__ = ["training_memory", "TrainingMemory", "Optimizer", "Checkpointing", "Framework", "optimizer_state_bytes",
           "CUBLAS_WORKSPACE_BYTES", "CUDA_CONTEXT_BYTES", "RESERVE_FACTOR", "MemoryArgumentError"]

_DEGREES = dict(dp=1, tp=1, pp=1, cp=1, ep=1, zero=0, sequence_parallel=False, virtual_stages=1)


def training_memory(model, batch_size, seq_len, precision="amp_bf16", optimizer="adamw", checkpointing=False,
                    attention="sdpa", *, use_cache: bool = True, keep_outputs: bool = False,
                    gradient_accumulation_steps: int = 1,
                    optimizer_dtype: str | None = None, foreach: bool = True, fused: bool = False,
                    zero: int = 0, dp: int = 1,
                    tp: int = 1, pp: int = 1, sequence_parallel: bool = False, zero_stage: int | None = None,
                    cublas_workspace_bytes: float = CUBLAS_WORKSPACE_BYTES,
                    cuda_context_bytes: float = CUDA_CONTEXT_BYTES, communicator_bytes: Any = None,
                    reserve_factor: float | None = None, expandable_segments: bool = False,
                    framework: str = "hf", parallelism: Any = None, cp: int = 1, ep: int = 1,
                    virtual_stages: int = 1, shard_group: int | None = None, first_stage_layers: int | None = None,
                    last_stage_layers: int | None = None, fp8: bool = False,
                    grad_reduce_dtype: str | None = None, recompute_modules: Any = None,
                    pipeline_schedule: str = "1f1b") -> TrainingMemory:
    """Peak memory of one training step on one GPU of a (possibly parallel) training job.

    Parameters
    ----------
    model : TransformerConfig or str
        A config or a preset name (``gm.model``).
    batch_size : int or array
        Micro-batch size per GPU [sequences].
    seq_len : int or array
        Sequence length [tokens] (the whole sequence; context parallelism splits it over ``cp`` GPUs).
    precision : {"fp32", "amp_bf16", "amp_fp16", "bf16", "fp16"}
        fp32: fp32 everything; amp_*: fp32 weights, grads and states, forward under autocast;
        bf16/fp16: weights, grads and optimizer states in that dtype (``model.to(dtype)``). Megatron and
        DeepSpeed keep 16-bit weights and fp32 master weights under any 16-bit mode (see Notes).
    optimizer : {"adamw", "adam", "sgd", "sgd_momentum", "adafactor", "adamw_8bit"}
    checkpointing : bool or {"none", "full", "selective"}
        ``True``/"full": every decoder layer recomputed, its input kept. "selective": recompute only the
        attention score terms (Korthikanti et al.); with flash/cuDNN/efficient attention, which save no scores,
        the same as "none" but for the kernel's own tensors under "megatron" (its log-sum-exp, and its 16-bit
        output with ``fp8``), whose ``recompute_modules`` name other submodules to recompute.
    attention : {"sdpa", "flash", "cudnn", "efficient", "math", "eager"}
        With ``framework="megatron"``, "math" and "eager" mean Megatron-LM's unfused attention (scores kept).
    use_cache : bool
        Hugging Face builds a KV cache in a training forward unless ``use_cache=False`` (not "megatron").
    keep_outputs : bool
        The loop keeps the model's output object (logits, KV cache) alive through backward and the
        optimizer step (``out = model(...); out.loss.backward()``) instead of taking ``.loss`` only.
    gradient_accumulation_steps : int
        Micro-batches per optimizer step; from the second on, gradients are held during forward/backward
        (Megatron's gradient buffer always is). With ``pp``, the micro-batches of the pipeline schedule.
    optimizer_dtype : str, optional
        Optimizer-state dtype of adamw, adam and sgd_momentum (default: the weights' dtype, as ``torch.optim``
        does); refused for the optimizers whose states it does not set (sgd, adamw_8bit, adafactor), and with
        "deepspeed", whose states are fp32. With "megatron", the Adam moments' dtype of Megatron-Core's
        precision-aware optimizer (``--use-precision-aware-optimizer`` with ``--exp-avg-dtype`` and
        ``--exp-avg-sq-dtype``: fp32, fp16, bf16 or fp8); its master weights stay fp32 (default: fp32 moments).
    foreach, fused : bool
        ``torch.optim`` implementation of Adam/AdamW: foreach (the default on CUDA) allocates one
        temporary as large as all parameters together, the for-loop one (``foreach=False``) one as
        large as the largest parameter, the fused kernel (``fused=True``) none. Megatron and DeepSpeed
        run fused kernels.
    zero, dp, tp, pp, sequence_parallel
        Distributed degrees, named as in :class:`gpumodel.Parallelism`: ``zero`` is the ZeRO stage (0-3; with
        "megatron" 1 is the distributed optimizer, 2 and 3 Megatron-FSDP's sharding strategies). Not measured.
    zero_stage : int, optional
        Deprecated name of ``zero``.
    cublas_workspace_bytes, cuda_context_bytes, reserve_factor
        Runtime terms [B] (module constants give the measured defaults). ``reserve_factor`` [ratio] is what the
        caching allocator reserves over the allocated peak: :data:`RESERVE_FACTOR` by default, 1 with
        ``expandable_segments``.
    communicator_bytes : float or array, optional
        NCCL's buffers outside the allocator, counted in ``total_bytes`` [B]. None (default): those of the process
        groups the engine communicates on for this layout
        (:func:`gpumodel.core.communicators.communicator_bytes`: 0 on one GPU, about 3 GiB for a tensor, pipeline
        and data-parallel Megatron job, more with an expert all-to-all); 0 leaves them out.
    expandable_segments : bool
        ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``: the allocator maps 2 MiB pages into one
        growing segment and unmaps free ones before it gives up, so a step needs its allocated peak and no
        more (``reserve_factor`` 1): on 38 H100 runs near the card's capacity it failed exactly where the
        allocated peak plus the CUDA context exceeded the memory the card reports
        (``bench/edge_accuracy.py``).
    framework : {"hf", "megatron", "fsdp", "deepspeed"}
        The training engine, as :func:`gpumodel.training_step_time` takes it; what each holds is in Notes.
    parallelism : Parallelism, optional
        A layout (``gm.Parallelism``) giving ``dp, tp, pp, cp, ep, zero, sequence_parallel`` and
        ``virtual_stages`` at once; refused together with any of those arguments.
    cp : int or array
        Context-parallel degree: the sequence split over ``cp`` GPUs; ZeRO and the distributed optimizer
        shard over ``dp * cp`` ranks.
    ep : int or array
        Expert-parallel degree: each GPU holds ``num_experts / ep`` routed experts of every MoE layer (their
        weights, gradients and optimizer states; the states shard over ``dp * cp / ep`` ranks); it must
        divide the experts and ``dp * cp``.
    virtual_stages : int or array
        Model chunks per pipeline stage of Megatron's interleaved 1F1B schedule (memory of "megatron" only).
    first_stage_layers, last_stage_layers : int, optional
        Decoder layers of the first and last pipeline stage (Megatron-Core's ``--decoder-first-pipeline-num-layers``
        and ``--decoder-last-pipeline-num-layers``), as :func:`gpumodel.training_step_time` takes them; default
        ``ceil(L / pp)`` on every stage (the memory of "megatron" only; the others count that on every stage).
    shard_group : int, optional
        FSDP's sharding group [GPUs] ("fsdp", ``zero`` 2 or 3): ``dp * cp`` (the default) or, for HSDP, the
        ranks that shard one replica (a divisor of ``dp * cp``).
    fp8 : bool
        Transformer Engine's fp8 training under Megatron-Core (``framework="megatron"`` only; refused with the
        others, naming ``fp8``): each linear layer keeps its GEMM input for the backward in fp8, and an fp8 copy
        of every decoder weight with its transpose is kept from a step's first micro-batch (``fp8_weights``,
        2 bytes a parameter).
    grad_reduce_dtype : {None, "fp32", "bf16", "fp16"}
        Megatron-LM's gradient buffer format (``framework="megatron"`` only): None is Megatron-LM's default (fp32
        for bf16 training, ``--accumulate-allreduce-grads-in-fp32``), "bf16" its ``--grad-reduce-in-bf16`` and NeMo's
        distributed Adam with ``grad_sync_dtype: bf16``.
    recompute_modules : None, str or iterable of str
        Megatron-Core's ``--recompute-modules`` (``framework="megatron"`` with ``checkpointing="selective"`` only;
        refused otherwise, naming ``recompute_modules``): "core_attn", "layernorm", "mla_up_proj", "mlp", "moe",
        "moe_act", "shared_experts". Each drops the tensors its submodule keeps for the backward
        (:func:`gpumodel.core.megatron_activations.recomputed_tensors`). None: "core_attn", Megatron-Core's default.
    pipeline_schedule : {"1f1b", "zero_bubble", "dualpipe"}
        The pipeline schedule, as :func:`gpumodel.training_step_time` takes it. "1f1b" and "zero_bubble" (ZB-H1,
        whose peak is 1F1B's) hold 1F1B's in-flight micro-batches; "dualpipe" (``framework="megatron"``, an even
        ``pp``, an even ``gradient_accumulation_steps`` of at least ``2 pp``) holds two pipeline stages a GPU, their
        parameters, gradients and optimizer states, and ``pp + 1`` micro-batches of activations
        (:mod:`gpumodel.core.framework_memory`; DeepSeek-AI 2024, Table 2). Refused where the layout cannot run it
        (:func:`gpumodel.vocabulary.check_pipeline_schedule`).

    Returns
    -------
    TrainingMemory
        ``peak_bytes``, the ``breakdown`` at the peak, ``peak_moment`` (and ``peak_stage`` with "megatron"),
        ``total_bytes`` to compare with the card.

    Notes
    -----
    Per GPU, with ``n`` its parameters and Adam (bytes per parameter; ``D = dp cp``):

    ======================  ==========================  =================================================
    framework               weights + grads + states    activations, loss, buffers
    ======================  ==========================  =================================================
    "hf", amp               4 + 4 + 8 (+ foreach 4)     autograd's saved tensors of the Hugging Face model
                                                        under autocast, fp32 logits and their copies
    "megatron", bf16        2 + 4 + 12/D (zero=1)       Korthikanti et al.'s per-layer terms with the
                                                        model's widths, 1F1B in-flight micro-batches,
                                                        16-bit fused vocabulary-parallel cross-entropy
    "fsdp", zero 3, amp     16/D + two gathered layers  the model's 16-bit forward; root module gathered
    "deepspeed", zero z     2 + 2 + 12 split by stage   the model's 16-bit forward; reduce/all-gather
                                                        buckets of 5e8 elements
    ======================  ==========================  =================================================

    What each engine counts, with references: :mod:`gpumodel.core.hf_memory` ("hf") and
    :mod:`gpumodel.core.framework_memory` (the others). Routed experts divide by ``ep`` in every
    engine; their activations follow the routing (``experts_per_token`` copies of each token,
    ``moe_intermediate_size`` wide), balanced over the experts.

    Examples
    --------
    >>> import gpumodel as gm
    >>> m = gm.training_memory("llama-3.2-1b", batch_size=4, seq_len=1024, precision="amp_bf16")
    >>> m.peak_moment, round(m.peak_bytes / 2**30, 1)
    ('backward_start', 30.0)
    >>> par = gm.Parallelism(dp=8, tp=8, pp=2, zero=1, sequence_parallel=True)
    >>> for fw in ("megatron", "hf"):
    ...     m = gm.training_memory("llama-3-70b", 1, 4096, gradient_accumulation_steps=16, parallelism=par,
    ...                            framework=fw)
    ...     print(fw, m.peak_moment, m.peak_stage, round(m.total_bytes / 2**30, 1),
    ...           round(m.communicator_bytes / 2**30, 2))
    megatron layer_backward first 46.5 3.22
    hf forward_loss None 75.6 2.55
    """
    cfg = resolve_model(model)
    fw = choice(Framework, framework, "framework")
    prec = _precision(precision)
    opt = choice(Optimizer, optimizer, "optimizer")
    attn = choice(Attention, attention, "attention")
    ckpt = checkpointing_mode(checkpointing)
    modules = recompute_modules_of(recompute_modules, ckpt, fw, cfg)
    b = positive_int(batch_size, "batch_size")
    s = positive_int(seq_len, "seq_len")
    m = positive_int(gradient_accumulation_steps, "gradient_accumulation_steps")
    use_cache, keep_outputs = flag(use_cache, "use_cache"), flag(keep_outputs, "keep_outputs")
    foreach, fused = flag(foreach, "foreach"), flag(fused, "fused")
    if zero_stage is not None:  # the former name: refused together with a ZeRO stage given as zero
        zero = deprecated_alias("zero_stage", "zero", zero_stage, None if np.ndim(zero) == 0 and zero == 0 else zero)
    given = dict(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, sequence_parallel=sequence_parallel,
                 virtual_stages=virtual_stages)
    if parallelism is not None:
        dp, tp, pp, cp, ep, zero, sequence_parallel, virtual_stages = _layout(parallelism, given)
    dp, tp, pp, zero = parallel_degrees(cfg, dp=dp, tp=tp, pp=pp, zero=zero, cp=cp, ep=ep)
    cp, ep, v = positive_int(cp, "cp"), positive_int(ep, "ep"), positive_int(virtual_stages, "virtual_stages")
    schedule = check_pipeline_schedule(pipeline_schedule, pp, v, m, fw)
    divides(ep, dp * cp, "ep", "dp * cp")
    divides(cp, s, "cp", "seq_len")
    sequence_parallel = flag(sequence_parallel, "sequence_parallel")
    if sequence_parallel and np.all(np.asarray(tp) == 1):
        raise ArgumentError("sequence_parallel needs tensor parallelism (tp > 1)")
    broadcastable(batch_size=b, seq_len=s, gradient_accumulation_steps=m, dp=dp, tp=tp, pp=pp, zero=zero, cp=cp, ep=ep,
                  virtual_stages=v)
    expandable_segments = flag(expandable_segments, "expandable_segments")
    if reserve_factor is None:
        reserve_factor = 1.0 if expandable_segments else RESERVE_FACTOR
    reserve_factor = positive_number(reserve_factor, "reserve_factor")
    if np.any(np.asarray(reserve_factor) < 1):
        raise ArgumentError(f"reserve_factor must be >= 1, got {reserve_factor!r}")
    cublas_workspace_bytes = nonnegative_number(cublas_workspace_bytes, "cublas_workspace_bytes")
    cuda_context_bytes = nonnegative_number(cuda_context_bytes, "cuda_context_bytes")
    if communicator_bytes is None:
        communicator_bytes = nccl_bytes(fw, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, shard_group=shard_group)
    communicator_bytes = nonnegative_number(communicator_bytes, "communicator_bytes")
    _engine_options(fw, opt, optimizer_dtype, keep_outputs)
    shard_group = shard_group_of(shard_group, fw, zero, dp * cp)
    sb = prec.param_bytes if optimizer_dtype is None else _dtype_bytes(optimizer_dtype)
    within_positions(cfg, s)
    group = dp * cp
    runtime = float(cublas_workspace_bytes)
    inputs = dict(model=cfg.name, framework=fw.value, precision=prec.name, optimizer=opt.value,
                  checkpointing=ckpt.value, attention=attn.value, zero=zero, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep)
    if recompute_modules is not None:
        inputs["recompute_modules"] = ",".join(sorted(x.value for x in modules))
    if schedule != PipelineSchedule.ONE_F_ONE_B:
        inputs["pipeline_schedule"] = schedule.value
    finish = dict(reserve_factor=reserve_factor, cuda_context_bytes=cuda_context_bytes, inputs=inputs,
                  communicator_bytes=communicator_bytes)

    fp8 = fp8_training(fp8, fw)
    reduce_fmt = grad_reduce_dtype_of(grad_reduce_dtype, fw)
    if fw == Framework.MEGATRON:
        scores = resolve_attention(cfg, prec, attn) in (Attention.MATH, Attention.EAGER)
        moments, steady = megatron_moments(cfg, b, s, prec, opt, ckpt, scores, micro_batches=m, dp=dp, tp=tp, pp=pp,
                                           cp=cp, ep=ep, zero=zero, sequence_parallel=sequence_parallel,
                                           virtual_stages=v, cublas_workspace_bytes=runtime,
                                           first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
                                           fp8=fp8, grad_reduce_dtype=reduce_fmt, recompute_modules=modules,
                                           pipeline_schedule=schedule.value,
                                           state_bytes=4.0 if optimizer_dtype is None else sb)
        return assemble(moments, steady, contiguous=MEGATRON_BUFFERS, **finish)
    sharding = fw != Framework.HF and not (fw == Framework.FSDP and np.all(np.asarray(zero) < 2))
    if sharding and np.any(np.asarray(zero) < 2) and fw == Framework.FSDP:
        raise ArgumentError("framework='fsdp' takes zero 0 or 1 (DDP) and zero 2 or 3 (FSDP) in separate calls",
                            argument="zero", value=zero, allowed="one of 0-1 or 2-3 across a sweep")
    model_prec = _precision({"amp_bf16": "bf16", "amp_fp16": "fp16"}.get(prec.name, prec.name)) if sharding else prec
    common = dict(use_cache=use_cache, keep_outputs=keep_outputs, micro_batches=m, foreach=foreach, fused=fused, tp=tp,
                  pp=pp, cp=cp, ep=ep, sequence_parallel=sequence_parallel, cublas_workspace_bytes=runtime)
    if not sharding:   # Hugging Face's step; "fsdp" below ZeRO-2 is DDP with its gradient buckets
        moments, steady, params = hf_moments(cfg, b, s, prec, opt, attn, ckpt, state_bytes=sb, zero=zero, dp=dp,
                                             **common)
        if fw == Framework.FSDP:
            buckets = (params[0] + params[1]) * prec.param_bytes
            for held in moments.values():
                held["communication_buffers"] = buckets
            steady = steady + buckets
        return assemble(moments, steady, **finish)
    moments, _, params = hf_moments(cfg, b, s, model_prec, opt, attn, ckpt, state_bytes=sb, zero=0, dp=1, **common)
    if fw == Framework.FSDP:
        shard = group if shard_group is None else shard_group
        static, steady = fsdp_static(cfg, prec, opt, params, zero=zero, shard_group=shard, ep=ep, tp=tp,
                                     micro_batches=m, foreach=foreach, fused=fused,
                                     state_bytes=None if optimizer_dtype is None else sb)
    else:
        static, steady = deepspeed_static(cfg, prec, opt, params, zero=zero, group=group, ep=ep, tp=tp,
                                          micro_batches=m)
    for name, held in moments.items():
        held.pop("optimizer_temporaries", None)
        held.update(static.get(name, static["backward_end"]))   # the embedding's backward: all gradients
    return assemble(moments, steady + runtime, **finish)


def _layout(parallelism: Any, given: dict) -> tuple:
    """The degrees of a ``gm.Parallelism`` (any object with its fields), refused beside explicit degrees."""
    names = list(_DEGREES)
    missing = [k for k in names if not hasattr(parallelism, k)]
    if missing:
        raise ArgumentError(f"parallelism must be a gm.Parallelism, got {type(parallelism).__name__}",
                            argument="parallelism", value=parallelism, allowed="a gm.Parallelism")
    clash = [k for k in names if not (np.ndim(given[k]) == 0 and given[k] == _DEGREES[k])]
    if clash:
        raise ArgumentError(f"give the layout as parallelism or as {', '.join(clash)}, not both",
                            argument="parallelism", value=parallelism, allowed=f"parallelism alone, or {clash[0]}")
    return tuple(getattr(parallelism, k) for k in names)


def _engine_options(fw: Framework, opt: Optimizer, optimizer_dtype, keep_outputs: bool) -> None:
    """Refuse options the chosen engine does not have."""
    if optimizer_dtype is not None and opt in (Optimizer.SGD, Optimizer.ADAMW_8BIT, Optimizer.ADAFACTOR):
        kept = {"sgd": "no state", "adamw_8bit": "int8 states", "adafactor": "fp32 factored states"}[opt.value]
        raise ArgumentError(f"optimizer_dtype applies to adamw, adam and sgd_momentum; {opt.value} keeps {kept} "
                            f"(drop optimizer_dtype)")
    if optimizer_dtype is not None and fw == Framework.DEEPSPEED:
        raise ArgumentError(f"framework={fw.value!r} keeps fp32 optimizer states; drop optimizer_dtype",
                            argument="optimizer_dtype", value=optimizer_dtype, allowed="None")
    if fw == Framework.MEGATRON and keep_outputs:
        raise ArgumentError("keep_outputs is a Hugging Face loop's option; framework='megatron' returns the loss",
                            argument="keep_outputs", value=True, allowed="False with framework='megatron'")


def _dtype_bytes(name: str, arg: str = "optimizer_dtype") -> float:
    try:
        return float(bytes_per_element(name))
    except UnknownDTypeError as exc:
        raise UnknownDTypeError(f"{arg}: {exc}", argument=arg, value=name, allowed=exc.allowed) from None
