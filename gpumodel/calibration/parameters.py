"""The named parameters of the calibrated time model and their datasheet defaults, in one sourced table.

Every parameter is one mechanism of :mod:`gpumodel.calibration.model` (see its Notes); its value is
fitted to measured kernels by :mod:`gpumodel.calibration.fit`, or, for a GPU without a
calibration, set by :func:`default_parameters` from the GPU's record (datasheet peaks, SM count)
and the rule of :data:`DEFAULTS`. Each rule names where its number comes from: a datasheet
fraction observed on the H200 measurements (``tests/data/calibration/README.md``), the CUDA
programming guide, or PyTorch's kernel source.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

__all__ = ["PARAMETERS", "DEFAULTS", "DEFAULT_EFFICIENCY", "GEMM_DTYPES", "ROW_FAMILIES", "GENERIC_ROW_FAMILIES",
           "WEIGHT_ONLY_DTYPES", "default_parameters", "Default"]

#: dtypes that get their own achievable-FLOP/s parameter ``flops_<dtype>``
GEMM_DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8")
#: memory-bound families with a bandwidth fraction ``bw_eff_<family>``
ROW_FAMILIES = ("softmax", "layer_norm", "rms_norm", "reduce_sum", "embedding", "adamw_step")
#: row families modelled as "a row per block" with fitted rows in flight (softmax and sum have kernel plans)
GENERIC_ROW_FAMILIES = ("layer_norm", "rms_norm")
#: weight formats with a weight-streaming GEMM kernel of their own (``bw_eff_<w>_mm``, ``flops_<w>_mm``)
WEIGHT_ONLY_DTYPES = ("int4", "int8")

_H200 = "H200 measurements, tests/data/calibration/README.md"
_GUIDE = "CUDA C++ Programming Guide, 'Technical Specifications per Compute Capability'"
_TORCH = "PyTorch source, aten/src/ATen/native/cuda"

#: Default efficiencies for a GPU without a calibration (fractions of the datasheet): large bf16
#: GEMMs reach about 70-75% of the dense peak, memory-bound kernels 85-90% of the datasheet
#: bandwidth, a launch costs a few microseconds as CUDA events see it (H200 measurements).
DEFAULT_EFFICIENCY = {"flops": 0.72, "bandwidth": 0.87, "l2_bandwidth": 0.8, "launch_s": 4e-6}


class Default(NamedTuple):
    """A parameter's unit, meaning, default rule ``rule(gpu, bw) -> value`` and the source of that rule."""

    unit: str
    meaning: str
    rule: Callable[[Any, float], float]
    source: str


def _const(v: float) -> Callable[[Any, float], float]:
    return lambda gpu, bw: v


def _l2(gpu: Any, bw: float) -> float:
    try:
        return gpu.bandwidth("l2") * DEFAULT_EFFICIENCY["l2_bandwidth"]
    except Exception:  # noqa: BLE001 - no published L2 figure: 3.5x HBM (H100/H200 L2 vs HBM microbenchmarks)
        return 3.5 * gpu.memory_bandwidth * DEFAULT_EFFICIENCY["l2_bandwidth"]


def _bf16(gpu: Any) -> float:
    return gpu.peak_flops("bf16") if gpu.supports("bf16") else gpu.peak_flops("fp16")


