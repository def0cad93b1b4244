"""The Plan page: the ranked parallel layouts of a training run (:func:`gpumodel.plan_training`) and its chart.

The table is the planner's own (:meth:`gpumodel.TrainingPlan.headers` and ``table``: the columns the command
line prints, whatever fields the rows gain); the chart draws every feasible layout's days against its GPU count
and the cost front (:func:`gpumodel.plots.plan.plot_plan`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import gpumodel as gm
from ..vocabulary import FP8_SEARCH, resolve_system
from . import charts
from .forms import Field, Form, blame, count, gpu_counts, number, optional
from .inputs import model_argument, model_field, system_names
from .page import esc, facts, message, section, table

__all__ = ["form", "answer", "TOP", "CHART_ROWS"]

#: Rows of the ranked table shown.
TOP = 15
#: Layouts the chart draws at most, the first-ranked (building a row costs about 40 us: a search of a million
#: layouts keeps its answer within a second or two).
CHART_ROWS = 20_000


@functools.lru_cache(maxsize=1)
def form() -> Form:
    """The Plan page's inputs; the default form answers in well under 2 s (one node to eight nodes)."""
    return Form("plan", (
        model_field("llama-3-8b"),
        Field("system", "system or GPU", "dgx-h100", "a system, or nodes of a GPU", suggestions=system_names(),
              arguments=("gpu_or_system", "gpu")),
        Field("gpus", "GPUs", "8-64", "64; 8-64 (powers of two); 8,24,64; or 64:512:64",
              arguments=("num_gpus", "max_gpus")),
        Field("tokens", "tokens", "1T", "to train on: 300B, 1T, 15T"),
        Field("global_batch", "global batch", "512", "sequences per optimizer step"),
        Field("seq", "sequence", "4096", "tokens per sequence", arguments=("seq_len",)),
        Field("framework", "framework", "megatron", choices=("megatron", "fsdp", "deepspeed", "hf")),
        Field("objective", "rank by", "time", "cost: GPU-hours within the deadline; energy: MWh within it",
              choices=("time", "cost", "energy")),
        Field("fp8", "fp8", "off", "Transformer Engine's fp8 GEMMs (megatron, on a GPU with fp8): both searches each; "
              "on is its default recipe, delayed scaling; mxfp8 needs Blackwell",
              choices=tuple(FP8_SEARCH)),
        Field("attention", "attention kernel", "sdpa", "sdpa, cudnn, fa2, fa3, flashinfer, triton; a comma list "
              "searches each", arguments=("attention_kernel",)),
        Field("schedule", "pipeline schedule", "1f1b", "1f1b, zero_bubble, dualpipe; a comma list searches each",
              arguments=("pipeline_schedule",)),
        Field("recompute", "recompute modules", "", "megatron's selective rows: core_attn (its default), layernorm, "
              "mla_up_proj, mlp, moe, moe_act, shared_experts; a comma list recomputes each",
              arguments=("recompute_modules",)),
        Field("price", "price per GPU-hour", "", "optional, adds a cost column (USD)",
              arguments=("price_per_gpu_hour",)),
        Field("deadline", "deadline [days]", "", "optional: runs of at most this many days", arguments=("max_days",)),
    ))


def answer(values: dict[str, str], config: dict | None) -> tuple[str, dict[str, Any]]:
    """The answer's HTML and its numbers (``plan``: the TrainingPlan, ``rows``: its rows, at most
    :data:`CHART_ROWS`).

    Raises the library's errors (:class:`~gpumodel.base.errors.GpumodelError`), tied to a field where one is
    at fault.
    """
    t0 = time.perf_counter()
    counts = gpu_counts(values["gpus"])
    cfg = model_argument(values, config)
    with blame("system"):
        sysm = resolve_system(values["system"], "gpu_or_system")
    price = None if optional(values, "price") is None else number(values, "price")
    deadline = None if optional(values, "deadline") is None else number(values, "deadline")
    plan = gm.plan_training(cfg, sysm, tokens=values["tokens"], global_batch=count(values, "global_batch"),
                            seq_len=count(values, "seq"), num_gpus=counts if len(counts) > 1 else counts[0],
                            objective=values["objective"], framework=values["framework"], price_per_gpu_hour=price,
                            max_days=deadline, top=CHART_ROWS, fp8=FP8_SEARCH[values["fp8"]],
                            attention_kernel=_names(values["attention"]), pipeline_schedule=_names(values["schedule"]),
                            recompute_modules=optional(values, "recompute"))   # a comma list, as the library reads it
    rows, counts = plan.rows, plan.gpu_counts
    parts = [_summary(plan, rows, counts)]
    if not rows:
        parts.append(message("No layout fits: more GPUs, a smaller global batch or sequence, or a later deadline.",
                             "bad", "no-layout"))
    else:
        parts.append(section("Ranked layouts", table(plan.headers(), plan.table(TOP), table_id="plan-table")
                             + _legend(plan), "ranked"))
        drawn = (f'<p class="lead">The chart draws the {CHART_ROWS:,} first-ranked of the {plan.feasible:,} '
                 "layouts that fit.</p>" if len(rows) >= CHART_ROWS else "")
        parts.append(section("Time and cost against GPU count", '<div class="chart">'
                             + charts.plan_chart(plan) + "</div>" + drawn, "chart"))
    parts.append(f'<p class="lead">Answered in {time.perf_counter() - t0:.2f} s (search {plan.search_s:.2f} s); '
                 "times are modelled, not measured.</p>")
    return "".join(parts), {"plan": plan, "rows": rows, "model_name": plan.model}


def _names(text: str) -> str | list[str]:
    """A comma list of names as the planner takes it: one name, or a list that it searches.

    >>> _names("sdpa"), _names(" 1f1b, dualpipe ")
    ('sdpa', ['1f1b', 'dualpipe'])
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    return names[0] if len(names) == 1 else names


def _summary(plan, rows: list, counts: list) -> str:
    err = "unknown (nothing measured backs it)" if plan.expected_error is None else f"about {plan.expected_error:.0%}"
    lines = [("job", plan.headline()), ("GPU counts searched", ", ".join(map(str, counts)) or "none"),
             ("GPU numbers", plan.source_detail or plan.source), ("expected error of a step", err)]
    if rows:
        best = rows[0]
        lines.insert(0, ("best", f"{best['num_gpus']} GPUs, {best['days']:,.2f} days, MFU {best['mfu']:.1%}"
                         + (f", {best['cost']:,.0f} {plan.currency}" if best.get("cost") is not None else "")))
    return section("Answer", facts(lines) + _notes(plan.notes), "answer")


def _notes(notes: list[str]) -> str:
    if not notes:
        return ""
    items = "".join(f"<li>{esc(n)}.</li>" for n in notes)
    return f'<details id="notes"><summary>Notes of the planner ({len(notes)})</summary><ul>{items}</ul></details>'


def _legend(plan) -> str:
    items = "".join(f"<li>{esc(line)}</li>" for line in plan.legend(10 ** 6))
    return f"<details><summary>What the columns mean</summary><ul>{items}</ul></details>"
