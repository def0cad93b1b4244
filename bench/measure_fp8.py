"""fp8 GEMMs as Transformer Engine's recipe runs them, timed on the GPU: fast and split accumulation.

Transformer Engine's delayed-scaling recipe runs the forward GEMMs with the tensor cores' fast fp8
accumulation and the two backward GEMMs (data and weight gradient, an e5m2 gradient against an e4m3 operand)
with the split accumulator, which promotes partial sums to fp32 at intervals (cuBLASLt's
``CUBLASLT_MATMUL_DESC_FAST_ACCUM`` off). This script times, for the GEMM shapes of the decoder layers
of the published fp8 runs (Llama 2/3, GPT-3 shapes at tensor-parallel widths 1-4, 2k-16k tokens a
micro-batch), ``torch._scaled_mm`` with e4m3 x e4m3 and fast accumulation, e5m2 x e4m3 with and without
it, and the bf16 ``torch.mm`` of the same shape; every timing is
:func:`gpumodel.calibration.timing.time_events` (L2 flushed, the call queued ahead). Output: JSON lines,
the environment first.

    python bench/measure_fp8.py --out fp8.jsonl          # on the GPU, about a minute
    python bench/measure_fp8.py --out fp8.jsonl --cpu    # prints the plan
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: (tokens m, output n, reduction k): QKV, attention output, MLP up and down of the fp8 runs' layer shards
LAYERS = {"llama-2-7b tp1": (4096, 12288, 4096, 22016, 11008), "llama-3-8b tp1": (4096, 6144, 4096, 28672, 14336),
          "llama-2-70b tp4": (8192, 2560, 2048, 14336, 7168), "gpt3-5b tp1": (4096, 12288, 4096, 16384, 16384),
          "gpt3-20b tp2": (6144, 9216, 3072, 12288, 12288), "gpt3-175b tp4": (12288, 9216, 3072, 12288, 12288),
          "llama-2-13b tp1": (5120, 15360, 5120, 27648, 13824)}
TOKENS = (2048, 8192)


def shapes() -> list[dict]:
    """Forward (m x n x k), data-gradient (m x k x n) and weight-gradient (n x k x m) GEMMs of each layer."""
    out = []
    for name, (h, qkv, attn, up, down) in LAYERS.items():
        for m in TOKENS:
            for gemm, n, k in (("qkv", qkv, h), ("proj", h, attn), ("up", up, h), ("down", h, down)):
                out += [dict(layer=name, gemm=gemm, pass_="fprop", m=m, n=n, k=k),
                        dict(layer=name, gemm=gemm, pass_="dgrad", m=m, n=k, k=n),
                        dict(layer=name, gemm=gemm, pass_="wgrad", m=n, n=k, k=m)]
    seen, unique = set(), []
    for s in out:
        key = (s["m"], s["n"], s["k"])
        if key not in seen:
            seen.add(key)
            unique.append(s)
    return unique


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--cpu", action="store_true", help="print the plan only")
    p.add_argument("--limit", type=int, default=0, help="first N shapes only")
    args = p.parse_args(argv)
    plan = shapes()[: args.limit or None]
    if args.cpu:
        for s in plan:
            print(json.dumps(s))
        print(f"{len(plan)} shapes", file=sys.stderr)
        return 0
    import torch

    from gpumodel.calibration.bench import FLUSH_BYTES, environment_info
    from gpumodel.calibration.timing import time_events

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    one = torch.ones((), device="cuda")
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"environment": {**environment_info(), "mode": "fp8"}}) + "\n")
        for s in plan:
            m, n, k = s["m"], s["n"], s["k"]
            a16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w16 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            a4, a5 = a16.to(torch.float8_e4m3fn), a16.to(torch.float8_e5m2)
            w4 = w16.to(torch.float8_e4m3fn)
            runs = {"bf16": lambda: torch.mm(a16, w16.t()),
                    "e4m3_fast": lambda: torch._scaled_mm(a4, w4.t(), one, one, out_dtype=torch.bfloat16,
                                                          use_fast_accum=True),
                    "e5m2_fast": lambda: torch._scaled_mm(a5, w4.t(), one, one, out_dtype=torch.bfloat16,
                                                          use_fast_accum=True),
                    "e5m2_split": lambda: torch._scaled_mm(a5, w4.t(), one, one, out_dtype=torch.bfloat16,
                                                           use_fast_accum=False),
                    "e4m3_split": lambda: torch._scaled_mm(a4, w4.t(), one, one, out_dtype=torch.bfloat16,
                                                           use_fast_accum=False)}
            row = dict(s)
            for key, fn in runs.items():
                try:
                    row[key + "_s"] = time_events(fn, flush)[0]
                except RuntimeError as exc:   # a shape or dtype pair cuBLASLt refuses
                    row[key + "_s"], row[key + "_error"] = None, str(exc)[:200]
            fh.write(json.dumps(row) + "\n")
            tf = {kk[:-2]: 2 * m * n * k / v / 1e12 for kk, v in row.items() if kk.endswith("_s") and v}
            print(f"{s['layer']:16s} {s['gemm']:5s} {s['pass_']:5s} {m:6d} {n:6d} {k:6d} "
                  + " ".join(f"{kk} {v:6.0f}" for kk, v in tf.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
