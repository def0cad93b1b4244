"""The one reader of counts, byte sizes and durations on the command line (``gpumodel.cli._common``)."""

import argparse

import pytest
from hypothesis import given, strategies as st

from gpumodel.cli._common import parse_bytes, parse_count, parse_number, parse_seconds
from gpumodel.base.errors import ArgumentError, GpumodelError


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), ("1e6", 10 ** 6), ("16_777_216", 2 ** 24), ("1T", 10 ** 12), ("7B", 7 * 10 ** 9),
    ("1.5k", 1500), ("4K", 4000), ("8Ki", 8192), ("2Mi", 2 * 2 ** 20), ("500M", 5 * 10 ** 8), (" 8 ", 8),
    ("0", 0), ("1.5T", 1_500_000_000_000),  # exact: 1.5 * 10**12 read as a decimal, not a float
])
def test_counts(text, expected):
    value = parse_count(text)
    assert value == expected and isinstance(value, int)


@pytest.mark.parametrize("text", ["", "x", "1X", "-3", "1.5", "1.0001k", "nan", "inf", "0x10", "1e400", "1 2"])
def test_bad_counts_name_the_accepted_forms(text):
    with pytest.raises(ArgumentError, match="whole number|too large") as info:
        parse_count(text, "--tokens")
    assert "--tokens" in str(info.value) and isinstance(info.value, GpumodelError)


def test_count_minimum():
    assert parse_count("1", minimum=1) == 1
    with pytest.raises(ArgumentError, match=">= 1"):
        parse_count("0", "--tp", minimum=1)


@pytest.mark.parametrize("text, expected", [
    ("80GiB", 80 * 2 ** 30), ("48KiB", 48 * 1024), ("4096", 4096), ("4096B", 4096), ("80GB", 80 * 10 ** 9),
    ("80 GB", 80 * 10 ** 9), ("1.5MiB", 3 * 2 ** 19), ("32kb", 32000), ("2TiB", 2 * 2 ** 40), ("0.5KiB", 512),
])
def test_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text, needle", [
    ("48K", "ambiguous"), ("1G", "ambiguous"), ("1.5", "whole number"), ("0.3KiB", "whole number"),
    ("-1KiB", ">= 0"), ("12 parsecs", "unknown unit"), ("lots", "size in bytes"),
])
def test_bad_bytes(text, needle):
    with pytest.raises(ArgumentError, match=needle):
        parse_bytes(text, "--capacity")


@pytest.mark.parametrize("text", ["32KB", "32kB", "32k", "32K", "1MB", "1GB"])
def test_shared_memory_refuses_decimal_units(text):
    with pytest.raises(ArgumentError, match="binary") as info:
        parse_bytes(text, "--smem", binary_only=True)
    number = text.rstrip("kKMGB")
    assert f"write {number}" in str(info.value) and "iB" in str(info.value)


def test_shared_memory_message_says_what_to_write():
    with pytest.raises(ArgumentError, match=r"write 32KiB \(or 32768\)"):
        parse_bytes("32KB", "--smem", binary_only=True)
    assert parse_bytes("32KiB", binary_only=True) == parse_bytes("32768", binary_only=True) == 32768


@pytest.mark.parametrize("text, expected", [
    ("50ms", 0.05), ("1s", 1.0), ("1", 1.0), ("0.05", 0.05), ("200us", 2e-4), ("200µs", 2e-4), ("5ns", 5e-9),
    ("2min", 120.0), ("1h", 3600.0), ("1.5 s", 1.5),
])
def test_seconds(text, expected):
    assert parse_seconds(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["-1s", "1e999", "fast", "5d", "nan"])
def test_bad_seconds(text):
    with pytest.raises(ArgumentError, match="duration"):
        parse_seconds(text, "--slo")


def test_numbers():
    assert parse_number("0.5") == 0.5
    for bad in ("-1", "x", "inf", "1ms"):
        with pytest.raises(ArgumentError):
            parse_number(bad)


