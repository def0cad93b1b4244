"""Time PyTorch's attention backends one by one on this GPU: cuDNN, FlashAttention-2 and memory-efficient.

``F.scaled_dot_product_attention`` picks a backend by itself; inside ``torch.nn.attention.sdpa_kernel`` it
runs the one named. On Hopper its choice for a square 16-bit attention is cuDNN's sm90 kernels, while its
``FLASH_ATTENTION`` backend is the FlashAttention-2 code vendored from github.com/Dao-AILab/flash-attention
(``aten/src/ATen/native/transformers/cuda/flash_attn``): the sm80 kernels, ``mma.sync`` rather than wgmma, the
same kernels the flash-attn 2 package runs. Timing each backend on the same shapes gives, on one GPU, the
ratio between a Hopper-native kernel and FlashAttention-2's, forward and backward.

Shapes: the FlashAttention papers' benchmark grid (16k tokens a batch, hidden 2048: ``batch = 16384 / seq``,
``heads = 2048 / head_dim``; head_dim 64, 128, 256; causal and not; seq 512 .. 16k), and a few
grouped-query training shapes of Llama-3-8B (32 query heads, 8 KV heads, head_dim 128) up to 32k tokens.

Each call is timed with ``triton.testing.do_bench`` (median, the L2 cleared before each repeat). The backward
is ``torch.autograd.grad(out, (q, k, v), dout)`` on a graph kept alive (``retain_graph``). One forward per
backend and shape is profiled for its kernel names (``--profile``).

Writes ``attention_kernels.jsonl`` (one row a backend, direction and shape: ``seconds``, ``tflops`` in the
papers' convention, or ``error`` where the backend refused the shape) and ``environment.json`` under ``--out``.

Run on the GPU machine: ``python3 bench/measure_attention_kernels.py --out OUT [--quick]``;
``--dry-run`` lists the cases on any machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

BACKENDS = ("cudnn", "flash", "efficient")
TOKENS, HIDDEN = 16384, 2048


def cases(quick: bool = False) -> list[dict]:
    """Every shape, as ``dict(batch, heads, kv_heads, seq, head_dim, causal, dtype)``."""
    out = []
    seqs = (512, 2048, 8192) if quick else (512, 1024, 2048, 4096, 8192, 16384)
    for d in (64, 128, 256):
        for causal in (False, True):
            for seq in seqs:
                out.append(dict(batch=TOKENS // seq, heads=HIDDEN // d, kv_heads=HIDDEN // d, seq=seq, head_dim=d,
                                causal=causal, dtype="bf16"))
    for seq in (2048, 8192):  # the same kernels in fp16 (the papers' dtype)
        out.append(dict(batch=TOKENS // seq, heads=16, kv_heads=16, seq=seq, head_dim=128, causal=True, dtype="fp16"))
    if not quick:
        for batch, seq in ((4, 4096), (2, 8192), (1, 16384), (1, 32768)):   # Llama-3-8B's attention, GQA
            out.append(dict(batch=batch, heads=32, kv_heads=8, seq=seq, head_dim=128, causal=True, dtype="bf16"))
            out.append(dict(batch=batch, heads=32, kv_heads=32, seq=seq, head_dim=128, causal=True, dtype="bf16"))
    return out


def flops(c: dict, backward: bool) -> float:
    """FLOPs in the FlashAttention papers' convention: 4 b h s^2 d, halved when causal, x2.5 backward."""
    f = 4.0 * c["batch"] * c["heads"] * c["seq"] ** 2 * c["head_dim"] / (2 if c["causal"] else 1)
    return f * (2.5 if backward else 1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="fewer sequence lengths, no GQA shapes")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--profile", action="store_true", help="record each backend's kernel names at one shape")
    ap.add_argument("--budget-s", type=float, default=400.0, help="stop starting new shapes after this long")
    args = ap.parse_args(argv)
    todo = cases(args.quick)
    if args.dry_run:
        for c in todo:
            print(c)
        print(f"{len(todo)} shapes x {len(BACKENDS)} backends x 2 directions")
        return 0
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}
    args.out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    env = {"gpu": props.name, "sm_count": props.multi_processor_count, "total_memory": props.total_memory,
           "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "capability": list(torch.cuda.get_device_capability(0))}
    try:
        import subprocess
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                                        "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    (args.out / "environment.json").write_text(json.dumps(env, indent=1))
    print(env, flush=True)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    start = time.time()
    rows = []
    with open(args.out / "attention_kernels.jsonl", "w") as fh:
        for c in todo:
            if time.time() - start > args.budget_s:
                print("budget spent; stopping", flush=True)
                break
            g = torch.Generator(device="cuda").manual_seed(0)
            dt = dtypes[c["dtype"]]
            q = torch.randn(c["batch"], c["heads"], c["seq"], c["head_dim"], device="cuda", dtype=dt, generator=g)
            k, v = (torch.randn(c["batch"], c["kv_heads"], c["seq"], c["head_dim"], device="cuda", dtype=dt,
                                generator=g) for _ in range(2))
            extra = {"enable_gqa": True} if c["kv_heads"] != c["heads"] else {}
            for name in BACKENDS:
                for direction in ("fwd", "bwd"):
                    row = dict(c, backend=name, direction=direction)
                    try:
                        with sdpa_kernel(backend[name]):
                            if direction == "fwd":
                                def fn():
                                    with torch.no_grad():
                                        return F.scaled_dot_product_attention(q, k, v, is_causal=c["causal"], **extra)
                            else:
                                qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
                                o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=c["causal"], **extra)
                                do = torch.randn_like(o)

                                def fn():
                                    return torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)
                            fn()
                            torch.cuda.synchronize()
                            t = do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e-3
                            row.update(seconds=t, tflops=flops(c, direction == "bwd") / t / 1e12)
                    except Exception as e:  # noqa: BLE001 - a backend refusing a shape is data
                        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                    finally:
                        o = fn = None  # noqa: F841
                    fh.write(json.dumps(row) + "\n")
                    fh.flush()
                    rows.append(row)
                    if "seconds" in row:
                        print(f"{name:9s} {direction} {c['dtype']} b{c['batch']} h{c['heads']}/{c['kv_heads']} "
                              f"s{c['seq']} d{c['head_dim']} causal={c['causal']!s:5s} {row['seconds'] * 1e3:8.3f} ms "
                              f"{row['tflops']:6.1f} TF", flush=True)
                    else:
                        print(f"{name:9s} {direction} {c} {row['error']}", flush=True)
            del q, k, v
            torch.cuda.empty_cache()
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        c = dict(batch=4, heads=16, kv_heads=16, seq=4096, head_dim=128, causal=True)
        q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        names = {}
        for name in BACKENDS:
            with sdpa_kernel(backend[name]):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                torch.autograd.grad(o, (q, k, v), torch.randn_like(o))
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    torch.autograd.grad(o, (q, k, v), torch.randn_like(o))
                    torch.cuda.synchronize()
            names[name] = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        (args.out / "kernel_names.json").write_text(json.dumps({"shape": c, "kernels": names}, indent=1))
        print(json.dumps(names, indent=1))
    print(f"{len(rows)} rows in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
