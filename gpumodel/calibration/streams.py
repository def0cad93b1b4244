"""The calibrated time model of memory-bound kernels: elementwise (vectorised and PyTorch's generic strided
kernel; ``torch.cat`` of strided inputs), softmax, sums, layer and RMS norms (with their two-kernel path for unvectorised rows), fused chains,
and any op without a model of its own (registered with :mod:`gpumodel.calibration.model`;
see its notes for the equations).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpumodel.core.opcost import OpName

from .kernels import concat_steps, generic_unroll, softmax_plan, sum_plan
from .predictors import CalibrationModel, Prediction, elem_bytes, fallback, farray, predictor, queued, soft_max
from .parameters import NORM_PASS_THREADS
from ..base.errors import UnsupportedError


def _waves(blocks: np.ndarray, per_sm: Any, P: float) -> np.ndarray:
    return np.ceil(np.maximum(blocks, 1.0) / (P * per_sm))


def _row_kernel(model: CalibrationModel, op: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Softmax or sum beside the traffic: the latency of the rows in flight, the element rate and the waves.

    Returns ``(t_lat, t_rate, waves)``: the latency-bound time, the element-rate time (0 for the sum)
    and the waves of resident blocks (or, for the warp softmax, of rows) the kernel goes through.
    """
    p, P = model.params, float(model.sm_count)
    rows, cols, e = farray(op.shape["rows"]), farray(op.shape["cols"]), elem_bytes(op)
    L, tau = p["mem_latency_s"], p["block_sync_s"]
    if op.name == "reduce_sum":
        k = sum_plan(rows, cols, e, model.sm_count, model.threads_per_sm)
        per_sm = np.minimum(4.0, np.floor(model.threads_per_sm / k["threads"]))  # __launch_bounds__(nt, 4)
        waves = _waves(k["blocks"], per_sm, P)
        # warps sharing a row end in a block-wide reduction, and an SM works through those one after another
        # while the loads of its resident blocks overlap; warps owning a row each reduce with shuffles, and
        # a wave of such blocks costs one shuffle tree
        serial = np.where(k["split"], np.ceil(k["blocks"] / P) * p.get("sum_block_s", tau),
                          waves * p.get("sum_warp_s", 0.0))
        t_lat = (serial + waves * k["steps"] * p.get("sum_step_s", L)
                 + np.where(k["ctas"] > 1, p["global_reduce_s"], 0.0))
        return t_lat, 0.0 * t_lat, waves
    k = softmax_plan(rows, cols, e, model.smem_per_block)
    # rows in flight: the blocks an SM holds (its registers bound them: softmax_plan's ``registers``) times the
    # rows of a block (4 warps of ``batch`` rows for the warp kernel's 128 threads, one row a 1024-thread block)
    per_sm = np.maximum(model.blocks_per_sm(np.where(k["warp"], 128, 1024), k["registers"]), 1.0)
    warp_waves = np.maximum(rows / (P * per_sm * 4.0 * k["batch"]), 1.0)
    block_waves = _waves(rows, per_sm, P)
    t_warp = warp_waves * (tau + k["lane_elems"] * p["softmax_warp_step_s"])
    t_reg = block_waves * (tau + k["regs"] * p["softmax_reg_step_s"])
    t_block = block_waves * (tau + k["passes"] * k["steps"] * L)
    t_lat = np.where(k["warp"], t_warp, np.where(k["reg"], t_reg, t_block))
    t_rate = np.where(k["warp"], rows * cols / p["elem_rate_softmax_warp"],
                      np.where(k["reg"], rows * k["regs"] * 1024.0 / p["elem_rate_softmax_reg"],
                               rows * cols / p["elem_rate_softmax_block"]))
    return t_lat, t_rate, np.where(k["warp"], warp_waves, block_waves)


def _pipeline(a: np.ndarray, b: np.ndarray, q: float, waves: np.ndarray) -> np.ndarray:
    """Traffic ``a`` and latency ``b`` of a kernel of ``waves`` waves of blocks.

    Within one wave the two overlap partly (the soft maximum of sharpness ``q``); from wave to wave
    the latency of one wave hides behind the streaming of the next, so only ``1/waves`` of that
    partial overlap remains: ``max(a, b) + (softmax_q(a, b) - max(a, b)) / waves``.
    """
    hi = np.maximum(a, b)
    return hi + (soft_max(a, b, q) - hi) / np.maximum(waves, 1.0)


def _l2_reread_s(model: CalibrationModel, read_bytes: Any, footprint: Any, eff: Any) -> Any:
    """Time [s] of reading ``read_bytes`` a second time from whatever of them L2 no longer holds: the fraction
    ``1 - L2 / footprint`` (none below 0) of the bytes comes from memory again, ``footprint`` being what passed
    through L2 between the two reads; none for a model without its GPU's L2 size."""
    l2 = getattr(model.gpu, "l2_bytes", None)
    if not l2:
        return 0.0
    miss = np.clip(1.0 - l2 / np.maximum(footprint, 1.0), 0.0, 1.0)
    return miss * read_bytes / (model.params["bandwidth"] * eff)


