"""One training step as the ordered list of what the host dispatches and the device runs.

A step (one optimizer update) is ``gradient_accumulation_steps`` forward and backward passes, then
``clip_grad_norm_`` (optional), ``opt.step()``, ``zero_grad(set_to_none=True)`` and a
synchronisation (``loss.item()``). Each :class:`Block` is a run of kernels repeated ``repeat``
times (a decoder layer), each kernel with the host seconds spent dispatching it
(:class:`gpumodel.training.hostcost.HostCosts`) and whether the host then waits for the device.

* Forward: embedding, the decoder layers, final norm, LM head, fp32 loss. Backward in reverse
  order; with activation checkpointing each layer's forward is recomputed just before its
  backward. Every parameter tensor's ``AccumulateGrad`` node runs in each backward; from the
  second micro-batch on it adds into ``.grad`` (one kernel per tensor).
* Optimizer: the foreach passes of :data:`~gpumodel.training.stepkernels.OPTIMIZER_PASSES` (one
  multi-tensor kernel per pass), a per-tensor loop of the same passes (``foreach=False``), or one
  fused kernel (``fused=True``); host cost per step and per tensor from the host record.
* ``torch.compile``: the model's forward and backward become graphs whose chains of memory-bound
  kernels between two matmuls or attentions are one fused kernel (reading the chain's first
  input, writing its last output), each launched from inductor's Python wrapper for
  ``compile_launch_s`` with no per-op dispatch, plus a fixed host cost per compiled forward and
  backward call (``compile_forward_s``, ``compile_backward_s``: guards, runtime wrappers, the
  autograd function); the optimizer stays eager.
* ``experts_implementation="eager"``: with measured per-iteration host costs of the expert loop
  (``expert_forward_s``, ``expert_backward_s``), each iteration's kernels share them.

References
----------
PyTorch ``torch/nn/utils/clip_grad.py`` (``_get_total_norm``, ``_clip_grads_with_norm_``),
``torch/optim/adamw.py``; Ansel et al., "PyTorch 2", ASPLOS 2024 (TorchInductor fuses pointwise and
reduction chains).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core import ops
from .hostcost import DEFAULT_HOST, HostCosts
from .layer import (COMPUTE_DTYPE, ELEMENT_BYTES, PARAM_DTYPE, Kernels, Layer, add_cast_for_matmul, add_norm,
                    memory_kernel)
from .stepkernels import FUSED_PASSES, OPTIMIZER_PASSES, decoder_layer, parameter_tensors
from ..records.transformer import PositionType, TransformerConfig

__all__ = ["Block", "step_plan", "training_step", "dispatch_seconds"]

Entry = tuple  # (OpCost or None, host seconds, sync after)


@dataclass
class Block:
    """Kernels run in order, ``repeat`` times; ``phase`` names the part of the step."""

    phase: str
    kernels: list = field(default_factory=list)
    repeat: int = 1
    recompute: int = 0  # the first ``recompute`` kernels re-run the forward (activation checkpointing)

    def phases(self) -> list[str]:
        """Phase of each kernel."""
        return ["recompute"] * self.recompute + [self.phase] * (len(self.kernels) - self.recompute)


def _fuse_chains(L: Layer) -> Layer:
    """torch.compile: merge each run of memory-bound kernels between matmul/attention kernels into one."""
    out = Layer(L.dt, L.attention_kernel)
    chain: list[ops.OpCost] = []

    def flush():
        if chain:
            first, last = chain[0], chain[-1]
            numel = float(first.shape.get("numel", 1)) or 1.0
            read, write = float(first.bytes_read) / numel, float(last.bytes_written) / numel
            out.add(memory_kernel(numel, read, write, 0), [(memory_kernel(numel, read + write, read, 0), 1)],
                    kind="launch")
            chain.clear()

    for op in L.forward:
        if op.name in ("matmul", "attention"):
            flush()
            out.add(op, kind="launch")
        else:
            chain.append(op)
    flush()
    out.backward += [(op, n, *k) for op, n, *k in L.backward if op is not None and op.name in ("matmul", "attention")]
    return out


def _gemms(L: Layer, f0: int, f1: int) -> int:
    """GEMMs among the forward kernels ``f0:f1`` (an iteration of the eager expert loop)."""
    return sum(1 for op in L.forward[f0:f1] if op.name == "matmul")


def _forward_entries(L: Layer, host: HostCosts, amp: bool, compiled: bool, scale: float = 1.0,
                     ckpt: bool = False) -> list[Entry]:
    if compiled:
        return [(op, host.compiled_launch(), False) for op in L.forward]
    extra = host.checkpoint_forward_s if ckpt else 0.0
    per_op = {"op": host.op_s + (host.autocast_s if amp else 0.0) + extra, "cast": host.op_s + extra,
              "launch": host.launch_s, "nonzero": max(host.nonzero_s - host.item_s, host.op_nograd_s)}
    modules, views = L.modules, L.views
    syncs = set(L.syncs)
    priced: dict[int, float] = {}
    if host.expert_forward_s > 0:  # the eager expert loop, priced per iteration as measured
        for (f0, f1), _back, (mods, vws) in L.experts:
            waits = sum(1 for i in range(f0, f1) if i in syncs)
            # each expert's GEMMs get a new token count every step: the GEMM library's kernel choice runs again
            gemms = _gemms(L, f0, f1)
            per = (max(host.expert_forward_s - waits * host.item_s, 0.0) + gemms * host.gemm_shape_s) / max(f1 - f0, 1)
            priced.update(dict.fromkeys(range(f0, f1), per))
            modules, views = modules - mods, views - vws
    glue = (None, scale * (modules * host.module_s + views * host.view_s), False)
    return [glue] + [(op, priced[i] if i in priced else scale * per_op[k], i in syncs)
                     for i, (op, k) in enumerate(zip(L.forward, L.kinds))]


def _backward_entries(L: Layer, host: HostCosts, compiled: bool, scale: float = 1.0,
                      ckpt: bool = False) -> list[Entry]:
    per = host.compiled_launch() if compiled else scale * (host.backward_op_s +
                                                           (host.checkpoint_backward_s if ckpt else 0.0))
    entries: list[Entry] = [] if compiled else [(None, scale * L.views * host.view_s, False)]
    priced: dict[int, float] = {}
    if host.expert_backward_s > 0 and not compiled:
        for (f0, f1), (b0, b1), _glue in L.experts:
            kernels = sum(L.backward[j][1] for j in range(b0, b1) if L.backward[j][0] is not None)
            # per GEMM of the forward: the input gradient (new rows) and the weight gradient (new contraction)
            extra = _gemms(L, f0, f1) * (host.gemm_shape_s + host.gemm_shape_k_s)
            priced.update(dict.fromkeys(range(b0, b1), (host.expert_backward_s + extra) / max(kernels, 1)))
    for j in range(len(L.backward) - 1, -1, -1):
        op, n, *kind = L.backward[j]
        if op is None:  # the host waits for the device (a size read back), then dispatches on
            entries.append((None, 0.0, True))
            continue
        launch = host.compiled_launch() if compiled else host.launch_s
        entries += [(op, priced.get(j, launch if kind == ["launch"] else per), False)] * n
    return entries


def step_plan(cfg: TransformerConfig, batch_size: int, seq_len: int, precision: str, optimizer: str,
              checkpointing: bool, *, host: HostCosts = DEFAULT_HOST, fused: bool = False, foreach: bool = True,
              gradient_accumulation_steps: int = 1, clip_grad_norm: float | None = None, compile: bool = False,
              experts: str = "grouped_mm", expert_load=None, attention_kernel: str = "sdpa") -> list[Block]:
    """The ordered blocks of one training step (see the module docstring); ``attention_kernel`` is the library
    of the layers' 16-bit flash attention (:class:`~gpumodel.core.ops.AttentionKernel`)."""
    dt, t, h, v = COMPUTE_DTYPE[precision], batch_size * seq_len, cfg.hidden_size, cfg.vocab_size
    c, p = ELEMENT_BYTES[dt], ELEMENT_BYTES[PARAM_DTYPE[precision]]
    r = max(c, p)
    amp = precision.startswith("amp")
    n_tensors = parameter_tensors(cfg)
    n_moe = cfg.num_layers - cfg.num_dense_layers
    layers = [(decoder_layer(cfg, batch_size, seq_len, precision, moe=False, attention_kernel=attention_kernel),
               cfg.num_layers - n_moe)]
    if n_moe:
        layers.append((decoder_layer(cfg, batch_size, seq_len, precision, moe=True, experts=experts,
                                     expert_load=expert_load, attention_kernel=attention_kernel), n_moe))
    layers = [(L, n) for L, n in layers if n > 0]
    if compile:
        layers = [(_fuse_chains(L), n) for L, n in layers]

    embed = Layer(dt, attention_kernel)
    # embedding backward: zero-fill the table's gradient, then accumulate the token rows (index add)
    embed.add(ops.embedding(t, v, h, "fp32" if r == 4 else dt),
              [(memory_kernel(v * h, 0, p, 0), 1), (memory_kernel(t * h, r + 8, p), 1),
               (memory_kernel(t * h, 2 * r, r), 1)])    # ... after the residual's gradients meet
    embed.modules, embed.views = 3, 6         # model, embedding, rotary module; mask and position bookkeeping
    if cfg.position == PositionType.learned:
        embed.mem(t * h, 2 * r, r)
    if cfg.family.startswith("gemma"):
        embed.mem(t * h, r, r)                 # Gemma scales the embeddings by sqrt(hidden)
    if cfg.position == PositionType.rope:
        embed.mem(seq_len * cfg.head_dim, 4, 4)  # cos, sin of the rotary embedding
        embed.mem(seq_len * cfg.head_dim, 4, 4, grad=False)
    head = Layer(dt, attention_kernel)
    n = add_norm(head, cfg, t, r, p)
    add_cast_for_matmul(head, t * h, n, c)
    if p != c:
        head.cast(v * h, p, c)
    head.mm(t, v, h)
    head.modules += 2
    head.mem(t * v, c, 4, 0)                   # logits.float()
    # F.cross_entropy = log_softmax (writes fp32 log-probs, saved) + nll_loss; backward: nll_loss_backward
    # zero-fills a t x V gradient and scatters, log_softmax_backward reads it and the log-probs
    head.add(ops.softmax(t, v, "fp32"), [(memory_kernel(t * v, 8, 4), 1)])
    head.add(ops.cross_entropy(t, 1, "fp32"), [(memory_kernel(t * v, 0, 4, 0), 1)])
    head.views += 8                            # shift labels, view, contiguous checks
    if compile:
        embed, head = _fuse_chains(embed), _fuse_chains(head)

    blocks: list[Block] = []
    accum = gradient_accumulation_steps
    sc = host.layer_scale(cfg.family, amp or precision in ("bf16", "fp16"), checkpointing)
    ck = checkpointing
    for micro in range(accum):
        if compile:  # the compiled graph's call: guards, runtime wrappers, the autograd function
            blocks.append(Block("forward", [(None, host.compile_forward_s, False)]))
        blocks.append(Block("forward", _forward_entries(embed, host, amp, compile, sc["fixed_forward"])))
        for L, n in layers:
            blocks.append(Block("forward", _forward_entries(L, host, amp, compile, sc["forward"], ck), n))
        blocks.append(Block("forward", _forward_entries(head, host, amp, compile, sc["fixed_forward"])))
        if accum > 1:
            blocks.append(Block("forward", [(memory_kernel(1, 4, 4), host.op_s, False)]))  # loss / accumulation
        if compile:
            blocks.append(Block("backward", [(None, host.compile_backward_s, False)]))
        blocks.append(Block("backward", _backward_entries(head, host, compile, sc["fixed_backward"])))
        for L, n in reversed(layers):
            bwd = _backward_entries(L, host, compile, sc["backward"], ck)
            redo = _forward_entries(L, host, amp, compile, sc["recompute"], ck) if checkpointing else []
            blocks.append(Block("backward", redo + bwd, n, recompute=len(redo)))
        blocks.append(Block("backward", _backward_entries(embed, host, compile, sc["fixed_backward"])))
        grads = cfg.num_parameters()
        if micro:  # AccumulateGrad adds into the existing .grad: one kernel per tensor
            per = grads / n_tensors
            blocks.append(Block("backward", [(memory_kernel(per, 2 * p, p), host.backward_op_s, False)], n_tensors))
        else:
            blocks.append(Block("backward", [(None, host.backward_op_s * n_tensors, False)]))
    if clip_grad_norm is not None:
        params = cfg.num_parameters()
        host_clip = host.clip_s + host.clip_tensor_s * n_tensors
        blocks.append(Block("optimizer", [
            (memory_kernel(params, p, 0, 2), host_clip / 3, False),   # foreach_norm over the gradients
            (memory_kernel(n_tensors, 4, 4), host_clip / 3, False),   # stack, norm, clip coefficient
            (memory_kernel(params, p, p, 1), host_clip / 3, False)]))  # foreach_mul_
    blocks.append(_optimizer_block(cfg, optimizer, p, n_tensors, host, fused, foreach))
    blocks.append(Block("optimizer", [(None, host.zero_grad_tensor_s * n_tensors, False)]))
    return blocks


