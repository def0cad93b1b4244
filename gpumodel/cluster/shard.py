"""What one GPU computes in a parallel layout: the shard's per-layer and per-head kernel times.

The model is cut as the engines cut it: tensor parallelism divides the attention heads, the
key/value heads (replicated when fewer than ``tp``), the MLP width and the vocabulary; context
parallelism divides the sequence, while each query chunk still attends to the whole sequence
(attention time ``x cp``); expert parallelism divides the experts. The shard's kernels are those of
:func:`gpumodel.training.steptime.step_kernels`, timed by :func:`gpumodel.calibration.estimate.estimate` on the GPU.

``framework="megatron"`` runs fused kernels (fused layer norm, bias-GeLU/SwiGLU, bias-dropout-add,
fused softmax/flash attention, fused Adam): the memory-bound kernels of a layer move only the bytes
of those fused kernels, so their eager time is scaled by ``fused bytes / eager bytes``. The scaling assumes fused
kernels move their bytes at the eager kernels' rate: ``bench/measure_fused_layer.py`` times Llama layers built with
single fused kernels beside Hugging Face's eager layer on one GPU, and ``bench/fused_layer_accuracy.py`` sets the
measured speed-up of fusion against this one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..core import ops
from ..calibration.estimate import calibration_key, resolve_calibration
from ..training.layer import COMPUTE_DTYPE, memory_kernel
from ..training.stepkernels import OPTIMIZER_PASSES
from ..training.steptime import step_kernels
from ..records.transformer import MLPType, PositionType, TransformerConfig
from ..vocabulary import fp8_recipe
from .kernelprice import price_kernels

__all__ = ["ShardTimes", "shard_config", "shard_times", "fp8_linear", "fp8_cast_kernels", "FP8_SPLIT_ACCUMULATION",
           "FP8_SPLIT_PHASES"]

_COMPUTE = {"matmul", "attention", "bmm"}

#: Time of an fp8 GEMM with the split accumulator (partial sums promoted to fp32 at intervals; cuBLASLt's fast
#: accumulation off), over the same GEMM with fast accumulation [1]. Transformer Engine's recipes run the data- and
#: weight-gradient GEMMs this way. Median of 84 backward GEMMs of fp8 training runs' layer shapes (e5m2 x e4m3,
#: quartiles 1.038-1.080) measured on an H100 SXM: ``tests/data/calibration/fp8/h100``, ``python bench/fp8_gemms.py``.
FP8_SPLIT_ACCUMULATION = 1.06


@dataclass(frozen=True)
class ShardTimes:
    """Kernel times of one GPU's shard for one micro-batch [s] and FLOPs [FLOP].

    ``layer_*`` are per decoder layer; ``head_*`` the embedding, final norm, LM head and loss;
    ``attention_forward`` the attention kernels' part of ``layer_forward``; ``optimizer_per_param``
    the optimizer's time per parameter of the shard; ``source`` where the kernel model's numbers come from
    ("calibrated", "transferred", "datasheet") and ``expected_error`` the kernels' expected median relative
    error weighted by their time in a layer's forward and backward [1] (None: no kernel has one).
    """

    layer_forward: float
    layer_backward: float
    attention_forward: float
    head_forward: float
    head_backward: float
    optimizer_per_param: float
    layer_flops: float
    head_flops: float
    calibrated: bool
    source: str = ""
    expected_error: float | None = None


def shard_config(cfg: TransformerConfig, tp: int = 1, ep: int = 1) -> TransformerConfig:
    """One tensor-parallel rank's slice of ``cfg`` (one layer; heads, MLP width, vocabulary ``/ tp``).

    A mixture of experts becomes the dense MLP of the same work per token, averaged over the layers:
    ``experts_per_token x expert_size + shared_expert_intermediate_size`` in each MoE layer (the routed
    experts' width, ``moe_intermediate_size``, and the shared expert's), ``intermediate_size`` in the
    ``first_dense_layers``, divided by ``tp`` (with balanced routing each GPU of an expert-parallel group runs
    the experts' GEMMs for as many tokens as it holds, whatever ``ep``).

    >>> import gpumodel as gm
    >>> v3 = gm.TransformerConfig(name="v3-like", num_layers=61, hidden_size=7168, num_heads=128, num_kv_heads=128,
    ...                           intermediate_size=18432, vocab_size=129280, num_experts=256, experts_per_token=8,
    ...                           moe_intermediate_size=2048, shared_expert_intermediate_size=2048,
    ...                           first_dense_layers=3)
    >>> shard_config(v3).intermediate_size    # (3 x 18432 + 58 x (8 x 2048 + 2048)) // 61; not 8 x 18432 = 147456
    18432
    """
    kv = max(1, cfg.num_kv_heads // tp)
    width = cfg.intermediate_size
    if cfg.is_moe:
        dense = cfg.num_dense_layers
        moe = cfg.experts_per_token * cfg.expert_size + cfg.shared_expert_intermediate_size
        width = (dense * cfg.intermediate_size + (cfg.num_layers - dense) * moe) // cfg.num_layers
    update = dict(num_layers=1, num_heads=cfg.num_heads // tp, num_kv_heads=kv, head_dim=cfg.head_dim,
                  intermediate_size=width // tp, vocab_size=-(-cfg.vocab_size // tp), num_experts=0, experts_per_token=0)
    return cfg.model_copy(update=update)


def _fused_bytes(cfg: TransformerConfig, tokens: float, c: int, phase: str = "forward") -> float:
    """Bytes the fused memory-bound kernels of one Megatron layer move in ``phase`` ("forward" or "backward"): two
    norms, two bias-dropout-adds, the activation (read gate and up, write one), each twice in the backward; and with
    rotary positions Megatron-Core's fused RoPE kernel (``apply_rope_fusion``, on by default: read and write the
    queries and keys, and their gradients in the backward; under multi-latent attention only their rotary parts)."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    gated = cfg.mlp == MLPType.GATED
    norms = 2 * 2 * h
    adds = 2 * (3 * h + h / 2)              # read x and residual, write out; 1-byte dropout mask
    act = (3 if gated else 2) * i
    if cfg.position != PositionType.ROPE:
        rope = 0
    elif cfg.is_mla:                        # the rotary part of each query head and the one shared rotary key
        rope = 2 * (cfg.num_heads + 1) * cfg.qk_rope_head_dim
    else:
        rope = 2 * (cfg.q_dim + cfg.kv_dim)
    return tokens * c * ((1 if phase == "forward" else 2) * (norms + adds + act) + rope)


