"""``gpumodel serve MODEL --gpu h100 --tp 4 --prompt 2048 --output 256 --ttft 1s --tpot 50ms``: serving capacity."""

from __future__ import annotations

import argparse

from ._common import count_type, output_path, parse_number, print_json, print_table
import gpumodel as gm
from ..vocabulary import format_seconds


def _rate(text: str) -> float:
    """A request rate > 0 [requests/s]."""
    rate = parse_number(text, "--rate")
    if rate <= 0:
        raise argparse.ArgumentTypeError(f"--rate={text!r}: must be > 0 requests/s")
    return rate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serving capacity of a replica: throughput within latency targets, GPUs for a load")
    p.add_argument("model", help="model preset, e.g. llama-3-70b")
    p.add_argument("--gpu", default="h100", help="GPU name or alias (default h100)")
    p.add_argument("--tp", type=count_type(1), default=1, help="tensor-parallel degree: GPUs per replica")
    p.add_argument("--prompt", type=count_type(1), default=512, help="prompt tokens per request")
    p.add_argument("--output", type=count_type(1), default=128, help="generated tokens per request")
    p.add_argument("--ttft", default=None, help="time-to-first-token target, e.g. 1s or 500ms")
    p.add_argument("--tpot", default=None, help="time-per-output-token target, e.g. 50ms")
    p.add_argument("--dtype", default="bf16", help="weights: bf16, fp16, fp8, int8, int4 (weight-only)")
    p.add_argument("--kv-dtype", default=None, help="KV cache: bf16, fp16, fp8 (default: activation dtype)")
    p.add_argument("--engine", default="graph", choices=["graph", "compiled", "hf"],
                   help="graph: CUDA-graph engine (vLLM); compiled: CUDA graphs of fused kernels (gpt-fast, "
                        "TensorRT-LLM); hf: eager Hugging Face generate")
    p.add_argument("--rate", type=_rate, default=None, help="requests/s to serve: prints the GPUs needed")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", metavar="PNG", help="write the throughput-latency curve")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    if args.plot:
        output_path(args.plot, "--plot")
    cap = gm.serving_capacity(args.model, args.gpu, prompt_len=args.prompt, output_len=args.output,
                              dtype=args.dtype, kv_dtype=args.kv_dtype, tp=args.tp, ttft_slo=args.ttft,
                              tpot_slo=args.tpot, engine=args.engine)
    gen = gm.generation_time(args.model, args.gpu, batch_size=1, prompt_len=args.prompt, new_tokens=args.output,
                             dtype=args.dtype, kv_dtype=args.kv_dtype, tp=args.tp, engine=args.engine)
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
    print(f"{cap.model} on {cap.tp} x {cap.gpu} ({cap.dtype} weights, {cap.kv_dtype} KV cache, engine {cap.engine}): "
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
