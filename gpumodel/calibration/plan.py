"""What a calibration measures: the kernel cases of the quick and full plans (no torch needed).

A case is a plain ``dict`` ``{"op", "kernel", "dtype", "shape"}``: ``op``, ``shape`` and ``dtype``
are the arguments of the :mod:`gpumodel.core.ops` constructor named ``op``; ``kernel`` names the
PyTorch call that runs it (``mm``, ``linear``, ``bmm``, ``copy``, ``add``, ``sdpa``...).
Random shapes come from a seeded generator, so a plan is the same on every machine. The case record and its
keys live in :mod:`gpumodel.calibration.cases`, the plans aimed at what these left thin (strided kernels, tile
fill, fixed times) in :mod:`gpumodel.calibration.targeted_plans`; both are re-exported here.
"""

from __future__ import annotations

import random
from typing import Iterable

from .cases import Case, call_key, case_key, loguniform_int, make_case
from .targeted_plans import ALIGNMENTS, STRIDED_KERNELS, gaps_cases, strided_case, strided_cases, tiles_cases

__all__ = ["ALIGNMENTS", "Case", "STRIDED_KERNELS", "call_key", "case_key", "fit_cases", "strided_cases", "sweep_cases", "tiles_cases",
           "widened_cases", "gaps_cases", "strided_case", "make_case"]


def _random_gemms(rng: random.Random, count: int, max_flops: float, lo: int = 16, hi: int = 16384,
                  multiple_of: tuple[int, ...] = (64, 8, 1)) -> list[tuple[int, int, int]]:
    out = []
    while len(out) < count:
        mult = multiple_of[len(out) % len(multiple_of)]
        m, n, k = (loguniform_int(rng, lo, hi, mult) for _ in range(3))
        if 2.0 * m * n * k <= max_flops:
            out.append((m, n, k))
    return out


