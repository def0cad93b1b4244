"""Modelled vs published time per iteration of large training runs (tests/data/cluster/published_runs.csv).

Multi-GPU step times in gpumodel are modelled, not measured; this script is their check. The table holds the
two build-and-tune tables (role "fit": Megatron-LM SC21 Table 1, Llama 3 Table 4) and independent published
runs (role "check": Megatron-LM SC21 Table 2 with its ZeRO-3 rows, the Megatron-LM README's GPT-3 and H100 runs,
MT-NLG 530B, MegaScale's Megatron-LM baseline, OPT-175B, Megatron-Core's Mixtral 8x7B, the NeMo 24.07 fp8
summary, DeepSeek-V3's GPU-hours), each row cited in the file. Where a publication gives the time per
iteration it is the reference; tokens per second per GPU and a whole run's GPU-hours convert directly;
otherwise its throughput is converted with its own FLOP count:

* ``megatron-eq3`` (Narayanan et al. 2021, eq. 3, counting activation recomputation):
  ``F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h))``;
* ``megatron-2024`` (Megatron-LM's ``num_floating_point_operations``, model FLOPs):
  ``F = 12 B s l h^2 ((1 + g / a + s / h) + f k m / h + V / (2 l h))`` (``k`` routed experts, ``m`` 3/2 if gated);
* ``palm``: ``F = (6 N + 12 L h s) * tokens`` (assumed for Llama 3; the paper does not state it);

and ``t = F / (n_gpus * TFLOP/s)``. It prints, per row, the published and modelled iteration time and
TFLOP/s per GPU, the error, and the same for the usual shortcut: ``6 N tokens`` at a fixed MFU (the median
MFU of the table, the best a fixed-MFU shortcut can do); then the median and worst error over the fit rows,
the check rows and all rows, and per source; and whether each published layout fits in its GPU's memory under the
framework's memory model (``StepTime.fits``: the peak per GPU of :func:`gpumodel.training_memory` with the row's
layout and recomputation, its allocator and NCCL reserve included, against the GPU's usable memory). Run: ``python bench/published_runs.py [--json] [--role fit|check]``.
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
#: Hugging Face configs of the models that are not gpumodel presets, by the name the table's ``model`` column gives
MODELS = {k: v for k, v in json.loads((DATA.parent / "published_models.json").read_text()).items() if k != "_source"}
TEXT = ("source", "role", "label", "system", "checkpointing", "attention", "precision", "flops", "comm_overlap", "model",
        "framework", "attention_kernel", "stage_layers", "fp8", "schedule", "grad_reduce", "recompute_modules",
        "zero3_gather")


def load_rows(path: Path = DATA) -> list[dict]:
    """The published rows, numbers as int/float (an empty ``tflops_per_gpu`` or ``iteration_s`` is None)."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    rows = []
    for r in csv.DictReader(lines):
        rows.append({k: (v or "") if k in TEXT else None if v == "" else float(v) if "." in v else int(v)
                     for k, v in r.items()})
    return rows


def config(row: dict) -> gm.TransformerConfig:
    """The row's model: a gpumodel preset, a Hugging Face config of published_models.json, or a GPT of its columns."""
    if row.get("model") in MODELS:
        return gm.TransformerConfig.from_hf({k: v for k, v in MODELS[row["model"]].items() if k != "_source"},
                                            name=row["model"])
    if row.get("model"):
        return gm.model(row["model"])
    return gm.TransformerConfig(name=f"gpt-{row['label']}", family="gpt2", hidden_size=row["hidden"],
                                num_layers=row["layers"], num_heads=row["heads"], num_kv_heads=row["kv_heads"],
                                intermediate_size=row["intermediate"], vocab_size=row["vocab"],
                                max_position_embeddings=row["seq_len"], mlp="plain", activation="gelu", norm="layernorm",
                                position="learned", tie_word_embeddings=bool(row["tied"]), qkv_bias=True, o_bias=True,
                                mlp_bias=True, norm_bias=True)


