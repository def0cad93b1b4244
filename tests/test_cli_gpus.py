import json

import pytest

import gpumodel as gm
from gpumodel.cli import main


def test_gpus_table_lists_every_gpu(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in gm.list_gpus())


def test_gpus_json_is_in_si_units(capsys):
    assert main(["gpus", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    h100 = next(r for r in rows if r["name"] == "h100-sxm")
    assert h100["memory_bandwidth"] == 3.35e12  # 3.35 TB/s, H100 SXM5 datasheet
    assert h100["memory_bytes"] == 80e9 and h100["bf16_flops"] == pytest.approx(989.4e12)
    assert h100["ridge_bf16"] == pytest.approx(989.4e12 / 3.35e12)  # 295.3 FLOP/B


def test_gpu_record_json_is_si(capsys):
    assert main(["gpu", "H100 SXM5 80GB", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["memory_bandwidth"] == 3.35e12 and rec["sm_count"] == 132


def test_gpu_record_text_shows_sources(capsys):
    assert main(["gpu", "h100"]) == 0
    assert "whitepaper" in capsys.readouterr().out


def test_unknown_gpu_is_a_clear_error(capsys):
    assert main(["gpu", "h10"]) == 2
    err = capsys.readouterr().err
    assert "no gpu named 'h10'" in err and "h100-sxm" in err


def test_no_command_prints_help(capsys):
    assert main([]) == 2


def test_memory_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "mem.png"
    assert main(["memory", "gpt2", "--gpu", "h100", "--batch", "4", "--seq", "512", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("columns", [100, 140])
def test_gpu_record_is_wrapped_to_the_terminal(columns, monkeypatch, capsys):
    # the H200's notes are about 1,000 characters: wrapped, no line is wider than the terminal (a single word
    # longer than the value column, such as a Python expression in a source, would stay whole)
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["gpu", "h200"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= columns
    assert " ".join(gm.gpu("h200").notes.split()) in " ".join(out.split())          # every word, in order
