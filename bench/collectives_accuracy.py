"""Modelled vs measured NCCL collectives (busbw) on one host's GPUs.

Reads the JSON lines of ``bench/measure_collectives.py`` and prints, per collective, group size and
message size, the measured and modelled time and busbw for the given system record (default
``hgx-h200``), and the median and worst error over messages of 1 MB and more (the bar: 15 %).

    python bench/collectives_accuracy.py tests/data/cluster/collectives_h200.jsonl --system hgx-h200
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpumodel.cluster.collectives import busbw, system_collective_time  # noqa: E402


def compare(path: Path, system: str) -> list[dict]:
    rows = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        t = system_collective_time(r["collective"], r["nbytes"], system, r["n"])
        rows.append(dict(r, model_s=t, model_busbw=busbw(r["collective"], r["nbytes"], t, r["n"]),
                         error=t / r["seconds"] - 1))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("--system", default="hgx-h200")
    args = ap.parse_args(argv)
    rows = compare(Path(args.data), args.system)
    print(f"{'collective':<15} {'n':>3} {'MB':>8} {'meas us':>10} {'model us':>10} {'meas busbw':>11} {'model busbw':>12} {'err':>7}")
    for r in rows:
        print(f"{r['collective']:<15} {r['n']:>3} {r['nbytes'] / 1e6:>8.1f} {r['seconds'] * 1e6:>10.1f} {r['model_s'] * 1e6:>10.1f} "
              f"{r['busbw'] / 1e9:>10.1f}G {r['model_busbw'] / 1e9:>11.1f}G {r['error']:>+7.1%}")
    big = [abs(r["error"]) for r in rows if r["nbytes"] >= 1e6]
    if big:
        print(f"\nmessages >= 1 MB: median |error| {statistics.median(big):.1%}, worst {max(big):.1%} "
              f"over {len(big)} cases (bar: 15%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
