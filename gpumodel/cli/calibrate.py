"""``gpumodel calibrate``: measure this machine's GPU with PyTorch and save a calibration YAML.

Measuring (the default) times kernels of every family the time model prices, as many as ``--budget`` allows
(:func:`gpumodel.calibration.budget.budget_plan`: each family sampled at one rate, a few kernels at least), holds
every fifth one out of the fit to report the fit's error beside the transfer's on them, measures this host's
per-op costs of eager PyTorch (written beside the calibration as ``<out>.host.yaml``; ``--no-host`` skips it) and
the slowdown of compute-bound kernels under sustained load over the fitted model's price of them (kept as
``sustained_slowdown``), then a GEMM in mixes with memory-bound work, for the share of compute-bound time up to which
the GPU holds its boost clock (kept as ``power_share_threshold``; ``--no-sustained`` skips both). The record lists the families measured
(``measured_families``); every parameter the run does not
determine keeps the value of the shipped calibration carried to this GPU.

Examples::

    gpumodel calibrate --out my-gpu.yaml                  # about three minutes, host costs and sustained clocks too
    gpumodel calibrate --budget 10m --out my-gpu.yaml --points raw.jsonl
    gpumodel estimate --gpu h200 matmul 4096 4096 4096 --calibration my-gpu.yaml
"""

from __future__ import annotations

import argparse
import json

from ._common import input_path, output_path, parse_seconds, print_json, print_table, refuse
from ..base.errors import ArgumentError, GpumodelError, UnsupportedError
from ..vocabulary.gpus import gpu

EPILOG = """\
JSON output (--json), SI units:
  file (the calibration YAML written), gpu (the spec it belongs to),
  parameters {name: value} (names ending _s are seconds [s]; bandwidth names [B/s]; *_flops
  [FLOP/s]; row_rate_* [rows/s]; the others are dimensionless factors),
  fit_error, validation_error {family: {n, median, p90}} (absolute relative error [fraction]
  on the fitted and on the held-out points), transfer_validation_error (the same for the shipped
  calibration carried to this GPU, on the same held-out points; absent where no transfer applies),
  host_file (the host costs written, or null), sustained_slowdown (or null), sustained_slowdown_fp8 (the fp8
  GEMMs' own, or null), power_share_threshold
  (the compute share up to which a mix of work held the boost clock, or null), measured_families,
  budget_s (the budget the kernel plan was sized to [s], or null with --from-points), kernels (measured).
"""

#: one measured kernel in this many is held out of the fit when no --validation is given
HOLD_OUT_EVERY = 5


def hold_out(points: list) -> tuple[list, list]:
    """``(fitted, held out)``: every :data:`HOLD_OUT_EVERY`-th of the run's ``points`` in the order measured (failed
    ones counted) is held out of the fit, the rest fitted.

    >>> hold_out(list(range(1, 11)))
    ([1, 2, 3, 4, 6, 7, 8, 9], [5, 10])
    """
    return [pt for i, pt in enumerate(points) if (i + 1) % HOLD_OUT_EVERY], points[HOLD_OUT_EVERY - 1::HOLD_OUT_EVERY]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="measure this GPU with torch and fit a calibration (needs torch + CUDA)",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=parse_seconds, metavar="TIME",
                   help="about how long the whole run takes (kernels, host costs, sustained load, fit): 1m, 3m, 10m; "
                        "the kernel plan is sized to it, every family at any budget (default: 3m, about 450 kernels)")
    p.add_argument("--quick", action="store_true", help="the same as --budget 1m (about 110 kernels)")
    p.add_argument("--from-points", metavar="JSONL",
                   help="fit measurements taken earlier (JSON lines) instead of measuring; needs no torch or GPU")
    p.add_argument("--validation", metavar="JSONL", nargs="+",
                   help="separate measurements to report the error on (not fitted); several files are pooled")
    p.add_argument("--source", default="", help="text for the record's source field")
    p.add_argument("--sustained", metavar="JSONL",
                   help="isolated vs sustained timings (bench/measure_sustained.py): keep the median slowdown of "
                        "their compute-bound kernels over the fitted model as the record's sustained_slowdown "
                        "(used for training steps)")
    p.add_argument("--out", required=True, metavar="FILE", help="calibration YAML to write")
    p.add_argument("--gpu", help="GPU spec name (default: from the device name torch reports)")
    p.add_argument("--points", metavar="JSONL", help="also keep the raw measurements as JSON lines")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the fitted parameters as JSON (keys below)")
    p.add_argument("--host-out", metavar="FILE",
                   help="where to write this host's per-op costs of eager PyTorch (as in specs/hosts/<gpu>.yaml, "
                        "which training_step_time reads; or pass it as host=); default <out>.host.yaml")
    p.add_argument("--no-host", action="store_true", help="do not measure the host's per-op costs")
    p.add_argument("--no-sustained", action="store_true",
                   help="do not measure the slowdown under sustained load (training steps then use the transfer's)")
    p.add_argument("--sustained-points", metavar="JSONL",
                   help="also keep the sustained-load timings (isolated and back to back, per kernel) as JSON lines")
    p.set_defaults(func=_run)


