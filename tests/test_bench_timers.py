"""The measurement helpers around the host-ahead timer: the timer comparison's case picking and report, the
merge of runs timed without a host lead (long calls only), the cases of a measurement file measured again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchscript import load_bench
from gpumodel.calibration.plan import call_key

DATA = Path(__file__).parent / "data" / "calibration"


def test_compare_timers_picks_exposed_calls_and_as_many_controls():
    ct = load_bench("compare_timers")
    cases = ct.pick_cases(40)
    assert len(cases) == 80 and len({call_key(c) for c in cases}) == 80
    # the committed profiler records: every suspect's do_bench time was over 1.5 x its kernels + 10 us
    assert ct.host_exposed({"time_s": 78e-6, "kernel_s": 40e-6}) and not ct.host_exposed({"time_s": 60e-6,
                                                                                           "kernel_s": 40e-6})
    assert {c["op"] for c in cases[:40]} >= {"attention", "adamw_step", "matmul"}


def test_the_committed_timer_comparison():
    """80 calls, each timed twice by each timer (tests/data/calibration/timers.jsonl): the host-ahead timer reads
    close to the kernels and repeats; do_bench and plain events read up to 7x the kernels and move by run."""
    rows = [json.loads(x) for x in (DATA / "timers.jsonl").read_text().splitlines()[1:]]
    ok = [r for r in rows if "times" in r and r.get("kernel_s")]
    assert len(ok) == 80

    def p90(values):
        values = sorted(values)
        return values[int(0.9 * (len(values) - 1))]

    ratio = {t: p90(sum(r["times"][t]) / 2 / r["kernel_s"] for r in ok) for t in ("do_bench", "events", "ahead")}
    spread = {t: p90(abs(r["times"][t][0] / r["times"][t][1] - 1) for r in ok) for t in ("do_bench", "ahead")}
    assert ratio["ahead"] < 1.5 < 5 < ratio["do_bench"] and ratio["events"] > 5      # 1.41 vs 7.6 and 7.3
    assert spread["ahead"] < 0.02 < 0.15 < spread["do_bench"]                        # 1.5% vs 20.6%


def test_compare_timers_report(capsys):
    ct = load_bench("compare_timers")
    rows = [{"kernel_s": 1e-5, "times": {"do_bench": [2e-5, 3e-5], "events": [2e-5, 2e-5], "ahead": [1.1e-5, 1.1e-5]}}]
    ct.report(rows)
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:3] == ["do_bench", "1", "2.500"] and out[3].split()[:3] == ["ahead", "1", "1.100"]


def _write(path, env, points):
    path.write_text("\n".join(json.dumps(x) for x in [{"environment": env}, *points]) + "\n")


def test_merge_keeps_only_long_calls_of_runs_without_a_host_lead(tmp_path):
    merge = load_bench("merge_measurements")
    pt = lambda m, t: {"op": "matmul", "kernel": "mm", "dtype": "bf16", "shape": {"m": m, "n": 8, "k": 8},  # noqa: E731
                       "time_s": t}
    _write(tmp_path / "new.jsonl", {"timer": "ahead"}, [pt(1, 10e-6), pt(2, 1e-3)])
    _write(tmp_path / "old.jsonl", {"timer": "do_bench"}, [pt(1, 80e-6), pt(2, 1.21e-3), pt(3, 2e-3)])
    out = tmp_path / "fit.jsonl"
    assert merge.main([str(tmp_path / "new.jsonl"), "--long-only", str(tmp_path / "old.jsonl"), "--out", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    got = {r["shape"]["m"]: (r["time_s"], r["runs"]) for r in rows[1:]}
    assert got[1] == (pytest.approx(10e-6), 1)                                  # 80 us in the old run: too short to trust, left out
    assert got[2][1] == 2 and got[2][0] == pytest.approx((1e-3 * 1.21e-3) ** 0.5)   # two runs: their geometric mean
    assert got[3] == (pytest.approx(2e-3), 1)
    assert rows[0]["environment"]["long_s"] == 300e-6


def test_measure_kernels_reads_the_cases_of_a_file():
    mk = load_bench("measure_kernels")
    cases = mk.cases_from(str(DATA / "validation_skinny.jsonl"))
    assert len(cases) == 50 and set(cases[0]) == {"op", "kernel", "dtype", "shape"}
    assert all(c["kernel"] == "linear" for c in cases)
