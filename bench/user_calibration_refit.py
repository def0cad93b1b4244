"""Refit a user's calibration from the points its ``gpumodel calibrate`` run kept, as that command fits them.

``gpumodel calibrate`` on the GPU holds every fifth kernel of its run out of the fit (its own report of the fit
against the transfer) and fits the rest; ``--points`` keeps the raw timings in the order measured and
``--sustained-points`` the sustained-load kernels. This script repeats that split and fit on the CPU with today's
model, so that a folder written by ``bench/calibrate_and_check.py`` keeps a record of the current model's
parameters after the model gains one (the record the GPU run wrote stays in the repository's history).

Usage::

    python bench/user_calibration_refit.py tests/data/calibration/user_h100            # writes calibration.yaml
    python bench/user_calibration_refit.py FOLDER --out /tmp/refit.yaml                # elsewhere
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import yaml  # noqa: E402

from gpumodel.cli.calibrate import hold_out  # noqa: E402  (the command's own split)


def split_points(path: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """(environment lines, fitted rows, held-out rows) of a ``--points`` file, the rows after the environment split
    as the command splits them (:func:`gpumodel.cli.calibrate.hold_out`)."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    env = [r for r in lines if "environment" in r]
    return (env, *hold_out([r for r in lines if "environment" not in r]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a folder with calibrate_points.jsonl, sustained.jsonl, calibration.yaml")
    ap.add_argument("--out", type=Path, default=None, help="where to write (default: FOLDER/calibration.yaml)")
    args = ap.parse_args(argv)
    env, fit, held = split_points(args.folder / "calibrate_points.jsonl")
    gpu = yaml.safe_load((args.folder / "calibration.yaml").read_text())["gpu"]
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, rows in (("fit", fit), ("held", held)):
            paths[name] = Path(tmp) / f"{name}.jsonl"
            paths[name].write_text("".join(json.dumps(r) + "\n" for r in env + rows))
        cmd = [sys.executable, "-m", "gpumodel", "calibrate", "--from-points", str(paths["fit"]), "--validation",
               str(paths["held"]), "--gpu", gpu, "--sustained", str(args.folder / "sustained.jsonl"),
               "--out", str(args.out or args.folder / "calibration.yaml")]
        return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    raise SystemExit(main())
