"""Training steps at the edge of a card's memory: allocated and reserved peaks, and out-of-memory.

Ground truth for the question "does it fit?" where it is hard: runs sized so that the allocated peak
is near the card's capacity. For each run the script records what ``torch.cuda.max_memory_allocated``
and ``torch.cuda.max_memory_reserved`` reached, whether the step ran or raised ``torch.OutOfMemoryError``
(and in which step), and the caching allocator's own statistics (``torch.cuda.memory_stats``: retries
after freeing cached blocks, inactive split bytes, segments), with PyTorch's default allocator and with
``expandable_segments:True``. For a few runs it also records the allocator's event trace of one step
(``torch.cuda.memory._record_memory_history``: every allocation and free with its size and address), the
material an allocator model is checked on.

The program is the plain Hugging Face loop users run (two warm-up steps, so that the optimizer states
exist, then two measured steps)::

    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

Models are built from their ``config.json`` values with ``AutoModelForCausalLM.from_config`` directly on
the GPU in the dtype of their parameters (random weights: nothing is downloaded). ``bf16`` is a bf16
model (parameters, gradients and optimizer states in bf16); ``amp_bf16`` an fp32 model run under
``torch.autocast``. Optimizers are ``torch.optim.AdamW(lr=1e-5)`` (foreach by default, or
``fused=True``) and ``torch.optim.SGD``. Checkpointing is ``model.gradient_checkpointing_enable()``.

Runs follow one another in one process: before each, every tensor of the last is dropped and
``torch.cuda.empty_cache()`` returns the cached segments to the driver, and the allocator's setting is
switched with ``torch.cuda.memory._set_allocator_settings``. The first run is repeated at the end, to show
whether the order matters: with the default allocator at the edge it can (``tests/data/memory/edge``:
``h100_amp_traces`` ran then failed, ``h100_sgd_traces`` failed then ran).

Usage::

    python bench/measure_edge.py --make-plan --out tests/data/memory/edge/plan.json   # CPU: choose the runs
    PYTHONUNBUFFERED=1 python bench/measure_edge.py --plan tests/data/memory/edge/plan.json \\
        --gpu h100-sxm --out OUTDIR --budget-s 420                                       # on the GPU
    python bench/measure_edge.py --plan PLAN --gpu h100-sxm --cpu --out /tmp/edge        # tiny, CPU
    python bench/measure_edge.py --plan tests/data/memory/edge/plan_amp_traces.json --gpu h100-sxm \
        --out OUTDIR --traces 5 --trace-whole      # each traced run's every event, its model's build on
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import sys
import time
import traceback
from pathlib import Path

# Qwen/Qwen1.5-MoE-A2.7B config.json (14.3B parameters, 60 routed experts of which 4 a token, one shared)
_QWEN15_MOE = dict(model_type="qwen2_moe", hidden_size=2048, num_hidden_layers=24,
                   num_attention_heads=16, num_key_value_heads=16, intermediate_size=5632,
                   moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                   num_experts=60, num_experts_per_tok=4, decoder_sparse_step=1,
                   norm_topk_prob=False, vocab_size=151936, max_position_embeddings=8192,
                   rope_theta=1000000.0, tie_word_embeddings=False, rms_norm_eps=1e-6,
                   use_sliding_window=False)

# Hugging Face config.json values (public model cards), by name. "set" says whether a shape may be looked
# at while building the model ("dev") or only checks it afterwards ("heldout").
SHAPES = {
    # meta-llama/Meta-Llama-3-8B config.json
    "llama-3-8b": dict(model_type="llama", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
                       max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False,
                       rms_norm_eps=1e-5),
    # meta-llama/Llama-3.2-3B config.json
    "llama-3.2-3b": dict(model_type="llama", hidden_size=3072, num_hidden_layers=28, num_attention_heads=24,
                         num_key_value_heads=8, intermediate_size=8192, vocab_size=128256, head_dim=128,
                         max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True,
                         rms_norm_eps=1e-5),
    # meta-llama/Llama-3.2-1B config.json
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, intermediate_size=8192, vocab_size=128256, head_dim=64,
                         max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True,
                         rms_norm_eps=1e-5),
    # Qwen/Qwen2.5-7B config.json
    "qwen2.5-7b": dict(model_type="qwen2", hidden_size=3584, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, intermediate_size=18944, vocab_size=152064,
                       max_position_embeddings=32768, rope_theta=1000000.0, tie_word_embeddings=False,
                       rms_norm_eps=1e-6, use_sliding_window=False),
    # Qwen/Qwen1.5-MoE-A2.7B config.json (14.3B parameters, 60 routed experts of which 4 a token, one shared)
    "qwen1.5-moe-a2.7b": _QWEN15_MOE,
    # the same MoE layer at half the depth (7.2B parameters): a card of 80 GB holds its training state
    "qwen-moe-12l": {**_QWEN15_MOE, "num_hidden_layers": 12},
    # mistralai/Mixtral-8x7B config.json at 8 of its 32 layers (12.9B parameters)
    "mixtral-8l": dict(model_type="mixtral", hidden_size=4096, num_hidden_layers=8, num_attention_heads=32,
                       num_key_value_heads=8, intermediate_size=14336, num_local_experts=8,
                       num_experts_per_tok=2, vocab_size=32000, max_position_embeddings=32768,
                       rope_theta=1000000.0, tie_word_embeddings=False, rms_norm_eps=1e-5,
                       sliding_window=None),
}
TINY = {
    "llama-tiny": dict(model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=160, vocab_size=512, max_position_embeddings=256,
                       tie_word_embeddings=False),
    "moe-tiny": dict(model_type="qwen2_moe", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, intermediate_size=160, moe_intermediate_size=32,
                     shared_expert_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
                     vocab_size=512, max_position_embeddings=256, tie_word_embeddings=False,
                     use_sliding_window=False),
}

#: Options tried for every shape when making the plan: (precision, optimizer, fused, checkpointing).
OPTIONS = [("bf16", "adamw", False, True), ("bf16", "adamw", True, True), ("bf16", "adamw", False, False),
           ("amp_bf16", "adamw", False, True), ("bf16", "sgd", False, False), ("amp_bf16", "adamw", True, False)]
BATCH_SEQ = [(b, s) for s in (1024, 2048, 4096, 8192) for b in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)]
#: The cards (their records' ``usable_memory_bytes``: what the CUDA runtime reports as total memory).
CARDS = ("h100-sxm", "h200-sxm")


# ----------------------------------------------------------------------------------------------- plan (CPU)
def make_plan(out: Path, per_card: int, seed: int) -> None:
    """Choose runs whose modelled allocated peak lies within -20% .. +12% of each card's memory.

    The model only places the runs near the edge; what happens there is what the GPU says. Spread over
    shapes and options, each run measured with both allocator settings.
    """
    import numpy as np

    import gpumodel as gm

    rng = np.random.default_rng(seed)
    plan = {}
    for card in CARDS:
        capacity = gm.gpu(card).usable_memory_bytes
        found = []
        for shape, hf in SHAPES.items():
            cfg = gm.TransformerConfig.from_hf(hf)
            for precision, optimizer, fused, ckpt in OPTIONS:
                for batch, seq in BATCH_SEQ:
                    mem = gm.training_memory(cfg, batch_size=batch, seq_len=seq, precision=precision,
                                             optimizer=optimizer, checkpointing=ckpt)
                    ratio = float(mem.peak_bytes) / capacity
                    if 0.80 <= ratio <= 1.12:
                        found.append(dict(shape=shape, precision=precision, optimizer=optimizer, fused=fused,
                                          checkpointing=ckpt, batch=batch, seq=seq, modelled_ratio=round(ratio, 4)))
        by_shape: dict[str, list] = {}
        for row in found:
            by_shape.setdefault(row["shape"], []).append(row)
        chosen = []
        while len(chosen) < per_card and any(by_shape.values()):
            for shape in list(by_shape):
                rows = by_shape[shape]
                if rows and len(chosen) < per_card:
                    chosen.append(rows.pop(int(rng.integers(len(rows)))))
        chosen.sort(key=lambda r: (r["shape"], r["modelled_ratio"]))
        plan[card] = chosen
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"shapes": SHAPES, "runs": plan}, indent=1) + "\n")
    for card, rows in plan.items():
        print(f"{card}: {len(rows)} runs, modelled peak / capacity "
              f"{min(r['modelled_ratio'] for r in rows):.2f}-{max(r['modelled_ratio'] for r in rows):.2f}")


# ----------------------------------------------------------------------------------------------- runs (GPU)
def build(hf: dict, dtype, device, torch):
    import transformers

    kwargs = dict(hf)
    config = transformers.AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype)
    return model, config


def stats(torch) -> dict:
    s = torch.cuda.memory_stats()
    keys = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
            "inactive_split_bytes.all.peak", "reserved_bytes.large_pool.peak", "reserved_bytes.small_pool.peak",
            "segment.all.peak", "segment.large_pool.peak", "requested_bytes.all.peak",
            "allocated_bytes.all.peak", "reserved_bytes.all.peak", "oversize_allocations.peak")
    return {k: s.get(k) for k in keys}


def compact_trace(snapshot: dict) -> dict:
    """The allocator's events of one device as three lists: action code, size [B], address offset [B]."""
    codes = {"alloc": 0, "free_requested": 1, "free_completed": 2, "segment_alloc": 3, "segment_free": 4,
             "segment_map": 5, "segment_unmap": 6, "oom": 7, "snapshot": 8}
    events = snapshot["device_traces"][0] if snapshot.get("device_traces") else []
    base = min((e["addr"] for e in events if e.get("addr")), default=0)
    return {"codes": codes, "action": [codes.get(e["action"], -1) for e in events],
            "size": [int(e.get("size", 0)) for e in events], "addr": [int(e.get("addr", 0)) - base for e in events]}


