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


# ---------------------------------------------------------------------------------------------- readable output
def test_plan_on_72_gpus_says_why_it_plans_64(capsys):
    args = ["plan", "llama-3.2-1b", "--system", "gb200-nvl72", "--seq", "2048", "--tokens", "100B", "--top", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "GPU counts searched: 1, 2, 4, 8, 16, 32, 64, 72" in out
    # 72 = 9 x 8: with power-of-two tp, pp and cp, dp is a multiple of 9, and 9 does not divide 1024
    assert "no layout uses all 72 GPUs" in out and "multiple of 9" in out and "--global-batch 1024" in out
    assert "the layouts below use 64" in out
    # with a global batch of 9 x 128 sequences, all 72 are planned
    assert main([*args, "--global-batch", "1152"]) == 0
    out = capsys.readouterr().out
    assert "no layout uses all" not in out and "dp72" in out


def test_plan_header_legend_and_cost_ranking(capsys):
    args = ["plan", "llama-3.2-1b", "--gpus", "8", "--seq", "2048", "--tokens", "100B", "--top", "3"]
    assert main([*args, "--objective", "cost"]) == 0
    out = capsys.readouterr().out
    assert "100B tokens" in out and "1e+11" not in out
    # no --price: every cost would be "-", so the ranking says what it ranks by
    assert "Ranked by GPU-hours" in out and "Ranked by cost" not in out
    for word in ("cp = ", "v2 = ", "z3 also the weights", "mb x acc:", "bound:", "recomputation"):
        assert word in out, word
    assert main([*args, "--objective", "cost", "--price", "2"]) == 0
    assert "Ranked by cost" in capsys.readouterr().out


def test_plan_help_lists_defaults_abbreviations_and_json_keys(capsys):
    assert main(["plan", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: dgx-h100)" in text and "(default: 1T)" in text and "(default: 1024)" in text
    for word in ("cp = ", "z3", "mb x acc", "recomputation", "gpu_counts", "headroom_bytes", "pipeline_bubble_s"):
        assert word in text, word


def test_plan_json_gives_the_gpu_counts_searched(capsys):
    assert main(["plan", "llama-3.2-1b", "--max-gpus", "4", "--seq", "2048", "--tokens", "100B", "--top", "2",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu_counts"] == [1, 2, 4] and len(data["rows"]) == 2


def test_systems_help_lists_json_keys(capsys):
    for command in ("systems", "system"):
        assert main([command, "--help"]) == 0
        text = capsys.readouterr().out
        assert "gpus_per_node" in text and "intra_node" in text and "node_power_watts" in text


def test_system_record_is_wrapped_to_the_terminal(monkeypatch, capsys):
    from gpumodel.records.system import system

    monkeypatch.setenv("COLUMNS", "100")
    assert main(["system", "dgx-h100"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert " ".join(system("dgx-h100").notes.split()) in " ".join(out.split())    # every word, in order
