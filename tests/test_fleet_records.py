"""The current data-center fleet loads with the figures its sources give (dense peaks, per GPU)."""

import pytest

import gpumodel as gm

T, P = 1e12, 1e15


@pytest.mark.parametrize(("name", "expected"), [
    # HGX B300 totals / 8, dense: FP4 108 PF, FP8 = FP6 36 PF (72 sparse), BF16 18 PF (36 sparse), TF32 9 PF (18
    # sparse), FP32 600 TF, FP64 10 TF; 288 GB HBM3e per GPU (Blackwell Ultra blog); 7.7 TB/s; 1,100 W
    ("b300", dict(fp4=13.5 * P, fp8=4.5 * P, fp6=4.5 * P, bf16=2.25 * P, tf32=1.125 * P, fp32=75 * T, fp64=1.25 * T,
                  memory=288e9, bandwidth=7.7e12, tdp=1100, cc="10.3")),
    # GB300 NVL72 totals / 72, dense: FP4 1,080 PF, FP8 360 PF, BF16 180 PF, TF32 90 PF, FP32 5,760 TF, FP64 100 TF;
    # 288 GB at 8 TB/s per GPU; 1,400 W
    ("gb300", dict(fp4=15 * P, fp8=5 * P, fp6=5 * P, bf16=2.5 * P, tf32=1.25 * P, fp32=80 * T, fp64=1.39 * T,
                   memory=288e9, bandwidth=8e12, tdp=1400, cc="10.3")),
    # GB200 NVL72 totals / 72, dense: FP4 720 PF, FP8 360 PF, INT8 360 POPS, BF16 180 PF, FP32 5,760 TF, FP64 2,880 TF;
    # 13.4 TB / 72 = 186 GB, 576 TB/s / 72 = 8 TB/s; 1,200 W
    ("gb200", dict(fp4=10 * P, fp8=5 * P, int8=5 * P, bf16=2.5 * P, tf32=1.25 * P, fp32=80 * T, fp64=40 * T,
                   memory=186e9, bandwidth=8e12, tdp=1200, cc="10.0")),
    # H800 SXM5: the H100 SXM5 datasheet's dense tensor peaks (bf16 1,979 / 2), FP64 1 TF; 80 GB, 3.35 TB/s; 700 W
    ("h800", dict(bf16=989.4 * T, fp8=1978.9 * T, int8=1978.9 * T, tf32=494.7 * T, fp32=66.9 * T, fp64=1 * T,
                  memory=80e9, bandwidth=3.35e12, tdp=700, cc="9.0")),
    # H20: FP16/BF16 148, TF32 74, FP8 296, INT8 296 TOPS dense, FP64 1 TF; 96 GB HBM3, 4.0 TB/s; 400 W
    ("h20", dict(bf16=148 * T, fp16=148 * T, tf32=74 * T, fp8=296 * T, int8=296 * T, fp64=1 * T,
                 memory=96e9, bandwidth=4.0e12, tdp=400, cc="9.0")),
    # MI325X data sheet: the MI300X's dense peaks (FP16/BF16 1,307.4, FP8 2,614.9, FP32 163.4, FP64 81.7);
    # 256 GB HBM3E, 6 TB/s; 1,000 W
    ("mi325x", dict(bf16=1307.4 * T, fp8=2614.9 * T, int8=2614.9 * T, tf32=653.7 * T, fp32=163.4 * T,
                    fp64=81.7 * T, memory=256e9, bandwidth=6e12, tdp=1000, cc=None)),
])
def test_fleet_record_matches_its_source(name, expected):
    g = gm.gpu(name)
    for key in ("fp4", "fp6", "fp8", "int8", "bf16", "fp16", "tf32", "fp32", "fp64"):
        if key in expected:
            assert g.peak_flops(key) == pytest.approx(expected[key], rel=1e-3), key
    assert g.memory_bytes == pytest.approx(expected["memory"])
    assert g.memory_bandwidth == pytest.approx(expected["bandwidth"])
    assert g.tdp_watts == pytest.approx(expected["tdp"])
    assert g.compute_capability == expected["cc"]


@pytest.mark.parametrize("alias", ["b300", "gb300", "h800", "h20", "mi325x", "B300", "GB300", "H800", "MI325X"])
def test_fleet_aliases_resolve(alias):
    assert gm.gpu(alias).name.startswith(alias.lower())


def test_blackwell_ultra_int8_is_not_published_so_not_the_fp16_rate():
    # Blackwell Ultra cut INT8 far below fp16; with no agreed figure the record has none rather than a wrong one.
    assert not gm.gpu("b300").supports("int8") and not gm.gpu("gb300").supports("int8")


def test_h800_differs_from_h100_only_in_nvlink_and_fp64():
    h800, h100 = gm.gpu("h800"), gm.gpu("h100")
    assert h800.nvlink_bandwidth == pytest.approx(400e9) and h100.nvlink_bandwidth == pytest.approx(900e9)
    assert h800.peak_flops("fp64") == pytest.approx(1e12)
    assert h800.peak_flops("bf16") == h100.peak_flops("bf16") and h800.memory_bandwidth == h100.memory_bandwidth


@pytest.mark.parametrize(("name", "gpu", "per_node", "intra", "inter"), [
    ("gb300-nvl72", "gb300", 72, 900e9, 800e9 / 8),   # 1.8 TB/s bidirectional NVLink 5; ConnectX-8 800 Gb/s per GPU
    ("hgx-h800", "h800-sxm", 8, 200e9, 400e9 / 8),     # NVLink 400 GB/s bidirectional; IB 400 Gb/s (DeepSeek-V3)
    ("dgx-b300", "b300", 8, 900e9, 800e9 / 8),         # NVLink 5 1.8 TB/s; 8 x ConnectX-8 800 Gb/s
])
def test_fleet_systems_resolve(name, gpu, per_node, intra, inter):
    s = gm.system(name)
    assert s.gpu.name == gpu and s.gpus_per_node == per_node
    assert s.intra_node.bandwidth == pytest.approx(intra) and s.inter_node.bandwidth == pytest.approx(inter)


@pytest.mark.parametrize("name", ["b300", "gb300", "gb200", "h800", "h20", "mi325x"])
def test_fleet_matmul_estimates(name):
    est = gm.estimate(gm.ops.matmul(8192, 8192, 8192, "bf16"), name)
    flops = 2 * 8192**3
    assert flops / gm.gpu(name).peak_flops("bf16") < est.seconds < 10 * flops / gm.gpu(name).peak_flops("bf16")
