"""Charts for slides and notebooks (the ``plot`` extra: ``pip install 'gpumodel[plot]'``).

The edge of the package: every chart draws numbers the layers below compute. matplotlib is imported
inside each function, so importing this package never needs it.

* :mod:`~gpumodel.plots.charts` - rooflines of GPUs and ops, GPU comparisons;
* :mod:`~gpumodel.plots.memory` - stacked bars of memory breakdowns;
* :mod:`~gpumodel.plots.occupancy` - occupancy over block size, registers and shared memory;
* :mod:`~gpumodel.plots.serving` - a serving capacity's throughput-latency curve.
"""

from __future__ import annotations

from .charts import compare_gpus, roofline
from .memory import plot_memory_breakdown
from .occupancy import plot_occupancy
from .serving import plot_serving_curve

__all__ = ["roofline", "compare_gpus", "plot_memory_breakdown", "plot_occupancy", "plot_serving_curve"]
