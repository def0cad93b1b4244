"""Wall-clock time, GPU-hours, energy and cost of a whole training run.

``training_time`` multiplies one step (:func:`gpumodel.training_step_time`, on one GPU or a parallel
layout on a system) by the steps needed to see ``tokens`` tokens. Energy is the power assumed per GPU
times GPU-time: on a system, the node's stated maximum power over its GPUs (hosts, NICs, fans and
switches inside the node included); on a bare GPU run on one GPU, the board's TDP. Both are upper
bounds of the draw, stated in the result. Multi-GPU times are modelled, not measured here.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..base.arguments import keyword_only_after
from ..base.errors import ArgumentError
from ..calibration.bands import Interval
from ..training.steptime import StepTime
from ..vocabulary import format_seconds, passed_on, positive_int, positive_number, resolve_system, token_count
from ..base.reprs import html_table
from .step import training_step_time
from ..records.system import SYSTEM_CATALOG, SystemSpec

__all__ = ["TrainingTime", "training_time", "parse_tokens"]


def parse_tokens(value: Any, name: str = "tokens") -> float:
    """Deprecated: :func:`gpumodel.vocabulary.token_count`, the one reader of token counts."""
    warnings.warn("parse_tokens is deprecated; use gpumodel.vocabulary.token_count", DeprecationWarning, stacklevel=2)
    return token_count(value, name)


@dataclass(frozen=True)
class TrainingTime(Interval):
    """A whole training run. ``float()`` gives the wall-clock seconds.

    Attributes
    ----------
    seconds : float
        Wall-clock time [s] (``steps * step.seconds``).
    steps : int
        Optimizer steps to see ``tokens``.
    tokens : float
        Tokens trained on [token].
    num_gpus : int
    gpu_hours : float
        ``num_gpus * seconds / 3600`` [GPU h].
    energy_kwh : float
        ``power_per_gpu_watts * num_gpus * seconds`` [kWh].
    power_per_gpu_watts : float
        The power assumed per GPU [W] and ``power_basis``, where it comes from.
    cost : float or None
        ``gpu_hours * price_per_gpu_hour`` when a price was given [currency of the price].
    step : StepTime
        The step it multiplies.
    """

    seconds: float
    steps: int
    tokens: float
    num_gpus: int
    gpu_hours: float
    energy_kwh: float
    power_per_gpu_watts: float
    power_basis: str
    cost: float | None
    step: StepTime = field(repr=False)

    @property
    def days(self) -> float:
        """Wall-clock days."""
        return self.seconds / 86400.0

    @property
    def band(self) -> tuple[float, float] | None:
        """The 80% band ``(low, high)`` of the wall-clock time [s]: the step's band (:attr:`StepTime.band`) times
        the steps, the step's error being the same every step; None where the step has no band."""
        b = self.step.band
        return None if b is None else (self.steps * b[0], self.steps * b[1])

    @property
    def expected_error(self) -> float | None:
        """The step's expected relative error (:attr:`StepTime.expected_error`) [1]: the run's, every step alike."""
        return self.step.expected_error

    @property
    def source(self) -> str:
        """Where the step's kernel times come from (:attr:`StepTime.source`)."""
        return self.step.source

    def __float__(self) -> float:
        return float(self.seconds)

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "step"}
        out["days"] = self.days
        out["band"] = self.band
        out["expected_error"] = self.expected_error
        out["step"] = self.step.to_dict()
        return out

    def __repr__(self) -> str:
        cost = "" if self.cost is None else f", cost {self.cost:,.0f}"
        gpus = f"{self.num_gpus} GPU" + ("s" if self.num_gpus != 1 else "")
        return (f"TrainingTime({format_seconds(self.seconds)} on {gpus}, "
                f"{self.steps:,} steps of {format_seconds(self.step.seconds)}, {self.gpu_hours:,.0f} GPU-hours, "
                f"{self.energy_kwh:,.0f} kWh at {self.power_per_gpu_watts:.0f} W per GPU ({self.power_basis}){cost}; "
                f"MFU {self.step.mfu:.1%})")

    def _repr_html_(self) -> str:
        rows = [("wall-clock", format_seconds(self.seconds)), ("GPUs", str(self.num_gpus)), ("steps", f"{self.steps:,}"),
                ("step", format_seconds(self.step.seconds)), ("MFU", f"{self.step.mfu:.1%}"),
                ("GPU-hours", f"{self.gpu_hours:,.0f}"), ("energy", f"{self.energy_kwh:,.0f} kWh"),
                ("power per GPU", f"{self.power_per_gpu_watts:.0f} W ({self.power_basis})")]
        if self.cost is not None:
            rows.append(("cost", f"{self.cost:,.0f}"))
        if self.band is not None:
            rows.append(("80% band", f"{format_seconds(self.band[0])} .. {format_seconds(self.band[1])}"))
        return html_table(f"Training {self.tokens:.3g} tokens", rows)


def _one_number(value: Any, name: str) -> float:
    """A positive number that must be one value (a price, a power): an array is refused naming the argument."""
    out = positive_number(value, name)
    if not isinstance(out, float):
        raise ArgumentError(f"training_time takes one {name}, got an array of shape {np.shape(value)}; call it once "
                            f"per value", argument=name, value=value, allowed="one positive number, not an array")
    return out


