"""How fast the clock falls under load: the per-call timings of ``bench/measure_clock_ramp.py``, binned by the time
since the load began, and the time constant of a first-order fall fitted to each run.

For each run (kernel, idle before it), the call time over the first calls' (``t0``) in bins of time since the
first call, and the fit of

.. math:: \\frac{t(u)}{t_0} = 1 + (s - 1)\\,(1 - e^{-u/\\tau})

(least squares over a grid of ``tau``, ``s`` solved for each) to the calls: ``s`` the run's steady slowdown,
``tau`` [s] how fast the power limit takes it. With ``--smi`` the SM clock ``nvidia-smi`` sampled in the same bins.

Usage::

    python bench/clock_ramp.py tests/data/calibration/clock_ramp/h100.jsonl [more.jsonl ...] [--smi]
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

import numpy as np

#: bin edges of the time since the load began [s]
EDGES_S = (0.0, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)
#: the calls that set the run's starting time per call (the clock before the load tells)
FIRST_CALLS = 5


def load(path: Path) -> tuple[dict, list[dict]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    env = rows[0].get("environment", {}) if rows and "environment" in rows[0] else {}
    return env, [r for r in rows if "call_s" in r]


def fit_ramp(t: np.ndarray, ratio: np.ndarray, taus: np.ndarray | None = None) -> tuple[float, float, float]:
    """``(s, tau, rms)``: the first-order fall fitted to call-time ratios ``ratio`` at times ``t`` [s].

    >>> t = np.linspace(0, 2, 400)
    >>> s, tau, rms = fit_ramp(t, 1 + 0.12 * (1 - np.exp(-t / 0.3)))
    >>> round(s, 3), round(tau, 2)
    (1.12, 0.3)
    """
    taus = np.geomspace(0.005, 5.0, 400) if taus is None else taus
    best = (1.0, float("nan"), float("inf"))
    for tau in taus:
        g = 1.0 - np.exp(-t / tau)
        denom = float(g @ g)
        if denom <= 0:
            continue
        a = float(g @ (ratio - 1.0)) / denom
        rms = float(np.sqrt(np.mean((ratio - 1.0 - a * g) ** 2)))
        if rms < best[2]:
            best = (1.0 + a, float(tau), rms)
    return best


def smi_clock(run: dict) -> list[tuple[float, float, float]]:
    """(seconds since the load began, SM clock [MHz], power [W]) of the run's nvidia-smi samples."""
    out = []
    for line in run.get("smi", []):
        parts = [p.strip() for p in line.split(",")]
        try:
            when = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((when - run["load_start_unix"], float(parts[1]), float(parts[2])))
        except (ValueError, IndexError):
            continue
    return out


def summarise(run: dict) -> dict:
    t, c = np.asarray(run["t_s"]), np.asarray(run["call_s"])
    t0 = float(np.median(c[:FIRST_CALLS]))
    ratio = c / t0
    bins = []
    for lo, hi in zip(EDGES_S[:-1], EDGES_S[1:]):
        sel = (t >= lo) & (t < hi)
        bins.append(float(np.median(ratio[sel])) if sel.any() else float("nan"))
    s, tau, rms = fit_ramp(t, ratio)
    return {"label": f"{run['op']} {run['dtype']} {json.dumps(run['shape'])}", "idle_s": run["idle_s"],
            "calls": int(c.size), "t0_s": t0, "bins": bins, "s": s, "tau_s": tau, "rms": rms}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--smi", action="store_true", help="also the SM clock nvidia-smi sampled, in the same bins")
    args = ap.parse_args(argv)
    head = " ".join(f"{1e3 * lo:>5.0f}-" for lo in EDGES_S[:-1])     # each bin from this many ms
    for path in args.files:
        env, runs = load(path)
        print(f"{path}: {env.get('device_name', '?')}, driver {env.get('driver_version', '?')}, "
              f"power limit {env.get('power_limit_w', '?')} W")
        print(f"{'kernel; call time over t0 in bins from [ms]':62s} idle  t0 [us] {head}   steady s  tau [ms]")
        for run in runs:
            r = summarise(run)
            cells = " ".join(f"{b:6.3f}" for b in r["bins"])
            print(f"{r['label'][:62]:62s} {r['idle_s']:4.1f} {1e6 * r['t0_s']:8.1f} {cells}   "
                  f"{r['s']:8.3f} {1e3 * r['tau_s']:8.0f}")
            if args.smi:
                samples = smi_clock(run)
                cells = []
                for lo, hi in zip(EDGES_S[:-1], EDGES_S[1:]):
                    mhz = [m for u, m, _ in samples if lo <= u < hi]
                    cells.append(f"{np.median(mhz):6.0f}" if mhz else "     -")
                before = [m for u, m, _ in samples if u < 0]
                label = f"  SM clock [MHz] (before the load: {np.median(before):.0f})" if before else "  SM clock [MHz]"
                print(f"{label:62s} {' ' * 13} {' '.join(cells)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
