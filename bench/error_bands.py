"""80% error bands of gpumodel's time answers, from the measured error distribution of each regime.

A regime is a kind of answer whose errors are alike: kernel estimates calibrated on the GPU (the H200's
validation sets, ``bench/calibration_accuracy.py``) or transferred to it (the H100's rounds,
``bench/transfer_measured.py``); one-GPU training steps from calibrated or transferred kernels, GPU-bound or
host-bound as the step model says (``StepTime.host_bound``; ``bench/step_time_accuracy.py``'s H200 sets and its
H100 set); serving steps by engine (``bench/serving_accuracy.py``: CUDA graphs, compiled, eager HF ``generate``).
Each bench script's own functions give the (predicted, measured) pairs; the error is the signed
``e = predicted / measured - 1``.

Every regime's rows are split into a fit half and a held-out half by a hash of the row's identity (the kernel
call and shape; the step's model, sizes and options; the serving step's shape and sizes), so the same kernel or
step measured in several runs is on one side only. The band is the 10% and 90% points of ``e`` on the fit half,
split-conformal order statistics (:func:`gpumodel.calibration.bands.fit_band`: the plain percentiles for thousands
of rows, a little wider for a few dozen); the held-out half says how often the band holds (target: 75-85% for an
80% band). Beside it the script prints the coverage with the halves' roles swapped (how much the figure moves with
which rows fell on which side), the mean coverage over random halvings, the coverage in 10-fold cross-validation by
identity (every row held out once: :func:`crossval`), the plain percentiles, and the distinct rows (kernels, steps) of
each half. A time answer ``t`` then
carries ``(t / (1 + q90), t / (1 + q10))`` (:func:`gpumodel.calibration.bands.error_band`).

Usage::

    python bench/error_bands.py            # per regime: q10, q90, n, held-out coverage and the band's width
    python bench/error_bands.py --write    # also write the fit halves' bands to specs/error_bands.yaml
    python bench/error_bands.py --regime kernel-transferred --json
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's gpumodel

BENCH = ROOT / "bench"
CAL = ROOT / "tests" / "data" / "calibration"
STEPS = ROOT / "tests" / "data" / "steptime"
SERVING = ROOT / "tests" / "data" / "serving"
OUT = ROOT / "specs" / "error_bands.yaml"
COMMAND = "python bench/error_bands.py --write"
#: the band's nominal coverage and the held-out coverage the bar accepts
TARGET, BAR = 0.80, (0.75, 0.85)
SPLIT = ("a row is held out when the first byte of the SHA-256 of its identity (JSON, sorted keys: the kernel call "
         "and shape; the step's model, sizes and options; the serving step's shape and sizes) is odd, else it is in "
         "the fit half; q10 and q90 are the split-conformal 10% and 90% points of the fit half's signed errors (of n "
         "sorted errors the max(1, floor((n + 1) / 10))-th and the min(n, ceil(9 (n + 1) / 10))-th: "
         "gpumodel.calibration.bands.fit_band)")


def bench(name: str):
    """The module ``bench/<name>.py`` (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def held_out(key) -> bool:
    """Whether a row of identity ``key`` (anything JSON can write) is in the held-out half.

    >>> held_out(("llama-160m", 8, 1024)) == held_out(["llama-160m", 8, 1024])
    True
    """
    return identity_digest(key)[0] % 2 == 1


def identity_digest(key) -> bytes:
    """The SHA-256 of a row's identity written as JSON with sorted keys: the split and the folds read its bytes."""
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode("utf-8")).digest()


def signed_errors(pairs: dict) -> np.ndarray:
    """``predicted / measured - 1`` of a regime's rows [1]."""
    return np.asarray(pairs["predicted"], float) / np.asarray(pairs["measured"], float) - 1.0


def inside(err, band) -> np.ndarray:
    """Which errors lie in the band ``(q10, q90)``, edges included."""
    return (err >= band[0]) & (err <= band[1])


def _rel(paths) -> list[str]:
    return [Path(p).resolve().relative_to(ROOT).as_posix() for p in paths]


