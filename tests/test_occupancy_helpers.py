"""Best block size, dynamic shared memory for N blocks, the next step, curves, plots and the CLI.

The runtime's own answers for the first two are checked row by row in test_occupancy_measured.py; here:
hand arithmetic, properties, and the edges (CLI, plot)."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpumodel as gm
from gpumodel.cli import main

KIB = 1024


# ---------------------------------------------------------------- max_potential_block_size
def test_best_block_size_hand_arithmetic():
    # 32 regs: any block size up to 1024 reaches 2048 threads/SM; the runtime keeps the largest
    best = gm.max_potential_block_size("9.0", 32)
    assert (best.block_size, best.blocks_per_sm, best.occupancy, best.min_grid_size) == (1024, 2, 1.0, None)
    # 255 regs: 8192 regs/warp, 2 warps per sub-partition = 8 warps per SM -> 256 threads in one block
    best = gm.max_potential_block_size("h100", 255)
    assert (best.block_size, best.blocks_per_sm, best.min_grid_size) == (256, 1, 132)
    # block_size_limit 100 tries 100, 96, 64, 32: 2 x 100 = 200, 2 x 96 = 192, 4 x 64 = 256, 8 x 32 = 256
    assert gm.max_potential_block_size("9.0", 255, block_size_limit=100).block_size == 64


def test_best_block_size_with_per_thread_shared_memory():
    # 400 B per thread: 1024 threads need 400 KiB > opt-in; 512 threads: 200 KiB + 1 KiB -> 1 block = 512 threads;
    # 288 threads: 112.5 KiB + 1 -> 2 blocks = 576 threads
    best = gm.max_potential_block_size("9.0", 32, dynamic_shared_bytes=lambda b: 400 * b)
    threads = [gm.occupancy("9.0", int(t), 32, 0, 400 * int(t)).active_threads for t in range(32, 1025, 32)]
    assert best.block_size * best.blocks_per_sm == max(threads)
    scalar_fn = gm.max_potential_block_size("9.0", 32, dynamic_shared_bytes=lambda b: 400 * int(b))
    assert scalar_fn == best


def test_nothing_fits():
    best = gm.max_potential_block_size("8.6", 32, dynamic_shared_bytes=120 * KIB)
    assert (best.block_size, best.blocks_per_sm, best.occupancy) == (0, 0, 0.0)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["7.5", "8.0", "8.6", "8.9", "9.0", "12.0"]), st.integers(0, 255), st.integers(0, 120 * KIB))
def test_best_block_size_is_the_largest_with_most_resident_threads(cc, regs, dyn):
    best = gm.max_potential_block_size(cc, regs, dynamic_shared_bytes=dyn)
    sizes = np.arange(32, 1025, 32)
    threads = gm.occupancy(cc, sizes, regs, 0, dyn).active_threads
    if threads.max() == 0:
        assert best.block_size == 0
    else:
        assert best.block_size == sizes[threads == threads.max()].max()


# ---------------------------------------------------------------- max_dynamic_shared_memory
def test_dynamic_shared_memory_hand_arithmetic():
    # 9.0, 2 blocks: 228 KiB / 2 = 114 KiB each, minus the 1 KiB reservation
    assert gm.max_dynamic_shared_memory("9.0", 2, 256, 32) == 114 * KIB - KIB
    assert gm.max_dynamic_shared_memory("9.0", 2, 256, 32, runtime=True) == 114 * KIB
    # one block: the whole opt-in limit (227 KiB) minus static
    assert gm.max_dynamic_shared_memory("9.0", 1, 256, 32, static_shared_bytes=4096) == 227 * KIB - 4096
    # carveout 25% = 57 KiB -> 64 KiB config; 3 blocks: 64 KiB / 3 = 21845 -> 21760 (128 B units) - 1 KiB
    assert gm.max_dynamic_shared_memory("9.0", 3, 128, 16, carveout=25) == 21760 - KIB
    # 7.0 has no reservation and 256 B units: 96 KiB / 5 = 19660 -> 19456
    assert gm.max_dynamic_shared_memory("7.0", 5, 128, 16) == 19456
    # registers allow only 4 blocks of 256 threads at 64 regs: 5 cannot be reached
    assert gm.max_dynamic_shared_memory("9.0", 5, 256, 64) == -1
    arr = gm.max_dynamic_shared_memory("9.0", np.array([1, 2, 4, 5]), 256, 64)
    assert list(arr) == [227 * KIB, 113 * KIB, 56 * KIB, -1]
    with pytest.raises(ValueError, match="num_blocks"):
        gm.max_dynamic_shared_memory("9.0", 0, 256, 64)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]), st.integers(1, 32),
       st.integers(1, 1024), st.integers(0, 128), st.integers(0, 16 * KIB), st.one_of(st.none(), st.integers(0, 100)))
def test_dynamic_shared_memory_keeps_n_blocks(cc, n, threads, regs, static, carveout):
    d = gm.max_dynamic_shared_memory(cc, n, threads, regs, static, carveout)
    if d < 0:
        assert gm.occupancy(cc, threads, regs, static, 0, carveout).blocks_per_sm < n
        return
    assert gm.occupancy(cc, threads, regs, static, d, carveout).blocks_per_sm >= n


# ---------------------------------------------------------------- next_occupancy_step
def test_next_step_registers():
    # 256 threads, 72 regs: 2304 regs/warp -> 7 warps per sub-partition = 28 warps -> 3 blocks of 8 warps.
    # 4 blocks need 32 warps = 8 per sub-partition -> 2048 regs/warp -> 64 regs/thread.
    step = gm.next_occupancy_step("9.0", 256, 72)
    assert (step.blocks_per_sm, step.limiter, step.target_blocks, step.reachable) == (3, "registers", 4, True)
    assert step.registers_per_thread == 64 and step.dynamic_shared_bytes is None


def test_next_step_needs_both_registers_and_shared_memory():
    # 256 threads, 64 regs, 48 KiB: registers and shared memory both allow 4. Five blocks need
    # 40 warps -> 10 per sub-partition -> 1638 -> 1536 regs/warp = 48 regs, and 228 KiB / 5 = 46694 B
    # -> 46592 (128 B units) - 1 KiB reserved = 45568 B.
    step = gm.next_occupancy_step("h100", 256, 64, dynamic_shared_bytes=48 * KIB)
    assert (step.registers_per_thread, step.dynamic_shared_bytes) == (48, 45568)
    assert "48 registers" in str(step) and "45568" in str(step)
    assert gm.occupancy("h100", 256, 48, 0, 45568).blocks_per_sm == 5
    assert gm.occupancy("h100", 256, 48, 0, 45569).blocks_per_sm == 4


def test_next_step_at_the_warp_limit():
    step = gm.next_occupancy_step("9.0", 256, 32)
    assert not step.reachable and step.registers_per_thread is None
    assert "no more blocks" in str(step)
    with pytest.raises(ValueError, match="threads_per_block must be a single value"):
        gm.next_occupancy_step("9.0", np.array([128, 256]), 32)


# ---------------------------------------------------------------- curves and plot
def test_curves_hold_the_other_inputs():
    curves = gm.occupancy_curves("9.0", 256, 64, dynamic_shared_bytes=16 * KIB)
    assert set(curves) == {"threads_per_block", "registers_per_thread", "shared_memory_per_block"}
    regs = curves["registers_per_thread"]
    assert regs.x[0] == 0 and regs.x[-1] == 255 and regs.current == 64
    assert regs.occupancy[32] == 1.0 and regs.occupancy[64] == 0.5  # Brenndoerfer's two points
    assert np.all(np.diff(regs.occupancy) <= 0)  # more registers never raise occupancy
    smem = curves["shared_memory_per_block"]
    assert smem.x[-1] == 227 * KIB and np.all(np.diff(smem.occupancy) <= 0)
    assert "OccupancyCurve" in repr(smem)


def test_plot_has_three_panels(tmp_path):
    pytest.importorskip("matplotlib")
    from gpumodel.plots.occupancy import plot_occupancy

    fig = plot_occupancy("h100", 256, 64, dynamic_shared_bytes=48 * KIB)
    assert len(fig.axes) == 3
    out = tmp_path / "occ.png"
    fig.savefig(out)
    assert out.stat().st_size > 1000


# ---------------------------------------------------------------- CLI
def test_cli_table(capsys):
    assert main(["occupancy", "--gpu", "h100", "--threads", "256", "--regs", "64", "--smem", "48KiB"]) == 0
    text = capsys.readouterr().out
    for word in ("blocks / SM", "50.0%", "registers", "next step", "45568"):
        assert word in text


def test_cli_json_and_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "o.png"
    assert main(["occupancy", "--cc", "8.6", "--threads", "128", "--regs", "40", "--carveout", "50",
                 "--json", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    # 8.6: 40 regs -> 1280 regs/warp -> 12 warps per sub-partition = 48 = the SM's maximum
    assert out["blocks_per_sm"] == 12 and out["occupancy"] == 1.0 and out["limiter"] == "warps"
    assert out["shared_memory_carveout"] == 64 * KIB  # 50% of 100 KiB = 50 KiB -> 64 KiB
    assert out["next_step"]["reachable"] is False
    assert png.stat().st_size > 1000


def test_cli_bad_input(capsys):
    assert main(["occupancy", "--threads", "2048", "--regs", "32"]) == 2
    assert "threads_per_block" in capsys.readouterr().err
    assert main(["occupancy", "--threads", "128", "--regs", "32", "--smem", "lots"]) == 2
    assert "--smem" in capsys.readouterr().err
