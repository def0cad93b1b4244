"""The kernels one training step of a Hugging Face decoder launches in eager PyTorch, in order.

Matmuls and attention are the :mod:`gpumodel.core.ops` records; memory-bound kernels are written out
one by one as eager PyTorch runs them (no fusion), with the bytes each reads and writes in its own
dtypes: under autocast the residual stream stays fp32 (the parameters are fp32), Llama's RMSNorm
computes in fp32 and its rotary embedding multiplies by fp32 ``cos``/``sin``, each projection casts
its input to 16 bits, GPT-2's ``gelu_new`` is eight elementwise kernels, and the loss up-casts the
logits to fp32. Mixture-of-experts layers are :mod:`gpumodel.training.moe`.

Backward of a memory-bound kernel that reads ``n`` tensors is ``n`` kernels, each reading the
output gradient and one saved tensor and writing one input gradient; of a matmul, two matmuls;
of attention, the attention backward kernel.

Beside each kernel the layer records what the host does to launch it (a forward op under
autograd, an autocast cast, a backward node) and the Python glue around it (module calls and
views), which :mod:`gpumodel.training.steptime` prices with :class:`gpumodel.training.hostcost.HostCosts`.

References
----------
Hugging Face transformers ``modeling_llama.py`` and ``modeling_gpt2.py`` (v4.40-v5), PyTorch
``torch/optim/adamw.py`` (``_multi_tensor_adamw``).
"""

from __future__ import annotations

import dataclasses
import math

from ..core import ops
from ..records.transformer import MLPType, NormType, PositionType, TransformerConfig

__all__ = ["Kernels", "memory_kernel", "training_step", "COMPUTE_DTYPE", "PARAM_DTYPE", "OPTIMIZER_PASSES",
           "parameter_tensors"]

Kernels = list[tuple[ops.OpCost, int]]

COMPUTE_DTYPE = {"fp32": "fp32", "amp_bf16": "bf16", "amp_fp16": "fp16", "bf16": "bf16", "fp16": "fp16"}
PARAM_DTYPE = {"fp32": "fp32", "amp_bf16": "fp32", "amp_fp16": "fp32", "bf16": "bf16", "fp16": "fp16"}
_SIZE = {"fp32": 4, "bf16": 2, "fp16": 2}

#: Passes over all parameters of one optimizer step in PyTorch's default (foreach) implementation,
#: each as (tensors read, tensors written), every tensor of the parameter dtype.
OPTIMIZER_PASSES = {
    # weight decay p*=(1-lr*wd); m.lerp_(g); v.mul_(b2); v.addcmul_(g, g); d = v.sqrt(); d.div_(bc2);
    # d.add_(eps); p.addcdiv_(m, d)
    "adamw": ((1, 1), (2, 1), (1, 1), (2, 1), (1, 1), (1, 1), (1, 1), (3, 1)),
    "adam": ((2, 1), (1, 1), (2, 1), (1, 1), (1, 1), (1, 1), (3, 1)),
    "sgd": ((2, 1),),                      # p.add_(g, alpha=-lr)
    "sgd_momentum": ((2, 1), (2, 1)),     # buf.mul_(m).add_(g); p.add_(buf)
    "adafactor": ((2, 1), (2, 1), (3, 1)),  # row/col statistics, update, apply (factored states are small)
    "adamw_8bit": ((2, 1), (2, 1)),       # one fused kernel over 1-byte states, plus the apply
}
#: The fused (``fused=True``) optimizers: one kernel reading and writing each state once.
FUSED_PASSES = {"adamw": ((4, 3),), "adam": ((4, 3),), "sgd": ((2, 1),), "sgd_momentum": ((3, 2),)}


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
    numel = max(1, math.ceil(numel))  # an even split of a tensor list may leave a fraction per launch
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


def _float_dtype(nbytes: float) -> str:
    """The floating-point dtype of a tensor of ``nbytes``-byte elements in a step: fp32 for 4, else bf16."""
    return "fp32" if nbytes == 4 else "bf16"


def _matmul_backward(op: ops.OpCost, dt: str) -> Kernels:
    m, n, k = (op.shape[x] for x in ("m", "n", "k"))
    return [(ops.matmul(m, k, n, dt), 1), (ops.matmul(k, n, m, dt), 1)]


class _Layer:
    """Collects forward kernels (in order) and, beside each, the kernels of its backward.

    ``kinds[i]`` says how the host dispatches ``forward[i]`` ("op" or "cast"); ``syncs`` holds the
    indices of forward kernels after which the host waits for the device (data-dependent shapes);
    ``modules`` and ``views`` count the Python glue of the forward (module calls, views, reshapes);
    ``experts`` the spans of forward and backward kernels of each iteration of the eager expert loop.
    """

    def __init__(self, dt: str) -> None:
        self.dt = dt
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
        self.add(op, _matmul_backward(op, dt or self.dt))

    def attention(self, b: int, heads: int, s: int, d: int, kv_heads: int) -> None:
        if self.dt == "fp32":  # SDPA in fp32: no flash kernel, no tensor cores
            return self._attention_fp32(b, heads, s, d, grouped=kv_heads != heads)
        args = (b, heads, s, d)
        self.add(ops.attention(*args, causal=True, dtype=self.dt, impl="flash", kv_heads=kv_heads),
                 [(ops.attention(*args, causal=True, dtype=self.dt, impl="flash", backward=True, kv_heads=kv_heads), 1)])

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