# ------------------------------------------------------------------------------------------ pairs per regime
def _kernel_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """The validation files of a folder and the further runs of them (``repeat_<name>*.jsonl``)."""
    from gpumodel.calibration.fit import repeat_files

    first = sorted(folder.glob("validation*.jsonl"))
    return first, sorted({x for f in first for x in repeat_files(f)})


def kernel_calibrated() -> dict:
    """The H200's validation kernels against the shipped calibration (``bench/calibration_accuracy.py``)."""
    from gpumodel.calibration.plan import call_key
    from gpumodel.calibration.record import calibration_for

    ca = bench("calibration_accuracy")
    first, repeats = _kernel_files(CAL)
    ps = ca.measured_points(first)
    pred = ca.predicted(calibration_for("h200-sxm").model(), ps)
    return {"keys": [call_key(p) for p in ps.points], "predicted": pred, "measured": ps.times,
            "data": _rel(first + repeats), "description": "one kernel on a GPU whose calibration measured it "
            "(source 'calibrated'): the H200's validation kernels, never fitted, against its shipped calibration"}


def kernel_transferred() -> dict:
    """The H100's kernels against the H200 calibration carried to it (``bench/transfer_measured.py``)."""
    from gpumodel.calibration.plan import call_key

    tm = bench("transfer_measured")
    first, repeats = _kernel_files(CAL / "h100")
    ps, pred = tm.transferred_times("h100-sxm", first)
    return {"keys": [call_key(p) for p in ps.points], "predicted": pred, "measured": ps.times,
            "data": _rel(first + repeats), "description": "one kernel on a GPU no calibration measured (source "
            "'transferred'): the H100's kernels against the H200 calibration carried to it"}


def _steps(gpu: str, paths: list[Path]) -> dict:
    st = bench("step_time_accuracy")
    rows = st.load(paths)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        preds = [st.predict(r, gpu=gpu) for r in rows]
    return {"keys": [st.run_key(r) for r in rows], "predicted": np.array([p.seconds for p in preds]),
            "measured": np.array([r["step_s_median"] for r in rows]),
            "host_bound": np.array([p.host_bound for p in preds]), "data": _rel(p for p in paths if p.exists())}


@functools.lru_cache(maxsize=2)
def steps(source: str) -> dict:
    """One-GPU HF training steps (``bench/step_time_accuracy.py``): the H200's sets (calibrated) or the H100's
    (transferred)."""
    if source == "calibrated":
        return _steps("h200-sxm", bench("step_time_accuracy").DATA)
    return _steps("h100-sxm", [STEPS / "h100" / "step_times.jsonl"])


def _step_regime(source: str, host: bool) -> dict:
    all_ = steps(source)
    sel = all_["host_bound"] == host
    where = ("the H200's HF training steps against its shipped calibration and host costs" if source == "calibrated"
             else "the H100's HF training steps against the transferred calibration and the H200 machine's host costs")
    kind = ("host-bound (the GPU waits on the host's dispatch for over 2% of the step: the error depends on the CPU)"
            if host else "GPU-bound (the host's dispatch hides behind the kernels)")
    return {"keys": [k for k, s in zip(all_["keys"], sel) if s], "predicted": all_["predicted"][sel],
            "measured": all_["measured"][sel], "data": all_["data"],
            "description": f"one-GPU training step, {kind}, kernels {source}: {where}"}


def _serving_rows() -> list[dict]:
    return bench("serving_accuracy").load_measured(SERVING / "measured.jsonl")


def serving_graph() -> dict:
    """Prefill and decode steps replayed as CUDA graphs on the H200 (``bench/serving_accuracy.py``)."""
    sa = bench("serving_accuracy")
    keys, pred, meas = [], [], []
    for kind in ("decode", "prefill"):
        sel = [r for r in _serving_rows() if r["engine"] == "graph" and r["kind"] == kind]
        p, _ = sa.predict_steps(sel, kind)
        keys += [(kind, r["shape"], r["layers"], r["batch"], r.get("context_len"), r.get("prompt_len")) for r in sel]
        pred += list(p)
        meas += [r["seconds"] for r in sel]
    return {"keys": keys, "predicted": np.array(pred), "measured": np.array(meas),
            "data": _rel([SERVING / "measured.jsonl"]), "description": "a serving step (prefill or decode) replayed "
            "as a CUDA graph (engine 'graph'): the H200's lean-decoder steps against its shipped calibration"}


