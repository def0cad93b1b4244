"""Memory answers at the edge of an H100 (tests/data/memory/edge, measured with bench/measure_edge.py)."""

import functools
import warnings

import numpy as np
import pytest
from benchscript import load_bench

import gpumodel as gm

edge = load_bench("edge_accuracy")
SETS = ["h100", "h100_heldout", "h100_forloop", "h100_heldout_forloop"]
#: measured after the model, its band and ``gm.fits`` were written (tests/data/memory/edge/README.md)
LATER = ["h100_heldout2", "h100_heldout3", "h100_heldout4"]


@functools.cache
def modelled(name: str) -> list:
    """(run, ``gm.memory_margin``'s answer) of every run of a set, computed once for the module's tests."""
    return [(r, edge.modelled(r)) for r in edge.load(name)]


@functools.cache
def replayed(name: str) -> list:
    """(the allocator replay's answer, run) of a set's default-allocator runs, computed once."""
    return [(edge.simulated(r), r) for r in edge.load(name) if not r["expandable_segments"]]


@pytest.fixture(scope="module")
def scored():
    return [pair for name in SETS for pair in modelled(name)]


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



# ---------------------------------------------------------------------------------------------- the margin
def _options(r):
    opts = dict(batch_size=r["batch"], seq_len=r["seq"], precision=r["precision"], optimizer=r["optimizer"],
                checkpointing=r["checkpointing"], expandable_segments=r["expandable_segments"])
    if r["optimizer"] == "adamw":
        opts.update(fused=r["implementation"] == "fused", foreach=r["implementation"] != "forloop")
    return opts


def test_the_margins_bands_are_the_held_out_runs_errors():
    """REPLAY_ERROR and ALLOCATED_ERROR are the 80th percentiles of the held-out sets' errors (recomputed here)."""
    from gpumodel.core.margin import ALLOCATED_ERROR, REPLAY_ERROR
    held_out = ("h100_heldout", "h100_heldout_forloop")
    reserved = [(s["reserved"], r) for name in held_out for s, r in replayed(name) if r["status"] == "ok"]
    replay = [abs(s / r["peak_reserved"] - 1) for s, r in reserved if s]     # the replay's failures: they miss
    allocated = [abs(m["peak"] / r["peak_allocated"] - 1) for name in held_out for r, m in modelled(name)
                 if r["status"] == "ok"]
    assert len(replay) == 18 and len(allocated) == 54
    assert REPLAY_ERROR == pytest.approx(np.percentile(replay, 80), abs=0.0005)
    assert ALLOCATED_ERROR == pytest.approx(np.percentile(allocated, 80), abs=0.0005)


