"""plan_training: the vectorised search agrees with the full composition; it is fast; it ranks."""

import time
import warnings

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.cluster.step import parallel_training_step_time

KW = dict(tokens="1T", global_batch=256, seq_len=4096)


@pytest.fixture(scope="module")
def plan():
    return gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=32, top=None, **KW)


def test_rows_are_valid_and_ranked(plan):
    # every feasible layout is a row, or folded into one as a near-duplicate
    assert plan.feasible == len(plan.rows) + plan.collapsed and len(plan.rows) > 10
    assert plan.candidates >= plan.feasible
    assert sum(len(r["collapsed"]) for r in plan.rows) == plan.collapsed
    times = [r["seconds"] for r in plan.rows]
    assert times == sorted(times)
    for r in plan.rows[:20]:
        assert r["dp"] * r["tp"] * r["pp"] * r["cp"] == 32 and r["headroom_bytes"] >= 0
        assert r["micro_batch"] * r["gradient_accumulation_steps"] * r["dp"] == 256
        assert r["days"] == pytest.approx(r["seconds"] * 1e12 / (256 * 4096) / 86400, rel=1e-3)


def test_vectorised_model_matches_the_full_composition(plan):
    # the planner interpolates the shard's kernel times in the micro-batch; the step evaluates them exactly
    rows = plan.rows[:: max(1, len(plan.rows) // 25)]
    for r in rows:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gm.DoesNotFitWarning)
            st = parallel_training_step_time("llama-3-8b", "dgx-h100", r["micro_batch"], 4096,
                                             checkpointing=r["checkpointing"],
                                             gradient_accumulation_steps=r["gradient_accumulation_steps"],
                                             parallelism=plan.parallelism(plan.rows.index(r)), framework="megatron",
                                             comm_overlap=r["comm_overlap"])
        # the shards' kernels are evaluated exactly (not interpolated): the same numbers
        assert r["seconds"] == pytest.approx(st.seconds, rel=1e-6), r
        assert r["peak_bytes"] == pytest.approx(st.peak_bytes, rel=1e-6), r
        assert r["mfu"] == pytest.approx(st.mfu, rel=1e-6) and r["hfu"] == pytest.approx(st.hfu, rel=1e-6), r


def test_hundred_thousand_candidates_in_seconds():
    kw = dict(tokens="1T", global_batch=4096, seq_len=8192, max_gpus=4096)
    gm.plan_training("llama-3-70b", "dgx-h100", **kw)  # evaluates the shard shapes once (cached)
    t0 = time.perf_counter()
    p = gm.plan_training("llama-3-70b", "dgx-h100", **kw)
    elapsed = time.perf_counter() - t0
    assert p.candidates >= 100_000   # Megatron's layouts: ZeRO-1 at most, a micro-batch for each pipeline stage
    assert elapsed < 3.0   # about 0.2 s once warm on 2 cores (bench/plan_speed.py); generous for loaded CI machines


def test_objective_cost_and_price():
    p = gm.plan_training("llama-3-8b", "dgx-h100", max_gpus=64, objective="cost", price_per_gpu_hour=2.0, top=5, **KW)
    hours = [r["gpu_hours"] for r in p.rows]
    assert hours == sorted(hours) and p.rows[0]["cost"] == pytest.approx(2.0 * hours[0])
    assert "<table>" in p._repr_html_() and "layouts fit" in repr(p)
    assert p.to_dict()["rows"][0] == p.best


def test_errors():
    with pytest.raises(gm.ArgumentError, match="objective"):
        gm.plan_training("llama-3-8b", "dgx-h100", objective="speed", **KW)
    with pytest.raises(gm.ArgumentError, match="tokens"):
        gm.plan_training("llama-3-8b", "dgx-h100", tokens="lots", global_batch=8, seq_len=128)


@pytest.mark.parametrize("argument", ["global_batch", "seq_len", "max_gpus", "top", "price_per_gpu_hour"])
def test_scalar_only_arguments_refuse_arrays(argument):
    # global_batch=np.array([512, 1024]) crashed with numpy's broadcast error (num_gpus takes a list: the counts)
    kw = dict(KW, **{argument: np.array([8, 16])})
    with pytest.raises(gm.ArgumentError, match=f"plan_training takes one {argument}") as info:
        gm.plan_training("llama-3-8b", "dgx-h100", **kw)
    assert info.value.argument == argument and info.value.allowed == "one value, not an array"


def test_searched_values_must_be_a_flat_list():
    with pytest.raises(gm.ArgumentError, match="micro_batches must be one value or a flat list") as info:
        gm.plan_training("llama-3-8b", "dgx-h100", micro_batches=[np.array([1, 2])], **KW)
    assert info.value.argument == "micro_batches"


def test_parallelism_of_a_row_out_of_range_names_rank_and_the_row_count():
    p = gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=8, top=3, **KW)
    assert len(p.rows) == 3 and p.parallelism(2).num_gpus == 8
    for bad in (3, 999, -1):
        with pytest.raises(gm.ArgumentError, match=f"rank={bad} is out of range: the plan has 3 rows") as info:
            p.parallelism(bad)
        assert (info.value.argument, info.value.value, info.value.allowed) == ("rank", bad, "an int from 0 to 2 (3 rows)")
    for bad in ("0", 1.0, True, None):
        with pytest.raises(gm.ArgumentTypeError, match="rank must be an int") as info:
            p.parallelism(bad)
        assert info.value.argument == "rank"


