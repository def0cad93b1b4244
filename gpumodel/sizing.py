"""Sizing: does it fit, the largest batch or sequence that fits, the fewest GPUs, which GPUs.

All answers compare :attr:`TrainingMemory.total_bytes` (allocated peak x allocator reserve +
CUDA context) or the inference equivalent with the GPU's ``usable_memory_bytes`` (the driver's figure where known). Memory grows
monotonically with batch size and sequence length, so the searches are bisections over the
vectorized memory functions.

Examples
--------
>>> import gpumodel as gm
>>> bool(gm.fits("llama-3.2-1b", "h100", batch_size=4, seq_len=1024))
True
>>> gm.max_batch_size("llama-3.2-1b", "h100", seq_len=1024)
16
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .gpus import gpu as _gpu
from .hardware import GPUSpec
from .inference import inference_memory
from .memory import MemoryArgumentError, TrainingMemory, training_memory
from .transformer import TransformerConfig, model as _model

__all__ = ["fits", "max_batch_size", "max_seq_len", "min_gpus", "rank_gpus", "Plan", "required_bytes"]


def _resolve(model, gpu) -> tuple[TransformerConfig, GPUSpec]:
    return (_model(model) if isinstance(model, str) else model), (_gpu(gpu) if isinstance(gpu, str) else gpu)


_TRAINING_COMPUTE = {"amp_bf16": "bf16", "bf16": "bf16", "amp_fp16": "fp16", "fp16": "fp16", "fp32": "fp32"}


def _compute_dtype(kwargs: dict) -> str | None:
    """The number format the run's matmuls use, or None where any GPU runs it (weight-only int formats)."""
    if kwargs.get("training", True):
        return _TRAINING_COMPUTE.get(str(kwargs.get("precision", "amp_bf16")))
    dt = str(kwargs.get("dtype", "bf16"))
    return dt if dt in ("bf16", "fp16", "fp32", "fp8") else None


def required_bytes(model, batch_size, seq_len, training: bool = True, **kwargs):
    """Bytes one GPU needs in all (allocator reserve and CUDA context included) [B]."""
    if training:
        return training_memory(model, batch_size, seq_len, **kwargs).total_bytes
    return inference_memory(model, batch_size, seq_len, **kwargs).total_bytes


def fits(model, gpu, batch_size, seq_len, training: bool = True, **kwargs):
    """Whether the run fits in one GPU's memory (broadcasts over batch_size and seq_len).

    ``kwargs`` go to :func:`~gpumodel.training_memory` (or :func:`~gpumodel.inference_memory`
    when ``training=False``), except ``capacity_bytes``, which replaces the GPU's ``usable_memory_bytes``
    (e.g. with what ``torch.cuda.mem_get_info`` reports, or less to keep a margin); the other
    sizing functions pass it on too.
    """
    cfg, g = _resolve(model, gpu)
    capacity = kwargs.pop("capacity_bytes", None) or g.usable_memory_bytes
    need = required_bytes(cfg, batch_size, seq_len, training, **kwargs)
    out = np.asarray(need) <= capacity
    return out if out.ndim else np.bool_(out)


def _largest(ok, hi: int) -> int:
    """Largest x in [1, hi] with ok(x) true, assuming monotonicity; 0 if none."""
    if not ok(1):
        return 0
    lo = 1
    step = 1
    while lo + step <= hi and ok(lo + step):
        lo += step
        step *= 2
    hi = min(hi, lo + step)
    while hi - lo > 1:  # ok(lo) true, ok(hi) false or beyond range
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return hi if ok(hi) else lo


def max_batch_size(model, gpu, seq_len, training: bool = True, limit: int = 1 << 20, **kwargs) -> int:
    """Largest per-GPU batch size that fits (0 if even one sequence does not)."""
    cfg, g = _resolve(model, gpu)
    return _largest(lambda b: bool(fits(cfg, g, b, seq_len, training, **kwargs)), limit)


