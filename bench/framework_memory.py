"""Memory per GPU of published training layouts under each training engine's memory model.

For every layout of ``tests/data/cluster/published_runs.csv`` (Megatron-LM SC21 Tables 1 and 2, the Megatron-LM
README's GPT-3 and H100 runs, MT-NLG 530B, MegaScale's Megatron-LM baseline, Llama 3 405B, ...), the
mixture-of-experts layouts below and the variants of :func:`variants`, it prints the memory one GPU needs
(``gm.training_memory(...).total_bytes``: allocated peak x allocator reserve + CUDA context + NCCL communicators;
Megatron-Core's parameter, gradient and optimizer buffers take no reserve) under the engine the run used (the CSV's ``framework``, with its ZeRO stage),
under ``framework="megatron"``, ``"fsdp"``, ``"deepspeed"`` and ``"hf"``, the stage and moment of the Megatron peak,
and whether it fits the card. A run published at that
layout did fit, so "megatron" should say yes for each (the memory models are not measured at these scales;
this is their check).

Mixture-of-experts layouts besides the CSV's (Megatron-Core's own reference mappings, with their virtual stages):

* Mixtral 8x7B and 8x22B: the Megatron-Core MoE README's reference parallel mappings of MCore v0.8
  (``megatron/core/transformer/moe/README.md``, "Reference Best Parallel Mapping"): 64 H100, sequence 4,096, TP1
  EP8 PP4 VP8, micro-batch 1, global batch 256; 128 H100, TP4 EP2 PP8 VP7, micro-batch 1, global batch 256; BF16,
  dropless all-to-all dispatcher, distributed optimizer (the README's example script).

Run: ``python bench/framework_memory.py [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpumodel as gm  # noqa: E402
from published_runs import config, load_rows, recompute_modules  # noqa: E402

FRAMEWORKS = ("megatron", "fsdp", "deepspeed", "hf")

#: mistralai/Mixtral-8x22B-v0.1 config.json
MIXTRAL_8X22B = {"model_type": "mixtral", "hidden_size": 6144, "intermediate_size": 16384, "num_hidden_layers": 56,
                 "num_attention_heads": 48, "num_key_value_heads": 8, "vocab_size": 32768, "num_local_experts": 8,
                 "num_experts_per_tok": 2, "max_position_embeddings": 65536, "tie_word_embeddings": False}


def moe_layouts() -> list[dict]:
    """The mixture-of-experts layouts (see the module notes) as rows of the same fields as the CSV's."""
    return [
        dict(source="mcore-moe-readme", label="Mixtral 8x7B 64 GPUs", system="dgx-h100", model="mixtral-8x7b",
             seq_len=4096, tp=1, pp=4, cp=1, dp=16, ep=8, global_batch=256, micro_batch=1, virtual_stages=8, zero=1,
             sequence_parallel=0, checkpointing="none", attention="flash", precision="amp_bf16"),
        dict(source="mcore-moe-readme", label="Mixtral 8x22B 128 GPUs", system="dgx-h100", model=MIXTRAL_8X22B,
             seq_len=4096, tp=4, pp=8, cp=1, dp=4, ep=2, global_batch=256, micro_batch=1, virtual_stages=7, zero=1,
             sequence_parallel=1, checkpointing="none", attention="flash", precision="amp_bf16"),
    ]


def variants(rows: list[dict]) -> list[dict]:
    """Each layout again as its publication describes what the model cannot take from the CSV: Llama 3's
    data-parallel ranks shard the gradients too (Dubey et al. 2024, section 3.3.2: FSDP "sharding optimizer states
    and gradients": ZeRO-2, here Megatron-FSDP's ``optim_grads``). DeepSeek-V3's row recomputes RMSNorm, the MLA
    up-projections and the MoE's SwiGLU (the report, sections 3.2.3 and 3.3.3; the CSV's ``recompute_modules``);
    beside it, the same layout without recomputation and with full recomputation, its bounds."""
    out = []
    for r in rows:
        if r["source"] == "llama3-405b" and r["label"] == "16384 GPUs":
            out.append(dict(r, zero=2, label=r["label"] + " ZeRO-2"))
        if r["source"] == "deepseek-v3" and r["checkpointing"] != "none":
            out.append(dict(r, checkpointing="none", recompute_modules="", label=r["label"] + " no recompute"))
        if r["source"] == "deepseek-v3" and r["checkpointing"] != "full":
            out.append(dict(r, checkpointing="full", recompute_modules="", label=r["label"] + " full ckpt"))
    return out


def model_of(row: dict) -> gm.TransformerConfig:
    """The row's model: a Hugging Face config of this script, or the CSV's (``published_runs.config``)."""
    model = row.get("model")
    if isinstance(model, dict):
        return gm.TransformerConfig.from_hf(model, name=f"{row['source']} {row['label'].split()[0]}")
    return config(row)


