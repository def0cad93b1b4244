"""Measure the host's per-op costs and training-step times of Hugging Face causal LMs on the local GPU.

Ground truth for ``gm.training_step_time``. Writes JSON lines to ``--out``:

* ``{"kind": "environment", ...}``: torch, transformers, Python, GPU, CPU.
* ``{"kind": "host", "bench": ...}``: microbenchmarks of the host side of eager PyTorch (the only
  data the host costs of the model are fitted from): launch of a tiny kernel and the device's floor
  per tiny kernel (CUDA-graph replay), dispatch of single ops with and without autograd recording and
  under autocast, autograd's backward per op, ``nn.Module`` call overhead, optimizer steps over N
  small tensors (AdamW foreach / fused / for-loop, SGD), ``clip_grad_norm_``, ``zero_grad``,
  ``.item()`` round trip.
* ``{"kind": "layers", ...}``: per family, tiny models (hidden 64) of 2 and 4 layers: host time of
  forward / backward / optimizer and the kernels each phase launches (torch.profiler), so the
  difference gives per-layer dispatch counts.
* ``{"kind": "host", "bench": "optimizer_sweep", ...}``: AdamW fused / foreach and SGD steps over 1-512
  tensors of 4096 and 2**20 elements (host time per step against the tensor count; wall time).
* ``{"kind": "layers", "experts_requested": "eager", ...}``: the MoE families' tiny models with Hugging Face's
  eager expert loop (``experts_implementation="eager"``) at 4 and 8 experts; ``host_backward_accumulate_s``:
  a second micro-batch's backward into existing gradients (llama, gpt2, mixtral).
* ``{"kind": "layers", "compile": true, ...}``: ``torch.compile``'d tiny llama and gpt2 of 2 and 4 layers: host
  time per phase and kernels launched (``triton_kernels``: inductor's generated ones), so host time per launch.
* ``{"kind": "step", ...}``: steady-state training steps (models built from configs; nothing is
  downloaded): ``--warmup`` steps, then ``--steps`` timed steps, each synchronised before and after
  and timed by the wall clock (``step_s_all``, median ``step_s_median``) and by CUDA events per
  phase, with the host's enqueue time per phase. ``held_out`` is fixed before measuring by a hash
  of the run's key (see :func:`held_out`). The first run of each shape is also profiled once
  (kernels launched per phase). ``sm_clock_mhz`` holds the SM clock after the timed steps and after the
  profiled one: the profiler's host load leaves the GPU idle between kernels, so the profiled step runs at a
  higher clock than the timed ones.

A step is: ``gradient_accumulation_steps`` x (forward under autocast when the precision is
``amp_*``; ``loss / accumulation``; ``backward``), then ``clip_grad_norm_`` when clipping, then
``opt.step()`` and ``opt.zero_grad(set_to_none=True)``, then a synchronisation (as ``loss.item()``
would). ``amp_bf16`` = fp32 model under ``torch.autocast("cuda", torch.bfloat16)``; ``bf16`` =
``model.to(torch.bfloat16)``; ``checkpointing`` = ``model.gradient_checkpointing_enable()``.

Runs are ordered by value, so a ``--budget-s`` cut loses the least: one run per family first, then
precisions, optimizers and options, then the ``torch.compile`` runs, then extra families.

Usage::

    python bench/measure_step_time.py --out step_times_v2.jsonl --budget-s 420   # on a CUDA machine
    python bench/measure_step_time.py --out /tmp/x.jsonl --dry-run               # a smoke test anywhere
    python bench/measure_step_time.py --out step_times_v3.jsonl --budget-s 290 --exclude compile
        # microbenchmarks, tiny models (eager experts, compiled) and every step but the two compiled ones
    python bench/measure_step_time.py --list-runs                                 # the runs and their indices
    python bench/measure_step_time.py --out big.jsonl --skip-micro --runs 54-59 --budget-s 100   # 1-8B, one card
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import statistics
import sys
import time

# ---------------------------------------------------------------------------------------- shapes
# name -> (model_type, HF config keys). Real configs where they fit 20M-3B; the rest are scaled-down
# members of their family. Sliding windows are off (as in Mistral-7B-v0.3), so SDPA takes the flash path.
_LLAMA = dict(rms_norm_eps=1e-5, max_position_embeddings=8192)
SHAPES = {
    "gpt2-30m": ("gpt2", dict(n_embd=384, n_layer=6, n_head=6, vocab_size=50257, n_positions=8192)),
    "llama-160m": ("llama", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=12,
                                 intermediate_size=2048, vocab_size=32000, tie_word_embeddings=False, **_LLAMA)),
    "llama-3.2-1b": ("llama", dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                                   num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
                                   tie_word_embeddings=True, head_dim=64, **_LLAMA)),
    "qwen2.5-0.5b": ("qwen2", dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                                   intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True,
                                   rms_norm_eps=1e-6, max_position_embeddings=8192, sliding_window=None)),
    "pythia-160m": ("gpt_neox", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                     intermediate_size=3072, vocab_size=50304, rotary_pct=0.25,
                                     max_position_embeddings=8192, tie_word_embeddings=False)),
    "mixtral-500m": ("mixtral", dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                                     num_key_value_heads=8, intermediate_size=2048, num_local_experts=8,
                                     num_experts_per_tok=2, vocab_size=32000, sliding_window=None, **_LLAMA)),
    "mistral-300m": ("mistral", dict(hidden_size=1024, num_hidden_layers=16, num_attention_heads=16,
                                     num_key_value_heads=8, intermediate_size=3584, vocab_size=32768,
                                     sliding_window=None, **_LLAMA)),
    "phi3-500m": ("phi3", dict(hidden_size=1536, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
                               intermediate_size=4096, vocab_size=32064, max_position_embeddings=8192,
                               original_max_position_embeddings=8192, sliding_window=None)),
    "gemma-2b": ("gemma", dict(hidden_size=2048, num_hidden_layers=18, num_attention_heads=8, num_key_value_heads=1,
                               head_dim=256, intermediate_size=16384, vocab_size=256000,
                               max_position_embeddings=8192)),
    "llama-3.2-3b": ("llama", dict(hidden_size=3072, num_hidden_layers=28, num_attention_heads=24,
                                   num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
                                   tie_word_embeddings=True, head_dim=128, **_LLAMA)),
    "pythia-1b": ("gpt_neox", dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=8,
                                   intermediate_size=8192, vocab_size=50304, rotary_pct=0.25,
                                   max_position_embeddings=8192, tie_word_embeddings=False)),
    "qwen3-0.6b": ("qwen3", dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                                 head_dim=128, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True,
                                 rms_norm_eps=1e-6, max_position_embeddings=8192, sliding_window=None)),
    "qwen2-moe-400m": ("qwen2_moe", dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                                         num_key_value_heads=16, intermediate_size=2816, moe_intermediate_size=512,
                                         shared_expert_intermediate_size=2048, num_experts=16, num_experts_per_tok=4,
                                         vocab_size=32000, max_position_embeddings=8192, sliding_window=None,
                                         tie_word_embeddings=False)),
    "qwen3-moe-400m": ("qwen3_moe", dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                                         num_key_value_heads=4, head_dim=64, intermediate_size=3072,
                                         moe_intermediate_size=384, num_experts=32, num_experts_per_tok=4,
                                         vocab_size=32000, max_position_embeddings=8192, sliding_window=None,
                                         tie_word_embeddings=False)),
    "olmo2-400m": ("olmo2", dict(hidden_size=1024, num_hidden_layers=16, num_attention_heads=16,
                                 num_key_value_heads=16, intermediate_size=4096, vocab_size=100352,
                                 max_position_embeddings=8192, tie_word_embeddings=False)),
    "starcoder2-400m": ("starcoder2", dict(hidden_size=1024, num_hidden_layers=16, num_attention_heads=16,
                                           num_key_value_heads=4, intermediate_size=4096, vocab_size=49152,
                                           max_position_embeddings=8192, sliding_window=None)),
    "gemma2-400m": ("gemma2", dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=8,
                                   num_key_value_heads=4, head_dim=128, intermediate_size=4096, vocab_size=256000,
                                   max_position_embeddings=8192, sliding_window=4096)),
    # Gemma 2 alternates sliding-window and full layers (config.layer_types); a sliding layer needs a window
    # (transformers 5 builds its cache layer and mask from it: None fails with a TypeError). 4096 is Gemma 2's
    # released window (google/gemma-2-2b config.json); the runs stay at seq_len <= 4096, where it sees the
    # whole causal prefix, as full attention does.
    "deepseek-v3-400m": ("deepseek_v3", dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                                             num_key_value_heads=16, q_lora_rank=384, kv_lora_rank=256,
                                             qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
                                             intermediate_size=2816, moe_intermediate_size=512, n_routed_experts=16,
                                             num_experts_per_tok=4, n_shared_experts=1, first_k_dense_replace=1,
                                             n_group=1, topk_group=1, vocab_size=32000, max_position_embeddings=8192,
                                             tie_word_embeddings=False)),
    # 7-8B models trained whole on one card (bf16 parameters; SGD, or fused AdamW with checkpointing)
    "llama-3-8b": ("llama", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                 intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False, **_LLAMA)),
    "mistral-7b": ("mistral", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                   num_key_value_heads=8, intermediate_size=14336, vocab_size=32768,
                                   sliding_window=None, **_LLAMA)),
    "qwen2.5-7b": ("qwen2", dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                                 intermediate_size=18944, vocab_size=152064, tie_word_embeddings=False,
                                 rms_norm_eps=1e-6, max_position_embeddings=8192, sliding_window=None)),
}
TINY = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
            vocab_size=256, moe_intermediate_size=32, shared_expert_intermediate_size=64, q_lora_rank=32,
            kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
TINY_GPT2 = dict(n_embd=64, n_head=4, vocab_size=256)

# Runs in order of value: (shape, batch, seq, precision, optimizer, options); options default to
# checkpointing=False, fused=False, foreach=True, accum=1, clip=None, compile=False, experts=None.
RUNS = [
    # 1. one run of every family at the common setting
    ("llama-160m", 8, 1024, "amp_bf16", "adamw", {}),
    ("gpt2-30m", 8, 1024, "amp_bf16", "adamw", {}),
    ("mixtral-500m", 8, 1024, "amp_bf16", "adamw", {}),
    ("qwen2.5-0.5b", 8, 1024, "amp_bf16", "adamw", {}),
    ("mistral-300m", 8, 2048, "amp_bf16", "adamw", {}),
    ("pythia-160m", 8, 1024, "amp_bf16", "adamw", {}),
    ("phi3-500m", 8, 1024, "amp_bf16", "adamw", {}),
    ("llama-3.2-1b", 4, 2048, "amp_bf16", "adamw", {}),
    ("gemma-2b", 4, 1024, "amp_bf16", "adamw", {}),
    ("qwen3-0.6b", 4, 2048, "amp_bf16", "adamw", {}),
    ("qwen2-moe-400m", 8, 1024, "amp_bf16", "adamw", {}),
    ("llama-3.2-3b", 2, 2048, "bf16", "adamw", {}),
    ("pythia-1b", 4, 2048, "amp_bf16", "adamw", {}),
    ("olmo2-400m", 8, 1024, "amp_bf16", "adamw", {}),
    ("starcoder2-400m", 8, 1024, "amp_bf16", "adamw", {}),
    ("qwen3-moe-400m", 8, 1024, "amp_bf16", "adamw", {}),
    ("gemma2-400m", 8, 1024, "amp_bf16", "adamw", {}),
    # 2. optimizer options, clipping, accumulation, host-bound extremes
    ("llama-160m", 8, 1024, "amp_bf16", "adamw", {"fused": True}),
    ("llama-160m", 8, 1024, "amp_bf16", "adamw", {"foreach": False}),
    ("llama-160m", 8, 1024, "amp_bf16", "sgd", {}),
    ("llama-160m", 8, 1024, "amp_bf16", "adamw", {"clip": 1.0}),
    ("llama-160m", 4, 1024, "amp_bf16", "adamw", {"accum": 4}),
    ("llama-160m", 1, 512, "amp_bf16", "adamw", {}),
    ("gpt2-30m", 1, 512, "fp32", "adamw", {}),
    ("qwen2.5-0.5b", 8, 1024, "amp_bf16", "adamw", {"fused": True, "clip": 1.0}),
    ("llama-3.2-1b", 4, 2048, "amp_bf16", "adamw", {"fused": True}),
    ("llama-3.2-1b", 4, 2048, "amp_bf16", "sgd", {}),
    ("mixtral-500m", 4, 1024, "amp_bf16", "adamw", {"accum": 2, "clip": 1.0}),
    ("mixtral-500m", 8, 1024, "amp_bf16", "adamw", {"experts": "eager"}),
    ("qwen2-moe-400m", 8, 1024, "amp_bf16", "adamw", {"experts": "eager"}),
    # 3. precisions and checkpointing, large and small batch x sequence
    ("llama-160m", 8, 1024, "fp32", "adamw", {}),
    ("llama-160m", 8, 1024, "bf16", "adamw", {}),
    ("llama-160m", 16, 8192, "amp_bf16", "adamw", {"checkpointing": True}),
    ("gpt2-30m", 8, 8192, "amp_bf16", "adamw", {"checkpointing": True}),
    ("llama-3.2-1b", 8, 2048, "amp_bf16", "adamw", {"checkpointing": True}),
    ("llama-3.2-1b", 2, 2048, "bf16", "adamw", {}),
    ("pythia-160m", 8, 1024, "fp32", "adamw", {}),
    ("pythia-1b", 8, 2048, "amp_bf16", "adamw", {"checkpointing": True}),
    ("qwen2.5-0.5b", 4, 4096, "bf16", "adamw", {}),
    ("qwen3-0.6b", 2, 8192, "amp_bf16", "adamw", {"checkpointing": True}),
    ("mistral-300m", 4, 2048, "bf16", "adamw", {"foreach": False}),
    ("phi3-500m", 4, 2048, "bf16", "sgd", {}),
    ("gemma-2b", 2, 2048, "bf16", "adamw", {"checkpointing": True}),
    ("llama-3.2-3b", 4, 2048, "bf16", "adamw", {"checkpointing": True}),
    ("gpt2-30m", 4, 512, "amp_bf16", "adamw", {"accum": 8, "clip": 1.0}),
    ("mixtral-500m", 1, 512, "amp_bf16", "adamw", {}),
    ("llama-3.2-1b", 1, 512, "amp_bf16", "adamw", {}),
    ("gpt2-30m", 8, 1024, "fp32", "sgd", {"foreach": False}),
    ("olmo2-400m", 4, 2048, "bf16", "adamw", {"fused": True}),
    ("starcoder2-400m", 8, 1024, "fp32", "adamw", {}),
    # 4. torch.compile (compile time is long: two small ones)
    ("gpt2-30m", 8, 1024, "amp_bf16", "adamw", {"compile": True}),
    ("llama-160m", 8, 1024, "amp_bf16", "adamw", {"compile": True, "fused": True}),
    # 5. extra families, least sure to run
    ("deepseek-v3-400m", 8, 1024, "amp_bf16", "adamw", {}),
    ("qwen3-moe-400m", 8, 1024, "amp_bf16", "adamw", {"experts": "eager"}),
    # 6. one card's worth: 7-8B models trained whole (GPU-bound; on an 80 GB card); indices 54-59 (--list-runs)
    ("llama-3-8b", 1, 2048, "bf16", "sgd", {}),
    ("llama-3-8b", 1, 4096, "bf16", "adamw", {"fused": True, "checkpointing": True}),
    ("mistral-7b", 2, 2048, "bf16", "sgd", {}),
    ("mistral-7b", 1, 4096, "bf16", "adamw", {"fused": True, "checkpointing": True}),
    ("qwen2.5-7b", 2, 2048, "bf16", "sgd", {"checkpointing": True}),
    ("llama-3.2-1b", 16, 2048, "amp_bf16", "adamw", {"fused": True, "checkpointing": True}),
]
TINY_SHAPES = ("llama-160m", "gpt2-30m", "mixtral-500m", "qwen2-moe-400m")
MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3")
COMPILED_TINY = ("llama-160m", "gpt2-30m")  # torch.compile'd tiny models: host time per generated kernel
DRY_RUNS = [
    ("llama-160m", 2, 32, "fp32", "adamw", {}),
    ("gpt2-30m", 2, 32, "fp32", "sgd", {"checkpointing": True, "accum": 2, "clip": 1.0}),
    ("mixtral-500m", 2, 32, "fp32", "adamw", {"foreach": False}),
    ("qwen2-moe-400m", 1, 16, "fp32", "adamw", {"fused": True}),
]
OPTION_DEFAULTS = {"checkpointing": False, "fused": False, "foreach": True, "accum": 1, "clip": None,
                   "compile": False, "experts": None}


def held_out(key: str) -> bool:
    """Held-out runs (never used while building the model): sha256 of the run key, first byte odd."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:2], 16) % 2 == 1


