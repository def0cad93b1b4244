"""Per-compute-capability limits (specs/arch) against NVIDIA's tables and a measured H200.

Expected values are typed from the named documents, never read back from the YAML files under test:
the CUDA C++ Programming Guide's "Technical Specifications per Compute Capability" table and its
"Shared Memory" sections (carveout sizes), and cuda_occupancy.h of CUDA 13.0 (block caps, allocation units).
"""

import json
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.records.arch import ARCH_CATALOG, ArchLimits, UnknownArchError, list_archs
from gpumodel.records.specs import SpecError

DATA = Path(__file__).parent / "data" / "occupancy"
KIB = 1024

# cc -> (max threads/SM, max blocks/SM, smem/SM [KiB], opt-in per block [KiB], reserved per block [KiB],
#        smem allocation unit [B], carveouts [KiB])
GUIDE = {
    "7.0": (2048, 32, 96, 96, 0, 256, (0, 8, 16, 32, 64, 96)),
    "7.5": (1024, 16, 64, 64, 0, 256, (32, 64)),
    "8.0": (2048, 32, 164, 163, 1, 128, (0, 8, 16, 32, 64, 100, 132, 164)),
    "8.6": (1536, 16, 100, 99, 1, 128, (0, 8, 16, 32, 64, 100)),
    "8.7": (1536, 16, 164, 163, 1, 128, (0, 8, 16, 32, 64, 100, 132, 164)),
    "8.9": (1536, 24, 100, 99, 1, 128, (0, 8, 16, 32, 64, 100)),
    "9.0": (2048, 32, 228, 227, 1, 128, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),
    "10.0": (2048, 32, 228, 227, 1, 128, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),
    "10.3": (2048, 32, 228, 227, 1, 128, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),  # guide's 10.x column
    "12.0": (1536, 24, 100, 99, 1, 128, (0, 8, 16, 32, 64, 100)),
}


def test_all_capabilities_present():
    assert list_archs() == list(GUIDE)


@pytest.mark.parametrize("cc", list(GUIDE))
def test_limits_match_guide_and_header(cc):
    threads, blocks, smem, optin, reserved, unit, carveouts = GUIDE[cc]
    a = gm.arch_limits(cc)
    assert a.max_threads_per_sm == threads
    assert a.max_warps_per_sm == threads // 32
    assert a.max_blocks_per_sm == blocks
    assert a.shared_memory_per_sm == smem * KIB
    assert a.shared_memory_per_block_optin == optin * KIB
    assert a.shared_memory_per_block == 48 * KIB
    assert a.reserved_shared_memory_per_block == reserved * KIB
    assert a.shared_memory_allocation_unit == unit
    assert a.shared_memory_carveouts_kib == carveouts
    assert a.shared_memory_carveouts == tuple(k * KIB for k in carveouts)
    # the same on every capability since Volta: 64K registers per SM and per block, 255 per thread,
    # allocated per warp in units of 256 (cudaOccRegAllocationGranularity), 4 sub-partitions
    assert (a.registers_per_sm, a.registers_per_block, a.max_registers_per_thread) == (65536, 65536, 255)
    assert (a.register_allocation_unit, a.register_allocation_granularity, a.sub_partitions_per_sm) == (256, "warp", 4)
    assert a.max_threads_per_block == 1024 and a.warp_size == 32
    assert a.source


def test_h200_device_properties_agree():
    """cudaGetDeviceProperties on the H200 the ground truth was measured on (tests/data/occupancy/device.json)."""
    prop = json.loads((DATA / "device.json").read_text())
    a = gm.arch_limits(f"{prop['major']}.{prop['minor']}")
    assert a.compute_capability == "9.0"
    assert a.max_threads_per_block == prop["maxThreadsPerBlock"]
    assert a.max_threads_per_sm == prop["maxThreadsPerMultiProcessor"]
    assert a.max_blocks_per_sm == prop["maxBlocksPerMultiProcessor"]
    assert a.registers_per_block == prop["regsPerBlock"]
    assert a.registers_per_sm == prop["regsPerMultiprocessor"]
    assert a.warp_size == prop["warpSize"]
    assert a.shared_memory_per_block == prop["sharedMemPerBlock"]
    assert a.shared_memory_per_sm == prop["sharedMemPerMultiprocessor"]
    assert a.shared_memory_per_block_optin == prop["sharedMemPerBlockOptin"]
    assert a.reserved_shared_memory_per_block == prop["reservedSharedMemPerBlock"]


