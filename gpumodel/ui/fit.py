"""The Fit page: a training run's memory per GPU against the card (:func:`gpumodel.training_memory`), and the
largest batch and sequence that fit (:func:`gpumodel.max_batch_size`, :func:`gpumodel.max_seq_len`)."""

from __future__ import annotations

import functools
from typing import Any

import gpumodel as gm
from ..vocabulary import resolve_gpu
from . import charts
from .forms import Field, Form, blame, count
from .inputs import gpu_names, model_argument, model_field
from .page import facts, message, section, table

__all__ = ["form", "answer", "SEQ_MULTIPLE"]

GiB = 2 ** 30
#: The largest sequence that fits is given as a multiple of this [tokens].
SEQ_MULTIPLE = 128


@functools.lru_cache(maxsize=1)
def form() -> Form:
    """The Fit page's inputs: the run, then its parallel layout (by default FSDP's full shard over one node)."""
    return Form("fit", (
        model_field("llama-3-8b"),
        Field("gpu", "GPU", "h100", suggestions=gpu_names()),
        Field("batch", "micro-batch per GPU", "2", "sequences", arguments=("batch_size",)),
        Field("seq", "sequence", "4096", "tokens", arguments=("seq_len",)),
        Field("precision", "precision", "amp_bf16", choices=("amp_bf16", "amp_fp16", "bf16", "fp16", "fp32")),
        Field("optimizer", "optimizer", "adamw",
              choices=("adamw", "adam", "adamw_8bit", "adafactor", "sgd_momentum", "sgd")),
        Field("checkpointing", "recomputation", "full", "activation checkpointing",
              choices=("none", "selective", "full")),
        Field("framework", "framework", "fsdp", choices=("fsdp", "hf", "deepspeed", "megatron")),
        Field("dp", "data parallel", "8", "GPUs sharing the batch"),
        Field("tp", "tensor parallel", "1"),
        Field("pp", "pipeline parallel", "1"),
        Field("zero", "ZeRO stage", "3", "0-3: what the data-parallel GPUs shard", choices=("0", "1", "2", "3"),
              arguments=("zero_stage",)),
    ))


def answer(values: dict[str, str], config: dict | None) -> tuple[str, dict[str, Any]]:
    """The answer's HTML and its numbers (``memory``, ``fits``, ``max_batch``, ``max_seq``)."""
    cfg = model_argument(values, config)
    with blame("gpu"):
        g = resolve_gpu(values["gpu"], "gpu")
    batch, seq = count(values, "batch"), count(values, "seq")
    options = dict(precision=values["precision"], optimizer=values["optimizer"], checkpointing=values["checkpointing"],
                   framework=values["framework"], dp=count(values, "dp"), tp=count(values, "tp"),
                   pp=count(values, "pp"), zero=count(values, "zero", minimum=0))
    mem = gm.training_memory(cfg, batch, seq, **options)
    capacity = g.usable_memory_bytes
    margin = gm.memory_margin(cfg, g, batch, seq, **options)     # gm.fits's answer, with what it compared
    fits, need = bool(margin.fits), float(margin.needed_bytes)
    max_batch = int(gm.max_batch_size(cfg, g, seq_len=seq, **options))
    max_seq = int(gm.max_seq_len(cfg, g, batch_size=batch, multiple_of=SEQ_MULTIPLE, **options))
    runs = {f"batch {batch} x {seq}": mem}
    if max_batch and max_batch != batch:
        runs[f"largest: batch {max_batch}"] = gm.training_memory(cfg, max_batch, seq, **options)
    if fits:
        verdict = f"fits: {need / GiB:,.1f} of {capacity / GiB:,.1f} GiB, {(capacity - need) / GiB:,.1f} GiB free"
    else:
        verdict = f"does not fit: needs {need / GiB:,.1f} GiB, the {g.name} offers {capacity / GiB:,.1f} GiB"
    if margin.uncertain:
        verdict += " (at the edge: within the estimate's 80% band, it could go either way)"
    lines = [("answer", verdict),
             ("largest micro-batch that fits", f"{max_batch} at {seq:,} tokens" if max_batch else
              f"none: one sequence of {seq:,} tokens does not fit"),
             ("longest sequence that fits", f"{max_seq:,} tokens at batch {batch} (a multiple of {SEQ_MULTIPLE})"
              if max_seq else f"none at batch {batch}"),
             ("peak", f"{mem.peak_bytes / GiB:,.2f} GiB allocated at {mem.peak_moment.replace('_', ' ')}"),
             ("with reserve and context", f"{mem.total_bytes / GiB:,.2f} GiB (the fixed allocator reserve)"),
             ("decided on", f"{need / GiB:,.2f} GiB: {margin.method}"),
             ("card", f"{g.name}: {capacity / GiB:,.1f} GiB usable")]
    parts = [section("Answer", facts(lines), "answer"),
             "" if fits else message(verdict[0].upper() + verdict[1:] + ".", "bad", "no-fit"),
             section("Memory breakdown", '<div class="chart">' + charts.fit_chart(runs, g) + "</div>"
                     + _breakdown(runs), "breakdown")]
    return "".join(parts), {"memory": mem, "fits": fits, "max_batch": max_batch, "max_seq": max_seq,
                               "model_name": cfg.name}


def _breakdown(runs: dict) -> str:
    labels = list(runs)
    components: list[str] = []
    for m in runs.values():
        components += [c for c in m.breakdown if c not in components and any(float(r.breakdown.get(c, 0)) > 0
                                                                               for r in runs.values())]
    rows = [[c.replace("_", " ")] + [f"{float(runs[k].breakdown.get(c, 0.0)) / GiB:,.2f}" for k in labels]
            for c in components]
    rows.append(["peak (allocated)"] + [f"{float(runs[k].peak_bytes) / GiB:,.2f}" for k in labels])
    rows.append(["total (reserve, context)"] + [f"{float(runs[k].total_bytes) / GiB:,.2f}" for k in labels])
    return table(["GiB at the peak"] + labels, rows, table_id="breakdown-table")
