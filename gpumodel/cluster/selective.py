"""The time of Megatron-Core's selective recomputation in a parallel step: the recomputed submodules' kernels
on one GPU's shard, and the communication they repeat.

Megatron-Core (``--recompute-granularity selective --recompute-modules ...``) re-runs the named submodules in the
backward (:mod:`gpumodel.training.recompute`). Their kernels are priced like the shard's
(:func:`gpumodel.cluster.kernelprice.price_kernels`); ``core_attn`` takes the shard's own attention forward. A
recomputed MLP re-runs its tensor-parallel all-gather and reduce-scatter, a recomputed mixture-of-experts layer its
dispatch and combine all-to-alls (:func:`gpumodel.cluster.composition.compose` adds them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import ops
from ..records.transformer import TransformerConfig
from ..training.recompute import recompute_kernels
from ..vocabulary import RecomputeModule
from .kernelprice import price_kernels

__all__ = ["SelectiveRecompute", "selective_recompute"]


@dataclass(frozen=True)
class SelectiveRecompute:
    """What selective recomputation adds to one average decoder layer of one micro-batch on one GPU.

    ``forward_s`` the recomputed kernels' time [s]; ``flops`` their FLOPs [FLOP]; ``attention`` whether the
    attention core is among them; ``tp_sublayers`` the tensor-parallel collective pairs (all-gather and
    reduce-scatter, or an all-reduce) re-run per layer (a recomputed dense MLP's); ``moe_layers`` the share of the
    layers whose dispatch and combine all-to-alls are re-run (a recomputed mixture-of-experts layer's) [1].
    """

    forward_s: Any
    flops: Any
    attention: bool
    tp_sublayers: float = 0.0
    moe_layers: float = 0.0


def selective_recompute(cfg: TransformerConfig, modules, st, gpu, *, micro_batch: int, seq_local: int, cp: int,
                        tp: int, sequence_parallel: bool, dtype: str, fp8: bool, calibrated: bool = True,
                        calibration: Any = None) -> SelectiveRecompute:
    """Price the recomputation of ``modules`` in an average layer of the shard.

    Parameters
    ----------
    cfg : TransformerConfig
        The whole model.
    modules : iterable of RecomputeModule
        The recomputed submodules (:func:`gpumodel.vocabulary.recompute_modules`).
    st : ShardTimes
        The shard's kernel times (:func:`gpumodel.cluster.shard.shard_times`): ``core_attn`` costs its
        ``attention_forward``.
    gpu : GPUSpec
    micro_batch, seq_local, cp, tp, sequence_parallel :
        The micro-batch [sequences], the GPU's part of the sequence [tokens], and the context- and
        tensor-parallel layout.
    dtype : str
        The compute dtype.
    fp8 : bool
        Transformer Engine's fp8 GEMMs.
    calibrated, calibration :
        As in :func:`gpumodel.cluster.kernelprice.price_kernels`.

    Returns
    -------
    SelectiveRecompute

    Examples
    --------
    >>> import gpumodel as gm
    >>> from gpumodel.cluster.shard import shard_config, shard_times
    >>> cfg = gm.model("llama-3-8b")
    >>> st = shard_times(shard_config(cfg), "h100-sxm", 1, 4096, 1, "amp_bf16", "adamw", "megatron")
    >>> r = selective_recompute(cfg, ["core_attn"], st, gm.gpu("h100"), micro_batch=1, seq_local=4096, cp=1, tp=1,
    ...                         sequence_parallel=False, dtype="bf16", fp8=False)
    >>> r.forward_s == st.attention_forward, r.attention
    (True, True)
    """
    names = {RecomputeModule(m) for m in modules}
    tokens = micro_batch * seq_local
    kernels = recompute_kernels(cfg, tokens, names, tp=tp, sequence_parallel=sequence_parallel, dtype=dtype, fp8=fp8)
    prices = price_kernels([op for op, _ in kernels], gpu, calibrated=calibrated, calibration=calibration)
    seconds = sum(n * p.seconds for (_, n), p in zip(kernels, prices))
    flops = sum(n * op.flops for op, n in kernels)
    attention = RecomputeModule.CORE_ATTN in names
    if attention:
        seconds = seconds + st.attention_forward
        flops = flops + ops.attention(micro_batch, -(-cfg.num_heads // tp), seq_local, cfg.head_dim, dtype, causal=True,
                                      kv_seq=seq_local * cp).flops
    dense = cfg.num_dense_layers
    moe_share = (cfg.num_layers - dense) / cfg.num_layers
    tp_sublayers = (dense / cfg.num_layers if RecomputeModule.MLP in names else 0.0) + (
        moe_share if RecomputeModule.MOE in names else 0.0)
    return SelectiveRecompute(forward_s=seconds, flops=flops, attention=attention, tp_sublayers=tp_sublayers,
                              moe_layers=moe_share if RecomputeModule.MOE in names else 0.0)
