"""Compare three timers of one kernel call against the profiler's kernel time, twice each.

The timers: ``triton.testing.do_bench`` (median, L2 cleared before each rep), CUDA events on its
schedule (``ahead=False``) and the same with the host kept ahead of the GPU (``ahead=True``,
:func:`gpumodel.calibration.timing.time_events`). The reference is ``kernel_s``, the sum of the
call's kernel durations from ``torch.profiler`` (:func:`gpumodel.calibration.timing.device_seconds`),
which no host time enters; it leaves out the GPU's gaps between a call's kernels, so a timer of
the GPU's work reads a few microseconds above it.

The cases come from the committed do_bench runs that recorded ``kernel_s`` (``tests/data/calibration/do_bench``):
every call whose
``do_bench`` time exceeded 1.5 x its kernel time + 10 us (host-exposed in that run), up to
``--suspects`` of them, and as many calls whose time matched their kernel time (controls).

    python bench/compare_timers.py --out timers.jsonl          # on the GPU, about a minute
    python bench/compare_timers.py --out /tmp/t.jsonl --dry-run  # picks the cases, measures nothing
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpumodel.calibration.fit import load_points  # noqa: E402
from gpumodel.calibration.plan import call_key  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "calibration" / "do_bench"
TIMERS = ("do_bench", "events", "ahead")


def host_exposed(pt: dict) -> bool:
    """A point whose timed call took well over its kernels' own time (the host held the GPU back)."""
    return pt["time_s"] > 1.5 * pt["kernel_s"] + 10e-6


def pick_cases(suspects: int = 40) -> list[dict]:
    """Host-exposed calls (spread over ops, shortest kernel time first) and as many matched controls."""
    seen, exposed, matched = set(), [], []
    for path in sorted(DATA.glob("*.jsonl")):
        for pt in load_points(path)[1]:
            if not pt.get("kernel_s") or not pt.get("time_s") or call_key(pt) in seen:
                continue
            seen.add(call_key(pt))
            case = {k: pt[k] for k in ("op", "kernel", "dtype", "shape")}
            (exposed if host_exposed(pt) else matched).append((pt["kernel_s"], case))
    exposed.sort(key=lambda x: x[0])
    matched.sort(key=lambda x: x[0])
    take = exposed[:: max(1, len(exposed) // suspects)][:suspects]
    controls = matched[:: max(1, len(matched) // len(take))][: len(take)] if take else []
    return [c for _, c in take] + [c for _, c in controls]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--suspects", type=int, default=40)
    p.add_argument("--dry-run", action="store_true", help="list the cases only")
    args = p.parse_args(argv)
    cases = pick_cases(args.suspects)
    print(f"{len(cases)} cases", file=sys.stderr)
    if args.dry_run:
        for c in cases:
            print(c["op"], c["kernel"], c["dtype"], json.dumps(c["shape"], sort_keys=True))
        return 0
    import torch
    from triton.testing import do_bench

    from gpumodel.calibration.bench import FLUSH_BYTES, device_seconds, environment_info, make_runner, time_events

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    timers = {"do_bench": lambda fn: do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e-3,
              "events": lambda fn: time_events(fn, flush, ahead=False)[0],
              "ahead": lambda fn: time_events(fn, flush, ahead=True)[0]}
    rows = []
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"environment": {**environment_info(), "mode": "compare-timers"}}) + "\n")
        for case in cases:
            try:
                fn = make_runner(case)
                times = {name: [] for name in TIMERS}
                for _ in range(2):
                    for name in TIMERS:
                        times[name].append(timers[name](fn))
                row = {**case, **device_seconds(fn, flush), "times": times}
            except Exception as exc:  # noqa: BLE001 - record and go on
                row = {**case, "error": f"{type(exc).__name__}: {exc}"[:200]}
                torch.cuda.synchronize()
            fh.write(json.dumps(row) + "\n")
            rows.append(row)
    report(rows)
    return 0


def report(rows: list[dict]) -> None:
    """Per timer: median and p90 of time / kernel time, and median |run 1 / run 2 - 1|."""
    ok = [r for r in rows if r.get("kernel_s") and "times" in r]
    print(f"{'timer':10s} {'n':>4s} {'time/kernel median':>19s} {'p90':>6s} {'run-to-run median':>18s} {'p90':>6s}")
    for name in TIMERS:
        ratio = sorted(statistics.median(r["times"][name]) / r["kernel_s"] for r in ok)
        spread = sorted(abs(r["times"][name][0] / r["times"][name][1] - 1) for r in ok)
        if ratio:
            p90 = int(0.9 * (len(ratio) - 1))
            print(f"{name:10s} {len(ok):4d} {statistics.median(ratio):19.3f} {ratio[p90]:6.3f} "
                  f"{100 * statistics.median(spread):17.1f}% {100 * spread[p90]:5.1f}%")


if __name__ == "__main__":
    sys.exit(main())
