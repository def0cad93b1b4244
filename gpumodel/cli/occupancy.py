"""``gpumodel occupancy``: blocks per SM, occupancy and what limits it, as the CUDA runtime computes it.

Examples::

    gpumodel occupancy --gpu h100 --threads 256 --regs 64 --smem 48KiB
    gpumodel occupancy --cc 8.6 --threads 128 --regs 40 --carveout 50 --json
    gpumodel occupancy --gpu h100 --threads 256 --regs 64 --plot occupancy.png
"""

from __future__ import annotations

import argparse
import dataclasses

from ._common import print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("occupancy", help="blocks per SM, occupancy and its limiter for one kernel launch",
                       description="Occupancy of one kernel launch (cudaOccupancyMaxActiveBlocksPerMultiprocessor), "
                                   "the resource that limits it and the change that buys the next step.")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--gpu", default=None, help="GPU name (default: h100)")
    where.add_argument("--cc", default=None, help="compute capability instead of a GPU, e.g. 9.0 or 8.6")
    p.add_argument("--threads", type=int, required=True, help="threads per block (1..1024)")
    p.add_argument("--regs", type=int, required=True, help="registers per thread (numRegs, 0..255)")
    p.add_argument("--smem", default="0", help="dynamic shared memory per block, e.g. 48KiB or 4096 (default 0)")
    p.add_argument("--static-smem", default="0", help="static shared memory per block (default 0)")
    p.add_argument("--carveout", type=int, default=None, help="preferred shared-memory carveout in percent (0..100)")
    p.add_argument("--plot", metavar="PNG", help="also draw the three occupancy charts to this file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run)


def _bytes(text: str, name: str) -> int:
    from gpumodel.units import parse_quantity

    try:
        value = parse_quantity(text if any(c.isalpha() for c in str(text)) else f"{text} B", "bytes")
    except Exception as exc:
        raise ValueError(f"{name}: cannot read {text!r} as a size in bytes ({exc})") from None
    if value != int(value):
        raise ValueError(f"{name}: {text!r} is not a whole number of bytes")
    return int(value)


def _run(args: argparse.Namespace) -> int:
    from gpumodel.occupancy_helpers import next_occupancy_step
    from gpumodel.occupancy_model import UNLIMITED, occupancy

    target = args.cc or args.gpu or "h100"
    static, dynamic = _bytes(args.static_smem, "--static-smem"), _bytes(args.smem, "--smem")
    r = occupancy(target, args.threads, args.regs, static, dynamic, args.carveout)
    step = next_occupancy_step(target, args.threads, args.regs, static, dynamic, args.carveout)
    if args.plot:
        from gpumodel.plot_occupancy import plot_occupancy

        plot_occupancy(target, args.threads, args.regs, static, dynamic, args.carveout).savefig(args.plot, dpi=120)
    if args.json:
        out = r.to_dict()
        out["next_step"] = dataclasses.asdict(step)
        if args.plot:
            out["plot"] = args.plot
        print_json(out)
        return 0

    def lim(v: int) -> str:
        return "unlimited" if v >= UNLIMITED else str(v)

    where = f"{r.gpu_name} (cc {r.compute_capability})" if r.gpu_name else f"cc {r.compute_capability}"
    rows = [
        ("target", where),
        ("launch", f"{r.threads_per_block} threads x {r.registers_per_thread} regs, {static} B static + {dynamic} B dynamic smem"),
        ("blocks / SM", r.blocks_per_sm),
        ("active warps", f"{r.active_warps} of {r.max_warps_per_sm} ({r.warps_per_block} per block)"),
        ("active threads", r.active_threads),
        ("occupancy", f"{r.occupancy:.1%}"),
        ("limiter", r.limiter),
        ("blocks by warps", lim(r.blocks_by_warps)),
        ("blocks by registers", f"{lim(r.blocks_by_registers)} ({r.registers_per_block} regs per block)"),
        ("blocks by shared memory", f"{lim(r.blocks_by_shared_memory)} ({r.shared_memory_per_block} B per block incl. reservation, "
                                    f"carveout {r.shared_memory_carveout // 1024} KiB)"),
        ("blocks by block cap", r.blocks_by_block_cap),
        ("next step", _next(step)),
    ]
    print_table(["quantity", "value"], rows, align_numbers=False)
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


def _next(step) -> str:
    return str(step)
