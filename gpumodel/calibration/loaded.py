"""The slowdown of compute-bound kernels under sustained load, against a fitted model's price of them.

:func:`~gpumodel.calibration.sustained.slowdown` compares each kernel's back-to-back time with its own timing after
an idle pause. A calibration's fitted rates come from kernels timed for about a tenth of a second each, while the
SM clock falls from its boost under the power limit (within 0.1 s on an H100: ``tests/data/calibration/clock_ramp``),
so they already carry part of that fall; :func:`model_slowdown` measures what is left, which is what
:meth:`CalibrationModel.sustained <gpumodel.calibration.model.CalibrationModel.sustained>` divides the compute rates
by. Three H100 machines measured on three days agree on it within half a point (1.065-1.069 against the shipped
calibration carried to the H100), where their slowdowns against the isolated timings part by seven (1.061-1.132).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .model import predict
from .points import point_set
from .sustained import slowdown

__all__ = ["model_slowdown"]


def model_slowdown(model: Any, rows: list[dict], last_windows: int = 8) -> float:
    """How much slower compute-bound kernels run under sustained load than ``model`` prices them [ratio, >= 1].

    :func:`~gpumodel.calibration.sustained.slowdown` with each kernel's back-to-back time per call compared with the
    model's prediction, not with the kernel's own isolated timing. A calibration times each kernel for about a tenth
    of a second, while the clock falls from its boost (the clock ramp: ``bench/measure_clock_ramp.py``), so its
    fitted compute rates already carry part of the slowdown; compared with the isolated timing, that part would be
    counted twice.

    Parameters
    ----------
    model : CalibrationModel
        The fitted (or transferred) model of the GPU the rows were measured on.
    rows : list of dict
        :func:`~gpumodel.calibration.sustained.measure_sustained`'s rows (``op``, ``dtype``, ``shape``, ``sustained``).
    last_windows : int
        Windows at the end of each back-to-back run whose median time per call is compared.

    Returns
    -------
    float
        :math:`\\max(1, \\mathrm{median}_i\\, t_{sus,i} / \\hat t_i)` over the compute-bound kernels [ratio].

    Examples
    --------
    An 8192^3 bf16 GEMM that the shipped H200 calibration prices at 1.49 ms, timed at 1.64 ms per call back to back:

    >>> from gpumodel.calibration.estimate import model_for
    >>> gemm = {"op": "matmul", "dtype": "bf16", "shape": {"m": 8192, "n": 8192, "k": 8192}}
    >>> round(model_slowdown(model_for("h200")[0], [{**gemm, "sustained": [{"per_call_s": 1.6424e-3}] * 8}]), 2)
    1.1
    """
    predicted: list[float | None] = []
    for row in rows:   # a file's header row (the environment) has no kernel
        if "shape" in row and "op" in row:
            (_, op, _, _), = point_set([{**row, "time_s": 1.0}]).groups
            predicted.append(float(np.ravel(predict(model, op).time_s)[0]))
        else:
            predicted.append(None)
    return max(1.0, slowdown(rows, last_windows, reference=predicted))
