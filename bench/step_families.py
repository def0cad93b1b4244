"""Where an eager training step's time goes, kernel family by kernel family: the profiled steps against the model.

``bench/measure_step_time.py`` profiles the first run of each shape (``profile_step.kernel_seconds``: every kernel
name of one step with its count and summed duration, from ``torch.profiler``'s CUDA activity). This script sorts
those kernels into families by name and prints them beside the model's kernels of the same step
(:func:`gpumodel.training.stepplan.step_plan`), each priced alone by the calibration
(:func:`gpumodel.calibration.estimate.estimate`, no sustained-load share), and closes with the median ratio of each
family per GPU. A profiled step whose kernels sum to more than the timed step (``--max-excess``, default 5%) is
left out of the medians: its profile carries the profiler's or the first step's overheads.

Read the matmul ratio with care: the profiled step runs under ``torch.profiler`` right after the timed ones, and the
profiler's host overhead leaves the GPU waiting between kernels, so its GEMMs run at a lower power draw and so a
higher SM clock than in the timed steps. On the committed H100 runs the profiled GEMMs of an 8B model's step average
about 770 TFLOP/s, the rate of those shapes at the 1980 MHz boost clock (``tests/data/calibration/l2_state/
gemms_h100.jsonl``: 2048 x 14336 x 4096 in 306-327 us after a flush, 338-361 us back to back at 1545-1770 MHz), where
the calibration prices them at 709 TFLOP/s. The ratios say how the model's kernels compare with boost-clock kernels,
not what the timed step's kernels took.

Families by kernel name: ``nvjet``/``gemm``/``cutlass`` and cuBLAS's split-K reduction are matmuls; ``sdpa``/
``flash``/``fmha`` attention; ``multi_tensor``/``fused_adam`` the optimizer; ``softmax``/``nll``/
``cross_entropy`` the loss; ``norm``/``rms`` norms; everything else elementwise. The model's kernels are sorted
by their op (matmul, attention and its backward, softmax and cross-entropy as the loss), its optimizer block as
the optimizer.

Usage::

    python bench/step_families.py                       # the committed H100 and H200 profiles
    python bench/step_families.py --steps FILE [--gpu h100-sxm] [--calibration FILE] [--rows]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import step_time_accuracy as st  # noqa: E402  (the rows' model configs and options)

import gpumodel as gm  # noqa: E402
from gpumodel.calibration.estimate import estimate  # noqa: E402
from gpumodel.training.hostcost import host_costs_for  # noqa: E402
from gpumodel.training.stepplan import step_plan  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
#: committed runs with profiled steps, and the GPU each was measured on
SETS = {DATA / "calibration" / "user_h100" / "steps.jsonl": "h100-sxm",
        DATA / "calibration" / "user_h100_rerun" / "steps.jsonl": "h100-sxm",
        DATA / "calibration" / "user_h100_sustained" / "steps.jsonl": "h100-sxm",
        DATA / "steptime" / "h100" / "step_times.jsonl": "h100-sxm",
        **{DATA / "steptime" / f"step_times_v{v}.jsonl": "h200-sxm" for v in (2, 3, 4, 5)}}
FAMILIES = ("matmul", "attention", "elementwise", "norm", "loss", "optimizer")
_MODEL_OPS = {"matmul": "matmul", "attention": "attention", "attention_bwd": "attention", "softmax": "loss",
              "cross_entropy": "loss"}


def family(name: str) -> str | None:
    """The family of a profiled kernel name (``None`` for a memset or memcpy)."""
    low = name.lower()
    if low.startswith(("memset", "memcpy")):
        return None
    if low.startswith("nvjet") or "gemm" in low or "cutlass" in low or "splitkreduce" in low:
        return "matmul"
    if "sdpa" in low or "flash" in low or "fmha" in low:
        return "attention"
    if "multi_tensor" in low or "fused_adam" in low:
        return "optimizer"
    if "softmax" in low or "nll" in low or "cross_entropy" in low:
        return "loss"
    if "norm" in low or "rms" in low:
        return "norm"
    return "elementwise"


def profiled(row: dict) -> dict[str, float]:
    """The profiled step's kernel time by family [s]."""
    out = dict.fromkeys(FAMILIES, 0.0)
    for name, (_count, seconds) in row["profile_step"]["kernel_seconds"].items():
        f = family(name)
        if f is not None:
            out[f] += seconds
    return out


