"""``gpumodel systems`` (the table of node types and cloud instances) and ``gpumodel system NAME``."""

from __future__ import annotations

import argparse

from ._common import HelpFormatter, print_json, print_table, wrap_values
from ..records.system import list_systems, system


_KEYS = """\
  name, display_name, aliases [list], gpu_name, gpus_per_node, intra_node {fabric, bandwidth [B/s]
  per GPU each way, generation, source}, inter_node {fabric, bandwidth [B/s] per GPU each way,
  generation, source} (null: no network, one node at most), node_power_watts [W], nvlink_sharp
  (NVLink SHARP in-switch reductions: true/false), nvlink_sharp_source, cloud (empty: not a cloud
  instance), source, notes.
"""

SYSTEMS_EPILOG = "JSON output (--json): a list with one record per system, SI units:\n" + _KEYS
SYSTEM_EPILOG = "JSON output (--json): the system's record, SI units:\n" + _KEYS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("systems", help="table of known systems (nodes, racks and cloud instances)",
                       epilog=SYSTEMS_EPILOG, formatter_class=HelpFormatter)
    p.add_argument("--gpu", help="only systems built on this GPU (default: all)")
    p.add_argument("--json", action="store_true", help="machine-readable output (SI units; keys below)")
    p.set_defaults(func=_systems)

    q = sub.add_parser("system", help="one system's full record, with sources",
                       epilog=SYSTEM_EPILOG, formatter_class=HelpFormatter)
    q.add_argument("name", help="system name or alias, e.g. dgx-h100, p5.48xlarge")
    q.add_argument("--json", action="store_true", help="machine-readable output (SI units; keys below)")
    q.set_defaults(func=_system)


def _systems(args: argparse.Namespace) -> int:
    recs = [system(n) for n in list_systems(args.gpu)]
    if args.json:
        print_json([r.model_dump(mode="json") for r in recs])
        return 0
    rows = []
    for r in recs:
        net = (f"{r.inter_node.fabric} {r.inter_node.bandwidth * 8 / 1e9:g} Gb/s" if r.inter_node else "-")
        rows.append((r.name, f"{r.gpus_per_node} x {r.gpu_name}", f"{r.intra_node.fabric} {r.intra_node.bandwidth / 1e9:g} GB/s",
                     net, f"{r.node_power_watts / 1e3:g} kW", r.cloud or "-"))
    print_table(["system", "GPUs", "intra-node per GPU each way", "network per GPU", "node power", "cloud"], rows,
                align_numbers=False)
    return 0


def _system(args: argparse.Namespace) -> int:
    r = system(args.name)
    if args.json:
        print_json(r.model_dump(mode="json"))
        return 0
    rows = [("name", f"{r.name} ({r.display_name})"), ("aliases", ", ".join(r.aliases) or "-"),
            ("GPUs per node", f"{r.gpus_per_node} x {r.gpu_name}"),
            ("intra-node", f"{r.intra_node.fabric} ({r.intra_node.generation}), {r.intra_node.bandwidth / 1e9:g} GB/s "
                           f"per GPU each way [{r.intra_node.source}]")]
    if r.inter_node:
        rows.append(("network", f"{r.inter_node.fabric} ({r.inter_node.generation}), "
                                f"{r.inter_node.bandwidth * 8 / 1e9:g} Gb/s per GPU each way [{r.inter_node.source}]"))
    rows += [("node power", f"{r.node_power_watts / 1e3:g} kW"), ("cloud", r.cloud or "-"), ("source", r.source),
             ("notes", r.notes or "-")]
    print_table(["field", "value"], wrap_values(rows), align_numbers=False)   # long notes wrapped to the terminal
    return 0
