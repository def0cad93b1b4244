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
def test_plan_on_72_gpus_searches_the_powers_of_two_and_72(capsys):
    args = ["plan", "llama-3.2-1b", "--system", "gb200-nvl72", "--seq", "2048", "--tokens", "100B", "--top", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "GPU counts searched: 1, 2, 4, 8, 16, 32, 64, 72" in out
    # 72 = 9 x 8: a pipeline of 9 (or 3) stages uses all 72 GPUs with a power-of-two data-parallel degree
    assert main([*args, "--gpus", "72", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(r["num_gpus"] == 72 and r["dp"] * r["tp"] * r["pp"] * r["cp"] == 72 for r in rows)


def test_plan_header_legend_and_cost_ranking(capsys):
    args = ["plan", "llama-3.2-1b", "--gpus", "8", "--seq", "2048", "--tokens", "100B", "--top", "3"]
    assert main([*args, "--objective", "cost"]) == 0
    out = " ".join(capsys.readouterr().out.split())   # (lines wrap at 110 characters)
    assert "100B tokens" in out and "1e+11" not in out
    # no --price: no cost column, and the ranking says what it ranks by; no deadline: capped at 90 days, said so
    assert "Ranked by cost (GPU-hours; --price adds a cost column)" in out and "cost USD" not in out
    assert "at most 90 days (no deadline given" in out
    for word in ("cp, ep = ", "v2 = ", "z3 also the weights", "mb x acc:", "bound:", "recompute:", "HFU:",
                 "tok/s/GPU:", "TFLOP/s:", "+-:"):
        assert word in out, word
    assert main([*args, "--objective", "cost", "--price", "2", "--currency", "EUR", "--deadline", "30"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Ranked by cost (GPU-hours x 2 EUR)" in out and "cost EUR" in out and "90 days" not in out


def test_plan_says_where_the_gpu_numbers_come_from(capsys):
    args = ["plan", "llama-3.2-1b", "--gpus", "8", "--seq", "2048", "--tokens", "100B", "--top", "2"]
    assert main([*args, "--system", "hgx-h200"]) == 0
    assert "GPU numbers: calibrated on NVIDIA H200" in " ".join(capsys.readouterr().out.split())
    assert main([*args, "--system", "dgx-h100"]) == 0
    assert "GPU numbers: transferred from the h200-sxm calibration" in " ".join(capsys.readouterr().out.split())
    assert main([*args, "--system", "mi300x-platform", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "datasheet" and data["rows"][0]["expected_error"] is None


def test_plan_json_echoes_every_input_and_gives_the_rows_asked_for(capsys):
    args = ["plan", "llama-3.2-1b", "--gpus", "8", "--seq", "2048", "--tokens", "100B", "--top", "25", "--json",
            "--price", "3", "--currency", "EUR", "--zero", "0,1", "--recompute", "none,full"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    inputs = data["inputs"]
    assert inputs["model"] == "llama-3.2-1b" and inputs["gpus"] == [8] and inputs["price"] == 3
    assert inputs["currency"] == "EUR" and inputs["zero"] == [0, 1] and inputs["recompute"] == ["none", "full"]
    assert inputs["top"] == 25 and "framework" in inputs and "deadline" in inputs
    assert len(data["rows"]) == min(25, data["feasible"] - data["collapsed"]) == 25
    assert data["currency"] == "EUR" and data["source"] == "transferred" and data["searched"]["zero"] == [0, 1]
    for key in ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu", "days", "gpu_hours", "energy_kwh", "cost",
                "headroom_bytes", "expected_error", "collapsed"):
        assert key in data["rows"][0], key
    assert {r["checkpointing"] for r in data["rows"]} <= {"none", "full"}


def test_plan_refuses_what_the_framework_does_not_run(capsys):
    assert main(["plan", "llama-3.2-1b", "--gpus", "8", "--zero", "2"]) == 2
    assert "does not run zero_stages=2" in capsys.readouterr().err
    assert main(["plan", "llama-3.2-1b", "--gpus", "8", "--framework", "hf", "--tp", "2"]) == 2
    assert "tp" in capsys.readouterr().err


def test_plan_help_lists_defaults_abbreviations_and_json_keys(capsys):
    assert main(["plan", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: dgx-h100)" in text and "(default: 1T)" in text and "(default: 1024)" in text
    for word in ("cp, ep = ", "z3", "mb x acc", "recomputation", "gpu_counts", "headroom_bytes", "pipeline_bubble_s",
                 "--deadline", "--currency", "inputs:", "expected_error", "START:STOP:STEP"):
        assert word in text, word


def test_plan_json_gives_the_gpu_counts_searched(capsys):
    assert main(["plan", "llama-3.2-1b", "--max-gpus", "4", "--seq", "2048", "--tokens", "100B", "--top", "2",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu_counts"] == [1, 2, 4] and len(data["rows"]) == 2
    assert main(["plan", "llama-3.2-1b", "--gpus", "8:32:8", "--seq", "2048", "--tokens", "100B", "--top", "1",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu_counts"] == [8, 16, 24, 32]


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


def test_plan_searches_schedules_and_takes_recompute_modules(capsys):
    args = ["plan", "mixtral-8x7b", "--gpus", "32", "--seq", "4096", "--global-batch", "256", "--tokens", "1T",
            "--schedule", "1f1b,DualPipe", "--recompute-modules", "layernorm,moe_act", "--top", "400"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    inputs = data["inputs"]
    assert inputs["schedule"] == ["1f1b", "dualpipe"] and inputs["recompute_modules"] == ["layernorm", "moe_act"]
    assert data["pipeline_schedule"] == "1f1b,dualpipe" and data["recompute_modules"] == "layernorm,moe_act"
    assert data["searched"]["pipeline_schedule"] == ["1f1b", "dualpipe"]
    rows = data["rows"]
    assert {r["pipeline_schedule"] for r in rows} == {"1f1b", "dualpipe"}
    assert all(r["pp"] % 2 == 0 and r["virtual_stages"] == 1 for r in rows if r["pipeline_schedule"] == "dualpipe")
    assert {r["recompute_modules"] for r in rows if r["checkpointing"] == "selective"} == {"layernorm,moe_act"}
    assert all(r["recompute_modules"] is None for r in rows if r["checkpointing"] != "selective")
    assert main([*args[:-2], "--top", "3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "pipeline schedule 1f1b or dualpipe, selective recomputation of layernorm, moe_act" in out
    assert "dualpipe = DeepSeek's DualPipe" in out


def test_plan_refuses_unknown_schedules_and_modules(capsys):
    base = ["plan", "mixtral-8x7b", "--gpus", "32"]
    assert main([*base, "--schedule", "1f1b,gpipe"]) == 2
    assert "--schedule: 'gpipe' is not one of 1f1b, zero_bubble, dualpipe" in capsys.readouterr().err
    assert main([*base, "--recompute-modules", "layernorm,norm"]) == 2
    assert "--recompute-modules: 'norm' is not one of core_attn" in capsys.readouterr().err
    assert main([*base, "--schedule", "dualpipe", "--framework", "fsdp"]) == 2
    assert "pipeline_schedule='dualpipe'" in capsys.readouterr().err
    assert main(["plan", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--schedule" in text and "--recompute-modules" in text and "pipeline_schedule" in text


def test_plan_takes_your_calibration_and_host_costs(capsys, tmp_path):
    """--calibration prices the layouts with the user's kernel model; --host-costs bounds Hugging Face's rows by
    the user's host; both are files `gpumodel calibrate` writes (a user H100's, committed)."""
    from pathlib import Path

    own = Path(__file__).parent / "data" / "calibration" / "user_h100"
    base = ["plan", "llama-3.2-1b", "--system", "h100-sxm", "--gpus", "8", "--seq", "512", "--global-batch", "64",
            "--tokens", "1B", "--framework", "hf", "--top", "20", "--json"]
    assert main(base) == 0
    shipped = {(r["micro_batch"], r["checkpointing"]): r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert main([*base, "--calibration", str(own / "calibration.yaml"), "--host-costs", str(own / "host.yaml")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "calibrated" and data["inputs"]["host_costs"].endswith("host.yaml")
    mine = {(r["micro_batch"], r["checkpointing"]): r for r in data["rows"]}
    assert any(mine[k]["host_s"] != shipped[k]["host_s"] for k in mine)
    # a missing file is one line naming the option; host costs are refused where the engine has no host model
    assert main([*base, "--host-costs", str(tmp_path / "nope.yaml")]) == 2
    assert "--host-costs" in capsys.readouterr().err
    assert main(["plan", "llama-3-8b", "--gpus", "16", "--host-costs", str(own / "host.yaml")]) == 2
    assert "host" in capsys.readouterr().err


def test_plan_fp8_recipe(capsys):
    """--fp8 takes a recipe: its rows name it; mxfp8 before Blackwell is one line naming fp8."""
    args = ["plan", "llama-3-8b", "--gpus", "16", "--tokens", "100B", "--seq", "4096", "--global-batch", "256",
            "--top", "3"]
    assert main([*args, "--fp8", "current", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(r["fp8"] == "current" for r in rows)
    assert main([*args, "--fp8", "mxfp8"]) == 2
    assert "Blackwell" in capsys.readouterr().err
