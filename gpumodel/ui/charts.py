"""The pages' charts, drawn on the server with matplotlib and inlined as SVG (no script, no network).

matplotlib (the ``plot`` extra, part of the ``ui`` extra) is imported inside the functions. Figures are made
with :class:`matplotlib.figure.Figure`, not pyplot, so that no global figure state is shared between requests;
text stays text in the SVG (``svg.fonttype: none``), which keeps it small and sharp.
"""

from __future__ import annotations

import io
from typing import Any, Sequence

import numpy as np

from ..plots.memory import plot_memory_breakdown

__all__ = ["svg", "plan_chart", "fit_chart", "serve_chart", "pareto_front"]

GiB = 2 ** 30
#: Layouts drawn per GPU count in the plan chart's cloud (the fastest ones): the SVG stays small.
POINTS_PER_COUNT = 60
_BLUE, _ORANGE, _GRAY = "#1f5fbf", "#e07b00", "#9aa3b2"


def _figure(width: float, height: float, ncols: int = 1, right: float = 0.98):
    """A figure of ``ncols`` axes in a row, with fixed margins (a layout engine would measure every label: slow)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    fig.subplots_adjust(left=0.85 / width, right=right, bottom=0.55 / height, top=1 - 0.35 / height, wspace=0.3)
    return fig, list(axes)


def _plain_log_ticks(axis) -> None:
    """Ticks of a log axis at 1, 2, 5, 10... labelled as plain numbers, no minor ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.6g}"))
    axis.set_minor_locator(NullLocator())


def svg(fig: Any) -> str:
    """The figure as an inline ``<svg>`` element (no XML header, no date)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def pareto_front(x: Sequence[float], y: Sequence[float]) -> np.ndarray:
    """Indices of the points no other point beats on both ``x`` and ``y`` (smaller is better), by ``x``.

    >>> pareto_front([1, 2, 3, 4], [9, 5, 7, 1]).tolist()
    [0, 1, 3]
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    order = np.lexsort((y, x))
    keep, best = [], np.inf
    for i in order:
        if y[i] < best:
            keep.append(i)
            best = y[i]
    return np.asarray(keep, dtype=int)


def plan_chart(rows: Sequence[dict], best: dict, cost_key: str = "gpu_hours", cost_label: str = "GPU-hours") -> str:
    """Days against GPU count (the layouts, the fastest of each count, the cost front), and cost against days.

    ``rows`` are plan rows (dicts with ``num_gpus``, ``days`` and ``cost_key``) of every GPU count, ``best`` the
    first-ranked one (a star).
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    n = np.array([r["num_gpus"] for r in rows], float)
    days = np.array([r["days"] for r in rows], float)
    cost = np.array([r[cost_key] for r in rows], float)
    fig, (left, right) = _figure(10.5, 3.9, 2)
    counts = np.unique(n)
    cloud = np.concatenate([np.flatnonzero(n == c)[np.argsort(days[n == c])][:POINTS_PER_COUNT] for c in counts])
    fastest = np.array([days[n == c].min() for c in counts])
    front = pareto_front(days, cost)
    left.scatter(n[cloud], days[cloud], s=9, color=_GRAY, alpha=0.45, lw=0, label=f"layouts (the {POINTS_PER_COUNT} fastest of each count)")
    left.plot(counts, fastest, "-o", color=_BLUE, ms=5, label="fastest layout")
    left.scatter(n[front], days[front], s=46, facecolors="none", edgecolors=_ORANGE, lw=1.6, zorder=4,
                 label=f"cost front (fewest {cost_label} for the days)")
    left.scatter([best["num_gpus"]], [best["days"]], marker="*", s=150, color="black", zorder=5, label="rank 1")
    left.set_xscale("log", base=2)
    if len(counts) <= 12:
        left.set_xticks(counts, [f"{int(c)}" for c in counts])
    else:   # every node count of a long sweep: powers of two
        left.xaxis.set_major_locator(LogLocator(base=2))
        left.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
        left.xaxis.set_minor_locator(NullLocator())
    left.set_yscale("log")
    _plain_log_ticks(left.yaxis)
    left.set_xlabel("GPUs")
    left.set_ylabel("days of the run")
    left.set_title("Time against GPU count", fontsize=11)
    left.grid(True, alpha=0.25)
    left.legend(fontsize=8, frameon=False, loc="upper right")
    right.scatter(days[cloud], cost[cloud], s=9, color=_GRAY, alpha=0.45, lw=0)
    right.plot(days[front], cost[front], "-o", color=_ORANGE, ms=4, label="cost front")
    for i in front[:8]:
        right.annotate(f"{int(n[i])}", (days[i], cost[i]), textcoords="offset points", xytext=(4, 4), fontsize=7,
                       color=_ORANGE)
    right.scatter([best["days"]], [best[cost_key]], marker="*", s=150, color="black", zorder=5, label="rank 1")
    right.set_xscale("log")
    _plain_log_ticks(right.xaxis)
    right.set_xlabel("days of the run")
    right.set_ylabel(cost_label)
    right.yaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    right.set_title(f"{cost_label} against days (labels: GPUs)", fontsize=11)
    right.grid(True, alpha=0.25)
    right.legend(fontsize=8, frameon=False, loc="best")
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
        _plain_log_ticks(ax.xaxis)
        ax.set_xlabel("requests in flight (concurrency)")
        ax.grid(True, alpha=0.25)
        ax.legend(fontsize=8, frameon=False, loc=where)
    right.set_yscale("log")
    _plain_log_ticks(right.yaxis)
    left.set_ylabel(f"output tokens/s of one replica ({cap.tp} GPU{'s' if cap.tp > 1 else ''})")
    right.set_ylabel("latency [ms]")
    left.set_title("Throughput against concurrency", fontsize=11)
    right.set_title("Latency against concurrency", fontsize=11)
    return svg(fig)