@keyword_only_after(2, "tokens", "batch_size", "seq_len", "precision", "optimizer", "checkpointing")
def training_time(model: Any, gpu_or_system: Any, *, tokens: Any, batch_size: int, seq_len: int,
                  precision: str = "amp_bf16", optimizer: str = "adamw", checkpointing: Any = False,
                  gradient_accumulation_steps: int = 1, parallelism: Any = None, framework: str = "hf",
                  price_per_gpu_hour: float | None = None, power_per_gpu_watts: float | None = None,
                  calibrated: bool = True, calibration: Any = None, host: Any = None,
                  attention_kernel: str = "sdpa", **step_options: Any) -> TrainingTime:
    """Time, GPU-hours, energy and cost of training on ``tokens`` tokens.

    Parameters
    ----------
    model, gpu_or_system, batch_size, seq_len, precision, optimizer, checkpointing, gradient_accumulation_steps,
    parallelism, framework :
        As :func:`gpumodel.training_step_time`; one step sees
        ``batch_size * gradient_accumulation_steps * dp * seq_len`` tokens.
    tokens : float or str
        Tokens to train on (``"1T"``, ``"300B"`` or a number).
    price_per_gpu_hour : float, optional
        Price of one GPU for one hour; gives ``cost``.
    power_per_gpu_watts : float, optional
        Power per GPU [W]; default: the system's node power over its GPUs, or the board TDP of one GPU.
    calibrated : bool
        Time the step's kernels with the GPU's shipped calibration where there is one (default); False: the
        datasheet with default efficiencies.
    calibration : Calibration or path, optional
        Your own calibration of the GPU (a :class:`~gpumodel.calibration.record.Calibration` or the path of a
        YAML file ``gpumodel calibrate`` wrote, read once): it prices every kernel of the step. One measured on
        another GPU is refused (:class:`~gpumodel.base.errors.ArgumentError` naming ``calibration``).
    host : HostCosts or path, optional
        Per-op host costs of the one-GPU eager model (a :class:`~gpumodel.training.hostcost.HostCosts` or the
        path of a host-cost YAML file); as in :func:`gpumodel.training_step_time`, refused with a parallel
        layout, a system or a framework other than "hf".
    attention_kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"}
        The library whose flash kernels run the step's 16-bit attention (as in :func:`gpumodel.training_step_time`).
    **step_options :
        Passed on to :func:`gpumodel.training_step_time`.

    Returns
    -------
    TrainingTime

    Examples
    --------
    >>> import gpumodel as gm
    >>> run = gm.training_time("llama-3.2-1b", "h200", tokens="1B", batch_size=8, seq_len=1024)
    >>> run.num_gpus, run.steps, run.power_basis
    (1, 122071, 'h200-sxm board TDP')
    """
    n_tokens = token_count(tokens)
    resolve_system(gpu_or_system, "gpu_or_system")   # an unknown name is refused naming gpu_or_system
    price = None if price_per_gpu_hour is None else _one_number(price_per_gpu_hour, "price_per_gpu_hour")
    given = None if power_per_gpu_watts is None else _one_number(power_per_gpu_watts, "power_per_gpu_watts")
    passed_on(step_options, training_step_time, "training_time",
              taken=("gpu", "batch_size", "seq_len", "precision", "optimizer", "checkpointing",
                     "gradient_accumulation_steps", "parallelism", "framework", "calibrated", "calibration", "host",
                     "attention_kernel"))
    step = training_step_time(model, gpu_or_system, batch_size=batch_size, seq_len=seq_len, precision=precision,
                              optimizer=optimizer, checkpointing=checkpointing,
                              gradient_accumulation_steps=positive_int(gradient_accumulation_steps,
                                                                       "gradient_accumulation_steps"),
                              parallelism=parallelism, framework=framework, calibrated=calibrated,
                              calibration=calibration, host=host, attention_kernel=attention_kernel, **step_options)
    per_step = step.tokens_per_s * step.seconds
    steps = math.ceil(n_tokens / per_step - 1e-9)
    seconds = steps * step.seconds
    n = step.num_gpus
    if given is not None:
        power, basis = given, "given"
    else:
        sysm = resolve_system(gpu_or_system, "gpu_or_system")
        is_system = isinstance(gpu_or_system, SystemSpec) or (isinstance(gpu_or_system, str)
                                                               and gpu_or_system in SYSTEM_CATALOG)
        if n == 1 and not is_system:
            power, basis = sysm.gpu.tdp_watts, f"{sysm.gpu_name} board TDP"
        else:
            power, basis = sysm.gpu_power_watts, f"{sysm.name} node power / {sysm.gpus_per_node} GPUs"
    cost = None if price is None else price * n * seconds / 3600.0
    return TrainingTime(seconds=seconds, steps=steps, tokens=n_tokens, num_gpus=n, gpu_hours=n * seconds / 3600.0,
                        energy_kwh=power * n * seconds / 3.6e6, power_per_gpu_watts=float(power), power_basis=basis,
                        cost=cost, step=step)