@pytest.mark.parametrize("name", ["h100", "h100_heldout"])
def test_the_margin_decides_as_fits_and_states_its_need(name):
    gpu = gm.gpu("h100-sxm")
    for r in edge.load(name)[:12]:
        cfg = gm.TransformerConfig.from_hf(edge.SHAPES[r["shape"]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = gm.memory_margin(cfg, gpu, **_options(r))
            fits = gm.fits(cfg, gpu, **_options(r))
        assert bool(m.fits) == bool(fits)
        assert m.spare_bytes == pytest.approx(gpu.usable_memory_bytes - m.needed_bytes)
        assert (m.spare_bytes >= 0) == bool(m.fits)          # the need decides: no answer against its own margin
        low, high = m.band_bytes
        if str(m.decided_by) == "reserve":
            assert np.isnan(low) and not m.uncertain
        else:
            assert low < m.needed_bytes < high and bool(m.uncertain) == (low <= gpu.usable_memory_bytes <= high)


def test_a_step_at_the_edge_that_failed_is_replayed_short_and_marked_uncertain():
    """The 8B step at 6 x 2048 that failed on the H100: the replay (the head's weight freed at the build, the cuBLAS
    workspaces taken after their products, new segments below the old) runs short by 2-3 GiB, and the answer says it
    could go either way (the allocated peak plus the context fits)."""
    gpu = gm.gpu("h100-sxm")
    r = next(r for r in edge.load("h100") if r["shape"] == "llama-3-8b" and r["batch"] == 6 and r["seq"] == 2048
             and not r["expandable_segments"] and r["status"] == "oom")
    m = gm.memory_margin(gm.TransformerConfig.from_hf(edge.SHAPES["llama-3-8b"]), gpu, **_options(r))
    assert str(m.decided_by) == "allocator" and not m.fits and -4 * 2**30 < m.spare_bytes < -2**30 and m.uncertain
    assert "could go either way" in repr(m)


def test_the_margin_broadcasts_and_the_command_line_says_what_fits_says(capsys):
    m = gm.memory_margin("llama-3.2-1b", "h100", batch_size=np.array([1, 4, 64]), seq_len=1024)
    assert m.fits.tolist() == gm.fits("llama-3.2-1b", "h100", batch_size=np.array([1, 4, 64]), seq_len=1024).tolist()
    assert list(m.decided_by) == ["reserve", "reserve", "reserve"] and np.all(np.diff(m.spare_bytes) < 0)
    from gpumodel.cli import main
    assert main(["memory", "llama-3-8b", "--gpu", "h100", "--batch", "6", "--seq", "2048", "--precision", "bf16",
                 "--checkpointing", "full", "--json"]) == 0
    import json
    out = json.loads(capsys.readouterr().out)
    want = gm.memory_margin("llama-3-8b", "h100", batch_size=6, seq_len=2048, precision="bf16", checkpointing="full")
    assert out["fits"] == bool(want.fits) == bool(gm.fits("llama-3-8b", "h100", batch_size=6, seq_len=2048,
                                                          precision="bf16", checkpointing="full"))
    assert out["decided_by"] == "allocator" and out["headroom_bytes"] == pytest.approx(float(want.spare_bytes))


def test_a_step_that_ran_then_failed_is_an_answer_that_could_go_either_way():
    """Llama-3.2-1B's amp step at 32 x 1024 ran as the process's first run (68.1 GiB reserved), then failed when
    repeated at its end (15.7 GiB asked at 67.7 GiB reserved), in two processes (``h100_amp_traces``,
    ``h100_amp_whole``). The replay is the first run's to the byte and says it fits; the band reaches up by one segment
    of the step's largest block (the 15.66 GiB fp32 logits), which a process's earlier work can leave no room for, so
    the answer says it could go either way."""
    gpu = gm.gpu("h100-sxm")
    cfg = gm.TransformerConfig.from_hf(edge.SHAPES["llama-3.2-1b"])
    for name in ("h100_amp_traces", "h100_amp_whole"):
        runs = sorted((r for r in edge.load(name) if r["shape"] == "llama-3.2-1b" and not r["expandable_segments"]),
                      key=lambda r: r["index"])
        assert [r["status"] for r in runs] == ["ok", "oom"]
        assert {(r["batch"], r["seq"], r["precision"]) for r in runs} == {(32, 1024, "amp_bf16")}
        assert edge.simulated(runs[0])["reserved"] == runs[0]["peak_reserved"]      # 73,169,633,280 B both
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = gm.memory_margin(cfg, gpu, **_options(runs[0]))
    logits_fp32 = 32 * 1024 * cfg.vocab_size * 4                                  # 15.66 GiB
    assert str(m.decided_by) == "allocator" and m.fits and m.uncertain
    assert m.band_bytes[1] == pytest.approx(m.needed_bytes + logits_fp32, rel=1e-3)
    assert m.needed_bytes < gpu.usable_memory_bytes < m.band_bytes[1]


def test_every_wrong_answer_of_the_default_allocator_says_it_could_go_either_way():
    wrong = []
    for name in SETS + LATER + ["h100_amp_traces", "h100_sgd_traces"]:
        for r, m in modelled(name):
            if r["expandable_segments"]:
                continue
            if m["fits"] != (r["status"] == "ok") and not m["uncertain"]:
                wrong.append((name, r["shape"], r["batch"], r["seq"], r["status"]))
    assert not wrong


def test_runs_measured_later_come_out_as_they_ran():
    """Plans drawn with other seeds and measured after the model was written (49, 41 and 37 runs): the allocated peak,
    fits with expandable segments on every run, and the replay's reserved peak of the default allocator."""
    scored = [pair for name in LATER for pair in modelled(name)]
    runs = [r for r, _ in scored]
    assert len(runs) == 49 + 41 + 37 and {r["status"] for r in runs} == {"ok", "oom"}
    peak = [abs(m["peak"] / r["peak_allocated"] - 1) for r, m in scored if r["status"] == "ok"]
    assert np.median(peak) < 0.005 and max(peak) < 0.03
    assert all(m["fits"] == (r["status"] == "ok") for r, m in scored if r["expandable_segments"])
    by_set = {name: replayed(name) for name in LATER}
    reserved = [abs(s["reserved"] / r["peak_reserved"] - 1) for pairs in by_set.values() for s, r in pairs
                if r["status"] == "ok" and s["reserved"]]
    assert len(reserved) >= 10 and np.median(reserved) < 0.05
    for pairs in by_set.values():   # at most one wrong answer a plan, each marked uncertain (the test above)
        assert sum(s["fits"] == (r["status"] == "ok") for s, r in pairs) >= len(pairs) - 1


def test_the_same_step_failed_first_and_ran_when_repeated_in_one_process():
    """Llama-3.2-1B's SGD step at 12 x 2048 (77.8 GiB allocated) failed as the process's first run, asking 11.74 GiB
    with 11.94 GiB reserved but split, and ran when repeated at the end; three shapes of the same peak ran in between
    (an earlier process had them fail). The outcome is not a function of the step: each default-allocator answer
    says it could go either way, and with expandable segments every one ran, as ``gm.fits`` says."""
    scored = modelled("h100_sgd_traces")
    default = [(r, m) for r, m in scored if not r["expandable_segments"]]
    same = [r for r, _ in default if (r["batch"], r["seq"]) == (12, 2048)]
    assert [r["status"] for r in sorted(same, key=lambda r: r["index"])] == ["oom", "ok"]
    assert all(m["uncertain"] for _, m in default)
    assert all(m["fits"] and r["status"] == "ok" for r, m in scored if r["expandable_segments"])


def test_a_plan_measured_after_the_replays_last_changes_comes_out_as_it_ran():
    """``h100_heldout4``: drawn (seed 37) and measured after the replay learnt the tied head's weight, the workspaces'
    timing and the segments' order from the whole traces: every default-allocator answer right (19 of 19, dense and
    MoE), every expandable-segments answer right (18 of 18), the reserved peaks within 1% at the median."""
    scored = modelled("h100_heldout4")
    runs = [r for r, _ in scored]
    assert len(runs) == 37 and sorted({r["shape"] for r in runs}) == ["llama-3-8b", "llama-3.2-1b", "llama-3.2-3b",
                                                                       "qwen-moe-12l", "qwen2.5-7b"]
    assert all(m["fits"] == (r["status"] == "ok") for r, m in scored)
    default = replayed("h100_heldout4")
    assert len(default) == 19 and all(s["fits"] == (r["status"] == "ok") for s, r in default)
    reserved = [abs(s["reserved"] / r["peak_reserved"] - 1) for s, r in default if r["status"] == "ok"]
    assert len(reserved) == 10 and np.median(reserved) < 0.01

