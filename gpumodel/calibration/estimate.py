"""Time estimates: how long an op takes on a GPU, calibrated where a measurement exists.

:func:`estimate_time` returns seconds; :func:`estimate` returns a :class:`TimeEstimate` that
also says which ceiling or overhead decided the time, and whether a calibration measured on
that GPU was used. The model is :mod:`gpumodel.calibration.model` (achievable rates, tile and
wave quantization, launch overhead, row parallelism). Its parameters come from

1. the ``calibration`` argument (a :class:`~gpumodel.calibration.record.Calibration` or a YAML path),
2. else, with ``calibrated=True``, the shipped calibration of that GPU (``specs/calibrations/``),
   ``source="calibrated"``,
3. else, with ``calibrated=True``, the shipped calibration carried to that GPU with its datasheet and
   architecture priors (:mod:`gpumodel.calibration.transfer`), ``source="transferred"``,
4. else the GPU's datasheet with the default efficiencies of
   :data:`~gpumodel.calibration.model.DEFAULT_EFFICIENCY`, ``source="datasheet"``.

For the pure datasheet ceiling (no efficiencies, no overheads) see :func:`gpumodel.core.roofline`.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base.reprs import ResultRecord
from ..base.errors import ArgumentError, ArgumentTypeError, UnsupportedError
from ..core.opcost import resolve_op
from ..vocabulary import flag, format_seconds, path_argument, resolve_gpu

from ..base.callmodule import make_callable

from .model import CalibrationModel, Prediction, default_parameters, predict
from .record import Calibration, calibration_for, load_calibration
from .priors import prior_for
from .transfer import transfer_for
from .points import op_family
from .bands import Interval, error_band, kernel_regime

__all__ = ["TimeEstimate", "estimate", "estimate_time", "model_for", "sustained_slowdown_for", "power_share_threshold_for",
           "resolve_calibration", "calibration_key"]

_BOUNDS = np.array(["compute", "memory", "launch", "parallelism"])


def resolve_calibration(calibration: Any, gpu: Any) -> Calibration | None:
    """The calibration record a time function prices its kernels with, read once at its edge.

    Parameters
    ----------
    calibration : Calibration, path or None
        A record, or the path of a calibration YAML file (as ``gpumodel calibrate`` writes it), which is
        read here; None stays None (the shipped calibration, or the datasheet, decides per kernel).
    gpu : GPUSpec or str
        The GPU the calibration must have been measured on.

    Returns
    -------
    Calibration or None
        The record, to pass on as ``calibration=`` to every kernel estimate of the call.

    Raises
    ------
    ArgumentError
        The calibration was measured on another GPU (the error names ``calibration``).
    """
    if calibration is None:
        return None
    g = resolve_gpu(gpu)
    if not isinstance(calibration, Calibration):
        try:
            path = path_argument(calibration, "calibration")
        except ArgumentTypeError:
            raise ArgumentTypeError(f"calibration must be a Calibration record or the path of a calibration YAML "
                                    f"file, got {type(calibration).__name__}", argument="calibration",
                                    value=calibration, allowed="a Calibration record or a YAML path") from None
    cal = calibration if isinstance(calibration, Calibration) else load_calibration(os.fspath(path))
    if cal.gpu != g.name:
        raise ArgumentError(f"calibration is for GPU {cal.gpu!r}, not {g.name!r}; pass the matching gpu",
                            argument="calibration", value=cal.gpu, allowed=f"a calibration of {g.name}")
    return cal


def calibration_key(calibration: Calibration | None) -> Any:
    """A hashable key of what a calibration record prices kernels with (its model's parameters, SM count,
    name and measured families): equal keys give equal kernel times, so a cache of kernel times keyed by it
    never serves one calibration's results for another. None for None.

    >>> from gpumodel.calibration.record import calibration_for
    >>> cal = calibration_for("h200")
    >>> calibration_key(cal) == calibration_key(cal.model_copy()), calibration_key(None)
    (True, None)
    """
    if calibration is None:
        return None
    m = calibration.model()
    return (calibration.gpu, m.name, int(m.sm_count), bool(m.calibrated), m.measured, tuple(sorted(m.params.items())))


def _resolve(g: Any, calibrated: bool, calibration: Any) -> tuple[CalibrationModel, str, str, Any]:
    """(model, source label, description, calibration or transfer record) for a GPU record."""
    if calibration is not None:
        cal = resolve_calibration(calibration, g)
    elif calibrated:
        cal = calibration_for(g)
        if cal is None:
            moved = transfer_for(g)
            if moved is not None:
                ds = (f"; datasheet efficiencies for {' and '.join(moved.datasheet)} (the transfer does not beat them "
                      "on this architecture's published figures)") if moved.datasheet else ""
                return (moved.model, "transferred", f"transferred from the {moved.reference} calibration with the "
                        f"{moved.prior.name} priors{ds}", moved)
    else:
        cal = None
    if cal is None:
        return (CalibrationModel(default_parameters(g), g.sm_count, calibrated=False, name=f"{g.name} datasheet",
                                 gpu=g),
                "datasheet", "uncalibrated: datasheet peaks x default efficiencies", None)
    return cal.model(), "calibrated", f"calibrated on {cal.device_name}, {cal.date[:10]}", cal


def model_for(gpu: Any, *, calibrated: bool = True, calibration: Any = None) -> tuple[CalibrationModel, str]:
    """The model used for ``gpu`` and a description of where its parameters come from.

    Calibrated (the ``calibration`` given, else the GPU's shipped one) before transferred (the shipped
    reference calibration carried to the GPU, where its architecture has priors) before datasheet
    (default efficiencies; also what ``calibrated=False`` asks for).

    Raises
    ------
    ValueError
        ``calibration`` was measured on another GPU than ``gpu``.

    Examples
    --------
    >>> [model_for(g)[1].split(" ")[0] for g in ("h200", "a100", "v100")]
    ['calibrated', 'transferred', 'uncalibrated:']
    """
    model, _, detail, _ = _resolve(resolve_gpu(gpu), flag(calibrated, "calibrated"), calibration)
    return model, detail


def sustained_slowdown_for(gpu: Any, *, calibrated: bool = True, calibration: Any = None) -> float:
    """The ``sustained_slowdown`` of the model that prices ``gpu``'s kernels [ratio]: 1 where it has none.

    Parameters
    ----------
    gpu : GPUSpec or str
        The GPU.
    calibrated : bool
        As :func:`model_for` takes it.
    calibration : Calibration, path or None
        As :func:`model_for` takes it.

    Returns
    -------
    float
        Compute-bound kernels back to back over alone (:mod:`gpumodel.calibration.sustained`); 1.0 for the datasheet
        model.

    Examples
    --------
    >>> sustained_slowdown_for("h200") > 1.0, sustained_slowdown_for("h200", calibrated=False)
    (True, 1.0)
    """
    return float(model_for(gpu, calibrated=calibrated, calibration=calibration)[0].params.get("sustained_slowdown", 1.0))


def power_share_threshold_for(gpu: Any, *, calibration: Any = None) -> float:
    """The share of compute-bound time up to which ``gpu`` runs a mix of work at the boost clock [1].

    A calibration record's ``power_share_threshold`` parameter where it has one (``gpumodel calibrate`` measures it
    with the sustained load), else the value measured on that GPU in its architecture's prior
    (:class:`~gpumodel.calibration.priors.GPUPrior`), else 0: every share of compute-bound work takes its share of the
    sustained slowdown (:func:`~gpumodel.calibration.sustained.clock_share`).

    Examples
    --------
    >>> power_share_threshold_for("h100-sxm"), power_share_threshold_for("h200")
    (0.47, 0.0)
    """
    g = resolve_gpu(gpu)
    if calibration is not None:
        params = model_for(g, calibration=calibration)[0].params
        if "power_share_threshold" in params:
            return float(params["power_share_threshold"])
    prior = prior_for(g)
    own = prior.gpus.get(g.name) if prior is not None else None
    return float(own.power_share_threshold) if own is not None and own.power_share_threshold is not None else 0.0


#: the added relative uncertainty of an attention library's kernels the calibration did not time (the flash-attn
#: packages, Triton): the transferred estimates of the FlashAttention-3 paper's H100 figures miss by
#: FlashAttention-2 4.1%, FlashAttention-3 5.1% and Triton 8.9% median (``bench/published_kernels.py``); 10% rounds them up
LIBRARY_UNCERTAINTY = 0.10
#: the libraries whose kernels the calibrations time (PyTorch's SDPA and the cuDNN kernels it dispatches)
_TIMED_LIBRARIES = ("sdpa", "cudnn")


def _expected_error(record: Any, op: Any) -> Any:
    if record is None:
        return None
    if hasattr(record, "expected_error"):
        err = record.expected_error(op)
    else:
        hit = record.validation_error.get(op_family(op))
        err = None if hit is None else hit.median
    if err is not None and op.name == "attention" and op.shape.get("kernel", "sdpa") not in _TIMED_LIBRARIES:
        err = float(np.hypot(err, LIBRARY_UNCERTAINTY))
    return err


_fmt = format_seconds  # the package's one time formatter


@dataclass(frozen=True, repr=False)
class TimeEstimate(Interval, ResultRecord):
    """Estimated time of an op (or a broadcast array of ops) on one GPU.

    Attributes
    ----------
    seconds : float or ndarray
        Estimated kernel time [s]; ``float(est)`` gives it. ``time_s`` is its former name (deprecated).
    bound : str or ndarray of str
        What decided it: ``"compute"`` (tensor/CUDA-core rate incl. tile and wave quantization),
        ``"memory"`` (device-memory traffic), ``"launch"`` (the fixed per-launch time exceeds both),
        ``"parallelism"`` (a row-wise kernel with too few rows to fill the SMs).
    compute_s, memory_s, overhead_s : float or ndarray
        The model's parts [s]: compute (incl. quantization), memory, fixed launch overhead.
    parallelism : float or ndarray
        Fraction of the GPU's tile (or row) slots doing useful work in the last wave.
    calibrated : bool
        True when the parameters were fitted to kernels of this op family (and, for GEMMs, this
        dtype) measured on this GPU.
    source : str
        Which model made it: ``"calibrated"`` (fitted on this GPU), ``"transferred"`` (a calibration
        carried from another GPU, :mod:`gpumodel.calibration.transfer`) or ``"datasheet"`` (default
        efficiencies).
    op : str
        Op family.
    gpu : str
        GPU canonical name.
    detail : str
        Where the parameters come from, in words.
    expected_error : float or None
        Expected median relative error of ``seconds`` [1]: the calibration's validation error for
        this op family, or for a transferred estimate that combined with its priors' uncertainty;
        ``None`` where nothing measured backs it (datasheet).
    kernels : float or ndarray
        GPU kernels one call launches (a split-K GEMM's reduce kernel, split-KV attention's merge, a
        composite's parts); ``overhead_s`` is their launches, queued back to back.
    band : tuple of (float or ndarray) or None
        The 80% band ``(low, high)`` [s] of the measured time: where it lay for 80% of the measured kernels of this
        source (``"kernel-calibrated"`` or ``"kernel-transferred"`` in ``specs/error_bands.yaml``,
        :func:`gpumodel.calibration.bands.error_band`); ``None`` for a datasheet estimate (nothing measured backs it).
    """

    seconds: Any
    bound: Any
    compute_s: Any
    memory_s: Any
    overhead_s: Any
    parallelism: Any
    calibrated: bool
    source: str
    op: str
    gpu: str
    detail: str = ""
    expected_error: Any = None
    kernels: Any = 1.0
    band: Any = None

    @property
    def time_s(self) -> Any:
        """Deprecated name of :attr:`seconds`."""
        warnings.warn("TimeEstimate.time_s is deprecated; use seconds", DeprecationWarning, stacklevel=2)
        return self.seconds

    def __float__(self) -> float:
        """Seconds (scalar results only)."""
        return float(self.seconds)

    def __repr__(self) -> str:
        if np.ndim(self.seconds) == 0:
            band = "" if self.band is None else f" (80%: {_fmt(self.band[0])} .. {_fmt(self.band[1])})"
            return (f"TimeEstimate({self.op} on {self.gpu}: {_fmt(self.seconds)}{band}, {self.bound}-bound; "
                    f"compute {_fmt(self.compute_s)}, memory {_fmt(self.memory_s)}, launch {_fmt(self.overhead_s)}; "
                    f"{self.detail or self.source})")
        t = np.asarray(self.seconds)
        return (f"TimeEstimate({self.op} on {self.gpu}: {t.size} configs, {_fmt(t.min())} .. {_fmt(t.max())}; "
                f"{self.detail or self.source})")

    def _repr_html_(self) -> str:
        rows = [("time", _fmt(np.max(self.seconds)) if np.ndim(self.seconds) == 0 else repr(self)),
                ("bound", str(self.bound)), ("source", f"{self.source}: {self.detail}" if self.detail else self.source)]
        if self.expected_error is not None:
            rows.append(("expected error", f"{self.expected_error:.0%}"))
        rows.append(("80% band", "none: a datasheet estimate" if self.band is None else
                     f"{_fmt(np.min(self.band[0]))} .. {_fmt(np.max(self.band[1]))}"))
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{v}</td></tr>" for k, v in rows)
        return f"<table><caption>{self.op} on {self.gpu}</caption>{body}</table>"


def _bound(pred: Prediction) -> Any:
    c, m, o = (np.asarray(x, dtype=float) for x in (pred.compute_s, pred.memory_s, pred.overhead_s))
    rows = np.asarray(pred.extra.get("row_limited_s", 0.0), dtype=float)
    par = np.asarray(pred.parallelism, dtype=float)
    parts = np.stack(np.broadcast_arrays(c, m, o, rows))
    # the row term is part of memory_s: call it "parallelism" when it set memory_s AND row slots sat idle
    # (too few rows to fill the SMs); with every slot busy the per-row rate is a memory-side limit
    starved = (rows >= m) & (par < 1.0)
    parts[1] = np.where(starved, 0.0, parts[1])
    parts[3] = np.where(starved, m, 0.0)
    idx = np.argmax(parts, axis=0)
    out = _BOUNDS[idx]
    return str(out) if out.ndim == 0 else out


def _scalar(x: Any) -> Any:
    arr = np.asarray(x, dtype=float)
    return float(arr) if arr.ndim == 0 else arr


def estimate(op: Any, gpu: Any, *, calibrated: bool = True, calibration: Any = None,
             sustained: bool = False) -> TimeEstimate:
    """Estimate the time of ``op`` on ``gpu`` and say what decided it.

    Parameters
    ----------
    op : OpCost
        From :mod:`gpumodel.core.ops` (scalar or broadcast sizes).
    gpu : GPUSpec or str
        The GPU (a name such as ``"h200"``).
    calibrated : bool
        Use the GPU's shipped calibration when there is one (default). False: datasheet with
        default efficiencies.
    calibration : Calibration or path, optional
        A calibration to use instead of the shipped one (must be for this GPU).
    sustained : bool
        Price the op inside seconds of back-to-back work (a training step), where the power limit lowers
        the SM clock: compute rates divided by the calibration's measured ``sustained_slowdown``
        (:meth:`CalibrationModel.sustained <gpumodel.calibration.model.CalibrationModel.sustained>`).
        Default False: the op timed on its own, as the calibration measured it.

    Returns
    -------
    TimeEstimate
        ``.seconds`` (the estimated kernel time [s]), ``.bound`` (what decided it: "compute", "memory",
        "launch" or "parallelism"), its parts ``compute_s``, ``memory_s``, ``overhead_s`` [s], ``source``,
        ``expected_error`` [1] and the 80% ``band`` ``(low, high)`` [s] (None for a datasheet estimate); arrays where
        the op's sizes were arrays.

    Examples
    --------
    >>> import gpumodel as gm
    >>> est = gm.estimate(gm.ops.elementwise(2**28, "bf16"), "h100", calibrated=False)
    >>> est.bound, est.calibrated, est.source
    ('memory', False, 'datasheet')
    >>> gm.estimate(gm.ops.elementwise(2**28, "bf16"), "h100").source     # no H100 calibration ships
    'transferred'
    """
    op = resolve_op(op)
    g = resolve_gpu(gpu)
    model, label, detail, record = _resolve(g, flag(calibrated, "calibrated"), calibration)
    if flag(sustained, "sustained"):
        model = model.sustained()
    pred = _predict(model, op)
    covered = model.covers(op)
    if model.calibrated and not covered:
        how = ("built from its parts' fitted rates" if op.name == "fused" else
               "its rates are those the fit started from (the transfer, where a prior applies, else the datasheet defaults)")
        detail += f"; but no {op.name} {op.dtype.value} kernels were measured: {how}"
    seconds = _scalar(pred.time_s)
    return TimeEstimate(seconds, _bound(pred), _scalar(pred.compute_s), _scalar(pred.memory_s),
                        _scalar(pred.overhead_s), _scalar(pred.parallelism), covered, label,
                        op.name, g.name, detail, _expected_error(record, op), _scalar(pred.kernels),
                        error_band(seconds, kernel_regime(label)))


def estimate_time(op: Any, gpu: Any, *, calibrated: bool = True, calibration: Any = None,
                  sustained: bool = False) -> Any:
    """Estimated time of ``op`` on ``gpu`` [s]: a float, or an array broadcast like the op's sizes.

    See :func:`estimate` for the parameters and the result that explains the number.

    Parameters
    ----------
    op : OpCost
        From :mod:`gpumodel.core.ops` (scalar or broadcast sizes).
    gpu : GPUSpec or str
        The GPU (a name such as ``"h200"``).
    calibrated : bool
        Use the GPU's shipped calibration when there is one (default). False: datasheet with
        default efficiencies.
    calibration : Calibration or path, optional
        A calibration to use instead of the shipped one (must be for this GPU).
    sustained : bool
        Price the op inside back-to-back work, at the power-limited clock (as :func:`estimate`).

    Returns
    -------
    float or ndarray
        Estimated kernel time [s], broadcast like the op's sizes.

    Examples
    --------
    >>> import gpumodel as gm
    >>> t = gm.estimate_time(gm.ops.matmul([1024, 8192], 8192, 8192), "h100", calibrated=False)
    >>> t.shape
    (2,)
    >>> bool(t[1] > 7 * t[0])      # 8x the FLOPs, a bit less than 8x the time (fixed costs)
    True
    """
    op = resolve_op(op)
    model, _ = model_for(gpu, calibrated=calibrated, calibration=calibration)
    if flag(sustained, "sustained"):
        model = model.sustained()
    return _scalar(_predict(model, op).time_s)


def _predict(model: CalibrationModel, op: Any) -> Prediction:
    """The time model's prediction; a fused op with tensor-core parts is refused (the model has no rate for it)."""
    if op.name == "fused" and op.unit == "tensor":
        raise UnsupportedError("op: a fused op with tensor-core parts (a matmul, an attention) has no time model; "
                               "estimate its parts and add the times")
    return predict(model, op)


make_callable(__name__, estimate)
