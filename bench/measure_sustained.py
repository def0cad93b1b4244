"""Isolated vs sustained kernel time: how much slower a kernel runs after seconds of back-to-back work.

A calibration times each kernel for about 0.1 s (:func:`gpumodel.calibration.timing.time_events`); a
training step keeps the GPU busy for seconds, long enough for the power limit to lower the SM clock.
For each kernel this script measures (1) the calibration's timing, then (2) the kernel launched back to
back for ``--seconds``, timed by CUDA events over windows of 0.25 s, with the SM clock and power that
``nvidia-smi`` reports once a second. It also times (3) one AdamW step's calls with the profiler, to
compare the timed call with its kernels (``kernel_s``).

    python bench/measure_sustained.py --out sustained.jsonl      # on the GPU, about 90 s
    python bench/measure_sustained.py --out heldout.jsonl --held-out --seconds 4   # other shapes, about 90 s

``--held-out`` times, instead of the calibration's sustained kernels, GEMMs of the layer shapes of fp8 training runs
(:data:`HELD_OUT`: Llama-2-7B at 4,096 tokens, GPT-3 5B at 8,192 tokens, in fp8 and bf16), none of which set a
``sustained_slowdown``: ``python bench/sustained_heldout.py`` prices them with the model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpumodel.calibration.plan import make_case  # noqa: E402

#: GEMMs of fp8 training runs' layers that no sustained slowdown was measured on: (m, n, k) of Llama-2-7B's QKV,
#: gate-and-up, down projections at 4,096 tokens and GPT-3 5B's QKV, fc1, fc2 at 8,192, each in fp8 and bf16
HELD_OUT = [make_case("matmul", "mm", dt, m=m, n=n, k=k) for dt in ("fp8", "bf16") for m, n, k in
            ((4096, 12288, 4096), (4096, 22016, 4096), (4096, 4096, 11008),
             (8192, 12288, 4096), (8192, 16384, 4096), (8192, 4096, 16384))]

ADAMW = [make_case("adamw_step", "adamw_fused", "fp32", numel=n, tensors=t) for n, t in
         ((65536, 1), (1048576, 1), (1048576, 8), (3_000_000, 32), (16777216, 1))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--held-out", action="store_true", help="the GEMMs of HELD_OUT instead (no AdamW, no mixes)")
    args = p.parse_args(argv)
    import torch

    from gpumodel.calibration.bench import FLUSH_BYTES, device_seconds, environment_info, make_runner, time_events
    from gpumodel.calibration.sustained import measure_sustained

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"environment": {**environment_info(), "mode": "sustained"}}) + "\n")
        rows = (measure_sustained(args.seconds, cases=HELD_OUT, mixes=False) if args.held_out
                else measure_sustained(args.seconds))
        for row in rows:
            fh.write(json.dumps(row) + "\n")
            iso, run = row["isolated_s"], row["sustained"]
            tail = sorted(r["per_call_s"] for r in run[-8:])   # a long kernel may fill fewer windows
            last = tail[len(tail) // 2]
            print(f"{row['op']:11s} {row['dtype']:5s} {json.dumps(row['shape'])[:60]:60s} isolated {iso*1e6:9.1f} us"
                  f" sustained (last 2 s) {last*1e6:9.1f} us  ratio {last/iso:.3f}  after {row['isolated_after_s']/iso:.3f}"
                  f"  smi {run[0]['smi']} -> {run[-1]['smi']}", flush=True)
        for case in ([] if args.held_out else ADAMW):
            fn = make_runner(case)
            t = time_events(fn, flush)[0]
            dev = device_seconds(fn, flush)
            fh.write(json.dumps({**case, "time_s": t, **dev}) + "\n")
            print(f"adamw {json.dumps(case['shape'])}: timed {t*1e6:.1f} us, kernels {dev.get('kernel_s', 0)*1e6:.1f} us, "
                  f"span {dev.get('span_s', 0)*1e6:.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
