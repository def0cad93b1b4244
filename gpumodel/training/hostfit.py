"""Per-op host costs of eager PyTorch: measure them with torch on this machine and fit a :class:`HostCosts`.

The measurements are microbenchmarks only (no training steps): a tight loop of single ops on tiny
tensors, with and without autograd recording and under autocast; chains of ops and their
``.backward()``; ``nn.Module`` call overhead; ``opt.step()`` over 8, 64 and 256 small tensors for
each optimizer implementation; ``clip_grad_norm_``; ``zero_grad``; an ``.item()`` round trip; and
the GPU's floor per tiny kernel (CUDA-graph replay). Each is a JSON-able row
``{"kind": "host", "bench": ..., "host_per_op_s": ...}``, the format ``bench/measure_step_time.py``
writes, and :func:`fit_host_costs` turns rows into a :class:`~gpumodel.training.hostcost.HostCosts`:

* ``op_s``: median over the kernel-launching ops of the per-call host time with autograd recording;
  ``op_nograd_s`` the same without; ``view_s`` a view; ``autocast_s`` the median extra under autocast;
* ``module_s``: ``nn.Linear(x)`` minus ``F.linear(x, w, b)``;
* ``backward_op_s``: median per-op host time of ``.backward()`` over the chains;
* optimizer, clipping, ``zero_grad``: least-squares line ``a + b * tensors`` per implementation
  (``optimizer_step`` rows and the ``optimizer_sweep`` rows of the smallest tensors);
* ``expert_forward_s``, ``expert_backward_s``: tiny MoE models with ``experts_implementation="eager"``
  at two expert counts (:func:`_expert_loop`);
* ``compile_launch_s``, ``compile_forward_s``, ``compile_backward_s``: tiny ``torch.compile``d models
  of two depths with their kernels profiled (:func:`_compiled`).
* ``gemm_shape_s``, ``gemm_shape_k_s``: ``F.linear`` and a weight-gradient ``mm`` at row counts (contraction
  lengths) never seen before minus the same calls at a cached shape (``gemm_shape_*`` rows).

Examples
--------
>>> rows = [{"kind": "host", "bench": "op_add", "grad": True, "host_per_op_s": 1e-5},
...         {"kind": "host", "bench": "op_add", "grad": False, "host_per_op_s": 6e-6}]
>>> hc = fit_host_costs(rows)
>>> hc.op_s, hc.op_nograd_s, hc.calibrated
(1e-05, 6e-06, True)
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import replace
from typing import Any, Iterable

import numpy as np
import yaml

from .hostcost import DEFAULT_HOST, HostCosts
from ..records.transformer import TransformerConfig
from .stepplan import step_plan

__all__ = ["fit_host_costs", "combine_host_costs", "load_rows", "save_host_costs", "measure_host"]

# not one kernel-launching op each: views, syncs (nonzero), fused or compound ops (gather / index_add of ``idx % 8``)
_NOT_KERNEL_OPS = {"op_view", "op_nonzero", "op_sdpa", "op_topk", "op_where_mask", "op_gather_rows", "op_index_add",
                   "op_one_hot"}


def load_rows(path: str | os.PathLike) -> list[dict]:
    """The rows of a JSON-lines file (blank lines skipped)."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    if len(points) < 2:
        return None
    x, y = np.array(points, float).T
    slope, base = np.polyfit(x, y, 1)
    return max(float(base), 0.0), max(float(slope), 0.0)


#: host times a run may not measure (the compiled and eager-expert paths, cuBLAS's choice of a new GEMM shape,
#: checkpointing's hooks, syncs): per-op CPU work, which a faster CPU does faster in proportion
_CPU_TIMES = ("op_nograd_s", "view_s", "module_s", "autocast_s", "backward_op_s", "checkpoint_forward_s",
              "checkpoint_backward_s", "launch_s", "item_s", "nonzero_s", "compile_launch_s", "compile_forward_s",
              "compile_backward_s", "expert_forward_s", "expert_backward_s", "gemm_shape_s", "gemm_shape_k_s", "clip_s",
              "clip_tensor_s", "zero_grad_tensor_s")


