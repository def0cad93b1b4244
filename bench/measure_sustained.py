"""Isolated vs sustained kernel time: how much slower a kernel runs after seconds of back-to-back work.

A calibration times each kernel for about 0.1 s (:func:`gpumodel.calibration.timing.time_events`); a
training step keeps the GPU busy for seconds, long enough for the power limit to lower the SM clock.
For each kernel this script measures (1) the calibration's timing, then (2) the kernel launched back to
back for ``--seconds``, timed by CUDA events over windows of 0.25 s, with the SM clock and power that
``nvidia-smi`` reports once a second. It also times (3) one AdamW step's calls with the profiler, to
compare the timed call with its kernels (``kernel_s``).

    python bench/measure_sustained.py --out sustained.jsonl      # on the GPU, about 90 s
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpumodel.calibration.plan import make_case  # noqa: E402

CASES = [make_case("matmul", "mm", "bf16", m=8192, n=8192, k=8192),
         make_case("matmul", "mm", "bf16", m=4096, n=14336, k=4096),
         make_case("matmul", "mm", "fp8", m=8192, n=8192, k=8192),
         make_case("elementwise", "copy", "bf16", numel=2**28, inputs=1, outputs=1, flops_per_element=0),
         make_case("attention", "sdpa", "bf16", batch=4, heads=32, seq=4096, head_dim=128, causal=True, backward=True)]
ADAMW = [make_case("adamw_step", "adamw_fused", "fp32", numel=n, tensors=t) for n, t in
         ((65536, 1), (1048576, 1), (1048576, 8), (3_000_000, 32), (16777216, 1))]


def sustained(fn, seconds: float, window_s: float = 0.25) -> list[dict]:
    """Back-to-back calls of ``fn`` for ``seconds``: per window, the mean time of a call and the clocks."""
    import torch

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
        smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip()
        rows.append({"t_s": round(time.perf_counter() - (t_end - seconds), 3), "calls": calls,
                     "per_call_s": start.elapsed_time(end) * 1e-3 / calls, "smi": smi})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=10.0)
    args = p.parse_args(argv)
    import torch

    from gpumodel.calibration.bench import (FLUSH_BYTES, device_seconds, environment_info, make_runner,
                                            time_events)

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"environment": {**environment_info(), "mode": "sustained"}}) + "\n")
        for case in CASES:
            fn = make_runner(case)
            iso = time_events(fn, flush)[0]
            run = sustained(fn, args.seconds)
            after = time_events(fn, flush)[0]
            last = sorted(r["per_call_s"] for r in run[-8:])[4]
            fh.write(json.dumps({**case, "isolated_s": iso, "isolated_after_s": after, "sustained": run}) + "\n")
            print(f"{case['op']:11s} {case['dtype']:5s} {json.dumps(case['shape'])[:60]:60s} isolated {iso*1e6:9.1f} us"
                  f" sustained (last 2 s) {last*1e6:9.1f} us  ratio {last/iso:.3f}  after {after/iso:.3f}  "
                  f"smi {run[0]['smi']} -> {run[-1]['smi']}", flush=True)
            time.sleep(2.0)
        for case in ADAMW:
            fn = make_runner(case)
            t = time_events(fn, flush)[0]
            dev = device_seconds(fn, flush)
            fh.write(json.dumps({**case, "time_s": t, **dev}) + "\n")
            print(f"adamw {json.dumps(case['shape'])}: timed {t*1e6:.1f} us, kernels {dev.get('kernel_s', 0)*1e6:.1f} us, "
                  f"span {dev.get('span_s', 0)*1e6:.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
