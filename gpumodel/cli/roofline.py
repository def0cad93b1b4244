"""``gpumodel roofline``: is an op compute- or memory-bound, and how long does it take at best?

Examples::

    gpumodel roofline --gpu h100 matmul 4096 4096 4096 --dtype bf16
    gpumodel roofline --gpu h100,h200 attention 8 32 4096 128 --causal --impl naive
    gpumodel roofline elementwise 16777216 --dtype fp16 --level all --json
"""

from __future__ import annotations

import argparse

from ._common import fill, output_path, print_json, print_table
from ._opargs import SIZES_HELP, add_op_arguments, build_op, op_usage, selected_gpus
from ..base.units import format_quantity as fq
from ..vocabulary import format_seconds as _fmt_time

_LEVELS = ("hbm", "l2", "shared")

EPILOG = SIZES_HELP + """
JSON output (--json), SI units:
  op: name, dtype, unit ("tensor" or "cuda" cores), shape {size name: count}, flops [FLOP],
      bytes_read, bytes_written, bytes [B], arithmetic_intensity, arithmetic_intensity_read [FLOP/B]
  results: one object per GPU and memory level: gpu, level, bound ("compute" or "memory"),
      seconds, compute_s, memory_s [s], attainable_flops, peak_flops [FLOP/s],
      arithmetic_intensity, ridge_point [FLOP/B], bandwidth [B/s]
  plot: the file written (with --plot)
"""


def register(sub: argparse._SubParsersAction) -> None:
    usage = op_usage()
    p = sub.add_parser(
        "roofline", help="roofline bound (intensity, ridge point, bound, time) of one op",
        description=fill("Roofline bound of one op on one or more GPUs. Ops and their sizes: " + usage),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_op_arguments(p, default_gpu="h100", impl=True)
    p.add_argument("--level", default="hbm", choices=[*_LEVELS, "all"], help="memory level (default: hbm)")
    p.add_argument("--sparse", action="store_true", help="2:4 sparse tensor-core peak")
    p.add_argument("--plot", metavar="PNG", help="also draw the roofline chart to this file")
    p.add_argument("--json", action="store_true", help="machine-readable output (SI units; keys below)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpumodel.core.roofline import arithmetic_intensity, roofline

    op, gpus = build_op(args), selected_gpus(args)
    plot = output_path(args.plot, "--plot") if args.plot else None
    levels = _LEVELS if args.level == "all" else (args.level,)
    results = []
    for g in gpus:
        for lvl in levels:
            try:
                results.append(roofline(op, g, level=lvl, sparse=args.sparse))
            except ValueError:
                if args.level != "all" or lvl == "hbm":
                    raise
    if plot:
        _plot(args, plot, op, gpus, levels)
    if args.json:
        print_json({
            "op": {"name": op.name, "dtype": op.dtype.value, "unit": op.unit, "shape": dict(op.shape),
                   "flops": op.flops, "bytes_read": op.bytes_read, "bytes_written": op.bytes_written,
                   "bytes": op.bytes, "arithmetic_intensity": arithmetic_intensity(op),
                   "arithmetic_intensity_read": arithmetic_intensity(op, over="read")},
            "results": [{k: getattr(r, k) for k in (
                "gpu", "level", "bound", "seconds", "compute_s", "memory_s", "attainable_flops",
                "arithmetic_intensity", "ridge_point", "peak_flops", "bandwidth")} for r in results],
            **({"plot": str(plot)} if plot else {}),
        })
        return 0
    print(f"{op.label} {op.dtype.value} on {'tensor' if op.unit == 'tensor' else 'CUDA'} cores")
    print(f"  FLOPs {fq(op.flops, 'FLOP')}; read {fq(op.bytes_read, 'B')}, written {fq(op.bytes_written, 'B')}")
    print(f"  arithmetic intensity {arithmetic_intensity(op):.4g} FLOP/byte "
          f"({arithmetic_intensity(op, over='read'):.4g} over bytes read)")
    print()
    headers = ["GPU", "level", "peak", "bandwidth", "ridge [FLOP/B]", "intensity/ridge", "bound", "time",
               "compute floor", "memory floor"]

    rows = [[r.gpu, r.level, fq(r.peak_flops, "FLOP/s"), fq(r.bandwidth, "B/s"), f"{r.ridge_point:.4g}",
             f"{r.arithmetic_intensity / r.ridge_point:.3g}x", r.bound, _fmt_time(r.seconds),
             _fmt_time(r.compute_s), _fmt_time(r.memory_s)] for r in results]
    print_table(headers, rows)
    if plot:
        print(f"\nwrote {plot}")
    return 0


def _plot(args: argparse.Namespace, path, op, gpus, levels) -> None:
    from gpumodel.plots import charts as plot

    fig = plot.roofline(gpus, ops={op.label: op}, dtypes=[op.dtype.value if op.unit == "tensor" else "fp32"],
                        level=list(levels) if args.level == "all" else args.level, sparse=args.sparse)
    fig.savefig(path, dpi=150)
