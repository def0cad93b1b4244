"""How much of the power limit's slowdown a mix of compute- and memory-bound work takes: GEMMs between fillers.

A training step or a prefill alternates compute-bound kernels (GEMMs, attention), which draw more than the board's
power limit at the boost clock, with memory-bound ones, which draw less. ``gpumodel.calibration.sustained.
clock_share`` gives such a stretch the share of the full slowdown (GEMMs alone, back to back) that its compute-bound
kernels' share of the time gives it. This script measures the curve instead: for a bf16 GEMM and a memory-bound
filler (an in-place scale of a buffer sized so that it takes ``ratio`` times the GEMM's time), the pair is run back
to back for ``--warm-s`` seconds (past the clock's fall, 25-100 ms into the load), then for ``--window-s`` seconds
with CUDA events around every GEMM and every filler; between mixes the GPU idles ``--idle-s`` seconds.

One JSON line per (GEMM, ratio): the GEMM's median time in the window (``gemm_s``) and alone after the idle, first
calls at the boost clock (``gemm_boost_s``), the filler's median time (``filler_s``), the compute share
``gemm_s / (gemm_s + filler_s)``, and the SM clock read at the end of the window (``sm_clock_mhz``, where NVML is
present). ``ratio`` 0 is the GEMM alone, back to back: the full slowdown.

    python bench/measure_duty_clock.py --out duty_clock.jsonl     # on the GPU, about a minute
    python bench/measure_duty_clock.py --out /tmp/d.jsonl --dry-run  # CPU: the plan, no torch
    python bench/measure_duty_clock.py --out strided.jsonl --filler strided --ratios 0,0.2,0.35,0.5,1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

#: (m, n, k) of the bf16 GEMMs: an 8B model's MLP projection over 4096 and 2048 tokens
GEMMS = ((4096, 14336, 4096), (2048, 14336, 4096))
#: filler time over GEMM time
RATIOS = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0, 2.0)


def _clock(torch) -> float | None:
    try:
        return float(torch.cuda.clock_rate())
    except Exception:                       # no NVML: the clock is not recorded
        return None


def _time_each(torch, fn, seconds: float) -> list[float]:
    """Call ``fn`` back to back for about ``seconds``, an event pair around each call; the calls' times [s]."""
    pairs = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
        if len(pairs) % 64 == 0:        # keep the queue short, so the host's clock tracks the GPU's
            pairs[-32][1].synchronize()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e-3 for s, e in pairs]


def make_filler(torch, kind: str, seconds: float):
    """A memory-bound kernel that takes about ``seconds``: ``scale``, an in-place scale of a contiguous fp32 buffer
    (PyTorch's vectorised path), or ``strided``, a bf16 product of a tensor's first half-rows with a broadcast row into
    a new tensor (the generic strided path of a prefill's rotary halves). Sized from a timing of a trial size."""
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
    per = start.elapsed_time(end) * 1e-3 / 10
    del fn
    rows = max(1024, int(trial * seconds / per))
    return build(rows), rows * 128


def measure(torch, m: int, n: int, k: int, ratios, warm_s: float, window_s: float, idle_s: float,
            filler: str = "scale") -> list[dict]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def gemm():
        torch.matmul(a, b, out=c)

    for _ in range(3):                      # cuBLAS's first call sets up its handle and picks the kernel
        gemm()
    torch.cuda.synchronize()
    time.sleep(idle_s)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(12)]
    for s, e in ev:                         # a dozen calls after the idle: the boost clock
        s.record()
        gemm()
        e.record()
    torch.cuda.synchronize()
    boost = statistics.median(s.elapsed_time(e) * 1e-3 for s, e in ev[2:])
    rows = []
    for ratio in ratios:
        fill, numel = make_filler(torch, filler, ratio * boost) if ratio > 0 else (None, 0)
        time.sleep(idle_s)

        def pair(fill=fill):
            gemm()
            if fill is not None:
                fill()

        _time_each(torch, pair, warm_s)
        gemm_times = []
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
                gemm_times.append(ev)
            ev[2].synchronize()
        torch.cuda.synchronize()
        clock = _clock(torch)
        g = [e[0].elapsed_time(e[1]) * 1e-3 for e in gemm_times]
        f = [e[1].elapsed_time(e[2]) * 1e-3 for e in gemm_times] if fill is not None else [0.0]
        gs, fs = statistics.median(g), statistics.median(f)
        rows.append({"m": m, "n": n, "k": k, "ratio": ratio, "filler": filler, "filler_numel": numel, "gemm_boost_s": boost,
                     "gemm_s": gs, "filler_s": fs, "share": gs / (gs + fs), "calls": len(g), "sm_clock_mhz": clock})
        print(f"{m}x{n}x{k} ratio {ratio:4.2f}: gemm {gs * 1e6:8.1f} us (boost {boost * 1e6:7.1f}, x{gs / boost:.3f}), "
              f"filler {fs * 1e6:7.1f} us, share {gs / (gs + fs):.3f}, clock {clock}", flush=True)
        del fill
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--warm-s", type=float, default=0.8)
    ap.add_argument("--window-s", type=float, default=0.4)
    ap.add_argument("--idle-s", type=float, default=1.0)
    ap.add_argument("--filler", choices=("scale", "strided"), default="scale",
                    help="the memory-bound kernel between GEMMs: a contiguous fp32 scale, or a strided bf16 product")
    ap.add_argument("--ratios", default=None, help="comma-separated filler/GEMM time ratios (default: %s)"
                    % ",".join(map(str, RATIOS)))
    ap.add_argument("--dry-run", action="store_true", help="write the plan without timing it (no torch)")
    args = ap.parse_args(argv)
    ratios = tuple(float(x) for x in args.ratios.split(",")) if args.ratios else RATIOS
    with open(args.out, "w", encoding="utf-8") as fh:
        if args.dry_run:
            for m, n, k in GEMMS:
                for ratio in ratios:
                    fh.write(json.dumps({"m": m, "n": n, "k": k, "ratio": ratio}) + "\n")
            print(f"{len(GEMMS) * len(ratios)} mixes written to {args.out} (dry run)")
            return 0
        import torch

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from gpumodel.calibration.bench import environment_info

        fh.write(json.dumps({"environment": {**environment_info(), "mode": "duty_clock", "warm_s": args.warm_s,
                                             "window_s": args.window_s, "idle_s": args.idle_s,
                                             "filler": args.filler}}) + "\n")
        for m, n, k in GEMMS:
            for row in measure(torch, m, n, k, ratios, args.warm_s, args.window_s, args.idle_s, args.filler):
                fh.write(json.dumps(row) + "\n")
                fh.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