def _norm(L: _Layer, cfg: TransformerConfig, t: int, r: int, p: int, width: int | None = None) -> int:
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
        w_dt = _float_dtype(out)               # the weight's gradient: grad * x, summed over the tokens
        L.backward += [(memory_kernel(t * h, r + out, out), 1), (ops.reduce_sum(h, t, w_dt), 1)]
        if cfg.family.startswith("gemma"):
            L.mem(h, p, p)                     # Gemma: (1 + weight)
        return out
    L.row(ops.layer_norm(t, h, _float_dtype(r)), t * h, r)  # native layer_norm (autocast: fp32)
    L.backward.append((ops.reduce_sum(h, 2 * t, _float_dtype(r)), 1))  # weight and bias gradients
    return r


def _cast_for_matmul(L: _Layer, numel: float, src: int, c: int) -> None:
    if src != c:
        L.cast(numel, src, c)                  # autocast casts the activation for every matmul


def _linear(L: _Layer, t: int, n: int, k: int, src: int, c: int, p: int, bias: bool = False) -> None:
    """An ``nn.Linear`` under the precision: input cast, weight cast (amp), matmul, bias."""
    L.modules += 1
    _cast_for_matmul(L, t * k, src, c)
    if p != c:
        L.cast(n * k, p, c)                    # autocast casts the fp32 weight (cached only for leaves: once a step)
    L.mm(t, n, k)
    if bias:                                   # addmm: the bias rides in the matmul; its gradient is a reduction
        L.backward.append((ops.reduce_sum(n, t, L.dt), 1))


def _rope(L: _Layer, t: int, widths, r: int, c: int) -> None:
    """q*cos + rotate_half(q)*sin with fp32 cos/sin under autocast, for each width (q, k).

    ``q`` is a head-transposed view, ``-x2`` and ``cat`` read half slices, ``cos``/``sin`` are broadcast over
    the heads and the sum's operands differ in layout: every kernel is PyTorch's generic strided one.
    """
    for w in widths:
        L.mem(t * w, c + r, r, inputs=2, strided=True)       # q * cos
        L.mem(t * w / 2, c, c, strided=True)                 # -x2
        L.mem(t * w, c, c, strided=True, forward=ops.concat(t * w, _float_dtype(c), strided=True))   # cat
        L.mem(t * w, c + r, r, inputs=2, strided=True)       # * sin
        L.mem(t * w, 2 * r, r, inputs=2, strided=True)       # add
        _cast_for_matmul(L, t * w, r, c)       # SDPA casts q, k back to 16 bits
    L.views += 6


def _split_backward(L: _Layer, cfg: TransformerConfig, t: int, widths: tuple, c: int) -> None:
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


def _attention_block(L: _Layer, cfg: TransformerConfig, b: int, s: int, n: int, r: int, c: int, p: int) -> None:
    t, h = b * s, cfg.hidden_size
    q, kv = cfg.q_dim, cfg.kv_dim
    if cfg.is_mla:
        from .moe import mla_projections
        mla_projections(L, cfg, t, n, r, c, p)
    elif cfg.fused_qkv:
        _linear(L, t, q + 2 * kv, h, n, c, p, cfg.qkv_bias)
        L.views += 4
        _split_backward(L, cfg, t, (q, kv, kv), c)
    else:
        for width in (q, kv, kv):
            _linear(L, t, width, h, n, c, p, cfg.qkv_bias)
        L.views += 6
    if cfg.qk_norm != "none":
        for width in (q, kv):
            _norm(L, cfg, t * width // (cfg.head_dim if cfg.qk_norm == "head" else width), c, p,
                  cfg.head_dim if cfg.qk_norm == "head" else width)
    if cfg.position == PositionType.rope and not cfg.is_mla:
        _rope(L, t, (q, kv), r, c)
    v_dim = cfg.num_heads * (cfg.v_head_dim or cfg.head_dim)
    L.attention(b, cfg.num_heads, s, cfg.head_dim, cfg.num_kv_heads)
    L.mem(t * v_dim, c, c, 0)                  # transpose(1, 2).contiguous()
    L.views += 2
    _linear(L, t, h, v_dim, c, c, p, cfg.o_bias)


