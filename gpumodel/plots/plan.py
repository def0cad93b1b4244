"""A training plan's two charts: days against GPU count, and the cost against days with its Pareto front.

Needs matplotlib (the ``plot`` extra), imported inside the functions. One drawing serves notebooks
(``gm.plot(plan)``), ``gpumodel plan --plot`` and the web page's Plan chart.

Examples
--------
>>> import matplotlib
>>> matplotlib.use("Agg")
>>> import gpumodel as gm
>>> plan = gm.plan_training("llama-3.2-1b", "dgx-h100", tokens="10B", seq_len=2048, global_batch=64, top=200)
>>> fig = plot_plan(plan)
>>> [ax.get_xlabel() for ax in fig.axes]
['GPUs', 'days of the run']
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.errors import ArgumentTypeError, UnsupportedError
from ..cluster.planresult import TrainingPlan

__all__ = ["plot_plan", "plain_log_ticks", "POINTS_PER_COUNT"]

#: Layouts drawn per GPU count in the cloud of the charts (the fastest ones): an SVG of them stays small.
POINTS_PER_COUNT = 60
_BLUE, _ORANGE, _GRAY = "#1f5fbf", "#e07b00", "#9aa3b2"


def plain_log_ticks(axis: Any) -> None:
    """Put the ticks of a log axis at 1, 2, 5, 10... labelled as plain numbers, with no minor ticks.

    Parameters
    ----------
    axis : matplotlib.axis.Axis
        The axis (``ax.xaxis`` or ``ax.yaxis``) of a log-scaled axes.

    Returns
    -------
    None
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.6g}"))
    axis.set_minor_locator(NullLocator())


def plot_plan(plan: TrainingPlan, axes: Any = None, cost: str | None = None, points_per_count: int = POINTS_PER_COUNT):
    """Draw a plan's days against GPU count (the layouts, the fastest of each count, the cost front) and its
    cost against days (the Pareto front, :meth:`~gpumodel.TrainingPlan.pareto`); the first-ranked row starred.

    Parameters
    ----------
    plan : TrainingPlan
        What :func:`gpumodel.plan_training` returned; its kept rows are drawn (``top`` sets how many).
    axes : pair of matplotlib Axes, optional
        The left and right axes to draw in (a new 10.5 x 3.9 inch figure of two when omitted).
    cost : {"cost", "gpu_hours", "energy_kwh"} or None
        The cost drawn against the days; None: the cost with a price, else the GPU-hours.
    points_per_count : int
        Layouts drawn per GPU count, the fastest ones.

    Returns
    -------
    matplotlib.figure.Figure
        The figure of the two axes: "Time against GPU count" and the cost against days.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    if not isinstance(plan, TrainingPlan):
        raise ArgumentTypeError(f"plan must be a TrainingPlan (what gm.plan_training returns), got "
                                f"{type(plan).__name__}", argument="plan", value=plan, allowed="a TrainingPlan")
    if not plan.rows:
        raise UnsupportedError(f"the plan of {plan.model} on {plan.system} has no rows to draw (no layout fits)")
    key, label = plan.cost_key()
    if cost is not None:
        key, label = cost, {"cost": f"cost [{plan.currency}]", "gpu_hours": "GPU-hours",
                            "energy_kwh": "energy [kWh]"}.get(cost, cost)
    front_rows = plan.pareto(key)
    rows, best = plan.rows, plan.rows[0]
    if axes is None:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.9), constrained_layout=True)
    left, right = axes
    n = np.array([r["num_gpus"] for r in rows], float)
    days = np.array([r["days"] for r in rows], float)
    spend = np.array([r[key] for r in rows], float)
    counts = np.unique(n)
    cloud = np.concatenate([np.flatnonzero(n == c)[np.argsort(days[n == c])][:points_per_count] for c in counts])
    fastest = np.array([days[n == c].min() for c in counts])
    fn = np.array([r["num_gpus"] for r in front_rows], float)
    fd = np.array([r["days"] for r in front_rows], float)
    fc = np.array([r[key] for r in front_rows], float)
    left.scatter(n[cloud], days[cloud], s=9, color=_GRAY, alpha=0.45, lw=0,
                 label=f"layouts (the {points_per_count} fastest of each count)")
    left.plot(counts, fastest, "-o", color=_BLUE, ms=5, label="fastest layout")
    left.scatter(fn, fd, s=46, facecolors="none", edgecolors=_ORANGE, lw=1.6, zorder=4,
                 label="cost front (no run both faster and cheaper)")
    left.scatter([best["num_gpus"]], [best["days"]], marker="*", s=150, color="black", zorder=5, label="rank 1")
    left.set_xscale("log", base=2)
    if len(counts) <= 12:
        left.set_xticks(counts, [f"{int(c)}" for c in counts])
    else:   # every node count of a long sweep: powers of two
        left.xaxis.set_major_locator(LogLocator(base=2))
        left.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
        left.xaxis.set_minor_locator(NullLocator())
    left.set_yscale("log")
    plain_log_ticks(left.yaxis)
    left.set_xlabel("GPUs")
    left.set_ylabel("days of the run")
    left.set_title("Time against GPU count", fontsize=11)
    left.grid(True, alpha=0.25)
    left.legend(fontsize=8, frameon=False, loc="upper right")
    right.scatter(days[cloud], spend[cloud], s=9, color=_GRAY, alpha=0.45, lw=0)
    right.plot(fd, fc, "-o", color=_ORANGE, ms=4, label="cost front")
    for i in range(min(8, len(front_rows))):
        right.annotate(f"{int(fn[i])}", (fd[i], fc[i]), textcoords="offset points", xytext=(4, 4), fontsize=7,
                       color=_ORANGE)
    right.scatter([best["days"]], [best[key]], marker="*", s=150, color="black", zorder=5, label="rank 1")
    right.set_xscale("log")
    plain_log_ticks(right.xaxis)
    right.set_xlabel("days of the run")
    right.set_ylabel(label)
    right.yaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    right.set_title(f"{label} against days (labels: GPUs)", fontsize=11)
    right.grid(True, alpha=0.25)
    right.legend(fontsize=8, frameon=False, loc="best")
    return left.figure
