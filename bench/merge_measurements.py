"""Merge measurement runs (JSON lines) into one fit set.

Kernels measured in several runs get the median of their medians (of an even count, the geometric
mean of the middle two: of two runs, their geometric mean); each run can be cut
after its first N points (``file.jsonl:N``), e.g. where a repeatability check found it disturbed.
``--exclude`` drops every kernel whose op, dtype and shape a held-out (VALIDATION) file has, so the
fit never sees a validation shape. ``--long-only FILE...`` adds runs timed without the host kept
ahead (``triton.testing.do_bench``): of those only the calls of at least ``--long-s`` (default 300 us)
count, long enough that the host's issue time hides behind the GPU's queue in any timer; they give the
long kernels more runs (the spread between runs and cards is several percent at the GEMM rates).

    python bench/merge_measurements.py --out fit.jsonl fit_run3.jsonl:620 fit_run2.jsonl --exclude validation.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpumodel.calibration.fit import median_time  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="FILE or FILE:N (first N points only)")
    p.add_argument("--out", required=True)
    p.add_argument("--long-only", nargs="*", default=[], metavar="FILE[:N]",
                   help="runs of which only calls of at least --long-s count (timed without a host lead)")
    p.add_argument("--long-s", type=float, default=300e-6)
    p.add_argument("--exclude", nargs="*", default=[], metavar="FILE",
                   help="held-out measurement files: their shapes are left out of the merge")
    args = p.parse_args(argv)
    held = {_shape_key(r) for path in args.exclude for r in _rows(path) if "op" in r}
    env, merged, order, dropped = None, {}, [], 0
    for spec in [*args.runs, *args.long_only]:
        long_only = spec in args.long_only and spec not in args.runs
        path, _, limit = spec.partition(":")
        rows = _rows(path)
        points = [r for r in rows if "op" in r]
        if limit:
            points = points[: int(limit)]
        env = env or next((r["environment"] for r in rows if "environment" in r), {})
        for pt in points:
            if not pt.get("time_s") or (long_only and pt["time_s"] < args.long_s):
                continue
            if _shape_key(pt) in held:
                dropped += 1
                continue
            key = (pt["op"], pt.get("kernel", ""), pt["dtype"], json.dumps(pt["shape"], sort_keys=True))
            if key not in merged:
                merged[key] = (pt, [])
                order.append(key)
            merged[key][1].append(pt["time_s"])
    env = {**env, "merged_from": args.runs, **({"excluded_shapes_of": args.exclude} if args.exclude else {}),
           **({"long_calls_of": args.long_only, "long_s": args.long_s} if args.long_only else {})}
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"environment": env}) + "\n")
        for key in order:
            pt, times = merged[key]
            fh.write(json.dumps({**pt, "time_s": median_time(times), "runs": len(times)}) + "\n")
    print(f"{len(order)} kernels ({sum(len(v[1]) > 1 for v in merged.values())} measured more than once; "
          f"{dropped} points with a held-out shape left out) -> {args.out}", file=sys.stderr)
    return 0


def _rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(x) for x in fh if x.strip()]


def _shape_key(pt: dict) -> tuple:
    return pt["op"], pt["dtype"], json.dumps(pt["shape"], sort_keys=True)


if __name__ == "__main__":
    sys.exit(main())