def run_one(spec: dict, hf: dict, expandable: bool, device: str, torch, trace: bool,
            whole: bool = False) -> tuple[dict, dict | None]:
    """One run: build, four steps; with ``trace``, the allocator's events of the last step, or with ``whole`` of the
    whole run from the model's build on (the history that places the last step's blocks), kept also when a step runs
    out of memory."""
    row = dict(spec, expandable_segments=expandable)
    model = opt = x = loss = None
    recorded = None
    t0 = time.time()
    cuda = device == "cuda"
    try:
        if cuda:
            torch.cuda.memory._set_allocator_settings(f"expandable_segments:{'True' if expandable else 'False'}")
            torch.cuda.reset_peak_memory_stats()
            row["base_allocated"] = torch.cuda.memory_allocated()
            row["base_reserved"] = torch.cuda.memory_reserved()
            row["free_before"], row["total"] = torch.cuda.mem_get_info()
            if trace and whole:
                torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=1_000_000)
        dtype = torch.bfloat16 if spec["precision"] == "bf16" else torch.float32
        model, config = build(hf, dtype, device, torch)
        model.train()
        if spec["checkpointing"]:
            model.gradient_checkpointing_enable()
        row["n_params"] = sum(p.numel() for p in model.parameters())
        if spec["optimizer"] == "adamw":
            # fused=False given explicitly would also turn foreach off (the for-loop implementation): only
            # fused runs name it, as users do
            fused = {"fused": True} if spec["fused"] and cuda else {}
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5, **fused)
            row["implementation"] = "fused" if fused else "foreach" if cuda else "forloop"
        else:
            opt = torch.optim.SGD(model.parameters(), lr=1e-5)
        amp = spec["precision"].startswith("amp_")
        x = torch.randint(0, config.vocab_size, (spec["batch"], spec["seq"]), device=device)
        row["step_peaks"], row["step_reserved"] = [], []
        for step in range(4):
            row["failed_step"] = step
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            if trace and step == 3 and cuda and not whole:
                torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=400_000)
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
            loss = None
            opt.step()
            opt.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize()
                row["step_peaks"].append(torch.cuda.max_memory_allocated())
                row["step_reserved"].append(torch.cuda.max_memory_reserved())
            if trace and step == 3 and cuda:
                recorded = compact_trace(torch.cuda.memory._snapshot())
                torch.cuda.memory._record_memory_history(enabled=None)
        row.pop("failed_step")
        row["status"] = "ok"
    except torch.OutOfMemoryError as exc:
        row["status"] = "oom"
        row["error"] = str(exc).splitlines()[0][:400]
        if trace and cuda:
            if whole:
                recorded = compact_trace(torch.cuda.memory._snapshot())
            torch.cuda.memory._record_memory_history(enabled=None)
    except Exception as exc:  # a broken run is recorded; the sweep goes on
        row["status"] = "error"
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        traceback.print_exc()
        if trace and cuda:
            torch.cuda.memory._record_memory_history(enabled=None)
    finally:
        if cuda:
            row["peak_allocated"] = torch.cuda.max_memory_allocated()
            row["peak_reserved"] = torch.cuda.max_memory_reserved()
            row["allocator"] = stats(torch)
        model = opt = x = loss = None
        gc.collect()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    row["seconds"] = round(time.time() - t0, 2)
    return row, recorded


