"""Measure the VALIDATION set: kernel timings on shapes the calibration is never fitted to.

Shapes are the ones a capacity planner asks about and the fit set avoids: LLM projection
GEMMs (``F.linear``, hidden 4096/5120/8192, FFN 11008/13824/14336/28672, vocab
32000/128256) at 1..16384 tokens, odd sizes, skinny decode GEMMs, batched attention-score
GEMMs, flash attention (causal and not, forward and backward) at sequence lengths 512..16384,
softmax and norms over LLM row lengths, elementwise ops at odd sizes.

Each kernel is timed with ``triton.testing.do_bench`` (median; do_bench clears the L2 by
writing a 256 MB buffer before each repetition). Points are written as JSON lines in the
format of :mod:`gpumodel.calibration.bench` (``op``, ``kernel``, ``dtype``, ``shape``,
``time_s``), the environment first.

Usage (on the GPU)::

    python bench/measure_kernels.py --out validation.jsonl
    python bench/measure_kernels.py --out /tmp/v.jsonl --dry-run     # tiny, CPU, tests the code
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpumodel.calibration.bench import run_benchmarks  # noqa: E402
from gpumodel.calibration.plan import _case  # noqa: E402

#: (hidden, ffn, vocab, kv_hidden) of Llama-2-7B, Llama-3-8B, Llama-2-13B, Llama-3-70B
LLMS = [(4096, 11008, 32000, 4096), (4096, 14336, 128256, 1024), (5120, 13824, 32000, 5120),
        (8192, 28672, 128256, 1024)]
TOKENS = [1, 4, 16, 64, 256, 1000, 4096, 16384]


def validation_cases(fp8: bool = True) -> list[dict]:
    cases = []
    for hidden, ffn, vocab, kv in LLMS:
        projections = [(hidden + 2 * kv, hidden), (hidden, hidden), (ffn, hidden), (hidden, ffn), (vocab, hidden)]
        for tokens in TOKENS:
            for n, k in projections:
                cases.append(_case("matmul", "linear", "bf16", m=tokens, n=n, k=k))
    odd = [(1000, 1000, 1000), (1023, 1025, 1027), (3000, 5000, 700), (777, 4097, 2049),
           (5555, 3333, 1111), (100, 10000, 1000), (12345, 678, 910), (2500, 2500, 2500),
           (7000, 7000, 300), (300, 300, 20000), (4001, 3999, 4003), (96, 50000, 4096)]
    for m, n, k in odd:
        cases.append(_case("matmul", "mm", "bf16", m=m, n=n, k=k))
    for dt in ("fp16", "tf32", "fp32"):
        for m, n, k in odd[::2]:
            cases.append(_case("matmul", "mm", dt, m=m, n=n, k=k))
    if fp8:
        for m, n, k in [(1008, 4112, 2064), (4096, 14336, 4096), (16, 8192, 8192), (5120, 5120, 13824),
                        (2000, 3008, 1008)]:
            cases.append(_case("matmul", "mm", "fp8", m=m, n=n, k=k))
    for b, m, n, k in [(64, 512, 512, 128), (128, 1024, 128, 1024), (256, 1, 4096, 128), (32, 2048, 2048, 64),
                       (12, 777, 555, 333), (96, 4096, 64, 4096), (8, 3000, 3000, 3000), (512, 16, 16, 2048)]:
        cases.append(_case("bmm", "bmm", "bf16", batch=b, m=m, n=n, k=k))
    for seq in (512, 1024, 2048, 4096, 8192, 16384):
        for causal in (False, True):
            for backward in (False, True):
                cases.append(_case("attention", "sdpa", "bf16", batch=max(1, 16384 // seq), heads=32, seq=seq,
                                   head_dim=128, causal=causal, backward=backward))
    for seq, d in ((1536, 64), (3000, 128), (6144, 64)):
        for backward in (False, True):
            cases.append(_case("attention", "sdpa", "bf16", batch=2, heads=24, seq=seq, head_dim=d,
                               causal=True, backward=backward))
    for family in ("softmax", "layer_norm", "rms_norm", "reduce_sum"):
        for rows in (1, 32, 1000, 4096, 16384):
            for cols in (4096, 5120, 8192, 32000, 128256):
                if family == "reduce_sum" and rows not in (32, 4096):
                    continue
                cases.append(_case(family, family, "bf16", rows=rows, cols=cols))
        for rows, cols in ((2048, 8192), (8000, 1000)):
            cases.append(_case(family, family, "fp32", rows=rows, cols=cols))
    sizes = [6144, 15360, 100003, 3_000_001, 4096 * 1000, 5120 * 4096, 14336 * 4096, 8192 * 12288, 70_000_000]
    for numel in sizes:
        for kernel, inputs, fpe in (("copy", 1, 0), ("add", 2, 1), ("mul", 2, 1), ("relu", 1, 1),
                                    ("gelu", 1, 8), ("silu", 1, 4)):
            cases.append(_case("elementwise", kernel, "bf16", numel=numel, inputs=inputs, outputs=1,
                               flops_per_element=fpe))
        cases.append(_case("elementwise", "add", "fp32", numel=numel, inputs=2, outputs=1, flops_per_element=1))
    return cases


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON-lines output file (appended)")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU, wall clock (tests the code)")
    p.add_argument("--time-budget", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--warmup-ms", type=float, default=25.0)
    p.add_argument("--rep-ms", type=float, default=100.0)
    args = p.parse_args(argv)
    timer = None
    fp8 = True
    if not args.dry_run:
        import torch
        from triton.testing import do_bench

        fp8 = torch.cuda.get_device_capability(0) >= (8, 9)

        def timer(fn):
            """triton.testing.do_bench, median, L2 cleared before each rep"""
            return do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median") * 1e-3
    t0 = time.perf_counter()
    env, points = run_benchmarks(validation_cases(fp8), mode="validation", dry_run=args.dry_run, jsonl=args.out,
                                 time_budget_s=args.time_budget, timer=timer)
    bad = [pt for pt in points if pt.get("time_s") is None]
    print(f"{len(points)} validation points ({len(bad)} failed) on {env.get('device_name')} "
          f"in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    for pt in bad[:10]:
        print(f"  failed: {pt['op']} {pt['dtype']} {pt['shape']}: {pt['error']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
