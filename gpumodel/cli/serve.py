"""``gpumodel serve MODEL --gpu h100 --tp 4 --prompt 2048 --output 256 --ttft 1s --tpot 50ms``: serving capacity."""

from __future__ import annotations

import argparse
import warnings

from ._common import (HelpFormatter, add_own_files, count_type, output_path, own_files, parse_number, print_json,
                      print_table, progress)
import gpumodel as gm
from ..base.errors import UnsupportedError
from ..core.ops import AttentionKernel
from ..records.dtypes import bytes_per_element
from ..vocabulary import format_seconds, kv_cache_dtype, splits_model, weight_dtype
from ..vocabulary.gpus import all_gpus

GiB = 2 ** 30

EPILOG = """\
Before any time is modelled, one request alone (batch 1, --prompt + --output tokens) must fit in
each GPU's memory, and the KV cache must hold at least one request beside the weights and the
prefill workspace; otherwise the command is refused (exit 2) with what it needs per GPU, what the
GPU offers and what would fit (a larger --tp, a GPU with more memory, a smaller --dtype/--kv-dtype,
a shorter --prompt).

JSON output (--json), SI units:
  max_concurrency (requests whose KV cache fits at once), concurrency (at the operating point),
  output_tokens_per_s [token/s], output_tokens_per_s_per_gpu [token/s], requests_per_s [1/s],
  tpot_s [s], ttft_s [s], limiter (what stopped a larger batch: memory, tpot_slo, ttft_slo,
  max_batch_size, throughput, slo_unreachable), curve {concurrency, tpot_s, ttft_s,
  output_tokens_per_s, requests_per_s} (lists over the concurrencies tried), tp, prompt_len,
  output_len, ttft_slo [s], tpot_slo [s] (null: no target), kv_bytes_per_request [B],
  kv_budget_bytes [B] (per GPU), model, gpu, dtype, kv_dtype, engine, attention_kernel (the library of
  the flash-attention kernels), max_num_tokens [token]
  (prompt tokens per prefill step), prefill_chunks (prefill steps per prompt),
  single_request {ttft_s, tpot_s, seconds} (one request alone) [s],
  gpus_for_rate (GPUs for --rate; null without --rate or when no replica meets the targets).
"""


def _rate(text: str) -> float:
    """A request rate > 0 [requests/s]."""
    rate = parse_number(text, "--rate")
    if rate <= 0:
        raise argparse.ArgumentTypeError(f"--rate={text!r}: must be > 0 requests/s")
    return rate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serving capacity of a replica: throughput within latency targets, GPUs for a load",
                       epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("model", help="model preset, e.g. llama-3-70b")
    p.add_argument("--gpu", default="h100", help="GPU name or alias")
    p.add_argument("--tp", type=count_type(1), default=1, help="tensor-parallel degree: GPUs per replica")
    p.add_argument("--prompt", type=count_type(1), default=512, help="prompt tokens per request")
    p.add_argument("--output", type=count_type(1), default=128, help="generated tokens per request")
    p.add_argument("--ttft", default=None, help="time-to-first-token target, e.g. 1s or 500ms (default: none)")
    p.add_argument("--tpot", default=None, help="time-per-output-token target, e.g. 50ms (default: none)")
    p.add_argument("--dtype", default="bf16", help="weights: bf16, fp16, fp8, int8, int4 (weight-only)")
    p.add_argument("--kv-dtype", default=None, help="KV cache: bf16, fp16, fp8 (default: the activation dtype)")
    p.add_argument("--engine", default="graph", choices=["graph", "compiled", "hf"],
                   help="graph: CUDA-graph engine (vLLM); compiled: CUDA graphs of fused kernels (gpt-fast, "
                        "TensorRT-LLM); hf: eager Hugging Face generate")
    p.add_argument("--attention-kernel", default="sdpa", choices=[k.value for k in AttentionKernel],
                   help="the library whose flash kernels run the attention: sdpa (PyTorch's own dispatch), cudnn, fa2 "
                        "(flash-attn 2), fa3 (FlashAttention-3, Hopper only), flashinfer, triton")
    p.add_argument("--rate", type=_rate, default=None, help="requests/s to serve: prints the GPUs needed")
    add_own_files(p, "the engine's per-step host cost on this CPU")
    p.add_argument("--json", action="store_true", help="machine-readable output (SI units; keys below)")
    p.add_argument("--plot", metavar="PNG", help="write the throughput-latency curve")
    p.set_defaults(func=_serve)


