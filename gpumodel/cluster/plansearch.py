"""The layouts a training job may run on: every one its engine runs, as arrays, before any is priced.

A layout is ``dp x tp x pp x cp`` GPUs (``ep`` carved out of ``dp x cp`` for a mixture of experts), a
ZeRO stage, activation recomputation, a micro-batch, virtual pipeline stages and, for Megatron-Core,
communication overlap. :data:`ENGINES` says what each training engine runs; the search keeps to it and to
the rules the engines enforce, so that no layout is priced that a framework would refuse:

* a pipeline of ``pp`` stages gets at least ``pp`` micro-batches a step (fewer leave stages idle, where the
  1F1B bubble formula does not hold), and with virtual stages a multiple of ``pp`` (Megatron-LM's
  interleaved schedule asserts it);
* virtual stages divide the layers evenly (``L % (pp v) == 0``), or the layers and two more (Megatron-Core's
  ``--decoder-first/last-pipeline-num-layers``: one layer fewer on the first and the last stage, which hold the
  embedding and the LM head, as Llama 3 405B cuts its 126 layers into 16 x 4 x 2); a pipeline degree that does
  not divide the layers gets ``ceil(L / pp)`` layers on its slowest stage (uneven stages);
* ZeRO shards over ``dp x cp > 1`` ranks; ZeRO-2 and -3 do not run with pipelines (DeepSpeed's pipeline
  engine refuses them; FSDP's full shard would gather the weights every micro-batch); FSDP also runs them as HSDP
  (the ``hybrid`` setting), sharded over the ``hsdp_group`` data-parallel ranks of a node and replicated across the
  nodes, where that group is smaller than ``dp x cp``;
* expert-parallel degrees divide the experts and ``dp x cp``; from :data:`MOE_EP_GPUS` GPUs on, a mixture of at
  least 8 experts is searched with ``ep > 1`` only;
* tensor-parallel degrees split the heads, key/value heads and MLP width and stay inside a node;
  context-parallel degrees halve the sequence into ``2 cp`` chunks of at least 512 tokens (Megatron's
  load-balanced causal split);
* a pipeline schedule other than 1F1B (:func:`for_schedule`) runs the pipelines of one model chunk a stage
  (zero-bubble and DualPipe are not interleaved), DualPipe those of an even ``pp`` fed an even number of at least
  ``2 pp`` micro-batches (:func:`gpumodel.vocabulary.schedule_runs`); the layouts without a pipeline are searched
  under 1F1B alone, where every schedule is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base.errors import ArgumentError
from ..vocabulary import Framework, PipelineSchedule, schedule_runs
from ..vocabulary.parallel_rules import splits_model

__all__ = ["Grid", "Engine", "ENGINES", "CHECKPOINTING", "MICRO_BATCHES", "MOE_EP_GPUS", "candidates", "divisors",
           "for_schedule", "schedule_grids"]

#: Recomputation codes of the arrays: 0 none, 1 selective, 2 full.
CHECKPOINTING = ("none", "selective", "full")
#: Micro-batches searched by default [sequences]: each that divides a replica's share of the global batch.
MICRO_BATCHES = tuple(range(1, 17))
#: From this many GPUs on, a mixture of at least 8 experts is searched with expert parallelism only (ep > 1): how
#: every published run at that scale trains one (Mixtral on Megatron-Core, DeepSeek-V3, the NeMo recipes).
MOE_EP_GPUS = 64


@dataclass(frozen=True)
class Grid:
    """The candidates: ``layouts`` (arrays of the degrees, micro-batch and accumulation steps, one row a layout)
    times ``settings`` (arrays of the ZeRO stage, recomputation code and overlap, one column a setting), and
    ``valid`` (layouts x settings) where the engine runs the pair. A layout's kernel times and collectives are
    the same under every setting: they are priced once per row, and broadcast over the columns."""

    layouts: dict
    settings: dict
    valid: np.ndarray

    @property
    def size(self) -> int:
        """Candidates: valid (layout, setting) pairs."""
        return int(self.valid.sum())

    def column(self, name: str) -> np.ndarray:
        """A layout field as a column (rows, 1) or a setting as a row (1, settings), to broadcast together."""
        return self.layouts[name][:, None] if name in self.layouts else self.settings[name][None, :]


@dataclass(frozen=True)
class Engine:
    """What a training engine runs: its ZeRO stages, recomputation modes, parallel dimensions and overlap."""

    zero: tuple
    checkpointing: tuple
    tp: bool
    pp: bool
    cp: bool
    ep: bool
    virtual_stages: bool
    comm_overlap: tuple


#: Megatron-LM/Core: ZeRO-1 at most (its distributed optimizer), selective or full recomputation, every
#: parallel dimension, interleaved pipelines and communication overlap. DeepSpeed (with Megatron-DeepSpeed's tensor
#: parallelism and Ulysses' sequence parallelism): ZeRO 0-3, full recomputation, no interleaved schedule.
#: PyTorch FSDP (torchtitan's composition with DTensor tensor and context parallelism and torch's pipelining):
#: no sharding (DDP), SHARD_GRAD_OP (ZeRO-2) or FULL_SHARD (ZeRO-3), full recomputation. Hugging Face's
#: Trainer alone: data parallel (DDP), gradient checkpointing.
ENGINES = {
    Framework.MEGATRON: Engine((0, 1), CHECKPOINTING, True, True, True, True, True, (False, True)),
    Framework.DEEPSPEED: Engine((0, 1, 2, 3), ("none", "full"), True, True, True, True, False, (False,)),
    Framework.FSDP: Engine((0, 2, 3), ("none", "full"), True, True, True, False, False, (False,)),
    Framework.HF: Engine((0,), ("none", "full"), False, False, False, False, False, (False,)),
}


def divisors(n: int, limit: int | None = None) -> list[int]:
    """The divisors of ``n`` up to ``limit`` (all when None), ascending.

    >>> divisors(80, 16)
    [1, 2, 4, 5, 8, 10, 16]
    """
    limit = n if limit is None else min(n, limit)
    return [d for d in range(1, limit + 1) if n % d == 0]


def _values(given: Any, default: tuple, allowed: tuple, name: str, framework: Framework) -> list:
    """The values searched along one dimension: the engine's (``given`` None) or those given, which it must run."""
    if given is None:
        return list(default)
    refused = [v for v in given if v not in allowed]
    if refused:
        shown = ", ".join(map(repr, allowed)) if allowed else "none"
        raise ArgumentError(f"framework={framework.value!r} does not run {name}={refused[0]!r}; it runs {shown}",
                            argument=name, value=refused[0], allowed=shown)
    return list(dict.fromkeys(given))