def run_key(shape: str, batch: int, seq: int, precision: str, optimizer: str, opts: dict) -> str:
    o = {**OPTION_DEFAULTS, **opts}
    return json.dumps([shape, batch, seq, precision, optimizer, o], sort_keys=True)


def hf_config(transformers, name: str, tiny_layers: int | None = None, tiny_experts: int | None = None):
    mtype, keys = SHAPES[name]
    keys = dict(keys)
    if tiny_layers is not None:
        shrink = TINY_GPT2 if mtype == "gpt2" else {k: v for k, v in TINY.items() if k in keys or k in (
            "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")}
        keys.update(shrink)
        if "num_key_value_heads" in keys:
            heads, kv = SHAPES[name][1]["num_attention_heads"], SHAPES[name][1]["num_key_value_heads"]
            keys["num_key_value_heads"] = 4 if kv == heads else (2 if kv > 1 else 1)
        if "num_local_experts" in keys or "num_experts" in keys or "n_routed_experts" in keys:
            for k in ("num_local_experts", "num_experts", "n_routed_experts"):
                if k in keys:
                    keys[k] = tiny_experts or 4
            keys["num_experts_per_tok"] = 2
        keys["n_layer" if mtype == "gpt2" else "num_hidden_layers"] = tiny_layers
        if mtype != "gpt2":
            keys["pad_token_id"] = 0  # inside the tiny vocabulary
    cfg = transformers.AutoConfig.for_model(mtype, **keys)
    cfg._attn_implementation = "sdpa"
    return cfg, {"model_type": mtype, **keys}


