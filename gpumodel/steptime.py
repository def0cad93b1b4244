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

from dataclasses import dataclass, field
from typing import Any

from .estimate import estimate as _estimate
from .gpus import gpu as _gpu
from .stepkernels import COMPUTE_DTYPE, OPTIMIZER_PASSES, Kernels, training_step
from .transformer import TransformerConfig, model as _model

__all__ = ["StepTime", "training_step_time", "step_kernels"]



@dataclass(frozen=True)
class StepTime:
    """Estimated time of one training step.

    Attributes
    ----------
    seconds : float
        Step time [s].
    tokens_per_s : float
        ``batch_size * seq_len / seconds`` [token/s].
    mfu : float
        Model FLOPs utilisation: ``model_flops / seconds / peak`` (dense 16-bit, or fp32 for "fp32").
    model_flops : float
        ``6 N T + 12 L h s T`` [FLOP].
    breakdown : dict
        Seconds by phase: "forward", "backward", "recompute", "optimizer".
    calibrated : bool
        Whether a GPU calibration timed the kernels (else datasheet with default efficiencies).
    kernels : int
        Kernels launched per step in this model of the step.
    """

    seconds: float
    tokens_per_s: float
    mfu: float
    model_flops: float
    breakdown: dict = field(default_factory=dict)
    calibrated: bool = False
    kernels: int = 0

    def __repr__(self) -> str:
        parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.breakdown.items() if v)
        label = "calibrated" if self.calibrated else "uncalibrated"
        return (f"StepTime({self.seconds * 1e3:.1f} ms, {self.tokens_per_s:,.0f} tokens/s, MFU {self.mfu:.1%}, "
                f"{label}; {parts})")


def step_kernels(model: TransformerConfig | str, batch_size: int, seq_len: int, precision: str = "amp_bf16",
                 optimizer: str = "adamw", checkpointing: bool = False) -> dict[str, Kernels]:
    """The kernels of one training step: phase -> list of (op, launches per step).

    Phases are "forward", "backward", "recompute" and "optimizer"; parameters are those of
    :func:`training_step_time`. See :mod:`gpumodel.stepkernels` for what is counted.
    """
    cfg = _model(model) if isinstance(model, str) else model
    if precision not in COMPUTE_DTYPE:
        raise ValueError(f"precision must be one of {', '.join(COMPUTE_DTYPE)}; got {precision!r}")
    if optimizer not in OPTIMIZER_PASSES:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZER_PASSES)}; got {optimizer!r}")
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return training_step(cfg, batch_size, seq_len, precision, optimizer, checkpointing)


def training_step_time(model: TransformerConfig | str, gpu: Any, batch_size: int, seq_len: int,
                       precision: str = "amp_bf16", optimizer: str = "adamw", checkpointing: bool = False,
                       calibrated: bool = True, calibration: Any = None) -> StepTime:
    """Estimate the time of one training step of a decoder-only transformer on one GPU.

    Parameters
    ----------
    model : TransformerConfig or str
        A config or a preset name (``gm.model``).
    gpu : GPUSpec or str
    batch_size, seq_len : int
        Micro-batch size and sequence length [tokens].
    precision : {"amp_bf16", "amp_fp16", "bf16", "fp16", "fp32"}
    optimizer : {"adamw", "adam", "sgd", "sgd_momentum", "adafactor", "adamw_8bit"}
    checkpointing : bool
        Full activation checkpointing per decoder layer (forward recomputed in backward).
    calibrated, calibration :
        Passed to :func:`gpumodel.estimate.estimate_time`.

    Returns
    -------
    StepTime
        ``.seconds``, ``.tokens_per_s``, ``.mfu`` and a ``breakdown`` by phase.

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
    >>> 0.05 < st.seconds < 1.0 and 0.0 < st.mfu < 1.0
    True
    """
    cfg = _model(model) if isinstance(model, str) else model
    g = _gpu(gpu)
    phases = step_kernels(cfg, batch_size, seq_len, precision, optimizer, checkpointing)
    breakdown, count, calibrated_used = {}, 0, False
    for phase, kernels in phases.items():
        total = 0.0
        for op, launches in kernels:
            est = _estimate(op, g, calibrated=calibrated, calibration=calibration)
            total += launches * float(est.time_s)
            calibrated_used = calibrated_used or bool(est.calibrated)
            count += launches
        breakdown[phase] = total
    seconds = sum(breakdown.values())
    tokens = batch_size * seq_len
    model_flops = 6.0 * cfg.active_parameters() * tokens + 12.0 * cfg.num_layers * cfg.hidden_size * seq_len * tokens
    peak = g.peak_flops(COMPUTE_DTYPE[precision])
    return StepTime(seconds=seconds, tokens_per_s=tokens / seconds, mfu=model_flops / seconds / peak,
                    model_flops=model_flops, breakdown=breakdown, calibrated=calibrated_used, kernels=count)