def _with_impl(op, impl: str, dtype: str):
    """Attention as its kernels: one flash kernel, or (``"naive"``) Megatron-LM's unfused path: the
    ``Q K^T`` batched matmul, the fused scale-mask-softmax, dropout on the probabilities, ``P V``; the
    backward runs two batched matmuls per product and the softmax and dropout backward."""
    if op.name != "attention" or impl == "flash":
        return [(op, 1)]
    sh = op.shape
    bh, s, d = int(sh["batch"] * sh["heads"]), int(sh["seq"]), int(sh["head_dim"])
    scores = bh * s * s
    if not sh["backward"]:
        return [(ops.bmm(bh, s, s, d, dtype), 1), (ops.softmax(bh * s, s, dtype), 1),
                (memory_kernel(scores, 2, 3), 1), (ops.bmm(bh, s, d, s, dtype), 1)]
    return [(ops.bmm(bh, s, s, d, dtype), 1), (ops.bmm(bh, s, d, s, dtype), 1),       # dP, dV
            (memory_kernel(scores, 3, 2), 1), (memory_kernel(scores, 4, 2), 1),       # dropout, softmax backward
            (ops.bmm(bh, s, d, s, dtype), 1), (ops.bmm(bh, d, s, s, dtype), 1)]       # dQ, dK


def fp8_linear(op, vocab: int) -> list:
    """A decoder layer's GEMM as Transformer Engine runs it in fp8.

    Parameters
    ----------
    op : OpCost
        A kernel of the step; only a ``matmul`` none of whose sizes is the (sharded) vocabulary changes (the LM
        head stays in the compute dtype, as Megatron-Core runs it).
    vocab : int
        The shard's vocabulary [tokens].

    Returns
    -------
    list of (OpCost, int)
        The fp8 GEMM (bf16 output, :func:`gpumodel.core.ops.matmul` with ``dtype="fp8"``); other kernels
        unchanged. The casts feeding the fp8 GEMMs are kernels of their own (:func:`fp8_cast_kernels`).

    Examples
    --------
    >>> [(o.name, str(o.dtype)) for o, _ in fp8_linear(ops.matmul(4096, 4096, 4096), 32000)]
    [('matmul', 'fp8')]
    """
    sh = op.shape
    if op.name != "matmul" or any(np.any(np.asarray(sh[d]) == vocab) for d in ("m", "n", "k")):
        return [(op, 1)]
    return [(ops.matmul(sh["m"], sh["n"], sh["k"], "fp8"), 1)]


