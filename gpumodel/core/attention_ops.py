"""Op cost of scaled dot-product attention: FlashAttention and the naive form, forward and backward, with
grouped-query heads, a KV cache and dropout (part of :mod:`gpumodel.core.ops`, which re-exports it: call it as
``gm.ops.attention``).

The formula registers in the op registry like the others (:func:`gpumodel.core.opcost.register`) and returns an
:class:`~gpumodel.core.opcost.OpCost` of its FLOPs and minimal device-memory traffic; sizes broadcast.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from ..records.dtypes import DType, bytes_per_element, dtype as _dtype
from .opcost import (OpArgumentError, OpCost, OpName, check_broadcast, make_op_cost, op_amount, op_argument, op_size,
                     register)
from ..vocabulary import choice, flag

__all__ = ["attention", "AttentionImpl", "AttentionKernel", "STAT_BYTES"]


#: bytes of one fp32 statistic (softmax log-sum-exp kept by FlashAttention)
STAT_BYTES = 4


class AttentionImpl(str, enum.Enum):
    """How attention is computed: ``flash`` keeps scores on chip, ``naive`` writes them to device memory,
    ``math`` is PyTorch's SDPA math backend (the naive form, computed in fp32 for 16-bit inputs)."""

    FLASH = "flash"
    NAIVE = "naive"
    MATH = "math"

    def __str__(self) -> str:
        return self.value


class AttentionKernel(str, enum.Enum):
    """The library whose flash-attention kernel runs the op (its FLOPs and traffic are the same; its speed is not).

    ``sdpa`` is what PyTorch's ``scaled_dot_product_attention`` dispatches to on the GPU and dtype (cuDNN's
    kernels on Hopper for a square attention, FlashAttention-2's for a chunk over a longer cache, its own
    FlashAttention-2 code on Ampere and Ada); ``cudnn`` is cuDNN's fused attention; ``fa2`` the flash-attn 2
    package (the same ``mma.sync`` kernels on every GPU from Ampere on: no wgmma on Hopper); ``fa3``
    FlashAttention-3 (Hopper only: wgmma, TMA, warp specialisation); ``flashinfer`` FlashInfer's prefill and
    decode kernels; ``triton`` a Triton flash-attention kernel (the Triton tutorial's form).
    """

    SDPA = "sdpa"
    CUDNN = "cudnn"
    FA2 = "fa2"
    FA3 = "fa3"
    FLASHINFER = "flashinfer"
    TRITON = "triton"

    def __str__(self) -> str:
        return self.value


@register(OpName.ATTENTION.value)
def attention(batch: Any, heads: Any, seq: Any, head_dim: Any, dtype: DType | str = "bf16", *, causal: bool = False,
              impl: AttentionImpl | str = "flash", backward: bool = False, kv_heads: Any = None, kv_seq: Any = None,
              dropout: float = 0.0, kernel: AttentionKernel | str = "sdpa") -> OpCost:
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
    kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"}
        Which library's flash kernel runs it (:class:`AttentionKernel`); FLOPs and traffic do not depend on it,
        the time model prices each from its architecture's own figures (``fa3`` runs on Hopper alone). Only
        ``impl="flash"`` has a choice: the naive and math forms take ``"sdpa"``.

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
    >>> attention(1, 32, 4096, 128, kernel="fa2").flops == op.flops      # the kernel changes the speed, not the work
    True
    """
    batch, heads = op_size(batch, "batch"), op_size(heads, "heads")
    seq, head_dim = op_size(seq, "seq"), op_size(head_dim, "head_dim")
    kv_heads = heads if kv_heads is None else op_size(kv_heads, "kv_heads")
    kv_seq = seq if kv_seq is None else op_size(kv_seq, "kv_seq")
    check_broadcast(batch=batch, heads=heads, seq=seq, head_dim=head_dim, kv_heads=kv_heads, kv_seq=kv_seq)
    causal, backward = op_argument(flag, causal, "causal"), op_argument(flag, backward, "backward")
    impl = op_argument(choice, AttentionImpl, impl, "impl")
    dropout = op_amount(dropout, "dropout")
    kernel = op_argument(choice, AttentionKernel, kernel, "kernel")
    if impl is not AttentionImpl.FLASH and kernel is not AttentionKernel.SDPA:
        raise OpArgumentError(f"kernel={kernel.value!r} is a flash-attention kernel; impl={impl.value!r} takes "
                              f"kernel='sdpa'", argument="kernel", value=kernel.value,
                              allowed="'sdpa' with impl='naive' or 'math'")
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
             "kv_seq": kv_seq, "causal": causal, "backward": backward, "impl": impl.value, "dropout": dropout,
             "kernel": kernel.value}
    return make_op_cost(OpName.ATTENTION, dt, flops, read, written, "tensor", shape, bd)
