"""Accuracy of the serving model: measured steps on an H200 and two published tables.

1. ``tests/data/serving/measured.jsonl`` (``bench/measure_serving.py``): the lean decoder's prefill and
   decode steps replayed as CUDA graphs (``engine="graph"``), and HF ``generate`` (``engine="hf"``). The
   split into "fit" and "holdout" rows was fixed by the measuring script before any comparison; the
   headline figures are on the held-out rows, decode and prefill separately, beside the
   weights-over-bandwidth shortcut (decode: weight bytes / HBM bandwidth; prefill: the larger of that
   and the matmul FLOPs over the dense peak).
2. gpt-fast's README tables: batch-1 decode tokens/s on A100-80GB (bf16, int8, int4; tp 1-8).
3. TensorRT-LLM v0.17's offline maximum throughput table (H100, H200, A100, L40S).
4. ``tests/data/serving/compiled.jsonl`` (``bench/measure_serving.py --compiled``): one decoder layer of three
   shapes as a CUDA graph of PyTorch's unfused kernels and ``torch.compile``'d (inductor's fused kernels, captured
   the same way), paired; checks ``engine="compiled"`` on the H200 (nothing fitted to it).

Both engines fuse their memory-bound kernels (gpt-fast runs ``torch.compile(mode="reduce-overhead")``:
inductor's fused kernels replayed as CUDA graphs; TensorRT-LLM builds fused kernels), so they are modelled
with ``engine="compiled"``; the unfused ``engine="graph"`` figure is printed beside for comparison.

``--gpu NAME --measured FILE`` scores steps measured on another GPU (the measured section only), and
``--calibration FILE --host FILE`` prices them with a user's own calibration and host costs (what ``gpumodel
calibrate`` writes) instead of the shipped ones.

Usage::

    python bench/serving_accuracy.py [--measured PATH] [--rows] [--fit]
    python bench/serving_accuracy.py --gpu h100-sxm --measured serving.jsonl [--calibration FILE --host FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's gpumodel

import gpumodel as gm  # noqa: E402
from gpumodel.serving import decode_step_time, generation_time, prefill_time, serving_capacity  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "serving"
MODELS = {"llama-2-7b": "llama-2-7b", "llama-2-70b": "llama-2-70b", "llama-3.1-8b": "llama-3-8b",
          "llama-3.1-70b": "llama-3-70b", "llama-3.1-405b": "llama-3-405b", "mistral-7b": "mistral-7b",
          "mixtral-8x7b": "mixtral-8x7b", "mixtral-8x22b": None}
TRT_GPUS = {"h200_fp8": ("h200-sxm", "fp8"), "h100_fp8": ("h100-sxm", "fp8"), "gh200_fp8": (None, "fp8"),
            "l40s_fp8": ("l40s", "fp8"), "a100_sxm4_80gb_fp16": ("a100-sxm4-80gb", "fp16")}


def stats(pred, ref) -> str:
    err = np.abs(np.asarray(pred) / np.asarray(ref) - 1)
    if err.size == 0:
        return "no rows"
    return (f"median |error| {np.median(err):6.1%}, p90 {np.percentile(err, 90):6.1%}, worst {err.max():6.1%} "
            f"over {err.size} rows")


def summary(pred, ref) -> dict:
    """Median, p90 and worst absolute relative error and the signed median (model / measured - 1)."""
    e = np.asarray(pred, dtype=float) / np.asarray(ref, dtype=float) - 1
    if e.size == 0:
        return {"n": 0, "median": np.nan, "p90": np.nan, "worst": np.nan, "signed": np.nan}
    a = np.abs(e)
    return {"n": int(e.size), "median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "worst": float(a.max()), "signed": float(np.median(e))}


def _cells(s: dict) -> str:
    if not s["n"]:
        return f"{0:>3d} {'':>7s} {'':>7s} {'':>7s} {'':>7s}"
    return f"{s['n']:>3d} {s['median']:7.1%} {s['p90']:7.1%} {s['worst']:7.1%} {s['signed']:+7.1%}"


def group_table(title: str, keys: list, pred, meas, split) -> None:
    """One line per group: n, median, p90, worst |error| and signed median, held-out rows then all rows."""
    pred, meas, split, keys = map(np.asarray, (pred, meas, split, keys))
    print(f"  {title:<16s} |  held out: n  median     p90   worst  signed |  all rows: n  median     p90   worst  signed")
    for k in sorted(set(keys.tolist()), key=lambda x: (len(x), x) if x.startswith("b=") else (0, x)):
        m = keys == k
        h = m & (split == "holdout")
        print(f"  {k:<16s} |        {_cells(summary(pred[h], meas[h]))} |        {_cells(summary(pred[m], meas[m]))}")


def batch_regime(kind: str, b: int) -> str:
    """Batch regimes: one sequence; a few (weights dominate); many (attention and the matmuls' rows grow)."""
    if b == 1:
        return "b=1"
    if kind == "decode":
        return "b=2-16" if b <= 16 else ("b=32-64" if b <= 64 else "b=128-256")
    return "b=2-8" if b <= 8 else "b=16-32"


# ------------------------------------------------------------------------------------------ measured
def lean_config(r: dict) -> gm.TransformerConfig:
    """The config the measuring script's lean decoder has (its ``layers``, not the full model's)."""
    return gm.TransformerConfig(name=r["shape"], hidden_size=r["hidden"], num_layers=r["layers"],
                                num_heads=r["heads"], num_kv_heads=r["kv_heads"], head_dim=r["head_dim"],
                                intermediate_size=r["ffn"], vocab_size=r["vocab"], fused_qkv=True,
                                fused_gate_up=True)


def hf_config(r: dict) -> gm.TransformerConfig:
    return gm.TransformerConfig.from_hf({"model_type": r["family"], **r["config"]}, name=r["shape"])


def load_measured(path: Path) -> list[dict]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [r for r in rows if r.get("status") == "ok"]


def shortcut(cfg: gm.TransformerConfig, r: dict, gpu) -> float:
    w = gm.inference_memory(cfg, 1, 1).weights_bytes
    t = w / gpu.memory_bandwidth
    if r["kind"] == "prefill":
        tokens = r["batch"] * r["prompt_len"]
        t = max(t, 2.0 * cfg.num_layers * cfg.layer_matmul_parameters() * tokens / gpu.peak_flops("bf16"))
    return t


def predict_steps(rows: list[dict], kind: str, gpu: str = "h200", calibration=None) -> tuple[np.ndarray, np.ndarray]:
    """Model and shortcut times [s] of the lean-decoder rows of ``kind`` ("decode" or "prefill"), in order.

    Rows of one shape go through the model as one array call (the serving functions broadcast); ``calibration``
    (a record or YAML path) replaces the GPU's shipped or transferred one.
    """
    gpu = gm.gpu(gpu)
    pred, base = np.zeros(len(rows)), np.zeros(len(rows))
    by_shape: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_shape.setdefault(r["shape"], []).append(i)
    for idx in by_shape.values():
        cfg = lean_config(rows[idx[0]])
        b = np.array([rows[i]["batch"] for i in idx])
        if kind == "decode":
            t = decode_step_time(cfg, gpu, batch_size=b, context_len=np.array([rows[i]["context_len"] for i in idx]),
                                 calibration=calibration)
        else:
            t = prefill_time(cfg, gpu, batch_size=b, prompt_len=np.array([rows[i]["prompt_len"] for i in idx]),
                             calibration=calibration)
        pred[idx] = np.asarray(t.seconds, dtype=float)
        w = gm.inference_memory(cfg, 1, 1).weights_bytes / gpu.memory_bandwidth
        if kind == "decode":
            base[idx] = w
        else:
            base[idx] = [max(w, shortcut(cfg, rows[i], gpu)) for i in idx]
    return pred, base


def measured_section(path: Path, show_rows: bool, gpu: str = "h200", calibration=None, host=None) -> None:
    rows = load_measured(path)
    print(f"== measured on the {gm.gpu(gpu).name} ({path.name}, {len(rows)} rows) ==")
    for kind in ("decode", "prefill"):
        sel = [r for r in rows if r["engine"] == "graph" and r["kind"] == kind]
        if not sel:
            continue
        pred, base = predict_steps(sel, kind, gpu, calibration)
        meas, split = [r["seconds"] for r in sel], [r["split"] for r in sel]
        if show_rows:
            for r, p_, b_ in zip(sel, pred, base):
                n = r.get("context_len", r.get("prompt_len"))
                print(f"  {kind:7s} {r['shape']:13s} b={r['batch']:<4d} {n:>6d} {r['split']:7s} measured "
                      f"{r['seconds'] * 1e3:9.3f} ms  model {p_ / r['seconds'] - 1:+7.1%}  shortcut "
                      f"{b_ / r['seconds'] - 1:+7.1%}")
        pred, base, meas, split = map(np.asarray, (pred, base, meas, split))
        for part in ("holdout", "fit"):
            m = split == part
            print(f"{kind:>8} {part:>7}: model    {stats(pred[m], meas[m])}, signed median "
                  f"{summary(pred[m], meas[m])['signed']:+.1%}")
            print(f"{'':>8} {'':>7}  shortcut {stats(base[m], meas[m])}")
        group_table(f"{kind} by model", [r["shape"] for r in sel], pred, meas, split)
        group_table(f"{kind} by batch", [batch_regime(kind, r["batch"]) for r in sel], pred, meas, split)
    hf = [r for r in rows if r["engine"] == "hf"]
    if hf:
        pt, pp = hf_times(hf, gpu, calibration, host)
        mt, mp = [r["ttft_s"] for r in hf], [r["tpot_s"] for r in hf]
        for i, r in enumerate(hf):
            if show_rows:
                print(f"  hf {r['shape']:13s} b={r['batch']:<3d} prompt {r['prompt_len']:<5d} TTFT measured "
                      f"{r['ttft_s'] * 1e3:7.2f} ms model {pt[i] / mt[i] - 1:+7.1%}; TPOT measured "
                      f"{r['tpot_s'] * 1e3:7.2f} ms model {pp[i] / mp[i] - 1:+7.1%}")
        split = np.asarray([r["split"] for r in hf])
        for name, p_, m_ in (("hf TTFT", pt, mt), ("hf TPOT", pp, mp)):
            p_, m_ = np.asarray(p_), np.asarray(m_)
            for part in ("holdout", "fit"):
                m = split == part
                print(f"{name:>8} {part:>7}: model    {stats(p_[m], m_[m])}, signed median "
                      f"{summary(p_[m], m_[m])['signed']:+.1%}")
            group_table(f"{name} by model", [r["shape"] for r in hf], p_, m_, split)


def hf_times(rows: list[dict], gpu: str = "h200", calibration=None, host=None) -> tuple[np.ndarray, np.ndarray]:
    """Model TTFT and TPOT [s] of the eager HF ``generate`` rows (``engine == "hf"``), in order."""
    ttft, tpot = np.zeros(len(rows)), np.zeros(len(rows))
    for i, r in enumerate(rows):
        g = generation_time(hf_config(r), gpu, batch_size=r["batch"], prompt_len=r["prompt_len"],
                            new_tokens=r["new_tokens"], engine="hf", calibration=calibration, host=host)
        ttft[i], tpot[i] = g.ttft_s, g.tpot_s
    return ttft, tpot


def fit_constants(path: Path) -> None:
    """Least-squares (relative error) values of the two per-kernel/per-op constants on the FIT rows only.

    The graph engine's step is linear in ``GRAPH_LAUNCH_S``: ``t = body + n_kernels * g`` (+ all-reduces),
    so ``g = sum(n/m (1 - body/m)) / sum((n/m)^2)``. The HF engine's host-bound TPOT is
    ``n_ops * HOST_OP_S + HOST_STEP_S``; both are fitted the same way on the HF rows of the fit split.
    """
    from gpumodel.serving import kernels as K
    from gpumodel.serving.steps import host_ops

    gpu = gm.gpu("h200")
    rows = [r for r in load_measured(path) if r["split"] == "fit"]
    lean = [r for r in rows if r["engine"] == "graph"]
    saved = K.GRAPH_LAUNCH_S
    K.GRAPH_LAUNCH_S = 0.0
    num = den = 0.0
    try:
        for r in lean:
            cfg = lean_config(r)
            t = (decode_step_time(cfg, gpu, batch_size=r["batch"], context_len=r["context_len"]) if r["kind"] == "decode"
                 else prefill_time(cfg, gpu, batch_size=r["batch"], prompt_len=r["prompt_len"]))
            m, body, n = r["seconds"], float(t), t.kernels
            num += n / m * (1 - body / m)
            den += (n / m) ** 2
    finally:
        K.GRAPH_LAUNCH_S = saved
    if den:
        print(f"GRAPH_LAUNCH_S fitted on {len(lean)} fit rows: {num / den * 1e6:.3f} us (now {saved * 1e6:.3f} us)")
    hf = [r for r in rows if r["engine"] == "hf"]
    if hf:
        n_ops = np.array([host_ops(hf_config(r), prefill=False) for r in hf], dtype=float)
        tpot = np.array([r["tpot_s"] for r in hf])
        A = np.stack([n_ops / tpot, 1.0 / tpot], axis=1)
        (op_s, step_s), *_ = np.linalg.lstsq(A, np.ones_like(tpot), rcond=None)
        print(f"HOST_OP_S, HOST_STEP_S fitted on {len(hf)} HF fit rows (TPOT): {op_s * 1e6:.2f} us, "
              f"{step_s * 1e3:.3f} ms (now {K.HOST_OP_S * 1e6:.2f} us, {K.HOST_STEP_S * 1e3:.3f} ms)")


# ------------------------------------------------------------------------------------------ published
#: how the published engines run a step (module notes)
PUBLISHED_ENGINE = "compiled"


def gpt_fast_section(show_rows: bool) -> tuple[np.ndarray, np.ndarray]:
    print("== gpt-fast README, batch-1 decode on 8x A100-80GB (330 W), prompt 5, 200 new tokens ==")
    pred, ref, unfused = [], [], []
    with open(DATA / "gpt_fast_a100.csv") as f:
        for r in csv.DictReader(f):
            kw = dict(batch_size=1, prompt_len=5, new_tokens=200, dtype=r["dtype"], tp=int(r["tp"]),
                      group_size=int(r["group_size"] or 128))
            g = generation_time(MODELS[r["model"]], "a100-sxm4-80gb", engine=PUBLISHED_ENGINE, **kw)
            unfused.append(generation_time(MODELS[r["model"]], "a100-sxm4-80gb", engine="graph", **kw).tokens_per_s)
            pred.append(g.tokens_per_s), ref.append(float(r["tokens_per_s"]))
            if show_rows:
                print(f"  {r['model']:15s} {r['dtype']:5s} tp={r['tp']}: published {ref[-1]:7.2f} tok/s, "
                      f"model {pred[-1]:7.2f} ({pred[-1] / ref[-1] - 1:+6.1%})")
    print(f"{'gpt-fast':>16}: {stats(pred, ref)}")
    print(f"{'(unfused graph)':>16}: {stats(unfused, ref)}")
    return np.asarray(pred), np.asarray(ref)


def trtllm_section(show_rows: bool) -> tuple[np.ndarray, np.ndarray]:
    print("== TensorRT-LLM v0.17 perf overview: offline max throughput (output tokens/s of the TP group) ==")
    pred, ref, skipped, unfused = [], [], 0, []
    with open(DATA / "trtllm_v0.17_throughput.csv") as f:
        for r in csv.DictReader(f):
            model = MODELS[r["model"]]
            for col, (gpu, dt) in TRT_GPUS.items():
                if not r[col]:
                    continue
                if gpu is None or model is None:
                    skipped += 1
                    continue
                kw = dict(prompt_len=int(r["input_len"]), output_len=int(r["output_len"]), dtype=dt, kv_dtype=dt,
                          tp=int(r["tp"]))
                cap = serving_capacity(model, gpu, engine=PUBLISHED_ENGINE, **kw)
                unfused.append(serving_capacity(model, gpu, engine="graph", **kw).output_tokens_per_s)
                pred.append(cap.output_tokens_per_s), ref.append(float(r[col]))
                if show_rows:
                    print(f"  {r['model']:14s} tp={r['tp']} {r['input_len']:>5}/{r['output_len']:<5} {gpu:15s} "
                          f"published {ref[-1]:9.0f}, model {pred[-1]:9.0f} ({pred[-1] / ref[-1] - 1:+6.1%}) "
                          f"conc {cap.concurrency} ({cap.limiter})")
    print(f"{'TensorRT-LLM':>16}: {stats(pred, ref)} ({skipped} cells skipped: a model (Mixtral 8x22B) or GPU (GH200) not in the catalog)")
    print(f"{'(unfused graph)':>16}: {stats(unfused, ref)}")
    return np.asarray(pred), np.asarray(ref)


def layer_time(r: dict, engine: str) -> float:
    """Model time of one decoder layer of a row's shape: the two-layer step less the one-layer step [s]."""
    t = []
    for layers in (1, 2):
        cfg = lean_config({**r, "layers": layers})
        if r["kind"] == "decode":
            t.append(float(decode_step_time(cfg, "h200", batch_size=r["batch"], context_len=r["context_len"],
                                            engine=engine).seconds))
        else:
            t.append(float(prefill_time(cfg, "h200", batch_size=r["batch"], prompt_len=r["prompt_len"],
                                        engine=engine).seconds))
    return t[1] - t[0]


def compiled_rows(path: Path) -> list[dict]:
    """The paired layer timings of ``compiled.jsonl`` (``layer_s_compiled``, ``layer_s_graph`` [s])."""
    return [r for r in load_measured(path) if r.get("status") == "ok" and r.get("engine") == "compiled"]


def compiled_section(path: Path, show_rows: bool) -> tuple[np.ndarray, np.ndarray]:
    """One decoder layer on the H200 as a CUDA graph of PyTorch's kernels and torch.compile'd (compiled.jsonl)."""
    rows = compiled_rows(path)
    print(f"== one decoder layer on the H200, unfused CUDA graph and torch.compile'd ({path.name}, {len(rows)} rows) ==")
    pred, meas, pg, mg = [], [], [], []
    for r in rows:
        pred.append(layer_time(r, "compiled")), meas.append(r["layer_s_compiled"])
        pg.append(layer_time(r, "graph")), mg.append(r["layer_s_graph"])
        if show_rows:
            size = r.get("context_len", r.get("prompt_len"))
            print(f"  {r['shape']:13s} {r['kind']:7s} b={r['batch']:<3d} {size:6d}: compiled {meas[-1] * 1e6:8.1f} us, "
                  f"model {pred[-1] * 1e6:8.1f} ({pred[-1] / meas[-1] - 1:+6.1%}); speed-up over unfused measured "
                  f"{mg[-1] / meas[-1]:.2f}, model {pg[-1] / pred[-1]:.2f}")
    print(f"{'compiled':>16}: {stats(pred, meas)}")
    print(f"{'unfused graph':>16}: {stats(pg, mg)}")
    return np.asarray(pred), np.asarray(meas)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", type=Path, default=DATA / "measured.jsonl")
    ap.add_argument("--rows", action="store_true", help="print every row, not only the summaries")
    ap.add_argument("--fit", action="store_true", help="print the launch and host constants fitted on the fit rows")
    ap.add_argument("--gpu", default=None, help="the GPU --measured ran on (default h200); another prints only the "
                                                "measured section")
    ap.add_argument("--calibration", default=None, help="a calibration YAML of that GPU (default: the shipped one)")
    ap.add_argument("--host", default=None, help="a host-cost YAML (default: the shipped one of that GPU)")
    args = ap.parse_args(argv)
    if args.gpu or args.calibration or args.host:
        from gpumodel.calibration.record import load_calibration

        cal = load_calibration(args.calibration) if args.calibration else None
        measured_section(args.measured, args.rows, args.gpu or "h200", cal, args.host)
        return 0
    if args.fit and args.measured.exists():
        fit_constants(args.measured)
    if args.measured.exists():
        measured_section(args.measured, args.rows)
    else:
        print(f"(no measured data at {args.measured.name}: run bench/measure_serving.py on an H200)")
    if (DATA / "compiled.jsonl").exists():
        compiled_section(DATA / "compiled.jsonl", args.rows)
    gpt_fast_section(args.rows)
    trtllm_section(args.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
