"""The published-layout ranking (bench/plan_published.py) says where a layout only fits with more recomputation."""

from benchscript import load_bench


def _rows():
    return {(r["source"], r["label"]): r for r in load_bench("published_runs").load_rows()}


def test_a_layout_that_fits_only_with_more_recomputation_is_marked():
    mod = load_bench("plan_published")
    rows = _rows()
    # Llama 3 405B at 8K tokens ran without recomputation; Megatron's memory model cannot hold that on 80 GB, so the
    # planner's copy of the layout recomputes and ranks far down
    llama = mod.rank_row(rows[("llama3-405b", "8192 GPUs")])
    assert llama["more_recompute"] is True and llama["rank"] > 10
    # SC21's 1.7B recomputed every layer; the planner's best variant of the same layout recomputes less: not marked
    small = mod.rank_row(rows[("megatron-sc21", "1.7B")])
    assert small["more_recompute"] is False and small["rank"] == 1
