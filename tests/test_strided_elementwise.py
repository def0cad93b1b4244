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
    chain = 4 * p["strided_step_s"]              # the last threads' 4 bf16 elements, one after another: a latency
    assert t == pytest.approx(p["launch_s"] + body + chain, rel=1e-9)
    assert float(predict(model, op).overhead_s) == pytest.approx(p["launch_s"] + chain)
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


def test_concat_is_a_copy_and_checks_its_pieces():
    op = gm.ops.concat(3 * 2**20, "fp32", pieces=3, strided=True)
    assert op.bytes == 2 * 3 * 2**20 * 4 and op.flops == 0             # read once, written once
    assert op.name == "elementwise" and op.shape["concat"] == 3 and op.shape["strided"] is True
    for bad in (1, True, 2.5):
        with pytest.raises(gm.errors.GpumodelError, match="concat"):
            gm.ops.concat(64, pieces=bad)


def test_strided_concat_is_a_chain_of_copies_per_thread():
    """A strided torch.cat: 2 x 132 blocks of 512 threads an input, each thread copying element after element."""
    model = calibration_for("h200").model()
    p = model.params
    n = 2**27                                                  # 2 halves of 2**26 bf16 elements
    steps = np.ceil(n / 2 / (2 * 132 * 512))                   # 497 copies a thread
    # the first copy is the launch's latency; the other 496 stream beside the traffic (a soft maximum)
    chain, traffic = (steps - 1) * p["concat_step_s"], 2 * n * 2 / (p["bandwidth"] * p["bw_eff_elementwise"])
    q = p["strided_overlap_p"]
    est = predict(model, gm.ops.concat(n, "bf16", strided=True))
    assert float(est.time_s) == pytest.approx(p["launch_s"] + p["concat_step_s"] + (chain ** q + traffic ** q) ** (1 / q),
                                              rel=1e-9)
    assert float(est.overhead_s) == pytest.approx(p["launch_s"] + p["concat_step_s"])
    # measured: 293.6 us (validation_strided.jsonl); the copies' chain, not the 537 MB of traffic, sets it
    assert 0.85 < float(est.time_s) / 293.6e-6 < 1.15 and chain > traffic
    # contiguous pieces: PyTorch's vectorised copy, priced as one
    assert float(predict(model, gm.ops.concat(n, "bf16")).time_s) == pytest.approx(
        float(predict(model, gm.ops.elementwise(n, "bf16", flops_per_element=0)).time_s))


def test_small_generic_kernels_last_their_unrolled_chain():
    """Small launches of the generic kernel: bf16 ones (4 elements a thread) outlast fp32 ones (2) by about
    two dependent steps, as measured (fit and validation sets: every strided kernel under 64 K elements but
    the concatenations)."""
    model = calibration_for("h200").model()
    small = {"bf16": [], "fp32": []}
    for path in sorted(DATA.glob("validation*.jsonl")) + [DATA / "fit.jsonl"]:
        for pt in load_points(path)[1]:
            s = pt["shape"]
            if (pt["op"] == "elementwise" and s.get("strided") and s["numel"] < 65536
                    and pt.get("kernel") not in ("cat_halves", None) and pt["dtype"] in small):
                small[pt["dtype"]].append(pt["time_s"])
    measured = np.median(small["bf16"]) - np.median(small["fp32"])   # about 1 us
    t = {d: float(predict(model, gm.ops.elementwise(4096, d, strided=True)).time_s) for d in small}
    assert t["bf16"] - t["fp32"] == pytest.approx(2 * model.params["strided_step_s"], rel=0.05)
    assert t["bf16"] - t["fp32"] == pytest.approx(measured, rel=0.3)
    assert min(len(v) for v in small.values()) > 20
