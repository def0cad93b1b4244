"""Accuracy of gpumodel's time estimates against measured kernels, per op family.

For each point of a measurement file (JSON lines from ``bench/measure_kernels.py`` or
``python -m gpumodel.calibration.bench``) this compares the measured time with

* the calibrated estimate (``gm.estimate_time`` with the given calibration),
* the uncalibrated estimate (datasheet peaks x the default efficiencies), and
* the datasheet roofline alone (``gm.roofline(op, gpu).seconds``: peak rates, no overheads),

and prints, per op family and overall, the median and 90th percentile of
``|predicted / measured - 1|`` (and the median signed error, to show bias).

Usage::

    python bench/calibration_accuracy.py                                   # shipped H200 calibration
    python bench/calibration_accuracy.py --calibration my-gpu.yaml --points my-validation.jsonl
    python bench/calibration_accuracy.py --json

By default the points are every committed VALIDATION file (``validation*.jsonl``), each kernel timed
as the median over the runs that measured it (``repeat_<name>*.jsonl`` are further runs); the last
lines say whether the acceptance bar holds: overall median <= 5% and p90 <= 15%, every family
median <= 8% and p90 <= 25%.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "data" / "calibration"
#: the acceptance bar: (median, p90) of |predicted / measured - 1| overall and per family
BAR_OVERALL, BAR_FAMILY = (0.05, 0.15), (0.08, 0.25)


def measured_points(points_path):
    """The kernels of one or more point files, each timed as the median of its runs, grouped into broadcast ops
    (a :class:`~gpumodel.calibration.points.PointSet`: ``.points`` the rows, ``.times`` the measured times [s])."""
    from gpumodel.calibration.fit import median_of_runs, point_set

    paths = [points_path] if isinstance(points_path, (str, Path)) else list(points_path)
    return point_set([pt for path in paths for pt in median_of_runs(path)])


def predicted(model, ps) -> np.ndarray:
    """``model``'s time of every kernel of a point set [s], in the order of ``ps.points``."""
    from gpumodel.calibration.model import predict

    out = np.empty(len(ps.points))
    for _, op, _, idx in ps.groups:
        out[idx] = predict(model, op).time_s
    return out


def evaluate(calibration, points_path, gpu=None) -> dict:
    """Per-family accuracy of the calibrated, uncalibrated and roofline estimates on one or more point files."""
    import gpumodel as gm
    from gpumodel.calibration.model import CalibrationModel, default_parameters

    ps = measured_points(points_path)
    g = gm.gpu(gpu or calibration.gpu)
    models = {"calibrated": calibration.model(),
              "uncalibrated": CalibrationModel(default_parameters(g), g.sm_count, calibrated=False, gpu=g)}
    preds = {name: predicted(model, ps) for name, model in models.items()}
    preds["roofline"] = np.empty(len(ps.points))
    for _, op, _, idx in ps.groups:
        preds["roofline"][idx] = gm.roofline(op, g).seconds
    fams = ps.families()
    out = {}
    for name, pred in preds.items():
        err = pred / ps.times - 1.0
        table = {}
        for fam in [*sorted(set(fams)), "overall"]:
            e = err if fam == "overall" else err[fams == fam]
            table[fam] = {"n": int(e.size), "median": float(np.median(np.abs(e))),
                          "p90": float(np.percentile(np.abs(e), 90)), "bias": float(np.median(e))}
        out[name] = table
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calibration", default=None, help="calibration YAML (default: the shipped one for --gpu)")
    p.add_argument("--gpu", default="h200-sxm")
    p.add_argument("--points", nargs="+", default=sorted(str(x) for x in DATA.glob("validation*.jsonl")),
                   help="measured points (JSON lines); default: every validation*.jsonl")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from gpumodel.calibration.fit import repeat_files
    from gpumodel.calibration.record import calibration_for, load_calibration

    cal = load_calibration(args.calibration) if args.calibration else calibration_for(args.gpu)
    if cal is None:
        print(f"no calibration for {args.gpu}; pass --calibration FILE", file=sys.stderr)
        return 1
    res = evaluate(cal, args.points, args.gpu if not args.calibration else None)
    if args.json:
        import json

        print(json.dumps(res, indent=2))
        return 0
    print(f"points: {', '.join(Path(x).name for x in args.points)}\n"
          f"calibration: {cal.gpu} ({cal.device_name}, {cal.date[:10]})\n")
    fams = list(res["calibrated"])
    head = f"{'family':22s} {'n':>4s} | {'calibrated':^22s} | {'uncalibrated':^22s} | {'datasheet roofline':^22s}"
    print(head)
    print(f"{'':22s} {'':>4s} | " + " | ".join(f"{'median':>6s} {'p90':>6s} {'bias':>7s}" for _ in range(3)))
    print("-" * len(head))
    for fam in fams:
        cells = []
        for name in ("calibrated", "uncalibrated", "roofline"):
            r = res[name][fam]
            cells.append(f"{r['median']:6.1%} {r['p90']:6.1%} {r['bias']:+7.1%}")
        print(f"{fam:22s} {res['calibrated'][fam]['n']:4d} | " + " | ".join(cells))
    misses = bar_misses(res["calibrated"])
    print("\nbar (overall median <= 5%, p90 <= 15%; every family median <= 8%, p90 <= 25%): "
          + ("met" if not misses else "missed by " + ", ".join(misses)))
    for first in sorted(DATA.glob("validation*.jsonl")):
        again = repeat_files(first)
        if not again:
            continue
        print(f"\nrun to run: the same kernels measured again ({', '.join(x.name for x in again)} over {first.name})")
        for fam, r in repeatability(first, *again).items():
            print(f"  {fam:22s} n={r['n']:4d}  median |diff| {r['median']:6.1%}  p90 {r['p90']:6.1%}  "
                  f"signed median {r['bias']:+6.1%}")
    return 0


def repeatability(first: Path, *again: Path) -> dict:
    """Per family, how far each further measurement of a kernel is from the first: ``{n, median, p90, bias}``."""
    from gpumodel.calibration.fit import family_of, load_points
    from gpumodel.calibration.plan import call_key as key

    base = {key(p): p["time_s"] for p in load_points(first)[1] if p.get("time_s")}
    diffs: dict[str, list[float]] = {}
    for p in (pt for path in again for pt in load_points(path)[1]):
        if p.get("time_s") and key(p) in base:
            diffs.setdefault(family_of(p), []).append(p["time_s"] / base[key(p)] - 1)
    out = {}
    for fam in sorted(diffs):
        d = np.asarray(diffs[fam])
        out[fam] = {"n": len(d), "median": float(np.median(np.abs(d))), "p90": float(np.percentile(np.abs(d), 90)),
                    "bias": float(np.median(d))}
    return out


def bar_misses(table: dict) -> list[str]:
    """The families (and "overall") of an accuracy table that miss the acceptance bar."""
    out = []
    for fam, r in table.items():
        med, p90 = BAR_OVERALL if fam == "overall" else BAR_FAMILY
        if r["median"] > med or r["p90"] > p90:
            out.append(f"{fam} ({r['median']:.1%} / {r['p90']:.1%})")
    return out


if __name__ == "__main__":
    sys.exit(main())
