"""What one replica (``tp`` GPUs) serves under continuous batching, and how many GPUs a load needs.

Memory first: the KV cache may use ``kv_memory_fraction`` of what the weights, the prefill workspace and,
for ``tp > 1``, the tensor-parallel group's NCCL communicator (outside PyTorch's allocator:
:func:`gpumodel.core.communicators.communicator_bytes`) leave on each GPU (:func:`gpumodel.inference_memory`);
each request reserves its full
``prompt_len + output_len`` positions (the "guaranteed no evict" policy of TensorRT-LLM, the
worst case of a paged cache), which gives ``max_concurrency``.

Then time. In steady state a replica holding ``B`` requests runs decode steps of batch ``B`` at the
mean context ``prompt_len + output_len / 2`` and, between them, prefills of new requests, at most
``max_num_tokens`` prompt tokens a step. One stream does both, so a request costs its share of a
prefill plus ``output_len - 1`` decode steps shared with ``B - 1`` others:

.. math::

    R(B) = \\frac{1}{t_p + (n_{out} - 1)\\, t_d(B) / B}, \\qquad
    \\mathrm{TPOT}(B) = \\frac{t_d(B)}{1 - R(B)\\, t_p}, \\qquad
    \\mathrm{TTFT}(B) = t_{prefill}(1, n_{in}) + t_d(B)

with :math:`t_p = t_{prefill}(k, n_{in}) / k`, :math:`k = \\lfloor` ``max_num_tokens`` :math:`/ n_{in} \\rfloor`
prompts per prefill when a prompt fits in one step. A longer prompt is prefilled in chunks (chunked
prefill): :math:`m = \\lceil n_{in} / c \\rceil` steps of :math:`c` = ``max_num_tokens`` tokens (the last one
the rest), chunk :math:`j` attending to the :math:`j c` tokens cached before it and its own, causally:

.. math:: t_p = t_{first} = \\sum_{j=0}^{m-1} t_{step}(1, \\min(c, n_{in} - j c), j c)

(its attention adds up to the whole prompt's causal attention; its matmuls run :math:`m` times
smaller). Left unset, ``max_num_tokens`` is :data:`MAX_NUM_TOKENS` or the prompt when longer: an engine
without chunked prefill, which takes a long prompt in one step. TTFT is that of a request arriving below saturation: it waits for the decode step under
way, then is prefilled alone. The operating point is the ``B`` with the most requests per second
whose TPOT and TTFT meet the targets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..base.arguments import keyword_only_after
from ..base.reprs import html_table
from ..base.errors import ArgumentError
from ..core.communicators import communicator_bytes
from ..core.inference import inference_memory
from ..vocabulary import duration, format_seconds, kv_cache_dtype, positive_int, positive_number
from .generation import EXACT_STEPS
from .timing import resolve_serving_args, step_time

__all__ = ["ServingCapacity", "serving_capacity", "chunked_prefill_time", "MAX_NUM_TOKENS", "KV_MEMORY_FRACTION"]

#: Prompt tokens one prefill step takes at most (TensorRT-LLM's and vLLM's default ``max_num_tokens`` 8192).
MAX_NUM_TOKENS = 8192
#: Fraction of the memory left after weights and workspace that the KV cache may take (vLLM
#: ``gpu_memory_utilization`` and TensorRT-LLM ``kv_cache_free_gpu_mem_fraction`` default to 0.9).
KV_MEMORY_FRACTION = 0.9


@dataclass(frozen=True)
class ServingCapacity:
    """Throughput of one replica (``tp`` GPUs) under continuous batching, within latency targets.

    Attributes
    ----------
    max_concurrency : int
        Requests whose KV cache (``prompt_len + output_len`` positions each) fits at once.
    concurrency : int
        Requests in flight at the operating point.
    output_tokens_per_s : float
        Generated tokens per second of the replica at the operating point [token/s].
    requests_per_s : float
        Requests completed per second of the replica [1/s].
    tpot_s, ttft_s : float
        Time per output token and time to first token at the operating point [s].
    limiter : str
        What stopped a larger batch: ``"memory"`` (KV cache full), ``"tpot_slo"``, ``"ttft_slo"``,
        ``"max_batch_size"``; ``"slo_unreachable"`` when even one request misses the targets.
    curve : dict of ndarray
        Over concurrencies 1..max: ``"concurrency"``, ``"tpot_s"``, ``"ttft_s"``,
        ``"output_tokens_per_s"``, ``"requests_per_s"`` (the throughput-latency curve).
    tp : int
        GPUs per replica.
    max_num_tokens : int
        Prompt tokens one prefill step took [token] (the argument, or its default).
    prefill_chunks : int
        Steps one prompt's prefill took: 1, or :math:`\\lceil` ``prompt_len / max_num_tokens`` :math:`\\rceil`
        (chunked prefill).
    attention_kernel : str
        The library of the flash-attention kernels the steps were timed with
        (:class:`~gpumodel.core.ops.AttentionKernel`).
    """

    max_concurrency: int
    concurrency: int
    output_tokens_per_s: float
    requests_per_s: float
    tpot_s: float
    ttft_s: float
    limiter: str
    curve: dict = field(default_factory=dict)
    tp: int = 1
    prompt_len: int = 0
    output_len: int = 0
    ttft_slo: float | None = None
    tpot_slo: float | None = None
    kv_bytes_per_request: float = 0.0
    kv_budget_bytes: float = 0.0
    model: str = ""
    gpu: str = ""
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    engine: str = "graph"
    max_num_tokens: int = MAX_NUM_TOKENS
    prefill_chunks: int = 1
    attention_kernel: str = "sdpa"

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        """Generated tokens per second per GPU [token/s]."""
        return self.output_tokens_per_s / self.tp

    def replicas_for(self, requests_per_s: float) -> int:
        """Replicas needed to serve ``requests_per_s`` requests per second."""
        rate = positive_number(requests_per_s, "requests_per_s")
        if np.ndim(rate):
            raise ArgumentError("requests_per_s must be a single number")
        if self.requests_per_s <= 0:
            raise ArgumentError(f"no replica of {self.model} on {self.gpu} meets the targets "
                                f"(limiter {self.limiter}); no number of GPUs serves {rate} requests/s")
        return int(math.ceil(rate / self.requests_per_s - 1e-9))

    def gpus_for(self, requests_per_s: float) -> int:
        """GPUs needed to serve ``requests_per_s`` requests per second: replicas x ``tp``."""
        return self.replicas_for(requests_per_s) * self.tp

    def to_dict(self) -> dict:
        """Plain fields (SI units); ``curve`` as lists."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["curve"] = {k: np.asarray(v).tolist() for k, v in self.curve.items()}
        out["output_tokens_per_s_per_gpu"] = self.output_tokens_per_s_per_gpu
        return out

    def _rows(self) -> list[tuple[str, str]]:
        slo = ", ".join(f"{k} <= {format_seconds(v)}" for k, v in (("TTFT", self.ttft_slo), ("TPOT", self.tpot_slo))
                        if v is not None) or "none (maximum throughput)"
        return [("replica", f"{self.tp} x {self.gpu}, {self.dtype} weights, {self.kv_dtype} KV cache, {self.engine}, "
                            f"{self.attention_kernel} attention"),
                ("requests", f"{self.prompt_len} prompt + {self.output_len} output tokens"
                             + (f" (prefill in {self.prefill_chunks} chunks of {self.max_num_tokens:,} tokens)"
                                if self.prefill_chunks > 1 else "")),
                ("targets", slo),
                ("max concurrency (KV memory)", f"{self.max_concurrency:,}"),
                ("concurrency", f"{self.concurrency:,} (limited by {self.limiter})"),
                ("output tokens/s", f"{self.output_tokens_per_s:,.0f} ({self.output_tokens_per_s_per_gpu:,.0f} per GPU)"),
                ("requests/s", f"{self.requests_per_s:,.2f}"),
                ("TTFT", format_seconds(self.ttft_s)), ("TPOT", format_seconds(self.tpot_s))]

    def __repr__(self) -> str:
        return (f"ServingCapacity({self.model} on {self.tp} x {self.gpu}: {self.output_tokens_per_s:,.0f} output tokens/s, "
                f"{self.requests_per_s:,.2f} requests/s at concurrency {self.concurrency} "
                f"(max {self.max_concurrency}, limited by {self.limiter}); TTFT {format_seconds(self.ttft_s)}, "
                f"TPOT {format_seconds(self.tpot_s)})")

    def _repr_html_(self) -> str:
        return html_table(f"ServingCapacity: {self.model}", self._rows())


