"""Predicted vs published kernel times on GPUs nobody here measured: the transfer's out-of-sample check.

Four tables, each row a published figure, each predicted twice: by the transferred model
(:mod:`gpumodel.calibration.transfer`: the H200 calibration carried to the GPU) and by the datasheet
estimate (datasheet peaks x default efficiencies); the relative error of each is ``predicted / published - 1``.

1. ``a100``: FlashAttention-2 forward + backward on an A100 80GB SXM4 (the flash-attention README figure,
   sources below).
2. ``h100_attention``: FlashAttention-2, FlashAttention-3, cuDNN and Triton forward and backward on an H100
   80GB SXM5, fp16, from the FlashAttention-3 paper (``tests/data/published/attention_h100.json`` and its
   README: figure, commit, setup). Each row is priced with ``gm.ops.attention(..., kernel=)`` of that
   library. The fp8 figure is not scored (no fp8 attention rate is modelled).
3. ``gemm``: dense GEMMs at their best shape (``tests/data/published/gemm.json``): a row with ``m, n, k`` is
   that product; a best-of-sweep row is compared with the fastest of the square sizes 2048 .. 16384. Only the
   vendor BLAS PyTorch calls is scored (:func:`vendor_blas`); hand-written kernels are listed, not scored.
4. ``bandwidth``: device-memory copy bandwidth (``tests/data/published/bandwidth.json``), priced as a
   copy (``gm.ops.elementwise``, one read and one write an element) of the row's bytes (1 GiB where unstated).

The summary gives each GPU's median error for both models, and the done bars of the kernels issue: every GPU
at or better than its datasheet estimate, FlashAttention-2 and -3 on the H100 each within 10% median, a B200
GEMM within 15% of a published figure.

Sources of the A100 table
-------------------------
* Figure: ``assets/flash2_a100_fwd_bwd_benchmark.png`` in github.com/Dao-AILab/flash-attention, added
  by commit 4f285b354796fb17df8636485b9a04df3ebbb7dc ("FlashAttention-2 release", 2023-07-17) and
  unchanged at commit 0251105a2fb19d2957484b7f023cd8c115286ced. The README of that release (section
  "A100") states the sizes: "Head dimension 64 or 128, hidden dimension 2048 (i.e. either 32 or 16
  heads). Sequence length 512, 1k, 2k, 4k, 8k, 16k. Batch size set to 16k / seqlen." Panels: (a)
  non-causal d=64, (b) non-causal d=128, (c) causal d=64, (d) causal d=128; bar labels in TFLOP/s.
  Three labels sit behind the legend: (a) 1k "153" and (b) 1k "173" are partly legible and agree with
  the bars' heights; (b) 512 is read from its bar's height alone (151 on the axis scale fitted through
  the labelled bars of that panel, +-1). Every other value is its printed label, and each agrees with
  its bar's height within 1 TFLOP/s.
* FLOP convention and sizes: ``benchmarks/benchmark_flash_attention.py`` of the same repository, as
  added by commit 60499abcfda1fabd48e1b97341f4f888c66991a3 ("[Benchmark] Add script to benchmark
  FlashAttention", 2023-07-28) and unchanged in substance at 0251105a: ``flops()`` is
  ``4 * batch * seqlen**2 * nheads * headdim``, halved when causal, times 3.5 for forward + backward
  (backward = 2.5x forward), and the fwd+bwd speed divides it by the sum of the forward and backward
  times; ``bs_seqlen_vals = [(32, 512), (16, 1024), (8, 2048), (4, 4096), (2, 8192), (1, 16384)]``,
  ``dim = 2048``, ``nheads = dim // headdim``, ``dtype = torch.float16``. The same convention is
  :func:`gpumodel.core.ops.attention`'s (forward 4 b h s^2 d, backward 2.5x; T. Dao, "FlashAttention-2",
  2023, Sec. 4.1), so a published TFLOP/s converts to seconds exactly.

Nothing here was fitted to these rows: the transferred model is the H200 calibration carried by
:func:`gpumodel.calibration.transfer.transfer`; which published figures its priors use is said in each prior's
``source`` (``specs/priors/``), and no row of these tables is among them.

Run: ``python bench/published_kernels.py [--json] [--rows] [--section a100 h100_attention gemm bandwidth]``
(CPU only, seconds).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import gpumodel as gm  # noqa: E402
from gpumodel.calibration.model import CalibrationModel, default_parameters, predict as model_predict  # noqa: E402
from gpumodel.calibration.priors import PRIORS, prior_for  # noqa: E402
from gpumodel.calibration.transfer import transfer  # noqa: E402

PUBLISHED = ROOT / "tests" / "data" / "published"
#: (causal, head_dim) -> FlashAttention-2 fwd+bwd TFLOP/s at seq 512, 1k, 2k, 4k, 8k, 16k (A100 80GB SXM4, fp16)
FA2_A100_FWD_BWD_TFLOPS = {
    (False, 64): (132, 153, 162, 171, 175, 176),
    (False, 128): (151, 173, 187, 196, 201, 203),
    (True, 64): (88, 119, 140, 156, 165, 171),
    (True, 128): (99, 133, 155, 173, 182, 189),
}
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS = 16384  # batch x seq in every row
HIDDEN = 2048  # heads x head_dim
GPU = "a100-sxm4-80gb"
SOURCE = ("github.com/Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png "
          "(commit 4f285b354796fb17df8636485b9a04df3ebbb7dc)")
#: the attention libraries of the FlashAttention-3 figures that the model prices (standard attention is not a
#: flash kernel; the fp8 figure is left out: no fp8 attention rate is modelled)
H100_KERNELS = ("fa2", "fa3", "cudnn", "triton")
#: square sizes a best-of-sweep GEMM row is compared against
SWEEP = (2048, 3072, 4096, 6144, 8192, 12288, 16384)
MODELS = ("transferred", "datasheet")
_MODELS: dict = {}


def model(gpu: str, source: str) -> CalibrationModel:
    """The ``"transferred"`` or ``"datasheet"`` model of a GPU (cached)."""
    key = (gpu, source)
    if key not in _MODELS:
        g = gm.gpu(gpu)
        _MODELS[key] = (transfer(g).model if source == "transferred"
                        else CalibrationModel(default_parameters(g), g.sm_count, calibrated=False, gpu=g))
    return _MODELS[key]


def seconds(gpu: str, source: str, *ops_: object) -> float:
    """Summed model time [s] of the ops on a GPU."""
    m = model(gpu, source)
    return float(sum(np.min(np.asarray(model_predict(m, op).time_s, dtype=float)) for op in ops_))


def a100_rows() -> list[dict]:
    """The A100 FlashAttention-2 table, one dict per bar, with its shape and FLOPs (the repository's convention)."""
    out = []
    for (causal, d), speeds in FA2_A100_FWD_BWD_TFLOPS.items():
        for seq, tflops in zip(SEQ_LENS, speeds):
            batch, heads = TOKENS // seq, HIDDEN // d
            flops = 3.5 * 4 * batch * seq**2 * heads * d / (2 if causal else 1)
            ops_ = [gm.ops.attention(batch, heads, seq, d, dtype="fp16", causal=causal, backward=b) for b in (False, True)]
            out.append({"section": "a100", "gpu": GPU, "what": f"fa2 fwd+bwd d{d} s{seq}" + " causal" * causal,
                        "published": flops / (tflops * 1e12), "unit": "s", "ops": ops_, "source": SOURCE})
    return out


def h100_attention_rows() -> list[dict]:
    """The FlashAttention-3 paper's fp16 bars of the libraries the model prices."""
    data = json.loads((PUBLISHED / "attention_h100.json").read_text())
    out = []
    for r in data["rows"]:
        if r["kernel"] not in H100_KERNELS or r["dtype"] != "fp16":
            continue
        op = gm.ops.attention(r["batch"], r["heads"], r["seq"], r["head_dim"], dtype="fp16", causal=r["causal"],
                              backward=r["direction"] == "bwd", kernel=r["kernel"])
        what = f"{r['kernel']} {r['direction']} d{r['head_dim']} s{r['seq']}" + " causal" * r["causal"]
        out.append({"section": "h100_attention", "gpu": "h100-sxm", "what": what, "kernel": r["kernel"],
                    "published": float(op.flops) / (r["tflops"] * 1e12), "unit": "s", "ops": [op],
                    "source": r["figure"]})
    return out


def gemm_rows() -> list[dict]:
    """Published GEMM rates: the product given, or the best of :data:`SWEEP` for a best-of-sweep figure."""
    path = PUBLISHED / "gemm.json"
    if not path.exists():
        return []
    out = []
    for r in json.loads(path.read_text())["rows"]:
        if r.get("m"):
            sizes = [(r["m"], r["n"], r["k"])]
        else:
            sizes = [(n, n, n) for n in SWEEP]
        try:
            ops_ = [gm.ops.matmul(*mnk, dtype=r["dtype"]) for mnk in sizes]
            if not gm.gpu(r["gpu"]).supports(r["dtype"]):
                continue
        except Exception:  # noqa: BLE001 - a dtype the library has no op for is not scored
            continue
        out.append({"section": "gemm", "gpu": r["gpu"], "what": f"{r['dtype']} gemm " + (
            "x".join(str(x) for x in sizes[0]) if r.get("m") else "best of sweep"), "published": r["tflops"] * 1e12,
            "unit": "FLOP/s", "ops": ops_, "best": True, "source": r["source"], "library": r.get("library", ""),
            "other_kernel": not vendor_blas(r)})
    return out


def vendor_blas(row: dict) -> bool:
    """Whether a published GEMM ran the vendor BLAS PyTorch calls (cuBLAS, cuBLASLt, hipBLASLt), which is what the
    time model prices; hand-written kernels (ThunderKittens, Mojo, DeepGEMM, CUTLASS examples) and fp8 GEMMs with
    fine-grained block scales (1x128, 128x128, MXFP8) are other kernels: listed, not scored. NVFP4 is block-scaled
    by definition and scored."""
    lib = row.get("library", "").lower()
    blockwise_fp8 = row["dtype"].startswith("fp8") and "block" in lib
    return ("cublas" in lib or "hipblas" in lib) and not blockwise_fp8


def bandwidth_rows() -> list[dict]:
    """Published copy bandwidths, priced as a copy of the row's bytes (1 GiB where unstated)."""
    path = PUBLISHED / "bandwidth.json"
    if not path.exists():
        return []
    out = []
    for r in json.loads(path.read_text())["rows"]:
        nbytes = float(r.get("bytes") or 2**30)
        op = gm.ops.elementwise(nbytes / 2 / 2, "bf16")   # read and write nbytes / 2 each, 2-byte elements
        out.append({"section": "bandwidth", "gpu": r["gpu"], "what": f"{r.get('test', 'copy')} {nbytes / 2**30:.2g} GiB",
                    "published": r["gbps"] * 1e9, "unit": "B/s", "ops": [op], "traffic": float(op.bytes),
                    "source": r["source"]})
    return out


@functools.lru_cache(maxsize=None)
def prior_sources(kind: str) -> str:
    """Every source text the architecture priors cite for ``kind`` ("gemm" or "bandwidth"), joined."""
    texts = []
    for prior in PRIORS.records():
        values = list(prior.gemm.values()) if kind == "gemm" else [prior.bandwidth]
        for own in prior.gpus.values():
            values += list(own.gemm.values()) if kind == "gemm" else [own.bandwidth] if own.bandwidth else []
        texts += [v.source for v in values]
    return " ".join(" ".join(t.split()) for t in texts)


def is_fit(row: dict) -> bool:
    """Whether a prior cites the row's source for its kind: such a row set a prior and is not scored."""
    if row["section"] not in ("gemm", "bandwidth"):
        return False
    return " ".join(row["source"].split())[:60] in prior_sources(row["section"])


SECTIONS = {"a100": a100_rows, "h100_attention": h100_attention_rows, "gemm": gemm_rows, "bandwidth": bandwidth_rows}


def predict_row(row: dict, source: str) -> float:
    """The row's quantity (seconds, FLOP/s or B/s as published) from one model."""
    if row["unit"] == "s":
        return seconds(row["gpu"], source, *row["ops"])
    if row["unit"] == "FLOP/s":  # the fastest of the row's products
        return max(float(op.flops) / seconds(row["gpu"], source, op) for op in row["ops"])
    return row["traffic"] / seconds(row["gpu"], source, *row["ops"])


def table(sections: tuple[str, ...] = tuple(SECTIONS)) -> list[dict]:
    """Every published row of the sections with both predictions and their errors. A rate's error is
    stated as a time's: ``published rate / predicted rate - 1`` (positive: predicted slower)."""
    out = []
    for name in sections:
        for row in SECTIONS[name]():
            for source in MODELS:
                try:
                    v = predict_row(row, source)
                except gm.GpumodelError:   # e.g. no prior for the GPU's architecture: no transferred estimate
                    v = float("nan")
                row[source] = v
                ratio = v / row["published"] if row["unit"] == "s" else row["published"] / v
                row[f"{source}_error"] = ratio - 1.0
            row["fit"] = is_fit(row)
            out.append({k: v for k, v in row.items() if k != "ops"})
    return out


def _stats(errors: list[float]) -> dict:
    e = np.abs(np.asarray([x for x in errors if np.isfinite(x)]))
    if not e.size:
        return {"median": float("nan"), "p90": float("nan"), "n": 0}
    return {"median": float(np.median(e)), "p90": float(np.percentile(e, 90)), "n": int(e.size)}


def summary(data: list[dict]) -> dict:
    """Median and 90th-percentile absolute errors per section, per GPU and per H100 attention library, and the
    done bars."""
    s: dict = {"sections": {}, "architectures": {}, "gpus": {}, "h100_kernels": {},
               "fit_rows": sum(r["fit"] for r in data)}
    s["other_kernel_rows"] = sum(bool(r.get("other_kernel")) for r in data)
    data = [r for r in data if not r["fit"] and not r.get("other_kernel")]
    for r in data:
        r["architecture"] = architecture(r["gpu"])
    for key, group in (("sections", "section"), ("architectures", "architecture"), ("gpus", "gpu")):
        for name in sorted({r[group] for r in data}):
            rows = [r for r in data if r[group] == name]
            s[key][name] = {m: _stats([r[f"{m}_error"] for r in rows]) for m in MODELS}
    for k in H100_KERNELS:
        rows = [r for r in data if r.get("kernel") == k]
        if rows:
            s["h100_kernels"][k] = {m: _stats([r[f"{m}_error"] for r in rows]) for m in MODELS}
    archs = {a: v for a, v in s["architectures"].items() if v["transferred"]["n"]}
    not_worse = [a for a, v in archs.items() if v["transferred"]["median"] <= v["datasheet"]["median"]]
    b200 = [abs(r["transferred_error"]) for r in data if r["section"] == "gemm" and r["gpu"] == "b200"]
    s["bars"] = {
        "every GPU class (architecture) at or better than its datasheet estimate": (
            len(not_worse) == len(archs), f"{len(not_worse)} of {len(archs)}; GPUs of no prior (AMD, Volta, Turing) "
            "are estimated with the datasheet's efficiencies"),
        "fa2 and fa3 on the H100 within 10% median": (
            all(s["h100_kernels"].get(k, {}).get("transferred", {}).get("median", 1.0) <= 0.10 for k in ("fa2", "fa3")),
            ", ".join(f"{k} {s['h100_kernels'][k]['transferred']['median']:.1%}" for k in ("fa2", "fa3")
                      if k in s["h100_kernels"])),
        "a B200 GEMM within 15% of a published figure": (
            bool(b200) and min(b200) <= 0.15, f"best {min(b200):.1%}" if b200 else "no B200 row"),
    }
    return s


def architecture(gpu: str) -> str:
    """The GPU's class: its architecture prior's name, or ``"no prior"`` (the estimate is the datasheet's)."""
    prior = prior_for(gpu)
    return prior.name if prior is not None else "no prior"


def _fmt(row: dict, v: float) -> str:
    if row["unit"] == "s":
        return f"{v * 1e3:9.3f} ms"
    if row["unit"] == "FLOP/s":
        return f"{v / 1e12:8.0f} TF/s"
    return f"{v / 1e9:8.0f} GB/s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows and the summary as JSON")
    ap.add_argument("--rows", action="store_true", help="print every row, not only the summaries")
    ap.add_argument("--section", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    args = ap.parse_args(argv)
    data = table(tuple(args.section))
    s = summary(data)
    if args.json:
        print(json.dumps({"rows": data, "summary": s}, indent=1, default=str))
        return 0
    if args.rows:
        print(f"{'section':15} {'gpu':15} {'row':34} {'published':>12} | {'transferred':>21} | {'datasheet':>21}")
        for r in data:
            cols = [f"{_fmt(r, r[m])} {r[f'{m}_error']:+6.1%}" for m in MODELS]
            print(f"{r['section']:15} {r['gpu']:15} {r['what'][:34]:34} {_fmt(r, r['published']):>12} | "
                  + " | ".join(f"{c:>21}" for c in cols) + ("  fit" if r["fit"] else "")
                  + ("  other" if r.get("other_kernel") else ""))
        print()
    print(f"median |error| (p90, rows): transferred vs datasheet; left out: {s['fit_rows']} rows whose source a prior "
          f"cites ('fit' in --rows) and {s['other_kernel_rows']} GEMMs of other kernels than the vendor BLAS ('other')")
    for key, title in (("sections", "by table"), ("architectures", "by GPU class"), ("gpus", "by GPU"),
                       ("h100_kernels", "H100 attention by library")):
        print(f"  {title}:")
        for name, v in s[key].items():
            t, d = v["transferred"], v["datasheet"]
            print(f"    {name:16} transferred {t['median']:6.1%} (p90 {t['p90']:6.1%}, {t['n']:3d})   "
                  f"datasheet {d['median']:6.1%} (p90 {d['p90']:6.1%}, {d['n']:3d})")
    print("done bars:")
    for name, (ok, text) in s["bars"].items():
        print(f"  {name}: {'met' if ok else 'NOT met'} ({text})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