def fit_host_costs(rows: Iterable[dict], source: str = "", base: HostCosts | None = None) -> HostCosts:
    """A :class:`HostCosts` from microbenchmark rows.

    Parameters
    ----------
    rows : iterable of dict
        Microbenchmark rows (``kind`` "host" or "layers"), as :func:`measure_host` or ``bench/measure_step_time.py``
        write them.
    source : str
        Where the rows come from, in words.
    base : HostCosts, optional
        What the fields without rows keep (default :data:`~gpumodel.training.hostcost.DEFAULT_HOST`, as they are).
        Given a measured host (the shipped one of a GPU), its per-op CPU times the rows do not measure are carried
        to this host in proportion to the measured per-op cost ``op_s`` (a faster CPU dispatches every kind of call
        faster alike), and its per-layer scales of Hugging Face's Python glue (ratios) and the GPU's floor per tiny
        kernel are kept as they are.

    Returns
    -------
    HostCosts
        Per-op host costs [s] and per-layer scales [1].
    """
    rows = list(rows)
    layer_rows = [r for r in rows if r.get("kind") == "layers" and r.get("status", "ok") == "ok" and "hf_config" in r]
    plain_rows = [r for r in layer_rows if not r.get("compile") and not r.get("experts_requested")]
    rows = [r for r in rows if r.get("kind") == "host" and "error" not in r]
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["bench"], []).append(r)
    out: dict[str, Any] = {}

    def ops(grad: bool, autocast: bool) -> dict[str, float]:
        return {r["bench"]: r["host_per_op_s"] for r in rows if r["bench"].startswith("op_")
                and r["bench"] not in _NOT_KERNEL_OPS and bool(r.get("grad")) == grad
                and bool(r.get("autocast")) == autocast}

    plain, nograd, amp = ops(True, False), ops(False, False), ops(True, True)
    if plain:
        out["op_s"] = statistics.median(plain.values())
    if nograd:
        out["op_nograd_s"] = statistics.median(nograd.values())
    extra = [amp[k] - plain[k] for k in amp if k in plain]
    if extra:
        out["autocast_s"] = max(statistics.median(extra), 0.0)
    views = [r["host_per_op_s"] for r in by.get("op_view", []) if r.get("grad")]
    if views:
        out["view_s"] = views[0]
    mod, fun = by.get("module_linear"), by.get("functional_linear")
    if mod and fun:
        out["module_s"] = max(mod[0]["host_per_op_s"] - fun[0]["host_per_op_s"], 0.0)
    back = [r["host_per_op_s"] for b, rs in by.items() if b.startswith("backward_") for r in rs]
    if back:
        out["backward_op_s"] = statistics.median(back)
    ck_f, ck_b = [], []
    for b, rs in by.items():  # checkpointed chain minus the plain chain: the saved-tensor hooks' cost per op
        plain_chain = by.get("backward_" + b[len("checkpoint_"):]) if b.startswith("checkpoint_") else None
        if plain_chain and "host_fwd_per_op_s" in plain_chain[0]:
            pf, pb = plain_chain[0]["host_fwd_per_op_s"], plain_chain[0]["host_per_op_s"]
            ck_f.append(rs[0]["host_fwd_per_op_s"] - pf)
            ck_b.append(rs[0]["host_per_op_s"] - pb - rs[0]["host_fwd_per_op_s"])  # backward minus the recompute
    if ck_f:
        out["checkpoint_forward_s"] = max(statistics.median(ck_f), 0.0)
        out["checkpoint_backward_s"] = max(statistics.median(ck_b), 0.0)
    if by.get("launch_inplace_add_1elem"):
        out["launch_s"] = by["launch_inplace_add_1elem"][0]["host_per_op_s"]
    nonzero = [r["host_per_op_s"] for r in by.get("op_nonzero", []) if not r.get("grad")]
    if nonzero:
        out["nonzero_s"] = nonzero[0]
    if by.get("item_idle"):
        out["item_s"] = by["item_idle"][0]["host_per_op_s"]
    if by.get("graph_tiny_kernel"):
        out["kernel_floor_s"] = by["graph_tiny_kernel"][0]["wall_per_op_s"]
    optimizer = dict((DEFAULT_HOST if base is None else _carried(base, out)).optimizer)
    groups: dict[str, list[tuple[float, float]]] = {}
    small = min((r["numel"] for r in by.get("optimizer_sweep", [])), default=None)
    for r in by.get("optimizer_step", []) + [r for r in by.get("optimizer_sweep", []) if r["numel"] == small]:
        impl = "fused" if r.get("fused") else ("foreach" if r.get("foreach", True) else "forloop")
        groups.setdefault(f"{r['optimizer']}_{impl}", []).append((r["tensors"], r["host_per_op_s"]))
    for key, pts in groups.items():
        fit = _line(pts)
        if fit:
            optimizer[key] = fit
    if groups:
        out["optimizer"] = optimizer
    clip = _line([(r["tensors"], r["host_per_op_s"]) for r in by.get("clip_grad_norm", [])])
    if clip:
        out["clip_s"], out["clip_tensor_s"] = clip
    zero = _line([(r["tensors"], r["host_per_op_s"]) for r in by.get("zero_grad", [])])
    if zero:
        out["zero_grad_tensor_s"] = zero[1]
    for bench, name in (("gemm_shape_linear", "gemm_shape_s"), ("gemm_shape_weight_grad", "gemm_shape_k_s")):
        if by.get(bench):
            out[name] = max(statistics.median(r["new_s"] - r["cached_s"] for r in by[bench]), 0.0)
    out.update(_expert_loop(layer_rows))
    out.update(_compiled(layer_rows))
    start = DEFAULT_HOST if base is None else _carried(base, out)
    hc = replace(start, **out, layers={}, calibrated=bool(out), source=source or "fitted from host microbenchmarks")
    return replace(hc, layers=_layer_scales(hc, plain_rows) or (dict(base.layers) if base is not None else {}))


