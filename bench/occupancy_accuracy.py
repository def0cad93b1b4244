"""Agreement of gpumodel's occupancy calculator with the CUDA runtime's measured answers (tests/data/occupancy).

    python bench/occupancy_accuracy.py

Prints, for each measured table and split (development / held-out), how many rows agree exactly.
The measurement itself: bench/measure_occupancy.sh (see tests/data/occupancy/README.md).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

import gpumodel as gm

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "occupancy"


def load(table: str, split: str) -> dict[str, np.ndarray]:
    path = DATA / f"{table}_{split}.csv.gz"
    with gzip.open(path, "rt") as f:
        names = f.readline().strip().split(",")
    values = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    return {n: values[:, i] for i, n in enumerate(names)}


def carve(c: np.ndarray) -> np.ndarray:
    """Carveout column -> preference: -2 (attribute never set) and -1 (set to the default) both mean default."""
    return np.where(c < 0, -1, c)


def main() -> None:
    print(f"{'table':<26} {'split':<9} {'rows':>8} {'agree':>8} {'share':>8}")
    for split in ("measured", "heldout"):
        d = load("occupancy", split)
        v = (d["threads"] >= 1) & (d["threads"] <= 1024)
        r = gm.occupancy("9.0", d["threads"][v], d["regs"][v], d["static_smem"][v], d["dynamic_smem"][v],
                         carve(d["carveout"][v]), max_dynamic_shared_bytes=d["max_dynamic_smem"][v])
        ok = int((r.blocks_per_sm == d["blocks"][v]).sum())
        print(f"{'blocks per SM':<26} {split:<9} {v.sum():>8} {ok:>8} {ok / v.sum():>8.4%}")

        d = load("potential_block_size", split)
        agree = 0
        for per in np.unique(d["smem_per_thread"]):
            m = d["smem_per_thread"] == per
            dyn = (lambda b, p=int(per): b * p) if per else d["dynamic_smem"][m]
            best = gm.max_potential_block_size(gm.gpu("h200-sxm"), d["regs"][m], d["static_smem"][m], dyn,
                                               d["block_size_limit"][m], carve(d["carveout"][m]),
                                               max_dynamic_shared_bytes=d["max_dynamic_smem"][m])
            agree += int(((best.block_size == d["block_size"][m]) & (best.min_grid_size == d["min_grid_size"][m])).sum())
        n = len(d["regs"])
        print(f"{'best block size':<26} {split:<9} {n:>8} {agree:>8} {agree / n:>8.4%}")

        d = load("available_dynamic_smem", split)
        got = gm.max_dynamic_shared_memory("9.0", d["num_blocks"], d["threads"], d["regs"], d["static_smem"],
                                           carve(d["carveout"]), max_dynamic_shared_bytes=d["max_dynamic_smem"],
                                           runtime=True)
        ok = int((got == np.where(d["error"] != 0, -1, d["bytes"])).sum())
        n = len(got)
        print(f"{'available dynamic smem':<26} {split:<9} {n:>8} {ok:>8} {ok / n:>8.4%}")


if __name__ == "__main__":
    main()
