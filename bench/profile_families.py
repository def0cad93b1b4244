"""Where a serving step's time goes, kernel family by kernel family: profiled on the H200 against the model.

Reads ``tests/data/serving/profile.jsonl`` (``bench/profile_serving.py``: each step replayed as a CUDA graph
under ``torch.profiler``, every kernel's count and summed duration) and ``smi_during_profile.csv`` (the
SM clock, power and throttle reasons sampled every 100 ms during that run). For every profiled step it
prints the in-graph kernel time of each family beside the serving model's time of the same family
(:func:`gpumodel.serving.prefill_time` / :func:`~gpumodel.serving.decode_step_time`, calibrated kernel
rates), then splits PyTorch's elementwise kernels into the vectorised path (contiguous operands) and the
generic ``elementwise_kernel`` / ``CatArrayBatchedCopy`` path (strided slices of the fused QKV and gate/up
outputs, broadcast ``cos``/``sin``), with the HBM bandwidth each reaches. Last, the clock trace: the median
SM clock over the samples drawn at >= 95% of the power limit.

Kernel names are sorted into families by name: ``nvjet``/``gemm``/``cutlass`` kernels are matmuls (the
LM head's GEMM among them: the model's ``logits`` family joins ``matmul`` here), ``sdpa``/``flash``/``fmha``
attention, ``layer_norm``/``rms`` norms, ``gather`` the embedding, everything else elementwise (the KV
write, a strided copy, with them: the model's ``kv_write`` joins ``elementwise``). ``Memset`` kernels are
left out of the families (they are in ``kernel_sum_s``).

Usage::

    python bench/profile_families.py [--profile PATH] [--smi PATH]
    python bench/profile_families.py --profile tests/data/serving/profile_h100_sustained.jsonl --gpu h100-sxm \
        --smi none [--calibration tests/data/calibration/user_h100/calibration.yaml]
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's gpumodel

import gpumodel as gm  # noqa: E402
from gpumodel.serving import decode_step_time, prefill_time  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "serving"
FAMILIES = ("matmul", "attention", "norm", "embedding", "elementwise")


def family(name: str) -> str | None:
    """The model's kernel family of a profiled kernel name (``None`` for a memset)."""
    low = name.lower()
    if low.startswith("memset"):
        return None
    if low.startswith("nvjet") or "gemm" in low or "cutlass" in low:
        return "matmul"
    if "sdpa" in low or "flash" in low or "fmha" in low:
        return "attention"
    if "layer_norm" in low or "rms" in low:
        return "norm"
    if "gather" in low:
        return "embedding"
    return "elementwise"


def generic_path(name: str) -> bool:
    """Whether an elementwise kernel is PyTorch's generic (strided / broadcast) path, not the vectorised one."""
    return "vectorized_elementwise_kernel" not in name


def measured_families(row: dict) -> dict:
    out = dict.fromkeys(FAMILIES, 0.0)
    for name, (_, seconds) in row["kernels"].items():
        f = family(name)
        if f is not None:
            out[f] += seconds
    return out


def model_families(row: dict, gpu: str = "h200", calibration=None) -> tuple[dict, float]:
    sa = _serving_accuracy()
    cfg = sa.lean_config(row)
    if row["kind"] == "prefill":
        t = prefill_time(cfg, gpu, batch_size=row["batch"], prompt_len=row["prompt_len"], calibration=calibration)
    else:
        t = decode_step_time(cfg, gpu, batch_size=row["batch"], context_len=row["context_len"],
                             calibration=calibration)
    b = dict(t.breakdown)
    out = {f: float(b.get(f, 0.0)) for f in FAMILIES}
    out["matmul"] += float(b.get("logits", 0.0))
    out["elementwise"] += float(b.get("kv_write", 0.0))
    return out, float(t)


