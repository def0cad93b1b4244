"""Training-step time of a decoder-only transformer on one GPU: kernels on a host/device timeline.

A step (one optimizer update) is written out as the kernels eager PyTorch and Hugging Face launch,
in order (:mod:`gpumodel.training.stepplan`, :mod:`gpumodel.training.stepkernels`, :mod:`gpumodel.training.moe`: unfused norms,
casts, rotary embedding, activations, residual adds, the fp32 loss, MoE routing and experts, the
optimizer's passes), each kernel timed with :func:`gpumodel.calibration.estimate.estimate` (calibrated on GPUs
that ship a calibration, the datasheet with default efficiencies elsewhere). The host dispatches
every kernel for its per-op cost (:class:`gpumodel.training.hostcost.HostCosts`, measured on the machine by
microbenchmarks; defaults elsewhere) and the GPU waits whenever its kernels are shorter than their
dispatch (:func:`gpumodel.training.hostcost.timeline`). Nothing here is fitted to step times; the step-time
measurements in ``tests/data/steptime/`` only check the result (``python bench/step_time_accuracy.py``).

MFU and HFU share one FLOP convention, PaLM's (Chowdhery et al. 2022, appendix B): a token costs
``6 N + 12 L h s`` model FLOPs (``N`` the parameters a token passes through, embeddings and LM head
included; the attention scores counted in full, without the causal mask's halving), of which a third
is the forward. MFU is the model FLOPs over the step time and the dense peak of the compute dtype;
HFU adds the forward work recomputed in the same convention (:func:`recompute_flops_per_token`), so
HFU equals MFU without recomputation and exceeds it with it. The FLOPs the modelled kernels execute
(causal attention about half the scores) are a separate field, ``hardware_flops``.

References
----------
Chowdhery et al., "PaLM: Scaling Language Modeling with Pathways", 2022, appendix B.
Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021.
PyTorch, "Automatic Mixed Precision package - torch.amp": ops that autocast to float32 (``pow``, ``softmax``,
``layer_norm``, ...).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..base.errors import ArgumentError, DoesNotFitWarning
from ..calibration.bands import HOST_BOUND_NOTE, Interval, band_and_error, step_regime
from ..calibration.estimate import (estimate as _estimate, power_share_threshold_for, resolve_calibration,
                                    sustained_slowdown_for)
from ..calibration.sustained import clock_bound_extra, clock_share
from ..core.memory import training_memory
from ..core.margin import fits as memory_fits
from .hostcost import host_costs_for, timeline
from .layer import Kernels, attention_kernel_on
from .recompute import module_flops_per_token
from .stepplan import step_plan, training_step
from ..records.transformer import TransformerConfig
from ..vocabulary import (Checkpointing, ExpertsImplementation, Optimizer, checkpointing_mode, choice, flag,
                         format_seconds, nonnegative_number, positive_int, positive_number, precision as _precision,
                         precision_on, resolve_gpu, resolve_model)
from ..base.reprs import html_table

__all__ = ["StepTime", "single_gpu_step_time", "step_kernels", "model_flops_per_token", "recompute_flops_per_token"]


def model_flops_per_token(cfg: TransformerConfig, seq_len: Any) -> Any:
    """``6 N + 12 L h s`` [FLOP/token]: PaLM's model FLOPs (Chowdhery et al. 2022, appendix B).

    ``N`` is :meth:`~gpumodel.records.transformer.TransformerConfig.active_parameters` (embeddings and LM
    head included), ``L h s`` the layers, hidden size and sequence length; the attention scores are
    counted in full (no causal halving). The forward is a third of it, the backward two thirds.

    >>> import gpumodel as gm
    >>> cfg = gm.model("gpt2")
    >>> model_flops_per_token(cfg, 1024) == 6 * cfg.active_parameters() + 12 * 12 * 768 * 1024
    True
    """
    return 6.0 * cfg.active_parameters() + 12.0 * cfg.num_layers * cfg.hidden_size * seq_len


def recompute_flops_per_token(cfg: TransformerConfig, seq_len: Any, checkpointing: Any,
                              recompute_modules: Any = None) -> Any:
    """The forward work activation recomputation repeats, in the convention of :func:`model_flops_per_token`
    [FLOP/token].

    Parameters
    ----------
    cfg : TransformerConfig
    seq_len : int or array
        Sequence length [tokens].
    checkpointing : bool or {"none", "selective", "full"}
        What is recomputed in the backward: nothing; the attention core of each layer (its scores and
        their product with the values, Korthikanti et al. 2022): ``4 L h s``; or the forward of each
        decoder layer: ``2 N_layers + 4 L h s``, with ``N_layers`` the parameters a token passes through
        in the layers (the active parameters less embeddings, LM head and final norm).
    recompute_modules : iterable of str, optional
        With "selective", Megatron-Core's recomputed submodules (:class:`gpumodel.vocabulary.RecomputeModule`):
        their forward FLOPs (:func:`gpumodel.training.recompute.module_flops_per_token`). None: the attention core.

    Returns
    -------
    float or ndarray
        [FLOP/token]; 0 for "none".

    Examples
    --------
    >>> import gpumodel as gm
    >>> cfg = gm.model("gpt2")
    >>> recompute_flops_per_token(cfg, 1024, "selective") == 4 * 12 * 768 * 1024
    True
    >>> recompute_flops_per_token(cfg, 1024, "none")
    0.0
    >>> recompute_flops_per_token(cfg, 1024, "selective", ["mlp"]) == 2 * 12 * 2 * 768 * 3072   # the MLPs' weights
    True
    """
    ckpt = checkpointing_mode(checkpointing)
    attention = 4.0 * cfg.num_layers * cfg.hidden_size * np.asarray(seq_len, float)
    if ckpt == Checkpointing.NONE:
        out = 0.0 * attention
    elif ckpt == Checkpointing.SELECTIVE:
        out = attention if recompute_modules is None else module_flops_per_token(cfg, seq_len, recompute_modules)
    else:
        final_norm = cfg.hidden_size * (2 if cfg.norm_bias else 1)
        layers = cfg.active_parameters() - cfg.embedding_parameters() - final_norm
        out = 2.0 * layers + attention
    return float(out) if np.ndim(out) == 0 else out



@dataclass(frozen=True)
class StepTime(Interval):
    """Estimated time of one training step (one optimizer update).

    Attributes
    ----------
    seconds : float
        Step time [s]; ``float(step)`` gives it.
    tokens_per_s : float
        Tokens of the global batch over the step time [token/s].
    mfu : float
        Model FLOPs utilisation: ``model_flops / seconds / (num_gpus * peak)`` (dense peak of the compute dtype).
    model_flops : float
        ``6 N T + 12 L h s T`` over the global batch [FLOP] (:func:`model_flops_per_token`: PaLM's convention,
        embeddings included, attention scores counted in full).
    breakdown : dict
        Seconds of kernel time by phase ("forward", "backward", "recompute", "optimizer"), plus
        "host_wait" (the GPU idle, waiting for the host's dispatch) and "sync" (synchronisation
        round trips); the values add up to ``seconds``.
    calibrated : bool
        Whether a GPU calibration timed the kernels and the host's costs were measured (else datasheet
        with default efficiencies, or default host costs).
    kernels : int
        Kernels launched per step in this model of the step (per GPU).
    hardware_flops : float
        FLOPs of the modelled kernels as they execute (causal attention about half the scores; full
        recomputation included) [FLOP]; a kernel count, not in the convention of ``model_flops``.
    hfu : float
        Hardware FLOPs utilisation, ``(model_flops + recomputed FLOPs) / seconds / (num_gpus * peak)``: the
        forward work that recomputation repeats counted in the convention of ``model_flops``
        (:func:`recompute_flops_per_token`). Equal to ``mfu`` without recomputation, above it with it;
        never below it. On one GPU (eager Hugging Face) "selective" recomputes nothing (HF has no selective
        recomputation), so its HFU equals its MFU.
    num_gpus : int
        GPUs the step runs on.
    fits : bool or None
        Whether the run fits in each GPU's memory (``training_memory`` with the same arguments);
        None where it was not checked.
    peak_bytes : float
        Peak allocated bytes per GPU from ``training_memory`` [B] (nan where not checked).
    host_bound : bool
        Whether the GPU waits on the host's kernel launches for more than 2 % of the step: the time then depends on
        this machine's CPU (the host's per-op costs: ``gpumodel calibrate`` measures them; pass the file as
        ``host=``), and the repr says so.
    host_calibrated : bool
        Whether the host's per-op costs were measured on the host (else defaults).
    attention_kernel : str
        The library whose flash-attention kernels the step's 16-bit attention was timed with
        (:class:`~gpumodel.core.ops.AttentionKernel`; "sdpa", PyTorch's own dispatch, by default).
    source : str
        Where the kernel times come from: ``"calibrated"``, ``"transferred"`` or ``"datasheet"`` (empty where not
        known).
    band : tuple of float or None
        The 80% band ``(low, high)`` [s] of the measured step: where it lay for 80% of the measured steps of its
        regime (kernels calibrated or transferred, GPU- or host-bound: ``"step-calibrated-gpu"``... in
        ``specs/error_bands.yaml``, :func:`gpumodel.calibration.bands.error_band`; a parallel layout's is
        ``"step-parallel"``, measured on published runs); None for datasheet kernels. ``interval(0.8)`` returns it.
    expected_error : float or None
        The regime's median absolute relative error [1] (its ``median_abs``); None for datasheet kernels.
    """

    seconds: float
    tokens_per_s: float
    mfu: float
    model_flops: float
    breakdown: dict = field(default_factory=dict)
    calibrated: bool = False
    kernels: int = 0
    hardware_flops: float = float("nan")
    hfu: float = float("nan")
    num_gpus: int = 1
    fits: bool | None = None
    peak_bytes: float = float("nan")
    host_bound: bool = False
    host_calibrated: bool = False
    attention_kernel: str = "sdpa"
    band: Any = None
    source: str = ""
    expected_error: Any = None

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """Throughput per GPU [token/s]."""
        return self.tokens_per_s / self.num_gpus

    def __float__(self) -> float:
        return float(self.seconds)

    def to_dict(self) -> dict:
        """Plain fields (SI units) for JSON or a DataFrame row."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["breakdown"] = dict(self.breakdown)
        out["tokens_per_s_per_gpu"] = self.tokens_per_s_per_gpu
        return out

    def _repr_html_(self) -> str:
        rows = [("step", format_seconds(self.seconds)), ("tokens/s", f"{self.tokens_per_s:,.0f}"),
                ("MFU", f"{self.mfu:.1%}"), ("HFU", f"{self.hfu:.1%}"), ("host-bound", str(self.host_bound)),
                ("calibrated", str(self.calibrated)), ("fits", str(self.fits)),
                ("attention kernel", self.attention_kernel)]
        rows += [(k, format_seconds(v)) for k, v in self.breakdown.items() if v]
        if self.band is not None:
            rows.append(("80% band", f"{format_seconds(self.band[0])} .. {format_seconds(self.band[1])}"))
        if self.host_bound:
            rows.append(("host", HOST_BOUND_NOTE))
        return html_table("StepTime", rows)

    def __repr__(self) -> str:
        parts = ", ".join(f"{k} {format_seconds(v)}" for k, v in self.breakdown.items() if v)
        label = self.source or ("calibrated" if self.calibrated else "uncalibrated")
        label += ", host-bound" if self.host_bound else ""
        label += f", attention {self.attention_kernel}" if self.attention_kernel != "sdpa" else ""
        fit = "" if self.fits is None else (", fits" if self.fits else ", DOES NOT FIT in memory")
        gpus = f" on {self.num_gpus} GPUs" if self.num_gpus > 1 else ""
        band = "" if self.band is None else f" (80%: {format_seconds(self.band[0])} .. {format_seconds(self.band[1])})"
        host = f"; {HOST_BOUND_NOTE}" if self.host_bound else ""
        return (f"StepTime({format_seconds(self.seconds)}{band}{gpus}, {self.tokens_per_s:,.0f} tokens/s, "
                f"MFU {self.mfu:.1%}, {label}{fit}; {parts}{host})")


def step_kernels(model: TransformerConfig | str, batch_size: int, seq_len: int, precision: str = "amp_bf16",
                 optimizer: str = "adamw", checkpointing: Any = False, *,
                 attention_kernel: str = "sdpa") -> dict[str, Kernels]:
    """The kernels of one training step: phase -> list of (op, launches per step).

    Phases are "forward", "backward", "recompute" and "optimizer"; parameters are those of
    :func:`single_gpu_step_time`. See :mod:`gpumodel.training.stepkernels` for what is counted.
    ``batch_size`` and ``seq_len`` may be 1-D arrays of one shape: each kernel is then an op whose sizes are
    arrays (one configuration an element), which one time estimate prices at once.
    """
    cfg = resolve_model(model)
    prec = _precision(precision)
    opt = choice(Optimizer, optimizer, "optimizer")
    batch_size, seq_len = positive_int(batch_size, "batch_size"), positive_int(seq_len, "seq_len")
    if np.ndim(batch_size) > 1 or np.ndim(seq_len) > 1:
        raise ArgumentError("batch_size and seq_len must be scalars or 1-D arrays of one shape")
    ckpt = checkpointing_mode(checkpointing)
    kernel = attention_kernel_on(attention_kernel, dtype=prec.compute_dtype.value)
    return training_step(cfg, batch_size, seq_len, prec.name, opt.value, ckpt == Checkpointing.FULL, kernel.value)


def _expert_load(cfg: TransformerConfig, expert_load: Any) -> np.ndarray:
    """The shares of a mixture-of-experts model's token assignments each expert receives, checked."""
    if not cfg.is_moe:
        raise ArgumentError(f"expert_load applies to mixture-of-experts models only: {cfg.name} is a dense model "
                            f"(no experts); leave expert_load=None", argument="expert_load", value=expert_load,
                            allowed="None for a dense model")
    load = np.atleast_1d(nonnegative_number(expert_load, "expert_load"))
    allowed = f"{cfg.num_experts} shares >= 0, one per expert, not all zero"
    if load.shape != (cfg.num_experts,):
        raise ArgumentError(f"expert_load must have {cfg.num_experts} shares, one per expert of {cfg.name}, got "
                            f"{load.size} value{'s' if load.size != 1 else ''} (shape {load.shape})",
                            argument="expert_load", value=expert_load, allowed=allowed)
    if not load.sum() > 0:
        raise ArgumentError(f"expert_load is all zero: give each expert of {cfg.name} its share of the assignments",
                            argument="expert_load", value=expert_load, allowed=allowed)
    return load


def single_gpu_step_time(model: TransformerConfig | str, gpu: Any, batch_size: int, seq_len: int,
                         precision: str = "amp_bf16", optimizer: str = "adamw", checkpointing: Any = False, *,
                         fused: bool = False, foreach: bool = True, gradient_accumulation_steps: int = 1,
                         clip_grad_norm: float | None = None, compile: bool = False,
                         experts_implementation: str = "grouped_mm", expert_load: Any = None,
                         calibrated: bool = True, calibration: Any = None, host: Any = None,
                         expandable_segments: bool = False, attention_kernel: str = "sdpa") -> StepTime:
    """The step of eager PyTorch / Hugging Face on one GPU, on a host/device timeline.

    The one-GPU model behind :func:`gpumodel.training_step_time` (which chooses between it and the
    parallel layouts of :mod:`gpumodel.cluster.step`); the arguments are those of that function.

    Parameters
    ----------
    model : TransformerConfig or str
        The model (a record, or a preset name).
    gpu : GPUSpec or str
        The GPU (a record, or a name).
    batch_size, seq_len : int
        Micro-batch size [sequences] and sequence length [tokens].
    precision, optimizer, checkpointing, fused, foreach, gradient_accumulation_steps, clip_grad_norm, compile, \
experts_implementation, expert_load, calibrated, calibration, host, expandable_segments :
        As in :func:`gpumodel.training_step_time`.
    attention_kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"}
        The library whose flash kernels run the 16-bit attention, forward and backward (as in
        :func:`gpumodel.training_step_time`).

    Returns
    -------
    StepTime
        The step's time [s], throughput, MFU and HFU, and what decided them.

    Notes
    -----
    The step is a timeline of two resources (:func:`gpumodel.training.hostcost.timeline`): the host dispatches
    each kernel of :func:`gpumodel.training.stepplan.step_plan` for its per-op host cost, the GPU runs it for
    its estimated time once it has been launched and the previous kernel is done, and the step ends
    with a synchronisation.
    """
    cfg = resolve_model(model)
    g = resolve_gpu(gpu)
    calibrated = flag(calibrated, "calibrated")
    calibration = resolve_calibration(calibration, g)   # a path read once, for every kernel of the step
    prec = precision_on(precision, g)  # refused where the GPU has no path for its compute format (bf16 on a V100)
    kernel = attention_kernel_on(attention_kernel, g, prec.compute_dtype.value)   # fa3 off Hopper refused
    opt = choice(Optimizer, optimizer, "optimizer")
    fused, foreach, compile = flag(fused, "fused"), flag(foreach, "foreach"), flag(compile, "compile")
    accum = positive_int(gradient_accumulation_steps, "gradient_accumulation_steps")
    batch_size, seq_len = positive_int(batch_size, "batch_size"), positive_int(seq_len, "seq_len")
    if np.ndim(batch_size) or np.ndim(seq_len) or np.ndim(accum):
        raise ArgumentError("batch_size, seq_len and gradient_accumulation_steps must be scalars here; "
                            "loop over a sweep of step times")
    if clip_grad_norm is not None:
        clip_grad_norm = positive_number(clip_grad_norm, "clip_grad_norm")
    if fused and opt.value not in ("adamw", "adam", "sgd", "sgd_momentum"):
        raise ArgumentError(f"fused=True needs optimizer 'adamw', 'adam', 'sgd' or 'sgd_momentum', got {opt.value!r}")
    experts = choice(ExpertsImplementation, experts_implementation, "experts_implementation")
    if expert_load is not None:
        expert_load = _expert_load(cfg, expert_load)
    ckpt = checkpointing_mode(checkpointing)
    hc = host_costs_for(g.name, host)
    batch_size, seq_len, accum = int(batch_size), int(seq_len), int(accum)
    blocks = step_plan(cfg, batch_size, seq_len, prec.name, opt.value, ckpt == Checkpointing.FULL, host=hc,
                       fused=fused, foreach=foreach, gradient_accumulation_steps=accum, clip_grad_norm=clip_grad_norm,
                       compile=compile, experts=experts.value, expert_load=expert_load,
                       attention_kernel=kernel.value)
    # each kernel timed alone and under sustained load (compute rates over the slowdown); the step, back-to-back
    # work, takes the share of the slowdown its clock-bound kernels' time gives it (sustained.clock_share)
    priced: dict[int, tuple[float, float, bool]] = {}
    sources: set[str] = set()   # where the kernel times came from: "calibrated", "transferred" or "datasheet"
    isolated_s = extra_s = 0.0
    slow = sustained_slowdown_for(g, calibrated=calibrated, calibration=calibration)
    for block in blocks:
        for op, *_ in block.kernels:
            if op is None:
                continue
            if id(op) not in priced:
                alone = _estimate(op, g, calibrated=calibrated, calibration=calibration)
                loaded = _estimate(op, g, calibrated=calibrated, calibration=calibration, sustained=True)
                priced[id(op)] = (float(alone.seconds), float(loaded.seconds), bool(loaded.calibrated))
                sources.add(loaded.source)
            alone_s, loaded_s, _ = priced[id(op)]
            isolated_s += block.repeat * alone_s
            extra_s += block.repeat * clock_bound_extra(alone_s, loaded_s, slow)
    share = clock_share(isolated_s, extra_s, slow, power_share_threshold_for(g, calibration=calibration))

    def device_s(op) -> tuple[float, bool]:
        if op is None:
            return 0.0, False
        alone_s, loaded_s, cal = priced[id(op)]
        return alone_s + share * (loaded_s - alone_s), cal

    hosts, devices, syncs = [], [], []
    kernel_by_phase = {"forward": 0.0, "backward": 0.0, "recompute": 0.0, "optimizer": 0.0}
    count, hardware_flops, kernels_calibrated = 0, 0.0, False
    for block in blocks:
        h = np.array([k[1] for k in block.kernels], float)
        d = np.array([device_s(k[0])[0] for k in block.kernels], float)
        s = np.array([k[2] for k in block.kernels], bool)
        hosts.append(np.tile(h, block.repeat))
        devices.append(np.tile(d, block.repeat))
        syncs.append(np.tile(s, block.repeat))
        for (op, _h, _s), dt, phase in zip(block.kernels, d, block.phases()):
            if op is not None:
                kernel_by_phase[phase] += block.repeat * float(dt)
                hardware_flops += block.repeat * float(op.flops)
                count += block.repeat
                kernels_calibrated = kernels_calibrated or device_s(op)[1]
    tl = timeline(np.concatenate(hosts), np.concatenate(devices), np.concatenate(syncs), hc.item_s)
    seconds = tl.seconds
    breakdown = dict(kernel_by_phase, host_wait=tl.host_wait_s, sync=tl.sync_s)
    tokens = batch_size * seq_len * accum
    host_bound = bool(tl.host_wait_s > 0.02 * seconds)
    source = "datasheet" if "datasheet" in sources or not sources else sources.pop()   # one model prices every kernel
    model_flops = model_flops_per_token(cfg, seq_len) * tokens
    recomputed = ckpt if ckpt == Checkpointing.FULL else Checkpointing.NONE   # HF has no selective recomputation
    used_flops = model_flops + recompute_flops_per_token(cfg, seq_len, recomputed) * tokens
    peak = g.peak_flops(prec.compute_dtype.value)
    options = dict(precision=prec.name, optimizer=opt.value, checkpointing=checkpointing, foreach=foreach,
                   fused=fused, expandable_segments=expandable_segments)
    if accum != 1:
        options["gradient_accumulation_steps"] = accum
    mem = training_memory(cfg, batch_size, seq_len, **options)
    fits = bool(memory_fits(cfg, g, batch_size, seq_len, **options))   # gm.fits: the allocator's replay at the edge
    if not fits:
        warnings.warn(f"{cfg.name} at batch_size={batch_size}, seq_len={seq_len} needs "
                      f"{mem.total_bytes / 2**30:.1f} GiB, more than the {g.usable_memory_bytes / 2**30:.1f} GiB "
                      f"{g.name} offers: the time is for a run that does not fit", DoesNotFitWarning, stacklevel=3)
    return StepTime(seconds=seconds, tokens_per_s=tokens / seconds, mfu=model_flops / seconds / peak,
                    model_flops=model_flops, breakdown=breakdown, calibrated=kernels_calibrated and hc.calibrated,
                    kernels=count, hardware_flops=hardware_flops, hfu=used_flops / seconds / peak, num_gpus=1,
                    fits=fits, peak_bytes=float(mem.peak_bytes), host_bound=host_bound,
                    host_calibrated=hc.calibrated, attention_kernel=kernel.value,
                    source=source, **band_and_error(seconds, step_regime(source, host_bound)))
