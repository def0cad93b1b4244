"""``gpumodel memory MODEL --gpu h100 --batch 8 --seq 4096``: a memory breakdown, fits or not, largest batch."""

from __future__ import annotations

import argparse

from ._common import print_json, print_table

GiB = 2 ** 30


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("memory", help="training or inference memory of a transformer on a GPU")
    p.add_argument("model", nargs="?", help="model preset (see `gpumodel memory --list`), e.g. llama-3-8b")
    p.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json instead of a preset")
    p.add_argument("--list", action="store_true", help="list the model presets")
    p.add_argument("--gpu", default="h100", help="GPU name or alias (default h100)")
    p.add_argument("--batch", type=int, default=1, help="micro-batch size per GPU [sequences]")
    p.add_argument("--seq", type=int, default=2048, help="sequence length [tokens]")
    p.add_argument("--precision", default="amp_bf16", choices=["fp32", "amp_bf16", "amp_fp16", "bf16", "fp16"])
    p.add_argument("--optimizer", default="adamw",
                   choices=["adamw", "adam", "sgd", "sgd_momentum", "adafactor", "adamw_8bit"])
    p.add_argument("--checkpointing", default="none", choices=["none", "full", "selective"])
    p.add_argument("--attention", default="sdpa", choices=["sdpa", "flash", "cudnn", "efficient", "math", "eager"])
    p.add_argument("--no-cache", action="store_true", help="training forward with use_cache=False")
    p.add_argument("--grad-accum", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--zero", type=int, default=0, choices=[0, 1, 2, 3], help="ZeRO stage (with --dp)")
    p.add_argument("--dp", type=int, default=1, help="data-parallel degree")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree")
    p.add_argument("--sp", action="store_true", help="sequence parallelism (with --tp)")
    p.add_argument("--inference", action="store_true", help="serving memory instead of training")
    p.add_argument("--dtype", default="bf16", help="inference weight dtype: bf16, fp16, fp32, fp8, int8, int4")
    p.add_argument("--kv-dtype", default=None, help="inference KV-cache dtype (default: activation dtype)")
    p.add_argument("--new-tokens", type=int, default=256, help="inference: tokens generated after the prompt")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", metavar="PNG", help="write a stacked-bar breakdown (this batch and the largest that fits)")
    p.set_defaults(func=_memory)


def _memory(args: argparse.Namespace) -> int:
    import gpumodel as gm
    from gpumodel.sizing import max_batch_size

    if args.list:
        names = gm.list_models()
        if args.json:
            print_json(names)
        else:
            print_table(["model", "parameters"], [(n, f"{gm.model(n).num_parameters() / 1e9:.2f} B") for n in names])
        return 0
    if args.hf_config:
        import json
        from pathlib import Path

        path = Path(args.hf_config)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"--hf-config {path}: cannot read a JSON config ({exc})") from None
        fallback = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        cfg = gm.TransformerConfig.from_hf(data, name=data.get("_name_or_path") or fallback)
    elif args.model:
        cfg = gm.model(args.model)
    else:
        raise ValueError("give a model preset name or --hf-config PATH")
    gpu = gm.gpu(args.gpu)
    if args.inference:
        kw = dict(dtype=args.dtype, kv_dtype=args.kv_dtype, new_tokens=args.new_tokens, tp=args.tp)
        m = gm.inference_memory(cfg, args.batch, args.seq, **kw)
        moment = m.peak_moment
    else:
        kw = dict(precision=args.precision, optimizer=args.optimizer, checkpointing=args.checkpointing,
                  attention=args.attention, use_cache=not args.no_cache, gradient_accumulation_steps=args.grad_accum,
                  zero_stage=args.zero, dp=args.dp, tp=args.tp, pp=args.pp, sequence_parallel=args.sp)
        m = gm.training_memory(cfg, args.batch, args.seq, **kw)
        moment = m.peak_moment
    headroom = gpu.usable_memory_bytes - m.total_bytes
    best = max_batch_size(cfg, gpu, args.seq, training=not args.inference, **kw)
    result = dict(model=cfg.name, parameters=cfg.num_parameters(), gpu=gpu.name, batch_size=args.batch,
                  seq_len=args.seq, mode="inference" if args.inference else "training", peak_bytes=m.peak_bytes,
                  peak_moment=moment, breakdown=dict(m.breakdown), reserved_bytes=m.reserved_bytes,
                  total_bytes=m.total_bytes, gpu_memory_bytes=gpu.usable_memory_bytes, fits=bool(headroom >= 0),
                  headroom_bytes=headroom, max_batch_size=best, options=kw)
    if args.plot:
        _plot(args, cfg, gpu, m, best, kw)
    if args.json:
        print_json(result)
        return 0
    print(f"{cfg.name}: {cfg.num_parameters() / 1e9:.2f} B parameters, {result['mode']} on {gpu.name}, "
          f"batch {args.batch} x seq {args.seq}")
    rows = [(k, f"{v / GiB:.2f}", f"{100 * v / m.peak_bytes:.1f}%") for k, v in m.breakdown.items() if v]
    rows.append(("peak allocated (" + moment + ")", f"{m.peak_bytes / GiB:.2f}", "100.0%"))
    rows.append(("reserved (allocator estimate)", f"{m.reserved_bytes / GiB:.2f}", ""))
    rows.append(("total with CUDA context", f"{m.total_bytes / GiB:.2f}", ""))
    print_table(["component", "GiB", "of peak"], rows)
    verdict = "fits" if headroom >= 0 else "does NOT fit"
    print(f"{verdict} in {gpu.name} ({gpu.usable_memory_bytes / GiB:.1f} GiB): headroom {headroom / GiB:+.2f} GiB")
    print(f"largest batch that fits at seq {args.seq}: {best}")
    return 0


def _plot(args: argparse.Namespace, cfg, gpu, m, best: int, kw: dict) -> None:
    """Stacked bars for the requested batch and, when different, the largest batch that fits."""
    import gpumodel as gm
    from gpumodel.plot_memory import plot_memory_breakdown

    runs = {f"batch {args.batch}": m}
    if best and best != args.batch:
        fn = gm.inference_memory if args.inference else gm.training_memory
        runs[f"batch {best} (largest that fits)"] = fn(cfg, best, args.seq, **kw)
    ax = plot_memory_breakdown(runs, gpu=gpu)
    ax.set_title(f"{cfg.name} on {gpu.name}, seq {args.seq}")
    ax.figure.savefig(args.plot, dpi=150, bbox_inches="tight")
    print(f"wrote {args.plot}")
