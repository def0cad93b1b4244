"""Host and device work around one ZeRO-3 parameter gather as DeepSpeed ran it in 2021, the collective left out.

DeepSpeed v0.3.13-v0.5.4 (``deepspeed/runtime/zero/partition_parameters.py``, ``_allgather_param``) gathered
each parameter tensor on its own: ``torch.zeros`` of the whole tensor, ``torch.cuda.synchronize()``, a Python
loop making ``N`` ``narrow()`` views of it (one a rank), then ``torch.distributed.all_gather`` on that list.
PyTorch's NCCL process group gathers a list into a flat buffer of its own and copies it out rank by rank
(``ProcessGroupNCCL::allgather``: one ``copy_`` a rank, issued from C++). Everything here but the NCCL call
runs on one GPU, so this script times it for the group sizes and tensor sizes of the SC21 ZeRO-3 runs:

* ``narrow_s``: the Python loop of ``N`` views, per view;
* ``copy_s``: ``N`` copies of a rank's partition issued from a TorchScript loop (the interpreter costs about
  what a C++ loop's dispatch does, far less than Python's), per copy, wall time to the end of the last copy;
* ``copy_py_s``: the same copies from a Python loop, per copy;
* ``zeros_s``: ``torch.zeros`` of the whole tensor and the synchronisation after it;
* ``get_rank_s``: ``torch.distributed.get_rank(group=...)``, which the loop of DeepSpeed v0.3.x called once per rank
  (a process group of one rank, gloo; one line of its own).

One JSON line per (tensor elements, ranks), the medians of ``--repeats`` runs.

    python bench/measure_gather_host.py --out gather_host.jsonl        # on the GPU, under a minute
    python bench/measure_gather_host.py --out /tmp/g.jsonl --cpu        # small tensors timed on the CPU (torch)
    python bench/measure_gather_host.py --out /tmp/g.jsonl --dry-run    # the plan alone, no torch
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: parameter tensors of the SC21 ZeRO-3 models' layers (hidden 12,288 and 20,480): QKV, projection and MLP weights,
#: a QKV bias and a hidden-size vector
SIZES = tuple(x for h in (12288, 20480) for x in (3 * h * h, h * h, 4 * h * h, 3 * h, h))
#: ranks of the published runs' ZeRO-3 groups
RANKS = (384, 640, 768, 1120, 1536, 2240)


def _copies(torch):
    from typing import List

    def run(dst: List[torch.Tensor], src: List[torch.Tensor]) -> None:
        for j in range(len(dst)):
            dst[j].copy_(src[j], non_blocking=True)
    try:
        return torch.jit.script(run)
    except Exception as exc:   # noqa: BLE001 - TorchScript missing or refusing: the Python loop stands in
        print(f"TorchScript unavailable ({type(exc).__name__}: {exc}); copy_s is the Python loop's", file=sys.stderr)
        return run


def measure(torch, numel: int, ranks: int, device: str, repeats: int, copies) -> dict:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    part = -(-numel // ranks)
    rows: dict[str, list[float]] = {"narrow_s": [], "copy_s": [], "copy_py_s": [], "zeros_s": []}
    flat_out = torch.empty(part * ranks, dtype=torch.float16, device=device)   # the process group's flat buffer
    src = [flat_out.narrow(0, part * i, part) for i in range(ranks)]
    for _ in range(repeats + 1):
        sync()
        t0 = time.perf_counter()
        flat = torch.zeros(part * ranks, dtype=torch.float16, device=device)
        sync()
        t1 = time.perf_counter()
        views = [flat.narrow(0, part * i, part) for i in range(ranks)]
        t2 = time.perf_counter()
        copies(views, src)
        sync()
        t3 = time.perf_counter()
        for dst, s in zip(views, src):
            dst.copy_(s, non_blocking=True)
        sync()
        t4 = time.perf_counter()
        rows["zeros_s"].append(t1 - t0)
        rows["narrow_s"].append((t2 - t1) / ranks)
        rows["copy_s"].append((t3 - t2) / ranks)
        rows["copy_py_s"].append((t4 - t3) / ranks)
        del flat, views
    return {"numel": numel, "ranks": ranks, "partition": part,
            **{k: statistics.median(v[1:]) for k, v in rows.items()}}


def get_rank_cost(torch, calls: int = 20000) -> float | None:
    """Seconds per ``torch.distributed.get_rank(group=g)`` on a one-rank gloo group (None where it cannot start)."""
    import tempfile

    dist = torch.distributed
    try:
        if not dist.is_initialized():
            with tempfile.NamedTemporaryFile(delete=False) as f:
                dist.init_process_group("gloo", init_method=f"file://{f.name}", rank=0, world_size=1)
        group = dist.new_group([0])
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.get_rank(group=group)
        return (time.perf_counter() - t0) / calls
    except Exception as exc:   # noqa: BLE001 - no gloo here: the line says so
        print(f"get_rank not timed ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cpu", action="store_true", help="small tensors on the CPU: checks the script")
    ap.add_argument("--dry-run", action="store_true", help="write the (tensor, ranks) plan without timing it (no torch)")
    args = ap.parse_args(argv)
    if args.dry_run:
        with open(args.out, "w", encoding="utf-8") as fh:
            for numel in SIZES:
                for n in RANKS:
                    fh.write(json.dumps({"numel": numel, "ranks": n, "partition": -(-numel // n)}) + "\n")
        print(f"{len(SIZES) * len(RANKS)} cases written to {args.out} (dry run)")
        return 0
    import torch

    device = "cpu" if args.cpu else "cuda"
    sizes = tuple(min(s, 1 << 20) for s in SIZES[:3]) if args.cpu else SIZES
    ranks = RANKS[:2] if args.cpu else RANKS
    copies = _copies(torch)
    with open(args.out, "w", encoding="utf-8") as fh:
        if not args.cpu:
            import platform

            from bench_vectorized import cpu_name
            from gpumodel.calibration.bench import environment_info
            env = {**environment_info(), "cpu": cpu_name(), "python": platform.python_version(), "mode": "gather_host"}
            fh.write(json.dumps({"environment": env}) + "\n")
        fh.write(json.dumps({"get_rank_s": get_rank_cost(torch)}) + "\n")
        for numel in sizes:
            for n in ranks:
                row = measure(torch, numel, n, device, args.repeats, copies)
                fh.write(json.dumps(row) + "\n")
                print(f"{numel:>13,} x {n:>5}: narrow {row['narrow_s'] * 1e6:5.2f} us  copy {row['copy_s'] * 1e6:5.2f}"
                      f" us (python {row['copy_py_s'] * 1e6:5.2f})  zeros {row['zeros_s'] * 1e3:7.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
