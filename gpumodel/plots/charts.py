"""Charts for slides and notebooks (the ``plot`` extra: ``pip install 'gpumodel[plot]'``).

matplotlib is imported inside each function, so ``import gpumodel`` never needs it. Every
function draws on ``ax`` when given (else on a new figure) and returns the Figure.

Examples
--------
>>> import gpumodel as gm
>>> fig = gm.plot.roofline("h100", ops={"matmul 4096^3": gm.ops.matmul(4096, 4096, 4096, "fp16"),
...                                     "ReLU": gm.ops.elementwise(4096 * 4096, "fp16")})
>>> fig.axes[0].get_xscale(), fig.axes[0].get_yscale()
('log', 'log')
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..base.errors import ArgumentError, ArgumentTypeError, UnknownNameError  # noqa: F401
from ..records.gpu import GPUSpec, UnsupportedDTypeError
from ..core.ops import OpCost
from ..vocabulary.gpus import gpu
from ..core.roofline import arithmetic_intensity, roofline as roof
from ..core.comparison import compare

__all__ = ["roofline", "compare_gpus"]

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
_LINESTYLES = ("-", "--", "-.", ":")
_LABEL_OFFSETS = ((6, -14), (-6, 8), (6, 4), (-6, -16))


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("gpumodel.plots needs matplotlib: pip install 'gpumodel[plot]'") from exc
    return plt


def _figure(ax: Any, figsize: tuple[float, float]):
    plt = _pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax.figure, ax


def _as_gpus(gpus: Any) -> list[GPUSpec]:
    if isinstance(gpus, (str, GPUSpec)):
        gpus = [gpus]
    return [gpu(g) for g in gpus]


def _as_ops(ops: Any) -> list[tuple[str, OpCost]]:
    if ops is None:
        return []
    if isinstance(ops, OpCost):
        ops = [ops]
    items = list(ops.items()) if isinstance(ops, Mapping) else [(op.label, op) for op in ops]
    for label, op in items:
        if not isinstance(op, OpCost):
            raise ArgumentTypeError(f"ops must hold OpCost values (from gpumodel.core.ops); {label!r} is {type(op).__name__}")
    return [(str(label), op) for label, op in items]


def _dtype_for(g: GPUSpec, dt: str) -> str | None:
    if g.supports(dt):
        return dt
    if dt == "bf16" and g.supports("fp16"):  # Volta/Turing: no bf16, the fp16 tensor rate
        return "fp16"
    return None


def roofline(gpus: GPUSpec | str | Iterable[GPUSpec | str], ops: Sequence[OpCost] | Mapping[str, OpCost] | None = None,
             dtypes: Sequence[str] = ("bf16",), ax: Any = None, level: str | Sequence[str] = "hbm",
             sparse: bool = False, title: str | None = None):
    """Roofline chart on log-log axes: one ceiling per GPU, dtype and memory level, ops placed on it.

    Parameters
    ----------
    gpus : GPUSpec, str or sequence of them
        One colour per GPU.
    ops : sequence of OpCost or mapping label -> OpCost, optional
        Labelled by the mapping's keys, else by :attr:`OpCost.label` (name and sizes).
        Each op is drawn at its arithmetic intensity (total traffic) and its attainable throughput
        on each GPU (:func:`gpumodel.core.roofline.roofline`): black on the first GPU, gray on the
        others, one marker per op, listed in a legend (and labelled beside the point for up to
        four ops). An op of array shapes draws one point per configuration.
    dtypes : sequence of str
        Compute ceilings to draw, one line style each ("bf16", "fp8", "tf32", "fp32", ...); a
        GPU without a dtype is skipped (bf16 falls back to fp16 on GPUs without bf16).
    ax : matplotlib Axes, optional
    level : str or sequence of str
        Memory level(s) for the slope ("hbm", "l2", "shared"); ops are placed on the first.
    sparse : bool
        2:4 sparse tensor peaks.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    fig, ax = _figure(ax, (8, 5.5))
    specs = _as_gpus(gpus)
    items = _as_ops(ops)
    lvls = [level] if isinstance(level, str) else list(level)
    if not lvls:
        raise ArgumentError("level must name at least one memory level")

    intensities = [np.asarray(arithmetic_intensity(op), dtype=float).ravel() for _, op in items]
    finite = np.concatenate([a[np.isfinite(a) & (a > 0)] for a in intensities] or [np.array([])])
    lo = min(0.1, finite.min() / 3) if finite.size else 0.1
    hi = max(1e4, finite.max() * 3) if finite.size else 1e4
    x = np.logspace(np.log10(lo), np.log10(hi), 256)

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = [(di, d, li, lv) for di, d in enumerate(dtypes) for li, lv in enumerate(lvls)]
    for gi, g in enumerate(specs):
        color = colors[gi % len(colors)]
        for di, d, li, lv in styles:
            dt = _dtype_for(g, d)
            if dt is None:
                continue
            try:
                cuda_cores = dt in ("fp32", "fp64")  # sparsity is a tensor-core feature
                peak, bw = g.peak_flops(dt, sparse=sparse and not cuda_cores), g.bandwidth(lv)
            except (UnsupportedDTypeError, ValueError):
                continue
            label = g.name + (f" {dt}" if len(dtypes) > 1 or dt != d else "") + (f" {lv}" if len(lvls) > 1 else "")
            ax.plot(x, np.minimum(peak, x * bw) / 1e12, color=color, ls=_LINESTYLES[di % len(_LINESTYLES)],
                    lw=2 if li == 0 else 1.2, alpha=1.0 if li == 0 else 0.55, label=f"{label} (ridge {peak / bw:.0f})")
            ax.plot([peak / bw], [peak / 1e12], marker="|", ms=12, color=color)

    annotate = len(items) <= 4
    op_handles = []
    for oi, ((label, op), ai) in enumerate(zip(items, intensities)):
        marker = _MARKERS[oi % len(_MARKERS)]
        first = True
        for g in specs:
            try:
                r = roof(op, g, level=lvls[0], sparse=sparse and op.unit == "tensor")
            except (UnsupportedDTypeError, ValueError) as exc:
                warnings.warn(f"{label} not placed on {g.name}: {exc}", stacklevel=2)
                continue
            y = np.asarray(r.attainable_flops, dtype=float).ravel() / 1e12
            handle = ax.scatter(ai, y, marker=marker, s=50, color="black" if first else "gray", zorder=4 if first else 3,
                                edgecolors="white", linewidths=0.5, label=label if first else None)
            if first:
                op_handles.append(handle)
                if annotate:
                    i = int(np.nanargmax(y)) if y.size > 1 else 0
                    offset = _LABEL_OFFSETS[oi % len(_LABEL_OFFSETS)]
                    ax.annotate(label, (ai[i], y[i]), xytext=offset, textcoords="offset points", fontsize=9)
                first = False

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("Arithmetic intensity [FLOP/byte]")
    ax.set_ylabel("Attainable throughput [TFLOP/s]")
    ax.set_title(title or "Roofline: " + ", ".join(g.display_name for g in specs))
    ax.grid(True, which="both", alpha=0.25)
    roofs = [h for h in ax.get_lines() if not h.get_label().startswith("_")]
    ax.legend(handles=roofs, fontsize=8, loc="lower right")
    if op_handles:
        ax.add_artist(ax.get_legend())
        ax.legend(handles=op_handles, fontsize=8, loc="upper left", title="ops (black: first GPU)",
                  title_fontsize=8)
    return fig


