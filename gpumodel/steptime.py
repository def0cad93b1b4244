"""Training-step time of a decoder-only transformer: the sum of its kernels' estimated times.

A step is forward + backward + optimizer step. Each is written out as the kernels a PyTorch /
Hugging Face implementation launches (:mod:`gpumodel.ops` cost records), and every kernel is timed
with :func:`gpumodel.estimate.estimate` — calibrated on GPUs that ship a calibration, the
datasheet with default efficiencies elsewhere. Nothing here is fitted to step times; the step-time
measurements in ``tests/data/steptime/`` only check the sum (``bench/step_time_accuracy.py``).

Kernels per decoder layer (``T = batch * seq`` tokens, hidden ``h``, FFN ``i``):

* forward: 2 norms, Q/K/V projections (``T x (q + 2 kv) x h``), rotary embedding, flash attention,
  output projection, 2 residual adds, MLP (gate, up, act*mul, down; or fc1, GELU, fc2);
* backward: two matmuls per forward matmul (``dX = dY W^T``, ``dW = X^T dY``), attention backward,
  and for every memory-bound op a kernel that reads its saved input and output gradient and writes
  the input gradient;
* gradient checkpointing re-runs every layer's forward during backward;
* head: final norm, LM head matmul, fp32 up-cast of the logits (Hugging Face computes the loss in
  fp32), cross-entropy forward and backward;
* optimizer: one fused multi-tensor pass over all parameters (AdamW reads parameter, gradient and
  two moments and writes three; SGD with momentum reads three and writes two); ``amp_*`` also
  casts the fp32 weights to 16 bits every forward and the 16-bit weight gradients to fp32.

MFU follows Chowdhery et al. (2022, PaLM, appendix B): model FLOPs ``6 N T + 12 L h s T``
(the attention term with causal masking counted in full, as there), over step time and the dense
16-bit peak.

References
----------
Chowdhery et al., "PaLM: Scaling Language Modeling with Pathways", 2022, appendix B.
Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import ops
from .dtypes import bytes_per_element
from .estimate import estimate as _estimate
from .gpus import gpu as _gpu
from .transformer import MLPType, NormType, PositionType, TransformerConfig, model as _model

__all__ = ["StepTime", "training_step_time", "step_kernels"]

_COMPUTE_DTYPE = {"fp32": "fp32", "amp_bf16": "bf16", "amp_fp16": "fp16", "bf16": "bf16", "fp16": "fp16"}
_PARAM_DTYPE = {"fp32": "fp32", "amp_bf16": "fp32", "amp_fp16": "fp32", "bf16": "bf16", "fp16": "fp16"}
#: optimizer -> (state tensors read besides parameter and gradient, tensors written besides the parameter)
_OPTIMIZER_TRAFFIC = {"adamw": (2, 2), "adam": (2, 2), "sgd": (0, 0), "sgd_momentum": (1, 1),
                      "adafactor": (0, 0), "adamw_8bit": (0, 0)}


@dataclass(frozen=True)
class StepTime:
    """Estimated time of one training step.

    Attributes
    ----------
    seconds : float
        Step time [s].
    tokens_per_s : float
        ``batch_size * seq_len / seconds`` [token/s].
    mfu : float
        Model FLOPs utilisation: ``model_flops / seconds / peak`` (dense 16-bit, or fp32 for "fp32").
    model_flops : float
        ``6 N T + 12 L h s T`` [FLOP].
    breakdown : dict
        Seconds by phase: "forward", "backward", "recompute", "optimizer".
    calibrated : bool
        Whether a GPU calibration timed the kernels (else datasheet with default efficiencies).
    kernels : int
        Kernels launched per step in this model of the step.
    """

    seconds: float
    tokens_per_s: float
    mfu: float
    model_flops: float
    breakdown: dict = field(default_factory=dict)
    calibrated: bool = False
    kernels: int = 0

    def __repr__(self) -> str:
        parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.breakdown.items() if v)
        label = "calibrated" if self.calibrated else "uncalibrated"
        return (f"StepTime({self.seconds * 1e3:.1f} ms, {self.tokens_per_s:,.0f} tokens/s, MFU {self.mfu:.1%}, "
                f"{label}; {parts})")


def _layer_forward(cfg: TransformerConfig, b: int, s: int, dt: str) -> list[ops.OpCost]:
    t, h, i = b * s, cfg.hidden_size, cfg.intermediate_size
    norm = ops.rms_norm if cfg.norm == NormType.rmsnorm else ops.layer_norm
    out = [norm(t, h, dt)]
    if cfg.fused_qkv:
        out.append(ops.matmul(t, cfg.q_dim + 2 * cfg.kv_dim, h, dt))
    else:
        out += [ops.matmul(t, cfg.q_dim, h, dt), ops.matmul(t, cfg.kv_dim, h, dt), ops.matmul(t, cfg.kv_dim, h, dt)]
    if cfg.position == PositionType.rope:
        out.append(ops.elementwise(t * (cfg.q_dim + cfg.kv_dim), dt, inputs=1, outputs=1, flops_per_element=3))
    out.append(ops.attention(b, cfg.num_heads, s, cfg.dim_head, causal=True, dtype=dt, impl="flash",
                             kv_heads=cfg.kv_heads))
    out += [ops.matmul(t, h, cfg.q_dim, dt), ops.elementwise(t * h, dt, inputs=2), norm(t, h, dt)]
    if cfg.mlp == MLPType.gated:
        out += [ops.matmul(t, i, h, dt), ops.matmul(t, i, h, dt), ops.elementwise(t * i, dt, inputs=2, flops_per_element=5)]
    else:
        out += [ops.matmul(t, i, h, dt), ops.elementwise(t * i, dt, flops_per_element=8)]
    out += [ops.matmul(t, h, i, dt), ops.elementwise(t * h, dt, inputs=2)]
    return out


def _backward_of(op: ops.OpCost, dt: str) -> list[ops.OpCost]:
    if op.name == "matmul":
        m, n, k = (op.shape[x] for x in ("m", "n", "k"))
        return [ops.matmul(m, k, n, dt), ops.matmul(k, n, m, dt)]
    if op.name == "attention":
        sh = op.shape
        return [ops.attention(sh["batch"], sh["heads"], sh["seq"], sh["head_dim"], causal=True, dtype=dt,
                              impl="flash", backward=True, kv_heads=sh["kv_heads"])]
    # memory-bound op: read its saved inputs and the output gradient, write the input gradients
    size = bytes_per_element(dt)
    numel = float(op.bytes_written) / size
    inputs = max(1, round(float(op.bytes_read) / size / numel))
    return [ops.elementwise(numel, dt, inputs=inputs + 1, outputs=inputs, flops_per_element=2)]


Kernels = list[tuple[ops.OpCost, int]]


def step_kernels(model: TransformerConfig | str, batch_size: int, seq_len: int, precision: str = "amp_bf16",
                 optimizer: str = "adamw", checkpointing: bool = False) -> dict[str, Kernels]:
    """The kernels of one training step: phase -> list of (op, launches per step).

    Phases are "forward", "backward", "recompute" and "optimizer"; parameters are those of
    :func:`training_step_time`.
    """
    cfg = _model(model) if isinstance(model, str) else model
    if precision not in _COMPUTE_DTYPE:
        raise ValueError(f"precision must be one of {', '.join(_COMPUTE_DTYPE)}; got {precision!r}")
    if optimizer not in _OPTIMIZER_TRAFFIC:
        raise ValueError(f"optimizer must be one of {', '.join(_OPTIMIZER_TRAFFIC)}; got {optimizer!r}")
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    dt, b, s, n_layers = _COMPUTE_DTYPE[precision], batch_size, seq_len, cfg.num_layers
    t, h, v = b * s, cfg.hidden_size, cfg.vocab_size
    norm = ops.rms_norm if cfg.norm == NormType.rmsnorm else ops.layer_norm
    layer = _layer_forward(cfg, b, s, dt)
    # final norm, LM head, fp32 up-cast of the logits (read 16-bit, write fp32), loss
    head = [norm(t, h, dt), ops.matmul(t, v, h, dt), ops.elementwise(t * v, dt, inputs=1, outputs=2, flops_per_element=0),
            ops.cross_entropy(t, v, "fp32")]
    forward = [(ops.embedding(t, v, h, dt), 1)] + [(op, n_layers) for op in layer] + [(op, 1) for op in head]
    backward = [(k, n_layers) for op in layer for k in _backward_of(op, dt)]
    backward += [(k, 1) for op in head[:2] for k in _backward_of(op, dt)]
    backward += [(ops.elementwise(t * v, "fp32", inputs=2), 1),  # loss gradient over the fp32 logits
                 (ops.elementwise(t * h, dt, inputs=2), 1)]        # embedding gradient (index add)
    recompute = [(op, n_layers) for op in layer] if checkpointing else []
    reads, writes = _OPTIMIZER_TRAFFIC[optimizer]
    optimizer_ops = [(ops.elementwise(cfg.num_parameters(), _PARAM_DTYPE[precision], inputs=2 + reads,
                                      outputs=1 + writes, flops_per_element=4 + 6 * reads), 1)]
    if precision.startswith("amp"):
        weights = n_layers * cfg.layer_matmul_parameters() + v * h
        cast = ops.elementwise(weights, dt, inputs=2, outputs=1, flops_per_element=0)  # read fp32, write 16-bit
        forward.insert(0, (cast, 1))
        optimizer_ops.insert(0, (cast, 1))  # 16-bit weight gradients accumulated into the fp32 .grad
        if checkpointing:
            recompute.insert(0, (cast, 1))
    return {"forward": forward, "backward": backward, "recompute": recompute, "optimizer": optimizer_ops}


def training_step_time(model: TransformerConfig | str, gpu: Any, batch_size: int, seq_len: int,
                       precision: str = "amp_bf16", optimizer: str = "adamw", checkpointing: bool = False,
                       calibrated: bool = True, calibration: Any = None) -> StepTime:
    """Estimate the time of one training step of a decoder-only transformer on one GPU.

    Parameters
    ----------
    model : TransformerConfig or str
        A config or a preset name (``gm.model``).
    gpu : GPUSpec or str
    batch_size, seq_len : int
        Micro-batch size and sequence length [tokens].
    precision : {"amp_bf16", "amp_fp16", "bf16", "fp16", "fp32"}
    optimizer : {"adamw", "adam", "sgd", "sgd_momentum", "adafactor", "adamw_8bit"}
    checkpointing : bool
        Full activation checkpointing per decoder layer (forward recomputed in backward).
    calibrated, calibration :
        Passed to :func:`gpumodel.estimate.estimate_time`.

    Returns
    -------
    StepTime
        ``.seconds``, ``.tokens_per_s``, ``.mfu`` and a ``breakdown`` by phase.

    Notes
    -----
    The step time is the sum of the kernels' times; kernels do not overlap within one stream, and the
    Python launch overhead of eager PyTorch is not modelled (it matters for models far below 100M
    parameters). Adafactor and 8-bit AdamW are approximated by an SGD-sized pass.

    Examples
    --------
    >>> import gpumodel as gm
    >>> st = gm.training_step_time("llama-3.2-1b", "h200", batch_size=8, seq_len=1024)
    >>> 0.05 < st.seconds < 1.0 and 0.0 < st.mfu < 1.0
    True
    """
    cfg = _model(model) if isinstance(model, str) else model
    g = _gpu(gpu)
    phases = step_kernels(cfg, batch_size, seq_len, precision, optimizer, checkpointing)
    breakdown, count, calibrated_used = {}, 0, False
    for phase, kernels in phases.items():
        total = 0.0
        for op, launches in kernels:
            est = _estimate(op, g, calibrated=calibrated, calibration=calibration)
            total += launches * float(est.time_s)
            calibrated_used = calibrated_used or bool(est.calibrated)
            count += launches
        breakdown[phase] = total
    seconds = sum(breakdown.values())
    tokens = batch_size * seq_len
    model_flops = 6.0 * cfg.active_parameters() * tokens + 12.0 * cfg.num_layers * cfg.hidden_size * seq_len * tokens
    peak = g.peak_flops(_COMPUTE_DTYPE[precision])
    return StepTime(seconds=seconds, tokens_per_s=tokens / seconds, mfu=model_flops / seconds / peak,
                    model_flops=model_flops, breakdown=breakdown, calibrated=calibrated_used, kernels=count)
