"""Every time function prices its kernels with the user's own calibration (``calibration=``: a record or a YAML
path) and, where its time includes the host's dispatch, the user's host costs (``host=``)."""

from __future__ import annotations

import dataclasses

import pytest

import gpumodel as gm
from gpumodel.calibration.record import calibration_for
from gpumodel.training.hostcost import host_costs_for
from gpumodel.training.hostfit import save_host_costs

GPU = "h200"
SHIPPED = calibration_for(GPU)
SLOW_MEMORY = SHIPPED.model_copy(update={"parameters": {**SHIPPED.parameters,
                                                        "bandwidth": SHIPPED.parameters["bandwidth"] / 2}})
OTHER_GPU = SHIPPED.model_copy(update={"gpu": "h100-sxm"})


def _prefill(**kw):
    return gm.prefill_time("llama-3.2-1b", GPU, batch_size=2, prompt_len=256, **kw).seconds


def _decode(**kw):
    return gm.decode_step_time("llama-3-8b", GPU, batch_size=1, context_len=1024, **kw).seconds


def _generation(**kw):
    return gm.generation_time("llama-3.2-1b", GPU, batch_size=2, prompt_len=128, new_tokens=16, **kw).seconds


def _capacity(**kw):
    cap = gm.serving_capacity("llama-3.2-1b", GPU, prompt_len=512, output_len=64, tpot_slo=0.02, **kw)
    return 1.0 / cap.output_tokens_per_s     # seconds per generated token: slower is larger


def _step(**kw):
    return gm.training_step_time("llama-3.2-1b", GPU, batch_size=2, seq_len=512, **kw).seconds


def _parallel_step(**kw):
    return gm.training_step_time("llama-3.2-1b", GPU, batch_size=2, seq_len=512, framework="megatron",
                                 parallelism=gm.Parallelism(dp=2, tp=2), **kw).seconds


def _training_time(**kw):
    return gm.training_time("llama-3.2-1b", GPU, tokens="1B", batch_size=2, seq_len=512, **kw).seconds


def _plan(**kw):
    plan = gm.plan_training("gpt2", GPU, tokens="1B", global_batch=8, seq_len=512, num_gpus=4, top=3,
                            micro_batches=(1, 2), virtual_stages=(1,), **kw)
    return plan.best["seconds"]


FUNCTIONS = {"prefill_time": _prefill, "decode_step_time": _decode, "generation_time": _generation,
             "serving_capacity": _capacity, "training_step_time": _step, "parallel_training_step_time": _parallel_step,
             "training_time": _training_time, "plan_training": _plan}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_shipped_record_passed_explicitly_is_the_default(name):
    f = FUNCTIONS[name]
    assert f(calibration=SHIPPED) == f()


@pytest.mark.parametrize("name", FUNCTIONS)
def test_half_the_bandwidth_is_slower(name):
    f = FUNCTIONS[name]
    assert f(calibration=SLOW_MEMORY) > f()


def test_memory_bound_decode_slows_by_most_of_the_bandwidth():
    assert 1.4 < _decode(calibration=SLOW_MEMORY) / _decode() < 2.0


@pytest.mark.parametrize("name", FUNCTIONS)
def test_a_path_works_like_the_record(name, tmp_path):
    f = FUNCTIONS[name]
    path = SLOW_MEMORY.save(tmp_path / "slow.yaml")
    assert f(calibration=str(path)) == f(calibration=path) == f(calibration=SLOW_MEMORY)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_another_gpus_calibration_is_refused(name):
    with pytest.raises(gm.ArgumentError, match="calibration") as err:
        FUNCTIONS[name](calibration=OTHER_GPU)
    assert err.value.argument == "calibration"


def test_the_planner_cache_keeps_calibrations_apart():
    first = _plan()
    slow = _plan(calibration=SLOW_MEMORY)
    again = _plan()
    assert slow > first == again
    assert _plan(calibration=SLOW_MEMORY.model_copy()) == slow       # an equal record: the same cached answer


def test_calibrated_false_is_the_datasheet():
    assert _decode(calibrated=False) != _decode()
    assert _prefill(calibrated=False) != _prefill()


# ---- host costs


def _hf_decode(**kw):
    return gm.decode_step_time("llama-3.2-1b", GPU, batch_size=1, context_len=128, engine="hf", **kw)


def test_serving_host_costs_scale_the_fitted_dispatch(tmp_path):
    shipped = host_costs_for("h200-sxm")
    base = _hf_decode()
    assert base.host_bound                       # a small model on eager HF: the host sets the step
    assert _hf_decode(host=shipped).seconds == base.seconds
    slow = dataclasses.replace(shipped, op_nograd_s=2 * shipped.op_nograd_s)
    t = _hf_decode(host=slow)
    assert t.host_s == pytest.approx(2 * base.host_s) and t.seconds > base.seconds
    path = tmp_path / "host.yaml"
    save_host_costs(slow, path)
    assert _hf_decode(host=path).seconds == t.seconds
    gen = gm.generation_time("llama-3.2-1b", GPU, prompt_len=64, new_tokens=8, engine="hf", host=slow)
    assert gen.seconds > gm.generation_time("llama-3.2-1b", GPU, prompt_len=64, new_tokens=8, engine="hf").seconds


@pytest.mark.parametrize("engine", ["graph", "compiled"])
def test_graph_engines_refuse_host(engine):
    for f in (gm.prefill_time, gm.decode_step_time, gm.generation_time, gm.serving_capacity):
        with pytest.raises(gm.ArgumentError, match="host") as err:
            f("llama-3.2-1b", GPU, engine=engine, host=host_costs_for("h200-sxm"))
        assert err.value.argument == "host"


def test_training_host_costs_pass_through(tmp_path):
    shipped = host_costs_for("h200-sxm")
    slow = dataclasses.replace(shipped, op_s=4 * shipped.op_s, backward_op_s=4 * shipped.backward_op_s)
    assert _step(host=shipped) == _step()
    assert _training_time(host=shipped) == _training_time()
    assert _training_time(host=slow) > _training_time()
    path = tmp_path / "host.yaml"
    save_host_costs(slow, path)
    assert _training_time(host=path) == _training_time(host=slow)
    with pytest.raises(gm.ArgumentError, match="host"):
        _parallel_step(host=shipped)
    with pytest.raises(gm.ArgumentError, match="host"):
        _plan(host=shipped)                      # Megatron's host side is not modelled: refused, naming host
    # Hugging Face's eager loop: the planner's rows take the host's dispatch as their floor
    assert _plan(host=shipped, framework="hf") == _plan(framework="hf")
    assert _plan(host=path, framework="hf") == _plan(host=slow, framework="hf") > _plan(framework="hf")
