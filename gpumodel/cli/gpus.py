"""``gpumodel gpus`` (the table of all GPUs) and ``gpumodel gpu NAME`` (one record with its sources)."""

from __future__ import annotations

import argparse

from ._common import print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gpus", help="table of all known GPUs")
    p.add_argument("--vendor", choices=["nvidia", "amd"], help="only this vendor's GPUs")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_gpus)

    q = sub.add_parser("gpu", help="one GPU's full record, with sources")
    q.add_argument("name", help="GPU name or alias, e.g. h100, 4090, 'H100 SXM5 80GB'")
    q.add_argument("--json", action="store_true", help="machine-readable output (SI units)")
    q.set_defaults(func=_gpu)


def _gpus(args: argparse.Namespace) -> int:
    from gpumodel.comparison import compare
    from gpumodel.gpus import list_gpus

    table = compare(list_gpus(args.vendor))
    if args.json:
        print_json(table.rows)
    else:
        print_table(table.headers(), table._cells())
    return 0


def _gpu(args: argparse.Namespace) -> int:
    from gpumodel.gpus import gpu
    from gpumodel.units import format_quantity

    g = gpu(args.name)
    if args.json:
        print_json(g)
        return 0
    rows = [
        ("name", f"{g.name} ({g.display_name})"),
        ("aliases", ", ".join(g.aliases) or "-"),
        ("vendor / architecture", f"{g.vendor} / {g.architecture}"),
        ("compute capability", g.compute_capability or f"n/a ({g.occupancy_note})"),
        ("SMs x FP32 lanes x tensor cores", f"{g.sm_count} x {g.fp32_cores_per_sm} x {g.tensor_cores_per_sm}"),
        ("boost clock", format_quantity(g.boost_clock, "Hz")),
        ("memory", f"{format_quantity(g.memory_bytes, 'B')} {g.memory_type} at {format_quantity(g.memory_bandwidth, 'B/s')}"),
        ("L2", format_quantity(g.l2_bytes, "B")),
        ("shared memory / SM (max per block)",
         f"{format_quantity(g.shared_memory_per_sm, 'B', binary=True)} ({format_quantity(g.max_shared_memory_per_block, 'B', binary=True)})"),
        ("register file / SM", format_quantity(g.register_file_per_sm, "B", binary=True)),
        ("max threads / SM", g.max_threads_per_sm),
    ]
    for key, value in g.peaks.model_dump().items():
        if value is not None:
            unit = "OP/s" if key.startswith("int") else "FLOP/s"
            rows.append((f"peak {key} (dense)", format_quantity(value, unit)))
    rows += [
        ("2:4 sparsity", g.sparsity or "no"),
        ("NVLink", f"gen {g.nvlink.generation}, {format_quantity(g.nvlink.bandwidth, 'B/s')} bidirectional" if g.nvlink else "none"),
        ("PCIe", f"gen {g.pcie_generation}"),
        ("TDP", f"{g.tdp_watts:.0f} W"),
    ]
    for lvl in g.memory_hierarchy:
        bw = format_quantity(lvl.bandwidth, "B/s") if lvl.bandwidth else "-"
        cap = format_quantity(lvl.capacity, "B", binary=lvl.per_sm) if lvl.capacity else "-"
        rows.append((f"level {lvl.level}", f"{cap}{' per SM' if lvl.per_sm else ''}, {bw} ({lvl.basis}: {lvl.source})"))
    rows += [("source", g.source), ("notes", g.notes or "-")]
    print_table(["field", "value"], rows, align_numbers=False)
    return 0
