"""Stacked-bar plot of memory breakdowns (the ``plot`` extra: matplotlib is imported inside)."""

from __future__ import annotations

from typing import Mapping, Sequence

__all__ = ["plot_memory_breakdown"]


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
    import matplotlib.pyplot as plt

    if not isinstance(results, Mapping):
        results = {str(i): r for i, r in enumerate(results)}
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
    if gpu is not None:
        from .gpus import gpu as _gpu

        g = _gpu(gpu) if isinstance(gpu, str) else gpu
        ax.axhline(g.usable_memory_bytes / scale, color="k", ls="--", lw=1)
        ax.text(len(labels) - 0.5, g.usable_memory_bytes / scale, f" {g.name}", va="bottom", ha="right", fontsize=8)
    ax.set_ylabel(f"memory at the peak [{unit}]")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return ax
