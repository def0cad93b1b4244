"""The host/device timeline and the host-cost record and fit."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpumodel.calibration.host import fit_host_costs
from gpumodel.hostcost import DEFAULT_HOST, HostCosts, host_costs_for, load_host_costs, timeline

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
    from gpumodel.calibration.host import _plan_host
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
