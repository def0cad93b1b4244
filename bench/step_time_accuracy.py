"""Accuracy of ``gm.training_step_time`` against training steps measured on an H200.

Reads the step records of ``tests/data/steptime/step_times.jsonl`` (first set, Llama and GPT-2) and
``step_times_v2.jsonl`` (second set, 15 families and the step options; written by
``bench/measure_step_time.py``) and ``step_times_v3.jsonl`` (the second set's steps measured again in a
later run, with Gemma 2) and ``step_times_v4.jsonl`` (ten device-bound and eager-MoE steps once more, each
profiled with its kernels' durations) and ``step_times_v5.jsonl`` (three MoE steps once more, one profiled
into a Chrome trace), rebuilds each model's config through ``TransformerConfig.from_hf``
(checking the parameter count against the measured model's), predicts the step with the shipped H200
calibration and host costs, and prints predicted vs measured per run, then the error over the
held-out runs (``held_out`` in the data, fixed by a hash before measuring; the first set was never
used to fit anything and counts as held out) per family and per option, the run-to-run difference of
the steps measured twice, and the bar.

The host costs come from host microbenchmarks only (``bench/fit_host_costs.py``); no step time is fitted.

``--calibration FILE --host FILE`` price the steps with a user's own calibration and host costs (what
``gpumodel calibrate`` writes) instead of the shipped ones.

Usage::

    python bench/step_time_accuracy.py [--data FILE ...] [--gpu NAME] [--all] [--quiet] [--calibration FILE] [--host FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's gpumodel

import gpumodel as gm

DATA_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "steptime"
DATA = [DATA_DIR / f"step_times{v}.jsonl" for v in ("", "_v2", "_v3", "_v4", "_v5")]
MOE_FAMILIES = {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3"}


def hf_dict(row: dict) -> dict:
    """The Hugging Face config dict the measurement script built for this row."""
    if "hf_config" in row:
        return dict(row["hf_config"])
    if row["family"] == "llama":
        return {"model_type": "llama", "hidden_size": row["hidden"], "num_hidden_layers": row["layers"],
                "num_attention_heads": row["heads"], "num_key_value_heads": row["kv_heads"],
                "intermediate_size": row["ffn"], "vocab_size": row["vocab"], "max_position_embeddings": 4096,
                "tie_word_embeddings": False}
    return {"model_type": "gpt2", "n_embd": row["hidden"], "n_layer": row["layers"], "n_head": row["heads"],
            "n_inner": row["ffn"], "vocab_size": row["vocab"], "n_positions": 4096}


def load(paths=DATA) -> list[dict]:
    """Measured steps (status ok) of the given files; rows of the first set are marked held out."""
    rows = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("status") != "ok" or r.get("kind", "step") != "step":
                continue
            r.setdefault("held_out", True)
            r["set"] = path.stem
            rows.append(r)
    return rows


def options(row: dict) -> dict:
    """training_step_time keywords of a measured run."""
    kw = dict(precision=row["precision"], optimizer=row["optimizer"], checkpointing=bool(row["checkpointing"]),
              fused=bool(row.get("fused", False)), foreach=bool(row.get("foreach", True)),
              gradient_accumulation_steps=int(row.get("gradient_accumulation_steps", 1)),
              clip_grad_norm=row.get("clip_grad_norm"), compile=bool(row.get("compile", False)))
    if row.get("experts_implementation") in ("eager", "grouped_mm") and row["family"] in MOE_FAMILIES:
        kw["experts_implementation"] = row["experts_implementation"]
    return kw


def label(row: dict) -> str:
    """The option a run exercises beyond the common setting (amp_bf16, foreach AdamW)."""
    kw = options(row)
    parts = [kw["precision"]] if kw["precision"] != "amp_bf16" else []
    if kw["optimizer"] != "adamw":
        parts.append(kw["optimizer"])
    parts += [name for name, on in (("fused", kw["fused"]), ("forloop", not kw["foreach"] and not kw["fused"]),
                                    ("ckpt", kw["checkpointing"]), ("clip", kw["clip_grad_norm"] is not None),
                                    ("accum", kw["gradient_accumulation_steps"] > 1), ("compile", kw["compile"]),
                                    ("experts-eager", kw.get("experts_implementation") == "eager")) if on]
    return "+".join(parts) or "default"


def predict(row: dict, gpu: str = "h200-sxm", **extra) -> gm.StepTime:
    cfg = gm.TransformerConfig.from_hf(hf_dict(row), name=row["shape"])
    if "n_params" in row:
        assert cfg.num_parameters() == row["n_params"], (row["shape"], cfg.num_parameters(), row["n_params"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        return gm.training_step_time(cfg, gpu, batch_size=row["batch"], seq_len=row["seq"], **options(row), **extra)


def summary(err: np.ndarray) -> str:
    a = np.abs(err)
    return (f"n={len(err):3d}  median |err| {np.median(a):6.1%}  p90 {np.percentile(a, 90):6.1%}  "
            f"worst ratio {np.max(np.maximum(1 + err, 1 / (1 + err))):5.2f}x  signed median {np.median(err):+6.1%}")


def run_key(row: dict) -> tuple:
    """What makes two measured rows the same step (shape, sizes and options)."""
    kw = options(row)
    return (row["shape"], row["batch"], row["seq"], tuple(sorted((k, str(v)) for k, v in kw.items())))


def run_to_run(rows: list[dict]) -> str:
    """The same steps measured in two runs (second and third sets): how far the third set is from the second."""
    first = {run_key(r): r["step_s_median"] for r in rows if r["set"] == "step_times_v2"}
    ratios = [r["step_s_median"] / first[run_key(r)] - 1 for r in rows
              if r["set"] == "step_times_v3" and run_key(r) in first]
    if not ratios:
        return "run to run: no step measured twice"
    a = np.abs(ratios)
    return (f"run to run (the same {len(ratios)} steps, third set over second): median |diff| {np.median(a):.1%}, "
            f"p90 {np.percentile(a, 90):.1%}, largest {np.max(a):.1%}, signed median {np.median(ratios):+.1%}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, nargs="*", default=DATA)
    ap.add_argument("--all", action="store_true", help="summaries over all runs, not only the held-out ones")
    ap.add_argument("--quiet", action="store_true", help="summaries only")
    ap.add_argument("--gpu", default="h200-sxm",
                    help="the GPU the steps ran on (default h200-sxm; others use the transferred calibration)")
    ap.add_argument("--calibration", default=None, help="a calibration YAML of that GPU (default: the shipped one)")
    ap.add_argument("--host", default=None, help="a host-cost YAML (default: the shipped one of that GPU)")
    args = ap.parse_args(argv)
    rows = load(args.data)
    if not rows:
        print("no measured steps found")
        return 1
    measured = np.array([r["step_s_median"] for r in rows])
    from gpumodel.calibration.record import load_calibration
    from gpumodel.training.hostcost import load_host_costs

    cal = load_calibration(args.calibration) if args.calibration else None   # read once for every step
    host = load_host_costs(args.host) if args.host else None
    preds = [predict(r, gpu=args.gpu, calibration=cal, host=host) for r in rows]
    pred = np.array([p.seconds for p in preds])
    err = pred / measured - 1
    if not args.quiet:
        print(f"{'model':<17} {'family':<11} {'b x seq':>10} {'option':<22} {'held':>4} {'measured':>9} "
              f"{'predicted':>9} {'err':>7} {'host wait':>9}")
        for r, m, p, e in zip(rows, measured, preds, err):
            print(f"{r['shape']:<17} {r['family']:<11} {r['batch']:>3} x {r['seq']:<4} {label(r):<22} "
                  f"{'yes' if r['held_out'] else 'no':>4} {m * 1e3:7.1f}ms {p.seconds * 1e3:7.1f}ms {e:+7.1%} "
                  f"{p.breakdown['host_wait'] * 1e3:7.1f}ms")
    keep = np.array([bool(r["held_out"]) or args.all for r in rows])
    print(f"\n{'held-out' if not args.all else 'all'} runs, by family:")
    for fam in sorted({r["family"] for r in rows}):
        sel = keep & np.array([r["family"] == fam for r in rows])
        if sel.any():
            print(f"  {fam:<14} {summary(err[sel])}")
    print("by option:")
    for opt in sorted({label(r) for r in rows}):
        sel = keep & np.array([label(r) == opt for r in rows])
        if sel.any():
            print(f"  {opt:<22} {summary(err[sel])}")
    print("by set:")
    for name in sorted({r["set"] for r in rows}):
        sel = keep & np.array([r["set"] == name for r in rows])
        if sel.any():
            print(f"  {name:<22} {summary(err[sel])}")
    print(run_to_run(rows))
    total = err[keep]
    print(f"\nALL {'held-out' if not args.all else ''}: {summary(total)}")
    a = np.abs(total)
    ok = (np.median(a) <= 0.10 and np.percentile(a, 90) <= 0.20 and np.max(np.maximum(1 + total, 1 / (1 + total))) <= 1.5
          and abs(np.median(total)) <= 0.05)
    print(f"bar (median <= 10%, p90 <= 20%, none off by > 1.5x, |signed median| <= 5%): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
