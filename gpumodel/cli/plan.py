"""``gpumodel plan MODEL --system dgx-h100 --gpus 64 --tokens 1T --seq 8192 --global-batch 1024``: ranked layouts.

Times are modelled (kernel model per GPU, NCCL collectives, pipeline schedule), not measured.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings

from ..base.readable import format_count
from ..core.ops import AttentionKernel
from ._common import HelpFormatter, count_type, print_json, print_table, progress
import gpumodel as gm
from ..vocabulary import resolve_system

#: What the table's abbreviations mean (printed under the table and in ``--help``).
LEGEND = """\
layout: dp, tp, pp, cp = data-, tensor-, pipeline-, context-parallel degrees (product: the GPU count);
  v2 = two virtual pipeline stages per GPU (interleaved schedule). ZeRO: z1 shards the optimizer
  states, z2 also the gradients, z3 also the weights. recompute: activation recomputation (selective:
  the attention core; full: every layer). mb x acc: micro-batch [sequences] x accumulation steps.
  MWh: energy at the system's power per GPU. free GiB: memory left on each GPU.
bound: the largest part of the step besides compute, where over a fifth of it: communication,
  pipeline bubble, optimizer or recomputation (the forward run again in the backward).
"""

EPILOG = "Columns:\n" + "\n".join("  " + line for line in LEGEND.splitlines()) + """

GPU counts: --gpus N plans exactly N GPUs; otherwise 1, 2, 4, ... (powers of two) up to --max-gpus
(default: one node of --system), and that count itself. Tensor-, pipeline- and context-parallel degrees
are powers of two, so a count with an odd factor (72 = 9 x 8) needs a data-parallel degree that is a
multiple of it, which must divide --global-batch.

--objective cost ranks by GPU-hours (the order of the cost at any price per GPU-hour); --price adds
the cost column.

JSON output (--json), SI units:
  model, system, tokens, global_batch, seq_len [tokens], objective, attention_kernel (the library of the
  flash-attention kernels the layouts were timed with), candidates (layouts enumerated),
  feasible (those that fit in memory), search_s [s], gpu_counts (the GPU counts searched),
  rows: one object per ranked layout: num_gpus, dp, tp, pp, cp, zero, checkpointing, micro_batch,
  virtual_stages, gradient_accumulation_steps, seconds (one step [s]), mfu, days, gpu_hours,
  energy_kwh [kWh], cost (null without --price), peak_bytes [B], headroom_bytes [B] (free per GPU),
  bound, and the step's parts [s]: forward_s, backward_s, recompute_s, optimizer_s,
  communication_s, pipeline_bubble_s.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="rank the parallel layouts of a training run (time, MFU, days, cost, memory)",
                       epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("model", help="model preset, e.g. llama-3-70b (see `gpumodel memory --list`)")
    p.add_argument("--system", default="dgx-h100", help="system or GPU (see `gpumodel systems`)")
    p.add_argument("--gpus", type=count_type(1), help="exactly this many GPUs")
    p.add_argument("--max-gpus", type=count_type(1),
                   help="search 1, 2, 4, ... up to this many GPUs (default: one node of --system)")
    p.add_argument("--tokens", default="1T", help="tokens to train on, e.g. 1T, 300B")
    p.add_argument("--seq", type=count_type(1), default=8192, help="sequence length [tokens]")
    p.add_argument("--global-batch", type=count_type(1), default=1024, help="sequences per optimizer step")
    p.add_argument("--precision", default="amp_bf16", choices=["fp32", "amp_bf16", "amp_fp16", "bf16", "fp16"],
                   help="training precision")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "adam", "sgd", "sgd_momentum", "adafactor",
                                                            "adamw_8bit"], help="optimizer")
    p.add_argument("--framework", default="megatron", choices=["megatron", "hf", "fsdp", "deepspeed"],
                   help="megatron: fused kernels, gradients reduced after the pipeline flush; the others: eager "
                        "PyTorch kernels, the gradient reduction bucketed under the backward")
    p.add_argument("--attention-kernel", default="sdpa", choices=[k.value for k in AttentionKernel],
                   help="the library whose flash kernels run the attention: sdpa (PyTorch's own dispatch), cudnn, fa2 "
                        "(flash-attn 2), fa3 (FlashAttention-3, Hopper only), flashinfer, triton")
    p.add_argument("--objective", default="time", choices=["time", "cost"],
                   help="rank by the run's time, or by its cost (GPU-hours)")
    p.add_argument("--price", type=float, help="price per GPU-hour (adds a cost column)")
    p.add_argument("--top", type=count_type(1), default=10, help="layouts to print")
    p.add_argument("--json", action="store_true", help="machine-readable output (SI units; keys below)")
    p.set_defaults(func=_plan)


