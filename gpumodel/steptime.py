"""Training-step time of a decoder-only transformer: the sum of its kernels' estimated times.

A step is forward + backward + optimizer step, written out as the kernels eager PyTorch and
Hugging Face launch (:mod:`gpumodel.stepkernels`: unfused norms, casts, rotary embedding,
activations, residual adds, the fp32 loss, the foreach optimizer passes), and every kernel is
timed with :func:`gpumodel.estimate.estimate` — calibrated on GPUs that ship a calibration, the
datasheet with default efficiencies elsewhere. Nothing here is fitted to step times; the
step-time measurements in ``tests/data/steptime/`` only check the sum
(``python bench/step_time_accuracy.py``): over 18 HF training steps of Llama- and GPT-2-style
models of 160M-1.4B parameters on an H200, the median error is 26 % (p90 39 %), always an
under-estimate — largest for the smallest models, whose steps are bound by the host's kernel
launches, which are not modelled.

MFU follows Chowdhery et al. (2022, PaLM, appendix B): model FLOPs ``6 N T + 12 L h s T``
(the attention term with causal masking counted in full, as there), over step time and the dense
peak of the compute dtype.

References
----------
Chowdhery et al., "PaLM: Scaling Language Modeling with Pathways", 2022, appendix B.
Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from .errors import ArgumentError, DoesNotFitWarning
from .estimate import estimate as _estimate
from .memory import training_memory
from .stepkernels import Kernels, training_step
from .transformer import TransformerConfig
from .vocabulary import Checkpointing, Optimizer, checkpointing_mode, choice, flag, format_seconds, positive_int, precision as _precision, resolve_gpu, resolve_model

__all__ = ["StepTime", "training_step_time", "step_kernels"]



@dataclass(frozen=True)
class StepTime:
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
        ``6 N T + 12 L h s T`` over the global batch [FLOP].
    breakdown : dict
        Seconds by phase ("forward", "backward", "recompute", "optimizer", ...).
    calibrated : bool
        Whether a GPU calibration timed the kernels (else datasheet with default efficiencies).
    kernels : int
        Kernels launched per step in this model of the step (per GPU).
    hardware_flops : float
        FLOPs the hardware executes, recomputation included [FLOP].
    hfu : float
        Hardware FLOPs utilisation, ``hardware_flops / seconds / (num_gpus * peak)``.
    num_gpus : int
        GPUs the step runs on.
    fits : bool or None
        Whether the run fits in each GPU's memory (``training_memory`` with the same arguments);
        None where it was not checked.
    peak_bytes : float
        Peak allocated bytes per GPU from ``training_memory`` [B] (nan where not checked).
    host_bound : bool
        Whether the GPU waits on the host's kernel launches for part of the step.
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

    def __repr__(self) -> str:
        parts = ", ".join(f"{k} {format_seconds(v)}" for k, v in self.breakdown.items() if v)
        label = "calibrated" if self.calibrated else "uncalibrated"
        fit = "" if self.fits is None else (", fits" if self.fits else ", DOES NOT FIT in memory")
        gpus = f" on {self.num_gpus} GPUs" if self.num_gpus > 1 else ""
        return (f"StepTime({format_seconds(self.seconds)}{gpus}, {self.tokens_per_s:,.0f} tokens/s, "
                f"MFU {self.mfu:.1%}, {label}{fit}; {parts})")


def step_kernels(model: TransformerConfig | str, batch_size: int, seq_len: int, precision: str = "amp_bf16",
                 optimizer: str = "adamw", checkpointing: Any = False) -> dict[str, Kernels]:
    """The kernels of one training step: phase -> list of (op, launches per step).

    Phases are "forward", "backward", "recompute" and "optimizer"; parameters are those of
    :func:`training_step_time`. See :mod:`gpumodel.stepkernels` for what is counted.
    """
    cfg = resolve_model(model)
    prec = _precision(precision)
    opt = choice(Optimizer, optimizer, "optimizer")
    batch_size, seq_len = positive_int(batch_size, "batch_size"), positive_int(seq_len, "seq_len")
    if np.ndim(batch_size) or np.ndim(seq_len):
        raise ArgumentError("batch_size and seq_len must be scalars here; loop over a sweep of step times")
    ckpt = checkpointing_mode(checkpointing)
    return training_step(cfg, batch_size, seq_len, prec.name, opt.value, ckpt == Checkpointing.FULL)


def training_step_time(model: TransformerConfig | str, gpu: Any, batch_size: int, seq_len: int,
                       precision: str = "amp_bf16", optimizer: str = "adamw", checkpointing: Any = False, *,
                       calibrated: bool = True, calibration: Any = None, gradient_accumulation_steps: int = 1,
                       parallelism: Any = None, framework: str = "hf") -> StepTime:
    """Estimate the time of one training step of a decoder-only transformer on one GPU.

    Parameters
    ----------
    model : TransformerConfig, str or dict
        A config, a preset name (``gm.model``) or a Hugging Face config dict.
    gpu : GPUSpec or str
    batch_size, seq_len : int
        Micro-batch size [sequences] and sequence length [tokens].
    precision : {"amp_bf16", "amp_fp16", "bf16", "fp16", "fp32"}
    optimizer : {"adamw", "adam", "sgd", "sgd_momentum", "adafactor", "adamw_8bit"}
    checkpointing : bool or {"none", "full", "selective"}
        Activation checkpointing per decoder layer (``True`` means "full": the forward is recomputed in
        the backward).
    calibrated, calibration :
        Passed to :func:`gpumodel.estimate.estimate_time`.
    gradient_accumulation_steps, parallelism, framework :
        With a ``gm.Parallelism`` or a system (``gm.system``), the step of a parallel layout:
        see :func:`gpumodel.cluster.step.parallel_training_step_time` (modelled, not measured).

    Returns
    -------
    StepTime
        ``.seconds``, ``.tokens_per_s``, ``.mfu``, ``.fits`` and a ``breakdown`` by phase. A run that does not
        fit in the GPU's memory still gets a time, with ``fits=False`` and a :class:`DoesNotFitWarning`.

    Notes
    -----
    The step time is the sum of the kernels' times (one stream, no overlap). The host's launch
    overhead of eager PyTorch is not modelled, so small models come out fast: measured on an H200,
    -30 % to -50 % below 500M parameters, about -10 % at 1-1.4B (``bench/step_time_accuracy.py``).
    Adafactor and 8-bit AdamW are approximated by a few passes over the parameters.

    Examples
    --------
    >>> import gpumodel as gm
    >>> st = gm.training_step_time("llama-3.2-1b", "h200", batch_size=8, seq_len=1024)
    >>> 0.05 < st.seconds < 1.0 and 0.0 < st.mfu < 1.0, st.fits
    (True, True)
    """
    from .cluster.system import SYSTEM_CATALOG, SystemSpec  # a layout or a system: the cluster composition
    if parallelism is not None or isinstance(gpu, SystemSpec) or (isinstance(gpu, str) and gpu in SYSTEM_CATALOG):
        from .cluster.step import parallel_training_step_time as _parallel
        return _parallel(model, gpu, batch_size, seq_len, precision, optimizer, checkpointing, calibrated=calibrated,
                         calibration=calibration, gradient_accumulation_steps=gradient_accumulation_steps,
                         parallelism=parallelism, framework=framework)
    cfg = resolve_model(model)
    g = resolve_gpu(gpu)
    calibrated = flag(calibrated, "calibrated")
    prec = _precision(precision)
    phases = step_kernels(cfg, batch_size, seq_len, prec, optimizer, checkpointing)
    batch_size, seq_len = int(batch_size), int(seq_len)
    breakdown, count, calibrated_used = {}, 0, False
    hardware_flops = 0.0
    for phase, kernels in phases.items():
        total = 0.0
        for op, launches in kernels:
            est = _estimate(op, g, calibrated=calibrated, calibration=calibration)
            total += launches * float(est.time_s)
            hardware_flops += launches * float(op.flops)
            calibrated_used = calibrated_used or bool(est.calibrated)
            count += launches
        breakdown[phase] = total
    seconds = sum(breakdown.values())
    tokens = batch_size * seq_len
    model_flops = 6.0 * cfg.active_parameters() * tokens + 12.0 * cfg.num_layers * cfg.hidden_size * seq_len * tokens
    peak = g.peak_flops(prec.compute_dtype.value)
    mem = training_memory(cfg, batch_size, seq_len, precision=prec.name, optimizer=optimizer,
                          checkpointing=checkpointing)
    fits = bool(mem.total_bytes <= g.usable_memory_bytes)
    if not fits:
        warnings.warn(f"{cfg.name} at batch_size={batch_size}, seq_len={seq_len} needs "
                      f"{mem.total_bytes / 2**30:.1f} GiB, more than the {g.usable_memory_bytes / 2**30:.1f} GiB "
                      f"{g.name} offers: the time is for a run that does not fit", DoesNotFitWarning, stacklevel=2)
    return StepTime(seconds=seconds, tokens_per_s=tokens / seconds, mfu=model_flops / seconds / peak,
                    model_flops=model_flops, breakdown=breakdown, calibrated=calibrated_used, kernels=count,
                    hardware_flops=hardware_flops, hfu=hardware_flops / seconds / peak, num_gpus=1, fits=fits,
                    peak_bytes=float(mem.peak_bytes))
