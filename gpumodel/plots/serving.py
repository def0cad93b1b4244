"""Throughput-latency curve of a serving capacity (the ``plot`` extra: matplotlib is imported inside)."""

from __future__ import annotations

from ..serving.capacity import ServingCapacity

__all__ = ["plot_serving_curve"]


def plot_serving_curve(capacities, ax=None, per_gpu: bool = True):
    """Output tokens/s against time per output token, one line per :class:`ServingCapacity`.

    Parameters
    ----------
    capacities : ServingCapacity, sequence of them, or mapping label -> ServingCapacity
    ax : matplotlib Axes, optional
    per_gpu : bool
        Divide the throughput by the replica's GPUs (compares replicas of different ``tp``).

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import gpumodel as gm
    >>> cap = gm.serving_capacity("llama-3-8b", "h100", prompt_len=1024, output_len=256, tpot_slo=0.05)
    >>> ax = plot_serving_curve(cap)
    >>> len(ax.lines)       # the curve and the TPOT target
    2
    """
    import matplotlib.pyplot as plt

    if isinstance(capacities, ServingCapacity):
        capacities = {f"{capacities.model} on {capacities.tp} x {capacities.gpu}": capacities}
    elif not hasattr(capacities, "items"):
        capacities = {f"{c.model} on {c.tp} x {c.gpu}": c for c in capacities}
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    slos = set()
    for label, cap in capacities.items():
        c = cap.curve
        div = cap.tp if per_gpu else 1
        (line,) = ax.plot(c["tpot_s"] * 1e3, c["output_tokens_per_s"] / div, marker=".", label=label)
        if cap.concurrency:
            ax.scatter([cap.tpot_s * 1e3], [cap.output_tokens_per_s / div], s=60, color=line.get_color(), zorder=3)
            ax.annotate(f"{cap.concurrency} in flight", (cap.tpot_s * 1e3, cap.output_tokens_per_s / div),
                        textcoords="offset points", xytext=(6, -12), fontsize=8)
        if cap.tpot_slo is not None:
            slos.add(cap.tpot_slo)
    for slo in sorted(slos):
        ax.axvline(slo * 1e3, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("time per output token [ms]")
    ax.set_ylabel("output tokens/s" + (" per GPU" if per_gpu else ""))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
