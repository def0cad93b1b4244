"""Measured memory of the model families the main memory set does not cover (a check, never a fit).

Runs ``bench/measure_memory.py``'s training and inference measurements, unchanged, on small
Mistral, Gemma, Phi-3, GPT-NeoX and Mixtral models built from configs. The rows go to a separate
file so that they stay an out-of-sample check of ``gm.training_memory`` and ``gm.inference_memory``
for the families whose formulas were checked op by op on the CPU only.

Usage (GPU)::

    PYTHONUNBUFFERED=1 python bench/measure_memory_families.py --out OUTDIR

and on a CPU, on tiny shapes, to check the script itself::

    python bench/measure_memory_families.py --cpu --tiny --out /tmp/mf
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_memory as mm  # noqa: E402  (the measurement code itself, reused as is)

SHAPES = {
    "mistral-150m": ("mistral", dict(hidden_size=768, num_hidden_layers=8, num_attention_heads=12, num_key_value_heads=4,
                                     intermediate_size=2048, vocab_size=32000, max_position_embeddings=4096,
                                     tie_word_embeddings=False), "families"),
    "gemma-350m": ("gemma", dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=1,
                                 head_dim=256, intermediate_size=4096, vocab_size=256000, max_position_embeddings=4096,
                                 hidden_activation="gelu_pytorch_tanh"), "families"),
    "phi3-250m": ("phi3", dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16,
                               intermediate_size=2816, vocab_size=32064, max_position_embeddings=4096,
                               tie_word_embeddings=False, pad_token_id=0), "families"),
    "neox-160m": ("gpt_neox", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                                   vocab_size=50432, max_position_embeddings=4096, rotary_pct=0.25,
                                   use_parallel_residual=True, tie_word_embeddings=False), "families"),
    "mixtral-100m": ("mixtral", dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                                     intermediate_size=1408, num_local_experts=8, num_experts_per_tok=2,
                                     vocab_size=32000, max_position_embeddings=4096, tie_word_embeddings=False),
                     "families"),
}
TINY = {name: (fam, {**kw, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 512,
                     "num_attention_heads": 4, "num_key_value_heads": min(kw.get("num_key_value_heads", 4), 4),
                     **({"head_dim": 16} if "head_dim" in kw else {})}, s)
        for name, (fam, kw, s) in SHAPES.items()}
GRID = [  # precision, optimizer, checkpointing, batch, seq
    ("amp_bf16", "adamw", False, 4, 1024),
    ("bf16", "sgd_momentum", True, 8, 1024),
    ("fp32", "adamw", False, 2, 512),
]
TINY_GRID = [("fp32", "adamw", False, 1, 32), ("fp32", "sgd", True, 2, 32)]


def build_model(shapes, shape, attn, device, torch):
    import transformers

    family, kwargs, _ = shapes[shape]
    cfg = transformers.AutoConfig.for_model(family, **kwargs)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    return model.to(device=device, dtype=torch.float32), cfg


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--budget-s", type=float, default=200.0)
    args = ap.parse_args(argv)
    import torch

    mm.build_model = build_model  # the same runs, with these families' config classes
    device = "cpu" if args.cpu else "cuda"
    shapes = TINY if args.tiny else SHAPES
    os.makedirs(args.out, exist_ok=True)
    env = mm.environment(torch, device)
    with open(os.path.join(args.out, "families_environment.json"), "w") as fh:
        json.dump(env, fh, indent=1)
    with open(os.path.join(args.out, "families_shapes.json"), "w") as fh:
        json.dump({k: {"hf_config": {"model_type": f, **kw}, "set": s} for k, (f, kw, s) in shapes.items()}, fh, indent=1)
    t0 = time.time()
    runs = [("train", (shape, *g, "sdpa", True)) for g in (TINY_GRID if args.tiny else GRID) for shape in shapes]
    runs += [("infer", (shape, 2, 32, 4) if args.tiny else (shape, 8, 1024, 32)) for shape in shapes]
    with open(os.path.join(args.out, "families_runs.jsonl"), "a") as out:
        for kind, spec in runs:
            if time.time() - t0 > args.budget_s:
                print("budget reached", flush=True)
                break
            row = (mm.train_run if kind == "train" else mm.infer_run)(spec, shapes, device, torch)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(kind, spec, row.get("status"), row.get("peak_bytes", row.get("peak_prefill")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
