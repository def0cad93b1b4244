"""How much of the power limit's slowdown a mix of compute- and memory-bound work takes: GEMMs between fillers.

A training step or a prefill alternates compute-bound kernels (GEMMs, attention), which draw more than the board's
power limit at the boost clock, with memory-bound ones, which draw less. ``gpumodel.calibration.sustained.
clock_share`` gives such a stretch the share of the full slowdown (GEMMs alone, back to back) that its compute-bound
kernels' share of the time gives it. This script measures the curve instead: for a bf16 GEMM and a memory-bound
filler (an in-place scale of a buffer sized so that it takes ``ratio`` times the GEMM's time), the pair is run back
to back for ``--warm-s`` seconds (past the clock's fall, 25-100 ms into the load), then for ``--window-s`` seconds
with CUDA events around every GEMM and every filler; between mixes the GPU idles ``--idle-s`` seconds.

The measuring is :func:`gpumodel.calibration.powermix.measure_power_mixes` (``gpumodel calibrate`` runs a short
version of it); one JSON line per (GEMM, ratio): the GEMM's median time in the window (``gemm_s``) and alone after
the idle, first calls at the boost clock (``gemm_boost_s``), the filler's median time (``filler_s``), the compute
share ``gemm_s / (gemm_s + filler_s)``, the SM clock read at the end of the window (``sm_clock_mhz``, where NVML
is present), and the filler alone after the idle (``filler_boost_s``): ``filler_s / filler_boost_s`` says how much
of the clock's fall the filler itself follows. ``ratio`` 0 is the GEMM alone, back to back: the full slowdown.

    python bench/measure_duty_clock.py --out duty_clock.jsonl     # on the GPU, about a minute
    python bench/measure_duty_clock.py --out /tmp/d.jsonl --dry-run  # CPU: the plan, no torch
    python bench/measure_duty_clock.py --out strided.jsonl --filler strided --ratios 0,0.2,0.35,0.5,1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: (m, n, k) of the bf16 GEMMs: an 8B model's MLP projection over 4096 and 2048 tokens
GEMMS = ((4096, 14336, 4096), (2048, 14336, 4096))
#: filler time over GEMM time
RATIOS = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0, 2.0)


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
        from gpumodel.calibration.bench import environment_info
        from gpumodel.calibration.powermix import measure_power_mixes

        fh.write(json.dumps({"environment": {**environment_info(), "mode": "duty_clock", "warm_s": args.warm_s,
                                             "window_s": args.window_s, "idle_s": args.idle_s,
                                             "filler": args.filler}}) + "\n")
        for m, n, k in GEMMS:
            for row in measure_power_mixes(m, n, k, ratios, args.warm_s, args.window_s, args.idle_s, args.filler,
                                           filler_alone=True):
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                g, b, f = row["gemm_s"], row["gemm_boost_s"], row["filler_s"]
                print(f"{m}x{n}x{k} ratio {row['ratio']:4.2f}: gemm {g * 1e6:8.1f} us (boost {b * 1e6:7.1f}, "
                      f"x{g / b:.3f}), filler {f * 1e6:7.1f} us (alone {row.get('filler_boost_s', 0) * 1e6:7.1f}), share {row['share']:.3f}, clock {row['sm_clock_mhz']}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