def _concurrencies(limit: int) -> np.ndarray:
    grid = np.unique(np.round(np.geomspace(1, max(limit, 1), 48)).astype(int))
    return np.unique(np.concatenate([grid, [limit]])) if limit >= 1 else np.array([], dtype=int)


def kv_budget(setup, prompt_len: int, output_len: int, chunk: int, fraction: float) -> tuple[float, float]:
    """(KV bytes one request reserves on each GPU, KV bytes each GPU can give the cache).

    The free memory is the card's usable memory less the weights' shard, one prefill step's workspace and the NCCL
    communicator of the tensor-parallel group (engines profile it as memory outside PyTorch's, before sizing the
    cache: 544 MiB for two GPUs, 688 MiB for more; none for one).
    """
    kvname = setup.kv_dtype.value if setup.kv_dtype is not None else None
    kw = dict(dtype=setup.dtype.value, kv_dtype=kvname, tp=setup.tp, group_size=setup.group_size)
    one = inference_memory(setup.cfg, 1, prompt_len, new_tokens=output_len, **kw)
    work = inference_memory(setup.cfg, 1, chunk, new_tokens=0, **kw)
    workspace = float(work.peak_bytes) - float(work.weights_bytes) - float(work.breakdown["kv_cache"])
    nccl = float(communicator_bytes("hf", tp=setup.tp))     # the tensor-parallel group is the whole replica
    free = setup.gpu.usable_memory_bytes - float(one.weights_bytes) - workspace - nccl
    return float(one.kv_cache_bytes), max(free, 0.0) * fraction


