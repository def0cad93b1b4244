"""``gpumodel systems``, ``gpumodel system`` and ``gpumodel plan``."""

import json

from gpumodel.cli import main


def test_systems_table_and_json(capsys):
    assert main(["systems"]) == 0
    assert "dgx-h100" in capsys.readouterr().out
    assert main(["systems", "--gpu", "h200", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)]
    assert "hgx-h200" in names and "dgx-h100" not in names
    assert main(["system", "p5"]) == 0 and "EFA" in capsys.readouterr().out


def test_plan_prints_ranked_layouts(capsys):
    assert main(["plan", "llama-3-8b", "--system", "dgx-h100", "--gpus", "16", "--tokens", "100B", "--seq", "4096",
                 "--global-batch", "256", "--top", "3", "--price", "2"]) == 0
    out = capsys.readouterr().out
    assert "MFU" in out and "GPU-h" in out and "modelled" in out
    assert main(["plan", "llama-3-8b", "--gpus", "16", "--tokens", "100B", "--seq", "4096", "--global-batch", "256",
                 "--top", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["rows"]) == 2 and data["rows"][0]["num_gpus"] == 16


def test_plan_unknown_system_is_one_line_error(capsys):
    assert main(["plan", "llama-3-8b", "--system", "dgx-h1000", "--gpus", "8"]) == 2
    assert "dgx-h100" in capsys.readouterr().err
