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

With ``--paired``, the same shapes timed on the calibrated GPU (the reference) as well, the script scores the
transfer alone: per family, the measured ratio target / reference of each kernel against the model's ratio
(the transferred estimate over the calibrated one). The reference model's own misses cancel in the ratio, so
what is left is what the priors and datasheets carry wrongly.

Usage::

    python bench/transfer_measured.py                       # every measured GPU under tests/data/calibration/
    python bench/transfer_measured.py --gpu h100 --points my-h100-kernels.jsonl
    python bench/transfer_measured.py --gpu h100 --points fresh.jsonl --calibration my-h100.yaml   # and your own
    python bench/transfer_measured.py --gpu h100 --points h100/validation_round7.jsonl \
        --paired h200_round7.jsonl                            # the transfer's own error, shape by shape
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


def _by_family(fams: np.ndarray):
    """(family, mask) for each op family, then ("overall", all)."""
    for fam in [*sorted(set(fams)), "overall"]:
        yield fam, (np.ones(len(fams), bool) if fam == "overall" else fams == fam)


def _errors(err: np.ndarray) -> dict:
    """Median and p90 of |err| and the bias (median of err) of relative errors ``err``."""
    return {"median": float(np.median(np.abs(err))), "p90": float(np.percentile(np.abs(err), 90)),
            "bias": float(np.median(err))}


def measured_points(paths: list[Path]):
    """The kernels of the point files ``paths``, each the median of its runs, grouped into broadcast ops."""
    from gpumodel.calibration.fit import median_of_runs, point_set

    return point_set([pt for path in paths for pt in median_of_runs(path)])


def transferred_times(gpu: str, paths: list[Path]) -> tuple:
    """``(point set, transferred estimate of each kernel [s])`` of the kernels of ``paths`` measured on ``gpu``."""
    import gpumodel as gm
    from gpumodel.calibration.model import predict
    from gpumodel.calibration.transfer import transfer

    ps, model = measured_points(paths), transfer(gm.gpu(gpu)).model
    pred = np.empty(len(ps.points))
    for _, op, _, idx in ps.groups:
        pred[idx] = predict(model, op).time_s
    return ps, pred


def evaluate(gpu: str, paths: list[Path], calibration: str | Path | None = None) -> dict:
    """Per-family errors of the transferred, datasheet-default and roofline estimates on ``paths``, and of a user's
    own ``calibration`` of the GPU (a YAML path) when given."""
    import gpumodel as gm
    from gpumodel.calibration.model import CalibrationModel, default_parameters, predict
    from gpumodel.calibration.transfer import transfer

    g = gm.gpu(gpu)
    names = {json.loads(Path(p).read_text().splitlines()[0])["environment"]["device_name"] for p in paths}
    ps = measured_points(paths)
    t = transfer(g)
    models = {"transferred": t.model,
              "datasheet": CalibrationModel(default_parameters(g), g.sm_count, calibrated=False, gpu=g)}
    if calibration is not None:
        from gpumodel.calibration.record import load_calibration

        models["calibration"] = load_calibration(calibration).model()
    preds = {name: np.empty(len(ps.points)) for name in (*models, "roofline")}
    expected = np.full(len(ps.points), np.nan)
    for _, op, _, idx in ps.groups:
        for name, model in models.items():
            preds[name][idx] = predict(model, op).time_s
        preds["roofline"][idx] = gm.roofline(op, g).seconds
        e = t.expected_error(op)
        expected[idx] = np.nan if e is None else e
    fams = ps.families()
    out = {"gpu": g.name, "devices": sorted(names), "points": len(ps.points), "families": {}}
    for fam, sel in _by_family(fams):
        row = {"n": int(sel.sum()), "expected_median": float(np.nanmedian(expected[sel]))
               if np.isfinite(expected[sel]).any() else None}
        for name, pred in preds.items():
            row[name] = _errors(pred[sel] / ps.times[sel] - 1.0)
        out["families"][fam] = row
    return out


