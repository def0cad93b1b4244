"""Time of one prefill and of one decode step: the sum of the step's kernels, its tensor-parallel
all-reduces and, for eager Hugging Face ``generate``, the host's dispatch time.

A step on an engine that replays CUDA graphs (``engine="graph"``) costs its kernels' times
(:func:`gpumodel.calibration.estimate.estimate`, one stream, no overlap) plus ``2 L`` all-reduces of the hidden
state when ``tp > 1`` (:func:`gpumodel.serving.kernels.allreduce_time`). Eager HF ``generate``
(``engine="hf"``) dispatches every op from Python: the GPU cannot run ahead of the host, so a step
takes :math:`\\max(t_{kernels}, t_{host})` with :math:`t_{host} = n_{ops} \\cdot` ``HOST_OP_S`` ``+``
``HOST_STEP_S`` (:mod:`gpumodel.serving.kernels`).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base.arguments import keyword_only_after, renamed_arguments
from ..base.enums import StrEnum
from ..base.errors import ArgumentError, DoesNotFitWarning, GpumodelWarning
from ..base.numeric import broadcastable
from ..calibration.bands import band_and_error, serving_regime
from ..calibration.estimate import (estimate as _estimate, power_share_threshold_for, resolve_calibration,
                                    sustained_slowdown_for)
from ..calibration.sustained import clock_bound_extra, clock_share
from ..training.hostcost import host_costs_for
from ..training.layer import attention_kernel_on
from ..core.inference import inference_memory
from ..vocabulary import (choice, flag, kv_cache_dtype, positive_int, resolve_gpu, resolve_model, tensor_parallel, weight_dtype,
                          within_positions)
from . import kernels as K
from .steps import allreduces_per_step, host_ops, step_kernels
from .servingtime import ServingTime

__all__ = ["Engine", "Setup", "ServingTime", "prefill_time", "decode_step_time", "resolve_serving_args", "step_time",
           "memory_check", "warn_unfit"]


class Engine(StrEnum):
    """How steps are launched: ``graph`` replays CUDA graphs (kernel time only); ``compiled`` replays the step
    after a compiler fused its memory-bound kernels (gpt-fast, TensorRT-LLM); ``hf`` is eager HF ``generate``."""

    GRAPH = "graph"
    COMPILED = "compiled"
    HF = "hf"


@dataclass(frozen=True)
class Setup:
    """The resolved arguments every serving function shares."""

    cfg: Any
    gpu: Any
    dtype: Any
    kv_dtype: Any
    tp: int
    engine: Engine
    group_size: int = 128
    calibrated: bool = True
    calibration: Any = None          # a Calibration record (read once) or None
    host_op_s: float = K.HOST_OP_S   # eager HF generate's host time per op and per step [s]
    host_step_s: float = K.HOST_STEP_S
    attention_kernel: str = "sdpa"   # the library of the flash-attention kernels (core.ops.AttentionKernel)


def resolve_serving_args(model: Any, gpu: Any, dtype: Any, kv_dtype: Any, tp: Any, engine: Any,
                         group_size: Any = 128, *, calibrated: Any = True, calibration: Any = None,
                         host: Any = None, attention_kernel: Any = "sdpa") -> Setup:
    """Resolve and check the arguments every serving function shares.

    ``calibration`` (a record, or a YAML path read here once) must be of the GPU; ``host`` (a
    :class:`~gpumodel.training.hostcost.HostCosts` or a YAML path) is taken by ``engine="hf"`` alone, the one
    engine whose step the host's dispatch prices (:func:`gpumodel.serving.kernels.host_dispatch`);
    ``attention_kernel`` must run on the GPU in the activations' format
    (:func:`gpumodel.training.layer.attention_kernel_on`).
    """
    cfg, g = resolve_model(model), resolve_gpu(gpu)
    dt = weight_dtype(dtype, "dtype")
    kv = None if kv_dtype is None else kv_cache_dtype(kv_dtype, dt, timed=True)
    tp = positive_int(tp, "tp")
    if np.ndim(tp):
        raise ArgumentError("tp must be a single positive integer")
    tensor_parallel(cfg, tp)
    eng = choice(Engine, engine, "engine")
    group = positive_int(group_size, "group_size")
    if np.ndim(group):
        raise ArgumentError("group_size must be a single positive integer")
    calibrated = flag(calibrated, "calibrated")
    calibration = resolve_calibration(calibration, g)
    if host is not None and eng != Engine.HF:
        raise ArgumentError(f"host: engine={eng.value!r} replays CUDA graphs, whose steps cost no host dispatch; "
                            f"host costs apply to engine='hf' only", argument="host", value=host,
                            allowed="None, or engine='hf'")
    op_s, step_s = K.host_dispatch(None if host is None else host_costs_for(g.name, host))
    kernel = attention_kernel_on(attention_kernel, g, "fp32" if dt.value == "fp32" else "bf16")
    return Setup(cfg, g, dt, kv, tp, eng, group, calibrated, calibration, op_s, step_s, kernel.value)


def memory_check(setup: Setup, batch_size: Any, seq_len: Any, new_tokens: Any = 0) -> tuple[Any, Any, Any]:
    """Whether a serving step fits in each GPU's memory: ``(fits, peak_bytes, need_bytes)``.

    The memory is :func:`gpumodel.core.inference.inference_memory` of ``batch_size`` prompts of ``seq_len``
    tokens followed by ``new_tokens`` generated ones, with the setup's model, dtypes, ``tp`` and
    ``group_size``, per GPU. A prefill of ``s`` tokens is ``(batch_size, s, 0)``; a decode step over
    ``c`` cached tokens is ``(batch_size, 1, c)``: the weights, the cache of ``c + 1`` positions and the
    step's logits (the prefill that filled the cache is not part of the step).

    ``need_bytes`` [B] is what is compared with the GPU's ``usable_memory_bytes``: the allocated peak
    (``peak_bytes`` [B]) for an engine that allocates its weights and cache up front (``graph``,
    ``compiled``), as :func:`~gpumodel.serving.capacity.serving_capacity`'s KV budget does; for eager
    Hugging Face ``generate`` (``hf``) the peak with the caching allocator's reserve and the CUDA context
    (``total_bytes``), as :func:`gpumodel.fits` with ``training=False`` does. Scalars for scalar sizes,
    arrays otherwise.
    """
    kv = setup.kv_dtype.value if setup.kv_dtype is not None else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GpumodelWarning)    # the step's own checks have warned already
        m = inference_memory(setup.cfg, batch_size, seq_len, dtype=setup.dtype.value, kv_dtype=kv,
                             new_tokens=new_tokens, tp=setup.tp, group_size=setup.group_size)
    need = m.total_bytes if setup.engine == Engine.HF else m.peak_bytes
    fits = np.asarray(need) <= setup.gpu.usable_memory_bytes
    if fits.ndim == 0:
        return bool(fits), float(m.peak_bytes), float(need)
    return fits, np.asarray(m.peak_bytes), np.asarray(need)


def warn_unfit(setup: Setup, fits: Any, need_bytes: Any, what: str, stacklevel: int = 2) -> None:
    """Warn (:class:`~gpumodel.base.errors.DoesNotFitWarning`) where ``fits`` is false, as
    ``training_step_time`` does: what the run ``what`` needs per GPU (``need_bytes`` of :func:`memory_check`)
    and what the GPU offers."""
    if np.all(fits):
        return
    g, tp = setup.gpu, setup.tp
    need = float(np.max(np.where(fits, 0.0, need_bytes)))
    if np.ndim(fits):
        bad = int(np.size(fits) - np.count_nonzero(fits))
        head = f"{bad} of {np.size(fits)} configurations of {what} need up to"
    else:
        head = f"{what} needs"
    warnings.warn(f"{setup.cfg.name}: {head} {need / 2**30:,.1f} GiB per GPU{f' (tp={tp})' if tp > 1 else ''}, "
                  f"more than the {g.usable_memory_bytes / 2**30:.1f} GiB {g.name} offers: the time is for a run "
                  f"that does not fit (a larger tp, a smaller dtype or kv_dtype, or a GPU with more memory would)",
                  DoesNotFitWarning, stacklevel=stacklevel + 1)


def _bound_of(est) -> np.ndarray:
    return np.asarray(est.bound)


@renamed_arguments(batch="batch_size")
def step_time(setup: Setup, batch_size: Any, step_tokens: Any, cached: Any, phase: str) -> ServingTime:
    """One step that feeds ``step_tokens`` tokens per sequence on top of ``cached`` ones, arguments resolved.

    A prefill is ``step_tokens = prompt_len, cached = 0``; a decode step ``step_tokens = 1,
    cached = context_len`` (see :func:`prefill_time`). ``step_tokens`` is not ``new_tokens``, the tokens a
    whole generation produces. ``batch`` is the former name of ``batch_size`` (deprecated).
    """
    cfg, g, dt, kv, tp, eng = setup.cfg, setup.gpu, setup.dtype, setup.kv_dtype, setup.tp, setup.engine
    given = {"batch_size": batch_size, **({"prompt_len": step_tokens} if phase == "prefill" else {"context_len": cached})}
    broadcastable(**given)
    within_positions(cfg, np.asarray(step_tokens) + np.asarray(cached),
                     "prompt_len" if phase == "prefill" else "context_len + 1")
    kerns = step_kernels(cfg, batch_size, step_tokens, cached, dt, kv, tp, eng.value, setup.group_size,
                         attention_kernel=setup.attention_kernel)
    shape = np.broadcast_shapes(np.shape(batch_size), np.shape(step_tokens), np.shape(cached))
    zeros = np.zeros(shape)
    times: dict[str, Any] = {}
    by_bound: dict[str, dict[str, Any]] = {}
    count, calibrated, wbytes, source = 0, False, 0.0, "datasheet"
    # each kernel alone and under sustained load (compute rates over the slowdown): an engine runs its steps back
    # to back, and a step takes the share of the slowdown its clock-bound kernels' time gives it (clock_share); a
    # model without a slowdown prices both alike, so it prices each kernel once
    slow = sustained_slowdown_for(g, calibrated=setup.calibrated, calibration=setup.calibration)

    def both(op):
        alone = _estimate(op, g, calibrated=setup.calibrated, calibration=setup.calibration)
        return alone, (_estimate(op, g, calibrated=setup.calibrated, calibration=setup.calibration, sustained=True)
                       if slow > 1.0 else alone)

    priced = [(fam, op, n, *both(op)) for fam, op, n in kerns]
    alone_s = sum(n * np.asarray(est.seconds, dtype=float) for _, _, n, est, _ in priced) + zeros
    extra_s = sum(n * clock_bound_extra(est.seconds, lo.seconds, slow) for _, _, n, est, lo in priced) + zeros
    share = clock_share(alone_s, extra_s, slow, power_share_threshold_for(g, calibration=setup.calibration))
    for fam, op, n, est, loaded in priced:
        source = est.source   # one model prices every kernel of the step
        t = np.asarray(est.seconds, dtype=float)
        t = t + share * (np.asarray(loaded.seconds, dtype=float) - t)
        per_op = np.asarray(est.kernels, dtype=float)
        if eng != Engine.HF:                # a replayed graph: its own fixed time per kernel
            t = K.in_graph_s(t, est)
        t = n * t + zeros
        times[fam] = times.get(fam, zeros) + t
        b = np.broadcast_to(_bound_of(est), shape)
        fam_bounds = by_bound.setdefault(fam, {})
        for label in np.unique(b):
            fam_bounds[str(label)] = fam_bounds.get(str(label), zeros) + np.where(b == label, t, 0.0)
        count += int(round(float(np.max(n * per_op))))
        calibrated = calibrated or bool(est.calibrated)
        if fam in ("matmul", "logits"):
            wbytes += float(np.max(n * np.asarray(op.breakdown.get("b", 0.0))))
    if tp > 1:
        nbytes = batch_size * step_tokens * cfg.hidden_size * (4.0 if dt.value == "fp32" else 2.0)
        ar = allreduces_per_step(cfg) * K.allreduce_time(nbytes, tp, g) + zeros
        times["allreduce"] = ar
        latency = allreduces_per_step(cfg) * K.allreduce_time(0.0, tp, g)   # the time an empty message takes
        by_bound["allreduce"] = {"link": ar - latency, "latency": latency + zeros}
        count += allreduces_per_step(cfg)
    kernel_s = sum(times.values())
    if eng == Engine.HF:
        host_s = host_ops(cfg, prefill=phase == "prefill") * setup.host_op_s + setup.host_step_s + zeros
    else:
        host_s = zeros
    seconds = np.maximum(kernel_s, host_s)
    bounds = {}
    for fam, parts in by_bound.items():
        labels = list(parts)
        stack = np.stack([np.asarray(parts[x]) for x in labels])
        idx = np.argmax(stack, axis=0)
        pick = np.asarray(labels, dtype=object)[idx]
        bounds[fam] = str(pick) if np.ndim(pick) == 0 else pick
    tokens = batch_size * step_tokens
    sc = (lambda x: float(x)) if not shape else (lambda x: np.asarray(x))  # noqa: E731
    return ServingTime(
        seconds=sc(seconds), phase=phase, tokens_per_s=sc(tokens / seconds),
        breakdown={k: sc(v) for k, v in times.items()}, bounds=bounds, kernel_s=sc(kernel_s), host_s=sc(host_s),
        host_bound=bool(np.all(host_s > kernel_s)) if not shape else np.asarray(host_s > kernel_s),
        kernels=count, weights_bytes=wbytes, calibrated=calibrated, batch_size=batch_size,
        seq_len=step_tokens if phase == "prefill" else cached, tp=tp, dtype=dt.value,
        kv_dtype=kv_cache_dtype(kv, dt).value,
        engine=eng.value, model=cfg.name, gpu=g.name, attention_kernel=setup.attention_kernel,
        source=source, **band_and_error(sc(seconds), serving_regime(source, eng.value)))


@keyword_only_after(2, "batch_size", "prompt_len", "dtype", "tp", "engine")
def prefill_time(model: Any, gpu: Any, *, batch_size: Any = 1, prompt_len: Any = 512, dtype: str = "bf16",
                 tp: int = 1, engine: str = "graph", kv_dtype: Any = None, group_size: int = 128,
                 calibrated: bool = True, calibration: Any = None, host: Any = None,
                 attention_kernel: str = "sdpa") -> ServingTime:
    """Time of the prefill: ``batch_size`` prompts of ``prompt_len`` tokens through the model at once,
    writing their keys and values to the cache and producing the first token's logits.

    Parameters
    ----------
    model : str, TransformerConfig or dict
        A preset name, a config, or a Hugging Face ``config.json`` dict.
    gpu : str or GPUSpec
        A GPU name or record (``gm.gpu``); each of the ``tp`` GPUs is one of these.
    batch_size : int or array
        Sequences prefilled together.
    prompt_len : int or array
        Prompt length [token].
    dtype : {"bf16", "fp16", "fp8", "int8", "int4", "fp32"}
        Weight format: fp8 runs fp8 GEMMs; int8/int4 are weight-only (16-bit math).
    tp : int
        Tensor-parallel degree: the time is per step of the group of ``tp`` GPUs.
    engine : {"graph", "compiled", "hf"}
        ``graph``: a lean engine replaying CUDA graphs (kernel time only); ``compiled``: the same with its
        memory-bound kernels fused by a compiler (gpt-fast, TensorRT-LLM); ``hf``: eager HF ``generate``.
    kv_dtype : {None, "fp32", "bf16", "fp16", "fp8"}
        KV-cache format (default: the activation format). An int8 cache, which ``inference_memory`` sizes,
        is refused: the time model has no int8 KV-cache kernels (:func:`~gpumodel.vocabulary.kv_cache_dtype`).
    group_size : int
        Weights per 16-bit scale of int8/int4 weights.
    calibrated : bool
        Time the kernels with the GPU's shipped calibration where there is one (default); False: the
        datasheet with default efficiencies.
    calibration : Calibration or path, optional
        Your own calibration of the GPU (a :class:`~gpumodel.calibration.record.Calibration` or the path of a
        YAML file ``gpumodel calibrate`` wrote, read once): every kernel of the step is priced with it. One
        measured on another GPU is refused (:class:`~gpumodel.base.errors.ArgumentError` naming ``calibration``).
    host : HostCosts or path, optional
        The host's per-op costs (a :class:`~gpumodel.training.hostcost.HostCosts` or the path of a host-cost
        YAML file) for ``engine="hf"``, whose step the host's dispatch may set: the fitted per-op and per-step
        host times scaled to it (:func:`gpumodel.serving.kernels.host_dispatch`). Default: the fitted times.
        Refused (:class:`~gpumodel.base.errors.ArgumentError` naming ``host``) with the ``graph`` and
        ``compiled`` engines, which replay CUDA graphs and cost no host dispatch.
    attention_kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"}
        The library whose flash kernels run the attention over the cache (:class:`~gpumodel.core.ops.AttentionKernel`;
        ``"fa3"`` on Hopper alone, only ``"sdpa"`` with fp32 weights).

    Returns
    -------
    ServingTime
        ``.seconds`` [s] of the step, ``.tokens_per_s`` (``batch_size * prompt_len / seconds``) [token/s],
        the ``breakdown`` [s] and ``bounds`` by kernel family; arrays where the sizes were arrays.
        ``.fits`` says whether the prefill fits in each GPU's memory and ``.peak_bytes`` [B] is the peak
        it was checked with (:func:`memory_check`).

    Warns
    -----
    DoesNotFitWarning
        When the prefill does not fit: the time is still given, for a run that cannot happen.

    Notes
    -----
    .. math:: t = \\sum_k n_k\\, t_k + 2 L\\, t_{AR}(b\\, s\\, h\\, e) \\quad (tp > 1)

    over the step's kernels :math:`k` (:mod:`gpumodel.serving.steps`), each timed by
    :func:`gpumodel.calibration.estimate.estimate`; :math:`t_{AR}` is the ring all-reduce of the hidden state.

    Examples
    --------
    >>> import gpumodel as gm
    >>> t = gm.prefill_time("llama-3-8b", "h200", batch_size=1, prompt_len=2048)
    >>> t.bounds["matmul"], 0.05 < float(t) < 0.5
    ('compute', True)
    """
    setup = resolve_serving_args(model, gpu, dtype, kv_dtype, tp, engine, group_size, calibrated=calibrated,
                                 calibration=calibration, host=host, attention_kernel=attention_kernel)
    b, s = positive_int(batch_size, "batch_size"), positive_int(prompt_len, "prompt_len")
    t = step_time(setup, b, s, 0 * np.asarray(s) if np.ndim(s) else 0, "prefill")
    fits, peak, need = memory_check(setup, b, s)
    warn_unfit(setup, fits, need, f"the prefill at batch_size={b}, prompt_len={s}" if not np.ndim(fits)
               else "the prefill", stacklevel=3)
    return dataclasses.replace(t, fits=fits, peak_bytes=peak)


@keyword_only_after(2, "batch_size", "context_len", "dtype", "kv_dtype", "tp", "engine")
def decode_step_time(model: Any, gpu: Any, *, batch_size: Any = 1, context_len: Any = 512, dtype: str = "bf16",
                     kv_dtype: Any = None, tp: int = 1, engine: str = "graph", group_size: int = 128,
                     calibrated: bool = True, calibration: Any = None, host: Any = None,
                     attention_kernel: str = "sdpa") -> ServingTime:
    """Time of one decode step: one new token for each of ``batch_size`` sequences, each attending over
    ``context_len`` cached tokens (and itself).

    Parameters are those of :func:`prefill_time`, with ``context_len`` [token] the tokens already in
    each sequence's cache.

    Parameters
    ----------
    model : str, TransformerConfig or dict
        A preset name, a config, or a Hugging Face ``config.json`` dict.
    gpu : str or GPUSpec
        A GPU name or record (``gm.gpu``); each of the ``tp`` GPUs is one of these.
    batch_size : int or array
        Sequences decoded together (one new token each).
    context_len : int or array
        Tokens already in each sequence's cache [token].
    dtype : {"bf16", "fp16", "fp8", "int8", "int4", "fp32"}
        Weight format: fp8 runs fp8 GEMMs; int8/int4 are weight-only (16-bit math).
    kv_dtype : {None, "fp32", "bf16", "fp16", "fp8"}
        KV-cache format (default: the activation format).
    tp : int
        Tensor-parallel degree: the time is per step of the group of ``tp`` GPUs.
    engine : {"graph", "compiled", "hf"}
        As in :func:`prefill_time`.
    group_size : int
        Weights per 16-bit scale of int8/int4 weights.
    calibrated, calibration, host :
        As in :func:`prefill_time`: the shipped calibration or the datasheet, your own calibration of the GPU
        (record or YAML path, read once; another GPU's refused), and host costs for ``engine="hf"`` only.
    attention_kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"}
        The library whose flash kernels run the attention over the cache, as in :func:`prefill_time`.

    Returns
    -------
    ServingTime
        ``.seconds`` [s] of the step, ``.tokens_per_s`` (``batch_size / seconds``) [token/s], the
        ``breakdown`` [s] and ``bounds`` by kernel family; arrays where the sizes were arrays.
        ``.fits`` says whether the step (weights, the cache of ``context_len + 1`` positions, the logits)
        fits in each GPU's memory and ``.peak_bytes`` [B] is the peak it was checked with (:func:`memory_check`).

    Warns
    -----
    DoesNotFitWarning
        When the step does not fit: the time is still given, for a run that cannot happen.

    Examples
    --------
    >>> import gpumodel as gm
    >>> t = gm.decode_step_time("llama-3-8b", "h200", batch_size=1, context_len=1024)
    >>> t.bounds["matmul"], 1e-3 < float(t) < 1e-2      # about 16 GB of bf16 weights at 4.8 TB/s
    ('memory', True)
    >>> tp8 = gm.decode_step_time("llama-3-8b", "h200", batch_size=1, context_len=1024, tp=8)
    >>> float(t) / float(tp8) < 8                           # the all-reduces do not shrink with tp
    True
    """
    setup = resolve_serving_args(model, gpu, dtype, kv_dtype, tp, engine, group_size, calibrated=calibrated,
                                 calibration=calibration, host=host, attention_kernel=attention_kernel)
    b = positive_int(batch_size, "batch_size")
    c = positive_int(context_len, "context_len")
    t = step_time(setup, b, 1, c, "decode")
    fits, peak, need = memory_check(setup, b, 1, c)
    warn_unfit(setup, fits, need, f"the decode step at batch_size={b}, context_len={c}" if not np.ndim(fits)
               else "the decode step", stacklevel=3)
    return dataclasses.replace(t, fits=fits, peak_bytes=peak)
