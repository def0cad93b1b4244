"""Roofline: Brenndoerfer's (2026) worked numbers, hand arithmetic, properties and bad input.

Brenndoerfer (2026): M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores",
https://mbrenndoerfer.com/writing/gpu-architecture-memory-hierarchy-cuda-tensor-cores
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gpumodel as gm
from gpumodel import ops
from gpumodel.records.gpu import UnsupportedDTypeError
from gpumodel.core.roofline import attainable_flops, levels, peak_for, ridge_point, roofline


@pytest.fixture(scope="module")
def h100():
    return gm.gpu("h100")


# ------------------------------------------------------------------ Brenndoerfer's numbers
def test_brenndoerfer_ridge_point_h100():
    # Brenndoerfer (2026): 989e12 / 3.35e12 ~ 295 FLOP/byte (H100 SXM, FP16 tensor cores, HBM3)
    assert ridge_point("h100", "fp16") == pytest.approx(989.4e12 / 3.35e12)
    assert round(gm.ridge_point("h100")) == 295


def test_brenndoerfer_ridge_point_h200():
    # Brenndoerfer (2026): the H200 has the H100's compute with 4.8 TB/s: 989.4e12 / 4.8e12 ~ 206 FLOP/byte
    assert gm.ridge_point("h200", "bf16") == pytest.approx(206.1, abs=0.5)


def test_brenndoerfer_matmul_4096_is_compute_bound_at_7x_the_ridge(h100):
    op = ops.matmul(4096, 4096, 4096, "fp16")
    r = gm.roofline(op, h100)
    assert r.bound == "compute"
    ai_read = gm.arithmetic_intensity(op, over="read")
    assert ai_read == 2048  # 2*4096^3 / (2 * 4096^2 * 2 bytes)
    assert ai_read / r.ridge_point == pytest.approx(6.9, abs=0.05)  # Brenndoerfer (2026): "7x the ridge point"
    assert r.seconds == pytest.approx(2 * 4096**3 / 989.4e12)  # compute floor, 138.9 us


def test_brenndoerfer_relu_4096_is_memory_bound(h100):
    op = ops.elementwise(4096 * 4096, "fp16")
    r = gm.roofline(op, h100)
    assert r.bound == "memory"
    assert gm.arithmetic_intensity(op, over="read") == 0.5
    # Brenndoerfer (2026): "1/590 of the ridge point" -- the fp16 tensor-core ridge, 295 / 0.5
    assert gm.ridge_point(h100, "fp16") / 0.5 == pytest.approx(590, abs=1)
    # the op itself runs on CUDA cores, whose ridge (66.9e12 / 3.35e12 ~ 20) it is also far below
    assert r.ridge_point == pytest.approx(66.9e12 / 3.35e12)
    # read 32 MiB + write 32 MiB at 3.35 TB/s
    assert r.seconds == pytest.approx(2 * 4096**2 * 2 / 3.35e12)
    assert r.memory_s == r.seconds > r.compute_s


def test_brenndoerfer_measured_relu_within_roofline(h100):
    # Brenndoerfer's H100 measurement: 4096x4096 fp16 ReLU 0.045 ms, matmul 1.820 ms; a roofline is a lower bound
    assert gm.roofline(ops.elementwise(4096 * 4096, "fp16"), h100).seconds < 0.045e-3
    assert gm.roofline(ops.matmul(4096, 4096, 4096, "fp16"), h100).seconds < 1.820e-3


# ------------------------------------------------------------------ peaks and levels
def test_peak_for_units_and_dtypes(h100):
    assert peak_for(ops.matmul(8, 8, 8, "bf16"), h100) == pytest.approx(989.4e12)
    assert peak_for(ops.matmul(8, 8, 8, "tf32"), h100) == pytest.approx(494.7e12)  # fp32 data on tensor cores
    assert peak_for(ops.matmul(8, 8, 8, "fp32"), h100) == pytest.approx(66.9e12)  # CUDA cores
    assert peak_for(ops.matmul(8, 8, 8, "fp64"), h100) == pytest.approx(66.9e12)  # FP64 tensor cores
    assert peak_for(ops.matmul(8, 8, 8, "fp8"), h100) == pytest.approx(1978.9e12)
    assert peak_for(ops.softmax(8, 8, "bf16"), h100) == pytest.approx(66.9e12)  # vector ops: fp32 CUDA-core rate
    assert peak_for(ops.elementwise(8, "fp64"), h100) == pytest.approx(33.5e12)


def test_sparsity_doubles_tensor_peak_only(h100):
    mm = ops.matmul(8192, 8192, 8192)
    assert gm.roofline(mm, h100, sparse=True).peak_flops == 2 * 989.4e12
    assert gm.ridge_point(h100, sparse=True) == pytest.approx(2 * 989.4e12 / 3.35e12)
    sm = ops.softmax(8, 8)
    assert gm.roofline(sm, h100, sparse=True).peak_flops == pytest.approx(66.9e12)  # no effect on CUDA-core ops
    no_sparsity = h100.model_copy(update={"sparsity": None})
    with pytest.raises(UnsupportedDTypeError, match="2:4"):
        gm.roofline(mm, no_sparsity, sparse=True)


def test_fp8_on_a100_names_the_dtype():
    with pytest.raises(UnsupportedDTypeError, match="dtype 'fp8'.*a100"):
        gm.roofline(ops.matmul(4096, 4096, 4096, "fp8"), "a100")
    assert issubclass(UnsupportedDTypeError, ValueError)


def test_hierarchical_levels(h100):
    assert levels(h100) == {"hbm": 3.35e12, "l2": 12e12, "shared": 33e12}
    assert gm.ridge_point(h100, "bf16", level="l2") == pytest.approx(989.4e12 / 12e12)
    op = ops.softmax(4096, 4096, "bf16")
    hbm, l2, smem = (gm.roofline(op, h100, level=lv) for lv in ("hbm", "l2", "shared"))
    assert hbm.seconds == pytest.approx(op.bytes / 3.35e12)
    assert l2.seconds == pytest.approx(op.bytes / 12e12) and smem.seconds < l2.seconds < hbm.seconds
    with pytest.raises(ValueError, match="level"):
        gm.roofline(op, h100, level="l3")


def test_level_without_bandwidth_is_an_error(h100):
    bare = h100.model_copy(update={"memory_hierarchy": ()})
    with pytest.raises(ValueError, match="l2"):
        gm.roofline(ops.softmax(4, 4), bare, level="l2")


# ------------------------------------------------------------------ results
def test_result_is_frozen_and_explains_itself(h100):
    r = gm.roofline(ops.matmul(4096, 4096, 4096, "fp16"), h100)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.seconds = 0
    text = repr(r)
    assert "compute" in text and "h100-sxm" in text and "ridge point 295.3" in text
    assert "<table>" in r._repr_html_()
    assert r.gpu == "h100-sxm" and r.level == "hbm" and r.bandwidth == 3.35e12


def test_vectorized_bound_is_an_array_of_strings(h100):
    r = gm.roofline(ops.matmul(np.array([1, 16, 8192]), 8192, 8192), h100)
    assert list(r.bound) == ["memory", "memory", "compute"]
    assert r.seconds.shape == (3,)
    assert "configs 3" in repr(r)


def test_op_without_flops_is_memory_bound(h100):
    r = gm.roofline(ops.embedding(4096, 32000, 4096), h100)
    assert r.bound == "memory" and r.attainable_flops == 0 and r.arithmetic_intensity == 0


def test_module_and_function_share_the_name():
    # `import gpumodel.core.roofline; gpumodel.core.roofline.levels(...)` used to raise: the function hid the module
    import importlib

    import gpumodel

    module = importlib.import_module("gpumodel.core.roofline")
    assert gpumodel.core.roofline is module and gm.estimate is importlib.import_module("gpumodel.calibration.estimate")
    op, g = gm.ops.matmul(4096, 4096, 4096), gm.gpu("h100")
    assert gpumodel.core.roofline.levels(g)["hbm"] == 3.35e12
    assert gm.roofline(op, g).seconds == module.roofline(op, g).seconds
    assert gm.estimate(op, "h200").seconds == gpumodel.calibration.estimate.estimate(op, "h200").seconds


def test_attainable_flops_broadcasts():
    out = attainable_flops(np.array([[0.5], [1e4]]), np.array([1e12, 2e12]), 1e10)
    np.testing.assert_allclose(out, [[0.5e10, 0.5e10], [1e12, 2e12]])  # min(peak, I * bandwidth)
    assert isinstance(attainable_flops(1.0, 2.0, 3.0), float)


def test_bad_input():
    with pytest.raises(ValueError, match="over"):
        gm.arithmetic_intensity(ops.matmul(1, 1, 1), over="written")
    with pytest.raises(TypeError, match="OpCost"):
        gm.roofline("matmul", "h100")
    with pytest.raises(gm.UnknownGPUError):
        gm.roofline(ops.matmul(1, 1, 1), "h10")


# ------------------------------------------------------------------ properties
pos = st.integers(min_value=1, max_value=100_000)  # op sizes are positive integers
dts = st.sampled_from(["fp32", "tf32", "bf16", "fp16", "fp8"])
lvls = st.sampled_from(["hbm", "l2", "shared"])


@settings(max_examples=100, deadline=None)
@given(pos, pos, pos, dts, lvls)
def test_attainable_below_peak_and_time_above_both_floors(m, n, k, dt, level):
    h100 = gm.gpu("h100")
    op = ops.matmul(m, n, k, dt)
    r = roofline(op, h100, level=level)
    assert r.attainable_flops <= r.peak_flops
    assert r.seconds >= op.flops / r.peak_flops
    assert r.seconds >= op.bytes / h100.bandwidth(level)
    assert (r.bound == "compute") == (r.arithmetic_intensity > r.ridge_point)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(pos, pos, pos), min_size=1, max_size=8), dts)
def test_roofline_vector_equals_loop_of_scalars(shapes, dt):
    h100 = gm.gpu("h100")
    m, n, k = (np.array(c) for c in zip(*shapes))
    vec = roofline(ops.matmul(m, n, k, dt), h100)
    for i, (mi, ni, ki) in enumerate(shapes):
        one = roofline(ops.matmul(mi, ni, ki, dt), h100)
        assert vec.seconds[i] == one.seconds and vec.bound[i] == one.bound
        assert vec.attainable_flops[i] == one.attainable_flops


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 1 << 24), min_size=2, max_size=5))
def test_fusion_never_slower_on_the_roofline(numels):
    n = min(numels)
    chain = [ops.elementwise(n, "bf16", flops_per_element=f) for f in numels[: len(numels)]]
    h100 = gm.gpu("h100")
    fused = roofline(ops.fuse(*chain), h100).seconds
    assert fused <= sum(roofline(op, h100).seconds for op in chain) * (1 + 1e-12)


any_op = st.one_of(
    st.builds(lambda m, n, k: ops.matmul(m, n, k, "fp16"), pos, pos, pos),
    st.builds(lambda b, s, d, c, i, bw: ops.attention(b, 8, s, d, causal=c, dtype="fp16", impl=i, backward=bw),
              st.integers(1, 16), st.integers(1, 8192), st.sampled_from([64, 128]), st.booleans(),
              st.sampled_from(["flash", "naive"]), st.booleans()),
    st.builds(lambda n, f: ops.elementwise(n, "fp16", flops_per_element=f), pos, st.integers(0, 50)),
    st.builds(lambda r, c: ops.softmax(r, c, "fp16"), pos, pos),
    st.builds(lambda r, c: ops.layer_norm(r, c, "fp16"), pos, pos),
    st.builds(lambda t, v: ops.cross_entropy(t, v, "fp16"), pos, pos),
)


@settings(max_examples=150, deadline=None)
@given(any_op, st.sampled_from(["h100", "h200", "a100", "v100", "rtx-4090", "mi300x"]))
def test_roofline_invariants_for_every_op_and_gpu(op, name):
    g = gm.gpu(name)
    r = roofline(op, g)
    assert 0 <= r.attainable_flops <= r.peak_flops
    assert r.seconds == max(r.compute_s, r.memory_s)
    assert r.memory_s == pytest.approx(op.bytes / g.memory_bandwidth)
    assert r.attainable_flops * r.seconds == pytest.approx(op.flops, rel=1e-9)


def test_roofline_and_estimate_name_their_parts_alike(h100):
    # one name per concept: the compute and memory floors are compute_s / memory_s in both results
    op = gm.ops.matmul(4096, 4096, 4096, "fp16")
    r, e = gm.roofline(op, h100), gm.estimate(op, h100, calibrated=False)
    assert {"compute_s", "memory_s"} <= set(r.to_dict()) and {"compute_s", "memory_s"} <= set(e.to_dict())
    assert "compute_time_s" not in r.to_dict()
    assert r.compute_s == pytest.approx(2 * 4096**3 / 989.4e12)   # 2*m*n*k / dense fp16 peak
    with pytest.warns(DeprecationWarning, match="compute_s"):
        assert r.compute_time_s == r.compute_s
    with pytest.warns(DeprecationWarning, match="memory_s"):
        assert r.memory_time_s == r.memory_s