def chunked_prefill_time(setup, prompt_len: int, chunk: int) -> float:
    """Time to prefill one prompt of ``prompt_len`` tokens in steps of at most ``chunk`` tokens [s].

    Chunk :math:`j` is a prefill step over its own tokens on top of the :math:`j c` cached before it
    (:func:`~gpumodel.serving.timing.step_time` with ``cached = j c``). Up to ``EXACT_STEPS`` full chunks
    are summed one by one; beyond, over evenly spaced cache lengths, scaled (the step time is close to
    linear in the cache), as :func:`~gpumodel.serving.generation.decode_total` sums decode steps.
    """
    full, rest = divmod(prompt_len, chunk)
    total = 0.0
    if full:
        if full <= EXACT_STEPS:
            j, weights = np.arange(full), np.ones(full)
        else:
            j = np.unique(np.linspace(0, full - 1, 17).round().astype(int))
            weights = np.full(j.size, full / j.size)
        total += float(np.sum(np.asarray(step_time(setup, 1, chunk, j * chunk, "prefill").seconds) * weights))
    if rest:
        total += float(step_time(setup, 1, rest, full * chunk, "prefill").seconds)
    return total


def _single(value: Any, name: str, allowed: str) -> Any:
    """``value`` if it is one number; an array is refused, naming ``name`` alone."""
    if np.ndim(value):
        raise ArgumentError(f"{name} must be a single number here ({allowed}), got an array; loop over a sweep",
                            argument=name, value=value, allowed=allowed)
    return value


