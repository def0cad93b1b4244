"""What makes the planner fast changes no number: kernels priced in batches, shards over arrays of sizes, the
calibration's points read line by line; and a cold start plans a 70B model on 4,096 GPUs in about a second."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

import gpumodel as gm
from gpumodel.calibration.estimate import estimate
from gpumodel.cluster.kernelprice import kernel_key, price_kernels
from gpumodel.cluster.shard import shard_config, shard_times
from gpumodel.records.recordlists import plain_scalar, split_record_lists
from gpumodel.records.specs import read_yaml
from gpumodel.training.steptime import step_kernels

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("layer_forward", "layer_backward", "attention_forward", "head_forward", "head_backward",
          "optimizer_per_param", "layer_flops", "head_flops")


@pytest.mark.parametrize("model, gpu", [("llama-3-8b", "h100"), ("gpt2-xl", "h200"), ("mistral-7b", "a100")])
def test_kernels_priced_in_batches_equal_one_by_one(model, gpu):
    cfg = shard_config(gm.model(model), 2).model_copy(update=dict(num_layers=1))
    ops = [op for mb in (1, 3) for ph in step_kernels(cfg, mb, 2048).values() for op, _ in ph]
    prices = price_kernels(ops, gm.gpu(gpu))
    seen = set()
    for op, p in zip(ops, prices):
        if kernel_key(op) in seen:
            continue
        seen.add(kernel_key(op))
        est = estimate(op, gm.gpu(gpu), sustained=True)
        assert p.seconds == pytest.approx(float(est.seconds), rel=1e-12), op
        assert (p.calibrated, p.source, p.expected_error) == (bool(est.calibrated), est.source, est.expected_error)
    assert len(seen) > 50


@pytest.mark.parametrize("framework", ["megatron", "hf"])
def test_shard_times_over_arrays_equal_the_scalar_ones(framework):
    cfg, g = shard_config(gm.model("llama-3-8b"), 4), gm.gpu("h100")
    mb, cp = np.array([1, 8, 2, 4]), np.array([1, 1, 2, 4])
    many = shard_times(cfg, g, mb, 8192 // cp, cp, "amp_bf16", "adamw", framework)
    for i in range(len(mb)):
        one = shard_times(cfg, g, int(mb[i]), int(8192 // cp[i]), int(cp[i]), "amp_bf16", "adamw", framework)
        for k in FIELDS:
            assert getattr(many, k)[i] == pytest.approx(getattr(one, k), rel=1e-12), k
        assert isinstance(one.layer_forward, float) and one.source == many.source == "transferred"
        assert one.expected_error == pytest.approx(many.expected_error, rel=0.05)


def test_step_kernels_take_arrays_of_sizes():
    cfg = gm.model("llama-3.2-1b").model_copy(update=dict(num_layers=1))
    many = step_kernels(cfg, np.array([1, 4]), np.array([1024, 512]))
    one = step_kernels(cfg, 4, 512)
    for phase in many:
        assert len(many[phase]) == len(one[phase])
        for (a, n), (b, m) in zip(many[phase], one[phase]):
            assert n == m and a.name == b.name and np.atleast_1d(a.flops)[-1] == pytest.approx(float(b.flops))
    with pytest.raises(gm.ArgumentError):
        step_kernels(cfg, np.ones((2, 2), int), 1024)


def test_the_calibration_reads_as_yaml_safe_load_does():
    path = ROOT / "specs" / "calibrations" / "h200-sxm.yaml"
    text = path.read_text(encoding="utf-8")
    rest, lists = split_record_lists(text)
    assert list(lists) == ["points"] and len(lists["points"]) > 2000     # read line by line
    assert read_yaml(path) == yaml.safe_load(text)


@pytest.mark.parametrize("text", [
    "a: 1\npoints:\n- op: mm\n  t: 1.0e-06\n- op: 'quoted'\n  t: 2.0\n",     # a quoted string: PyYAML reads it
    "a: 1\npoints:\n- op: mm\n  t: 1e-06\n",                                # YAML 1.1: '1e-06' is a string
    "a: 1\npoints:\n- op: mm\n  t: 0x1f\n",                                 # hex: PyYAML's int
    "a: 1\npoints:\n- op: mm\n  shape: {m: 2.0, flag: yes}\n  t: .inf\n",   # yes is True; .inf is a float
    "a: 1\npoints:\n- op: mm\n  # a comment\n  t: 2\n",
    "points:\n- op: mm\n  t: 2\npoints:\n- op: xx\n  t: 3\n",                # a key twice: the last wins
])
def test_what_the_fast_path_cannot_read_exactly_is_left_to_pyyaml(text, tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text(text + "pad: 0\n" * 70_000)   # long enough for the fast path to try
    assert read_yaml(path) == yaml.safe_load(path.read_text())


def test_plain_scalars_resolve_as_pyyaml_does():
    for text in ("6.496e-06", "128.0", "-3", "true", "False", "null", "~", "bf16", "matmul_bwd", "1.5e+3"):
        assert plain_scalar(text) == yaml.safe_load(text), text


def test_a_cold_start_plans_a_70b_model_on_4096_gpus_quickly():
    # bench/plan_speed.py prints the figures; this guards against a regression by an order of magnitude (CPU time of
    # the call in a fresh process; about 0.7 s on a 2-core virtual machine)
    code = textwrap.dedent("""
        import time, gpumodel as gm
        f = gm.plan_training
        t = time.process_time()
        p = f("llama-3-70b", "dgx-h100", tokens="15T", global_batch=4096, seq_len=8192, max_gpus=4096)
        print(time.process_time() - t, p.candidates)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    seconds, candidates = out.split()
    assert int(candidates) >= 100_000 and float(seconds) < 4.0
