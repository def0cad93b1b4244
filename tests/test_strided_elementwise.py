"""Strided elementwise ops: PyTorch's generic (non-vectorised) kernel, measured on the H200."""

from pathlib import Path

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.calibration import calibration_for
from gpumodel.calibration.fit import load_points, point_set, relative_errors
from gpumodel.calibration.model import predict

DATA = Path(__file__).parent / "data" / "calibration"


def test_strided_op_moves_the_same_bytes():
    plain, strided = gm.ops.elementwise(2**20, "bf16", inputs=2), gm.ops.elementwise(2**20, "bf16", inputs=2,
                                                                                        strided=True)
    assert strided.bytes == plain.bytes == 3 * 2**20 * 2 and strided.flops == plain.flops
    assert strided.shape["strided"] is True and "strided" not in plain.shape
    with pytest.raises(gm.errors.GpumodelError, match="strided"):
        gm.ops.elementwise(10, strided="yes")


def test_strided_kernel_is_bound_by_its_element_rate():
    model = calibration_for("h200").model()
    p = model.params
    n = 2**26                                                 # 64M bf16 elements, one input: 256 MB of traffic
    op = gm.ops.elementwise(n, "bf16", strided=True)
    t = float(predict(model, op).time_s)
    # issue: an index decomposition an element (5.5e11/s) and an offset for each of its two operands (4.1e12/s),
    # plus its one FLOP an element: about 160 us, well over the traffic at the copy bandwidth (~63 us); the two
    # overlap partly (a soft maximum of sharpness strided_overlap_p)
    issue = n / p["strided_elem_rate"] + 2 * n / p["strided_operand_rate"] + n / p["vector_flops"]
    traffic = 2 * n * 2 / (p["bandwidth"] * p["bw_eff_elementwise"])
    body = (issue ** p["strided_overlap_p"] + traffic ** p["strided_overlap_p"]) ** (1 / p["strided_overlap_p"])
    assert t == pytest.approx(p["launch_s"] + p["strided_launch_s"] + body, rel=1e-9)
    assert issue < body < issue + traffic
    assert t > 2 * float(predict(model, gm.ops.elementwise(n, "bf16")).time_s)


def test_measured_validation_kernels():
    """154 held-out kernels (rotary-embedding and fused-projection patterns at LLM widths): from 1M elements
    up, measured 5.8% median, 14.5% p90; below, 3-13 us calls whose launch floor varies between reps."""
    _, pts = load_points(DATA / "validation_strided.jsonl")
    ps = point_set(pts)
    err = np.abs(relative_errors(calibration_for("h200").model(), ps))
    big = np.array([p["shape"]["numel"] >= 2**20 for p in ps.points])
    assert len(pts) == 154 and big.sum() > 60
    assert np.median(err[big]) < 0.08 and np.percentile(err[big], 90) < 0.20
    assert np.median(err) < 0.10
