"""Measure serving steps on the local GPU: ground truth for ``gm.prefill_time``, ``gm.decode_step_time``
and ``gm.generation_time``.

Two engines are measured.

``graph``: a lean Llama-style decoder written in plain PyTorch (no torch.compile): token embedding;
per layer ``F.rms_norm``, one fused QKV projection, rotary embeddings (rotate-half form), a write of the
new keys and values into a static KV cache, ``F.scaled_dot_product_attention`` over the cache (causal for
prefill, one query per sequence for decode, ``enable_gqa`` for grouped KV heads), the output projection,
``F.rms_norm``, one fused gate/up projection, ``silu(gate) * up`` and the down projection; then the final
norm and the LM head on the last position only. Weights are bf16, random (values do not change the
kernels). A prefill (``batch`` x ``prompt_len`` tokens into an empty cache) and a decode step (one token
per sequence at position ``context_len``, attending over ``context_len + 1`` keys) are each captured once
as a CUDA graph and replayed; the time is the median over replays of CUDA events around one replay. The
largest shapes keep their real layer sizes with fewer layers (``layers`` < ``full_layers``); for those one
decoder layer alone is also captured and timed (``layer_s``).

``hf``: Hugging Face ``generate`` (eager, greedy, dynamic cache, SDPA attention) on models built from
configs (nothing is downloaded): wall time of ``max_new_tokens=1`` (time to first token) and of
``max_new_tokens=n``, so that ``tpot = (t_n - t_1) / (n - 1)``.

Cases are ordered so that the most informative come first (a spread over every shape, then the rest);
the run stops starting new cases once ``--budget-s`` has passed and every line is flushed as it is made.
Each case carries ``split`` ("fit" or "holdout"), fixed here from a hash of the case, before anything
is compared.

Usage::

    python bench/measure_serving.py --out measured.jsonl --budget-s 330   # on a CUDA machine (~6 min)
    python bench/measure_serving.py --out steps.jsonl --budget-s 70 --no-hf   # CUDA-graph steps only (~80 s)
    python bench/measure_serving.py --out steps.jsonl --no-hf --sustain-s 0.5  # each timed at the loaded clock
    python bench/measure_serving.py --out x.jsonl --dry-run               # tiny shapes on the CPU
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import zlib

# name, hidden, layers measured, heads, kv_heads, head_dim, ffn, vocab, layers of the real model
SHAPES = [
    ("llama-3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256, 16),
    ("llama-3-8b", 4096, 32, 32, 8, 128, 14336, 128256, 32),
    ("llama-2-7b", 4096, 32, 32, 32, 128, 11008, 32000, 32),
    ("llama-3-70b", 8192, 4, 64, 8, 128, 28672, 128256, 80),
    ("llama-2-13b", 5120, 10, 40, 40, 128, 13824, 32000, 40),
    ("qwen2.5-7b", 3584, 28, 28, 4, 128, 18944, 152064, 28),
]
TINY_SHAPES = [("tiny-gqa", 64, 2, 4, 2, 16, 128, 256, 2), ("tiny-mha", 64, 2, 4, 4, 16, 128, 256, 4)]
# (batch, context_len) of decode steps and (batch, prompt_len) of prefills; core first, then the rest
DECODE_CORE = [(1, 128), (1, 2048), (16, 1024), (64, 4096), (256, 512), (1, 32768)]
PREFILL_CORE = [(1, 128), (1, 2048), (8, 512), (1, 8192)]
DECODE_MORE = [(1, 512), (4, 4096), (32, 2048), (128, 1024), (8, 16384), (256, 2048), (1, 8192), (64, 512),
               (16, 8192), (2, 32768), (128, 128)]
PREFILL_MORE = [(1, 512), (4, 2048), (16, 128), (2, 4096), (1, 4096), (32, 256)]
TINY_DECODE, TINY_PREFILL = [(1, 8), (2, 16)], [(1, 8), (2, 16)]
# Hugging Face generate: name, model_type, config keyword arguments
HF_MODELS = [
    ("llama-3.2-1b", "llama", dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                                   num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
                                   tie_word_embeddings=True, rope_theta=500000.0)),
    ("qwen2-0.5b", "qwen2", dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                                 num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
                                 tie_word_embeddings=True)),
]
TINY_HF = [("tiny-llama", "llama", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=128, vocab_size=256))]
# (batch, prompt_len, new_tokens)
HF_CASES = [(1, 128, 64), (1, 1024, 64), (8, 512, 32), (32, 128, 32)]
TINY_HF_CASES = [(1, 8, 4)]
KV_LIMIT_BYTES = 48e9          # leave room for weights, activations and graph pools on a 141 GB H200
PREFILL_TOKEN_LIMIT = 16384


#: one decoder layer, unfused (CUDA graph of PyTorch's kernels) and torch.compile'd (inductor's fused kernels in a
#: CUDA graph), paired: (shape, kind, batch, context_len or prompt_len)
COMPILED_CASES = [("llama-3-8b", "decode", 1, 1024), ("llama-3-8b", "decode", 16, 2048), ("llama-3-8b", "decode", 64, 1024),
                  ("llama-3-8b", "prefill", 1, 512), ("llama-3-8b", "prefill", 1, 2048), ("llama-3-8b", "prefill", 4, 1024),
                  ("llama-3-70b", "decode", 1, 1024), ("llama-3-70b", "decode", 32, 2048), ("llama-3-70b", "prefill", 1, 1024),
                  ("llama-3.2-1b", "decode", 8, 1024), ("llama-3.2-1b", "prefill", 2, 1024)]
TINY_COMPILED = [("tiny-gqa", "decode", 1, 8), ("tiny-gqa", "prefill", 2, 16)]


def compiled_plan(tiny: bool = False) -> list[dict]:
    """The paired one-layer cases of ``--compiled`` (module notes)."""
    shapes = {s[0]: s for s in (TINY_SHAPES if tiny else SHAPES)}
    cases = []
    for name, kind, b, n in (TINY_COMPILED if tiny else COMPILED_CASES):
        shape = {**shape_fields(shapes[name]), "layers": 1}
        size = {"context_len": n} if kind == "decode" else {"prompt_len": n}
        cases.append(dict(kind=kind, engine="compiled", batch=b, dtype="bf16", **size, **shape))
    return cases


def run_compiled(torch, case: dict, weights: dict, device: str) -> dict:
    """One layer timed as a CUDA graph of its unfused kernels, then torch.compile'd (default mode) and captured."""
    _, one_layer, caches = make_step(torch, case, weights, device)
    graph = time_graph(torch, one_layer, device)
    torch._dynamo.reset()                     # each case compiles afresh (no recompile limit across cases)
    fused = torch.compile(one_layer, dynamic=False)
    t = time.perf_counter()
    fused()
    fused()                                   # compiled and warm
    compile_s = time.perf_counter() - t
    comp = time_graph(torch, fused, device)
    del caches
    return dict(case, layer_s_graph=statistics.median(graph), layer_s_compiled=statistics.median(comp),
                layer_s_compiled_all=comp, compile_s=compile_s, seconds=statistics.median(comp))


