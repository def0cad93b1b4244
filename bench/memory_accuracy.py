"""Accuracy of gpumodel's memory model against the measured H200 runs in tests/data/memory.

Prints, for every measured training run, the measured ``max_memory_allocated`` over a whole step
and gpumodel's ``peak_bytes``, then the median and worst absolute error separately for the
development shapes and the held-out shapes; runs PyTorch could not fit are listed with the
prediction of whether they fit. Inference runs follow.

    python bench/memory_accuracy.py [--verbose]

The measured values are relative to the memory allocated before each run, which already held
the cuBLAS workspaces (two of 32 MiB: the main thread's and autograd's), so the comparison
leaves gpumodel's ``cublas_workspace`` component out; the very first run created autograd's
workspace inside its measurement and is compared with 32 MiB of it. The ``baseline`` line is the
usual calculator formula (parameters x bytes per parameter + Korthikanti activations), for contrast.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import gpumodel as gm
from gpumodel.core.memory import CUBLAS_WORKSPACE_BYTES

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "memory"
GiB = 2 ** 30


def load(prefix: str = ""):
    """Configs and rows of ``runs.jsonl`` (``prefix=""``) or ``families_runs.jsonl`` (``prefix="families_"``)."""
    shapes = json.loads((DATA / f"{prefix}shapes.json").read_text())
    rows = [json.loads(line) for line in (DATA / f"{prefix}runs.jsonl").read_text().splitlines() if line.strip()]
    cfgs = {k: gm.TransformerConfig.from_hf(v["hf_config"], name=k) for k, v in shapes.items()}
    return cfgs, rows


def predict_train(cfgs, row):
    return gm.training_memory(cfgs[row["shape"]], row["batch"], row["seq"], precision=row["precision"],
                              optimizer=row["optimizer"], checkpointing=row["checkpointing"], attention=row["attn"],
                              use_cache=row["use_cache"])


def train_table(cfgs, rows, verbose=False):
    """(split -> list of relative errors, list of OOM checks)."""
    base_max = max(r["base_alloc"] for r in rows)
    errs, ooms = {"dev": [], "heldout": [], "families": []}, []
    for r in rows:
        if r["kind"] != "train":
            continue
        m = predict_train(cfgs, r)
        if r["status"] == "oom":
            ooms.append((r, m))
            continue
        if r["status"] != "ok":
            continue
        inside = CUBLAS_WORKSPACE_BYTES / 2 if r["base_alloc"] < base_max - 16 * 2**20 else 0.0
        pred = m.peak_bytes - CUBLAS_WORKSPACE_BYTES + inside
        err = pred / r["peak_bytes"] - 1
        errs[r["set"]].append(err)
        if verbose:
            print(f"{r['set']:7s} {r['shape']:15s} {r['precision']:8s} {r['optimizer']:12s} ck={int(r['checkpointing'])} "
                  f"{r['attn']:5s} uc={int(r['use_cache'])} B={r['batch']:3d} S={r['seq']:5d}  measured "
                  f"{r['peak_bytes'] / GiB:7.3f}  predicted {pred / GiB:7.3f} GiB  {100 * err:+6.2f}%  ({m.peak_moment})")
    return errs, ooms


def baseline_errors(cfgs, rows):
    """Errors of the usual calculator formula: weights + gradients + optimizer states (bytes per parameter
    by precision) + activations of Korthikanti et al. without recomputation, 34*s*b*h per layer in 16-bit
    (flash attention, no S x S term), 2*s*b*h per layer with full checkpointing; no logits or loss."""
    errs = {"dev": [], "heldout": []}
    for r in rows:
        if r["kind"] != "train" or r["status"] != "ok":
            continue
        cfg = cfgs[r["shape"]]
        wb = 2 if r["precision"] == "bf16" else 4
        states = {"adamw": 2, "sgd": 0, "sgd_momentum": 1}[r["optimizer"]] * wb
        tokens = r["batch"] * r["seq"]
        per_layer = (2 if r["checkpointing"] else 34) * tokens * cfg.hidden_size
        pred = cfg.num_parameters() * (2 * wb + states) + cfg.num_layers * per_layer
        errs[r["set"]].append(pred / r["peak_bytes"] - 1)
    return errs


def infer_table(cfgs, rows, verbose=False):
    errs = {"dev": [], "heldout": [], "families": []}
    for r in rows:
        if r["kind"] != "infer" or r["status"] != "ok":
            continue
        cfg = cfgs[r["shape"]]
        for what, key in (("prefill", "peak_prefill"), ("generate", "peak_generate")):
            m = gm.inference_memory(cfg, r["batch"], r["seq"], new_tokens=r["new_tokens"], dtype=r["dtype"],
                                    mode=what)
            pred = m.peak_bytes - CUBLAS_WORKSPACE_BYTES / 2
            err = pred / r[key] - 1
            errs[r["set"]].append(err)
            if verbose:
                print(f"{r['set']:7s} {r['shape']:15s} {what:8s} B={r['batch']:3d} S={r['seq']:5d} +{r['new_tokens']:3d}  "
                      f"measured {r[key] / GiB:7.3f}  predicted {pred / GiB:7.3f} GiB  {100 * err:+6.2f}%")
    return errs


def summary(title, errs):
    for split in ("dev", "heldout", "families"):
        e = [abs(x) for x in errs.get(split, [])]
        if e:
            print(f"{title:10s} {split:8s} runs={len(e):3d}  median |error| {100 * statistics.median(e):5.2f}%  "
                  f"worst {100 * max(e):5.2f}%")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verbose", "-v", action="store_true")
    args = ap.parse_args(argv)
    cfgs, rows = load()
    env = json.loads((DATA / "environment.json").read_text())
    print(f"measured on {env['gpu']} (driver {env['driver']}), torch {env['torch']}, transformers {env['transformers']}")
    errs, ooms = train_table(cfgs, rows, args.verbose)
    capacity = env["gpu_total_bytes"]
    for r, m in ooms:
        verdict = "predicted OOM" if m.peak_bytes > capacity else "PREDICTED TO FIT"
        print(f"OOM run  {r['set']:7s} {r['shape']:15s} {r['precision']} B={r['batch']} S={r['seq']}: "
              f"predicted peak {m.peak_bytes / GiB:.1f} GiB vs {capacity / GiB:.1f} GiB -> {verdict}")
    ierrs = infer_table(cfgs, rows, args.verbose)
    fcfgs, frows = load("families_")  # Mistral, Gemma, Phi-3, GPT-NeoX, Mixtral: measured after the model was built
    ferrs, _ = train_table(fcfgs, frows, args.verbose)
    fierrs = infer_table(fcfgs, frows, args.verbose)
    summary("training", {**errs, "families": ferrs["families"]})
    summary("baseline", baseline_errors(cfgs, rows))
    summary("inference", {**ierrs, "families": fierrs["families"]})


if __name__ == "__main__":
    main()