def _need(cfg, args: argparse.Namespace, **change) -> float:
    """Bytes one GPU needs for one request alone [B], with the options of ``args`` and ``change`` (``tp``,
    ``dtype``, ``kv_dtype``): the allocated peak of ``gm.inference_memory`` for an engine that allocates up
    front, with the allocator's reserve and the CUDA context for eager ``hf`` (as the serving functions'
    ``fits`` has it: :func:`gpumodel.serving.timing.memory_check`)."""
    kw = {**dict(tp=args.tp, dtype=args.dtype, kv_dtype=args.kv_dtype), **change}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.GpumodelWarning)
        m = gm.inference_memory(cfg, 1, args.prompt, new_tokens=args.output - 1, **kw)
    return float(m.total_bytes if args.engine == "hf" else m.peak_bytes)


def _what_fits(cfg, g, args: argparse.Namespace, need: float) -> list[str]:
    """Changes of one option that would fit one request: a larger --tp, a GPU with more memory, smaller
    number formats, a shorter prompt; each with the memory it needs per GPU."""
    have = g.usable_memory_bytes
    tries = []
    for tp in (2 ** k for k in range(1, 8)):
        if tp > args.tp and splits_model(cfg, tp):
            per = _need(cfg, args, tp=tp)
            if per <= have:
                tries.append(f"--tp {tp} ({per / GiB:,.1f} GiB per GPU)")
                break
    act = "fp32" if weight_dtype(args.dtype).value == "fp32" else "bf16"
    bigger = sorted((x for x in all_gpus() if x.usable_memory_bytes >= max(need, have + 1) and x.supports(act)),
                    key=lambda x: x.usable_memory_bytes)
    if bigger:
        tries.append(f"--gpu {bigger[0].name} ({bigger[0].usable_memory_bytes / GiB:,.1f} GiB)")
    size = bytes_per_element(weight_dtype(args.dtype))
    kv_now = kv_cache_dtype(args.kv_dtype, weight_dtype(args.dtype)).value
    for dt in ("fp8", "int8", "int4"):
        if bytes_per_element(dt) >= size or (dt == "fp8" and not g.supports("fp8")):
            continue
        kvs = [args.kv_dtype] + (["fp8"] if kv_now != "fp8" else [])
        found = next(((kv, per) for kv in kvs if (per := _need(cfg, args, dtype=dt, kv_dtype=kv)) <= have), None)
        if found:
            kv_flag = f" --kv-dtype {found[0]}" if found[0] != args.kv_dtype else ""
            tries.append(f"--dtype {dt}{kv_flag} ({found[1] / GiB:,.1f} GiB per GPU)")
            break
    from gpumodel.core.memory import CUDA_CONTEXT_BYTES, RESERVE_FACTOR

    # max_seq_len compares total_bytes; for the allocated peak, the capacity it is compared with grows alike
    capacity = have if args.engine == "hf" else have * RESERVE_FACTOR + CUDA_CONTEXT_BYTES
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.GpumodelWarning)
        longest = gm.max_seq_len(cfg, g, 1, training=False, dtype=args.dtype, kv_dtype=args.kv_dtype,
                                 new_tokens=args.output - 1, tp=args.tp, capacity_bytes=capacity)
    if 0 < longest < args.prompt:
        tries.append(f"--prompt {longest:,} or shorter")
    return tries


