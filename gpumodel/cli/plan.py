"""``gpumodel plan MODEL --system dgx-h100 --gpus 64 --tokens 1T --seq 8192 --global-batch 1024``: ranked layouts.

Times are modelled (kernel model per GPU, NCCL collectives, pipeline schedule), not measured.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from ._common import count_type, print_json, print_table
import gpumodel as gm


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="rank the parallel layouts of a training run (time, MFU, days, cost, memory)")
    p.add_argument("model", help="model preset, e.g. llama-3-70b (see `gpumodel memory --list`)")
    p.add_argument("--system", default="dgx-h100", help="system or GPU (see `gpumodel systems`; default dgx-h100)")
    p.add_argument("--gpus", type=count_type(1), help="exactly this many GPUs")
    p.add_argument("--max-gpus", type=count_type(1), help="search 1, 2, 4, ... up to this many GPUs")
    p.add_argument("--tokens", default="1T", help="tokens to train on, e.g. 1T, 300B (default 1T)")
    p.add_argument("--seq", type=count_type(1), default=8192, help="sequence length [tokens] (default 8192)")
    p.add_argument("--global-batch", type=count_type(1), default=1024, help="sequences per optimizer step (default 1024)")
    p.add_argument("--precision", default="amp_bf16", choices=["fp32", "amp_bf16", "amp_fp16", "bf16", "fp16"])
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "adam", "sgd", "sgd_momentum", "adafactor", "adamw_8bit"])
    p.add_argument("--framework", default="megatron", choices=["megatron", "hf", "fsdp", "deepspeed"])
    p.add_argument("--objective", default="time", choices=["time", "cost"])
    p.add_argument("--price", type=float, help="price per GPU-hour (adds a cost column)")
    p.add_argument("--top", type=count_type(1), default=10, help="layouts to print (default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable output (SI units)")
    p.set_defaults(func=_plan)


def _progress(done: int, total: int) -> None:
    width = 30
    filled = int(width * done / total)
    sys.stderr.write(f"\rshard shapes [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        sys.stderr.write("\r" + " " * (width + 30) + "\r")
    sys.stderr.flush()


def _plan(args: argparse.Namespace) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        plan = gm.plan_training(args.model, args.system, tokens=args.tokens, global_batch=args.global_batch,
                                seq_len=args.seq, num_gpus=args.gpus, max_gpus=args.max_gpus, objective=args.objective,
                                precision=args.precision, optimizer=args.optimizer, framework=args.framework,
                                price_per_gpu_hour=args.price, top=args.top,
                                progress=_progress if sys.stderr.isatty() and not args.json else None)
    if args.json:
        print_json(plan.to_dict())
        return 0
    print(f"{plan.model} on {plan.system}: {plan.tokens:.3g} tokens, global batch {plan.global_batch} x {plan.seq_len}; "
          f"{plan.feasible:,} of {plan.candidates:,} layouts fit in memory ({plan.search_s:.1f} s). "
          f"Ranked by {plan.objective}; times are modelled, not measured.")
    if not plan.rows:
        print("no layout fits: more GPUs (--gpus/--max-gpus), a smaller --global-batch or --seq")
        return 0  # an answer, as the JSON output's empty rows (exit 1 means an internal error)
    print_table(plan.HEADERS, plan._lines(args.top))
    return 0
