"""Search the parallel layouts of a training job and rank them: ``plan_training``.

Every layout ``dp x tp x pp x cp x ZeRO x recomputation x micro-batch (x virtual stages)`` that divides
the model, the GPUs and the global batch is enumerated as arrays, its memory per GPU checked with
:func:`gpumodel.training_memory` (broadcast over the candidates) and its step composed by
:func:`gpumodel.cluster.step.compose`, the function behind the single-layout step time. The kernel
model is not run per candidate: the shard's kernel times are evaluated once per distinct
``(tp, cp)`` at micro-batches 1 and 8 and interpolated linearly in the micro-batch (a shard's kernels
scale with its tokens plus a fixed part); ``tests/cluster/test_plan.py`` checks the planner against
the full composition. Multi-GPU times are modelled, not measured here.
"""

from __future__ import annotations

import html
import math
import time
import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from ..base.arguments import keyword_only_after
from ..base.errors import ArgumentError, ArgumentTypeError, UnsupportedError
from ..base.readable import format_count
from ..base.reprs import text_table
from ..core.memory import training_memory
from ..vocabulary.parallel_rules import splits_model
from ..calibration.estimate import resolve_calibration
from ..training.layer import attention_kernel_on
from ..vocabulary import (Optimizer, bounded_int, checkpointing_mode, choice, flag, positive_int, positive_number,
                          precision as _precision, resolve_model, resolve_system, token_count)
from .shard import shard_config, shard_times
from .step import PHASES, Framework, compose, model_flops_per_token
from .parallelism import Parallelism

__all__ = ["TrainingPlan", "PlanRow", "plan_training"]

_CKPT = ("none", "selective", "full")
_FIELDS = ("seconds", "mfu", "days", "gpu_hours", "energy_kwh", "cost", "headroom_bytes", "peak_bytes", "bound")


class PlanRow(dict):
    """One ranked layout of a :class:`TrainingPlan`: a plain ``dict`` of its fields.

    Its former key ``step_s`` (now ``seconds``) still answers for one release, with a ``DeprecationWarning``.
    """

    _renamed = {"step_s": "seconds"}

    def __missing__(self, key: str) -> Any:
        new = self._renamed.get(key)
        if new is None:
            raise KeyError(key)
        warnings.warn(f"the plan row key {key!r} is deprecated; use {new!r}", DeprecationWarning, stacklevel=2)
        return self[new]


