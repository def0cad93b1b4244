"""Error bands: the interval a time answer's measured time falls in, from the measured errors of its regime.

Every time answer is made in one *regime*: a kernel estimate from a calibration measured on that GPU or from
one carried to it (:mod:`gpumodel.calibration.transfer`); a one-GPU training step, GPU- or host-bound, from a
calibrated or a transferred kernel model; a serving step by engine (CUDA graphs, compiled, eager Hugging Face).
The signed error of a prediction against a measurement is

.. math:: e = t_{predicted} / t_{measured} - 1.

For each regime, ``python bench/error_bands.py --write`` takes the 10% and 90% points :math:`q_{10}, q_{90}` of
:math:`e` over half of the committed measurements of that regime (the fit half, chosen by a hash of each row's
identity, not by order; :func:`fit_band`) and stores them in ``specs/error_bands.yaml``; the other half is held out,
and the same script without ``--write`` prints the share of it each band covers. The 80% band of an answer of
:math:`t` seconds is where the measured time lies for 80% of the regime's measurements:

.. math:: t / (1 + q_{90}) \\le t_{measured} \\le t / (1 + q_{10}).

A datasheet estimate (default efficiencies, nothing measured on the GPU or carried to it) has no band: ``None``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..base.errors import ArgumentError, SpecError
from ..base.numeric import nonnegative_number
from ..records.specs import describe_errors, read_yaml, shipped_root

__all__ = ["ErrorBand", "ErrorBands", "BANDS_FILE", "HOST_BOUND_NOTE", "PARALLEL_STEP_REGIME", "load_error_bands",
           "error_band", "expected_error", "band_and_error", "fit_band", "kernel_regime", "step_regime", "serving_regime", "Interval",
           "BAND_LEVEL"]

#: the coverage of the shipped bands: every band is an 80% one (its regime's 10th and 90th percentiles)
BAND_LEVEL = 0.8

#: the shipped file of the bands, in the spec folder (``specs/`` of a checkout, ``gpumodel/specs`` of a wheel)
BANDS_FILE = "error_bands.yaml"

#: the regime of a multi-GPU training step (a parallel layout, a planner's row): published runs' time per iteration
PARALLEL_STEP_REGIME = "step-parallel"

#: what a host-bound answer says: its time is the host's dispatch, so it depends on the CPU it runs on
HOST_BOUND_NOTE = ("host-bound: the time is set by the host's per-op dispatch, so it depends on this machine's CPU; "
                   "`gpumodel calibrate` measures this host's costs (<out>.host.yaml): pass that file as host=")


class ErrorBand(BaseModel):
    """The measured signed error of one regime's answers: its 10th and 90th percentiles and what they come from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    q10: float = Field(gt=-1, description="10th percentile of predicted / measured - 1 on the fit half [1]")
    q90: float = Field(gt=-1, description="90th percentile of predicted / measured - 1 on the fit half [1]")
    n: int = Field(gt=0, description="measurements of the fit half")
    held_out: int = Field(default=0, ge=0, description="measurements of the held-out half")
    coverage: float | None = Field(default=None, ge=0, le=1,
                                   description="share of the held-out half inside the band when it was written [1]")
    median_abs: float | None = Field(default=None, ge=0,
                                     description="median absolute relative error of the fit half, |e| [1]")
    data: tuple[str, ...] = Field(min_length=1, description="the committed measurement files (repository paths)")
    description: str = Field(default="", description="what the regime's answers are, in words")

    @model_validator(mode="after")
    def _ordered(self) -> "ErrorBand":
        if self.q10 > self.q90:
            raise ValueError(f"q10 ({self.q10}) must not exceed q90 ({self.q90})")
        return self


