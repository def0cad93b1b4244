"""The helpers the measuring scripts share, on any machine (no torch needed)."""

import argparse

import pytest
from benchscript import load_bench

from gpumodel.cli._opargs import count_type


def test_profile_serving_builds_its_cases_from_measure_serving():
    ps = load_bench("profile_serving")
    ms = ps.ms                                              # measure_serving itself, imported once
    fields = ms.shape_fields(ms.TINY_SHAPES[0])
    assert fields == dict(shape="tiny-gqa", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=256,
                          full_layers=2)
    for case in ms.plan(tiny=True):                         # every lean case carries its shape's fields
        if case["engine"] == "graph":
            shape = next(s for s in ms.TINY_SHAPES if s[0] == case["shape"])
            assert ms.shape_fields(shape).items() <= case.items()
    assert ps.ms.arguments(ps.__doc__, budget_s=240.0).parse_args(["--out", "x"]).budget_s == 240.0


def test_failed_case_row_names_the_error():
    ms = load_bench("measure_serving")
    row = ms.failed({"kind": "decode", "batch": 2}, ValueError("bad shape"))
    assert row == {"kind": "decode", "batch": 2, "status": "error", "error": "ValueError: bad shape"}


def test_per_call_warms_up_then_times_reps_of_n_calls():
    st = load_bench("measure_step_time")
    calls = []
    host, wall = st._per_call(None, "cpu", lambda: calls.append(1), 4, reps=3, warmup=5)
    assert len(calls) == 5 + 3 * 4                          # warm-up, then reps x n timed calls
    assert 0 <= host <= wall


def test_unmeasured_step_record():
    st = load_bench("measure_step_time")
    spec = ("llama-160m", 8, 1024, "amp_bf16", "adamw", {"fused": True})
    row = st._unmeasured_step(spec, "error", error="boom")
    assert list(row) == ["kind", "shape", "batch", "seq", "precision", "optimizer", "options", "status", "error"]
    assert row["options"] == {"fused": True} and row["status"] == "error"


def test_count_type():
    read = count_type(1)
    assert read("8Ki") == 8192 and count_type(0)("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="must be >= 1"):
        read("0")
