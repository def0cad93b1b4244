"""On a GPU: a fresh ``gpumodel calibrate`` at its default budget, then the measurements it is checked on, each in a
later, separate process: fresh kernels, serving steps replayed as CUDA graphs, Hugging Face training steps.

Writes into ``OUT/<gpu>/`` (``<gpu>``: the spec name of the device, e.g. ``h100-sxm``):

* ``calibration.yaml``, ``host.yaml``: what ``gpumodel calibrate`` wrote (the fitted kernel model with the families
  it measured and its sustained slowdown; this host's per-op costs);
* ``calibrate_points.jsonl``, ``sustained.jsonl``: that run's raw kernel timings (every fifth held out of its fit)
  and its isolated and back-to-back timings of the sustained-load kernels;
* ``kernels.jsonl``: a fresh draw of every plan (``bench/measure_kernels.py --set fresh``), sampled across families;
* ``serving.jsonl``: prefill and decode steps of the lean decoder (``bench/measure_serving.py --no-hf``), each
  graph replayed back to back for :data:`SERVING_SUSTAIN_S` before it is timed;
* ``steps.jsonl``: training steps of 1-8B models (``bench/measure_step_time.py``: the one-card group, then 1-3B runs);
* ``log.txt``: every stage's command and output, with ``nvidia-smi`` clocks, power and temperature between stages.

Stages share ``--total-s`` (one device command may run 10 minutes): the calibration takes what it takes, the
rest is split between the checks. ``python bench/user_calibration.py`` scores the committed files.

Usage::

    python bench/calibrate_and_check.py --out OUT                  # on the GPU, about 9 minutes
    python bench/calibrate_and_check.py --out OUT --dry-run        # CPU smoke test: tiny check runs, and the
                                                                   # calibration refitted from committed points
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: fresh kernels: the draw (``measure_kernels.py --set fresh --round``) and how many, sampled across families
KERNEL_ROUND, KERNEL_SAMPLE = 9, 300
#: training steps: the one-card group (7-8B trained whole, a 1B at a large batch), then 1-3B runs of the first groups
BIG_STEPS, MID_STEPS = "54-59", "7,8,11,12,34,43"
#: serving steps: back-to-back replays before each timing [s], so that they are timed at the clock an engine's steps
#: run at (the runs committed before 2026-12-07 were timed without: ``sustain_s`` 0 in their environment line)
SERVING_SUSTAIN_S = 0.2
#: the committed points the dry run refits (a quick plan measured on an H200)
DRY_POINTS = ROOT / "tests" / "data" / "calibration" / "do_bench" / "quick.jsonl"


def gpu_folder(dry_run: bool) -> str:
    """The spec name of the device nvidia-smi reports (no CUDA context is made here); ``cpu`` for a dry run."""
    if dry_run:
        return "cpu"
    sys.path.insert(0, str(ROOT))
    from gpumodel.calibration.fit import gpu_for_device

    name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                          text=True, check=True).stdout.splitlines()[0].strip()
    return gpu_for_device(name).name


def stage_budgets(left_s: float) -> dict[str, float]:
    """Seconds for each check stage out of ``left_s`` after the calibration [s], each capped at its planned length.

    >>> {k: round(v) for k, v in stage_budgets(330.0).items()}
    {'kernels': 55, 'serving': 70, 'big_steps': 110, 'mid_steps': 45}
    """
    share = {"kernels": (0.18, 55.0), "serving": (0.22, 70.0), "big_steps": (0.36, 110.0), "mid_steps": (0.24, 45.0)}
    return {k: max(5.0, min(cap, frac * left_s)) for k, (frac, cap) in share.items()}


class Log:
    """The run's log: each stage's command, output and the GPU's state around it."""

    def __init__(self, path: Path, dry_run: bool):
        self.path, self.dry_run = path, dry_run
        path.write_text("")

    def write(self, text: str) -> None:
        with self.path.open("a") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
        print(text.rstrip("\n"), flush=True)

    def smi(self, when: str) -> None:
        if self.dry_run:
            return
        q = "name,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,memory.used"
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True)
        self.write(f"nvidia-smi {when}: {out.stdout.strip()} ({q})")

    def run(self, name: str, cmd: list[str], timeout_s: float, out: Path | None = None) -> int:
        """Run ``cmd`` (its stdout to ``out`` when given, else to the log), at most ``timeout_s`` seconds."""
        self.smi(f"before {name}")
        self.write(f"== {name} (limit {timeout_s:.0f} s): {' '.join(cmd)}")
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
            rc, stdout, stderr = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc = -9
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        if out is not None:
            with out.open("a") as fh:
                fh.write(stdout)
            stdout = ""
        self.write(stdout + "\n".join(line for line in stderr.splitlines() if "%|" not in line))
        self.write(f"== {name}: exit {rc} after {time.perf_counter() - t0:.0f} s")
        return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="folder; the files go into OUT/<gpu>/")
    ap.add_argument("--total-s", type=float, default=560.0, help="the whole run's limit [s]")
    ap.add_argument("--budget", default=None, help="gpumodel calibrate --budget (default: its own)")
    ap.add_argument("--dry-run", action="store_true", help="CPU: tiny check runs, the calibration refitted from "
                                                           "committed points")
    args = ap.parse_args(argv)
    deadline = time.perf_counter() + args.total_s
    folder = args.out / gpu_folder(args.dry_run)
    folder.mkdir(parents=True, exist_ok=True)
    log = Log(folder / "log.txt", args.dry_run)
    py, dry = sys.executable, ["--dry-run"] if args.dry_run else []
    cal = [py, "-m", "gpumodel", "calibrate", "--out", str(folder / "calibration.yaml")]
    if args.dry_run:
        cal += ["--from-points", str(DRY_POINTS), "--gpu", "h200"]
    else:
        cal += ["--host-out", str(folder / "host.yaml"), "--points", str(folder / "calibrate_points.jsonl"),
                "--sustained-points", str(folder / "sustained.jsonl"), "--no-progress"]
        cal += ["--budget", args.budget] if args.budget else []
    log.run("calibrate", cal, timeout_s=deadline - time.perf_counter() - 120.0)
    left = deadline - time.perf_counter() - 25.0
    b = stage_budgets(left)
    log.run("kernels", [py, "bench/measure_kernels.py", "--set", "fresh", "--round", str(KERNEL_ROUND), "--sample",
                        str(KERNEL_SAMPLE), "--time-budget", f"{b['kernels']:.0f}", "--out",
                        str(folder / "kernels.jsonl"), *dry], timeout_s=b["kernels"] + 30.0)
    log.run("serving", [py, "bench/measure_serving.py", "--no-hf", "--sustain-s", str(SERVING_SUSTAIN_S), "--budget-s",
                        f"{b['serving']:.0f}", "--out", str(folder / "serving.jsonl"), *dry], timeout_s=b["serving"] + 40.0)
    steps = folder / "steps.jsonl"
    steps.write_text("")
    for name, runs in (("big_steps", BIG_STEPS), ("mid_steps", MID_STEPS)):
        part = folder / f".{name}.jsonl"
        budget = min(b[name], deadline - time.perf_counter() - 40.0)
        if budget < 5.0:
            log.write(f"== {name}: skipped, {deadline - time.perf_counter():.0f} s left")
            continue
        log.run(name, [py, "bench/measure_step_time.py", "--skip-micro", "--runs", runs if not dry else "all",
                       "--budget-s", f"{budget:.0f}", "--out", str(part), *dry],
                timeout_s=max(10.0, deadline - time.perf_counter() - 5.0))
        if part.exists():
            with steps.open("a") as fh:
                fh.write(part.read_text())
            part.unlink()
    log.smi("at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
