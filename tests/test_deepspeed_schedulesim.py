"""DeepSpeed's pipeline schedule played op by op (tests/deepspeed_schedulesim.py) against the step's pricing of it."""

import pytest
from deepspeed_schedulesim import play, stage_commands

import gpumodel as gm
from gpumodel.cluster.pipeline import p2p_time


@pytest.mark.parametrize("pp,m", [(2, 1), (4, 2), (4, 8), (6, 5), (8, 64), (35, 240)])
def test_free_sends_take_one_f_one_b_time(pp, m):
    # with sends that cost nothing, DeepSpeed's order runs at 1F1B's (m + pp - 1)(F + B): forward 1, backward 3
    # (a recomputed forward and the backward), e.g. 35 stages and 240 micro-batches: 274 x 4 = 1096
    assert play(pp, m, 1.0, 3.0, 0.0) == pytest.approx((m + pp - 1) * 4.0)


def test_every_micro_batch_is_run_forward_and_backward_once():
    for pp, m in [(3, 7), (8, 8)]:
        for stage in range(pp):
            cmds = stage_commands(stage, pp, m)
            assert sorted(mb for k, mb in cmds if k == "F") == list(range(m))
            assert sorted(mb for k, mb in cmds if k == "B") == list(range(m))
            # the first stage receives nothing, the last sends no activations
            assert stage > 0 or not any(k.startswith("recv_act") for k, _ in cmds)
            assert stage < pp - 1 or not any(k == "send_act" for k, _ in cmds)


def test_blocking_sends_expose_twice_what_asynchronous_ones_do():
    # 35 stages, 240 micro-batches (MT-NLG's pipelines), a send 2% of a forward: asynchronous sends expose about
    # two sends a micro-batch slot (an activation forward, a gradient back), DeepSpeed's blocking ones about four
    pp, m, c = 35, 240, 0.02
    ideal = (m + pp - 1) * 4.0
    async_ = (play(pp, m, 1.0, 3.0, c, blocking=False) - ideal) / ((m + pp - 1) * c)
    blocking = (play(pp, m, 1.0, 3.0, c) - ideal) / ((m + pp - 1) * c)
    assert async_ == pytest.approx(2.0, rel=0.05)
    assert blocking == pytest.approx(2 * async_, rel=0.1)


def test_deepspeed_pipeline_prices_its_sends_twice():
    # the step prices DeepSpeed's blocking sends at twice the sends of an engine that overlaps them (the simulation
    # above); everything else of the layout the same
    cfg = gm.model("llama-2-7b")
    par = gm.Parallelism(dp=2, pp=4)
    kw = dict(batch_size=1, seq_len=2048, gradient_accumulation_steps=8, parallelism=par, precision="amp_bf16")
    ds = gm.training_step_time(cfg, "dgx-a100-80gb", framework="deepspeed", **kw)
    one = p2p_time(1 * 2048 * 4096 * 2, gm.system("dgx-a100-80gb"), 1, 2, 1, 4, False, True)
    with_pp_overlap = gm.training_step_time(cfg, "dgx-a100-80gb", framework="deepspeed", comm_overlap="pp", **kw)
    # "pp" overlap does not apply to DeepSpeed's synchronous sends: the same step
    assert with_pp_overlap.seconds == pytest.approx(ds.seconds)
    assert ds.breakdown["communication"] >= 8 * 2 * float(one)