def serving_compiled() -> dict:
    """One decoder layer ``torch.compile``'d on the H200 (``bench/serving_accuracy.py``'s compiled section)."""
    sa = bench("serving_accuracy")
    rows = sa.compiled_rows(SERVING / "compiled.jsonl")
    return {"keys": [(r["kind"], r["shape"], r["batch"], r.get("context_len"), r.get("prompt_len")) for r in rows],
            "predicted": np.array([sa.layer_time(r, "compiled") for r in rows]),
            "measured": np.array([r["layer_s_compiled"] for r in rows]), "data": _rel([SERVING / "compiled.jsonl"]),
            "description": "a serving step after torch.compile fused it (engine 'compiled'): one decoder layer of the "
            "H200's compiled CUDA graphs against its shipped calibration"}


def serving_hf() -> dict:
    """Eager HF ``generate`` on the H200: its TTFT and TPOT (``bench/serving_accuracy.py``)."""
    sa = bench("serving_accuracy")
    rows = [r for r in _serving_rows() if r["engine"] == "hf"]
    ttft, tpot = sa.hf_times(rows)
    keys = [(r["shape"], r["batch"], r["prompt_len"], r["new_tokens"]) for r in rows]
    return {"keys": keys + keys, "predicted": np.concatenate([ttft, tpot]),
            "measured": np.array([r["ttft_s"] for r in rows] + [r["tpot_s"] for r in rows]),
            "data": _rel([SERVING / "measured.jsonl"]), "description": "a serving step of eager Hugging Face "
            "generate (engine 'hf'; host-bound for small models): the H200's TTFT and TPOT against its shipped "
            "calibration and host constants (both of a row on one side of the split)"}


def step_parallel() -> dict:
    """Multi-GPU training steps against published runs (``bench/published_runs.py``: Megatron-LM, MT-NLG, MegaScale,
    Llama 3, OPT, NeMo, DeepSeek-V3 ...), the published time per iteration or its conversion."""
    pr = bench("published_runs")
    rows = pr.table(pr.load_rows())
    return {"keys": [(r["source"], r["label"]) for r in rows], "predicted": np.array([r["predicted_s"] for r in rows]),
            "measured": np.array([r["published_s"] for r in rows]), "data": _rel([pr.DATA]),
            "description": "a training step of a parallel layout on many GPUs (training_step_time with a parallelism, "
            "the planner's rows): published runs' time per iteration against the step modelled with the "
            "transferred or calibrated kernels"}


REGIMES = {
    "kernel-calibrated": kernel_calibrated,
    "kernel-transferred": kernel_transferred,
    "step-calibrated-gpu": lambda: _step_regime("calibrated", False),
    "step-calibrated-host": lambda: _step_regime("calibrated", True),
    "step-transferred-gpu": lambda: _step_regime("transferred", False),
    "step-transferred-host": lambda: _step_regime("transferred", True),
    "serving-graph": serving_graph,
    "serving-compiled": serving_compiled,
    "serving-hf": serving_hf,
    "step-parallel": step_parallel,
}


# ------------------------------------------------------------------------------------------ the bands
def score(pairs: dict) -> dict:
    """The band of one regime's fit half and its coverage of the held-out half.

    Returns ``n`` and ``held_out`` (rows of each half), ``q10``, ``q90`` [1], ``coverage`` (share of the held-out
    rows with q10 <= e <= q90; nan without held-out rows) and ``width`` (the band's width over the predicted time,
    ``1 / (1 + q10) - 1 / (1 + q90)``).
    """
    from gpumodel.calibration.bands import fit_band

    err = signed_errors(pairs)
    out_ = np.array([held_out(k) for k in pairs["keys"]], dtype=bool)
    fit, test = err[~out_], err[out_]
    q10, q90 = fit_band(fit)
    # the halves' roles swapped: how much the coverage moves with which rows fell on which side
    s10, s90 = fit_band(test) if test.size else (np.nan, np.nan)
    return {"n": int(fit.size), "held_out": int(test.size), "q10": q10, "q90": q90,
            "median_abs": float(np.median(np.abs(fit))),
            "coverage": float(inside(test, (q10, q90)).mean()) if test.size else float("nan"),
            "swapped": float(inside(fit, (s10, s90)).mean()) if test.size else float("nan"),
            "width": 1.0 / (1.0 + q10) - 1.0 / (1.0 + q90), "percentiles": [float(x) for x in np.percentile(fit, [10, 90])],
            "distinct": (len({json.dumps(k, sort_keys=True, default=str) for k, o in zip(pairs["keys"], out_) if not o}),
                         len({json.dumps(k, sort_keys=True, default=str) for k, o in zip(pairs["keys"], out_) if o}))}


