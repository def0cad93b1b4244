"""Memory answers at the edge of an H100 (tests/data/memory/edge, measured with bench/measure_edge.py)."""

import warnings

import numpy as np
import pytest
from benchscript import load_bench

import gpumodel as gm

edge = load_bench("edge_accuracy")
SETS = ["h100", "h100_heldout", "h100_forloop", "h100_heldout_forloop"]


@pytest.fixture(scope="module")
def scored():
    return [(r, edge.modelled(r)) for name in SETS for r in edge.load(name)]


def test_the_allocated_peak_holds_at_the_edge(scored):
    errors = [abs(m["peak"] / r["peak_allocated"] - 1) for r, m in scored if r["status"] == "ok"]
    assert len(errors) >= 80
    assert np.median(errors) < 0.005 and max(errors) < 0.03


def test_with_expandable_segments_fits_is_what_happened_on_every_run(scored):
    runs = [(r, m) for r, m in scored if r["expandable_segments"]]
    assert len(runs) == 76 and {r["status"] for r, _ in runs} == {"ok", "oom"}
    wrong = [(r["shape"], r["batch"], r["seq"], r["status"]) for r, m in runs if m["fits"] != (r["status"] == "ok")]
    assert not wrong


def test_expandable_segments_take_no_allocator_reserve():
    default = gm.training_memory("llama-3.2-1b", batch_size=8, seq_len=2048)
    expandable = gm.training_memory("llama-3.2-1b", batch_size=8, seq_len=2048, expandable_segments=True)
    assert expandable.peak_bytes == default.peak_bytes
    assert expandable.reserved_bytes == expandable.peak_bytes                       # reserve factor 1
    assert default.reserved_bytes == pytest.approx(default.peak_bytes * 1.10)      # RESERVE_FACTOR
    assert expandable.total_bytes - expandable.reserved_bytes == 768 * 2**20        # the CUDA context


def test_the_h100_record_holds_the_memory_a_process_sees():
    # torch.cuda.get_device_properties(0).total_memory on the measuring H100: 81079 MiB
    assert gm.gpu("h100").usable_memory_bytes == 81079 * 2**20 == 85_017_493_504


def test_step_time_and_training_memory_give_one_peak():
    for fused in (False, True):
        kw = dict(batch_size=4, seq_len=2048, precision="bf16", checkpointing=True, fused=fused)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gm.DoesNotFitWarning)
            st = gm.training_step_time("llama-3-8b", "h100", **kw)
        assert st.peak_bytes == gm.training_memory("llama-3-8b", **kw).peak_bytes
        assert st.fits == bool(gm.fits("llama-3-8b", "h100", **kw))   # and one answer to "does it fit?"

