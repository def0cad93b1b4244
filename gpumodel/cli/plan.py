"""``gpumodel plan MODEL --system dgx-h100 --gpus 64 --tokens 1T --seq 8192 --global-batch 1024``: ranked layouts.

Times are modelled (kernel model per GPU, NCCL collectives, pipeline schedule), not measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
import warnings

from ..base.readable import format_count
from ..cluster.planresult import legend_lines
from ..core.ops import AttentionKernel
from ._common import (HelpFormatter, add_own_files, count_type, output_path, own_files, parse_number, print_json,
                      print_table, progress)
import gpumodel as gm
from ..vocabulary import FP8_SEARCH, PipelineSchedule, RecomputeModule, resolve_system

#: Rows kept for --plot and --pareto (the first-ranked): the chart's cloud and the front are drawn from them.
PLOT_ROWS = 20_000

#: What the table's columns mean (printed under the table and in ``--help``): the text of ``TrainingPlan``'s repr.
LEGEND = "\n".join(legend_lines(104)) + "\n"

EPILOG = "Columns:\n" + "\n".join("  " + line for line in LEGEND.splitlines()) + """

GPU counts: --gpus N plans exactly N GPUs (A,B,C those counts; START:STOP:STEP every STEP GPUs);
otherwise 1, 2, 4, ... (powers of two) up to --max-gpus (default: one node of --system), and that count.

