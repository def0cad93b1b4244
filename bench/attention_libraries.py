"""The attention libraries against PyTorch's own backends timed one by one on an H100 (never fitted).

``bench/measure_attention_kernels.py`` timed ``scaled_dot_product_attention`` inside ``sdpa_kernel`` with each
backend forced (``tests/data/calibration/attention_backends/h100/``): cuDNN's sm90 kernels (what SDPA picks on
Hopper: ``gm.ops.attention(..., kernel="cudnn")``) and the FlashAttention-2 code PyTorch vendors (the sm80
``mma.sync`` kernels the flash-attn 2 package runs: ``kernel="fa2"``), forward and backward, on the FlashAttention
papers' grid (16k tokens a batch, hidden 2048, head_dim 64/128/256, causal and not, 512-16k tokens) and Llama-3-8B's
grouped-query shapes up to 32k tokens. The memory-efficient backend is listed but not modelled.

Prints, per library and direction, the median, 90th percentile and signed median of predicted / measured - 1, with
the H200 calibration carried to the H100 (``--rows`` adds every shape).

Run: ``python bench/attention_libraries.py [--rows]`` (CPU only, seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import gpumodel as gm  # noqa: E402
from gpumodel.calibration.model import predict  # noqa: E402
from gpumodel.calibration.transfer import transfer  # noqa: E402

DATA = ROOT / "tests" / "data" / "calibration" / "attention_backends"
#: PyTorch's backend -> the library gm prices it as (None: not modelled)
LIBRARY = {"cudnn": "cudnn", "flash": "fa2", "efficient": None}
GPUS = {"h100": "h100-sxm"}


def table(gpu: str = "h100") -> list[dict]:
    """Every timed shape with the model's time and its error (``predicted / measured - 1``)."""
    model = transfer(GPUS[gpu]).model
    out = []
    for line in (DATA / gpu / "attention_kernels.jsonl").read_text().splitlines():
        r = json.loads(line)
        kernel = LIBRARY[r["backend"]]
        if "error" in r or kernel is None:
            continue
        op = gm.ops.attention(r["batch"], r["heads"], r["seq"], r["head_dim"], dtype=r["dtype"], causal=r["causal"],
                              backward=r["direction"] == "bwd", kernel=kernel, kv_heads=r["kv_heads"])
        t = float(predict(model, op).time_s)
        out.append({**r, "kernel": kernel, "predicted_s": t, "error": t / r["seconds"] - 1.0})
    return out


def summary(rows: list[dict]) -> dict:
    """``{(kernel, direction): {"n", "median", "p90", "signed"}}`` of the errors."""
    s = {}
    for key in sorted({(r["kernel"], r["direction"]) for r in rows}):
        e = np.array([r["error"] for r in rows if (r["kernel"], r["direction"]) == key])
        s[key] = {"n": int(e.size), "median": float(np.median(abs(e))), "p90": float(np.percentile(abs(e), 90)),
                  "signed": float(np.median(e))}
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every shape")
    args = ap.parse_args(argv)
    rows = table()
    if args.rows:
        for r in rows:
            print(f"{r['kernel']:5s} {r['direction']} {r['dtype']} b{r['batch']} h{r['heads']}/{r['kv_heads']} "
                  f"s{r['seq']} d{r['head_dim']} causal={r['causal']!s:5s} measured {r['tflops']:5.0f} TF  "
                  f"{r['error']:+6.1%}")
    env = json.loads((DATA / "h100" / "environment.json").read_text())
    print(f"{env['gpu']}, torch {env['torch']}, cuDNN {env['cudnn']}: the H200 calibration carried to the H100")
    for (kernel, direction), v in summary(rows).items():
        print(f"  {kernel:5s} {direction}: n={v['n']:3d}  median |error| {v['median']:5.1%}  p90 {v['p90']:5.1%}  "
              f"signed median {v['signed']:+6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
