"""Transferred vs datasheet estimates against kernels measured on a GPU the calibration never saw.

The H200 calibration carried to another GPU (:func:`gpumodel.calibration.transfer.transfer`) is
compared, kernel by kernel, with times measured on that GPU the same way the H200's validation set
was measured (``bench/measure_kernels.py``: CUDA events on ``do_bench``'s schedule, L2 flushed, median;
each kernel's median over the runs committed beside the file). Nothing measured on the target enters
the model: the transferred parameters come from the H200's fit, the two datasheets and the
architecture priors alone.

The script prints, per op family, the transferred estimate's median and p90 relative error and its
bias (median of predicted / measured - 1), the same for the datasheet model with default
efficiencies and for the bare datasheet roofline, and the transfer's own expected median error
(:meth:`~gpumodel.calibration.transfer.Transfer.expected_error`) beside the achieved one.

Usage::

    python bench/transfer_measured.py                       # every measured GPU under tests/data/calibration/
    python bench/transfer_measured.py --gpu h100 --points my-h100-kernels.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data" / "calibration"
#: measured GPUs other than the calibrated one: folder under DATA -> gpumodel GPU name
MEASURED = {"h100": "h100-sxm"}


def evaluate(gpu: str, paths: list[Path]) -> dict:
    """Per-family errors of the transferred, datasheet-default and roofline estimates on ``paths``."""
    import gpumodel as gm
    from gpumodel.calibration.fit import median_of_runs, point_set
    from gpumodel.calibration.model import CalibrationModel, default_parameters, predict
    from gpumodel.calibration.transfer import transfer

    g = gm.gpu(gpu)
    points = [pt for path in paths for pt in median_of_runs(path)]
    names = {json.loads(Path(p).read_text().splitlines()[0])["environment"]["device_name"] for p in paths}
    ps = point_set(points)
    t = transfer(g)
    models = {"transferred": t.model,
              "datasheet": CalibrationModel(default_parameters(g), g.sm_count, calibrated=False, gpu=g)}
    preds = {name: np.empty(len(ps.points)) for name in (*models, "roofline")}
    expected = np.full(len(ps.points), np.nan)
    for _, op, _, idx in ps.groups:
        for name, model in models.items():
            preds[name][idx] = predict(model, op).time_s
        preds["roofline"][idx] = gm.roofline(op, g).time_s
        e = t.expected_error(op)
        expected[idx] = np.nan if e is None else e
    fams = ps.families()
    out = {"gpu": g.name, "devices": sorted(names), "points": len(ps.points), "families": {}}
    for fam in [*sorted(set(fams)), "overall"]:
        sel = np.ones(len(fams), bool) if fam == "overall" else fams == fam
        row = {"n": int(sel.sum()), "expected_median": float(np.nanmedian(expected[sel]))
               if np.isfinite(expected[sel]).any() else None}
        for name, pred in preds.items():
            err = pred[sel] / ps.times[sel] - 1.0
            row[name] = {"median": float(np.median(np.abs(err))), "p90": float(np.percentile(np.abs(err), 90)),
                         "bias": float(np.median(err))}
        out["families"][fam] = row
    return out


def _print(res: dict) -> None:
    print(f"{res['gpu']}: {res['points']} kernels measured on {', '.join(res['devices'])}\n")
    head = (f"{'family':20s} {'n':>4s} | {'transferred':^22s} | {'expected':>8s} | {'datasheet defaults':^22s} | "
            f"{'roofline':^22s}")
    print(head)
    print(f"{'':20s} {'':>4s} | " + f"{'median':>6s} {'p90':>6s} {'bias':>7s} | {'median':>8s} | "
          + " | ".join(f"{'median':>6s} {'p90':>6s} {'bias':>7s}" for _ in range(2)))
    print("-" * len(head))
    for fam, row in res["families"].items():
        cells = [f"{row[k]['median']:6.1%} {row[k]['p90']:6.1%} {row[k]['bias']:+7.1%}"
                 for k in ("transferred", "datasheet", "roofline")]
        exp = "" if row["expected_median"] is None else f"{row['expected_median']:.1%}"
        print(f"{fam:20s} {row['n']:4d} | {cells[0]} | {exp:>8s} | {cells[1]} | {cells[2]}")
    print()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default=None, help="target GPU (default: every folder of MEASURED)")
    p.add_argument("--points", nargs="+", default=None, help="measured points (JSON lines, as measure_kernels.py "
                   "writes them); default: validation*.jsonl of the GPU's folder")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.points and not args.gpu:
        p.error("--points needs --gpu")
    jobs = ([(args.gpu, [Path(x) for x in args.points])] if args.points else
            [(gpu, sorted((DATA / folder).glob("validation*.jsonl"))) for folder, gpu in MEASURED.items()
             if args.gpu in (None, folder, gpu)])
    results = [evaluate(gpu, paths) for gpu, paths in jobs if paths]
    if not results:
        print("no measured points for that GPU", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for res in results:
            _print(res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
