"""Measured decoder layers, fused as Megatron-Core runs them and eager as Hugging Face runs them, against the model.

Reads what ``bench/measure_fused_layer.py`` writes and prices each row's layer the way the parallel step does
(:func:`gpumodel.cluster.shard.shard_times`: kernels at the sustained clock of back-to-back work, one micro-batch,
bf16 weights): the ``fused`` rows with ``framework="megatron"`` (the eager layer's memory-bound kernels scaled to
the fused kernels' bytes), the ``hf`` rows with ``framework="hf"``. It prints per row the measured and modelled
forward and forward-plus-backward time of one layer, their errors, and the speed-up of fusion measured (eager over
fused, same shape, same run) and modelled: the ratio tells whether the fused-bytes scaling holds, whatever the
clock; then the medians per variant, and the attention kernel's time with dropout over without, measured (the model
prices no attention dropout). The layer's modelled time includes no launch gaps (the step adds them apart), so short
layers read slightly fast.

    python bench/fused_layer_accuracy.py FILE [--gpu h100-sxm] [--calibration FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gpumodel as gm  # noqa: E402
from gpumodel.cluster.shard import shard_times  # noqa: E402

#: the framework whose kernels price each measured variant
FRAMEWORK = {"fused": "megatron", "hf": "hf"}


def load(path: Path) -> tuple[dict, list[dict]]:
    """The file's environment record and its measured rows (status ok)."""
    env, rows = {}, []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if "environment" in r:
            env = r["environment"]
        elif r.get("status") == "ok":
            rows.append(r)
    return env, rows


def layer_config(row: dict) -> gm.TransformerConfig:
    """A one-layer Llama of the row's shape (no tensor parallelism: a slice's shape is measured as a whole layer)."""
    return gm.TransformerConfig(name=f"{row['shape']}-layer", hidden_size=row["hidden"], num_layers=1,
                                num_heads=row["heads"], num_kv_heads=row["kv_heads"], head_dim=row["head_dim"],
                                intermediate_size=row["ffn"], vocab_size=32000, mlp="gated", activation="silu",
                                norm="rmsnorm", position="rope")


def modelled(row: dict, gpu, calibration=None) -> dict:
    """The model's forward and forward-plus-backward time of one layer of ``row`` [s]."""
    st = shard_times(layer_config(row), gpu, row["batch"], row["seq"], 1, "bf16", "sgd", FRAMEWORK[row["variant"]],
                     calibration=calibration, attention_kernel="sdpa")
    return {"forward_s": st.layer_forward, "step_s": st.layer_forward + st.layer_backward}


def table(rows: list[dict], gpu, calibration=None) -> list[dict]:
    """Per row: measured and modelled times [s], errors, and the speed-up of fusion (eager over fused)."""
    out = []
    for r in rows:
        if r["variant"] not in FRAMEWORK:          # the attention kernels alone: dropout_ratios
            continue
        m = modelled(r, gpu, calibration)
        out.append(dict(shape=r["shape"], batch=r["batch"], seq=r["seq"], variant=r["variant"],
                        measured_forward_s=r["layer_forward_s"], measured_step_s=r["layer_step_s"],
                        model_forward_s=m["forward_s"], model_step_s=m["step_s"],
                        forward_error=m["forward_s"] / r["layer_forward_s"] - 1,
                        step_error=m["step_s"] / r["layer_step_s"] - 1))
    for f, h in _pairs(out, "fused", "hf"):
        f["speedup_measured"] = h["measured_step_s"] / f["measured_step_s"]
        f["speedup_model"] = h["model_step_s"] / f["model_step_s"]
    return out


def _pairs(rows: list[dict], a: str, b: str) -> list[tuple[dict, dict]]:
    """The rows of variants ``a`` and ``b`` of each measured shape (shape, batch, sequence) that has both."""
    by: dict[tuple, dict] = {}
    for r in rows:
        by.setdefault((r["shape"], r["batch"], r["seq"]), {})[r["variant"]] = r
    return [(v[a], v[b]) for v in by.values() if a in v and b in v]


def dropout_ratios(rows: list[dict]) -> list[dict]:
    """Per shape, the attention kernel's forward-and-backward time with dropout over without (measured) [1]."""
    return [dict(shape=off["shape"], batch=off["batch"], seq=off["seq"], ratio=on["layer_step_s"] / off["layer_step_s"])
            for off, on in _pairs(rows, "attention", "attention_dropout")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--gpu", help="the GPU to price on (default: the file's device)")
    ap.add_argument("--calibration", help="a calibration record (YAML) to price with")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    env, rows = load(args.file)
    gpu = gm.gpu(args.gpu or env.get("device_name") or "h100")
    res = table(rows, gpu, args.calibration)
    if args.json:
        print(json.dumps({"gpu": gpu.name, "environment": env, "rows": res, "dropout": dropout_ratios(rows)},
                         indent=1))
        return 0
    print(f"one decoder layer on {env.get('device_name', '?')}, priced on {gpu.name}: measured / model [ms], error")
    print(f"{'shape':<16} {'b':>2} {'seq':>5} {'variant':<6} {'forward':>17} {'err':>7} {'fwd+bwd':>17} {'err':>7}  "
          "fusion speed-up measured / model")
    for r in res:
        sp = (f"  {r['speedup_measured']:.3f} / {r['speedup_model']:.3f}" if "speedup_measured" in r else "")
        print(f"{r['shape']:<16} {r['batch']:>2} {r['seq']:>5} {r['variant']:<6} "
              f"{r['measured_forward_s'] * 1e3:7.3f} / {r['model_forward_s'] * 1e3:7.3f} {r['forward_error']:+7.1%} "
              f"{r['measured_step_s'] * 1e3:7.3f} / {r['model_step_s'] * 1e3:7.3f} {r['step_error']:+7.1%}{sp}")
    for variant in ("fused", "hf"):
        e = [r["step_error"] for r in res if r["variant"] == variant]
        if e:
            print(f"{variant:<6} ({FRAMEWORK[variant]}): fwd+bwd median |error| {statistics.median(map(abs, e)):.1%}, "
                  f"signed {statistics.median(e):+.1%} over {len(e)} rows")
    drop = dropout_ratios(rows)
    for r in drop:
        print(f"attention with dropout 0.1 over without, {r['shape']} b{r['batch']} s{r['seq']}: {r['ratio']:.3f} "
              "(the model prices no dropout: 1)")
    s = [(r["speedup_measured"], r["speedup_model"]) for r in res if "speedup_measured" in r]
    if s:
        print(f"fusion speed-up, median: measured {statistics.median(a for a, _ in s):.3f}, "
              f"modelled {statistics.median(b for _, b in s):.3f} ({len(s)} shapes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