class ErrorBands(BaseModel):
    """Every regime's band (``regimes``), the command that measured them and how the halves were chosen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: str = Field(min_length=3)
    split: str = Field(min_length=10)
    notes: str = ""
    regimes: dict[str, ErrorBand] = Field(min_length=1)


@functools.lru_cache(maxsize=8)
def load_error_bands(path: str | Path | None = None) -> ErrorBands:
    """The bands of ``path`` (a YAML file as ``bench/error_bands.py --write`` writes it), else the shipped ones.

    Parameters
    ----------
    path : str or Path, optional
        The file; None reads the shipped ``error_bands.yaml`` (once: the result is cached).

    Returns
    -------
    ErrorBands
        The validated record.

    Raises
    ------
    SpecError
        The file is missing, not YAML, or a field is wrong (the message names the file and the field).

    Examples
    --------
    >>> "kernel-calibrated" in load_error_bands().regimes
    True
    """
    if path is None:
        root = shipped_root()
        if root is None:  # pragma: no cover - a checkout and a wheel both have the spec folder
            raise SpecError("no spec folder found: the error bands ship in it")
        path = root / BANDS_FILE
    path = Path(path)
    try:
        return ErrorBands.model_validate(read_yaml(path))
    except ValidationError as exc:
        raise SpecError(f"{path}: {describe_errors(exc)}") from None


def _band(regime: Any) -> ErrorBand:
    if isinstance(regime, ErrorBand):
        return regime
    bands = load_error_bands().regimes
    if regime not in bands:
        known = ", ".join(repr(k) for k in bands)
        raise ArgumentError(f"no error band for regime {regime!r}; known: {known}", argument="regime", value=regime,
                            allowed=known)
    return bands[regime]


def expected_error(regime: Any) -> float | None:
    """A regime's median absolute relative error (``median_abs`` of its fit half) [1], or None without a regime or
    where it was not recorded.

    >>> expected_error(None) is None
    True
    """
    return None if regime is None else _band(regime).median_abs


def band_and_error(seconds: Any, regime: Any) -> dict:
    """``{"band": ..., "expected_error": ...}`` of a time answer of ``regime`` (:func:`error_band`,
    :func:`expected_error`), as the answers' records take them; both None where ``regime`` is None.

    >>> band_and_error(1.0, None)
    {'band': None, 'expected_error': None}
    """
    return {"band": error_band(seconds, regime), "expected_error": expected_error(regime)}


class Interval:
    """``interval(level)`` of a time answer that carries ``band`` (its 80% band): the same band, for the one level
    measured."""

    def interval(self, level: float = BAND_LEVEL) -> tuple[Any, Any] | None:
        """The band the measured time lies in for ``level`` of its regime's measurements: ``(low, high)`` [s]; None
        where nothing measured backs the answer (datasheet kernels).

        Parameters
        ----------
        level : float
            The coverage asked for; the shipped bands are measured at 0.8 only (``specs/error_bands.yaml``).

        Returns
        -------
        tuple or None
        """
        if not isinstance(level, (int, float)) or isinstance(level, bool) or abs(level - BAND_LEVEL) > 1e-9:
            raise ArgumentError(f"level={level!r}: the error bands are measured at {BAND_LEVEL} only",
                                argument="level", value=level, allowed=str(BAND_LEVEL))
        return self.band


def error_band(seconds: Any, regime: Any) -> tuple[Any, Any] | None:
    """The 80% band of a predicted time: where the measured time lies for 80% of the regime's measurements [s].

    Parameters
    ----------
    seconds : float or array
        The predicted time [s] (broadcast: one band per element).
    regime : str, ErrorBand or None
        The regime's name in ``specs/error_bands.yaml`` (``"kernel-calibrated"``, ``"step-transferred-host"``...,
        as :func:`kernel_regime`, :func:`step_regime` and :func:`serving_regime` name them), or a band record;
        None (a datasheet estimate) gives None.

    Returns
    -------
    tuple of (float or ndarray) or None
        ``(low, high)`` [s], shaped like ``seconds``; None for regime None.

    Notes
    -----
    With :math:`e = t_{predicted} / t_{measured} - 1` between the regime's :math:`q_{10}` and :math:`q_{90}`,

    .. math:: low = t / (1 + q_{90}), \\quad high = t / (1 + q_{10}).

    Examples
    --------
    >>> band = ErrorBand(q10=-0.1, q90=0.2, n=10, data=("hand.jsonl",))
    >>> low, high = error_band(1.0, band)
    >>> round(low, 4), round(high, 4)        # 1 / 1.2, 1 / 0.9
    (0.8333, 1.1111)
    >>> error_band([1.0, 2.0], band)[1].round(4)
    array([1.1111, 2.2222])
    >>> error_band(1.0, None) is None
    True
    """
    if regime is None:
        return None
    band = _band(regime)
    t = np.asarray(nonnegative_number(seconds, "seconds"), dtype=float)
    low, high = t / (1.0 + band.q90), t / (1.0 + band.q10)
    return (float(low), float(high)) if t.ndim == 0 else (low, high)


def fit_band(errors: Any) -> tuple[float, float]:
    r"""The band's edges ``(q10, q90)`` [1] from a regime's signed errors: their split-conformal 10% and 90% points.

    Parameters
    ----------
    errors : array
        Signed errors ``predicted / measured - 1`` of the fit half [1], at least one.

    Returns
    -------
    tuple of float
        ``(q10, q90)``: the :math:`k_{lo}`-th and :math:`k_{hi}`-th smallest errors.

    Notes
    -----
    Of :math:`n` errors sorted ascending, :math:`k_{lo} = \max(1, \lfloor (n + 1) / 10 \rfloor)` and
    :math:`k_{hi} = \min(n, \lceil 9 (n + 1) / 10 \rceil)` (split conformal prediction, Vovk et al. 2005;
    Lei et al. 2018): for a new error exchangeable with the fit half's (and :math:`n \ge 9`), each tail beyond the
    band has a chance of at most 10%, where the plain 10th and 90th percentiles of a few dozen errors cover less than
    80% of new ones. With thousands of errors the two agree; with under nine the band is the errors' range.

    References
    ----------
    Vovk, Gammerman and Shafer, "Algorithmic Learning in a Random World", Springer 2005.
    Lei, G'Sell, Rinaldo, Tibshirani and Wasserman, "Distribution-Free Predictive Inference for Regression",
    JASA 113 (2018).

    Examples
    --------
    >>> fit_band([-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])    # n = 11: the 1st and 11th
    (-0.3, 0.7)
    >>> q10, q90 = fit_band(np.linspace(-0.5, 0.5, 1001))                       # many: the percentiles
    >>> round(q10, 3), round(q90, 3)
    (-0.401, 0.401)
    """
    e = np.sort(np.asarray(errors, dtype=float).ravel())
    n = e.size
    if n == 0 or not np.all(np.isfinite(e)):
        raise ArgumentError("errors must be at least one finite number", argument="errors", value=errors,
                            allowed="finite signed errors")
    lo, hi = max(1, (n + 1) // 10), min(n, -(-9 * (n + 1) // 10))
    return float(e[lo - 1]), float(e[hi - 1])


def kernel_regime(source: str) -> str | None:
    """The regime of a kernel estimate by its source (``TimeEstimate.source``); None for "datasheet".

    Parameters
    ----------
    source : {"calibrated", "transferred", "datasheet"}

    Returns
    -------
    str or None
        ``"kernel-calibrated"``, ``"kernel-transferred"`` or None.

    >>> kernel_regime("transferred"), kernel_regime("datasheet")
    ('kernel-transferred', None)
    """
    return f"kernel-{source}" if source in ("calibrated", "transferred") else None


def step_regime(source: str, host_bound: bool) -> str | None:
    """The regime of a one-GPU training step by its kernels' source and whether the host set it.

    Parameters
    ----------
    source : {"calibrated", "transferred", "datasheet"}
        Where the step's kernel times came from.
    host_bound : bool
        Whether the GPU waited on the host's dispatch (``StepTime.host_bound``).

    Returns
    -------
    str or None
        ``"step-<source>-host"`` or ``"step-<source>-gpu"``; None for a datasheet step.

    >>> step_regime("calibrated", True)
    'step-calibrated-host'
    """
    if source not in ("calibrated", "transferred"):
        return None
    return f"step-{source}-{'host' if host_bound else 'gpu'}"


def serving_regime(source: str, engine: str) -> str | None:
    """The regime of a serving step: its engine, the kernels calibrated or transferred; None for a datasheet one.

    Parameters
    ----------
    source : {"calibrated", "transferred", "datasheet"}
        Where the step's kernel times came from.
    engine : {"graph", "compiled", "hf"}
        How the step is launched (``ServingTime.engine``).

    Returns
    -------
    str or None
        ``"serving-<engine>"`` or None. The serving bands were measured with the calibrated kernels; no
        transferred serving step is committed, so a transferred step takes its engine's band.

    >>> serving_regime("transferred", "graph"), serving_regime("datasheet", "hf")
    ('serving-graph', None)
    """
    return f"serving-{engine}" if source in ("calibrated", "transferred") else None