def test_barriers_only_from_hopper_on():
    # cuda_occupancy.h applies the barrier limit for major >= 9: 2 x block cap on 9.0 / 10.0, 1 x on 12.0
    assert gm.arch_limits("9.0").barriers_per_sm == 64
    assert gm.arch_limits("10.0").barriers_per_sm == 64
    assert gm.arch_limits("12.0").barriers_per_sm == 24
    assert gm.arch_limits("8.0").barriers_per_sm is None


@pytest.mark.parametrize("key", ["9.0", "sm_90", "sm90", (9, 0), 9.0])
def test_lookup_forms(key):
    assert gm.arch_limits(key).compute_capability == "9.0"


@pytest.mark.parametrize("key, cc", [("sm_90a", "9.0"), ("sm_100a", "10.0"), ("sm_100f", "10.0"), ("sm_120f", "12.0"),
                                     ("sm_120a", "12.0"), ("compute_90a", "9.0"), ("compute_90", "9.0"),
                                     ("SM_86", "8.6"), ("sm89", "8.9")])
def test_nvcc_targets_with_architecture_suffixes_name_their_capability(key, cc):
    assert gm.arch_limits(key).compute_capability == cc
    assert gm.occupancy(key, 256, 32).compute_capability == cc


@pytest.mark.parametrize("key", ["sm_91", "sm_91a", "compute_85", "9.5"])
def test_an_unknown_capability_suggests_the_known_capabilities_not_gpus(key):
    with pytest.raises(UnknownArchError) as info:
        gm.arch_limits(key)
    text = str(info.value)
    assert "known compute capabilities: 7.0, 7.5" in text and "10.0" in text and "12.0" in text
    assert "v100" not in text and "h100" not in text
    assert info.value.allowed == ", ".join(list_archs()) and info.value.value == key


@pytest.mark.parametrize("key", ["sm_9", "sm_90x", "cc9.0", "9"])
def test_a_capability_in_an_unknown_form_lists_the_forms_and_capabilities(key):
    with pytest.raises(UnknownArchError, match="known form .*known compute capabilities: 7.0"):
        gm.arch_limits(key)


def test_a_gpu_typo_still_suggests_gpus():
    with pytest.raises(gm.UnknownGPUError, match="did you mean"):
        gm.arch_limits("h10x")


def test_lookup_by_gpu():
    h100 = gm.gpu("h100")
    assert gm.arch_limits(h100) is gm.arch_limits("9.0")
    assert gm.arch_limits("h100").compute_capability == "9.0"


def test_every_nvidia_gpu_links_to_consistent_limits():
    for g in gm.all_gpus():
        if g.compute_capability is None:
            with pytest.raises(ValueError, match="no CUDA occupancy"):
                gm.arch_limits(g)
            continue
        a = gm.arch_limits(g)
        assert g.max_threads_per_sm == a.max_threads_per_sm, g.name
        assert g.register_file_per_sm == 4 * a.registers_per_sm, g.name  # 4-byte registers
        assert g.max_shared_memory_per_block == a.shared_memory_per_block_optin, g.name
        assert g.shared_memory_per_sm >= a.shared_memory_per_sm, g.name


def test_unknown_capability_lists_known():
    with pytest.raises(UnknownArchError, match="9.0"):
        gm.arch_limits("9.5")


def test_repr_names_the_limits():
    text = repr(gm.arch_limits("8.6"))
    assert "8.6" in text and "48 warps" in text and "16 blocks" in text


def _record(**changes):
    base = gm.arch_limits("9.0").model_dump()
    base.update(changes)
    return base


def test_validation_catches_typos_and_inconsistencies(tmp_path):
    with pytest.raises(ValueError, match="unknown|extra"):
        ArchLimits.model_validate(_record(max_blocks_per_smm=32))
    with pytest.raises(ValueError, match="max_warps_per_sm"):
        ArchLimits.model_validate(_record(max_warps_per_sm=48))
    with pytest.raises(ValueError, match="carveout"):
        ArchLimits.model_validate(_record(shared_memory_carveouts_kib=(0, 8, 228, 100)))
    with pytest.raises(ValueError, match="largest carveout"):
        ArchLimits.model_validate(_record(shared_memory_carveouts_kib=(0, 8, 100)))
    bad = tmp_path / "sm95.yaml"
    bad.write_text("compute_capability: '9.5'\narchitecture: x\nmax_threads_per_block: 1024\n")
    with pytest.raises(SpecError, match="sm95.yaml"):
        ARCH_CATALOG.load(bad)


def test_readable_units_in_yaml(tmp_path):
    rec = _record(compute_capability="9.9", shared_memory_per_sm="228 KiB", shared_memory_per_block="48 KiB")
    assert ArchLimits.model_validate(rec).shared_memory_per_sm == 233472
