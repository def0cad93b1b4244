"""``gpumodel calibrate``: measure this machine's GPU with PyTorch and save a calibration YAML.

Examples::

    gpumodel calibrate --quick --out my-gpu.yaml       # under a minute
    gpumodel calibrate --out my-gpu.yaml --points raw.jsonl
    gpumodel estimate --gpu h200 matmul 4096 4096 4096 --calibration my-gpu.yaml
"""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="measure this GPU with torch and fit a calibration (needs torch + CUDA)")
    p.add_argument("--quick", action="store_true", help="about 120 kernels, under a minute (default: full, ~600 kernels)")
    p.add_argument("--from-points", metavar="JSONL",
                   help="fit measurements taken earlier (JSON lines) instead of measuring; needs no torch or GPU")
    p.add_argument("--validation", metavar="JSONL", help="separate measurements to report the error on (not fitted)")
    p.add_argument("--source", default="", help="text for the record's source field")
    p.add_argument("--out", required=True, metavar="FILE", help="calibration YAML to write")
    p.add_argument("--gpu", help="GPU spec name (default: from the device name torch reports)")
    p.add_argument("--points", metavar="JSONL", help="also keep the raw measurements as JSON lines")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the fitted parameters as JSON")
    p.add_argument("--host-out", metavar="FILE",
                   help="also measure this host's per-op costs of eager PyTorch and write them (the <gpu>-host.yaml "
                        "training_step_time reads, or pass it as host=)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.from_points:
        from gpumodel.calibration.fit import load_points

        env, points = load_points(args.from_points)
        if not points:
            raise ValueError(f"--from-points {args.from_points}: no measured points in the file")
        return _fit_and_save(args, env, points)
    try:
        import torch
    except ImportError:
        print("gpumodel calibrate: PyTorch is not installed; install it with CUDA support "
              "(pip install 'gpumodel[torch]') on the machine with the GPU", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("gpumodel calibrate: no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False); "
              "run this on the machine with the GPU", file=sys.stderr)
        return 1
    from gpumodel.calibration import bench

    env, points = bench.run_benchmarks(mode="quick" if args.quick else "full", jsonl=args.points,
                                       show_progress=not args.no_progress)
    if args.host_out:
        from gpumodel.calibration.host import fit_host_costs, measure_host, save_host_costs

        hc = fit_host_costs(measure_host("cuda", n=500 if args.quick else 2000), source=args.source)
        save_host_costs(hc, args.host_out, {"device_name": str(env.get("device_name", "")),
                                            "torch_version": str(env.get("torch_version", ""))})
        print(f"wrote {args.host_out}: host costs per op (op {hc.op_s * 1e6:.1f} us, backward {hc.backward_op_s * 1e6:.1f} us)")
    return _fit_and_save(args, env, points)


def _fit_and_save(args: argparse.Namespace, env: dict, points: list) -> int:
    from gpumodel.calibration.fit import fit_calibration, gpu_for_device, load_points
    from gpumodel.gpus import gpu

    from ._common import print_json, print_table

    g = gpu(args.gpu) if args.gpu else gpu_for_device(str(env.get("device_name", "")))
    validation = load_points(args.validation)[1] if args.validation else None
    cal = fit_calibration(points, g, env, validation=validation, source=args.source)
    path = cal.save(args.out)
    if args.json:
        print_json({"file": str(path), "gpu": cal.gpu, "parameters": cal.parameters, "fit_error": cal.fit_error})
        return 0
    print(f"wrote {path}: {len(cal.points)} kernels on {cal.device_name} ({g.name})")
    print_table(["parameter", "value"], [(k, f"{v:.4g}") for k, v in cal.parameters.items()], align_numbers=False)
    print()
    rows = []
    for fam, e in cal.fit_error.items():
        v = cal.validation_error.get(fam)
        rows.append((fam, e.n, f"{e.median:.1%}", f"{e.p90:.1%}", v.n if v else "-",
                     f"{v.median:.1%}" if v else "-", f"{v.p90:.1%}" if v else "-"))
    print_table(["family", "fit n", "fit median", "fit p90", "validation n", "val median", "val p90"], rows)
    return 0
