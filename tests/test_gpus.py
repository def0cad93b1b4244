"""The shipped GPU database against datasheets, Brenndoerfer's (2026) numbers, and the CUDA guide.

Every expected value below is typed from the named document, in the form the document prints it
(tensor peaks that a datasheet quotes only "with sparsity" are entered as printed and halved here),
never read back from the YAML files under test.

Brenndoerfer (2026): M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores",
https://mbrenndoerfer.com/writing/gpu-architecture-memory-hierarchy-cuda-tensor-cores
"""

import pytest

import gpumodel as gm

CANONICAL = [
    "v100-sxm2-32gb", "t4", "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-80gb", "a10", "l4", "l40s",
    "rtx-3090", "rtx-4090", "rtx-5090", "h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "b200", "mi300x",
]

# name -> SMs (CUs for AMD), memory [GB], bandwidth [GB/s], dense peaks [TFLOP/s or TOPS],
# peaks the document prints only with 2:4 sparsity [same units, halved below], document.
_A100_PEAKS = {"fp64": 9.7, "fp64_tensor": 19.5, "fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312,
               "int8": 624, "int4": 1248}
DATASHEETS = {
    "v100-sxm2-32gb": (80, 32, 900, {"fp64": 7.8, "fp32": 15.7, "fp16": 125}, {},
                       "NVIDIA Tesla V100 datasheet, SXM2 column; Volta whitepaper Table 1"),
    "t4": (40, 16, 320, {"fp32": 8.1, "fp16": 65, "int8": 130, "int4": 260}, {},
           "NVIDIA T4 datasheet; Turing whitepaper (40 SMs)"),
    "a100-sxm4-40gb": (108, 40, 1555, _A100_PEAKS, {}, "NVIDIA A100 whitepaper Table 3"),
    "a100-sxm4-80gb": (108, 80, 2039, _A100_PEAKS, {}, "NVIDIA A100 80GB datasheet, SXM column"),
    "a100-pcie-80gb": (108, 80, 1935, _A100_PEAKS, {}, "NVIDIA A100 80GB datasheet, PCIe column"),
    "a10": (72, 24, 600, {"fp32": 31.2, "tf32": 62.5, "fp16": 125, "bf16": 125, "int8": 250, "int4": 500}, {},
            "NVIDIA A10 datasheet (dense | sparse columns)"),
    "l4": (58, 24, 300, {"fp32": 30.3}, {"tf32": 120, "fp16": 242, "bf16": 242, "fp8": 485, "int8": 485},
           "NVIDIA L4 datasheet (tensor figures with sparsity); 58 SMs from deviceQuery"),
    "l40s": (142, 48, 864, {"fp32": 91.6}, {"tf32": 366, "fp16": 733, "bf16": 733, "fp8": 1466, "int8": 1466},
             "NVIDIA L40S datasheet (sparse column)"),
    "rtx-3090": (82, 24, 936, {"fp32": 35.6, "tf32": 35.6, "fp16": 71, "bf16": 71, "fp16_fp16acc": 142,
                               "int8": 284, "int4": 568}, {},
                 "NVIDIA Ampere GA102 whitepaper, RTX 3090 (dense of dense/sparse pairs)"),
    "rtx-4090": (128, 24, 1008, {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2, "fp16_fp16acc": 330.3,
                                 "fp8": 330.3, "int8": 660.6, "int4": 1321.2}, {},
                 "NVIDIA Ada whitepaper Appendix A, RTX 4090"),
    "rtx-5090": (170, 32, 1792, {"fp32": 104.8, "tf32": 104.8, "fp16": 209.5, "bf16": 209.5, "fp16_fp16acc": 419,
                                 "fp8": 419, "fp4": 1676, "int8": 838}, {},
                 "NVIDIA RTX Blackwell whitepaper, RTX 5090"),
    "h100-sxm": (132, 80, 3350, {"fp64": 34, "fp64_tensor": 67, "fp32": 67},
                 {"tf32": 989, "fp16": 1979, "bf16": 1979, "fp8": 3958, "int8": 3958},
                 "NVIDIA H100 datasheet, SXM column"),
    "h100-pcie": (114, 80, 2000, {"fp64": 26, "fp64_tensor": 51, "fp32": 51},
                  {"tf32": 756, "fp16": 1513, "bf16": 1513, "fp8": 3026, "int8": 3026},
                  "NVIDIA H100 datasheet, PCIe column; H100 whitepaper (114 SMs)"),
    "h100-nvl": (132, 94, 3900, {"fp64": 30, "fp64_tensor": 60, "fp32": 60},
                 {"tf32": 835, "fp16": 1671, "bf16": 1671, "fp8": 3341, "int8": 3341},
                 "NVIDIA H100 datasheet, NVL column"),
    "h200-sxm": (132, 141, 4800, {"fp64": 34, "fp64_tensor": 67, "fp32": 67},
                 {"tf32": 989, "fp16": 1979, "bf16": 1979, "fp8": 3958, "int8": 3958},
                 "NVIDIA H200 datasheet, SXM column"),
    "b200": (148, 180, 7700, {"fp64": 37, "fp64_tensor": 37, "fp32": 75},
             {"tf32": 2200, "fp16": 4500, "bf16": 4500, "fp8": 9000, "fp6": 9000, "int8": 9000, "fp4": 18000},
             "NVIDIA HGX B200 datasheet, per-GPU column; 148 SMs from deviceQuery"),
    "mi300x": (304, 192, 5300, {"fp64": 81.7, "fp64_tensor": 163.4, "fp32": 163.4, "tf32": 653.7, "fp16": 1307.4,
                                "bf16": 1307.4, "fp8": 2614.9, "int8": 2614.9}, {},
               "AMD Instinct MI300X data sheet"),
}

