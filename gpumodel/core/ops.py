"""Op costs: FLOPs and minimal device-memory traffic of common deep-learning ops.

Every op returns an :class:`OpCost` with its useful floating-point work (``flops``) and
the *minimal* device-memory traffic a kernel needs: each input read once, each output
written once (``bytes_read``, ``bytes_written``). Every size argument may be a scalar or a
numpy array; arrays broadcast, so a million shapes are one call. The cost formulas live
in one registry (:func:`gpumodel.core.opcost.register`, with a duplicate guard); :func:`cost`
calls one by name. The record itself is defined in :mod:`gpumodel.core.opcost`; the step-level ops (embedding,
cross-entropy, the AdamW step, the KV-cache write) in :mod:`gpumodel.core.step_ops`, re-exported here.

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

import enum
from typing import Any

import numpy as np

from ..records.dtypes import DType, bytes_per_element, dtype as _dtype
from .opcost import (
    DuplicateOpError, OpArgumentError, OpCost, OpName, UnknownOpError, check_broadcast, cost, list_ops, make_op_cost,
    op_amount, op_argument, op_size, register, size_arguments,
)
from ..vocabulary import choice, flag, weight_dtype as _weight_dtype
from .step_ops import INDEX_BYTES, adamw_step, cross_entropy, embedding, kv_cache_write  # noqa: F401 (re-exported)

__all__ = [
    "OpCost", "OpName", "AttentionImpl", "OpArgumentError", "UnknownOpError", "DuplicateOpError",
    "register", "cost", "list_ops", "size_arguments",
    "matmul", "bmm", "elementwise", "concat", "softmax", "layer_norm", "rms_norm", "reduce_sum", "embedding",
    "cross_entropy", "attention", "adamw_step", "kv_cache_write", "fuse",
]

#: bytes of one fp32 statistic (softmax log-sum-exp kept by FlashAttention)
STAT_BYTES = 4
#: elements per scale of group-wise int4 weights (the common group size of GPTQ/AWQ/tinygemm checkpoints)
INT4_GROUP = 128
#: bytes of one scale (bf16) of a quantised weight; int4 groups keep a scale and a zero point
SCALE_BYTES = 2


class AttentionImpl(str, enum.Enum):
    """How attention is computed: ``flash`` keeps scores on chip, ``naive`` writes them to device memory,
    ``math`` is PyTorch's SDPA math backend (the naive form, computed in fp32 for 16-bit inputs)."""

    FLASH = "flash"
    NAIVE = "naive"
    MATH = "math"

    def __str__(self) -> str:
        return self.value


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


@register(OpName.SOFTMAX.value)
def softmax(rows: Any, cols: Any, dtype: DType | str = "bf16") -> OpCost:
    """Softmax over the last dimension of a ``rows x cols`` tensor (one fused kernel).

    Parameters
    ----------
    rows, cols : int or array_like
        Rows [element] and the length of the softmax dimension [element].
    dtype : str
        Number format of the tensors ("bf16", "fp16", "fp32", ...).

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.

    Notes
    -----
    Reads the input once and writes the output once: :math:`R = W = rc\\,s`. FLOPs are 5 per
    element, counting the row max (1 compare), the subtraction (1), ``exp`` (1, a special-function
    unit op counted as one), the row sum (1) and the division (1): :math:`F = 5rc`.

    Examples
    --------
    >>> softmax(4096, 4096, "fp16").bytes / 2**20     # 2 * 4096*4096 * 2 bytes
    64.0
    """
    rows, cols = op_size(rows, "rows"), op_size(cols, "cols")
    check_broadcast(rows=rows, cols=cols)
    dt = _dtype(dtype)
    x = rows * cols * bytes_per_element(dt)
    return make_op_cost(OpName.SOFTMAX, dt, 5.0 * rows * cols, x, x, "vector", {"rows": rows, "cols": cols})


