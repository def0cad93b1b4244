"""plan_training's search: what each engine runs, the deadline and budget, near-duplicates, every row's fields."""

import math

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.cluster.plan import COST_DAYS, NEAR_DUPLICATE
from gpumodel.cluster.plansearch import MOE_EP_GPUS

KW = dict(tokens="1T", global_batch=256, seq_len=4096)


def _rows(framework, **kw):
    return gm.plan_training("llama-3-8b", "dgx-h100", framework=framework, top=None, **{**KW, **kw}).rows


@pytest.fixture(scope="module")
def megatron():
    return gm.plan_training("llama-3-8b", "dgx-h100", max_gpus=64, top=None, **KW)


def _all(rows):   # the rows and the settings folded into them
    for r in rows:
        yield r
        for c in r["collapsed"]:
            yield {**r, **c}


def test_megatron_rules(megatron):
    rows = list(_all(megatron.rows))
    assert rows and all(r["zero"] <= 1 for r in rows)                         # the distributed optimizer: ZeRO-1
    assert all(r["pp"] == 1 or r["gradient_accumulation_steps"] >= r["pp"] for r in rows)   # a micro-batch a stage
    inter = [r for r in rows if r["virtual_stages"] > 1]
    assert inter and all(r["gradient_accumulation_steps"] % r["pp"] == 0 for r in inter)    # interleaved: multiple
    assert all(32 % (r["pp"] * r["virtual_stages"]) == 0 for r in inter)                    # chunks divide the layers
    assert {r["checkpointing"] for r in rows} == {"none", "selective", "full"}
    assert {r["comm_overlap"] for r in rows} == {False, True}
    assert all(r["zero"] == 0 or r["dp"] * r["cp"] > 1 for r in rows)


def test_the_other_engines_run_their_own_settings():
    ds = list(_all(_rows("deepspeed", max_gpus=64)))
    assert any(r["zero"] >= 2 for r in ds) and not any(r["zero"] >= 2 and r["pp"] > 1 for r in ds)
    assert {r["checkpointing"] for r in ds} <= {"none", "full"} and not any(r["virtual_stages"] > 1 for r in ds)
    fsdp = list(_all(_rows("fsdp", max_gpus=64)))
    assert {r["zero"] for r in fsdp} <= {0, 2, 3} and 3 in {r["zero"] for r in fsdp}
    hf = list(_all(gm.plan_training("llama-3.2-1b", "dgx-h100", framework="hf", num_gpus=8, top=None, **KW).rows))
    assert hf and all(r["tp"] == r["pp"] == r["cp"] == 1 and r["zero"] == 0 for r in hf)
    assert not any(r["comm_overlap"] for r in ds + fsdp + hf)


@pytest.mark.parametrize("framework, kw, name", [("megatron", dict(zero_stages=2), "zero_stages"),
                                                  ("deepspeed", dict(checkpointing="selective"), "checkpointing"),
                                                  ("hf", dict(tp=2), "tp"),
                                                  ("fsdp", dict(comm_overlap=True), "comm_overlap")])
def test_a_setting_the_engine_does_not_run_is_refused_naming_it(framework, kw, name):
    with pytest.raises(gm.ArgumentError) as info:
        gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=8, framework=framework, **KW, **kw)
    assert info.value.argument == name


def test_fixed_dimensions_are_kept():
    p = gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=[16, 32], tp=2, pp=[1, 2], micro_batches=[1, 2],
                         checkpointing="full", top=None, **KW)
    rows = list(_all(p.rows))
    assert {r["num_gpus"] for r in rows} <= {16, 32} and {r["tp"] for r in rows} == {2}
    assert {r["pp"] for r in rows} <= {1, 2} and {r["micro_batch"] for r in rows} <= {1, 2}
    assert {r["checkpointing"] for r in rows} == {"full"} and p.gpu_counts == [16, 32]


def test_any_pipeline_degree_that_divides_the_gpus_with_uneven_stages():
    # 24 GPUs of llama-3-8b (32 layers): pp 3 (11, 11, 10 layers) and pp 6 are searched
    p = gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=24, global_batch=192, seq_len=4096, tokens="1T", top=None,
                         tp=[1, 2, 4, 8])
    assert {3, 6} <= {r["pp"] for r in _all(p.rows)}


def test_moe_models_get_expert_parallelism():
    # 8 experts on 64 GPUs: expert parallel only (MOE_EP_GPUS); on 32, ep = 1 too
    p = gm.plan_training("mixtral-8x7b", "dgx-h100", num_gpus=[32, 64], tokens="1T", global_batch=512, seq_len=4096,
                         top=None)
    eps = {r["num_gpus"]: set() for r in p.rows}
    for r in _all(p.rows):
        eps[r["num_gpus"]].add(r["ep"])
        assert (r["dp"] * r["cp"]) % r["ep"] == 0
    assert 1 not in eps[64] and eps[64] <= {2, 4, 8} and len(eps[64]) > 1
    assert MOE_EP_GPUS == 64 and 1 in eps.get(32, {1})