def modelled(row: dict, gpu: str, calibration=None) -> dict[str, float]:
    """The model's kernels of the same step by family, each priced alone [s]."""
    cfg = gm.TransformerConfig.from_hf(st.hf_dict(row), name=row["shape"])
    kw = st.options(row)
    blocks = step_plan(cfg, row["batch"], row["seq"], kw["precision"], kw["optimizer"], kw["checkpointing"],
                       host=host_costs_for(gpu, None), fused=kw["fused"], foreach=kw["foreach"],
                       gradient_accumulation_steps=kw["gradient_accumulation_steps"],
                       clip_grad_norm=kw["clip_grad_norm"], compile=kw["compile"],
                       experts=kw.get("experts_implementation", "grouped_mm"), expert_load=None,
                       attention_kernel="sdpa")
    g = gm.gpu(gpu)
    out = dict.fromkeys(FAMILIES, 0.0)
    for block in blocks:
        for (op, *_), phase in zip(block.kernels, block.phases()):
            if op is None:
                continue
            f = "optimizer" if phase == "optimizer" else _MODEL_OPS.get(op.name.split()[0], "elementwise")
            out[f] += block.repeat * float(estimate(op, g, calibration=calibration).seconds)
    return out


def rows_of(path: Path, gpu: str, calibration=None) -> list[dict]:
    """Every profiled step of one file: the timed step, the profiled and modelled families."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in st.load([path]):
            if "kernel_seconds" not in r.get("profile_step", {}):
                continue
            prof = profiled(r)
            out.append({"set": path.parent.name if path.name == "steps.jsonl" else path.stem, "gpu": gpu,
                        "shape": r["shape"], "batch": r["batch"], "seq": r["seq"], "label": st.label(r),
                        "step_s": r["step_s_median"], "profiled_sum_s": sum(prof.values()), "profiled": prof,
                        "model": modelled(r, gpu, calibration)})
    return out


def family_ratios(rows: list[dict], max_excess: float = 0.05) -> dict[str, dict[str, float]]:
    """Median model / profiled time per GPU and family, over steps whose profile sums to at most ``1 + max_excess``
    of the timed step."""
    out: dict[str, dict[str, float]] = {}
    for gpu in sorted({r["gpu"] for r in rows}):
        sel = [r for r in rows if r["gpu"] == gpu and r["profiled_sum_s"] <= (1 + max_excess) * r["step_s"]]
        ratios = defaultdict(list)
        for r in sel:
            for f in FAMILIES:
                if r["profiled"][f] > 0 and r["model"][f] > 0:
                    ratios[f].append(r["model"][f] / r["profiled"][f])
        out[gpu] = {"steps": len(sel), **{f: float(np.median(v)) for f, v in ratios.items()}}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=Path, nargs="*", help="steps files (default: the committed profiled runs)")
    ap.add_argument("--gpu", default=None, help="the GPU of --steps (default h100-sxm)")
    ap.add_argument("--calibration", type=Path, default=None, help="price with this calibration record")
    ap.add_argument("--max-excess", type=float, default=0.05)
    ap.add_argument("--rows", action="store_true", help="print every profiled step")
    args = ap.parse_args(argv)
    sets = {p: args.gpu or "h100-sxm" for p in args.steps} if args.steps else SETS
    rows = [row for path, gpu in sets.items() if path.exists() for row in rows_of(path, gpu, args.calibration)]
    if args.rows:
        for r in rows:
            print(f"{r['set']:22s} {r['shape']:16s} {r['batch']:>3d}x{r['seq']:<5d} {r['label']:22s} step "
                  f"{r['step_s'] * 1e3:7.1f} ms, profiled kernels {r['profiled_sum_s'] * 1e3:7.1f} ms")
            print("    " + "  ".join(f"{f} {r['model'][f] / r['profiled'][f]:.2f}" for f in FAMILIES
                                     if r["profiled"][f] > 0 and r["model"][f] > 0))
    print("model (each kernel priced alone) / profiled kernel time (the profiled step's clock: see the docstring), "
          "median over the profiled steps")
    print(f"{'GPU':10s} {'steps':>5s} " + " ".join(f"{f:>11s}" for f in FAMILIES))
    for gpu, res in family_ratios(rows, args.max_excess).items():
        print(f"{gpu:10s} {res['steps']:5d} " + " ".join(f"{res.get(f, float('nan')):11.3f}" for f in FAMILIES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
