"""Will it fit, at the edge of a card: gpumodel's memory answers against training steps run near capacity.

Reads the runs of ``bench/measure_edge.py`` (``tests/data/memory/edge/<set>/runs.jsonl``) and prints, per
set and allocator setting:

* the allocated peak: ``gm.training_memory(...).peak_bytes`` against ``torch.cuda.max_memory_allocated``
  of the steps that ran (median and worst error);
* the answer to "does it fit?": ``gm.fits`` (the same options, ``expandable_segments`` as the run had it)
  against what happened (ran, or raised ``torch.OutOfMemoryError``), counted as right, said-fits-but-failed
  and said-fails-but-ran;
* the reserved peak's overhead over the allocated one (``max_memory_reserved / max_memory_allocated``),
  which the model's fixed allocator reserve stands for.

With ``--allocator`` the runs with PyTorch's default allocator are also scored with the model of the caching
allocator (:func:`gpumodel.core.step_allocations.simulate_training_step`: the step's allocations replayed through
the allocator on the card's memory less the CUDA context), against the fixed reserve, with the last simulated
step's reserved peak against ``max_memory_reserved`` of the runs that ran.

Usage::

    python bench/edge_accuracy.py [--sets h100 h100_heldout ...] [--rows] [--allocator]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EDGE = ROOT / "tests" / "data" / "memory" / "edge"
sys.path.insert(0, str(ROOT / "bench"))
from measure_edge import SHAPES  # noqa: E402

import gpumodel as gm  # noqa: E402
from gpumodel.core.memory import CUDA_CONTEXT_BYTES  # noqa: E402
from gpumodel.core.step_allocations import simulate_training_step  # noqa: E402

#: the runs' AdamW implementation where the rows do not say (the first sets passed fused=False, which
#: also turns foreach off in torch.optim)
FORLOOP_SETS = ("h100_forloop", "h100_heldout_forloop")
GPU_OF_SET = {"h100": "h100-sxm", "h200": "h200-sxm"}


def load(name: str) -> list[dict]:
    rows = [json.loads(line) for line in (EDGE / name / "runs.jsonl").read_text().splitlines() if line.strip()]
    for r in rows:
        if r["optimizer"] == "adamw" and "implementation" not in r:
            r["implementation"] = "fused" if r["fused"] else ("forloop" if name in FORLOOP_SETS else "foreach")
        r["set"] = name
    return rows


def modelled(r: dict) -> dict:
    cfg = gm.TransformerConfig.from_hf(SHAPES[r["shape"]])
    gpu = gm.gpu(GPU_OF_SET[r["set"].split("_")[0]])
    opts = dict(batch_size=r["batch"], seq_len=r["seq"], precision=r["precision"], optimizer=r["optimizer"],
                checkpointing=r["checkpointing"], expandable_segments=r["expandable_segments"])
    if r["optimizer"] == "adamw":
        opts.update(fused=r["implementation"] == "fused", foreach=r["implementation"] != "forloop")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mem = gm.training_memory(cfg, **opts)
        margin = gm.memory_margin(cfg, gpu, **opts)     # gm.fits's answer, with its margin and band
    return dict(peak=float(mem.peak_bytes), fits=bool(margin.fits), uncertain=bool(margin.uncertain),
                spare=float(margin.spare_bytes))


def simulated(r: dict) -> dict:
    """The caching-allocator model's answer for a run of the default allocator: ran or not, and the reserved peak
    of the last step it simulates."""
    cfg = gm.TransformerConfig.from_hf(SHAPES[r["shape"]])
    gpu = gm.gpu(GPU_OF_SET[r["set"].split("_")[0]])
    impl = r.get("implementation", "")
    sim = simulate_training_step(cfg, r["batch"], r["seq"], r["precision"], r["optimizer"], r["checkpointing"],
                                 fused=impl == "fused", foreach=impl != "forloop",
                                 capacity_bytes=gpu.usable_memory_bytes - CUDA_CONTEXT_BYTES, sm_count=gpu.sm_count)
    return dict(fits=bool(sim.fits), reserved=sim.step_reserved_bytes[-1] if sim.fits else None,
                failed_step=sim.failed_step)


def score_allocator(rows: list[dict], show: bool) -> None:
    """Right / wrong of the fixed reserve and of the allocator model on the default-allocator runs of a set."""
    sel = [r for r in rows if not r["expandable_segments"]]
    right_factor = right_sim = false_fit = false_oom = 0
    errs = []
    for r in sel:
        ran = r["status"] == "ok"
        factor, sim = modelled(r)["fits"], simulated(r)
        right_factor += factor == ran
        right_sim += sim["fits"] == ran
        false_fit += sim["fits"] and not ran
        false_oom += ran and not sim["fits"]
        if ran and sim["reserved"]:
            errs.append(sim["reserved"] / r["peak_reserved"] - 1)
        if show:
            step = "-" if sim["failed_step"] is None else sim["failed_step"]
            print(f"   {r['shape']:18s} {r['precision']:8s} {r.get('implementation', r['optimizer']):8s} "
                  f"ckpt={int(r['checkpointing'])} {r['batch']:3d}x{r['seq']:<5d} {r['status']:4s} "
                  f"reserved {r['peak_reserved'] / 2**30:6.2f} model {(sim['reserved'] or 0) / 2**30:6.2f} GiB "
                  f"fails in step {step}  {'right' if sim['fits'] == ran else 'WRONG'} (reserve factor "
                  f"{'right' if factor == ran else 'wrong'})")
    med = f"{100 * np.median(np.abs(errs)):.1f}%" if errs else "-"
    print(f"{rows[0]['set'] if rows else '':22s} {'allocator':10s} {len(sel):4d} runs: reserve factor "
          f"{right_factor:>2d}/{len(sel)}, allocator model {right_sim:>2d}/{len(sel)} (said fits, OOM {false_fit}; "
          f"said OOM, ran {false_oom}); reserved peak error median {med}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=sorted(p.name for p in EDGE.iterdir() if (p / "runs.jsonl").exists()))
    ap.add_argument("--rows", action="store_true", help="print every run")
    ap.add_argument("--allocator", action="store_true",
                    help="also score the default-allocator runs with the caching-allocator model")
    args = ap.parse_args(argv)
    print(f"{'set':22s} {'allocator':10s} {'runs':>4s} {'ran':>4s}  {'peak err median':>15s} {'worst':>6s}  "
          f"{'fits right':>10s} {'said fits, OOM':>14s} {'said OOM, ran':>13s}  {'reserved/alloc':>14s}  "
          f"{'uncertain (wrong)':>17s}")
    for name in args.sets:
        rows = load(name)
        for expandable in (False, True):
            sel = [r for r in rows if r["expandable_segments"] == expandable]
            errs, right, false_fit, false_oom, over, unsure, unsure_wrong = [], 0, 0, 0, [], 0, 0
            for r in sel:
                m = modelled(r)
                ran = r["status"] == "ok"
                if ran:
                    errs.append(abs(m["peak"] / r["peak_allocated"] - 1))
                    over.append(r["peak_reserved"] / r["peak_allocated"])
                right += m["fits"] == ran
                false_fit += m["fits"] and not ran
                false_oom += ran and not m["fits"]
                unsure += m["uncertain"]
                unsure_wrong += m["uncertain"] and m["fits"] != ran
                if args.rows:
                    print(f"   {r['shape']:18s} {r['precision']:8s} {r.get('implementation', r['optimizer']):8s} "
                          f"ckpt={int(r['checkpointing'])} {r['batch']:3d}x{r['seq']:<5d} {r['status']:4s} "
                          f"alloc {r['peak_allocated'] / 2**30:6.2f} model {m['peak'] / 2**30:6.2f} GiB "
                          f"fits={m['fits']} spare {m['spare'] / 2**30:+6.2f} GiB"
                          f"{' uncertain' if m['uncertain'] else ''}")
            label = "expandable" if expandable else "default"
            med = f"{100 * np.median(errs):.2f}%" if errs else "-"
            worst = f"{100 * max(errs):.1f}%" if errs else "-"
            ratio = f"{np.median(over):.3f}" if over else "-"
            print(f"{name:22s} {label:10s} {len(sel):4d} {sum(r['status'] == 'ok' for r in sel):4d}  {med:>15s} "
                  f"{worst:>6s}  {right:>4d}/{len(sel):<5d} {false_fit:>14d} {false_oom:>13d}  {ratio:>14s}  "
                  f"{unsure:>11d} ({unsure_wrong})")
        if args.allocator:
            score_allocator(rows, args.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
