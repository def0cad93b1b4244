"""Op costs of the row-wise kernels: softmax, LayerNorm, RMSNorm and the row sum (part of :mod:`gpumodel.core.ops`,
which re-exports them: call them as ``gm.ops.<name>``).

Each reads a ``rows x cols`` tensor once and writes its output once. Each registers in the op registry like the
other formulas (:func:`gpumodel.core.opcost.register`) and returns an :class:`~gpumodel.core.opcost.OpCost` of
its FLOPs and minimal device-memory traffic; sizes broadcast.
"""

from __future__ import annotations

from typing import Any

from ..records.dtypes import DType, bytes_per_element, dtype as _dtype
from .opcost import OpCost, OpName, check_broadcast, make_op_cost, op_size, register

__all__ = ["softmax", "layer_norm", "rms_norm", "reduce_sum"]


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