def test_the_repr_has_column_headers_and_a_legend():
    p = gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=8, top=7, **KW)
    lines = repr(p).splitlines()
    assert lines[0].startswith("TrainingPlan(llama-3-8b on dgx-h100 (megatron), 1T tokens, batch 256 x 4096 tokens;")
    assert lines[1].split() == ["#", "GPUs", "layout", "recompute", "mb", "x", "acc", "step", "s", "tok/s/GPU", "TFLOP/s",
                                "MFU", "HFU", "days", "GPU-h", "MWh", "free", "GiB", "+-", "bound"]   # no price: no cost
    assert set(lines[2].strip()) == {"-", " "}
    assert lines[3].split()[:2] == ["1", "8"] and len(lines[3:8]) == 5   # five rows, then how many more
    assert lines[8].strip() == "... 2 more rows"
    legend = " ".join(line.strip() for line in lines[9:])
    assert "mb x acc: micro-batch [sequences] x accumulation steps" in legend and "cost:" not in legend
    assert max(len(line) for line in lines) <= 140
    priced = repr(gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=8, top=2, price_per_gpu_hour=2.5, currency="EUR",
                                   **KW))
    assert "cost EUR" in priced and "cost: GPU-hours x 2.5 EUR" in " ".join(priced.split())


def test_the_search_keeps_to_what_each_engine_runs():
    # Megatron's distributed optimizer is ZeRO-1; DeepSpeed's pipeline engine refuses ZeRO-2/3; a pipeline of p stages
    # needs p micro-batches a step (fewer leaves stages idle: the bubble formula no longer holds)
    kw = dict(tokens=1e12, global_batch=64, seq_len=4096, max_gpus=64, top=None)
    rows = gm.plan_training("llama-3-8b", "dgx-h100", **kw).rows
    assert rows and all(r["zero"] <= 1 for r in rows)
    assert all(r["pp"] == 1 or r["gradient_accumulation_steps"] >= r["pp"] for r in rows)
    ds = gm.plan_training("llama-3-8b", "dgx-h100", framework="deepspeed", **kw).rows
    assert any(r["zero"] >= 2 for r in ds) and not any(r["zero"] >= 2 and r["pp"] > 1 for r in ds)


@pytest.mark.parametrize("framework, par, words", [
    ("megatron", dict(dp=8, zero=2), "ZeRO-1 at most"),
    ("deepspeed", dict(dp=4, pp=2, zero=2), "pipeline"),
])
def test_a_step_the_engine_does_not_run_is_refused(framework, par, words):
    with pytest.raises(gm.ArgumentError, match=words) as info:
        gm.training_step_time("llama-3-8b", "dgx-h100", batch_size=1, seq_len=4096, framework=framework,
                              parallelism=gm.Parallelism(**par), gradient_accumulation_steps=8)
    assert info.value.argument == "parallelism"