def fp8_cast_kernels(cfg: TransformerConfig, tokens, recipe: str = "delayed") -> dict:
    """The cast kernels Transformer Engine runs around one decoder layer's fp8 GEMMs, per micro-batch.

    With the default recipe (delayed scaling), Megatron-Core's Transformer Engine layer fuses the cast of the two
    normalised inputs (QKV and MLP-up GEMMs) into its layer norm, which writes fp8; the attention output and the
    activation output are cast by ``cast_transpose`` (read bf16, write fp8 in both layouts: this GEMM's and the
    transposed copy the weight gradient reads); the normalised inputs' transposed copies are made from their fp8
    (read 1 byte, write 1). In the backward every GEMM's output gradient is cast by ``cast_transpose`` (the data
    and weight gradient GEMMs read it in both layouts). These kernels are not Megatron's fused layer kernels, so
    they add to them. The other recipes (:class:`~gpumodel.vocabulary.FP8Recipe`) change what the casts move:

    * ``"current"``: each tensor's scale needs its amax before its cast: a reduction reading every 16-bit input of
      a cast (2 bytes an element), and the norm writes its output in 16 bits for that pass (one byte more an
      element written, and read by the cast).
    * ``"mxfp8"``: the 1 x 32 blocks' scales are found inside the cast, but the transposed copy is quantised along
      the other axis, so the norm writes both layouts (the normalised inputs' transpose pass goes); every fp8 copy
      carries a one-byte scale per 32 elements.
    * ``"blockwise"``: 1 x 128 tiles, found inside the cast; the norm writes 16 bits and one ``cast_transpose`` of
      each normalised input makes both layouts; a scale (4 bytes) per 128 elements of each copy.

    Parameters
    ----------
    cfg : TransformerConfig
        One tensor-parallel rank's layer (:func:`shard_config`).
    tokens : int or array
        Tokens of the micro-batch on the rank (micro-batch x local sequence).
    recipe : {"delayed", "current", "mxfp8", "blockwise"}
        The fp8 recipe (:func:`gpumodel.vocabulary.fp8_recipe`).

    Returns
    -------
    dict
        ``{"forward": [OpCost, ...], "backward": [OpCost, ...]}``, memory-bound kernels
        (:func:`gpumodel.training.layer.memory_kernel`). With ``a`` the attention width, ``q`` the QKV width,
        ``i`` the MLP width (``u`` its up-projection's, ``2 i`` when gated) and ``h`` the hidden size, delayed
        scaling moves forward ``4 t (a + i)`` + ``2 t (2 h)`` bytes, backward ``4 t (q + 2 h + u)`` bytes.

    References
    ----------
    NVIDIA Transformer Engine, ``transformer_engine/pytorch/module/layernorm_linear.py`` and ``linear.py``
    (fp8 ``cast_transpose`` of inputs and output gradients), ``transformer_engine/common/recipe`` (DelayedScaling,
    Float8CurrentScaling, MXFP8BlockScaling, Float8BlockScaling); Megatron-Core ``transformer_engine`` layer spec and
    ``--fp8-recipe``. OCP Microscaling Formats (MX) v1.0 (32-element blocks, E8M0 scales). DeepSeek-AI,
    "DeepSeek-V3 Technical Report", 2024, section 3.3.2 (1 x 128 and 128 x 128 scaling).

    Examples
    --------
    >>> import gpumodel as gm
    >>> k = fp8_cast_kernels(gm.model("llama-2-7b"), 4096)
    >>> round(sum(o.bytes for o in k["forward"]) / 2**20)    # 4 x 4096 x (4096 + 11008) + 2 x 4096 x 8192 B
    300
    >>> c = fp8_cast_kernels(gm.model("llama-2-7b"), 4096, "current")   # + 2 x 4096 x (15104 + 8192) + 2 x 4096 x 8192
    >>> round(sum(o.bytes for o in c["forward"]) / 2**20)
    546
    """
    d = cfg.head_dim
    a, q = cfg.num_heads * d, (cfg.num_heads + 2 * cfg.num_kv_heads) * d
    h, i = cfg.hidden_size, cfg.intermediate_size
    up = 2 * i if cfg.mlp == MLPType.GATED else i
    casts, normed, grads = tokens * (a + i), tokens * 2 * h, tokens * (q + 2 * h + up)
    if recipe == "mxfp8":
        s = 1 / 32                        # one E8M0 scale byte per 32 elements of each copy
        return {"forward": [memory_kernel(casts, 2, 2 + 2 * s), memory_kernel(normed, 0, 1 + 2 * s)],
                "backward": [memory_kernel(grads, 2, 2 + 2 * s)]}
    if recipe == "blockwise":
        s = 4 / 128                       # one fp32 scale per 128 elements of each copy
        return {"forward": [memory_kernel(casts + normed, 2, 2 + 2 * s), memory_kernel(normed, 0, 1)],
                "backward": [memory_kernel(grads, 2, 2 + 2 * s)]}
    forward = [memory_kernel(casts, 2, 2), memory_kernel(normed, 1, 1)]
    backward = [memory_kernel(grads, 2, 2)]
    if recipe == "current":               # the amax passes, and the norm's output in 16 bits for them
        forward += [memory_kernel(casts + normed, 2, 0), memory_kernel(normed, 1, 1)]
        backward += [memory_kernel(grads, 2, 0)]
    return {"forward": forward, "backward": backward}