def _serving_accuracy():
    spec = importlib.util.spec_from_file_location("serving_accuracy", Path(__file__).parent / "serving_accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_profile(path: Path) -> list[dict]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [r for r in rows if r.get("status") == "ok"]


def load_smi(path: Path) -> dict:
    """Columns of an ``nvidia-smi --format=csv`` trace as arrays: sm_mhz, mem_mhz, power_w, reasons (ints)."""
    with path.open() as fh:
        rows = list(csv.reader(fh))[1:]
    num = lambda i: np.array([float(r[i].split()[0]) for r in rows])  # noqa: E731
    return {"sm_mhz": num(1), "mem_mhz": num(2), "power_w": num(3),
            "reasons": np.array([int(r[5].strip(), 16) for r in rows])}


def capped_clock(smi: dict, power_limit_w: float, fraction: float = 0.95) -> tuple[float, int]:
    """Median SM clock [MHz] over the samples at >= ``fraction`` of the power limit, and how many there are."""
    m = smi["power_w"] >= fraction * power_limit_w
    return float(np.median(smi["sm_mhz"][m])) if m.any() else float("nan"), int(m.sum())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, default=DATA / "profile.jsonl")
    ap.add_argument("--smi", type=Path, default=DATA / "smi_during_profile.csv",
                    help="the clock trace of the profiled run ('none': no trace)")
    ap.add_argument("--gpu", default="h200", help="the GPU the profile was measured on")
    ap.add_argument("--calibration", type=Path, default=None,
                    help="price with this calibration record (a user's) instead of the shipped one")
    args = ap.parse_args(argv)
    bw = gm.gpu(args.gpu).memory_bandwidth
    print("in-graph kernel time by family [ms], profiled vs model (model / profiled - 1)")
    for r in load_profile(args.profile):
        meas, (model, total) = measured_families(r), model_families(r, args.gpu, args.calibration)
        if r.get("sm_clock_mhz"):
            print(f"SM clock before / profiled at / after [MHz]: {r['sm_clock_mhz']}")
        n = r.get("prompt_len", r.get("context_len"))
        print(f"{r['kind']:7s} {r['shape']:12s} b={r['batch']:<4d} {n:>5d}: replay {r['seconds'] * 1e3:8.3f}, "
              f"kernels {r['kernel_sum_s'] * 1e3:8.3f}, model {total * 1e3:8.3f} ({total / r['seconds'] - 1:+6.1%})")
        for f in FAMILIES:
            if meas[f] or model[f]:
                rel = f"{model[f] / meas[f] - 1:+7.1%}" if meas[f] else ""
                print(f"    {f:12s} profiled {meas[f] * 1e3:8.3f}  model {model[f] * 1e3:8.3f}  {rel}")
        gen = sum(s for k, (_, s) in r["kernels"].items() if family(k) == "elementwise" and generic_path(k))
        vec = meas["elementwise"] - gen
        print(f"    elementwise: generic (strided/broadcast) path {gen * 1e3:8.3f}, vectorised {vec * 1e3:8.3f}")
    print(f"(HBM bandwidth of the catalog: {bw / 1e12:.2f} TB/s)")
    if str(args.smi) == "none":
        return 0
    smi = load_smi(args.smi)
    limit = 700.0  # the H200 SXM's board power limit, as nvidia-smi reported it on the measuring machine
    mhz, n = capped_clock(smi, limit)
    capped = (smi["reasons"] & 0x4) != 0
    print(f"\nclock trace: {smi['sm_mhz'].size} samples; max SM clock {smi['sm_mhz'].max():.0f} MHz; "
          f"SW power cap (0x4) active in {int(capped.sum())}; at >= 95% of {limit:.0f} W ({n} samples): "
          f"median SM clock {mhz:.1f} MHz ({smi['sm_mhz'].max() / mhz:.3f}x slower than the maximum); "
          f"memory clock {np.unique(smi['mem_mhz'][smi['sm_mhz'] > 1000]).astype(int).tolist()} MHz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