def test_cost_without_a_deadline_is_capped_and_says_so():
    # without the cap the cheapest run is the one on the fewest GPUs, for years (64 GPUs for 2,727 days)
    p = gm.plan_training("llama-3-70b", "dgx-h100", max_gpus=1024, objective="cost", top=5, tokens="2T",
                         global_batch=1024, seq_len=8192)
    assert p.max_days == COST_DAYS and all(r["days"] <= COST_DAYS for r in p.rows)
    assert any("at most 90 days" in n for n in p.notes)
    hours = [r["gpu_hours"] for r in p.rows]
    assert hours == sorted(hours)
    late = gm.plan_training("llama-3-70b", "dgx-h100", max_gpus=1024, objective="cost", top=5, tokens="2T",
                            global_batch=1024, seq_len=8192, max_days=365)
    assert late.max_days == 365 and late.rows[0]["gpu_hours"] <= hours[0] and not late.notes[:0]


def test_deadline_and_budget():
    p = gm.plan_training("llama-3-8b", "dgx-h100", max_gpus=64, top=None, max_days=40, **KW)
    assert p.rows and all(r["days"] <= 40 for r in _all(p.rows))
    priced = gm.plan_training("llama-3-8b", "dgx-h100", max_gpus=64, top=None, price_per_gpu_hour=2.0, budget=60_000,
                              **KW)
    assert priced.rows and all(r["cost"] <= 60_000 for r in priced.rows)
    with pytest.raises(gm.ArgumentError) as info:
        gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=8, budget=1e6, **KW)
    assert info.value.argument == "budget"


def test_near_duplicates_are_folded_into_the_simplest_setting(megatron):
    folded = [r for r in megatron.rows if r["collapsed"]]
    assert folded and megatron.collapsed == sum(len(r["collapsed"]) for r in megatron.rows)
    for r in folded:
        for c in r["collapsed"]:
            fastest = min([r["seconds"]] + [x["seconds"] for x in r["collapsed"]])
            assert c["seconds"] <= fastest * (1 + NEAR_DUPLICATE) + 1e-12
            assert (r["zero"], r["virtual_stages"], r["comm_overlap"]) <= (c["zero"], c["virtual_stages"],
                                                                           c["comm_overlap"])
    # of the rows left of one layout, only the kept one is within 1% of that layout's fastest setting
    fastest = {}
    key = lambda r: (r["num_gpus"], r["dp"], r["tp"], r["pp"], r["cp"], r["ep"], r["micro_batch"], r["checkpointing"])
    for r in megatron.rows:
        fastest[key(r)] = min([fastest.get(key(r), np.inf), r["seconds"]] + [c["seconds"] for c in r["collapsed"]])
    near = {}
    for r in megatron.rows:
        if r["seconds"] <= fastest[key(r)] * (1 + NEAR_DUPLICATE) + 1e-12:
            near[key(r)] = near.get(key(r), 0) + 1
    assert set(near.values()) == {1}


def test_every_row_states_its_rates_and_uncertainty(megatron):
    cfg = gm.model("llama-3-8b")
    peak = gm.gpu("h100").peak_flops("bf16")
    for r in megatron.rows[:20]:
        tokens = 256 * 4096
        assert r["tokens_per_s_per_gpu"] == pytest.approx(tokens / r["seconds"] / r["num_gpus"])
        assert r["tflops_per_gpu"] * 1e12 == pytest.approx(r["mfu"] * peak)
        assert r["hfu"] >= r["mfu"] and (r["hfu"] > r["mfu"]) == (r["checkpointing"] != "none")
        assert r["energy_kwh"] == pytest.approx(gm.system("dgx-h100").gpu_power_watts * r["gpu_hours"] / 1e3)
        assert 0.05 < r["expected_error"] < 0.3 and r["headroom_bytes"] >= 0
        assert r["bound"] in ("compute", "communication", "pipeline bubble", "optimizer", "recompute")
    assert megatron.source == "transferred" and megatron.expected_error == megatron.rows[0]["expected_error"]
    assert cfg.num_layers == 32


def test_a_list_of_gpu_counts():
    p = gm.plan_training("llama-3-8b", "dgx-h100", num_gpus=range(8, 33, 8), top=None, **KW)
    assert p.gpu_counts == [8, 16, 24, 32] and {r["num_gpus"] for r in p.rows} <= {8, 16, 24, 32}
    assert math.isclose(p.rows[0]["dp"] * p.rows[0]["tp"] * p.rows[0]["pp"] * p.rows[0]["cp"], p.rows[0]["num_gpus"])


def test_to_dict_echoes_the_inputs(megatron):
    d = megatron.to_dict()
    for key in ("model", "system", "gpu", "tokens", "global_batch", "seq_len", "objective", "framework", "precision",
                "optimizer", "attention_kernel", "price_per_gpu_hour", "currency", "max_days", "budget", "gpu_counts",
                "searched", "source", "expected_error", "candidates", "feasible", "collapsed", "rows"):
        assert key in d, key
    assert d["gpu_counts"] == [1, 2, 4, 8, 16, 32, 64] and isinstance(d["rows"][0], dict)
    assert np.isfinite(d["search_s"])