#: The phases whose fp8 GEMMs take :data:`FP8_SPLIT_ACCUMULATION`: Transformer Engine's split accumulator in the
#: data- and weight-gradient GEMMs; with 128-element scaling blocks along ``k`` every GEMM promotes its partial sums
#: to fp32 once a block (DeepSeek-V3 report, section 3.3.2), the forward's too.
FP8_SPLIT_PHASES = {"delayed": ("backward",), "current": ("backward",), "mxfp8": ("backward",),
                    "blockwise": ("forward", "backward")}


def _phase_times(kernels, prices, slower: float = 1.0):
    """Compute, memory-bound and attention time, FLOPs and memory-bound bytes of ``kernels``, a list of
    ``(op, launches, is_attention)`` (:func:`_with_impl` applied); ``prices`` maps ``id(op)`` to its
    :class:`~gpumodel.cluster.kernelprice.KernelPrice`; fp8 GEMMs take ``slower`` times their price (the backward's
    split accumulator, :data:`FP8_SPLIT_ACCUMULATION`)."""
    comp = mem = attn = flops = mem_bytes = 0.0
    used = False
    for op, n, is_attn in kernels:
        est = prices[id(op)]
        t = n * est.seconds * (slower if op.name == "matmul" and str(op.dtype) == "fp8" else 1.0)
        used = used or est.calibrated
        flops = flops + n * op.flops
        if is_attn:
            attn = attn + t
        elif op.name in _COMPUTE:
            comp = comp + t
        else:
            mem = mem + t
            mem_bytes = mem_bytes + n * op.bytes
    return comp, mem, attn, flops, mem_bytes, used


class _Keyed:
    """A calibration record (or None) that hashes and compares by :func:`~gpumodel.calibration.estimate.calibration_key`:
    the cache of :func:`shard_times` is keyed by what the calibration prices kernels with."""

    __slots__ = ("record", "key")

    def __init__(self, record) -> None:
        self.record, self.key = record, calibration_key(record)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Keyed) and other.key == self.key


def shard_times(cfg: TransformerConfig, gpu, micro_batch: int, seq_local: int, cp: int, precision: str,
                optimizer: str, framework: str, calibrated: bool = True, calibration=None,
                attention: str = "flash", attention_kernel: str = "sdpa", fp8: bool = False) -> ShardTimes:
    """Kernel times of the shard ``cfg`` (from :func:`shard_config`) for one micro-batch.

    Evaluates the shard with one and with two layers; the difference is one layer, the rest is the
    embedding and the head. Attention kernels are scaled by ``cp`` (each query chunk meets every key).
    ``attention="naive"`` times attention as Megatron-LM ran it before FlashAttention (scores and
    probabilities written to device memory by batched matmuls and a fused softmax), see
    :func:`gpumodel.core.ops.attention`; ``attention_kernel`` names the library of the flash kernels
    (:class:`~gpumodel.core.ops.AttentionKernel`, checked by the caller). ``calibration`` (a record, or a YAML path
    read here) prices every kernel; results are cached per shard, sizes, attention kernel and calibration (by its
    parameters, not its identity). ``fp8``: the decoder layers' linear layers run Transformer Engine's fp8 GEMMs
    (:func:`fp8_linear`) with the casts of its recipe (True: ``"delayed"``; or a recipe's name,
    :func:`fp8_cast_kernels`); attention, the embedding and the LM head stay in the compute dtype.
    """
    cal = _Keyed(resolve_calibration(calibration, gpu))
    micro_batch, seq_local, cp = (tuple(np.ravel(x).tolist()) if np.ndim(x) else x for x in (micro_batch, seq_local, cp))
    return _shard_times(cfg, gpu, micro_batch, seq_local, cp, precision, optimizer, framework, calibrated, cal,
                        attention, str(getattr(attention_kernel, "value", attention_kernel)),
                        getattr(fp8_recipe(fp8, framework), "value", ""))