def _progress(done: int, total: int) -> None:
    width = 30
    filled = int(width * done / total)
    sys.stderr.write(f"\rshard shapes [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        sys.stderr.write("\r" + " " * (width + 30) + "\r")
    sys.stderr.flush()


def _gpu_counts(args: argparse.Namespace) -> list[int]:
    """The GPU counts the layout search tries (as ``gm.plan_training`` chooses them from --gpus/--max-gpus):
    exactly --gpus, else the powers of two up to --max-gpus or one node, and that count itself."""
    sysm = resolve_system(args.system, "--system")
    if args.gpus is not None:
        counts = [args.gpus]
    else:
        cap = args.max_gpus if args.max_gpus is not None else sysm.gpus_per_node
        counts = sorted({2 ** k for k in range(0, 20) if 2 ** k <= cap} | {cap})
    if sysm.inter_node is None:
        counts = [n for n in counts if n <= sysm.gpus_per_node]
    return counts


def _unused_gpus(n: int, args: argparse.Namespace, used: int) -> str:
    """Why no layout uses all ``n`` GPUs (the largest count searched); the best layouts use ``used``."""
    odd = n // (n & -n)                      # the odd factor of n: 72 = 9 x 8
    if odd > 1 and args.global_batch % odd:
        near = odd * 2 ** max(round(math.log2(args.global_batch / odd)), 0)
        return (f"no layout uses all {n} GPUs: tensor-, pipeline- and context-parallel degrees are powers of two, "
                f"so {n} GPUs need a data-parallel degree that is a multiple of {odd}, which does not divide "
                f"--global-batch {args.global_batch} (a multiple of {odd} such as {near} would); the layouts below "
                f"use {used}")
    return (f"no layout of all {n} GPUs divides the model and the batch and fits in memory; the layouts below use "
            f"{used}")


def _plan(args: argparse.Namespace) -> int:
    counts = _gpu_counts(args)
    progress(f"planning {args.model} on {'/'.join(map(str, counts))} GPUs of {args.system}: every parallel layout...")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        plan = gm.plan_training(args.model, args.system, tokens=args.tokens, global_batch=args.global_batch,
                                seq_len=args.seq, num_gpus=args.gpus, max_gpus=args.max_gpus, objective=args.objective,
                                precision=args.precision, optimizer=args.optimizer, framework=args.framework,
                                price_per_gpu_hour=args.price, top=None, attention_kernel=args.attention_kernel,
                                progress=_progress if sys.stderr.isatty() and not args.json else None)
    used = {r["num_gpus"] for r in plan.rows}      # over every layout that fits, not only the printed ones
    if args.json:
        print_json({**plan.to_dict(), "gpu_counts": counts, "rows": plan.rows[:args.top]})
        return 0
    if args.objective == "cost" and args.price is None:
        ranked = "Ranked by GPU-hours (the order of the cost at any price; --price adds a cost column)"
    else:
        ranked = f"Ranked by {plan.objective}"
    print(f"{plan.model} on {plan.system}: {format_count(plan.tokens)} tokens, global batch {plan.global_batch} x "
          f"{plan.seq_len} tokens, {plan.attention_kernel} attention; {plan.feasible:,} of {plan.candidates:,} "
          f"layouts fit in memory "
          f"({plan.search_s:.1f} s). {ranked}; times are modelled, not measured.")
    if len(counts) > 1:
        print(f"GPU counts searched: {', '.join(map(str, counts))} (powers of two"
              + (f" and {counts[-1]}" if counts[-1] & (counts[-1] - 1) else "") + "; --gpus N plans exactly N).")
    if not plan.rows:
        print("no layout fits: more GPUs (--gpus/--max-gpus), a smaller --global-batch or --seq")
        return 0  # an answer, as the JSON output's empty rows (exit 1 means an internal error)
    if counts[-1] not in used:
        print(_unused_gpus(counts[-1], args, max(used)) + ".")
    print_table(plan.HEADERS, plan._lines(args.top))
    print()
    print(LEGEND, end="")
    return 0
