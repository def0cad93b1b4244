"""Timing one PyTorch call on the GPU: CUDA events with the host kept ahead, and the profiler's kernel time.

:func:`time_events` times a call the way ``triton.testing.do_bench`` schedules it (warm-up, an L2-flushing
write before each repetition, the median of the repetitions) and, by default, with the host kept ahead of the
GPU: a GPU spin (``torch.cuda._sleep``) before each repetition lasts longer than the host needs to queue the
call, so the events time the GPU's work alone. :func:`device_seconds` reads the call's kernels from
``torch.profiler``. Nothing here needs more than torch.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ..base.errors import GpumodelError

__all__ = ["CalibrationUnavailableError", "time_events", "host_seconds", "spin_rate", "launched_kernels",
           "device_seconds", "import_torch", "time_cpu"]


class CalibrationUnavailableError(GpumodelError, RuntimeError):
    """torch, or a CUDA GPU, is not available to measure on."""


def import_torch():
    """The ``torch`` module, imported on first use; without it a :class:`CalibrationUnavailableError`."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise CalibrationUnavailableError(
            "calibration needs PyTorch with CUDA: pip install 'gpumodel[torch]'") from exc
    return torch


_SPIN_HZ: float | None = None


def spin_rate(torch) -> float:
    """Cycles per second of ``torch.cuda._sleep`` on the current GPU (its spin loop's clock), measured once."""
    global _SPIN_HZ
    if _SPIN_HZ is None:
        torch.cuda._sleep(1000)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        _SPIN_HZ = cycles / max(start.elapsed_time(end) * 1e-3, 1e-6)
    return _SPIN_HZ


def host_seconds(fn: Callable[[], Any], calls: int = 3) -> float:
    """The host's time to issue one call of ``fn`` [s] with nothing queued on the GPU (the longest of ``calls``)."""
    torch = import_torch()
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return max(times)


def time_events(fn: Callable[[], Any], flush, warmup_s: float = 0.025, rep_s: float = 0.1,
                ahead: bool = True) -> tuple[float, int]:
    """Median time of ``fn`` [s] with CUDA events, the L2 flushed (``flush.zero_()``) before each rep.

    The schedule is ``triton.testing.do_bench``'s, so that the GPU's clocks and temperature match
    timings taken with it: five flushed runs estimate the time per run (flush included), then
    ``warmup_s`` worth of warm-up runs, then ``rep_s`` worth of timed repetitions, each preceded
    by a flush, each bracketed by its own pair of events. Returns ``(median_seconds, reps)``.

    ``ahead=True`` (the default) times the GPU's work alone: before each repetition's start event
    the GPU spins (``torch.cuda._sleep``) for twice the host's time to issue the call
    (:func:`host_seconds`) plus 50 us, so every launch of the call is queued before the GPU reaches
    the start event. Without it the events also count the host's issue time whenever that exceeds
    the flush's ~60 us of GPU work (seen on an H200 for cuDNN attention backward: 40 us of kernels
    timed at 78-175 us), and the timing depends on the host's speed and load. ``ahead=False`` is
    ``do_bench``'s own timing.
    """
    torch = import_torch()
    fn()
    torch.cuda.synchronize()
    cycles = int(spin_rate(torch) * (2 * host_seconds(fn) + 50e-6)) if ahead else 0

    def lead():
        if cycles:
            torch.cuda._sleep(cycles)

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        lead()
        fn()
    end.record()
    torch.cuda.synchronize()
    est = max(start.elapsed_time(end) * 1e-3 / 5, 1e-7)
    n_warmup, reps = max(1, int(warmup_s / est)), max(1, int(rep_s / est))
    for _ in range(n_warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        lead()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends))
    return float(times[len(times) // 2]), reps


def time_cpu(fn: Callable[[], Any], reps: int = 3) -> tuple[float, int]:
    """(median wall time of ``reps`` calls of ``fn`` after one warm-up call [s], ``reps``): timing on the CPU."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], reps


def _profiled_kernels(fn: Callable[[], Any]) -> list:
    """The profiler's GPU events of one call of ``fn``, in start order ([] if the profiler is unavailable)."""
    torch = import_torch()
    try:
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        events = [e for e in prof.events() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
        return sorted(events, key=lambda e: e.time_range.start)
    except Exception:  # noqa: BLE001 - the profiler is optional
        return []


def launched_kernels(fn: Callable[[], Any]) -> list[str]:
    """Names of the GPU kernels one call of ``fn`` launches, in order (``torch.profiler``; [] if unavailable)."""
    return [e.name[:120] for e in _profiled_kernels(fn)][:40]


def device_seconds(fn: Callable[[], Any], flush=None, calls: int = 3) -> dict:
    """The GPU's own time in one call of ``fn``, from the profiler, the L2 flushed before each call.

    ``kernel_s`` is the sum of the call's kernel durations (the GPU busy), ``span_s`` the time from the
    first kernel's start to the last one's end (gaps included: the GPU waiting on the host between the
    call's launches, and the profiler's own gap before the first kernel); each the median of ``calls``
    profiled calls. A timer that brackets the call with events also counts the host's time before the
    first launch when the GPU has nothing queued, so a ``time_s`` well above ``kernel_s`` marks a call
    bound by its host. ``{}`` if the profiler is unavailable.
    """
    sums, spans = [], []
    for _ in range(calls):
        if flush is not None:
            flush.zero_()
        events = _profiled_kernels(fn)
        if not events:
            return {}
        sums.append(sum(e.time_range.elapsed_us() for e in events) * 1e-6)
        spans.append((max(e.time_range.end for e in events) - events[0].time_range.start) * 1e-6)
    return {"kernel_s": sorted(sums)[calls // 2], "span_s": sorted(spans)[calls // 2]}
