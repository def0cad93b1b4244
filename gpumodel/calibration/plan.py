"""What a calibration measures: the kernel cases of the quick and full plans (no torch needed).

A case is a plain ``dict`` ``{"op", "kernel", "dtype", "shape"}``: ``op``, ``shape`` and ``dtype``
are the arguments of the :mod:`gpumodel.core.ops` constructor named ``op``; ``kernel`` names the
PyTorch call that runs it (``mm``, ``linear``, ``bmm``, ``copy``, ``add``, ``sdpa``...).
Random shapes come from a seeded generator, so a plan is the same on every machine.
"""

from __future__ import annotations

import math
import random
from typing import Any, Iterable

__all__ = ["ALIGNMENTS", "Case", "STRIDED_KERNELS", "call_key", "case_key", "fit_cases", "strided_cases", "sweep_cases", "tiles_cases",
           "widened_cases"]

Case = dict  # {"op": str, "kernel": str, "dtype": str, "shape": {str: number}}


def _case(op: str, kernel: str, dtype: str, **shape: Any) -> Case:
    return {"op": op, "kernel": kernel, "dtype": dtype, "shape": shape}


def case_key(case: Case) -> tuple:
    """What the time model sees of a case or measured point: op, dtype and shape (not the PyTorch call).

    Two cases with one key are the same shape for the model: FIT and VALIDATION sets must not share one.

    >>> case_key(_case("matmul", "mm", "bf16", m=1, n=2, k=3)) == case_key(_case("matmul", "linear", "bf16", k=3, n=2, m=1))
    True
    """
    return case["op"], case["dtype"], tuple(sorted(case["shape"].items()))


def call_key(case: Case) -> tuple:
    """What a measurement of a case repeats: the PyTorch call (``kernel``) on the op, dtype and shape of
    :func:`case_key`. Two runs' points with one key time the same call."""
    return (case.get("kernel"), *case_key(case))


def _loguniform(rng: random.Random, lo: int, hi: int, multiple: int = 1) -> int:
    v = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return max(multiple, int(round(v / multiple)) * multiple)