def _mlp(L: _Layer, cfg: TransformerConfig, t: int, n: int, c: int, p: int, width: int) -> None:
    h = cfg.hidden_size
    L.modules += 2                             # the MLP module and its activation
    out = c
    if cfg.mlp == MLPType.gated:
        if cfg.fused_gate_up:
            _linear(L, t, 2 * width, h, n, c, p, cfg.mlp_bias)
            L.views += 2
            L.backward.append((memory_kernel(t * 2 * width, c, c, 0), 1))  # chunk's backward: cat the gradients
        else:
            for _ in range(2):
                _linear(L, t, width, h, n, c, p, cfg.mlp_bias)
        halves = bool(cfg.fused_gate_up)        # a chunked fused output: both kernels read strided halves
        L.mem(t * width, c, c, 4, strided=halves)              # act(gate)
        L.mem(t * width, 2 * c, c, inputs=2, strided=halves)   # * up
    else:
        _linear(L, t, width, h, n, c, p, cfg.mlp_bias)
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
    _linear(L, t, h, width, out, c, p, cfg.mlp_bias)


def _layer(cfg: TransformerConfig, b: int, s: int, precision: str, moe: bool | None = None,
           experts: str = "grouped_mm", expert_load=None) -> _Layer:
    dt, t, h = COMPUTE_DTYPE[precision], b * s, cfg.hidden_size
    c, p = _SIZE[dt], _SIZE[PARAM_DTYPE[precision]]
    r = max(c, p)  # residual stream: fp32 under autocast (fp32 parameters), else the compute dtype
    L = _Layer(dt)
    L.modules += 2                             # the decoder layer and its attention module
    L.views += 4                               # kwargs, position embeddings, residual bookkeeping
    post_norm = cfg.family == "olmo2"
    n = r if post_norm else _norm(L, cfg, t, r, p)
    _attention_block(L, cfg, b, s, n, r, c, p)
    if post_norm or cfg.extra_norms:
        _norm(L, cfg, t, c, p)                 # post-attention norm (olmo2, gemma2/3)
    dropout = cfg.resid_dropout > 0
    if dropout:
        L.mem(t * h, c, c + 1)                 # dropout: output and mask
    L.mem(t * h, r + c, r, 1, inputs=2)        # residual add
    L.backward.append((memory_kernel(t * h, 2 * r, r), 1))  # the residual's two gradients meeting
    n = r if post_norm else _norm(L, cfg, t, r, p)
    if cfg.parallel_residual:
        pass
    moe = cfg.is_moe if moe is None else moe
    if moe:
        from .moe import moe_block
        moe_block(L, cfg, t, n, r, c, p, experts, expert_load)
    else:
        _mlp(L, cfg, t, n, c, p, cfg.intermediate_size)
    if post_norm or cfg.extra_norms:
        _norm(L, cfg, t, c, p)                 # post-feedforward norm
    if dropout:
        L.mem(t * h, c, c + 1)
    L.mem(t * h, r + c, r, 1, inputs=2)        # residual add
    L.backward.append((memory_kernel(t * h, 2 * r, r), 1))
    return L


def parameter_tensors(cfg: TransformerConfig) -> int:
    """Parameter tensors of the Hugging Face model (what foreach optimizers and ``zero_grad`` loop over)."""
    nb = 2 if cfg.norm_bias else 1
    attn = (1 if cfg.fused_qkv else 3) * (1 + cfg.qkv_bias) + 1 + cfg.o_bias
    if cfg.is_mla:
        attn = (3 if cfg.q_lora_rank else 1) + 3 + 1 + (2 if cfg.q_lora_rank else 1) * cfg.qkv_bias + cfg.o_bias
    attn += 2 if cfg.qk_norm != "none" else 0
    mats = (2 if cfg.fused_gate_up else 3) if cfg.mlp == MLPType.gated else 2
    dense = mats * (1 + cfg.mlp_bias)
    moe = 3 + (dense + cfg.shared_expert_gate if cfg.shared_expert_intermediate_size else 0)  # experts, router
    n_dense = min(cfg.first_dense_layers, cfg.num_layers) if cfg.is_moe else cfg.num_layers
    layers = (2 + cfg.extra_norms) * nb * cfg.num_layers + cfg.num_layers * attn
    layers += n_dense * dense + (cfg.num_layers - n_dense) * moe
    embed = 1 + (cfg.position == PositionType.learned) + (not cfg.tie_word_embeddings)
    return layers + embed + nb


def training_step(cfg: TransformerConfig, batch_size: int, seq_len: int, precision: str, optimizer: str,
                  checkpointing: bool) -> dict[str, Kernels]:
    """Phase ("forward", "backward", "recompute", "optimizer") -> kernels of one eager training step."""
    from .stepplan import step_plan
    phases: dict[str, Kernels] = {"forward": [], "backward": [], "recompute": [], "optimizer": []}
    for block in step_plan(cfg, batch_size, seq_len, precision, optimizer, checkpointing):
        for (op, _host, _sync), phase in zip(block.kernels, block.phases()):
            if op is not None:
                phases[phase].append((op, block.repeat))
    return phases
