"""Accuracy of gpumodel's training memory on mixture-of-experts models with gradient accumulation.

Reads the runs of ``bench/measure_moe_memory.py`` (``tests/data/memory/moe/runs.jsonl``) and prints, for every
run that ran, the measured ``torch.cuda.max_memory_allocated`` over a whole step (absolute: it holds the cuBLAS
workspaces, as ``gm.training_memory``'s ``peak_bytes`` does) against ``gm.training_memory(...).peak_bytes`` with
the run's options (precision, optimizer and its AdamW implementation, checkpointing, gradient accumulation
steps), the phase of the measured step that peaked beside the moment gpumodel names; then the median and worst
error by family, by gradient accumulation steps, by optimizer, by precision and by checkpointing, and overall
against the bar (within 3%). Runs that raised ``torch.OutOfMemoryError`` are listed with the prediction.

The models' configs are the runs' ``shapes.json`` (Hugging Face config dicts) read with
``gm.TransformerConfig.from_hf``, as gpumodel reads any ``config.json``; a run whose built model had another
parameter count than the config gives is flagged.

Usage::

    python bench/moe_memory_accuracy.py [--data DIR] [--quiet]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "memory" / "moe"
sys.path.insert(0, str(ROOT / "bench"))
from measure_moe_memory import SHAPES, TINY  # noqa: E402

import gpumodel as gm  # noqa: E402

GiB = 2**30
BAR = 0.03   # the acceptance bar: |predicted / measured - 1| [ratio]


def load(data: Path) -> tuple[dict, list[dict]]:
    """The shapes (from the data's ``shapes.json``, else the measuring script's) and the rows of ``runs.jsonl``."""
    path = data / "shapes.json"
    shapes = json.loads(path.read_text()) if path.exists() else {**SHAPES, **TINY}
    rows = [json.loads(line) for line in (data / "runs.jsonl").read_text().splitlines() if line.strip()]
    return shapes, rows


def implementation(r: dict) -> str:
    """foreach, fused or forloop for AdamW; the optimizer's name otherwise."""
    if r["optimizer"] != "adamw":
        return r["optimizer"]
    return r.get("implementation") or ("fused" if r["fused"] else "foreach")


def predict(cfg, r: dict):
    impl = implementation(r)
    return gm.training_memory(cfg, r["batch"], r["seq"], precision=r["precision"], optimizer=r["optimizer"],
                              checkpointing=r["checkpointing"],
                              gradient_accumulation_steps=r["gradient_accumulation_steps"],
                              fused=impl == "fused", foreach=impl != "forloop")


def measured_phase(r: dict) -> str:
    """The phase of the phase-resolved step (step 2) with the largest peak."""
    phases = r.get("phases") or {}
    return max(phases, key=lambda k: phases[k]["peak"]) if phases else "-"


def summary(label: str, errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    within = sum(x <= BAR for x in a)
    return (f"{label:28s} runs={len(a):3d}  median |error| {100 * statistics.median(a):5.2f}%  "
            f"signed median {100 * statistics.median(errs):+6.2f}%  worst {100 * max(a):5.2f}%  "
            f"within {100 * BAR:.0f}%: {within}/{len(a)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="folder with runs.jsonl (and shapes.json)")
    ap.add_argument("--quiet", "-q", action="store_true", help="the summaries only")
    args = ap.parse_args(argv)
    if not (args.data / "runs.jsonl").exists():
        print(f"no measured runs in {args.data.relative_to(ROOT) if args.data.is_relative_to(ROOT) else args.data} "
              f"(runs.jsonl): measure them on a GPU with bench/measure_moe_memory.py "
              "(tests/data/memory/moe/README.md says how)")
        return 0
    shapes, rows = load(args.data)
    env_path = args.data / "environment.json"
    if env_path.exists():
        env = json.loads(env_path.read_text())
        print(f"measured on {env.get('gpu', env.get('device'))} (driver {env.get('driver', '-')}), "
              f"torch {env.get('torch')}, transformers {env.get('transformers')}")
    cfgs = {name: gm.TransformerConfig.from_hf(hf, name=name) for name, hf in shapes.items()}
    groups: dict[str, list[float]] = {}
    all_errs, failed = [], []
    if not args.quiet:
        print(f"{'shape':15s} {'precision':9s} {'optimizer':8s} ck {'batch x seq':>11s} acc  {'measured':>8s} "
              f"{'predicted':>9s}  {'error':>7s}  measured peak in / gpumodel's moment")
    for r in rows:
        cfg = cfgs[r["shape"]]
        m = predict(cfg, r)
        if r["status"] != "ok":
            failed.append((r, m))
            continue
        if not r.get("peak_allocated"):   # a run on the CPU (checks the script): nothing measured
            continue
        err = float(m.peak_bytes) / r["peak_allocated"] - 1
        all_errs.append(err)
        accum = r["gradient_accumulation_steps"]
        keys = (f"family {cfg.family}", f"accumulation {accum}", f"optimizer {implementation(r)}",
                f"precision {r['precision']}", f"checkpointing {bool(r['checkpointing'])}",
                f"{cfg.family} accumulation {'1' if accum == 1 else '>1'}")
        for key in keys:
            groups.setdefault(key, []).append(err)
        if not args.quiet:
            params = "" if r.get("n_params") in (None, cfg.num_parameters()) else \
                f"  PARAMETERS {r['n_params']} built, {cfg.num_parameters()} in the config"
            print(f"{r['shape']:15s} {r['precision']:9s} {implementation(r):8s} {int(r['checkpointing']):2d} "
                  f"{r['batch']:4d} x {r['seq']:<5d} {accum:3d}  {r['peak_allocated'] / GiB:8.2f} "
                  f"{float(m.peak_bytes) / GiB:9.2f}  {100 * err:+6.2f}%  {measured_phase(r)} / {m.peak_moment}"
                  f"{'  (repeat)' if r.get('repeat') else ''}{params}")
    for r, m in failed:
        print(f"{r['status'].upper():5s} {r['shape']:15s} {r['precision']} {implementation(r)} "
              f"ckpt={int(r['checkpointing'])} {r['batch']}x{r['seq']} accum={r['gradient_accumulation_steps']}: "
              f"failed in step {r.get('failed_step')} {r.get('failed_phase')}; predicted peak "
              f"{float(m.peak_bytes) / GiB:.1f} GiB ({r.get('error', '')[:120]})")
    if not all_errs:
        print("no run with a measured peak (runs on the CPU measure nothing)")
        return 0
    print()
    for key in sorted(groups):
        print(summary(key, groups[key]))
    print(summary("all", all_errs))
    worst = max(abs(e) for e in all_errs)
    verdict = "meets" if statistics.median([abs(e) for e in all_errs]) <= BAR and worst <= BAR else "misses"
    print(f"the bar (median and each run within {100 * BAR:.0f}% of the measured peak): {verdict} it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
