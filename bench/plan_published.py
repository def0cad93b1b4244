"""Where the published layouts of the development runs rank in the planner's search.

For each run of ``tests/data/cluster/published_runs.csv`` (its model, system, GPU count, sequence, global
batch, framework, precision and attention library), ``gm.plan_training`` searches every layout the framework
runs on exactly that many GPUs; this prints where the published layout (its tensor, pipeline, context, data
and expert degrees, and its micro-batch and virtual stages where the source publishes them: elsewhere the CSV's
values are assumptions, and the best row of the published degrees stands for it) ranks among the planner's rows
(near-duplicates folded, as the planner shows them), the planner's pick and its modelled step time against the published layout's, and
whether the pick breaks a rule the engines or the physics set: ZeRO-2/3 with a pipeline, fewer micro-batches
than pipeline stages, a mixture of >= 8 experts on >= 64 GPUs without expert parallelism, MFU above 75%.

Each run is searched twice. First with every option of today's engine (the distributed optimizer, overlapped
communication, context parallelism). Then with the options the run's own engine offered (:data:`ENGINE_OPTIONS`):
Megatron-LM as the SC21 paper, its README's GPT-3 table and MT-NLG ran it (2021) had neither the distributed
optimizer (``--use-distributed-optimizer``, Megatron-LM 2022), nor overlapped gradient reduction
(``--overlap-grad-reduce``, 2023), nor context parallelism (``--context-parallel-size``, 2023); a layout that only a
later engine could run is no rival to what a team ran in 2021. The table ranks under the run's own engine; the
summary gives both counts.

The planner searches flash attention, with the run's fp8 GEMMs, gradient format and Megatron-Core recompute modules
where the CSV gives them (the NeMo fp8 rows, DeepSeek-V3's fp8 and its recomputed norms, MLA up-projections and
expert activations). A run of another pipeline schedule than 1F1B (DeepSeek-V3's DualPipe) is searched under both
1F1B and its own schedule: its published layout is ranked among the rows of its own schedule (the match requires
it), and the pick may be either. Where a run used something the planner does not search (the SC21 rows' unfused
attention, DeepSpeed's 2021 per-parameter ZeRO-3 gathers) the published layout is ranked under the planner's
assumptions. Times are modelled, not measured.

Run: ``python bench/plan_published.py [--json] [--role fit|check]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpumodel as gm  # noqa: E402
from gpumodel.cluster.plansearch import CHECKPOINTING  # noqa: E402
from published_runs import config, load_rows, recompute_modules  # noqa: E402

DEGREES = ("tp", "pp", "cp", "dp", "ep", "micro_batch", "virtual_stages")
#: Sources that publish their micro-batch, and their virtual pipeline stages (tests/data/cluster/published_runs.csv
#: says which values are assumed): elsewhere the published layout is its parallel degrees, matched with any
#: micro-batch and virtual stages.
MICRO_BATCH_PUBLISHED = {"megatron-sc21-t2", "megatron-readme-gpt3", "megatron-sc21-zero3", "megatron-moe-mixtral",
                         "nemo-24.07"}
VIRTUAL_STAGES_PUBLISHED = {"nemo-24.07"}
#: The search options of the engine a source ran, where it predates one of today's (``gm.plan_training`` keywords);
#: the module docstring gives the features' dates.
_MEGATRON_2021 = dict(zero_stages=[0], comm_overlap=[False], cp=[1])
ENGINE_OPTIONS = {"megatron-sc21": _MEGATRON_2021, "megatron-sc21-t2": _MEGATRON_2021,
                  "megatron-readme-gpt3": _MEGATRON_2021, "mtnlg-530b": _MEGATRON_2021}


def published_keys(source: str) -> tuple:
    """The fields a plan row must share with the published layout: the degrees, and the micro-batch and virtual
    stages where the source gives them."""
    return tuple(k for k in DEGREES if (k != "micro_batch" or source in MICRO_BATCH_PUBLISHED)
                 and (k != "virtual_stages" or source in VIRTUAL_STAGES_PUBLISHED))
RULES = ("ZeRO-2/3 with pp", "micro-batches < pp", "MoE without ep", "MFU > 75%")


def broken_rules(r: dict, cfg: gm.TransformerConfig) -> list[str]:
    """The rules a plan row breaks (see the module docstring)."""
    out = []
    if r["zero"] >= 2 and r["pp"] > 1:
        out.append(RULES[0])
    if r["pp"] > 1 and r["gradient_accumulation_steps"] < r["pp"]:
        out.append(RULES[1])
    if cfg.num_experts >= 8 and r["num_gpus"] >= 64 and r["ep"] == 1:
        out.append(RULES[2])
    if r["mfu"] > 0.75:
        out.append(RULES[3])
    return out


def rank_row(row: dict, own_engine: bool = True) -> dict:
    """Where the published layout of ``row`` ranks in the planner's rows, and the planner's pick; ``own_engine``:
    searched with the options of the run's engine (:data:`ENGINE_OPTIONS`), else with today's."""
    cfg = config(row)
    engine = ENGINE_OPTIONS.get(row["source"], {}) if own_engine else {}
    published = {k: row[k] or 1 for k in DEGREES}
    schedule = row["schedule"] or "1f1b"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        plan = gm.plan_training(cfg, row["system"], tokens=row["tokens"] or 1e12, global_batch=row["global_batch"],
                                seq_len=row["seq_len"], num_gpus=row["gpus"], framework=row["framework"],
                                precision=row["precision"], attention_kernel=row["attention_kernel"] or "sdpa",
                                fp8=row["fp8"] or False, grad_reduce_dtype=row["grad_reduce"] or None, top=None,
                                pipeline_schedule=list(dict.fromkeys(["1f1b", schedule])),
                                recompute_modules=recompute_modules(row), **engine)
    rank, match = None, None
    keys = published_keys(row["source"])
    for i, r in enumerate(plan.rows):
        # a row stands for the near-duplicates folded into it (same degrees and micro-batch, other virtual stages,
        # ZeRO stage or overlap within 1% of its step): the published layout may be one of those
        variants = [r] + [{**r, **c} for c in r.get("collapsed", [])]
        hit = next((v for v in variants if all(v[k] == published[k] for k in keys)
                    and v["pipeline_schedule"] == schedule), None)
        if hit is not None:
            rank, match = i + 1, hit
            break
    pick = plan.rows[0] if plan.rows else None
    layout = " ".join(f"{k}{published[k]}" for k in ("tp", "pp", "cp", "dp", "ep") if published[k] > 1 or k == "dp")
    return dict(source=row["source"], role=row["role"], label=row["label"], gpus=row["gpus"],
                published=f"{layout} mb{published['micro_batch']}" + (f" v{published['virtual_stages']}"
                                                                      if published["virtual_stages"] > 1 else "")
                + (f" {schedule}" if schedule != "1f1b" else ""),
                rank=rank, rows=len(plan.rows), candidates=plan.candidates,
                pick=None if pick is None else gm.cluster.planresult.layout_label(pick) + f" mb{pick['micro_batch']}",
                pick_s=None if pick is None else pick["seconds"], published_s=None if match is None else match["seconds"],
                gap=None if match is None or pick is None else match["seconds"] / pick["seconds"] - 1,
                pick_mfu=None if pick is None else pick["mfu"], broken=[] if pick is None else broken_rules(pick, cfg),
                more_recompute=None if match is None else   # the planner's recomputation modes, least to most
                CHECKPOINTING.index(match["checkpointing"]) > CHECKPOINTING.index(row["checkpointing"] or "none"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--role", choices=["fit", "check"])
    args = ap.parse_args(argv)
    rows = [r for r in load_rows() if args.role is None or r["role"] == args.role]
    out = [rank_row(r) for r in rows]
    today = [rank_row(r, own_engine=False) if r["source"] in ENGINE_OPTIONS else o for r, o in zip(rows, out)]
    if args.json:
        print(json.dumps({"own_engine": out, "today": today}, indent=2))
        return 0
    head = (f"{'run':<42} {'GPUs':>6}  {'published layout':<28} {'rank':>5} {'of':>6}  {'+step':>6}  "
            f"{'planner pick':<30} {'MFU':>5}  rules broken")
    print(head)
    print("-" * len(head))
    for r in out:
        rank = "-" if r["rank"] is None else str(r["rank"]) + ("*" if r["more_recompute"] else "")
        gap = "-" if r["gap"] is None else f"{r['gap']:+.1%}"
        mfu = "-" if r["pick_mfu"] is None else f"{r['pick_mfu']:.0%}"
        print(f"{(r['source'] + ' ' + r['label'])[:42]:<42} {r['gpus']:>6}  {r['published']:<28} {rank:>5} "
              f"{r['rows']:>6}  {gap:>6}  {str(r['pick'])[:30]:<30} {mfu:>5}  {', '.join(r['broken']) or 'none'}")
    print()
    for name, res in (("the run's own engine", out), ("today's engine", today)):
        ranked = [r for r in res if r["rank"] is not None]
        top10 = sum(1 for r in ranked if r["rank"] <= 10 or (r["gap"] is not None and r["gap"] <= 0.10))
        print(f"{name}: runs {len(res)}; published layout found and fitting in {len(ranked)}; in the top 10 or within "
              f"10% of the pick's step: {top10}; median rank "
              f"{statistics.median(r['rank'] for r in ranked) if ranked else '-'}; "
              f"picks breaking a rule: {sum(1 for r in res if r['broken'])}")
    print("(+step: the published layout's modelled step over the pick's; '-' rank: not searched, or does not fit; "
          "'*': the published layout ranks with more recomputation than the run used, which alone fits it here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
