"""Sizing: the largest batch or sequence that fits, the fewest GPUs, which GPUs.

Every answer asks :func:`~gpumodel.core.margin.fits` (re-exported here with
:func:`~gpumodel.core.margin.memory_margin`):
:attr:`TrainingMemory.total_bytes` (allocated peak x allocator reserve + CUDA context) or the inference equivalent
against the GPU's ``usable_memory_bytes`` (the driver's figure where known), and near that capacity the caching
allocator's replay. Memory grows monotonically with batch size and sequence length, so the searches are bisections
over the vectorized memory functions.

Examples
--------
>>> import gpumodel as gm
>>> bool(gm.fits("llama-3.2-1b", "h100", batch_size=4, seq_len=1024))
True
>>> gm.max_batch_size("llama-3.2-1b", "h100", seq_len=1024)
16
>>> gm.max_batch_size("llama-3.2-1b", "h100", seq_len=1024, expandable_segments=True)   # no allocator reserve
18
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, fields

import numpy as np

from ..base.errors import ArgumentError
from .inference import inference_memory
from .margin import (capacity_of, memory_options, fits, memory_margin, MemoryMargin,  # noqa: F401 (re-exported)
                     required_bytes)
from .memory import TrainingMemory, training_memory
from ..vocabulary.parallel_rules import splits_model
from ..vocabulary import flag, positive_int, precision as _precision, \
    resolve_gpu, resolve_gpus, resolve_model, weight_dtype
from ..vocabulary.gpus import all_gpus

__all__ = ["fits", "memory_margin", "MemoryMargin", "max_batch_size", "max_seq_len", "min_gpus", "rank_gpus", "Plan",
           "required_bytes"]


def _compute_dtype(training: bool, kwargs: dict) -> str | None:
    """The number format the run's matmuls use, or None where any GPU runs it (weight-only int formats)."""
    if training:
        return _precision(kwargs.get("precision", "amp_bf16")).compute_dtype.value
    dt = weight_dtype(kwargs.get("dtype", "bf16")).value
    return dt if dt in ("bf16", "fp16", "fp32", "fp8") else None


def _largest(ok, limit: int, shape: tuple = ()) -> np.ndarray:
    """Largest x in [0, limit] with ``ok(x)`` true, element by element, for ``ok`` monotone (true then false).

    A vectorised bisection: ``ok`` takes an integer array of ``shape`` and answers one boolean per element.
    """
    lo = np.zeros(shape, dtype=np.int64)           # ok(0) taken as true
    hi = np.full(shape, int(limit) + 1, dtype=np.int64)  # beyond the range: taken as false
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        good = np.asarray(ok(np.maximum(mid, 1)), dtype=bool) | (hi - lo <= 1)
        lo, hi = np.where(good, mid, lo), np.where(good, hi, mid)
    return lo


def _scalar_int(x):
    return int(x) if np.ndim(x) == 0 else x


def max_batch_size(model, gpu, seq_len, *, training: bool = True, limit: int = 1 << 20, **kwargs):
    """Largest per-GPU batch size that fits (0 if even one sequence does not); broadcasts over ``seq_len``.

    Parameters
    ----------
    model : TransformerConfig, str or dict
        A config, a preset name (``gm.model``) or a Hugging Face config dict.
    gpu : GPUSpec or str
        A GPU record or name (``gm.gpu``).
    seq_len : int or array_like
        Sequence length [tokens]; an array gives one answer per length.
    training : bool
        Size a training run (:func:`~gpumodel.training_memory`) or, when False, serving
        (:func:`~gpumodel.inference_memory`).
    limit : int
        Largest batch size searched [sequences].
    **kwargs
        ``capacity_bytes`` (as :func:`fits` takes it) and the options of the memory function.

    Returns
    -------
    int or ndarray of int
        The largest batch size that fits [sequences], 0 .. ``limit``.
    """
    cfg, g = resolve_model(model), resolve_gpu(gpu)
    seq_len = positive_int(seq_len, "seq_len")
    limit = positive_int(limit, "limit")
    kwargs = {**memory_options(training, {k: v for k, v in kwargs.items() if k != "capacity_bytes"},
                               "max_batch_size"),
              **{k: v for k, v in kwargs.items() if k == "capacity_bytes"}}
    return _scalar_int(_largest(lambda b: fits(cfg, g, b, seq_len, training=training, **kwargs), limit, np.shape(seq_len)))


