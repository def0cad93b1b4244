"""Accuracy of ``gm.training_step_time`` against training steps measured on an H200.

Reads ``tests/data/steptime/step_times.jsonl`` (written by ``bench/measure_step_time.py``), rebuilds
each model's config through ``TransformerConfig.from_hf`` and prints predicted vs measured step time,
calibrated (the shipped H200 calibration) and datasheet-only.

Usage::

    python bench/step_time_accuracy.py [--data tests/data/steptime/step_times.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import gpumodel as gm

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "steptime" / "step_times.jsonl"


def hf_dict(row: dict) -> dict:
    """The Hugging Face config dict the measurement script built for this row."""
    if row["family"] == "llama":
        return {"model_type": "llama", "hidden_size": row["hidden"], "num_hidden_layers": row["layers"],
                "num_attention_heads": row["heads"], "num_key_value_heads": row["kv_heads"],
                "intermediate_size": row["ffn"], "vocab_size": row["vocab"], "max_position_embeddings": 4096,
                "tie_word_embeddings": False}
    return {"model_type": "gpt2", "n_embd": row["hidden"], "n_layer": row["layers"], "n_head": row["heads"],
            "n_inner": row["ffn"], "vocab_size": row["vocab"], "n_positions": 4096}


def load(path: Path = DATA) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("status") == "ok"]


def predictions(rows: list[dict], gpu: str = "h200-sxm", calibrated: bool = True) -> np.ndarray:
    out = []
    for r in rows:
        cfg = gm.TransformerConfig.from_hf(hf_dict(r), name=r["shape"])
        assert cfg.num_parameters() == r["n_params"], (r["shape"], cfg.num_parameters(), r["n_params"])
        st = gm.training_step_time(cfg, gpu, batch_size=r["batch"], seq_len=r["seq"], precision=r["precision"],
                                   optimizer=r["optimizer"], checkpointing=r["checkpointing"], calibrated=calibrated)
        out.append(st.seconds)
    return np.array(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    rows = load(args.data)
    measured = np.array([r["step_s_median"] for r in rows])
    cal, sheet = predictions(rows, calibrated=True), predictions(rows, calibrated=False)
    print(f"{'model':<12} {'batch x seq':>11} {'precision':>9} {'ckpt':>5} {'measured':>9} {'calibrated':>10} {'err':>7}"
          f" {'datasheet':>9} {'err':>7}")
    for r, m, c, d in zip(rows, measured, cal, sheet):
        print(f"{r['shape']:<12} {r['batch']:>4} x {r['seq']:<4} {r['precision']:>9} {str(r['checkpointing']):>5} "
              f"{m * 1e3:7.1f}ms {c * 1e3:8.1f}ms {(c / m - 1):+7.1%} {d * 1e3:7.1f}ms {(d / m - 1):+7.1%}")
    for label, pred in (("calibrated", cal), ("datasheet", sheet)):
        err = np.abs(pred / measured - 1)
        print(f"{label:>10}: median |error| {np.median(err):.1%}, p90 {np.percentile(err, 90):.1%}, "
              f"worst {err.max():.1%} over {len(err)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
