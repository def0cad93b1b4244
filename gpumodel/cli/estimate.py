"""``gpumodel estimate``: how long does one op take on a GPU (calibrated where measured)?

Examples::

    gpumodel estimate --gpu h200 matmul 4096 4096 4096 --dtype bf16
    gpumodel estimate --gpu h200 attention 1 32 8192 128 --causal --backward
    gpumodel estimate --gpu h100,h200 softmax 4096 32000 --json
    gpumodel estimate --gpu h200 matmul 1 4096 4096 --calibration my-gpu.yaml
"""

from __future__ import annotations

import argparse

from ._common import print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    from gpumodel.ops import list_ops, size_arguments

    usage = "; ".join(f"{name} {' '.join(size_arguments(name)).upper()}" for name in list_ops())
    p = sub.add_parser(
        "estimate", help="estimated kernel time of one op (calibrated where a calibration exists)",
        description="Estimated time of one op on one or more GPUs, with what decided it. Ops and their sizes: "
                    + usage,
    )
    p.add_argument("op", help="op name: " + ", ".join(list_ops()))
    p.add_argument("sizes", nargs="*", type=_number, help="the op's sizes, in order (see above)")
    p.add_argument("--gpu", default="h200", help="GPU name(s), comma-separated (default: h200)")
    p.add_argument("--dtype", default="bf16", help="number format (default: bf16)")
    p.add_argument("--calibration", metavar="FILE", help="calibration YAML to use (from `gpumodel calibrate`)")
    p.add_argument("--uncalibrated", action="store_true", help="ignore shipped calibrations: datasheet x defaults")
    attn = p.add_argument_group("attention")
    attn.add_argument("--causal", action="store_true")
    attn.add_argument("--backward", action="store_true")
    attn.add_argument("--kv-heads", type=_number, default=None, help="key/value heads (grouped-query attention)")
    ew = p.add_argument_group("elementwise")
    ew.add_argument("--inputs", type=_number, default=1)
    ew.add_argument("--outputs", type=_number, default=1)
    ew.add_argument("--flops-per-element", type=_number, default=1)
    p.add_argument("--json", action="store_true", help="machine-readable output (SI units)")
    p.set_defaults(func=_run)


def _number(text: str) -> float:
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    return int(value) if value.is_integer() else value


def _build_op(args: argparse.Namespace):
    from gpumodel.ops import cost, size_arguments

    names = size_arguments(args.op)
    if len(args.sizes) != len(names):
        raise ValueError(f"{args.op} takes {len(names)} sizes ({' '.join(names)}), got {len(args.sizes)}")
    kwargs = {"dtype": args.dtype}
    op_name = args.op.strip().lower().replace("-", "_")
    if op_name == "attention":
        kwargs.update(causal=args.causal, backward=args.backward, kv_heads=args.kv_heads)
    elif op_name == "elementwise":
        kwargs.update(inputs=args.inputs, outputs=args.outputs, flops_per_element=args.flops_per_element)
    return cost(args.op, *args.sizes, **kwargs)


def _run(args: argparse.Namespace) -> int:
    from gpumodel.estimate import _fmt, estimate
    from gpumodel.gpus import gpu
    from gpumodel.roofline import roofline
    from gpumodel.units import format_quantity as fq

    op = _build_op(args)
    gpus = [gpu(name) for name in args.gpu.split(",") if name.strip()]
    if not gpus:
        raise ValueError("--gpu must name at least one GPU")
    results = []
    for g in gpus:
        est = estimate(op, g, calibrated=not args.uncalibrated, calibration=args.calibration)
        results.append((est, roofline(op, g).time_s))
    if args.json:
        print_json({
            "op": {"name": op.name, "dtype": op.dtype.value, "shape": dict(op.shape), "flops": op.flops,
                   "bytes": op.bytes},
            "results": [{"gpu": e.gpu, "time_s": e.time_s, "bound": e.bound, "compute_s": e.compute_s,
                         "memory_s": e.memory_s, "overhead_s": e.overhead_s, "parallelism": e.parallelism,
                         "calibrated": e.calibrated, "source": e.source, "roofline_time_s": r,
                         "achieved_flops": op.flops / e.time_s, "achieved_bandwidth": op.bytes / e.time_s}
                        for e, r in results],
        })
        return 0
    print(f"{op.name} {op._shape_text()} {op.dtype.value}: {fq(op.flops, 'FLOP')}, {fq(op.bytes, 'B')} moved")
    print()
    headers = ["GPU", "time", "bound", "compute", "memory", "launch", "roofline floor", "achieved", "source"]
    rows = []
    for e, r in results:
        achieved = (fq(op.flops / e.time_s, "FLOP/s") if op.unit == "tensor" else fq(op.bytes / e.time_s, "B/s"))
        rows.append([e.gpu, _fmt(e.time_s), e.bound, _fmt(e.compute_s), _fmt(e.memory_s),
                     _fmt(e.overhead_s), _fmt(r), achieved, e.source])
    print_table(headers, rows)
    return 0
