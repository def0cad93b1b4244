"""Op costs of a model step beyond its kernels' math: embedding lookup, cross-entropy loss, the fused AdamW
step and the KV-cache write (part of :mod:`gpumodel.core.ops`, which re-exports them: call them as ``gm.ops.<name>``).

Each registers in the op registry like the other formulas (:func:`gpumodel.core.opcost.register`) and returns an
:class:`~gpumodel.core.opcost.OpCost` of its FLOPs and minimal device-memory traffic; sizes broadcast.
"""

from __future__ import annotations

from typing import Any

from ..records.dtypes import DType, bytes_per_element, dtype as _dtype
from .opcost import OpArgumentError, OpCost, OpName, check_broadcast, make_op_cost, op_argument, op_size, register
from ..vocabulary import flag

__all__ = ["embedding", "cross_entropy", "adamw_step", "kv_cache_write", "INDEX_BYTES"]

#: bytes of one token id (PyTorch's int64 index tensors)
INDEX_BYTES = 8


@register(OpName.EMBEDDING.value)
def embedding(tokens: Any, vocab: Any, hidden: Any, dtype: DType | str = "bf16", *, backward: bool = False) -> OpCost:
    """Embedding lookup: gather one ``hidden``-wide row of a ``vocab x hidden`` table per token.

    Parameters
    ----------
    tokens, vocab, hidden : int or array_like
        Token ids looked up, rows of the table, row width [element].
    dtype : str
        Format of the table ("bf16", "fp16", "fp32", ...).
    backward : bool
        The gradient of the table instead (PyTorch's ``embedding_dense_backward``).

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.

    Notes
    -----
    Forward reads the gathered rows and the int64 token ids and writes the output; no FLOPs:
    :math:`R = t h s + 8t`, :math:`W = t h s`. Rows repeated within a batch are counted each time.
    Backward produces a dense ``vocab x hidden`` gradient: it reads the output gradient and the
    ids and writes the whole table (zeros where no token points) and adds one row per token:
    :math:`R = t h s + 8t`, :math:`W = v h s`, :math:`F = t h`.

    Examples
    --------
    >>> embedding(10, 32000, 16, "fp32").bytes_read   # 10*16*4 + 10*8
    720.0
    >>> embedding(10, 32000, 16, "fp32", backward=True).bytes_written   # the dense gradient: 32000*16*4
    2048000.0
    """
    tokens, vocab, hidden = op_size(tokens, "tokens"), op_size(vocab, "vocab"), op_size(hidden, "hidden")
    check_broadcast(tokens=tokens, vocab=vocab, hidden=hidden)
    backward = op_argument(flag, backward, "backward")
    dt = _dtype(dtype)
    s = bytes_per_element(dt)
    rows = tokens * hidden * s
    ids = tokens * INDEX_BYTES
    shape = {"tokens": tokens, "vocab": vocab, "hidden": hidden, "backward": backward}
    if backward:
        table = vocab * hidden * s
        return make_op_cost(OpName.EMBEDDING, dt, tokens * hidden, rows + ids, table, "vector", shape,
                            {"activations": rows, "indices": ids, "weights": table})
    return make_op_cost(OpName.EMBEDDING, dt, 0.0 * tokens, rows + ids, rows, "vector", shape,
                        {"weights": rows, "indices": ids, "activations": rows})


@register(OpName.CROSS_ENTROPY.value)
def cross_entropy(tokens: Any, vocab: Any, dtype: DType | str = "bf16", *, backward: bool = False,
                  upcast: bool = True) -> OpCost:
    """Cross-entropy loss per token from ``tokens x vocab`` logits: log-softmax and NLL.

    Parameters
    ----------
    tokens, vocab : int or array_like
        Tokens (rows of logits) and vocabulary size (logits per token) [element].
    dtype : str
        Format of the logits.
    backward : bool
        The gradient of the logits instead of the loss.
    upcast : bool
        Whether the logits are cast to fp32 first, as Hugging Face's causal-LM losses do
        (``logits.float()``); it does not change the minimal traffic below, only the kernels
        PyTorch runs (a cast, then log-softmax and NLL in fp32), which the time model charges.

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.

    Notes
    -----
    Forward reads the logits and the int64 targets, writes one loss per token in ``dtype``:
    :math:`R = tv\\,s + 8t`, :math:`W = t\\,s`. FLOPs are 4 per logit for the log-sum-exp (max,
    subtract, exp, sum): :math:`F = 4tv`. Backward reads the saved log-probabilities and the targets
    and writes the gradient ``softmax - onehot``: :math:`R = tv\\,s + 8t`, :math:`W = tv\\,s`,
    :math:`F = 2tv` (exp and subtract).

    Examples
    --------
    >>> cross_entropy(2, 10, "fp32").bytes_read     # 2*10*4 + 2*8
    96.0
    >>> cross_entropy(2, 10, "fp32", backward=True).bytes_written   # the logits' gradient, 2*10*4
    80.0
    """
    tokens, vocab = op_size(tokens, "tokens"), op_size(vocab, "vocab")
    check_broadcast(tokens=tokens, vocab=vocab)
    backward, upcast = op_argument(flag, backward, "backward"), op_argument(flag, upcast, "upcast")
    dt = _dtype(dtype)
    s = bytes_per_element(dt)
    logits, ids = tokens * vocab * s, tokens * INDEX_BYTES
    shape = {"tokens": tokens, "vocab": vocab, "backward": backward, "upcast": upcast}
    if backward:
        return make_op_cost(OpName.CROSS_ENTROPY, dt, 2.0 * tokens * vocab, logits + ids, logits, "vector", shape,
                            {"activations": 2 * logits, "indices": ids})
    return make_op_cost(OpName.CROSS_ENTROPY, dt, 4.0 * tokens * vocab, logits + ids, tokens * s, "vector", shape,
                        {"activations": logits + tokens * s, "indices": ids})