@keyword_only_after(2, "prompt_len", "output_len", "dtype", "kv_dtype", "tp", "ttft_slo", "tpot_slo", "engine")
def serving_capacity(model: Any, gpu: Any, *, prompt_len: int = 512, output_len: int = 128, dtype: str = "bf16",
                     kv_dtype: Any = None, tp: int = 1, ttft_slo: Any = None, tpot_slo: Any = None,
                     engine: str = "graph", max_batch_size: int | None = None,
                     max_num_tokens: int | None = None, kv_memory_fraction: float = KV_MEMORY_FRACTION,
                     group_size: int = 128, calibrated: bool = True, calibration: Any = None,
                     host: Any = None, attention_kernel: str = "sdpa") -> ServingCapacity:
    """Throughput of one replica of ``tp`` GPUs serving requests of ``prompt_len`` + ``output_len`` tokens.

    Parameters
    ----------
    model, gpu, dtype, kv_dtype, tp, engine, group_size :
        As for :func:`gpumodel.serving.decode_step_time`.
    prompt_len, output_len : int
        Tokens in and out per request [token].
    ttft_slo, tpot_slo : float or str, optional
        Targets for time to first token and time per output token [s] (or ``"50ms"``); None: no
        target (the maximum throughput).
    max_batch_size : int, optional
        The engine's largest decode batch (default: no limit beyond memory).
    max_num_tokens : int, optional
        Prompt tokens one prefill step takes at most [token]. A longer prompt is prefilled in
        :math:`\\lceil` ``prompt_len / max_num_tokens`` :math:`\\rceil` chunks (chunked prefill; module notes).
        Default: :data:`MAX_NUM_TOKENS` (8192), or ``prompt_len`` when longer (no chunking).
    kv_memory_fraction : float
        Share of the free memory the KV cache may use, in (0, 1].
    calibrated, calibration, host :
        As for :func:`gpumodel.serving.prefill_time`: your own calibration of the GPU (record or YAML path, read
        once; another GPU's refused with an ``ArgumentError`` naming ``calibration``) prices every prefill and
        decode step of the search; ``host`` (host costs) is taken by ``engine="hf"`` only.
    attention_kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"}
        The library whose flash kernels run the prefills' (chunked or whole) and the decode steps' attention, as in
        :func:`gpumodel.serving.prefill_time`.

    Returns
    -------
    ServingCapacity

    Examples
    --------
    >>> import gpumodel as gm
    >>> cap = gm.serving_capacity("llama-3-8b", "h100", prompt_len=1024, output_len=256, tpot_slo=0.05)
    >>> cap.tpot_s <= 0.05, cap.max_concurrency > cap.concurrency > 1
    (True, True)
    >>> cap.gpus_for(10 * cap.requests_per_s)
    10

    A prompt longer than ``max_num_tokens`` is prefilled in chunks:

    >>> gm.serving_capacity("llama-3-8b", "h100", prompt_len=2048, max_num_tokens=512).prefill_chunks
    4
    """
    setup = resolve_serving_args(model, gpu, dtype, kv_dtype, tp, engine, group_size, calibrated=calibrated,
                                 calibration=calibration, host=host, attention_kernel=attention_kernel)
    cfg, g, dt, kv, tp, eng = setup.cfg, setup.gpu, setup.dtype, setup.kv_dtype, setup.tp, setup.engine
    s = _single(positive_int(prompt_len, "prompt_len"), "prompt_len", "a positive integer")
    n = _single(positive_int(output_len, "output_len"), "output_len", "a positive integer")
    if max_num_tokens is None:
        chunk = max(MAX_NUM_TOKENS, s)
    else:
        chunk = _single(positive_int(max_num_tokens, "max_num_tokens"), "max_num_tokens", "a positive integer")
    frac = _single(positive_number(kv_memory_fraction, "kv_memory_fraction"), "kv_memory_fraction",
                   "a number in (0, 1]")
    if frac > 1:
        raise ArgumentError(f"kv_memory_fraction must be a number in (0, 1] (the share of the free memory the KV "
                            f"cache may use), got {kv_memory_fraction!r}", argument="kv_memory_fraction",
                            value=kv_memory_fraction, allowed="a number in (0, 1]")
    slo_t = None if ttft_slo is None else duration(ttft_slo, "ttft_slo")
    slo_p = None if tpot_slo is None else duration(tpot_slo, "tpot_slo")
    per_req, budget = kv_budget(setup, s, n, chunk, frac)   # the workspace of one prefill step: chunk tokens
    limit = int(budget // per_req) if per_req > 0 else 0
    cap_batch = None if max_batch_size is None else positive_int(max_batch_size, "max_batch_size")
    max_conc = limit
    if cap_batch is not None:
        limit = min(limit, cap_batch)
    common = dict(tp=tp, prompt_len=s, output_len=n, ttft_slo=slo_t, tpot_slo=slo_p, kv_bytes_per_request=per_req,
                  kv_budget_bytes=budget, model=cfg.name, gpu=g.name, dtype=dt.value,
                  kv_dtype=kv_cache_dtype(kv, dt).value,
                  engine=eng.value, max_num_tokens=chunk, prefill_chunks=-(-s // chunk),
                  attention_kernel=setup.attention_kernel)
    if limit < 1:
        return ServingCapacity(max_conc, 0, 0.0, 0.0, float("nan"), float("nan"), "memory", {}, **common)
    B = _concurrencies(limit)
    if chunk >= s:                          # k whole prompts a prefill step
        k = chunk // s
        t_p = float(step_time(setup, k, s, 0, "prefill").seconds) / k
        t_first = float(step_time(setup, 1, s, 0, "prefill").seconds)
    else:                                   # chunked prefill: one prompt in ceil(s / chunk) steps
        t_p = t_first = chunked_prefill_time(setup, s, chunk)
    t_d = np.asarray(step_time(setup, B, 1, s + n // 2, "decode").seconds, dtype=float)
    rate = 1.0 / (t_p + max(n - 1, 0) * t_d / B)
    tpot = t_d / np.maximum(1.0 - rate * t_p, 1e-9)
    ttft = t_first + t_d
    curve = {"concurrency": B, "tpot_s": tpot, "ttft_s": ttft, "output_tokens_per_s": rate * n, "requests_per_s": rate}
    ok = np.ones(B.shape, dtype=bool)
    if slo_p is not None:
        ok &= tpot <= slo_p
    if slo_t is not None:
        ok &= ttft <= slo_t
    if not ok.any():
        return ServingCapacity(max_conc, 0, 0.0, 0.0, float(tpot[0]), float(ttft[0]), "slo_unreachable", curve,
                               **common)
    i = int(np.argmax(np.where(ok, rate, -1.0)))
    if i == B.size - 1:
        limiter = "memory" if limit == max_conc else "max_batch_size"
    elif slo_p is not None and tpot[i + 1] > slo_p:
        limiter = "tpot_slo"
    elif slo_t is not None and ttft[i + 1] > slo_t:
        limiter = "ttft_slo"
    else:
        limiter = "throughput"
    return ServingCapacity(max_conc, int(B[i]), float(rate[i] * n), float(rate[i]), float(tpot[i]), float(ttft[i]),
                           limiter, curve, **common)
