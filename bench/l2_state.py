"""Reduce ``bench/measure_l2_state.py``'s file: what the L2's state before a kernel costs it.

Per kernel: the time after a writing flush (the calibration's timing) over the time after a reading flush, the
excess of the first over the second in microseconds and in bytes at the copy rate the GPU's shipped calibration
fits (the dirty lines written back), and the time per kernel back to back in a CUDA graph and eagerly over the time
after the reading flush. The summary gives the medians per kind of kernel. With ``--model``, each kernel is also
priced by the GPU's model (the shipped or transferred calibration, then each committed user calibration of that GPU,
``tests/data/calibration/user_<gpu>*``): alone, against the time after the writing flush it was fitted on, and as a
replayed step prices it (:func:`gpumodel.serving.kernels.in_graph_s`: the kernel's launch overhead replaced
by ``GRAPH_LAUNCH_S``), against the time per kernel in the graph.

    python bench/l2_state.py FILE [FILE ...] [--model]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def load(path: Path) -> tuple[dict, list[dict]]:
    """(environment, kernel rows) of one file."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    env = next((r["environment"] for r in rows if "environment" in r), {})
    return env, [r for r in rows if "write_s" in r]


def kind(row: dict) -> str:
    """``gemv`` (a GEMM of at most 32 rows), ``copy`` or ``sum``."""
    return {"matmul": "gemv", "elementwise": "copy"}.get(row["op"], "sum")


def reduce_rows(rows: list[dict], bandwidth: float) -> list[dict]:
    """Per row the ratios and the writing flush's excess [s] and [B] at ``bandwidth`` [B/s]."""
    out = []
    for r in rows:
        excess = r["write_s"] - r["read_s"]
        out.append({"kind": kind(r), "shape": r["shape"], "bytes": r["bytes"], "write_over_read": r["write_s"] / r["read_s"],
                    "excess_s": excess, "excess_bytes": excess * bandwidth, "graph_over_read": r["graph_s"] / r["read_s"],
                    "eager_over_read": r["eager_s"] / r["read_s"]})
    return out


def against_model(rows: list[dict], gpu, calibration=None) -> list[tuple[float, float]]:
    """Per row (the model alone over the time after the writing flush - 1, the model as a replayed step prices the
    kernel over its time in the graph - 1)."""
    import numpy as np

    from gpumodel.calibration.estimate import estimate
    from gpumodel.calibration.points import point_set
    from gpumodel.serving.kernels import in_graph_s

    out = []
    for r in rows:
        (_, op, _, _), = point_set([{**r, "time_s": 1.0}]).groups
        est = estimate(op, gpu, calibration=calibration)
        alone = float(np.ravel(est.seconds)[0])
        graph = float(np.ravel(in_graph_s(est.seconds, est))[0])
        out.append((alone / r["write_s"] - 1.0, graph / r["graph_s"] - 1.0))
    return out


def print_against_models(rows: list[dict], gpu) -> None:
    """The errors of :func:`against_model` for the GPU's model and each committed user calibration of it."""
    import numpy as np

    from user_calibration import DATA, current_calibration

    models = [("shipped or transferred", None)]
    models += [(f.name, current_calibration(f)) for f in sorted(DATA.glob(f"user_{gpu.name.split('-')[0]}*"))
               if (f / "calibration.yaml").exists()]
    for name, cal in models:
        err = np.array(against_model(rows, gpu, cal))
        print(f"  {name}: alone vs writing flush {np.median(np.abs(err[:, 0])):.1%} median |error| "
              f"({np.median(err[:, 0]):+.1%} signed); as a replayed step vs the graph "
              f"{np.median(np.abs(err[:, 1])):.1%} ({np.median(err[:, 1]):+.1%} signed)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--model", action="store_true", help="also price each kernel with the GPU's models")
    args = ap.parse_args(argv)
    from gpumodel.calibration.estimate import model_for
    from gpumodel.calibration.fit import gpu_for_device

    for path in args.files:
        env, rows = load(path)
        gpu = gpu_for_device(str(env.get("device_name", "NVIDIA H200")))
        bw = float(model_for(gpu.name)[0].params["bandwidth"])
        red = reduce_rows(rows, bw)
        print(f"{path} ({env.get('device_name', '?')}, L2 {gpu.l2_bytes / 2**20:.0f} MiB, copy rate "
              f"{bw / 1e12:.2f} TB/s)")
        print(f"{'kind':5s} {'shape':44s} {'MB':>8s} {'write/read':>10s} {'excess us':>9s} {'excess MB':>9s} "
              f"{'graph/read':>10s} {'eager/read':>10s}")
        for r in red:
            print(f"{r['kind']:5s} {json.dumps(r['shape'])[:44]:44s} {r['bytes'] / 1e6:8.1f} {r['write_over_read']:10.3f} "
                  f"{r['excess_s'] * 1e6:9.1f} {r['excess_bytes'] / 1e6:9.1f} {r['graph_over_read']:10.3f} "
                  f"{r['eager_over_read']:10.3f}")
        for k in sorted({r["kind"] for r in red}):
            sel = [r for r in red if r["kind"] == k]
            print(f"  {k}: n={len(sel)} median write/read {statistics.median(r['write_over_read'] for r in sel):.3f}, "
                  f"excess {statistics.median(r['excess_bytes'] for r in sel) / 1e6:.1f} MB, graph/read "
                  f"{statistics.median(r['graph_over_read'] for r in sel):.3f}")
        if args.model:
            print_against_models(rows, gpu)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