def environment(torch) -> dict:
    import platform

    import transformers

    env = dict(python=platform.python_version(), torch=torch.__version__, transformers=transformers.__version__,
               cuda=torch.version.cuda)
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, total_memory=p.total_memory, sm_count=p.multi_processor_count)
        try:
            import subprocess

            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True).stdout.strip()
        except OSError:
            pass
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make-plan", action="store_true", help="choose the runs (CPU, needs gpumodel)")
    ap.add_argument("--per-card", type=int, default=18, help="runs a card in the plan (each with both settings)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--plan", type=Path, help="the plan to run")
    ap.add_argument("--gpu", choices=sorted(CARDS), help="which card's runs")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no run after this many seconds")
    ap.add_argument("--traces", type=int, default=4, help="runs whose allocator events are recorded")
    ap.add_argument("--trace-whole", action="store_true",
                    help="record a traced run's events from the model's build on (and when it runs out of memory), "
                         "not only its last step's")
    ap.add_argument("--cpu", action="store_true", help="tiny shapes on the CPU: checks the script")
    args = ap.parse_args(argv)
    if args.make_plan:
        make_plan(args.out, args.per_card, args.seed)
        return 0
    import torch

    device = "cpu" if args.cpu else "cuda"
    plan = json.loads(args.plan.read_text())
    shapes = TINY if args.cpu else plan["shapes"]
    runs = plan["runs"][args.gpu]
    if args.cpu:
        runs = [dict(r, shape=("moe-tiny" if "moe" in r["shape"] or "mixtral" in r["shape"] else "llama-tiny"),
                     batch=1, seq=32) for r in runs[:3]]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "environment.json").write_text(json.dumps(environment(torch), indent=1) + "\n")
    order = [(r, e) for r in runs for e in (False, True)] + [(runs[0], False)]  # first run again, last
    traced = {i for i in range(0, len(order), max(1, len(order) // max(1, args.traces)))}
    t0, traces = time.time(), {}
    with open(args.out / "runs.jsonl", "w") as f:
        for i, (spec, expandable) in enumerate(order):
            if time.time() - t0 > args.budget_s:
                print(f"budget reached after {i} of {len(order)} runs", flush=True)
                break
            row, trace = run_one(spec, shapes[spec["shape"]], expandable, device, torch, i in traced,
                                 args.trace_whole)
            row["index"] = i
            f.write(json.dumps(row) + "\n")
            f.flush()
            if trace is not None:
                traces[str(i)] = dict(run=row, trace=trace)
            gib = 2**30
            print(f"{i:3d} {spec['shape']:18s} {spec['precision']:8s} {spec['optimizer']:5s} fused={spec['fused']!s:5s} "
                  f"ckpt={spec['checkpointing']!s:5s} {spec['batch']:3d}x{spec['seq']:<5d} exp={expandable!s:5s} "
                  f"{row['status']:5s} alloc {row.get('peak_allocated', 0) / gib:6.2f} "
                  f"reserved {row.get('peak_reserved', 0) / gib:6.2f} GiB "
                  f"(modelled {spec['modelled_ratio']:.2f} of the card) {row['seconds']:.1f} s", flush=True)
    if traces:
        with gzip.open(args.out / "traces.json.gz", "wt") as g:
            json.dump(traces, g)
    return 0


if __name__ == "__main__":
    sys.exit(main())