def publication_flops(row: dict, cfg: gm.TransformerConfig) -> float:
    """FLOPs of one iteration as the publication counts them [FLOP]."""
    B, s = row["global_batch"], row["seq_len"]
    h, L, V, a, g, f = row["hidden"], row["layers"], row["vocab"], row["heads"], row["kv_heads"], row["intermediate"]
    if row["flops"] == "megatron-eq3":
        return 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    if row["flops"] == "megatron-2024":   # a MoE layer counts its top-k experts; a gated MLP 3/2 of the plain one
        mlp = f / h * max(cfg.experts_per_token, 1) * (1.5 if cfg.mlp == "gated" else 1.0)
        return 12 * B * s * L * h * h * ((1 + g / a + s / h) + mlp + V / (2 * L * h))
    return model_flops_per_token(cfg, s) * B * s


def published_seconds(row: dict, cfg: gm.TransformerConfig) -> float:
    """Published time per iteration, or the one implied by the tokens per second per GPU, by the GPU-hours of a
    whole run (``gpu_hours`` for ``tokens``), or by the TFLOP/s per GPU and the paper's FLOP count [s]."""
    if row["iteration_s"] is not None:
        return float(row["iteration_s"])
    tokens = row["global_batch"] * row["seq_len"]
    if row["tokens_per_gpu_s"] is not None:
        return tokens / (row["gpus"] * row["tokens_per_gpu_s"])
    if row["gpu_hours"] is not None:
        return row["gpu_hours"] * 3600 / row["gpus"] * tokens / row["tokens"]
    return publication_flops(row, cfg) / (row["gpus"] * row["tflops_per_gpu"] * 1e12)


def overlap(text: str):
    """The ``comm_overlap`` column: "0", "1" (all of Megatron-Core's) or names such as "dp+pp"."""
    return {"0": False, "1": True}.get(text, text)


