"""Does a training step run under PyTorch's default allocator? Its allocations, replayed through the allocator.

:func:`training_step_allocations` writes down every allocation and free of a Hugging Face training loop
(``loss = model(input_ids=x, labels=x).loss; loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)``) as
:mod:`~gpumodel.core.step_graph` and :mod:`~gpumodel.core.autograd_tape` derive them: the parameters created in
order (with tied embeddings, the LM head's own weight too, which ``post_init`` frees when it ties the head to the
embedding: its segment stays cached and takes the first step's activations), the input ids, then each step's
forward and backward, the optimizer states created on the first
``opt.step()`` (``exp_avg`` and ``exp_avg_sq`` of each parameter in turn; a device ``step`` scalar for the fused
kernel), the optimizer's temporaries (foreach AdamW: one ``sqrt`` buffer a parameter, all at once; the for-loop
one two a parameter; fused AdamW and SGD none) and ``zero_grad`` freeing the gradients. The first step also
allocates the cuBLAS workspaces (the forward's at the rotary tables' matmul, autograd's at its first ``mm``, each
after the product it computes).

:func:`simulate_training_step` replays them through :func:`~gpumodel.core.allocator.simulate_allocator`. The first
step cuts its segments to the activations; the second finds them taken in part by the optimizer states and
is where a step at the edge of the card fails, as on the GPU: 78 of the 80 H100 runs of
``tests/data/memory/edge`` (the default allocator) come out as they ran (``bench/edge_accuracy.py --allocator``).

Supported: the llama, qwen2, mixtral and qwen2_moe families (``transformers`` 5, SDPA flash attention, grouped_mm
experts), bf16/fp16 and amp_bf16/amp_fp16, AdamW/Adam (foreach, for-loop, fused) and SGD, checkpointing of every
layer or none, one GPU. Anything else raises :class:`~gpumodel.base.errors.UnsupportedError`.

Examples
--------
>>> import gpumodel as gm
>>> sim = simulate_training_step("llama-3.2-1b", batch_size=1, seq_len=256, precision="bf16", steps=2)
>>> sim.fits, [round(b / 2**30, 2) for b in sim.step_reserved_bytes]
(True, [11.7, 12.19])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .allocator import simulate_allocator
from .autograd_tape import SMS_H100, Graph, Grad, Tape
from .memory import CUBLAS_WORKSPACE_BYTES
from .step_graph import ModelTensors, StepGraph, StepShape
from ..base.errors import UnsupportedError
from ..base.reprs import ResultRecord
from ..records.transformer import MLPType, NormType, PositionType
from ..vocabulary import Checkpointing, Optimizer, checkpointing_mode, choice, flag, positive_int, precision as _precision, \
    resolve_model

__all__ = ["training_step_allocations", "simulate_training_step", "StepAllocations", "StepSimulation",
           "SUPPORTED_FAMILIES"]

#: model families whose step :mod:`~gpumodel.core.step_graph` writes down (``TransformerConfig.family``)
SUPPORTED_FAMILIES = ("llama", "qwen2", "mixtral", "qwen2_moe")


@dataclass(frozen=True, repr=False)
class StepAllocations(ResultRecord):
    """The allocation events of building a model and running training steps.

    Attributes
    ----------
    events : list of (int, int)
        ``(tensor, bytes)`` in program order; 0 bytes frees the tensor (as :func:`simulate_allocator` reads them).
    step_starts : tuple of int
        Index of the first event of each step, then the number of events.
    parameter_bytes : int
        Bytes of the parameters [B].
    """

    events: list
    step_starts: tuple
    parameter_bytes: int

    def __repr__(self) -> str:
        return (f"StepAllocations({len(self.events)} events, {len(self.step_starts) - 1} steps, "
                f"parameters {self.parameter_bytes / 2**30:.2f} GiB)")


@dataclass(frozen=True, repr=False)
class StepSimulation(ResultRecord):
    """Training steps replayed through the default caching allocator.

    Attributes
    ----------
    fits : bool
        No allocation failed: the steps ran.
    failed_step : int or None
        The step (from 0) that raised out-of-memory.
    failed_request_bytes : int
        Bytes the failing allocation asked for [B] ("Tried to allocate"), 0 if none failed.
    step_reserved_bytes, step_allocated_bytes : tuple of int
        Peak reserved / allocated bytes of each step that ran to its end [B] (``max_memory_reserved`` /
        ``max_memory_allocated`` with the peaks reset each step).
    peak_reserved_bytes, peak_allocated_bytes : int
        The largest of all events that ran [B].
    alloc_retries : int
        Allocations that returned the cached segments and tried again.
    capacity_bytes : float
        What the allocator's segments could take [B].
    largest_request_bytes : int
        The largest single allocation of the steps [B] (with a large vocabulary, the fp32 logits or their
        gradient): the block that needs a segment of its own where a process's earlier allocations left no free
        block as large (:func:`~gpumodel.core.margin.memory_margin`'s band).
    """

    fits: bool
    failed_step: int | None
    failed_request_bytes: int
    step_reserved_bytes: tuple
    step_allocated_bytes: tuple
    peak_reserved_bytes: int
    peak_allocated_bytes: int
    alloc_retries: int
    capacity_bytes: float
    largest_request_bytes: int = 0

    def __repr__(self) -> str:
        state = "fits" if self.fits else (f"out of memory in step {self.failed_step} asking for "
                                          f"{self.failed_request_bytes / 2**30:.2f} GiB")
        return (f"StepSimulation({state}; peak reserved {self.peak_reserved_bytes / 2**30:.2f} GiB, allocated "
                f"{self.peak_allocated_bytes / 2**30:.2f} GiB)")


def _supported(cfg, prec, opt, ckpt, attention) -> None:
    checks = [
        ("model", cfg.family, cfg.family in SUPPORTED_FAMILIES, ", ".join(SUPPORTED_FAMILIES)),
        ("model", cfg.name, cfg.mlp == MLPType.GATED and cfg.norm == NormType.RMSNORM and cfg.position ==
         PositionType.ROPE and not (cfg.fused_qkv or cfg.fused_gate_up or cfg.o_bias or cfg.mlp_bias or cfg.norm_bias
                                    or cfg.is_mla or cfg.first_dense_layers or cfg.extra_norms)
         and cfg.qk_norm == "none" and cfg.attn_dropout == cfg.resid_dropout == cfg.embd_dropout == 0,
         "a llama-style decoder (gated MLP, RMSNorm, RoPE, no dropout)"),
        ("precision", prec.name, prec.name != "fp32", "bf16, fp16, amp_bf16, amp_fp16"),
        ("optimizer", opt.value, opt in (Optimizer.ADAMW, Optimizer.ADAM, Optimizer.SGD), "adamw, adam, sgd"),
        ("checkpointing", ckpt.value, ckpt != Checkpointing.SELECTIVE, "none, full"),
        ("attention", attention, attention in ("sdpa", "flash"), "sdpa, flash"),
    ]
    for argument, value, ok, allowed in checks:
        if not ok:
            raise UnsupportedError(f"the allocator model writes down no step with {argument}={value!r} "
                                   f"(it supports {allowed})", argument=argument, value=value, allowed=allowed)


def training_step_allocations(model, batch_size, seq_len, precision="amp_bf16", optimizer="adamw",
                              checkpointing=False, attention="sdpa", *, foreach: bool = True, fused: bool = False,
                              use_cache: bool = True, steps: int = 3, sm_count: int = SMS_H100) -> StepAllocations:
    """Every allocation and free of building a model and running ``steps`` Hugging Face training steps.

    Parameters
    ----------
    model : TransformerConfig or str
        A config or a preset name (``gm.model``).
    batch_size : int
        Micro-batch size [sequences].
    seq_len : int
        Sequence length [tokens].
    precision : {"bf16", "fp16", "amp_bf16", "amp_fp16"}
        As in :func:`~gpumodel.training_memory`.
    optimizer : {"adamw", "adam", "sgd"}
        ``torch.optim`` optimizer (SGD without momentum).
    checkpointing : bool or {"none", "full"}
        Hugging Face gradient checkpointing of every decoder layer (non-reentrant ``torch.utils.checkpoint``).
    attention : {"sdpa", "flash"}
        Attention through SDPA's flash kernel.
    foreach, fused : bool
        The AdamW implementation (foreach by default, the for-loop one with ``foreach=False``, or fused).
    use_cache : bool
        Hugging Face builds a KV cache in a training forward unless ``use_cache=False`` (never when
        checkpointing).
    steps : int
        Training steps [steps]; the second is the one whose blocks meet the optimizer states.
    sm_count : int
        Streaming multiprocessors of the GPU (the size of reduction workspaces) [SMs].

    Returns
    -------
    StepAllocations
        The events, where each step starts, and the parameters' bytes.

    Raises
    ------
    UnsupportedError
        A model family or option the step is not written down for.

    Examples
    --------
    >>> a = training_step_allocations("llama-3.2-1b", 1, 128, "bf16", steps=1)
    >>> a.parameter_bytes / 2**30 > 2.3, len(a.step_starts)
    (True, 2)
    """
    cfg = resolve_model(model)
    prec, opt = _precision(precision), choice(Optimizer, optimizer, "optimizer")
    ckpt = checkpointing_mode(checkpointing)
    _supported(cfg, prec, opt, ckpt, str(attention))
    b, s = int(positive_int(batch_size, "batch_size")), int(positive_int(seq_len, "seq_len"))
    steps, sm_count = int(positive_int(steps, "steps")), int(positive_int(sm_count, "sm_count"))
    foreach, fused, use_cache = flag(foreach, "foreach"), flag(fused, "fused"), flag(use_cache, "use_cache")
    shape = StepShape(cfg, b, s, prec.name, ckpt == Checkpointing.FULL, use_cache)
    adam = opt in (Optimizer.ADAMW, Optimizer.ADAM)
    impl = "fused" if fused else ("foreach" if foreach else "forloop")
    tape = Tape()
    model_t = ModelTensors(tape, shape)
    if shape.tied:       # the head's own weight, built with the model and freed when post_init ties it
        tape.dec(tape.new(shape.V * shape.h * shape.w))
    tape.new(shape.T * 8)                                    # the input ids (also the labels)
    workspace = CUBLAS_WORKSPACE_BYTES // 2
    starts, states = [], False
    for step in range(steps):
        starts.append(len(tape.events))
        g = Graph(tape, tokens=shape.T, sms=sm_count)
        take = (lambda: tape.new(workspace)) if step == 0 else None
        g.first_mm = take                                    # the forward's cuBLAS workspace
        loss = StepGraph(g, model_t, shape).forward()
        g.first_mm = take                                    # autograd's, on its own stream
        g.backward(loss.fn, Grad(tape.new(4), 4))
        tape.dec(loss.h)
        if adam and not states:                              # opt.step() creates the states
            for p in model_t.order:
                if impl == "fused":
                    tape.new(4)
                tape.new(p.n)
                tape.new(p.n)
            states = True
        if adam:
            _adam_temporaries(tape, model_t.order, impl)
        for p in model_t.order:                               # zero_grad(set_to_none=True)
            if p.fn.grad is not None:
                tape.dec(p.fn.grad)
            p.fn.grad = None
    starts.append(len(tape.events))
    return StepAllocations(events=tape.events, step_starts=tuple(starts),
                           parameter_bytes=sum(p.n for p in model_t.order))


def _adam_temporaries(tape, params, impl) -> None:
    if impl == "foreach":        # torch._foreach_sqrt(exp_avg_sqs): one buffer a parameter, dropped together, the
        for h in reversed([tape.new(p.n) for p in params]):     # last first (a Python list frees its items so)
            tape.dec(h)
    elif impl == "forloop":      # denom = (exp_avg_sq.sqrt() / c).add_(eps), kept until the next parameter's
        prev = None
        for p in params:
            t = tape.new(p.n)
            denom = tape.new(p.n)
            tape.dec(t)
            if prev is not None:
                tape.dec(prev)
            prev = denom
        if prev is not None:
            tape.dec(prev)


def simulate_training_step(model, batch_size, seq_len, precision="amp_bf16", optimizer="adamw", checkpointing=False,
                           attention="sdpa", *, foreach: bool = True, fused: bool = False, use_cache: bool = True,
                           capacity_bytes: float = np.inf, steps: int = 3,
                           sm_count: int = SMS_H100) -> StepSimulation:
    """Run training steps through PyTorch's default caching allocator on a card of ``capacity_bytes``.

    Parameters
    ----------
    model : TransformerConfig or str
        A config or a preset name (``gm.model``).
    batch_size : int
        Micro-batch size [sequences].
    seq_len : int
        Sequence length [tokens].
    precision : {"bf16", "fp16", "amp_bf16", "amp_fp16"}
        As in :func:`~gpumodel.training_memory`.
    optimizer : {"adamw", "adam", "sgd"}
        ``torch.optim`` optimizer.
    checkpointing : bool or {"none", "full"}
        Gradient checkpointing of every decoder layer.
    attention : {"sdpa", "flash"}
        Attention through SDPA's flash kernel.
    foreach, fused : bool
        The AdamW implementation.
    use_cache : bool
        Hugging Face's ``use_cache`` in the training forward.
    capacity_bytes : float
        What the allocator may reserve [B]: the card's memory less the CUDA context (the GPU's
        ``usable_memory_bytes`` less :data:`~gpumodel.core.memory.CUDA_CONTEXT_BYTES`). Unlimited by default:
        the reserved peak of an unconstrained run.
    steps : int
        Training steps replayed [steps] (three by default; the runs at the edge fail in the second).
    sm_count : int
        Streaming multiprocessors of the GPU [SMs].

    Returns
    -------
    StepSimulation
        Whether the steps ran, the step that failed and what it asked for, each step's reserved peak.

    Raises
    ------
    UnsupportedError
        A model family or option the step is not written down for.

    Examples
    --------
    On 11 GiB the first ``opt.step()`` (states, then foreach's ``sqrt`` buffers) fails on an MLP's buffer:

    >>> sim = simulate_training_step("llama-3.2-1b", 1, 256, "bf16", capacity_bytes=11 * 2**30, steps=2)
    >>> sim.fits, sim.failed_step, round(sim.failed_request_bytes / 2**20)
    (False, 0, 32)
    """
    alloc = training_step_allocations(model, batch_size, seq_len, precision, optimizer, checkpointing, attention,
                                      foreach=foreach, fused=fused, use_cache=use_cache, steps=steps,
                                      sm_count=sm_count)
    run = simulate_allocator(alloc.events, capacity_bytes)
    starts = alloc.step_starts
    done = len(run.reserved_bytes)
    ran_steps = [(a, b) for a, b in zip(starts, starts[1:]) if b <= done and b > a]
    failed = None if run.ran else int(np.searchsorted(starts, run.failed_event, side="right")) - 1
    return StepSimulation(
        fits=run.ran, failed_step=failed, failed_request_bytes=run.failed_request_bytes,
        step_reserved_bytes=tuple(int(run.reserved_bytes[a:b].max()) for a, b in ran_steps),
        step_allocated_bytes=tuple(int(run.allocated_bytes[a:b].max()) for a, b in ran_steps),
        peak_reserved_bytes=run.peak_reserved_bytes, peak_allocated_bytes=run.peak_allocated_bytes,
        alloc_retries=run.alloc_retries, capacity_bytes=float(capacity_bytes),
        largest_request_bytes=max((n for _, n in alloc.events), default=0))
