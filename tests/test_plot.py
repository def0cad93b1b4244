"""Plots: return a Figure, draw on log-log axes, place each op where the roofline says."""

import numpy as np
import pytest

import gpumodel as gm
from gpumodel import ops

matplotlib = pytest.importorskip("matplotlib", reason="plots need the 'plot' extra (matplotlib)")
matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _points(ax):
    """(x, y) of every scatter point drawn on ``ax``."""
    return np.concatenate([c.get_offsets() for c in ax.collections]) if ax.collections else np.empty((0, 2))


def test_roofline_places_ops_on_the_roof(tmp_path):
    mm, relu = ops.matmul(4096, 4096, 4096, "fp16"), ops.elementwise(4096 * 4096, "fp16")
    fig = gm.plot.roofline("h100", ops={"matmul": mm, "ReLU": relu})
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    pts = _points(ax)
    for op in (mm, relu):
        r = gm.roofline(op, "h100")
        assert np.isclose(pts, [r.arithmetic_intensity, r.attainable_flops / 1e12]).all(axis=1).any()
    labels = {t.get_text() for t in ax.texts}
    assert {"matmul", "ReLU"} <= labels
    # the bf16 ceiling: flat at 989.4 TFLOP/s right of the ridge, slope 3.35 TB/s left of it
    line = ax.get_lines()[0]
    x, y = line.get_data()
    assert y.max() == pytest.approx(989.4)
    assert np.interp(1.0, x, y) == pytest.approx(3.35)  # 1 FLOP/byte * 3.35 TB/s = 3.35 TFLOP/s
    out = tmp_path / "roofline.png"
    fig.savefig(out)
    assert out.stat().st_size > 10_000


def test_roofline_several_gpus_dtypes_and_levels():
    fig = gm.plot.roofline(["h100", "h200"], ops=[ops.softmax(4096, 4096)], dtypes=["bf16", "fp8"],
                           level=["hbm", "l2"])
    ax = fig.axes[0]
    from matplotlib.legend import Legend

    legend = [t.get_text() for leg in ax.findobj(Legend) for t in leg.get_texts()]
    assert any(t.startswith("h100-sxm bf16 hbm") for t in legend)
    assert any(t.startswith("h200-sxm fp8") for t in legend)
    assert any("ridge 295" in t for t in legend) and any("ridge 206" in t for t in legend)
    assert len(_points(ax)) == 2  # the op on each GPU
    assert "softmax rows=4096 cols=4096" in legend


def test_roofline_vector_op_draws_every_configuration():
    fig = gm.plot.roofline("h100", ops=[ops.matmul(np.round(np.logspace(0, 4, 9)), 4096, 4096)])
    assert len(_points(fig.axes[0])) == 9


def test_roofline_on_given_axes_and_unsupported_dtype_warns():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    with pytest.warns(UserWarning, match="fp8"):
        out = gm.plot.roofline(["h100", "a100"], ops={"fp8": ops.matmul(64, 64, 64, "fp8")}, ax=ax)
    assert out is fig and len(_points(ax)) == 1
    plt.close(fig)


def test_compare_gpus_bars_show_spec_values():
    fig = gm.plot.compare_gpus(["h100", "h200", "a100"])
    assert isinstance(fig, Figure) and len(fig.axes) == 4
    by_title = {ax.get_title(): [p.get_height() for p in ax.patches] for ax in fig.axes}
    assert by_title["Memory bandwidth [TB/s]"] == pytest.approx([3.35, 4.8, 2.04], abs=0.01)
    assert by_title["Dense FP16/BF16 tensor [TFLOP/s]"] == pytest.approx([989.4, 989.4, 312], abs=0.1)
    assert by_title["TDP [W]"][0] == 700
    assert by_title["Memory [GB]"][1] == pytest.approx(141, abs=0.5)


def test_bad_ops_argument():
    with pytest.raises(TypeError, match="OpCost"):
        gm.plot.roofline("h100", ops={"x": 3})


def test_sparse_chart_keeps_cuda_core_ceilings():
    fig = gm.plot.roofline("h100", ops=[ops.softmax(64, 64)], dtypes=["bf16", "fp32"], sparse=True)
    tops = sorted(line.get_data()[1].max() for line in fig.axes[0].get_lines() if not line.get_label().startswith("_"))
    assert tops == pytest.approx([66.9, 2 * 989.4])  # fp32 unchanged, bf16 doubled by 2:4 sparsity