def _check_fits(cfg, g, args: argparse.Namespace, cap=None) -> None:
    """Refuse (UnsupportedError, exit 2) a request that cannot run: one request alone does not fit in a
    GPU's memory or, given ``cap``, the KV cache holds none beside the weights and the prefill workspace."""
    need, have = _need(cfg, args), g.usable_memory_bytes
    if need <= have and (cap is None or cap.max_concurrency >= 1):
        return
    kv = kv_cache_dtype(args.kv_dtype, weight_dtype(args.dtype)).value
    what = (f"one request ({args.prompt:,} prompt + {args.output:,} output tokens, {weight_dtype(args.dtype).value} "
            f"weights, {kv} KV cache)")
    if need > have:
        why = f"{what} needs {need / GiB:,.1f} GiB per GPU, more than the {have / GiB:.1f} GiB one {g.name} offers"
    else:
        why = (f"{what} alone needs {need / GiB:,.1f} GiB of the {have / GiB:.1f} GiB one {g.name} offers, but the "
               f"KV cache has no room for its {cap.kv_bytes_per_request / GiB:.2f} GiB: the weights and the workspace "
               f"of a {cap.max_num_tokens:,}-token prefill step leave it {cap.kv_budget_bytes / GiB:.2f} GiB")
    tries = _what_fits(cfg, g, args, need)
    fix = ("; would fit: " + ", or ".join(tries)) if tries else (
        "; no larger --tp, GPU in the catalog or smaller --dtype/--kv-dtype fits it: shorten --prompt or --output")
    tp = f"{args.tp} x " if args.tp > 1 else ""
    raise UnsupportedError(f"{cfg.name} does not fit on {tp}{g.name}: {why}{fix}", argument="model", value=cfg.name,
                           allowed="a request that fits in the GPUs' memory")


def _serve(args: argparse.Namespace) -> int:
    if args.plot:
        output_path(args.plot, "--plot")
    cfg, g = gm.model(args.model), gm.gpu(args.gpu)
    own = own_files(args)
    progress(f"modelling {cfg.name} on {args.tp} x {g.name}: serving capacity over the batch sizes...")
    _check_fits(cfg, g, args)
    cap = gm.serving_capacity(cfg, g, prompt_len=args.prompt, output_len=args.output,
                              dtype=args.dtype, kv_dtype=args.kv_dtype, tp=args.tp, ttft_slo=args.ttft,
                              tpot_slo=args.tpot, engine=args.engine, attention_kernel=args.attention_kernel, **own)
    _check_fits(cfg, g, args, cap)
    gen = gm.generation_time(cfg, g, batch_size=1, prompt_len=args.prompt, new_tokens=args.output,
                             dtype=args.dtype, kv_dtype=args.kv_dtype, tp=args.tp, engine=args.engine,
                             attention_kernel=args.attention_kernel, **own)
    gpus = cap.gpus_for(args.rate) if args.rate and cap.requests_per_s > 0 else None
    if args.plot:
        from gpumodel.plots.serving import plot_serving_curve

        ax = plot_serving_curve(cap)
        ax.set_title(f"{cap.model}: {args.prompt} in / {args.output} out, {cap.tp} x {cap.gpu}")
        ax.figure.savefig(args.plot, dpi=150, bbox_inches="tight")
    if args.json:
        out = cap.to_dict()
        out["single_request"] = {"ttft_s": gen.ttft_s, "tpot_s": gen.tpot_s, "seconds": gen.seconds}
        out["gpus_for_rate"] = gpus
        print_json(out)
        return 0
    print(f"{cap.model} on {cap.tp} x {cap.gpu} ({cap.dtype} weights, {cap.kv_dtype} KV cache, engine {cap.engine}, "
          f"{cap.attention_kernel} attention): "
          f"{args.prompt} prompt + {args.output} output tokens per request")
    print_table(["", "value"], cap._rows()[2:], align_numbers=False)
    print(f"one request alone: TTFT {format_seconds(gen.ttft_s)}, TPOT {format_seconds(gen.tpot_s)}, "
          f"{format_seconds(gen.seconds)} in all")
    if args.rate:
        if gpus is None:
            print(f"no replica meets the targets: {args.rate:g} requests/s cannot be served")
        else:
            print(f"{args.rate:g} requests/s need {gpus} GPUs ({gpus // cap.tp} replicas of {cap.tp})")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0