def test_fp8_and_attention_kernels_are_searched():
    """fp8=[False, True] and several attention libraries search each: the rows say which they run, every fp8 row
    is priced as the single-layout step prices it (fp8 GEMMs and memory, MFU against the fp8 peak), and a
    searched plan is at least as fast as either alone."""
    kw = dict(KW, num_gpus=16, top=None)
    both = gm.plan_training("llama-3-8b", "dgx-h100", fp8=[False, True], attention_kernel=["cudnn", "fa2"], **kw)
    assert {(r["fp8"], r["attention_kernel"]) for r in both.rows} == {(f, k) for f in (False, True)
                                                                      for k in ("cudnn", "fa2")}
    assert both.searched["fp8"] == [False, True] and both.searched["attention_kernel"] == ["cudnn", "fa2"]
    bf16 = gm.plan_training("llama-3-8b", "dgx-h100", attention_kernel="cudnn", **kw)
    assert both.rows[0]["seconds"] <= bf16.rows[0]["seconds"]
    assert both.candidates == 4 * bf16.candidates
    r = next(r for r in both.rows if r["fp8"] and r["attention_kernel"] == "cudnn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        st = parallel_training_step_time("llama-3-8b", "dgx-h100", r["micro_batch"], 4096,
                                         checkpointing=r["checkpointing"], attention_kernel="cudnn", fp8=True,
                                         gradient_accumulation_steps=r["gradient_accumulation_steps"],
                                         parallelism=gm.Parallelism(dp=r["dp"], tp=r["tp"], pp=r["pp"], cp=r["cp"],
                                                                    zero=r["zero"], sequence_parallel=r["tp"] > 1,
                                                                    virtual_stages=r["virtual_stages"]),
                                         framework="megatron", comm_overlap=r["comm_overlap"])
    assert r["seconds"] == pytest.approx(st.seconds, rel=0.02)
    assert r["mfu"] == pytest.approx(st.mfu, rel=0.02)
    assert st.mfu < st.model_flops / st.seconds / (16 * gm.gpu("h100-sxm").peak_flops("bf16"))   # fp8 peak
    assert "fp8" in gm.cluster.planresult.layout_label(r) and "cudnn" in str(both)


def test_fp8_refused_where_it_does_not_run():
    with pytest.raises(gm.ArgumentError, match="fp8"):
        gm.plan_training("llama-3-8b", "dgx-a100-80gb", fp8=True, num_gpus=8, **KW)
    with pytest.raises(gm.ArgumentError, match="fp8"):
        gm.plan_training("llama-3-8b", "dgx-h100", fp8=True, framework="fsdp", num_gpus=8, **KW)
    with pytest.raises(gm.ArgumentError, match="attention_kernel"):
        gm.plan_training("llama-3-8b", "dgx-h100", attention_kernel=["cudnn", "nope"], num_gpus=8, **KW)


def test_energy_objective_and_power_cap():
    """objective="energy" ranks by the run's energy (GPUs x the system's power per GPU x time); max_power_kw keeps
    the jobs that draw at most that (a DGX H100 draws 10.2 kW for 8 GPUs: 1.275 kW a GPU)."""
    kw = dict(KW, max_gpus=256, top=None)
    energy = gm.plan_training("llama-3-8b", "dgx-h100", objective="energy", **kw)
    e = [r["energy_kwh"] for r in energy.rows]
    assert e == sorted(e) and energy.max_days == pytest.approx(90)
    capped = gm.plan_training("llama-3-8b", "dgx-h100", max_power_kw=100, **kw)
    per_gpu = gm.system("dgx-h100").gpu_power_watts / 1e3
    assert capped.rows and all(r["power_kw"] <= 100 for r in capped.rows)
    assert max(r["num_gpus"] for r in capped.rows) == max(n for n in capped.gpu_counts if n * per_gpu <= 100)
    assert capped.to_dict()["max_power_kw"] == 100
    with pytest.raises(gm.ArgumentError, match="objective"):
        gm.plan_training("llama-3-8b", "dgx-h100", objective="carbon", **kw)


# ---------------------------------------------------------------------------------------------- pipeline schedules
MOE = dict(tokens="1T", global_batch=256, seq_len=4096, num_gpus=64, top=None)
SCHEDULES = ["1f1b", "zero_bubble", "dualpipe"]


@pytest.fixture(scope="module")
def schedules():
    return gm.plan_training("mixtral-8x7b", "dgx-h100", pipeline_schedule=SCHEDULES, **MOE)