def _norm_reread_s(model: CalibrationModel, op: Any, eff: Any) -> Any:
    """Extra time [s] of a norm's two-kernel path reading its input a second time: the second read finds it in
    L2 as far as L2 holds the whole input, the rest comes from memory again (30058 x 5259 bf16 runs at 0.9 TB/s of
    traffic counted once)."""
    x = farray(op.shape["rows"]) * farray(op.shape["cols"]) * elem_bytes(op)
    return _l2_reread_s(model, x, x, eff)


def _norm_vector_reread_s(model: CalibrationModel, op: Any, fam: str, eff: Any) -> Any:
    """Extra time [s] of a norm's vectorised kernel reading its row a second time.

    ``vectorized_layer_norm_kernel`` gives a row a block: it reads the row for its moments, then again to
    normalise it. The second read finds the row in L2 only while the rows in flight (``rows_per_sm`` an SM),
    read and written, fit there: the fraction ``1 - L2 / (2 x rows in flight x row bytes)`` (none below 0) comes
    from memory again. On the H200 (60 MiB of L2 as PyTorch reports it; 16 RMS-norm rows an SM fitted) that is none
    up to about 7400 bf16 columns and three quarters of a 32000-column row.
    """
    rows, row = farray(op.shape["rows"]), farray(op.shape["cols"]) * elem_bytes(op)
    flight = 2.0 * np.minimum(rows, model.sm_count * model.params[f"rows_per_sm_{fam}"]) * row
    return _l2_reread_s(model, rows * row, flight, eff)


def _norm_two_pass_rows_s(model: CalibrationModel, rows: Any, cols: Any) -> Any:
    """Row time [s] of a norm's two-kernel path: each kernel gives a row a block of NORM_PASS_THREADS threads
    and walks it element by element (``norm_<kernel>_row_s`` plus ``cols / row_rate_norm_<kernel>`` a row, as many
    rows an SM as its blocks fit); the two passes' times add."""
    p, P = model.params, float(model.sm_count)
    total = 0.0
    for k, threads in NORM_PASS_THREADS.items():
        per_sm = np.floor(model.threads_per_sm / threads)
        total = total + np.maximum(rows / (P * per_sm), 1.0) * (p[f"norm_{k}_row_s"] + cols / p[f"row_rate_norm_{k}"])
    return total


