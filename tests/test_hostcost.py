"""The host/device timeline and the host-cost record and fit."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpumodel.training.hostfit import fit_host_costs
from gpumodel.training.hostcost import DEFAULT_HOST, HostCosts, host_costs_for, load_host_costs, timeline

times = st.lists(st.floats(0, 1e-3), min_size=1, max_size=40)


def test_device_bound_sequence_is_host_lead_plus_kernels():
    # host 1 us per op, kernels 10 us: the first dispatch, then back-to-back kernels, then one round trip
    t = timeline(np.full(5, 1e-6), np.full(5, 1e-5), np.zeros(5, bool), 2e-5)
    assert t.seconds == pytest.approx(1e-6 + 5e-5 + 2e-5)
    assert t.host_wait_s == pytest.approx(1e-6)


def test_host_bound_sequence_is_the_dispatch_time():
    # host 10 us per op, kernels 1 us: the device idles between kernels; ends 1 us after the last dispatch
    t = timeline(np.full(5, 1e-5), np.full(5, 1e-6), np.zeros(5, bool), 0.0)
    assert t.seconds == pytest.approx(5e-5 + 1e-6)
    assert t.host_wait_s == pytest.approx(5e-5 + 1e-6 - 5e-6)


def test_a_sync_serialises_host_and_device():
    # sync after the first kernel: the host waits for it (1 + 10 us) and pays 5 us before dispatching the second
    t = timeline(np.array([1e-6, 1e-6]), np.array([1e-5, 1e-5]), np.array([True, False]), 5e-6)
    assert t.seconds == pytest.approx((1e-6 + 1e-5 + 5e-6) + 1e-6 + 1e-5 + 5e-6)


@settings(max_examples=60, deadline=None)
@given(times, times)
def test_timeline_is_at_least_each_resource_and_at_most_their_sum(h, d):
    n = min(len(h), len(d))
    h, d = np.array(h[:n]), np.array(d[:n])
    t = timeline(h, d, np.zeros(n, bool), 0.0)
    assert t.seconds >= max(h.sum(), d.sum()) - 1e-15
    assert t.seconds <= h.sum() + d.sum() + 1e-12
    assert t.seconds == pytest.approx(t.kernel_s + t.host_wait_s + t.sync_s)


def test_no_host_file_means_defaults_labelled_uncalibrated(tmp_path):
    assert host_costs_for("no-such-gpu") is DEFAULT_HOST and not DEFAULT_HOST.calibrated
    path = tmp_path / "h.yaml"
    path.write_text("host:\n  op_s: 2.0e-05\n  calibrated: true\n  optimizer: {adamw_foreach: [0.001, 1.0e-06]}\n")
    hc = load_host_costs(path)
    assert hc.op_s == 2e-5 and hc.calibrated and hc.optimizer["adamw_foreach"] == (0.001, 1e-6)
    assert hc.optimizer_cost("adamw", "foreach", 100) == pytest.approx(0.001 + 100e-6)
    assert host_costs_for("h200-sxm", path).op_s == 2e-5


def test_fit_takes_medians_and_optimizer_lines():
    rows = [{"kind": "host", "bench": f"op_{n}", "grad": True, "host_per_op_s": v}
            for n, v in (("add", 8e-6), ("mul_scalar", 10e-6), ("linear", 14e-6))]
    rows += [{"kind": "host", "bench": "optimizer_step", "optimizer": "adamw", "foreach": True, "tensors": nt,
              "host_per_op_s": 2e-4 + 1e-6 * nt} for nt in (8, 64, 256)]
    rows += [{"kind": "host", "bench": "module_linear", "host_per_op_s": 20e-6},
             {"kind": "host", "bench": "functional_linear", "host_per_op_s": 14e-6}]
    hc = fit_host_costs(rows)
    assert hc.op_s == 10e-6 and hc.module_s == pytest.approx(6e-6) and hc.calibrated
    base, per = hc.optimizer["adamw_foreach"]
    assert base == pytest.approx(2e-4) and per == pytest.approx(1e-6)
    assert isinstance(hc, HostCosts) and hc.layer_scale("llama", True)["forward"] == 1.0


def test_layer_ratio_is_the_median_over_tiny_models_of_all_families():
    from gpumodel.training.hostfit import _plan_host
    tiny = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "intermediate_size": 128, "vocab_size": 256}
    rows = []
    for n, ratio in ((2, 2.0), (4, 2.5), (6, 40.0)):  # one outlier (a single noisy timing) does not move the median
        model = _plan_host(replace(DEFAULT_HOST, layers={}), tiny | {"num_hidden_layers": n}, True)
        rows.append({"kind": "layers", "family": "llama", "layers": n, "amp": True,
                     "hf_config": tiny | {"num_hidden_layers": n},
                     **{f"host_{p}_s": ratio * model[p] for p in ("forward", "backward")}})
    hc = fit_host_costs(rows)  # no per-op rows: per-op costs stay the defaults
    assert set(hc.layers) == {"*/amp"}
    scale = hc.layer_scale("mistral", amp=False)  # any family; without autocast falls back to the autocast entry
    assert scale["forward"] == pytest.approx(2.5) and scale["backward"] == pytest.approx(2.5)  # median of 2, 2.5, 40
    assert scale["fixed_forward"] == pytest.approx(2.5) and scale["recompute"] == pytest.approx(2.5)
    assert hc.layer_scale("llama", amp=True, checkpointing=True)["recompute"] == pytest.approx(2.5)


def test_checkpointed_entry_scales_the_recompute_with_the_backward():
    hc = HostCosts(layers={"*/amp": {"forward": 3.0, "backward": 1.5}, "*/amp/ckpt": {"forward": 3.0, "backward": 1.6}})
    assert hc.layer_scale("gpt2", amp=True)["recompute"] == 3.0                        # no checkpointing entry used
    assert hc.layer_scale("gpt2", amp=True, checkpointing=True)["recompute"] == 1.6    # measured over the whole backward
    assert HostCosts(layers={}).layer_scale("gpt2", amp=True) == {"forward": 1.0, "backward": 1.0, "fixed_forward": 1.0,
                                                                  "fixed_backward": 1.0, "recompute": 1.0}


def test_expert_loop_cost_is_the_difference_of_two_expert_counts_per_iteration():
    # mixtral tiny, 2 MoE layers, 16 tokens, top-2: 4 experts all hit, 8 experts 8 (1 - 0.75^16) = 7.92 hit;
    # 2 layers x 3.92 more iterations = 7.84, so 4 ms more forward host time is 0.51 ms per iteration
    mix = {"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "num_experts_per_tok": 2}
    rows = [{"kind": "layers", "shape": "mixtral-500m", "layers": 2, "amp": True, "experts_requested": "eager",
             "n_experts": e, "tokens": 16, "hf_config": mix | {"num_local_experts": e},
             "host_forward_s": f, "host_backward_s": b} for e, f, b in ((4, 0.010, 0.012), (8, 0.014, 0.018))]
    hc = fit_host_costs(rows)
    iters = 2 * (8 * (1 - 0.75 ** 16) - 4 * (1 - 0.5 ** 16))
    assert hc.expert_forward_s == pytest.approx(0.004 / iters) and hc.expert_backward_s == pytest.approx(0.006 / iters)
    assert hc.layers == {}  # eager-expert models do not enter the per-op glue ratio


def test_compiled_launch_is_the_slope_of_host_time_over_kernels():
    # 2 -> 4 layers: forward +30 kernels, +0.6 ms; backward +70 kernels, +1.4 ms: 20 us per launch; the rest of the
    # 2-layer forward, 2 ms - 40 x 20 us = 1.2 ms, is the call's fixed cost
    lla = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 128, "vocab_size": 256}
    rows = [{"kind": "layers", "shape": "llama-160m", "layers": n, "amp": True, "compile": True,
             "hf_config": lla | {"num_hidden_layers": n}, "host_forward_s": f, "host_backward_s": b,
             "profile": {"forward": {"kernels": kf}, "backward": {"kernels": kb}}}
            for n, kf, kb, f, b in ((2, 40, 80, 0.002, 0.003), (4, 70, 150, 0.0026, 0.0044))]
    hc = fit_host_costs(rows)
    assert hc.compile_launch_s == pytest.approx(20e-6) and hc.compiled_launch() == pytest.approx(20e-6)
    assert hc.compile_forward_s == pytest.approx(1.2e-3) and hc.compile_backward_s == pytest.approx(1.4e-3)
    assert HostCosts().compiled_launch() == HostCosts().launch_s  # unmeasured: an eager launch


def test_measured_expert_iteration_prices_the_loop_as_a_whole():
    from gpumodel.training.stepplan import step_plan
    from gpumodel.records.transformer import TransformerConfig
    cfg = TransformerConfig.from_hf({"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 1,
                                     "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
                                     "vocab_size": 256, "num_local_experts": 4, "num_experts_per_tok": 2})

    def host(hc, phase):
        return sum(b.repeat * sum(k[1] for k in b.kernels) for b in step_plan(cfg, 1, 16, "amp_bf16", "adamw", False,
                                                                               host=hc, experts="eager") if b.phase == phase)
    base = replace(DEFAULT_HOST, layers={})
    lo, hi = replace(base, expert_forward_s=1e-3, expert_backward_s=1e-3), replace(base, expert_forward_s=2e-3,
                                                                                   expert_backward_s=3e-3)
    assert host(hi, "forward") - host(lo, "forward") == pytest.approx(4 * 1e-3)   # 4 experts, 1 ms more each
    assert host(hi, "backward") - host(lo, "backward") == pytest.approx(4 * 2e-3)


def test_combining_runs_averages_measured_fields_and_keeps_single_measurements():
    from gpumodel.training.hostfit import combine_host_costs
    a = fit_host_costs([{"kind": "host", "bench": "op_add", "grad": True, "host_per_op_s": 8e-6},
                        {"kind": "host", "bench": "item_idle", "host_per_op_s": 9e-6}])
    b = fit_host_costs([{"kind": "host", "bench": "op_add", "grad": True, "host_per_op_s": 12e-6}])
    both = combine_host_costs([a, b])
    assert both.op_s == pytest.approx(10e-6)       # (8 + 12) / 2
    assert both.item_s == pytest.approx(9e-6)      # measured in one run only: that run's value
    assert both.backward_op_s == DEFAULT_HOST.backward_op_s and both.calibrated


def test_new_gemm_shapes_cost_a_kernel_choice_on_the_host():
    """Measured on the H200 machine (tests/data/steptime/gemm_shapes.jsonl): F.linear 28 us at a cached shape,
    191 us at a new row count; a weight-gradient mm 24 us cached, 102 us at a new contraction length."""
    from gpumodel.training.hostfit import fit_host_costs, load_rows

    rows = load_rows(Path(__file__).parent / "data" / "steptime" / "gemm_shapes.jsonl")
    hc = fit_host_costs(rows)
    assert hc.gemm_shape_s == pytest.approx(191e-6 - 28e-6, abs=2e-6)
    assert hc.gemm_shape_k_s == pytest.approx(102e-6 - 24e-6, abs=2e-6)
    from gpumodel.training.hostcost import host_costs_for
    assert host_costs_for("h200-sxm").gemm_shape_s == pytest.approx(hc.gemm_shape_s)


def test_eager_expert_loop_pays_the_new_shapes():
    """Each iteration of the eager expert loop runs 2 GEMMs with a new token count: the forward pays
    2 x gemm_shape_s more, the backward 2 x (gemm_shape_s + gemm_shape_k_s); 8 layers x 8 experts of
    Mixtral-500m at 8 x 1024 tokens reach all 64 iterations."""
    import dataclasses

    import gpumodel as gm
    from gpumodel.training.hostcost import host_costs_for

    hc = host_costs_for("h200-sxm")
    rows = (json.loads(line) for line in (Path(__file__).parent / "data" / "steptime" / "step_times_v5.jsonl").open())
    row = next(r for r in rows if r.get("shape") == "mixtral-500m" and "hf_config" in r)
    cfg = gm.TransformerConfig.from_hf(dict(row["hf_config"]))
    assert (cfg.num_layers, cfg.num_experts) == (8, 8)
    kw = dict(batch_size=8, seq_len=1024, precision="amp_bf16", experts_implementation="eager")
    with_shapes = gm.training_step_time(cfg, "h200", host=hc, **kw)
    without = gm.training_step_time(cfg, "h200", host=dataclasses.replace(hc, gemm_shape_s=0.0, gemm_shape_k_s=0.0),
                                    **kw)
    extra = 64 * (2 * hc.gemm_shape_s + 2 * (hc.gemm_shape_s + hc.gemm_shape_k_s))
    assert with_shapes.seconds - without.seconds == pytest.approx(extra, rel=0.25)   # the host-bound step grows by it


def test_a_users_host_fit_carries_what_it_did_not_measure_from_the_shipped_host():
    """``gpumodel calibrate`` times single ops, chains, optimizer steps and clipping, not the tiny models whose
    per-layer scales of Hugging Face's Python glue the shipped host holds, nor the compiled or eager-expert paths:
    those come from the shipped host (scales as they are, times in proportion to this CPU's per-op cost), never
    from the defaults (scale 1, no cost)."""
    from gpumodel.training.hostcost import DEFAULT_HOST, host_costs_for
    from gpumodel.training.hostfit import fit_host_costs

    shipped = host_costs_for("h200-sxm")
    rows = [{"kind": "host", "bench": "op_add", "grad": True, "host_per_op_s": shipped.op_s / 2},
            {"kind": "host", "bench": "op_add", "grad": False, "host_per_op_s": 4e-6}]
    mine = fit_host_costs(rows, base=shipped)
    assert mine.op_s == shipped.op_s / 2 and mine.op_nograd_s == 4e-6               # measured
    assert mine.layers == shipped.layers and mine.layers != DEFAULT_HOST.layers     # ratios kept
    for name in ("gemm_shape_s", "expert_forward_s", "compile_launch_s", "backward_op_s"):
        assert getattr(mine, name) == pytest.approx(getattr(shipped, name) / 2), name   # a CPU twice as fast
    assert mine.kernel_floor_s == shipped.kernel_floor_s                            # the GPU's, not the CPU's
    assert fit_host_costs(rows).layers == {} and fit_host_costs(rows).gemm_shape_s == 0.0   # no base: the defaults