def split_of(key: str) -> str:
    """'holdout' for about a quarter of the cases, chosen by a hash of the case (fixed before measuring)."""
    return "holdout" if zlib.crc32(key.encode()) % 4 == 0 else "fit"


def shape_fields(shape: tuple) -> dict:
    """The case keys of one row of ``SHAPES`` or ``TINY_SHAPES``."""
    name, hidden, layers, heads, kv, hd, ffn, vocab, full = shape
    return dict(shape=name, hidden=hidden, layers=layers, heads=heads, kv_heads=kv, head_dim=hd, ffn=ffn,
                vocab=vocab, full_layers=full)


def plan(tiny: bool = False) -> list[dict]:
    """Every case in the order it is run: a core spread over every shape, HF generate, then the rest."""
    shapes = TINY_SHAPES if tiny else SHAPES
    core = [(TINY_DECODE, TINY_PREFILL)] if tiny else [(DECODE_CORE, PREFILL_CORE), (DECODE_MORE, PREFILL_MORE)]
    cases: list[dict] = []

    def lean(decode, prefill):
        for s in shapes:
            shape = shape_fields(s)
            kv_per_token = 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * 2
            for b, c in decode:
                if b * (c + 1) * kv_per_token <= KV_LIMIT_BYTES:
                    cases.append(dict(kind="decode", engine="graph", batch=b, context_len=c, **shape))
            for b, p in prefill:
                if b * p <= PREFILL_TOKEN_LIMIT and b * p * kv_per_token <= KV_LIMIT_BYTES:
                    cases.append(dict(kind="prefill", engine="graph", batch=b, prompt_len=p, **shape))

    lean(*core[0])
    for name, family, cfg in (TINY_HF if tiny else HF_MODELS):
        for b, p, n in (TINY_HF_CASES if tiny else HF_CASES):
            cases.append(dict(kind="generate", engine="hf", shape=name, family=family, config=cfg, batch=b,
                              prompt_len=p, new_tokens=n))
    for extra in core[1:]:
        lean(*extra)
    for c in cases:
        c["dtype"] = "bf16"
        c["split"] = split_of(json.dumps({k: v for k, v in c.items() if k != "config"}, sort_keys=True))
    return cases


