"""Charts for slides and notebooks (the ``plot`` extra: ``pip install 'gpumodel[plot]'``).

The edge of the package: every chart draws numbers the layers below compute. matplotlib is imported
inside each function, so importing this package never needs it. ``gm.plot(result)`` draws a result with
its chart (:func:`plot`); the charts are also called by name:

* :mod:`~gpumodel.plots.charts` - rooflines of GPUs and ops, GPU comparisons;
* :mod:`~gpumodel.plots.memory` - stacked bars of memory breakdowns;
* :mod:`~gpumodel.plots.occupancy` - occupancy over block size, registers and shared memory;
* :mod:`~gpumodel.plots.plan` - a training plan's days against GPU count and its cost/days front;
* :mod:`~gpumodel.plots.serving` - a serving capacity's throughput-latency curve.
"""

from __future__ import annotations

from typing import Any

from ..base.callmodule import make_callable
from ..base.errors import ArgumentTypeError
from ..cluster.planresult import TrainingPlan
from ..serving import ServingCapacity
from .charts import compare_gpus, roofline
from .memory import plot_memory_breakdown
from .occupancy import plot_occupancy
from .plan import plot_plan
from .serving import plot_serving_curve

__all__ = ["plot", "roofline", "compare_gpus", "plot_memory_breakdown", "plot_occupancy", "plot_plan",
           "plot_serving_curve"]


def plot(result: Any, **kwargs: Any) -> Any:
    """Draw a result with its chart: ``gm.plot(plan)``.

    Parameters
    ----------
    result : TrainingPlan, ServingCapacity, TrainingMemory or InferenceMemory
        A plan (:func:`plot_plan`), a serving capacity (:func:`plot_serving_curve`) or a memory result
        (:func:`plot_memory_breakdown`).
    **kwargs
        Passed on to that chart's function.

    Returns
    -------
    matplotlib.figure.Figure or matplotlib.axes.Axes
        What the chart's function returns: the figure of a plan, the axes of the others.
    """
    if isinstance(result, TrainingPlan):
        return plot_plan(result, **kwargs)
    if isinstance(result, ServingCapacity):
        return plot_serving_curve(result, **kwargs)
    if hasattr(result, "breakdown") and hasattr(result, "peak_bytes"):
        return plot_memory_breakdown([result], **kwargs)
    raise ArgumentTypeError(f"gm.plot draws a TrainingPlan, ServingCapacity, TrainingMemory or InferenceMemory, got "
                            f"{type(result).__name__} (the other charts: gm.plot.roofline, gm.plot.plot_occupancy)",
                            argument="result", value=result,
                            allowed="TrainingPlan, ServingCapacity, TrainingMemory, InferenceMemory")


make_callable(__name__, plot)
