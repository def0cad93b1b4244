"""The step-time measuring script runs end to end on the CPU (``--dry-run``) and writes every record kind."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from benchscript import load_bench

ROOT = Path(__file__).resolve().parents[1]


def test_dry_run_writes_all_kinds(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "olmo-2-1b.json").write_text((ROOT / "tests/data/steptime/hf_configs/olmo-2-1b.json").read_text())
    out = tmp_path / "x.jsonl"
    subprocess.run([sys.executable, str(ROOT / "bench/measure_step_time.py"), "--out", str(out), "--dry-run",
                    "--configs", str(configs), "--budget-s", "120"], check=True, capture_output=True, timeout=300)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    kinds = {r["kind"] for r in rows}
    assert kinds == {"environment", "params", "host", "layers", "step"}
    steps = [r for r in rows if r["kind"] == "step"]
    assert all(r["status"] == "ok" and len(r["step_s_all"]) >= 1 for r in steps)
    assert {r["optimizer"] for r in steps} == {"adamw", "sgd"}
    layers = [r for r in rows if r["kind"] == "layers" and r.get("status", "ok") == "ok"]
    assert any(r["experts_requested"] == "eager" for r in layers)  # the MoE families' eager expert loop
    assert any(r["compile"] for r in layers)  # torch.compile'd tiny models
    assert any("host_backward_accumulate_s" in r for r in layers)
    assert any(r.get("bench") == "optimizer_sweep" for r in rows)
    params = next(r for r in rows if r["kind"] == "params")
    assert params["n_params"] == 1484916736  # OLMo-2-1B as Hugging Face builds it (meta device)


def test_select_runs():
    mod = load_bench("measure_step_time")
    runs = mod.RUNS
    assert mod.select_runs(runs, "all") == runs
    no_compile = mod.select_runs(runs, "all", "compile")
    assert len(no_compile) == len(runs) - 2 and not any(r[5].get("compile") for r in no_compile)
    assert mod.select_runs(runs, "0-1,gemma2-400m") == runs[:2] + [r for r in runs if r[0] == "gemma2-400m"]
    assert all(r[5].get("experts") == "eager" for r in mod.select_runs(runs, "experts"))
    with pytest.raises(SystemExit):
        mod.select_runs(runs, "no-such-shape")
