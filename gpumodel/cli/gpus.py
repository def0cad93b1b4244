"""``gpumodel gpus`` (the table of all GPUs) and ``gpumodel gpu NAME[,NAME...]`` (one record, or a comparison)."""

from __future__ import annotations

import argparse
import textwrap

from ._common import print_json, print_table, wrap_values
from ..records.gpu import GPUSpec
from ..vocabulary.gpus import gpu, list_gpus
from ..base.errors import ArgumentError
from ..base.units import format_quantity


GPUS_EPILOG = """\
JSON output (--json): a list with one object per GPU, SI units:
  name, vendor, memory_bytes [B], memory_type, memory_bandwidth [B/s],
  bf16_flops [FLOP/s] (dense tensor peak; the fp16 rate on GPUs without bf16, null if neither),
  fp32_flops [FLOP/s] (null if not listed), ridge_bf16 [FLOP/B] (bf16_flops / memory_bandwidth),
  tdp_w [W].
"""

def _gpu_epilog() -> str:
    keys = textwrap.fill("keys (those of the GPU spec YAML): " + ", ".join(GPUSpec.model_fields) + ".",
                         width=100, initial_indent="  ", subsequent_indent="  ")
    return ("Several comma-separated names (gpumodel gpu h100,a100,4090) print a comparison, one column per GPU.\n"
            "JSON output (--json): the full record (a list of records for several names), SI units: bytes [B],\n"
            "bandwidths [B/s], clocks [Hz], peaks [FLOP/s] or [OP/s] dense, tdp_watts [W];\n" + keys + "\n")


def register(sub: argparse._SubParsersAction) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("gpus", help="table of all known GPUs", epilog=GPUS_EPILOG, formatter_class=raw)
    p.add_argument("--vendor", choices=["nvidia", "amd"], help="only this vendor's GPUs")
    p.add_argument("--json", action="store_true", help="machine-readable output (SI units; keys below)")
    p.set_defaults(func=_gpus)

    q = sub.add_parser("gpu", help="one GPU's full record with sources, or several side by side",
                       epilog=_gpu_epilog(), formatter_class=raw)
    q.add_argument("name", help="GPU name or alias, e.g. h100, 4090, 'H100 SXM5 80GB'; several: h100,a100,4090")
    q.add_argument("--json", action="store_true", help="machine-readable output (SI units; keys below)")
    q.set_defaults(func=_gpu)


def _peak(g, dtype: str) -> float | None:
    for key in (dtype, "fp16") if dtype == "bf16" else (dtype,):
        if g.supports(key):
            return g.peak_flops(key)
    return None


def _si_row(g) -> dict:
    bf16 = _peak(g, "bf16")
    return {"name": g.name, "vendor": g.vendor, "memory_bytes": g.memory_bytes, "memory_type": g.memory_type,
            "memory_bandwidth": g.memory_bandwidth, "bf16_flops": bf16, "fp32_flops": _peak(g, "fp32"),
            "ridge_bf16": None if bf16 is None else bf16 / g.memory_bandwidth, "tdp_w": g.tdp_watts}


def _gpus(args: argparse.Namespace) -> int:
    from gpumodel.core.comparison import compare

    table = compare(list_gpus(args.vendor))
    if args.json:
        print_json([_si_row(g) for g in table.gpus])
    else:
        print_table(table.headers(), table._cells())
    return 0


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise ArgumentError(f"name {text!r}: give a GPU name, or several separated by commas (h100,a100,4090)")
    return names


def _gpu(args: argparse.Namespace) -> int:
    from gpumodel.core.comparison import compare

    names = _names(args.name)
    if len(names) > 1:
        table = compare(names)
        if args.json:
            print_json(list(table.gpus))
            return 0
        cells = table._cells()
        rows = [[header] + [row[i] for row in cells] for i, header in enumerate(table.headers()) if i]
        print_table(["GPU"] + [row[0] for row in cells], rows)
        return 0
    g = gpu(names[0])
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
    print_table(["field", "value"], wrap_values(rows), align_numbers=False)   # long notes wrapped to the terminal
    return 0
