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

``--detail`` adds where the two calibrations part on the prefill steps (:func:`detail`): each kernel family's time
under each and what its change moves the summed error by, the signed error by step length, the full-rate bf16 GEMMs
by how long each ran, what each calibration's rates make of the sustained-load run's kernels, and each one's error on
the decode-shaped kernels timed alone (:func:`decode_shaped`: attention of one query token, matmuls of at most 64
rows or columns), the kernels a replayed decode step is made of.

Usage::

    python bench/user_calibration.py                 # every user_<gpu>/ folder
    python bench/user_calibration.py --gpu h100      # one
    python bench/user_calibration.py --detail        # and where the calibrations part on prefill
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


def errors(pred, meas) -> dict:
    """``n``, median ``|err|`` and signed median of ``err = pred / meas - 1``."""
    e = np.asarray(pred, dtype=float) / np.asarray(meas, dtype=float) - 1.0
    if not e.size:
        return {"n": 0, "median": float("nan"), "signed": float("nan")}
    return {"n": int(e.size), "median": float(np.median(np.abs(e))), "signed": float(np.median(e))}


def unfitted_kernels(folder: Path) -> list[tuple[str, list[dict]]]:
    """(label, points) of the kernels no calibration of the folder was fitted on: the fresh kernels, and the
    calibration run's held-out ones (every fifth row as measured, failed ones dropped)."""
    from gpumodel.calibration.fit import load_points

    from user_calibration_refit import split_points

    sets = [("kernels, fresh", load_points(folder / "kernels.jsonl")[1])]
    if (folder / "calibrate_points.jsonl").exists():   # every row as measured, failed ones too: the run's count
        held = split_points(folder / "calibrate_points.jsonl")[2]
        sets.append(("kernels, held out of the fit", [p for p in held if p.get("time_s")]))
    return sets


def kernel_rows(folder: Path, gpu: str, cal) -> list[tuple]:
    """(label, transfer errors, user errors) of the fresh kernels and of the calibration run's held-out kernels."""
    from gpumodel.calibration.estimate import model_for
    from gpumodel.calibration.fit import point_set, relative_errors

    transfer = model_for(gpu)[0]
    rows = []
    for label, points in unfitted_kernels(folder):
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


#: measured step lengths [s] that split the prefill steps into bins (:func:`prefill_by_length`)
LENGTH_EDGES_S = (0.01, 0.03, 0.1)
#: measured kernel times [s] that split the GEMMs into bins (:func:`gemms_by_duration`)
DURATION_EDGES_S = (2e-4, 1e-3)
#: the sustained-load run's kernels that follow the SM clock (``gpumodel.calibration.sustained``'s compute-bound ops)
_CLOCK_BOUND_OPS = ("matmul", "bmm", "attention")


def _prefill_rows(folder: Path) -> list[dict]:
    import serving_accuracy as sa

    return [r for r in sa.load_measured(folder / "serving.jsonl") if r["engine"] == "graph" and r["kind"] == "prefill"]


def _bins(edges: tuple) -> list[tuple[float, float]]:
    bounds = (0.0, *edges, float("inf"))
    return list(zip(bounds[:-1], bounds[1:]))


def prefill_families(folder: Path, gpu: str, cal) -> dict:
    """Per kernel family of the prefill steps (the serving model's ``breakdown``), under the transfer and the user's
    calibration: the family's time summed over the steps [s], the ratio user / transfer, its share of the measured
    time [1] and ``moves``, how far the change of calibration moves the summed error
    (:math:`\\sum (t_{user} - t_{transfer}) / \\sum t_{measured}`) [1]; with ``measured_s``, the steps' measured sum [s].
    """
    import serving_accuracy as sa
    from gpumodel.serving import prefill_time

    rows = _prefill_rows(folder)
    by_shape: dict[str, list[dict]] = {}
    for r in rows:
        by_shape.setdefault(r["shape"], []).append(r)
    sums: dict[str, list[float]] = {}
    for sel in by_shape.values():
        cfg = sa.lean_config(sel[0])
        args = dict(batch_size=np.array([r["batch"] for r in sel]), prompt_len=np.array([r["prompt_len"] for r in sel]))
        for j, c in enumerate((None, cal)):
            for fam, t in prefill_time(cfg, gpu, calibration=c, **args).breakdown.items():
                sums.setdefault(fam, [0.0, 0.0])[j] += float(np.sum(t))
    measured = float(sum(r["seconds"] for r in rows))
    fams = {fam: {"transfer_s": t, "user_s": u, "ratio": u / t if t > 0 else float("nan"), "share": t / measured,
                  "moves": (u - t) / measured}
            for fam, (t, u) in sorted(sums.items(), key=lambda kv: -kv[1][0])}
    return {"n": len(rows), "measured_s": measured, "families": fams}


