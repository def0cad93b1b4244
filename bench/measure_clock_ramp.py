"""How fast the power limit lowers the SM clock: compute-bound kernels timed one call at a time from an idle GPU.

``gpumodel.calibration.sustained`` measures the slowdown of compute-bound kernels after seconds of back-to-back
work (windows of about a second). How a stretch of work shorter than that is slowed, a prefill step timed over
0.15 s of CUDA-graph replays for instance, depends on how quickly the clock falls once the load starts, and how
quickly it recovers when the GPU idles. This script records both:

* after ``--idle`` seconds of idle (several values), each kernel launched back to back for ``--seconds``, with a
  CUDA event around every call: the time of each call against the time since the load began;
* ``nvidia-smi`` sampling the SM clock, power and temperature every 20 ms all the while (``-lms``).

One JSON line a (kernel, idle) run: ``case``, ``idle_s``, ``t_s`` (each call's start since the first call's, from
the events) and ``call_s``, and ``smi`` (the samples: wall time since the run's start, SM clock, power, temperature).

    python bench/measure_clock_ramp.py --out ramp.jsonl             # on the GPU, about 40 s
    python bench/measure_clock_ramp.py --out long.jsonl --cases 0 --seconds 120 --idle 4   # minutes under load
    python bench/measure_clock_ramp.py --out ramp.jsonl --dry-run   # CPU: the loop and the file, no torch
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpumodel.calibration.cases import make_case  # noqa: E402

#: bf16 GEMMs of a training step and of an 8B prefill (2048 tokens through the MLP's gate and up projection), and
#: a causal flash-attention forward
CASES = [make_case("matmul", "mm", "bf16", m=8192, n=8192, k=8192),
         make_case("matmul", "mm", "bf16", m=2048, n=28672, k=4096),
         make_case("attention", "sdpa", "bf16", batch=4, heads=32, seq=4096, head_dim=128, causal=True)]
TINY = [make_case("matmul", "mm", "fp32", m=64, n=64, k=64)]


def run_case(torch, fn, seconds: float, cuda: bool) -> tuple[list[float], list[float]]:
    """``fn`` back to back for about ``seconds``: (start of each call since the first [s], each call's time [s])."""
    if not cuda:
        starts, calls, t0 = [], [], time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a = time.perf_counter()
            fn()
            starts.append(a - t0)
            calls.append(time.perf_counter() - a)
        return starts, calls
    events, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        events.append(a)
        if len(events) % 256 == 0:         # keep the queue short: the events' times are the GPU's
            events[-128].synchronize()
    end = torch.cuda.Event(enable_timing=True)
    end.record()
    end.synchronize()
    marks = events + [end]
    starts = [events[0].elapsed_time(e) * 1e-3 for e in events]
    calls = [marks[i].elapsed_time(marks[i + 1]) * 1e-3 for i in range(len(events))]
    return starts, calls


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=3.0, help="back-to-back load of each run [s]")
    p.add_argument("--idle", type=float, nargs="+", default=[4.0, 0.3], help="idle before each run [s]")
    p.add_argument("--cases", type=int, nargs="+", help="which of CASES (indices; default all): one GEMM for a long run")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    cuda = not args.dry_run
    if cuda:
        import torch

        from gpumodel.calibration.bench import environment_info, make_runner
        env = environment_info("cuda")
    else:   # the CPU smoke test: the loop and the file, with a Python call for a kernel
        torch, env = None, {"device_name": "cpu"}
    cases, seconds = (TINY, 0.05) if args.dry_run else (CASES, args.seconds)
    if args.cases and not args.dry_run:
        cases = [CASES[i] for i in args.cases]
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"environment": {**env, "mode": "clock_ramp"}}) + "\n")
        for case in cases:
            fn = make_runner(case, "cuda") if cuda else (lambda: sum(range(2000)))
            for _ in range(3):
                fn()
            for idle in args.idle:
                if cuda:
                    torch.cuda.synchronize()
                time.sleep(idle if cuda else 0.0)
                smi = None
                if cuda:
                    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                                            "--format=csv,noheader,nounits", "-lms", "20"],
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                    time.sleep(0.3)                  # its first samples: the idle state
                t0 = time.time()
                starts, calls = run_case(torch, fn, seconds, cuda)
                samples = []
                if smi is not None:
                    time.sleep(0.3)
                    smi.terminate()
                    samples = [line.strip() for line in smi.communicate()[0].splitlines() if line.strip()]
                row = {**case, "idle_s": idle, "load_start_unix": t0, "t_s": [round(x, 6) for x in starts],
                       "call_s": [round(x, 9) for x in calls], "smi": samples}
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                n = len(calls)
                first = sorted(calls[: max(1, n // 50)])[max(1, n // 50) // 2]
                last = sorted(calls[-max(1, n // 5):])[max(1, n // 5) // 2]
                print(f"{case['op']:9s} {json.dumps(case['shape'])[:60]:60s} idle {idle:4.1f} s  {n:6d} calls  "
                      f"first {first * 1e6:8.1f} us  last {last * 1e6:8.1f} us  ratio {last / first:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