def max_seq_len(model, gpu, batch_size, *, training: bool = True, multiple_of: int = 1, limit: int | None = None,
                **kwargs):
    """Largest sequence length (a multiple of ``multiple_of``) that fits (0 if none); broadcasts over ``batch_size``.

    Models with learned position embeddings (gpt2) stop at ``max_position_embeddings``.

    Parameters
    ----------
    model : TransformerConfig, str or dict
        A config, a preset name (``gm.model``) or a Hugging Face config dict.
    gpu : GPUSpec or str
        A GPU record or name (``gm.gpu``).
    batch_size : int or array_like
        Sequences per GPU [sequences]; an array gives one answer per batch size.
    training : bool
        Size a training run (:func:`~gpumodel.training_memory`) or, when False, serving
        (:func:`~gpumodel.inference_memory`).
    multiple_of : int
        The answer is a multiple of this [tokens] (e.g. 128 or 1024).
    limit : int, optional
        Longest sequence searched [tokens] (default: ``max_position_embeddings`` for learned position
        embeddings, else 2**24).
    **kwargs
        ``capacity_bytes`` (as :func:`fits` takes it) and the options of the memory function.

    Returns
    -------
    int or ndarray of int
        The longest sequence that fits [tokens], 0 when none does.
    """
    cfg, g = resolve_model(model), resolve_gpu(gpu)
    batch_size = positive_int(batch_size, "batch_size")
    multiple_of = positive_int(multiple_of, "multiple_of")
    if np.ndim(multiple_of):
        raise ArgumentError("multiple_of must be one positive integer, got an array")
    kwargs = {**memory_options(training, {k: v for k, v in kwargs.items() if k != "capacity_bytes"},
                               "max_seq_len"),
              **{k: v for k, v in kwargs.items() if k == "capacity_bytes"}}
    if limit is None:
        limit = cfg.max_position_embeddings if cfg.position.value == "learned" else 1 << 24
    limit = positive_int(limit, "limit")
    n = _largest(lambda k: fits(cfg, g, batch_size, k * multiple_of, training=training, **kwargs), limit // multiple_of,
                 np.shape(batch_size))
    return _scalar_int(n * multiple_of)