_E = DEFAULT_EFFICIENCY
#: name -> :class:`Default`. Per-dtype ``flops_<dtype>`` and per-family entries are generated below.
DEFAULTS: dict[str, Default] = {
    "launch_s": Default("s", "fixed time of one kernel launch, as CUDA events see it", _const(_E["launch_s"]), _H200),
    "sustained_slowdown": Default("1", "time of a compute-bound kernel after seconds of back-to-back work over its "
                                  "calibration timing (the power limit lowers the SM clock); measured, not fitted "
                                  "(bench/measure_sustained.py, gpumodel.calibration.sustained)", _const(1.0),
                                  "1 unless measured"),
    "kernel_gap_s": Default("s", "time between two kernels of one call queued back to back (the GPU's front end "
                            "starting the next grid): each launch of a multi-kernel op after its first costs this, "
                            "not launch_s", _const(1.5e-6), "start value of the fit"),
    "bandwidth": Default("bytes/s", "achievable device-memory bandwidth of a streaming kernel",
                         lambda g, bw: bw, f"datasheet x {_E['bandwidth']} ({_H200}: copy at 88-91%)"),
    "l2_bandwidth": Default("bytes/s", "chip-wide rate at which GEMM tiles stream operands from L2/shared memory",
                            _l2, "published L2 bandwidth x 0.8, else 3.5x HBM"),
    "unaligned_sm_fill": Default("1", "CTAs of four warps an SM must hold for the CUTLASS kernels of unaligned GEMMs "
                                 "(synchronous mma, no warp specialisation) to reach their rate; an eight-warp tile "
                                 "counts twice", _const(2.0), "start value of the fit"),
    "tile_overhead_s": Default("s", "fixed time per GEMM output tile (prologue, epilogue)", _const(1.5e-6), _H200),
    "unaligned_flops": Default("FLOP/s", "rate cap of 16-bit tensor GEMMs whose k or n rows are only 2-byte aligned "
                               "(Turing-generation kernels)", lambda g, bw: 0.12 * _bf16(g),
                               f"{_H200}: 80-140 TFLOP/s of 989"),
    "unaligned_tile_overhead_s": Default("s", "fixed time per output tile of the kernels unaligned GEMMs fall back to",
                                         _const(3e-6), "start value of the fit"),
    "wmma_tile_overhead_s": Default("s", "fixed time per 32 x 32 output tile of the wmma kernels small unaligned "
                                    "GEMMs run", _const(1.5e-6), "start value of the fit"),
    "wmma_flops": Default("FLOP/s", "rate cap of the wmma kernels small unaligned GEMMs run",
                          lambda g, bw: 0.05 * _bf16(g), "start value of the fit"),
    "unaligned_flops_wide": Default("FLOP/s", "rate cap of 16-bit tensor GEMMs whose k and n rows are 4- or 8-byte "
                                    "but not 16-byte aligned (Ampere-generation kernels)",
                                    lambda g, bw: 0.22 * _bf16(g), f"{_H200}: 150-235 TFLOP/s of 989"),
    "overlap_p": Default("1", "sharpness p of the compute/memory overlap (t_c^p + t_m^p)^(1/p) of GEMMs",
                         _const(4.0), "start value of the fit"),
    "vector_overlap_p": Default("1", "the same sharpness for memory-bound kernels (math vs traffic)",
                                _const(3.0), "start value of the fit"),
    "attn_overlap_p": Default("1", "the same sharpness for flash attention (tensor-core math vs softmax)",
                              _const(3.0), "start value of the fit"),
    "sm_bandwidth": Default("bytes/s", "device-memory rate one SM can pull; caps kernels using few SMs",
                            lambda g, bw: 2.0 * bw / g.sm_count, "twice the fair share (start value of the fit)"),
    "bw_eff_gemm": Default("1", "device-memory rate of a tiled GEMM's traffic as a fraction of `bandwidth`",
                           _const(1.0), "start value of the fit"),
    "stream_overhead_s": Default("s", "fixed time of a skinny GEMM run as one stream (GEMV, small k)",
                                 _const(3e-6), _H200),
    "bw_eff_stream": Default("1", "rate of that stream (big operand or output) as a fraction of `bandwidth`",
                             _const(1.0), _H200),
    "split_overhead_s": Default("s", "extra time of a split-K GEMM (the partial-sum reduction pass)",
                                _const(2e-6), "one launch"),
    "vector_flops": Default("FLOP/s", "achievable CUDA-core rate of elementwise math (as counted by the op)",
                            lambda g, bw: g.peak_flops("fp32") / 8, "fp32 peak / 8 (special functions)"),
    "row_latency_s": Default("s", "fixed time of one row of a norm (its block reductions, sync)", _const(1e-6),
                             _H200),
    "mem_latency_s": Default("s", "time of one dependent step of a thread keeping one 16-byte load in flight",
                             _const(0.6e-6), "HBM latency, H100 microbenchmarks (~0.5-0.7 us)"),
    "norm_overlap_p": Default("1", "sharpness of the overlap of traffic and row time of the norms in one wave",
                              _const(3.0), "start value of the fit"),
    "row_overlap_p": Default("1", "sharpness of the overlap of traffic, element rate and row latency of softmax",
                             _const(3.0), "start value of the fit"),
    "block_sync_s": Default("s", "fixed time of a softmax block (block-wide reductions, __syncthreads)",
                            _const(1e-6), _H200),
    "sum_block_s": Default("s", "fixed time of a sum block whose warps share a row (its block-wide reduction)",
                           _const(1e-6), _H200),
    "sum_warp_s": Default("s", "fixed time of a wave of sum blocks whose warps each own a row (warp shuffles only)",
                          _const(0.5e-6), "five shuffle steps and a store"),
    "sum_overlap_p": Default("1", "sharpness of the overlap of a short-row sum's streaming and its per-wave "
                             "fixed work (warps owning rows)", _const(2.0), "start value of the fit"),
    "sum_step_s": Default("s", "time of one dependent step of a sum thread (a 16-byte load and its accumulation)",
                          _const(0.6e-6), "HBM latency"),
    "global_reduce_s": Default("s", "extra time of a sum split over several blocks per row", _const(2e-6),
                               "one more pass through global memory"),
    "softmax_warp_step_s": Default("s", "time per element a lane holds in the warp-per-row softmax", _const(0.1e-6),
                                   _H200),
    "softmax_reg_step_s": Default("s", "time per register of a row of the register softmax (2049-9216 columns)",
                                  _const(0.3e-6), _H200),
    "elem_rate_softmax_warp": Default("elements/s", "element throughput of the warp softmax kernel",
                                      lambda g, bw: bw / 4.0, "a 2-byte read-and-write stream"),
    "elem_rate_softmax_reg": Default("elements/s", "element throughput of the register softmax kernel",
                                     lambda g, bw: bw / 8.0, f"{_H200}: 1.2 TB/s"),
    "elem_rate_softmax_block": Default("elements/s", "element throughput of the block softmax kernels",
                                       lambda g, bw: bw / 4.0, "a 2-byte read-and-write stream"),
    "attn_flops_fwd": Default("FLOP/s", "achievable matmul rate inside flash attention, forward",
                              lambda g, bw: 0.55 * _bf16(g), f"{_H200}: 540-600 of 989 TFLOP/s"),
    "attn_flops_bwd": Default("FLOP/s", "achievable matmul rate inside flash attention, backward",
                              lambda g, bw: 0.4 * _bf16(g), f"{_H200}: 450-545 of 989 TFLOP/s"),
    "attn_flops_fa2": Default("FLOP/s", "achievable matmul rate of FlashAttention-2's forward kernels, which PyTorch "
                              "runs for a query block over a longer cache (chunked prefill, decode)",
                              lambda g, bw: 0.35 * _bf16(g), "J. Shah et al., FlashAttention-3 (2024): FlashAttention-2 "
                              "reaches about 35% of the H100's peak (no wgmma)"),
    "attn_causal_diag": Default("1", "extra key blocks of a square causal attention tile for its diagonal block "
                                "(masked element by element)", _const(0.5), "start value of the fit"),
    "attn_score_rate_fwd": Default("1/s", "score elements (softmax, masking) per second, forward",
                                   lambda g, bw: g.peak_flops("fp32") / 4, "about 4 FP32 operations a score"),
    "attn_score_rate_bwd": Default("1/s", "score elements per second, backward",
                                   lambda g, bw: g.peak_flops("fp32") / 8, "about 8 FP32 operations a score"),
    "attn_tile_overhead_fwd_s": Default("s", "fixed time per tile of flash attention forward (load Q, write O)",
                                        _const(1e-6), "start value of the fit"),
    "attn_kv_block_s": Default("s", "latency of one key block in a flash-attention forward tile (its loads and "
                               "dependent steps): the pace of a tile with few query rows", _const(0.5e-6),
                               "start value of the fit"),
    "attn_tile_overhead_fa2_s": Default("s", "fixed time per tile of FlashAttention-2's forward kernels over a longer "
                                        "cache (decode, chunked prefill), before the tile streams its keys",
                                        _const(2e-6), "start value of the fit"),
    "attn_tile_overhead_decode_s": Default("s", "fixed time per wave of tiles of the decode kernel (one query a "
                                           "sequence over a cache), before its tiles stream their keys",
                                           _const(2e-6), "start value of the fit"),
    "attn_decode_wave_share": Default("1", "share of a decode wave's tile time that adds to the cache stream after "
                                      "the first wave (the rest overlaps the previous tiles' streaming)",
                                      _const(1.0), "start value of the fit: no overlap"),
    "attn_tile_overhead_bwd_s": Default("s", "fixed time per tile of flash attention backward", _const(3e-6),
                                        "start value of the fit"),
    "bw_eff_attention": Default("1", "device-memory rate of flash attention's traffic (decode: the KV cache)",
                                _const(1.0), "start value of the fit"),
    "nll_step_s": Default("s", "time per target a thread of NLL's one 32-thread block handles (two dependent loads)",
                          _const(1.2e-6), "two HBM latencies"),
    "bw_eff_log_softmax": Default("1", "device-memory rate of log-softmax's three-pass block kernel "
                                  "(cunn_SoftMaxForward / Backward: three row reads and one write)",
                                  _const(0.9), "start value of the fit"),
    "bw_eff_cast_copy": Default("1", "device-memory rate of a dtype-converting copy (unrolled_elementwise_kernel: "
                                "no vectorised loads), e.g. logits.float()", _const(0.5), "start value of the fit"),
    "embedding_token_s": Default("s", "time per token of the embedding backward's feature kernel (< 3072 tokens)",
                                 _const(0.05e-6), "start value of the fit"),
    "embedding_sort_s": Default("s", "fixed time of the embedding backward's sort and segment kernels",
                                _const(60e-6), "about a dozen launches (radix sort, segments)"),
    "embedding_segment_rate": Default("elements/s", "gradient elements per second the embedding backward's "
                                      "segment kernels (compute_grad_weight, sum_and_scatter) reduce (> 3072 tokens)",
                                      lambda g, bw: bw / 16.0, "a gathered 2-byte load, an fp32 partial written and "
                                      "read, a scattered write (start value of the fit)"),
    "adamw_elem_rate": Default("elements/s", "parameters per second the fused AdamW kernel updates when its "
                               "4-element steps, not its bytes, bound it (16-bit parameters and states)",
                               lambda g, bw: bw / 24.0, "start value of the fit"),
    "strided_elem_rate": Default("elements/s", "element rate of PyTorch's generic (non-vectorised) elementwise "
                                 "kernel over strided or broadcast operands (slices, head-transposed views, masks "
                                 "broadcast over batch and heads)",
                                 lambda g, bw: bw / 8.0, "a 2-byte read and write per element, a quarter of the "
                                 "vectorised copy rate (start value of the fit)"),
    "strided_step_s": Default("s", "time of one dependent step (an element's offsets, loads, arithmetic and "
                              "store) of a thread of PyTorch's generic elementwise kernel, whose last threads run "
                              "generic_unroll such steps in a row", _const(5e-7), "start value of the fit"),
    "concat_step_s": Default("s", "time of one element's copy by a thread of PyTorch's CatArrayBatchedCopy "
                             "(torch.cat of strided inputs), which strides a fixed grid over each input",
                             _const(6e-7), "start value of the fit"),
    "strided_operand_rate": Default("operand elements/s", "rate at which PyTorch's generic elementwise kernel "
                                    "computes and issues an operand's offset and access, per operand (inputs plus "
                                    "outputs) of an element", lambda g, bw: bw / 4.0, "start value of the fit"),
    "strided_overlap_p": Default("1", "sharpness of the overlap of the generic elementwise kernel's issued "
                                 "instructions with its traffic (soft maximum: 1 adds them, large takes the larger)",
                                 _const(4.0), "start value of the fit"),
    "index_copy_rate": Default("elements/s", "element rate of an indexing copy kernel (index_copy_)",
                               lambda g, bw: bw / 8.0, "a 2-byte read and write per element, a quarter of the "
                               "vectorised copy rate (start value of the fit)"),
}
for _f in GENERIC_ROW_FAMILIES:  # PyTorch's norms: a 128-thread block per row (16 per SM), 16-byte loads, two passes
    DEFAULTS[f"row_rate_{_f}"] = Default("elements/s", f"rate at which one block works through one row of {_f}",
                                         _const(8.5e8), "128 * 8 elements / 1.2 us (two passes of ~0.6 us)")
    DEFAULTS[f"rows_per_sm_{_f}"] = Default("1", f"rows of {_f} in flight per SM", _const(16.0),
                                            f"2048 threads per SM / 128 ({_GUIDE})")
    DEFAULTS[f"unaligned_eff_{_f}"] = Default("1", f"rate factor of {_f} when a row is not a multiple of 16 bytes",
                                              _const(0.7), _H200)
