"""The record of one serving step's estimated time: :class:`ServingTime`, what :func:`~gpumodel.prefill_time`
and :func:`~gpumodel.decode_step_time` return (part of :mod:`gpumodel.serving.timing`, which re-exports it).

It holds the step time, its breakdown by kernel family and what bounds each, the host's share, and whether the
step fits in each GPU's memory; an array result holds one configuration per element (:meth:`ServingTime.pick`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..base.reprs import html_table
from ..calibration.bands import HOST_BOUND_NOTE, Interval
from ..vocabulary import format_seconds

__all__ = ["ServingTime"]


def _show(x: Any) -> str:
    return format_seconds(float(np.max(x)))


@dataclass(frozen=True)
class ServingTime(Interval):
    """Estimated time of one prefill or one decode step on one tensor-parallel group.

    Attributes
    ----------
    seconds : float or ndarray
        Step time [s]; ``float(t)`` gives it (for a scalar step).
    phase : {"prefill", "decode"}
    tokens_per_s : float or ndarray
        Tokens the step processes over its time: ``batch_size * prompt_len`` for a prefill,
        ``batch_size`` new tokens for a decode step [token/s].
    breakdown : dict
        Seconds by kernel family (``"matmul"``, ``"attention"``, ``"kv_write"``, ``"norm"``,
        ``"elementwise"``, ``"embedding"``, ``"logits"``, ``"allreduce"``) [s].
    bounds : dict
        For each family, what bounds most of its time: ``"memory"``, ``"compute"``, ``"launch"``,
        ``"parallelism"`` or, for the all-reduce, ``"latency"``/``"link"``.
    kernel_s : float or ndarray
        GPU time (kernels and all-reduces) [s].
    host_s : float or ndarray
        Host dispatch time (0 for ``engine="graph"``) [s].
    host_bound : bool or ndarray
        Whether the host, not the GPU, sets the step time (``engine="hf"``): it then depends on this machine's CPU
        (``gpumodel calibrate`` measures the host's costs; pass the file as ``host=``), and the repr says so.
    kernels : int
        Kernels launched per step per GPU.
    weights_bytes : float
        Weight bytes each GPU reads per step [B]. ``weight_bytes`` is its former name (deprecated).
    calibrated : bool
        Whether a calibration for this GPU timed the kernels.
    seq_len : int or ndarray
        Tokens each sequence holds in this step [token]: the prompt of a prefill, the context (tokens
        already in the cache) of a decode step. ``tokens`` is its former name (deprecated).
    batch_size, tp, dtype, kv_dtype, engine, model, gpu, attention_kernel :
        The inputs (``attention_kernel``: the library of the flash-attention kernels,
        :class:`~gpumodel.core.ops.AttentionKernel`).
    fits : bool, ndarray of bool or None
        Whether the step fits in each GPU's memory (:func:`~gpumodel.serving.timing.memory_check`: the inference
        memory of the step, allocator reserve and CUDA context included, against the GPU's
        ``usable_memory_bytes``); None where it was not checked (the steps a capacity or generation search
        times internally).
    peak_bytes : float or ndarray
        Peak allocated bytes per GPU the check used, from :func:`gpumodel.core.inference.inference_memory`
        [B] (nan where not checked).
    band : tuple of (float or ndarray) or None
        The 80% band ``(low, high)`` [s] of the measured step: where it lay for 80% of the measured steps of its
        engine (``"serving-graph"``, ``"serving-compiled"``, ``"serving-hf"`` in ``specs/error_bands.yaml``,
        :func:`gpumodel.calibration.bands.error_band`); None where the kernels were priced from the datasheet.
        ``interval(0.8)`` returns it.
    source : str
        Where the kernel times come from: ``"calibrated"``, ``"transferred"`` or ``"datasheet"``.
    expected_error : float or None
        The engine's regime's median absolute relative error [1]; None for datasheet kernels.
    """

    seconds: Any
    phase: str
    tokens_per_s: Any
    breakdown: dict = field(default_factory=dict)
    bounds: dict = field(default_factory=dict)
    kernel_s: Any = 0.0
    host_s: Any = 0.0
    host_bound: Any = False
    kernels: int = 0
    weights_bytes: float = 0.0
    calibrated: bool = False
    batch_size: Any = 1
    seq_len: Any = 1
    tp: int = 1
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    engine: str = "graph"
    model: str = ""
    gpu: str = ""
    fits: Any = None
    peak_bytes: Any = float("nan")
    attention_kernel: str = "sdpa"
    band: Any = None
    source: str = ""
    expected_error: Any = None

    def __float__(self) -> float:
        return float(self.seconds)

    @property
    def weight_bytes(self) -> float:
        """Deprecated name of :attr:`weights_bytes`."""
        warnings.warn("ServingTime.weight_bytes is deprecated; use weights_bytes", DeprecationWarning, stacklevel=2)
        return self.weights_bytes

    @property
    def tokens(self) -> Any:
        """Deprecated name of :attr:`seq_len`."""
        warnings.warn("ServingTime.tokens is deprecated; use seq_len", DeprecationWarning, stacklevel=2)
        return self.seq_len

    def pick(self, i: int) -> "ServingTime":
        """The ``i``-th configuration of an array result, as a scalar record."""
        if np.ndim(self.seconds) == 0:
            return self

        def one(x: Any) -> Any:
            if np.ndim(x) == 0:
                return x
            v = np.asarray(x)[i]
            return v.item() if hasattr(v, "item") else v

        values = {f.name: one(getattr(self, f.name)) for f in fields(self) if f.name != "band"}
        values["band"] = None if self.band is None else tuple(float(one(b)) for b in self.band)
        values["breakdown"] = {k: float(one(v)) for k, v in self.breakdown.items()}
        values["bounds"] = {k: str(one(v)) for k, v in self.bounds.items()}
        values["host_bound"] = bool(values["host_bound"])
        if values["fits"] is not None:
            values["fits"] = bool(values["fits"])
        return ServingTime(**values)

    def to_dict(self) -> dict:
        """Plain fields (SI units) for JSON or a DataFrame row."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["breakdown"], out["bounds"] = dict(self.breakdown), dict(self.bounds)
        return out

    def _parts(self) -> str:
        return ", ".join(f"{k} {_show(v)} ({self.bounds.get(k, '')})" for k, v in self.breakdown.items()
                         if np.any(np.asarray(v) > 0))

    def _unfit(self) -> str:
        """``", DOES NOT FIT in memory"`` (with the count of an array's configurations) where the check failed."""
        if self.fits is None or np.all(self.fits):
            return ""
        if np.ndim(self.fits):
            return f", {np.size(self.fits) - np.count_nonzero(self.fits)} DO NOT FIT in memory"
        return f", DOES NOT FIT in memory (peak {float(self.peak_bytes) / 2**30:,.1f} GiB per GPU)"

    def __repr__(self) -> str:
        if np.ndim(self.seconds):
            t = np.asarray(self.seconds)
            return (f"ServingTime({self.phase} of {self.model} on {self.gpu}: {t.size} configs, "
                    f"{format_seconds(t.min())} .. {format_seconds(t.max())}{self._unfit()})")
        what = "prompt" if self.phase == "prefill" else "context"
        host = f", host {_show(self.host_s)}{' (host-bound)' if self.host_bound else ''}" if self.engine == "hf" else ""
        tp = f" x tp={self.tp}" if self.tp > 1 else ""
        band = "" if self.band is None else f" (80%: {_show(self.band[0])} .. {_show(self.band[1])})"
        note = f"; {HOST_BOUND_NOTE}" if self.host_bound else ""
        return (f"ServingTime({self.phase} of {self.model} on {self.gpu}{tp}, batch {self.batch_size}, "
                f"{what} {self.seq_len}: {_show(self.seconds)}{band}, {float(self.tokens_per_s):,.0f} tokens/s{host}"
                f"{self._unfit()}; {self._parts()}{note})")

    def _repr_html_(self) -> str:
        rows = [("time", _show(self.seconds)), ("tokens/s", f"{float(np.max(self.tokens_per_s)):,.0f}"),
                ("engine", f"{self.engine}, {self.dtype} weights, {self.kv_dtype} KV cache, tp={self.tp}, "
                           f"{self.attention_kernel} attention")]
        rows += [(k, f"{_show(v)} ({self.bounds.get(k, '')})") for k, v in self.breakdown.items()
                 if np.any(np.asarray(v) > 0)]
        if self.engine == "hf":
            rows.append(("host", _show(self.host_s) + (f" ({HOST_BOUND_NOTE})" if np.any(self.host_bound) else "")))
        if self.band is not None:
            rows.append(("80% band", f"{_show(np.min(self.band[0]))} .. {_show(self.band[1])}"))
        if self.fits is not None:
            rows.append(("fits in memory", "yes" if np.all(self.fits) else self._unfit().lstrip(", ")))
        return html_table(f"ServingTime: {self.phase} of {self.model} on {self.gpu}", rows)
