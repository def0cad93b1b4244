"""Kernel-by-kernel times inside replayed serving steps: where a step's time goes on the local GPU.

For a few cases of ``bench/measure_serving.py``'s lean decoder (long prefills, where the model is about
10% too fast, large-batch decode with grouped KV heads, and batch-1 decode, where the per-kernel graph
time dominates), the step is captured as a CUDA graph, replayed a few times, then replayed under
``torch.profiler`` with CUDA activity. Each output line is one case: the event-timed replay
(``seconds``), every kernel name with its count and summed duration over one replay (``kernels``), the
sum of kernel durations (``kernel_sum_s``; ``seconds - kernel_sum_s`` is the gaps between kernels), and
the SM clock before the case, just before the profiled replay and after it (``sm_clock_mhz``, from
``torch.cuda.clock_rate()`` where NVML is present).
The serving model's per-family times can then be compared kernel family by kernel family.

Usage::

    python bench/profile_serving.py --out profile.jsonl --budget-s 240   # on a CUDA machine (~2 min)
    python bench/profile_serving.py --out profile.jsonl --sustain-s 0.2  # each graph timed and profiled at the
                                                                         # loaded clock
    python bench/profile_serving.py --out /tmp/p.jsonl --dry-run         # tiny shapes on the CPU
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_serving as ms  # noqa: E402  (the lean decoder, its timing and the run's records, reused as is)

# (shape, kind, batch, tokens): tokens is the prompt length of a prefill or the context of a decode step
CASES = [("llama-3-8b", "prefill", 1, 8192), ("llama-3-8b", "prefill", 32, 256), ("llama-3-8b", "prefill", 1, 512),
         ("llama-3.2-1b", "prefill", 4, 2048), ("llama-3-70b", "prefill", 2, 4096),
         ("llama-3-70b", "decode", 128, 128), ("qwen2.5-7b", "decode", 128, 128),
         ("llama-3.2-1b", "decode", 1, 2048), ("llama-3-8b", "decode", 1, 2048), ("llama-2-7b", "decode", 64, 512)]
TINY_CASES = [("tiny-gqa", "prefill", 1, 8), ("tiny-gqa", "decode", 2, 16)]


def _clock(torch) -> float | None:
    try:
        return float(torch.cuda.clock_rate())
    except Exception:                       # no NVML: the clock is not recorded
        return None


def profile_case(torch, case: dict, device: str, reps: int = 3) -> dict:
    """Event-timed replays, then one profiled replay of the step; kernel durations summed by name."""
    from torch.profiler import ProfilerActivity, profile

    weights = ms.build_weights(torch, case, device)
    step, _, caches = ms.make_step(torch, case, weights, device)
    out = dict(case)
    if device == "cuda":
        clock0 = _clock(torch)
        times = ms.time_graph(torch, step, device)
        g = ms.capture_graph(torch, step)
        for _ in range(reps):
            g.replay()
        torch.cuda.synchronize()
        ms.sustain(torch, g)                         # the profiled replay at the clock the timed ones ran at
        clock1 = _clock(torch)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            g.replay()
            torch.cuda.synchronize()
        out["sm_clock_mhz"] = [clock0, clock1, _clock(torch)]
        events = [e for e in prof.events() if str(e.device_type).endswith("CUDA")]
    else:
        times = ms.time_graph(torch, step, device)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        events = [e for e in prof.events() if e.name.startswith("aten::")]
    kernels: dict[str, list] = {}
    for e in events:
        k = kernels.setdefault(e.name[:160], [0, 0.0])
        k[0] += 1
        k[1] += e.time_range.elapsed_us() * 1e-6
    out.update(seconds=statistics.median(times), seconds_all=times, kernels=kernels,
               kernel_sum_s=sum(v[1] for v in kernels.values()), kernel_count=sum(v[0] for v in kernels.values()))
    del caches, weights
    return out


def main(argv=None) -> int:
    args = ms.arguments(__doc__, budget_s=240.0).parse_args(argv)
    ms.set_sustain(args)                     # before timing each graph, and again before profiling it
    import torch

    device = "cpu" if args.dry_run else "cuda"
    shapes = {s[0]: s for s in (ms.TINY_SHAPES if args.dry_run else ms.SHAPES)}
    t0 = time.perf_counter()
    with open(args.out, "w") as out:
        out.write(json.dumps({**ms.environment(torch, device), "sustain_s": ms.SUSTAIN_S}) + "\n")
        for name, kind, batch, tokens in (TINY_CASES if args.dry_run else CASES):
            if time.perf_counter() - t0 > args.budget_s:
                out.write(json.dumps({"kind": "stopped", "elapsed_s": time.perf_counter() - t0}) + "\n")
                break
            case = dict(kind=kind, engine="graph", batch=batch, **ms.shape_fields(shapes[name]), dtype="bf16",
                        **({"prompt_len": tokens} if kind == "prefill" else {"context_len": tokens}))
            try:
                row = profile_case(torch, case, device)
                row["status"] = "ok"
            except Exception as e:
                row = ms.failed(case, e)
            ms.write_row(torch, out, row, device, t0)
            print(f"{row['elapsed_s']:7.1f}s {kind:8s} {name:14s} b={batch:<4d} {tokens:>6d} {row['status']} "
                  f"{row.get('seconds', float('nan')) * 1e3:9.3f} ms, kernels {row.get('kernel_count', 0)} "
                  f"summing {row.get('kernel_sum_s', float('nan')) * 1e3:9.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
