"""The occupancy calculator's three charts: occupancy over block size, registers and shared memory.

Needs matplotlib (the ``plot`` extra), imported inside the function.

Examples
--------
>>> import gpumodel as gm
>>> from gpumodel.plots.occupancy import plot_occupancy
>>> fig = plot_occupancy("h100", threads_per_block=256, registers_per_thread=64)
>>> [ax.get_xlabel() for ax in fig.axes]
['threads per block', 'registers per thread', 'shared memory per block [KiB]']
"""

from __future__ import annotations

from typing import Any

from ..core.occupancy_helpers import occupancy_curves
from ..core.occupancy import occupancy, resolve_arch

__all__ = ["plot_occupancy"]

_LABELS = {
    "threads_per_block": ("threads per block", 1),
    "registers_per_thread": ("registers per thread", 1),
    "shared_memory_per_block": ("shared memory per block [KiB]", 1024),
}


def plot_occupancy(gpu_or_cc: Any, threads_per_block: int, registers_per_thread: int, static_shared_bytes: int = 0,
                   dynamic_shared_bytes: int = 0, carveout: int | None = None, *, fig=None):
    """Draw :func:`gpumodel.occupancy_curves` as three step charts, the configuration marked; returns the figure.

    Parameters
    ----------
    gpu_or_cc : GPUSpec, str or ArchLimits
        A GPU record or name ("h100") or a compute capability ("9.0", "sm_86").
    threads_per_block : int
        Block size [threads], 1..1024.
    registers_per_thread : int
        Registers per thread (``numRegs``), 0..255.
    static_shared_bytes, dynamic_shared_bytes : int
        Static and dynamic shared memory per block [bytes].
    carveout : int or None
        Preferred shared-memory carveout [percent], 0..100; None or -1 = default.
    fig : matplotlib.figure.Figure, optional
        Figure to draw the three axes in (a new 13 x 3.6 inch figure when omitted).

    Returns
    -------
    matplotlib.figure.Figure
        Three axes: occupancy [% of max warps] over threads per block, registers per thread and shared
        memory per block [KiB], with the configuration marked.
    """
    import matplotlib.pyplot as plt

    curves = occupancy_curves(gpu_or_cc, threads_per_block, registers_per_thread, static_shared_bytes,
                              dynamic_shared_bytes, carveout)
    now = occupancy(gpu_or_cc, threads_per_block, registers_per_thread, static_shared_bytes, dynamic_shared_bytes,
                    carveout)
    limits, gpu = resolve_arch(gpu_or_cc)
    if fig is None:
        fig = plt.figure(figsize=(13, 3.6))
    axes = fig.subplots(1, 3, sharey=True)
    for ax, (key, curve) in zip(axes, curves.items()):
        label, scale = _LABELS[key]
        ax.step(curve.x / scale, curve.occupancy * 100, where="post", color="tab:blue")
        ax.plot([curve.current / scale], [now.occupancy * 100], "o", color="tab:red", zorder=3,
                label=f"this kernel: {now.occupancy:.0%}")
        ax.set_xlabel(label)
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("occupancy [% of max warps]")
    axes[0].legend(loc="lower left", fontsize="small")
    name = gpu.name if gpu is not None else f"cc {limits.compute_capability}"
    fig.suptitle(f"{name}: {threads_per_block} threads, {registers_per_thread} regs/thread, "
                 f"{int(static_shared_bytes) + int(dynamic_shared_bytes)} B shared/block -> {now.blocks_per_sm} blocks/SM, "
                 f"limited by {now.limiter}")
    fig.tight_layout()
    return fig
