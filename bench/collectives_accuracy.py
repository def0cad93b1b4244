"""Modelled vs measured NCCL collectives (busbw): this host's measurements, or published nccl-tests figures.

Reads the JSON lines of ``bench/measure_collectives.py`` and prints, per collective, group size and
message size, the measured and modelled time and busbw for the given system record (default
``hgx-h200``; a row's own ``system`` field wins), and the median and worst error over messages of
1 MB and more (the bar: 15 %).

    python bench/collectives_accuracy.py tests/data/cluster/collectives_h200.jsonl --system hgx-h200
    python bench/collectives_accuracy.py --published

``--published`` compares with ``tests/data/cluster/nccl_tests_published.jsonl``: nccl-tests bus
bandwidths published for 8-GPU DGX/HGX A100, H100 and H200 nodes (each row cites its source). Each
row is modelled with the algorithm NCCL ran (its ``algorithm`` field: ``"ring"`` where the run forced
the ring or disabled NVLS, ``"auto"`` where NCCL chose, which on H100/H200 nodes is NVLink SHARP for
the all-reduce); rows where NCCL used NVLink SHARP (``nvls``) are summarised apart, and the column
``alg`` names the algorithm the model took. Then, summarised apart, the published runs across nodes
(``tests/data/cluster/nccl_tests_multinode.jsonl``): the network links, their efficiency and latency.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
PUBLISHED = Path(__file__).resolve().parents[1] / "tests" / "data" / "cluster" / "nccl_tests_published.jsonl"
#: published nccl-tests runs over several nodes (the network's share of the model)
MULTINODE = PUBLISHED.with_name("nccl_tests_multinode.jsonl")

from gpumodel.cluster.collectives import busbw, system_collective_time  # noqa: E402
from gpumodel.cluster.nvls import nvls_available  # noqa: E402
from gpumodel.vocabulary import resolve_system  # noqa: E402


def _picked(r: dict, system: str, t: float) -> str:
    """The algorithm the model took for row ``r`` (time ``t``): ``"nvls"`` when it is NVLink SHARP's."""
    alg = r.get("algorithm", "auto")
    if alg == "auto" and nvls_available(r["collective"], system, r["n"]) and resolve_system(system).nvlink_sharp:
        nv = system_collective_time(r["collective"], r["nbytes"], system, r["n"], algorithm="nvls")
        return "nvls" if nv == t else "ring/tree"
    return alg if alg != "auto" else "ring/tree"


def compare(path: Path, system: str) -> list[dict]:
    rows = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        sysname = r.get("system", system)
        t = system_collective_time(r["collective"], r["nbytes"], sysname, r["n"], algorithm=r.get("algorithm", "auto"))
        rows.append(dict(r, model_s=t, model_busbw=busbw(r["collective"], r["nbytes"], t, r["n"]),
                         error=t / r["seconds"] - 1, model_algorithm=_picked(r, sysname, t)))
    return rows


def _summary(rows: list[dict], label: str) -> None:
    big = [abs(r["error"]) for r in rows if r["nbytes"] >= 1e6]
    if big:
        print(f"{label}messages >= 1 MB: median |error| {statistics.median(big):.1%}, worst {max(big):.1%} "
              f"over {len(big)} cases (bar: 15%)")


def report(rows: list[dict], system: str, label: str) -> None:
    """Print the rows of :func:`compare` and their summary (``label`` heads the summary lines)."""
    print(f"{'system':<18} {'collective':<11} {'n':>3} {'MB':>8} {'meas us':>10} {'model us':>10} {'meas busbw':>11} "
          f"{'model busbw':>12} {'err':>7}  {'NCCL ran':<9} model alg")
    for r in rows:
        ran = "NVLS" if r.get("nvls") else r.get("algorithm", "auto")
        print(f"{r.get('system', system):<18} {r['collective']:<11} {r['n']:>3} {r['nbytes'] / 1e6:>8.1f} "
              f"{r['seconds'] * 1e6:>10.1f} {r['model_s'] * 1e6:>10.1f} {r['busbw'] / 1e9:>10.1f}G "
              f"{r['model_busbw'] / 1e9:>11.1f}G {r['error']:>+7.1%}  {ran:<9} {r['model_algorithm']}")
    print()
    if any(r.get("nvls") for r in rows):
        _summary([r for r in rows if not r.get("nvls")], label + "ring/tree (no NVLS), ")
        _summary([r for r in rows if r.get("nvls")], label + "NVLink SHARP (NVLS), ")
        _summary(rows, label + "all, ")
    else:
        _summary(rows, label)
    print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", help="JSON lines of bench/measure_collectives.py")
    ap.add_argument("--system", default="hgx-h200")
    ap.add_argument("--published", action="store_true", help="compare with the published nccl-tests figures")
    args = ap.parse_args(argv)
    if not args.data and not args.published:
        ap.error("give a data file or --published")
    sets = [(PUBLISHED, ""), (MULTINODE, "across nodes: ")] if args.published else [(Path(args.data), "")]
    for path, label in sets:
        report(compare(path, args.system), args.system, label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
