"""The :class:`Calibration` record: what was measured on one GPU and the model fitted to it.

A calibration is one YAML file: the device and software it was measured with (device name,
driver, torch and CUDA versions, the clocks seen, the date), the measured points, the fitted
parameters of :mod:`gpumodel.calibration.model` and the fit's own error. Shipped calibrations
live in ``specs/calibrations/*.yaml``, one per GPU, keyed by the GPU's canonical name; users
load their own with :func:`load_calibration` and get the same validation (a
:class:`~gpumodel.records.specs.SpecError` naming the file and the field). Files are written
atomically: to a temporary file in the same folder, then ``os.replace``.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..records.gpu import GPUSpec
from ..records.specs import Catalog, SpecError, load_records
from .model import PARAMETERS, CalibrationModel, default_parameters
from .sustained import FP8_SLOWDOWN
from ..vocabulary.gpus import gpu as _gpu
from ..vocabulary import path_argument

#: parameters of records fitted to timings that counted the host's issue time (before 2026-12-04): host-time
#: floors of one ``torch.autograd.grad`` or optimizer call. The kernel-time model prices the GPU's work alone
#: (the host's cost is :mod:`gpumodel.training.hostcost`'s), so a record's values of these are dropped on loading; so is
#: ``strided_launch_s``, the generic elementwise kernel's extra fixed time, which its chain of dependent steps
#: (``strided_step_s``) replaced; and ``rows_per_sm_softmax``, now the warp softmax's occupancy.
RETIRED_PARAMETERS = frozenset({"attn_bwd_host_s", "naive_bwd_host_s", "loss_bwd_host_s", "adamw_host_s",
                                "adamw_host_tensor_s", "strided_launch_s", "rows_per_sm_softmax"})

__all__ = ["Calibration", "MeasuredPoint", "FitError", "load_calibration", "calibration_for",
           "list_calibrations", "CALIBRATIONS"]


#: parameters a record may carry that no kernel price uses and no datasheet default stands for: measured or absent
#: (absent, the GPU's prior gives them: :func:`gpumodel.calibration.estimate.power_share_threshold_for`)
MEASURED_PARAMETERS = ("power_share_threshold", FP8_SLOWDOWN)


class MeasuredPoint(BaseModel):
    """One timed kernel: the :mod:`gpumodel.core.ops` constructor (``op``), its arguments, the time [s]."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    op: str
    kernel: str = ""
    dtype: str
    shape: dict[str, float | bool | str]
    time_s: float = Field(gt=0)

    @classmethod
    def from_point(cls, point: Mapping[str, Any]) -> "MeasuredPoint":
        return cls(op=point["op"], kernel=point.get("kernel", ""), dtype=point["dtype"],
                   shape=dict(point["shape"]), time_s=float(f"{float(point['time_s']):.6g}"))

    def as_point(self) -> dict:
        return self.model_dump()


