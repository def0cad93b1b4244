"""Measure what PyTorch really allocates in Hugging Face training steps and inference.

Ground truth for :mod:`gpumodel.core.memory` and :mod:`gpumodel.core.inference`. Models are built from
configs with ``AutoModelForCausalLM.from_config`` (random weights, nothing downloaded) directly
on the GPU. For every training run the script does two warm-up steps (optimizer states exist from
step 1 on), then one step with the peak counter reset at each phase boundary (forward+loss,
backward, optimizer step, zero_grad) and one more step with a single reset before it, whose
``torch.cuda.max_memory_allocated`` is the run's ``peak_bytes``. Runs that raise
``torch.OutOfMemoryError`` are recorded as ``oom``.

A training step is what a plain Hugging Face loop does::

    loss = model(input_ids=x, labels=x).loss        # the output object (logits) is dropped here
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

Precisions: ``fp32`` (fp32 model, no autocast), ``amp_bf16`` (fp32 model, forward and loss under
``torch.autocast("cuda", torch.bfloat16)``), ``bf16`` (``model.to(torch.bfloat16)``).
Optimizers: ``adamw`` (``torch.optim.AdamW``, default foreach), ``sgd``, ``sgd_momentum`` (0.9).
Checkpointing: ``model.gradient_checkpointing_enable()``.

Inference (bf16 weights, ``model.eval()``, ``torch.no_grad``): a prefill forward with
``use_cache=True`` (full logits) and ``model.generate`` (greedy, fixed number of new tokens).

A few small "probe" runs record every tensor autograd saves in the forward (shape, dtype, module),
which documents the mechanism behind the numbers.

Usage (GPU)::

    PYTHONUNBUFFERED=1 python bench/measure_memory.py --out OUTDIR --budget-s 420

and on a CPU, to check the script itself on tiny shapes::

    python bench/measure_memory.py --cpu --tiny --out /tmp/mm
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
import traceback

# ----------------------------------------------------------------------------- model shapes
# name -> (family, config kwargs). "set" says whether the shape is used to build the model
# (dev) or only to check it afterwards (heldout).
SHAPES = {
    # --- development shapes
    "llama-58m": ("llama", dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                                num_key_value_heads=8, intermediate_size=1408, vocab_size=32000,
                                max_position_embeddings=4096, tie_word_embeddings=False), "dev"),
    "llama-gqa-250m": ("llama", dict(hidden_size=1024, num_hidden_layers=16, num_attention_heads=16,
                                     num_key_value_heads=4, intermediate_size=2816, vocab_size=32000,
                                     max_position_embeddings=4096, tie_word_embeddings=False), "dev"),
    # meta-llama/Llama-3.2-1B config.json
    "llama-3.2-1b": ("llama", dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                                   num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
                                   max_position_embeddings=131072, tie_word_embeddings=True,
                                   rope_theta=500000.0, head_dim=64), "dev"),
    "gpt2-18m": ("gpt2", dict(n_embd=256, n_layer=6, n_head=4, vocab_size=50257, n_positions=1024), "dev"),
    "gpt2": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024), "dev"),
    "gpt2-medium": ("gpt2", dict(n_embd=1024, n_layer=24, n_head=16, vocab_size=50257, n_positions=1024), "dev"),
    # --- held-out shapes (not looked at while building the model)
    # TinyLlama/TinyLlama-1.1B config.json
    "tinyllama-1.1b": ("llama", dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32,
                                     num_key_value_heads=4, intermediate_size=5632, vocab_size=32000,
                                     max_position_embeddings=2048, tie_word_embeddings=False), "heldout"),
    "llama-mha-400m": ("llama", dict(hidden_size=1536, num_hidden_layers=12, num_attention_heads=12,
                                     num_key_value_heads=12, intermediate_size=4096, vocab_size=50304,
                                     max_position_embeddings=4096, tie_word_embeddings=True), "heldout"),
    # Qwen/Qwen2.5-0.5B config.json
    "qwen2.5-0.5b": ("qwen2", dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                                   num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
                                   max_position_embeddings=32768, tie_word_embeddings=True,
                                   rope_theta=1000000.0, use_sliding_window=False), "heldout"),
    "gpt2-large": ("gpt2", dict(n_embd=1280, n_layer=36, n_head=20, vocab_size=50257, n_positions=1024), "heldout"),
}

TINY_SHAPES = {
    "llama-tiny": ("llama", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 intermediate_size=160, vocab_size=512, max_position_embeddings=256,
                                 tie_word_embeddings=False), "dev"),
    "gpt2-tiny": ("gpt2", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=256), "dev"),
    "qwen2-tiny": ("qwen2", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 intermediate_size=160, vocab_size=512, max_position_embeddings=256,
                                 tie_word_embeddings=True), "heldout"),
}

# (precision, optimizer, checkpointing, batch, seq) applied to every shape, in priority order.
LLAMA_GRID = [
    ("amp_bf16", "adamw", False, 4, 1024),
    ("amp_bf16", "adamw", True, 8, 2048),
    ("bf16", "adamw", False, 4, 2048),
    ("fp32", "adamw", False, 2, 1024),
    ("amp_bf16", "sgd", False, 8, 512),
    ("bf16", "sgd_momentum", True, 16, 1024),
    ("fp32", "sgd_momentum", True, 4, 2048),
    ("amp_bf16", "adamw", False, 1, 4096),
    ("bf16", "sgd", False, 2, 1024),
]
GPT2_GRID = [
    ("amp_bf16", "adamw", False, 8, 1024),
    ("amp_bf16", "adamw", True, 16, 1024),
    ("bf16", "adamw", False, 4, 1024),
    ("fp32", "adamw", False, 4, 512),
    ("amp_bf16", "sgd", False, 16, 512),
    ("bf16", "sgd_momentum", True, 32, 1024),
    ("fp32", "sgd_momentum", True, 8, 1024),
    ("amp_bf16", "adamw", False, 2, 256),
    ("bf16", "sgd", False, 8, 512),
]
# extra mechanisms on a few shapes: eager attention, use_cache=False, and runs that must not fit
EXTRAS = [
    # shape, precision, optimizer, ckpt, batch, seq, attn, use_cache
    ("llama-58m", "amp_bf16", "adamw", False, 4, 1024, "eager", True),
    ("llama-58m", "bf16", "adamw", False, 4, 1024, "eager", True),
    ("gpt2", "amp_bf16", "adamw", False, 4, 1024, "eager", True),
    ("llama-gqa-250m", "amp_bf16", "adamw", False, 4, 2048, "sdpa", False),
    ("llama-3.2-1b", "amp_bf16", "adamw", False, 16, 4096, "sdpa", True),   # logits alone ~ 34 GB fp32: OOM
    ("gpt2-medium", "fp32", "adamw", False, 64, 1024, "sdpa", True),       # OOM
    ("llama-mha-400m", "bf16", "adamw", False, 4, 1024, "eager", True),
    ("tinyllama-1.1b", "amp_bf16", "adamw", False, 8, 2048, "sdpa", False),
    ("qwen2.5-0.5b", "amp_bf16", "adamw", False, 16, 4096, "sdpa", True),  # OOM
    ("gpt2-large", "amp_bf16", "adamw", False, 64, 1024, "sdpa", True),    # OOM?
]
TINY_GRID = [
    ("amp_bf16", "adamw", False, 2, 64), ("bf16", "sgd_momentum", True, 2, 64), ("fp32", "sgd", False, 1, 32),
]
# inference: shape, batch, prompt length, new tokens
INFER = [
    ("llama-58m", 8, 1024, 64), ("llama-gqa-250m", 16, 2048, 64), ("llama-3.2-1b", 8, 4096, 64),
    ("llama-3.2-1b", 32, 1024, 32), ("gpt2", 16, 512, 64), ("gpt2-medium", 8, 960, 64),
    ("tinyllama-1.1b", 16, 1024, 64), ("qwen2.5-0.5b", 8, 2048, 64), ("gpt2-large", 8, 512, 64),
    ("llama-mha-400m", 4, 2048, 64),
]
TINY_INFER = [("llama-tiny", 2, 32, 4), ("gpt2-tiny", 2, 32, 4), ("qwen2-tiny", 2, 32, 4)]
PROBES = [  # shape, precision, attn, batch, seq
    ("llama-58m", "amp_bf16", "sdpa", 2, 256), ("llama-58m", "bf16", "sdpa", 2, 256),
    ("llama-58m", "fp32", "sdpa", 2, 256), ("llama-58m", "amp_bf16", "eager", 2, 256),
    ("gpt2-18m", "amp_bf16", "sdpa", 2, 256), ("gpt2-18m", "bf16", "sdpa", 2, 256),
    ("gpt2-18m", "fp32", "sdpa", 2, 256), ("llama-gqa-250m", "amp_bf16", "sdpa", 2, 256),
    ("llama-gqa-250m", "bf16", "sdpa", 2, 256),
]
TINY_PROBES = [("llama-tiny", "bf16", "sdpa", 2, 32), ("gpt2-tiny", "fp32", "sdpa", 2, 32)]


def build_model(shapes, shape, attn, device, torch):
    import transformers

    family, kwargs, _ = shapes[shape]
    cls = {"llama": transformers.LlamaConfig, "gpt2": transformers.GPT2Config, "qwen2": transformers.Qwen2Config}[family]
    cfg = cls(**kwargs)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    model = model.to(device=device, dtype=torch.float32)
    return model, cfg


def make_optimizer(name, params, torch):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-5)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-5)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=1e-5, momentum=0.9)
    raise ValueError(name)


class Meter:
    def __init__(self, torch, device):
        self.torch, self.cuda = torch, device == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def reset(self):
        if self.cuda:
            self.sync()
            self.torch.cuda.reset_peak_memory_stats()

    def alloc(self):
        self.sync()
        return self.torch.cuda.memory_allocated() if self.cuda else 0

    def peak(self):
        self.sync()
        return self.torch.cuda.max_memory_allocated() if self.cuda else 0

    def reserved(self):
        return self.torch.cuda.max_memory_reserved() if self.cuda else 0


def free(torch, device):
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def train_run(spec, shapes, device, torch):
    shape, precision, optimizer, ckpt, batch, seq, attn, use_cache = spec
    m = Meter(torch, device)
    row = dict(kind="train", shape=shape, set=shapes[shape][2], family=shapes[shape][0], precision=precision,
               optimizer=optimizer, checkpointing=ckpt, batch=batch, seq=seq, attn=attn, use_cache=use_cache)
    model = opt = x = None
    t0 = time.time()
    try:
        m.reset()
        base = m.alloc()
        row["base_alloc"] = base  # bytes already allocated before the run (cuBLAS workspace after run 1)
        model, cfg = build_model(shapes, shape, attn, device, torch)
        if precision in ("bf16",):
            model = model.to(torch.bfloat16)
        model.train()
        if ckpt:
            model.gradient_checkpointing_enable()
        row["n_params"] = sum(p.numel() for p in model.parameters())
        row["param_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
        row["alloc_model"] = m.alloc() - base
        opt = make_optimizer(optimizer, model.parameters(), torch)
        amp = precision.startswith("amp_")
        vocab = cfg.vocab_size
        gen = torch.Generator(device=device).manual_seed(0)
        x = torch.randint(0, vocab, (batch, seq), device=device, generator=gen)

        def forward():
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
                return model(input_ids=x, labels=x, use_cache=use_cache).loss

        for _ in range(2):
            loss = forward()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss
        # phase-resolved step
        row["alloc_steady"] = m.alloc() - base
        m.reset()
        loss = forward()
        row["alloc_after_fwd"] = m.alloc() - base
        row["peak_fwd"] = m.peak() - base
        m.reset()
        loss.backward()
        del loss
        row["alloc_after_bwd"] = m.alloc() - base
        row["peak_bwd"] = m.peak() - base
        m.reset()
        opt.step()
        row["alloc_after_opt"] = m.alloc() - base
        row["peak_opt"] = m.peak() - base
        opt.zero_grad(set_to_none=True)
        row["alloc_after_zero"] = m.alloc() - base
        # whole step, one reset
        m.reset()
        loss = forward()
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad(set_to_none=True)
        row["peak_bytes"] = m.peak() - base
        row["max_reserved"] = m.reserved()
        row["status"] = "ok"
    except torch.OutOfMemoryError as exc:
        row["status"] = "oom"
        row["error"] = str(exc).splitlines()[0][:300]
    except Exception as exc:  # a broken run is recorded, the sweep goes on
        row["status"] = "error"
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        traceback.print_exc()
    finally:
        model = opt = x = None  # drop the references (closures above share these names)
        free(torch, device)
    row["seconds"] = round(time.time() - t0, 2)
    return row


def infer_run(spec, shapes, device, torch):
    shape, batch, prompt, new = spec
    m = Meter(torch, device)
    row = dict(kind="infer", shape=shape, set=shapes[shape][2], family=shapes[shape][0], dtype="bf16",
               batch=batch, seq=prompt, new_tokens=new, attn="sdpa")
    model = x = None
    t0 = time.time()
    try:
        m.reset()
        base = m.alloc()
        row["base_alloc"] = base
        model, cfg = build_model(shapes, shape, "sdpa", device, torch)
        model = model.to(torch.bfloat16).eval()
        row["n_params"] = sum(p.numel() for p in model.parameters())
        row["alloc_model"] = m.alloc() - base
        gen = torch.Generator(device=device).manual_seed(0)
        x = torch.randint(0, cfg.vocab_size, (batch, prompt), device=device, generator=gen)
        with torch.no_grad():
            out = model(input_ids=x, use_cache=True)  # warm
            del out
            free(torch, device)
            m.reset()
            out = model(input_ids=x, use_cache=True)
            row["alloc_after_prefill"] = m.alloc() - base
            row["peak_prefill"] = m.peak() - base
            del out
            free(torch, device)
            m.reset()
            seqs = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=new,
                                  min_new_tokens=new, do_sample=False, pad_token_id=0)
            row["peak_generate"] = m.peak() - base
            row["generated"] = int(seqs.shape[1] - prompt)
            del seqs
        row["status"] = "ok"
    except torch.OutOfMemoryError as exc:
        row["status"] = "oom"
        row["error"] = str(exc).splitlines()[0][:300]
    except Exception as exc:
        row["status"] = "error"
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        traceback.print_exc()
    finally:
        del model, x
        free(torch, device)
    row["seconds"] = round(time.time() - t0, 2)
    return row


def probe_run(spec, shapes, device, torch):
    """Every tensor autograd saves during one forward+loss, with the module that saved it."""
    shape, precision, attn, batch, seq = spec
    model, cfg = build_model(shapes, shape, attn, device, torch)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    current = ["(top)"]
    names = {mod: name for name, mod in model.named_modules()}

    def pre(mod, args):
        current.append(names.get(mod, "?"))

    def post(mod, args, out):
        current.pop()

    handles = [mod.register_forward_pre_hook(pre) for mod in model.modules()]
    handles += [mod.register_forward_hook(post) for mod in model.modules()]
    params = {p.data_ptr() for p in model.parameters()}
    saved = []

    def pack(t):
        try:
            ptr = t.untyped_storage().data_ptr()
            nbytes = t.untyped_storage().nbytes()
        except Exception:
            ptr, nbytes = t.data_ptr(), t.numel() * t.element_size()
        saved.append(dict(module=current[-1], shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""),
                          ptr=ptr, storage_bytes=nbytes, is_param=ptr in params,
                          grad_fn=type(t.grad_fn).__name__ if t.grad_fn is not None else None))
        return t

    x = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
    amp = precision.startswith("amp_")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=x, labels=x).loss
    for h in handles:
        h.remove()
    del loss, model
    free(torch, device)
    return dict(kind="probe", shape=shape, precision=precision, attn=attn, batch=batch, seq=seq,
                config={k: v for k, v in shapes[shape][1].items()}, saved=saved)


def environment(torch, device):
    import transformers

    env = dict(torch=torch.__version__, transformers=transformers.__version__, python=platform.python_version(),
               cuda=getattr(torch.version, "cuda", None), device=device,
               date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpu_total_bytes"] = torch.cuda.get_device_properties(0).total_memory
        free_b, total_b = torch.cuda.mem_get_info()
        env["mem_get_info_at_start"] = [free_b, total_b]
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception as exc:  # pragma: no cover
            env["driver"] = f"unknown ({exc})"
    return env


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (checks the script, numbers are zeros)")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes only")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new runs after this many seconds")
    ap.add_argument("--only", choices=["train", "infer", "probe"], action="append")
    args = ap.parse_args(argv)

    import torch

    device = "cpu" if args.cpu else "cuda"
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    shapes = TINY_SHAPES if args.tiny else SHAPES
    env = environment(torch, device)
    if device == "cuda":
        # CUDA context and library handles, as nvidia-smi would see them, measured once
        torch.ones(1, device="cuda")
        a = torch.randn(256, 256, device="cuda")
        (a @ a).sum().item()
        f, t = torch.cuda.mem_get_info()
        env["after_init_used_bytes"] = t - f
        env["after_init_allocated"] = torch.cuda.memory_allocated()
        env["after_init_reserved"] = torch.cuda.memory_reserved()
        del a
    with open(os.path.join(args.out, "environment.json"), "w") as fh:
        json.dump(env, fh, indent=1)
    print(json.dumps(env), flush=True)

    runs = []
    only = set(args.only or ["train", "infer", "probe"])
    if "probe" in only:
        runs += [("probe", p) for p in (TINY_PROBES if args.tiny else PROBES)]
    if "train" in only:
        grid_runs = []
        for shape, (family, _, _) in shapes.items():
            grid = TINY_GRID if args.tiny else (GPT2_GRID if family == "gpt2" else LLAMA_GRID)
            for prec, optim, ckpt, b, s in grid:
                grid_runs.append((shape, prec, optim, ckpt, b, s, "sdpa", True))
        # interleave shapes so that a timeout still leaves every shape covered
        by_rank = {}
        for shape in shapes:
            for i, r in enumerate([r for r in grid_runs if r[0] == shape]):
                by_rank.setdefault(i, []).append(r)
        ordered = [r for i in sorted(by_rank) for r in by_rank[i]]
        extras = [] if args.tiny else EXTRAS
        if args.tiny:
            extras = [("llama-tiny", "amp_bf16", "adamw", False, 2, 64, "eager", True),
                      ("qwen2-tiny", "bf16", "adamw", False, 2, 64, "sdpa", False)]
        cut = len(ordered) * 2 // 3
        runs += [("train", r) for r in ordered[:cut]]
        if "infer" in only:
            runs += [("infer", r) for r in (TINY_INFER if args.tiny else INFER)]
        runs += [("train", r) for r in extras]
        runs += [("train", r) for r in ordered[cut:]]
    elif "infer" in only:
        runs += [("infer", r) for r in (TINY_INFER if args.tiny else INFER)]

    rows_path = os.path.join(args.out, "runs.jsonl")
    probe_path = os.path.join(args.out, "probes.jsonl")
    n_done = 0
    with open(rows_path, "a") as rows_fh, open(probe_path, "a") as probe_fh:
        for kind, spec in runs:
            if time.time() - t_start > args.budget_s:
                print(f"budget reached, {len(runs) - n_done} runs not started", flush=True)
                break
            if kind == "probe":
                try:
                    rec = probe_run(spec, shapes, device, torch)
                    probe_fh.write(json.dumps(rec) + "\n")
                    probe_fh.flush()
                    print(f"probe {spec}: {len(rec['saved'])} saved tensors", flush=True)
                except Exception:
                    traceback.print_exc()
                    free(torch, device)
            else:
                row = (train_run if kind == "train" else infer_run)(spec, shapes, device, torch)
                rows_fh.write(json.dumps(row) + "\n")
                rows_fh.flush()
                peak = row.get("peak_bytes", row.get("peak_generate"))
                print(f"[{time.time() - t_start:6.1f}s] {kind} {spec} -> {row['status']} "
                      f"peak={peak if peak is None else round(peak / 2**30, 3)} GiB ({row['seconds']} s)", flush=True)
            n_done += 1
    print(f"done {n_done}/{len(runs)} in {time.time() - t_start:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
