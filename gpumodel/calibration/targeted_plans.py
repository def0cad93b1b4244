"""Calibration plans aimed at what the first plans left thin (no torch needed): the strided elementwise kernels,
how tiles fill the SMs, and the fixed times the host-ahead timings showed (part of
:mod:`gpumodel.calibration.plan`, which re-exports them).

Random shapes come from a seeded generator, so a plan is the same on every machine; one seed draws the FIT
cases, another the VALIDATION cases.
"""

from __future__ import annotations

import random

from .cases import Case, case_key, loguniform_int, make_case

__all__ = ["STRIDED_KERNELS", "ALIGNMENTS", "strided_case", "strided_cases", "tiles_cases", "gaps_cases"]


#: the generic (strided / broadcast) elementwise kernels a plan measures: kernel -> (inputs, outputs, FLOP per
#: element); see :func:`gpumodel.calibration.runners.run_strided_elementwise` for the PyTorch call of each
STRIDED_KERNELS = {"slice_neg": (1, 1, 1), "cat_halves": (1, 1, 0), "chunk_silu": (1, 1, 4), "chunk_mul": (2, 1, 1),
                   "bcast_mul": (1, 1, 1), "permuted_add": (2, 1, 1), "strided_copy": (1, 1, 0)}


def strided_case(kernel: str, dtype: str, numel: int) -> Case:
    """One strided elementwise case (``ops.elementwise(..., strided=True)``) of a kernel in :data:`STRIDED_KERNELS`."""
    inputs, outputs, fpe = STRIDED_KERNELS[kernel]
    return make_case("elementwise", kernel, dtype, numel=numel, inputs=inputs, outputs=outputs, flops_per_element=fpe,
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
                    numel = width * loguniform_int(rng, 1, 2**27 // width)
                else:
                    numel = 1024 * loguniform_int(rng, 9, 2**17)
                cases.append(strided_case(kernel, dtype, numel))
    return cases


#: bytes of alignment of a GEMM's leading dimensions a plan draws, and the residue of the dimension (in
#: elements) that gives it: for 2-byte data, 16 B needs a multiple of 8 elements, 8 B an odd multiple of 4
ALIGNMENTS = (2, 4, 8, 16)


def _aligned_dim(rng: random.Random, lo: int, hi: int, align_bytes: int, elem_bytes: int) -> int:
    """A log-uniform dimension whose size in bytes is a multiple of ``align_bytes`` and of no larger power of two."""
    step = max(align_bytes // elem_bytes, 1)
    while True:
        v = loguniform_int(rng, lo, hi, step)
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
        m = loguniform_int(rng, 256, 12288)
        n, k = (_aligned_dim(rng, 256, 12288, rng.choice(ALIGNMENTS[e // 4:]), e) for _ in range(2))
        if 2.0 * m * n * k <= 1.5e12:
            cases.append(make_case("matmul", "mm", dtype, m=m, n=n, k=k))
    while len(cases) < gemms + attentions:
        b, h = rng.choice((1, 2, 4, 8, 16, 32)), rng.choice((8, 12, 16, 24, 32, 40, 48))
        seq, d = rng.choice((256, 384, 512, 640, 768, 1024, 1536, 2048, 3072, 4096)), rng.choice((64, 128))
        if b * h * seq < 128 * 132 or 4.0 * b * h * seq * seq * d > 2e12:
            continue
        cases.append(make_case("attention", "sdpa", "bf16", batch=b, heads=h, seq=seq, head_dim=d,
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
            cases.append(strided_case(kernel, dtype, width * loguniform_int(rng, 1, 8 if width > 1024 else 64)))
    for _ in range(36):
        dtype = rng.choice(("bf16", "bf16", "fp16"))
        m = loguniform_int(rng, 200, 3000)
        n, k = (_aligned_dim(rng, 200, 3000, rng.choice(ALIGNMENTS[:3]), 2) for _ in range(2))
        cases.append(make_case("matmul", "mm", dtype, m=m, n=n, k=k))
    for _ in range(24):
        b, (h, kvh) = rng.choice((1, 2, 4, 8, 16, 32, 64)), rng.choice(((32, 8), (64, 8), (32, 32), (40, 40)))
        cases.append(make_case("attention", "sdpa", "bf16", batch=b, heads=h, seq=1, head_dim=128, causal=False,
                               backward=False, kv_heads=kvh, kv_seq=loguniform_int(rng, 128, 32768)))
    for _ in range(20):
        b, h, seq, d = (rng.choice((8, 16, 32)), rng.choice((16, 24, 32, 48)), rng.choice((256, 384, 512, 640, 768)),
                        rng.choice((64, 128)))
        cases.append(make_case("attention", "sdpa", "bf16", batch=b, heads=h, seq=seq, head_dim=d, causal=True,
                               backward=rng.random() < 0.4))
    for _ in range(6):
        b, h, seq, d = rng.choice((1, 2, 4, 8)), rng.choice((8, 12, 16, 32)), rng.choice((384, 512, 768, 1024)), 64
        cases.append(make_case("attention", "naive", "bf16", batch=b, heads=h, seq=seq, head_dim=d,
                               causal=rng.random() < 0.5, impl="naive", backward=True, dropout=0.0))
    for _ in range(8):
        cases.append(make_case("bmm", "bmm", "bf16", batch=rng.choice((8, 16, 32, 64)),
                               m=loguniform_int(rng, 512, 4096), n=loguniform_int(rng, 512, 4096),
                               k=rng.choice((32, 64, 96, 128))))
    seen: set = set()
    return [c for c in cases if not (case_key(c) in seen or seen.add(case_key(c)))]