# ----------------------------------------------------------------------------- the lean decoder
def build_weights(torch, case: dict, device: str):
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    h, hd, ffn, vocab = case["hidden"], case["head_dim"], case["ffn"], case["vocab"]
    qkv_out = (case["heads"] + 2 * case["kv_heads"]) * hd

    def w(*shape):
        return torch.empty(*shape, device=device, dtype=dt).normal_(0.0, 0.02)

    layers = [dict(attn_norm=torch.ones(h, device=device, dtype=dt), wqkv=w(qkv_out, h),
                   wo=w(h, case["heads"] * hd), ffn_norm=torch.ones(h, device=device, dtype=dt),
                   w13=w(2 * ffn, h), w2=w(h, ffn)) for _ in range(case["layers"])]
    return dict(embed=w(vocab, h), layers=layers, norm=torch.ones(h, device=device, dtype=dt),
                lm_head=w(vocab, h), dtype=dt)


def rope_tables(torch, positions: int, head_dim: int, device: str, dtype):
    inv = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(positions, device=device, dtype=torch.float32), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def layer_forward(torch, F, p, h, kc, vc, cos, sin, pos, case):
    """One decoder layer on h [batch, T, hidden]; writes keys/values at pos..pos+T of the caches."""
    b, t, hidden = h.shape
    nh, nkv, hd = case["heads"], case["kv_heads"], case["head_dim"]
    x = F.rms_norm(h, (hidden,), p["attn_norm"])
    q, k, v = F.linear(x, p["wqkv"]).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
    q = q.view(b, t, nh, hd).transpose(1, 2)
    k = k.view(b, t, nkv, hd).transpose(1, 2)
    v = v.view(b, t, nkv, hd).transpose(1, 2)

    def rope(z):
        z1, z2 = z[..., : hd // 2], z[..., hd // 2:]
        return z * cos + torch.cat([-z2, z1], dim=-1) * sin

    q, k = rope(q), rope(k)
    kc[:, :, pos:pos + t] = k
    vc[:, :, pos:pos + t] = v
    o = F.scaled_dot_product_attention(q, kc[:, :, :pos + t], vc[:, :, :pos + t], is_causal=t > 1,
                                       enable_gqa=nkv != nh)
    h = h + F.linear(o.transpose(1, 2).reshape(b, t, nh * hd), p["wo"])
    x = F.rms_norm(h, (hidden,), p["ffn_norm"])
    gate, up = F.linear(x, p["w13"]).chunk(2, dim=-1)
    return h + F.linear(F.silu(gate) * up, p["w2"])


def make_step(torch, case: dict, weights: dict, device: str):
    """The step function and its static inputs for one case (prefill or decode)."""
    import torch.nn.functional as F

    b = case["batch"]
    t = case["prompt_len"] if case["kind"] == "prefill" else 1
    pos = 0 if case["kind"] == "prefill" else case["context_len"]
    dt = weights["dtype"]
    caches = [(torch.zeros(b, case["kv_heads"], pos + t, case["head_dim"], device=device, dtype=dt),
               torch.zeros(b, case["kv_heads"], pos + t, case["head_dim"], device=device, dtype=dt))
              for _ in weights["layers"]]
    cos, sin = rope_tables(torch, pos + t, case["head_dim"], device, dt)
    cos, sin = cos[pos:pos + t], sin[pos:pos + t]
    tokens = torch.randint(0, case["vocab"], (b, t), device=device)
    h_in = torch.randn(b, t, case["hidden"], device=device, dtype=dt)

    def step():
        h = F.embedding(tokens, weights["embed"])
        for p, (kc, vc) in zip(weights["layers"], caches):
            h = layer_forward(torch, F, p, h, kc, vc, cos, sin, pos, case)
        last = F.rms_norm(h[:, -1], (case["hidden"],), weights["norm"])
        return F.linear(last, weights["lm_head"])

    def one_layer():
        kc, vc = caches[0]
        return layer_forward(torch, F, weights["layers"][0], h_in, kc, vc, cos, sin, pos, case)

    return step, one_layer, caches


def capture_graph(torch, fn):
    """fn run once on a side stream, then captured as a CUDA graph, replayed once and synchronised."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()                                   # cuBLAS handles, workspaces, kernel selection
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    return g


#: seconds of back-to-back replays before the timed ones (``--sustain-s``; 0 in the committed files, measured so)
SUSTAIN_S = 0.0


def sustain(torch, graph) -> None:
    """Replay ``graph`` back to back for ``SUSTAIN_S`` seconds (``--sustain-s``), each replay synchronised."""
    t_end = time.perf_counter() + SUSTAIN_S
    while time.perf_counter() < t_end:
        graph.replay()
        torch.cuda.synchronize()


def time_graph(torch, fn, device: str, target_s: float = 0.15, max_reps: int = 20) -> list[float]:
    """Capture fn as a CUDA graph and time replays with CUDA events [s]; eager wall time on the CPU."""
    if device != "cuda":
        fn()
        t = time.perf_counter()
        fn()
        return [time.perf_counter() - t]
    g = capture_graph(torch, fn)

    def once():
        a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); z.record(); torch.cuda.synchronize()
        return a.elapsed_time(z) / 1e3

    first = once()
    sustain(torch, g)                         # back-to-back replays first: the clock an engine's steps run at
    reps = int(min(max_reps, max(2, target_s / max(first, 1e-6))))
    times = [once() for _ in range(reps)]
    g = None  # drop the graph (once() shares the name)
    return times


def run_lean(torch, case: dict, weights: dict, device: str) -> dict:
    step, one_layer, caches = make_step(torch, case, weights, device)
    times = time_graph(torch, step, device)
    row = dict(case, seconds=statistics.median(times), seconds_all=times)
    if case["layers"] < case["full_layers"]:
        lt = time_graph(torch, one_layer, device)
        row["layer_s"] = statistics.median(lt)
    del caches
    return row


# ----------------------------------------------------------------------------- Hugging Face generate
def run_hf(torch, case: dict, device: str, reps: int) -> dict:
    import transformers

    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[case["family"]]
    cfg = cls(**case["config"], max_position_embeddings=8192)
    cfg._attn_implementation = "sdpa"
    cfg.eos_token_id = None
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    model = model.to(torch.bfloat16 if device == "cuda" else torch.float32).eval()
    ids = torch.randint(1, cfg.vocab_size, (case["batch"], case["prompt_len"]), device=device)
    mask = torch.ones_like(ids)

    def gen(n):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, pad_token_id=0, eos_token_id=None)
        if device == "cuda":
            torch.cuda.synchronize()
        assert out.shape[1] == ids.shape[1] + n, out.shape
        return time.perf_counter() - t

    n = case["new_tokens"]
    gen(2)                                                   # warm-up
    t1 = [gen(1) for _ in range(reps)]
    tn = [gen(n) for _ in range(reps)]
    n_params = sum(p.numel() for p in model.parameters())
    model = None  # drop the weights (gen() shares the name)
    ttft, total = statistics.median(t1), statistics.median(tn)
    return dict(case, n_params=n_params, ttft_s=ttft, seconds=total, tpot_s=(total - ttft) / (n - 1),
                ttft_s_all=t1, seconds_all=tn, transformers=transformers.__version__, attn="sdpa")


# ----------------------------------------------------------------------------- driver
def environment(torch, device: str) -> dict:
    env = {"kind": "environment", "torch": torch.__version__, "python": platform.python_version(),
           "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu", "cuda": torch.version.cuda,
           "date": time.strftime("%Y-%m-%d")}
    try:
        import transformers
        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    return env


def failed(case: dict, exc: Exception) -> dict:
    """The row of a case that raised ``exc`` (one bad case must not lose the rest of the run)."""
    return dict(case, status="error", error=f"{type(exc).__name__}: {exc}"[:500])


def write_row(torch, out, row: dict, device: str, t0: float) -> dict:
    """Free the cached device memory, stamp ``row`` with the seconds since ``t0`` and write it as one
    flushed JSON line of ``out``."""
    if device == "cuda":
        torch.cuda.empty_cache()
    row["elapsed_s"] = round(time.perf_counter() - t0, 2)
    out.write(json.dumps(row) + "\n")
    out.flush()
    return row


def arguments(doc: str, budget_s: float) -> argparse.ArgumentParser:
    """The options of a serving measurement: ``--out``, ``--budget-s`` (default ``budget_s``), ``--dry-run``,
    ``--sustain-s`` (set :data:`SUSTAIN_S` from it with :func:`set_sustain`)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON lines file to write")
    ap.add_argument("--budget-s", type=float, default=budget_s, help="start no new case after this many seconds")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU (a smoke test)")
    ap.add_argument("--sustain-s", type=float, default=0.0,
                    help="replay each graph back to back this long before timing it, so that the SM clock has "
                         "fallen to where an engine's back-to-back steps run (the power limit takes it within "
                         "0.1 s on an H100); 0: time from the state the case's setup left")
    return ap


def set_sustain(args) -> None:
    """:data:`SUSTAIN_S` from the parsed ``--sustain-s``."""
    global SUSTAIN_S
    SUSTAIN_S = max(0.0, args.sustain_s)


def main(argv=None) -> int:
    ap = arguments(__doc__, budget_s=330.0)
    ap.add_argument("--hf-reps", type=int, default=3)
    ap.add_argument("--compiled", action="store_true",
                    help="only the paired one-layer cases: unfused CUDA graph against torch.compile (compiled_plan)")
    ap.add_argument("--no-hf", action="store_true", help="leave out the Hugging Face generate cases (graph engine only)")
    args = ap.parse_args(argv)
    import torch

    set_sustain(args)

    device = "cpu" if args.dry_run else "cuda"
    t0 = time.perf_counter()
    cases = compiled_plan(tiny=args.dry_run) if args.compiled else plan(tiny=args.dry_run)
    if args.no_hf:
        cases = [c for c in cases if c["engine"] != "hf"]
    weights, weights_key = None, None
    with open(args.out, "w") as out:
        out.write(json.dumps({**environment(torch, device), "sustain_s": SUSTAIN_S}) + "\n")
        for i, case in enumerate(cases):
            elapsed = time.perf_counter() - t0
            if elapsed > args.budget_s:
                out.write(json.dumps({"kind": "stopped", "elapsed_s": elapsed, "done": i, "planned": len(cases)})
                          + "\n")
                break
            try:
                if case["engine"] == "hf":
                    weights, weights_key = None, None
                    if device == "cuda":
                        torch.cuda.empty_cache()
                    row = run_hf(torch, case, device, 1 if args.dry_run else args.hf_reps)
                else:
                    if weights_key != (case["shape"], case["layers"]):
                        weights = None
                        if device == "cuda":
                            torch.cuda.empty_cache()
                        weights, weights_key = build_weights(torch, case, device), (case["shape"], case["layers"])
                    run = run_compiled if case["engine"] == "compiled" else run_lean
                    row = run(torch, case, weights, device)
                row["status"] = "ok"
            except torch.OutOfMemoryError:
                row = dict(case, status="oom")
            except Exception as e:
                row = failed(case, e)
            write_row(torch, out, row, device, t0)
            print(f"{row['elapsed_s']:7.1f}s {case['engine']:5s} {case['kind']:8s} {case['shape']:14s} "
                  f"b={case['batch']:<4d} {case.get('context_len', case.get('prompt_len'))!s:>6s} "
                  f"{row['status']} {row.get('seconds', float('nan')) * 1e3:9.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