def _random_gemms(rng: random.Random, count: int, max_flops: float, lo: int = 16, hi: int = 16384,
                  multiple_of: tuple[int, ...] = (64, 8, 1)) -> list[tuple[int, int, int]]:
    out = []
    while len(out) < count:
        mult = multiple_of[len(out) % len(multiple_of)]
        m, n, k = (_loguniform(rng, lo, hi, mult) for _ in range(3))
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
            cases.append(_case("matmul", "mm", dt, m=s, n=s, k=s))
        count = (70 if main else 16) if full else (14 if main else 4)
        mult = (64, 16) if dt == "fp8" else (64, 8, 1)
        max_flops = 6e11 if dt in ("fp32",) else 1.5e12
        for m, n, k in _random_gemms(rng, count, max_flops, multiple_of=mult):
            cases.append(_case("matmul", "mm", dt, m=m, n=n, k=k))
        if main:
            ms = [1, 2, 8, 32, 128, 512] if full else [1, 32]
            nks = [(2048, 2048), (6144, 6144), (12288, 3072), (3072, 12288), (24576, 6144)]
            for m in ms:
                for n, k in (nks if full else nks[1:3]):
                    cases.append(_case("matmul", "mm", dt, m=m, n=n, k=k))
            if full:  # large problems (the compute ceiling under sustained load) and more skinny ones;
                # half of them as nn.Linear runs them (x @ W.T, W stored [n, k])
                for i, (m, n, k) in enumerate(_random_gemms(rng, 24, 8e12, lo=1024, hi=24576,
                                                            multiple_of=(128, 64))):
                    cases.append(_case("matmul", ("mm", "linear")[i % 2], dt, m=m, n=n, k=k))
                for m in (1, 16, 64):
                    for n, k in ((1024, 1024), (2560, 9728), (9728, 2560), (49152, 3072), (20480, 20480)):
                        cases.append(_case("matmul", "mm", dt, m=m, n=n, k=k))
                for m in (1, 3, 8, 24, 48, 100, 200, 400):
                    for n, k in ((3072, 3072), (7168, 2048), (2048, 7168), (18432, 6144), (65536, 2048)):
                        cases.append(_case("matmul", "linear", dt, m=m, n=n, k=k))
    # batched GEMMs (bf16), a few of them batched decode GEMVs
    for _ in range(24 if full else 5):
        b = _loguniform(rng, 2, 96)
        m, n, k = (_loguniform(rng, 32, 2048, 16) for _ in range(3))
        cases.append(_case("bmm", "bmm", "bf16", batch=b, m=m, n=n, k=k))
    for _ in range(8 if full else 0):
        b, m = _loguniform(rng, 8, 512), _loguniform(rng, 1, 16)
        n, k = _loguniform(rng, 64, 8192, 64), _loguniform(rng, 64, 8192, 64)
        cases.append(_case("bmm", "bmm", "bf16", batch=b, m=m, n=n, k=k))
    # memory-bound ops from far below to far above L2; numel=1 is the launch floor
    exps = range(0, 29, 2) if full else range(0, 29, 4)
    for e in exps:
        numel = 2**e
        for kernel, inputs, fpe in (("copy", 1, 0), ("add", 2, 1), ("relu", 1, 1), ("gelu", 1, 8)):
            cases.append(_case("elementwise", kernel, "bf16", numel=numel, inputs=inputs, outputs=1,
                               flops_per_element=fpe))
        if full or e >= 20:
            cases.append(_case("elementwise", "add", "fp32", numel=numel, inputs=2, outputs=1,
                               flops_per_element=1))
    rows_list = [1, 16, 256, 2048, 16384, 131072] if full else [16, 2048, 65536]
    cols_list = [128, 512, 2048, 12288, 32768, 131072] if full else [1024, 16384]
    for family in ("softmax", "layer_norm", "rms_norm", "reduce_sum"):
        for rows in rows_list:
            for cols in cols_list:
                if rows * cols <= 2**28:
                    cases.append(_case(family, family, "bf16", rows=rows, cols=cols))
        for rows, cols in ((4096, 4096), (256, 65536)):
            cases.append(_case(family, family, "fp32", rows=rows, cols=cols))
        for _ in range(16 if full else 0):  # random shapes between the grid points
            rows, cols = _loguniform(rng, 1, 65536), _loguniform(rng, 1024, 262144)
            if rows * cols <= 2**28:
                cases.append(_case(family, family, "bf16", rows=rows, cols=cols))
        for _ in range(8 if full else 0):  # many rows of transformer widths
            rows, cols = _loguniform(rng, 256, 32768), _loguniform(rng, 2048, 16384, 64)
            cases.append(_case(family, family, "bf16", rows=rows, cols=cols))
    # flash attention, forward and backward
    seqs = [256, 1024, 2048, 8192] if full else [1024, 4096]
    for seq in seqs:
        for head_dim in ((64, 128) if full else (128,)):
            for causal in (False, True):
                for backward in (False, True):
                    batch = max(1, 8192 // seq)
                    cases.append(_case("attention", "sdpa", "bf16", batch=batch, heads=16, seq=seq,
                                       head_dim=head_dim, causal=causal, backward=backward))
    if full:
        for seq, heads, d in ((12288, 16, 128), (3584, 40, 128), (640, 64, 64)):
            for causal in (False, True):
                for backward in (False, True):
                    cases.append(_case("attention", "sdpa", "bf16", batch=1, heads=heads, seq=seq,
                                       head_dim=d, causal=causal, backward=backward))
        for _ in range(12):
            numel = _loguniform(rng, 1000, 3 * 10**8)
            cases.append(_case("elementwise", "mul", "bf16", numel=numel, inputs=2, outputs=1, flops_per_element=1))
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
                        cases.append(_case(family, family, dt, rows=rows, cols=cols))
    for _ in range(24):  # batched decode GEMVs and short-m batched GEMMs
        b, m = _loguniform(rng, 8, 512), rng.choice([1, 1, 2, 4, 8, 16])
        n, k = _loguniform(rng, 64, 8192, 64), _loguniform(rng, 64, 8192, 64)
        if b * n * k <= 2**29:
            cases.append(_case("bmm", "bmm", "bf16", batch=b, m=m, n=n, k=k))
    for b in (16, 64, 256):  # attention-score shapes: one query per head against the keys
        for n, k in ((1024, 128), (8192, 128), (128, 2048), (2048, 64)):
            cases.append(_case("bmm", "bmm", "bf16", batch=b, m=1, n=n, k=k))
    for b, mn in ((8, 1024), (16, 2048), (64, 512), (4, 4096)):  # short reductions: output-write bound
        for k in (32, 64, 96):
            cases.append(_case("bmm", "bmm", "bf16", batch=b, m=mn, n=mn, k=k))
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
                    cases.append(_case(family, family, "bf16", rows=rows, cols=cols))
        for rows, cols in ((65536, 128), (16384, 2048)):
            cases.append(_case(family, family, "fp32", rows=rows, cols=cols))
    for seq in (128, 256, 512, 768):
        for batch, heads in ((1, 8), (2, 16), (8, 32)):
            for causal in (False, True):
                for backward in (False, True):
                    cases.append(_case("attention", "sdpa", "bf16", batch=batch, heads=heads, seq=seq, head_dim=128,
                                       causal=causal, backward=backward))
    for seq, batch in ((256, 4), (512, 16)):
        for backward in (False, True):
            cases.append(_case("attention", "sdpa", "bf16", batch=batch, heads=12, seq=seq, head_dim=64,
                               causal=True, backward=backward))
    for s in (512, 1024, 2048, 4096, 8192):
        cases.append(_case("matmul", "mm", "tf32", m=s, n=s, k=s))
    for i, (m, n, k) in enumerate(_random_gemms(rng, 20, 1.5e12, lo=64, hi=16384, multiple_of=(64, 8, 1))):
        cases.append(_case("matmul", ("mm", "linear")[i % 2], "tf32", m=m, n=n, k=k))
    for b, h, seq, d in ((4, 8, 256, 64), (1, 16, 512, 64), (2, 16, 1024, 128), (1, 32, 2048, 128), (1, 8, 4096, 64)):
        for causal in (False, True):
            for backward in (False, True):
                cases.append(_case("attention", "naive", "bf16", batch=b, heads=h, seq=seq, head_dim=d,
                                   causal=causal, impl="naive", backward=backward, dropout=0.0))
        cases.append(_case("bmm", "bmm", "bf16", batch=b * h, m=seq, n=seq, k=d))
        cases.append(_case("bmm", "bmm", "bf16", batch=b * h, m=seq, n=d, k=seq))
    for b, h, seq, d in ((4, 8, 256, 64), (2, 16, 1024, 128)):
        for backward in (False, True):
            cases.append(_case("attention", "naive", "bf16", batch=b, heads=h, seq=seq, head_dim=d,
                               causal=True, impl="naive", backward=backward, dropout=0.1))
    for tokens in (256, 2048, 8192):
        for vocab in (32000, 50304, 128256):
            for dt, upcast in (("bf16", True), ("bf16", False), ("fp32", False)):
                for backward in (False, True):
                    cases.append(_case("cross_entropy", "cross_entropy", dt, tokens=tokens, vocab=vocab,
                                       upcast=upcast, backward=backward))
    for tokens in (512, 4096, 32768):
        for vocab, hidden in ((32000, 4096), (50304, 768), (128256, 2048)):
            for backward in (False, True):
                cases.append(_case("embedding", "embedding", "bf16", tokens=tokens, vocab=vocab, hidden=hidden,
                                   backward=backward))
    for backward in (False, True):
        cases.append(_case("embedding", "embedding", "fp32", tokens=8192, vocab=50304, hidden=1024, backward=backward))
    for m in (1, 32, 256, 2048):
        for n, k in ((8192, 8192), (28672, 4096), (4096, 14336)):
            cases.append(_case("matmul", "mm", "fp8", m=m, n=n, k=k))
    for e in (12, 16, 20, 24, 27):
        for tensors in (1, 8, 64):
            cases.append(_case("adamw_step", "adamw_fused", "fp32", numel=2**e, tensors=tensors))
    for e in (20, 24, 27):
        for tensors in (1, 64):
            cases.append(_case("adamw_step", "adamw_fused", "bf16", numel=2**e, tensors=tensors))
    for kv_seq in (128, 512, 2048, 8192, 32768):
        for batch, heads, kv_heads in ((1, 32, 8), (8, 32, 8), (32, 32, 32), (64, 64, 8), (4, 28, 4)):
            cases.append(_case("attention", "sdpa", "bf16", batch=batch, heads=heads, seq=1, head_dim=128,
                               causal=False, backward=False, kv_heads=kv_heads, kv_seq=kv_seq))
    for seq in (64, 256, 512):
        for kv_seq in (2048, 8192):
            for batch, heads, kv_heads in ((1, 32, 8), (4, 64, 8)):
                cases.append(_case("attention", "sdpa", "bf16", batch=batch, heads=heads, seq=seq, head_dim=128,
                                   causal=True, backward=False, kv_heads=kv_heads, kv_seq=kv_seq))
    for tokens in (1, 16, 256, 2048):
        for batch, kv_heads, head_dim in ((1, 8, 128), (32, 8, 128), (8, 32, 128)):
            cases.append(_case("kv_cache_write", "index_copy", "bf16", batch=batch, kv_heads=kv_heads, tokens=tokens,
                               head_dim=head_dim))
    for weight_dtype in ("int8", "int4", "fp8"):
        for m in (1, 8, 32, 128, 512):
            for n, k in ((4096, 4096), (11008, 4096), (8192, 8192)):
                cases.append(_case("matmul", "weight_only", "bf16", m=m, n=n, k=k, weight_dtype=weight_dtype))
    return cases


#: the generic (strided / broadcast) elementwise kernels a plan measures: kernel -> (inputs, outputs, FLOP per
#: element); see :func:`gpumodel.calibration.runners.run_strided_elementwise` for the PyTorch call of each
STRIDED_KERNELS = {"slice_neg": (1, 1, 1), "cat_halves": (1, 1, 0), "chunk_silu": (1, 1, 4), "chunk_mul": (2, 1, 1),
                   "bcast_mul": (1, 1, 1), "permuted_add": (2, 1, 1), "strided_copy": (1, 1, 0)}


def strided_case(kernel: str, dtype: str, numel: int) -> Case:
    """One strided elementwise case (``ops.elementwise(..., strided=True)``) of a kernel in :data:`STRIDED_KERNELS`."""
    inputs, outputs, fpe = STRIDED_KERNELS[kernel]
    return _case("elementwise", kernel, dtype, numel=numel, inputs=inputs, outputs=outputs, flops_per_element=fpe,
                 strided=True)


def strided_cases(seed: int = 3) -> list[Case]:
    """The FIT cases of the strided elementwise kernels: random sizes from one head row to 2**27 elements.

    Head-layout kernels get ``numel`` a multiple of 8 heads x 128 (one token of 8 heads and more), the
    half-width kernels a multiple of an FFN or model width. About 90 cases.

    Examples
    --------
    >>> cases = strided_cases()
    >>> sorted({c["kernel"] for c in cases}) == sorted(STRIDED_KERNELS)
    True
    >>> all(c["shape"]["strided"] for c in cases)
    True
    """
    rng = random.Random(seed)
    cases: list[Case] = []
    for kernel in STRIDED_KERNELS:
        for dtype, count in (("bf16", 9), ("fp32", 4)):
            for _ in range(count):
                if kernel.startswith("chunk"):
                    width = rng.choice((4096, 11008, 14336))
                    numel = width * _loguniform(rng, 1, 2**27 // width)
                else:
                    numel = 1024 * _loguniform(rng, 9, 2**17)
                cases.append(strided_case(kernel, dtype, numel))
    return cases


#: bytes of alignment of a GEMM's leading dimensions a plan draws, and the residue of the dimension (in
#: elements) that gives it: for 2-byte data, 16 B needs a multiple of 8 elements, 8 B an odd multiple of 4
ALIGNMENTS = (2, 4, 8, 16)


def _aligned_dim(rng: random.Random, lo: int, hi: int, align_bytes: int, elem_bytes: int) -> int:
    """A log-uniform dimension whose size in bytes is a multiple of ``align_bytes`` and of no larger power of two."""
    step = max(align_bytes // elem_bytes, 1)
    while True:
        v = _loguniform(rng, lo, hi, step)
        if align_bytes == 16 or (v * elem_bytes) % (2 * align_bytes) != 0:
            return v


def tiles_cases(seed: int = 4, gemms: int = 96, attentions: int = 72) -> list[Case]:
    """Cases that pin down how tiles fill the SMs, where the first plans were thin.

    GEMMs whose leading dimensions (``n`` and ``k``) are aligned to 2, 4, 8 or 16 bytes, drawn apart
    (cuBLAS's kernels differ by the widest load the operands allow), in bf16, fp16 and tf32 at
    256..12288; square flash attention (``seq == kv_seq``) forward and backward with enough query tiles to
    fill the GPU several times over (batch 1..32, heads 8..48, seq 256..4096, head_dim 64 and 128,
    causal and not). One seed draws the FIT cases, another the VALIDATION cases.

    Examples
    --------
    >>> cases = tiles_cases()
    >>> sorted({c["op"] for c in cases}), len(cases)
    (['attention', 'matmul'], 168)
    >>> all(c["shape"]["seq"] * c["shape"]["batch"] * c["shape"]["heads"] >= 128 * 132
    ...     for c in cases if c["op"] == "attention")
    True
    """
    rng = random.Random(seed)
    cases: list[Case] = []
    while len(cases) < gemms:
        dtype = rng.choice(("bf16", "bf16", "fp16", "tf32"))
        e = 4 if dtype == "tf32" else 2
        m = _loguniform(rng, 256, 12288)
        n, k = (_aligned_dim(rng, 256, 12288, rng.choice(ALIGNMENTS[e // 4:]), e) for _ in range(2))
        if 2.0 * m * n * k <= 1.5e12:
            cases.append(_case("matmul", "mm", dtype, m=m, n=n, k=k))
    while len(cases) < gemms + attentions:
        b, h = rng.choice((1, 2, 4, 8, 16, 32)), rng.choice((8, 12, 16, 24, 32, 40, 48))
        seq, d = rng.choice((256, 384, 512, 640, 768, 1024, 1536, 2048, 3072, 4096)), rng.choice((64, 128))
        if b * h * seq < 128 * 132 or 4.0 * b * h * seq * seq * d > 2e12:
            continue
        cases.append(_case("attention", "sdpa", "bf16", batch=b, heads=h, seq=seq, head_dim=d,
                           causal=rng.random() < 0.5, backward=rng.random() < 0.4))
    return cases


def gaps_cases(seed: int = 6) -> list[Case]:
    """Cases where the FIT set left the model's fixed times unconstrained (the host-ahead timings showed them).

    Strided elementwise kernels of one to 64 head rows (1024..65536 elements; chunks of 1..8 rows of a
    projection's width), whose floor the FIT set had two points of; GEMMs of 200..3000 whose leading
    dimensions are 2-, 4- or 8-byte aligned (the CUTLASS fallbacks at 10-100 us); grouped-query and
    multi-head decode over 128..32768 cached tokens at batch 1..64; square causal attention of 256..768
    tokens over many tiles, forward and backward; the naive attention's backward at 120-600 us; ``bmm``
    whose output dominates (k <= 128). One seed draws the FIT cases, another the VALIDATION cases.

    Examples
    --------
    >>> cases = gaps_cases()
    >>> sorted({c["op"] for c in cases})
    ['attention', 'bmm', 'elementwise', 'matmul']
    >>> len(cases) == len({case_key(c) for c in cases})
    True
    """
    rng = random.Random(seed)
    cases: list[Case] = []
    for kernel in STRIDED_KERNELS:
        for dtype in ("bf16", "bf16", "bf16", "bf16", "fp32"):
            width = rng.choice((4096, 11008, 14336)) if kernel.startswith("chunk") else 1024
            cases.append(strided_case(kernel, dtype, width * _loguniform(rng, 1, 8 if width > 1024 else 64)))
    for _ in range(36):
        dtype = rng.choice(("bf16", "bf16", "fp16"))
        m = _loguniform(rng, 200, 3000)
        n, k = (_aligned_dim(rng, 200, 3000, rng.choice(ALIGNMENTS[:3]), 2) for _ in range(2))
        cases.append(_case("matmul", "mm", dtype, m=m, n=n, k=k))
    for _ in range(24):
        b, (h, kvh) = rng.choice((1, 2, 4, 8, 16, 32, 64)), rng.choice(((32, 8), (64, 8), (32, 32), (40, 40)))
        cases.append(_case("attention", "sdpa", "bf16", batch=b, heads=h, seq=1, head_dim=128, causal=False,
                           backward=False, kv_heads=kvh, kv_seq=_loguniform(rng, 128, 32768)))
    for _ in range(20):
        b, h, seq, d = (rng.choice((8, 16, 32)), rng.choice((16, 24, 32, 48)), rng.choice((256, 384, 512, 640, 768)),
                        rng.choice((64, 128)))
        cases.append(_case("attention", "sdpa", "bf16", batch=b, heads=h, seq=seq, head_dim=d, causal=True,
                           backward=rng.random() < 0.4))
    for _ in range(6):
        b, h, seq, d = rng.choice((1, 2, 4, 8)), rng.choice((8, 12, 16, 32)), rng.choice((384, 512, 768, 1024)), 64
        cases.append(_case("attention", "naive", "bf16", batch=b, heads=h, seq=seq, head_dim=d, causal=rng.random() < 0.5,
                           impl="naive", backward=True, dropout=0.0))
    for _ in range(8):
        cases.append(_case("bmm", "bmm", "bf16", batch=rng.choice((8, 16, 32, 64)), m=_loguniform(rng, 512, 4096),
                           n=_loguniform(rng, 512, 4096), k=rng.choice((32, 64, 96, 128))))
    seen: set = set()
    return [c for c in cases if not (case_key(c) in seen or seen.add(case_key(c)))]