def test_each_schedule_is_searched_on_the_layouts_it_runs(schedules):
    """Zero-bubble and DualPipe are not interleaved; DualPipe pairs the stages from both ends (even pp) and feeds
    half the micro-batches from each (an even number, at least 2 pp: DualPipe.step asserts it); layouts without a
    pipeline are rows of 1F1B alone, not repeated under each schedule."""
    rows = schedules.rows + [{**r, **c} for r in schedules.rows for c in r["collapsed"]]
    by = {s: [r for r in rows if r["pipeline_schedule"] == s] for s in SCHEDULES}
    assert all(by[s] for s in SCHEDULES) and len(rows) == schedules.feasible
    for r in by["zero_bubble"] + by["dualpipe"]:
        assert r["pp"] > 1 and r["virtual_stages"] == 1, r
    for r in by["dualpipe"]:
        assert r["pp"] % 2 == 0 and r["gradient_accumulation_steps"] % 2 == 0, r
        assert r["gradient_accumulation_steps"] >= 2 * r["pp"], r
    assert any(r["pp"] == 1 for r in by["1f1b"]) and any(r["virtual_stages"] > 1 for r in by["1f1b"])
    assert schedules.searched["pipeline_schedule"] == SCHEDULES
    assert schedules.pipeline_schedule == "1f1b,zero_bubble,dualpipe" == schedules.to_dict()["pipeline_schedule"]
    alone = {s: gm.plan_training("mixtral-8x7b", "dgx-h100", pipeline_schedule=s, **MOE) for s in SCHEDULES}
    assert schedules.candidates == sum(p.candidates for p in alone.values())
    assert alone["dualpipe"].candidates < alone["zero_bubble"].candidates < alone["1f1b"].candidates
    assert {r["pipeline_schedule"] for r in alone["dualpipe"].rows} == {"dualpipe"}
    assert "dualpipe" in gm.cluster.planresult.layout_label(by["dualpipe"][0]) and "pipeline schedule" in repr(schedules)


def step_of_row(model, plan, r, framework, **kw):
    """gm.training_step_time of a plan row on a DGX H100 at 4096 tokens (its layout, micro-batch, accumulation and
    recomputation; ``kw``: the other options)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        return gm.training_step_time(model, "dgx-h100", batch_size=r["micro_batch"], seq_len=4096,
                                     checkpointing=r["checkpointing"],
                                     gradient_accumulation_steps=r["gradient_accumulation_steps"],
                                     parallelism=plan.parallelism(plan.rows.index(r)), framework=framework, **kw)


def test_a_dualpipe_moe_row_is_priced_as_the_step_prices_it(schedules):
    """A DualPipe row of an expert-parallel Mixtral: the same step, memory and MFU as gm.training_step_time with the
    same options; DualPipe hides its all-to-alls and pipeline sends itself (planprice.SCHEDULE_OVERLAP), a row's
    overlap adds Megatron-Core's."""
    from gpumodel.cluster.planprice import SCHEDULE_OVERLAP

    rows = [r for r in schedules.rows if r["pipeline_schedule"] == "dualpipe" and r["ep"] > 1]
    picked = [next(r for r in rows if r["checkpointing"] == c) for c in ("selective", "full")]
    picked += [next(r for r in rows if r["comm_overlap"] != picked[0]["comm_overlap"])]
    for r in picked:
        hide = SCHEDULE_OVERLAP["dualpipe"] | ({"tp", "dp", "pp"} if r["comm_overlap"] else set())
        st = step_of_row("mixtral-8x7b", schedules, r, "megatron", comm_overlap=",".join(sorted(hide)),
                         pipeline_schedule="dualpipe")
        assert r["seconds"] == pytest.approx(st.seconds, rel=1e-9), r
        assert r["pipeline_bubble_s"] == pytest.approx(st.breakdown["pipeline_bubble"], rel=1e-9)
        assert r["peak_bytes"] == pytest.approx(st.peak_bytes, rel=1e-9)
        assert r["mfu"] == pytest.approx(st.mfu, rel=1e-9) and r["hfu"] == pytest.approx(st.hfu, rel=1e-9)


