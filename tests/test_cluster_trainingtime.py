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
