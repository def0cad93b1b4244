"""Pipeline stages, schedules and sends (gpumodel.cluster.pipeline), and what the step makes of them."""

import warnings

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.cluster.collectives import system_collective_time
from gpumodel.cluster.pipeline import check_schedule, p2p_time, pipeline_bubble, slowest_stage, stage_layers
from gpumodel.cluster.step import parallel_training_step_time


def test_stage_layers_even_and_uneven():
    # Llama 3 405B (Dubey et al. 2024, section 3.3.2): 126 layers, 16 stages, one layer fewer on the first and last
    assert [int(x) for x in stage_layers(126, 16, 7, 7)] == [7, 8, 7]
    assert [int(x) for x in stage_layers(105, 35)] == [3, 3, 3]      # MT-NLG: 35 stages of 3
    assert [int(x) for x in stage_layers(96, 6)] == [16, 16, 16]
    # arrays of pipeline degrees broadcast when the cut is even (the planner's candidates)
    assert np.array_equal(stage_layers(96, np.array([2, 4, 8]))[1], [48, 24, 12])


def test_stage_layers_refuses_a_split_that_does_not_add_up():
    with pytest.raises(gm.ArgumentError, match="first_stage_layers"):
        stage_layers(126, 16, 70, 70)
    with pytest.raises(gm.ArgumentError, match="first_stage_layers"):
        stage_layers(126, 16, "seven", 7)
    with pytest.raises(gm.ArgumentError, match="first_stage_layers"):
        stage_layers(126, 1, 7, 7)                       # one stage has no first and last


def test_slowest_stage_picks_the_head_or_a_middle_stage():
    # head = 0.6 layer: 7 layers + head (7.6) < 8 layers, so a middle stage sets the pace
    assert [float(x) for x in slowest_stage(1.0, 0.6, stage_layers(126, 16, 7, 7), 16)] == [8.0, 0.0]
    assert [float(x) for x in slowest_stage(1.0, 0.6, stage_layers(128, 16), 16)] == [8.0, 1.0]
    assert [float(x) for x in slowest_stage(1.0, 2.5, stage_layers(126, 16, 7, 7), 16)] == [7.0, 1.0]


def test_bubbles_of_the_named_schedules():
    f, b = 1.0, 2.0
    assert float(pipeline_bubble(f, b, 8, 1)) == pytest.approx(7 * 3)             # (p - 1)(F + B)
    assert float(pipeline_bubble(f, b, 8, 2)) == pytest.approx(7 * 3 / 2)         # interleaved: / v
    assert float(pipeline_bubble(f, b, 8, schedule="zero_bubble")) == pytest.approx(7 * (f + b - 2 * b / 2))
    assert float(pipeline_bubble(f, b, 16, schedule="dualpipe")) == pytest.approx(7 * (f + b + b - 3 * b / 2))
    assert float(pipeline_bubble(f, b, 1)) == 0.0
    # arrays broadcast
    assert pipeline_bubble(f, b, np.array([1, 2, 4])).tolist() == [0.0, 3.0, 9.0]


def test_check_schedule():
    assert check_schedule("1f1b", 4, 2) == "1f1b"
    with pytest.raises(gm.ArgumentError, match="pipeline_schedule"):
        check_schedule("gpipe", 4, 1)
    with pytest.raises(gm.ArgumentError, match="even"):
        check_schedule("dualpipe", 35, 1)
    with pytest.raises(gm.ArgumentError, match="virtual_stages"):
        check_schedule("zero_bubble", 4, 2)


def test_scatter_gather_sends_a_tensor_slice_over_each_nic():
    # Narayanan et al. 2021, section 4.1: each of the tp ranks sends 1/tp of the activations, then all-gathers them
    s = gm.system("dgx-a100-80gb")
    act = 2048 * 20480 * 2
    full = float(p2p_time(act, s, 8, 64, 1, 35, False, False))
    split = float(p2p_time(act, s, 8, 64, 1, 35, False, True))
    send = system_collective_time("send_recv", act / 8, s, 2, 64)
    gather = system_collective_time("all_gather", act, s, 8, 1)
    assert split == pytest.approx(2 * (send + gather))
    assert full == pytest.approx(2 * system_collective_time("send_recv", act, s, 2, 64))
    assert split < 0.3 * full
    assert float(p2p_time(act, s, 8, 64, 3, 35, False, True)) == pytest.approx(3 * split)   # v chunks
    assert float(p2p_time(act, s, 8, 64, 1, 1, False, True)) == 0.0                       # no pipeline


def _step(**kw):
    args = dict(batch_size=1, seq_len=4096, gradient_accumulation_steps=16, framework="megatron")
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        return parallel_training_step_time("llama-3-70b", "dgx-h100", **args)


def test_uneven_stages_take_the_head_off_the_critical_path():
    par = gm.Parallelism(tp=8, pp=8, dp=1, sequence_parallel=True)   # 80 layers: 10 a stage, the head on the last
    even = _step(parallelism=par)
    uneven = _step(parallelism=par, first_stage_layers=9, last_stage_layers=9)   # 62 over 6 middle stages: 11
    assert uneven.seconds != even.seconds
    balanced = _step(parallelism=gm.Parallelism(tp=8, pp=4, dp=2, sequence_parallel=True),
                     first_stage_layers=19, last_stage_layers=19)           # 42 over 2 middle stages: 21
    plain = _step(parallelism=gm.Parallelism(tp=8, pp=4, dp=2, sequence_parallel=True))   # 20 + head on the last
    assert balanced.breakdown["forward"] != plain.breakdown["forward"]
    with pytest.raises(gm.ArgumentError, match="first_stage_layers"):
        _step(parallelism=par, first_stage_layers=40, last_stage_layers=40)


def test_dualpipe_and_zero_bubble_shrink_the_bubble():
    par = gm.Parallelism(tp=8, pp=8, dp=1, sequence_parallel=True)
    plain = _step(parallelism=par)
    zb = _step(parallelism=par, pipeline_schedule="zero_bubble")
    dual = _step(parallelism=par, pipeline_schedule="dualpipe")
    assert dual.breakdown["pipeline_bubble"] < zb.breakdown["pipeline_bubble"] < plain.breakdown["pipeline_bubble"]
    for k in ("forward", "backward", "communication"):     # only the bubble changes
        assert dual.breakdown[k] == pytest.approx(plain.breakdown[k])
