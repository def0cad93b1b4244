"""``gpumodel estimate``: how long does one op take on a GPU (calibrated where measured)?

Examples::

    gpumodel estimate --gpu h200 matmul 4096 4096 4096 --dtype bf16
    gpumodel estimate --gpu h200 attention 1 32 8192 128 --causal --backward
    gpumodel estimate --gpu h100,h200 softmax 4096 32000 --json
    gpumodel estimate --gpu h200 matmul 1 4096 4096 --calibration my-gpu.yaml
"""

from __future__ import annotations

import argparse

from ._common import fill, input_path, print_json, print_table, progress, refuse
from ._opargs import SIZES_HELP, add_op_arguments, build_op, op_usage, selected_gpus
from ..vocabulary import format_seconds as fs
from ..base.units import format_quantity as fq

EPILOG = SIZES_HELP + """
JSON output (--json), SI units:
  op: name, dtype, shape {size name: count}, flops [FLOP], bytes [B]
  results: one object per GPU: gpu, seconds, compute_s, memory_s, overhead_s, roofline_time_s [s],
      bound (what decided the time), parallelism (fraction of the GPU kept busy), calibrated
      (true/false), source ("calibrated", "transferred" or "datasheet"), detail (where the parameters came from),
      expected_error (typical relative error of the source, or null), band ([low, high] [s]: where the
      measured time lay for 80% of the measured kernels of the source; null for a datasheet estimate),
      achieved_flops [FLOP/s], achieved_bandwidth [B/s]
"""


def register(sub: argparse._SubParsersAction) -> None:
    usage = op_usage()
    p = sub.add_parser(
        "estimate", help="estimated kernel time of one op (calibrated where a calibration exists)",
        description=fill("Estimated time of one op on one or more GPUs, with what decided it. "
                         "Ops and their sizes: " + usage),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_op_arguments(p, default_gpu="h200", impl=False)
    p.add_argument("--calibration", metavar="FILE", help="calibration YAML to use (from `gpumodel calibrate`)")
    p.add_argument("--uncalibrated", action="store_true", help="ignore shipped calibrations: datasheet x defaults")
    p.add_argument("--json", action="store_true", help="machine-readable output (SI units; keys below)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpumodel.calibration.estimate import estimate
    from gpumodel.core.roofline import roofline

    if args.calibration:
        refuse(["--uncalibrated"] if args.uncalibrated else [], "cannot be given with --calibration")
        input_path(args.calibration, "--calibration")
    op, gpus = build_op(args), selected_gpus(args)
    progress(f"estimating {op.name} on {', '.join(g.name for g in gpus)}...")
    results = []
    for g in gpus:
        est = estimate(op, g, calibrated=not args.uncalibrated, calibration=args.calibration)
        results.append((est, roofline(op, g).seconds))
    if args.json:
        print_json({
            "op": {"name": op.name, "dtype": op.dtype.value, "shape": dict(op.shape), "flops": op.flops,
                   "bytes": op.bytes},
            "results": [{"gpu": e.gpu, "seconds": e.seconds, "bound": e.bound, "compute_s": e.compute_s,
                         "memory_s": e.memory_s, "overhead_s": e.overhead_s, "parallelism": e.parallelism,
                         "calibrated": e.calibrated, "source": e.source, "detail": e.detail,
                         "expected_error": e.expected_error, "band": e.band, "roofline_time_s": r,
                         "achieved_flops": op.flops / e.seconds, "achieved_bandwidth": op.bytes / e.seconds}
                        for e, r in results],
        })
        return 0
    print(f"{op.name} {op._shape_text()} {op.dtype.value}: {fq(op.flops, 'FLOP')}, {fq(op.bytes, 'B')} moved")
    print()
    headers = ["GPU", "time", "bound", "compute", "memory", "launch", "roofline floor", "achieved", "source"]
    rows = []
    for e, r in results:
        achieved = (fq(op.flops / e.seconds, "FLOP/s") if op.unit == "tensor" else fq(op.bytes / e.seconds, "B/s"))
        rows.append([e.gpu, fs(e.seconds), e.bound, fs(e.compute_s), fs(e.memory_s),
                     fs(e.overhead_s), fs(r), achieved, e.detail or e.source])
    print_table(headers, rows)
    return 0