def _carried(base: HostCosts, measured: dict) -> HostCosts:
    """``base`` with its CPU times scaled by this host's measured ``op_s`` over its own (unscaled without one)."""
    ratio = measured["op_s"] / base.op_s if "op_s" in measured and base.op_s > 0 else 1.0
    times = {k: getattr(base, k) * ratio for k in _CPU_TIMES}
    optimizer = {k: (a * ratio, b * ratio) for k, (a, b) in base.optimizer.items()}
    return replace(base, **times, optimizer=optimizer)


def combine_host_costs(fits: list[HostCosts], source: str = "") -> HostCosts:
    """The mean of host costs fitted on several measurement runs of the same host, field by field.

    A host's per-op costs move from run to run (the median op 13 us in one run and 9 us in the next on the
    H200 machine); averaging the runs' fits keeps one run's state of the CPU out of the record. A field a
    run did not measure (equal to its default) is left out of that field's mean.

    Examples
    --------
    >>> a, b = fit_host_costs([{"kind": "host", "bench": "op_add", "grad": True, "host_per_op_s": 8e-6}]), \\
    ...     fit_host_costs([{"kind": "host", "bench": "op_add", "grad": True, "host_per_op_s": 12e-6}])
    >>> round(combine_host_costs([a, b]).op_s * 1e6, 3)
    10.0
    """
    fits = list(fits)
    if len(fits) == 1:
        return fits[0]
    out: dict[str, Any] = {}
    for name, default in DEFAULT_HOST.to_dict().items():
        if name in ("calibrated", "source", "layers", "optimizer"):
            continue
        vals = [getattr(f, name) for f in fits if getattr(f, name) != default]
        if vals:
            out[name] = float(np.mean(vals))
    optimizer = dict(DEFAULT_HOST.optimizer)
    for key, default in DEFAULT_HOST.optimizer.items():
        vals = [f.optimizer[key] for f in fits if tuple(f.optimizer.get(key, default)) != tuple(default)]
        if vals:
            optimizer[key] = tuple(float(x) for x in np.mean(np.array(vals, float), axis=0))
    layers: dict = {}
    for key in sorted({k for f in fits for k in f.layers}):
        entries = [f.layers[key] for f in fits if key in f.layers]
        layers[key] = {k: round(float(np.mean([e[k] for e in entries])), 4) for k in entries[0]}
    return replace(DEFAULT_HOST, **out, optimizer=optimizer, layers=layers,
                   calibrated=any(f.calibrated for f in fits), source=source or " + ".join(f.source for f in fits))


def _moe_layers(hf_config: dict) -> int:
    cfg = TransformerConfig.from_hf(hf_config)
    return cfg.num_layers - min(cfg.first_dense_layers, cfg.num_layers)


