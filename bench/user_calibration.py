"""A user's own calibration against the transfer, on kernels, serving steps and training steps measured after it.

Reads the committed runs of ``bench/calibrate_and_check.py`` (``tests/data/calibration/user_<gpu>/``): a fresh
``gpumodel calibrate`` at its default budget (``calibration.yaml``, ``host.yaml``), then, in later separate
processes on the same machine, fresh kernels (``kernels.jsonl``), serving steps replayed as CUDA graphs
(``serving.jsonl``) and Hugging Face training steps of 1-8B models (``steps.jsonl``). Each is predicted twice:

* **transfer**: what the library answers with no file of the user's, the shipped calibration carried to that GPU
  (on the H200, the shipped calibration itself) and the shipped host costs;
* **user**: ``calibration=`` and ``host=`` the two files ``gpumodel calibrate`` wrote.

and the table gives, per kind, the count, the median of ``|predicted / measured - 1|`` and the signed median of
``predicted / measured - 1`` of each; ``held-out kernels`` are the calibration run's own kernels it held out of its
fit (every fifth of ``calibrate_points.jsonl``). The bars of issue 33 follow: the user's calibration no worse than
the transfer at the median, serving steps within 5% at the median, training steps within 10% with a signed
median within 5%.

Usage::

    python bench/user_calibration.py                 # every user_<gpu>/ folder
    python bench/user_calibration.py --gpu h100      # one
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
DATA = ROOT / "tests" / "data" / "calibration"
#: the calibrate run holds every this many-th kernel out of its fit (gpumodel.cli.calibrate.HOLD_OUT_EVERY)
HOLD_OUT_EVERY = 5


def errors(pred, meas) -> dict:
    """``n``, median ``|err|`` and signed median of ``err = pred / meas - 1``."""
    e = np.asarray(pred, dtype=float) / np.asarray(meas, dtype=float) - 1.0
    if not e.size:
        return {"n": 0, "median": float("nan"), "signed": float("nan")}
    return {"n": int(e.size), "median": float(np.median(np.abs(e))), "signed": float(np.median(e))}


def kernel_rows(folder: Path, gpu: str, cal) -> list[tuple]:
    """(label, transfer errors, user errors) of the fresh kernels and of the calibration run's held-out kernels."""
    from gpumodel.calibration.estimate import model_for
    from gpumodel.calibration.fit import load_points, point_set, relative_errors

    transfer = model_for(gpu)[0]
    rows = []
    sets = [("kernels, fresh", load_points(folder / "kernels.jsonl")[1])]
    if (folder / "calibrate_points.jsonl").exists():   # every row as measured, failed ones too: the run's count
        lines = [json.loads(x) for x in (folder / "calibrate_points.jsonl").read_text().splitlines() if x.strip()]
        pts = [r for r in lines if "environment" not in r]
        sets.append(("kernels, held out of the fit", [p for p in pts[HOLD_OUT_EVERY - 1::HOLD_OUT_EVERY]
                                                      if p.get("time_s")]))
    for label, points in sets:
        ps = point_set(points)
        rows.append((label, errors(1 + relative_errors(transfer, ps), np.ones(len(ps.points))),
                     errors(1 + relative_errors(cal.model(), ps), np.ones(len(ps.points)))))
    return rows


def serving_rows(folder: Path, gpu: str, cal) -> list[tuple]:
    """(label, transfer errors, user errors) of the decode and prefill steps (CUDA-graph engine)."""
    import serving_accuracy as sa

    rows = []
    measured = sa.load_measured(folder / "serving.jsonl")
    for kind in ("decode", "prefill"):
        sel = [r for r in measured if r["engine"] == "graph" and r["kind"] == kind]
        meas = [r["seconds"] for r in sel]
        rows.append((f"serving, {kind} steps", errors(sa.predict_steps(sel, kind, gpu)[0], meas),
                     errors(sa.predict_steps(sel, kind, gpu, cal)[0], meas)))
    return rows


