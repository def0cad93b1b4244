"""Fit the efficiency model to measured points (numpy least squares in log-time), and score it.

A point is a dict ``{"op", "dtype", "shape", "time_s", ...}`` as :mod:`~gpumodel.calibration.bench`
writes it; :mod:`gpumodel.calibration.points` (re-exported here) reads them and groups them by (op, dtype,
direction) into broadcast :class:`~gpumodel.core.ops.OpCost` arrays, so one model evaluation is a few dozen
numpy calls.

The fit minimises :math:`\\sum_i \\rho(\\log \\hat t_i - \\log t_i)` over the logarithms of the
parameters (all positive) with Levenberg-Marquardt and a soft-L1 (pseudo-Huber) loss, so that a
single odd kernel (a cuBLAS heuristic miss) does not drag the named rates.

References
----------
K. Levenberg (1944); D. Marquardt, "An algorithm for least-squares estimation of nonlinear
parameters", SIAM J. Appl. Math. 11(2), 1963.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .model import GEMM_DTYPES, CalibrationModel, default_parameters, predict
from .parameters import GENERIC_ROW_FAMILIES
from .points import (PointSet, family_of, load_points, median_of_runs, median_time, op_family, point_set,
                     repeat_files)
from .composite import WEIGHT_ONLY_PATH
from ..vocabulary.gpus import gpu as _gpu
from .record import Calibration, MeasuredPoint
from .loaded import FP8_SLOWDOWN, model_slowdowns
from .powermix import MIX_OP, power_share_threshold
from .transfer import transfer_for
from ..records.specs import UnknownNameError
from . import bench

__all__ = ["PointSet", "load_points", "median_time", "median_of_runs", "repeat_files", "point_set", "fit_model",
           "starting_parameters",
           "relative_errors", "accuracy_table", "fit_calibration", "calibrate", "gpu_for_device", "datasheet_bounds", "UPPER_BOUNDS",
           "tied_rates", "family_of", "op_family"]

#: parameters that are fractions or exponents, with their upper bounds
UPPER_BOUNDS = {**{f"unaligned_eff_{f}": 1.0 for f in GENERIC_ROW_FAMILIES},
                "overlap_p": 16.0, "vector_overlap_p": 16.0, "row_overlap_p": 16.0, "norm_overlap_p": 16.0,
                "attn_overlap_p": 16.0, "strided_overlap_p": 16.0,
                "row_latency_s": 1e-4, "kernel_gap_s": 1e-5,
                # `bandwidth` is the copy rate; read-only streams (a sum, a skinny GEMM's big operand) have no
                # read/write bus turnarounds and may pass it, up to about the datasheet (4.8 / 4.2 TB/s on the H200)
                "bw_eff_reduce_sum": 1.15, "bw_eff_stream": 1.15, "bw_eff_gemm": 1.0, "bw_eff_attention": 1.15,
                "bw_eff_int4_mm": 1.15, "bw_eff_int8_mm": 1.15, "attn_decode_wave_share": 1.0,
                **{f"bw_eff_{f}": 1.0 for f in ("elementwise", "softmax", "layer_norm", "rms_norm",
                                                "embedding", "adamw_step")},
                **{f"rows_per_sm_{f}": 32.0 for f in GENERIC_ROW_FAMILIES}}
LOWER_BOUNDS = {"overlap_p": 1.0, "vector_overlap_p": 1.0, "row_overlap_p": 1.0, "norm_overlap_p": 1.0,
                "attn_overlap_p": 1.0, "unaligned_sm_fill": 1.0,
                "strided_overlap_p": 1.0}
_HUBER = 0.02  # soft-L1 scale in log-time (2 %): close to least absolute deviations, i.e. to the median
#: pseudo-measurements of its starting value each free parameter carries in a fit that starts from a transfer
#: (:func:`fit_model`'s ``anchor``): one kernel's worth, so that what the points do not determine stays transferred
ANCHOR_POINTS = 1.0


def _predict_all(model: CalibrationModel, ps: PointSet) -> np.ndarray:
    out = np.empty(len(ps.points))
    for _, op, _, idx in ps.groups:
        out[idx] = predict(model, op).time_s
    return out


def relative_errors(model: CalibrationModel, ps: PointSet) -> np.ndarray:
    """``predicted / measured - 1`` for every point."""
    return _predict_all(model, ps) / ps.times - 1.0


def _free_parameters(ps: PointSet, params: Mapping[str, float]) -> list[str]:
    """The parameters the points can determine: those of the mechanisms of the families measured."""
    fams = {fam for fam, *_ in ps.groups}
    dtypes = {op.dtype.value for fam, op, *_ in ps.groups if fam in ("matmul", "bmm")}
    weights = {op.shape.get("weight_dtype") for fam, op, *_ in ps.groups if fam == "matmul_weight_only"}
    attention = {f for f in fams if f.startswith("attention")}
    # composite ops are priced by the kernels they launch: their families free those kernels' parameters too
    uses = set(fams)
    if fams & {"attention_naive_fwd", "attention_naive_bwd"}:
        uses |= {"bmm", "elementwise", "softmax"}
    if fams & {"cross_entropy", "cross_entropy_bwd"}:
        uses |= {"elementwise", "softmax"}
    if fams & {"embedding_bwd", "kv_cache_write"}:
        uses |= {"elementwise"}
    if "matmul_weight_only" in fams:
        uses |= {"elementwise", "matmul", "reduce_sum"}
    free = ["launch_s", "bandwidth"]
    if fams & {*attention, "cross_entropy", "cross_entropy_bwd", "embedding_bwd", "adamw_step", "kv_cache_write",
               "matmul_weight_only"}:
        free += ["kernel_gap_s"]
    if uses - {"matmul", "bmm", *attention}:
        free += ["vector_overlap_p"]
    if uses & {"matmul", "bmm"}:
        free += ["overlap_p", "l2_bandwidth", "unaligned_sm_fill", "tile_overhead_s", "unaligned_flops", "unaligned_flops_wide",
                 "unaligned_tile_overhead_s", "wmma_tile_overhead_s", "wmma_flops", "sm_bandwidth", "split_overhead_s", "stream_overhead_s", "bw_eff_stream", "bw_eff_gemm"]
        free += [f"flops_{d}" for d in GEMM_DTYPES if d in dtypes and f"flops_{d}" in params]
    if "elementwise" in uses:
        free += ["vector_flops"]
    rows = sorted(uses & {"softmax", "layer_norm", "rms_norm", "reduce_sum", "embedding", "adamw_step"})
    if set(rows) & set(GENERIC_ROW_FAMILIES):
        free += ["row_latency_s", "norm_overlap_p"]
    if uses & {"softmax", "reduce_sum"}:
        free += ["mem_latency_s", "block_sync_s", "row_overlap_p"]
    if set(rows) & set(GENERIC_ROW_FAMILIES):
        free += ["row_rate_norm_moments", "norm_moments_row_s", "row_rate_norm_forward", "norm_forward_row_s"]
    for fam in rows:
        free += [f"bw_eff_{fam}"]
        if fam in GENERIC_ROW_FAMILIES:
            free += [f"row_rate_{fam}", f"rows_per_sm_{fam}", f"unaligned_eff_{fam}"]
    if "softmax" in uses:
        free += ["softmax_warp_step_s", "softmax_reg_step_s",
                 *(f"elem_rate_softmax_{k}" for k in ("warp", "reg", "block"))]
    if "reduce_sum" in uses:
        free += ["sum_block_s", "sum_warp_s", "sum_step_s", "global_reduce_s", "sum_overlap_p"]
    if attention - {"attention_naive_fwd", "attention_naive_bwd"}:
        free += ["attn_overlap_p", "attn_causal_diag", "sm_bandwidth"]
    for d in ("fwd", "bwd"):
        if f"attention_{d}" in fams or (d == "fwd" and "attention_decode" in fams):
            free += [f"attn_flops_{d}", f"attn_score_rate_{d}", f"attn_tile_overhead_{d}_s"]
            free += ["attn_kv_block_s"] if d == "fwd" else []
    if "attention_decode" in fams:
        free += ["bw_eff_attention", "attn_flops_fa2", "attn_tile_overhead_fa2_s", "attn_tile_overhead_decode_s",
                 "attn_decode_wave_share"]
    strided = any(op.shape.get("strided") for fam, op, *_ in ps.groups if fam == "elementwise")
    if strided or fams & {"attention_naive_fwd", "attention_naive_bwd"}:
        free += ["strided_elem_rate"]
    if strided:
        free += ["strided_step_s", "strided_operand_rate", "strided_overlap_p"]
    if any(op.shape.get("strided") and op.shape.get("concat") for fam, op, *_ in ps.groups if fam == "elementwise"):
        free += ["concat_step_s"]
    if fams & {"cross_entropy", "cross_entropy_bwd"}:
        free += ["nll_step_s", "bw_eff_log_softmax", "bw_eff_cast_copy"]
    if "embedding_bwd" in fams:
        free += ["embedding_token_s", "embedding_sort_s", "embedding_segment_rate"]
    if "adamw_step" in fams:
        free += ["adamw_elem_rate"]
    if "kv_cache_write" in fams:
        free += ["index_copy_rate"]
    for w in sorted(x for x in weights if x and WEIGHT_ONLY_PATH[x] not in ("dequant_linear", "scaled_mm_dynamic")):
        free += [f"bw_eff_{w}_mm", f"flops_{w}_mm"]
    return list(dict.fromkeys(k for k in free if k in params))


def tied_rates(gpu: Any) -> dict[str, str]:
    """Rates the fit moves together, ``{follower: leader}``: fp16 GEMMs follow bf16 where the datasheet gives
    the two the same dense tensor-core peak (every NVIDIA GPU since Ampere: the same ``mma`` throughput for
    either 16-bit input with fp32 accumulation, which is what PyTorch runs). Left apart, the points cannot
    tell ``flops_fp16`` from the shared GEMM parameters, and refits of nearly the same points wander by 20%.
    """
    both = gpu.supports("fp16") and gpu.supports("bf16")
    return {"flops_fp16": "flops_bf16"} if both and gpu.peak_flops("fp16") == gpu.peak_flops("bf16") else {}


def _soft_l1(r: np.ndarray) -> np.ndarray:
    """Residuals in log-time through the soft-L1 (pseudo-Huber) loss of scale ``_HUBER``, signed."""
    return _HUBER * np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + (r / _HUBER) ** 2) - 1.0))


def fit_model(ps: PointSet, start: CalibrationModel, iterations: int = 60, free: list[str] | None = None,
              upper: Mapping[str, float] | None = None,
              tied: Mapping[str, str] | None = None, anchor: float = 0.0) -> tuple[CalibrationModel, dict]:
    """Levenberg-Marquardt fit of ``start``'s parameters to the points; returns ``(model, report)``.

    ``upper`` adds upper bounds (e.g. the datasheet peaks for the ``flops_*`` rates); ``tied`` maps a
    parameter to the one whose fitted value it takes (:func:`tied_rates`). ``anchor`` [points] adds, for each
    free parameter, that many pseudo-measurements of its starting value: a residual
    :math:`\\log(x / x_0)` through the same soft-L1 loss as a kernel's, so a parameter moves from where the fit
    started as far as the points pull it, and a combination the points cannot tell apart (two rates that only
    their ratio decides, a row kernel's dozen parameters over a handful of rows) stays where it started instead
    of wandering to whatever fits the measured shapes best (:data:`ANCHOR_POINTS`).
    """
    free = free or _free_parameters(ps, start.params)
    tied = {k: v for k, v in (tied or {}).items() if v in free and k in start.params}
    free = [k for k in free if k not in tied]
    start = start.replace(**{k: min(v, {**UPPER_BOUNDS, **(upper or {})}.get(k, v)) for k, v in start.params.items()})
    bounds_hi = {**UPPER_BOUNDS, **(upper or {})}
    logt = np.log(ps.times)
    lo = np.array([math.log(LOWER_BOUNDS.get(k, 1e-30)) for k in free])
    hi = np.array([math.log(bounds_hi.get(k, 1e30)) for k in free])

    def model_at(x: np.ndarray) -> CalibrationModel:
        values = {k: float(math.exp(v)) for k, v in zip(free, x)}
        return start.replace(**values, **{k: values[v] for k, v in tied.items()})

    x = x0 = np.clip(np.array([math.log(start.params[k]) for k in free]), lo, hi)
    w = math.sqrt(max(float(anchor), 0.0))

    def residual(x: np.ndarray) -> np.ndarray:
        r = _soft_l1(np.log(_predict_all(model_at(x), ps)) - logt)
        return np.concatenate([r, w * _soft_l1(x - x0)]) if w else r

    r = residual(x)
    # which points each parameter moves (a model evaluation per parameter, once): the Jacobian then
    # re-evaluates only those groups, which is most of the fit's time saved
    base = model_at(x)
    touched = []
    for j, key in enumerate(free):
        xj = x.copy()
        xj[j] += 0.05
        moved = model_at(xj)
        touched.append([g for g, (_, op, _, idx) in enumerate(ps.groups)
                        if not np.allclose(predict(moved, op).time_s, predict(base, op).time_s, rtol=1e-12)])

    def residual_groups(xv: np.ndarray, groups: list[int], out: np.ndarray) -> np.ndarray:
        m = model_at(xv)
        out = out.copy()
        for g in groups:
            _, op, _, idx = ps.groups[g]
            out[idx] = _soft_l1(np.log(np.asarray(predict(m, op).time_s, dtype=float)) - logt[idx])
        if w:
            out[len(logt):] = w * _soft_l1(xv - x0)
        return out

    cost, lam, h = float(r @ r), 1e-2, 1e-4
    for it in range(iterations):
        J = np.zeros((r.size, x.size))
        for j in range(x.size):
            xj = x.copy()
            xj[j] += h
            J[:, j] = (residual_groups(xj, touched[j], r) - r) / h
        A, g = J.T @ J, J.T @ r
        improved = False
        while lam < 1e10:
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
            x_new = np.clip(x + step, lo, hi)
            r_new = residual(x_new)
            c_new = float(r_new @ r_new)
            if c_new < cost:
                improved = cost - c_new > 1e-10 * cost
                x, r, cost, lam = x_new, r_new, c_new, max(lam / 3.0, 1e-7)
                break
            lam *= 4.0
        if not improved:
            break
    model = model_at(x)
    return model, {"free": free, "tied": dict(tied), "iterations": it + 1, "cost": cost}


def datasheet_bounds(gpu: Any) -> dict[str, float]:
    """Upper bounds no fitted rate may pass: the datasheet's dense peaks and bandwidth."""
    out = {"bandwidth": gpu.memory_bandwidth, "sm_bandwidth": gpu.memory_bandwidth}
    for d in GEMM_DTYPES:
        if gpu.supports(d):
            out[f"flops_{d}"] = gpu.peak_flops(d)
    bf16 = gpu.peak_flops("bf16") if gpu.supports("bf16") else gpu.peak_flops("fp16")
    out.update(unaligned_flops=bf16, unaligned_flops_wide=bf16, wmma_flops=bf16, attn_flops_fwd=bf16, attn_flops_bwd=bf16,
               attn_flops_fa2=bf16, vector_flops=gpu.peak_flops("fp32"), attn_score_rate_fwd=1e16, attn_score_rate_bwd=1e16)
    return out


def accuracy_table(model: CalibrationModel, ps: PointSet) -> dict[str, dict[str, float]]:
    """Per-family and overall ``{"n", "median", "p90"}`` of ``|predicted / measured - 1|``."""
    err = np.abs(relative_errors(model, ps))
    fams = ps.families()
    table = {}
    for fam in sorted(set(fams)):
        e = err[fams == fam]
        table[fam] = {"n": int(e.size), "median": round(float(np.median(e)), 4),
                      "p90": round(float(np.percentile(e, 90)), 4)}
    table["overall"] = {"n": int(err.size), "median": round(float(np.median(err)), 4),
                        "p90": round(float(np.percentile(err, 90)), 4)}
    return table


def fit_calibration(points: list[dict], gpu: Any, environment: Mapping[str, Any] | None = None,
                    keep_points: bool = True, validation: list[dict] | None = None, source: str = "",
                    sustained_slowdown: float | None = None, anchor: float | None = None,
                    sustained_rows: list[dict] | None = None):
    """Fit a :class:`~gpumodel.calibration.record.Calibration` for ``gpu`` to measured ``points``.

    ``validation`` (points not used for the fit) fills the record's ``validation_error``;
    ``sustained_rows`` (measured: :func:`gpumodel.calibration.sustained.measure_sustained`) give the parameter
    ``sustained_slowdown``, against the fitted model (:func:`~gpumodel.calibration.loaded.model_slowdown`), and the fp8
    GEMMs' own ``sustained_slowdown_fp8`` where they hold one (:func:`~gpumodel.calibration.loaded.model_slowdowns`); a
    given ``sustained_slowdown`` is kept as it is. No fit touches them.

    Parameters
    ----------
    points : list of dict
        Measured kernels, as :func:`gpumodel.calibration.bench.run_benchmarks` returns them: ``op``, ``dtype``,
        ``shape`` (the op's arguments) and ``time_s`` [s]; points without a time are skipped.
    gpu : GPUSpec or str
        The GPU measured (a record, name or alias); its datasheet gives the starting parameters and bounds.
    environment : mapping, optional
        What the benchmark recorded about the machine (``device_name``, ``sm_count``, clocks [MHz], driver,
        torch and CUDA versions, ``mode``, ``timer``); the GPU's SM count when it gives none.
    keep_points : bool
        Store the measured points in the record.
    validation : list of dict, optional
        Measured points not used for the fit (same form as ``points``).
    source : str
        Where the measurements come from, in words (kept in the record).
    sustained_slowdown : float, optional
        Slowdown of compute-bound kernels under sustained load, over the fitted model [ratio, >= 1].
    anchor : float, optional
        Pseudo-measurements of its starting value per free parameter [points] (:func:`fit_model`); default
        :data:`ANCHOR_POINTS` where the fit starts from a transfer, else 0.
    sustained_rows : list of dict, optional
        Compute-bound kernels timed alone and back to back on the same GPU (not with ``sustained_slowdown``); mixes of
        a GEMM and a memory-bound filler among them (``op`` ``"power_mix"``) give the parameter
        ``power_share_threshold`` (:func:`~gpumodel.calibration.powermix.power_share_threshold`).

    Returns
    -------
    Calibration
        The GPU's fitted parameters (SI units), the points [s] (when kept), the fit and validation errors
        (count, median and 90th percentile of ``|predicted/measured - 1|`` per op family) [1] and the families
        measured.
    """
    g = _gpu(gpu) if isinstance(gpu, str) else gpu
    env = dict(environment or {})
    sm = int(env.get("sm_count") or g.sm_count)
    start = CalibrationModel(starting_parameters(g), sm, calibrated=False, name=g.name, gpu=g)
    ps = point_set(points)
    moved = transfer_for(g)
    anchor = (ANCHOR_POINTS if moved is not None else 0.0) if anchor is None else anchor
    model, report = fit_model(ps, start, upper=datasheet_bounds(g), tied=tied_rates(g), anchor=anchor)
    acc = accuracy_table(model, ps)
    kept = [MeasuredPoint.from_point(p) for p in ps.points] if keep_points else []
    val = accuracy_table(model, point_set(validation)) if validation else {}
    params = {k: float(f"{v:.6g}") for k, v in model.params.items()}
    if sustained_rows is not None:
        if sustained_slowdown is not None:
            raise ValueError("give sustained_slowdown or sustained_rows, not both")
        slowdowns = model_slowdowns(model, [r for r in sustained_rows if r.get("op") != MIX_OP])
        sustained_slowdown = slowdowns.pop("sustained_slowdown")
        params.update(slowdowns)                                   # the fp8 GEMMs' own, where measured
        mixes = [r for r in sustained_rows if r.get("op") == MIX_OP]
        if mixes:
            params["power_share_threshold"] = power_share_threshold(mixes)
    if sustained_slowdown is not None:
        params["sustained_slowdown"] = float(f"{sustained_slowdown:.4g}")
    return Calibration.from_environment(
        g.name, env, params, sm, kept, fit_error=acc, validation_error=val, source=source,
        measured_families=sorted(set(ps.families())),
        notes=(f"fitted by least squares in log-time to {len(ps.points)} kernels; free parameters: "
               f"{', '.join(report['free'])}"
               + "".join(f"; {k} = {v}" for k, v in report["tied"].items())
               + (f"; each anchored at its starting value by {anchor:g} pseudo-kernel(s)" if anchor else "")
               + "; the others keep the values the fit started from: "
               + ("the shipped calibration carried to this GPU (gpumodel.calibration.transfer)"
                  if transfer_for(g) is not None else "the datasheet's default efficiencies")))


def starting_parameters(gpu: Any) -> dict[str, float]:
    """Where a calibration's fit starts, and what every parameter its points cannot determine keeps: the shipped
    calibration carried to the GPU (:func:`gpumodel.calibration.transfer.transfer_for`) where its architecture has a
    prior, else the datasheet's default efficiencies. A family the user's run did not measure is then priced as
    the transfer prices it, never worse.

    Parameters
    ----------
    gpu : GPUSpec
        The GPU measured.

    Returns
    -------
    dict
        Parameter name -> value (SI units): every parameter of the datasheet model, the transferred value where
        there is one.

    Examples
    --------
    >>> import gpumodel as gm
    >>> from gpumodel.calibration.transfer import transfer_for
    >>> p = starting_parameters(gm.gpu("h100"))
    >>> p["strided_elem_rate"] == transfer_for("h100").model.params["strided_elem_rate"]
    True
    """
    defaults = default_parameters(gpu)
    moved = transfer_for(gpu)
    if moved is None:
        return defaults
    # and the fp8 GEMMs' own sustained slowdown, which no datasheet default stands for (a run's sustained kernels
    # replace it with their own)
    return {**defaults, **{k: v for k, v in moved.model.params.items() if k in defaults or k == FP8_SLOWDOWN}}


def gpu_for_device(device_name: str):
    """The GPU spec for the name the driver reports (``"NVIDIA H200"``, ``"NVIDIA H100 80GB HBM3"``).

    Tries the full name, then without the vendor prefix, then shorter and shorter prefixes
    (``"H100 80GB"``, ``"H100"``); raises the catalog's error (with close names) if none matches,
    in which case pass the GPU's name explicitly.
    """
    words = str(device_name).replace("NVIDIA ", "").split()
    for candidate in [str(device_name)] + [" ".join(words[:n]) for n in range(len(words), 0, -1)]:
        try:
            return _gpu(candidate)
        except UnknownNameError:
            continue
    return _gpu(str(device_name))


def calibrate(gpu: Any = None, mode: str | None = None, out: str | Path | None = None, show_progress: bool = True,
              budget: Any = None):
    """Measure this machine's GPU's kernels with torch, fit, and (if ``out``) save the calibration YAML.

    The kernels only: ``gpumodel calibrate`` also measures the host's per-op costs and the sustained-load slowdown.

    Parameters
    ----------
    gpu : GPUSpec or str, optional
        The GPU measured (default: the one whose name the driver reports, :func:`gpu_for_device`).
    mode : {"quick", "full"}, optional
        One of the first plans (:func:`gpumodel.calibration.plan.fit_cases`: GEMMs, streams, rows and flash attention
        only) instead of the budgeted plan of every family.
    out : path-like, optional
        Where to write the calibration YAML (not written when None).
    show_progress : bool
        Print progress while measuring.
    budget : float or str, optional
        The budget of a whole ``gpumodel calibrate`` run [s] or text such as ``"3m"``, which sizes the kernel plan
        (:func:`gpumodel.calibration.budget.budget_plan`; default its :data:`~gpumodel.calibration.budget.DEFAULT_BUDGET_S`).

    Returns
    -------
    Calibration
        The GPU's fitted parameters (SI units), the points [s] (when kept) and the fit and validation errors
        (count, median and 90th percentile of ``|predicted/measured - 1|`` per op family) [1].

    Raises
    ------
    CalibrationUnavailableError
        torch is not installed or sees no CUDA GPU.
    """
    if mode is not None:
        env, points = bench.run_benchmarks(mode=mode, show_progress=show_progress)
    else:
        env, points, _ = bench.run_budget(budget, show_progress=show_progress)
    cal = fit_calibration(points, gpu if gpu is not None else gpu_for_device(env.get("device_name", "")), env)
    if out is not None:
        cal.save(out)
    return cal
