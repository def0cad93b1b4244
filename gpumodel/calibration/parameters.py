"""The named parameters of the calibrated time model and their datasheet defaults (numpy only).

Every parameter is one mechanism of :mod:`gpumodel.calibration.model` (see its Notes); its value is
fitted to measured kernels by :mod:`gpumodel.calibration.fit`, or, for a GPU without a
calibration, set from the datasheet and :data:`DEFAULT_EFFICIENCY` by :func:`default_parameters`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PARAMETERS", "DEFAULT_EFFICIENCY", "GEMM_DTYPES", "ROW_FAMILIES", "GENERIC_ROW_FAMILIES",
           "default_parameters"]

#: dtypes that get their own achievable-FLOP/s parameter ``flops_<dtype>``
GEMM_DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8")
#: row-wise memory-bound families
ROW_FAMILIES = ("softmax", "layer_norm", "rms_norm", "reduce_sum", "cross_entropy", "embedding")
#: row families modelled as "a row per block" with fitted rows in flight (softmax and sum have kernel plans)
GENERIC_ROW_FAMILIES = ("layer_norm", "rms_norm", "cross_entropy", "embedding")

#: Default efficiencies for a GPU without a calibration (fractions of the datasheet), from the
#: observations behind the calibration work on an H200 with PyTorch: large bf16 GEMMs reach about
#: 70-75% of the dense peak, memory-bound kernels 85-90% of the datasheet bandwidth, a launch
#: costs a few microseconds.
DEFAULT_EFFICIENCY = {"flops": 0.72, "bandwidth": 0.87, "l2_bandwidth": 0.8, "launch_s": 4e-6}

#: name -> (unit, meaning). Per-dtype ``flops_<dtype>`` and per-family ``bw_eff_<family>`` exist too.
PARAMETERS: dict[str, tuple[str, str]] = {
    "launch_s": ("s", "fixed time of one kernel launch, as CUDA events see it"),
    "bandwidth": ("bytes/s", "achievable device-memory bandwidth of a streaming kernel"),
    "l2_bandwidth": ("bytes/s", "chip-wide rate at which GEMM tiles stream operands from L2/shared memory"),
    "tile_overhead_s": ("s", "fixed time per GEMM output tile (prologue, epilogue)"),
    "unaligned_flops": ("FLOP/s", "rate cap of tensor GEMMs whose k or n rows are not multiples of 16 bytes"),
    "overlap_p": ("1", "sharpness p of the compute/memory overlap (t_c^p + t_m^p)^(1/p) of GEMMs and attention"),
    "vector_overlap_p": ("1", "the same sharpness for memory-bound kernels (math vs traffic)"),
    "attn_overlap_p": ("1", "the same sharpness for flash attention (tensor-core math vs softmax)"),
    "sm_bandwidth": ("bytes/s", "device-memory rate one SM can pull; caps the bandwidth of kernels using few SMs"),
    "bw_eff_gemm": ("1", "device-memory rate of a tiled GEMM's traffic as a fraction of `bandwidth`"),
    "stream_overhead_s": ("s", "fixed time of a skinny GEMM run as one stream (GEMV, small k), beyond the launch"),
    "bw_eff_stream": ("1", "rate of that stream (big operand or output) as a fraction of `bandwidth`"),
    "split_overhead_s": ("s", "extra time of a split-K GEMM (the partial-sum reduction pass)"),
    "vector_flops": ("FLOP/s", "achievable CUDA-core rate of elementwise math (as counted by the op)"),
    "row_latency_s": ("s", "fixed time of one row of a row-wise kernel (reductions, sync)"),
    **{f"unaligned_eff_{f}": ("1", f"rate factor of {f} when a row is not a multiple of 16 bytes (no vector loads)")
       for f in GENERIC_ROW_FAMILIES},
    "mem_latency_s": ("s", "time of one dependent step of a softmax thread keeping one 16-byte load in flight"),
    "norm_overlap_p": ("1", "sharpness of the overlap of traffic and row time of the norms (a row per block)"),
    "row_overlap_p": ("1", "sharpness of the overlap of traffic, element rate and row latency of softmax"),
    "block_sync_s": ("s", "fixed time of a softmax block (block-wide reductions, __syncthreads)"),
    "sum_block_s": ("s", "fixed time of a sum block (its block-wide reduction and the store of its result)"),
    "sum_step_s": ("s", "time of one dependent step of a sum thread (a 16-byte load and its accumulation)"),
    "global_reduce_s": ("s", "extra time of a sum split over several blocks per row (semaphore, second stage)"),
    "rows_per_sm_softmax": ("1", "rows in flight per SM of the warp-per-row softmax (<= 2048 columns)"),
    "softmax_warp_step_s": ("s", "time per element a lane holds in the warp-per-row softmax"),
    "softmax_reg_step_s": ("s", "time per register of a row of the register softmax (2049-9216 columns)"),
    **{f"elem_rate_softmax_{k}": ("elements/s", f"element throughput of the {k} softmax kernel")
       for k in ("warp", "reg", "block")},
    "attn_flops_fwd": ("FLOP/s", "achievable matmul rate inside flash attention, forward"),
    "attn_flops_bwd": ("FLOP/s", "achievable matmul rate inside flash attention, backward"),
    "attn_score_rate_fwd": ("1/s", "score elements (softmax, masking) per second, forward"),
    "attn_score_rate_bwd": ("1/s", "score elements per second, backward"),
    "attn_tile_overhead_fwd_s": ("s", "fixed time per 128-row tile of flash attention forward (load Q, write O)"),
    "attn_tile_overhead_bwd_s": ("s", "fixed time per 128-row tile of flash attention backward (dQ accumulation, stats)"),
    **{f"flops_{d}": ("FLOP/s", f"achievable {d} GEMM rate with full waves and large tiles") for d in GEMM_DTYPES},
    **{f"bw_eff_{f}": ("1", f"{f} bandwidth as a fraction of `bandwidth`") for f in ("elementwise", *ROW_FAMILIES)},
    **{f"row_rate_{f}": ("elements/s", f"rate at which one block works through one row of {f}")
       for f in GENERIC_ROW_FAMILIES},
    **{f"rows_per_sm_{f}": ("1", f"rows of {f} in flight per SM") for f in GENERIC_ROW_FAMILIES},
}


def default_parameters(gpu: Any) -> dict[str, float]:
    """Parameters from a GPU's datasheet and :data:`DEFAULT_EFFICIENCY` (an uncalibrated model).

    Examples
    --------
    >>> import gpumodel as gm
    >>> p = default_parameters(gm.gpu("h100"))
    >>> round(p["flops_bf16"] / 1e12)        # 0.72 * 989.4 TFLOP/s
    712
    """
    eff = DEFAULT_EFFICIENCY
    bw = gpu.memory_bandwidth * eff["bandwidth"]
    try:
        l2 = gpu.bandwidth("l2")
    except Exception:  # noqa: BLE001 - no published L2 figure: assume 3.5x HBM
        l2 = 3.5 * gpu.memory_bandwidth
    p = {
        "launch_s": eff["launch_s"], "bandwidth": bw, "l2_bandwidth": l2 * eff["l2_bandwidth"],
        "tile_overhead_s": 1.5e-6, "unaligned_flops": 0.15 * gpu.peak_flops("bf16") if gpu.supports("bf16") else 1e13, "overlap_p": 4.0, "vector_overlap_p": 3.0, "attn_overlap_p": 3.0,
        "sm_bandwidth": 2.0 * bw / gpu.sm_count, "split_overhead_s": 2e-6,
        "stream_overhead_s": 3e-6, "bw_eff_stream": 1.0, "bw_eff_gemm": 1.0,
        "vector_flops": gpu.peak_flops("fp32") / 8, "row_latency_s": 1e-6, "attn_tile_overhead_fwd_s": 1e-6,
        "attn_tile_overhead_bwd_s": 3e-6,
    }
    for f in GENERIC_ROW_FAMILIES:  # PyTorch's norms: a 128-thread block per row (16 per SM), 16-byte loads,
        p[f"row_rate_{f}"] = 8.5e8    # two passes of ~0.6 us per step: 128 * 8 elements / 1.2 us
        p[f"rows_per_sm_{f}"] = 16.0
        p[f"unaligned_eff_{f}"] = 0.7
    elem = bw / 4.0  # elements/s of a 2-byte read-and-write stream
    p.update(row_overlap_p=3.0, norm_overlap_p=3.0, mem_latency_s=0.6e-6, block_sync_s=1e-6, global_reduce_s=2e-6,
             sum_block_s=1e-6, sum_step_s=0.6e-6,
             rows_per_sm_softmax=16.0, softmax_warp_step_s=0.1e-6,
             softmax_reg_step_s=0.3e-6, elem_rate_softmax_warp=elem, elem_rate_softmax_reg=elem / 2,
             elem_rate_softmax_block=elem)
    for d in (*GEMM_DTYPES, "fp64", "int8"):
        if gpu.supports(d):
            p[f"flops_{d}"] = gpu.peak_flops(d) * (eff["flops"] if d != "fp32" else 0.8)
    bf16 = gpu.peak_flops("bf16") if gpu.supports("bf16") else gpu.peak_flops("fp16")
    p.update(attn_flops_fwd=0.55 * bf16, attn_flops_bwd=0.4 * bf16,
             attn_score_rate_fwd=gpu.peak_flops("fp32") / 4, attn_score_rate_bwd=gpu.peak_flops("fp32") / 8)
    for f in ("elementwise", *ROW_FAMILIES):
        p[f"bw_eff_{f}"] = 1.0
    return p