# Peaks not on the datasheet that the records derive, each documented in the record's notes:
# FP64 on Turing/GA102/AD102/GB202 parts from the whitepapers' 1/32 or 1/64 FP64:FP32 ratio.
DERIVED = {("t4", "fp64"), ("a10", "fp64"), ("l4", "fp64"), ("l40s", "fp64"), ("rtx-3090", "fp64"),
           ("rtx-4090", "fp64"), ("rtx-5090", "fp64")}


def test_every_canonical_gpu_loads_and_validates():
    assert set(CANONICAL) <= set(gm.list_gpus())
    assert len(gm.all_gpus()) >= 17
    assert gm.list_gpus(vendor="amd") == ["mi300x", "mi325x"]


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_record_matches_datasheet(name):
    sms, mem_gb, bw_gbs, dense, sparse, _source = DATASHEETS[name]
    g = gm.gpu(name)
    assert g.sm_count == sms
    assert g.memory_bytes == pytest.approx(mem_gb * 1e9, rel=1e-9)  # decimal GB
    assert g.memory_bandwidth == pytest.approx(bw_gbs * 1e9, rel=1e-9)
    expected = {k: v * 1e12 for k, v in dense.items()}
    expected.update({k: v / 2 * 1e12 for k, v in sparse.items()})  # 2:4-sparse figure / 2 = dense
    for key, value in expected.items():
        # datasheets round to 2-4 significant figures (H100 FP64 "34" is 33.5 in the whitepaper)
        assert getattr(g.peaks, key) == pytest.approx(value, rel=0.02), key
    for key, value in g.peaks.model_dump().items():
        if value is not None:
            assert key in expected or (name, key) in DERIVED, f"{name}.{key} has no datasheet figure"


def test_brenndoerfer_h100_fp32_from_cores():
    h100 = gm.gpu("h100")
    assert h100.fp32_peak_from_cores == pytest.approx(132 * 128 * 2 * 1.98e9)  # = 66.9e12
    assert h100.peak_flops("fp32") == pytest.approx(66.9e12, rel=1e-3)


def test_brenndoerfer_ridge_points():
    h100, h200 = gm.gpu("h100"), gm.gpu("h200")
    assert h100.peak_flops("bf16") / h100.memory_bandwidth == pytest.approx(295.3, abs=0.1)  # 989.4e12 / 3.35e12
    assert h200.peak_flops("bf16") / h200.memory_bandwidth == pytest.approx(206.1, abs=0.1)  # 989.4e12 / 4.8e12
    assert gm.compare(["h100", "h200"])["ridge_bf16"] == [295.3, 206.1]


def test_brenndoerfer_sm_counts_and_consumer_peak():
    assert gm.gpu("a100").sm_count == 108
    assert gm.gpu("4090").sm_count == 128
    assert gm.gpu("h100").sm_count == 132
    assert gm.gpu("4090").peak_flops("fp16") == pytest.approx(165e12, rel=0.01)  # Brenndoerfer (2026): "165 TFLOP/s"
    assert gm.gpu("h200").memory_bytes == 141e9  # Brenndoerfer (2026): 141 GB HBM3e, 4.8 TB/s
    assert gm.gpu("h200").memory_bandwidth == 4.8e12
    assert gm.gpu("4090").tdp_watts == 450 and gm.gpu("h100").tdp_watts == 700  # Brenndoerfer (2026): 450 W vs 700 W