@dataclass(frozen=True)
class Plan:
    """A parallelism plan and what one GPU needs under it."""

    num_gpus: int
    dp: int
    tp: int
    pp: int
    zero: int
    per_gpu_bytes: float
    gpu: str
    memory: TrainingMemory | None = None

    @property
    def zero_stage(self) -> int:
        """Deprecated name of :attr:`zero`, the ZeRO stage."""
        warnings.warn("Plan.zero_stage is deprecated; use zero", DeprecationWarning, stacklevel=2)
        return self.zero

    def to_dict(self) -> dict:
        """The plan's numbers (SI units), without the memory record."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "memory"}

    def __repr__(self) -> str:
        return (f"Plan({self.num_gpus} x {self.gpu}: dp={self.dp} tp={self.tp} pp={self.pp} zero={self.zero}, "
                f"{self.per_gpu_bytes / 2**30:.1f} GiB per GPU)")


def _candidates(cfg, n: int, max_tp: int, training: bool) -> np.ndarray:
    """Valid (dp, tp, pp, zero) splits of n GPUs, one per row: tensor parallel within a node (a power of
    two that splits the model: :func:`~gpumodel.vocabulary.parallel_rules.splits_model`), pipeline stages (at most one per layer), and
    ZeRO/FSDP data parallelism over the rest. Serving uses tensor parallelism only."""
    rows = []
    tp = 1
    while tp <= min(n, max_tp):
        if splits_model(cfg, tp):
            if not training:
                if tp == n:
                    rows.append((1, tp, 1, 0))
            else:
                pp = 1
                while tp * pp <= n and pp <= cfg.num_layers:
                    if n % (tp * pp) == 0:
                        dp = n // (tp * pp)
                        rows += [(dp, tp, pp, z) for z in ((0, 1, 2, 3) if dp > 1 else (0,))]
                    pp *= 2
        tp *= 2
    return np.array(rows, dtype=np.int64).reshape(-1, 4)


def min_gpus(model, gpu, batch_size, seq_len, max_gpus: int = 4096, max_tp: int = 8, *, training: bool = True,
             capacity_bytes=None, **kwargs) -> Plan | None:
    """Fewest GPUs (powers of two) and the plan that fits ``batch_size`` sequences per data-parallel rank.

    Training tries ZeRO-0..3 data parallelism, tensor parallelism up to ``max_tp`` (one node) with
    sequence parallelism, and pipeline stages; serving (``training=False``) tensor parallelism. Among
    plans for the fewest GPUs the one needing least memory per GPU wins. All candidates of one GPU
    count are evaluated in one vectorised memory call. Returns None when nothing up to ``max_gpus`` fits.

    Parameters
    ----------
    model : TransformerConfig, str or dict
        A config, a preset name (``gm.model``) or a Hugging Face config dict.
    gpu : GPUSpec or str
        A GPU record or name (``gm.gpu``).
    batch_size, seq_len : int
        Sequences per data-parallel rank [sequences] and sequence length [tokens].
    max_gpus : int
        Most GPUs tried [count].
    max_tp : int
        Largest tensor-parallel degree (the GPUs of one node) [count].
    training : bool
        Size a training run (:func:`~gpumodel.training_memory`) or, when False, serving
        (:func:`~gpumodel.inference_memory`).
    capacity_bytes : float, optional
        Memory one GPU offers [bytes], in place of the GPU's ``usable_memory_bytes`` (e.g. what
        ``torch.cuda.mem_get_info`` reports, or less to keep a margin).
    **kwargs
        Options of the memory function other than the layout it chooses (``dp``, ``tp``, ``pp``, ``zero``...).

    Returns
    -------
    Plan or None
        The GPU count, the ``dp``/``tp``/``pp``/``zero`` layout, the bytes one GPU needs
        (``per_gpu_bytes`` [bytes]) and, for training, its :class:`TrainingMemory`; None when nothing fits.
    """
    cfg, g = resolve_model(model), resolve_gpu(gpu)
    training = flag(training, "training")
    capacity = capacity_of(g, capacity_bytes)
    batch_size, seq_len = positive_int(batch_size, "batch_size"), positive_int(seq_len, "seq_len")
    max_gpus, max_tp = positive_int(max_gpus, "max_gpus"), positive_int(max_tp, "max_tp")
    if np.ndim(batch_size) or np.ndim(seq_len):
        raise ArgumentError("min_gpus takes one batch_size and one seq_len; loop over a sweep")
    if np.ndim(max_gpus) or np.ndim(max_tp):
        raise ArgumentError("min_gpus takes one max_gpus and one max_tp, not arrays")
    sets = ("dp", "tp", "pp", "zero", "zero_stage", "sequence_parallel", "gradient_accumulation_steps") if training \
        else ("tp",)
    kwargs = memory_options(training, kwargs, "min_gpus", taken=sets)
    n = 1
    while n <= max_gpus:
        cand = _candidates(cfg, n, max_tp, training)
        if len(cand):
            dp, tp, pp, zero = cand.T
            if training:
                mem = training_memory(cfg, batch_size, seq_len, dp=dp, tp=tp, pp=pp, zero=zero,
                                      sequence_parallel=bool(np.any(tp > 1)), gradient_accumulation_steps=pp,
                                      **kwargs)
            else:
                mem = inference_memory(cfg, batch_size, seq_len, tp=tp, **kwargs)
            total = np.asarray(mem.total_bytes, float).reshape(-1)
            ok = np.flatnonzero(total <= capacity)
            if ok.size:
                i = ok[np.argmin(total[ok])]
                memory = (training_memory(cfg, batch_size, seq_len, dp=int(dp[i]), tp=int(tp[i]), pp=int(pp[i]),
                                          zero=int(zero[i]), sequence_parallel=bool(tp[i] > 1),
                                          gradient_accumulation_steps=int(pp[i]), **kwargs) if training else None)
                return Plan(n, int(dp[i]), int(tp[i]), int(pp[i]), int(zero[i]), float(total[i]), g.name, memory)
        n *= 2
    return None


def rank_gpus(model, batch_size, seq_len, gpus=None, *, training: bool = True, **kwargs) -> list[Plan]:
    """For each GPU, the smallest plan that fits; sorted by GPU count, then by memory left unused.

    GPUs without a tensor path for the run's compute format are left out (``amp_bf16`` on a V100 or
    T4, which have no bf16): memory alone would place them, but the run would not execute as asked.

    Parameters
    ----------
    model : TransformerConfig, str or dict
        A config, a preset name (``gm.model``) or a Hugging Face config dict.
    batch_size, seq_len : int
        Sequences per data-parallel rank [sequences] and sequence length [tokens].
    gpus : iterable of (str or GPUSpec), str, GPUSpec or None
        The GPUs to rank; None: every known GPU.
    training : bool
        Size a training run (:func:`~gpumodel.training_memory`) or, when False, serving
        (:func:`~gpumodel.inference_memory`).
    **kwargs
        Passed to :func:`min_gpus` (``max_gpus``, ``max_tp``, ``capacity_bytes`` and the memory options).

    Returns
    -------
    list of Plan
        One plan per GPU that can run it, fewest GPUs first, then least memory left unused [bytes].
    """
    training = flag(training, "training")
    records = resolve_gpus(gpus, "gpus") if gpus is not None else all_gpus()
    compute = _compute_dtype(training, kwargs)
    records = [g for g in records if compute is None or g.supports(compute)]
    plans = [p for p in (min_gpus(model, g, batch_size, seq_len, training=training, **kwargs) for g in records)
             if p is not None]
    mem = {g.name: g.usable_memory_bytes for g in records}
    return sorted(plans, key=lambda p: (p.num_gpus, mem[p.gpu] - p.per_gpu_bytes))
