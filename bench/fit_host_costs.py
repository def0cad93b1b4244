"""Fit the host's per-op costs from the host microbenchmarks and write the host-cost YAML.

Reads the ``"host"`` and ``"layers"`` records of a file written by ``bench/measure_step_time.py``
(microbenchmarks only: training-step records are ignored) and writes
``specs/hosts/<gpu>.yaml``, which ``gm.training_step_time`` reads for that GPU.

Usage::

    python bench/fit_host_costs.py [--data tests/data/steptime/step_times_v2.jsonl] [--gpu h200-sxm]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's gpumodel

from gpumodel.calibration.host import fit_host_costs, load_rows, save_host_costs

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "steptime" / "step_times_v2.jsonl")
    ap.add_argument("--gpu", default="h200-sxm")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = load_rows(args.data)
    env = next((r for r in rows if r.get("kind") == "environment"), {})
    source = (f"host microbenchmarks of bench/measure_step_time.py ({args.data.name}, {env.get('date', '')}): "
              f"{env.get('cpu', '')}, {env.get('cpu_count', '')} cores, Python {env.get('python', '')}, "
              f"torch {env.get('torch', '')}, transformers {env.get('transformers', '')}, {env.get('gpu', '')}")
    hc = fit_host_costs(rows, source=source)
    out = args.out or ROOT / "specs" / "hosts" / f"{args.gpu}.yaml"
    save_host_costs(hc, out, {"gpu": args.gpu, "date": env.get("date", ""), "torch_version": env.get("torch", ""),
                              "transformers_version": env.get("transformers", "")})
    print(f"wrote {out}")
    for k, v in hc.to_dict().items():
        print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
