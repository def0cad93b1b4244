"""Split the occupancy probe's measured rows into the committed development and held-out files.

    python bench/split_occupancy.py RAW_DIR [tests/data/occupancy]

RAW_DIR holds what ``bench/measure_occupancy.sh`` wrote (``occupancy.csv.gz``, ``potential_block_size.csv.gz``,
``available_dynamic_smem.csv.gz``, ``kernels.csv.gz``, ``device.json``). A fixed-seed random 30% of the rows of
each table goes to ``*_heldout.csv.gz``, the rest to ``*_measured.csv.gz``; the split is made once, before the
model is compared with any measured row, and the held-out files are only read by the tests.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import numpy as np

SEED = 20261202
HELD_OUT = 0.30


def split(raw: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for table in ("occupancy", "potential_block_size", "available_dynamic_smem"):
        with gzip.open(raw / f"{table}.csv.gz", "rt") as f:
            header, *rows = f.read().splitlines()
        held = rng.random(len(rows)) < HELD_OUT
        for name, mask in (("measured", ~held), ("heldout", held)):
            with gzip.open(dest / f"{table}_{name}.csv.gz", "wt", compresslevel=9) as f:
                f.write("\n".join([header] + [r for r, m in zip(rows, mask) if m]) + "\n")
        print(f"{table}: {len(rows)} rows -> {int((~held).sum())} measured, {int(held.sum())} held out")
    for extra in ("kernels.csv.gz", "device.json", "nvidia-smi.csv.gz", "nvcc-version.txt", "ptxas.log.gz"):
        if (raw / extra).exists():
            shutil.copy(raw / extra, dest / extra)


if __name__ == "__main__":
    split(Path(sys.argv[1]), Path(sys.argv[2] if len(sys.argv) > 2 else "tests/data/occupancy"))
