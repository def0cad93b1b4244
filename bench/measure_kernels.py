"""Measure the VALIDATION set: kernel timings on shapes the calibration is never fitted to.

Shapes are the ones a capacity planner asks about and the fit set avoids: LLM projection
GEMMs (``F.linear``, hidden 4096/5120/8192, FFN 11008/13824/14336/28672, vocab
32000/128256) at 1..16384 tokens, odd sizes, skinny decode GEMMs, batched attention-score
GEMMs, flash attention (causal and not, forward and backward) at sequence lengths 512..16384,
softmax and norms over LLM row lengths, elementwise ops at odd sizes.

Each kernel is timed with :func:`gpumodel.calibration.timing.time_events`: ``triton.testing.do_bench``'s
schedule (median; the L2 cleared by writing a 256 MB buffer before each repetition) with the host
kept ahead of the GPU, so the time is the GPU's alone (``--timer do_bench`` times with do_bench
itself, as the sets measured before 2026-12-04 were). Points are written as JSON lines in the
format of :mod:`gpumodel.calibration.bench` (``op``, ``kernel``, ``dtype``, ``shape``,
``time_s``), the environment first.

Usage (on the GPU)::

    python bench/measure_kernels.py --out validation.jsonl
    python bench/measure_kernels.py --set widened --fit-out fit_widened.jsonl --out validation_widened.jsonl \
        --budget-s 290 --kernel-names      # composite and serving ops: FIT then VALIDATION
    python bench/measure_kernels.py --cases-from validation.jsonl --out validation_ahead.jsonl  # again
    python bench/measure_kernels.py --set fresh --round 9 --sample 300 --out fresh.jsonl   # every family, ~50 s
    python bench/measure_kernels.py --out v.jsonl --dry-run          # tiny, CPU, tests the code
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpumodel.calibration.bench import run_benchmarks  # noqa: E402
from gpumodel.calibration.budget import sample_cases  # noqa: E402
from gpumodel.calibration.plan import (STRIDED_KERNELS, case_key, fit_cases, gaps_cases, make_case,  # noqa: E402
                                      strided_case, strided_cases, tiles_cases, widened_cases)

#: the committed measurements (plans leave out the shapes these already hold)
DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "calibration"
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
                cases.append(make_case("matmul", "linear", "bf16", m=tokens, n=n, k=k))
    odd = [(1000, 1000, 1000), (1023, 1025, 1027), (3000, 5000, 700), (777, 4097, 2049),
           (5555, 3333, 1111), (100, 10000, 1000), (12345, 678, 910), (2500, 2500, 2500),
           (7000, 7000, 300), (300, 300, 20000), (4001, 3999, 4003), (96, 50000, 4096)]
    for m, n, k in odd:
        cases.append(make_case("matmul", "mm", "bf16", m=m, n=n, k=k))
    for dt in ("fp16", "tf32", "fp32"):
        for m, n, k in odd[::2]:
            cases.append(make_case("matmul", "mm", dt, m=m, n=n, k=k))
    if fp8:
        for m, n, k in [(1008, 4112, 2064), (4096, 14336, 4096), (16, 8192, 8192), (5120, 5120, 13824),
                        (2000, 3008, 1008)]:
            cases.append(make_case("matmul", "mm", "fp8", m=m, n=n, k=k))
    for b, m, n, k in [(64, 512, 512, 128), (128, 1024, 128, 1024), (256, 1, 4096, 128), (32, 2048, 2048, 64),
                       (12, 777, 555, 333), (96, 4096, 64, 4096), (8, 3000, 3000, 3000), (512, 16, 16, 2048)]:
        cases.append(make_case("bmm", "bmm", "bf16", batch=b, m=m, n=n, k=k))
    for seq in (512, 1024, 2048, 4096, 8192, 16384):
        for causal in (False, True):
            for backward in (False, True):
                cases.append(make_case("attention", "sdpa", "bf16", batch=max(1, 16384 // seq), heads=32, seq=seq,
                                       head_dim=128, causal=causal, backward=backward))
    for seq, d in ((1536, 64), (3000, 128), (6144, 64)):
        for backward in (False, True):
            cases.append(make_case("attention", "sdpa", "bf16", batch=2, heads=24, seq=seq, head_dim=d,
                                   causal=True, backward=backward))
    for family in ("softmax", "layer_norm", "rms_norm", "reduce_sum"):
        for rows in (1, 32, 1000, 4096, 16384):
            for cols in (4096, 5120, 8192, 32000, 128256):
                if family == "reduce_sum" and rows not in (32, 4096):
                    continue
                cases.append(make_case(family, family, "bf16", rows=rows, cols=cols))
        for rows, cols in ((2048, 8192), (8000, 1000)):
            cases.append(make_case(family, family, "fp32", rows=rows, cols=cols))
    sizes = [6144, 15360, 100003, 3_000_001, 4096 * 1000, 5120 * 4096, 14336 * 4096, 8192 * 12288, 70_000_000]
    for numel in sizes:
        for kernel, inputs, fpe in (("copy", 1, 0), ("add", 2, 1), ("mul", 2, 1), ("relu", 1, 1),
                                    ("gelu", 1, 8), ("silu", 1, 4)):
            cases.append(make_case("elementwise", kernel, "bf16", numel=numel, inputs=inputs, outputs=1,
                                   flops_per_element=fpe))
        cases.append(make_case("elementwise", "add", "fp32", numel=numel, inputs=2, outputs=1, flops_per_element=1))
    return cases


def widened_validation_cases() -> list[dict]:
    """VALIDATION shapes of the composite and serving ops and of the shapes the first plan left thin.

    Disjoint from :func:`gpumodel.calibration.plan.widened_cases` (the FIT side): other row counts
    and widths, other head counts and sequence lengths, other vocabularies, other LLM widths.
    """
    cases = []
    for family in ("reduce_sum", "softmax", "layer_norm", "rms_norm"):
        for rows in (24576, 65536, 196608, 1000000):
            for cols in (96, 128, 200, 512, 768, 2048):
                if rows * cols <= 2**28 and (family == "reduce_sum" or cols != 96):
                    cases.append(make_case(family, family, "bf16", rows=rows, cols=cols))
        cases.append(make_case(family, family, "fp32", rows=500000, cols=128))
    for seq, batch, heads, d in ((512, 1, 32, 128), (512, 4, 8, 128), (512, 16, 16, 128), (512, 2, 12, 64),
                                 (320, 8, 16, 128), (640, 1, 16, 64), (1024, 1, 8, 128)):
        for causal in (False, True):
            for backward in (False, True):
                cases.append(make_case("attention", "sdpa", "bf16", batch=batch, heads=heads, seq=seq, head_dim=d,
                                       causal=causal, backward=backward))
    for m, n, k in ((4096, 4096, 2048), (2048, 11008, 4096), (8192, 1024, 1024), (1024, 8192, 2048),
                    (16384, 4096, 128), (1000, 3000, 2000), (256, 320, 256), (3333, 4444, 555)):
        cases.append(make_case("matmul", "mm", "tf32", m=m, n=n, k=k))
    for m, n, k in ((4096, 12288, 4096), (1024, 1024, 16384)):
        cases.append(make_case("matmul", "linear", "tf32", m=m, n=n, k=k))
    for b, h, seq, d in ((1, 40, 1024, 128), (2, 12, 768, 64), (1, 16, 3000, 64), (8, 16, 512, 128)):
        for causal in (False, True):
            for backward in (False, True):
                cases.append(make_case("attention", "naive", "bf16", batch=b, heads=h, seq=seq, head_dim=d,
                                       causal=causal, impl="naive", backward=backward, dropout=0.0))
        cases.append(make_case("bmm", "bmm", "bf16", batch=b * h, m=seq, n=seq, k=d))
        cases.append(make_case("softmax", "softmax", "bf16", rows=b * h * seq, cols=seq))
    for b, h, seq, d in ((1, 40, 1024, 128), (8, 16, 512, 128)):
        for backward in (False, True):
            cases.append(make_case("attention", "naive", "bf16", batch=b, heads=h, seq=seq, head_dim=d,
                                   causal=True, impl="naive", backward=backward, dropout=0.1))
    for b, h, seq, d in ((2, 8, 2048, 64), (4, 12, 1024, 64)):  # the same maths through SDPA's math backend
        for backward in (False, True):
            cases.append(make_case("attention", "sdpa_math", "bf16", batch=b, heads=h, seq=seq, head_dim=d,
                                   causal=True, impl="math", backward=backward, dropout=0.0))
    for tokens in (1024, 4096, 16384):
        for vocab in (49152, 151936, 32768):
            for backward in (False, True):
                cases.append(make_case("cross_entropy", "cross_entropy", "bf16", tokens=tokens, vocab=vocab,
                                       upcast=True, backward=backward))
    for tokens, vocab, dt, upcast in ((4096, 32000, "bf16", False), (3000, 128256, "fp32", False),
                                      (512, 262144, "bf16", True), (8000, 50257, "bf16", False)):
        for backward in (False, True):
            cases.append(make_case("cross_entropy", "cross_entropy", dt, tokens=tokens, vocab=vocab, upcast=upcast,
                                   backward=backward))
    for tokens in (1024, 8192, 16384):
        for vocab, hidden in ((128256, 4096), (32000, 5120), (151936, 3584)):
            for backward in (False, True):
                cases.append(make_case("embedding", "embedding", "bf16", tokens=tokens, vocab=vocab, hidden=hidden,
                                       backward=backward))
    for m, n, k in ((2048, 28672, 8192), (128, 8192, 8192), (1, 4096, 4096), (64, 14336, 4096), (8192, 8192, 1024),
                    (4000, 6144, 4096)):
        cases.append(make_case("matmul", "mm", "fp8", m=m, n=n, k=k))
    for numel, tensors, dt in ((100_000, 4, "fp32"), (3_000_000, 32, "fp32"), (50_000_000, 200, "fp32"),
                               (300_000_000, 32, "fp32"), (7_000_000, 1, "fp32"), (1_000_000_000, 290, "fp32"),
                               (3_000_000, 4, "bf16"), (80_000_000, 100, "bf16"), (500_000_000, 8, "bf16")):
        cases.append(make_case("adamw_step", "adamw_fused", dt, numel=numel, tensors=tensors))
    for kv_seq in (256, 1024, 4096, 16384, 32000):
        for batch, heads, kv_heads in ((2, 32, 8), (16, 64, 8), (128, 32, 8), (4, 16, 16)):
            cases.append(make_case("attention", "sdpa", "bf16", batch=batch, heads=heads, seq=1, head_dim=128,
                                   causal=False, backward=False, kv_heads=kv_heads, kv_seq=kv_seq))
    for seq, kv_seq in ((128, 4096), (1024, 16384), (32, 1000), (512, 3072)):
        for batch, heads, kv_heads in ((1, 32, 8), (2, 40, 8)):
            cases.append(make_case("attention", "sdpa", "bf16", batch=batch, heads=heads, seq=seq, head_dim=128,
                                   causal=True, backward=False, kv_heads=kv_heads, kv_seq=kv_seq))
    for tokens in (1, 64, 512, 4096):
        for batch, kv_heads, head_dim in ((4, 8, 128), (64, 8, 128), (16, 4, 64)):
            cases.append(make_case("kv_cache_write", "index_copy", "bf16", batch=batch, kv_heads=kv_heads,
                                   tokens=tokens, head_dim=head_dim))
    for weight_dtype in ("int8", "int4", "fp8"):
        for m in (1, 4, 16, 64, 256, 2048):
            for n, k in ((6144, 4096), (4096, 14336), (28672, 8192)):
                cases.append(make_case("matmul", "weight_only", "bf16", m=m, n=n, k=k, weight_dtype=weight_dtype))
    for m in (2, 8, 32, 128, 200):  # skinny weight-bound bf16 GEMMs through F.linear
        for n, k in ((6144, 4096), (4096, 14336), (28672, 8192)):
            cases.append(make_case("matmul", "linear", "bf16", m=m, n=n, k=k))
    seen: set = set()
    unique = []
    for c in cases:  # a naive-attention part may repeat a grid shape
        key = case_key(c)
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def strided_validation_cases() -> list[dict]:
    """VALIDATION shapes of the strided elementwise kernels: the rotary embedding's and the fused projections'
    kernels at LLM widths (q 4096, k 1024 / 512 per token; FFN halves 11008 / 14336 / 28672) and token counts
    the FIT side (:func:`gpumodel.calibration.plan.strided_cases`, random sizes) does not draw."""
    cases = []
    for tokens in (1, 7, 100, 1000, 3000, 8192, 32768):
        for kernel in STRIDED_KERNELS:
            widths = (11008, 14336, 28672) if kernel.startswith("chunk") else (4096, 1024, 512)
            for width in widths:
                if tokens * width <= 2**28:
                    cases.append(strided_case(kernel, "bf16", tokens * width))
        if tokens in (100, 8192):
            for kernel in STRIDED_KERNELS:
                cases.append(strided_case(kernel, "fp32", tokens * (14336 if kernel.startswith("chunk") else 2048)))
    fit = {(c["kernel"], *case_key(c)) for c in strided_cases()}
    return [c for c in cases if (c["kernel"], *case_key(c)) not in fit]


def skinny_validation_cases() -> list[dict]:
    """VALIDATION shapes around the stream edge: ``F.linear`` with m = 96..768 tokens (a served decode batch,
    a short prefill) over LLM projection weights, where a GEMM turns from a weight stream into tiled math."""
    cases = [make_case("matmul", "linear", "bf16", m=m, n=n, k=k)
             for m in (96, 160, 224, 256, 288, 320, 384, 448, 512, 768)
             for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (8192, 28672))]
    fit = _fit_keys()
    return [c for c in cases if case_key(c) not in fit]


def _keys(paths) -> set:
    """The shapes (:func:`~gpumodel.calibration.plan.case_key`) of the points of measurement files."""
    from gpumodel.calibration.fit import load_points

    return {case_key(pt) for path in paths for pt in load_points(path)[1]}


def _fit_keys() -> set:
    return _keys([DATA / "fit.jsonl"]) if (DATA / "fit.jsonl").exists() else set()


def tiles_fit_cases() -> list[dict]:
    """FIT side of the tiles plan (:func:`gpumodel.calibration.plan.tiles_cases`, seed 4), less shapes other plans
    already fitted (its own, merged into ``fit.jsonl``, stay: the plan reproduces)."""
    plan = tiles_cases(4)
    fit = _fit_keys() - {case_key(c) for c in plan}
    return [c for c in plan if case_key(c) not in fit]


def tiles_validation_cases() -> list[dict]:
    """VALIDATION side of the tiles plan: another draw (seed 5), less every shape of a FIT set."""
    fit = _fit_keys() | {case_key(c) for c in tiles_cases(4)}
    return [c for c in tiles_cases(5) if case_key(c) not in fit]


def cases_from(path: str) -> list[dict]:
    """The cases of a measurement file, in its order: each point's ``op``, ``kernel``, ``dtype`` and ``shape``."""
    from gpumodel.calibration.fit import load_points

    return [make_case(pt["op"], pt.get("kernel", pt["op"]), pt["dtype"], **pt["shape"]) for pt in load_points(path)[1]]


