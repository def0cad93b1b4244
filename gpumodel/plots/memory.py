"""Stacked-bar plot of memory breakdowns (the ``plot`` extra: matplotlib is imported inside)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..base.errors import ArgumentError, ArgumentTypeError
from ..vocabulary import resolve_gpu

__all__ = ["plot_memory_breakdown"]


def _results(results) -> dict:
    """``{label: result}`` from a mapping or a sequence of memory results, each of one run (no arrays)."""
    if isinstance(results, (str, bytes)) or not hasattr(results, "__iter__"):
        raise ArgumentTypeError(f"results must be a mapping label -> memory result or a list of them, "
                                f"got {type(results).__name__}")
    if not isinstance(results, Mapping):
        results = {str(i): r for i, r in enumerate(results)}
    if not results:
        raise ArgumentError("results is empty; give at least one TrainingMemory or InferenceMemory")
    for label, r in results.items():
        breakdown = getattr(r, "breakdown", None)
        if not isinstance(breakdown, Mapping):
            raise ArgumentTypeError(f"results[{label!r}] must be a TrainingMemory or InferenceMemory, "
                                    f"got {type(r).__name__}")
        if any(np.ndim(v) for v in breakdown.values()):
            raise ArgumentError(f"results[{label!r}] holds arrays (a sweep); plot one run per bar")
    return dict(results)


def plot_memory_breakdown(results: Mapping[str, object] | Sequence[object], gpu=None, ax=None, unit: str = "GiB"):
    """Stacked bars of ``breakdown`` components, one bar per result.

    Parameters
    ----------
    results : mapping label -> TrainingMemory/InferenceMemory, or a sequence of them
    gpu : GPUSpec or str, optional
        Draws the GPU's memory as a horizontal line.
    ax : matplotlib Axes, optional
    unit : {"GiB", "GB"}

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import gpumodel as gm
    >>> runs = {f"b={b}": gm.training_memory("llama-3.2-1b", b, 2048) for b in (1, 4)}
    >>> ax = plot_memory_breakdown(runs, gpu="h100")
    >>> len(ax.patches) > 0
    True
    """
    results = _results(results)
    if unit not in ("GiB", "GB"):
        raise ArgumentError(f"unit={unit!r} is not one of 'GiB', 'GB'")
    g = resolve_gpu(gpu) if gpu is not None else None
    import matplotlib.pyplot as plt

    scale = 2 ** 30 if unit == "GiB" else 1e9
    if ax is None:
        _, ax = plt.subplots(figsize=(1.2 + 1.1 * len(results), 4))
    labels = list(results)
    components: list[str] = []
    for r in results.values():
        components += [c for c in r.breakdown if c not in components]
    bottom = [0.0] * len(labels)
    cmap = plt.get_cmap("tab20")  # one colour per component: a training breakdown has more than ten
    for i, comp in enumerate(components):
        vals = [float(results[k].breakdown.get(comp, 0.0)) / scale for k in labels]
        if not any(vals):
            continue
        ax.bar(labels, vals, bottom=bottom, label=comp.replace("_", " "), color=cmap(i % 20))
        bottom = [b + v for b, v in zip(bottom, vals)]
    if g is not None:
        ax.axhline(g.usable_memory_bytes / scale, color="k", ls="--", lw=1)
        ax.text(len(labels) - 0.5, g.usable_memory_bytes / scale, f" {g.name}", va="bottom", ha="right", fontsize=8)
    ax.set_ylabel(f"memory at the peak [{unit}]")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return ax
