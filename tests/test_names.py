"""One name per concept: the new names answer, the former ones warn (DeprecationWarning) and give the same value."""

import inspect

import pytest

import gpumodel as gm

OP = gm.ops.matmul(512, 1024, 2048)


def test_time_estimate_and_roofline_say_seconds():
    est = gm.estimate(OP, "h100")
    roof = gm.roofline(OP, "h100")
    assert est.seconds == float(est) == gm.estimate_time(OP, "h100")
    assert roof.seconds == float(roof) == max(roof.compute_s, roof.memory_s)
    with pytest.warns(DeprecationWarning, match="use seconds"):
        assert est.time_s == est.seconds
    with pytest.warns(DeprecationWarning, match="use seconds"):
        assert roof.time_s == roof.seconds
    assert "seconds" in est.to_dict() and "time_s" not in est.to_dict()
    assert "seconds" in roof.to_dict() and "time_s" not in roof.to_dict()


def test_serving_time_says_weights_bytes_and_seq_len():
    pre = gm.prefill_time("llama-3.2-1b", "h100", batch_size=2, prompt_len=300)
    dec = gm.decode_step_time("llama-3.2-1b", "h100", batch_size=2, context_len=700)
    assert (pre.seq_len, dec.seq_len) == (300, 700)          # the prompt; the context already cached
    assert pre.weights_bytes > 1e9 and "weights_bytes" in pre.to_dict() and "weight_bytes" not in pre.to_dict()
    with pytest.warns(DeprecationWarning, match="use weights_bytes"):
        assert pre.weight_bytes == pre.weights_bytes
    with pytest.warns(DeprecationWarning, match="use seq_len"):
        assert dec.tokens == dec.seq_len == 700


def test_arch_limits_takes_gpu_or_cc():
    assert gm.arch_limits(gpu_or_cc="h100") == gm.arch_limits("9.0")
    with pytest.warns(DeprecationWarning, match="use gpu_or_cc"):
        assert gm.arch_limits(cc_or_gpu="h100") == gm.arch_limits(gpu_or_cc="h100")
    with pytest.raises(gm.ArgumentError, match="give gpu_or_cc only"):
        gm.arch_limits(gpu_or_cc="h100", cc_or_gpu="h100")
    assert list(inspect.signature(gm.arch_limits).parameters) == ["gpu_or_cc"]


def test_plan_rows_say_seconds_for_the_step():
    plan = gm.plan_training("gpt2", "h100", tokens=1e9, global_batch=8, seq_len=128, max_gpus=8, top=3)
    row = plan.best
    assert row["seconds"] > 0 and "step_s" not in row and "step_s" not in plan.to_dict()["rows"][0]
    with pytest.warns(DeprecationWarning, match="use 'seconds'"):
        assert row["step_s"] == row["seconds"]
    with pytest.raises(KeyError):
        row["no_such_key"]


def test_serving_helpers_say_batch_size():
    from gpumodel.serving import generation as G
    from gpumodel.serving.steps import step_kernels
    from gpumodel.serving.timing import resolve_serving_args, step_time

    setup = resolve_serving_args("llama-3.2-1b", "h100", "bf16", None, 1, "graph")
    new = step_time(setup, batch_size=4, step_tokens=1, cached=100, phase="decode")
    with pytest.warns(DeprecationWarning, match="use batch_size"):
        assert step_time(setup, batch=4, step_tokens=1, cached=100, phase="decode").seconds == new.seconds
    with pytest.warns(DeprecationWarning, match="use batch_size"):
        assert G.decode_total(setup, batch=4, first_context=100, steps=3)[0] == \
            G.decode_total(setup, batch_size=4, first_context=100, steps=3)[0]
    args = dict(cached=100, dtype=gm.dtype("bf16"), kv_dtype=None)
    with pytest.warns(DeprecationWarning) as record:
        old = step_kernels(setup.cfg, batch=4, new_tokens=1, **args)
    assert {str(w.message) for w in record} == {"batch is deprecated; use batch_size",
                                                "new_tokens is deprecated; use step_tokens"}
    assert repr(old) == repr(step_kernels(setup.cfg, batch_size=4, step_tokens=1, **args))


@pytest.mark.parametrize("fn, positional, keywords", [
    (gm.prefill_time, (2, 256, "bf16", 2), dict(batch_size=2, prompt_len=256, dtype="bf16", tp=2)),
    # the sixth argument was kv_dtype here, tp in prefill_time: keywords keep the two apart
    (gm.decode_step_time, (2, 256, "bf16", "fp8"), dict(batch_size=2, context_len=256, dtype="bf16", kv_dtype="fp8")),
    (gm.generation_time, (2, 128, 8), dict(batch_size=2, prompt_len=128, new_tokens=8)),
    (gm.serving_capacity, (256, 32), dict(prompt_len=256, output_len=32)),
    (gm.training_time, (1e9, 2, 128), dict(tokens=1e9, batch_size=2, seq_len=128)),
])
def test_positional_arguments_after_the_gpu_warn_and_give_the_keyword_answer(fn, positional, keywords):
    model = "gpt2" if fn is gm.training_time else "llama-3.2-1b"
    want = fn(model, "h100", **keywords)
    names = ", ".join(list(keywords)[:len(positional)])
    with pytest.warns(DeprecationWarning, match=f"passing {names} of {fn.__name__} by position is deprecated"):
        got = fn(model, "h100", *positional)
    assert float(got.seconds if hasattr(got, "seconds") else got.output_tokens_per_s) == \
        float(want.seconds if hasattr(want, "seconds") else want.output_tokens_per_s)
    params = inspect.signature(fn).parameters
    assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in keywords)


def test_plan_training_positional_arguments_warn():
    kw = dict(max_gpus=8, top=3)
    want = gm.plan_training("gpt2", "h100", tokens=1e9, global_batch=8, seq_len=128, **kw)
    with pytest.warns(DeprecationWarning, match="passing tokens, global_batch, seq_len of plan_training"):
        got = gm.plan_training("gpt2", "h100", 1e9, 8, 128, **kw)
    assert got.rows == want.rows


def test_positional_arguments_beyond_the_former_ones_or_twice_are_refused():
    with pytest.raises(TypeError, match="takes 2 positional arguments"):
        gm.prefill_time("gpt2", "h100", 1, 128, "bf16", 1, "graph", None)
    with pytest.raises(TypeError, match="multiple values for batch_size"):
        gm.prefill_time("gpt2", "h100", 1, batch_size=2)
