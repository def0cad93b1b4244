"""Torch microbenchmarks that measure the points a calibration is fitted to.

Every point is one PyTorch call (a GEMM, a batched GEMM, an elementwise op, a reduction,
softmax, a norm, flash attention forward or backward) timed the way
``triton.testing.do_bench`` times it: warm-up first, then for each repetition the L2 cache
is flushed by writing a 256 MB buffer, and CUDA events bracket the call alone; the median of
the repetitions is kept. Before each repetition the GPU also spins until the host has queued the
whole call (``ahead``, :func:`time_events`), so the events time the GPU's work, not the host's
issue time. Inputs are random normal (never zeros, which run faster than real
data). Nothing here needs pydantic: a point is a plain ``dict``
``{"op", "kernel", "dtype", "shape", "time_s", "reps"}`` whose ``op``, ``shape`` and ``dtype``
are the arguments of the matching :mod:`gpumodel.core.ops` constructor, so the measurements can
be taken on a machine with only torch installed and fitted elsewhere.

``dry_run=True`` runs every case on the CPU with tiny sizes and wall-clock timing, to test
the code paths without a GPU.

Run as a script::

    python -m gpumodel.calibration.bench --mode full --jsonl points.jsonl
    python -m gpumodel.calibration.bench --plan sweep --jsonl sweep.jsonl   # softmax/sum/GEMV sweep
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

from ..base.readable import duration
from .budget import DEFAULT_BUDGET_S, budget_plan
from .plan import Case, fit_cases, sweep_cases, widened_cases  # noqa: F401  (re-exported: the plans live in plan.py)
from .runners import RUNNERS

__all__ = [
    "CalibrationUnavailableError", "Case", "fit_cases", "make_runner", "time_events",
    "measure", "run_benchmarks", "run_budget", "environment_info", "progress", "launched_kernels", "device_seconds",
    "host_seconds", "spin_rate", "sm_clock_mhz",
    "widened_cases",
]

from .timing import (CalibrationUnavailableError, device_seconds, host_seconds, import_torch,  # noqa: F401
                     launched_kernels, spin_rate, time_cpu, time_events)

FLUSH_BYTES = 256 * 2**20  # larger than any current L2 (H100 50 MB, H200 60 MB, B200 126 MB)


# ----------------------------------------------------------------------------- runners
_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "float32"}


def _shrink(case: Case) -> Case:
    """A tiny version of a case, for dry runs on the CPU."""
    shape = dict(case["shape"])
    caps = {"m": 48, "n": 40, "k": 64, "batch": 3, "numel": 4096, "rows": 8, "cols": 64, "seq": 32,
            "heads": 2, "kv_heads": 1, "head_dim": 16, "tokens": 24, "vocab": 100, "hidden": 16, "kv_seq": 40,
            "tensors": 3}
    for key, cap in caps.items():
        if key in shape and not isinstance(shape[key], bool):
            shape[key] = min(int(shape[key]), cap)
    return {**case, "shape": shape}


def make_runner(case: Case, device: str = "cuda") -> Callable[[], Any]:
    """Allocate random inputs for ``case`` on ``device`` and return a no-argument callable that runs it once."""
    torch = import_torch()
    import torch.nn.functional as F

    op, kernel, dt, s = case["op"], case["kernel"], case["dtype"], case["shape"]
    gen = torch.Generator(device=device).manual_seed(1234)

    def randn(*shape, dtype=None):
        return torch.randn(*shape, device=device, dtype=dtype or tdt, generator=gen)

    for name, applies, runner in RUNNERS:
        if op == name and applies(s):
            tdt = getattr(torch, _TORCH_DTYPES.get(dt, "bfloat16"))
            return runner(torch, {**s, "kernel": kernel}, tdt, randn, device)

    if op in ("matmul", "bmm"):
        batch = (int(s["batch"]),) if op == "bmm" else ()
        m, n, k = int(s["m"]), int(s["n"]), int(s["k"])
        if dt == "fp8":  # e4m3 operands, B column-major (as _scaled_mm requires), bf16 output
            a = randn(m, k, dtype=torch.bfloat16).to(torch.float8_e4m3fn)
            b = randn(n, k, dtype=torch.bfloat16).to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=device, dtype=torch.float32)
            return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        tdt = getattr(torch, _TORCH_DTYPES[dt])
        a = randn(*batch, m, k)
        tf32 = dt == "tf32"
        if kernel == "linear":  # y = x @ W.T with W stored [n, k], as nn.Linear does
            b, fn = randn(n, k), F.linear
        else:
            b, fn = randn(*batch, k, n), (torch.bmm if op == "bmm" else torch.mm)

        def run():
            torch.backends.cuda.matmul.allow_tf32 = tf32
            return fn(a, b)
        return run
    tdt = getattr(torch, _TORCH_DTYPES.get(dt, "bfloat16"))
    if op == "elementwise":
        numel = int(s["numel"])
        x, y = randn(numel), randn(numel)
        out = torch.empty_like(x)
        return {"copy": lambda: out.copy_(x), "add": lambda: x + y, "relu": lambda: torch.relu(x),
                "gelu": lambda: F.gelu(x), "mul": lambda: x * y, "silu": lambda: F.silu(x)}[kernel]
    if op in ("softmax", "layer_norm", "rms_norm", "reduce_sum"):
        rows, cols = int(s["rows"]), int(s["cols"])
        x = randn(rows, cols)
        w, bias = randn(cols), randn(cols)
        return {"softmax": lambda: torch.softmax(x, dim=-1),
                "layer_norm": lambda: F.layer_norm(x, (cols,), w, bias),
                "rms_norm": lambda: F.rms_norm(x, (cols,), w),
                "reduce_sum": lambda: x.sum(dim=-1)}[op]
    if op == "attention":
        b, h, sq, d = int(s["batch"]), int(s["heads"]), int(s["seq"]), int(s["head_dim"])
        kvh = int(s.get("kv_heads") or h)
        causal = bool(s.get("causal", False))
        q = randn(b, h, sq, d).requires_grad_(bool(s.get("backward")))
        k, v = (randn(b, kvh, sq, d).requires_grad_(bool(s.get("backward"))) for _ in range(2))
        extra = {"enable_gqa": True} if kvh != h else {}
        if not s.get("backward"):
            def fwd():
                with torch.no_grad():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)
            return fwd
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)
        do = torch.randn_like(o)
        return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    raise ValueError(f"unknown benchmark op {op!r}")


# ----------------------------------------------------------------------------- measuring
def measure(case: Case, device: str = "cuda", flush=None, dry_run: bool = False,
            rep_s: float = 0.1, timer: Callable | None = None, kernel_names: bool = False,
            ahead: bool = True) -> dict:
    """Run one case and return the point: the case plus ``time_s`` [s] and ``reps``.

    ``timer(fn) -> seconds`` replaces the built-in event timer (e.g. ``triton.testing.do_bench``).
    ``ahead`` is :func:`time_events`' (the GPU's time alone; ``False``: host issue time included).
    ``kernel_names=True`` adds ``launches``: the GPU kernels one call launched (from the profiler).
    """
    if dry_run:
        case = _shrink(case)
        device = "cpu"
    fn = make_runner(case, device)
    if getattr(fn, "kernel", None):  # the runner fell back to another call than the case names
        case = {**case, "kernel": fn.kernel}
    if dry_run:
        t, reps = time_cpu(fn)
    elif timer is not None:
        t, reps = float(timer(fn)), -1
    else:
        t, reps = time_events(fn, flush, warmup_s=rep_s / 4, rep_s=rep_s, ahead=ahead)
    point = {**case, "time_s": t, "reps": reps}
    if kernel_names and not dry_run:
        point["launches"] = launched_kernels(fn)
        point.update(device_seconds(fn, flush))
    return point


# ----------------------------------------------------------------------------- environment
def _nvidia_smi(fields: str) -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
        return [x.strip() for x in out.stdout.strip().splitlines()[0].split(",")]
    except Exception:  # noqa: BLE001 - nvidia-smi is optional
        return []


def sm_clock_mhz() -> float | None:  # pragma: no cover - needs a GPU
    """The SM clock of the current CUDA device now [MHz] (``torch.cuda.clock_rate``), or None where NVML is absent."""
    torch = import_torch()
    try:
        return float(torch.cuda.clock_rate())
    except Exception:  # noqa: BLE001 - NVML is optional: the clock is not recorded
        return None


def environment_info(device: str = "cuda") -> dict:
    """Device name, SM count, L2, driver/torch/CUDA versions and the clocks nvidia-smi reports now."""
    torch = import_torch()
    info: dict[str, Any] = {"torch_version": torch.__version__, "cuda_version": torch.version.cuda,
                            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if device != "cpu" and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(device_name=p.name, sm_count=p.multi_processor_count,
                    l2_bytes=getattr(p, "L2_cache_size", None), memory_bytes=p.total_memory,
                    compute_capability=f"{p.major}.{p.minor}")
        smi = _nvidia_smi("driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit")
        if len(smi) == 5:
            info.update(driver_version=smi[0], sm_clock_mhz=smi[1], mem_clock_mhz=smi[2],
                        max_sm_clock_mhz=smi[3], power_limit_w=smi[4])
    else:
        info.update(device_name="cpu (dry run)", sm_count=None)
    return info


# ----------------------------------------------------------------------------- driver
class progress:
    """A progress bar: tqdm when importable, else a plain one on stderr."""

    def __init__(self, total: int, desc: str = "calibrating", enabled: bool = True):
        self.total, self.n, self.desc, self.enabled, self._bar = total, 0, desc, enabled, None
        if enabled:
            try:
                from tqdm.auto import tqdm
                self._bar = tqdm(total=total, desc=desc, unit="kernel", file=sys.stderr)
            except ImportError:
                pass

    def update(self, note: str = "") -> None:
        self.n += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(note, refresh=False)
            self._bar.update(1)
        elif self.n == self.total or self.n % max(1, self.total // 40) == 0:
            width = 30
            done = int(width * self.n / max(self.total, 1))
            sys.stderr.write(f"\r{self.desc} [{'#' * done}{'.' * (width - done)}] {self.n}/{self.total} {note[:40]:40s}")
            sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            sys.stderr.write("\n")


def run_benchmarks(cases: list[Case] | None = None, mode: str = "full", dry_run: bool = False,
                   jsonl: str | os.PathLike | None = None, show_progress: bool = True,
                   time_budget_s: float | None = None, timer: Callable | None = None,
                   kernel_names: Callable[[Case], bool] | None = None, ahead: bool = True) -> tuple[dict, list[dict]]:
    """Measure ``cases`` (default :func:`fit_cases(mode) <fit_cases>`); returns ``(environment, points)``.

    Points are appended to ``jsonl`` as they are measured (one JSON object a line, the
    environment first), so an interrupted run keeps what it measured. A case that fails
    (e.g. an unsupported dtype) is recorded with ``"error"`` and no time. ``kernel_names(case)``
    says for which cases to record the launched kernels, ``ahead`` how to time them (see :func:`measure`).
    """
    torch = import_torch()
    device = "cpu" if dry_run else "cuda"
    if not dry_run and not torch.cuda.is_available():
        raise CalibrationUnavailableError("no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False)")
    if cases is None:
        cases = fit_cases(mode, dtypes=None if dry_run or _has_fp8(torch) else ["bf16", "fp16", "fp32", "tf32"])
    env = environment_info(device)
    env["mode"] = mode
    env["timer"] = "dry-run wall clock" if dry_run else (
        getattr(timer, "__doc__", None) or "custom") if timer else (
        "cuda events, do_bench schedule (warm-up, L2 flushed by a 256 MB write before each rep), median"
        + (", host ahead (GPU spin before each rep: the GPU's time alone)" if ahead else ""))
    flush = None if dry_run else torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    if not dry_run:  # bring the clocks up before the first timed case
        a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()
        del a
    sink = open(jsonl, "a", encoding="utf-8") if jsonl else None
    if sink:
        sink.write(json.dumps({"environment": env}) + "\n")
        sink.flush()
    points, bar, start = [], progress(len(cases), enabled=show_progress), time.perf_counter()
    rep_s = 0.02 if mode == "quick" else 0.1
    try:
        for case in cases:
            if time_budget_s is not None and time.perf_counter() - start > time_budget_s:
                break
            try:
                point = measure(case, device, flush, dry_run=dry_run, rep_s=rep_s, timer=timer,
                                kernel_names=bool(kernel_names and kernel_names(case)), ahead=ahead)
            except Exception as exc:  # noqa: BLE001 - record and go on
                point = {**case, "time_s": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
                if not dry_run:
                    torch.cuda.synchronize()
            points.append(point)
            if sink:
                sink.write(json.dumps(point) + "\n")
                sink.flush()
            bar.update(f"{case['op']} {case['dtype']}")
    finally:
        bar.close()
        if sink:
            sink.close()
    if not dry_run:
        smi = _nvidia_smi("clocks.sm,clocks.mem")
        if len(smi) == 2:
            env.update(sm_clock_mhz_end=smi[0], mem_clock_mhz_end=smi[1])
    return env, points


def run_budget(budget: Any = None, jsonl: str | os.PathLike | None = None, show_progress: bool = True,
               dry_run: bool = False) -> tuple[dict, list[dict], Any]:
    """Measure the kernels of a calibration of ``budget`` (:func:`gpumodel.calibration.budget.budget_plan`).

    Parameters
    ----------
    budget : float or str, optional
        The whole calibration's budget [s], or text such as ``"3m"``; default
        :data:`~gpumodel.calibration.budget.DEFAULT_BUDGET_S`.
    jsonl : path-like, optional
        Where to append the points as they are measured.
    show_progress : bool
        Print a progress bar.
    dry_run : bool
        Tiny sizes on the CPU (tests the code paths).

    Returns
    -------
    tuple
        ``(environment, points, plan)``: the machine, the measured points (``time_s`` [s]) and the
        :class:`~gpumodel.calibration.budget.BudgetPlan`. Measuring stops at 1.5 times the plan's kernel time.
    """
    torch = import_torch()
    if not dry_run and not torch.cuda.is_available():
        raise CalibrationUnavailableError("no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False)")
    seconds = DEFAULT_BUDGET_S if budget is None else duration(budget, "budget")
    plan = budget_plan(seconds, fp8=dry_run or _has_fp8(torch))
    env, points = run_benchmarks(plan.cases, mode=f"budget {seconds:g} s", dry_run=dry_run, jsonl=jsonl,
                                 show_progress=show_progress, time_budget_s=None if dry_run else 1.5 * plan.kernel_s)
    return env, points, plan


def _has_fp8(torch) -> bool:
    if not torch.cuda.is_available() or not hasattr(torch, "float8_e4m3fn"):
        return False
    return torch.cuda.get_device_capability(0) >= (8, 9)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Measure calibration points (raw JSON lines).")
    p.add_argument("--mode", choices=["quick", "full"], default="full")
    p.add_argument("--plan", choices=["fit", "sweep"], default="fit",
                   help="fit: the calibration plan of --mode; sweep: the denser softmax/sum/batched-GEMV plan")
    p.add_argument("--jsonl", required=True, help="output file (appended)")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU, to test the code")
    p.add_argument("--time-budget", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    cases = sweep_cases() if args.plan == "sweep" else None
    env, points = run_benchmarks(cases, mode="sweep" if cases else args.mode, dry_run=args.dry_run, jsonl=args.jsonl,
                                 time_budget_s=args.time_budget, show_progress=not args.no_progress)
    bad = [pt for pt in points if pt.get("time_s") is None]
    print(f"{len(points)} points ({len(bad)} failed) on {env.get('device_name')} "
          f"in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    for pt in bad[:10]:
        print(f"  failed: {pt['op']} {pt['dtype']} {pt['shape']}: {pt['error']}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