def fit_cases(mode: str = "full", dtypes: Iterable[str] | None = None, seed: int = 0) -> list[Case]:
    """The cases a calibration measures.

    Parameters
    ----------
    mode : {"quick", "full"}
        ``quick`` (about 100 cases, under a minute on a data-center GPU) or ``full`` (about
        450 cases, a few minutes).
    dtypes : iterable of str, optional
        GEMM dtypes to include (default: bf16, fp16, fp32, tf32, fp8).
    seed : int
        Seed of the random GEMM shapes.

    Examples
    --------
    >>> cases = fit_cases("quick")
    >>> sorted({c["op"] for c in cases})  # doctest: +NORMALIZE_WHITESPACE
    ['attention', 'bmm', 'elementwise', 'layer_norm', 'matmul', 'reduce_sum', 'rms_norm', 'softmax']
    """
    if mode not in ("quick", "full"):
        raise ValueError(f"mode must be 'quick' or 'full', got {mode!r}")
    full = mode == "full"
    rng = random.Random(seed)
    dtypes = list(dtypes) if dtypes is not None else ["bf16", "fp16", "fp32", "tf32", "fp8"]
    cases: list[Case] = []
    # GEMMs: squares, random shapes (log-uniform, some not multiples of 8), skinny shapes
    squares = [128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4608, 6144, 8192]
    if not full:
        squares = squares[::3]
    for dt in dtypes:
        main = dt == "bf16"
        sq = squares if main or full else squares[::2]
        if dt == "fp32":
            sq = [s for s in sq if s <= 6144]
        for s in sq:
            cases.append(make_case("matmul", "mm", dt, m=s, n=s, k=s))
        count = (70 if main else 16) if full else (14 if main else 4)
        mult = (64, 16) if dt == "fp8" else (64, 8, 1)
        max_flops = 6e11 if dt in ("fp32",) else 1.5e12
        for m, n, k in _random_gemms(rng, count, max_flops, multiple_of=mult):
            cases.append(make_case("matmul", "mm", dt, m=m, n=n, k=k))
        if main:
            ms = [1, 2, 8, 32, 128, 512] if full else [1, 32]
            nks = [(2048, 2048), (6144, 6144), (12288, 3072), (3072, 12288), (24576, 6144)]
            for m in ms:
                for n, k in (nks if full else nks[1:3]):
                    cases.append(make_case("matmul", "mm", dt, m=m, n=n, k=k))
            if full:  # large problems (the compute ceiling under sustained load) and more skinny ones;
                # half of them as nn.Linear runs them (x @ W.T, W stored [n, k])
                for i, (m, n, k) in enumerate(_random_gemms(rng, 24, 8e12, lo=1024, hi=24576,
                                                            multiple_of=(128, 64))):
                    cases.append(make_case("matmul", ("mm", "linear")[i % 2], dt, m=m, n=n, k=k))
                for m in (1, 16, 64):
                    for n, k in ((1024, 1024), (2560, 9728), (9728, 2560), (49152, 3072), (20480, 20480)):
                        cases.append(make_case("matmul", "mm", dt, m=m, n=n, k=k))
                for m in (1, 3, 8, 24, 48, 100, 200, 400):
                    for n, k in ((3072, 3072), (7168, 2048), (2048, 7168), (18432, 6144), (65536, 2048)):
                        cases.append(make_case("matmul", "linear", dt, m=m, n=n, k=k))
    # batched GEMMs (bf16), a few of them batched decode GEMVs
    for _ in range(24 if full else 5):
        b = loguniform_int(rng, 2, 96)
        m, n, k = (loguniform_int(rng, 32, 2048, 16) for _ in range(3))
        cases.append(make_case("bmm", "bmm", "bf16", batch=b, m=m, n=n, k=k))
    for _ in range(8 if full else 0):
        b, m = loguniform_int(rng, 8, 512), loguniform_int(rng, 1, 16)
        n, k = loguniform_int(rng, 64, 8192, 64), loguniform_int(rng, 64, 8192, 64)
        cases.append(make_case("bmm", "bmm", "bf16", batch=b, m=m, n=n, k=k))
    # memory-bound ops from far below to far above L2; numel=1 is the launch floor
    exps = range(0, 29, 2) if full else range(0, 29, 4)
    for e in exps:
        numel = 2**e
        for kernel, inputs, fpe in (("copy", 1, 0), ("add", 2, 1), ("relu", 1, 1), ("gelu", 1, 8)):
            cases.append(make_case("elementwise", kernel, "bf16", numel=numel, inputs=inputs, outputs=1,
                                   flops_per_element=fpe))
        if full or e >= 20:
            cases.append(make_case("elementwise", "add", "fp32", numel=numel, inputs=2, outputs=1,
                                   flops_per_element=1))
    rows_list = [1, 16, 256, 2048, 16384, 131072] if full else [16, 2048, 65536]
    cols_list = [128, 512, 2048, 12288, 32768, 131072] if full else [1024, 16384]
    for family in ("softmax", "layer_norm", "rms_norm", "reduce_sum"):
        for rows in rows_list:
            for cols in cols_list:
                if rows * cols <= 2**28:
                    cases.append(make_case(family, family, "bf16", rows=rows, cols=cols))
        for rows, cols in ((4096, 4096), (256, 65536)):
            cases.append(make_case(family, family, "fp32", rows=rows, cols=cols))
        for _ in range(16 if full else 0):  # random shapes between the grid points
            rows, cols = loguniform_int(rng, 1, 65536), loguniform_int(rng, 1024, 262144)
            if rows * cols <= 2**28:
                cases.append(make_case(family, family, "bf16", rows=rows, cols=cols))
        for _ in range(8 if full else 0):  # many rows of transformer widths
            rows, cols = loguniform_int(rng, 256, 32768), loguniform_int(rng, 2048, 16384, 64)
            cases.append(make_case(family, family, "bf16", rows=rows, cols=cols))
    # flash attention, forward and backward
    seqs = [256, 1024, 2048, 8192] if full else [1024, 4096]
    for seq in seqs:
        for head_dim in ((64, 128) if full else (128,)):
            for causal in (False, True):
                for backward in (False, True):
                    batch = max(1, 8192 // seq)
                    cases.append(make_case("attention", "sdpa", "bf16", batch=batch, heads=16, seq=seq,
                                           head_dim=head_dim, causal=causal, backward=backward))
    if full:
        for seq, heads, d in ((12288, 16, 128), (3584, 40, 128), (640, 64, 64)):
            for causal in (False, True):
                for backward in (False, True):
                    cases.append(make_case("attention", "sdpa", "bf16", batch=1, heads=heads, seq=seq,
                                           head_dim=d, causal=causal, backward=backward))
        for _ in range(12):
            numel = loguniform_int(rng, 1000, 3 * 10**8)
            cases.append(make_case("elementwise", "mul", "bf16", numel=numel, inputs=2, outputs=1, flops_per_element=1))
    return cases


def sweep_cases(seed: int = 1) -> list[Case]:
    """A denser plan for the kernels PyTorch picks by shape: softmax and sum over rows x cols, batched GEMVs.

    ``torch.softmax`` switches kernels at 2048 columns (warp-per-row), 9216 (one register per
    1024 threads up to 9) and at the shared-memory limit; ``torch.sum`` picks warp-per-row,
    block-per-row or split-row (global) reductions from ``rows`` and ``cols``. Column counts sit on
    both sides of each switch and between them (powers of two and odd sizes); row counts go from
    a few blocks to many waves of the SMs. Batched GEMMs cover decode GEMVs (``m`` <= 16) and
    short reductions (``k`` <= 96). About 480 cases, one minute on an H200.

    Examples
    --------
    >>> cases = sweep_cases()
    >>> sorted({c["op"] for c in cases})
    ['bmm', 'reduce_sum', 'softmax']
    """
    rng = random.Random(seed)
    cases: list[Case] = []
    cols_bf16 = [1000, 1536, 2048, 2176, 3000, 3072, 4096, 5000, 6144, 7000, 8192, 9216, 9344, 11008,
                 12288, 16384, 20000, 24576, 32000, 50257, 65536, 128256]
    rows_bf16 = [2, 8, 64, 264, 1024, 2048, 8192, 32768]
    cols_fp32 = [1000, 2048, 3000, 4096, 6144, 9216, 12288, 16384, 32000, 128256]
    rows_fp32 = [2, 64, 1024, 8192]
    cols_fp16 = [2048, 4096, 9216, 16384, 50257]
    rows_fp16 = [8, 1024, 8192]
    for family in ("softmax", "reduce_sum"):
        for dt, rows_list, cols_list in (("bf16", rows_bf16, cols_bf16), ("fp32", rows_fp32, cols_fp32),
                                         ("fp16", rows_fp16, cols_fp16)):
            for rows in rows_list:
                for cols in cols_list:
                    if rows * cols <= 2**28:
                        cases.append(make_case(family, family, dt, rows=rows, cols=cols))
    for _ in range(24):  # batched decode GEMVs and short-m batched GEMMs
        b, m = loguniform_int(rng, 8, 512), rng.choice([1, 1, 2, 4, 8, 16])
        n, k = loguniform_int(rng, 64, 8192, 64), loguniform_int(rng, 64, 8192, 64)
        if b * n * k <= 2**29:
            cases.append(make_case("bmm", "bmm", "bf16", batch=b, m=m, n=n, k=k))
    for b in (16, 64, 256):  # attention-score shapes: one query per head against the keys
        for n, k in ((1024, 128), (8192, 128), (128, 2048), (2048, 64)):
            cases.append(make_case("bmm", "bmm", "bf16", batch=b, m=1, n=n, k=k))
    for b, mn in ((8, 1024), (16, 2048), (64, 512), (4, 4096)):  # short reductions: output-write bound
        for k in (32, 64, 96):
            cases.append(make_case("bmm", "bmm", "bf16", batch=b, m=mn, n=mn, k=k))
    return cases


def widened_cases(seed: int = 2) -> list[Case]:
    """The FIT cases of the composite and serving ops, and of the shapes the first plans left thin.

    Row-wise kernels over short rows (32..1024 columns) and many rows (4k..1M); flash attention
    forward and backward at short sequences and few heads; tf32 GEMMs; naive attention (the
    textbook matmul, scale, mask, softmax, dropout, matmul) and its two batched GEMMs;
    cross-entropy (log-softmax + NLL, forward and backward, with and without the fp32 up-cast)
    over vocabularies 32000..151936; embedding forward and backward; fp8 GEMMs
    (``torch._scaled_mm``) of LLM shapes; the fused AdamW step; decode and chunked-prefill
    attention (``seq`` queries over ``kv_seq`` keys, grouped-query); KV-cache writes; int8, int4
    and fp8 weight-only GEMMs. About 390 cases; with ``triton.testing.do_bench`` (25 ms warm-up,
    100 ms of repetitions) about 80 s on an H200.

    Examples
    --------
    >>> cases = widened_cases()
    >>> sorted({c["op"] for c in cases})  # doctest: +NORMALIZE_WHITESPACE
    ['adamw_step', 'attention', 'bmm', 'cross_entropy', 'embedding', 'kv_cache_write', 'layer_norm', 'matmul',
     'reduce_sum', 'rms_norm', 'softmax']
    """
    rng = random.Random(seed)
    cases: list[Case] = []
    for family in ("reduce_sum", "softmax", "layer_norm", "rms_norm"):
        for rows in (4096, 32768, 262144, 1048576):
            for cols in (32, 64, 128, 256, 1024, 4096):
                if rows * cols <= 2**28 and (family == "reduce_sum" or cols >= 64):
                    cases.append(make_case(family, family, "bf16", rows=rows, cols=cols))
        for rows, cols in ((65536, 128), (16384, 2048)):
            cases.append(make_case(family, family, "fp32", rows=rows, cols=cols))
    for seq in (128, 256, 512, 768):
        for batch, heads in ((1, 8), (2, 16), (8, 32)):
            for causal in (False, True):
                for backward in (False, True):
                    cases.append(make_case("attention", "sdpa", "bf16", batch=batch, heads=heads, seq=seq, head_dim=128,
                                           causal=causal, backward=backward))
    for seq, batch in ((256, 4), (512, 16)):
        for backward in (False, True):
            cases.append(make_case("attention", "sdpa", "bf16", batch=batch, heads=12, seq=seq, head_dim=64,
                                   causal=True, backward=backward))
    for s in (512, 1024, 2048, 4096, 8192):
        cases.append(make_case("matmul", "mm", "tf32", m=s, n=s, k=s))
    for i, (m, n, k) in enumerate(_random_gemms(rng, 20, 1.5e12, lo=64, hi=16384, multiple_of=(64, 8, 1))):
        cases.append(make_case("matmul", ("mm", "linear")[i % 2], "tf32", m=m, n=n, k=k))
    for b, h, seq, d in ((4, 8, 256, 64), (1, 16, 512, 64), (2, 16, 1024, 128), (1, 32, 2048, 128), (1, 8, 4096, 64)):
        for causal in (False, True):
            for backward in (False, True):
                cases.append(make_case("attention", "naive", "bf16", batch=b, heads=h, seq=seq, head_dim=d,
                                       causal=causal, impl="naive", backward=backward, dropout=0.0))
        cases.append(make_case("bmm", "bmm", "bf16", batch=b * h, m=seq, n=seq, k=d))
        cases.append(make_case("bmm", "bmm", "bf16", batch=b * h, m=seq, n=d, k=seq))
    for b, h, seq, d in ((4, 8, 256, 64), (2, 16, 1024, 128)):
        for backward in (False, True):
            cases.append(make_case("attention", "naive", "bf16", batch=b, heads=h, seq=seq, head_dim=d,
                                   causal=True, impl="naive", backward=backward, dropout=0.1))
    for tokens in (256, 2048, 8192):
        for vocab in (32000, 50304, 128256):
            for dt, upcast in (("bf16", True), ("bf16", False), ("fp32", False)):
                for backward in (False, True):
                    cases.append(make_case("cross_entropy", "cross_entropy", dt, tokens=tokens, vocab=vocab,
                                           upcast=upcast, backward=backward))
    for tokens in (512, 4096, 32768):
        for vocab, hidden in ((32000, 4096), (50304, 768), (128256, 2048)):
            for backward in (False, True):
                cases.append(make_case("embedding", "embedding", "bf16", tokens=tokens, vocab=vocab, hidden=hidden,
                                       backward=backward))
    for backward in (False, True):
        cases.append(make_case("embedding", "embedding", "fp32", tokens=8192, vocab=50304, hidden=1024,
                               backward=backward))
    for m in (1, 32, 256, 2048):
        for n, k in ((8192, 8192), (28672, 4096), (4096, 14336)):
            cases.append(make_case("matmul", "mm", "fp8", m=m, n=n, k=k))
    for e in (12, 16, 20, 24, 27):
        for tensors in (1, 8, 64):
            cases.append(make_case("adamw_step", "adamw_fused", "fp32", numel=2**e, tensors=tensors))
    for e in (20, 24, 27):
        for tensors in (1, 64):
            cases.append(make_case("adamw_step", "adamw_fused", "bf16", numel=2**e, tensors=tensors))
    for kv_seq in (128, 512, 2048, 8192, 32768):
        for batch, heads, kv_heads in ((1, 32, 8), (8, 32, 8), (32, 32, 32), (64, 64, 8), (4, 28, 4)):
            cases.append(make_case("attention", "sdpa", "bf16", batch=batch, heads=heads, seq=1, head_dim=128,
                                   causal=False, backward=False, kv_heads=kv_heads, kv_seq=kv_seq))
    for seq in (64, 256, 512):
        for kv_seq in (2048, 8192):
            for batch, heads, kv_heads in ((1, 32, 8), (4, 64, 8)):
                cases.append(make_case("attention", "sdpa", "bf16", batch=batch, heads=heads, seq=seq, head_dim=128,
                                       causal=True, backward=False, kv_heads=kv_heads, kv_seq=kv_seq))
    for tokens in (1, 16, 256, 2048):
        for batch, kv_heads, head_dim in ((1, 8, 128), (32, 8, 128), (8, 32, 128)):
            cases.append(make_case("kv_cache_write", "index_copy", "bf16", batch=batch, kv_heads=kv_heads,
                                   tokens=tokens, head_dim=head_dim))
    for weight_dtype in ("int8", "int4", "fp8"):
        for m in (1, 8, 32, 128, 512):
            for n, k in ((4096, 4096), (11008, 4096), (8192, 8192)):
                cases.append(make_case("matmul", "weight_only", "bf16", m=m, n=n, k=k, weight_dtype=weight_dtype))
    return cases


