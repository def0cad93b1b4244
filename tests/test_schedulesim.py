"""Megatron-Core's 1F1B schedules played op by op (tests/schedulesim.py) against the closed forms."""

import pytest
from hypothesis import given, settings, strategies as st

import warnings

import gpumodel as gm
from gpumodel.base.errors import ArgumentError
from gpumodel.cluster.pipeline import pipeline_bubble
from schedulesim import play, rank_order, schedule_table


def test_schedule_table_groups():
    # Megatron-Core's table: groups of N micro-batches, each through every chunk; the last group keeps the rest
    assert schedule_table(5, 2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1), (4, 0), (4, 1)]
    assert len(schedule_table(12, 3, 4)) == 36


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 12), st.integers(1, 4), st.integers(1, 4), st.floats(1.0, 3.5))
def test_narayanan_bubble_where_it_holds(pp, v, k, ratio):
    # m a multiple of pp (interleaved) or any m (plain 1F1B): the makespan is m (F + B) + (pp - 1)/v (F + B),
    # in units of one chunk's forward: F = v, B = v ratio
    m = k * pp if v > 1 else k
    span, _ = play(pp, v, m, pp, ratio)
    assert span == pytest.approx(m * v * (1 + ratio) + (pp - 1) * (1 + ratio))


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 10), st.integers(2, 4), st.integers(1, 4))
def test_warmup_is_the_memory_models(pp, v, k):
    # the forward chunks a rank holds at its peak: Megatron's warm-up plus the one in flight, all of them when
    # m = pp (gpumodel.core.framework_memory counts the same)
    m = k * pp
    _, peak = play(pp, v, m, pp, 2.0)
    for r in range(pp):
        expect = m * v if m == pp else min(v * pp + pp - 1 - 2 * r, m * v)
        assert peak[r] == expect


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 10), st.integers(1, 4), st.integers(1, 30), st.integers(1, 10))
def test_every_op_runs_once(pp, v, m, group):
    for r in range(pp):
        order = rank_order(r, pp, v, m, group)
        assert sorted(order) == sorted({(k, mb, c) for k in "FB" for mb in range(m) for c in range(v)})


def test_plain_1f1b_with_fewer_micro_batches_than_stages():
    # fill and drain: the formula holds for any m without interleaving (3 micro-batches through 8 stages)
    span, peak = play(8, 1, 3, 8, 2.0)
    assert span - 3 * 3 == 7 * 3 and peak[0] == 3
    assert float(pipeline_bubble(1.0, 2.0, 8, 1)) == pytest.approx(21.0)


def test_interleaved_schedule_refuses_what_megatron_refuses():
    # Megatron-LM's interleaved schedule asserts a multiple of pp micro-batches; fewer leave its first stage
    # waiting for each micro-batch to come back: played out, 4 micro-batches through 8 stages of 2 chunks idle
    # 33 chunk-forwards against the formula's 21
    span, _ = play(8, 2, 4, 8, 2.0)
    assert span - 4 * 2 * 3 == 33
    par = gm.Parallelism(dp=2, tp=8, pp=4, virtual_stages=2, zero=1, sequence_parallel=True)
    kw = dict(batch_size=1, seq_len=4096, parallelism=par, framework="megatron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        for m in (2, 6):
            with pytest.raises(ArgumentError, match="gradient_accumulation_steps"):
                gm.training_step_time("llama-3-70b", "dgx-h100", gradient_accumulation_steps=m, **kw)
        assert gm.training_step_time("llama-3-70b", "dgx-h100", gradient_accumulation_steps=8, **kw).seconds > 0
