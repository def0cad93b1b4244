"""The pages' charts, drawn on the server with matplotlib and inlined as SVG (no script, no network).

matplotlib (the ``plot`` extra, part of the ``ui`` extra) is imported inside the functions. Figures are made
with :class:`matplotlib.figure.Figure`, not pyplot, so that no global figure state is shared between requests;
text stays text in the SVG (``svg.fonttype: none``), which keeps it small and sharp.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from ..cluster.planresult import pareto_front
from ..plots.memory import plot_memory_breakdown
from ..plots.plan import plain_log_ticks, plot_plan

__all__ = ["svg", "plan_chart", "fit_chart", "serve_chart", "pareto_front"]

GiB = 2 ** 30
_BLUE, _ORANGE = "#1f5fbf", "#e07b00"


def _figure(width: float, height: float, ncols: int = 1, right: float = 0.98):
    """A figure of ``ncols`` axes in a row, with fixed margins (a layout engine would measure every label: slow)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    fig.subplots_adjust(left=0.85 / width, right=right, bottom=0.55 / height, top=1 - 0.35 / height, wspace=0.3)
    return fig, list(axes)


def svg(fig: Any) -> str:
    """The figure as an inline ``<svg>`` element (no XML header, no date)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def plan_chart(plan: Any) -> str:
    """Days against GPU count (the layouts, the fastest of each count, the cost front), and cost against days,
    of a :class:`~gpumodel.TrainingPlan`'s rows (:func:`gpumodel.plots.plan.plot_plan` draws them)."""
    fig, axes = _figure(10.5, 3.9, 2)
    plot_plan(plan, axes=axes)
    return svg(fig)


def fit_chart(results: dict, gpu: Any) -> str:
    """Stacked bars of each run's memory at its peak, topped by the allocator reserve and CUDA context, against
    the GPU's usable memory (:func:`gpumodel.plots.memory.plot_memory_breakdown` draws the components).

    ``results`` maps a label to a :class:`~gpumodel.TrainingMemory`.
    """
    width = 3.6 + 1.4 * len(results)
    fig, (ax,) = _figure(width, 4.2, right=1 - 2.3 / width)
    plot_memory_breakdown(results, gpu=gpu, ax=ax)
    labels = list(results)
    extra = [(float(results[k].total_bytes) - float(results[k].peak_bytes)) / GiB for k in labels]
    peaks = [float(results[k].peak_bytes) / GiB for k in labels]
    ax.bar(labels, extra, bottom=peaks, color="white", edgecolor="#555", hatch="///", lw=0.6,
           label="allocator reserve + CUDA context")
    ax.set_ylabel("memory per GPU [GiB]")
    ax.set_title(f"Memory against the {gpu.name}'s {gpu.usable_memory_bytes / GiB:.1f} GiB", fontsize=11)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return svg(fig)


def serve_chart(cap: Any) -> str:
    """Throughput against concurrency, and the latencies against it with the targets drawn (a
    :class:`~gpumodel.ServingCapacity`)."""
    c = cap.curve
    conc = np.asarray(c["concurrency"], float)
    fig, (left, right) = _figure(10.5, 3.9, 2)
    left.plot(conc, np.asarray(c["output_tokens_per_s"], float), "-", color=_BLUE, label="output tokens/s")
    right.plot(conc, np.asarray(c["tpot_s"], float) * 1e3, "-", color=_BLUE, label="time per output token")
    right.plot(conc, np.asarray(c["ttft_s"], float) * 1e3, "-", color=_ORANGE, label="time to first token")
    for slo, color, name in ((cap.tpot_slo, _BLUE, "TPOT target"), (cap.ttft_slo, _ORANGE, "TTFT target")):
        if slo is not None:
            right.axhline(slo * 1e3, color=color, ls="--", lw=1, label=name)
    if cap.concurrency:
        for ax in (left, right):
            ax.axvline(cap.concurrency, color="black", ls=":", lw=1)
        left.scatter([cap.concurrency], [cap.output_tokens_per_s], marker="*", s=140, color="black", zorder=5,
                     label=f"operating point: {cap.concurrency} in flight ({cap.limiter})")
    for ax, where in ((left, "upper left"), (right, "center left")):
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.set_xlabel("requests in flight (concurrency)")
        ax.grid(True, alpha=0.25)
        ax.legend(fontsize=8, frameon=False, loc=where)
    right.set_yscale("log")
    plain_log_ticks(right.yaxis)
    left.set_ylabel(f"output tokens/s of one replica ({cap.tp} GPU{'s' if cap.tp > 1 else ''})")
    right.set_ylabel("latency [ms]")
    left.set_title("Throughput against concurrency", fontsize=11)
    right.set_title("Latency against concurrency", fontsize=11)
    return svg(fig)