@fallback
def memory_bound(model: CalibrationModel, op: Any) -> Prediction:
    p, P = model.params, float(model.sm_count)
    fam = op.name if f"bw_eff_{op.name}" in p else "elementwise"
    if fam in ("softmax", "reduce_sum") and "rows" in op.shape:
        t_m = farray(op.bytes) / (p["bandwidth"] * p[f"bw_eff_{fam}"])
        t_lat, t_rate, waves = _row_kernel(model, op)
        q = p["row_overlap_p"]
        if fam == "reduce_sum":  # a two-stage pipeline over W waves: W max(a, b) + min(a, b)
            body = np.maximum(t_m, t_lat) + np.minimum(t_m, t_lat) / waves
            if "sum_overlap_p" in p:  # warps owning short rows: a wave's loads queue behind its fixed work
                own = ~sum_plan(farray(op.shape["rows"]), farray(op.shape["cols"]), elem_bytes(op), model.sm_count,
                                model.threads_per_sm)["split"]
                body = np.where(own, np.maximum(body, soft_max(t_m, t_lat, p["sum_overlap_p"])), body)
        else:
            body = _pipeline(soft_max(t_m, t_rate, q), t_lat, q, waves)
        launch = p["launch_s"] * np.ones_like(body)
        return Prediction(launch + body, t_rate, np.maximum(t_m, t_lat), launch, 1.0, {"row_limited_s": t_lat})
    eff, two_pass = p[f"bw_eff_{fam}"], False
    if "rows" in op.shape and "cols" in op.shape and f"unaligned_eff_{fam}" in p:
        # PyTorch's norms load rows of a multiple of NORM_VEC_SIZE elements as vectors in one kernel; other rows
        # take RowwiseMomentsCUDAKernel, then LayerNormForwardCUDAKernel (the profiler on the H200): two kernels
        two_pass = np.mod(farray(op.shape["cols"]), NORM_VEC_SIZE) != 0
        eff = eff * np.where(two_pass, p[f"unaligned_eff_{fam}"], 1.0)
    kernels = np.where(two_pass, 2.0, 1.0)
    t_m = farray(op.bytes) / (p["bandwidth"] * eff)
    if np.any(two_pass):
        t_m = t_m + np.where(two_pass, _norm_reread_s(model, op, eff), 0.0)
    if fam in ("layer_norm", "rms_norm") and f"rows_per_sm_{fam}" in p:
        t_m = t_m + np.where(two_pass, 0.0, _norm_vector_reread_s(model, op, fam, eff))
    t_c = farray(op.flops) / p["vector_flops"] if fam == "elementwise" else 0.0 * t_m
    q = p["vector_overlap_p"]
    if "rows" in op.shape and f"rows_per_sm_{fam}" in p:
        rows, cols = farray(op.shape["rows"]), farray(op.shape["cols"])
        slots = P * p[f"rows_per_sm_{fam}"]
        waves = np.maximum(rows / slots, 1.0)  # rows stream through the slots; continuous, not whole waves
        t_rows = waves * (p["row_latency_s"] + cols / (p[f"row_rate_{fam}"] * eff / p[f"bw_eff_{fam}"]))
        if np.any(two_pass) and "row_rate_norm_moments" in p:
            t_rows = np.where(two_pass, _norm_two_pass_rows_s(model, rows, cols), t_rows)
        par = rows / (waves * slots)
        body = _pipeline(soft_max(t_m, t_c, q), t_rows, p.get("norm_overlap_p", q), waves)
    else:
        t_rows, par = 0.0 * t_m, np.ones_like(t_m)
        body = soft_max(t_m, t_c, q)
    latency = 0.0
    if fam == "elementwise" and op.shape.get("strided") and op.shape.get("concat"):
        # torch.cat of strided inputs (CatArrayBatchedCopy): a fixed grid a input whose threads copy element
        # after element, each copy one dependent step; the first step is the launch's latency, the rest stream
        # beside the traffic
        step = p["concat_step_s"]
        t_rows = (concat_steps(op.shape["numel"], op.shape["concat"], model.sm_count) - 1.0) * step
        body, latency = soft_max(t_m, t_rows, p["strided_overlap_p"]), step
    elif fam == "elementwise" and op.shape.get("strided"):
        # PyTorch's generic elementwise_kernel (strided or broadcast operands): no vector loads, every
        # operand's offset computed from the index; an element rate bounds it unless the traffic does
        n = farray(op.shape["numel"])
        t_rows = n / p["strided_elem_rate"] + 0.0 * t_m
        if "strided_operand_rate" in p:
            # every element decomposes its index once and adds an offset per operand; these instructions
            # issue beside the element's arithmetic, and the loads they address overlap the traffic only partly
            operands = farray(op.shape.get("operands", farray(op.shape["inputs"]) + farray(op.shape["outputs"])))
            t_rows = t_rows + n * operands / p["strided_operand_rate"] + t_c
            body = soft_max(t_m, t_rows, p["strided_overlap_p"])
        else:
            body = np.maximum(body, t_rows)
        # the last threads' elements are one dependent chain of generic_unroll steps (4 for 16-bit results,
        # 2 for 32-bit ones), whatever the size: a latency of the launch (its operands cold in L2, as timed
        # here; a replayed CUDA graph, its operands hot, prices its kernels' fixed times with its own constant)
        latency = generic_unroll(op.shape.get("out_bytes", elem_bytes(op))) * p.get("strided_step_s", 0.0)
    launch = (queued(p, kernels) + latency) * np.ones_like(body)
    return Prediction(launch + body, t_c, np.maximum(t_m, t_rows), launch, par, {"row_limited_s": t_rows},
                      kernels * np.ones_like(body))


#: elements a row of a layer or RMS norm must be a multiple of for PyTorch's vectorised kernel
#: (``vec_size`` in aten/src/ATen/native/cuda/layer_norm_kernel.cu)
NORM_VEC_SIZE = 4


predictor(OpName.ELEMENTWISE, OpName.SOFTMAX, OpName.LAYER_NORM, OpName.RMS_NORM, OpName.REDUCE_SUM)(
    lambda model, op: memory_bound(model, op))


@predictor(OpName.FUSED)
def _fused_op(model: CalibrationModel, op: Any) -> Prediction:
    if op.unit == "tensor":
        raise UnsupportedError("a fused op with tensor-core parts has no calibrated model; estimate its parts")
    return _fused(model, op)


def _fused(model: CalibrationModel, op: Any) -> Prediction:
    """A fused chain streams its external traffic once, but is no faster than its slowest row-wise part.

    A fused kernel keeps each part's organisation (one block per row for a norm or softmax), so the
    row-limited body of every row-wise part is a floor under the fused body.
    """
    whole = memory_bound(model, op)
    body = farray(whole.time_s) - farray(whole.overhead_s)
    row_parts = [memory_bound(model, part) for part in op.parts if "rows" in part.shape]
    if not row_parts:
        return whole
    floor = np.max(np.stack(np.broadcast_arrays(*[farray(r.time_s) - farray(r.overhead_s) for r in row_parts])), axis=0)
    par = np.min(np.stack(np.broadcast_arrays(*[farray(r.parallelism) for r in row_parts])), axis=0)
    return Prediction(whole.overhead_s + np.maximum(body, floor), whole.compute_s, np.maximum(whole.memory_s, floor),
                      whole.overhead_s, par, {"row_limited_s": floor})
