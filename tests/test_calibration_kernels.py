"""PyTorch's kernel choice for softmax and sum, as gpumodel.calibration.kernels mirrors it.

Reference values are read off PyTorch's source (aten/src/ATen/native/cuda/SoftMax.cu ``host_softmax``,
Reduce.cuh ``setReduceConfig``), with the arithmetic beside each assert, and the switch the
H200 measurements show (tests/data/calibration/fit_extra.jsonl).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpumodel.calibration.kernels import softmax_plan, sum_plan

DATA = Path(__file__).parent / "data" / "calibration"


def test_softmax_kernel_switches():
    cols = np.array([2048, 2049, 9216, 9217, 9344, 24504, 24512])
    k = softmax_plan(1, cols, 2)  # bf16
    assert k["warp"].tolist() == [True, False, False, False, False, False, False]   # <= 2048 and <= 8 KiB
    assert k["reg"].tolist() == [False, True, True, False, False, False, False]     # ceil(cols/1024) < 10
    assert k["regs"][1:3].tolist() == [3, 9]                                         # ceil(2049/1024), 9216/1024
    # shared memory: cols*2 < 49152 - 32*4 and cols % 8 == 0: 9344 and 24504 (49008 B) yes; 24512 (49024 B) no
    assert k["passes"][4:].tolist() == [1, 1, 3]
    assert k["passes"][3] == 3                                                       # 9217 % 8 != 0
    assert not softmax_plan(1, 2048, 4)["reg"] and softmax_plan(1, 2048, 4)["warp"]   # fp32: 2048 * 4 = 8 KiB


def test_sum_configs():
    k = sum_plan([32, 32, 2, 1], [4096, 8192, 128256, 131072], 2, sm_count=132)
    # 32 x 4096: block 32 lanes x 16 warps, 4096/32 = 128 values a lane < 256: a warp per row, 2 blocks,
    # 128 / 8 (16-byte loads of bf16) = 16 loads a lane
    assert k["blocks"][0] == 2 and k["steps"][0] == 16
    # 32 x 8192: 256 values a lane -> 16 warps share a row: 32 blocks, 8192 / 512 / 8 = 2 loads a thread
    assert k["blocks"][1] == 32 and k["steps"][1] == 2
    # 2 x 128256: block 256 x 2, 501 values -> shared by 2 warps -> 251 < 256: no split over blocks
    assert k["ctas"][2] == 1 and k["steps"][2] == 32                                  # ceil(251 / 8)
    # 1 x 131072: 256 values a thread and 1 block <= 132 * 4: split over min(528, 256/16) = 16 blocks
    assert k["ctas"][3] == 16 and k["blocks"][3] == 16


def test_measured_sum_switch_follows_the_plan():
    """On the H200, 64 bf16 rows of 7000 columns (a warp per row) take longer than 64 rows of 8192."""
    pts = [json.loads(x) for x in (DATA / "do_bench" / "fit_extra.jsonl").read_text().splitlines()[1:]]
    t = {(p["shape"]["rows"], p["shape"]["cols"]): p["time_s"] for p in pts
         if p["op"] == "reduce_sum" and p["dtype"] == "bf16"}
    assert t[(64, 7000)] > 2 * t[(64, 8192)]
    k = sum_plan(64, np.array([7000, 8192]), 2, 132)
    assert k["steps"][0] > 10 * k["steps"][1]                                         # 28 vs 2 loads a thread


def test_sum_rows_of_128_load_16_bytes():
    # bf16 rows of 128 (dim0 >= 128): 128 / 8 = 16 vectors -> block 16 lanes x 32 warps, 32 rows a block,
    # one load a lane; rows of 96 load one element at a time: 32 lanes x 16 warps, 16 rows a block
    k = sum_plan(2**20, [96, 128, 256], 2, 132)
    assert k["blocks"].tolist() == [2**16, 2**15, 2**16] and k["steps"].tolist() == [1, 1, 1]
    # measured on the H200 (FIT set): 2^20 rows of 128 take half the time of rows of 64 or 256 (same steps, half
    # the blocks)
    pts = [json.loads(x) for x in (DATA / "do_bench" / "fit_widened.jsonl").read_text().splitlines()[1:]]
    t = {p["shape"]["cols"]: p["time_s"] for p in pts
         if p["op"] == "reduce_sum" and p["dtype"] == "bf16" and p["shape"]["rows"] == 2**20}
    assert t[128] < 0.65 * min(t[64], t[256])


@given(st.integers(1, 70000), st.integers(1, 300000), st.sampled_from([2, 4]))
def test_sum_plan_invariants(rows, cols, e):
    k = sum_plan(rows, cols, e, 132)
    assert 1 <= k["threads"] <= 512 and k["ctas"] >= 1 and k["steps"] >= 1
    assert k["blocks"] >= k["ctas"]


def _profiled(op: str):
    """(shape, dtype, kernel record) of every profiled kernel of ``op`` in the committed profiles."""
    for path in sorted(DATA.glob("profile*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("op") == op:
                for k in rec["kernels"]:
                    yield rec["shape"], rec["dtype"], k


def test_softmax_registers_give_the_profiled_occupancy():
    """The registers softmax_plan assigns each kernel give the same resident blocks (64 K registers an SM,
    2048 threads) as the registers the profiler reported, for every profiled softmax kernel on the H200."""
    from gpumodel.core.occupancy import occupancy

    seen = 0
    for shape, dtype, k in _profiled("softmax"):
        plan = softmax_plan(shape["rows"], shape["cols"], 4 if dtype == "fp32" else 2)
        threads = k["block"][0] * k["block"][1]
        assert threads == (128 if plan["warp"] else 1024)
        ours = occupancy("9.0", threads, float(plan["registers"])).blocks_per_sm
        theirs = occupancy("9.0", threads, k["registers"]).blocks_per_sm
        assert ours == theirs, (shape, dtype, k["registers"], float(plan["registers"]))
        if plan["warp"]:  # rows a block: 4 warps of WARP_BATCH rows -> the grid
            assert k["grid"][0] == np.ceil(shape["rows"] / (4 * plan["batch"]))
        seen += 1
    assert seen > 200


def test_generic_unroll_and_concat_steps():
    from gpumodel.calibration.kernels import concat_steps, generic_unroll

    assert generic_unroll([1, 2, 3, 4, 8]).tolist() == [4, 4, 4, 2, 2]   # Loops.cuh: sizeof(result) >= 4 ? 2 : 4
    # 2 inputs of 2**26 elements over 2 x 132 blocks of 512 threads: 2**26 / 135168 = 496.5 -> 497 steps
    assert concat_steps(2**27, 2, 132) == 497
    assert concat_steps(10, 2, 132) == 1                                  # at least one step


def test_profiled_generic_kernels_unroll_as_the_rule_says():
    """``elementwise_kernel<128, unroll>`` in the profiler: 4 for 16-bit results, 2 for fp32."""
    from gpumodel.calibration.kernels import CAT_BLOCKS_PER_SM, CAT_THREADS, generic_unroll

    generic = cat = 0
    for shape, dtype, k in _profiled("elementwise"):
        name = k["name"]
        if "elementwise_kernel<128," in name and "vectorized" not in name:
            unroll = int(name.split("elementwise_kernel<128,")[1].split(",")[0])
            assert unroll == generic_unroll(4 if dtype == "fp32" else 2)
            generic += 1
        if "CatArrayBatchedCopy<" in name:
            assert k["grid"][0] == CAT_BLOCKS_PER_SM * 132 and k["block"][0] == CAT_THREADS
            cat += 1
    assert generic > 50 and cat > 10
