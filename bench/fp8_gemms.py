"""fp8 GEMMs measured on a GPU against the kernel model, and the split accumulator's cost.

Reads the timings of ``bench/measure_fp8.py`` (``tests/data/calibration/fp8/<gpu>/fp8.jsonl``; the README there
says how they were measured) and prints, for the GEMM shapes of the fp8 training runs' decoder layers:

* the transferred kernel model (``gm.estimate`` of ``gm.ops.matmul(..., "fp8")`` and of the bf16 GEMM) against the
  measured ``torch._scaled_mm`` with fast accumulation (e4m3 x e4m3, the forward's) and ``torch.mm``: median, p90
  and signed median of the relative error, by pass (forward, data gradient, weight gradient);
* the split accumulator's cost: the measured time of e5m2 x e4m3 without fast accumulation (Transformer Engine's
  data and weight gradients) over the same GEMM with it, by pass, its median and quartiles.

Nothing here is fitted; the split-accumulator ratio is a measurement of the GPU, reported for the step model.

    python bench/fp8_gemms.py [--data tests/data/calibration/fp8/h100/fp8.jsonl] [--gpu h100-sxm] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data" / "calibration" / "fp8" / "h100" / "fp8.jsonl"


def load(path: Path) -> tuple[dict, list[dict]]:
    """The environment line and the timed shapes of a ``measure_fp8.py`` file."""
    rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    env = next((r["environment"] for r in rows if "environment" in r), {})
    return env, [r for r in rows if "m" in r]


def _stats(x: np.ndarray) -> dict:
    return {"n": int(x.size), "median": float(np.median(np.abs(x))), "p90": float(np.percentile(np.abs(x), 90)),
            "signed": float(np.median(x))}


def score(rows: list[dict], gpu: str) -> dict:
    """Model-vs-measured errors per dtype and pass, and the measured split/fast accumulation ratios per pass."""
    import gpumodel as gm

    out: dict = {"model": {}, "split_over_fast": {}}
    passes = sorted({r["pass_"] for r in rows})
    for key, dtype in (("e4m3_fast_s", "fp8"), ("bf16_s", "bf16")):
        sel = [r for r in rows if r.get(key)]
        if not sel:
            continue
        op = gm.ops.matmul(np.array([r["m"] for r in sel]), np.array([r["n"] for r in sel]),
                           np.array([r["k"] for r in sel]), dtype)
        pred = np.atleast_1d(gm.estimate(op, gpu).seconds)
        err = pred / np.array([r[key] for r in sel]) - 1
        out["model"][dtype] = {p: _stats(err[[r["pass_"] == p for r in sel]]) for p in passes}
        out["model"][dtype]["all"] = _stats(err)
    for p in passes + ["all"]:
        sel = [r for r in rows if r.get("e5m2_split_s") and r.get("e5m2_fast_s") and p in (r["pass_"], "all")]
        ratio = np.array([r["e5m2_split_s"] / r["e5m2_fast_s"] for r in sel])
        if ratio.size:
            out["split_over_fast"][p] = {"n": int(ratio.size), "median": float(np.median(ratio)),
                                         "q25": float(np.percentile(ratio, 25)), "q75": float(np.percentile(ratio, 75))}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--gpu", default="h100-sxm")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not args.data.is_file():
        print(f"no timings at {args.data}: measure them on the GPU with `python bench/measure_fp8.py --out FILE` "
              "and pass --data FILE", file=sys.stderr)
        return 2
    env, rows = load(args.data)
    res = score(rows, args.gpu)
    if args.json:
        print(json.dumps({"environment": env, **res}, indent=1))
        return 0
    print(f"{env.get('device_name', '?')}, driver {env.get('driver_version', '?')}, torch {env.get('torch_version', '?')}: "
          f"{len(rows)} GEMM shapes")
    print(f"\n{'model vs measured':<18} {'pass':<6} {'n':>4} {'median':>7} {'p90':>7} {'signed':>7}")
    for dtype, by in res["model"].items():
        for ps, s in by.items():
            print(f"{dtype:<18} {ps:<6} {s['n']:>4} {s['median']:>7.1%} {s['p90']:>7.1%} {s['signed']:>+7.1%}")
    print(f"\n{'split / fast accumulation (e5m2 x e4m3)':<40} {'n':>4} {'median':>7} {'q25':>7} {'q75':>7}")
    for ps, s in res["split_over_fast"].items():
        print(f"{ps:<40} {s['n']:>4} {s['median']:>7.3f} {s['q25']:>7.3f} {s['q75']:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