def build(torch, transformers, cfg, precision: str, device: str, experts: str | None):
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    if precision in ("bf16", "fp16"):
        model = model.to(torch.bfloat16 if precision == "bf16" else torch.float16)
    if experts and hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(experts)
    return model.to(device)


def make_optimizer(torch, params, optimizer: str, fused: bool, foreach: bool):
    kw = {"fused": True} if fused else {"foreach": foreach}
    if optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, **kw)
    return torch.optim.SGD(params, lr=1e-3, **kw)


def _params_with_grads(torch, device: str, count: int, numel: int) -> list:
    """``count`` parameters of ``numel`` elements, each with a gradient (what an optimizer step reads)."""
    params = [torch.nn.Parameter(torch.randn(numel, device=device)) for _ in range(count)]
    for p in params:
        p.grad = torch.randn_like(p)
    return params


def _optimizers(torch, device: str, params, variants):
    """``(name, options, optimizer)`` over ``params`` for each ``(name, options)`` of ``variants`` that the device
    runs (fused ones need CUDA), made one at a time: the caller drops each before the next is made."""
    for opt_name, kw in variants:
        if kw.get("fused") and device != "cuda":
            continue
        yield opt_name, kw, make_optimizer(torch, params, opt_name, kw.get("fused", False), kw.get("foreach", True))


