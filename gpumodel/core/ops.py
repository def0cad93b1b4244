"""Op costs: FLOPs and minimal device-memory traffic of common deep-learning ops.

Every op returns an :class:`OpCost` with its useful floating-point work (``flops``) and
the *minimal* device-memory traffic a kernel needs: each input read once, each output
written once (``bytes_read``, ``bytes_written``). Every size argument may be a scalar or a
numpy array; arrays broadcast, so a million shapes are one call. The cost formulas live
in one registry (:func:`gpumodel.core.opcost.register`, with a duplicate guard); :func:`cost`
calls one by name. The record itself is defined in :mod:`gpumodel.core.opcost`; attention in
:mod:`gpumodel.core.attention_ops`, the row-wise kernels (softmax, the norms, the row sum) in
:mod:`gpumodel.core.row_ops` and the step-level ops (embedding, cross-entropy, the AdamW step, the KV-cache write)
in :mod:`gpumodel.core.step_ops`, all re-exported here.

Examples
--------
>>> import gpumodel as gm
>>> op = gm.ops.matmul(4096, 4096, 4096, dtype="fp16")
>>> op.flops / 1e9                          # 2*m*n*k
137.438953472
>>> op.bytes_read / 2**20, op.bytes_written / 2**20   # (m*k + k*n)*2 bytes, m*n*2 bytes
(64.0, 32.0)
>>> gm.ops.matmul(np.array([1024, 2048]), 4096, 4096).flops
array([3.43597384e+10, 6.87194767e+10])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..records.dtypes import DType, bytes_per_element, dtype as _dtype
from .opcost import (
    DuplicateOpError, OpArgumentError, OpCost, OpName, UnknownOpError, check_broadcast, cost, list_ops, make_op_cost,
    op_amount, op_argument, op_size, register, size_arguments,
)
from ..vocabulary import flag, weight_dtype as _weight_dtype
from .attention_ops import STAT_BYTES, AttentionImpl, AttentionKernel, attention  # noqa: F401 (re-exported)
from .row_ops import layer_norm, reduce_sum, rms_norm, softmax  # noqa: F401 (re-exported)
from .step_ops import INDEX_BYTES, adamw_step, cross_entropy, embedding, kv_cache_write  # noqa: F401 (re-exported)

__all__ = [
    "OpCost", "OpName", "AttentionImpl", "AttentionKernel", "OpArgumentError", "UnknownOpError", "DuplicateOpError",
    "register", "cost", "list_ops", "size_arguments",
    "matmul", "bmm", "elementwise", "concat", "softmax", "layer_norm", "rms_norm", "reduce_sum", "embedding",
    "cross_entropy", "attention", "adamw_step", "kv_cache_write", "fuse",
]

#: elements per scale of group-wise int4 weights (the common group size of GPTQ/AWQ/tinygemm checkpoints)
INT4_GROUP = 128
#: bytes of one scale (bf16) of a quantised weight; int4 groups keep a scale and a zero point
SCALE_BYTES = 2


#: bytes of an fp8 GEMM's output element (bf16: ``torch._scaled_mm``'s ``out_dtype`` in fp8 training and serving)
FP8_OUTPUT_BYTES = 2.0
_FP8 = (DType.FP8, DType.FP8_E4M3, DType.FP8_E5M2)


# ---------------------------------------------------------------------------- ops
@register(OpName.MATMUL.value)
def matmul(m: Any, n: Any, k: Any, dtype: DType | str = "bf16", *, weight_dtype: DType | str | None = None) -> OpCost:
    """``C[m, n] = A[m, k] @ B[k, n]`` on tensor cores.

    Parameters
    ----------
    m, n, k : int or array_like
        Matrix sizes [element].
    dtype : str
        Number format of A, B and C ("bf16", "fp16", "tf32" = fp32 data on tensor cores, "fp8", ...).
        An fp8 GEMM writes C in bf16, as ``torch._scaled_mm(..., out_dtype=torch.bfloat16)`` and the fp8
        recipes built on it (Transformer Engine's linear layers, vLLM's fp8 checkpoints) run it.
    weight_dtype : {"int8", "int4", "fp8"}, optional
        Weight-only quantisation: B (the ``k x n`` weight) is stored in this format and dequantised
        on the fly, A and C stay in ``dtype``. int8 has a scale per output channel, int4 a scale and
        a zero point per group of 128 along ``k``, fp8 one scale.

    Returns
    -------
    OpCost
        ``breakdown`` has the bytes of ``a``, ``b`` (with its scales) and ``out``.

    Notes
    -----
    .. math:: F = 2mnk, \\quad R = mk\\,s + kn\\,s_w, \\quad W = mn\\,s

    with :math:`s` the bytes per element (C's: 2 for fp8) and :math:`s_w` those of the weight. The 4096^3 fp16 matmul of
    M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores" (2026):
    ``F/R`` = 2048 FLOP/byte.

    Examples
    --------
    >>> op = matmul(4096, 4096, 4096, "fp16")
    >>> op.flops / op.bytes_read   # 2*4096**3 / (2*4096**2 * 2)
    2048.0
    >>> matmul(1, 4096, 4096, weight_dtype="int4").breakdown["b"] / 2**20   # 4096**2/2 + 2*2*4096*32 bytes
    8.5
    >>> matmul(4096, 4096, 64, "fp8").breakdown["out"] / 2**20   # 4096**2 bf16 outputs
    32.0
    """
    m, n, k = op_size(m, "m"), op_size(n, "n"), op_size(k, "k")
    check_broadcast(m=m, n=n, k=k)
    dt = _dtype(dtype)
    s = bytes_per_element(dt)
    a, c = m * k * s, m * n * (FP8_OUTPUT_BYTES if dt in _FP8 else s)
    shape: dict[str, Any] = {"m": m, "n": n, "k": k}
    if weight_dtype is None:
        b = k * n * s
    else:
        wdt = op_argument(_weight_dtype, weight_dtype, "weight_dtype", (DType.INT8, DType.INT4, DType.FP8))
        scales = {DType.INT8: n * SCALE_BYTES, DType.INT4: 2 * SCALE_BYTES * n * np.ceil(k / INT4_GROUP),
                  DType.FP8: 4.0 + 0.0 * n}[wdt]
        b = k * n * bytes_per_element(wdt) + scales
        shape["weight_dtype"] = wdt.value
    return make_op_cost(OpName.MATMUL, dt, 2.0 * m * n * k, a + b, c, "tensor", shape, {"a": a, "b": b, "out": c})


@register(OpName.BMM.value)
def bmm(batch: Any, m: Any, n: Any, k: Any, dtype: DType | str = "bf16") -> OpCost:
    """``batch`` independent matmuls ``C[i] = A[i] @ B[i]``: every term of :func:`matmul` times ``batch``.

    Parameters
    ----------
    batch : int or array_like
        Matmuls in the batch.
    m, n, k : int or array_like
        Sizes of each matmul [element], as in :func:`matmul`.
    dtype : str
        Number format of A, B and C, as in :func:`matmul`.

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.
        ``breakdown`` has the bytes of ``a``, ``b`` and ``out``.

    Examples
    --------
    >>> bmm(8, 64, 64, 32, "bf16").flops   # 8 * 2*64*64*32
    2097152.0
    """
    batch = op_size(batch, "batch")
    check_broadcast(batch=batch, m=m, n=n, k=k)
    one = matmul(m, n, k, dtype)
    shape = {"batch": batch, **one.shape}
    bd = {key: batch * v for key, v in one.breakdown.items()}
    return make_op_cost(OpName.BMM, one.dtype, batch * one.flops, batch * one.bytes_read,
                        batch * one.bytes_written, "tensor", shape, bd)


@register(OpName.ELEMENTWISE.value)
def elementwise(numel: Any, dtype: DType | str = "bf16", inputs: Any = 1, outputs: Any = 1,
                flops_per_element: Any = 1, *, strided: bool = False, concat: int = 0) -> OpCost:
    """An elementwise op over ``numel`` elements with ``inputs`` input and ``outputs`` output tensors.

    Parameters
    ----------
    numel : float or array_like
        Elements per tensor [element].
    dtype : str
        Number format of the tensors ("bf16", "fp16", "fp32", ...).
    inputs, outputs : float or array_like
        Tensors read and written, each of ``numel`` elements.
    flops_per_element : float or array_like
        Floating-point operations per element [FLOP] (ReLU 1: a max; GELU (tanh) about 8).
    strided : bool
        Whether an operand is a strided view (a slice such as one half of a fused projection's
        output, a transposed head layout) or a broadcast (``cos`` over batch and heads). PyTorch then
        runs its generic ``elementwise_kernel``, which computes every operand's offset from the
        index instead of loading vectors: on current GPUs its issue rate (the calibrated
        ``strided_elem_rate`` per element and ``strided_operand_rate`` per operand), more than the
        bandwidth, bounds it. The traffic is the same.
    concat : int
        For a ``torch.cat`` of this many inputs (0: not a concatenation); see :func:`concat`, which
        sets it.

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.

    Notes
    -----
    .. math:: F = f\\,N, \\quad R = i\\,N s, \\quad W = o\\,N s

    Examples
    --------
    >>> relu = elementwise(4096 * 4096, "fp16")       # ReLU on 4096 x 4096 fp16 (Brenndoerfer 2026)
    >>> relu.flops / relu.bytes_read                  # 1 FLOP per 2-byte element read
    0.5
    """
    numel = op_size(numel, "numel")
    inputs, outputs = op_amount(inputs, "inputs"), op_amount(outputs, "outputs")
    fpe = op_amount(flops_per_element, "flops_per_element")
    check_broadcast(numel=numel, inputs=inputs, outputs=outputs, flops_per_element=fpe)
    if np.any(np.asarray(inputs) + np.asarray(outputs) <= 0):
        raise OpArgumentError("an elementwise op reads or writes at least one tensor: inputs + outputs must be > 0, "
                              f"got inputs={inputs!r}, outputs={outputs!r}")
    dt = _dtype(dtype)
    s = bytes_per_element(dt)
    shape = {"numel": numel, "inputs": inputs, "outputs": outputs, "flops_per_element": fpe}
    if op_argument(flag, strided, "strided"):
        shape["strided"] = True
    if concat:
        if isinstance(concat, bool) or not isinstance(concat, (int, np.integer)) or concat < 2:
            raise OpArgumentError(f"concat must be the number of tensors concatenated, an integer >= 2 (or 0 "
                                  f"for an elementwise op), got {concat!r}", argument="concat", value=concat,
                                  allowed="an integer >= 2 (or 0 for an elementwise op)")
        shape["concat"] = int(concat)
    return make_op_cost(OpName.ELEMENTWISE, dt, fpe * numel, inputs * numel * s, outputs * numel * s, "vector", shape)


def concat(numel: Any, dtype: DType | str = "bf16", pieces: int = 2, *, strided: bool = False) -> OpCost:
    """``torch.cat`` of ``pieces`` equal tensors into one of ``numel`` elements: a copy.

    Parameters
    ----------
    numel : float or array_like
        Elements of the output [element] (each input holds ``numel / pieces``).
    dtype : str
        Number format of the tensors ("bf16", "fp16", "fp32", ...).
    pieces : int
        Tensors concatenated (at least 2).
    strided : bool
        Whether the inputs are strided views (the two halves of a row swapped by a rotary embedding's
        ``rotate_half``, slices of a fused output). PyTorch then runs ``CatArrayBatchedCopy``, whose
        fixed grid of threads copies element after element (see
        :func:`gpumodel.calibration.kernels.concat_steps`); contiguous inputs get its vectorised copy.

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.

    Notes
    -----
    Each element is read once and written once: :math:`R = W = N s`, :math:`F = 0`. The op is an
    elementwise record (``name == "elementwise"``) with ``shape["concat"] = pieces``.

    Examples
    --------
    >>> rot = concat(8 * 4096 * 4096, "bf16", strided=True)   # cat((-x2, x1), -1) of a bf16 activation
    >>> rot.bytes / 2**20, rot.shape["concat"]                 # read once, written once
    (512.0, 2)
    """
    return elementwise(numel, dtype, 1, 1, 0, strided=strided, concat=pieces)


def fuse(*ops: OpCost) -> OpCost:
    """Fuse a chain of ops into one kernel whose intermediates never touch device memory.

    The chain is ``ops[0] -> ops[1] -> ...``: each op consumes the previous op's output (plus,
    possibly, extra inputs of its own, such as a residual or ``gamma``).

    Parameters
    ----------
    *ops : OpCost
        The ops in chain order (or one list or tuple of them); at least one.

    Returns
    -------
    OpCost
        A ``"fused"`` op: ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes] of the chain, and the
        ops themselves in ``parts``.

    Notes
    -----
    With :math:`R_i, W_i, F_i` the reads, writes and FLOPs of op :math:`i` of :math:`N`:

    .. math::

        F = \\sum_i F_i, \\quad
        R = R_1 + \\sum_{i \\ge 2} \\max(R_i - W_{i-1}, 0), \\quad
        W = W_N

    The first op's inputs are read; a later op reads only what it needs beyond its predecessor's
    output (that output stays in registers); only the last op's output is written. For a chain of
    unary elementwise ops this is "read the input once, write the result once" (the fused ReLU ->
    dropout example of M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores",
    2026). An intermediate that is also needed later (e.g. saved for the backward pass) is not
    modelled: add it as an op of its own. The fused op runs on tensor cores
    (in the first tensor op's dtype) if any part does, else on CUDA cores in the first op's dtype.

    Examples
    --------
    >>> relu = elementwise(1024, "fp16")
    >>> dropout = elementwise(1024, "fp16", flops_per_element=2)
    >>> both = fuse(relu, dropout)
    >>> both.bytes, relu.bytes + dropout.bytes      # 2*1024*2 fused vs 4*1024*2 unfused
    (4096.0, 8192.0)
    """
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = tuple(ops[0])
    if not ops:
        raise OpArgumentError("fuse needs at least one op")
    for i, op in enumerate(ops):
        if not isinstance(op, OpCost):
            raise OpArgumentError(f"fuse argument {i} must be an OpCost, got {type(op).__name__}")
    flops = sum((op.flops for op in ops[1:]), ops[0].flops)
    read = ops[0].bytes_read
    for prev, op in zip(ops, ops[1:]):
        read = read + np.maximum(op.bytes_read - prev.bytes_written, 0.0)
    tensor = [op for op in ops if op.unit == "tensor"]
    lead = tensor[0] if tensor else ops[0]
    return make_op_cost(OpName.FUSED, lead.dtype, flops, read, ops[-1].bytes_written, lead.unit,
                        {"ops": float(len(ops))}, None, tuple(ops))
