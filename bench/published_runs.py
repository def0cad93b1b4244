"""Modelled vs published time per iteration of large training runs (Megatron-LM SC21 Table 1, Llama 3 Table 4).

Multi-GPU step times in gpumodel are modelled, not measured; this script is their check. Published
throughput is converted to time per iteration with each paper's own FLOP count:

* Megatron-LM (Narayanan et al. 2021, eq. 3), counting activation recomputation:
  ``F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h))``, so ``t = F / (n_gpus * TFLOP/s)``.
* Llama 3 (Dubey et al. 2024): ``F = (6 N + 12 L h s) * tokens`` (assumed; the paper does not state it).

It prints, per row, the published and modelled iteration time and TFLOP/s per GPU, the error, and the
same for the usual shortcut: ``6 N tokens`` at a fixed MFU (the median MFU of the table, the best a
fixed-MFU shortcut can do). Run: ``python bench/published_runs.py [--json]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpumodel as gm  # noqa: E402
from gpumodel.cluster.step import model_flops_per_token, parallel_training_step_time  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "cluster" / "published_runs.csv"
SYSTEMS = {"megatron-sc21": "dgx-a100-80gb", "llama3-405b": "dgx-h100"}


def load_rows(path: Path = DATA) -> list[dict]:
    """The published rows, numbers as int/float."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    rows = []
    for r in csv.DictReader(lines):
        rows.append({k: (v if k in ("source", "label") else float(v) if "." in v else int(v)) for k, v in r.items()})
    return rows


def config(row: dict) -> gm.TransformerConfig:
    if row["source"] == "megatron-sc21":
        return gm.TransformerConfig(name=f"gpt-{row['label']}", family="gpt2", hidden_size=row["hidden"],
                                    num_layers=row["layers"], num_heads=row["heads"], intermediate_size=row["intermediate"],
                                    vocab_size=row["vocab"], max_position_embeddings=row["seq_len"], mlp="plain",
                                    activation="gelu", norm="layernorm", position="learned", tie_word_embeddings=True,
                                    qkv_bias=True, o_bias=True, mlp_bias=True, norm_bias=True)
    return gm.model("llama-3-405b")


def published_seconds(row: dict, cfg: gm.TransformerConfig) -> float:
    """Time per iteration implied by the published TFLOP/s per GPU and the paper's FLOP count [s]."""
    B, s = row["global_batch"], row["seq_len"]
    if row["source"] == "megatron-sc21":
        h, L, V = row["hidden"], row["layers"], row["vocab"]
        flops = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    else:
        flops = model_flops_per_token(cfg, s) * B * s
    return flops / (row["gpus"] * row["tflops_per_gpu"] * 1e12)


def predict(row: dict, cfg: gm.TransformerConfig) -> gm.StepTime:
    par = gm.Parallelism(dp=row["dp"], tp=row["tp"], pp=row["pp"], cp=row["cp"], virtual_stages=row["virtual_stages"],
                         zero=1 if row["source"] == "llama3-405b" else 0,
                         sequence_parallel=row["source"] == "llama3-405b")
    m = row["global_batch"] // (row["dp"] * row["micro_batch"])
    precision = "amp_fp16" if row["source"] == "megatron-sc21" else "amp_bf16"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        # Megatron-LM in 2021 predates FlashAttention: scores and probabilities go through device memory
        attention = "naive" if row["source"] == "megatron-sc21" else "flash"
        return parallel_training_step_time(cfg, SYSTEMS[row["source"]], batch_size=row["micro_batch"],
                                           seq_len=row["seq_len"], precision=precision,
                                           checkpointing=row["source"] == "megatron-sc21", gradient_accumulation_steps=m,
                                           parallelism=par, framework="megatron", attention=attention)


def table(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        cfg = config(row)
        t_pub = published_seconds(row, cfg)
        st = predict(row, cfg)
        out.append(dict(source=row["source"], label=row["label"], gpus=row["gpus"], published_s=t_pub,
                        predicted_s=st.seconds, published_tflops=row["tflops_per_gpu"],
                        predicted_tflops=row["tflops_per_gpu"] * t_pub / st.seconds,
                        error=st.seconds / t_pub - 1, mfu=st.mfu, breakdown=st.breakdown,
                        six_n=6 * cfg.active_parameters() * row["global_batch"] * row["seq_len"],
                        peak=gm.gpu(gm.system(SYSTEMS[row["source"]]).gpu_name).peak_flops("bf16")))
    mfus = sorted(6 * r["six_n"] / 6 / r["published_s"] / (r["gpus"] * r["peak"]) for r in out)
    fixed = statistics.median(mfus)
    for r in out:
        r["shortcut_s"] = r["six_n"] / (r["gpus"] * r["peak"] * fixed)
        r["shortcut_error"] = r["shortcut_s"] / r["published_s"] - 1
        r["shortcut_mfu"] = fixed
    return out


def summary(errors: list[float]) -> tuple[float, float]:
    a = [abs(e) for e in errors]
    return statistics.median(a), max(a)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = table(load_rows())
    if args.json:
        json.dump(out, sys.stdout, indent=1, default=float)
        return 0
    print(f"{'run':<14} {'layout':<20} {'GPUs':>6} {'pub s':>8} {'model s':>8} {'err':>7} {'pub TF':>7} "
          f"{'model TF':>8} {'6NT s':>8} {'6NT err':>8}  exposed comm / bubble")
    rows = load_rows()
    for r, row in zip(out, rows):
        lay = f"tp{row['tp']} pp{row['pp']} cp{row['cp']} dp{row['dp']}"
        bd = r["breakdown"]
        print(f"{r['source'][:8] + ' ' + r['label']:<14.14} {lay:<20} {r['gpus']:>6} {r['published_s']:>8.2f} "
              f"{r['predicted_s']:>8.2f} {r['error']:>+7.1%} {r['published_tflops']:>7.0f} {r['predicted_tflops']:>8.0f} "
              f"{r['shortcut_s']:>8.2f} {r['shortcut_error']:>+8.1%}  "
              f"{bd['communication'] / r['predicted_s']:.0%} / {bd['pipeline_bubble'] / r['predicted_s']:.0%}")
    med, worst = summary([r["error"] for r in out])
    smed, sworst = summary([r["shortcut_error"] for r in out])
    print(f"\nmodel: median |error| {med:.1%}, worst {worst:.1%} over {len(out)} runs (bar: 10% / 25%)")
    print(f"6*N*tokens at a fixed MFU of {out[0]['shortcut_mfu']:.1%} (the table's median): "
          f"median |error| {smed:.1%}, worst {sworst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