def _load(path: str, option: str) -> tuple[dict, list]:
    """The measurements in a JSON-lines file, with any unreadable content reported against the option."""
    from gpumodel.calibration.fit import load_points

    input_path(path, option)
    try:
        env, points = load_points(path)
    except GpumodelError:
        raise
    except (ValueError, AttributeError, TypeError, KeyError) as exc:  # the reader does not check the rows
        raise ArgumentError(f"{option} {path}: not a JSON-lines file of measurements, one object a line "
                            f"({type(exc).__name__}: {exc})") from None
    if not points:
        raise ArgumentError(f"{option} {path}: no measured points in the file")
    return env, points


def _run(args: argparse.Namespace) -> int:
    output_path(args.out, "--out")
    for option, path in (("--points", args.points), ("--sustained-points", args.sustained_points)):
        if path:
            output_path(path, option)
    refuse(["--host-out"] if args.host_out and args.no_host else [], "cannot be given with --no-host")
    refuse([name for name, on in (("--sustained", args.sustained), ("--sustained-points", args.sustained_points))
            if on and args.no_sustained], "cannot be given with --no-sustained")
    refuse(["--quick"] if args.quick and args.budget is not None else [], "cannot be given with --budget")
    g = gpu(args.gpu) if args.gpu else None
    validation = [pt for path in args.validation for pt in _load(path, "--validation")[1]] if args.validation else None
    if args.from_points:
        given = [name for name, on in (("--quick", args.quick), ("--budget", args.budget is not None),
                                       ("--points", args.points), ("--no-progress", args.no_progress),
                                       ("--host-out", args.host_out), ("--no-host", args.no_host),
                                       ("--no-sustained", args.no_sustained),
                                       ("--sustained-points", args.sustained_points)) if on]
        refuse(given, "applies when measuring; it cannot be given with --from-points")
        env, points = _load(args.from_points, "--from-points")
        return _fit_and_save(args, g, env, points, validation)
    from gpumodel.calibration.budget import DEFAULT_BUDGET_S, MIN_BUDGET_S

    budget = 60.0 if args.quick else DEFAULT_BUDGET_S if args.budget is None else args.budget
    if budget < MIN_BUDGET_S:
        raise ArgumentError(f"--budget {budget:g} s: at least {MIN_BUDGET_S:g} s (1m), in which every family is "
                            "measured once", argument="--budget", value=budget, allowed=f">= {MIN_BUDGET_S:g} s")
    host_out = None if args.no_host else (args.host_out or _host_path(args.out))
    if host_out:
        output_path(host_out, "--host-out")
    try:
        import torch
    except ImportError:
        raise UnsupportedError("PyTorch is not installed; install it with CUDA support "
                               "(pip install 'gpumodel[torch]') on the machine with the GPU") from None
    if not torch.cuda.is_available():
        raise UnsupportedError("no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False); "
                               "run this on the machine with the GPU")
    from gpumodel.calibration import bench

    env, points, plan = bench.run_budget(budget, jsonl=args.points, show_progress=not args.no_progress)
    args.budget_s = budget
    if validation is None:   # hold every fifth kernel out of the fit: the fit's error and the transfer's on them
        points, validation = hold_out(points)
    args.host_file = None
    if host_out:
        from gpumodel.training.hostfit import fit_host_costs, measure_host, save_host_costs

        hc = fit_host_costs(measure_host("cuda", n=plan.host_calls), source=args.source, base=_shipped_host(g, env))
        save_host_costs(hc, host_out, {"device_name": str(env.get("device_name", "")),
                                       "torch_version": str(env.get("torch_version", ""))})
        args.host_file = str(host_out)
        if not args.json:
            print(f"wrote {host_out}: host costs per op (op {hc.op_s * 1e6:.1f} us, backward {hc.backward_op_s * 1e6:.1f} us)")
    if not args.no_sustained and not args.sustained:
        from gpumodel.calibration.sustained import measure_sustained

        rows = measure_sustained(plan.sustained_s)
        if args.sustained_points:
            _write_rows(args.sustained_points, rows)
        args.sustained_rows = rows
    return _fit_and_save(args, g, env, points, validation)