class FitError(BaseModel):
    """Absolute relative error of the model on a set of points: count, median, 90th percentile."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int = Field(ge=0)
    median: float = Field(ge=0)
    p90: float = Field(ge=0)


#: unit -> (lowest, highest, hint): wide bounds that no GPU's fitted rate or fixed time leaves, but that a value
#: written in the wrong unit does (a bandwidth of ``3.35`` meant as TB/s, a launch of ``4`` meant as us). Rates
#: have no upper bound: a fit marks a limit it never met with a huge rate.
_INF = float("inf")
_PLAUSIBLE = {
    "bytes/s": (1e8, _INF, "bytes/s: 3.35 TB/s is 3.35e12"),
    "FLOP/s": (1e8, _INF, "FLOP/s: 989 TFLOP/s is 9.89e14"),
    "elements/s": (1e3, _INF, "elements per second"),
    "1/s": (1e3, _INF, "per second"),
    "s": (0.0, 1.0, "seconds: 4 us is 4e-06"),
}


class Calibration(BaseModel):
    """A GPU's measured points and fitted efficiency-model parameters.

    Attributes
    ----------
    gpu : str
        Canonical name of the GPU spec it belongs to (``"h200-sxm"``).
    device_name : str
        What the driver calls the device (``"NVIDIA H200"``).
    sm_count : int
        SMs the device reported.
    parameters : dict
        Fitted model parameters, SI units (see :data:`gpumodel.calibration.model.PARAMETERS`).
    points : list of MeasuredPoint
        The measurements the parameters were fitted to.
    fit_error, validation_error : dict
        Per-family ``|predicted/measured - 1|`` on the fit points and on a separate set.
    measured_families : list of str
        The reporting families (:func:`~gpumodel.calibration.points.family_of`) the run measured; every parameter
        of another family keeps the value the fit started from (the shipped calibration carried to this GPU where
        an architecture prior applies). Empty in records written before it was kept.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str
    device_name: str
    sm_count: int = Field(ge=1)
    date: str
    driver_version: Optional[str] = None
    torch_version: Optional[str] = None
    cuda_version: Optional[str] = None
    clocks: dict[str, float] = Field(default_factory=dict)
    timer: str = "cuda events after warm-up, L2 flushed (256 MB write), median"
    mode: str = "full"
    parameters: dict[str, float]
    fit_error: dict[str, FitError] = Field(default_factory=dict)
    validation_error: dict[str, FitError] = Field(default_factory=dict)
    points: list[MeasuredPoint] = Field(default_factory=list)
    measured_families: list[str] = Field(default_factory=list)
    source: str = ""
    notes: str = ""

    @field_validator("parameters")
    @classmethod
    def _known_parameters(cls, value: dict[str, float]) -> dict[str, float]:
        value = {k: v for k, v in value.items() if k not in RETIRED_PARAMETERS}
        unknown = sorted(set(value) - set(PARAMETERS) - set(MEASURED_PARAMETERS) - {"flops_fp64", "flops_int8"})
        if unknown:
            raise ValueError(f"unknown model parameter(s) {unknown}; known: {sorted(PARAMETERS)}")
        bad = sorted(k for k, v in value.items() if not (v > 0 and v < float("inf")))
        if bad:
            raise ValueError(f"parameter(s) {bad} must be finite and > 0")
        missing = [k for k in ("launch_s", "bandwidth") if k not in value]
        if missing:
            raise ValueError(f"missing required parameter(s) {missing}")
        implausible = [f"{k}={v:g} ({_PLAUSIBLE[PARAMETERS[k][0]][2]})" for k, v in value.items()
                       if k in PARAMETERS and PARAMETERS[k][0] in _PLAUSIBLE
                       and not _PLAUSIBLE[PARAMETERS[k][0]][0] <= v <= _PLAUSIBLE[PARAMETERS[k][0]][1]]
        if implausible:
            raise ValueError("implausible value(s), parameters are in SI units: " + "; ".join(implausible))
        return value

    # ------------------------------------------------------------------ use
    def model(self) -> CalibrationModel:
        """The calibrated :class:`~gpumodel.calibration.model.CalibrationModel`."""
        measured = {p.op for p in self.points}
        measured |= {f"matmul:{p.dtype}" for p in self.points if p.op in ("matmul", "bmm")}
        if not self.points:  # a record without its points: the families it says it measured, else those it reports
            families = self.measured_families or [f for f in self.fit_error if f != "overall"]
            measured = {_op_of_family(f) for f in families}
            measured |= {f"matmul:{k[6:]}" for k in self.parameters if k.startswith("flops_")}
        # a record fitted before a mechanism existed lacks its parameters: those take the datasheet default
        # (GEMM rates excepted: a dtype the record has no rate for stays unsupported)
        defaults = {k: v for k, v in default_parameters(_gpu(self.gpu)).items()
                    if k not in self.parameters and (not k.startswith("flops_") or k.endswith("_mm"))}
        return CalibrationModel({**defaults, **self.parameters}, self.sm_count, calibrated=True,
                                name=f"{self.gpu} calibration of {self.date[:10]}", measured=frozenset(measured),
                                gpu=self.gpu)

    def efficiencies(self, gpu: Any = None) -> dict[str, float]:
        """Fitted rates as fractions of the datasheet (``flops_bf16 / peak bf16``, ``bandwidth / HBM``)."""
        g = _gpu(gpu or self.gpu) if not hasattr(gpu, "peak_flops") else gpu
        out = {"bandwidth": self.parameters["bandwidth"] / g.memory_bandwidth}
        for key, value in self.parameters.items():
            if key.startswith("flops_") and g.supports(key[6:]):
                out[key] = value / g.peak_flops(key[6:])
        return out

    @classmethod
    def from_environment(cls, gpu: str, env: Mapping[str, Any], parameters: Mapping[str, float], sm_count: int,
                         points: list[MeasuredPoint], fit_error: Mapping[str, Any] | None = None,
                         validation_error: Mapping[str, Any] | None = None, source: str = "",
                         notes: str = "", measured_families: list[str] | None = None) -> "Calibration":
        clocks = {}
        for key in ("sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "sm_clock_mhz_end", "mem_clock_mhz_end",
                    "power_limit_w"):
            try:
                clocks[key] = float(env[key])
            except (KeyError, TypeError, ValueError):
                pass
        return cls(gpu=gpu, device_name=str(env.get("device_name", gpu)), sm_count=int(sm_count),
                   date=str(env.get("date") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
                   driver_version=env.get("driver_version"), torch_version=env.get("torch_version"),
                   cuda_version=env.get("cuda_version"), clocks=clocks,
                   timer=str(env.get("timer") or cls.model_fields["timer"].default),
                   mode=str(env.get("mode", "full")), parameters=dict(parameters),
                   fit_error=dict(fit_error or {}), validation_error=dict(validation_error or {}),
                   points=list(points), measured_families=sorted(measured_families or []), source=source,
                   notes=notes)

    # ------------------------------------------------------------------ files
    def to_yaml(self) -> str:
        data = self.model_dump(mode="json")
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120, allow_unicode=True)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the record as YAML atomically (temporary file in the same folder, then ``os.replace``)."""
        path = Path(path).expanduser()
        text = self.to_yaml()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        umask = os.umask(0)
        os.umask(umask)
        try:
            os.chmod(tmp, 0o666 & ~umask)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return path

    def __repr__(self) -> str:
        p = self.parameters
        rates = ", ".join(f"{k[6:]} {p[k] / 1e12:.0f} TFLOP/s" for k in p if k.startswith("flops_"))
        val = self.validation_error.get("overall")
        err = f"; validation median error {val.median:.1%}, p90 {val.p90:.1%}" if val else ""
        return (f"Calibration({self.gpu} = {self.device_name}, {self.date[:10]}, {len(self.points)} kernels: "
                f"launch {p['launch_s'] * 1e6:.2f} us, bandwidth {p['bandwidth'] / 1e12:.2f} TB/s, {rates}{err})")

    __str__ = __repr__


def _op_of_family(family: str) -> str:
    """The op a reporting family belongs to: ``attention_decode`` -> ``attention``, ``matmul_weight_only`` ->
    ``matmul``, ``embedding_bwd`` -> ``embedding``.

    >>> [_op_of_family(f) for f in ("attention_naive_bwd", "matmul_weight_only", "cross_entropy_bwd", "softmax")]
    ['attention', 'matmul', 'cross_entropy', 'softmax']
    """
    for op in ("attention", "matmul"):
        if family.startswith(op + "_"):
            return op
    return family.removesuffix("_bwd").removesuffix("_fwd")


def load_calibration(path: str | os.PathLike) -> Calibration:
    """Read and validate one calibration YAML file.

    Parameters
    ----------
    path : path-like
        A ``.yaml`` file holding one calibration record (as ``gpumodel calibrate`` writes it).

    Returns
    -------
    Calibration
        The GPU's fitted parameters (SI units), the measured points [s] and the fit and validation errors [1].

    Raises
    ------
    SpecError
        The file is missing, not YAML, or a field is invalid (the message names file and field).
    """
    path = path_argument(path, "path").expanduser()
    if not path.is_file():
        raise SpecError(f"{path}: no such calibration file")
    records = load_records(path, Calibration)
    if len(records) != 1:
        raise SpecError(f"{path}: expected one calibration record, found {len(records)}")
    return records[0]


CALIBRATIONS: Catalog[Calibration] = Catalog("calibrations", Calibration, key=lambda r: r.gpu,
                                             aliases=lambda r: ())


def list_calibrations() -> list[str]:
    """Canonical names of the GPUs with a shipped (or ``GPUMODEL_SPEC_PATH``) calibration.

    Returns
    -------
    list of str
        Canonical GPU names (as :func:`gpumodel.gpu` gives them), sorted.
    """
    return CALIBRATIONS.names()


def calibration_for(gpu: Any) -> Calibration | None:
    """The shipped calibration of a GPU (a :class:`~gpumodel.records.gpu.GPUSpec` or name), or ``None``.

    Parameters
    ----------
    gpu : GPUSpec or str
        A GPU record, name or alias.

    Returns
    -------
    Calibration or None
        The GPU's shipped (or ``GPUMODEL_SPEC_PATH``) calibration; None for a GPU without one or an
        unknown name.
    """
    name = gpu.name if hasattr(gpu, "name") else str(gpu)
    if name in CALIBRATIONS:
        return CALIBRATIONS.get(name)
    if isinstance(gpu, GPUSpec):  # a record's name is canonical: no calibration under another name
        return None
    try:
        canonical = _gpu(name).name
    except Exception:  # noqa: BLE001 - an unknown GPU simply has no calibration
        return None
    return CALIBRATIONS.get(canonical) if canonical in CALIBRATIONS else None
