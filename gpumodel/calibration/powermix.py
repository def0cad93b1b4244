"""Mixes of compute- and memory-bound work under the board's power limit: the share of the time in compute-bound
kernels up to which the GPU holds its boost clock.

A GEMM alternating with a memory-bound filler, sized to take ``ratio`` times the GEMM's time, runs back to back past
the clock's fall (25-100 ms into the load); then each GEMM and filler is timed with CUDA events. Against the GEMM's
time at the boost clock and back to back alone, each mix gives the share of the full slowdown it takes at its
compute share :math:`f`. :func:`power_share_threshold` reduces the mixes to the threshold :math:`f_0` of
:func:`gpumodel.calibration.sustained.clock_share`; ``gpumodel calibrate`` measures a few mixes with the sustained
kernels (:func:`measure_power_mixes`: rows with ``op`` ``"power_mix"``) and keeps the threshold as the record's
``power_share_threshold``; ``bench/measure_duty_clock.py`` measures more of them.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Iterable

import numpy as np

from .bench import sm_clock_mhz

__all__ = ["MIX_OP", "CALIBRATE_RATIOS", "measure_power_mixes", "power_share_threshold"]

#: the ``op`` of a mix's row (the sustained-load rows' other kernels are ``matmul``, ``attention`` ...)
MIX_OP = "power_mix"
#: the filler/GEMM time ratios ``gpumodel calibrate`` measures: back to back, then compute shares of about 0.83,
#: 0.74, 0.67 and 0.5
CALIBRATE_RATIOS = (0.0, 0.2, 0.35, 0.5, 1.0)


def power_share_threshold(rows: Iterable[dict]) -> float:
    """The threshold share :math:`f_0` of :func:`~gpumodel.calibration.sustained.clock_share` that fits mixes [1].

    Parameters
    ----------
    rows : iterable of dict
        :func:`measure_power_mixes`' rows: per GEMM (``m``, ``n``, ``k``) and filler ``ratio``, the GEMM's time in the
        mix ``gemm_s`` and at the boost clock ``gemm_boost_s`` [s] and the mix's compute ``share``; ``ratio`` 0 is
        the GEMM back to back. Rows of several runs are told apart by an optional ``run`` field.

    Returns
    -------
    float
        The :math:`f_0` on a 0.01 grid in [0, 0.95] that minimises
        :math:`\\sum (\\mathrm{clip}((f - f_0) / (1 - f_0), 0, 1) - g)^2` over the mixes, with :math:`g` each mix's
        slowdown over the boost clock as a share of its GEMM's back-to-back slowdown.

    Examples
    --------
    >>> mix = lambda ratio, share, t: dict(m=1, n=1, k=1, ratio=ratio, share=share, gemm_s=t, gemm_boost_s=1.0)
    >>> power_share_threshold([mix(0, 1.0, 1.2), mix(1, 0.5, 1.0), mix(0.5, 0.75, 1.1), mix(0.2, 0.9, 1.16)])
    0.5
    """
    rows = list(rows)
    key = lambda r: (r.get("run"), r["m"], r["n"], r["k"])  # noqa: E731
    full = {key(r): r["gemm_s"] / r["gemm_boost_s"] for r in rows if r["ratio"] == 0}
    pts = [(r["share"], (r["gemm_s"] / r["gemm_boost_s"] - 1.0) / (full[key(r)] - 1.0))
           for r in rows if r["ratio"] > 0 and full.get(key(r), 1.0) > 1.0]
    if not pts:
        raise ValueError("no mix with its GEMM's back-to-back timing (ratio 0) to compare with")
    f, g = np.array(pts).T
    grid = np.round(np.arange(0.0, 0.951, 0.01), 2)
    sse = [float(np.sum((np.clip((f - f0) / (1.0 - f0), 0.0, 1.0) - g) ** 2)) for f0 in grid]
    return float(grid[int(np.argmin(sse))])


def _time_each(torch: Any, fn, seconds: float) -> None:  # pragma: no cover - needs a GPU
    """Call ``fn`` back to back for about ``seconds``, the queue kept short so the host's clock tracks the GPU's."""
    marks = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        fn()
        ev = torch.cuda.Event()
        ev.record()
        marks.append(ev)
        if len(marks) > 32:
            marks.pop(0).synchronize()
    torch.cuda.synchronize()


def _filler(torch: Any, kind: str, seconds: float):  # pragma: no cover - needs a GPU
    """A memory-bound kernel of about ``seconds``: ``scale`` (an in-place scale of a contiguous fp32 buffer) or
    ``strided`` (a bf16 product of half-rows with a broadcast row: PyTorch's generic strided path), sized from a
    timing of a trial size; and its elements."""
    def build(rows: int):
        if kind == "scale":
            buf = torch.ones(rows * 128, device="cuda", dtype=torch.float32)
            return lambda: buf.mul_(1.0)
        x = torch.ones(rows, 128, device="cuda", dtype=torch.bfloat16)
        c = torch.ones(1, 64, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(rows, 64, device="cuda", dtype=torch.bfloat16)
        return lambda: torch.mul(x[:, :64], c, out=out)

    trial = 1 << 17
    fn = build(trial)
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        fn()
    end.record()
    end.synchronize()
    rows = max(1024, int(trial * seconds / (start.elapsed_time(end) * 1e-3 / 10)))
    return build(rows), rows * 128


def _alone(torch: Any, fn, idle_s: float) -> float:  # pragma: no cover - needs a GPU
    """Median time [s] of a dozen calls of ``fn`` after ``idle_s`` seconds without work (the boost clock), the first
    two left out."""
    torch.cuda.synchronize()
    time.sleep(idle_s)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(12)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e-3 for s, e in ev[2:])


def measure_power_mixes(m: int = 4096, n: int = 14336, k: int = 4096, ratios=CALIBRATE_RATIOS,
                        warm_s: float = 0.8, window_s: float = 0.3, idle_s: float = 1.0,
                        filler: str = "scale", filler_alone: bool = False) -> list[dict]:  # pragma: no cover - needs a GPU
    """Time a bf16 GEMM in mixes with a memory-bound filler (see the module docstring).

    Parameters
    ----------
    m, n, k : int
        The GEMM (default: an 8B model's MLP projection over 4096 tokens).
    ratios : sequence of float
        Filler time over GEMM time, one mix each; 0 is the GEMM back to back.
    warm_s, window_s, idle_s : float
        Seconds of each mix before it is timed, timed, and idle before it [s].
    filler : {"scale", "strided"}
        The memory-bound kernel.
    filler_alone : bool
        Also time the filler alone after ``idle_s`` (``filler_boost_s``): how much of the clock's fall it follows.

    Returns
    -------
    list of dict
        One row a mix: ``op`` (:data:`MIX_OP`), ``m``, ``n``, ``k``, ``ratio``, ``filler``, ``filler_numel``,
        ``gemm_boost_s``, ``gemm_s``, ``filler_s`` [s], ``share``, ``calls`` and ``sm_clock_mhz``; with
        ``filler_alone``, ``filler_boost_s`` [s] (the filler alone after the idle, at the boost clock).
    """
    import torch

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def gemm():
        torch.matmul(a, b, out=c)

    for _ in range(3):                      # cuBLAS's first call sets up its handle and picks the kernel
        gemm()
    boost = _alone(torch, gemm, idle_s)
    rows = []
    for ratio in ratios:
        fill, numel = _filler(torch, filler, ratio * boost) if ratio > 0 else (None, 0)
        fill_boost = _alone(torch, fill, idle_s) if fill is not None and filler_alone else None
        time.sleep(idle_s)

        def pair(fill=fill):
            gemm()
            if fill is not None:
                fill()

        _time_each(torch, pair, warm_s)
        marks = []
        t_end = time.perf_counter() + window_s
        while time.perf_counter() < t_end:
            for _ in range(16):
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
                ev[0].record()
                gemm()
                ev[1].record()
                if fill is not None:
                    fill()
                ev[2].record()
                marks.append(ev)
            marks[-1][2].synchronize()
        torch.cuda.synchronize()
        clock = sm_clock_mhz()
        gs = statistics.median(e[0].elapsed_time(e[1]) * 1e-3 for e in marks)
        fs = statistics.median(e[1].elapsed_time(e[2]) * 1e-3 for e in marks) if fill is not None else 0.0
        rows.append({"op": MIX_OP, "m": m, "n": n, "k": k, "ratio": ratio, "filler": filler, "filler_numel": numel,
                     "gemm_boost_s": boost, "gemm_s": gs, "filler_s": fs, "share": gs / (gs + fs),
                     "calls": len(marks), "sm_clock_mhz": clock,
                     **({"filler_boost_s": fill_boost} if fill_boost is not None else {})})
        del fill
    return rows
