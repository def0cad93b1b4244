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
