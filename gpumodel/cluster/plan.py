"""Search the parallel layouts of a training job and rank them: ``plan_training``.

Every layout its engine runs (:mod:`gpumodel.cluster.plansearch`: data, tensor, pipeline, context and
expert parallelism, ZeRO, recomputation, micro-batch, virtual stages, communication overlap) that divides
the model, the GPUs and the global batch is enumerated as arrays and priced at once, once per attention library,
fp8 setting and pipeline schedule searched (each schedule on the layouts it runs)
(:mod:`gpumodel.cluster.planprice`) with the functions behind the single-layout step time: the shard's
kernel times, exact for each (tensor, context parallel degree, micro-batch), the composed step
(:func:`gpumodel.cluster.step.compose`) and the memory per GPU (:func:`gpumodel.training_memory`).
``tests/test_cluster_plan.py`` checks the planner against the full composition. Multi-GPU times are
modelled, not measured here; ``python bench/plan_speed.py`` times the search, ``python
bench/plan_published.py`` ranks published layouts in it.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from ..base.arguments import keyword_only_after
from ..base.errors import ArgumentError, ArgumentTypeError
from ..calibration.bands import PARALLEL_STEP_REGIME, error_band
from ..calibration.estimate import model_for, resolve_calibration
from ..training.hostcost import host_costs_for
from ..training.layer import attention_kernel_on
from ..vocabulary import (Checkpointing, Framework, Optimizer, bounded_int, check_pipeline_schedule, checkpointing_mode,
                          choice, flag, fp8_recipe, grad_reduce_dtype as grad_reduce_dtype_of, positive_int,
                          positive_number, precision as _precision, recompute_modules as recompute_modules_of,
                          resolve_model, resolve_system, token_count)
from .planprice import (distinct_rows, host_floor, memory_per_gpu, parallel_model_error, run_metrics, shard_table,
                        step_parts)
from .planresult import PlanRow, TrainingPlan
from .plansearch import CHECKPOINTING, candidates, schedule_grids
from .step import PHASES

__all__ = ["TrainingPlan", "PlanRow", "plan_training", "NEAR_DUPLICATE", "COST_DAYS"]

#: Rows of one layout (GPUs, degrees, micro-batch, recomputation) whose step times are within this fraction of
#: the fastest of them are near-duplicates: one row is kept, the simplest setting (lower ZeRO stage, no HSDP, fewer
#: virtual stages, no overlap), and the others are listed in its ``collapsed``.
NEAR_DUPLICATE = 0.01
#: ``objective="cost"`` (or ``"energy"``) without ``max_days``: the runs ranked are those of at most this many days [days]
#: (the cheapest run is otherwise the one on the fewest GPUs, over years).
COST_DAYS = 90.0
_OBJECTIVES = ("time", "cost", "energy")
#: What each objective ranks by, then what breaks its ties (keys of a plan row).
_RANK_KEYS = {"time": ("seconds", "gpu_hours"), "cost": ("gpu_hours", "seconds"), "energy": ("energy_kwh", "seconds")}


def _sweep(values: Any, name: str, read: Callable) -> list | None:
    """The values of a searched option (one value or a non-empty list, each read by its kind's resolver); None stays."""
    if values is None:
        return None
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


def _shown(counts: list[int]) -> str:
    """GPU counts in a message: all of a few, else the first and last."""
    return "/".join(map(str, counts)) if len(counts) <= 6 else f"{counts[0]} to {counts[-1]}"


def _gpu_counts(sysm, num_gpus, max_gpus) -> list[int]:
    if num_gpus is not None and max_gpus is not None:
        raise ArgumentError("give num_gpus (exactly these GPU counts) or max_gpus (search up to this many), not both",
                            argument="num_gpus", value=num_gpus, allowed="num_gpus or max_gpus, not both")
    if num_gpus is not None:
        counts = sorted(set(_sweep(num_gpus, "num_gpus", positive_int)))
    else:
        cap = _one(max_gpus, "max_gpus", positive_int) if max_gpus is not None else sysm.gpus_per_node
        counts = sorted({2 ** k for k in range(0, 21) if 2 ** k <= cap} | {cap})
    if sysm.inter_node is None:
        counts = [n for n in counts if n <= sysm.gpus_per_node]
        if not counts:
            which = "num_gpus" if num_gpus is not None else "max_gpus"
            raise ArgumentError(f"{sysm.name} has no network: at most {sysm.gpus_per_node} GPUs", argument=which,
                                value=num_gpus if num_gpus is not None else max_gpus,
                                allowed=f"1 to {sysm.gpus_per_node}")
    return counts


def _ranked(grid, m: dict, ok: np.ndarray, objective: str) -> tuple[np.ndarray, dict]:
    """Flat indices (into layouts x settings) of the feasible candidates, best first, near-duplicates folded (see
    :data:`NEAR_DUPLICATE`), and the folded candidates of each kept one."""
    idx = np.flatnonzero(ok)
    if not len(idx):
        return idx, {}
    K = ok.shape[1]
    si, ki = np.divmod(idx, K)
    L, S = grid.layouts, grid.settings
    _, shape_id = distinct_rows(*(L[k] for k in ("num_gpus", "dp", "tp", "pp", "cp", "ep", "micro_batch")))
    _, group = distinct_rows(shape_id[si], S["checkpointing"][ki])
    sec = m["seconds"].ravel()[idx]
    fastest = np.full(group.max() + 1, np.inf)
    np.minimum.at(fastest, group, sec)
    near = sec <= fastest[group] * (1 + NEAR_DUPLICATE)
    # among each group's near-ties the simplest setting first (ZeRO stage, HSDP, virtual stages, overlap), then the
    # fastest
    order = np.lexsort((sec, S["comm_overlap"][ki], L["virtual_stages"][si], S["hybrid"][ki], S["zero"][ki], ~near,
                        group))
    first = np.ones(len(order), bool)
    first[1:] = (group[order][1:] != group[order][:-1]) | ~near[order][1:]
    kept_mask = np.zeros(len(idx), bool)
    kept_mask[order[first]] = True
    keeper = np.empty(group.max() + 1, np.int64)
    heads = order[first & near[order]]
    keeper[group[heads]] = heads
    folded: dict[int, list[int]] = {}
    for j in np.flatnonzero(near & ~kept_mask):
        folded.setdefault(int(idx[keeper[group[j]]]), []).append(int(idx[j]))
    primary, secondary = (m[k] for k in _RANK_KEYS[objective])
    kept = idx[kept_mask]
    return kept[np.lexsort((secondary.ravel()[kept], primary.ravel()[kept]))], folded


def _row(i: int, grid, m: dict, parts: dict, folded: list, headroom, peak, error) -> PlanRow:
    """The :class:`PlanRow` of candidate ``i`` (a flat index into layouts x settings)."""
    K = grid.valid.shape[1]
    si, ki = divmod(i, K)
    L, S = grid.layouts, grid.settings
    at = np.unravel_index(i, grid.valid.shape)
    step = float(m["seconds"][at])
    names = {"communication": "communication", "pipeline_bubble": "pipeline bubble", "optimizer": "optimizer",
             "recompute": "recompute"}
    worst = max(names, key=lambda k: parts[k][at])
    bound = names[worst] if parts[worst][at] > 0.2 * step else "compute"
    host = m.get("host_s")
    if host is not None and host[at] >= step:
        bound = "host"
    out = {k: int(L[k][si]) for k in ("num_gpus", "dp", "tp", "pp", "cp", "ep")}
    out.update(zero=int(S["zero"][ki]), shard_group=int(L["hsdp_group"][si]) if S["hybrid"][ki] else None,
               checkpointing=CHECKPOINTING[S["checkpointing"][ki]],
               micro_batch=int(L["micro_batch"][si]), virtual_stages=int(L["virtual_stages"][si]),
               gradient_accumulation_steps=int(L["micro_batches"][si]), comm_overlap=bool(S["comm_overlap"][ki]),
               seconds=step)
    out.update({k: (None if v is None else float(v[at])) for k, v in m.items() if k != "seconds"})

    def folded_row(j):
        sj, kj = divmod(j, K)
        return {"zero": int(S["zero"][kj]), "shard_group": int(L["hsdp_group"][sj]) if S["hybrid"][kj] else None,
                "checkpointing": CHECKPOINTING[S["checkpointing"][kj]],
                "virtual_stages": int(L["virtual_stages"][sj]), "comm_overlap": bool(S["comm_overlap"][kj]),
                "seconds": float(m["seconds"].ravel()[j]), "headroom_bytes": float(headroom.ravel()[j])}

    out.update(peak_bytes=float(peak[at]), headroom_bytes=float(headroom[at]),
               expected_error=None if np.isnan(error[si]) else float(error[si]), bound=bound,
               collapsed=[folded_row(j) for j in folded], **{f"{k}_s": float(parts[k][at]) for k in PHASES})
    return PlanRow(out)


def _search(cfg, sysm, prec, opt, fw, grid, s: int, B: int, n_tokens: float, price, days_cap, spend, power_cap,
            objective: str, top, calibrated: bool, calibration, kernel: str, fp8: bool, progress,
            grad_reduce: str | None, schedule: str = "1f1b", modules: frozenset | None = None, hc=None) -> dict:
    """Price every candidate of ``grid`` with one attention library, fp8 setting and pipeline schedule (and the
    selective rows with Megatron-Core's recompute ``modules``, None: its default), and rank the feasible ones:
    ``rows`` (the first ``top``, each naming its ``attention_kernel``, ``fp8``, ``pipeline_schedule`` and
    ``recompute_modules``), the counts of feasible and folded candidates, the GPU counts used and the kernel
    model's source. ``hc``: the host costs of Hugging Face's eager loop, whose dispatch bounds each step from below
    (None: the engine's host side is not modelled)."""
    g, L = sysm.gpu, grid.layouts
    st, error, source = shard_table(cfg, g, L["tp"], L["cp"], L["micro_batch"], s, prec.name, opt.value, fw.value,
                                    calibrated, calibration, kernel, progress, fp8=fp8, recompute_modules=modules,
                                    dtype=prec.compute_dtype.value)
    parts = step_parts(cfg, sysm, prec, fw, st, grid, s, grad_reduce, schedule)
    step = sum(parts[k] for k in PHASES)
    host = None if hc is None else host_floor(cfg, prec, opt, grid, s, hc, kernel)
    if host is not None:
        step = np.maximum(step, host)
    total, peak = memory_per_gpu(cfg, prec, opt.value, fw.value, grid, s, fp8=fp8, grad_reduce_dtype=grad_reduce,
                                 pipeline_schedule=schedule, recompute_modules=modules)
    m = {"seconds": step, **run_metrics(cfg, g, prec, grid, step, n_tokens, B, s, sysm.gpu_power_watts, price, fp8,
                                        modules), "host_s": host}
    ok = grid.valid & np.isfinite(step) & (total <= g.usable_memory_bytes)
    if days_cap is not None:
        ok &= m["days"] <= days_cap
    if spend is not None:
        ok &= m["cost"] <= spend
    if power_cap is not None:
        ok &= grid.column("num_gpus") * sysm.gpu_power_watts / 1e3 <= power_cap
    ranked, folded = _ranked(grid, m, ok, objective)
    headroom = g.usable_memory_bytes - total
    band = np.hypot(error, parallel_model_error())
    rows = [_row(int(i), grid, m, parts, folded.get(int(i), []), headroom, peak, band)
            for i in (ranked if top is None else ranked[:top])]
    named = None if modules is None else ",".join(sorted(x.value for x in modules))
    for r in rows:
        r.update(host_bound=r["bound"] == "host", attention_kernel=kernel, fp8=fp8, pipeline_schedule=schedule,
                 recompute_modules=named if r["checkpointing"] == "selective" else None,
                 power_kw=r["num_gpus"] * sysm.gpu_power_watts / 1e3, band_s=error_band(r["seconds"], PARALLEL_STEP_REGIME))
    return {"rows": rows, "feasible": int(ok.sum()), "folded": sum(len(v) for v in folded.values()),
            "used": set(L["num_gpus"][ok.any(axis=1)].tolist()), "source": source}


@keyword_only_after(2, "tokens", "global_batch", "seq_len")
def plan_training(model: Any, gpu_or_system: Any, *, tokens: Any, global_batch: int, seq_len: int,
                  max_gpus: int | None = None, num_gpus: int | None = None, objective: str = "time",
                  precision: str = "amp_bf16", optimizer: str = "adamw", framework: str = "megatron",
                  price_per_gpu_hour: float | None = None, currency: str = "USD", max_days: float | None = None,
                  budget: float | None = None, max_power_kw: float | None = None, tp=None, pp=None, cp=None, ep=None, micro_batches=None,
                  zero_stages=None, checkpointing=None, virtual_stages=None, comm_overlap=None, hsdp=None,
                  top: int | None = 50, progress: Callable[[int, int], None] | None = None, calibrated: bool = True,
                  calibration: Any = None, host: Any = None, attention_kernel: Any = "sdpa", fp8: Any = False,
                  grad_reduce_dtype: str | None = None, pipeline_schedule: Any = "1f1b",
                  recompute_modules: Any = None) -> TrainingPlan:
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
        Search GPU counts ``1, 2, 4, ..., max_gpus`` (powers of two and ``max_gpus``), or only ``num_gpus`` (one
        count or a list: ``range(64, 4097, 8)`` searches every node count from 8 to 512 nodes). Default: one node.
    objective : {"time", "cost", "energy"}
        Rank by wall-clock time, by GPU-hours (the cost at any price), or by the run's energy (the system's power
        per GPU times GPU-hours: the cost's order where every GPU draws the same), ties broken by the time. With
        "cost" or "energy" and no ``max_days``, only runs of at most :data:`COST_DAYS` days are ranked.
    precision, optimizer : as in :func:`gpumodel.training_step_time`.
    framework : {"megatron", "hf", "fsdp", "deepspeed"}
        The training engine; the search keeps to what it runs (:data:`gpumodel.cluster.plansearch.ENGINES`:
        Megatron ZeRO-1 at most; DeepSpeed no ZeRO-2/3 with pipelines; Hugging Face data parallel only...).
    price_per_gpu_hour : float, optional
        Gives a cost column [currency per GPU-hour].
    currency : str
        The currency of the price and the budget, a label shown with the cost (default "USD").
    max_days : float, optional
        Deadline: only runs of at most this many days [days].
    budget : float, optional
        Only runs costing at most this (needs ``price_per_gpu_hour``) [currency].
    max_power_kw : float, optional
        A facility's power cap: only jobs drawing at most this (GPUs x the system's power per GPU, hosts and network
        included) [kW]; each row gives its ``power_kw``.
    tp, pp, cp, ep, micro_batches, zero_stages, checkpointing, virtual_stages, comm_overlap, hsdp : optional
        Values to search along each dimension (one value or a list); None: everything the engine runs
        (micro-batches 1 to 16 that divide the batch; any pipeline degree dividing the GPUs, uneven stages; virtual
        stages that divide the layers; ``hsdp`` False and True for FSDP's ZeRO-2/3: sharded over all the
        data-parallel ranks, or over those of a node and replicated across the nodes). A value the engine does not
        run is refused naming the argument.
    top : int or None
        Rows kept (None: all feasible).
    progress : callable, optional
        Called as ``progress(done, total)`` over the tensor-parallel degrees whose shards are evaluated.
    calibrated : bool
        Time the shards' kernels with the GPU's shipped calibration where there is one (default); False: the
        datasheet with default efficiencies.
    calibration : Calibration or path, optional
        Your own calibration of the system's GPU (a record or a YAML path): every layout's kernels are priced
        with it; one measured on another GPU is refused (naming ``calibration``).
    host : HostCosts or path, optional
        The per-op host costs of Hugging Face's eager loop (``framework="hf"``; a record or a YAML path as
        ``gpumodel calibrate --host-out`` writes; default: the shipped ones of the GPU's machine, as
        :func:`gpumodel.training_step_time` takes them). Each "hf" row's step is at least what the host needs to
        dispatch it (:func:`gpumodel.training.stepplan.dispatch_seconds`); a row held there is ``bound="host"``
        with ``host_bound=True``, and its time depends on the CPU that runs it. The other engines' host side is
        not modelled: ``host`` is refused with them (their rows say ``host_bound=False``).
    attention_kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"} or list of them
        The library whose flash kernels run every layout's 16-bit attention; a list searches each (the rows name
        theirs in ``attention_kernel``).
    fp8 : bool, str or list of them
        Transformer Engine's fp8 GEMMs (``framework="megatron"`` on a GPU with fp8 tensor cores; see
        :func:`gpumodel.training_step_time`): True plans fp8 runs with TE's default recipe (delayed scaling), a
        recipe's name (``"delayed"``, ``"current"``, ``"mxfp8"`` on Blackwell, ``"blockwise"``) with that one,
        ``[False, True]`` searches both (the rows say which in ``fp8``: False, True or the recipe's name). An fp8
        row's MFU is against the fp8 peak.
    grad_reduce_dtype : {None, "fp32", "bf16", "fp16"}
        Megatron-LM's gradient buffer and reduction format (``framework="megatron"``; None: its default), as
        :func:`gpumodel.training_step_time` takes it.
    pipeline_schedule : {"1f1b", "zero_bubble", "dualpipe"} or list of them
        The pipeline schedule (:func:`gpumodel.training_step_time`); a list searches each (the rows name theirs in
        ``pipeline_schedule``). Each schedule is searched on the layouts it runs
        (:func:`gpumodel.cluster.plansearch.for_schedule`): zero-bubble (ZB-H1) and DualPipe on pipelines of one
        model chunk a stage, DualPipe on an even ``pp`` with an even number of at least ``2 pp`` micro-batches;
        layouts without a pipeline under "1f1b" alone. Their memory is the schedule's
        (:func:`gpumodel.training_memory`: DualPipe holds two stages a GPU and ``pp + 1`` micro-batches; it is
        modelled for ``framework="megatron"`` only). DualPipe hides its expert-parallel all-to-alls and pipeline
        sends under the paired chunk whatever a row's ``comm_overlap``
        (:data:`~gpumodel.cluster.planprice.SCHEDULE_OVERLAP`); ``plan.step_arguments(rank)`` gives the keywords
        with which :func:`gpumodel.training_step_time` prices any row as the plan did, these included.
    recompute_modules : None, str or iterable of str
        Megatron-Core's ``--recompute-modules`` for every row with selective recomputation (``framework="megatron"``;
        "core_attn", "layernorm", "mla_up_proj", "mlp", "moe", "moe_act", "shared_experts"): its step and memory as
        :func:`gpumodel.training_step_time` and :func:`gpumodel.training_memory` take them, and its
        ``recompute_modules`` names them (comma-separated); rows without recomputation or with full recomputation
        ignore them (their ``recompute_modules`` is None). None: Megatron-Core's default, the attention core. The
        search must include ``checkpointing="selective"``.

    Returns
    -------
    TrainingPlan

    Examples
    --------
    >>> import gpumodel as gm
    >>> plan = gm.plan_training("llama-3-8b", "dgx-h100", tokens="1T", global_batch=512, seq_len=4096, num_gpus=64)
    >>> r = plan.best
    >>> r["num_gpus"], r["dp"] * r["tp"] * r["pp"] * r["cp"], plan.feasible > 0, plan.source
    (64, 64, True, 'transferred')
    """
    t0 = time.perf_counter()
    cfg = resolve_model(model)
    sysm = resolve_system(gpu_or_system, "gpu_or_system")
    g = sysm.gpu
    calibrated = flag(calibrated, "calibrated")
    calibration = resolve_calibration(calibration, g)   # a path read once; another GPU's record refused
    prec = _precision(precision)
    fw = choice(Framework, framework, "framework")
    if host is not None and fw != Framework.HF:
        raise ArgumentError(f"host= prices Hugging Face's eager loop (framework='hf'); framework={fw.value!r}'s host "
                            "side is not modelled", argument="host", value=host, allowed="None, or framework='hf'")
    hc = host_costs_for(g.name, host) if fw == Framework.HF else None
    kernels = list(dict.fromkeys(_sweep(attention_kernel, "attention_kernel",
                                        lambda v, name: attention_kernel_on(v, g, prec.compute_dtype.value, name).value)))
    opt = choice(Optimizer, optimizer, "optimizer")
    def fp8_value(v, name):   # False, True (Transformer Engine's default recipe) or a recipe's name
        recipe = fp8_recipe(v, fw, g, name)
        return False if recipe is None else True if isinstance(v, (bool, np.bool_)) else recipe.value

    fp8s = list(dict.fromkeys(_sweep(fp8, "fp8", fp8_value)))
    schedules = list(dict.fromkeys(_sweep(pipeline_schedule, "pipeline_schedule",
                                          lambda v, name: check_pipeline_schedule(v, framework=fw, name=name).value)))
    modules = None if recompute_modules is None else recompute_modules_of(recompute_modules, Checkpointing.SELECTIVE,
                                                                           fw, cfg)
    reduce_fmt = grad_reduce_dtype_of(grad_reduce_dtype, fw)
    reduce_fmt = None if reduce_fmt is None else reduce_fmt.value
    if not isinstance(objective, str) or objective not in _OBJECTIVES:
        raise ArgumentError(f"objective={objective!r} is not one of 'time', 'cost', 'energy'", argument="objective",
                            value=objective, allowed="'time', 'cost', 'energy'")
    n_tokens = token_count(tokens)
    B = _one(global_batch, "global_batch", positive_int)
    s = _one(seq_len, "seq_len", positive_int)
    search = dict(tp=_sweep(tp, "tp", positive_int), pp=_sweep(pp, "pp", positive_int), cp=_sweep(cp, "cp", positive_int),
                  ep=_sweep(ep, "ep", positive_int), micro_batches=_sweep(micro_batches, "micro_batches", positive_int),
                  virtual_stages=_sweep(virtual_stages, "virtual_stages", positive_int),
                  zero_stages=_sweep(zero_stages, "zero_stages", lambda x, name: bounded_int(x, name, 0, 3).item()),
                  checkpointing=_sweep(checkpointing, "checkpointing", lambda x, name: checkpointing_mode(x, name).value),
                  comm_overlap=_sweep(comm_overlap, "comm_overlap", flag), hsdp=_sweep(hsdp, "hsdp", flag))
    if top is not None:
        top = _one(top, "top", positive_int)
    if progress is not None and not callable(progress):
        raise ArgumentTypeError(f"progress must be a function progress(done, total) or None, "
                                f"got {type(progress).__name__}")
    counts = _gpu_counts(sysm, num_gpus, max_gpus)
    price = None if price_per_gpu_hour is None else _one(price_per_gpu_hour, "price_per_gpu_hour", positive_number)
    days_cap = None if max_days is None else _one(max_days, "max_days", positive_number)
    spend = None if budget is None else _one(budget, "budget", positive_number)
    power_cap = None if max_power_kw is None else _one(max_power_kw, "max_power_kw", positive_number)
    if spend is not None and price is None:
        raise ArgumentError("budget needs price_per_gpu_hour (the budget is a cost)", argument="budget", value=budget,
                            allowed="a budget together with price_per_gpu_hour")
    if not isinstance(currency, str) or not currency.strip():
        raise ArgumentError(f"currency must be a label such as 'USD', got {currency!r}", argument="currency",
                            value=currency, allowed="a non-empty string")
    notes = []
    if objective != "time" and days_cap is None:
        days_cap = COST_DAYS
        notes.append(f"ranked by {objective} among runs of at most {COST_DAYS:g} days (no deadline given; the cheapest run "
                     "is otherwise the one on the fewest GPUs, for years): set max_days (--deadline) to change it")

    grid, searched = candidates(cfg, sysm.gpus_per_node, counts, B, s, fw, **search)
    if not grid.size:
        raise ArgumentError(f"no layout divides {cfg.name}, {_shown(counts)} GPUs and global_batch={B}",
                            argument="global_batch", value=B, allowed="a multiple of dp x micro-batch")
    if len(kernels) > 1:
        searched["attention_kernel"] = kernels
    if len(fp8s) > 1:
        searched["fp8"] = fp8s
    if modules is not None:
        if "selective" not in searched["checkpointing"]:
            raise ArgumentError(f"recompute_modules names what selective recomputation re-runs; the search has "
                                f"checkpointing={searched['checkpointing']!r}: add 'selective'",
                                argument="recompute_modules", value=recompute_modules,
                                allowed="None, or a search that includes checkpointing='selective'")
        searched["recompute_modules"] = sorted(x.value for x in modules)
    grids = schedule_grids(grid, schedules, pipeline_schedule, f"{cfg.name} on {_shown(counts)} GPUs", notes)
    if len(schedules) > 1:
        searched["pipeline_schedule"] = schedules
    rows, feasible, n_folded, used, source = [], 0, 0, set(), ""
    for sched, sub in grids.items():
        if not sub.size:
            continue
        for kernel in kernels:
            for f8 in fp8s:
                found = _search(cfg, sysm, prec, opt, fw, sub, s, B, n_tokens, price, days_cap, spend, power_cap,
                                objective, top, calibrated, calibration, kernel, f8, progress, reduce_fmt, sched,
                                modules, hc)
                rows += found["rows"]
                feasible, n_folded = feasible + found["feasible"], n_folded + found["folded"]
                used |= found["used"]
                source = source or found["source"]
    primary, secondary = _RANK_KEYS[objective]
    rows.sort(key=lambda r: (r[primary], r[secondary]))
    rows = rows if top is None else rows[:top]
    held = sum(r["host_bound"] for r in rows)
    if held:
        notes.append(f"{held} of {len(rows)} rows are host-bound: their step is what the host needs to dispatch "
                     f"Hugging Face's eager loop, so it depends on the CPU (measure yours with gpumodel calibrate "
                     f"--host-out host.yaml and give it as host= or --host-costs)")
    if n_folded:
        notes.append(f"{n_folded:,} near-duplicate layouts collapsed: same GPUs, degrees, micro-batch and "
                     f"recomputation within {NEAR_DUPLICATE:.0%} of the fastest step, the simplest setting kept (lower "
                     "ZeRO stage, no HSDP, fewer virtual stages, no overlap); each row lists them in 'collapsed'")
    _, detail = model_for(g, calibrated=calibrated, calibration=calibration)
    used = sorted(used)
    if used and counts[-1] not in used:
        notes.append(f"no layout of all {counts[-1]} GPUs divides the model and the batch and fits"
                     + (f" within {days_cap:g} days" if days_cap is not None else "")
                     + (f" under {power_cap:g} kW" if power_cap is not None else "") + f"; the largest used is {used[-1]}")
    best_err = rows[0]["expected_error"] if rows else None
    return TrainingPlan(model=cfg.name, system=sysm.name, tokens=n_tokens, global_batch=B, seq_len=s,
                        objective=objective, rows=rows,
                        candidates=sum(gr.size for gr in grids.values()) * len(kernels) * len(fp8s),
                        feasible=feasible, search_s=time.perf_counter() - t0, attention_kernel=",".join(kernels),
                        fp8=",".join(map(str, fp8s)) if len(fp8s) > 1 else fp8s[0], pipeline_schedule=",".join(schedules),
                        recompute_modules=None if modules is None else ",".join(searched["recompute_modules"]),
                        gpu=g.name, framework=fw.value, grad_reduce_dtype=reduce_fmt,
                        precision=prec.name, optimizer=opt.value, price_per_gpu_hour=price, currency=currency,
                        max_days=days_cap, budget=spend, max_power_kw=power_cap, source=source, source_detail=detail,
                        expected_error=best_err, collapsed=n_folded, gpu_counts=counts, searched=searched,
                        notes=notes)

