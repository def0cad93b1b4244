"""The kernels a serving step is built from, in one place: decode attention over a KV cache, the
KV-cache write, weight-only quantised matmuls, the tensor-parallel all-reduce, and the host's cost of
dispatching an eager op.

Each function returns :class:`~gpumodel.core.ops.OpCost` records that :func:`gpumodel.calibration.estimate.estimate`
times, except :func:`allreduce_time` and :data:`HOST_OP_S` (seconds). They are the ops of
:mod:`gpumodel.core.ops`, so each is timed by the model of the kernels PyTorch launches for it:

* decode and chunked-prefill attention: ``attention(..., kv_seq=)`` (flash attention with its
  split-KV decode kernels); an fp8 cache reads its keys and values at one byte;
* KV-cache write: ``kv_cache_write`` (two ``index_copy_`` kernels); an fp8 cache reads the 16-bit
  new keys and values and writes one byte each;
* int4 weights: ``matmul(..., weight_dtype="int4")`` (PyTorch's ``_weight_int4pack_mm``, the kernel
  gpt-fast's int4 path calls), with a 16-bit scale and zero point per ``group_size`` weights;
* int8 weights: the 16-bit GEMM streaming the int8 weights and a 16-bit scale per ``group_size``.
  Serving engines fuse the dequantisation into the GEMM (gpt-fast compiles ``F.linear(x,
  w.to(x.dtype)) * scales`` into one kernel; TensorRT-LLM has its own), whereas
  ``matmul(..., weight_dtype="int8")`` times PyTorch's eager ``_weight_int8pack_mm``, an fp32
  CUDA-core kernel several times slower than the weight stream.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..core import ops
from ..records.dtypes import DType, bytes_per_element
from ..cluster.collectives import system_collective_time
from ..records.system import node_system
from ..training.hostcost import host_costs_for

__all__ = ["attention", "kv_cache_write", "matmul", "allreduce_time", "link_bandwidth", "host_dispatch", "GRAPH_LAUNCH_S",
           "HOST_OP_S", "HOST_STEP_S", "HOST_FITTED_ON", "in_graph_s"]

#: Fixed time of one kernel inside a replayed CUDA graph (the gap to the previous kernel and the
#: ramp of its first blocks) [s]. It replaces the launch time an isolated, event-timed kernel shows
#: (the calibration's ``launch_s``, about 4.7 us on the H200): a graph submits its kernels back to
#: back. Fitted (least squares of the relative error) on the "fit" rows of the H200 step measurements
#: (``tests/data/serving/measured.jsonl``, 120 rows; ``python bench/serving_accuracy.py --fit``), the
#: one constant fitted there. The value is the same order as NVIDIA's "Getting Started with CUDA
#: Graphs" (A. Gray, 2019): about 3.4 us per short kernel with graphs against 3.8 us without, kernel
#: body included.
GRAPH_LAUNCH_S = 0.977e-6
#: Host time to dispatch one eager PyTorch op from Python (module call, dispatcher, launch) [s].
#: Fitted, with :data:`HOST_STEP_S`, on the time per output token of the HF ``generate`` rows of the
#: "fit" split of the H200 measurements (``python bench/serving_accuracy.py --fit``; transformers
#: 5.17, torch 2.11). The order of magnitude is PyTorch's eager overhead, "on the order of 10 us per
#: op" on a modern x86 host (Horace He, "Making Deep Learning Go Brrrr From First Principles", 2022,
#: section "Overhead"). Used by ``engine="hf"`` only.
HOST_OP_S = 8.1e-6
#: Host time per ``generate`` step outside the model's ops (logits processors, stopping criteria,
#: cache bookkeeping, the per-step device sync) [s]; fitted with :data:`HOST_OP_S`.
HOST_STEP_S = 5.8e-3
#: The GPU whose machine :data:`HOST_OP_S` and :data:`HOST_STEP_S` were fitted on; its shipped host costs
#: (``specs/hosts/<gpu>.yaml``) are the reference another host's are scaled against (:func:`host_dispatch`).
HOST_FITTED_ON = "h200-sxm"


def host_dispatch(host: Any = None) -> tuple[float, float]:
    """Host time of eager HF ``generate`` per dispatched op and per step [s], ``(op_s, step_s)``.

    Parameters
    ----------
    host : HostCosts or None
        The host's per-op costs (:class:`~gpumodel.training.hostcost.HostCosts`, already read). None: the
        fitted :data:`HOST_OP_S` and :data:`HOST_STEP_S`, whatever the GPU.

    Returns
    -------
    tuple of float
        ``(op_s, step_s)`` [s]: with a ``host``, :data:`HOST_OP_S` and :data:`HOST_STEP_S` scaled by the ratio of
        its ``op_nograd_s`` (one op without autograd, as ``generate`` runs) to that of the host they were fitted
        on (:data:`HOST_FITTED_ON`'s shipped host costs): a host twice as slow per op dispatches twice as slowly.
        That host's own record gives the fitted constants unchanged.

    Examples
    --------
    >>> from gpumodel.training.hostcost import host_costs_for
    >>> host_dispatch() == host_dispatch(host_costs_for(HOST_FITTED_ON)) == (HOST_OP_S, HOST_STEP_S)
    True
    """
    if host is None:
        return HOST_OP_S, HOST_STEP_S
    scale = host.op_nograd_s / host_costs_for(HOST_FITTED_ON).op_nograd_s
    return HOST_OP_S * scale, HOST_STEP_S * scale


def _b(dtype: Any) -> float:
    return float(bytes_per_element(dtype))


def attention(batch: Any, heads: Any, seq: Any, head_dim: Any, dtype: Any = "bf16", *, causal: Any = False,
              kv_heads: Any = None, kv_seq: Any = None, kv_dtype: Any = None, kernel: Any = "sdpa") -> ops.OpCost:
    """Flash attention of ``seq`` queries over ``kv_seq`` cached keys (default ``seq``).

    ``kv_dtype`` (default ``dtype``) is the cache's number format: an fp8 cache halves the K/V bytes.
    ``causal`` may be an array (``seq > 1`` per element): the lower-right causal mask of a single
    query over its cache masks nothing, so one flag serves a mix of decode steps and prefills.
    ``kernel`` is the library whose flash kernels run it (:class:`~gpumodel.core.ops.AttentionKernel`).
    """
    kv_heads = heads if kv_heads is None else kv_heads
    kv_seq = seq if kv_seq is None else kv_seq
    causal = bool(np.any(causal))
    op = ops.attention(batch, heads, seq, head_dim, dtype=dtype, causal=causal, impl="flash",
                       kv_heads=kv_heads, kv_seq=kv_seq, kernel=kernel)
    kv_b = _b(dtype if kv_dtype is None else kv_dtype)
    if kv_b == _b(dtype):
        return op
    kv = 2.0 * batch * kv_heads * kv_seq * head_dim
    return dataclasses.replace(op, bytes_read=op.bytes_read - kv * (_b(dtype) - kv_b))


def kv_cache_write(batch: Any, kv_heads: Any, tokens: Any, head_dim: Any, dtype: Any = "bf16",
                   kv_dtype: Any = None) -> list[ops.OpCost]:
    """The kernels that store ``tokens`` new keys and values per sequence into the cache (one record)."""
    kv_dtype = dtype if kv_dtype is None else kv_dtype
    op = ops.kv_cache_write(batch, kv_heads, tokens, head_dim, dtype=kv_dtype)
    if _b(kv_dtype) == _b(dtype):
        return [op]
    new = 2.0 * batch * kv_heads * tokens * head_dim       # the new K and V arrive in the compute dtype
    return [dataclasses.replace(op, bytes_read=op.bytes_read + new * (_b(dtype) - _b(kv_dtype)))]


def matmul(m: Any, n: Any, k: Any, dtype: Any = "bf16", weight_dtype: Any = None, group_size: int = 128) -> ops.OpCost:
    """``[m, k] @ [k, n]`` with the ``[k, n]`` weight stored as ``weight_dtype`` (default ``dtype``).

    fp8 weights with ``dtype="fp8"`` run an fp8 GEMM. int8/int4 (weight-only) keep 16-bit math and
    read ``k n`` packed weights plus a 16-bit scale per ``group_size`` (int4 also a zero point):
    int4 as :func:`gpumodel.core.ops.matmul` with ``weight_dtype="int4"``, int8 as the 16-bit GEMM
    streaming those bytes (module notes).
    """
    wd = DType(str(getattr(weight_dtype, "value", weight_dtype))) if weight_dtype is not None else None
    if wd is None or wd.value == str(getattr(dtype, "value", dtype)):
        return ops.matmul(m, n, k, dtype)
    op = ops.matmul(m, n, k, dtype, weight_dtype=wd.value) if wd == DType.INT4 else ops.matmul(m, n, k, dtype)
    extra = (4.0 if wd == DType.INT4 else 2.0) / group_size if wd in (DType.INT4, DType.INT8) else 0.0
    w = k * n * (_b(wd) + extra)
    bd = dict(op.breakdown)
    old = bd["b"]
    bd["b"] = w
    return dataclasses.replace(op, bytes_read=op.bytes_read - old + w, breakdown=bd)


def link_bandwidth(gpu: Any) -> float:
    """Per-direction bandwidth of one GPU's link to its peers [bytes/s]: half the NVLink total,
    else PCIe x16 of the GPU's generation (4: 32 GB/s, 5: 64 GB/s, 6: 128 GB/s, per direction)."""
    if gpu.nvlink_bandwidth:
        return gpu.nvlink_bandwidth / 2.0
    return {3: 16e9, 4: 32e9, 5: 64e9, 6: 128e9}.get(int(gpu.pcie_generation), 32e9)


def allreduce_time(nbytes: Any, tp: int, gpu: Any) -> Any:
    """Time of one all-reduce of ``nbytes`` over the ``tp`` GPUs of one node [s] (0 when ``tp == 1``).

    NCCL's all-reduce as :func:`gpumodel.cluster.collectives.system_collective_time` models it on one node of
    the GPU (:func:`gpumodel.records.system.node_system`: the shipped system built on it, else its NVLink or
    PCIe): ring or tree with the fastest of NCCL's LL, LL128 and Simple protocols, or NVLink SHARP where the
    node has it, as NCCL's tuner picks. A decode step's all-reduces are small (``batch x hidden`` values),
    so they cost the LL protocol's latency, ``6.6 us + 2 (tp - 1) x 0.6 us`` over NVLink, more than their
    bytes.

    Examples
    --------
    >>> import gpumodel as gm
    >>> round(allreduce_time(8192, 8, gm.gpu("a100")) * 1e6, 1)    # one token's hidden state, 8 A100s
    15.1
    """
    nbytes = np.asarray(nbytes, dtype=float)
    if tp <= 1:
        return 0.0 * nbytes
    return system_collective_time("all_reduce", nbytes, node_system(gpu, max(8, int(tp))), int(tp))


def in_graph_s(seconds: Any, est) -> Any:
    """A kernel's time [s] inside a replayed CUDA graph: ``seconds`` (its estimate ``est``'s time, or that time
    under load) less the launch overhead an isolated, event-timed kernel carries, plus :data:`GRAPH_LAUNCH_S` for
    each kernel the op runs as (split-KV decode attention, the KV write's two copies run several)."""
    return (np.asarray(seconds, dtype=float) - np.asarray(est.overhead_s, dtype=float)
            + np.asarray(est.kernels, dtype=float) * GRAPH_LAUNCH_S)
