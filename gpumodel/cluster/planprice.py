"""Price the layouts of a search at once: shard kernel times, the composed step, memory per GPU, the run.

Every candidate of :func:`gpumodel.cluster.plansearch.candidates` is priced with the functions behind the
single-layout step time, over arrays:

* the shard's kernel times (:func:`gpumodel.cluster.shard.shard_times`) once per tensor-parallel degree, over
  arrays of every (context-parallel degree, micro-batch) the candidates use: the kernel model builds each
  kernel once with array sizes and prices each family of kernels in one call
  (:mod:`gpumodel.cluster.kernelprice`), exact, not interpolated;
* the step (:func:`gpumodel.cluster.step.compose`) broadcast over the layouts (rows) times the ZeRO stages and
  recomputation modes (columns), so that each layout's collectives are computed once; once with communication
  overlap and once without;
* memory per GPU (:func:`gpumodel.training_memory`) over the layouts times the ZeRO stages, once per
  recomputation mode.

With ``framework="hf"`` each step is at least what the host needs to dispatch Hugging Face's eager loop
(:func:`host_floor`, from the one-GPU step's plan and the host's per-op costs).

One search prices one pipeline schedule (the step's bubble and the memory it holds) and, for selective
recomputation, one set of Megatron-Core's ``--recompute-modules`` (their kernels priced per tensor-parallel degree
over the same arrays as the shard's, :func:`gpumodel.cluster.selective.selective_recompute`).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from ..calibration.bands import PARALLEL_STEP_REGIME, load_error_bands
from ..core.memory import training_memory
from ..training.stepplan import dispatch_seconds, step_plan
from ..training.steptime import recompute_flops_per_token
from .composition import overlaps
from .plansearch import CHECKPOINTING, Grid
from .selective import SelectiveRecompute, selective_recompute
from .shard import shard_config, shard_times
from .step import PHASES, compose, model_flops_per_token

__all__ = ["SHARD_FIELDS", "SCHEDULE_OVERLAP", "row_overlap", "shard_table", "step_parts", "memory_per_gpu",
           "parallel_model_error", "host_floor", "run_metrics", "distinct_rows"]

#: The shard times the step composes (see :class:`~gpumodel.cluster.shard.ShardTimes`).
SHARD_FIELDS = ("layer_forward", "layer_backward", "attention_forward", "head_forward", "head_backward",
                "optimizer_per_param", "layer_flops", "head_flops")
#: The communication a pipeline schedule hides by itself, whatever a row's overlap setting: DualPipe runs each
#: forward chunk beside another micro-batch's backward chunk, under which "both all-to-all and PP communication can
#: be fully hidden" (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024, section 3.2.1). A row's ``comm_overlap``
#: adds Megatron-Core's overlaps (:func:`gpumodel.cluster.composition.overlaps`) to it.
SCHEDULE_OVERLAP = {"1f1b": frozenset(), "zero_bubble": frozenset(), "dualpipe": frozenset({"pp", "ep"})}


def row_overlap(pipeline_schedule: str, comm_overlap: bool) -> frozenset:
    """The communication a plan row hides: its schedule's own (:data:`SCHEDULE_OVERLAP`) and, with ``comm_overlap``,
    Megatron-Core's (:func:`gpumodel.cluster.composition.overlaps`).

    >>> sorted(row_overlap("dualpipe", False)), sorted(row_overlap("1f1b", True))
    (['ep', 'pp'], ['dp', 'pp', 'tp'])
    """
    return SCHEDULE_OVERLAP[pipeline_schedule] | overlaps(bool(comm_overlap))


def parallel_model_error() -> float:
    """Median relative error of the parallel step model on published runs [1]: the ``step-parallel`` regime's
    ``median_abs`` (the fit half of ``bench/published_runs.py``'s rows), combined with the kernel model's expected
    error into a plan row's ``expected_error``."""
    return float(load_error_bands().regimes[PARALLEL_STEP_REGIME].median_abs)


def distinct_rows(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of non-negative integer columns and, per row, the index of its distinct row.

    Returns ``(first, inverse)``: ``first`` the index of one row of each distinct value, ``inverse`` as
    ``np.unique``'s. The columns are packed into one integer (mixed radix) where it fits, which is much faster
    than ``np.unique(..., axis=1)``.

    >>> first, inverse = distinct_rows(np.array([1, 2, 1]), np.array([5, 5, 5]))
    >>> first.tolist(), inverse.tolist()
    ([0, 1], [0, 1, 0])
    """
    cols = [np.asarray(c, dtype=np.int64) for c in columns]
    radix = [int(c.max()) + 1 if c.size else 1 for c in cols]
    if float(np.prod([float(r) for r in radix])) < 2.0 ** 62:
        code = np.ravel_multi_index(cols, radix)
        _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(np.stack(cols), axis=1, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def shard_table(cfg, gpu, tp, cp, mb, seq_len: int, precision: str, optimizer: str, framework: str,
                calibrated: bool, calibration: Any, attention_kernel: str,
                progress: Callable[[int, int], None] | None = None, fp8: bool = False,
                recompute_modules: Any = None, dtype: str = "bf16") -> tuple[SimpleNamespace, Any, str]:
    """The shard times of every layout (arrays like ``tp``), its kernels' expected error, and their source.

    One :func:`~gpumodel.cluster.shard.shard_times` call per tensor-parallel degree, over the distinct
    ``(cp, micro-batch)`` pairs of the layouts with that degree. With ``recompute_modules`` (Megatron-Core's, a set
    of :class:`~gpumodel.vocabulary.RecomputeModule`), the times also hold ``selective``: what selective
    recomputation of those modules re-runs in a layer (:func:`~gpumodel.cluster.selective.selective_recompute`, its
    kernels in the compute ``dtype``), priced over the same arrays; None: ``selective`` is None (the attention core
    alone, as :func:`~gpumodel.cluster.composition.compose` takes it).
    """
    first, which = distinct_rows(tp, cp, mb)
    k_tp, k_cp, k_mb = tp[first], cp[first], mb[first]
    fields = SHARD_FIELDS + (("selective_forward", "selective_flops") if recompute_modules is not None else ())
    table = {k: np.empty(len(first)) for k in fields}
    error = np.full(len(first), np.nan)
    source, redo = "", None
    degrees = sorted(set(k_tp.tolist()))
    for i, t in enumerate(degrees):
        sel = k_tp == t
        st = shard_times(shard_config(cfg, t), gpu, k_mb[sel], seq_len // k_cp[sel], k_cp[sel], precision, optimizer,
                         framework, calibrated, calibration, attention_kernel=attention_kernel, fp8=fp8)
        for k in SHARD_FIELDS:
            table[k][sel] = getattr(st, k)
        if recompute_modules is not None:
            redo = selective_recompute(cfg, recompute_modules, st, gpu, micro_batch=k_mb[sel],
                                       seq_local=seq_len // k_cp[sel], cp=k_cp[sel], tp=t, sequence_parallel=t > 1,
                                       dtype=dtype, fp8=fp8, calibrated=calibrated, calibration=calibration)
            table["selective_forward"][sel], table["selective_flops"][sel] = redo.forward_s, redo.flops
        if st.expected_error is not None:
            error[sel] = st.expected_error
        source = st.source
        if progress is not None:
            progress(i + 1, len(degrees))
    out = SimpleNamespace(**{k: v[which] for k, v in table.items()})
    out.selective = None if redo is None else SelectiveRecompute(
        forward_s=out.selective_forward, flops=out.selective_flops, attention=redo.attention,
        tp_sublayers=redo.tp_sublayers, moe_layers=redo.moe_layers)
    return out, error[which], source


def step_parts(cfg, sysm, prec, fw, st, grid: Grid, seq_len: int, grad_reduce_dtype: str | None = None,
               pipeline_schedule: str = "1f1b") -> dict:
    """The step's breakdown by phase [s] and ``hardware_flops`` of every (layout, setting), arrays (layouts,
    settings): each layout's collectives are computed once and broadcast over the ZeRO stages and recomputation
    modes; one composition with communication overlap, one without, both under ``pipeline_schedule`` (which may
    hide communication itself: :data:`SCHEDULE_OVERLAP`). ``st`` is :func:`shard_table`'s (its ``selective``,
    where given, prices the selective rows' recomputation)."""
    shape = grid.valid.shape
    out = {k: np.zeros(shape) for k in (*PHASES, "hardware_flops")}
    col = grid.column
    sub = SimpleNamespace(**{k: getattr(st, k)[:, None] for k in SHARD_FIELDS})
    redo = getattr(st, "selective", None)
    if redo is not None:
        redo = SelectiveRecompute(forward_s=redo.forward_s[:, None], flops=redo.flops[:, None], attention=redo.attention,
                                  tp_sublayers=redo.tp_sublayers, moe_layers=redo.moe_layers)
    for overlap in (False, True):
        sel = np.flatnonzero(grid.settings["comm_overlap"] == overlap)
        if not len(sel):
            continue
        hide = row_overlap(pipeline_schedule, overlap)
        hybrid = grid.settings["hybrid"][sel]
        shard = np.where(hybrid[None, :], col("hsdp_group"), col("dp") * col("cp")) if hybrid.any() else None
        parts = compose(cfg, sysm, prec, fw, sub, tp=col("tp"), pp=col("pp"), cp=col("cp"), dp=col("dp"),
                        ep=col("ep"), zero=col("zero")[:, sel], sequence_parallel=col("tp") > 1, shard_group=shard,
                        virtual_stages=col("virtual_stages"), batch_size=col("micro_batch"), seq_len=seq_len,
                        micro_batches=col("micro_batches"), checkpointing=col("checkpointing")[:, sel],
                        comm_overlap=hide, grad_reduce_dtype=grad_reduce_dtype, pipeline_schedule=pipeline_schedule,
                        selective=redo)
        for k in out:
            out[k][:, sel] = np.broadcast_to(parts[k], (shape[0], len(sel)))
    return out


def memory_per_gpu(cfg, prec, optimizer: str, framework: str, grid: Grid, seq_len: int,
                   fp8: bool = False, grad_reduce_dtype: str | None = None, pipeline_schedule: str = "1f1b",
                   recompute_modules: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """(reserved total, allocated peak) per GPU [B] of every (layout, setting), by :func:`gpumodel.training_memory`
    under the framework's own memory model: one call per recomputation mode (and, for FSDP, for DDP, for the
    sharded stages and for HSDP over each layout's ``hsdp_group``), over the layouts times the ZeRO stages (overlap does not change memory), under
    ``pipeline_schedule``, with ``recompute_modules`` for selective recomputation (None: Megatron-Core's default)."""
    L, S = grid.layouts, grid.settings
    total, peak = np.full(grid.valid.shape, np.inf), np.full(grid.valid.shape, np.nan)
    z_all, ck_all, hy_all = S["zero"], S["checkpointing"], S["hybrid"]
    sharding = L["dp"] * L["cp"] > 1        # ZeRO needs dp x cp > 1: the other rows take ZeRO-0 alone
    for code in np.unique(ck_all):
        for rows, stages in ((np.flatnonzero(sharding), np.unique(z_all[ck_all == code])),
                             (np.flatnonzero(~sharding), np.array([0]))):
            for shard, hybrid in (((False, False), (True, False), (True, True)) if framework == "fsdp"
                                  else ((None, False),)):
                z = stages if shard is None else stages[(stages >= 2) == shard]
                z = z[np.isin(z, z_all[(ck_all == code) & (hy_all == hybrid)])]
                if not len(z) or not len(rows):
                    continue
                at = {k: L[k][rows, None] for k in ("micro_batch", "micro_batches", "dp", "tp", "pp", "cp", "ep",
                                                     "virtual_stages", "hsdp_group")}
                mem = training_memory(cfg, at["micro_batch"], seq_len, precision=prec.name, optimizer=optimizer,
                                      shard_group=at["hsdp_group"] if hybrid else None,
                                      checkpointing=CHECKPOINTING[code], attention="flash",
                                      gradient_accumulation_steps=at["micro_batches"], zero=z[None, :], dp=at["dp"],
                                      tp=at["tp"], pp=at["pp"], cp=at["cp"], ep=at["ep"],
                                      virtual_stages=at["virtual_stages"], sequence_parallel=bool(np.any(at["tp"] > 1)),
                                      framework=framework, fp8=fp8, grad_reduce_dtype=grad_reduce_dtype,
                                      pipeline_schedule=pipeline_schedule,
                                      recompute_modules=recompute_modules if CHECKPOINTING[code] == "selective" else None)
                t_z = np.broadcast_to(mem.total_bytes, (len(rows), len(z)))
                p_z = np.broadcast_to(mem.peak_bytes, (len(rows), len(z)))
                for j, zv in enumerate(z):
                    cols = np.flatnonzero((ck_all == code) & (z_all == zv) & (hy_all == hybrid))
                    total[np.ix_(rows, cols)], peak[np.ix_(rows, cols)] = t_z[:, j:j + 1], p_z[:, j:j + 1]
    return total, peak


def run_metrics(cfg, gpu, prec, grid: Grid, step: np.ndarray, tokens: float, global_batch: int, seq_len: int,
                power_per_gpu: float, price: float | None, fp8: bool = False, recompute_modules: Any = None) -> dict:
    """Per (layout, setting): tokens/s/GPU, TFLOP/s/GPU, MFU, HFU, days, GPU-hours, kWh and cost of the run (MFU and
    HFU of an fp8 run against the GPU's dense fp8 peak, its GEMMs' rate; HFU of selective recomputation with the
    ``recompute_modules``' FLOPs, None: the attention core's)."""
    n = grid.column("num_gpus")
    tokens_step = global_batch * seq_len
    steps = np.ceil(tokens / tokens_step)
    seconds = steps * step
    model_flops = model_flops_per_token(cfg, seq_len) * tokens_step
    recompute = np.array([recompute_flops_per_token(cfg, seq_len, c, recompute_modules if c == "selective" else None)
                          for c in CHECKPOINTING])[grid.column("checkpointing")]
    peak = gpu.peak_flops("fp8" if fp8 else prec.compute_dtype.value)
    gpu_hours = n * seconds / 3600
    return {"tokens_per_s_per_gpu": tokens_step / step / n, "tflops_per_gpu": model_flops / step / n / 1e12,
            "mfu": model_flops / step / (n * peak), "hfu": (model_flops + recompute * tokens_step) / step / (n * peak),
            "days": seconds / 86400, "gpu_hours": gpu_hours, "energy_kwh": power_per_gpu * n * seconds / 3.6e6,
            "cost": None if price is None else price * gpu_hours}


def host_floor(cfg, prec, opt, grid, s: int, hc, kernel: str) -> np.ndarray:
    """Hugging Face's eager loop: what its host needs to dispatch one step of each (layout, setting) [s].

    Parameters
    ----------
    cfg : TransformerConfig
    prec, opt : Precision, Optimizer
    grid : Grid
        The candidates (their micro-batch, accumulated micro-batches and recomputation).
    s : int
        Sequence length [tokens].
    hc : HostCosts
        The host's per-op costs.
    kernel : str
        The attention library.

    Returns
    -------
    ndarray
        Layouts x settings [s]: :func:`gpumodel.training.stepplan.dispatch_seconds` of the one-GPU step's plan. The
        micro-batches after the second dispatch what the second does, so three plans give every accumulation count.
    """
    b, m, ck = grid.layouts["micro_batch"], grid.layouts["micro_batches"], grid.settings["checkpointing"]
    out = np.zeros(grid.valid.shape)
    for bi in np.unique(b):
        for code in np.unique(ck):
            one, two, three = (dispatch_seconds(step_plan(cfg, int(bi), s, prec.name, opt.value,
                                                          CHECKPOINTING[code] == "full", host=hc,
                                                          gradient_accumulation_steps=a, attention_kernel=kernel),
                                                hc.item_s) for a in (1, 2, 3))
            rows = b == bi
            out[np.ix_(rows, ck == code)] = np.where(m[rows] == 1, one, two + (m[rows] - 2) * (three - two))[:, None]
    return out