def step_rows(folder: Path, gpu: str, cal, host) -> list[tuple]:
    """(label, transfer errors, user errors) of the training steps, all, then those of 7-8B models."""
    import step_time_accuracy as st

    steps = st.load([folder / "steps.jsonl"])
    meas = np.array([r["step_s_median"] for r in steps])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = np.array([st.predict(r, gpu=gpu).seconds for r in steps])
        mine = np.array([st.predict(r, gpu=gpu, calibration=cal, host=host).seconds for r in steps])
    big = np.array([r["n_params"] > 5e9 for r in steps], dtype=bool)
    return [("training steps, 1-8B", errors(base, meas), errors(mine, meas)),
            ("training steps, 7-8B only", errors(base[big], meas[big]), errors(mine[big], meas[big]))]


def evaluate(folder: Path) -> dict:
    """Every row of one GPU's folder, and where its files come from."""
    from gpumodel.calibration.record import load_calibration
    from gpumodel.training.hostcost import load_host_costs

    cal = load_calibration(folder / "calibration.yaml")
    host = load_host_costs(folder / "host.yaml")
    rows = (kernel_rows(folder, cal.gpu, cal) + serving_rows(folder, cal.gpu, cal)
            + step_rows(folder, cal.gpu, cal, host))
    return {"gpu": cal.gpu, "device": cal.device_name, "kernels_fitted": len(cal.points),
            "measured_families": cal.measured_families,
            "sustained_slowdown": cal.parameters.get("sustained_slowdown"),
            "rows": [{"what": w, "transfer": t, "user": u} for w, t, u in rows]}


def bars(res: dict) -> list[str]:
    """The issue's bars on one GPU, each met or not."""
    rows = {r["what"]: r for r in res["rows"]}
    out = []
    for r in res["rows"]:
        ok = r["user"]["median"] <= r["transfer"]["median"] + 1e-9
        out.append(f"{'met' if ok else 'NOT met':8s} {r['what']}: user {r['user']['median']:.1%} <= transfer "
                   f"{r['transfer']['median']:.1%}")
    for kind in ("decode", "prefill"):
        u = rows[f"serving, {kind} steps"]["user"]
        out.append(f"{'met' if u['median'] <= 0.05 else 'NOT met':8s} serving {kind} median {u['median']:.1%} <= 5%")
    u = rows["training steps, 1-8B"]["user"]
    ok = u["median"] <= 0.10 and abs(u["signed"]) <= 0.05
    out.append(f"{'met' if ok else 'NOT met':8s} training steps median {u['median']:.1%} <= 10%, "
               f"|signed| {abs(u['signed']):.1%} <= 5%")
    return out


def print_result(res: dict) -> None:
    print(f"{res['gpu']} ({res['device']}): a fresh calibration of {res['kernels_fitted']} fitted kernels, "
          f"{len(res['measured_families'])} families, sustained_slowdown {res['sustained_slowdown']}")
    print(f"{'':32s} {'n':>4s} | {'transfer':^17s} | {'user calibration':^17s}")
    print(f"{'':32s} {'':>4s} | {'median':>7s} {'signed':>8s} | {'median':>7s} {'signed':>8s}")
    for r in res["rows"]:
        t, u = r["transfer"], r["user"]
        print(f"{r['what']:32s} {t['n']:4d} | {t['median']:7.1%} {t['signed']:+8.1%} | {u['median']:7.1%} "
              f"{u['signed']:+8.1%}")
    print("\n".join(bars(res)) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default=None, help="one folder: user_<gpu> (h100, h200)")
    ap.add_argument("--folder", type=Path, nargs="+", default=None,
                    help="folders as bench/calibrate_and_check.py writes them (default: the committed user_<gpu>/)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    folders = args.folder or sorted(p for p in DATA.glob("user_*")
                                    if p.is_dir() and (args.gpu is None or p.name == f"user_{args.gpu}"))
    if not folders:
        print("no user_<gpu> folder under tests/data/calibration", file=sys.stderr)
        return 1
    results = [evaluate(f) for f in folders]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for res in results:
            print_result(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