#: ``multi_tensor_apply`` (foreach and fused optimizers): elements per chunk, chunks (blocks) per launch, and
#: tensors per launch by the number of tensor lists (PyTorch ``aten/src/ATen/native/cuda/MultiTensorApply.cuh``).
CHUNK_SIZE, MAX_BLOCKS = 65536, 320
MAX_TENSORS = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}


def foreach_launches(numel: float, tensors: int, lists: int) -> int:
    """Kernels one foreach op launches over ``tensors`` tensors of ``numel`` elements in all.

    ``multi_tensor_apply`` starts a new launch when its tensor list or its 320 blocks of 65536
    elements are full, so a large model's pass is split into ``numel / (320 * 65536)`` launches.
    """
    by_tensors = -(-tensors // MAX_TENSORS[max(1, min(5, lists))])
    return int(max(by_tensors, np.ceil(numel / (CHUNK_SIZE * MAX_BLOCKS)), 1))


def _optimizer_block(cfg: TransformerConfig, optimizer: str, p: int, n_tensors: int, host: HostCosts,
                     fused: bool, foreach: bool) -> Block:
    params = cfg.num_parameters()
    impl = "fused" if fused else ("foreach" if foreach else "forloop")
    host_s = host.optimizer_cost(optimizer, impl, n_tensors)
    passes = FUSED_PASSES.get(optimizer, OPTIMIZER_PASSES[optimizer]) if fused else OPTIMIZER_PASSES[optimizer]
    if impl != "forloop":
        kernels = []
        for rd, wr in passes:
            n = foreach_launches(params, n_tensors, rd)
            extra = n - foreach_launches(0, n_tensors, rd)   # launches beyond those the host benchmark made
            per = (host_s / len(passes) + extra * host.launch_s) / n
            kernels += [(memory_kernel(params / n, rd * p, wr * p, 2), per, False)] * n
        return Block("optimizer", kernels)
    per = params / n_tensors  # one kernel per tensor and pass
    kernels = [(memory_kernel(per, rd * p, wr * p, 2), host_s / (len(passes) * n_tensors), False)
               for rd, wr in passes]
    return Block("optimizer", kernels, n_tensors)


def training_step(cfg: TransformerConfig, batch_size: int, seq_len: int, precision: str, optimizer: str,
                  checkpointing: bool, attention_kernel: str = "sdpa") -> dict[str, Kernels]:
    """Phase ("forward", "backward", "recompute", "optimizer") -> kernels of one eager training step."""
    phases: dict[str, Kernels] = {"forward": [], "backward": [], "recompute": [], "optimizer": []}
    for block in step_plan(cfg, batch_size, seq_len, precision, optimizer, checkpointing,
                           attention_kernel=attention_kernel):
        for (op, _host, _sync), phase in zip(block.kernels, block.phases()):
            if op is not None:
                phases[phase].append((op, block.repeat))
    return phases


def dispatch_seconds(blocks: list[Block], item_s: float) -> float:
    """What the host alone needs for a step: every kernel's dispatch and every synchronisation's round trip [s].

    A lower bound of the step whatever the GPU (:func:`gpumodel.training.hostcost.timeline` reaches it when the
    device never has to be waited for): ``sum(repeat * host seconds) + n * item_s``, with ``n`` the synchronised
    segments the timeline cuts the step into (every marked kernel but a last one ends a segment; the last segment
    ends with one).

    Parameters
    ----------
    blocks : list of Block
        The step (:func:`step_plan`).
    item_s : float
        One synchronisation round trip [s] (:attr:`~gpumodel.training.hostcost.HostCosts.item_s`).

    Returns
    -------
    float
        [s].

    Examples
    --------
    >>> b = [Block("forward", [(None, 2e-6, False), (None, 3e-6, True)], repeat=4)]
    >>> round(dispatch_seconds(b, 1e-5) * 1e6, 1)    # 4 x 5 us of dispatch, 4 segments of 10 us round trips
    60.0
    """
    host = sum(b.repeat * sum(k[1] for k in b.kernels) for b in blocks)
    syncs = sum(b.repeat * sum(bool(k[2]) for k in b.kernels) for b in blocks)
    last = bool(blocks[-1].kernels[-1][2]) if blocks and blocks[-1].kernels else False
    return float(host + (syncs - last + 1) * item_s)