@pytest.mark.parametrize("alias, name", [
    ("h100", "h100-sxm"), ("H100 SXM5 80GB", "h100-sxm"), ("h100 sxm5 80gb", "h100-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("H100 PCIe", "h100-pcie"), ("H100 NVL", "h100-nvl"),
    ("h200", "h200-sxm"), ("NVIDIA H200", "h200-sxm"), ("a100", "a100-sxm4-80gb"), ("A100 40GB", "a100-sxm4-40gb"),
    ("A100-SXM4-80GB", "a100-sxm4-80gb"), ("A100 PCIe", "a100-pcie-80gb"), ("4090", "rtx-4090"),
    ("RTX 4090", "rtx-4090"), ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("3090", "rtx-3090"), ("5090", "rtx-5090"),
    ("v100", "v100-sxm2-32gb"), ("Tesla T4", "t4"), ("L40S", "l40s"), ("L4", "l4"), ("A10", "a10"),
    ("b200", "b200"), ("HGX B200", "b200"), ("mi300x", "mi300x"), ("AMD Instinct MI300X", "mi300x"),
    ("H100_SXM", "h100-sxm"), ("rtx4090", "rtx-4090"),
])
def test_aliases(alias, name):
    assert gm.gpu(alias).name == name


def test_gpu_passes_records_through():
    h100 = gm.gpu("h100")
    assert gm.gpu(h100) is h100


def test_unknown_gpu_lists_close_names():
    with pytest.raises(gm.UnknownGPUError) as info:
        gm.gpu("h10")
    message = str(info.value)
    assert "'h10'" in message and "did you mean" in message and "'h100-sxm'" in message
    assert isinstance(info.value, LookupError)


def test_unknown_gpu_far_from_everything_lists_known():
    with pytest.raises(gm.UnknownGPUError, match="known: .*h100-sxm"):
        gm.gpu("zzzzzzzz")


def test_gpu_name_must_be_a_string():
    with pytest.raises(TypeError, match="name"):
        gm.gpu(100)


# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (also NVIDIA CCCL
# libcudacxx cuda/__device/arch_traits.h): shared memory per SM [KiB], opt-in max per block [KiB],
# resident threads per SM. Every NVIDIA part has 64K 32-bit registers per SM = 256 KiB.
CC_LIMITS = {"7.0": (96, 96, 2048), "7.5": (64, 64, 1024), "8.0": (164, 163, 2048), "8.6": (100, 99, 1536),
             "8.9": (100, 99, 1536), "9.0": (228, 227, 2048), "10.0": (228, 227, 2048), "10.3": (228, 227, 2048),
             "12.0": (100, 99, 1536)}


@pytest.mark.parametrize("g", gm.all_gpus(), ids=lambda g: g.name)
def test_per_compute_capability_limits(g):
    if g.vendor.value != "nvidia":
        assert g.compute_capability is None and "wavefront" in g.occupancy_note
        return
    smem, block, threads = CC_LIMITS[g.compute_capability]
    assert g.shared_memory_per_sm == smem * 1024
    assert g.max_shared_memory_per_block == block * 1024
    assert g.max_threads_per_sm == threads
    assert g.register_file_per_sm == 65536 * 4


@pytest.mark.parametrize("g", gm.all_gpus(), ids=lambda g: g.name)
def test_memory_hierarchy_agrees_with_the_record(g):
    levels = [m.level for m in g.memory_hierarchy]
    assert len(levels) == len(set(levels)), "one entry per level"
    assert {"registers", "shared", "l2"} <= set(levels) and ({"hbm", "device"} & set(levels))
    device = g.level("hbm")
    assert device.capacity == g.memory_bytes and device.bandwidth == g.memory_bandwidth
    assert g.level("l2").capacity == g.l2_bytes
    assert g.level("registers").capacity == g.register_file_per_sm and g.level("registers").per_sm
    assert g.level("shared").capacity >= g.shared_memory_per_sm
    for m in g.memory_hierarchy:
        assert len(m.source) > 10


def test_derived_shared_bandwidth_h200():
    # 32 banks x 4 B per clock per SM x 132 SMs x 1.98 GHz = 33.5 TB/s
    assert gm.gpu("h200").bandwidth("shared") == pytest.approx(32 * 4 * 132 * 1.98e9, rel=2e-3)


def test_l2_sizes_from_whitepapers():
    MiB = 2**20
    assert gm.gpu("a100").l2_bytes == 40 * MiB  # A100 whitepaper: 40 MB (the driver reports 41,943,040 B)
    assert gm.gpu("h100").l2_bytes == 50 * MiB
    assert gm.gpu("h200").l2_bytes == 60 * MiB  # measured: torch reports L2_cache_size 62,914,560 B on the H200
    assert gm.gpu("4090").l2_bytes == 72 * MiB  # Ada whitepaper: 73,728 KB
    assert gm.gpu("3090").l2_bytes == 6 * MiB
    assert gm.gpu("l40s").l2_bytes == 96 * MiB
    assert gm.gpu("mi300x").l2_bytes == 8 * 4 * MiB  # 4 MB per XCD x 8 XCDs


def test_mi300x_fp32_counts_packed_lanes():
    mi = gm.gpu("mi300x")
    assert mi.fp32_cores_per_sm == 2 * 64  # 64 stream processors per CU, packed FP32 doubles them
    assert mi.fp32_peak_from_cores == pytest.approx(304 * 128 * 2 * 2.1e9)  # = 163.4e12
    assert mi.nvlink is None and mi.nvlink_bandwidth == 0.0


def test_every_record_cites_a_source():
    for g in gm.all_gpus():
        assert len(g.source) > 20, g.name
        assert g.notes, g.name