def memory(row: dict, cfg: gm.TransformerConfig, framework: str, own: bool = False) -> gm.TrainingMemory:
    """The memory of one GPU of the row's layout under ``framework``: with the row's ZeRO stage when ``own`` (the
    engine the run used), else with the stage that engine would run it at (FSDP full shard, ZeRO-1 under a
    DeepSpeed pipeline, at least ZeRO-1 otherwise)."""
    ckpt = {"none": False, "full": "full", "selective": "selective"}[row["checkpointing"]]
    zero = row["zero"]
    if own:
        pass
    elif framework == "fsdp":
        zero = 3            # FSDP full shard over the data-parallel ranks
    elif framework == "deepspeed" and row["pp"] > 1:
        zero = min(zero, 1)
    elif framework == "deepspeed":
        zero = max(zero, 1)
    par = gm.Parallelism(dp=row["dp"], tp=row["tp"], pp=row["pp"], cp=row["cp"], ep=row.get("ep") or 1,
                         virtual_stages=row["virtual_stages"] if framework == "megatron" else 1,
                         zero=zero if row["dp"] * row["cp"] > 1 else 0, sequence_parallel=bool(row["sequence_parallel"]))
    m = row["global_batch"] // (row["dp"] * row["micro_batch"])
    attention = "eager" if row["attention"] == "naive" else "flash"
    split = row.get("stage_layers") or ""
    first, last = (int(x) for x in split.split("/")) if split else (None, None)
    return gm.training_memory(cfg, row["micro_batch"], row["seq_len"], precision=row["precision"], checkpointing=ckpt,
                              attention=attention, gradient_accumulation_steps=m, parallelism=par, framework=framework,
                              first_stage_layers=first, last_stage_layers=last, **megatron_options(row, framework))


def megatron_options(row: dict, framework: str) -> dict:
    """The row's Transformer Engine fp8, gradient format, recomputed submodules and pipeline schedule, which only the
    Megatron-Core memory model takes."""
    if framework != "megatron":
        return {}
    modules = recompute_modules(row) if row["checkpointing"] == "selective" else None
    return dict(fp8=bool(row.get("fp8")), grad_reduce_dtype=row.get("grad_reduce") or None, recompute_modules=modules,
                pipeline_schedule=row.get("schedule") or "1f1b")


def table(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        cfg = model_of(row)
        gpu = gm.gpu(gm.system(row["system"]).gpu_name)
        own = row.get("framework") or "megatron"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mems = {fw: memory(row, cfg, fw) for fw in FRAMEWORKS}
            mems["own"] = memory(row, cfg, own, own=True)
        meg = mems["megatron"]
        out.append(dict(source=row["source"], label=row["label"], framework=own, gpu=gpu.name,
                        usable_bytes=gpu.usable_memory_bytes,
                        layout=_layout(row), checkpointing=row["checkpointing"],
                        total_bytes={fw: float(m.total_bytes) for fw, m in mems.items()},
                        peak_bytes={fw: float(m.peak_bytes) for fw, m in mems.items()},
                        megatron_breakdown={k: float(v) for k, v in meg.breakdown.items()},
                        megatron_peak=f"{meg.peak_moment}@{meg.peak_stage}",
                        fits={fw: bool(m.total_bytes <= gpu.usable_memory_bytes) for fw, m in mems.items()}))
    return out


def _layout(row: dict) -> str:
    lay = f"tp{row['tp']} pp{row['pp']}" + (f"x{row['virtual_stages']}" if row["virtual_stages"] > 1 else "")
    lay += (f" cp{row['cp']}" if row["cp"] > 1 else "") + (f" ep{row['ep']}" if (row.get("ep") or 1) > 1 else "")
    return lay + f" dp{row['dp']}" + (f" z{row['zero']}" if row["zero"] else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = load_rows() + moe_layouts()
    out = table(rows + variants(rows))
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        return 0
    gib = 2**30
    print(f"{'run':<34} {'layout':<24} {'ckpt':<9} {'GPU':<9} {'own engine':>19} "
          + " ".join(f"{fw:>9}" for fw in FRAMEWORKS) + "  megatron peak (GiB: weights/grads/states/activations)")
    for r in out:
        cells = " ".join(f"{r['total_bytes'][fw] / gib:>8.1f}{'' if r['fits'][fw] else '!'}" for fw in FRAMEWORKS)
        own = f"{r['framework']} {r['total_bytes']['own'] / gib:.1f}{'' if r['fits']['own'] else '!'}"
        bd = r["megatron_breakdown"]
        parts = "/".join(f"{bd.get(k, 0.0) / gib:.1f}" for k in ("weights", "gradients", "optimizer_states",
                                                                  "activations"))
        print(f"{r['source'] + ' ' + r['label']:<34.34} {r['layout']:<24} {r['checkpointing']:<9} {r['gpu']:<9} "
              f"{own:>19} {cells}  {r['megatron_peak']} ({parts})")
    fit_own = sum(r["fits"]["own"] for r in out)
    fit_meg = sum(r["fits"]["megatron"] for r in out)
    print(f"\nGiB per GPU (total: allocated peak x {gm.core.memory.RESERVE_FACTOR} + CUDA context + NCCL communicators; "
          "under Megatron-Core its buffers take no reserve); '!' = above the "
          f"card's usable memory. {fit_own} of {len(out)} published layouts fit under the engine they ran on, "
          f"{fit_meg} under Megatron-Core.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
