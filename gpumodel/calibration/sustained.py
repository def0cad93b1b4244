"""Sustained load: how much slower compute-bound kernels run after seconds of back-to-back work.

A calibration times each kernel for about 0.1 s at a time, after a pause: the GPU runs at the clock its
power and temperature allow then. A training step keeps the tensor cores busy for seconds, the board
reaches its power limit and the SM clock drops (on an H200 SXM at 700 W: 1980 MHz isolated, 1440-1470
MHz after 10 s of bf16 GEMMs at 685-692 W). Memory-bound kernels barely notice (a 512 MiB copy: 0.99).

:func:`measure_sustained` (``gpumodel calibrate`` runs it by default; ``bench/measure_sustained.py`` writes its
rows to a file) measures both timings of a few compute-bound kernels (GEMMs, fp8 GEMM, flash-attention backward)
and a copy; :func:`slowdown` (:func:`sustained_slowdown` for a file) reduces them to one factor, the
median over the compute-bound kernels of (time per call over the last two seconds of ten) / (isolated
time). The calibration record keeps it as the parameter ``sustained_slowdown``, and
:meth:`~gpumodel.calibration.model.CalibrationModel.sustained` divides the compute rates by it for
estimates of sustained work (training steps: ``estimate(..., sustained=True)``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from .bench import FLUSH_BYTES, make_runner, time_events
from .cases import make_case
from .powermix import measure_power_mixes

__all__ = ["sustained_slowdown", "slowdown", "read_rows", "measure_sustained", "clock_share", "clock_bound_extra",
           "SUSTAINED_CASES", "COMPUTE_RATE_PREFIXES", "FP8_SLOWDOWN"]

#: the kernels timed alone and then back to back: compute-bound GEMMs and a flash-attention backward, and a copy
SUSTAINED_CASES = [make_case("matmul", "mm", "bf16", m=8192, n=8192, k=8192),
                   make_case("matmul", "mm", "bf16", m=4096, n=14336, k=4096),
                   make_case("matmul", "mm", "fp8", m=8192, n=8192, k=8192),
                   make_case("elementwise", "copy", "bf16", numel=2**28, inputs=1, outputs=1, flops_per_element=0),
                   make_case("attention", "sdpa", "bf16", batch=4, heads=32, seq=4096, head_dim=128, causal=True,
                             backward=True)]

#: the record's parameter for the fp8 GEMMs' own sustained slowdown
#: (:func:`gpumodel.calibration.loaded.model_slowdowns`)
FP8_SLOWDOWN = "sustained_slowdown_fp8"
#: parameters that are rates of the SMs' math units (tensor cores; CUDA-core GEMMs), which follow the SM clock
COMPUTE_RATE_PREFIXES = ("flops_", "attn_flops_", "unaligned_flops")
#: the calls the power limit slows: tensor-core work (elementwise copies are bound by the memory's clock)
_COMPUTE_OPS = ("matmul", "bmm", "attention")


def slowdown(rows: Iterable[dict], last_windows: int = 8, reference: Iterable[float | None] | None = None) -> float:
    """The median slowdown of the compute-bound kernels among ``rows`` (as :func:`measure_sustained` returns them).

    Parameters
    ----------
    rows : iterable of dict
        ``op``, ``isolated_s`` [s] and ``sustained`` (windows with ``per_call_s`` [s]) per kernel.
    last_windows : int
        Windows at the end of each run whose median time per call is compared with the isolated time.
    reference : iterable of float, optional
        The time each row is compared with [s], one per row (None to skip a row): a fitted model's prediction of
        the kernel (:func:`gpumodel.calibration.loaded.model_slowdown`). Default: the row's ``isolated_s``.

    Returns
    -------
    float
        Median of (sustained time per call / reference time) over the compute-bound kernels [ratio].

    >>> slowdown([{"op": "matmul", "isolated_s": 1.0, "sustained": [{"per_call_s": 1.2}] * 8}])
    1.2
    >>> slowdown([{"op": "matmul", "isolated_s": 1.0, "sustained": [{"per_call_s": 1.2}] * 8}], reference=[1.1])
    1.0909090909090908
    """
    rows = list(rows)
    refs = [row.get("isolated_s") for row in rows] if reference is None else list(reference)
    if len(refs) != len(rows):
        raise ValueError(f"reference has {len(refs)} times for {len(rows)} rows")
    ratios = []
    for row, ref in zip(rows, refs):
        if row.get("op") in _COMPUTE_OPS and row.get("sustained") and ref:
            tail = [w["per_call_s"] for w in row["sustained"][-last_windows:]]
            ratios.append(statistics.median(tail) / ref)
    if not ratios:
        raise ValueError("no compute-bound kernel with sustained timings")
    return float(statistics.median(ratios))


def clock_bound_extra(alone_s: Any, loaded_s: Any, slowdown: float) -> Any:
    """What a kernel adds to :func:`clock_share`'s ``extra_s`` [s]: its sustained time over its time alone, counted at
    most as a kernel wholly bound by the SM clock at ``slowdown`` would, :math:`(s - 1) t_{iso}`.

    A kernel whose own sustained factor is larger than the model's ``sustained_slowdown`` (an fp8 GEMM with its
    ``sustained_slowdown_fp8``) is all clock-bound time, not more than all of it.

    >>> clock_bound_extra(1.0, 1.05, 1.1), clock_bound_extra(1.0, 1.19, 1.07)
    (0.05, 0.07)
    """
    alone = np.asarray(alone_s, dtype=float)
    out = np.minimum(np.asarray(loaded_s, dtype=float) - alone, (slowdown - 1.0) * alone)
    return float(out) if out.ndim == 0 else out


def clock_share(isolated_s: Any, extra_s: Any, slowdown: float, threshold: float = 0.0) -> Any:
    """How much of the sustained-load slowdown a stretch of back-to-back work takes: the share of its time whose
    kernels follow the SM clock [1].

    Parameters
    ----------
    isolated_s : float or array
        The stretch's kernels timed alone, summed [s] (:math:`\\sum_i n_i t_{iso,i}`).
    extra_s : float or array
        What they add under sustained load, summed [s] (:math:`\\sum_i n_i (t_{sus,i} - t_{iso,i})`, each kernel priced
        with the compute rates divided by ``slowdown``).
    slowdown : float
        The calibration's ``sustained_slowdown`` [ratio]: compute-bound kernels back to back, alone.
    threshold : float
        :math:`f_0`, the share of compute-bound time up to which the mix stays under the power limit at the boost
        clock [1] (the GPU's ``power_share_threshold``:
        :func:`~gpumodel.calibration.estimate.power_share_threshold_for`); 0 (default): every share slows.

    Returns
    -------
    float or array
        :math:`g` in [0, 1]; each kernel of the stretch takes :math:`t_{iso} + g (t_{sus} - t_{iso})`.

    Notes
    -----
    The board's power limit holds the power averaged over the work, within tens of milliseconds (the measured
    slowdown shows in the first quarter second of back-to-back GEMMs). Compute-bound kernels alone draw more than
    the limit at the boost clock, and the clock falls until they do not, by ``slowdown``; memory-bound kernels draw
    less. A stretch whose clock-bound kernels take a share :math:`f` of its time draws :math:`f P_c + (1 - f) P_m`
    at the boost clock, :math:`P_c` above the limit and :math:`P_m` below it: the clock holds while that is under the
    limit, up to the share :math:`f_0` (``threshold``), and falls in proportion to the excess past
    it, all the way (by ``slowdown``) at :math:`f = 1`:

    .. math::

        f = \\frac{\\sum_i n_i (t_{sus,i} - t_{iso,i})}{(s - 1) \\sum_i n_i t_{iso,i}}, \\quad
        g = \\mathrm{clip}\\left(\\frac{f - f_0}{1 - f_0}, 0, 1\\right), \\quad s_{eff} = 1 + (s - 1) g

    (a kernel wholly bound by the SM clock has :math:`t_{sus} = s\\, t_{iso}`, so :math:`f` is its share of the
    time). Measured on an H100 (``bench/measure_duty_clock.py``): GEMMs with a memory-bound kernel between them ran
    at the boost clock at a share of 0.50, 10% slow at 0.69 and 19-23% slow at 0.92, against 22-28% back to back.
    A long prefill, its GEMMs nearly all of its time, takes most of the slowdown; an eager training step, whose
    elementwise kernels and host gaps take a third to a half of it, little; a decode step, bound by the memory,
    none.

    Examples
    --------
    >>> clock_share(10.0, 0.6, 1.12)          # half the time in GEMMs that are 12% slower under load
    0.5
    >>> round(clock_share(10.0, 0.9, 1.12, threshold=0.5), 6)   # three quarters, on a GPU measured to hold to half
    0.5
    >>> clock_share(10.0, 0.6, 1.12, threshold=0.5)             # half: the mix stays under the power limit
    0.0
    >>> clock_share(10.0, 0.0, 1.0)           # a calibration without a slowdown
    0.0
    """
    if not slowdown > 1.0:
        return 0.0 * np.asarray(isolated_s, dtype=float) if np.ndim(isolated_s) else 0.0
    iso = np.asarray(isolated_s, dtype=float)
    share = np.clip(np.asarray(extra_s, dtype=float) / ((slowdown - 1.0) * np.where(iso > 0, iso, 1.0)), 0.0, 1.0)
    if threshold > 0.0:
        share = np.clip((share - threshold) / (1.0 - threshold), 0.0, 1.0)
    return float(share) if share.ndim == 0 else share


def _back_to_back(torch: Any, fn: Callable[[], Any], seconds: float, window_s: float = 0.25) -> list[dict]:
    """Back-to-back calls of ``fn`` for ``seconds``: per window, the mean time of a call and the clocks."""
    rows, t_end = [], time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        calls, t0 = 0, time.perf_counter()
        start.record()
        while time.perf_counter() - t0 < window_s:
            fn()
            calls += 1
        end.record()
        end.synchronize()
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip()
        except OSError:  # no nvidia-smi on the path: the clocks are not recorded
            smi = ""
        rows.append({"t_s": round(time.perf_counter() - (t_end - seconds), 3), "calls": calls,
                     "per_call_s": start.elapsed_time(end) * 1e-3 / calls, "smi": smi})
    return rows


def measure_sustained(seconds: float = 6.0, cases: list | None = None, pause_s: float = 2.0,
                      mixes: bool = True) -> list[dict]:  # pragma: no cover - needs a GPU
    """Time each of :data:`SUSTAINED_CASES` alone (as a calibration does), then back to back for ``seconds``.

    Parameters
    ----------
    seconds : float
        Length of each back-to-back run [s]; the power limit's toll shows after a few seconds.
    cases : list of dict, optional
        The kernels (default :data:`SUSTAINED_CASES`).
    pause_s : float
        Idle time between kernels [s], for the clocks to recover.
    mixes : bool
        Also time a GEMM in mixes with a memory-bound filler (:func:`gpumodel.calibration.powermix.measure_power_mixes`,
        about 12 s): rows with ``op`` ``"power_mix"``, which :func:`gpumodel.calibration.powermix.power_share_threshold`
        reduces and :func:`slowdown` leaves out.

    Returns
    -------
    list of dict
        Per kernel its case, ``isolated_s`` and ``isolated_after_s`` [s] and the ``sustained`` windows; reduce them
        with :func:`slowdown`. Then the mixes' rows.
    """
    import torch

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    out = []
    for case in cases or SUSTAINED_CASES:
        fn = make_runner(case)
        iso = time_events(fn, flush)[0]
        run = _back_to_back(torch, fn, seconds)
        out.append({**case, "isolated_s": iso, "isolated_after_s": time_events(fn, flush)[0], "sustained": run})
        time.sleep(pause_s)
    if mixes:
        del flush
        out += measure_power_mixes()
    return out


def sustained_slowdown(path: str | Path, last_windows: int = 8) -> float:
    """The median slowdown of the compute-bound kernels of a ``measure_sustained.py`` file.

    For each kernel: the median time per call over its last ``last_windows`` windows (0.25 s each) of
    back-to-back calls, over its isolated (calibration-style) time.

    >>> import json, tempfile, os
    >>> rows = [{"op": "matmul", "isolated_s": 1.0, "sustained": [{"per_call_s": 1.2}] * 8},
    ...         {"op": "elementwise", "isolated_s": 1.0, "sustained": [{"per_call_s": 1.0}] * 8}]
    >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
    ...     _ = fh.write("\\n".join(json.dumps(r) for r in rows))
    >>> round(sustained_slowdown(fh.name), 6); os.remove(fh.name)
    1.2
    """
    rows = read_rows(path)
    try:
        return slowdown(rows, last_windows)
    except ValueError:
        raise ValueError(f"{path}: no compute-bound kernel with sustained timings") from None


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a ``measure_sustained.py`` file (JSON lines), as :func:`measure_sustained` returns them."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
