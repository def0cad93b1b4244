"""What the L2's state before a kernel does to its time: dirty lines after a writing flush, clean lines after a
reading one, and other kernels' operands when the kernel runs back to back in a step.

A calibration times each kernel after ``flush.zero_()`` (the schedule of ``triton.testing.do_bench``): a 256 MB
write that leaves the whole L2 (50 MB on an H100, 60 MB on an H200) full of dirty lines, which the timed kernel
has to write back to memory as its own reads evict them. In a decode or training step the kernel before it mostly
read (weights) or wrote little, so the lines it evicts are mostly clean. This script times memory-bound kernels
(weight-streaming GEMMs of decode steps, copies, a sum) four ways:

* ``write``: after a writing flush (the calibration's timing, :func:`gpumodel.calibration.timing.time_events`);
* ``read``: after a reading flush (a sum over the same 256 MB buffer): the L2 is full of clean lines;
* ``graph``: ``copies`` instances of the kernel, each on its own operands (together several times the L2), replayed
  back to back in one CUDA graph: the time per kernel, as in a replayed decode step;
* ``eager``: the same instances launched back to back without a graph;
* ``mixed``: the kernel after a memory-bound filler (a 64 MB in-place scale, not timed), over and over: a step's
  mix of compute- and memory-bound work, whose power draw and so SM clock lie between the two.

The SM clock (``torch.cuda.clock_rate()``, where NVML is present) is read after each timing (``clock_mhz``).

One JSON line per kernel: the case, ``bytes`` (its operands' bytes, read and written), the four times [s] and
``copies``. ``bench/l2_state.py`` reduces them.

    python bench/measure_l2_state.py --out l2_state.jsonl            # on the GPU, about a minute
    python bench/measure_l2_state.py --out l2_state.jsonl --dry-run  # CPU: the cases and the file, no torch
    python bench/measure_l2_state.py --out gemms.jsonl --set gemms   # compute-bound training GEMMs instead
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpumodel.calibration.cases import make_case  # noqa: E402

#: weight-streaming GEMMs of decode steps (batch 1-32 through 8B-70B projections and a 128k-vocabulary head), copies
#: and a sum, from below the L2's size to several times it
CASES = ([make_case("matmul", "linear", "bf16", m=m, n=n, k=k)
          for m in (1, 8, 32) for n, k in ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (28672, 8192),
                                           (128256, 4096))]
         + [make_case("elementwise", "copy", "bf16", numel=2**e, inputs=1, outputs=1, flops_per_element=0)
            for e in (20, 22, 24, 26)]
         + [make_case("reduce_sum", "reduce_sum", "bf16", rows=rows, cols=4096) for rows in (1024, 4096, 16384)])
#: compute-bound GEMMs of training steps and prefills: 2048-8192 tokens through an 8B model's projections, forward
#: (tokens x out x in) and the weight gradient's shape (out x in x tokens); ``--set gemms``
GEMM_CASES = [make_case("matmul", "linear", "bf16", m=m, n=n, k=k)
              for t in (2048, 4096, 8192)
              for m, n, k in ((t, 4096, 4096), (t, 14336, 4096), (t, 4096, 14336), (4096, 14336, t))]
#: bytes of the memory-bound filler that runs before each timed kernel of the ``mixed`` timing (about 40 us on an H100)
FILLER_BYTES = 64 << 20
#: instances replayed back to back: enough that their operands together pass this many bytes (several L2s)
ROTATE_BYTES = 1 << 30
MAX_COPIES = 64


def operand_bytes(case: dict) -> float:
    """Bytes a case reads and writes once [B] (2-byte elements)."""
    s = case["shape"]
    if case["op"] == "matmul":
        return 2.0 * (s["m"] * s["k"] + s["n"] * s["k"] + s["m"] * s["n"])
    if case["op"] == "elementwise":
        return 2.0 * s["numel"] * (s.get("inputs", 1) + s.get("outputs", 1))
    return 2.0 * s["rows"] * (s["cols"] + 1)


def copies_for(case: dict) -> int:
    """How many instances of ``case`` the back-to-back timings rotate through."""
    return int(max(4, min(MAX_COPIES, ROTATE_BYTES // max(operand_bytes(case), 1.0))))


def _events(torch, run, reps: int, before=None) -> float:
    """Median time of ``run`` [s] over ``reps`` repetitions, each bracketed by its own events."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if before is not None:
            before()
        starts[i].record()
        run()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends))


def measure(case: dict, flush) -> dict:  # pragma: no cover - needs a GPU
    """The five timings of one case, and the SM clock after each."""
    import torch

    from gpumodel.calibration.bench import make_runner, sm_clock_mhz
    from gpumodel.calibration.timing import time_events

    fns = [make_runner(case) for _ in range(copies_for(case))]
    out = {**case, "bytes": operand_bytes(case), "copies": len(fns)}
    clocks = {}
    out["write_s"] = time_events(fns[0], flush)[0]
    clocks["write"] = sm_clock_mhz()
    for f in fns:
        f()
    torch.cuda.synchronize()
    out["read_s"] = _events(torch, fns[0], 200, before=lambda: torch.sum(flush))
    clocks["read"] = sm_clock_mhz()
    filler = flush[: FILLER_BYTES // 4].view(torch.float32)
    out["mixed_s"] = _events(torch, fns[0], 200, before=lambda: filler.mul_(1.0))
    clocks["mixed"] = sm_clock_mhz()

    def chain():
        for f in fns:
            f()

    out["eager_s"] = _events(torch, chain, 20) / len(fns)
    clocks["eager"] = sm_clock_mhz()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        chain()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    graph.replay()
    out["graph_s"] = _events(torch, graph.replay, 20) / len(fns)
    clocks["graph"] = sm_clock_mhz()
    graph.reset()
    out["clock_mhz"] = clocks
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--dry-run", action="store_true", help="write the cases without timing them (no torch)")
    p.add_argument("--set", choices=("decode", "gemms"), default="decode",
                   help="memory-bound kernels of decode steps (default), or compute-bound training GEMMs")
    args = p.parse_args(argv)
    cases = GEMM_CASES if args.set == "gemms" else CASES
    with open(args.out, "w", encoding="utf-8") as fh:
        if args.dry_run:
            for case in cases:
                fh.write(json.dumps({**case, "bytes": operand_bytes(case), "copies": copies_for(case)}) + "\n")
            print(f"{len(cases)} cases written to {args.out} (dry run)")
            return 0
        import torch

        from gpumodel.calibration.bench import FLUSH_BYTES, environment_info

        flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        fh.write(json.dumps({"environment": {**environment_info(), "mode": "l2_state"}}) + "\n")
        for case in cases:
            row = measure(case, flush)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            print(f"{case['op']:11s} {json.dumps(case['shape'])[:48]:48s} write {row['write_s'] * 1e6:8.1f} us  "
                  f"read {row['read_s'] * 1e6:8.1f}  mixed {row['mixed_s'] * 1e6:8.1f}  graph {row['graph_s'] * 1e6:8.1f}  eager {row['eager_s'] * 1e6:8.1f}"
                  f"  x{row['copies']}", flush=True)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
