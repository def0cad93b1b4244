"""Warp efficiency: Brenndoerfer's (2026) SIMT examples, hand arithmetic and properties.

Brenndoerfer (2026): M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores",
https://mbrenndoerfer.com/writing/gpu-architecture-memory-hierarchy-cuda-tensor-cores
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import gpumodel as gm
from gpumodel.core.warps import branch_efficiency, divergence_efficiency, padded_block_size, warp_efficiency, warps_per_block


def test_brenndoerfer_48_thread_block():
    # Brenndoerfer (2026): 48 threads -> two warps, one full and one with 16 of 32 lanes active; pad to 64
    assert warps_per_block(48) == 2
    assert gm.warp_efficiency(48) == 0.75  # 48 / 64
    assert padded_block_size(48) == 64
    assert warp_efficiency(64) == 1.0


def test_brenndoerfer_divergence():
    # Brenndoerfer (2026): an even two-way split halves throughput; 32 distinct paths -> 1/32
    assert gm.divergence_efficiency(1) == 1.0
    assert divergence_efficiency(2) == 0.5
    assert divergence_efficiency(32) == 1 / 32
    assert branch_efficiency([16, 16]) == 0.5
    assert branch_efficiency([31, 1]) == 0.5  # any split of two equal paths costs the same
    assert branch_efficiency([28, 4], [10, 30]) == pytest.approx((28 * 10 + 4 * 30) / (32 * 40))
    assert branch_efficiency([32]) == 1.0
    assert branch_efficiency([16]) == 0.5  # a half-filled warp on one path


def test_arrays_broadcast():
    np.testing.assert_allclose(warp_efficiency([32, 48, 100, 1]), [1, 0.75, 100 / 128, 1 / 32])
    np.testing.assert_array_equal(padded_block_size(np.array([1, 32, 33])), [32, 32, 64])
    np.testing.assert_allclose(divergence_efficiency(np.arange(1, 5)), [1, 1 / 2, 1 / 3, 1 / 4])
    assert warp_efficiency(96, warp_size=64) == 0.75  # AMD CDNA wavefronts: 96 / 128


@given(st.integers(1, 4096))
def test_warp_efficiency_properties(t):
    eff = warp_efficiency(t)
    assert 0 < eff <= 1
    assert (eff == 1) == (t % 32 == 0)
    assert eff == t / padded_block_size(t)
    assert eff > (warps_per_block(t) - 1) / warps_per_block(t) - 1e-12  # at most one warp partly idle


@given(st.lists(st.integers(0, 8), min_size=1, max_size=4).filter(lambda n: 0 < sum(n) <= 32))
def test_branch_efficiency_at_most_one_over_paths_for_full_warps(n):
    eff = branch_efficiency(n)
    assert 0 < eff <= 1
    assert eff == pytest.approx(sum(n) / (32 * len(n)))


@pytest.mark.parametrize("bad", [0, -32, 1.5, float("nan"), "x"])
def test_bad_threads(bad):
    with pytest.raises(ValueError, match="threads_per_block"):
        warp_efficiency(bad)


def test_bad_paths():
    with pytest.raises(ValueError, match="paths"):
        divergence_efficiency(33)
    with pytest.raises(ValueError, match="paths"):
        divergence_efficiency(0)
    with pytest.raises(ValueError, match="warp_size"):
        branch_efficiency([20, 20])
    with pytest.raises(ValueError, match="cycles_per_path"):
        branch_efficiency([16, 16], [1])