def max_seq_len(model, gpu, batch_size, training: bool = True, multiple_of: int = 1, limit: int | None = None,
                **kwargs) -> int:
    """Largest sequence length (a multiple of ``multiple_of``) that fits (0 if none).

    Models with learned position embeddings (gpt2) stop at ``max_position_embeddings``.
    """
    cfg, g = _resolve(model, gpu)
    if limit is None:
        limit = cfg.max_position_embeddings if cfg.position.value == "learned" else 1 << 24
    n = _largest(lambda k: bool(fits(cfg, g, batch_size, k * multiple_of, training, **kwargs)), limit // multiple_of)
    return n * multiple_of


@dataclass(frozen=True)
class Plan:
    """A parallelism plan and what one GPU needs under it."""

    num_gpus: int
    dp: int
    tp: int
    pp: int
    zero_stage: int
    per_gpu_bytes: float
    gpu: str
    memory: TrainingMemory | None = None

    def __repr__(self) -> str:
        return (f"Plan({self.num_gpus} x {self.gpu}: dp={self.dp} tp={self.tp} pp={self.pp} zero={self.zero_stage}, "
                f"{self.per_gpu_bytes / 2**30:.1f} GiB per GPU)")


def _plans(n: int, max_tp: int) -> Iterable[tuple[int, int, int, int]]:
    """(dp, tp, pp, zero_stage) splits of n GPUs: ZeRO/FSDP data parallel, tensor parallel within a node,
    pipeline across nodes."""
    tp = 1
    while tp <= min(n, max_tp):
        rest = n // tp
        pp = 1
        while pp <= rest:
            if n % (tp * pp) == 0:
                dp = n // (tp * pp)
                for zero in ((0, 1, 2, 3) if dp > 1 else (0,)):
                    yield dp, tp, pp, zero
            pp *= 2
        tp *= 2


def min_gpus(model, gpu, batch_size, seq_len, max_gpus: int = 4096, max_tp: int = 8, **kwargs) -> Plan | None:
    """Fewest GPUs (powers of two) and the plan that fits ``batch_size`` sequences per data-parallel rank.

    Tries ZeRO-0..3 data parallelism, tensor parallelism up to ``max_tp`` (one node) with sequence
    parallelism, and pipeline stages; among plans for the fewest GPUs the one needing least memory
    per GPU wins. Returns None when nothing up to ``max_gpus`` fits.
    """
    cfg, g = _resolve(model, gpu)
    capacity = kwargs.pop("capacity_bytes", None) or g.usable_memory_bytes
    n = 1
    while n <= max_gpus:
        best = None
        for dp, tp, pp, zero in _plans(n, max_tp):
            if cfg.num_heads % tp or (cfg.kv_heads % tp and tp > 1):
                continue
            m = training_memory(cfg, batch_size, seq_len, dp=dp, tp=tp, pp=pp, zero_stage=zero,
                                sequence_parallel=tp > 1, gradient_accumulation_steps=max(pp, 1), **kwargs)
            if m.total_bytes <= capacity and (best is None or m.total_bytes < best.per_gpu_bytes):
                best = Plan(n, dp, tp, pp, zero, float(m.total_bytes), g.name, m)
        if best is not None:
            return best
        n *= 2
    return None


def rank_gpus(model, batch_size, seq_len, gpus=None, **kwargs) -> list[Plan]:
    """For each GPU, the smallest plan that fits; sorted by GPU count, then by memory left unused.

    GPUs without a tensor path for the run's compute format are left out (``amp_bf16`` on a V100 or
    T4, which have no bf16): memory alone would place them, but the run would not execute as asked.
    """
    from .gpus import all_gpus

    if batch_size is None or seq_len is None:
        raise MemoryArgumentError("batch_size and seq_len are required")
    records = [(_gpu(x) if isinstance(x, str) else x) for x in gpus] if gpus is not None else all_gpus()
    compute = _compute_dtype(kwargs)
    records = [g for g in records if compute is None or g.supports(compute)]
    plans = [p for p in (min_gpus(model, g, batch_size, seq_len, **kwargs) for g in records) if p is not None]
    mem = {g.name: g.usable_memory_bytes for g in records}
    return sorted(plans, key=lambda p: (p.num_gpus, mem[p.gpu] - p.per_gpu_bytes))
