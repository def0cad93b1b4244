"""Merge measurement runs (JSON lines) into one fit set.

Kernels measured in several runs get the geometric mean of their medians; each run can be cut
after its first N points (``file.jsonl:N``), e.g. where a repeatability check found it disturbed.

    python bench/merge_measurements.py --out fit.jsonl fit_run3.jsonl:620 fit_run2.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="FILE or FILE:N (first N points only)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    env, merged, order = None, {}, []
    for spec in args.runs:
        path, _, limit = spec.partition(":")
        rows = [json.loads(x) for x in open(path, encoding="utf-8") if x.strip()]
        points = [r for r in rows if "op" in r]
        if limit:
            points = points[: int(limit)]
        env = env or next((r["environment"] for r in rows if "environment" in r), {})
        for pt in points:
            if not pt.get("time_s"):
                continue
            key = (pt["op"], pt.get("kernel", ""), pt["dtype"], json.dumps(pt["shape"], sort_keys=True))
            if key not in merged:
                merged[key] = (pt, [])
                order.append(key)
            merged[key][1].append(pt["time_s"])
    env = {**env, "merged_from": args.runs}
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"environment": env}) + "\n")
        for key in order:
            pt, times = merged[key]
            t = math.exp(sum(math.log(x) for x in times) / len(times))
            fh.write(json.dumps({**pt, "time_s": t, "runs": len(times)}) + "\n")
    print(f"{len(order)} kernels ({sum(len(v[1]) > 1 for v in merged.values())} measured more than once) -> {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