@register(OpName.ADAMW_STEP.value)
def adamw_step(numel: Any, param_dtype: DType | str = "fp32", *, tensors: Any = 1) -> OpCost:
    """One AdamW update of ``numel`` parameters held in ``tensors`` tensors (a fused multi-tensor kernel).

    Parameters
    ----------
    numel : int or array_like
        Parameters updated [element].
    param_dtype : str
        Format of the parameters, their gradients and the two moment buffers (PyTorch keeps the
        moments in the parameters' format).
    tensors : int or array_like
        Parameter tensors the ``numel`` are spread over (the multi-tensor kernel walks a list of
        them in chunks; ``torch.optim.AdamW(fused=True)`` launches one kernel per group of tensors).

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.
        ``breakdown`` has the bytes of ``weights``, ``gradients`` and ``optimizer`` (the moments).

    Notes
    -----
    Reads the parameter, its gradient and both moments and writes the parameter and both moments:
    :math:`R = 4Ns`, :math:`W = 3Ns`. FLOPs, counting the two moment updates (3 each), the bias
    corrections folded into the step size, the square root, the division, the weight decay and the
    update: :math:`F = 12N`.

    References
    ----------
    I. Loshchilov, F. Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.

    Examples
    --------
    >>> op = adamw_step(10**9, "fp32", tensors=290)
    >>> op.bytes / 1e9                    # 7 * 4 bytes per parameter
    28.0
    """
    numel, tensors = op_size(numel, "numel"), op_size(tensors, "tensors")
    check_broadcast(numel=numel, tensors=tensors)
    dt = _dtype(param_dtype)
    if dt not in (DType.FP32, DType.BF16, DType.FP16):
        raise OpArgumentError(f"param_dtype of a fused AdamW step is fp32, bf16 or fp16 (the parameters it updates), "
                              f"got {dt.value!r}", argument="param_dtype", value=param_dtype,
                              allowed="'fp32', 'bf16', 'fp16'")
    s = bytes_per_element(dt)
    return make_op_cost(OpName.ADAMW_STEP, dt, 12.0 * numel, 4.0 * numel * s, 3.0 * numel * s, "vector",
                        {"numel": numel, "tensors": tensors}, {"weights": 2.0 * numel * s, "gradients": numel * s,
                                                          "optimizer": 4.0 * numel * s})


@register(OpName.KV_CACHE_WRITE.value)
def kv_cache_write(batch: Any, kv_heads: Any, tokens: Any, head_dim: Any, dtype: DType | str = "bf16") -> OpCost:
    """Write the keys and values of ``tokens`` new tokens into a KV cache (one layer).

    Parameters
    ----------
    batch, kv_heads, tokens, head_dim : int or array_like
        Sequences, key/value heads, new tokens per sequence, head dimension [element].
    dtype : str
        Format of the cache.

    Returns
    -------
    OpCost
        ``flops`` [FLOP], ``bytes_read`` and ``bytes_written`` [bytes]; arrays where the sizes were arrays.

    Notes
    -----
    Reads the new K and V and writes them into the cache: :math:`R = W = 2 b h_{kv} t d\\,s`, plus the
    int64 positions (:math:`8t`) read.

    Examples
    --------
    >>> kv_cache_write(1, 8, 1, 128).bytes_written     # K and V of one token: 2*8*128*2 bytes
    4096.0
    """
    batch, kv_heads = op_size(batch, "batch"), op_size(kv_heads, "kv_heads")
    tokens, head_dim = op_size(tokens, "tokens"), op_size(head_dim, "head_dim")
    check_broadcast(batch=batch, kv_heads=kv_heads, tokens=tokens, head_dim=head_dim)
    dt = _dtype(dtype)
    kv = 2.0 * batch * kv_heads * tokens * head_dim * bytes_per_element(dt)
    return make_op_cost(OpName.KV_CACHE_WRITE, dt, 0.0 * kv, kv + tokens * INDEX_BYTES, kv, "vector",
                        {"batch": batch, "kv_heads": kv_heads, "tokens": tokens, "head_dim": head_dim},
                        {"activations": kv, "indices": tokens * INDEX_BYTES, "kv_cache": kv})
