"""Checks against the committed published tables (a fast subset; ``bench/serving_accuracy.py`` prints all).

gpt-fast README (A100-80GB, batch 1, prompt 5, 200 new tokens) and TensorRT-LLM v0.17's perf overview
(offline maximum throughput): the model must land within the issue's bar on these rows.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

import gpumodel as gm

DATA = Path(__file__).resolve().parent / "data" / "serving"


def _rows(name):
    with open(DATA / name) as f:
        return list(csv.DictReader(f))


def test_tables_are_committed_with_their_sources():
    readme = (DATA / "README.md").read_text()
    assert "gpt-fast" in readme and "v0.17.0" in readme and "perf-overview.md" in readme
    gf, trt = _rows("gpt_fast_a100.csv"), _rows("trtllm_v0.17_throughput.csv")
    assert len(gf) == 28 and len(trt) == 108
    llama2_7b = [r for r in gf if r["model"] == "llama-2-7b" and r["dtype"] == "bf16" and r["tp"] == "8"]
    assert float(llama2_7b[0]["tokens_per_s"]) == 328.43                       # README "Tensor Parallelism" table


def test_gpt_fast_rows_within_the_bar():
    model = {"llama-2-7b": "llama-2-7b", "llama-2-70b": "llama-2-70b", "llama-3.1-8b": "llama-3-8b",
             "llama-3.1-70b": "llama-3-70b", "llama-3.1-405b": "llama-3-405b"}
    cache = {}
    err = []
    for r in _rows("gpt_fast_a100.csv"):
        key = (model[r["model"]], r["dtype"], int(r["tp"]), int(r["group_size"] or 128))
        if key not in cache:
            cache[key] = gm.generation_time(key[0], "a100-sxm4-80gb", batch_size=1, prompt_len=5, new_tokens=200, dtype=key[1],
                                            tp=key[2], group_size=key[3], engine="compiled").tokens_per_s
        err.append(abs(cache[key] / float(r["tokens_per_s"]) - 1))
    # gpt-fast runs torch.compile'd, fused kernels: measured median 8.8%, p90 18.3% (unfused "graph": 15.7% /
    # 25.0%; int4 rows within 16% since tinygemm's weight stream carries as the SMs' dequantisation rate)
    assert np.median(err) <= 0.12 and np.percentile(err, 90) <= 0.25


def test_trtllm_llama_8b_rows():
    rows = [r for r in _rows("trtllm_v0.17_throughput.csv") if r["model"] == "llama-3.1-8b"][::2]
    err = []
    for r in rows:
        for col, gpu in (("h100_fp8", "h100"), ("h200_fp8", "h200")):
            cap = gm.serving_capacity("llama-3-8b", gpu, prompt_len=int(r["input_len"]), output_len=int(r["output_len"]),
                                      dtype="fp8", kv_dtype="fp8")
            err.append(cap.output_tokens_per_s / float(r[col]) - 1)
    assert np.median(np.abs(err)) < 0.20 and np.max(np.abs(err)) < 0.40