def paired(gpu: str, paths: list[Path], ref_paths: list[Path]) -> dict:
    """Per family: measured target / reference time ratio of each shape both measured, against the model's."""
    import gpumodel as gm
    from gpumodel.calibration.fit import median_of_runs, point_set
    from gpumodel.calibration.model import predict
    from gpumodel.calibration.plan import call_key
    from gpumodel.calibration.record import calibration_for
    from gpumodel.calibration.transfer import REFERENCE, transfer

    ref_times = {call_key(pt): pt["time_s"] for path in ref_paths for pt in median_of_runs(path)}
    points = [pt for path in paths for pt in median_of_runs(path) if pt.get("time_s") and call_key(pt) in ref_times]
    if not points:
        raise SystemExit("--paired: no shape of --points was measured in the reference files")
    ps = point_set(points)
    target, reference = transfer(gm.gpu(gpu)).model, calibration_for(REFERENCE).model()
    ratio_model = np.empty(len(ps.points))
    for _, op, _, idx in ps.groups:
        ratio_model[idx] = predict(target, op).time_s / predict(reference, op).time_s
    ratio_measured = ps.times / np.array([ref_times[call_key(pt)] for pt in points])  # point_set keeps the order
    err = ratio_model / ratio_measured - 1.0
    fams = ps.families()
    out = {"gpu": gm.gpu(gpu).name, "reference": REFERENCE, "points": len(ps.points), "families": {}}
    for fam, sel in _by_family(fams):
        out["families"][fam] = {"n": int(sel.sum()), "measured_ratio": float(np.median(ratio_measured[sel])),
                                "model_ratio": float(np.median(ratio_model[sel])), **_errors(err[sel])}
    return out


def _print_paired(res: dict) -> None:
    print(f"{res['gpu']} over {res['reference']}: {res['points']} shapes measured on both\n")
    print(f"{'family':20s} {'n':>4s} | {'measured':>8s} {'model':>7s} | {'ratio error':^22s}")
    print(f"{'':20s} {'':>4s} | {'ratio':>8s} {'ratio':>7s} | {'median':>6s} {'p90':>6s} {'bias':>7s}")
    for fam, row in res["families"].items():
        print(f"{fam:20s} {row['n']:4d} | {row['measured_ratio']:8.3f} {row['model_ratio']:7.3f} | "
              f"{row['median']:6.1%} {row['p90']:6.1%} {row['bias']:+7.1%}")
    print()


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
        own = (f" | {row['calibration']['median']:6.1%} {row['calibration']['p90']:6.1%} "
               f"{row['calibration']['bias']:+7.1%}") if "calibration" in row else ""
        print(f"{fam:20s} {row['n']:4d} | {cells[0]} | {exp:>8s} | {cells[1]} | {cells[2]}{own}")
    if "calibration" in next(iter(res["families"].values())):
        print("(last three columns: --calibration, the GPU's own calibration: median, p90, bias)")
    print()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default=None, help="target GPU (default: every folder of MEASURED)")
    p.add_argument("--points", nargs="+", default=None, help="measured points (JSON lines, as measure_kernels.py "
                   "writes them); default: validation*.jsonl of the GPU's folder")
    p.add_argument("--paired", nargs="+", default=None, help="the same shapes measured on the calibrated GPU: "
                   "score the transfer alone (measured time ratios against the model's)")
    p.add_argument("--calibration", default=None, help="a calibration YAML of --gpu (what gpumodel calibrate wrote): "
                   "scored beside the transfer")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.points and not args.gpu:
        p.error("--points needs --gpu")
    if args.paired:
        if not (args.gpu and args.points):
            p.error("--paired needs --gpu and --points")
        res = paired(args.gpu, [Path(x) for x in args.points], [Path(x) for x in args.paired])
        print(json.dumps(res, indent=2)) if args.json else _print_paired(res)
        return 0
    jobs = ([(args.gpu, [Path(x) for x in args.points])] if args.points else
            [(gpu, sorted((DATA / folder).glob("validation*.jsonl"))) for folder, gpu in MEASURED.items()
             if args.gpu in (None, folder, gpu)])
    results = [evaluate(gpu, paths, args.calibration) for gpu, paths in jobs if paths]
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