@functools.lru_cache(maxsize=4096)
def _shard_times(cfg: TransformerConfig, gpu, micro_batch: int, seq_local: int, cp: int, precision: str,
                 optimizer: str, framework: str, calibrated: bool, keyed: _Keyed, attention: str,
                 attention_kernel: str, fp8: str = "") -> ShardTimes:
    """:func:`shard_times` with its calibration resolved and keyed (the cached evaluation)."""
    calibration = keyed.record
    mb, sl, cp = (np.asarray(x) if isinstance(x, tuple) else x for x in (micro_batch, seq_local, cp))
    dtype = COMPUTE_DTYPE[precision]
    expanded = {}
    for layers in (1, 2):
        k = step_kernels(cfg.model_copy(update=dict(num_layers=layers)), mb, sl, precision, optimizer, False,
                         attention_kernel=attention_kernel)
        if fp8:
            k = {ph: [(o, n * j) for op, n in ks for o, j in fp8_linear(op, cfg.vocab_size)] for ph, ks in k.items()}
        expanded[layers] = {ph: [(o, n * m, op.name == "attention") for op, n in ks for o, m in _with_impl(op, attention, dtype)]
                            for ph, ks in k.items()}
    casts = fp8_cast_kernels(cfg, mb * sl, fp8) if fp8 else {"forward": [], "backward": []}
    every = [op for by_phase in expanded.values() for ks in by_phase.values() for op, _, _ in ks]
    every += casts["forward"] + casts["backward"]
    prices = dict(zip(map(id, every), price_kernels(every, gpu, calibrated=calibrated, calibration=calibration)))
    split = {ph: FP8_SPLIT_ACCUMULATION for ph in FP8_SPLIT_PHASES.get(fp8, ())}
    phases = {layers: {ph: _phase_times(ks, prices, split.get(ph, 1.0)) for ph, ks in by_phase.items()}
              for layers, by_phase in expanded.items()}
    timed = [(np.sum(n * prices[id(op)].seconds), prices[id(op)]) for ph in ("forward", "backward")
             for op, n, _ in expanded[1][ph]]
    known = [(t, p.expected_error) for t, p in timed if p.expected_error is not None]
    error = float(sum(t * e for t, e in known) / sum(t for t, _ in known)) if known else None
    fused = framework == "megatron"

    def layer_and_head(phase):
        one, two = phases[1][phase], phases[2][phase]
        comp_l, mem_l, attn_l, flops_l, bytes_l = (two[i] - one[i] for i in range(5))
        comp_h, mem_h, flops_h = one[0] - comp_l, one[1] - mem_l, one[3] - flops_l
        if fused:
            c = 2 if precision != "fp32" else 4
            fused_bytes = _fused_bytes(cfg, mb * sl, c, phase)
            mem_l = mem_l * np.where(bytes_l > 0, np.minimum(1.0, fused_bytes / np.where(bytes_l > 0, bytes_l, 1.0)), 1.0)
        return comp_l + mem_l + attn_l * cp, comp_h + mem_h + (one[2] - attn_l), attn_l * cp, flops_l, flops_h

    lf, hf, attn, flf, fhf = layer_and_head("forward")
    lb, hb, _, flb, fhb = layer_and_head("backward")
    lf, lb = (t + sum(prices[id(op)].seconds for op in casts[ph]) for t, ph in ((lf, "forward"), (lb, "backward")))
    opt_one = sum(phases[1]["optimizer"][:2])
    n_params = cfg.num_parameters()
    per_param = opt_one / n_params
    if fused:  # fused Adam: one pass reading p, g, m, v and writing p, m, v instead of the foreach passes

        traversals = sum(r + w for r, w in OPTIMIZER_PASSES[optimizer])
        per_param *= min(1.0, 7 / traversals) if optimizer in ("adamw", "adam") else 1.0
    used = any(ph[-1] for layers in phases.values() for ph in layers.values())
    out = dict(layer_forward=lf, layer_backward=lb, attention_forward=attn, head_forward=hf, head_backward=hb,
               optimizer_per_param=per_param, layer_flops=flf + flb, head_flops=fhf + fhb)
    scalar = not any(np.ndim(x) for x in (mb, sl, cp))
    return ShardTimes(**{k: float(v) if scalar else np.broadcast_to(v, np.broadcast_shapes(*map(np.shape, (mb, sl, cp))))
                         for k, v in out.items()}, calibrated=used, source=timed[0][1].source, expected_error=error)