def predict(row: dict, cfg: gm.TransformerConfig) -> gm.StepTime:
    par = gm.Parallelism(dp=row["dp"], tp=row["tp"], pp=row["pp"], cp=row["cp"], ep=row["ep"],
                         virtual_stages=row["virtual_stages"], zero=row["zero"],
                         sequence_parallel=bool(row["sequence_parallel"]))
    m = row["global_batch"] // (row["dp"] * row["micro_batch"])
    ckpt = {"none": False, "full": "full", "selective": "selective"}[row["checkpointing"]]
    first, last = (int(x) for x in row["stage_layers"].split("/")) if row["stage_layers"] else (None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        return parallel_training_step_time(cfg, row["system"], batch_size=row["micro_batch"], seq_len=row["seq_len"],
                                           precision=row["precision"], checkpointing=ckpt,
                                           gradient_accumulation_steps=m, parallelism=par,
                                           framework=row["framework"], attention=row["attention"],
                                           attention_kernel=row["attention_kernel"],
                                           comm_overlap=overlap(row["comm_overlap"]), first_stage_layers=first,
                                           last_stage_layers=last, fp8=row["fp8"] or False,
                                           pipeline_schedule=row["schedule"] or "1f1b",
                                           grad_reduce_dtype=row["grad_reduce"] or None,
                                           recompute_modules=recompute_modules(row),
                                           zero3_gather=row.get("zero3_gather") or "prefetch")


def recompute_modules(row: dict):
    """The row's ``recompute_modules`` (Megatron-Core's ``--recompute-modules``, joined by ``+``); None: the default."""
    return row.get("recompute_modules") or None


def table(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        cfg = config(row)
        t_pub = published_seconds(row, cfg)
        st = predict(row, cfg)
        tflops = publication_flops(row, cfg) / (row["gpus"] * t_pub) / 1e12   # in the publication's FLOP count
        out.append(dict(source=row["source"], role=row["role"], label=row["label"], gpus=row["gpus"], published_s=t_pub,
                        predicted_s=st.seconds, published_tflops=tflops, predicted_tflops=tflops * t_pub / st.seconds,
                        error=st.seconds / t_pub - 1, mfu=st.mfu, breakdown=st.breakdown, fits=st.fits,
                        peak_gib=st.peak_bytes / 2**30,
                        six_n=6 * cfg.active_parameters() * row["global_batch"] * row["seq_len"],
                        peak=gm.gpu(gm.system(row["system"]).gpu_name).peak_flops("bf16")))
    # the shortcut's one MFU: the median over the fit rows, then applied to every row
    fixed = statistics.median(r["six_n"] / r["published_s"] / (r["gpus"] * r["peak"]) for r in out if r["role"] == "fit")
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
    ap.add_argument("--role", choices=("fit", "check"), help="print only these rows (the summary covers all)")
    args = ap.parse_args(argv)
    rows = load_rows()
    out = table(rows)
    if args.json:
        json.dump(out, sys.stdout, indent=1, default=float)
        return 0
    print(f"{'run':<30} {'layout':<21} {'GPUs':>6} {'pub s':>7} {'model s':>7} {'err':>7} {'pub TF':>6} "
          f"{'model TF':>8} {'6NT err':>8}  exposed comm / bubble  memory")
    for r, row in zip(out, rows):
        if args.role and r["role"] != args.role:
            continue
        lay = f"tp{row['tp']} pp{row['pp']}" + (f"x{row['virtual_stages']}" if row["virtual_stages"] > 1 else "") + \
            (f" cp{row['cp']}" if row["cp"] > 1 else "") + f" dp{row['dp']}"
        bd = r["breakdown"]
        print(f"{r['source'] + ' ' + r['label']:<30.30} {lay:<21} {r['gpus']:>6} {r['published_s']:>7.2f} "
              f"{r['predicted_s']:>7.2f} {r['error']:>+7.1%} {r['published_tflops']:>6.0f} {r['predicted_tflops']:>8.0f} "
              f"{r['shortcut_error']:>+8.1%}  "
              f"{bd['communication'] / r['predicted_s']:>3.0%} / {bd['pipeline_bubble'] / r['predicted_s']:<3.0%}          "
              f"{'fits' if r['fits'] else 'does not fit'}, peak {r['peak_gib']:.0f} GiB")
    print(f"\n{'rows':<34} {'n':>3} {'model median':>13} {'worst':>7}   6NT median   worst")
    for name, sel in (("fit (Megatron SC21 T1, Llama 3 T4)", "fit"), ("check (independent)", "check"), ("all", None)):
        part = [r for r in out if sel is None or r["role"] == sel]
        med, worst = summary([r["error"] for r in part])
        smed, sworst = summary([r["shortcut_error"] for r in part])
        print(f"{name:<34} {len(part):>3} {med:>13.1%} {worst:>7.1%} {smed:>12.1%} {sworst:>7.1%}")
    print(f"(6NT: 6 N tokens at a fixed MFU of {out[0]['shortcut_mfu']:.1%}, the fit rows' median)")
    print(f"\n{'source':<34} {'n':>3} {'median':>13} {'worst':>7}")
    for source in dict.fromkeys(r["source"] for r in out):
        med, worst = summary([r["error"] for r in out if r["source"] == source])
        n = sum(r["source"] == source for r in out)
        print(f"{source:<34} {n:>3} {med:>13.1%} {worst:>7.1%}")
    misfits = [f"{r['source']} {r['label']}" for r in out if not r["fits"]]
    print(f"\npublished layouts that fit in memory (the framework's memory model with the row's recomputation; the "
          f"verdict adds the allocator's and NCCL's reserve to the peak): "
          f"{len(out) - len(misfits)} of {len(out)}" + (f"; not: {', '.join(misfits)}" if misfits else ""))
    print("(issue 31's bar: median 5% over all rows, every source's worst row 15%, every published layout fits)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
