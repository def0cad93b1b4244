"""Measure NCCL collectives on the GPUs of one host, in nccl-tests' conventions (algbw, busbw).

Each rank is a process (``torch.multiprocessing``); for every collective, group size and message
size the script times ``--iters`` calls after ``--warmup`` calls (CUDA events, synchronised) and
writes one JSON line per case to ``--out`` with the message size as nccl-tests counts it (the whole
buffer), the median time, ``algbw = S / t`` and ``busbw = algbw * bus_factor``. It stops starting new
cases after ``--budget-s`` seconds and flushes every line as it goes.

On the device machine (8 GPUs):

    python bench/measure_collectives.py --gpus 8 --out tests/data/cluster/collectives_h200.jsonl --budget-s 300

CPU check (gloo, two processes, tiny messages): ``python bench/measure_collectives.py --dry-run --out x.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpumodel.cluster.collectives import bus_factor  # noqa: E402

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


def _run(rank: int, world: int, args: argparse.Namespace, groups: list[int], sizes: list[int]) -> None:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    backend = "gloo" if args.dry_run else "nccl"
    dist.init_process_group(backend, rank=rank, world_size=world)
    device = torch.device("cpu") if args.dry_run else torch.device("cuda", rank)
    if not args.dry_run:
        torch.cuda.set_device(device)
    start = time.time()
    out = open(args.out, "a") if rank == 0 else None
    subgroups = {n: dist.new_group(list(range(n))) for n in groups}
    for n in groups:
        for op in COLLECTIVES:
            if args.dry_run and op in ("all_to_all", "reduce_scatter"):
                continue  # gloo has neither
            for size in sizes:
                stop = torch.tensor([time.time() - start > args.budget_s], dtype=torch.int32, device=device)
                dist.broadcast(stop, 0)
                if stop.item():
                    if out:
                        out.close()
                    dist.destroy_process_group()
                    return
                if rank >= n:
                    dist.barrier()
                    continue
                g = subgroups[n]
                elems = max(size // 2 // n * n, n)  # bf16 (fp32 on the CPU check), a multiple of n
                dt = torch.float32 if args.dry_run else torch.bfloat16
                full = torch.ones(elems, dtype=dt, device=device)
                part = torch.ones(elems // n, dtype=dt, device=device)
                outbuf = torch.empty_like(full)

                def call():
                    if op == "all_reduce":
                        dist.all_reduce(full, group=g)
                    elif op == "all_gather":
                        dist.all_gather_into_tensor(outbuf, part, group=g)
                    elif op == "reduce_scatter":
                        dist.reduce_scatter_tensor(part, full, group=g)
                    elif op == "all_to_all":
                        dist.all_to_all_single(outbuf, full, group=g)
                    else:
                        dist.broadcast(full, 0, group=g)

                times = []
                for i in range(args.warmup + args.iters):
                    if args.dry_run:
                        t0 = time.perf_counter()
                        call()
                        dt_s = time.perf_counter() - t0
                    else:
                        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        torch.cuda.synchronize()
                        a.record()
                        call()
                        b.record()
                        torch.cuda.synchronize()
                        dt_s = a.elapsed_time(b) / 1e3
                    if i >= args.warmup:
                        times.append(dt_s)
                dist.barrier()
                if out:
                    t = statistics.median(times)
                    nbytes = full.numel() * full.element_size()
                    alg = nbytes / t
                    out.write(json.dumps(dict(collective=op, n=n, nbytes=nbytes, seconds=t, spread=max(times) - min(times),
                                              algbw=alg, busbw=alg * bus_factor(op, n), backend=backend,
                                              device=("cpu" if args.dry_run else torch.cuda.get_device_name(0)),
                                              torch=torch.__version__)) + "\n")
                    out.flush()
    if out:
        out.close()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8, help="GPUs of this host to use (groups of 2, 4, ... up to it)")
    ap.add_argument("--out", required=True, help="JSON-lines output file (appended)")
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop starting new cases after this many seconds")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--dry-run", action="store_true", help="CPU (gloo), 2 processes, tiny messages")
    args = ap.parse_args(argv)
    import torch.multiprocessing as mp

    if args.dry_run:
        world, sizes, args.warmup, args.iters = 2, [1 << 10, 1 << 14], 1, 2
    else:
        world = args.gpus
        sizes = [1 << k for k in range(20, 31, 2)]  # 1 MiB .. 1 GiB
    groups = sorted({n for n in (2, 4, 8, 16) if n <= world} | {world})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    mp.spawn(_run, args=(world, args, groups, sizes), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