def prefill_by_length(folder: Path, gpu: str, cal, edges: tuple = LENGTH_EDGES_S) -> list[dict]:
    """The prefill steps' signed median error under each calibration, in bins of measured step length [s]."""
    import serving_accuracy as sa

    rows = _prefill_rows(folder)
    meas = np.array([r["seconds"] for r in rows])
    err = {name: sa.predict_steps(rows, "prefill", gpu, c)[0] / meas - 1.0 for name, c in (("transfer", None),
                                                                                           ("user", cal))}
    out = []
    for lo, hi in _bins(edges):
        m = (meas >= lo) & (meas < hi)
        out.append({"lo_s": lo, "hi_s": hi, "n": int(m.sum()),
                    **{k: float(np.median(e[m])) if m.any() else float("nan") for k, e in err.items()}})
    return out


def gemms_by_duration(points: list[dict], models: dict, gpu, edges: tuple = DURATION_EDGES_S) -> list[dict]:
    """The signed median error of each model on the bf16 GEMMs that ran at full tensor-core rate (at least half the
    datasheet's dense bf16 peak: cuBLAS's own tiles, not the CUTLASS fallbacks or the memory-bound products), in bins
    of measured kernel time [s]."""
    from gpumodel.calibration.fit import point_set, relative_errors
    from gpumodel.vocabulary import resolve_gpu

    floor = 0.5 * resolve_gpu(gpu).peak_flops("bf16")
    ps = point_set(points)
    errs = {name: relative_errors(m, ps) for name, m in models.items()}
    sel, times = [], []
    for fam, op, t, idx in ps.groups:
        if fam == "matmul" and op.dtype.value == "bf16":
            flops = np.broadcast_to(np.asarray(op.flops, dtype=float), t.shape)
            keep = flops / t >= floor
            sel += list(idx[keep])
            times += list(t[keep])
    sel, times = np.array(sel, dtype=int), np.array(times)
    out = []
    for lo, hi in _bins(edges):
        m = (times >= lo) & (times < hi)
        out.append({"lo_s": lo, "hi_s": hi, "n": int(m.sum()),
                    **{k: float(np.median(e[sel[m]])) if m.any() else float("nan") for k, e in errs.items()}})
    return out


def sustained_carried(path: Path, models: dict, last_windows: int = 8) -> dict:
    """What each model makes of the sustained-load run's clock-bound kernels (``sustained.jsonl``): per kernel the
    model's time over the kernel timed alone after an idle pause (``isolated_s``) and the back-to-back time (median of
    the last ``last_windows`` windows) over the model's; the medians over the kernels. A model above 1 on the first
    already carries that much of the power limit's toll in its rates; the second is what back-to-back work adds to it.
    """
    import statistics

    from gpumodel.calibration.fit import point_set, relative_errors

    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r.get("op") in _CLOCK_BOUND_OPS and r.get("isolated_s") and r.get("sustained")]
    loaded = np.array([statistics.median(w["per_call_s"] for w in r["sustained"][-last_windows:]) for r in rows])
    alone = point_set([{**r, "time_s": r["isolated_s"]} for r in rows])
    out = {"kernels": [f"{r['op']} {r['dtype']} {r['shape']}" for r in rows],
           "sustained_over_isolated": [float(x) for x in loaded / np.array([r["isolated_s"] for r in rows])]}
    for name, m in models.items():
        ratio = 1.0 + relative_errors(m, alone)
        out[name] = {"model_over_isolated": [float(x) for x in ratio],
                     "sustained_over_model": [float(x) for x in loaded / (ratio * alone.times)],
                     "median_model_over_isolated": float(np.median(ratio)),
                     "median_sustained_over_model": float(np.median(loaded / (ratio * alone.times)))}
    return out


def kernel_sets(folder: Path) -> list[dict]:
    """Every kernel timed alone on the folder's GPU: its fresh kernels, the calibration run's points, and the GPU's
    other committed kernel sets (``tests/data/calibration/<gpu>/validation_round*.jsonl``)."""
    from gpumodel.calibration.fit import load_points

    files = [folder / "kernels.jsonl", folder / "calibrate_points.jsonl",
             *sorted((DATA / folder.name.removeprefix("user_")).glob("validation_round*.jsonl"))]
    return [p for f in files if f.exists() for p in load_points(f)[1]]


def detail(folder: Path) -> dict:
    """Where the user's calibration and the transfer part on the prefill steps (see the module docstring)."""
    from gpumodel.calibration.estimate import model_for

    cal = current_calibration(folder)
    models = {"transfer": model_for(cal.gpu)[0], "user": cal.model()}
    out = {"families": prefill_families(folder, cal.gpu, cal), "by_length": prefill_by_length(folder, cal.gpu, cal),
           "gemms": gemms_by_duration(kernel_sets(folder), models, cal.gpu)}
    if (folder / "sustained.jsonl").exists():
        out["sustained"] = sustained_carried(folder / "sustained.jsonl", models)
    out["decode_shaped"] = decode_shaped(folder, models)
    return out