#: random halvings of a regime's rows (by identity) whose coverages :func:`resampled` averages
SPLITS = 200


def resampled(pairs: dict, splits: int = SPLITS, seed: int = 0) -> tuple[float, float, float]:
    """The band's held-out coverage over ``splits`` random halvings of the identities (each row's identity on one
    side, as in the fixed split): mean, 10th and 90th percentile [1]. One split of a few dozen rows moves by several
    points with which rows fall where; the mean says what coverage the procedure gives, the range how far one split
    strays."""
    from gpumodel.calibration.bands import fit_band

    err = signed_errors(pairs)
    names, index = np.unique([json.dumps(k, sort_keys=True, default=str) for k in pairs["keys"]], return_inverse=True)
    rng = np.random.default_rng(seed)
    cover = []
    for _ in range(splits):
        side = rng.random(len(names)) < 0.5
        out_ = side[index]
        if out_.all() or not out_.any():
            continue
        cover.append(float(inside(err[out_], fit_band(err[~out_])).mean()))
    return float(np.mean(cover)), float(np.percentile(cover, 10)), float(np.percentile(cover, 90))


#: folds of :func:`crossval`
FOLDS = 10


def fold_of(key, folds: int = FOLDS) -> int:
    """The cross-validation fold of a row of identity ``key``: the SHA-256 of its JSON (the second byte, so that
    the folds do not follow the fixed split's halves) modulo ``folds``.

    >>> fold_of(("llama-160m", 8, 1024)) == fold_of(["llama-160m", 8, 1024]) < FOLDS
    True
    """
    return identity_digest(key)[1] % folds


def crossval(pairs: dict, folds: int = FOLDS) -> tuple[float, int]:
    """The band's coverage in ``folds``-fold cross-validation by identity: each fold held out once, its rows
    judged against the band fitted on the other folds, pooled over every row [1], and the rows judged. Every
    measurement is held out exactly once and judged by a band it did not shape: the coverage the band-making
    procedure gives, with no one split's luck in it (the bands fitted here use nine tenths of the rows, the shipped
    ones one half)."""
    from gpumodel.calibration.bands import fit_band

    err = signed_errors(pairs)
    fold = np.array([fold_of(k, folds) for k in pairs["keys"]])
    covered = judged = 0
    for f in range(folds):
        out_ = fold == f
        if not out_.any() or out_.all():
            continue
        covered += int(inside(err[out_], fit_band(err[~out_])).sum())
        judged += int(out_.sum())
    return (covered / judged if judged else float("nan")), judged


def evaluate(names=None) -> dict:
    """Regime name -> its :func:`score` plus the data files and description."""
    out = {}
    for name in names or REGIMES:
        pairs = REGIMES[name]()
        out[name] = {**score(pairs), "resampled": resampled(pairs), "crossval": crossval(pairs), "data": pairs["data"],
                     "description": pairs["description"]}
    return out


