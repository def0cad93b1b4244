"""Parallelism: validation, GPU count, rank strides, model checks."""

import pytest

import gpumodel as gm


def test_defaults_and_num_gpus():
    assert gm.Parallelism().num_gpus == 1
    par = gm.Parallelism(dp=4, tp=8, pp=2, cp=2)
    assert par.num_gpus == 128 and par.stride("tp") == 1 and par.stride("cp") == 8
    assert par.stride("dp") == 16 and par.stride("pp") == 64


@pytest.mark.parametrize("kwargs, match", [
    (dict(dp=0), "dp"), (dict(tp=1.5), "tp"), (dict(zero=4), "zero"), (dict(sequence_parallel="yes"), "sequence_parallel"),
    (dict(virtual_stages=2), "virtual_stages"), (dict(ep=3, dp=4), "ep"), (dict(sequence_parallel=True), "sequence_parallel"),
])
def test_bad_layouts_name_the_argument(kwargs, match):
    with pytest.raises(gm.ArgumentError, match=match):
        gm.Parallelism(**kwargs)


def test_model_checks():
    gm.Parallelism(tp=8, pp=4).check("llama-3-70b")
    with pytest.raises(gm.ArgumentError, match="tp=3"):
        gm.Parallelism(tp=3).check("llama-3-70b")
    with pytest.raises(gm.ArgumentError, match="exceeds the layers"):
        gm.Parallelism(pp=64, virtual_stages=2).check("llama-3-8b")
    with pytest.raises(gm.ArgumentError, match="dense"):
        gm.Parallelism(dp=2, ep=2).check("llama-3-8b")


def test_frozen_repr_and_dict():
    par = gm.Parallelism(dp=2, tp=2, sequence_parallel=True)
    with pytest.raises(Exception):
        par.dp = 3
    assert "4 GPUs" in repr(par) and par.to_dict()["sequence_parallel"] is True
    assert "<table>" in par._repr_html_()


#: 24 heads, 8 key/value heads, MLP width 12288: tp=12 divides the heads and the MLP but not the KV heads
GQA8 = gm.TransformerConfig(name="gqa8", hidden_size=3072, num_layers=8, num_heads=24, num_kv_heads=8,
                            intermediate_size=12288, vocab_size=32000)
#: 32 heads, 4 key/value heads: tp=8 and 16 hold a copy of one key/value head per rank
GQA4 = gm.TransformerConfig(name="gqa4", hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=4,
                            intermediate_size=14336, vocab_size=32000)
_TP_USERS = {
    "Parallelism.check": lambda cfg, tp: gm.Parallelism(tp=tp).check(cfg),
    "training_memory": lambda cfg, tp: gm.training_memory(cfg, 1, 1024, tp=tp),
    "inference_memory": lambda cfg, tp: gm.inference_memory(cfg, 1, 1024, tp=tp),
    "prefill_time": lambda cfg, tp: gm.prefill_time(cfg, "h100", batch_size=1, prompt_len=1024, tp=tp),
}


@pytest.mark.parametrize("user", list(_TP_USERS))
@pytest.mark.parametrize("cfg, tp, ok", [
    (GQA4, 4, True), (GQA4, 8, True), (GQA4, 16, True), (GQA4, 3, False), (GQA4, 64, False),
    (GQA8, 8, True), (GQA8, 24, True), (GQA8, 12, False),
])
def test_one_tensor_parallel_rule_everywhere(user, cfg, tp, ok):
    if ok:
        _TP_USERS[user](cfg, tp)
    else:
        with pytest.raises(gm.ArgumentError, match=f"tp={tp} must divide"):
            _TP_USERS[user](cfg, tp)


def test_the_rule_as_a_mask_for_the_planners():
    from gpumodel.vocabulary import splits_model

    assert splits_model(GQA4, 16) is True and splits_model(GQA8, 12) is False
    assert splits_model(GQA4, [1, 3, 8, 16, 64]).tolist() == [True, False, True, True, False]


def test_layout_that_check_accepts_gets_a_step_time():
    # Parallelism.check and training_memory agree: tp=8 over 4 KV heads is a layout, not a late error
    st = gm.training_step_time(GQA4, "dgx-h100", 1, 2048, parallelism=gm.Parallelism(tp=8))
    assert st.num_gpus == 8 and st.peak_bytes > 0


def test_replicated_key_value_heads_are_counted_in_the_weights():
    one, eight = (gm.training_memory(GQA4, 1, 1024, tp=t).breakdown["weights"] for t in (1, 8))
    # fp32 weights (amp_bf16). Per rank at tp=8: 1/8 of everything split, the final norm (h) whole, and
    # for k and v a whole head (128 x 4096 each) instead of 4/8 of one, in each of the 32 layers
    extra = 2 * 4096 * 128 * (1 - 4 / 8) * 32
    assert eight * 8 == pytest.approx(one + (7 * 4096 + 8 * extra) * 4)


@pytest.mark.parametrize("kwargs, argument", [
    (dict(dp=2**63), "dp"), (dict(tp=2**20 + 1), "tp"), (dict(pp=2.0**63), "pp"), (dict(cp=10**30), "cp"),
    (dict(dp=2, ep=2**21), "ep"), (dict(pp=2, virtual_stages=2**40), "virtual_stages"),
])
def test_degrees_beyond_2_to_the_20_are_refused_naming_the_degree(kwargs, argument):
    # dp=2**63 was accepted, then failed in the step about an internal "stride"
    with pytest.raises(gm.ArgumentError, match=f"{argument}=.* is too large: each parallel degree is at most 2\\*\\*20") \
            as info:
        gm.Parallelism(**kwargs)
    assert info.value.argument == argument and info.value.allowed == "an integer from 1 to 1,048,576 (2**20)"


def test_the_gpu_count_is_bounded_too():
    assert gm.Parallelism(dp=2**20).num_gpus == 2**20 and gm.Parallelism(dp=2**10, tp=2**10).num_gpus == 2**20
    with pytest.raises(gm.ArgumentError, match="dp \\* tp \\* pp \\* cp = 2,097,152 GPUs is too many") as info:
        gm.Parallelism(dp=2**10, tp=2**10, pp=2)
    assert info.value.argument == "dp * tp * pp * cp" and info.value.value == 2**21