def decode_shaped(folder: Path, models: dict) -> list[dict]:
    """Each model's signed median and median error on the decode-shaped kernels timed alone that no calibration was
    fitted on (:func:`unfitted_kernels`): attention of one query token (``seq`` 1) and matmuls with
    ``min(m, n) <= 64`` (a decode step's GEMVs)."""
    from gpumodel.calibration.fit import point_set, relative_errors

    def kind(p: dict):
        s = p.get("shape", {})
        if p.get("op") == "attention" and s.get("seq") == 1:
            return "attention, one query token"
        if p.get("op") == "matmul" and min(s.get("m", np.inf), s.get("n", np.inf)) <= 64:
            return "matmul, <= 64 rows"
        return None

    out = []
    for label, points in unfitted_kernels(folder):
        groups: dict[str, list] = {}
        for p in points:
            if (k := kind(p)) is not None:
                groups.setdefault(k, []).append(p)
        for k, pts in sorted(groups.items()):
            ps = point_set(pts)
            out.append({"set": label, "kernels": k, "n": len(pts),
                        **{m: errors(1 + relative_errors(model, ps), np.ones(len(pts))) for m, model in models.items()}})
    return out


def _span(lo: float, hi: float, unit: float, name: str) -> str:
    return f"{lo / unit:g}-{hi / unit:g} {name}" if np.isfinite(hi) else f">= {lo / unit:g} {name}"


def print_detail(d: dict) -> None:
    f = d["families"]
    print(f"prefill steps ({f['n']}, {f['measured_s']:.3f} s measured): each family's time summed, transfer -> user")
    for fam, r in f["families"].items():
        print(f"  {fam:12s} {r['share']:6.1%} of the measured time  {r['transfer_s'] * 1e3:9.2f} -> "
              f"{r['user_s'] * 1e3:9.2f} ms  x{r['ratio']:.3f}  moves the summed error {r['moves']:+.2%}")
    print("prefill signed median error by measured step length:  transfer | user")
    for b in d["by_length"]:
        print(f"  {_span(b['lo_s'], b['hi_s'], 1e-3, 'ms'):14s} n={b['n']:3d}  {b['transfer']:+6.1%} | {b['user']:+6.1%}")
    print("full-rate bf16 GEMMs timed alone (fresh, calibration run, other committed sets), signed median by kernel "
          "time:  transfer | user")
    for b in d["gemms"]:
        print(f"  {_span(b['lo_s'], b['hi_s'], 1e-3, 'ms'):14s} n={b['n']:3d}  {b['transfer']:+6.1%} | {b['user']:+6.1%}")
    if "sustained" in d:
        s = d["sustained"]
        print("sustained-load run's clock-bound kernels: model / timed alone after a pause, back to back / model")
        for i, k in enumerate(s["kernels"]):
            print(f"  {k[:70]:70s} back to back / alone {s['sustained_over_isolated'][i]:.3f}; " + "; ".join(
                f"{n} {s[n]['model_over_isolated'][i]:.3f}, {s[n]['sustained_over_model'][i]:.3f}"
                for n in ("transfer", "user")))
        print("  median: " + "; ".join(f"{n} {s[n]['median_model_over_isolated']:.3f}, "
                                       f"{s[n]['median_sustained_over_model']:.3f}" for n in ("transfer", "user")))
    print("decode-shaped kernels timed alone, signed median (median):  transfer | user")
    for r in d["decode_shaped"]:
        print(f"  {r['set']:28s} {r['kernels']:26s} n={r['n']:3d}  {r['transfer']['signed']:+6.1%} "
              f"({r['transfer']['median']:.1%}) | {r['user']['signed']:+6.1%} ({r['user']['median']:.1%})")
    print()


def current_calibration(folder: Path):
    """The folder's ``calibration.yaml`` with its ``sustained_slowdown`` reduced from its ``sustained.jsonl`` as
    ``gpumodel calibrate`` reduces it now: back-to-back time over the fitted model's price
    (:func:`gpumodel.calibration.loaded.model_slowdown`); a record written before took the isolated timing."""
    from gpumodel.calibration.loaded import model_slowdown
    from gpumodel.calibration.record import load_calibration
    from gpumodel.calibration.sustained import read_rows

    cal = load_calibration(folder / "calibration.yaml")
    if not (folder / "sustained.jsonl").exists():
        return cal
    slow = round(model_slowdown(cal.model(), read_rows(folder / "sustained.jsonl")), 4)
    return cal.model_copy(update={"parameters": {**cal.parameters, "sustained_slowdown": slow}})


def evaluate(folder: Path) -> dict:
    """Every row of one GPU's folder, and where its files come from."""
    from gpumodel.training.hostcost import load_host_costs

    cal = current_calibration(folder)
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
    ap.add_argument("--detail", action="store_true", help="also where the two calibrations part on the prefill steps")
    args = ap.parse_args(argv)
    folders = args.folder or sorted(p for p in DATA.glob("user_*")
                                    if p.is_dir() and (args.gpu is None or p.name == f"user_{args.gpu}"))
    if not folders:
        print("no user_<gpu> folder under tests/data/calibration", file=sys.stderr)
        return 1
    results = [evaluate(f) for f in folders]
    details = [detail(f) if args.detail else None for f in folders]
    if args.json:
        print(json.dumps([{**r, "detail": d} if d else r for r, d in zip(results, details)], indent=2))
    else:
        for res, d in zip(results, details):
            print_result(res)
            if d:
                print_detail(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
