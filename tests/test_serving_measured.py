"""The serving model against the steps measured on an H200 (``tests/data/serving/measured.jsonl``).

The bars are the levels the model reaches on the held-out rows, each with the value measured when it was
written beside it; ``python bench/serving_accuracy.py`` prints the full tables.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpumodel.serving import kernels as K
from benchscript import load_bench

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "serving" / "measured.jsonl"


def _script():
    mod = load_bench("serving_accuracy")
    return mod


@pytest.fixture(scope="module")
def steps():
    """{kind: (rows, model, shortcut, measured, split)} for the lean decoder's decode and prefill rows."""
    sa = _script()
    rows = sa.load_measured(DATA)
    out = {}
    for kind in ("decode", "prefill"):
        sel = [r for r in rows if r["engine"] == "graph" and r["kind"] == kind]
        pred, base = sa.predict_steps(sel, kind)
        out[kind] = (sel, pred, base, np.array([r["seconds"] for r in sel]), np.array([r["split"] for r in sel]))
    return out


def test_the_data_is_what_its_readme_says():
    rows = _script().load_measured(DATA)
    assert len(rows) == 161
    count = {(k, s): sum(r["kind"] == k and r["split"] == s for r in rows)
             for k in ("decode", "prefill", "generate") for s in ("fit", "holdout")}
    assert count == {("decode", "fit"): 70, ("decode", "holdout"): 23, ("prefill", "fit"): 50,
                     ("prefill", "holdout"): 10, ("generate", "fit"): 4, ("generate", "holdout"): 4}


def test_decode_held_out(steps):
    _, pred, base, meas, split = steps["decode"]
    h = split == "holdout"
    err = np.abs(pred[h] / meas[h] - 1)
    assert np.median(err) < 0.05                        # measured 2.5% (issue's bar: 8%)
    assert np.percentile(err, 90) < 0.10                # measured 6.6% (issue's bar: 20%)
    assert abs(np.median(pred[h] / meas[h] - 1)) < 0.04  # signed median +0.5%: no overall bias
    # the weights-over-bandwidth shortcut misses by half (median 50.0%)
    assert np.median(np.abs(base[h] / meas[h] - 1)) > 0.4


def test_decode_at_batch_one_is_weights_plus_a_floor_per_kernel(steps):
    rows, pred, _, meas, _ = steps["decode"]
    one = np.array([r["batch"] == 1 for r in rows])
    err = np.abs(pred[one] / meas[one] - 1)
    assert np.median(err) < 0.05 and err.max() < 0.08   # all 30 rows: median 2.7%, worst 5.2%


def test_prefill_held_out(steps):
    _, pred, base, meas, split = steps["prefill"]
    h = split == "holdout"
    err = np.abs(pred[h] / meas[h] - 1)
    # measured 1.8% / 5.1%, signed -1.1% (issue's bar: 8% / 20%)
    assert np.median(err) < 0.05
    assert np.percentile(err, 90) < 0.10
    assert np.median(np.abs(base[h] / meas[h] - 1)) > 0.4   # shortcut: 50.7%


def test_hf_generate_time_per_token():
    sa = _script()
    import gpumodel as gm

    hf = [r for r in sa.load_measured(DATA) if r["engine"] == "hf"]
    tpot = np.array([gm.generation_time(sa.hf_config(r), "h200", batch_size=r["batch"], prompt_len=r["prompt_len"],
                                        new_tokens=r["new_tokens"], engine="hf").tpot_s for r in hf])
    err = np.abs(tpot / np.array([r["tpot_s"] for r in hf]) - 1)
    assert np.median(err) < 0.12 and err.max() < 0.3    # 8 rows: median 7.1%, worst 22.3% (host noise)


def test_graph_constant_is_the_fit_on_the_fit_rows(steps):
    """GRAPH_LAUNCH_S equals its least-squares value on the fit rows (re-fit when the kernel model changes):
    a step is ``body + n g`` with ``n`` kernels, so ``g = sum(n/m (1 - body/m)) / sum((n/m)^2)``."""
    import gpumodel as gm

    sa = _script()
    num = den = 0.0
    for kind in ("decode", "prefill"):
        rows, pred, _, meas, split = steps[kind]
        for r, p_, m in zip(rows, pred, meas):
            if r["split"] != "fit":
                continue
            # the kernel count of the row itself: split-KV adds a combine kernel at long contexts
            cfg = sa.lean_config(r)
            n = (gm.decode_step_time(cfg, "h200", batch_size=r["batch"], context_len=r["context_len"]).kernels if kind == "decode"
                 else sa.prefill_time(cfg, "h200", batch_size=r["batch"], prompt_len=r["prompt_len"]).kernels)
            body = p_ - n * K.GRAPH_LAUNCH_S
            num += n / m * (1 - body / m)
            den += (n / m) ** 2
    assert num / den == pytest.approx(K.GRAPH_LAUNCH_S, rel=0.05)


def test_compiled_engine_on_measured_layers():
    """One decoder layer torch.compile'd on the H200 (compiled.jsonl, 11 paired rows, nothing fitted to them):
    engine="compiled" within 12% at the median, 16% worst, and faster than the unfused engine on every row. The
    estimates price back-to-back steps, with their clock-bound share of the sustained slowdown; the layers were timed
    in bursts of 0.15 s from a GPU that had idled, partly at the boost clock, so most of them read slow."""
    sa = _script()
    pred, meas = sa.compiled_section(DATA.parent / "compiled.jsonl", show_rows=False)
    err = np.abs(pred / meas - 1)
    assert len(meas) == 11 and np.median(err) < 0.12 and err.max() < 0.16
    assert np.mean(pred > meas) > 0.7
    rows = [r for r in sa.load_measured(DATA.parent / "compiled.jsonl") if r.get("status") == "ok"]
    assert all(r["layer_s_compiled"] < r["layer_s_graph"] for r in rows)


def test_fresh_h100_steps_at_the_loaded_clock():
    """154 CUDA-graph steps on an H100 that no calibration was measured on, each graph replayed for 0.2 s before it
    was timed (tests/data/serving/h100_sustained): the transferred model within 4% at the median on decode (measured
    2.3% held out, 2.7% the rest) and on prefill (1.6%, 1.7%); nothing is fitted to them."""
    import json

    sa = _script()
    path = DATA.parent / "h100_sustained" / "serving.jsonl"
    rows = [r for r in sa.load_measured(path) if r["engine"] == "graph"]
    env = json.loads(path.read_text().splitlines()[0])
    assert len(rows) == 153 and env["kind"] == "environment" and env["sustain_s"] == 0.2
    for kind in ("decode", "prefill"):
        sel = [r for r in rows if r["kind"] == kind]
        pred, _ = sa.predict_steps(sel, kind, gpu="h100-sxm")
        err = np.abs(pred / np.array([r["seconds"] for r in sel]) - 1)
        assert len(sel) == (93 if kind == "decode" else 60) and np.median(err) < 0.04
