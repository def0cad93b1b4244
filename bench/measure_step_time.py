"""Measure training-step time of Hugging Face causal LMs on the local GPU (ground truth for
``gm.training_step_time``).

Models are built from configs (nothing is downloaded). Each run: 3 warm-up steps, then the median of
``--steps`` timed steps (CUDA events around forward + backward + optimizer step + zero_grad), with
random token ids. Writes one JSON line per run.

Usage::

    python bench/measure_step_time.py --out step_times.jsonl          # on a CUDA machine
    python bench/measure_step_time.py --out /tmp/x.jsonl --cpu --tiny  # a smoke test anywhere
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time

# (name, family, hidden, layers, heads, kv_heads, ffn, vocab)
SHAPES = [
    ("llama-160m", "llama", 768, 12, 12, 12, 2048, 32000),
    ("llama-410m", "llama", 1024, 24, 16, 8, 2816, 32000),
    ("llama-1b", "llama", 2048, 16, 32, 8, 8192, 128256),
    ("llama-1.4b", "llama", 2048, 24, 16, 16, 5504, 32000),
    ("gpt2-medium", "gpt2", 1024, 24, 16, 16, 4096, 50257),
    ("gpt2-large", "gpt2", 1280, 36, 20, 20, 5120, 50257),
]
# (batch, seq, precision, optimizer, checkpointing)
RUNS = [
    (8, 1024, "amp_bf16", "adamw", False),
    (4, 2048, "bf16", "adamw", False),
    (16, 512, "amp_bf16", "adamw", True),
]
TINY_SHAPES = [("llama-tiny", "llama", 64, 2, 4, 2, 128, 256), ("gpt2-tiny", "gpt2", 64, 2, 4, 4, 256, 256)]
TINY_RUNS = [(2, 32, "fp32", "adamw", False), (2, 32, "fp32", "sgd", True)]


def build(torch, transformers, shape, precision, device):
    name, family, hidden, layers, heads, kv, ffn, vocab = shape
    if family == "llama":
        cfg = transformers.LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                       num_key_value_heads=kv, intermediate_size=ffn, vocab_size=vocab,
                                       max_position_embeddings=4096, tie_word_embeddings=False)
    else:
        cfg = transformers.GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads, n_inner=ffn, vocab_size=vocab,
                                      n_positions=4096)
    cfg._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    return model.to(device), cfg


def one_run(torch, transformers, shape, run, device, steps):
    batch, seq, precision, optimizer, ckpt = run
    model, cfg = build(torch, transformers, shape, precision, device)
    if ckpt:
        model.gradient_checkpointing_enable()
    model.train()
    params = [p for p in model.parameters()]
    opt = (torch.optim.AdamW(params, lr=1e-4) if optimizer == "adamw" else torch.optim.SGD(params, lr=1e-3))
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
    amp = precision.startswith("amp")

    def step():
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp and device == "cuda"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(); step(); end.record(); torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter(); step(); times.append(time.perf_counter() - t)
    n_params = sum(p.numel() for p in params)
    model = opt = params = None  # drop the references (step() shares these names)
    return {"shape": shape[0], "family": shape[1], "hidden": shape[2], "layers": shape[3], "heads": shape[4],
            "kv_heads": shape[5], "ffn": shape[6], "vocab": shape[7], "n_params": n_params, "batch": batch, "seq": seq,
            "precision": precision, "optimizer": optimizer, "checkpointing": ckpt, "attn": "sdpa",
            "step_s_median": statistics.median(times), "step_s_all": times}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args(argv)
    import torch
    import transformers

    device = "cpu" if args.cpu else "cuda"
    env = {"kind": "environment", "torch": torch.__version__, "transformers": transformers.__version__,
           "python": platform.python_version(),
           "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu",
           "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d")}
    shapes, runs = (TINY_SHAPES, TINY_RUNS) if args.tiny else (SHAPES, RUNS)
    with open(args.out, "w") as out:
        out.write(json.dumps(env) + "\n")
        for shape in shapes:
            for run in runs:
                try:
                    row = one_run(torch, transformers, shape, run, device, args.steps)
                    row["status"] = "ok"
                except torch.OutOfMemoryError:
                    row = {"shape": shape[0], "batch": run[0], "seq": run[1], "status": "oom"}
                gc.collect()
                if device == "cuda":
                    torch.cuda.empty_cache()
                out.write(json.dumps(row) + "\n"); out.flush()
                print(shape[0], run, row.get("step_s_median"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