def _expert_loop(rows: list[dict]) -> dict:
    """Host time per iteration of the eager expert loop: tiny MoE models with 8 and 4 experts.

    The difference of the two models' forward (backward) host time over the difference of the loop's
    iterations, ``L_moe * E (1 - (1 - k/E)^T)`` (the experts expected to receive one of the ``T`` tokens'
    ``k`` choices), median over the families and depths.
    """
    eager = [r for r in rows if r.get("experts_requested") == "eager" and r.get("n_experts")]
    fwd, bwd = [], []
    for r in eager:
        if r["n_experts"] == min(x["n_experts"] for x in eager):
            continue
        base = [b for b in eager if b["shape"] == r["shape"] and b["layers"] == r["layers"]
                and b["n_experts"] < r["n_experts"] and bool(b["amp"]) == bool(r["amp"])]
        if not base:
            continue
        b = base[0]
        k, tokens = r["hf_config"].get("num_experts_per_tok", 2), r.get("tokens", 16)
        hits = [e * (1 - (1 - k / e) ** tokens) for e in (r["n_experts"], b["n_experts"])]
        iters = _moe_layers(r["hf_config"]) * (hits[0] - hits[1])
        if iters > 0:
            fwd.append((r["host_forward_s"] - b["host_forward_s"]) / iters)
            bwd.append((r["host_backward_s"] - b["host_backward_s"]) / iters)
    if not fwd:
        return {}
    return {"expert_forward_s": max(statistics.median(fwd), 0.0), "expert_backward_s": max(statistics.median(bwd), 0.0)}


def _compiled(rows: list[dict]) -> dict:
    """Host time per launch of a compiled graph and per compiled call: tiny compiled models of 2 and 4 layers.

    Per family and phase the host time against the kernels launched (profiled) is a line: its slope is
    the launch of one generated kernel, the median over families and phases; what is left of each
    model's host time is the call's fixed cost, the median per phase.
    """
    comp = [r for r in rows if r.get("compile") and all(
        isinstance(r.get("profile", {}).get(ph), dict) and r["profile"][ph].get("kernels") for ph in ("forward", "backward"))]
    slopes = []
    for r in comp:
        for b in comp:
            if b["shape"] == r["shape"] and b["layers"] < r["layers"] and bool(b["amp"]) == bool(r["amp"]):
                for ph in ("forward", "backward"):
                    dk = r["profile"][ph]["kernels"] - b["profile"][ph]["kernels"]
                    if dk > 0:
                        slopes.append((r[f"host_{ph}_s"] - b[f"host_{ph}_s"]) / dk)
    if not slopes:
        return {}
    launch = max(statistics.median(slopes), 0.0)
    fixed = {ph: statistics.median(max(r[f"host_{ph}_s"] - launch * r["profile"][ph]["kernels"], 0.0) for r in comp)
             for ph in ("forward", "backward")}
    return {"compile_launch_s": launch, "compile_forward_s": fixed["forward"], "compile_backward_s": fixed["backward"]}


def _plan_host(hc: HostCosts, hf_config: dict, amp: bool, ckpt: bool = False) -> dict[str, float]:
    """Per-op host seconds of forward and backward of a tiny model (batch 1 x 16 tokens, as measured)."""
    cfg = TransformerConfig.from_hf(hf_config)
    out = {"forward": 0.0, "backward": 0.0}
    for block in step_plan(cfg, 1, 16, "amp_bf16" if amp else "fp32", "adamw", ckpt, host=hc):
        if block.phase in out:
            out[block.phase] += block.repeat * sum(k[1] for k in block.kernels)
    return out


def _layer_scales(hc: HostCosts, rows: list[dict]) -> dict:
    """Measured over per-op host time of the tiny models, pooled over the families (key ``"*"``).

    The ratio is the Python glue of Hugging Face's modeling code per dispatched op (module calls,
    views, asserts, autocast's bookkeeping), much the same across families; each tiny model is timed
    once, so single models are noisy (their 2- and 4-layer difference more so) and the median over all
    models of one autocast / checkpointing setting is kept, for the whole forward and the whole backward.
    """
    groups: dict[tuple[bool, bool], dict[str, list[float]]] = {}
    for r in rows:
        try:
            model = _plan_host(hc, r["hf_config"], bool(r["amp"]), bool(r.get("checkpointing")))
        except Exception:  # noqa: BLE001 - a family the reader does not know is left out
            continue
        g = groups.setdefault((bool(r["amp"]), bool(r.get("checkpointing"))), {"forward": [], "backward": []})
        for phase in ("forward", "backward"):
            if model[phase] > 0 and r[f"host_{phase}_s"] > 0:
                g[phase].append(r[f"host_{phase}_s"] / model[phase])
    scales = {}
    for (amp, ckpt), g in groups.items():
        if g["forward"] and g["backward"]:
            f, b = round(statistics.median(g["forward"]), 4), round(statistics.median(g["backward"]), 4)
            scales["*" + ("/amp" if amp else "") + ("/ckpt" if ckpt else "")] = {
                "forward": f, "backward": b, "fixed_forward": f, "fixed_backward": b}
    return scales


