"""The kernels one training step of a Hugging Face decoder launches in eager PyTorch.

Each function returns a list of ``(OpCost, launches per step)``. Matmuls and attention are the
:mod:`gpumodel.ops` records; memory-bound kernels are written out one by one as eager PyTorch
runs them (no fusion), with the bytes each reads and writes in its own dtypes: under autocast
the residual stream stays fp32 (the parameters are fp32), Llama's RMSNorm computes in fp32 and
its rotary embedding multiplies by fp32 ``cos``/``sin``, each projection casts its input to 16
bits, GPT-2's ``gelu_new`` is eight elementwise kernels, and the loss up-casts the logits to fp32.

Backward of a memory-bound kernel that reads ``n`` tensors is ``n`` kernels, each reading the
output gradient and one saved tensor and writing one input gradient; of a matmul, two matmuls;
of attention, the attention backward kernel.

References
----------
Hugging Face transformers ``modeling_llama.py`` and ``modeling_gpt2.py`` (v4.40-v5), PyTorch
``torch/optim/adamw.py`` (``_multi_tensor_adamw``).
"""

from __future__ import annotations

from . import ops
from .transformer import MLPType, NormType, PositionType, TransformerConfig

__all__ = ["Kernels", "memory_kernel", "training_step", "COMPUTE_DTYPE", "PARAM_DTYPE", "OPTIMIZER_PASSES"]

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


def memory_kernel(numel: float, read_bytes: float, write_bytes: float, flops: float = 1) -> ops.OpCost:
    """A streaming kernel over ``numel`` elements that reads and writes the given bytes per element.

    Expressed as :func:`gpumodel.ops.elementwise` over 1-byte elements with ``read_bytes`` inputs
    and ``write_bytes`` outputs, so that mixed-dtype kernels (a bf16 + fp32 add) have exact traffic.
    """
    return ops.elementwise(numel, "int8", inputs=read_bytes, outputs=write_bytes, flops_per_element=flops)


def _matmul_backward(op: ops.OpCost, dt: str) -> Kernels:
    m, n, k = (op.shape[x] for x in ("m", "n", "k"))
    return [(ops.matmul(m, k, n, dt), 1), (ops.matmul(k, n, m, dt), 1)]


class _Layer:
    """Collects forward kernels and, beside each, the kernels of its backward."""

    def __init__(self, dt: str) -> None:
        self.dt = dt
        self.forward: list[ops.OpCost] = []
        self.backward: Kernels = []

    def mem(self, numel: float, read: float, write: float, flops: float = 1, inputs: int = 1) -> None:
        """A streaming kernel reading ``inputs`` tensors (``read`` bytes/element in all) and writing one.

        Its backward: per input, read the output gradient and one saved tensor, write that input's
        gradient.
        """
        self.forward.append(memory_kernel(numel, read, write, flops))
        per_input = read / inputs
        self.backward.append((memory_kernel(numel, write + per_input, per_input, 2), inputs))

    def row(self, op: ops.OpCost, numel: float, size: float) -> None:
        """A row-wise kernel (norm, reduction); backward reads the gradient and the input, writes one."""
        self.forward.append(op)
        self.backward.append((memory_kernel(numel, 2 * size, size, 4), 1))

    def mm(self, m: int, n: int, k: int) -> None:
        op = ops.matmul(m, n, k, self.dt)
        self.forward.append(op)
        self.backward += _matmul_backward(op, self.dt)

    def attention(self, cfg: TransformerConfig, b: int, s: int) -> None:
        args = (b, cfg.num_heads, s, cfg.dim_head)
        self.forward.append(ops.attention(*args, causal=True, dtype=self.dt, impl="flash", kv_heads=cfg.kv_heads))
        self.backward.append((ops.attention(*args, causal=True, dtype=self.dt, impl="flash", backward=True,
                                            kv_heads=cfg.kv_heads), 1))


def _norm(L: _Layer, cfg: TransformerConfig, t: int, r: int, p: int) -> int:
    """Norm over the residual stream (``r`` bytes); returns the output element size."""
    h = cfg.hidden_size
    if cfg.norm == NormType.rmsnorm:  # HF LlamaRMSNorm: fp32 math, then weight * x.to(input dtype)
        if r != 4:
            L.mem(t * h, r, 4)                 # x.to(float32)
        L.mem(t * h, 4, 4)                     # pow(2)
        L.row(ops.reduce_sum(t, h, "fp32"), t * h, 4)  # mean(-1)
        L.mem(t, 4, 4)                         # + eps, rsqrt
        L.mem(t * h, 8, 4, inputs=2)           # x * rsqrt(var)
        if r != 4:
            L.mem(t * h, 4, r)                 # .to(input dtype)
        out = max(p, r)
        L.mem(t * h, r, out)                   # weight * x
        return out
    L.row(ops.layer_norm(t, h, "fp32" if r == 4 else "bf16"), t * h, r)  # native layer_norm (autocast: fp32)
    return r


def _cast_for_matmul(L: _Layer, numel: float, src: int, c: int) -> None:
    if src != c:
        L.mem(numel, src, c, 0)                # autocast casts the activation for every matmul


