"""``gpumodel memory MODEL --gpu h100 --batch 8 --seq 4096``: a memory breakdown, fits or not, largest batch."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from ._common import count_type, output_path, print_json, print_table, progress, read_json_object, refuse
from ..vocabulary import resolve_model
import gpumodel as gm

GiB = 2 ** 30

#: training-only options and their defaults (None in the parser, so that giving one with --inference is seen)
_TRAINING = {"precision": "amp_bf16", "optimizer": "adamw", "checkpointing": "none", "grad_accum": 1, "zero": 0,
             "dp": 1, "pp": 1}
_TRAINING_SWITCHES = ("no_cache", "sp")
#: inference-only options and their defaults
_INFERENCE = {"dtype": "bf16", "kv_dtype": None, "new_tokens": 256}

EPILOG = """\
JSON output (--json), SI units:
  model, parameters [count], gpu, batch_size, seq_len, mode ("training" or "inference"),
  peak_bytes [B], peak_moment (when the peak happens), breakdown {component: bytes [B]},
  reserved_bytes [B] (allocator estimate), total_bytes [B] (with the CUDA context and, on several GPUs, NCCL's
  communicator buffers), communicator_bytes [B] (those buffers; 0 on one GPU),
  gpu_memory_bytes [B] (usable), fits (true/false, as gm.fits decides), headroom_bytes [B] (negative: does not
  fit), needed_bytes [B] (what fits compared: the reserve, or near the capacity the caching-allocator replay),
  decided_by ("reserve", "allocator", "allocated"), uncertain (the capacity lies in the need's 80% band),
  max_batch_size (largest batch that fits at --seq), options {keyword: value} (what was passed),
  suggestions (when it does not fit: a list of {change (the options to give), total_bytes [B] per
  GPU, fits (true/false)}), plot (the file written, with --plot).
With --list --json: a list of model preset names.

Counts (--batch, --seq, ...) accept 4096, 8Ki (8192), 1e6. Training-only options (--precision,
--optimizer, --checkpointing, --grad-accum, --zero, --dp, --pp, --no-cache, --sp) are refused with
--inference; inference-only ones (--dtype, --kv-dtype, --new-tokens) need --inference.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("memory", help="training or inference memory of a transformer on a GPU",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="model preset (see `gpumodel memory --list`), e.g. llama-3-8b")
    p.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json instead of a preset")
    p.add_argument("--list", action="store_true", help="list the model presets")
    p.add_argument("--gpu", default="h100", help="GPU name or alias (default h100)")
    p.add_argument("--batch", type=count_type(1), default=1, help="micro-batch size per GPU [sequences] (default 1)")
    p.add_argument("--seq", type=count_type(1), default=2048, help="sequence length [tokens] (default 2048)")
    p.add_argument("--attention", default="sdpa", choices=["sdpa", "flash", "cudnn", "efficient", "math", "eager"])
    p.add_argument("--tp", type=count_type(1), default=1, help="tensor-parallel degree (default 1)")
    t = p.add_argument_group("training (the default mode)")
    t.add_argument("--precision", choices=["fp32", "amp_bf16", "amp_fp16", "bf16", "fp16"],
                   help="training precision (default amp_bf16)")
    t.add_argument("--optimizer", choices=["adamw", "adam", "sgd", "sgd_momentum", "adafactor", "adamw_8bit"],
                   help="optimizer (default adamw)")
    t.add_argument("--checkpointing", choices=["none", "full", "selective"],
                   help="activation recomputation (default none)")
    t.add_argument("--no-cache", action="store_true", help="training forward with use_cache=False")
    t.add_argument("--grad-accum", type=count_type(1), help="gradient accumulation steps (default 1)")
    t.add_argument("--zero", type=int, choices=[0, 1, 2, 3], help="ZeRO stage (with --dp; default 0)")
    t.add_argument("--dp", type=count_type(1), help="data-parallel degree (default 1)")
    t.add_argument("--pp", type=count_type(1), help="pipeline-parallel degree (default 1)")
    t.add_argument("--sp", action="store_true", help="sequence parallelism (with --tp)")
    i = p.add_argument_group("inference")
    i.add_argument("--inference", action="store_true", help="serving memory instead of training")
    i.add_argument("--dtype", help="weight dtype: bf16, fp16, fp32, fp8, int8, int4 (default bf16)")
    i.add_argument("--kv-dtype", help="KV-cache dtype (default: the activation dtype)")
    i.add_argument("--new-tokens", type=count_type(0), help="tokens generated after the prompt (default 256)")
    p.add_argument("--json", action="store_true", help="machine-readable output (SI units; keys below)")
    p.add_argument("--plot", metavar="PNG", help="write a stacked-bar breakdown (this batch and the largest that fits)")
    p.set_defaults(func=_memory)


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _check_options(args: argparse.Namespace) -> None:
    """Refuse options the mode ignores; then fill in the defaults."""
    flag = _flag
    if args.inference:
        refuse([flag(k) for k in _TRAINING if getattr(args, k) is not None]
               + [flag(k) for k in _TRAINING_SWITCHES if getattr(args, k)],
               "applies to training; drop it or drop --inference")
    else:
        given = [flag(k) for k in _INFERENCE if getattr(args, k) is not None]
        refuse(given, "needs --inference" + (" (training takes --precision)" if given[:1] == ["--dtype"] else ""))
    for key, default in {**_TRAINING, **_INFERENCE}.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    if args.list:
        refuse((["a model name"] if args.model else []) + (["--hf-config"] if args.hf_config else []),
               "cannot be given with --list")
    elif args.model and args.hf_config:
        refuse(["--hf-config"], f"replaces the model preset; give {args.model!r} or --hf-config, not both")


def _memory(args: argparse.Namespace) -> int:
    from gpumodel.core.sizing import max_batch_size

    _check_options(args)
    if args.list:
        names = gm.list_models()
        if args.json:
            print_json(names)
        else:
            print_table(["model", "parameters"], [(n, f"{gm.model(n).num_parameters() / 1e9:.2f} B") for n in names])
        return 0
    plot = output_path(args.plot, "--plot") if args.plot else None
    if args.hf_config:
        data = read_json_object(args.hf_config, "--hf-config")
        path = Path(args.hf_config)
        fallback = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        cfg = resolve_model({**data, "_name_or_path": data.get("_name_or_path") or fallback}, "--hf-config")
    elif args.model:
        cfg = gm.model(args.model)
    else:
        raise gm.ArgumentError("give a model preset name (see `gpumodel memory --list`) or --hf-config PATH")
    gpu = gm.gpu(args.gpu)
    progress(f"sizing {cfg.name} on {gpu.name}: the memory of batch {args.batch} and the largest batch that fits...")
    if args.inference:
        kw = dict(dtype=args.dtype, kv_dtype=args.kv_dtype, new_tokens=args.new_tokens, attention=args.attention,
                  tp=args.tp)
        m = gm.inference_memory(cfg, args.batch, args.seq, **kw)
    else:
        kw = dict(precision=args.precision, optimizer=args.optimizer, checkpointing=args.checkpointing,
                  attention=args.attention, use_cache=not args.no_cache, gradient_accumulation_steps=args.grad_accum,
                  zero=args.zero, dp=args.dp, tp=args.tp, pp=args.pp, sequence_parallel=args.sp)
        m = gm.training_memory(cfg, args.batch, args.seq, **kw)
    moment = m.peak_moment
    margin = gm.memory_margin(cfg, gpu, args.batch, args.seq, training=not args.inference, **kw)
    headroom = float(margin.spare_bytes)   # as gm.fits decides: the caching allocator's replay near the capacity
    best = max_batch_size(cfg, gpu, args.seq, training=not args.inference, **kw)
    result = dict(model=cfg.name, parameters=cfg.num_parameters(), gpu=gpu.name, batch_size=args.batch,
                  seq_len=args.seq, mode="inference" if args.inference else "training", peak_bytes=m.peak_bytes,
                  peak_moment=moment, breakdown=dict(m.breakdown), reserved_bytes=m.reserved_bytes,
                  total_bytes=m.total_bytes, communicator_bytes=float(getattr(m, "communicator_bytes", 0.0)),
                  gpu_memory_bytes=gpu.usable_memory_bytes, fits=bool(margin.fits),
                  headroom_bytes=headroom, needed_bytes=float(margin.needed_bytes), decided_by=str(margin.decided_by),
                  uncertain=bool(margin.uncertain), max_batch_size=best, options=kw,
                  suggestions=[] if margin.fits else _suggestions(args, cfg, gpu, kw))
    if plot:
        _plot(args, plot, cfg, gpu, m, best, kw)
        result["plot"] = str(plot)
    if args.json:
        print_json(result)
        return 0
    print(f"{cfg.name}: {cfg.num_parameters() / 1e9:.2f} B parameters, {result['mode']} on {gpu.name}, "
          f"batch {args.batch} x seq {args.seq}")
    rows = [(k, f"{v / GiB:.2f}", f"{100 * v / m.peak_bytes:.1f}%") for k, v in m.breakdown.items() if v]
    rows.append(("peak allocated (" + moment + ")", f"{m.peak_bytes / GiB:.2f}", "100.0%"))
    rows.append(("reserved (allocator estimate)", f"{m.reserved_bytes / GiB:.2f}", ""))
    if result["communicator_bytes"]:
        rows.append(("NCCL communicators (outside the allocator)", f"{result['communicator_bytes'] / GiB:.2f}", ""))
    rows.append(("total with CUDA context" + (" and NCCL" if result["communicator_bytes"] else ""),
                 f"{m.total_bytes / GiB:.2f}", ""))
    print_table(["component", "GiB", "of peak"], rows)
    verdict = "fits" if margin.fits else "does NOT fit"
    print(f"{verdict} in {gpu.name} ({gpu.usable_memory_bytes / GiB:.1f} GiB): headroom {headroom / GiB:+.2f} GiB "
          f"(needs {float(margin.needed_bytes) / GiB:.2f} GiB by {margin.method})")
    if margin.uncertain:
        print("at the edge: within the 80% band of that estimate, the step could run or fail (PYTORCH_CUDA_ALLOC_CONF="
              "expandable_segments:True removes the allocator's fragmentation)")
    print(f"largest batch that fits at seq {args.seq}: {best}")
    if result["suggestions"]:
        print("what would fit (each change alone, then together; total per GPU with the CUDA context):")
        print_table(["change", "GiB per GPU", "fits"],
                    [(s["change"], f"{s['total_bytes'] / GiB:,.2f}" if s["total_bytes"] == s["total_bytes"] else "-",
                      "yes" if s["fits"] else "no")
                     for s in result["suggestions"]])
    if plot:
        print(f"wrote {plot}")
    return 0


def _flags(changes: dict) -> str:
    """Options as the command line takes them: ``--checkpointing full --precision bf16``."""
    return " ".join(f"{_flag(k)} {v}" if v is not True else _flag(k) for k, v in changes.items())


def _suggestions(args: argparse.Namespace, cfg, gpu, kw: dict) -> list[dict]:
    """Changes that shrink a run that does not fit, each with the memory it needs per GPU (``total_bytes``,
    allocator reserve and CUDA context included) and whether that fits; from the library's memory and sizing
    functions, as notebook 03 ("will it fit") tries them.

    Training: full activation recomputation, bf16 weights and optimizer states, an 8-bit AdamW, the three
    together, and the fewest GPUs with the data/tensor/pipeline split and ZeRO stage that fit
    (:func:`gpumodel.min_gpus`). Serving: int8 and int4 weights, an fp8 KV cache, and the fewest GPUs of
    tensor parallelism that fit.
    """
    have = gpu.usable_memory_bytes
    out: list[dict] = []

    def need(**change) -> float:
        fn = gm.inference_memory if args.inference else gm.training_memory
        return float(fn(cfg, args.batch, args.seq, **{**kw, **change}).total_bytes)

    def add(changes: dict, total: float) -> None:
        out.append(dict(change=_flags(changes), total_bytes=total, fits=bool(total <= have)))

    if args.inference:
        tries = {}
        if args.dtype not in ("int8", "int4"):
            tries["int8"] = {"dtype": "int8"}
        if args.dtype != "int4":
            tries["int4"] = {"dtype": "int4"}
        if args.kv_dtype not in ("fp8", "int8"):
            tries["kv"] = {"kv_dtype": "fp8"}
        if args.dtype != "int4" and args.kv_dtype not in ("fp8", "int8"):
            tries["both"] = {"dtype": "int4", "kv_dtype": "fp8"}
        for changes in tries.values():
            add(changes, need(**changes))
        layout = ("tp",)
    else:
        tries = {}
        if args.checkpointing != "full":
            tries["checkpointing"] = "full"
        if args.precision in ("amp_bf16", "amp_fp16", "fp32"):
            tries["precision"] = "bf16"
        if args.optimizer in ("adamw", "adam"):
            tries["optimizer"] = "adamw_8bit"
        for key, value in tries.items():
            add({key: value}, need(**{key: value}))
        if len(tries) > 1:
            add(tries, need(**tries))
        layout = ("dp", "tp", "pp", "zero", "sequence_parallel", "gradient_accumulation_steps")
    rest = {k: v for k, v in kw.items() if k not in layout}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.GpumodelWarning)
        plan = gm.min_gpus(cfg, gpu, args.batch, args.seq, training=not args.inference, **rest)
    if plan is not None and plan.num_gpus > 1:
        split = {"dp": plan.dp, "tp": plan.tp, "pp": plan.pp, "zero": plan.zero}
        changes = {k: v for k, v in split.items() if v > (0 if k == "zero" else 1)}
        if plan.tp > 1 and not args.inference:
            changes["sp"] = True                  # min_gpus splits the sequence with tp, and
        if plan.pp > 1:
            changes["grad_accum"] = plan.pp       # runs pp micro-batches through the pipeline
        out.append(dict(change=f"{plan.num_gpus} GPUs: {_flags(changes)}", total_bytes=plan.per_gpu_bytes, fits=True))
    elif plan is None:
        out.append(dict(change="no split over up to 4096 GPUs (tp <= 8) fits", total_bytes=float("nan"), fits=False))
    return out


def _plot(args: argparse.Namespace, path, cfg, gpu, m, best: int, kw: dict) -> None:
    """Stacked bars for the requested batch and, when different, the largest batch that fits."""
    from gpumodel.plots.memory import plot_memory_breakdown

    runs = {f"batch {args.batch}": m}
    if best and best != args.batch:
        fn = gm.inference_memory if args.inference else gm.training_memory
        runs[f"batch {best} (largest that fits)"] = fn(cfg, best, args.seq, **kw)
    ax = plot_memory_breakdown(runs, gpu=gpu)
    ax.set_title(f"{cfg.name} on {gpu.name}, seq {args.seq}")
    ax.figure.savefig(path, dpi=150, bbox_inches="tight")
