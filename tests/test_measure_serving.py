"""The serving measurement script: its plan on any machine, a dry run on the CPU where torch is installed."""

from __future__ import annotations

import importlib.util
import json

import pytest
from benchscript import load_bench



def _script():
    mod = load_bench("measure_serving")
    return mod


def test_plan_covers_the_issue():
    ms = _script()
    cases = ms.plan()
    lean = [c for c in cases if c["engine"] == "graph"]
    dec = [c for c in lean if c["kind"] == "decode"]
    pre = [c for c in lean if c["kind"] == "prefill"]
    assert {c["batch"] for c in dec} >= {1, 256}
    assert min(c["context_len"] for c in dec) == 128 and max(c["context_len"] for c in dec) == 32768
    assert min(c["prompt_len"] for c in pre) == 128 and max(c["prompt_len"] for c in pre) == 8192
    assert any(c["kv_heads"] == c["heads"] for c in lean) and any(c["kv_heads"] < c["heads"] for c in lean)
    params = {c["shape"]: 12 * c["hidden"] ** 2 * c["full_layers"] for c in lean}   # 12 h^2 per layer: 1B .. 70B
    assert min(params.values()) < 1.5e9 and max(params.values()) > 6e10
    assert any(c["layers"] < c["full_layers"] for c in lean)                     # largest: fewer layers
    assert {c["engine"] for c in cases} == {"graph", "hf"}
    assert all(c["batch"] * (c.get("context_len", 0) + 1) * 2 * c["layers"] * c["kv_heads"] * c["head_dim"] * 2
               <= ms.KV_LIMIT_BYTES for c in dec)


def test_split_is_fixed_and_both_parts_cover_decode_and_prefill():
    ms = _script()
    a, b = ms.plan(), ms.plan()
    assert [c["split"] for c in a] == [c["split"] for c in b]
    for kind in ("decode", "prefill"):
        splits = [c["split"] for c in a if c["kind"] == kind]
        assert splits.count("holdout") >= 5 and splits.count("fit") >= 10
    first_shapes = [c["shape"] for c in a[:70] if c["engine"] == "graph"]       # every shape early
    assert len(set(first_shapes)) == len(ms.SHAPES)


def test_dry_run_on_cpu(tmp_path):
    pytest.importorskip("torch", reason="the dry run needs torch (any build)")
    ms = _script()
    out = tmp_path / "m.jsonl"
    assert ms.main(["--out", str(out), "--dry-run"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows[0]["kind"] == "environment"
    lean = [r for r in rows[1:] if r["engine"] == "graph"]
    assert lean and all(r["status"] == "ok" and r["seconds"] > 0 for r in lean), lean
    assert any("layer_s" in r for r in lean)
    hf = [r for r in rows[1:] if r["engine"] == "hf"]
    assert all(r["status"] == "ok" and r["ttft_s"] > 0 for r in hf if importlib.util.find_spec("transformers"))


def test_budget_stops_the_run(tmp_path):
    pytest.importorskip("torch", reason="the dry run needs torch (any build)")
    out = tmp_path / "m.jsonl"
    assert _script().main(["--out", str(out), "--dry-run", "--budget-s", "0"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["environment", "stopped"]


def _profile_script():
    mod = load_bench("profile_serving")
    return mod


def test_profile_cases_are_measured_shapes():
    ps, ms = _profile_script(), _script()
    names = {s[0] for s in ms.SHAPES}
    assert {c[0] for c in ps.CASES} <= names and {c[1] for c in ps.CASES} == {"decode", "prefill"}
    assert {c[0] for c in ps.TINY_CASES} <= {s[0] for s in ms.TINY_SHAPES}


def test_profile_dry_run_on_cpu(tmp_path):
    pytest.importorskip("torch", reason="the dry run needs torch (any build)")
    out = tmp_path / "p.jsonl"
    assert _profile_script().main(["--out", str(out), "--dry-run"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows[0]["kind"] == "environment" and len(rows) == 3
    assert all(r["status"] == "ok" and r["kernel_count"] > 0 and r["kernels"] for r in rows[1:]), rows