def _layer(cfg: TransformerConfig, b: int, s: int, precision: str) -> _Layer:
    dt, t, h, i = COMPUTE_DTYPE[precision], b * s, cfg.hidden_size, cfg.intermediate_size
    c, p = _SIZE[dt], _SIZE[PARAM_DTYPE[precision]]
    r = max(c, p)  # residual stream: fp32 under autocast (fp32 parameters), else the compute dtype
    q, kv = cfg.q_dim, cfg.kv_dim
    L = _Layer(dt)
    n = _norm(L, cfg, t, r, p)
    if cfg.fused_qkv:
        _cast_for_matmul(L, t * h, n, c)
        L.mm(t, q + 2 * kv, h)
    else:
        for width in (q, kv, kv):
            _cast_for_matmul(L, t * h, n, c)
            L.mm(t, width, h)
    if cfg.position == PositionType.rope:  # q*cos + rotate_half(q)*sin with fp32 cos/sin under autocast
        rot = r
        for width in (q, kv):
            L.mem(t * width, c + rot, rot, inputs=2)  # q * cos
            L.mem(t * width / 2, c, c)         # -x2
            L.mem(t * width, c, c)             # cat
            L.mem(t * width, c + rot, rot, inputs=2)  # * sin
            L.mem(t * width, 2 * rot, rot, inputs=2)  # add
            _cast_for_matmul(L, t * width, rot, c)  # SDPA casts q, k back to 16 bits
    L.attention(cfg, b, s)
    L.mem(t * q, c, c, 0)                      # transpose(1, 2).contiguous()
    L.mm(t, h, q)
    dropout = cfg.resid_dropout > 0
    if dropout:
        L.mem(t * h, c, c + 1)                 # dropout: output and mask
    L.mem(t * h, r + c, r, 1, inputs=2)        # residual add
    n = _norm(L, cfg, t, r, p)
    if cfg.mlp == MLPType.gated:
        for _ in range(2):
            _cast_for_matmul(L, t * h, n, c)
            L.mm(t, i, h)
        L.mem(t * i, c, c, 4)                  # act(gate)
        L.mem(t * i, 2 * c, c, inputs=2)       # * up
    else:
        _cast_for_matmul(L, t * h, n, c)
        L.mm(t, i, h)
        if cfg.activation in ("gelu_new", "gelu_fast"):
            for inputs in (1, 1, 2, 1, 1, 1, 2, 1):  # pow, mul, add, mul, tanh, add, mul, mul
                L.mem(t * i, inputs * c, c, inputs=inputs)
        else:
            L.mem(t * i, c, c, 8)
    L.mm(t, h, i)
    if dropout:
        L.mem(t * h, c, c + 1)
    L.mem(t * h, r + c, r, 1, inputs=2)        # residual add
    return L


def training_step(cfg: TransformerConfig, batch_size: int, seq_len: int, precision: str, optimizer: str,
                  checkpointing: bool) -> dict[str, Kernels]:
    """Phase ("forward", "backward", "recompute", "optimizer") -> kernels of one eager training step."""
    dt, t, h, v = COMPUTE_DTYPE[precision], batch_size * seq_len, cfg.hidden_size, cfg.vocab_size
    c, p = _SIZE[dt], _SIZE[PARAM_DTYPE[precision]]
    r = max(c, p)
    layer = _layer(cfg, batch_size, seq_len, precision)
    n_layers = cfg.num_layers
    embed: Kernels = [(ops.embedding(t, v, h, "fp32" if r == 4 else dt), 1)]
    if cfg.position == PositionType.learned:
        embed.append((memory_kernel(t * h, 2 * r, r), 1))
    head = _Layer(dt)
    n = _norm(head, cfg, t, r, p)
    _cast_for_matmul(head, t * h, n, c)
    head.mm(t, v, h)
    head.mem(t * v, c, 4, 0)                   # logits.float()
    head.forward.append(ops.cross_entropy(t, v, "fp32"))
    head.backward.append((memory_kernel(t * v, 8, 4), 1))  # cross-entropy gradient over the fp32 logits
    forward = embed + [(op, n_layers) for op in layer.forward] + [(op, 1) for op in head.forward]
    backward: Kernels = [(k, n * n_layers) for k, n in layer.backward] + head.backward
    backward += [(memory_kernel(t * h, 2 * r, r), 2 * n_layers + 1),  # residual-stream gradients meeting
                 (memory_kernel(t * h, r + 8, 4), 1)]                # embedding gradient (index add)
    recompute = [(op, n_layers) for op in layer.forward] if checkpointing else []
    params = cfg.num_parameters()
    optimizer_kernels = [(memory_kernel(params, reads * p, writes * p, 2), 1)
                         for reads, writes in OPTIMIZER_PASSES[optimizer]]
    if precision.startswith("amp"):
        weights = n_layers * cfg.layer_matmul_parameters() + v * h
        forward.insert(0, (memory_kernel(weights, p, c, 0), 1))     # autocast's weight casts (cached per step)
        backward.append((memory_kernel(weights, c, p, 0), 1))      # 16-bit weight gradients to fp32 .grad
        if checkpointing:
            recompute.insert(0, (memory_kernel(weights, p, c, 0), 1))
    return {"forward": forward, "backward": backward, "recompute": recompute, "optimizer": optimizer_kernels}