@dataclass(frozen=True)
class TrainingPlan:
    """Ranked layouts of one training job (best first).

    Attributes
    ----------
    rows : list of dict
        One per layout (a :class:`PlanRow`): ``num_gpus, dp, tp, pp, cp, zero, checkpointing, micro_batch,
        virtual_stages, gradient_accumulation_steps, seconds`` (of one step [s]; ``step_s`` is its former key,
        deprecated), ``mfu, days, gpu_hours, energy_kwh, cost, peak_bytes, headroom_bytes, bound`` plus the
        breakdown [s] by phase. ``bound`` names the largest part of the step other than compute ("compute"
        when nothing else is more than a fifth of the step).
    candidates : int
        Layouts enumerated; ``feasible`` those that fit in memory.
    attention_kernel : str
        The library whose flash kernels every layout's attention was timed with
        (:class:`~gpumodel.core.ops.AttentionKernel`).
    """

    model: str
    system: str
    tokens: float
    global_batch: int
    seq_len: int
    objective: str
    rows: list = field(default_factory=list)
    candidates: int = 0
    feasible: int = 0
    search_s: float = 0.0
    attention_kernel: str = "sdpa"

    @property
    def best(self) -> dict:
        """The first-ranked layout."""
        if not self.rows:
            raise UnsupportedError(f"no layout of {self.model} fits on {self.system}")
        return self.rows[0]

    def parallelism(self, rank: int = 0):
        """The :class:`~gpumodel.cluster.parallelism.Parallelism` of a ranked layout.

        Parameters
        ----------
        rank : int
            Index of the layout in :attr:`rows`: ``0`` (the best) to ``len(rows) - 1``; anything else is
            refused with an :class:`~gpumodel.base.errors.ArgumentError` naming ``rank`` and the row count.
        """
        n = len(self.rows)
        allowed = f"an int from 0 to {n - 1} ({n} rows)" if n else "none: the plan has no rows"
        if isinstance(rank, (bool, np.bool_)) or not isinstance(rank, (int, np.integer)):
            raise ArgumentTypeError(f"rank must be an int (the index of a row: {allowed}), got {rank!r} "
                                    f"({type(rank).__name__})", argument="rank", value=rank, allowed=allowed)
        if not 0 <= rank < n:
            raise ArgumentError(f"rank={rank} is out of range: the plan has {n} rows, so rank is 0 to {n - 1}"
                                if n else f"rank={rank}: the plan has no rows (no layout fits)",
                                argument="rank", value=rank, allowed=allowed)
        r = self.rows[int(rank)]
        return Parallelism(dp=r["dp"], tp=r["tp"], pp=r["pp"], cp=r["cp"], zero=r["zero"],
                           sequence_parallel=r["tp"] > 1, virtual_stages=r["virtual_stages"])

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("model", "system", "tokens", "global_batch", "seq_len", "objective",
                                              "attention_kernel", "candidates", "feasible", "search_s", "rows")}

    def to_pandas(self):
        """The ranked layouts as a ``pandas.DataFrame`` (pandas is an optional dependency)."""
        import pandas as pd

        return pd.DataFrame(self.rows)

    def _lines(self, top: int = 10) -> list[list[str]]:
        out = []
        for i, r in enumerate(self.rows[:top]):
            cost = "-" if r["cost"] is None else f"{r['cost']:,.0f}"
            out.append([str(i + 1), str(r["num_gpus"]), f"dp{r['dp']} tp{r['tp']} pp{r['pp']} cp{r['cp']}"
                        + (f" v{r['virtual_stages']}" if r["virtual_stages"] > 1 else ""),
                        f"z{r['zero']}", r["checkpointing"], f"{r['micro_batch']}x{r['gradient_accumulation_steps']}",
                        f"{r['seconds']:.3f}", f"{r['mfu']:.1%}", f"{r['days']:.2f}", f"{r['gpu_hours']:,.0f}",
                        f"{r['energy_kwh'] / 1e3:,.1f}", cost, f"{r['headroom_bytes'] / 2**30:.1f}", r["bound"]])
        return out

    HEADERS = ["#", "GPUs", "layout", "ZeRO", "recompute", "mb x acc", "step s", "MFU", "days", "GPU-h", "MWh",
               "cost", "free GiB", "bound"]

    #: What the columns of :attr:`HEADERS` mean (printed under the table).
    LEGEND = ("layout: data, tensor, pipeline and context-parallel degrees (v: virtual pipeline stages)", "ZeRO: stage",
              "recompute: activation recomputation (none, selective, full)", "mb x acc: micro-batch x accumulation steps", "step s: one optimizer step [s]",
              "free GiB: memory left on each GPU", "bound: the largest part of the step besides compute")

    def __repr__(self) -> str:
        kernel = f", attention {self.attention_kernel}" if self.attention_kernel != "sdpa" else ""
        head = (f"TrainingPlan({self.model} on {self.system}, {format_count(self.tokens)} tokens, batch "
                f"{self.global_batch} x {self.seq_len} tokens{kernel}; {self.feasible:,} of {self.candidates:,} "
                f"layouts fit, ranked by {self.objective})")
        if not self.rows:
            return head
        table = text_table(self.HEADERS, self._lines(5))
        more = f"\n  ... {len(self.rows) - 5:,} more rows" if len(self.rows) > 5 else ""
        legend = [""]
        for entry in self.LEGEND:   # entries whole, lines of at most about 110 characters
            if legend[-1] and len(legend[-1]) + len(entry) > 108:
                legend.append("")
            legend[-1] += ("; " if legend[-1] else "") + entry
        return "\n".join([head] + ["  " + line for line in table.splitlines()]) + more + "".join(
            "\n  " + line for line in legend)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.HEADERS)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self._lines(10))
        return (f"<b>{html.escape(self.model)} on {html.escape(self.system)}</b>: {self.feasible:,} of "
                f"{self.candidates:,} layouts fit, ranked by {html.escape(self.objective)}"
                f"<table><tr>{head}</tr>{body}</table><small>{html.escape('; '.join(self.LEGEND))}</small>")


