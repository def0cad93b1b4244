"""Sustained fp8 and bf16 GEMMs of shapes no slowdown was measured on, against the model's sustained price.

Reads files of ``python bench/measure_sustained.py --held-out`` (each kernel timed alone, then back to back for
seconds) and prints, per kernel, its back-to-back time per call (median of the last windows) over
``gm.estimate(..., sustained=True)``: the model as shipped (fp8 GEMMs divided by their own
``sustained_slowdown_fp8``) and with one factor for every rate (``sustained_slowdown``, the median of the calibration's
compute-bound kernels), then the median of each by dtype.

    python bench/sustained_heldout.py tests/data/calibration/h100/sustained_heldout.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gpumodel as gm  # noqa: E402
from gpumodel.calibration.estimate import model_for  # noqa: E402
from gpumodel.calibration.model import predict  # noqa: E402
from gpumodel.vocabulary import resolve_gpu  # noqa: E402


def rows_of(path: Path) -> tuple[str, list[dict]]:
    """The GPU spec name of a file's environment line, and its back-to-back kernels."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    env = next((r["environment"] for r in lines if "environment" in r), {})
    gpu = resolve_gpu(env.get("device_name", "h100")).name
    return gpu, [r for r in lines if r.get("op") == "matmul" and r.get("sustained")]


def ratios(gpu: str, rows: list[dict], last_windows: int = 8) -> list[dict]:
    """Per kernel: back-to-back time over the shipped sustained price, and over the price with one factor."""
    model = model_for(gpu)[0]
    one = model.replace(sustained_slowdown_fp8=model.params.get("sustained_slowdown", 1.0)).sustained()
    out = []
    for r in rows:
        b2b = statistics.median(w["per_call_s"] for w in r["sustained"][-last_windows:])
        op = gm.core.ops.matmul(*(int(r["shape"][k]) for k in ("m", "n", "k")), dtype=r["dtype"])
        shipped = float(gm.estimate(op, gpu, sustained=True).seconds)
        single = float(predict(one, op).time_s)
        out.append({"dtype": r["dtype"], "shape": r["shape"], "b2b_s": b2b, "shipped": b2b / shipped,
                    "one_factor": b2b / single, "alone": b2b / r["isolated_s"]})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args(argv)
    for path in args.files:
        gpu, rows = rows_of(path)
        res = ratios(gpu, rows)
        print(f"{path} ({gpu}): back-to-back time over the sustained price")
        print(f"  {'dtype':5s} {'m x n x k':22s} {'shipped':>8s} {'one factor':>10s} {'over alone':>10s}")
        for r in res:
            sh = "x".join(str(int(r["shape"][k])) for k in ("m", "n", "k"))
            print(f"  {r['dtype']:5s} {sh:22s} {r['shipped']:8.3f} {r['one_factor']:10.3f} {r['alone']:10.3f}")
        for dt in sorted({r["dtype"] for r in res}):
            sel = [r for r in res if r["dtype"] == dt]
            print(f"  median {dt:5s} (n={len(sel)}): shipped {statistics.median(r['shipped'] for r in sel):.3f}, "
                  f"one factor {statistics.median(r['one_factor'] for r in sel):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
