"""Fit the host's per-op costs from the host microbenchmarks and write the host-cost YAML.

Reads the ``"host"`` and ``"layers"`` records of files written by ``bench/measure_step_time.py``
(microbenchmarks only: training-step records are ignored), fits each file (one measurement run on the host) and
averages the runs' fits field by field (:func:`gpumodel.training.hostfit.combine_host_costs`), and writes
``specs/hosts/<gpu>.yaml``, which ``gm.training_step_time`` reads for that GPU.

Usage::

    python bench/fit_host_costs.py [--data tests/data/steptime/step_times_v2.jsonl step_times_v3.jsonl gemm_shapes.jsonl]
                                   [--gpu h200-sxm]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's gpumodel

from gpumodel.training.hostfit import combine_host_costs, fit_host_costs, load_rows, save_host_costs

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, nargs="+", default=[ROOT / "tests" / "data" / "steptime" / f"step_times_v{n}.jsonl"
                                                              for n in (2, 3)]
                    + [ROOT / "tests" / "data" / "steptime" / "gemm_shapes.jsonl"])
    ap.add_argument("--gpu", default="h200-sxm")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    fits, sources, env = [], [], {}
    for path in args.data:
        rows = load_rows(path)
        env = next((r for r in rows if r.get("kind") == "environment"), {})
        sources.append(f"{path.name} ({env.get('date', '')})")
        fits.append(fit_host_costs(rows))
    source = (f"host microbenchmarks of bench/measure_step_time.py, the mean of {len(fits)} runs' fits "
              f"({', '.join(sources)}): {env.get('cpu', '')}, {env.get('cpu_count', '')} cores, Python "
              f"{env.get('python', '')}, torch {env.get('torch', '')}, transformers {env.get('transformers', '')}, "
              f"{env.get('gpu', '')}")
    hc = combine_host_costs(fits, source=source)
    out = args.out or ROOT / "specs" / "hosts" / f"{args.gpu}.yaml"
    save_host_costs(hc, out, {"gpu": args.gpu, "date": env.get("date", ""), "torch_version": env.get("torch", ""),
                              "transformers_version": env.get("transformers", "")})
    print(f"wrote {out}")
    for k, v in hc.to_dict().items():
        print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