def save_host_costs(hc: HostCosts, path: str | os.PathLike, header: dict | None = None) -> None:
    """Write ``hc`` as a host-cost YAML file (``host:`` mapping, optional header fields beside it)."""
    data = {k: v for k, v in hc.to_dict().items()}
    doc = dict(header or {})
    doc["host"] = {k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in data.items()}
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False, width=110)


def measure_host(device: str = "cuda", n: int = 2000) -> list[dict]:  # pragma: no cover - needs torch
    """Run the host microbenchmarks with torch on this machine; rows for :func:`fit_host_costs`."""
    import torch
    import torch.nn.functional as F

    rows: list[dict] = []

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def per_call(fn, calls: int, reps: int = 5) -> float:
        times = []
        for _ in range(reps):
            sync()
            t0 = _now()
            for _ in range(calls):
                fn()
            times.append((_now() - t0) / calls)
        sync()
        return statistics.median(times)

    a = torch.zeros(1, device=device)
    rows.append({"kind": "host", "bench": "launch_inplace_add_1elem", "host_per_op_s": per_call(lambda: a.add_(1.0), n)})
    for grad in (False, True):
        x = torch.randn(8, 64, device=device, requires_grad=grad)
        w = torch.randn(64, 64, device=device, requires_grad=grad)
        fns = {"op_add": lambda: x + x, "op_mul_scalar": lambda: x * 2.0, "op_linear": lambda: F.linear(x, w),
               "op_silu": lambda: F.silu(x), "op_softmax": lambda: torch.softmax(x, -1),
               "op_to_bf16": lambda: x.to(torch.bfloat16), "op_view": lambda: x.view(8, 4, 16)}
        for name, fn in fns.items():
            rows.append({"kind": "host", "bench": name, "grad": grad, "host_per_op_s": per_call(fn, n)})
    lin = torch.nn.Linear(64, 64, device=device)
    x = torch.randn(8, 64, device=device)
    rows.append({"kind": "host", "bench": "module_linear", "grad": True, "host_per_op_s": per_call(lambda: lin(x), n)})
    rows.append({"kind": "host", "bench": "functional_linear", "grad": True,
                 "host_per_op_s": per_call(lambda: F.linear(x, lin.weight, lin.bias), n)})
    chain = max(n // 10, 20)
    for name, fn in {"mul_scalar": lambda z: z * 1.0001, "silu": F.silu}.items():
        times = []
        for _ in range(5):
            z = x0 = torch.randn(8, 64, device=device, requires_grad=True)
            for _ in range(chain):
                z = fn(z)
            loss = z.sum()
            sync()
            t0 = _now()
            loss.backward()
            times.append((_now() - t0) / chain)
            del x0
        rows.append({"kind": "host", "bench": f"backward_{name}", "host_per_op_s": statistics.median(times)})
    for nt in (8, 64, 256):
        params = [torch.nn.Parameter(torch.randn(4096, device=device)) for _ in range(nt)]
        for p in params:
            p.grad = torch.randn_like(p)
        for opt_name, kw in (("adamw", {"foreach": True}), ("adamw", {"foreach": False}), ("sgd", {"foreach": True}),
                             ("sgd", {"foreach": False})) + ((("adamw", {"fused": True}),) if device == "cuda" else ()):
            cls = torch.optim.AdamW if opt_name == "adamw" else torch.optim.SGD
            opt = cls(params, lr=1e-4, **kw)
            opt.step()
            rows.append({"kind": "host", "bench": "optimizer_step", "optimizer": opt_name, "tensors": nt, **kw,
                         "host_per_op_s": per_call(opt.step, 5)})
        rows.append({"kind": "host", "bench": "clip_grad_norm", "tensors": nt,
                     "host_per_op_s": per_call(lambda: torch.nn.utils.clip_grad_norm_(params, 1.0), 5)})
    if device == "cuda":
        one = torch.ones(1, device=device)
        rows.append({"kind": "host", "bench": "item_idle", "host_per_op_s": per_call(one.item, 30)})
    return rows


def _now() -> float:
    return time.perf_counter()
