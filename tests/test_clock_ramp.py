"""The clock's fall under load, on the committed call-by-call timings (tests/data/calibration/clock_ramp, H100)."""

from pathlib import Path

import numpy as np
import pytest
from benchscript import load_bench

ramp = load_bench("clock_ramp")
DATA = Path(__file__).resolve().parent / "data" / "calibration" / "clock_ramp"


@pytest.fixture(scope="module")
def runs():
    out = []
    for path in sorted(DATA.glob("*.jsonl")):
        env, rows = ramp.load(path)
        assert env["power_limit_w"] == "700.00" and env["device_name"] == "NVIDIA H100 80GB HBM3"
        out += [ramp.summarise(r) for r in rows]
    return out


def test_the_fit_recovers_a_first_order_fall():
    t = np.linspace(0.0, 2.5, 2000)
    s, tau, rms = ramp.fit_ramp(t, 1.0 + 0.15 * (1.0 - np.exp(-t / 0.05)))
    assert s == pytest.approx(1.15, abs=0.002) and tau == pytest.approx(0.05, rel=0.05) and rms < 1e-3


def test_the_power_limit_takes_the_clock_within_a_tenth_of_a_second(runs):
    """Every run of the three compute-bound kernels, after 4 s or 0.3 s idle: the first 25 ms at the idle clock's
    speed; from 0.1 s on at least 5% slower; 10-20% slower at 0.4-0.8 s and 13-20% at 1.6-2.5 s (README's table:
    12-17% and 14-18%)."""
    assert len(runs) == 12
    edges = list(ramp.EDGES_S)
    first, settled, late = edges.index(0.0), edges.index(0.4), edges.index(1.6)
    for r in runs:
        assert r["bins"][first] == pytest.approx(1.0, abs=0.01)                   # 0-25 ms: before the fall
        assert 1.10 < r["bins"][settled] < 1.20 and 1.13 < r["bins"][late] < 1.20
        assert min(r["bins"][edges.index(0.1):]) > 1.05                          # from 0.1 s on, all slower
