"""One reader each for counts and durations written as text, shared by the Python API and the command line."""

import pytest

import gpumodel as gm
from gpumodel import vocabulary
from gpumodel.base import readable
from gpumodel.cli import _common as cli


def test_the_command_line_and_the_api_use_the_same_readers():
    assert cli.parse_count.__wrapped__ is readable.parse_count
    assert cli.parse_seconds.__wrapped__ is readable.parse_seconds
    assert vocabulary.duration is readable.duration and vocabulary.token_count is readable.token_count


@pytest.mark.parametrize("text, tokens", [
    ("300B", 300e9), ("300b", 300e9), ("1.5T", 1.5e12), ("8Ki", 8192), ("16_777_216", 2 ** 24), ("7e9", 7e9),
    ("2m", 2e6),
])
def test_a_token_count_reads_the_same_in_python_and_on_the_command_line(text, tokens):
    assert vocabulary.token_count(text) == cli.parse_count(text) == tokens


@pytest.mark.parametrize("text, seconds", [
    ("50ms", 0.05), ("2 sec", 2.0), ("2sec", 2.0), ("1.5 min", 90.0), ("200µs", 2e-4), ("1H", 3600.0), ("0.5", 0.5),
    ("2m", 120.0), ("10M", 600.0),
])
def test_a_duration_reads_the_same_in_python_and_on_the_command_line(text, seconds):
    assert vocabulary.duration(text, "t") == cli.parse_seconds(text) == pytest.approx(seconds, rel=1e-15)


@pytest.mark.parametrize("text", ["1,5T", "1,000", "lots", "1.0001k", "0"])
def test_ambiguous_or_bad_token_counts_are_refused_everywhere(text):
    with pytest.raises(gm.ArgumentError, match="tokens"):
        gm.training_time("llama-3.2-1b", "h100", tokens=text, batch_size=1, seq_len=1024)
    with pytest.raises(gm.ArgumentError):
        cli.parse_count(text, "--tokens", minimum=1)


def test_a_zero_duration_is_no_latency_target():
    with pytest.raises(gm.ArgumentError, match="tpot_slo"):
        gm.serving_capacity("llama-3-8b", "h100", tpot_slo="0ms")
    assert cli.parse_seconds("0ms") == 0.0          # an option may take 0 (a budget of nothing)


def test_numbers_pass_through():
    assert vocabulary.token_count(2e9) == 2e9 and vocabulary.duration(0.05, "tpot_slo") == 0.05
    with pytest.raises(gm.ArgumentError, match="single time"):
        vocabulary.duration([1, 2], "ttft_slo")
