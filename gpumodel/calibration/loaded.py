"""The slowdown of compute-bound kernels under sustained load, against a fitted model's price of them.

:func:`~gpumodel.calibration.sustained.slowdown` compares each kernel's back-to-back time with its own timing after
an idle pause. A calibration's fitted rates come from kernels timed for about a tenth of a second each, while the
SM clock falls from its boost under the power limit (within 0.1 s on an H100: ``tests/data/calibration/clock_ramp``),
so they already carry part of that fall; :func:`model_slowdown` measures what is left, which is what
:meth:`CalibrationModel.sustained <gpumodel.calibration.model.CalibrationModel.sustained>` divides the compute rates
by. Three H100 machines measured on three days agree on it within half a point (1.065-1.069 against the shipped
calibration carried to the H100), where their slowdowns against the isolated timings part by seven (1.061-1.132).

fp8 GEMMs keep their own (:func:`model_slowdowns`, the parameter ``sustained_slowdown_fp8``): an fp8 GEMM runs in half
the time of the bf16 GEMM of its shape, so a calibration's timing of it ends before the clock has fallen as far, and
its fitted rate carries less of the fall. Against the model, the fp8 GEMM of the sustained kernels runs 1.17-1.19 times
its price back to back on five runs (the H200's, three H100 machines', and a user run's), the bf16 GEMMs and the
flash-attention backward 1.04-1.11 times theirs; one factor for all (their median) prices sustained fp8 GEMMs 6-11%
fast.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .model import predict
from .points import point_set
from .sustained import FP8_SLOWDOWN, slowdown

__all__ = ["model_slowdown", "model_slowdowns", "own_slowdowns", "transfer_row", "FP8_SLOWDOWN"]


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
    rows = list(rows)
    for row in rows:   # a file's header row (the environment) has no kernel
        if "shape" in row and "op" in row:
            (_, op, _, _), = point_set([{**row, "time_s": 1.0}]).groups
            predicted.append(float(np.ravel(predict(model, op).time_s)[0]))
        else:
            predicted.append(None)
    return max(1.0, slowdown(rows, last_windows, reference=predicted))


def model_slowdowns(model: Any, rows: list[dict], last_windows: int = 8) -> dict:
    """The record's sustained-load parameters from the back-to-back kernels ``rows``: ``sustained_slowdown``
    (:func:`model_slowdown` over every compute-bound kernel) and, where the rows hold an fp8 GEMM,
    ``sustained_slowdown_fp8`` (:data:`FP8_SLOWDOWN`: :func:`model_slowdown` over the fp8 GEMMs alone), each rounded
    to four significant figures [ratio].

    Examples
    --------
    >>> from gpumodel.calibration.estimate import model_for
    >>> gemm = {"op": "matmul", "dtype": "bf16", "shape": {"m": 8192, "n": 8192, "k": 8192}}
    >>> fp8 = {**gemm, "dtype": "fp8"}
    >>> m = model_for("h200")[0]
    >>> rows = [{**gemm, "sustained": [{"per_call_s": 1.6424e-3}] * 8}, {**fp8, "sustained": [{"per_call_s": 9.0e-4}] * 8}]
    >>> sorted(model_slowdowns(m, rows))
    ['sustained_slowdown', 'sustained_slowdown_fp8']
    """
    rows = list(rows)
    out = {"sustained_slowdown": float(f"{model_slowdown(model, rows, last_windows):.4g}")}
    fp8 = [r for r in rows if r.get("op") == "matmul" and r.get("dtype") == "fp8" and r.get("sustained")]
    if fp8:
        out[FP8_SLOWDOWN] = float(f"{model_slowdown(model, fp8, last_windows):.4g}")
    return out


def transfer_row(kind: str, reference: float, value: float, datasheet_ratio: float = float("nan"),
                 prior_ratio: float = float("nan")) -> dict:
    """One parameter's row of a transfer's table: how it was carried (``kind``), the reference GPU's value, the
    target's, and the datasheet and prior ratios that carried it (NaN where none did).

    >>> transfer_row("default", float("nan"), 0.8)["kind"]
    'default'
    """
    return {"kind": kind, "reference": reference, "value": value, "datasheet_ratio": datasheet_ratio,
            "prior_ratio": prior_ratio}


def own_slowdowns(params: dict, table: dict, own: Any, reference: dict) -> list[str]:
    """Put a target GPU's own measured slowdowns into its transferred ``params`` (and their ``table`` rows), in place.

    ``own`` is the target's prior entry (:class:`~gpumodel.calibration.priors.GPUPrior`, or None): its
    ``sustained_slowdown`` and ``sustained_slowdown_fp8`` replace the reference's; ``reference`` the reference
    record's parameters. A target without fp8 GEMMs (no ``flops_fp8`` carried) keeps no fp8 slowdown.

    Returns
    -------
    list of str
        The parameters dropped (``sustained_slowdown_fp8`` where the target has no fp8 GEMMs).
    """
    dropped = []
    if own is not None and own.sustained_slowdown is not None and "sustained_slowdown" in params:
        params["sustained_slowdown"] = own.sustained_slowdown
        table["sustained_slowdown"].update(kind="measured", value=own.sustained_slowdown)
    if "flops_fp8" not in params and FP8_SLOWDOWN in params:   # no fp8 GEMMs, nothing for it to slow
        del params[FP8_SLOWDOWN], table[FP8_SLOWDOWN]
        dropped.append(FP8_SLOWDOWN)
    if own is not None and own.sustained_slowdown_fp8 is not None and "flops_fp8" in params:
        params[FP8_SLOWDOWN] = own.sustained_slowdown_fp8
        table[FP8_SLOWDOWN] = transfer_row("measured", reference.get(FP8_SLOWDOWN, float("nan")),
                                           own.sustained_slowdown_fp8)
    return dropped
