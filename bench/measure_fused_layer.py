"""Decoder layers trained back to back with fused memory-bound kernels, as Megatron-Core runs them, and eagerly, as
Hugging Face runs them: the check of the fused-kernel scaling behind ``framework="megatron"``.

``gpumodel.cluster.shard`` prices a Megatron-Core layer from the eager layer's kernels, its memory-bound ones scaled
to the bytes of the fused kernels Megatron-Core runs instead (one normalisation kernel, one fused SwiGLU, one fused
RoPE, one residual add each). Whether fused kernels move those bytes at the eager kernels' rate decides how much
faster the model makes a Megatron layer than an eager one (up to a third for a 7B Llama layer at 4096 tokens), and
nothing measured checks it yet. This script measures both on one GPU, in one process, layer shapes of published
Megatron and NeMo runs:

* ``fused``: a Llama layer built as Megatron-Core's Transformer Engine layer computes it, in plain PyTorch: the
  query, key and value projection as one linear layer whose output is split by views; RMSNorm, RoPE on queries and
  keys together, the SwiGLU of the fused gate-and-up projection and each residual add as one ``torch.compile``d
  function each (inductor's single fused kernel, forward and backward); flash attention by
  ``scaled_dot_product_attention`` on views, no copies (grouped keys and values as the kernel takes them, else
  repeated: the row says which); cuBLAS GEMMs by ``F.linear``.
* ``hf``: Hugging Face's own ``LlamaDecoderLayer`` (``attn_implementation="sdpa"``), eager.
* ``attention`` and ``attention_dropout``: the causal flash attention of the layer's query heads alone
  (``scaled_dot_product_attention`` on one tensor as queries, keys and values), without and with the attention
  dropout (p = 0.1) that Megatron-LM's and NeMo's GPT configurations default to: the ratio is what dropout's random
  numbers cost the kernel, forward and backward.

A stack of ``--layers`` identical layers (bf16 weights, no bias) takes a bf16 input and runs forward and backward (the
gradient of the output given; weights' gradients set to None after each step, as a step with one micro-batch
leaves them), back to back for ``--warm-s`` seconds (past the clock's fall under load, as in a training step), then
``--reps`` more steps each timed with CUDA events around the forward and the backward. One JSON line per (shape,
batch, sequence, variant): the per-layer medians ``layer_forward_s`` and ``layer_step_s`` (forward and backward),
every timing, the SM clock at the end. ``python bench/fused_layer_accuracy.py FILE`` compares them with the model.

    python bench/measure_fused_layer.py --out fused_layer.jsonl      # on the GPU, about two minutes
    python bench/measure_fused_layer.py --out /tmp/f.jsonl --dry-run  # CPU: the plan, no torch
    python bench/measure_fused_layer.py --out /tmp/f.jsonl --cases tiny:1:64 --layers 2 --reps 2 --warm-s 0  # CPU
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: Llama layer shapes (hidden, heads, key/value heads, FFN width, head dimension) of the published Megatron-Core and
#: NeMo runs
SHAPES = {
    "llama-3.2-1b": (2048, 32, 8, 8192, 64),
    "llama-2-7b": (4096, 32, 32, 11008, 128),
    "llama-3-8b": (4096, 32, 8, 14336, 128),
    "llama-2-13b": (5120, 40, 40, 13824, 128),
    "llama-3-70b-tp4": (8192, 16, 2, 7168, 128),   # one tensor-parallel rank's slice of Llama 3 70B at tp 4
    "tiny": (256, 4, 2, 512, 64),                  # the CPU check of the script, no published run's
}
#: (shape, micro-batch, sequence) measured, in order
CASES = (("llama-2-7b", 1, 4096), ("llama-3-8b", 1, 8192), ("llama-3-8b", 2, 4096), ("llama-2-13b", 1, 4096),
         ("llama-3.2-1b", 4, 2048), ("llama-3.2-1b", 1, 8192), ("llama-3-70b-tp4", 1, 8192), ("llama-2-7b", 4, 2048))
#: the layer as Megatron-Core runs it, as Hugging Face runs it, and its attention kernel alone without and with the
#: attention dropout of GPT configurations (p = 0.1: Megatron-LM's and NeMo's GPT defaults)
VARIANTS = ("fused", "hf", "attention", "attention_dropout")
ATTENTION_DROPOUT = 0.1
ROPE_THETA = 500000.0
EPS = 1e-5


def plan(cases=CASES) -> list[dict]:
    """The rows to measure, without timings."""
    out = []
    for name, b, s in cases:
        h, heads, kv, ffn, d = SHAPES[name]
        for variant in VARIANTS:
            out.append(dict(shape=name, variant=variant, hidden=h, heads=heads, kv_heads=kv, ffn=ffn, head_dim=d,
                            batch=b, seq=s))
    return out


def _fused_functions(torch):
    """The fused memory-bound kernels, each one compiled function (forward and backward by inductor)."""
    F = torch.nn.functional

    def rmsnorm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w

    def rope(q, k, cos, sin):
        def rot(x):
            half = x.shape[-1] // 2
            return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return q * cos + rot(q) * sin, k * cos + rot(k) * sin

    def swiglu(a):
        gate, up = a.chunk(2, dim=-1)
        return F.silu(gate) * up

    def add(x, y):
        return x + y

    compile_ = (lambda f: torch.compile(f, dynamic=False, fullgraph=True)) if torch.cuda.is_available() else (lambda f: f)
    return {name: compile_(f) for name, f in (("rmsnorm", rmsnorm), ("rope", rope), ("swiglu", swiglu), ("add", add))}


def fused_layer_class(torch):
    """A Llama decoder layer as Megatron-Core's Transformer Engine layer runs it (see the module docstring)."""
    nn, F = torch.nn, torch.nn.functional
    fn = _fused_functions(torch)

    class FusedLayer(nn.Module):
        def __init__(self, hidden, heads, kv_heads, ffn, head_dim):
            super().__init__()
            self.heads, self.kv, self.d = heads, kv_heads, head_dim
            self.ln1, self.ln2 = nn.Parameter(torch.ones(hidden)), nn.Parameter(torch.ones(hidden))
            self.qkv = nn.Linear(hidden, (heads + 2 * kv_heads) * head_dim, bias=False)
            self.proj = nn.Linear(heads * head_dim, hidden, bias=False)
            self.fc1 = nn.Linear(hidden, 2 * ffn, bias=False)
            self.fc2 = nn.Linear(ffn, hidden, bias=False)
            self.gqa = "native"
            self.output_copied = None    # whether the attention output needed a copy to feed the projection

        def attention(self, q, k, v):
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            if self.kv < self.heads and self.gqa == "native":
                try:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                except (RuntimeError, TypeError):
                    self.gqa = "repeated"
            if self.kv < self.heads:
                k, v = (t.repeat_interleave(self.heads // self.kv, dim=1) for t in (k, v))
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            qkv = self.qkv(fn["rmsnorm"](x, self.ln1)).view(b, s, self.heads + 2 * self.kv, self.d)
            q, k, v = qkv.split((self.heads, self.kv, self.kv), dim=2)
            q, k = fn["rope"](q, k, cos, sin)
            o = self.attention(q, k, v).transpose(1, 2)
            if self.output_copied is None:
                self.output_copied = not o.is_contiguous()
            o = o.reshape(b, s, self.heads * self.d)
            x = fn["add"](x, self.proj(o))
            return fn["add"](x, self.fc2(fn["swiglu"](self.fc1(fn["rmsnorm"](x, self.ln2)))))

    return FusedLayer


def _rope_tables(torch, s, d, device, dtype):
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(s, device=device, dtype=torch.float32), inv)
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def build(torch, row: dict, layers: int, device, dtype):
    """``(stack, run)``: the layers and a function of the input that runs them forward."""
    h, heads, kv, ffn, d, s = (row[k] for k in ("hidden", "heads", "kv_heads", "ffn", "head_dim", "seq"))
    cos, sin = _rope_tables(torch, s, d, device, dtype)
    if row["variant"].startswith("attention"):
        p = ATTENTION_DROPOUT if row["variant"] == "attention_dropout" else 0.0
        F = torch.nn.functional

        class Attention(torch.nn.Module):
            def forward(self, x):
                b, n, _ = x.shape
                q = x.view(b, n, heads, d).transpose(1, 2)
                return F.scaled_dot_product_attention(q, q, q, is_causal=True, dropout_p=p).transpose(1, 2).reshape(
                    b, n, heads * d)

        stack = torch.nn.ModuleList([Attention() for _ in range(layers)])

        def run(x):
            for layer in stack:
                x = layer(x)
            return x
        return stack, run
    if row["variant"] == "fused":
        cls = fused_layer_class(torch)
        stack = torch.nn.ModuleList([cls(h, heads, kv, ffn, d) for _ in range(layers)]).to(device, dtype)
        c, sn = cos[:, None, :], sin[:, None, :]      # [s, 1, d]: broadcast over the batch and the heads

        def run(x):
            for layer in stack:
                x = layer(x, c, sn)
            return x
        return stack, run
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    cfg = LlamaConfig(hidden_size=h, num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=ffn,
                      head_dim=d, num_hidden_layers=layers, rms_norm_eps=EPS, rope_theta=ROPE_THETA,
                      max_position_embeddings=s, attention_dropout=0.0)
    cfg._attn_implementation = "sdpa"
    stack = torch.nn.ModuleList([LlamaDecoderLayer(cfg, i) for i in range(layers)]).to(device, dtype)
    pos = torch.arange(s, device=device)[None]
    emb = (cos[None], sin[None])

    def run(x):
        for layer in stack:
            out = layer(x, attention_mask=None, position_ids=pos, position_embeddings=emb, use_cache=False)
            x = out[0] if isinstance(out, tuple) else out
        return x
    return stack, run


def measure(torch, row: dict, layers: int, warm_s: float, reps: int, device: str) -> dict:
    """One row's per-layer forward and step medians [s] (see the module docstring)."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    stack, run = build(torch, row, layers, device, dtype)
    params = list(stack.parameters())
    width = row["heads"] * row["head_dim"] if row["variant"].startswith("attention") else row["hidden"]
    x = torch.randn(row["batch"], row["seq"], width, device=device, dtype=dtype, requires_grad=True)
    g = torch.randn_like(x)

    def clear():                                    # as a step with one micro-batch leaves the gradients
        for p in params + [x]:
            p.grad = None

    def step():
        run(x).backward(g)
        clear()

    cuda = device == "cuda"
    step()                                          # compiles the fused functions for this shape
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    t0, n = time.perf_counter(), 0
    while n < 3 or time.perf_counter() - t0 < warm_s:
        step()
        n += 1
        if n % 4 == 0:
            sync()
    sync()
    fwd, total = [], []
    for _ in range(reps):
        if cuda:
            e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            e[0].record()
            y = run(x)
            e[1].record()
            y.backward(g)
            e[2].record()
            torch.cuda.synchronize()
            fwd.append(e[0].elapsed_time(e[1]) / 1e3)
            total.append(e[0].elapsed_time(e[2]) / 1e3)
        else:
            a = time.perf_counter()
            y = run(x)
            b = time.perf_counter()
            y.backward(g)
            fwd.append(b - a)
            total.append(time.perf_counter() - a)
        clear()
    fwd.sort()
    total.sort()
    out = dict(row, layers=layers, reps=reps, warm_steps=n, layer_forward_s=fwd[len(fwd) // 2] / layers,
               layer_step_s=total[len(total) // 2] / layers, forward_s_all=fwd, step_s_all=total,
               dtype=str(dtype).replace("torch.", ""), status="ok")
    if row["variant"] == "fused":
        out["gqa"] = stack[0].gqa if row["kv_heads"] < row["heads"] else "none"
        out["attention_output_copied"] = bool(stack[0].output_copied)
    if cuda:
        from gpumodel.calibration.bench import environment_info

        out["sm_clock_mhz"] = environment_info().get("sm_clock_mhz")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=4, help="identical layers in the stack")
    ap.add_argument("--warm-s", type=float, default=2.0, help="seconds of steps before the timed ones")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=240.0, help="stop starting new rows after this many seconds")
    ap.add_argument("--cases", help="SHAPE:BATCH:SEQ,... to measure instead of the default cases (shapes: %s)"
                    % ", ".join(SHAPES))
    ap.add_argument("--dry-run", action="store_true", help="write the plan without timing it (no torch)")
    args = ap.parse_args(argv)
    cases = CASES
    if args.cases:
        cases = tuple((c.split(":")[0], int(c.split(":")[1]), int(c.split(":")[2])) for c in args.cases.split(","))
        unknown = sorted({c[0] for c in cases} - set(SHAPES))
        if unknown:
            ap.error(f"--cases: unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    rows = plan(cases)
    with open(args.out, "w", encoding="utf-8") as fh:
        if args.dry_run:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
            print(f"{len(rows)} rows written to {args.out} (dry run)")
            return 0
        import torch

        from gpumodel.calibration.bench import environment_info

        device = "cuda" if torch.cuda.is_available() else "cpu"
        torch._dynamo.config.cache_size_limit = 64
        fh.write(json.dumps({"environment": {**environment_info(device), "mode": "fused_layer", "layers": args.layers,
                                             "warm_s": args.warm_s, "reps": args.reps}}) + "\n")
        start = time.perf_counter()
        for r in rows:
            if time.perf_counter() - start > args.budget_s:
                fh.write(json.dumps(dict(r, status="skipped: budget")) + "\n")
                continue
            try:
                res = measure(torch, r, args.layers, args.warm_s, args.reps, device)
            except Exception as exc:                # a row that fails is recorded and the rest still run
                res = dict(r, status=f"error: {type(exc).__name__}: {str(exc)[:300]}")
            if device == "cuda":
                torch.cuda.empty_cache()
            fh.write(json.dumps(res) + "\n")
            fh.flush()
            if res["status"] == "ok":
                print(f"{r['shape']:16s} b{r['batch']} s{r['seq']:5d} {r['variant']:5s}: forward "
                      f"{res['layer_forward_s'] * 1e3:7.3f} ms, step {res['layer_step_s'] * 1e3:7.3f} ms a layer",
                      flush=True)
            else:
                print(f"{r['shape']} {r['variant']}: {res['status']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
