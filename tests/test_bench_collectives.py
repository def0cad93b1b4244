"""The collective measurement script runs on the CPU (gloo) and its accuracy script reads its output."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_accuracy_script_reads_measurements(tmp_path):
    data = tmp_path / "c.jsonl"
    data.write_text(json.dumps(dict(collective="all_reduce", n=8, nbytes=2**30, seconds=5.0e-3, algbw=2**30 / 5e-3,
                                    busbw=1.75 * 2**30 / 5e-3)) + "\n")
    spec = importlib.util.spec_from_file_location("collectives_accuracy", ROOT / "bench" / "collectives_accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.compare(data, "hgx-h200")
    assert len(rows) == 1 and abs(rows[0]["error"]) < 0.5


def test_measure_dry_run(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "x.jsonl"
    subprocess.run([sys.executable, str(ROOT / "bench" / "measure_collectives.py"), "--dry-run", "--out", str(out)],
                   check=True, timeout=120)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows and all(r["busbw"] >= 0 for r in rows)