#: threads of the block each kernel of a norm's two-kernel path (rows not a multiple of four elements) gives a row:
#: RowwiseMomentsCUDAKernel (``kCUDABlockReduceNumThreads``), then LayerNormForwardCUDAKernel (``kCUDANumThreads``),
#: as the profiler shows; each walks its row element by element
NORM_PASS_THREADS = {"moments": 512, "forward": 256}
for _k, _threads in NORM_PASS_THREADS.items():
    DEFAULTS[f"row_rate_norm_{_k}"] = Default("elements/s", f"rate at which one block of the norms' {_k} kernel "
                                              "(unvectorised rows) works through its row", _const(1e9),
                                              "start value of the fit")
    DEFAULTS[f"norm_{_k}_row_s"] = Default("s", f"fixed time of one row of that kernel ({_threads} threads: block "
                                           "reductions, syncs)", _const(2e-6), "start value of the fit")
for _f in ("elementwise", *ROW_FAMILIES):
    DEFAULTS[f"bw_eff_{_f}"] = Default("1", f"{_f} bandwidth as a fraction of `bandwidth`", _const(1.0),
                                       "start value of the fit")
DEFAULTS["bw_eff_int4_mm"] = Default("1", "weight-stream rate of the int4 weight-only GEMM kernel (tinygemm)",
                                     _const(0.6), "start value of the fit")