@register(OpName.LAYER_NORM.value)
def layer_norm(rows: Any, cols: Any, dtype: DType | str = "bf16") -> OpCost:
    """LayerNorm over ``cols`` (Ba et al. 2016) with an elementwise affine ``gamma``, ``beta``.

    Parameters
    ----------
    rows, cols : int or array_like
        Rows normalised (tokens) [element] and the normalised dimension (hidden size) [element].
    dtype : str
        Number format of the tensors ("bf16", "fp16", "fp32", ...).

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.

    Notes
    -----
    Reads ``x`` and ``gamma``, ``beta``; writes ``y``: :math:`R = (rc + 2c)\\,s`, :math:`W = rc\\,s`.
    FLOPs are 7 per element: the mean's sum (1), ``x - mean`` (1), its square and sum (2), the
    scale by ``1/std`` (1), ``* gamma`` (1) and ``+ beta`` (1); per-row work (``rsqrt``) is ignored.
    The saved mean and rstd (training) are ``2r`` fp32 values, below 1% of the traffic; not counted.

    Examples
    --------
    >>> layer_norm(2, 4, "fp32").bytes_read     # (2*4 + 2*4) * 4 bytes
    64.0
    """
    rows, cols = op_size(rows, "rows"), op_size(cols, "cols")
    check_broadcast(rows=rows, cols=cols)
    dt = _dtype(dtype)
    s = bytes_per_element(dt)
    x, params = rows * cols * s, 2.0 * cols * s
    return make_op_cost(OpName.LAYER_NORM, dt, 7.0 * rows * cols, x + params, x, "vector", {"rows": rows, "cols": cols},
                        {"activations": 2.0 * x, "weights": params})


@register(OpName.RMS_NORM.value)
def rms_norm(rows: Any, cols: Any, dtype: DType | str = "bf16") -> OpCost:
    """RMSNorm over ``cols`` (Zhang & Sennrich 2019) with a scale ``gamma``.

    Parameters
    ----------
    rows, cols : int or array_like
        Rows normalised (tokens) [element] and the normalised dimension (hidden size) [element].
    dtype : str
        Number format of the tensors ("bf16", "fp16", "fp32", ...).

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.

    Notes
    -----
    :math:`R = (rc + c)\\,s`, :math:`W = rc\\,s`. FLOPs are 4 per element: square (1), sum (1),
    scale by ``1/rms`` (1), ``* gamma`` (1).

    Examples
    --------
    >>> rms_norm(2, 4, "fp32").flops    # 4 * 2*4
    32.0
    """
    rows, cols = op_size(rows, "rows"), op_size(cols, "cols")
    check_broadcast(rows=rows, cols=cols)
    dt = _dtype(dtype)
    s = bytes_per_element(dt)
    x, params = rows * cols * s, cols * s
    return make_op_cost(OpName.RMS_NORM, dt, 4.0 * rows * cols, x + params, x, "vector", {"rows": rows, "cols": cols},
                        {"activations": 2.0 * x, "weights": params})


@register(OpName.REDUCE_SUM.value)
def reduce_sum(rows: Any, cols: Any, dtype: DType | str = "bf16") -> OpCost:
    """Sum over the last dimension: ``rows x cols`` in, ``rows`` out.

    Parameters
    ----------
    rows, cols : int or array_like
        Rows (outputs) [element] and the length of the summed dimension [element].
    dtype : str
        Number format of the tensors ("bf16", "fp16", "fp32", ...).

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.

    Notes
    -----
    :math:`R = rc\\,s`, :math:`W = r\\,s`, :math:`F = rc` (one add per element into the accumulator).

    Examples
    --------
    >>> reduce_sum(3, 5, "fp32").bytes_written   # 3 * 4 bytes
    12.0
    """
    rows, cols = op_size(rows, "rows"), op_size(cols, "cols")
    check_broadcast(rows=rows, cols=cols)
    dt = _dtype(dtype)
    s = bytes_per_element(dt)
    return make_op_cost(OpName.REDUCE_SUM, dt, rows * cols, rows * cols * s, rows * s, "vector",
                        {"rows": rows, "cols": cols})