#: the four spec-sheet metrics of Brenndoerfer (2026), see :mod:`gpumodel.core.comparison`:
#: compare column -> panel title
COMPARE_METRICS = {
    "bandwidth_tbs": "Memory bandwidth [TB/s]",
    "bf16_tflops": "Dense FP16/BF16 tensor [TFLOP/s]",
    "memory_gb": "Memory [GB]",
    "tdp_w": "TDP [W]",
}


def compare_gpus(names: Iterable[str | GPUSpec] | None = None, axes: Any = None):
    """Bar chart of GPUs on the four spec-sheet metrics: bandwidth, 16-bit tensor peak, memory, TDP.

    Parameters
    ----------
    names : sequence of str or GPUSpec, optional
        GPUs to compare (all known GPUs when omitted).
    axes : array of 4 matplotlib Axes, optional
        Axes to draw the four bar charts in (a new figure when omitted).

    Returns
    -------
    matplotlib.figure.Figure
        Values from :func:`gpumodel.compare` (bf16 falls back to fp16 where a GPU has no bf16).
    """
    plt = _pyplot()
    table = compare(names, columns=["name", *COMPARE_METRICS])
    if axes is None:
        fig, axes = plt.subplots(2, 2, figsize=(10, 6.5), layout="constrained")
    axes = np.asarray(axes).ravel()
    if axes.size != len(COMPARE_METRICS):
        raise ArgumentError(f"axes must hold {len(COMPARE_METRICS)} Axes, got {axes.size}")
    labels = table["name"]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (column, title) in zip(axes, COMPARE_METRICS.items()):
        values = [np.nan if v is None else float(v) for v in table[column]]
        bars = ax.bar(labels, values, color=[colors[i % len(colors)] for i in range(len(labels))])
        ax.bar_label(bars, labels=["n/a" if np.isnan(v) else f"{v:g}" for v in values], fontsize=8)
        ax.set_title(title)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.margins(y=0.15)
    fig = axes[0].figure
    fig.suptitle("GPU spec-sheet comparison")
    return fig