def write(results: dict, path: Path = OUT, merge: bool = False) -> None:
    """The bands as ``specs/error_bands.yaml`` (what :func:`gpumodel.calibration.bands.load_error_bands` reads);
    ``merge``: the regimes of ``results`` replace theirs in the file, the others are kept as they are."""
    kept = yaml.safe_load(path.read_text(encoding="utf-8"))["regimes"] if merge and path.exists() else {}
    regimes = {**kept, **{name: {"q10": round(r["q10"], 4), "q90": round(r["q90"], 4), "n": r["n"], "held_out": r["held_out"],
                      "coverage": round(r["coverage"], 3) if np.isfinite(r["coverage"]) else None,
                      "median_abs": round(r["median_abs"], 4),
                      "data": list(r["data"]), "description": r["description"]} for name, r in results.items()}}
    doc = {"command": COMMAND, "split": SPLIT,
           "notes": "e = predicted / measured - 1 (signed); an answer of t seconds has the 80% band "
                    "(t / (1 + q90), t / (1 + q10)). n counts the fit half, held_out the other half, coverage is "
                    "the share of the held-out half inside the band, median_abs the fit half's median |e|. Datasheet estimates have no band. The serving "
                    "bands were measured with calibrated kernels and stand for transferred steps too.",
           "regimes": regimes}
    header = ("# 80% error bands of gpumodel's time answers, per regime, from committed measurements.\n"
              f"# Written by `{COMMAND}`; do not edit by hand.\n")
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120), encoding="utf-8")


def _print(results: dict) -> None:
    print(f"{'regime':22s} {'fit':>11s} {'held out':>11s} | {'q10':>7s} {'q90':>7s} {'width':>6s} | "
          f"{'coverage':>8s} {'swapped':>7s} | {'resampled (p10-p90)':>21s} | {'10-fold':>7s} | {'percentiles':>15s}")
    print(f"{'':22s} {'rows (dist)':>11s} {'rows (dist)':>11s} |")
    print("-" * 128)
    for name, r in results.items():
        cov = "" if not np.isfinite(r["coverage"]) else f"{r['coverage']:8.1%} {r['swapped']:7.1%}"
        note = "  (under 20 held out)" if r["held_out"] < 20 else (
            "" if BAR[0] <= r["coverage"] <= BAR[1] else "  outside 75-85%")
        fit, test = r["distinct"]
        mean, lo, hi = r["resampled"]
        print(f"{name:22s} {r['n']:5d} ({fit:3d}) {r['held_out']:5d} ({test:3d}) | {r['q10']:+7.1%} {r['q90']:+7.1%} "
              f"{r['width']:6.1%} | {cov:>16s} | {mean:6.1%} ({lo:5.1%}-{hi:5.1%}) | {r['crossval'][0]:7.1%} | "
              f"{r['percentiles'][0]:+7.1%} {r['percentiles'][1]:+7.1%}{note}")
    tested = [r for r in results.values() if r["held_out"] >= 20]
    ok = all(BAR[0] <= r["coverage"] <= BAR[1] for r in tested)
    expected = all(BAR[0] <= r["resampled"][0] <= BAR[1] for r in tested)
    folded = all(BAR[0] <= r["crossval"][0] <= BAR[1] for r in tested)
    print(f"\nq10, q90: the band's edges in e = predicted / measured - 1 (fit half); width: (high - low) / the answer; "
          f"coverage: share of the held-out half inside the band; swapped: the same with the halves' roles swapped; "
          f"resampled: the mean coverage over {SPLITS} random halvings of the identities, and its 10th-90th "
          f"percentile range; 10-fold: every row held out once, against the band of the other {FOLDS - 1} folds "
          f"(folds by identity), pooled; percentiles: the fit half's plain 10th and 90th.\nbar (every regime with >= "
          f"20 held-out rows covers {BAR[0]:.0%}-{BAR[1]:.0%} of them): {'met' if ok else 'NOT met'} on the fixed split; "
          f"{'met' if expected else 'NOT met'} in the resampled mean; {'met' if folded else 'NOT met'} in {FOLDS}-fold "
          f"cross-validation")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"write the bands to {OUT.relative_to(ROOT)}")
    p.add_argument("--regime", nargs="+", choices=list(REGIMES),
                   help="only these regimes (with --write: replace these in the file, keep the others)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    results = evaluate(args.regime)
    if args.json:
        clean = {k: {x: (None if isinstance(v, float) and not np.isfinite(v) else v) for x, v in r.items()}
                 for k, r in results.items()}
        print(json.dumps(clean, indent=2))
    else:
        _print(results)
    if args.write:
        write(results, merge=bool(args.regime))
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