def now(torch, device: str) -> float:
    return time.perf_counter()


def sync(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _free(torch, device: str) -> None:
    """Collect garbage and give the allocator's cached device memory back."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------- profiler
#: folder for the profiled steps' Chrome traces (``--trace``); None: no traces
TRACE_DIR = None


def kernel_counts(torch, device: str, fn, trace: str | None = None) -> dict:
    """Kernels and launch calls one call of ``fn`` makes (torch.profiler); {} where profiling fails.

    ``trace``: also write the profile as a gzipped Chrome trace (host ops and kernels on one timeline)."""
    if device != "cuda":
        return {}
    try:
        from torch.profiler import ProfilerActivity, profile
        sync(torch, device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            sync(torch, device)
        if trace:
            import gzip
            import shutil
            prof.export_chrome_trace(trace)
            with open(trace, "rb") as src, gzip.open(trace + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(trace)
        kernels, launches, aten, triton, names, seconds = 0, 0, 0, 0, {}, {}
        cuda_type = torch.autograd.DeviceType.CUDA
        for e in prof.events():
            if e.device_type == cuda_type:
                kernels += 1
                triton += e.name.startswith("triton_")
                short = e.name[:60]
                names[short] = names.get(short, 0) + 1
                n, t = seconds.get(e.name[:200], (0, 0.0))
                seconds[e.name[:200]] = (n + 1, t + e.time_range.elapsed_us() * 1e-6)
            elif "LaunchKernel" in e.name or e.name.startswith("cuLaunch"):
                launches += 1
            elif e.name.startswith("aten::"):
                aten += 1
        top = dict(sorted(names.items(), key=lambda kv: -kv[1])[:40])
        return {"kernels": kernels, "launch_calls": launches, "aten_ops": aten, "triton_kernels": triton,
                "kernel_names": top, "kernel_seconds": {k: list(v) for k, v in seconds.items()}}
    except Exception as exc:  # noqa: BLE001 - profiling is a bonus; the timing stands without it
        return {"error": repr(exc)[:200]}


# --------------------------------------------------------------------------------- microbenchmarks
def _per_call(torch, device, fn, n: int, reps: int = 5, warmup: int = 0) -> tuple[float, float]:
    """Median over ``reps`` of (host seconds per call, wall seconds per call incl. drain), after ``warmup``
    untimed calls."""
    for _ in range(warmup):
        fn()
    host, wall = [], []
    for _ in range(reps):
        sync(torch, device)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        sync(torch, device)
        t2 = time.perf_counter()
        host.append((t1 - t0) / n)
        wall.append((t2 - t0) / n)
    return statistics.median(host), statistics.median(wall)


def _forward_backward(torch, device, forward, chain: int, reps: int = 5) -> tuple[float, float, float]:
    """Medians over ``reps`` of host seconds per op of ``forward(x)`` (the loss of a chain of ``chain`` ops on
    a new leaf ``x``), host seconds per op of its ``backward()``, and wall seconds per op of it incl. drain."""
    fwd, host, wall = [], [], []
    for _ in range(reps):
        x = torch.randn(8, 64, device=device, requires_grad=True)
        sync(torch, device)
        t0 = time.perf_counter()
        loss = forward(x)
        t1 = time.perf_counter()
        sync(torch, device)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        sync(torch, device)
        t4 = time.perf_counter()
        fwd.append((t1 - t0) / chain)
        host.append((t3 - t2) / chain)
        wall.append((t4 - t2) / chain)
    return statistics.median(fwd), statistics.median(host), statistics.median(wall)


def gemm_shape_bench(torch, device: str, n: int = 48, hidden: int = 1024, width: int = 2048) -> list[dict]:
    """Host time of a matmul call whose shape was seen before against one whose shape is new.

    A GEMM library chooses its kernel on the host per shape (cuBLAS's heuristic query) and caches the
    choice: the eager expert loop's GEMMs get a new row count every step (the tokens routed to each
    expert). Forward ``F.linear`` of ``m`` tokens over a ``width x hidden`` weight, and the weight
    gradient's ``mm`` (``m`` is the contraction), at ``m = 1000 + 7 i`` (each new) and ``m = 2048`` (cached).
    Host seconds per call (the device is idle before each call; the call is not waited for).
    """
    import torch.nn.functional as F
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    x = torch.randn(4096, hidden, device=device, dtype=dt)
    g = torch.randn(4096, width, device=device, dtype=dt)
    w = torch.randn(width, hidden, device=device, dtype=dt)
    calls = {"linear": lambda m: F.linear(x[:m], w), "weight_grad": lambda m: torch.mm(g[:m].t(), x[:m])}
    rows = []
    for name, call in calls.items():
        call(2048)
        sync(torch, device)
        times = {"cached": [], "new": []}
        for i in range(n):
            for kind, m in (("cached", 2048), ("new", 1000 + 7 * i + (3 if name == "weight_grad" else 0))):
                sync(torch, device)
                t0 = time.perf_counter()
                call(m)
                times[kind].append(time.perf_counter() - t0)
        sync(torch, device)
        rows.append({"kind": "host", "bench": f"gemm_shape_{name}", "cached_s": statistics.median(times["cached"]),
                     "new_s": statistics.median(times["new"]), "n": n, "hidden": hidden, "width": width})
    return rows


def host_micro(torch, device: str, n: int, tensor_counts=(8, 64, 256), numel: int = 4096):
    """Rows of host-cost microbenchmarks."""
    import torch.nn.functional as F
    rows = []

    def add(bench, **kw):
        rows.append({"kind": "host", "bench": bench, **kw})

    a = torch.zeros(1, device=device)
    h, w = _per_call(torch, device, lambda: a.add_(1.0), n, warmup=50)
    add("launch_inplace_add_1elem", host_per_op_s=h, wall_per_op_s=w, n=n)
    if device == "cuda":  # the device's floor per tiny kernel: CUDA-graph replay of n tiny kernels
        try:
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    a.add_(1.0)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                for _ in range(n):
                    a.add_(1.0)
            g.replay()
            h, w = _per_call(torch, device, g.replay, 1, reps=5)
            add("graph_tiny_kernel", wall_per_op_s=w / n, n=n)
        except Exception as exc:  # noqa: BLE001
            add("graph_tiny_kernel", error=repr(exc)[:200])
        x1 = torch.ones(1, device=device)
        for bench, fn in (("item_idle", x1.item), ("synchronize_idle", torch.cuda.synchronize)):
            h, _ = _per_call(torch, device, fn, 1, reps=30)  # one call on an idle device per repetition
            add(bench, host_per_op_s=h, n=30)

    # single ops, forward, without and with autograd recording, and under autocast
    for rg in (False, True):
        x = torch.randn(8, 64, device=device, requires_grad=rg)
        y = torch.randn(8, 64, device=device, requires_grad=rg)
        wt = torch.randn(64, 64, device=device, requires_grad=rg)
        ln_w = torch.ones(64, device=device, requires_grad=rg)
        emb = torch.randn(256, 64, device=device, requires_grad=rg)
        idx = torch.randint(0, 256, (8,), device=device)
        q = torch.randn(1, 4, 16, 16, device=device, requires_grad=rg)
        lg = torch.randn(8, 256, device=device, requires_grad=rg)
        ops = {
            "add": lambda: x + y, "mul_scalar": lambda: x * 2.0, "to_bf16": lambda: x.to(torch.bfloat16),
            "linear": lambda: F.linear(x, wt), "layer_norm": lambda: F.layer_norm(x, (64,), ln_w),
            "softmax": lambda: torch.softmax(x, -1), "silu": lambda: F.silu(x),
            "gelu_tanh": lambda: F.gelu(x, approximate="tanh"), "pow": lambda: x.pow(2),
            "mean": lambda: x.mean(-1, keepdim=True), "rsqrt": lambda: torch.rsqrt(x),
            "cat": lambda: torch.cat((x, y), -1), "transpose_contiguous": lambda: x.t().contiguous(),
            "view": lambda: x.view(8, 4, 16), "embedding": lambda: F.embedding(idx, emb),
            "sdpa": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
            "cross_entropy": lambda: F.cross_entropy(lg, idx), "index_select": lambda: x.index_select(0, idx % 8),
            "topk": lambda: torch.topk(x, 2, dim=-1), "nonzero": lambda: torch.nonzero(x > 0),
            # the eager expert loop's ops (transformers' ``experts_implementation="eager"``): ``torch.where(mask)``
            # (a nonzero: waits for the device), token gather, ``index_add_`` back, one_hot of the routing
            "where_mask": lambda: torch.where(x > 0), "gather_rows": lambda: x[idx % 8],
            "index_add": lambda: x.index_add(0, idx % 8, y), "one_hot": lambda: F.one_hot(idx, 8),
        }
        for name, fn in ops.items():
            try:
                h, w = _per_call(torch, device, fn, n // 4 if name in ("nonzero", "where_mask") else n, warmup=20)
                add(f"op_{name}", grad=rg, host_per_op_s=h, wall_per_op_s=w)
            except Exception as exc:  # noqa: BLE001 - one op failing must not stop the rest
                add(f"op_{name}", grad=rg, error=repr(exc)[:200])
        if device == "cuda":
            with torch.autocast("cuda", torch.bfloat16):
                for name in ("linear", "add", "softmax", "layer_norm"):
                    h, w = _per_call(torch, device, ops[name], n, warmup=20)
                    add(f"op_{name}", grad=rg, autocast=True, host_per_op_s=h, wall_per_op_s=w)
    lin = torch.nn.Linear(64, 64, device=device)
    x = torch.randn(8, 64, device=device)
    for label, fn in (("module_linear", lambda: lin(x)), ("functional_linear", lambda: F.linear(x, lin.weight, lin.bias))):
        h, w = _per_call(torch, device, fn, n)
        add(label, grad=True, host_per_op_s=h, wall_per_op_s=w)

    # autograd backward per op: a chain of ``chain`` ops, host time of .backward()
    chain = max(n // 10, 20)
    wt = (torch.randn(64, 64, device=device) / 8).requires_grad_()
    ln_w = torch.ones(64, device=device, requires_grad=True)
    y2 = torch.randn(8, 64, device=device, requires_grad=True)
    steps = {"mul_scalar": lambda z: z * 1.0001, "add": lambda z: z + y2, "linear": lambda z: F.linear(z, wt),
             "layer_norm": lambda z: F.layer_norm(z, (64,), ln_w), "silu": lambda z: F.silu(z),
             "to_bf16_and_back": lambda z: z.to(torch.bfloat16).float()}

    def repeated(fn):
        def body(z):
            for _ in range(chain):
                z = fn(z)
            return z
        return body

    for name, fn in steps.items():
        f, h, w = _forward_backward(torch, device, lambda x, body=repeated(fn): body(x).sum(), chain)
        add(f"backward_{name}", host_fwd_per_op_s=f, host_per_op_s=h, wall_per_op_s=w, chain=chain)

    # the same chains inside torch.utils.checkpoint (non-reentrant, as transformers uses): saved-tensor hooks
    from torch.utils.checkpoint import checkpoint
    for name in ("mul_scalar", "linear", "silu"):
        f, h, _ = _forward_backward(
            torch, device, lambda x, body=repeated(steps[name]): checkpoint(body, x, use_reentrant=False).sum(), chain)
        add(f"checkpoint_{name}", host_fwd_per_op_s=f, host_per_op_s=h, chain=chain)

    # optimizer steps, clipping and zero_grad over nt small tensors
    for nt in tensor_counts:
        params = _params_with_grads(torch, device, nt, numel)
        variants = [("adamw", {"foreach": True}), ("adamw", {"fused": True}), ("adamw", {"foreach": False}),
                    ("sgd", {"foreach": True}), ("sgd", {"foreach": False})]
        for opt_name, kw, opt in _optimizers(torch, device, params, variants):
            h, w = _per_call(torch, device, opt.step, 5, warmup=3)
            add("optimizer_step", optimizer=opt_name, tensors=nt, numel=numel, host_per_op_s=h, wall_per_op_s=w, **kw)
            opt = None  # free the GPU memory (closures still name them)
        h, w = _per_call(torch, device, lambda: torch.nn.utils.clip_grad_norm_(params, 1.0), 5)
        add("clip_grad_norm", tensors=nt, numel=numel, host_per_op_s=h, wall_per_op_s=w)

        def zero():
            for p in params:
                p.grad = None
            opt0.zero_grad(set_to_none=True)
        opt0 = torch.optim.SGD(params, lr=1e-3)
        h, w = _per_call(torch, device, zero, 5)
        add("zero_grad", tensors=nt, host_per_op_s=h, wall_per_op_s=w)
    return rows


def optimizer_sweep(torch, device: str, tensor_counts, numels, n: int = 5) -> list[dict]:
    """AdamW (fused and foreach) and SGD (foreach) steps over ``nt`` tensors of ``numel`` elements each.

    Host time per step (the launches: fused AdamW launches one multi-tensor kernel per group of tensors,
    foreach one per op per group) and wall time per step (the device's streaming time at large ``numel``):
    ``{"kind": "host", "bench": "optimizer_sweep", ...}``.
    """
    rows = []
    for numel in numels:
        for nt in tensor_counts:
            try:
                params = _params_with_grads(torch, device, nt, numel)
                variants = (("adamw", {"fused": True}), ("adamw", {"foreach": True}), ("sgd", {"foreach": True}))
                for opt_name, kw, opt in _optimizers(torch, device, params, variants):
                    h, w = _per_call(torch, device, opt.step, n, warmup=3)
                    row = {"kind": "host", "bench": "optimizer_sweep", "optimizer": opt_name, "tensors": nt,
                           "numel": numel, "host_per_op_s": h, "wall_per_op_s": w, **kw}
                    if nt in (tensor_counts[0], tensor_counts[-1]):
                        row["profile"] = kernel_counts(torch, device, opt.step)
                    rows.append(row)
                    opt = None
            except Exception as exc:  # noqa: BLE001 - record and go on
                rows.append({"kind": "host", "bench": "optimizer_sweep", "tensors": nt, "numel": numel,
                             "error": repr(exc)[:200]})
            params = None
            _free(torch, device)
    return rows


def _layer_row(torch, transformers, device: str, name: str, layers: int, reps: int, amp: bool = True,
               ckpt: bool = False, experts: str | None = None, n_experts: int | None = None,
               compiled: bool = False, accum_probe: bool = False) -> dict:
    """One tiny model: host time and kernels of forward / backward / optimizer (see :func:`layer_costs`)."""
    cfg, d = hf_config(transformers, name, tiny_layers=layers, tiny_experts=n_experts)
    model = build(torch, transformers, cfg, "fp32", device, experts)
    if ckpt:
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    fwd_model = model
    if compiled:
        torch._dynamo.reset()
        # on the CPU (a smoke test) the graph capture runs, without inductor's C++ build
        fwd_model = torch.compile(model) if device == "cuda" else torch.compile(model, backend="eager")
    ids = torch.randint(0, cfg.vocab_size, (1, 16), device=device)
    state = {}

    def fwd():
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
            state["loss"] = fwd_model(input_ids=ids, labels=ids).loss

    def bwd():
        state["loss"].backward()

    def ostep():
        opt.step()
        opt.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    for _ in range(3):
        fwd(); bwd(); ostep()
    sync(torch, device)
    warmup_s = time.perf_counter() - t0
    times = {"forward": [], "backward": [], "optimizer": []}
    if accum_probe:
        times["backward_accumulate"] = []
    for _ in range(reps):
        for phase, fn in (("forward", fwd), ("backward", bwd), ("optimizer", ostep)):
            if phase == "optimizer" and accum_probe:  # a second micro-batch: backward adds into existing .grad
                fwd()
                sync(torch, device)
                t0 = time.perf_counter()
                bwd()
                times["backward_accumulate"].append(time.perf_counter() - t0)
            sync(torch, device)
            t0 = time.perf_counter()
            fn()
            times[phase].append(time.perf_counter() - t0)
    row = {"kind": "layers", "shape": name, "family": d["model_type"], "layers": layers, "amp": amp,
           "checkpointing": ckpt, "compile": compiled, "experts_requested": experts, "n_experts": n_experts,
           "experts_implementation": getattr(model.config, "_experts_implementation", None),
           "tokens": int(ids.numel()), "warmup_s": warmup_s,
           "n_params": sum(p.numel() for p in model.parameters()), "n_tensors": len(list(model.parameters())),
           "hf_config": d}
    for phase, ts in times.items():
        row[f"host_{phase}_s"] = statistics.median(ts)
        row[f"host_{phase}_s_all"] = ts
    counts = {}
    fwd(); bwd(); ostep()
    counts["forward"] = kernel_counts(torch, device, fwd)
    counts["backward"] = kernel_counts(torch, device, bwd)
    counts["optimizer"] = kernel_counts(torch, device, ostep)
    if accum_probe:
        fwd(); bwd(); fwd()
        counts["backward_accumulate"] = kernel_counts(torch, device, bwd)
        ostep()
    row["profile"] = counts
    if compiled:
        torch._dynamo.reset()
    return row


def layer_jobs(names, device: str, moe_experts=(4, 8)) -> list[dict]:
    """The tiny-model variants :func:`layer_costs` measures, in order of value.

    Every family: 2 and 4 layers under autocast (fp32 too on the CPU). llama and gpt2: also without autocast
    and with checkpointing. llama, gpt2 and mixtral: a second backward into existing gradients (accumulation).
    MoE families: ``experts_implementation="eager"`` (Hugging Face's Python loop over the experts) at 4 and 8
    experts, beside the default implementation at 4.
    """
    amp = device == "cuda"
    jobs = []
    for name in names:
        family = SHAPES[name][0]
        probe = family in ("llama", "gpt2", "mixtral")
        for layers in (2, 4):
            jobs.append(dict(name=name, layers=layers, amp=amp, accum_probe=probe))
            if family in ("llama", "gpt2"):
                if amp:
                    jobs.append(dict(name=name, layers=layers, amp=False))
                jobs.append(dict(name=name, layers=layers, amp=amp, ckpt=True))
            if family in MOE_FAMILIES:
                for ne in moe_experts:
                    jobs.append(dict(name=name, layers=layers, amp=amp, experts="eager", n_experts=ne,
                                     accum_probe=probe and ne == moe_experts[0]))
    return jobs


def layer_costs(torch, transformers, device: str, jobs, reps: int, deadline: float, min_left: float = 0.0):
    """Per job (see :func:`layer_jobs`): host time and kernels of forward / backward / optimizer of a tiny model.

    A job starts only while ``min_left`` seconds are left before ``deadline`` (torch.compile takes seconds).
    """
    rows = []
    for job in jobs:
        base = {"kind": "layers", "shape": job["name"], "layers": job["layers"], "amp": job.get("amp"),
                "compile": job.get("compiled", False), "experts_requested": job.get("experts"),
                "n_experts": job.get("n_experts")}
        if deadline - time.perf_counter() < max(min_left, 0.0) or time.perf_counter() > deadline:
            rows.append({**base, "status": "skipped_budget"})
            continue
        try:
            rows.append(_layer_row(torch, transformers, device, job["name"], job["layers"], reps,
                                   **{k: v for k, v in job.items() if k not in ("name", "layers")}))
        except Exception as exc:  # noqa: BLE001 - one family failing must not stop the rest
            rows.append({**base, "status": "error", "error": repr(exc)[:300]})
        _free(torch, device)
    return rows


def param_counts(torch, transformers, folder: str):
    """``num_parameters()`` of the model Hugging Face builds from each config JSON in ``folder`` (meta device)."""
    rows = []
    if not os.path.isdir(folder):
        return rows
    for fname in sorted(os.listdir(folder)):
        if not fname.endswith(".json"):
            continue
        with open(os.path.join(folder, fname)) as fh:
            d = json.load(fh)
        try:
            keys = {k: v for k, v in d.items() if k != "model_type"}
            cfg = transformers.AutoConfig.for_model(d["model_type"], **keys)
            with torch.device("meta"):
                model = transformers.AutoModelForCausalLM.from_config(cfg)
            rows.append({"kind": "params", "config": fname[:-5], "model_type": d["model_type"],
                         "n_params": sum(p.numel() for p in model.parameters()),
                         "num_parameters": model.num_parameters(), "n_tensors": len(list(model.parameters()))})
            model = None  # free the GPU memory (closures still name them)
        except Exception as exc:  # noqa: BLE001
            rows.append({"kind": "params", "config": fname[:-5], "status": "error", "error": repr(exc)[:300]})
    return rows


# ----------------------------------------------------------------------------------------- steps
def _sm_clock(torch) -> float | None:
    """The SM clock now [MHz] (``torch.cuda.clock_rate``), or None where NVML is absent."""
    try:
        return float(torch.cuda.clock_rate())
    except Exception:
        return None


def one_run(torch, transformers, spec, device: str, steps: int, warmup: int, deadline: float, profile: bool) -> dict:
    shape, batch, seq, precision, optimizer, opts = spec
    o = {**OPTION_DEFAULTS, **opts}
    cfg, d = hf_config(transformers, shape)
    t_build = time.perf_counter()
    model = build(torch, transformers, cfg, precision, device, o["experts"])
    if o["checkpointing"]:
        model.gradient_checkpointing_enable()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    opt = make_optimizer(torch, params, optimizer, o["fused"], o["foreach"])
    fwd_model = torch.compile(model) if o["compile"] else model
    build_s = time.perf_counter() - t_build
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
    amp = precision.startswith("amp") and device == "cuda"
    accum = o["accum"]
    cuda = device == "cuda"

    def mark(marks):
        if cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            marks.append((time.perf_counter(), ev))
        else:
            marks.append((time.perf_counter(), None))

    def step(marks):
        mark(marks)
        for _ in range(accum):
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
                loss = fwd_model(input_ids=ids, labels=ids).loss
            if accum > 1:
                loss = loss / accum
            mark(marks)
            loss.backward()
            mark(marks)
        if o["clip"] is not None:
            torch.nn.utils.clip_grad_norm_(params, o["clip"])
        mark(marks)
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark(marks)

    t0 = time.perf_counter()
    for _ in range(warmup):
        step([])
    sync(torch, device)
    warmup_s = time.perf_counter() - t0
    walls, host, phases = [], [], []
    for _ in range(steps):
        if walls and time.perf_counter() > deadline:
            break
        marks = []
        sync(torch, device)
        t_start = time.perf_counter()
        step(marks)
        t_host = time.perf_counter()
        sync(torch, device)
        t_end = time.perf_counter()
        walls.append(t_end - t_start)
        host.append(t_host - t_start)
        # phases: forward / backward per micro-batch, clip, optimizer
        ph = {"forward": 0.0, "backward": 0.0, "clip": 0.0, "optimizer": 0.0}
        hh = dict.fromkeys(ph, 0.0)
        names = []
        for _ in range(accum):
            names += ["forward", "backward"]
        names += ["clip", "optimizer"]
        for i, name in enumerate(names):
            (h0, e0), (h1, e1) = marks[i], marks[i + 1]
            hh[name] += h1 - h0
            ph[name] += (e0.elapsed_time(e1) / 1e3) if cuda else (h1 - h0)
        phases.append({"device": ph, "host": hh})
    row = {"kind": "step", "shape": shape, "family": d["model_type"], "hf_config": d, "n_params": n_params,
           "n_tensors": len(params), "batch": batch, "seq": seq, "precision": precision, "optimizer": optimizer,
           "checkpointing": o["checkpointing"], "fused": o["fused"], "foreach": o["foreach"],
           "gradient_accumulation_steps": accum, "clip_grad_norm": o["clip"], "compile": o["compile"],
           "experts_implementation": getattr(model.config, "_experts_implementation", None),
           "attn": "sdpa", "held_out": held_out(run_key(*spec)), "build_s": build_s, "warmup_s": warmup_s,
           "step_s_median": statistics.median(walls), "step_s_all": walls,
           "step_s_spread": (max(walls) - min(walls)) / statistics.median(walls),
           "host_s_median": statistics.median(host), "host_s_all": host,
           "phase_device_s": {k: statistics.median(p["device"][k] for p in phases) for k in phases[0]["device"]},
           "phase_host_s": {k: statistics.median(p["host"][k] for p in phases) for k in phases[0]["host"]},
           "peak_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None}
    if cuda:   # the SM clock after the timed steps, and after the profiled one (run under the profiler's host load)
        row["sm_clock_mhz"] = {"timed": _sm_clock(torch)}
    if profile and cuda and time.perf_counter() < deadline:
        trace = None if TRACE_DIR is None else os.path.join(TRACE_DIR, f"{shape}_{batch}x{seq}_{precision}.json")
        row["profile_step"] = kernel_counts(torch, device, lambda: step([]), trace)
        row["sm_clock_mhz"]["profiled"] = _sm_clock(torch)
    model = opt = params = fwd_model = None  # free the GPU memory (closures still name them)
    return row


def _unmeasured_step(spec, status: str, **extra) -> dict:
    """The record of a run that was not measured (``status``: skipped_budget, oom or error)."""
    return {"kind": "step", "shape": spec[0], "batch": spec[1], "seq": spec[2], "precision": spec[3],
            "optimizer": spec[4], "options": spec[5], "status": status, **extra}


def select_runs(runs, include: str, exclude: str = "") -> list:
    """The runs named by ``include`` minus those named by ``exclude`` (see ``--runs``), in their order."""
    def matches(i, spec, token):
        if token == "all":
            return True
        if token.replace("-", "").isdigit():
            a, _, b = token.partition("-")
            return int(a) <= i <= int(b or a)
        if token in OPTION_DEFAULTS:
            return spec[5].get(token, OPTION_DEFAULTS[token]) not in (OPTION_DEFAULTS[token], None)
        return spec[0] == token or spec[0] == token + "-tiny"

    inc = [t.strip() for t in include.split(",") if t.strip()]
    exc = [t.strip() for t in exclude.split(",") if t.strip()]
    known = set(OPTION_DEFAULTS) | {s[0] for s in runs} | set(SHAPES) | {"all"}
    for t in inc + exc:
        if not (t in known or t.replace("-", "").isdigit()):
            raise SystemExit(f"--runs/--exclude: unknown selector {t!r} (indices, ranges a-b, shape names, "
                             f"or {sorted(OPTION_DEFAULTS)})")
    return [spec for i, spec in enumerate(runs)
            if any(matches(i, spec, t) for t in inc) and not any(matches(i, spec, t) for t in exc)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="JSON lines to write (required unless --list-runs)")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes and few iterations on the CPU (a smoke test)")
    ap.add_argument("--tiny", action="store_true", help="alias of --dry-run")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=390.0, help="stop starting runs after this many seconds")
    ap.add_argument("--configs", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                       "data", "steptime", "hf_configs"),
                    help="folder of HF config JSONs whose parameter counts are recorded (built on the meta device)")
    ap.add_argument("--skip-micro", action="store_true", help="no host microbenchmarks, tiny models or sweeps")
    ap.add_argument("--skip-steps", action="store_true", help="no end-to-end training steps")
    ap.add_argument("--skip-compiled", action="store_true", help="no torch.compile'd tiny models")
    ap.add_argument("--runs", default="all",
                    help="end-to-end steps to run: comma-separated run indices (0-based, ranges a-b), shape names, "
                         "or option names (compile, experts, fused, clip, accum, checkpointing); 'all' (default)")
    ap.add_argument("--exclude", default="", help="end-to-end steps to leave out, same grammar as --runs")
    ap.add_argument("--list-runs", action="store_true", help="print the runs with their indices and exit")
    ap.add_argument("--gemm-shapes", action="store_true",
                    help="only the host microbenchmark of new against cached GEMM shapes (gemm_shape_bench)")
    ap.add_argument("--trace", default=None, metavar="DIR",
                    help="write each profiled step as a gzipped Chrome trace into DIR")
    args = ap.parse_args(argv)
    if args.list_runs:
        for i, spec in enumerate(RUNS):
            print(i, spec)
        return 0
    if not args.out:
        ap.error("--out is required")
    dry = args.dry_run or args.tiny
    global TRACE_DIR
    TRACE_DIR = args.trace
    if TRACE_DIR:
        os.makedirs(TRACE_DIR, exist_ok=True)
    t_start = time.perf_counter()
    deadline = t_start + args.budget_s
    import torch
    import transformers

    device = "cpu" if (args.cpu or dry or not torch.cuda.is_available()) else "cuda"
    cpu_name = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu_name = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu_name)
    except OSError:
        pass
    env = {"kind": "environment", "torch": torch.__version__, "transformers": transformers.__version__,
           "python": platform.python_version(), "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu",
           "cuda": torch.version.cuda, "cpu": cpu_name, "cpu_count": os.cpu_count(),
           "torch_threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d"),
           "held_out_rule": "sha256(run key) first byte odd", "budget_s": args.budget_s}
    runs = select_runs(DRY_RUNS if dry else RUNS, args.runs, args.exclude)
    with open(args.out, "w") as out:
        def emit(row):
            out.write(json.dumps(row) + "\n")
            out.flush()

        emit(env)
        if args.gemm_shapes:
            for row in gemm_shape_bench(torch, device, n=4 if dry else 48):
                emit(row)
            return 0
        for row in param_counts(torch, transformers, args.configs):
            emit(row)
        if not args.skip_micro:
            micro = dict(n=20, tensor_counts=(4, 16), numel=64) if dry else dict(n=2000)
            for row in host_micro(torch, device, **micro):
                emit(row)
            print(f"host microbenchmarks done at {time.perf_counter() - t_start:.0f} s", flush=True)
            first_of_family = {}
            for spec in RUNS:  # one tiny model per family, in the order of the runs
                first_of_family.setdefault(SHAPES[spec[0]][0], spec[0])
            sweep = (dict(tensor_counts=(1, 4), numels=(64,), n=2) if dry else
                     dict(tensor_counts=(1, 4, 16, 64, 128, 256, 512), numels=(4096, 1 << 20), n=5))
            for row in optimizer_sweep(torch, device, **sweep):
                emit(row)
            print(f"optimizer sweep done at {time.perf_counter() - t_start:.0f} s", flush=True)
            names = TINY_SHAPES if dry else list(first_of_family.values())
            jobs = layer_jobs(names, device, moe_experts=(4,) if dry else (4, 8))
            if dry:  # a smoke test: one job of each kind
                jobs = [j for j in jobs if j["layers"] == 2 and (j.get("experts") or not j.get("ckpt"))]
            for row in layer_costs(torch, transformers, device, jobs, 2 if dry else 10,
                                   deadline=t_start + 0.32 * args.budget_s):
                emit(row)
            print(f"layer costs done at {time.perf_counter() - t_start:.0f} s", flush=True)
            if not args.skip_compiled:
                amp = device == "cuda"
                cjobs = [dict(name=name, layers=layers, amp=amp, compiled=True)
                         for name in COMPILED_TINY for layers in ((2,) if dry else (2, 4))]
                for row in layer_costs(torch, transformers, device, cjobs, 2 if dry else 10,
                                       deadline=t_start + 0.58 * args.budget_s, min_left=0 if dry else 20.0):
                    emit(row)
                print(f"compiled tiny models done at {time.perf_counter() - t_start:.0f} s", flush=True)
        if not args.skip_steps:
            profiled = set()
            for spec in runs:
                remaining = deadline - time.perf_counter()
                need = 150.0 if spec[5].get("compile") else 4.0
                if remaining < need:
                    emit(_unmeasured_step(spec, "skipped_budget"))
                    continue
                if dry:  # tiny shapes: shrink the model, keep the options
                    name = spec[0]
                    SHAPES[name + "-tiny"] = (SHAPES[name][0], hf_config(transformers, name, tiny_layers=2)[1])
                    SHAPES[name + "-tiny"][1].pop("model_type")
                    spec = (name + "-tiny",) + tuple(spec[1:])
                try:
                    row = one_run(torch, transformers, spec, device, 2 if dry else args.steps,
                                  1 if dry else args.warmup, deadline, spec[0] not in profiled)
                    profiled.add(spec[0])
                    row["status"] = "ok"
                except torch.OutOfMemoryError:
                    row = _unmeasured_step(spec, "oom")
                except Exception as exc:  # noqa: BLE001 - record and go on
                    row = _unmeasured_step(spec, "error", error=repr(exc)[:300])
                _free(torch, device)
                if device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                emit(row)
                print(spec, row.get("status"), row.get("step_s_median"), f"t={time.perf_counter() - t_start:.0f}s",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
