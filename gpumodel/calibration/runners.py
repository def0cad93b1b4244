"""PyTorch calls for the composite and serving kernels a calibration measures (torch needed at call time).

Each ``run_*`` function takes a case's ``shape``, the torch dtype, ``randn`` (seeded, on the
device) and the device, allocates the inputs, and returns a no-argument callable that runs the
op once as PyTorch runs it; the callable's ``kernel`` attribute names the call that was used
when a fallback was taken (e.g. dequantise + ``F.linear`` where ``torch._weight_int8pack_mm``
has no kernel for the device).

* naive attention: ``(q @ k^T) * d^-1/2``, ``masked_fill`` with a causal mask, ``softmax``,
  ``dropout``, ``@ v`` (the textbook / nanoGPT form), or ``F.scaled_dot_product_attention``
  restricted to the math backend (kernel ``sdpa_math``);
* cross-entropy: ``F.cross_entropy`` (log-softmax + NLL) on logits cast to fp32 first
  (``upcast=True``, as Hugging Face causal-LM heads do) or in their own dtype;
* embedding: ``F.embedding`` forward; backward is ``embedding_dense_backward`` through autograd;
* fused AdamW: ``torch.optim.AdamW(fused=True).step()`` over ``tensors`` parameters;
* decode / chunked-prefill attention: ``F.scaled_dot_product_attention`` with ``seq`` queries
  over ``kv_seq`` keys (``enable_gqa`` for grouped-query attention; a lower-right causal mask);
* KV-cache write: ``index_copy_`` of the new keys and values into a static cache (two kernels);
* weight-only quantised matmul: ``torch._weight_int8pack_mm``, ``torch._weight_int4pack_mm``
  (tinygemm packing) and, for fp8 weights, dynamic per-tensor activation scaling + ``torch._scaled_mm``.
* strided elementwise (``strided=True``): the kernels a rotary embedding and a fused projection's
  halves launch, each over views PyTorch cannot load as vectors: ``-x[:, d/2:]`` (``slice_neg``), a
  head-transposed tensor times a broadcast table (``bcast_mul``), ``silu`` of one half of a fused
  gate/up output (``chunk_silu``) and the product with the other half (``chunk_mul``), the sum of two
  tensors in different head layouts (``permuted_add``), a copy into a slice of a cache
  (``strided_copy``), and the concatenation of two half-width slices (``cat_halves``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

__all__ = ["RUNNERS", "strided_layout"]


def _grad_runner(torch, out, inputs, dout=None):
    dout = torch.randn_like(out) if dout is None else dout
    return lambda: torch.autograd.grad(out, inputs, dout, retain_graph=True)


def run_naive_attention(torch, s: dict, tdt, randn, device: str) -> Callable[[], Any]:
    import torch.nn.functional as F

    b, h, sq, d = int(s["batch"]), int(s["heads"]), int(s["seq"]), int(s["head_dim"])
    causal, backward = bool(s.get("causal", False)), bool(s.get("backward", False))
    p = float(s.get("dropout", 0.0))
    q, k, v = (randn(b, h, sq, d).requires_grad_(backward) for _ in range(3))
    if s.get("impl") == "math" or s.get("kernel") == "sdpa_math":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def fwd():
            with sdpa_kernel(SDPBackend.MATH):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=p)
    else:
        mask = torch.ones(sq, sq, dtype=torch.bool, device=device).triu_(1) if causal else None
        scale = 1.0 / math.sqrt(d)

        def fwd():
            att = (q @ k.transpose(-2, -1)) * scale
            if mask is not None:
                att = att.masked_fill(mask, float("-inf"))
            att = torch.softmax(att, dim=-1)
            if p > 0:
                att = F.dropout(att, p=p, training=True)
            return att @ v
    if not backward:
        def run():
            with torch.no_grad():
                return fwd()
        return run
    return _grad_runner(torch, fwd(), (q, k, v))


def run_cross_entropy(torch, s: dict, tdt, randn, device: str) -> Callable[[], Any]:
    import torch.nn.functional as F

    t, vocab = int(s["tokens"]), int(s["vocab"])
    upcast, backward = bool(s.get("upcast", False)), bool(s.get("backward", False))
    x = randn(t, vocab).requires_grad_(backward)
    target = torch.randint(0, vocab, (t,), device=device)

    def fwd():
        return F.cross_entropy(x.float() if upcast else x, target)
    if not backward:
        return fwd
    return _grad_runner(torch, fwd(), (x,))


def run_embedding(torch, s: dict, tdt, randn, device: str) -> Callable[[], Any]:
    import torch.nn.functional as F

    t, vocab, hidden = int(s["tokens"]), int(s["vocab"]), int(s["hidden"])
    backward = bool(s.get("backward", False))
    table = randn(vocab, hidden).requires_grad_(backward)
    ids = torch.randint(0, vocab, (t,), device=device)
    if not backward:
        return lambda: F.embedding(ids, table)
    return _grad_runner(torch, F.embedding(ids, table), (table,))


def run_adamw(torch, s: dict, tdt, randn, device: str) -> Callable[[], Any]:
    numel, n = int(s["numel"]), int(s.get("tensors", 1))
    sizes = [numel // n + (1 if i < numel % n else 0) for i in range(n)]
    params = [torch.nn.Parameter(randn(max(1, size))) for size in sizes]
    for prm in params:
        prm.grad = randn(prm.numel())
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=True)
    opt.step()  # creates the state (exp_avg, exp_avg_sq, step)
    return opt.step


def run_decode_attention(torch, s: dict, tdt, randn, device: str) -> Callable[[], Any]:
    import torch.nn.functional as F

    b, h, sq, d = int(s["batch"]), int(s["heads"]), int(s["seq"]), int(s["head_dim"])
    kvh, skv = int(s.get("kv_heads") or h), int(s.get("kv_seq") or sq)
    causal = bool(s.get("causal", False))
    q = randn(b, h, sq, d)
    k, v = randn(b, kvh, skv, d), randn(b, kvh, skv, d)
    mask = None
    if causal and sq > 1:
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(sq, skv)

    def native():
        with torch.no_grad():
            if mask is None:
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=kvh != h)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=kvh != h)

    try:
        native()
        return native
    except Exception:  # noqa: BLE001 - no GQA through this path: repeat the KV heads as Hugging Face's repeat_kv does
        pass

    def repeated():
        with torch.no_grad():
            kk, vv = (x.repeat_interleave(h // kvh, dim=1) for x in (k, v))
            return F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
    repeated.kernel = "sdpa_repeat_kv"
    return repeated


def run_kv_cache_write(torch, s: dict, tdt, randn, device: str) -> Callable[[], Any]:
    b, kvh, t, d = int(s["batch"]), int(s["kv_heads"]), int(s["tokens"]), int(s["head_dim"])
    length = max(2 * t, 4096)
    kc, vc = torch.zeros(b, kvh, length, d, device=device, dtype=tdt), torch.zeros(b, kvh, length, d, device=device,
                                                                                     dtype=tdt)
    kn, vn = randn(b, kvh, t, d), randn(b, kvh, t, d)
    pos = torch.arange(length // 2, length // 2 + t, device=device)

    def run():
        kc.index_copy_(2, pos, kn)
        vc.index_copy_(2, pos, vn)
    return run


def _dequant_linear(torch, x, w, scale):
    import torch.nn.functional as F

    return lambda: F.linear(x, w.to(x.dtype) * scale)


def run_weight_only_matmul(torch, s: dict, tdt, randn, device: str) -> Callable[[], Any]:
    m, n, k, wdt = int(s["m"]), int(s["n"]), int(s["k"]), s["weight_dtype"]
    x = randn(m, k)
    if wdt == "int8":
        w = torch.randint(-128, 128, (n, k), device=device, dtype=torch.int8)
        scales = randn(n).abs_()
        fn, name = lambda: torch._weight_int8pack_mm(x, w, scales), "weight_int8pack_mm"
        fallback = _dequant_linear(torch, x, w, scales[:, None])
    elif wdt == "int4":
        group = 128 if k % 128 == 0 else 32
        wq = torch.randint(0, 256, (n, k // 2), device=device, dtype=torch.uint8)
        sz = randn(k // group, n, 2)
        name = "weight_int4pack_mm"
        try:
            if device == "cpu":
                packed = torch._convert_weight_to_int4pack_for_cpu(
                    torch.randint(0, 16, (n, k), device=device, dtype=torch.int32), 8)
                fn = lambda: torch._weight_int4pack_mm_for_cpu(x, packed, group, sz)  # noqa: E731
            else:
                packed = torch._convert_weight_to_int4pack(wq, 8)
                fn = lambda: torch._weight_int4pack_mm(x, packed, group, sz)  # noqa: E731
        except Exception:  # noqa: BLE001 - no tinygemm for this device / build
            fn = None
        scales = randn(n, k // group).abs_()

        def fallback():  # unpack two nibbles a byte, shift to signed, scale per group, matmul
            lo, hi = (wq & 0xF).to(x.dtype), (wq >> 4).to(x.dtype)
            w = torch.stack((lo, hi), dim=-1).view(n, k // group, group) - 8
            return torch.nn.functional.linear(x, (w * scales[..., None]).view(n, k))
    elif wdt == "fp8":
        w = randn(n, k).to(torch.float8_e4m3fn)
        sw = torch.ones((), device=device, dtype=torch.float32)
        name = "scaled_mm_dynamic"

        def fn():  # per-tensor dynamic activation scale, then the fp8 GEMM
            sx = x.abs().amax().float().clamp_(min=1e-12) / 448.0
            return torch._scaled_mm((x / sx).to(torch.float8_e4m3fn), w.t(), scale_a=sx, scale_b=sw,
                                    out_dtype=x.dtype)
        fallback = _dequant_linear(torch, x, w, sw)
    else:
        raise ValueError(f"unknown weight dtype {wdt!r}")
    if fn is not None:
        try:
            fn()
            fn.kernel = name
            return fn
        except Exception:  # noqa: BLE001 - unsupported on this device: fall back to dequantise + matmul
            pass
    fallback()
    fallback.kernel = "dequant_linear"
    return fallback


#: widths a strided case's rows take: the first that divides ``numel`` (LLM FFN and model widths first)
_WIDTHS = (14336, 11008, 4096, 2048, 1024, 128, 2)
_HEADS, _HEAD_DIM = 8, 128


def _strided_views(n: int) -> tuple[int, int, int, int]:
    """Row width ``w``, heads, head width ``d`` and tokens ``t`` of a strided case over ``n`` elements."""
    w = next(x for x in _WIDTHS if n % x == 0) if n % 2 == 0 else 1
    heads, d = (_HEADS, _HEAD_DIM) if n % (_HEADS * _HEAD_DIM) == 0 else (1, max(w, 1))
    return w, heads, d, n // (heads * d)


def strided_layout(kernel: str, numel: int) -> bool:
    """Whether :func:`run_strided_elementwise`'s operands for ``kernel`` over ``numel`` elements are really strided.

    A slice of a single row, or a head transpose with one head or one token, is contiguous: PyTorch runs the
    vectorised kernel for it (``vectorized_elementwise_kernel`` in the profiler on the H200), not the generic
    one. ``cat_halves`` always runs its own concatenation kernel.

    >>> [strided_layout("slice_neg", n) for n in (1024, 512, 3584)]
    [False, True, True]
    >>> [strided_layout("permuted_add", n) for n in (512, 1024, 4096)], strided_layout("bcast_mul", 1024)
    ([False, False, True], True)
    """
    w, heads, _, t = _strided_views(int(numel))
    rows = int(numel) // max(w, 1)
    if kernel in ("slice_neg", "chunk_silu", "chunk_mul"):
        return rows > 1
    if kernel == "permuted_add":
        return heads > 1 and t > 1
    if kernel in ("bcast_mul", "strided_copy"):
        return heads > 1
    return True


def run_strided_elementwise(torch, s: dict, tdt, randn, device: str) -> Callable[[], Any]:
    """One generic (non-vectorised) elementwise kernel over ``numel`` elements, by ``kernel`` (module notes)."""
    import torch.nn.functional as F

    n, kernel = int(s["numel"]), s["kernel"]
    w, heads, d, t = _strided_views(n)

    def heads_view():  # [1, t, heads, d] seen as [1, heads, t, d], as q.view(...).transpose(1, 2)
        return randn(1, t, heads, d).transpose(1, 2)

    if kernel == "slice_neg":
        x = randn(n // max(w, 1), 2 * max(w, 1))
        return lambda: torch.neg(x[:, w:])
    if kernel == "cat_halves":
        x = randn(n // max(w, 1), max(w, 1))
        half = max(w // 2, 1)
        return lambda: torch.cat([x[:, half:], x[:, :half]], dim=-1)
    if kernel in ("chunk_silu", "chunk_mul"):
        y, a = randn(n // max(w, 1), 2 * max(w, 1)), randn(n // max(w, 1), max(w, 1))
        return (lambda: F.silu(y[:, :w])) if kernel == "chunk_silu" else (lambda: a * y[:, w:])
    z = heads_view()
    if kernel == "bcast_mul":
        table = randn(t, d)
        return lambda: z * table
    if kernel == "permuted_add":
        other = randn(1, heads, t, d)
        return lambda: z + other
    if kernel == "strided_copy":
        cache = randn(1, heads, 2 * t, d)
        return lambda: cache[:, :, :t].copy_(z)
    raise ValueError(f"unknown strided elementwise kernel {kernel!r}")


#: (op, predicate on the shape) -> runner; the first match wins
RUNNERS: list[tuple[str, Callable[[dict], bool], Callable]] = [
    ("attention", lambda s: s.get("impl") in ("naive", "math"), run_naive_attention),
    ("attention", lambda s: s.get("kv_seq") is not None, run_decode_attention),
    ("cross_entropy", lambda s: True, run_cross_entropy),
    ("embedding", lambda s: True, run_embedding),
    ("adamw_step", lambda s: True, run_adamw),
    ("kv_cache_write", lambda s: True, run_kv_cache_write),
    ("matmul", lambda s: s.get("weight_dtype") is not None, run_weight_only_matmul),
    ("elementwise", lambda s: bool(s.get("strided")), run_strided_elementwise),
]
