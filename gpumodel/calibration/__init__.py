"""Calibration: measure a GPU with torch, fit a small efficiency model, save it as YAML.

Submodules (imported on first use; this package never imports torch itself):

* :mod:`~gpumodel.calibration.bench` - torch microbenchmarks (the ``torch`` extra);
* :mod:`~gpumodel.calibration.model` - the fitted efficiency model (numpy only);
* :mod:`~gpumodel.calibration.fit` - least-squares fit of that model to measured points (read and grouped by
  :mod:`~gpumodel.calibration.points`);
* :mod:`~gpumodel.calibration.record` - the :class:`Calibration` record, YAML load/save, shipped catalog;
* :mod:`~gpumodel.calibration.priors` - per-architecture achieved fractions of datasheet peaks (cited);
* :mod:`~gpumodel.calibration.transfer` - a calibration carried to a GPU without one.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Calibration", "load_calibration", "calibration_for", "list_calibrations", "fit_calibration",
           "calibrate", "CalibrationModel", "bench", "model", "fit", "record", "priors", "transfer"]

_EXPORTS = {
    "Calibration": "record", "load_calibration": "record", "calibration_for": "record",
    "list_calibrations": "record", "fit_calibration": "fit", "calibrate": "fit",
    "CalibrationModel": "model",
}
_SUBMODULES = {"bench", "model", "fit", "record", "priors", "transfer"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpumodel.calibration' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