def _other_validation_keys() -> set:
    """Shapes of the committed VALIDATION sets other than the gaps set's own."""
    return _keys(path for path in DATA.glob("validation*.jsonl") if path.name != "validation_gaps.jsonl")


def gaps_fit_cases() -> list[dict]:
    """FIT side of the gaps plan (:func:`gpumodel.calibration.plan.gaps_cases`, seed 6), less every VALIDATION
    shape (a shape another FIT plan has is measured again: one more run of it)."""
    taken = _other_validation_keys() | {case_key(c) for c in gaps_cases(7)}
    return [c for c in gaps_cases(6) if case_key(c) not in taken]


def gaps_validation_cases() -> list[dict]:
    """VALIDATION side of the gaps plan (seed 7), less every FIT shape and every shape of the other VALIDATION
    sets."""
    taken = _fit_keys() | {case_key(c) for c in gaps_cases(6)} | _other_validation_keys()
    return [c for c in gaps_cases(7) if case_key(c) not in taken]


#: the seeds of the fresh VALIDATION set: new draws of every plan (base FIT, widened, strided, tiles, gaps)
FRESH_SEEDS = {"fit": 20, "widened": 22, "strided": 23, "tiles": 24, "gaps": 26}


def committed_keys() -> set:
    """The cases of every committed measurement file (FIT or VALIDATION, the ``do_bench`` runs included)."""
    return _keys(sorted(DATA.glob("*.jsonl")) + sorted((DATA / "do_bench").glob("*.jsonl")))


