"""Speed of the vectorized op-cost and roofline path: one call over N matmul shapes vs a loop of scalar calls.

Usage::

    python bench/bench_vectorized.py               # N = 1,000,000 shapes, loop over 2,000 of them
    python bench/bench_vectorized.py --n 100000 --loop 500 --gpu h200

Prints, for ``gm.ops.matmul`` alone and for ``gm.ops.matmul`` + ``gm.roofline``, the best-of-``--repeat``
wall time of one vectorized call over N shapes, the per-configuration time of that call, the
per-configuration time of a Python loop of scalar calls, and the ratio. Checks first that both
paths give the same numbers on the looped shapes.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

import gpumodel as gm


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000, help="shapes in the vectorized call")
    p.add_argument("--loop", type=int, default=2_000, help="shapes in the scalar loop")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--gpu", default="h100")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    m, n, k = (rng.integers(1, 16385, size=args.n).astype(float) for _ in range(3))
    gpu = gm.gpu(args.gpu)
    loop = range(min(args.loop, args.n))

    vec = gm.roofline(gm.ops.matmul(m, n, k, args.dtype), gpu)
    for i in list(loop)[:200]:
        one = gm.roofline(gm.ops.matmul(m[i], n[i], k[i], args.dtype), gpu)
        assert one.seconds == vec.seconds[i] and one.bound == vec.bound[i], "vector and scalar paths disagree"

    cases = {
        "ops.matmul": (lambda: gm.ops.matmul(m, n, k, args.dtype),
                       lambda: [gm.ops.matmul(m[i], n[i], k[i], args.dtype) for i in loop]),
        "ops.matmul + roofline": (lambda: gm.roofline(gm.ops.matmul(m, n, k, args.dtype), gpu),
                                  lambda: [gm.roofline(gm.ops.matmul(m[i], n[i], k[i], args.dtype), gpu) for i in loop]),
    }
    print(f"gpumodel {gm.__version__}, numpy {np.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPU(s), {cpu_name()} ({platform.machine()}); GPU record {gpu.name}, {args.dtype}")
    print(f"vectorized: one call over {args.n:,} shapes; loop: {len(loop):,} scalar calls; best of {args.repeat}\n")
    header = f"{'path':24s} {'vector call [s]':>16s} {'vector [ns/config]':>19s} {'loop [us/config]':>17s} {'speedup':>9s}"
    print(header)
    print("-" * len(header))
    for name, (vector, scalar) in cases.items():
        tv = _best(vector, args.repeat)
        ts = _best(scalar, max(1, args.repeat // 2))
        per_v, per_s = tv / args.n, ts / len(loop)
        print(f"{name:24s} {tv:16.3f} {per_v * 1e9:19.1f} {per_s * 1e6:17.1f} {per_s / per_v:8.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
