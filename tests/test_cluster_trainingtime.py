"""training_time: steps, days, GPU-hours, energy and cost."""

import warnings

import pytest

import gpumodel as gm
from gpumodel.cluster.trainingtime import parse_tokens
from gpumodel.vocabulary import token_count


def test_single_gpu_arithmetic():
    run = gm.training_time("llama-3.2-1b", "h200", tokens=1e9, batch_size=8, seq_len=1024, price_per_gpu_hour=3.0)
    step = run.step
    assert run.steps == -(-int(1e9) // (8 * 1024))
    assert run.seconds == pytest.approx(run.steps * step.seconds)
    assert run.gpu_hours == pytest.approx(run.seconds / 3600)
    assert run.power_per_gpu_watts == 700 and "TDP" in run.power_basis      # H200 board power
    assert run.energy_kwh == pytest.approx(700 * run.seconds / 3.6e6)
    assert run.cost == pytest.approx(3.0 * run.gpu_hours) and float(run) == run.seconds
    assert run.days == pytest.approx(run.seconds / 86400)


def test_cluster_uses_node_power():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        run = gm.training_time("llama-3-8b", "dgx-h100", tokens="10B", batch_size=1, seq_len=4096,
                               gradient_accumulation_steps=8, parallelism=gm.Parallelism(dp=16, zero=3),
                               framework="fsdp")
    assert run.num_gpus == 16 and run.power_per_gpu_watts == pytest.approx(10200 / 8)
    assert run.steps == -(-int(10e9) // (1 * 4096 * 8 * 16))
    assert "GPU-hours" in repr(run) and "<table>" in run._repr_html_() and run.to_dict()["step"]["num_gpus"] == 16


def test_token_counts():
    assert token_count("15.6T") == pytest.approx(15.6e12) and token_count("300b") == 300e9
    with pytest.raises(gm.ArgumentError, match="tokens"):
        token_count("-1")
    with pytest.raises(gm.ArgumentError, match="tokens"):
        token_count("many")


def test_parse_tokens_is_a_deprecated_alias_of_token_count():
    with pytest.warns(DeprecationWarning, match="token_count"):
        assert parse_tokens("300B") == token_count("300B") == 300e9


def test_repr_says_the_wall_clock_once():
    # it printed "92.22 days = 92.22 days on 256 GPUs"
    run = gm.training_time("llama-3.2-1b", "h200", tokens=1e9, batch_size=8, seq_len=1024)
    text = repr(run)
    assert text.startswith(f"TrainingTime({gm.vocabulary.format_seconds(run.seconds)} on 1 GPU, ")
    assert "days =" not in text and " = " not in text


def test_an_unknown_system_name_suggests_close_systems_and_gpus():
    # "dgx-h1000" suggested GPU names only ('b200', 'h100-sxm', ...), not the system dgx-h100
    with pytest.raises(gm.UnknownNameError, match="no system or GPU named 'dgx-h1000'; did you mean 'dgx-h100'") \
            as info:
        gm.training_time("llama-3-8b", "dgx-h1000", tokens=1e12, batch_size=1, seq_len=4096)
    assert info.value.argument == "gpu_or_system"
    assert "'hgx-h200'" in info.value.allowed and "'b200'" in info.value.allowed  # systems and GPUs both
    assert isinstance(info.value, gm.UnknownGPUError) and isinstance(info.value, LookupError)
    for call in (lambda: gm.training_step_time("llama-3-8b", "dgx-h1000", 1, 4096),
                 lambda: gm.plan_training("llama-3-8b", "dgx-h1000", tokens=1e12, global_batch=8, seq_len=4096)):
        with pytest.raises(gm.UnknownGPUError, match="did you mean 'dgx-h100'"):
            call()
    with pytest.raises(gm.UnknownGPUError, match="did you mean 'dgx-b200', .*'b200'"):
        gm.training_step_time("llama-3-8b", "dgx-b2000", 1, 4096)


@pytest.mark.parametrize("argument", ["price_per_gpu_hour", "power_per_gpu_watts"])
def test_one_price_and_one_power(argument):
    # an array price gave an array cost; an array power crashed in the record
    with pytest.raises(gm.ArgumentError, match=f"training_time takes one {argument}") as info:
        gm.training_time("llama-3.2-1b", "h200", tokens=1e9, batch_size=8, seq_len=1024, **{argument: [1.0, 2.0]})
    assert info.value.argument == argument
