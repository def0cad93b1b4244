"""A training plan's Pareto front of days against cost, its chart (``gm.plot(plan)``) and ``gpumodel plan --plot``."""

import json

import pytest

import gpumodel as gm
from gpumodel.cli import main
from gpumodel.cluster.planresult import pareto_front

pytest.importorskip("matplotlib")

JOB = dict(tokens="100B", seq_len=2048, global_batch=256, num_gpus=[8, 16, 32, 64], top=5000)


@pytest.fixture(scope="module")
def plan():
    return gm.plan_training("llama-3.2-1b", "dgx-h100", price_per_gpu_hour=2.0, **JOB)


def _dominated(r, rows, key):
    return any(o["days"] <= r["days"] and o[key] <= r[key] and (o["days"] < r["days"] or o[key] < r[key])
               for o in rows)


def test_pareto_front_of_points():
    assert pareto_front([1, 2, 3, 4], [9, 5, 7, 1]).tolist() == [0, 1, 3]
    assert pareto_front([1, 1, 2], [5, 3, 3]).tolist() == [1]
    assert pareto_front([], []).tolist() == []


@pytest.mark.parametrize("key", ["cost", "gpu_hours", "energy_kwh"])
def test_pareto_rows_are_not_dominated_and_span_fastest_to_cheapest(plan, key):
    front = plan.pareto(key)
    assert len(plan.rows) > len(front) >= 1
    assert not any(_dominated(r, plan.rows, key) for r in front)
    # every row left out is dominated by one of the front
    ids = {id(r) for r in front}
    assert all(_dominated(r, front, key) for r in plan.rows if id(r) not in ids)
    assert front[0]["days"] == min(r["days"] for r in plan.rows)
    assert front[-1][key] == min(r[key] for r in plan.rows)
    assert [r["days"] for r in front] == sorted(r["days"] for r in front)


def test_pareto_default_cost_and_refusals(plan):
    assert plan.pareto() == plan.pareto("cost")
    free = gm.plan_training("llama-3.2-1b", "dgx-h100", **{**JOB, "top": 200})
    assert free.pareto() == free.pareto("gpu_hours")
    with pytest.raises(gm.ArgumentError, match="price"):
        free.pareto("cost")
    with pytest.raises(gm.ArgumentError, match="days"):
        plan.pareto("days")


def test_gm_plot_draws_a_plan(plan):
    import matplotlib

    matplotlib.use("Agg")
    fig = gm.plot(plan)
    left, right = fig.axes
    assert left.get_xlabel() == "GPUs" and right.get_xlabel() == "days of the run"
    assert right.get_ylabel() == "cost [USD]"
    front = right.lines[0]
    assert len(front.get_xdata()) == len(plan.pareto())
    with pytest.raises(gm.ArgumentTypeError):
        gm.plot(42)


def test_cli_plot_writes_a_png(tmp_path, capsys):
    path = tmp_path / "plan.png"
    args = ["plan", "llama-3.2-1b", "--gpus", "8,16,32", "--tokens", "100B", "--seq", "2048", "--global-batch", "256",
            "--price", "2", "--top", "3"]
    assert main([*args, "--plot", str(path)]) == 0
    assert "wrote" in capsys.readouterr().out
    data = path.read_bytes()
    assert len(data) > 10_000 and data[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*args, "--pareto", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert 1 <= len(rows) <= 3 and [r["days"] for r in rows] == sorted(r["days"] for r in rows)


def test_cli_plot_refuses_other_suffixes(tmp_path, capsys):
    assert main(["plan", "llama-3.2-1b", "--gpus", "8", "--plot", str(tmp_path / "plan.pdf")]) == 2
    err = capsys.readouterr().err
    assert "--plot" in err and ".png or .svg" in err