def test_parsers_are_argparse_types_with_their_own_message(capsys):
    # argparse prints an ArgumentTypeError's message; ours is one, so the accepted forms reach the user
    parser = argparse.ArgumentParser(prog="p", exit_on_error=False)
    parser.add_argument("--tokens", type=parse_count)
    parser.add_argument("--budget", type=parse_seconds)
    assert parser.parse_args(["--tokens", "1T", "--budget", "50ms"]) == argparse.Namespace(tokens=10 ** 12,
                                                                                           budget=0.05)
    with pytest.raises(argparse.ArgumentError, match="1T"):
        parser.parse_args(["--tokens", "lots"])


@given(st.integers(min_value=0, max_value=2 ** 62))
def test_count_round_trip(n):
    assert parse_count(str(n)) == n
    assert parse_count(f"{n:_}") == n


@given(st.integers(min_value=0, max_value=2 ** 32), st.sampled_from(["KiB", "MiB", "GiB", "kB", "MB", "GB", "B", ""]))
def test_bytes_scale(n, unit):
    factor = {"KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "kB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9}.get(unit, 1)
    assert parse_bytes(f"{n}{unit}") == n * factor


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False), st.sampled_from(["s", "ms", "us", "ns", ""]))
def test_seconds_scale(x, unit):
    scale = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}.get(unit, 1.0)
    assert parse_seconds(f"{x!r}{unit}") == pytest.approx(x * scale, rel=1e-12)


def test_progress_goes_to_a_terminal_only():
    """The slow commands say what they are doing on stderr when it is a terminal; a pipe or file stays clean."""
    import io

    from gpumodel.cli._common import progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term, pipe = Terminal(), io.StringIO()
    progress("planning 9,288 layouts...", file=term)
    progress("planning 9,288 layouts...", file=pipe)
    assert term.getvalue() == "planning 9,288 layouts...\n" and pipe.getvalue() == ""


@pytest.mark.parametrize("argv", [
    ["estimate", "--gpu", "h100", "matmul", "64", "64", "64", "--json"],
    ["memory", "gpt2", "--gpu", "h100", "--batch", "1", "--seq", "128", "--json"],
])
def test_progress_never_reaches_stdout(argv, capsys, monkeypatch):
    import json
    import sys

    from gpumodel.cli import main

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert main(argv) == 0
    out, err = capsys.readouterr()
    json.loads(out)                      # stdout holds the JSON alone
    assert err.strip().endswith("...")   # the progress line went to stderr


def test_help_formatter_shows_defaults_but_not_unset_ones():
    import argparse

    from gpumodel.cli._common import HelpFormatter

    p = argparse.ArgumentParser(prog="x", formatter_class=HelpFormatter, epilog="keys:\n  a, b\n  c")
    p.add_argument("--seq", type=int, default=8192, help="sequence length")
    p.add_argument("--gpus", type=int, help="exactly this many GPUs")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--top", type=int, default=10, help="layouts to print (%(default)s rows)")
    text = p.format_help()
    assert "sequence length (default: 8192)" in text and "layouts to print (10 rows)\n" in text
    assert "exactly this many GPUs\n" in text and "machine-readable output\n" in text   # None and False: no default
    assert "keys:\n  a, b\n  c" in text                                                # the epilog as written


def test_wrap_values_keeps_every_word_within_the_width():
    from gpumodel.cli._common import wrap_values

    text = " ".join(f"word{i}" for i in range(200))
    rows = wrap_values([("notes", text), ("name", "h100")], width=60)
    assert all(len(k) + 2 + len(v) <= 60 for k, v in rows)
    assert " ".join(v for k, v in rows[:-1]) == text and rows[-1] == ("name", "h100")
    assert [k for k, _ in rows[:-1]] == ["notes"] + [""] * (len(rows) - 2)