def test_dualpipe_rows_hold_two_stages_of_parameters():
    # the same layout under 1F1B and DualPipe: two copies of the stage's weights, gradients and states, pp + 1
    # micro-batches, so more memory; a smaller bubble
    kw = dict(MOE, pp=[4], ep=[8], tp=[1], cp=[1], micro_batches=[1], zero_stages=[1], checkpointing=["full"],
              comm_overlap=[False], virtual_stages=[1])
    one, dual = (gm.plan_training("mixtral-8x7b", "dgx-h100", pipeline_schedule=s, **kw).rows for s in
                 ("1f1b", "dualpipe"))
    assert len(one) == len(dual) == 1
    assert dual[0]["peak_bytes"] - one[0]["peak_bytes"] > gm.model("mixtral-8x7b").num_parameters() / 4 / 8
    assert dual[0]["pipeline_bubble_s"] < one[0]["pipeline_bubble_s"]


def test_recompute_modules_reach_every_selective_row():
    """recompute_modules: the selective rows' step and memory are the step's with those modules (their kernels run
    again, their tensors are dropped) and name them; rows without or with full recomputation ignore them. The
    default recomputes core_attn alone: adding the norms and the experts' activation runs more and keeps less."""
    kw = dict(MOE, pp=[1, 2], ep=[8], micro_batches=[1, 2])
    plain = gm.plan_training("mixtral-8x7b", "dgx-h100", **kw)
    named = gm.plan_training("mixtral-8x7b", "dgx-h100", recompute_modules="moe_act,core_attn+layernorm", **kw)
    assert named.recompute_modules == "core_attn,layernorm,moe_act" and plain.recompute_modules is None
    assert named.searched["recompute_modules"] == ["core_attn", "layernorm", "moe_act"]
    assert "recompute_modules" not in plain.searched
    assert {(r["checkpointing"], r["recompute_modules"]) for r in named.rows} == {
        ("selective", "core_attn,layernorm,moe_act"), ("full", None), ("none", None)}
    assert all(r["recompute_modules"] is None for r in plain.rows)
    key = ("num_gpus", "dp", "tp", "pp", "cp", "ep", "micro_batch", "zero", "checkpointing", "virtual_stages",
           "comm_overlap")
    before = {tuple(r[k] for k in key): r for r in plain.rows}
    pairs = [(r, before[tuple(r[k] for k in key)]) for r in named.rows if tuple(r[k] for k in key) in before]
    sel = [(a, b) for a, b in pairs if a["checkpointing"] == "selective"]
    assert sel and all(a["recompute_s"] > b["recompute_s"] and a["peak_bytes"] < b["peak_bytes"] for a, b in sel)
    assert all(a["seconds"] == b["seconds"] for a, b in pairs if a["checkpointing"] != "selective")
    r = sel[0][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        st = gm.training_step_time("mixtral-8x7b", "dgx-h100", batch_size=r["micro_batch"], seq_len=4096,
                                   checkpointing="selective", recompute_modules=["core_attn", "layernorm", "moe_act"],
                                   gradient_accumulation_steps=r["gradient_accumulation_steps"],
                                   parallelism=named.parallelism(named.rows.index(r)), framework="megatron",
                                   comm_overlap=r["comm_overlap"])
    assert r["seconds"] == pytest.approx(st.seconds, rel=1e-9) and r["peak_bytes"] == pytest.approx(st.peak_bytes)
    assert r["hfu"] == pytest.approx(st.hfu, rel=1e-9)


@pytest.mark.parametrize("kw, argument, words", [
    (dict(pipeline_schedule="gpipe"), "pipeline_schedule", "is not one of '1f1b', 'zero_bubble', 'dualpipe'"),
    (dict(pipeline_schedule=["1f1b", 3]), "pipeline_schedule", "is not one of"),
    (dict(pipeline_schedule=[]), "pipeline_schedule", "is empty"),
    (dict(pipeline_schedule="dualpipe", framework="fsdp"), "pipeline_schedule", "framework='megatron' only"),
    (dict(pipeline_schedule="dualpipe", pp=[1, 3]), "pipeline_schedule", "no layout"),
    (dict(recompute_modules="norm"), "recompute_modules", "is not one of"),
    (dict(recompute_modules="mla_up_proj"), "recompute_modules", "no MLA"),
    (dict(recompute_modules="moe_act", checkpointing="full"), "recompute_modules", "add 'selective'"),
    (dict(recompute_modules="moe_act", framework="deepspeed"), "recompute_modules", "framework='megatron'"),
])
def test_schedules_and_recompute_modules_are_refused_naming_the_argument(kw, argument, words):
    with pytest.raises(gm.ArgumentError, match=words) as info:
        gm.plan_training("mixtral-8x7b", "dgx-h100", **dict(MOE, **kw))
    assert info.value.argument == argument


def test_hf_rows_are_bounded_by_the_hosts_dispatch():
    """framework='hf': each row's step is at least the eager loop's host dispatch (one-GPU step plan, accumulation
    linear), and a row held there says so and changes with the host's costs."""
    from dataclasses import replace

    from gpumodel.training.hostcost import host_costs_for
    from gpumodel.training.stepplan import dispatch_seconds, step_plan

    args = dict(tokens="1B", global_batch=64, seq_len=512, framework="hf", num_gpus=[8], top=None)
    plan = gm.plan_training("llama-3.2-1b", "h100-sxm", **args)
    cfg, hc = gm.model("llama-3.2-1b"), host_costs_for("h100-sxm")
    for r in plan.rows:
        assert r["seconds"] >= r["host_s"] > 0
        assert r["host_bound"] == (r["bound"] == "host") == (r["seconds"] == r["host_s"])
    r = next(r for r in plan.rows if r["micro_batch"] == 2 and r["checkpointing"] == "none")
    m = r["gradient_accumulation_steps"]   # 64 / (8 x 2) = 4 micro-batches: the plan of the step itself
    assert m == 4
    direct = dispatch_seconds(step_plan(cfg, 2, 512, "amp_bf16", "adamw", False, host=hc, gradient_accumulation_steps=m),
                              hc.item_s)
    assert r["host_s"] == pytest.approx(direct, rel=1e-9)
    one = next(r for r in plan.rows if r["micro_batch"] == 8 and r["checkpointing"] == "none")   # 64 / (8 x 8) = 1
    assert one["gradient_accumulation_steps"] == 1
    assert one["host_s"] == pytest.approx(dispatch_seconds(step_plan(cfg, 8, 512, "amp_bf16", "adamw", False, host=hc),
                                                           hc.item_s), rel=1e-9)
    assert any(r["host_bound"] for r in plan.rows) and any("host-bound" in n for n in plan.notes)
    # a host twice as fast per op: host-bound rows get faster, none slower
    fast = replace(hc, **{f: getattr(hc, f) / 2 for f in ("op_s", "op_nograd_s", "view_s", "module_s")})
    quicker = gm.plan_training("llama-3.2-1b", "h100-sxm", host=fast, **args)
    key = lambda r: (r["micro_batch"], r["checkpointing"])  # noqa: E731
    before = {key(r): r["seconds"] for r in plan.rows}
    after = {key(r): r["seconds"] for r in quicker.rows}
    assert all(after[k] <= before[k] for k in before) and any(after[k] < before[k] for k in before)


def test_host_is_refused_where_the_engine_has_no_host_model():
    with pytest.raises(gm.ArgumentError, match="host"):
        gm.plan_training("llama-3-8b", "dgx-h100", tokens="1T", global_batch=512, seq_len=4096, num_gpus=64,
                         host=__file__)
    plan = gm.plan_training("llama-3-8b", "dgx-h100", tokens="1T", global_batch=512, seq_len=4096, num_gpus=64, top=3)
    assert all(r["host_bound"] is False and r["host_s"] is None for r in plan.rows)


def test_hsdp_rows_are_priced_as_the_step_prices_them():
    """FSDP's hybrid shard is searched beside the full shard: over the data-parallel ranks of a node where that is
    fewer than dp x cp; each HSDP row is the step and memory gm.training_step_time gives with its shard_group."""
    plan = gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=64, framework="fsdp", global_batch=256, seq_len=4096,
                            tokens=1e12, top=5000)
    hsdp = [r for r in plan.rows if r["shard_group"]]
    assert hsdp and all(r["zero"] >= 2 and r["shard_group"] < r["dp"] * r["cp"] for r in hsdp)
    assert all(r["shard_group"] == 8 // r["tp"] for r in hsdp if (r["dp"] * r["cp"]) % (8 // r["tp"]) == 0)
    assert all(r["shard_group"] is None for r in plan.rows if r["zero"] < 2)
    for r in hsdp[:: max(1, len(hsdp) // 8)]:
        st = step_of_row("llama-3-8b", plan, r, "fsdp", shard_group=r["shard_group"])
        assert r["seconds"] == pytest.approx(st.seconds, rel=1e-6), r
        assert r["peak_bytes"] == pytest.approx(st.peak_bytes, rel=1e-6), r
    from gpumodel.cluster.planresult import layout_label
    assert f"hsdp{hsdp[0]['shard_group']}" in layout_label(hsdp[0])


def test_hsdp_is_fsdp_alone_and_can_be_fixed():
    kw = dict(num_gpus=64, global_batch=256, seq_len=4096, tokens=1e12, top=500)
    on = gm.plan_training("llama-3-8b", "dgx-h100", framework="fsdp", hsdp=True, **kw)
    off = gm.plan_training("llama-3-8b", "dgx-h100", framework="fsdp", hsdp=False, **kw)
    assert on.rows and all(r["shard_group"] for r in on.rows)
    assert off.rows and not any(r["shard_group"] for r in off.rows)
    with pytest.raises(gm.ArgumentError, match="hsdp"):
        gm.plan_training("llama-3-8b", "dgx-h100", framework="megatron", hsdp=True, **kw)


def _reproduced(model, plan, rows):
    """Each row of ``rows`` against gm.training_step_time with the plan's step_arguments for it."""
    for r in rows:
        kw = plan.step_arguments(plan.rows.index(r))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gm.DoesNotFitWarning)
            st = gm.training_step_time(model, plan.system, **kw)
        assert r["seconds"] == pytest.approx(st.seconds, rel=1e-6), (r, kw)
        assert r["peak_bytes"] == pytest.approx(st.peak_bytes, rel=1e-6), (r, kw)
        assert r["mfu"] == pytest.approx(st.mfu, rel=1e-6), (r, kw)


def test_step_arguments_reproduce_megatron_fp8_and_dualpipe_rows(plan, schedules):
    # a dense Megatron plan (overlap on and off), fp8 rows, and DualPipe rows whose schedule hides the all-to-alls
    _reproduced("llama-3-8b", plan, plan.rows[:: max(1, len(plan.rows) // 12)])
    fp8 = gm.plan_training("llama-3-8b", "dgx-h100", tokens="1T", global_batch=256, seq_len=4096, num_gpus=16,
                           fp8=[False, "delayed"], top=None)
    for setting in (False, "delayed"):
        some = [r for r in fp8.rows if r["fp8"] == setting]
        _reproduced("llama-3-8b", fp8, some[:: max(1, len(some) // 4)])
    dual = [r for r in schedules.rows if r["pipeline_schedule"] == "dualpipe"]
    _reproduced("mixtral-8x7b", schedules, dual[:: max(1, len(dual) // 6)])
    kw = schedules.step_arguments(schedules.rows.index(dual[0]))
    assert {"ep", "pp"} <= set(kw["comm_overlap"].split(",")) and kw["pipeline_schedule"] == "dualpipe"


def test_step_arguments_carry_hsdp_recompute_modules_and_the_gradient_format():
    hsdp = gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=64, framework="fsdp", global_batch=256, seq_len=4096,
                            tokens=1e12, top=400)
    rows = [r for r in hsdp.rows if r["shard_group"]]
    assert rows and all(hsdp.step_arguments(hsdp.rows.index(r))["shard_group"] == r["shard_group"] for r in rows)
    _reproduced("llama-3-8b", hsdp, rows[:: max(1, len(rows) // 5)])
    sel = gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=16, global_batch=256, seq_len=4096, tokens=1e12,
                           checkpointing=["selective"], recompute_modules="core_attn,mlp", grad_reduce_dtype="bf16",
                           top=20)
    kw = sel.step_arguments(0)
    assert kw["grad_reduce_dtype"] == "bf16" and set(kw["recompute_modules"].split(",")) == {"core_attn", "mlp"}
    _reproduced("llama-3-8b", sel, sel.rows[::4])
    with pytest.raises(gm.ArgumentError, match="rank"):
        sel.step_arguments(len(sel.rows))
