"""The building blocks of a decoder layer's kernels in eager PyTorch: the :class:`Layer` that collects forward
kernels with their backward and host work, and the pieces it is built from (norms, casts, linear layers,
rotary embeddings, MLPs, memory-bound kernels).

Shared by the dense layer (:mod:`~gpumodel.training.stepkernels`), the mixture-of-experts and MLA layers
(:mod:`~gpumodel.training.moe`) and the step plan (:mod:`~gpumodel.training.stepplan`); see
:mod:`gpumodel.training.stepkernels` for what each kernel reads and writes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ..base.errors import UnsupportedError
from ..calibration.attention import kernel_path
from ..core import ops
from ..records.transformer import MLPType, NormType, TransformerConfig
from ..vocabulary import choice

__all__ = ["Kernels", "Layer", "COMPUTE_DTYPE", "PARAM_DTYPE", "ELEMENT_BYTES", "attention_kernel_on", "memory_kernel",
           "with_operands", "float_dtype", "matmul_backward", "add_norm", "add_cast_for_matmul", "add_linear",
           "add_rope", "add_split_backward", "add_mlp"]

Kernels = list[tuple[ops.OpCost, int]]

COMPUTE_DTYPE = {"fp32": "fp32", "amp_bf16": "bf16", "amp_fp16": "fp16", "bf16": "bf16", "fp16": "fp16"}
PARAM_DTYPE = {"fp32": "fp32", "amp_bf16": "fp32", "amp_fp16": "fp32", "bf16": "bf16", "fp16": "fp16"}
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def attention_kernel_on(value: Any, gpu: Any = None, dtype: str = "bf16",
                        name: str = "attention_kernel") -> ops.AttentionKernel:
    """The attention kernel library a time function's ``attention_kernel`` names, checked against the run.

    Parameters
    ----------
    value : str or AttentionKernel
        ``"sdpa"``, ``"cudnn"``, ``"fa2"``, ``"fa3"``, ``"flashinfer"`` or ``"triton"`` (any case; see
        :class:`gpumodel.core.ops.AttentionKernel`).
    gpu : GPUSpec, optional
        The GPU the attention runs on; ``"fa3"`` is refused off Hopper
        (:func:`gpumodel.calibration.attention.kernel_path` decides).
    dtype : str
        The attention's number format: the libraries other than ``"sdpa"`` have 16-bit flash kernels only, so
        with ``"fp32"`` (PyTorch's own fp32 attention) only ``"sdpa"`` is taken.
    name : str
        The argument's name, for the errors.

    Returns
    -------
    AttentionKernel
        The member.

    Raises
    ------
    ArgumentError
        ``value`` is not one of the kernels (naming ``name``).
    UnsupportedError
        The kernel does not run on ``gpu`` or in ``dtype`` (naming ``name``).

    Examples
    --------
    >>> import gpumodel as gm
    >>> attention_kernel_on("FA2", gm.gpu("h100")).value
    'fa2'
    >>> attention_kernel_on("fa3", gm.gpu("a100"))       # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpumodel.base.errors.UnsupportedError: attention_kernel='fa3' (FlashAttention-3) runs on Hopper (sm90) alone...
    """
    kernel = choice(ops.AttentionKernel, value, name)
    if kernel is not ops.AttentionKernel.SDPA and dtype == "fp32":
        raise UnsupportedError(f"{name}={kernel.value!r} has 16-bit flash-attention kernels only; fp32 attention runs "
                               f"PyTorch's own kernels: use {name}='sdpa' or a 16-bit precision", argument=name,
                               value=kernel.value, allowed="'sdpa' with fp32 attention")
    if gpu is not None:
        try:
            kernel_path(kernel.value, gpu)
        except UnsupportedError as err:
            raise UnsupportedError(str(err).replace("kernel=", f"{name}=", 1), argument=name, value=kernel.value,
                                   allowed=err.allowed) from None
    return kernel


def memory_kernel(numel: float, read_bytes: float, write_bytes: float, flops: float = 1,
                  strided: bool = False, operands: int | None = None) -> ops.OpCost:
    """A streaming kernel over ``numel`` elements that reads and writes the given bytes per element.

    Expressed as :func:`gpumodel.core.ops.elementwise` over 1-byte elements with ``read_bytes`` inputs
    and ``write_bytes`` outputs, so that mixed-dtype kernels (a bf16 + fp32 add) have exact traffic.
    ``strided``: an operand is a slice, a transposed view or a broadcast (PyTorch's generic kernel), which
    computes an offset per tensor: ``operands`` is how many tensors it reads and writes (the shape's
    ``"operands"``; by default the byte counts stand for them).

    >>> memory_kernel(1024, 6, 4, strided=True, operands=3).shape["operands"]    # bf16 q * fp32 cos -> fp32
    3
    """
    # an even split of a tensor list may leave a fraction per launch; sizes may be arrays (a sweep of shapes)
    numel = max(1, math.ceil(numel)) if np.ndim(numel) == 0 else np.maximum(1.0, np.ceil(numel))
    op = ops.elementwise(numel, "int8", inputs=read_bytes, outputs=write_bytes, flops_per_element=flops,
                         strided=strided)
    return with_operands(op, operands, write_bytes if strided else None)


def with_operands(op: ops.OpCost, operands: int | None, out_bytes: float | None = None) -> ops.OpCost:
    """``op`` with the count of tensors its generic strided kernel addresses (``shape["operands"]``) and the
    bytes of its result's element (``shape["out_bytes"]``, which sets the kernel's unroll:
    :func:`gpumodel.calibration.kernels.generic_unroll`); None leaves either unset.

    >>> with_operands(ops.elementwise(64, "int8", 6, 4, strided=True), 3, 4).shape["out_bytes"]
    4
    """
    extra = {k: v for k, v in (("operands", operands), ("out_bytes", out_bytes)) if v is not None}
    return dataclasses.replace(op, shape={**op.shape, **extra}) if extra else op


def float_dtype(nbytes: float) -> str:
    """The floating-point dtype of a tensor of ``nbytes``-byte elements in a step: fp32 for 4, else bf16."""
    return "fp32" if nbytes == 4 else "bf16"


def matmul_backward(op: ops.OpCost, dt: str) -> Kernels:
    m, n, k = (op.shape[x] for x in ("m", "n", "k"))
    return [(ops.matmul(m, k, n, dt), 1), (ops.matmul(k, n, m, dt), 1)]


class Layer:
    """Collects forward kernels (in order) and, beside each, the kernels of its backward.

    ``kinds[i]`` says how the host dispatches ``forward[i]`` ("op" or "cast"); ``syncs`` holds the
    indices of forward kernels after which the host waits for the device (data-dependent shapes);
    ``modules`` and ``views`` count the Python glue of the forward (module calls, views, reshapes);
    ``experts`` the spans of forward and backward kernels of each iteration of the eager expert loop;
    ``attention_kernel`` the library whose flash kernels run its 16-bit attention
    (:class:`~gpumodel.core.ops.AttentionKernel`).
    """

    def __init__(self, dt: str, attention_kernel: str = "sdpa") -> None:
        self.dt = dt
        self.attention_kernel = attention_kernel
        self.forward: list[ops.OpCost] = []
        self.kinds: list[str] = []
        self.backward: Kernels = []
        self.syncs: list[int] = []
        self.modules = 0
        self.views = 0
        # iterations of the eager expert loop: ((first, end) forward, (first, end) backward, (modules, views))
        self.experts: list[tuple] = []

    def add(self, op: ops.OpCost, backward: Kernels = (), kind: str = "op") -> None:
        self.forward.append(op)
        self.kinds.append(kind)
        self.backward += list(backward)

    def mem(self, numel: float, read: float, write: float, flops: float = 1, inputs: int = 1, grad: bool = True,
            strided: bool = False, forward: ops.OpCost | None = None) -> None:
        """A streaming kernel reading ``inputs`` tensors (``read`` bytes/element in all) and writing one.

        Its backward: per input, read the output gradient and one saved tensor, write that input's
        gradient (none when ``grad`` is False). ``strided``: forward and backward run over strided
        or broadcast views (PyTorch's generic kernel). ``forward``: the op PyTorch runs forward when it is
        not that streaming kernel (a concatenation).
        """
        per_input = read / inputs
        # backward: the output's gradient and a saved tensor in, the input's gradient out
        back = [(memory_kernel(numel, write + per_input, per_input, 2, strided, 3), inputs)] if grad else []
        self.add(forward or memory_kernel(numel, read, write, flops, strided, inputs + 1), back)

    def cast(self, numel: float, src: int, dst: int) -> None:
        """An autocast cast (``_to_copy``); its backward casts the gradient back."""
        self.add(memory_kernel(numel, src, dst, 0), [(memory_kernel(numel, dst, src, 0), 1)], kind="cast")

    def row(self, op: ops.OpCost, numel: float, size: float) -> None:
        """A row-wise kernel (norm, reduction); backward reads the gradient and the input, writes one."""
        self.add(op, [(memory_kernel(numel, 2 * size, size, 4), 1)])

    def mm(self, m: int, n: int, k: int, dt: str | None = None) -> None:
        op = ops.matmul(m, n, k, dt or self.dt)
        self.add(op, matmul_backward(op, dt or self.dt))

    def attention(self, b: int, heads: int, s: int, d: int, kv_heads: int) -> None:
        if self.dt == "fp32":  # SDPA in fp32: no flash kernel, no tensor cores
            return self._attention_fp32(b, heads, s, d, grouped=kv_heads != heads)
        args = (b, heads, s, d)
        kw = dict(causal=True, dtype=self.dt, impl="flash", kv_heads=kv_heads, kernel=self.attention_kernel)
        self.add(ops.attention(*args, **kw), [(ops.attention(*args, backward=True, **kw), 1)])

    def _attention_fp32(self, b: int, heads: int, s: int, d: int, grouped: bool) -> None:
        """fp32 SDPA: the memory-efficient kernel (fp32 FMA, causal blocks skipped), or with grouped KV
        heads the math path (``repeat_kv`` copies, full ``S x S`` scores, softmax, two batched matmuls)."""
        bh = b * heads
        if not grouped:  # forward QK^T and PV over the causal half; backward recomputes S and forms dQ, dK, dV
            self.add(ops.bmm(bh, s, s // 2, d, "fp32"), [(ops.bmm(bh, s, s // 2, d, "fp32"), 5)])
            self.add(ops.bmm(bh, s, d, s // 2, "fp32"))
            return
        for _ in range(2):
            self.mem(bh * s * d, 4, 4)             # repeat_kv: k, v expanded and copied
        self.add(ops.bmm(bh, s, s, d, "fp32"), [(ops.bmm(bh, s, d, s, "fp32"), 2)])  # scores and their backward
        self.mem(bh * s * s, 8, 4, inputs=2)       # + causal mask
        self.add(ops.softmax(bh * s, s, "fp32"), [(memory_kernel(bh * s * s, 8, 4), 1)])
        self.add(ops.bmm(bh, s, d, s, "fp32"), [(ops.bmm(bh, s, s, d, "fp32"), 2)])

    def sync(self) -> None:
        """The host waits for the device after the last kernel added (``nonzero``, ``bool(tensor)``)."""
        self.syncs.append(len(self.forward) - 1)


def add_norm(L: Layer, cfg: TransformerConfig, t: int, r: int, p: int, width: int | None = None) -> int:
    """Norm over ``width`` (default the hidden size) of a stream of ``r``-byte elements; returns the output size."""
    h = width or cfg.hidden_size
    L.modules += 1
    if cfg.norm == NormType.rmsnorm:  # HF LlamaRMSNorm: fp32 math, then weight * x.to(input dtype)
        if r != 4:
            L.mem(t * h, r, 4)                 # x.to(float32)
        L.mem(t * h, 4, 4)                     # pow(2)
        L.backward.append((memory_kernel(t * h, 4, 4), 2))  # pow_backward: grad * (2 * x.pow(1)), two more passes
        L.row(ops.reduce_sum(t, h, "fp32"), t * h, 4)  # mean(-1)
        L.mem(t, 4, 4)                         # + eps
        L.mem(t, 4, 4)                         # rsqrt
        L.mem(t * h, 8, 4, inputs=2)           # x * rsqrt(var)
        L.backward.append((ops.reduce_sum(t, h, "fp32"), 1))  # ... the broadcast factor's gradient sums over h
        if r != 4:
            L.mem(t * h, 4, r)                 # .to(input dtype)
        out = max(p, r)
        L.mem(t * h, r, out)                   # weight * x
        w_dt = float_dtype(out)               # the weight's gradient: grad * x, summed over the tokens
        L.backward += [(memory_kernel(t * h, r + out, out), 1), (ops.reduce_sum(h, t, w_dt), 1)]
        if cfg.family.startswith("gemma"):
            L.mem(h, p, p)                     # Gemma: (1 + weight)
        return out
    L.row(ops.layer_norm(t, h, float_dtype(r)), t * h, r)  # native layer_norm (autocast: fp32)
    L.backward.append((ops.reduce_sum(h, 2 * t, float_dtype(r)), 1))  # weight and bias gradients
    return r


def add_cast_for_matmul(L: Layer, numel: float, src: int, c: int) -> None:
    if src != c:
        L.cast(numel, src, c)                  # autocast casts the activation for every matmul


def add_linear(L: Layer, t: int, n: int, k: int, src: int, c: int, p: int, bias: bool = False) -> None:
    """An ``nn.Linear`` under the precision: input cast, weight cast (amp), matmul, bias."""
    L.modules += 1
    add_cast_for_matmul(L, t * k, src, c)
    if p != c:
        L.cast(n * k, p, c)                    # autocast casts the fp32 weight (cached only for leaves: once a step)
    L.mm(t, n, k)
    if bias:                                   # addmm: the bias rides in the matmul; its gradient is a reduction
        L.backward.append((ops.reduce_sum(n, t, L.dt), 1))


def add_rope(L: Layer, t: int, widths, r: int, c: int) -> None:
    """q*cos + rotate_half(q)*sin with fp32 cos/sin under autocast, for each width (q, k).

    ``q`` is a head-transposed view, ``-x2`` and ``cat`` read half slices, ``cos``/``sin`` are broadcast over
    the heads and the sum's operands differ in layout: every kernel is PyTorch's generic strided one.
    """
    for w in widths:
        L.mem(t * w, c + r, r, inputs=2, strided=True)       # q * cos
        L.mem(t * w / 2, c, c, strided=True)                 # -x2
        L.mem(t * w, c, c, strided=True, forward=ops.concat(t * w, float_dtype(c), strided=True))   # cat
        L.mem(t * w, c + r, r, inputs=2, strided=True)       # * sin
        L.mem(t * w, 2 * r, r, inputs=2, strided=True)       # add
        add_cast_for_matmul(L, t * w, r, c)       # SDPA casts q, k back to 16 bits
    L.views += 6


def add_split_backward(L: Layer, cfg: TransformerConfig, t: int, widths: tuple, c: int) -> None:
    """Backward of splitting a fused projection's output (listed after it: the backward runs reversed).

    ``split``/``chunk`` (GPT-2, GPT-NeoX) concatenate the parts' gradients in one kernel; Phi-3 slices
    (``qkv[..., :q]``): each slice's gradient is a zero-filled full-width tensor with the slice copied
    in, and autograd adds the three.
    """
    full = t * sum(widths)
    if cfg.family != "phi3":
        L.backward.append((memory_kernel(full, c, c, 0), 1))
        return
    for w in widths:
        L.backward += [(memory_kernel(full, 0, c, 0), 1), (memory_kernel(t * w, c, c, 0), 1)]
    L.backward.append((memory_kernel(full, 2 * c, c), len(widths) - 1))


def add_mlp(L: Layer, cfg: TransformerConfig, t: int, n: int, c: int, p: int, width: int) -> None:
    h = cfg.hidden_size
    L.modules += 2                             # the MLP module and its activation
    out = c
    if cfg.mlp == MLPType.gated:
        if cfg.fused_gate_up:
            add_linear(L, t, 2 * width, h, n, c, p, cfg.mlp_bias)
            L.views += 2
            L.backward.append((memory_kernel(t * 2 * width, c, c, 0), 1))  # chunk's backward: cat the gradients
        else:
            for _ in range(2):
                add_linear(L, t, width, h, n, c, p, cfg.mlp_bias)
        halves = bool(cfg.fused_gate_up)        # a chunked fused output: both kernels read strided halves
        L.mem(t * width, c, c, 4, strided=halves)              # act(gate)
        L.mem(t * width, 2 * c, c, inputs=2, strided=halves)   # * up
    else:
        add_linear(L, t, width, h, n, c, p, cfg.mlp_bias)
        if cfg.activation in ("gelu_new", "gelu_fast"):
            # 0.5*x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3)))): autocast runs pow in fp32, so
            # under amp the chain after it is fp32 (a 16-bit x meets fp32 in the add and the last mul)
            f = p                              # fp32 under amp (fp32 parameters), else the compute dtype
            for read, write, inputs in ((c, f, 1), (f, f, 1), (c + f, f, 2), (f, f, 1), (f, f, 1), (f, f, 1),
                                        (c, c, 1), (c + f, f, 2)):  # pow, mul, add, mul, tanh, add, 0.5*x, mul
                L.mem(t * width, read, write, inputs=inputs)
            out = f
        else:
            L.mem(t * width, c, c, 8)
    add_linear(L, t, h, width, out, c, p, cfg.mlp_bias)