@register(OpName.ATTENTION.value)
def attention(batch: Any, heads: Any, seq: Any, head_dim: Any, dtype: DType | str = "bf16", *, causal: bool = False,
              impl: AttentionImpl | str = "flash", backward: bool = False, kv_heads: Any = None, kv_seq: Any = None,
              dropout: float = 0.0) -> OpCost:
    """Scaled dot-product attention ``softmax(Q K^T / sqrt(d)) V``, forward or backward.

    Parameters
    ----------
    batch, heads, seq, head_dim : int or array_like
        Batch size, query heads, query tokens, head dimension [element].
    dtype : str
        Number format of Q, K, V and O ("bf16", "fp16", "fp32", ...).
    causal : bool
        Causal mask (aligned to the last key: query ``i`` of ``seq`` sees the first
        ``kv_seq - seq + i + 1`` keys); with ``seq == kv_seq`` half of the scores are useful work.
    impl : {"flash", "naive", "math"}
        ``flash`` (FlashAttention) keeps the ``seq x kv_seq`` scores on chip; ``naive`` writes the
        scores and the softmax output to device memory and reads them back; ``math`` is the same
        form as ``scaled_dot_product_attention``'s math backend runs it (counted as ``naive`` here;
        the calibrated time model prices its fp32 kernels).
    backward : bool
        Cost of the backward pass instead of the forward.
    kv_heads : int or array_like, optional
        Key/value heads (grouped-query attention); defaults to ``heads``. Must divide ``heads``.
    kv_seq : int or array_like, optional
        Keys and values attended to (a KV cache: decode has ``seq = 1``, chunked prefill
        ``seq < kv_seq``); defaults to ``seq``.
    dropout : float
        Dropout probability on the attention weights (training); the naive form writes a mask.

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.
        ``breakdown`` has the bytes of ``q``, ``kv``, ``out``, ``stats`` (flash) or ``scores`` (naive).

    Notes
    -----
    FLOPs follow the FlashAttention-2 paper's convention (Dao 2023, Sec. 4.1): the two matmuls
    ``Q K^T`` and ``P V`` give :math:`F_{fwd} = 4 b h s s_{kv} d\\,f`, with :math:`f` the unmasked
    fraction of the scores (1; causal :math:`1 - s / (2 s_{kv})`, i.e. 1/2 when :math:`s = s_{kv}`);
    softmax and scaling are not counted. Backward: ``flash`` runs 5 matmuls (it recomputes
    ``Q K^T``), so :math:`F_{bwd} = 2.5 F_{fwd}` as in that paper; ``naive`` keeps ``P`` and runs 4.

    Traffic (``q = b h s d`` elements, ``kv = b h_{kv} s_{kv} d``, ``S = b h s s_{kv}``):

    * flash forward reads Q, K, V and writes O and the fp32 log-sum-exp (``b h s``);
      backward reads Q, K, V, O, dO and the log-sum-exp and writes dQ, dK, dV.
    * naive forward runs ``S = Q K^T`` (read Q, K; write S), ``P = softmax(S)`` (mask and scale
      fused; read S, write P), ``O = P V`` (read P, V; write O); dropout adds a read and a write
      of ``P`` and a one-byte mask per score. Backward runs ``dV = P^T dO``, ``dP = dO V^T``,
      ``dS = P * (dP - rowsum(dP * P))``, ``dQ = dS K``, ``dK = dS^T Q``: score-sized traffic of 5
      reads and 2 writes. The causal mask does not shrink the score buffers.

    References
    ----------
    T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023.

    Examples
    --------
    >>> op = attention(1, 32, 4096, 128)            # flash, forward, bf16
    >>> op.flops / 1e12                             # 4*1*32*4096**2*128
    0.274877906944
    >>> attention(1, 32, 4096, 128, causal=True).flops / op.flops
    0.5
    >>> attention(8, 32, 1, 128, kv_heads=8, kv_seq=4096).bytes_read / 2**20   # decode: the KV cache, 2*8*8*4096*128*2 B
    128.0625
    """
    batch, heads = op_size(batch, "batch"), op_size(heads, "heads")
    seq, head_dim = op_size(seq, "seq"), op_size(head_dim, "head_dim")
    kv_heads = heads if kv_heads is None else op_size(kv_heads, "kv_heads")
    kv_seq = seq if kv_seq is None else op_size(kv_seq, "kv_seq")
    check_broadcast(batch=batch, heads=heads, seq=seq, head_dim=head_dim, kv_heads=kv_heads, kv_seq=kv_seq)
    causal, backward = op_argument(flag, causal, "causal"), op_argument(flag, backward, "backward")
    impl = op_argument(choice, AttentionImpl, impl, "impl")
    dropout = op_amount(dropout, "dropout")
    if np.ndim(dropout) or dropout >= 1.0:
        raise OpArgumentError(f"dropout must be a single probability in [0, 1), got {dropout!r}", argument="dropout",
                              value=dropout, allowed="a single probability in [0, 1)")
    if np.any(np.fmod(heads, kv_heads) != 0):
        raise OpArgumentError(f"kv_heads must divide heads; got heads={heads!r}, kv_heads={kv_heads!r}")
    if causal and np.any(np.asarray(seq) > np.asarray(kv_seq)):
        raise OpArgumentError(f"a causal attention needs seq <= kv_seq; got seq={seq!r}, kv_seq={kv_seq!r}")
    dt = _dtype(dtype)
    s = bytes_per_element(dt)

    frac = 1.0 - seq / (2.0 * kv_seq) if causal else 1.0
    fwd = 4.0 * batch * heads * seq * kv_seq * head_dim * frac
    q = batch * heads * seq * head_dim * s          # also O, dO, dQ
    kv = batch * kv_heads * kv_seq * head_dim * s   # each of K, V, dK, dV
    scores = batch * heads * seq * kv_seq * s
    mask = batch * heads * seq * kv_seq if dropout > 0 else 0.0 * scores   # one byte per score
    lse = batch * heads * seq * STAT_BYTES
    if impl is AttentionImpl.FLASH and not backward:
        flops, read, written = fwd, q + 2 * kv, q + lse
        bd = {"q": q, "kv": 2 * kv, "out": q, "stats": lse}
    elif impl is AttentionImpl.FLASH:
        flops, read, written = 2.5 * fwd, 3 * q + 2 * kv + lse, q + 2 * kv
        bd = {"q": 2 * q, "kv": 4 * kv, "out": 2 * q, "stats": lse}
    elif not backward:
        # S = QK^T: read q, k, write S | P = softmax(S): read S, write P | O = PV: read P, v, write O
        drop = scores if dropout > 0 else 0.0
        flops, read, written = fwd, q + 2 * kv + 2 * scores + drop, q + 2 * scores + drop + mask
        bd = {"q": q, "kv": 2 * kv, "out": q, "scores": 4 * scores + 2 * drop + mask}
    else:
        # dV = P^T dO: read P, dO, write dV | dP = dO V^T: read dO, V, write dP
        # dS: read P, dP, write dS | dQ = dS K: read dS, K, write dQ | dK = dS^T Q: read dS, Q, write dK
        flops = 2.0 * fwd
        read = 5 * scores + 2 * q + 2 * kv + q + mask
        written = 2 * scores + 2 * kv + q
        bd = {"q": 2 * q, "kv": 4 * kv, "out": 2 * q, "scores": 7 * scores + mask}
    shape = {"batch": batch, "heads": heads, "seq": seq, "head_dim": head_dim, "kv_heads": kv_heads,
             "kv_seq": kv_seq, "causal": causal, "backward": backward, "impl": impl.value, "dropout": dropout}
    return make_op_cost(OpName.ATTENTION, dt, flops, read, written, "tensor", shape, bd)


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