def _shipped_host(g, env: dict):
    """The host costs a run's unmeasured fields are carried from: the GPU's shipped ones, else the reference GPU's."""
    from gpumodel.calibration.fit import gpu_for_device
    from gpumodel.calibration.transfer import REFERENCE
    from gpumodel.training.hostcost import host_costs_for

    shipped = host_costs_for((g or gpu_for_device(str(env.get("device_name", "")))).name)
    return shipped if shipped.calibrated else host_costs_for(REFERENCE)


def _write_rows(path: str, rows: list) -> None:
    """``rows`` as JSON lines."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in rows)


def _host_path(out: str) -> str:
    """``my-gpu.yaml`` -> ``my-gpu.host.yaml``: where the host costs go by default."""
    stem = out[:-5] if out.endswith(".yaml") else out[:-4] if out.endswith(".yml") else out
    return stem + ".host.yaml"


def _fit_and_save(args: argparse.Namespace, g, env: dict, points: list, validation: list | None) -> int:
    from gpumodel.calibration.fit import accuracy_table, fit_calibration, gpu_for_device
    from gpumodel.calibration.points import point_set
    from gpumodel.calibration.sustained import FP8_SLOWDOWN
    from gpumodel.calibration.transfer import transfer_for

    g = g or gpu_for_device(str(env.get("device_name", "")))
    rows = getattr(args, "sustained_rows", None)
    if getattr(args, "sustained", None):
        from gpumodel.calibration.sustained import read_rows, slowdown

        input_path(args.sustained, "--sustained")
        try:
            rows = read_rows(args.sustained)
            slowdown(rows)   # refuses a file without compute-bound kernels timed back to back
        except (ValueError, KeyError, TypeError) as exc:
            raise ArgumentError(f"--sustained {args.sustained}: {exc}") from None
    cal = fit_calibration(points, g, env, validation=validation, source=args.source, sustained_rows=rows)
    slow = cal.parameters.get("sustained_slowdown") if rows is not None else None
    path = cal.save(args.out)
    moved = transfer_for(g) if validation else None
    transferred = accuracy_table(moved.model, point_set(validation)) if moved is not None else {}
    if args.json:
        print_json({"file": str(path), "gpu": cal.gpu, "parameters": cal.parameters, "fit_error": cal.fit_error,
                    "validation_error": cal.validation_error, "transfer_validation_error": transferred,
                    "host_file": getattr(args, "host_file", None),
                    "sustained_slowdown": slow,
                    FP8_SLOWDOWN: cal.parameters.get(FP8_SLOWDOWN),
                    "power_share_threshold": cal.parameters.get("power_share_threshold"),
                    "measured_families": cal.measured_families, "budget_s": getattr(args, "budget_s", None),
                    "kernels": len(points) + len(validation or [])})
        return 0
    print(f"wrote {path}: {len(cal.points)} kernels on {cal.device_name} ({g.name})")
    print_table(["parameter", "value"], [(k, f"{v:.4g}") for k, v in cal.parameters.items()], align_numbers=False)
    print()
    rows = []
    for fam, e in cal.fit_error.items():
        v, t = cal.validation_error.get(fam), transferred.get(fam)
        rows.append((fam, e.n, f"{e.median:.1%}", f"{e.p90:.1%}", v.n if v else "-",
                     f"{v.median:.1%}" if v else "-", f"{v.p90:.1%}" if v else "-",
                     f"{t['median']:.1%}" if t else "-"))
    print_table(["family", "fit n", "fit median", "fit p90", "held-out n", "held-out median", "held-out p90",
                 "transfer median"], rows)
    mine, theirs = cal.validation_error.get("overall"), transferred.get("overall")
    if mine is not None and theirs:
        print(f"held-out kernels ({mine.n}): median error {mine.median:.1%} with this calibration, "
              f"{theirs['median']:.1%} with the shipped calibration carried to this GPU")
    if slow is not None:
        print(f"sustained_slowdown {slow:.3f} (compute-bound kernels after seconds of back-to-back work, "
              "over this fit)")
    if FP8_SLOWDOWN in cal.parameters:
        print(f"{FP8_SLOWDOWN} {cal.parameters[FP8_SLOWDOWN]:.3f} (the fp8 GEMMs' own)")
    if "power_share_threshold" in cal.parameters:
        print(f"power_share_threshold {cal.parameters['power_share_threshold']:.2f} (a mix of work held the boost "
              "clock up to this share of its time in compute-bound kernels)")
    return 0
