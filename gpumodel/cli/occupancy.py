"""``gpumodel occupancy``: blocks per SM, occupancy and what limits it, as the CUDA runtime computes it.

Examples::

    gpumodel occupancy --gpu h100 --threads 256 --regs 64 --smem 48KiB
    gpumodel occupancy --cc 8.6 --threads 128 --regs 40 --carveout 50 --json
    gpumodel occupancy --gpu h100 --threads 256 --regs 64 --plot occupancy.png
"""

from __future__ import annotations

import argparse
import dataclasses
import re

from ._common import OptionError, count_type, fill, output_path, parse_bytes, print_json, print_table

EPILOG = """\
Sizes (--smem, --static-smem) are bytes: 4096, 48KiB, 1MiB. Shared memory is sized in binary
units, so decimal 48KB/48kB is refused: write 48KiB (or 49152).

JSON output (--json), SI units (bytes [B]):
  compute_capability, gpu_name, threads_per_block, registers_per_thread, static_shared_bytes,
  dynamic_shared_bytes, carveout [percent; -1 = the runtime's default], blocks_per_sm,
  warps_per_block, active_warps, active_threads, occupancy [0..1], limiter, blocks_by_warps,
  blocks_by_registers, blocks_by_shared_memory, blocks_by_block_cap, blocks_by_barriers (null where
  that resource sets no limit), registers_per_block, shared_memory_per_block [B] (with the
  runtime's reservation), shared_memory_carveout [B], max_warps_per_sm,
  next_step {blocks_per_sm, limiter, target_blocks, reachable, registers_per_thread,
  dynamic_shared_bytes [B], threads_per_block} (what one more block per SM needs; null: no change),
  plot (the file written, with --plot).
"""


def _smem(text: str) -> int:
    return parse_bytes(text, binary_only=True)


def _cc(text: str) -> str:
    """A compute capability ``MAJOR.MINOR`` (``9.0``, ``8.6``), kept as the text the library reads."""
    if not re.fullmatch(r"\d{1,2}\.\d", text.strip()):
        raise OptionError(f"{text!r}: expected a compute capability MAJOR.MINOR such as 9.0, 8.6 or 12.0")
    return text.strip()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "occupancy", help="blocks per SM, occupancy and its limiter for one kernel launch",
        description=fill("Occupancy of one kernel launch (cudaOccupancyMaxActiveBlocksPerMultiprocessor), "
                         "the resource that limits it and the change that buys the next step."),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--gpu", default=None, help="GPU name (default: h100)")
    where.add_argument("--cc", type=_cc, default=None, help="compute capability instead of a GPU, e.g. 9.0 or 8.6")
    p.add_argument("--threads", type=count_type(0), required=True, help="threads per block (1..1024)")
    p.add_argument("--regs", type=count_type(0), required=True, help="registers per thread (numRegs, 0..255)")
    p.add_argument("--smem", type=_smem, default=0,
                   help="dynamic shared memory per block [bytes], e.g. 48KiB or 4096 (default 0)")
    p.add_argument("--static-smem", type=_smem, default=0,
                   help="static shared memory per block [bytes], e.g. 16KiB (default 0)")
    p.add_argument("--carveout", type=int, default=None, help="preferred shared-memory carveout in percent (0..100)")
    p.add_argument("--plot", metavar="PNG", help="also draw the three occupancy charts to this file")
    p.add_argument("--json", action="store_true", help="machine-readable output (SI units; keys below)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpumodel.core.occupancy_helpers import next_occupancy_step
    from gpumodel.core.occupancy import UNLIMITED, occupancy

    target = args.cc or args.gpu or "h100"
    static, dynamic = args.static_smem, args.smem
    plot = output_path(args.plot, "--plot") if args.plot else None
    r = occupancy(target, args.threads, args.regs, static, dynamic, args.carveout)
    step = next_occupancy_step(target, args.threads, args.regs, static, dynamic, args.carveout)
    if plot:
        from gpumodel.plots.occupancy import plot_occupancy

        plot_occupancy(target, args.threads, args.regs, static, dynamic, args.carveout).savefig(plot, dpi=120)
    if args.json:
        out = {k: None if k.startswith("blocks_by_") and v >= UNLIMITED else v for k, v in r.to_dict().items()}
        out["next_step"] = dataclasses.asdict(step)
        if plot:
            out["plot"] = str(plot)
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
    if plot:
        print(f"plot written to {plot}")
    return 0


def _next(step) -> str:
    return str(step)