def _dimension(given: Any, default: list, name: str, runs: bool, framework: Framework) -> list:
    if given is None:
        return default if runs else [1]
    if not runs and any(v != 1 for v in given):
        raise ArgumentError(f"framework={framework.value!r} has no {name} > 1 in the planner's search",
                            argument=name, value=list(given), allowed="1")
    return list(dict.fromkeys(given))


def candidates(cfg: Any, gpus_per_node: int, counts: list[int], global_batch: int, seq_len: int,
               framework: Framework, *, tp=None, pp=None, cp=None, ep=None, micro_batches=None, zero_stages=None,
               checkpointing=None, virtual_stages=None, comm_overlap=None, hsdp=None) -> tuple[Grid, dict]:
    """Every layout the engine runs for the job, as arrays (see the module docstring for the rules).

    Parameters
    ----------
    cfg : TransformerConfig
    gpus_per_node : int
        Tensor-parallel degrees stay inside a node.
    counts : list of int
        GPU counts.
    global_batch, seq_len : int
        Sequences per step, tokens per sequence.
    framework : Framework
    tp, pp, cp, ep, micro_batches, zero_stages, checkpointing, virtual_stages, comm_overlap, hsdp : list, optional
        The values to search (None: everything the engine runs; ``checkpointing`` as names; ``hsdp`` True for FSDP's
        hybrid shard, which no other engine runs).

    Returns
    -------
    (Grid, dict)
        The layouts (``num_gpus, dp, tp, pp, cp, ep, virtual_stages, micro_batch, micro_batches``: accumulation
        steps, ``hsdp_group``: the data-parallel ranks of a node) times the settings (``zero, checkpointing``: codes
        of :data:`CHECKPOINTING`, ``comm_overlap``, ``hybrid``: HSDP over ``hsdp_group``), and the values searched
        along each dimension.
    """
    eng = ENGINES[framework]
    L, B, s = cfg.num_layers, global_batch, seq_len
    tps = _dimension(tp, [t for t in divisors(cfg.num_heads, gpus_per_node) if splits_model(cfg, t)], "tp", eng.tp,
                     framework)
    cps = _dimension(cp, [c for c in (2 ** k for k in range(0, 7)) if s % (2 * c) == 0 and s // (2 * c) >= 512]
                     or [1], "cp", eng.cp, framework)
    eps = _dimension(ep, [e for e in divisors(cfg.num_experts, 64) if e & (e - 1) == 0] if cfg.is_moe else [1],
                     "ep", eng.ep and cfg.is_moe, framework)
    pps = set(_dimension(pp, list(range(1, L + 1)), "pp", eng.pp, framework))
    vs_given = _dimension(virtual_stages, [], "virtual_stages", eng.virtual_stages, framework)
    mbs = list(dict.fromkeys(micro_batches)) if micro_batches is not None else list(MICRO_BATCHES)
    zs = _values(zero_stages, eng.zero, eng.zero, "zero_stages", framework)
    cks = _values(checkpointing, eng.checkpointing, eng.checkpointing, "checkpointing", framework)
    ovs = _values(comm_overlap, eng.comm_overlap, eng.comm_overlap, "comm_overlap", framework)

    # the degrees that divide, (n, tp, cp, pp, dp, ep, v), for every GPU count at once
    ns_all, P = np.array(counts, dtype=np.int64), np.array(sorted(p for p in pps if p <= L), dtype=np.int64)
    vlist = {int(p): [1] + [v for v in range(2, L // p + 1) if L % (p * v) == 0 or (L + 2) % (p * v) == 0]
             if p > 1 else [1] for p in P}
    if virtual_stages is not None or not eng.virtual_stages:
        vlist = {p: [v for v in vs if v in (vs_given or [1])] for p, vs in vlist.items()}
    parts = []
    for t in tps:
        for c in cps:
            ns = ns_all[ns_all % (t * c) == 0]
            rest = ns // (t * c)
            i, j = np.nonzero(rest[:, None] % P[None, :] == 0)
            n, p = ns[i], P[j]
            d = rest[i] // p
            ok = (B % d == 0) & ((p == 1) | (B // d >= p))
            n, p, d = n[ok], p[ok], d[ok]
            for e in eps:
                ke = (d * c) % e == 0
                if e == 1 and len(eps) > 1 and cfg.num_experts >= 8:
                    ke &= n < MOE_EP_GPUS           # a mixture of >= 8 experts at scale runs expert parallel
                for pv in np.unique(p[ke]):
                    sel = ke & (p == pv)
                    for v in vlist[int(pv)]:
                        k = int(sel.sum())
                        parts.append(np.stack([n[sel], np.full(k, t), np.full(k, c), p[sel], d[sel], np.full(k, e),
                                               np.full(k, v)], axis=1))
    searched = {"tp": tps, "cp": cps, "pp": sorted(pps) if pp is not None else "any that divides the GPUs",
                "ep": eps, "micro_batch": mbs, "zero": zs, "checkpointing": cks, "comm_overlap": ovs,
                "virtual_stages": sorted(vs_given) if virtual_stages is not None else "any that divides the layers"}
    if not parts:
        return Grid({}, {}, np.zeros((0, 0), bool)), searched
    S = np.concatenate(parts).astype(np.int64)
    # micro-batches (they divide the batch and feed the pipeline), then the settings as a second axis
    mb = np.tile(np.asarray(mbs, dtype=np.int64), len(S))
    n, t, c, p, d, e, v = np.repeat(S, len(mbs), axis=0).T
    m = B // np.maximum(d * mb, 1)
    keep = (B % (d * mb) == 0) & ((p == 1) | (m >= p))     # a micro-batch for every stage
    keep &= (v == 1) | (m % p == 0)                        # the interleaved schedule: a multiple of pp
    layouts = dict(num_gpus=n, dp=d, tp=t, pp=p, cp=c, ep=e, virtual_stages=v, micro_batch=mb, micro_batches=m)
    layouts = {k: a[keep] for k, a in layouts.items()}
    # HSDP (FSDP's hybrid shard): ZeRO 2/3 within the data-parallel ranks of a node, replicated across the nodes
    dpcp = layouts["dp"] * layouts["cp"]
    layouts["hsdp_group"] = np.gcd(dpcp, np.maximum(gpus_per_node // layouts["tp"], 1))
    runs_hsdp = framework == Framework.FSDP and any(zv >= 2 for zv in zs)
    hyb = [int(h) for h in _values(hsdp, (False, True) if runs_hsdp else (False,),
                                   (False, True) if framework == Framework.FSDP else (False,), "hsdp", framework)]
    searched["hsdp"] = [bool(h) for h in hyb]
    z, ck, ov, hy = np.array(np.meshgrid(zs, [CHECKPOINTING.index(c) for c in cks], [int(o) for o in ovs], hyb,
                                         indexing="ij")).reshape(4, -1)
    settings = dict(zero=z, checkpointing=ck, comm_overlap=ov.astype(bool), hybrid=hy.astype(bool))
    group = dpcp[:, None]
    valid = ((z == 0) | (group > 1)) & ~((z >= 2) & (layouts["pp"][:, None] > 1))   # ZeRO over dp x cp; not 2/3 with pp
    node = layouts["hsdp_group"][:, None]
    valid &= ~settings["hybrid"] | ((z >= 2) & (node > 1) & (node < group))          # a node's shard of a larger group
    return Grid(layouts, settings, valid), searched


def for_schedule(grid: Grid, schedule: str) -> Grid:
    """The candidates of ``grid`` that a pipeline schedule runs (see the module docstring).

    Parameters
    ----------
    grid : Grid
        The candidates of :func:`candidates`.
    schedule : {"1f1b", "zero_bubble", "dualpipe"}

    Returns
    -------
    Grid
        ``grid`` itself under 1F1B; else its layouts with a pipeline (``pp > 1``) that the schedule runs.

    Examples
    --------
    >>> import gpumodel as gm
    >>> grid, _ = candidates(gm.model("llama-3-8b"), 8, [16], 64, 4096, Framework.MEGATRON)
    >>> dual = for_schedule(grid, "dualpipe").layouts
    >>> bool(((dual["pp"] % 2 == 0) & (dual["virtual_stages"] == 1) & (dual["micro_batches"] >= 2 * dual["pp"])).all())
    True
    """
    if schedule == PipelineSchedule.ONE_F_ONE_B or not grid.layouts:
        return grid
    L = grid.layouts
    keep = (L["pp"] > 1) & schedule_runs(schedule, L["pp"], L["virtual_stages"], L["micro_batches"])
    return Grid({k: a[keep] for k, a in L.items()}, grid.settings, grid.valid[keep])


def schedule_grids(grid: Grid, schedules: list, given: Any, job: str, notes: list) -> dict:
    """The candidates each of ``schedules`` runs (:func:`for_schedule`), by schedule; a schedule with none adds a
    line to ``notes``, and none at all is an error naming ``pipeline_schedule`` (``given``: its value; ``job``: the
    model and GPUs, for the message)."""
    grids = {sched: for_schedule(grid, sched) for sched in schedules}
    needs = {"zero_bubble": "a pipeline (pp > 1) of one model chunk a stage",
             "dualpipe": "a pipeline of one model chunk a stage, an even pp and an even number of at least 2 pp "
                         "micro-batches"}
    if not any(g.size for g in grids.values()):
        raise ArgumentError(f"no layout of {job} runs pipeline_schedule={'/'.join(schedules)}: "
                            + "; ".join(f"{k} needs {v}" for k, v in needs.items() if k in schedules),
                            argument="pipeline_schedule", value=given,
                            allowed="'1f1b', or more GPUs, pipeline stages or micro-batches")
    notes.extend(f"no layout runs pipeline_schedule={sched!r}: it needs {needs[sched]}"
                 for sched, g in grids.items() if not g.size)
    return grids