def fresh_validation_cases(round_: int = 1) -> list[dict]:
    """A VALIDATION set drawn fresh from every plan (:data:`FRESH_SEEDS`, each plus ``10 * (round_ - 1)`` for a
    later round), less every shape any committed measurement file (FIT or VALIDATION, earlier runs and rounds
    included) already holds: kernels no fit has seen, in the proportions the plans draw them."""
    if round_ < 1:
        raise ValueError(f"round_ must be 1 or more, got {round_}")
    seed = {name: base + 10 * (round_ - 1) for name, base in FRESH_SEEDS.items()}
    taken = committed_keys()
    plans = [fit_cases("full", seed=seed["fit"]), widened_cases(seed["widened"]),
             strided_cases(seed["strided"]), tiles_cases(seed["tiles"]), gaps_cases(seed["gaps"])]
    out = []
    for case in (c for plan in plans for c in plan):
        key = case_key(case)
        if key not in taken:
            taken.add(key)
            out.append(case)
    return out


def _profiled(case: dict) -> bool:
    """Cases whose launched kernels are recorded: the ones PyTorch may run through several kernels or backends."""
    s = case["shape"]
    return case["op"] in ("cross_entropy", "embedding", "adamw_step", "kv_cache_write") or s.get("strided") or (
        "kv_seq" in s or "weight_dtype" in s or s.get("impl") == "naive" or (
            case["op"] == "attention" and s.get("seq", 1024) <= 512))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON-lines output file (appended)")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU, wall clock (tests the code)")
    p.add_argument("--set", choices=["base", "widened", "strided", "skinny", "tiles", "gaps", "fresh"], default="base",
                   help="base: the first validation set; widened: the composite/serving validation set, and with "
                        "--fit-out the matching FIT set (gpumodel.calibration.plan.widened_cases) first; strided: "
                        "the generic (strided / broadcast) elementwise kernels (FIT: plan.strided_cases); skinny: "
                        "F.linear at 96-768 tokens around the stream edge (VALIDATION only); tiles: GEMMs by the alignment "
                        "of their leading dimensions and square flash attention over many tiles (FIT: --fit-out); gaps: "
                        "short strided kernels, unaligned mid-size GEMMs, decode, short causal attention, naive "
                        "backward, output-bound bmm (FIT: --fit-out); fresh: new draws of every plan, shapes no "
                        "committed file holds (VALIDATION only)")
    p.add_argument("--round", type=int, default=1,
                   help="with --set fresh: which draw (round 2 takes seeds 30-36, and skips round 1's shapes once "
                        "they are committed)")
    p.add_argument("--cases-from", default=None, metavar="FILE",
                   help="measure the cases of this measurement file (its op, kernel, dtype, shape) instead of --set")
    p.add_argument("--timer", choices=["ahead", "events", "do_bench"], default="ahead",
                   help="ahead: CUDA events on do_bench's schedule, the host kept ahead of the GPU (the GPU's time "
                        "alone); events: the same without the lead (host issue time shows when it exceeds the L2 "
                        "flush); do_bench: triton.testing.do_bench (--warmup-ms, --rep-ms)")
    p.add_argument("--fit-out", default=None,
                   help="with --set widened, strided, tiles or gaps: measure the FIT cases into this file too")
    p.add_argument("--time-budget", "--budget-s", dest="time_budget", type=float, default=None,
                   help="stop after this many seconds (split between FIT and VALIDATION in proportion to their size)")
    p.add_argument("--kernel-names", action="store_true",
                   help="record the kernels PyTorch launches for composite/serving cases (torch.profiler)")
    p.add_argument("--profile-all", action="store_true",
                   help="with --kernel-names, record the kernels and the GPU's own time of every case")
    p.add_argument("--sample", type=int, default=None, metavar="COUNT",
                   help="measure about COUNT of the set's VALIDATION cases, every family sampled at one rate with a few "
                        "kernels at least, the families interleaved (gpumodel.calibration.budget.sample_cases)")
    p.add_argument("--warmup-ms", type=float, default=25.0)
    p.add_argument("--rep-ms", type=float, default=100.0)
    args = p.parse_args(argv)
    timer = None
    fp8 = True
    if not args.dry_run:
        import torch

        fp8 = torch.cuda.get_device_capability(0) >= (8, 9)
    if not args.dry_run and args.timer == "do_bench":
        from triton.testing import do_bench

        def timer(fn):
            """triton.testing.do_bench, median, L2 cleared before each rep"""
            return do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median") * 1e-3
    # --set -> (VALIDATION mode, its cases, FIT mode, its cases); the mode is recorded in the file's environment
    plans = {"base": ("validation", lambda: validation_cases(fp8), None, None),
             "widened": ("validation", widened_validation_cases, "fit-widened", widened_cases),
             "skinny": ("validation", skinny_validation_cases, None, None),
             "strided": ("validation", strided_validation_cases, "fit-strided", strided_cases),
             "tiles": ("validation-tiles", tiles_validation_cases, "fit-tiles", tiles_fit_cases),
             "gaps": ("validation-gaps", gaps_validation_cases, "fit-gaps", gaps_fit_cases),
             "fresh": ("validation-fresh" + (f"-{args.round}" if args.round > 1 else ""),
                       lambda: fresh_validation_cases(args.round), None, None)}
    val_mode, val_cases, fit_mode, fit_cases = plans[args.set]
    if args.cases_from:
        val_mode, val_cases, fit_cases = f"again: {Path(args.cases_from).name}", lambda: cases_from(args.cases_from), None
    runs = [(val_mode, val_cases() if args.sample is None else sample_cases(val_cases(), args.sample), args.out)]
    if args.fit_out and fit_cases is not None:
        runs.insert(0, (fit_mode, fit_cases(), args.fit_out))
    total = sum(len(cases) for _, cases, _ in runs)
    names = None if not args.kernel_names else (lambda case: True) if args.profile_all else _profiled
    for mode, cases, out in runs:
        t0 = time.perf_counter()
        budget = None if args.time_budget is None else args.time_budget * len(cases) / total
        env, points = run_benchmarks(cases, mode=mode, dry_run=args.dry_run, jsonl=out, time_budget_s=budget,
                                     timer=timer, kernel_names=names, ahead=args.timer == "ahead")
        bad = [pt for pt in points if pt.get("time_s") is None]
        print(f"{mode}: {len(points)} of {len(cases)} points ({len(bad)} failed) on {env.get('device_name')} "
              f"in {time.perf_counter() - t0:.1f} s -> {out}", file=sys.stderr)
        for pt in bad[:10]:
            print(f"  failed: {pt['op']} {pt['dtype']} {pt['shape']}: {pt['error']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