DEFAULTS["flops_int4_mm"] = Default("FLOP/s", "math rate of the int4 weight-only GEMM kernel (bf16 tensor cores)",
                                    lambda g, bw: 0.3 * _bf16(g), "start value of the fit")
# PyTorch's weight_int8pack_mm on CUDA is an fp32 CUDA-core kernel with uncoalesced weight loads
DEFAULTS["bw_eff_int8_mm"] = Default("1", "weight-stream rate of the int8 weight-only GEMM kernel (int8pack)",
                                     _const(0.04), f"{_H200}: 0.1-0.15 TB/s at m = 1")
DEFAULTS["flops_int8_mm"] = Default("FLOP/s", "math rate of the int8 weight-only GEMM kernel (fp32 CUDA cores)",
                                    lambda g, bw: 0.013 * g.peak_flops("fp32"), f"{_H200}: 0.9 of 67 TFLOP/s")
for _d in (*GEMM_DTYPES, "fp64", "int8", "fp6", "fp4"):
    DEFAULTS[f"flops_{_d}"] = Default(
        "FLOP/s", f"achievable {_d} GEMM rate with full waves and large tiles",
        (lambda d: lambda g, bw: g.peak_flops(d) * (0.8 if d == "fp32" else _E["flops"]))(_d),
        f"datasheet dense peak x {_E['flops']} (fp32: 0.8) ({_H200})")

#: name -> (unit, meaning), for every parameter a record may hold
PARAMETERS: dict[str, tuple[str, str]] = {k: (v.unit, v.meaning) for k, v in DEFAULTS.items()}


def default_parameters(gpu: Any) -> dict[str, float]:
    """Parameters from a GPU's datasheet and :data:`DEFAULTS` (an uncalibrated model).

    A GPU without a figure a rule needs (no bf16 rate, no fp8) gets no value for it; the ops that
    need it then raise.

    Examples
    --------
    >>> import gpumodel as gm
    >>> p = default_parameters(gm.gpu("h100"))
    >>> round(p["flops_bf16"] / 1e12)        # 0.72 * 989.4 TFLOP/s
    712
    """
    bw = gpu.memory_bandwidth * DEFAULT_EFFICIENCY["bandwidth"]
    out = {}
    for name, d in DEFAULTS.items():
        if name.startswith("flops_") and not name.endswith("_mm") and not gpu.supports(name[6:]):
            continue
        try:
            out[name] = float(d.rule(gpu, bw))
        except Exception:  # noqa: BLE001 - a figure the record lacks (no bf16, no fp8)
            continue
    return out
