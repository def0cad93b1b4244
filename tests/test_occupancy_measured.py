"""gm.occupancy and its helpers against the CUDA runtime's answers measured on an H200 (sm_90).

tests/data/occupancy/README.md says how the rows were measured. ``*_measured`` rows were used while
developing; ``*_heldout`` rows (a fixed-seed random 30%, split off before any comparison) were not looked
at until the model was final. Every row must agree exactly.
"""


import numpy as np
import pytest

import gpumodel as gm
from benchscript import load_bench

SPLITS = ["measured", "heldout"]


def _accuracy_script():
    """bench/occupancy_accuracy.py, whose loader reads the measured tables (one reader for both)."""

    return load_bench("occupancy_accuracy")


_bench = _accuracy_script()
_load = _bench.load
_carveout = _bench.carve  # -2: attribute never set, -1: set to the default; both mean the runtime's default


@pytest.mark.parametrize("split", SPLITS)
def test_blocks_per_sm_match_the_runtime_on_every_row(split):
    d = _load("occupancy", split)
    # Block sizes no launch can have (0, > 1024) were probed too: the runtime answers an error or 0 blocks,
    # gm.occupancy raises ValueError (tested in test_occupancy.py). Every other row must agree.
    valid = (d["threads"] >= 1) & (d["threads"] <= 1024)
    assert (d["error"][valid] == 0).all()
    assert valid.sum() > (60_000 if split == "heldout" else 300_000)
    r = gm.occupancy("9.0", d["threads"][valid], d["regs"][valid], d["static_smem"][valid],
                     d["dynamic_smem"][valid], _carveout(d["carveout"][valid]),
                     max_dynamic_shared_bytes=d["max_dynamic_smem"][valid])
    wrong = np.flatnonzero(r.blocks_per_sm != d["blocks"][valid])
    assert wrong.size == 0, (f"{wrong.size} of {valid.sum()} rows differ, first: "
                             + str({k: int(v[valid][wrong[0]]) for k, v in d.items()}))


@pytest.mark.parametrize("split", SPLITS)
def test_the_measured_rows_exercise_every_limiter(split):
    d = _load("occupancy", split)
    valid = (d["threads"] >= 1) & (d["threads"] <= 1024)
    r = gm.occupancy("9.0", d["threads"][valid], d["regs"][valid], d["static_smem"][valid],
                     d["dynamic_smem"][valid], _carveout(d["carveout"][valid]),
                     max_dynamic_shared_bytes=d["max_dynamic_smem"][valid])
    assert {"warps", "registers", "shared_memory", "blocks"} <= set(np.unique(r.limiter))
    assert len(np.unique(d["blocks"][valid])) >= 32  # nearly every count 0..32 occurs
    assert len(np.unique(d["regs"])) > 90 and len(np.unique(d["carveout"])) > 90


@pytest.mark.parametrize("split", SPLITS)
def test_max_potential_block_size_matches_the_runtime(split):
    d = _load("potential_block_size", split)
    assert (d["error"] == 0).all()
    h200 = gm.gpu("h200-sxm")  # 132 SMs, as device.json records
    assert h200.sm_count == 132
    for per in np.unique(d["smem_per_thread"]):
        m = d["smem_per_thread"] == per
        dyn = (lambda b, p=int(per): b * p) if per else d["dynamic_smem"][m]
        best = gm.max_potential_block_size(h200, d["regs"][m], d["static_smem"][m], dyn, d["block_size_limit"][m],
                                           _carveout(d["carveout"][m]), max_dynamic_shared_bytes=d["max_dynamic_smem"][m])
        np.testing.assert_array_equal(best.block_size, d["block_size"][m])
        np.testing.assert_array_equal(best.min_grid_size, d["min_grid_size"][m])


@pytest.mark.parametrize("split", SPLITS)
def test_available_dynamic_shared_memory_matches_the_runtime(split):
    d = _load("available_dynamic_smem", split)
    args = (d["num_blocks"], d["threads"], d["regs"], d["static_smem"], _carveout(d["carveout"]))
    got = gm.max_dynamic_shared_memory("9.0", *args, max_dynamic_shared_bytes=d["max_dynamic_smem"], runtime=True)
    expected = np.where(d["error"] != 0, -1, d["bytes"])  # the runtime errors where N blocks cannot fit at all
    np.testing.assert_array_equal(got, expected)


def test_runtime_available_smem_overstates_by_the_reservation_and_ours_does_not():
    """cudaOccupancyAvailableDynamicSMemPerBlock ignores the 1 KiB reservation: launched with its answer, a
    kernel often gets fewer blocks than asked for. The default (runtime=False) answer always keeps them."""
    d = _load("available_dynamic_smem", "measured")
    ok = d["error"] == 0
    sel = {k: v[ok] for k, v in d.items()}
    args = (sel["threads"], sel["regs"], sel["static_smem"])
    c = _carveout(sel["carveout"])
    with_runtime = gm.occupancy("9.0", *args, sel["bytes"], c, max_dynamic_shared_bytes=sel["max_dynamic_smem"])
    assert (with_runtime.blocks_per_sm < sel["num_blocks"]).mean() > 0.5
    ours = gm.max_dynamic_shared_memory("9.0", sel["num_blocks"], *args, c, max_dynamic_shared_bytes=sel["max_dynamic_smem"])
    kept = gm.occupancy("9.0", *args, ours, c, max_dynamic_shared_bytes=sel["max_dynamic_smem"])
    assert (kept.blocks_per_sm >= sel["num_blocks"]).all()
    assert (ours == sel["bytes"] - 1024).mean() > 0.5  # mostly exactly one reservation less