def _divisors_pow2(n: int, limit: int) -> list[int]:
    return [d for d in (2 ** k for k in range(0, 12)) if d <= limit and n % d == 0]


def _sweep(values: Any, name: str, read: Callable) -> list:
    """The values of a searched option (one value or a non-empty list), each read by its kind's resolver."""
    if isinstance(values, (str, int, np.integer, bool)) or not hasattr(values, "__iter__"):
        values = [values]
    out = []
    for v in values:
        if np.ndim(v) and not isinstance(v, str):
            raise ArgumentError(f"{name} must be one value or a flat list of values, got {v!r} in it",
                                argument=name, value=values, allowed="one value or a flat list")
        out.append(read(v, name))
    if not out:
        raise ArgumentError(f"{name} is empty; give at least one value to search", argument=name, value=values,
                            allowed="one value or a non-empty list")
    return out


def _one(value: Any, name: str, read: Callable) -> Any:
    """A scalar-only argument read by ``read``; an array or a list is refused naming the argument."""
    if not isinstance(value, str) and np.ndim(value):
        raise ArgumentError(f"plan_training takes one {name}, got an array of shape {np.shape(value)}; call it once "
                            f"per value", argument=name, value=value, allowed="one value, not an array")
    return read(value, name)


@keyword_only_after(2, "tokens", "global_batch", "seq_len")
def plan_training(model: Any, gpu_or_system: Any, *, tokens: Any, global_batch: int, seq_len: int,
                  max_gpus: int | None = None, num_gpus: int | None = None, objective: str = "time",
                  precision: str = "amp_bf16", optimizer: str = "adamw", framework: str = "megatron",
                  price_per_gpu_hour: float | None = None, micro_batches=(1, 2, 4, 8), zero_stages=(0, 1, 2, 3),
                  checkpointing=_CKPT, virtual_stages=(1, 2, 4), top: int | None = 50,
                  progress: Callable[[int, int], None] | None = None, calibrated: bool = True,
                  calibration: Any = None, attention_kernel: str = "sdpa") -> TrainingPlan:
    """Rank the parallel layouts that train ``model`` on ``gpu_or_system`` and fit in memory.

    Parameters
    ----------
    model : TransformerConfig, str or dict
    gpu_or_system : SystemSpec, str or GPU
        ``gm.system`` name or record; a bare GPU means nodes of it (one node when it has no network).
    tokens : float or str
        Tokens to train on ("1T", "300B").
    global_batch : int
        Sequences per optimizer step.
    seq_len : int
        Tokens per sequence.
    max_gpus, num_gpus : int, optional
        Search GPU counts ``1, 2, 4, ..., max_gpus`` (powers of two and ``max_gpus``), or only ``num_gpus``.
        Default: ``num_gpus`` = one node.
    objective : {"time", "cost"}
        Rank by wall-clock time, or by GPU-hours (cost), ties broken by the other.
    precision, optimizer : as in :func:`gpumodel.training_step_time`.
    framework : {"megatron", "hf", "fsdp", "deepspeed"}
        The training engine; the search keeps to what it runs (Megatron: ZeRO-1 at most; DeepSpeed: no ZeRO-2/3
        with pipelines; :func:`gpumodel.cluster.step.framework_rules`), and a pipeline of ``pp`` stages gets at
        least ``pp`` micro-batches a step.
    price_per_gpu_hour : float, optional
        Gives a cost column.
    micro_batches, zero_stages, checkpointing, virtual_stages :
        The values searched.
    top : int or None
        Rows kept (None: all feasible).
    progress : callable, optional
        Called as ``progress(done, total)`` over the distinct shard shapes evaluated.
    calibrated : bool
        Time the shards' kernels with the GPU's shipped calibration where there is one (default); False: the
        datasheet with default efficiencies.
    calibration : Calibration or path, optional
        Your own calibration of the system's GPU (a :class:`~gpumodel.calibration.record.Calibration` or the path
        of a YAML file ``gpumodel calibrate`` wrote, read once): every layout's kernels are priced with it, and
        the cached shard times are kept apart per calibration. One measured on another GPU is refused
        (:class:`~gpumodel.base.errors.ArgumentError` naming ``calibration``). The planner composes the
        parallel model, which has no host side: it takes no ``host``.
    attention_kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"}
        The library whose flash kernels run every layout's 16-bit attention (as in
        :func:`gpumodel.training_step_time`); the cached shard times are kept apart per kernel.

    Returns
    -------
    TrainingPlan

    Examples
    --------
    >>> import gpumodel as gm
    >>> plan = gm.plan_training("llama-3-8b", "dgx-h100", tokens="1T", global_batch=512, seq_len=4096, num_gpus=64)
    >>> r = plan.best
    >>> r["num_gpus"], r["dp"] * r["tp"] * r["pp"] * r["cp"], plan.feasible > 0
    (64, 64, True)
    """
    t0 = time.perf_counter()
    cfg = resolve_model(model)
    sysm = resolve_system(gpu_or_system, "gpu_or_system")
    g = sysm.gpu
    calibrated = flag(calibrated, "calibrated")
    calibration = resolve_calibration(calibration, g)   # a path read once; another GPU's record refused
    prec = _precision(precision)
    kernel = attention_kernel_on(attention_kernel, g, prec.compute_dtype.value).value
    opt = choice(Optimizer, optimizer, "optimizer")
    fw = choice(Framework, framework, "framework")
    if not isinstance(objective, str) or objective not in ("time", "cost"):
        raise ArgumentError(f"objective={objective!r} is not one of 'time', 'cost'", argument="objective",
                            value=objective, allowed="'time', 'cost'")
    n_tokens = token_count(tokens)
    B = _one(global_batch, "global_batch", positive_int)
    s = _one(seq_len, "seq_len", positive_int)
    micro_batches = _sweep(micro_batches, "micro_batches", positive_int)
    virtual_stages = _sweep(virtual_stages, "virtual_stages", positive_int)
    zero_stages = _sweep(zero_stages, "zero_stages", lambda x, name: bounded_int(x, name, 0, 3).item())
    checkpointing = _sweep(checkpointing, "checkpointing", lambda x, name: checkpointing_mode(x, name).value)
    if top is not None:
        top = _one(top, "top", positive_int)
    if progress is not None and not callable(progress):
        raise ArgumentTypeError(f"progress must be a function progress(done, total) or None, "
                                f"got {type(progress).__name__}")
    if num_gpus is not None and max_gpus is not None:
        raise ArgumentError("give num_gpus (exactly this many GPUs) or max_gpus (search up to this many), not both",
                            argument="num_gpus", value=num_gpus, allowed="num_gpus or max_gpus, not both")
    if num_gpus is not None:
        counts = [_one(num_gpus, "num_gpus", positive_int)]
    else:
        cap = _one(max_gpus, "max_gpus", positive_int) if max_gpus is not None else sysm.gpus_per_node
        counts = sorted({2 ** k for k in range(0, 20) if 2 ** k <= cap} | {cap})
    if sysm.inter_node is None:
        counts = [n for n in counts if n <= sysm.gpus_per_node]
        if not counts:
            which = "num_gpus" if num_gpus is not None else "max_gpus"
            raise ArgumentError(f"{sysm.name} has no network: at most {sysm.gpus_per_node} GPUs", argument=which,
                                value=num_gpus if num_gpus is not None else max_gpus,
                                allowed=f"1 to {sysm.gpus_per_node}")
    price = (_one(price_per_gpu_hour, "price_per_gpu_hour", positive_number) if price_per_gpu_hour is not None
             else None)

    # ---- enumerate candidates
    tps = [t for t in _divisors_pow2(cfg.num_heads, sysm.gpus_per_node) if splits_model(cfg, t)]
    cps = [c for c in _divisors_pow2(s, 64) if s // c >= 2048 or c == 1]
    pps = [p for p in (2 ** k for k in range(0, 8)) if p <= cfg.num_layers]
    P = np.array(np.meshgrid(counts, tps, cps, pps, list(micro_batches), list(virtual_stages), list(zero_stages),
                             [i for i, c in enumerate(_CKPT) if c in checkpointing], indexing="ij")).reshape(8, -1)
    n, tp, cp, pp, mb, v, z, ck = P
    keep = (n % (tp * cp * pp) == 0)
    dp = np.maximum(n // (tp * cp * pp), 1)
    keep &= B % (dp * mb) == 0
    keep &= (v == 1) | ((pp > 1) & (cfg.num_layers % (pp * v) == 0))
    keep &= ~((z > 0) & (dp * cp == 1)) & ~((z == 3) & (pp > 1))
    if fw == Framework.MEGATRON:           # the engines' own rules (see gpumodel.cluster.step.framework_rules)
        keep &= z <= 1
    elif fw == Framework.DEEPSPEED:
        keep &= ~((z >= 2) & (pp > 1))
    keep &= (pp == 1) | (B // np.maximum(dp * mb, 1) >= pp)   # a pipeline needs a micro-batch for each stage
    if not keep.any():
        raise ArgumentError(f"no layout divides {cfg.name}, {counts} GPUs and global_batch={B}",
                            argument="global_batch", value=B, allowed="a multiple of dp x micro-batch")
    n, tp, cp, pp, mb, v, z, ck, dp = (x[keep] for x in (n, tp, cp, pp, mb, v, z, ck, dp))
    m = B // (dp * mb)
    G = n

    # ---- shard times: once per (tp, cp) at micro-batches 1 and 8, linear in the micro-batch
    keys = sorted(set(zip(tp.tolist(), cp.tolist())))
    names = ("layer_forward", "layer_backward", "attention_forward", "head_forward", "head_backward",
             "optimizer_per_param", "layer_flops", "head_flops")
    per = {k: {} for k in names}
    for i, (t_, c_) in enumerate(keys):
        shard = shard_config(cfg, t_)
        lo = shard_times(shard, g, 1, s // c_, c_, prec.name, opt.value, fw.value, calibrated, calibration,
                         attention_kernel=kernel)
        hi = shard_times(shard, g, 8, s // c_, c_, prec.name, opt.value, fw.value, calibrated, calibration,
                         attention_kernel=kernel)
        for k in names:
            a, b8 = getattr(lo, k), getattr(hi, k)
            per[k][(t_, c_)] = (a - (b8 - a) / 7, (b8 - a) / 7)   # value(mb) = fixed + slope * mb
        if progress is not None:
            progress(i + 1, len(keys))
    idx = {key: i for i, key in enumerate(keys)}
    which = np.array([idx[(a, b)] for a, b in zip(tp.tolist(), cp.tolist())])
    st = SimpleNamespace(**{k: np.array([per[k][key][0] for key in keys])[which]
                            + np.array([per[k][key][1] for key in keys])[which] * mb for k in names})
    st.optimizer_per_param = np.array([per["optimizer_per_param"][key][0] + per["optimizer_per_param"][key][1]
                                       for key in keys])[which]

    out = compose(cfg, sysm, prec, fw, st, tp=tp, pp=pp, cp=cp, dp=dp, ep=1, zero=z, sequence_parallel=tp > 1,
                  virtual_stages=v, batch_size=mb, seq_len=s, micro_batches=m, checkpointing=ck)
    step = sum(out[k] for k in PHASES)

    # ---- memory per GPU, broadcast over the candidates sharing (pp, zero, checkpointing, accumulation)
    total = np.full(len(G), np.inf)
    peak = np.full(len(G), np.nan)
    gas = np.where(pp > 1, pp, np.where(m > 1, 2, 1))  # 1F1B holds pp micro-batches (m >= pp assumed)
    for key in sorted(set(zip(pp.tolist(), z.tolist(), ck.tolist(), gas.tolist()))):
        sel = (pp == key[0]) & (z == key[1]) & (ck == key[2]) & (gas == key[3])
        dps = [None] if key[1] < 3 else sorted(set((dp * cp)[sel].tolist()))
        for d in dps:
            sub = sel if d is None else sel & (dp * cp == d)
            mem = training_memory(cfg, mb[sub], s // cp[sub], precision=prec.name, optimizer=opt.value,
                                  checkpointing=_CKPT[key[2]], attention="flash", gradient_accumulation_steps=key[3],
                                  zero=key[1], dp=(dp * cp)[sub] if d is None else d, tp=tp[sub], pp=key[0],
                                  sequence_parallel=bool(np.any(tp[sub] > 1)))
            total[sub] = mem.total_bytes
            peak[sub] = mem.peak_bytes
    ok = np.isfinite(step) & (total <= g.usable_memory_bytes)

    # ---- the run
    tokens_step = B * s
    steps = math.ceil(n_tokens / tokens_step)
    seconds = steps * step
    gpu_hours = n * seconds / 3600
    power = sysm.gpu_power_watts
    mfu = model_flops_per_token(cfg, s) * tokens_step / step / (n * g.peak_flops(prec.compute_dtype.value))
    order_key = (seconds, gpu_hours) if objective == "time" else (gpu_hours, seconds)
    ranked = [i for i in np.lexsort(order_key[::-1]) if ok[i]]
    if top is not None:
        ranked = ranked[:top]
    parts = {"communication": "communication", "pipeline_bubble": "pipeline bubble", "optimizer": "optimizer",
             "recompute": "recomputation"}
    rows = []
    for i in ranked:
        worst = max(parts, key=lambda k: out[k][i])
        bound = parts[worst] if out[worst][i] > 0.2 * step[i] else "compute"
        rows.append(PlanRow(num_gpus=int(n[i]), dp=int(dp[i]), tp=int(tp[i]), pp=int(pp[i]), cp=int(cp[i]), zero=int(z[i]),
                         checkpointing=_CKPT[ck[i]], micro_batch=int(mb[i]), virtual_stages=int(v[i]),
                         gradient_accumulation_steps=int(m[i]), seconds=float(step[i]), mfu=float(mfu[i]),
                         days=float(seconds[i] / 86400), gpu_hours=float(gpu_hours[i]),
                         energy_kwh=float(power * n[i] * seconds[i] / 3.6e6),
                         cost=None if price is None else float(price * gpu_hours[i]), peak_bytes=float(peak[i]),
                         headroom_bytes=float(g.usable_memory_bytes - total[i]), bound=bound,
                         **{f"{k}_s": float(out[k][i]) for k in PHASES}))
    return TrainingPlan(model=cfg.name, system=sysm.name, tokens=n_tokens, global_batch=B, seq_len=s,
                        objective=objective, rows=rows, candidates=len(G), feasible=int(ok.sum()),
                        search_s=time.perf_counter() - t0, attention_kernel=kernel)
