"""Which kernels PyTorch launches for measured cases, with their launch shapes: the profiler's view.

For each case of the given measurement files (filtered by ``--only``) this runs the call a few times
under ``torch.profiler`` (the L2 cleared before each call) and records, per GPU kernel of the call, its
name, its duration [us] (median over the profiled calls), its grid and block, registers per thread and
shared memory per block (from the profiler's trace). The model's choices that the timings alone
cannot show are read from them: the split count of FlashAttention-2's split-KV kernel (its grid is
``(query blocks, splits, batch x heads)``), the tile of the CUTLASS kernels cuBLAS falls back to for
unaligned operands (in the kernel's name) and whether a split-K reduction follows, and how many blocks
of a kernel fit on an SM (registers, shared memory).

Usage (on the GPU)::

    python bench/profile_kernels.py --only decode unaligned --out profile.jsonl \\
        tests/data/calibration/fit.jsonl tests/data/calibration/validation*.jsonl
    python bench/profile_kernels.py --dry-run --out /tmp/p.jsonl tests/data/calibration/validation.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: the case filters of ``--only``
FILTERS = ("decode", "unaligned", "aligned", "all")


def unaligned(case: dict) -> bool:
    """A tensor-core GEMM whose leading dimensions (``k``, ``n`` in bytes) are not both multiples of 16."""
    s = case["shape"]
    if case["op"] not in ("matmul", "bmm") or "weight_dtype" in s or case["dtype"] in ("fp32", "fp8"):
        return False
    e = 4 if case["dtype"] == "tf32" else 2
    return (int(s["k"]) * e) % 16 != 0 or (int(s["n"]) * e) % 16 != 0


def selected(case: dict, only: list[str]) -> bool:
    s = case["shape"]
    decode = case["op"] == "attention" and not s.get("backward") and s.get("impl", "flash") == "flash" and (
        int(s.get("kv_seq") or s["seq"]) > int(s["seq"]))
    aligned = case["op"] in ("matmul", "bmm") and "weight_dtype" not in s and not unaligned(case)
    return any({"decode": decode, "unaligned": unaligned(case), "aligned": aligned, "all": True}[o] for o in only)


def kernels_of(torch, fn, flush, calls: int = 3) -> list[dict]:
    """The GPU kernels of one call of ``fn``: name, median duration [us], grid, block, registers, shared memory."""
    from torch.profiler import ProfilerActivity, profile

    runs = []
    for _ in range(calls):
        flush.zero_()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            trace = json.loads(Path(path).read_text())
        finally:
            os.unlink(path)
        events = [e for e in trace.get("traceEvents", []) if e.get("cat") in ("kernel", "gpu_memset")]
        runs.append(sorted(events, key=lambda e: e["ts"]))
    out = []
    for i, e in enumerate(runs[0]):
        durs = [r[i]["dur"] for r in runs if len(r) == len(runs[0])]
        args = e.get("args", {})
        out.append({"name": e["name"][:200], "dur_us": statistics.median(durs), "grid": args.get("grid"),
                    "block": args.get("block"), "registers": args.get("registers per thread"),
                    "shared_bytes": args.get("shared memory")})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("points", nargs="+", help="measurement files whose cases to profile")
    p.add_argument("--out", required=True, help="JSON-lines output (overwritten)")
    p.add_argument("--only", nargs="+", choices=FILTERS, default=["all"])
    p.add_argument("--limit", type=int, default=None, help="at most this many cases")
    p.add_argument("--budget-s", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--dry-run", action="store_true", help="list the selected cases without a GPU")
    args = p.parse_args(argv)
    from gpumodel.calibration.bench import FLUSH_BYTES, environment_info, make_runner
    from gpumodel.calibration.fit import load_points
    from gpumodel.calibration.plan import case_key

    cases, seen = [], set()
    for path in args.points:
        for pt in load_points(path)[1]:
            case = {k: pt[k] for k in ("op", "kernel", "dtype", "shape") if k in pt}
            key = case_key(case)
            if key not in seen and selected(case, args.only):
                seen.add(key)
                cases.append(case)
    cases = cases[:args.limit] if args.limit else cases
    print(f"{len(cases)} cases", file=sys.stderr)
    if args.dry_run:
        return 0
    import torch

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    t0 = time.perf_counter()
    with open(args.out, "w") as f:
        f.write(json.dumps({"environment": {**environment_info("cuda"), "mode": "profile"}}) + "\n")
        for i, case in enumerate(cases):
            if args.budget_s and time.perf_counter() - t0 > args.budget_s:
                print(f"budget spent after {i} cases", file=sys.stderr)
                break
            try:
                fn = make_runner(case, "cuda")
                for _ in range(3):
                    fn()
                f.write(json.dumps({**case, "kernels": kernels_of(torch, fn, flush)}) + "\n")
            except Exception as exc:  # noqa: BLE001 - record and go on
                f.write(json.dumps({**case, "error": repr(exc)[:300]}) + "\n")
            del fn
    print(f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
