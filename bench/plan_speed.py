"""How fast the layout planner answers from a cold start: ``gm.plan_training`` in fresh processes.

Each case runs in a fresh Python process (nothing cached, no file read yet): the clock starts after
``import gpumodel`` and the planner's modules (``import`` column, for reference) and covers the first call
(``cold``: it reads the spec YAML files, builds the shards' kernels and prices them), then a second,
identical call (``warm``: the shard kernel times are cached; the layouts are priced again). Each case runs
``--repeat`` times; the table shows the median, and the CPU time of the cold call (which other processes on a
busy machine do not inflate as they do the wall time). The bars: a 70B model on 4,096 H100 GPUs over at least
100,000 layouts in at most 1 s, and at least 1,000,000 layouts in at most 5 s.

Run: ``python bench/plan_speed.py [--repeat 5] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (label, keyword arguments of gm.plan_training, bar [s])
CASES = [
    ("llama-3-70b on up to 4,096 H100 (dgx-h100), batch 4096 x 8192",
     dict(model="llama-3-70b", gpu_or_system="dgx-h100", tokens="15T", global_batch=4096, seq_len=8192,
          max_gpus=4096), 1.0),
    ("mixtral-8x7b on 1 to 512 nodes of H100, node by node, batch 3072 x 4096",
     dict(model="mixtral-8x7b", gpu_or_system="dgx-h100", tokens="2T", global_batch=3072, seq_len=4096,
          num_gpus="range(8, 4097, 8)"), 5.0),
]

CHILD = """
import json, time
t0 = time.perf_counter()
import gpumodel as gm
plan_training = gm.plan_training
t1 = time.perf_counter()
kw = {kw}
if isinstance(kw.get("num_gpus"), str):
    kw["num_gpus"] = list(eval(kw["num_gpus"]))
c0 = time.process_time()
t2 = time.perf_counter()
p = plan_training(**kw)
t3 = time.perf_counter()
c1 = time.process_time()
p = plan_training(**kw)
t4 = time.perf_counter()
print(json.dumps(dict(import_s=t1 - t0, cold_s=t3 - t2, cold_cpu_s=c1 - c0, warm_s=t4 - t3, candidates=p.candidates,
                      feasible=p.feasible, best=p.rows[0] and {{k: p.rows[0][k] for k in ("num_gpus", "dp", "tp", "pp", "cp",
                      "ep", "virtual_stages", "zero", "micro_batch", "seconds")}})))
"""


def run_case(kw: dict) -> dict:
    """One fresh process: import, cold call, warm call."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", CHILD.format(kw=repr(kw))], capture_output=True, text=True, check=True,
                         env=env, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="fresh processes per case (the median is shown)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results = []
    for label, kw, bar in CASES:
        runs = [run_case(kw) for _ in range(args.repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in ("import_s", "cold_s", "cold_cpu_s", "warm_s")}
        results.append(dict(case=label, bar_s=bar, candidates=runs[0]["candidates"], feasible=runs[0]["feasible"],
                            best=runs[0]["best"], runs=len(runs), **med,
                            cold_max_s=max(r["cold_s"] for r in runs)))
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    if args.json:
        print(json.dumps(dict(machine=machine, results=results), indent=2))
        return 0
    print(f"gm.plan_training from a cold start ({machine}); medians of {args.repeat} fresh processes")
    head = f"{'case':<74} {'layouts':>10} {'fit':>8} {'import s':>8} {'cold s':>7} {'cpu s':>6} {'warm s':>7} {'bar s':>6}"
    print(head)
    print("-" * len(head))
    for r in results:
        ok = "ok" if r["cold_s"] <= r["bar_s"] else "OVER"
        print(f"{r['case']:<74} {r['candidates']:>10,} {r['feasible']:>8,} {r['import_s']:>8.2f} {r['cold_s']:>7.2f} "
              f"{r['cold_cpu_s']:>6.2f} {r['warm_s']:>7.2f} {r['bar_s']:>5.0f}  {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