Search: every layout the --framework runs (megatron: ZeRO 0-1, selective or full recomputation, every
parallel dimension, interleaved pipelines, overlap; deepspeed: ZeRO 0-3, no ZeRO-2/3 with pipelines;
fsdp: no shard, SHARD_GRAD_OP or FULL_SHARD, both also as HSDP; hf: data parallel), micro-batches 1-16, any pipeline degree
that divides the GPUs (uneven stages allowed) with at least as many micro-batches as stages. --tp, --pp,
--cp, --ep, --micro-batch, --zero, --recompute, --virtual-stages, --overlap and --hsdp fix or list the values to
search (comma-separated); a value the framework does not run is refused. --schedule 1f1b,dualpipe searches
each pipeline schedule on the layouts it runs (zero_bubble and dualpipe: pipelines without virtual stages;
dualpipe: an even pp and at least 2 pp micro-batches, an even number); --recompute-modules names what the
selective rows recompute (Megatron-Core's --recompute-modules).

Near-duplicates: layouts of the same GPUs, degrees, micro-batch and recomputation within 1% of the fastest
step are one row, the simplest setting kept (lower ZeRO stage, no HSDP, fewer virtual stages, no overlap).

--pareto keeps the rows no other beats on both days and cost (GPU-hours without --price), fastest first:
the first is the fastest run, the last the cheapest (of the 20,000 first-ranked layouts). --plot FILE.png
(or .svg) draws the days against the GPU count and the cost against the days with that front.

--objective cost ranks by GPU-hours (the order of the cost at any price), --objective energy by the run's
energy (MWh), among runs of at most --deadline days (90 when not given: the cheapest run is otherwise the one
on the fewest GPUs, for years); --price adds the cost column, in --currency; --budget keeps the runs that cost at
most that; --power keeps the jobs that draw at most that many kW.

JSON output (--json), SI units:
  inputs: every option as given; model, system, gpu, tokens, global_batch, seq_len [tokens], objective,
  framework, precision, optimizer, attention_kernel (comma-separated where several), fp8 (true, false or
  "False,True"), pipeline_schedule (comma-separated where several), recompute_modules (comma-separated; null:
  Megatron-Core's default), price_per_gpu_hour, currency, max_days, budget, max_power_kw [kW],
  gpu_counts (the GPU counts searched), searched (the values of each dimension), source (where the GPU's
  kernel numbers come from: calibrated, transferred, datasheet), source_detail, expected_error (of the best
  step [1]), candidates (layouts priced), feasible (those that fit in memory and meet the deadline and the
  budget), collapsed (near-duplicates folded), search_s [s], notes,
  rows (--top of them): num_gpus, dp, tp, pp, cp, ep, zero, shard_group (framework fsdp: an HSDP row's sharding
  group, the data-parallel ranks of a node; else null), checkpointing, micro_batch, virtual_stages,
  gradient_accumulation_steps, comm_overlap, seconds (one step [s]), tokens_per_s_per_gpu, tflops_per_gpu
  [TFLOP/s], mfu, hfu, days, gpu_hours, energy_kwh [kWh], cost (null without --price), peak_bytes [B],
  headroom_bytes [B] (free per GPU), expected_error [1] (null: unknown), band_s (the step's 80% band [low, high]
  [s] from published runs), bound, host_s (framework hf: what the host needs to dispatch the step [s]; else null),
  host_bound (true where the step is that, so it depends on the CPU), collapsed (the folded
  settings), attention_kernel, fp8, pipeline_schedule, recompute_modules (of a selective row, where given; else
  null), power_kw [kW], and the step's parts [s]: forward_s, backward_s, recompute_s, optimizer_s, communication_s,
  pipeline_bubble_s; plot (the file written, with --plot).
"""


def _counts(text: str) -> list[int]:
    """``N``, ``A,B,C`` or ``START:STOP:STEP`` (every STEP GPUs from START to STOP, both included)."""
    if ":" in text:
        parts = [count_type(1)(t) for t in text.split(":")]
        if len(parts) != 3 or parts[1] < parts[0]:
            raise gm.ArgumentError(f"--gpus {text!r}: give START:STOP:STEP with START <= STOP, e.g. 64:4096:8",
                                   argument="--gpus", value=text, allowed="N, A,B,C or START:STOP:STEP")
        return list(range(parts[0], parts[1] + 1, parts[2]))
    return _ints(text)


def _ints(text: str) -> list[int]:
    return [count_type(1)(t) for t in text.split(",") if t.strip()]


def _zeros(text: str) -> list[int]:
    return [count_type(0)(t) for t in text.split(",") if t.strip()]


def _words(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _names_of(enum, normalise=lambda name: name, unique: bool = False, hint: str = "or a comma-separated list"):
    """An argparse ``type``: one name or a comma-separated list of them, each (after ``normalise``) a value of the
    enum ``enum``; repeated names dropped where ``unique``; ``hint`` ends the error message."""
    def parse(text: str) -> list[str]:
        names = [normalise(n) for n in _words(text)]
        allowed = [e.value for e in enum]
        bad = [n for n in names if n not in allowed] or ([] if names else [text])
        if bad:
            raise argparse.ArgumentTypeError(f"{bad[0]!r} is not one of {', '.join(allowed)} ({hint})")
        return list(dict.fromkeys(names)) if unique else names
    return parse


#: ``--attention-kernel``: one library or a comma-separated list, each one of :class:`AttentionKernel`.
_kernels = _names_of(AttentionKernel)
#: ``--schedule``: one pipeline schedule or a comma-separated list, each one of :class:`PipelineSchedule`.
_schedules = _names_of(PipelineSchedule, lambda n: n.lower().replace("-", "_"), unique=True)
#: ``--recompute-modules``: Megatron-Core's module names, comma-separated, each one of :class:`RecomputeModule`.
_modules = _names_of(RecomputeModule, str.lower, hint="a comma-separated list")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="rank the parallel layouts of a training run (time, MFU, days, cost, memory)",
                       epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("model", help="model preset, e.g. llama-3-70b (see `gpumodel memory --list`)")
    p.add_argument("--system", default="dgx-h100", help="system or GPU (see `gpumodel systems`)")
    p.add_argument("--gpus", type=_counts, metavar="N", help="exactly this many GPUs (or A,B,C, or START:STOP:STEP: "
                                                              "e.g. 64:4096:8, every node count)")
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
    p.add_argument("--attention-kernel", default="sdpa", type=_kernels, metavar="K[,K]",
                   help="the library (or libraries, comma-separated, to search) whose flash kernels run the attention: "
                        "sdpa (PyTorch's own dispatch), cudnn, fa2 (flash-attn 2), fa3 (FlashAttention-3, Hopper "
                        "only), flashinfer, triton")
    p.add_argument("--fp8", default="off", choices=list(FP8_SEARCH),
                   help="Transformer Engine's fp8 GEMMs (megatron, GPUs with fp8): off, on (its default recipe, "
                        "delayed scaling), both searched, or a recipe: delayed, current, mxfp8 (Blackwell), blockwise")
    p.add_argument("--schedule", default=["1f1b"], type=_schedules, metavar="S[,S]",
                   help="the pipeline schedule (or schedules, comma-separated, to search): 1f1b (interleaved with "
                        "virtual stages), zero_bubble (ZB-H1), dualpipe (DeepSeek's; megatron, even pp)")
    p.add_argument("--recompute-modules", type=_modules, metavar="M[,M]",
                   help="Megatron-Core's --recompute-modules for the selective rows (megatron): core_attn (its "
                        "default), layernorm, mla_up_proj, mlp, moe, moe_act, shared_experts")
    p.add_argument("--objective", default="time", choices=["time", "cost", "energy"],
                   help="rank by the run's time, its cost (GPU-hours) or its energy, within --deadline")
    p.add_argument("--deadline", type=lambda t: parse_number(t, "--deadline"), metavar="DAYS",
                   help="only runs of at most this many days (--objective cost: 90 unless given)")
    p.add_argument("--price", type=lambda t: parse_number(t, "--price"), help="price per GPU-hour (adds a cost column)")
    p.add_argument("--currency", default="USD", help="the currency of --price and --budget")
    p.add_argument("--budget", type=lambda t: parse_number(t, "--budget"),
                   help="only runs that cost at most this (needs --price)")
    p.add_argument("--power", type=lambda t: parse_number(t, "--power"), metavar="KW",
                   help="only jobs drawing at most this many kW (GPUs x the system's power per GPU)")
    for name, kind, text in (("tp", _ints, "tensor-parallel degrees"), ("pp", _ints, "pipeline-parallel degrees"),
                             ("cp", _ints, "context-parallel degrees"), ("ep", _ints, "expert-parallel degrees"),
                             ("micro-batch", _ints, "micro-batches [sequences]"), ("zero", _zeros, "ZeRO stages"),
                             ("recompute", _words, "recomputation: none, selective, full"),
                             ("virtual-stages", _ints, "virtual pipeline stages"),
                             ("overlap", _words, "communication overlap: on, off"),
                             ("hsdp", _words, "FSDP's hybrid shard (ZeRO-2/3 over a node's data-parallel ranks): on, off")):
        p.add_argument(f"--{name}", type=kind, metavar="A,B", help=f"{text} to search (default: all the framework runs)")
    add_own_files(p, "with --framework hf, each step is at least what this host needs to dispatch Hugging Face's "
                     "eager loop")
    p.add_argument("--top", type=count_type(1), default=10, help="layouts to print")
    p.add_argument("--pareto", action="store_true",
                   help="only the rows no other beats on both days and cost (fastest first, cheapest last)")
    p.add_argument("--plot", metavar="FILE.png", help="write days against GPU count and the cost/days front (.png or .svg)")
    p.add_argument("--json", action="store_true", help="machine-readable output (SI units; keys below)")
    p.set_defaults(func=_plan)


def _progress(done: int, total: int) -> None:
    width = 30
    filled = int(width * done / total)
    sys.stderr.write(f"\rshard kernels [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        sys.stderr.write("\r" + " " * (width + 30) + "\r")
    sys.stderr.flush()


def _on_off(values: list[str] | None, option: str) -> list[bool] | None:
    if values is None:
        return None
    table = {"on": True, "true": True, "yes": True, "off": False, "false": False, "no": False}
    bad = [v for v in values if v.lower() not in table]
    if bad:
        raise gm.ArgumentError(f"{option} {bad[0]!r} is not one of on, off", argument=option, value=bad[0],
                               allowed="on, off")
    return [table[v.lower()] for v in values]


def _plot_path(path: str | None):
    """The --plot file, checked before the search: a writable .png or .svg path (None without --plot)."""
    if path is None:
        return None
    if not path.lower().endswith((".png", ".svg")):
        raise gm.ArgumentError(f"--plot {path}: give a .png or .svg file name", argument="--plot", value=path,
                               allowed="a .png or .svg file")
    return output_path(path, "--plot")


def _write_plot(plan, path) -> None:
    from matplotlib.figure import Figure

    from gpumodel.plots.plan import plot_plan

    fig = Figure(figsize=(10.5, 4.2), layout="constrained")   # no pyplot: no display, no global figure
    plot_plan(plan, axes=fig.subplots(1, 2))
    fig.suptitle(f"{plan.model} on {plan.system}: {format_count(plan.tokens)} tokens", fontsize=11)
    fig.savefig(path, dpi=150)


def _plan(args: argparse.Namespace) -> int:
    plot = _plot_path(args.plot)
    own = own_files(args)
    sysm = resolve_system(args.system, "--system")
    where = (f"{'/'.join(map(str, args.gpus[:4]))}{'/...' if len(args.gpus) > 4 else ''} GPUs" if args.gpus
             else f"up to {args.max_gpus or sysm.gpus_per_node} GPUs")
    progress(f"planning {args.model} on {where} of {sysm.name}: every layout {args.framework} runs...")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        plan = gm.plan_training(args.model, sysm, tokens=args.tokens, global_batch=args.global_batch,
                                seq_len=args.seq, num_gpus=args.gpus, max_gpus=args.max_gpus, objective=args.objective,
                                precision=args.precision, optimizer=args.optimizer, framework=args.framework,
                                price_per_gpu_hour=args.price, currency=args.currency, max_days=args.deadline,
                                budget=args.budget, max_power_kw=args.power, tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep,
                                micro_batches=args.micro_batch, zero_stages=args.zero, checkpointing=args.recompute,
                                virtual_stages=args.virtual_stages, comm_overlap=_on_off(args.overlap, "--overlap"),
                                hsdp=_on_off(args.hsdp, "--hsdp"),
                                top=max(args.top, PLOT_ROWS) if plot or args.pareto else args.top,
                                attention_kernel=args.attention_kernel,
                                fp8=FP8_SEARCH[args.fp8],
                                pipeline_schedule=args.schedule, recompute_modules=args.recompute_modules, **own,
                                progress=_progress if sys.stderr.isatty() and not args.json else None)
    if plot and plan.rows:
        _write_plot(plan, plot)
    plan = dataclasses.replace(plan, rows=(plan.pareto() if args.pareto else plan.rows)[:args.top])
    if args.json:
        inputs = {k: v for k, v in vars(args).items() if k not in ("func", "command", "json")}
        print_json({"inputs": inputs, **plan.to_dict(), **({"plot": str(plot)} if plot and plan.rows else {})})
        return 0
    if args.objective == "cost":
        ranked = "Ranked by cost (GPU-hours" + (f" x {args.price:g} {args.currency}" if args.price else
                                                 "; --price adds a cost column") + ")"
    else:
        ranked = f"Ranked by {plan.objective}"
    print(textwrap.fill(f"{plan.model} on {plan.system} ({plan.framework}): {format_count(plan.tokens)} tokens, global "
                        f"batch {plan.global_batch} x {plan.seq_len} tokens, "
                        f"{plan.attention_kernel.replace(',', ' or ')} attention"
                        f"{plan.options_text()}; "
                        f"{plan.feasible:,} of {plan.candidates:,} layouts fit ({plan.search_s:.1f} s). {ranked}; times "
                        "are modelled, not measured.", 110, subsequent_indent="  "))
    err = "unknown (nothing measured backs it)" if plan.expected_error is None else f"about {plan.expected_error:.0%}"
    print(textwrap.fill(f"GPU numbers: {plan.source_detail}; expected error of a step {err}.", 110,
                        subsequent_indent="  "))
    if len(plan.gpu_counts) > 1:
        counts = plan.gpu_counts
        print(f"GPU counts searched: {', '.join(map(str, counts))} (powers of two"
              + (f" and {counts[-1]}" if counts[-1] & (counts[-1] - 1) else "") + "; --gpus N plans exactly N)."
              if args.gpus is None else f"GPU counts searched: {len(counts)}, {counts[0]} to {counts[-1]}.")
    for note in plan.notes:
        print(textwrap.fill(f"Note: {note}.", 110, subsequent_indent="  "))
    if not plan.rows:
        print("no layout fits: more GPUs (--gpus/--max-gpus), a smaller --global-batch or --seq, a later --deadline"
              + (", a higher --power" if args.power is not None else "")
              + (", a larger --budget" if args.budget is not None else ""))
        return 0  # an answer, as the JSON output's empty rows (exit 1 means an internal error)
    if args.pareto:
        print("Pareto front of days against " + ("cost" if args.price else "GPU-hours")
              + ": no other layout is both faster and cheaper; fastest first, cheapest last.")
    print_table(plan.headers(), plan.table(args.top))
    print()
    print("\n".join(plan.legend(104)))
    if plot:
        print(f"wrote {plot}")
    return 0
