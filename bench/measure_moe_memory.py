"""Training memory of mixture-of-experts models with gradient accumulation: what PyTorch allocates in a step.

Ground truth for ``gm.training_memory`` on Hugging Face MoE models (``qwen2_moe``, ``mixtral``, ``qwen3_moe``) with
``gradient_accumulation_steps`` of 1, 2 and 4, AdamW (foreach by default, or ``fused=True``) and SGD, with and without
checkpointing, in ``bf16`` and ``amp_bf16``.

A step is what a plain Hugging Face loop with gradient accumulation does::

    for _ in range(accum):
        loss = model(input_ids=x, labels=x).loss / accum     # the output object (logits) is dropped here
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

Models are built from their ``config.json`` values with ``AutoModelForCausalLM.from_config(...,
attn_implementation="sdpa")`` directly on the GPU in the dtype of their parameters (random weights: nothing is
downloaded): Qwen1.5-MoE-A2.7B's layer at 4, 8 and 12 layers, Mixtral-8x7B's at 2 and 4, Qwen3-30B-A3B's at 4 and 6.
``bf16`` is a bf16 model (parameters, gradients and optimizer states in bf16); ``amp_bf16`` an fp32 model whose
forward and loss run under ``torch.autocast("cuda", torch.bfloat16)``. Optimizers: ``torch.optim.AdamW(lr=1e-5)``
(foreach, the default on CUDA; ``fused=True`` where the run says so) and ``torch.optim.SGD(lr=1e-5)``.
Checkpointing is ``model.gradient_checkpointing_enable()``.

Each run makes three steps. Step 1 creates the optimizer states; in step 2 the peak counter is reset at each phase
boundary (each micro-batch's forward with the loss and its backward, the optimizer step, ``zero_grad``), which gives
the peak of each phase; before step 3 the counters are reset once, and ``torch.cuda.max_memory_allocated`` /
``max_memory_reserved`` over that whole step are the run's ``peak_allocated`` / ``peak_reserved``. All byte values
are absolute (``base_allocated`` is what was allocated before the model was built: the cuBLAS workspaces). Runs
follow one another in one process: before each, every tensor of the last is dropped and ``torch.cuda.empty_cache()``
returns the cached segments. A run that raises ``torch.OutOfMemoryError`` is recorded as ``oom`` with the step and
phase it failed in. The first run is made again at the end, to show that the order does not matter.

Usage::

    python bench/measure_moe_memory.py --print-plan                  # CPU: the runs and gpumodel's predicted peaks
    PYTHONUNBUFFERED=1 python3 bench/measure_moe_memory.py --out OUTDIR --budget-s 200      # on the GPU
    python bench/measure_moe_memory.py --cpu --tiny --out OUTDIR     # tiny shapes on the CPU: checks the script

``bench/moe_memory_accuracy.py`` compares the runs with ``gm.training_memory``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_edge import SHAPES as EDGE_SHAPES, build, stats  # noqa: E402  (the edge runs' proven code)

GiB = 2**30

# Qwen/Qwen3-30B-A3B config.json (128 routed experts of which 8 a token, no shared expert, q/k norms)
_QWEN3_MOE = dict(model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                  num_key_value_heads=4, head_dim=128, intermediate_size=6144, moe_intermediate_size=768,
                  num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
                  mlp_only_layers=[], vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
                  tie_word_embeddings=False, rms_norm_eps=1e-6, use_sliding_window=False)
_QWEN15_MOE = EDGE_SHAPES["qwen1.5-moe-a2.7b"]   # Qwen/Qwen1.5-MoE-A2.7B config.json
_MIXTRAL = EDGE_SHAPES["mixtral-8l"]              # mistralai/Mixtral-8x7B config.json (at 8 of its 32 layers)

#: Hugging Face config.json values, by name: the published models' layers at fewer layers.
SHAPES = {
    "qwen-moe-4l": {**_QWEN15_MOE, "num_hidden_layers": 4},
    "qwen-moe-8l": {**_QWEN15_MOE, "num_hidden_layers": 8},
    "qwen-moe-12l": {**_QWEN15_MOE, "num_hidden_layers": 12},
    "mixtral-2l": {**_MIXTRAL, "num_hidden_layers": 2},
    "mixtral-4l": {**_MIXTRAL, "num_hidden_layers": 4},
    "qwen3-moe-4l": {**_QWEN3_MOE, "num_hidden_layers": 4},
    "qwen3-moe-6l": {**_QWEN3_MOE, "num_hidden_layers": 6},
}
_TINY_COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=128, vocab_size=512, max_position_embeddings=256, tie_word_embeddings=False)
TINY = {
    "qwen-moe-tiny": dict(model_type="qwen2_moe", **_TINY_COMMON, moe_intermediate_size=32,
                          shared_expert_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
                          use_sliding_window=False),
    "mixtral-tiny": dict(model_type="mixtral", **_TINY_COMMON, num_local_experts=4, num_experts_per_tok=2,
                         sliding_window=None),
    "qwen3-moe-tiny": dict(model_type="qwen3_moe", **_TINY_COMMON, head_dim=32, moe_intermediate_size=32,
                           num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, use_sliding_window=False),
}

_KEYS = ("shape", "precision", "optimizer", "fused", "checkpointing", "batch", "seq", "gradient_accumulation_steps")
#: The runs, in the order they are made (the cases users reported first, the families interleaved, so that a run
#: cut short by the budget still covers each): shape, precision, optimizer, fused, checkpointing, batch, seq,
#: gradient accumulation steps. Sized so that gpumodel's peak lies between 15 and 60 GiB (``--print-plan``).
PLAN = [
    # fused AdamW, with and without accumulation
    ("qwen-moe-4l", "bf16", "adamw", True, False, 2, 2048, 2),
    ("mixtral-2l", "bf16", "adamw", True, False, 4, 4096, 2),
    ("qwen3-moe-4l", "bf16", "adamw", True, False, 2, 2048, 2),
    ("qwen-moe-4l", "bf16", "adamw", True, False, 2, 2048, 1),
    ("mixtral-2l", "bf16", "adamw", True, False, 4, 4096, 1),
    ("qwen3-moe-4l", "bf16", "adamw", True, False, 2, 2048, 1),
    ("qwen-moe-4l", "bf16", "adamw", True, False, 2, 2048, 4),
    ("mixtral-2l", "bf16", "adamw", True, False, 4, 4096, 4),
    ("qwen-moe-8l", "bf16", "adamw", True, True, 2, 2048, 4),
    ("mixtral-4l", "bf16", "adamw", True, True, 4, 4096, 2),
    ("qwen3-moe-6l", "bf16", "adamw", True, True, 4, 2048, 2),
    ("qwen-moe-4l", "amp_bf16", "adamw", True, True, 2, 2048, 2),
    ("mixtral-2l", "amp_bf16", "adamw", True, True, 4, 2048, 2),
    ("qwen3-moe-4l", "amp_bf16", "adamw", True, True, 2, 2048, 2),
    # AdamW's default (foreach)
    ("qwen-moe-4l", "bf16", "adamw", False, False, 4, 2048, 2),
    ("mixtral-2l", "bf16", "adamw", False, False, 8, 4096, 2),
    ("qwen3-moe-4l", "bf16", "adamw", False, True, 4, 2048, 4),
    ("qwen-moe-8l", "bf16", "adamw", False, True, 2, 2048, 2),
    ("mixtral-4l", "bf16", "adamw", False, True, 4, 2048, 2),
    ("qwen-moe-4l", "amp_bf16", "adamw", False, True, 1, 2048, 4),
    ("mixtral-2l", "amp_bf16", "adamw", False, True, 2, 2048, 1),
    # SGD (no state: the held gradients and the activations decide the peak)
    ("qwen-moe-4l", "bf16", "sgd", False, False, 4, 2048, 4),
    ("mixtral-2l", "bf16", "sgd", False, True, 8, 4096, 4),
    ("qwen3-moe-6l", "bf16", "sgd", False, False, 4, 2048, 2),
    ("qwen-moe-12l", "bf16", "sgd", False, True, 2, 2048, 2),
    ("mixtral-4l", "bf16", "sgd", False, False, 4, 4096, 2),
    ("qwen-moe-4l", "amp_bf16", "sgd", False, False, 4, 2048, 2),
    ("mixtral-2l", "amp_bf16", "sgd", False, False, 4, 4096, 2),
    ("qwen3-moe-4l", "amp_bf16", "sgd", False, True, 4, 2048, 4),
    # more pairs of one and several micro-batches, and the deepest shape
    ("qwen-moe-8l", "bf16", "sgd", False, True, 4, 4096, 1),
    ("qwen-moe-8l", "bf16", "sgd", False, True, 4, 4096, 2),
    ("qwen3-moe-6l", "bf16", "adamw", True, True, 4, 2048, 1),
    ("mixtral-2l", "bf16", "sgd", False, True, 4, 2048, 2),
    ("qwen-moe-12l", "bf16", "adamw", True, True, 1, 2048, 2),
]
#: A second plan, drawn after the first was measured and the model changed on it (the held-out check): other
#: batches, sequences and accumulation counts, weighted to checkpointed Mixtral, whose backward peak the first plan
#: moved.
HELDOUT_PLAN = [
    ("mixtral-2l", "bf16", "adamw", True, True, 2, 4096, 3),
    ("mixtral-4l", "bf16", "sgd", False, True, 2, 8192, 2),
    ("qwen-moe-8l", "bf16", "adamw", True, True, 4, 2048, 3),
    ("mixtral-4l", "bf16", "adamw", True, True, 2, 2048, 1),
    ("mixtral-2l", "amp_bf16", "sgd", False, True, 2, 4096, 2),
    ("qwen3-moe-6l", "bf16", "sgd", False, True, 8, 2048, 2),
    ("mixtral-2l", "amp_bf16", "adamw", True, True, 1, 8192, 1),
    ("mixtral-2l", "bf16", "sgd", False, True, 16, 1024, 2),
    ("qwen-moe-4l", "amp_bf16", "sgd", False, True, 2, 4096, 2),
    ("mixtral-4l", "bf16", "sgd", False, False, 2, 4096, 3),
    ("qwen3-moe-4l", "amp_bf16", "adamw", True, True, 1, 4096, 2),
    ("mixtral-2l", "bf16", "adamw", False, True, 6, 2048, 1),
    ("qwen-moe-12l", "bf16", "sgd", False, True, 4, 2048, 1),
    ("qwen3-moe-4l", "bf16", "adamw", False, False, 2, 4096, 2),
    ("mixtral-2l", "bf16", "adamw", True, False, 2, 8192, 2),
    ("qwen-moe-4l", "bf16", "sgd", False, False, 8, 1024, 2),
    ("mixtral-2l", "bf16", "sgd", False, True, 8, 2048, 3),
    ("mixtral-4l", "amp_bf16", "sgd", False, True, 1, 4096, 2),
]

TINY_PLAN = [
    ("qwen-moe-tiny", "bf16", "adamw", True, False, 2, 32, 2),
    ("mixtral-tiny", "bf16", "adamw", False, True, 2, 32, 4),
    ("qwen3-moe-tiny", "amp_bf16", "adamw", True, False, 1, 32, 1),
    ("qwen-moe-tiny", "amp_bf16", "sgd", False, True, 2, 32, 2),
    ("mixtral-tiny", "bf16", "sgd", False, False, 1, 32, 1),
    ("qwen3-moe-tiny", "bf16", "adamw", False, False, 2, 32, 2),
]


def plan_runs(tiny: bool, heldout: bool = False) -> list[dict]:
    """The runs as dicts (keys: shape, precision, optimizer, fused, checkpointing, batch, seq,
    gradient_accumulation_steps), the first one again at the end."""
    runs = [dict(zip(_KEYS, r)) for r in (TINY_PLAN if tiny else HELDOUT_PLAN if heldout else PLAN)]
    return runs + [dict(runs[0], repeat=True)]


# ----------------------------------------------------------------------------------------------- plan (CPU)
def predicted(hf: dict, run: dict):
    """``gm.training_memory`` of a run (needs gpumodel, not torch)."""
    import gpumodel as gm

    return gm.training_memory(gm.TransformerConfig.from_hf(hf), run["batch"], run["seq"], precision=run["precision"],
                              optimizer=run["optimizer"], checkpointing=run["checkpointing"],
                              gradient_accumulation_steps=run["gradient_accumulation_steps"],
                              fused=run["fused"], foreach=True)


def print_plan(shapes: dict, runs: list[dict]) -> None:
    import gpumodel as gm

    for name, hf in shapes.items():
        print(f"{name:15s} {hf['model_type']:10s} {gm.TransformerConfig.from_hf(hf).num_parameters() / 1e9:6.2f} B "
              f"parameters")
    print(f"{'#':>3s} {'shape':15s} {'precision':9s} {'optimizer':9s} {'ckpt':4s} {'batch x seq':>11s} {'accum':>5s}  "
          f"{'predicted':>9s}  peak moment")
    for i, r in enumerate(runs):
        m = predicted(shapes[r["shape"]], r)
        opt = "fused" if r["optimizer"] == "adamw" and r["fused"] else ("foreach" if r["optimizer"] == "adamw" else "sgd")
        print(f"{i:3d} {r['shape']:15s} {r['precision']:9s} {opt:9s} {int(r['checkpointing']):4d} "
              f"{r['batch']:4d} x {r['seq']:<5d} {r['gradient_accumulation_steps']:5d}  "
              f"{float(m.peak_bytes) / GiB:6.2f} GiB  {m.peak_moment}{'  (repeat)' if r.get('repeat') else ''}")
    print(f"{len(runs)} runs")


# ----------------------------------------------------------------------------------------------- runs (GPU)
class Meter:
    """Allocated bytes and their peak since the last reset (zeros on the CPU)."""

    def __init__(self, torch, cuda: bool):
        self.torch, self.cuda = torch, cuda

    def reset(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()

    def now(self) -> int:
        if not self.cuda:
            return 0
        self.torch.cuda.synchronize()
        return self.torch.cuda.memory_allocated()

    def peak(self) -> int:
        if not self.cuda:
            return 0
        self.torch.cuda.synchronize()
        return self.torch.cuda.max_memory_allocated()

    def peak_reserved(self) -> int:
        return self.torch.cuda.max_memory_reserved() if self.cuda else 0


def make_optimizer(run: dict, params, cuda: bool, torch):
    """AdamW (foreach by default, fused where the run says so) or SGD; and the implementation's name."""
    if run["optimizer"] == "adamw":
        # fused=False given explicitly would also turn foreach off (the for-loop implementation): only fused runs
        # name it, as users do. On the CPU (checking the script) AdamW's default is the for-loop one.
        if run["fused"] and cuda:
            return torch.optim.AdamW(params, lr=1e-5, fused=True), "fused"
        return torch.optim.AdamW(params, lr=1e-5), "foreach" if cuda else "forloop"
    if run["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=1e-5), None
    raise ValueError(f"optimizer {run['optimizer']!r}")


def run_one(run: dict, hf: dict, device: str, torch) -> dict:
    row = dict(run)
    cuda = device == "cuda"
    m = Meter(torch, cuda)
    model = opt = x = loss = None
    where = ("build", None)
    t0 = time.time()
    try:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.reset_accumulated_memory_stats()
            row["base_allocated"] = torch.cuda.memory_allocated()
            row["base_reserved"] = torch.cuda.memory_reserved()
            row["free_before"], row["total"] = torch.cuda.mem_get_info()
        dtype = torch.bfloat16 if run["precision"] == "bf16" else torch.float32
        model, config = build(hf, dtype, device, torch)
        model.train()
        if run["checkpointing"]:
            model.gradient_checkpointing_enable()
        row["n_params"] = sum(p.numel() for p in model.parameters())
        row["param_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
        row["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
        row["experts_implementation"] = getattr(model.config, "_experts_implementation", None)
        row["alloc_model"] = m.now()
        opt, row["implementation"] = make_optimizer(run, model.parameters(), cuda, torch)
        amp = run["precision"].startswith("amp_")
        accum = run["gradient_accumulation_steps"]
        gen = torch.Generator(device=device).manual_seed(0)
        x = torch.randint(0, config.vocab_size, (run["batch"], run["seq"]), device=device, generator=gen)
        row["step_peaks"], row["step_reserved"], row["phases"] = [], [], {}
        for step in range(3):
            phased = step == 1   # step 2: the peak counter reset at each phase boundary
            step_peak = 0
            m.reset()
            for micro in range(accum):
                where = (step + 1, f"forward{micro + 1}")
                with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
                    loss = model(input_ids=x, labels=x).loss / accum
                if phased:
                    step_peak = max(step_peak, m.peak())
                    row["phases"][where[1]] = dict(peak=m.peak(), after=m.now())
                    m.reset()
                where = (step + 1, f"backward{micro + 1}")
                loss.backward()
                loss = None
                if phased:
                    step_peak = max(step_peak, m.peak())
                    row["phases"][where[1]] = dict(peak=m.peak(), after=m.now())
                    m.reset()
            where = (step + 1, "optimizer_step")
            opt.step()
            if phased:
                step_peak = max(step_peak, m.peak())
                row["phases"][where[1]] = dict(peak=m.peak(), after=m.now())
                m.reset()
            where = (step + 1, "zero_grad")
            opt.zero_grad(set_to_none=True)
            row["step_peaks"].append(max(step_peak, m.peak()))
            row["step_reserved"].append(m.peak_reserved())
            if phased:
                row["phases"][where[1]] = dict(peak=m.peak(), after=m.now())
        row["alloc_steady"] = m.now()   # between steps: weights and optimizer states
        row["peak_allocated"] = row["step_peaks"][-1]
        row["peak_reserved"] = row["step_reserved"][-1]
        row["status"] = "ok"
    except torch.OutOfMemoryError as exc:
        row["status"] = "oom"
        row["failed_step"], row["failed_phase"] = where
        row["error"] = str(exc).splitlines()[0][:400]
        row["peak_before_failure"] = m.peak()
    except Exception as exc:  # a broken run is recorded; the sweep goes on
        row["status"] = "error"
        row["failed_step"], row["failed_phase"] = where
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        traceback.print_exc()
    finally:
        if cuda:
            row["allocator"] = stats(torch)
        model = opt = x = loss = None
        gc.collect()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    row["seconds"] = round(time.time() - t0, 2)
    return row


def environment(torch, cuda: bool) -> dict:
    import platform
    import subprocess

    import transformers

    env = dict(python=platform.python_version(), torch=torch.__version__, transformers=transformers.__version__,
               cuda=torch.version.cuda, device="cuda" if cuda else "cpu",
               allocator_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
               date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if cuda:
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, total_memory=p.total_memory, sm_count=p.multi_processor_count)
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            env["driver"] = f"unknown ({exc})"
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for runs.jsonl, shapes.json, environment.json and log.txt")
    ap.add_argument("--budget-s", type=float, default=200.0,
                    help="start no run after this many seconds, nor one that the longest run so far would carry "
                         "past them")
    ap.add_argument("--print-plan", action="store_true", help="print the runs with gpumodel's predicted peaks (CPU)")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (checks the script; needs --tiny)")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes")
    ap.add_argument("--heldout", action="store_true", help="the second plan (HELDOUT_PLAN)")
    args = ap.parse_args(argv)
    t_start = time.time()
    shapes, runs = (TINY if args.tiny else SHAPES), plan_runs(args.tiny, args.heldout)
    if args.print_plan:
        print_plan(shapes, runs)
        return 0
    if args.out is None:
        ap.error("--out is required (or --print-plan)")
    if args.cpu and not args.tiny:
        ap.error("--cpu runs the tiny shapes only: add --tiny")

    import torch

    cuda = not args.cpu
    device = "cuda" if cuda else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    log_fh = open(args.out / "log.txt", "a")

    def log(text: str) -> None:
        print(text, flush=True)
        log_fh.write(text + "\n")
        log_fh.flush()

    env = environment(torch, cuda)
    if cuda:
        # the CUDA context and the main thread's cuBLAS workspace exist before the first run
        a = torch.randn(256, 256, device="cuda")
        (a @ a).sum().item()
        del a
        free_b, total_b = torch.cuda.mem_get_info()
        env.update(after_init_used_bytes=total_b - free_b, after_init_allocated=torch.cuda.memory_allocated(),
                   after_init_reserved=torch.cuda.memory_reserved())
    (args.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    (args.out / "shapes.json").write_text(json.dumps(shapes, indent=1) + "\n")
    log(json.dumps(env))

    longest, done = 0.0, 0
    with open(args.out / "runs.jsonl", "a") as rows_fh:
        for i, run in enumerate(runs):
            elapsed = time.time() - t_start
            if elapsed > args.budget_s or elapsed + longest > args.budget_s:
                log(f"budget reached after {elapsed:.0f} s: {len(runs) - i} of {len(runs)} runs not started")
                break
            row = run_one(run, shapes[run["shape"]], device, torch)
            row["index"] = i
            rows_fh.write(json.dumps(row) + "\n")
            rows_fh.flush()
            longest = max(longest, row["seconds"])
            done += 1
            peak = row.get("peak_allocated", row.get("peak_before_failure", 0))
            log(f"[{time.time() - t_start:6.1f}s] {i:3d} {run['shape']:15s} {run['precision']:8s} "
                f"{row.get('implementation') or run['optimizer']:8s} ckpt={int(run['checkpointing'])} "
                f"{run['batch']:3d}x{run['seq']:<5d} accum={run['gradient_accumulation_steps']} "
                f"{row['status']:5s} alloc {peak / GiB:6.2f} reserved {row.get('peak_reserved', 0) / GiB:6.2f} GiB "
                f"({row['seconds']:.1f} s)")
    log(f"done {done}/{len(runs)} runs in {time.time() - t_start:.1f} s")
    log_fh.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
