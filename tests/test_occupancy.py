"""gm.occupancy: Brenndoerfer's examples, NVIDIA's worked examples, NVIDIA's reference calculator, bad input,
broadcasting and hypothesis properties. Measured H200 ground truth is in test_occupancy_measured.py.

Brenndoerfer (2026): M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores",
https://mbrenndoerfer.com/writing/gpu-architecture-memory-hierarchy-cuda-tensor-cores
"""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpumodel as gm
from gpumodel.records.arch import list_archs
from gpumodel.core.occupancy import UNLIMITED, Occupancy

DATA = Path(__file__).parent / "data" / "occupancy"
KIB = 1024


# ---------------------------------------------------------------- Brenndoerfer's (2026) examples
def test_brenndoerfer_32_registers_fill_the_register_file_at_full_occupancy():
    # 32 regs x 4 B x 2048 threads = 256 KiB = the whole register file (65536 registers) of an H100 SM
    r = gm.occupancy("9.0", threads_per_block=256, registers_per_thread=32)
    assert r.active_threads == 2048
    assert r.blocks_per_sm * r.registers_per_block == 65536  # 8 blocks x (8 warps x 32 x 32)
    assert r.occupancy == 1.0
    assert r.active_warps == 64  # "an H100 SM supports at most 64 active warps"


def test_brenndoerfer_64_registers_halve_the_threads():
    full = gm.occupancy("h100", threads_per_block=256, registers_per_thread=32)
    half = gm.occupancy("h100", threads_per_block=256, registers_per_thread=64)
    assert half.active_threads == full.active_threads // 2 == 1024
    assert half.occupancy == 0.5
    assert half.limiter == "registers"


def test_brenndoerfer_48_thread_block_occupies_two_warps():
    # 48 threads = one full warp + one warp with 16 of 32 lanes active; the SM schedules 2 warps per block
    r = gm.occupancy("9.0", threads_per_block=48, registers_per_thread=32)
    assert r.warps_per_block == 2
    assert r.active_warps == r.blocks_per_sm * 2
    assert r.active_threads == r.blocks_per_sm * 48  # a quarter of the warp slots carry no thread
    assert r.active_threads / (r.active_warps * 32) == 0.75
    padded = gm.occupancy("9.0", threads_per_block=64, registers_per_thread=32)
    assert padded.active_warps == r.active_warps  # padding to 64 threads costs no warp slots


# ---------------------------------------------------------------- NVIDIA's worked examples
def test_best_practices_guide_32_registers_for_full_occupancy_on_7_0():
    # CUDA C++ Best Practices Guide, "Calculating Occupancy": on 7.0, 65,536 registers and 2048 threads per SM,
    # "for a multiprocessor to have 100% occupancy, each thread can use at most 32 registers".
    assert gm.occupancy("7.0", 1024, 32).occupancy == 1.0
    assert gm.occupancy("7.0", 1024, 33).occupancy < 1.0


def test_best_practices_guide_37_registers_on_7_0():
    # Same section: 128-thread blocks with 37 registers -> 75% occupancy with 12 active blocks per SM;
    # 320-thread blocks with 37 registers -> 63% (only four 320-thread blocks reside).
    r = gm.occupancy("7.0", threads_per_block=128, registers_per_thread=37)
    assert r.blocks_per_sm == 12 and r.occupancy == 0.75  # 37*32 = 1184 -> 1280 regs/warp; 16384 // 1280 = 12 warps x 4
    r = gm.occupancy("7.0", threads_per_block=320, registers_per_thread=37)
    assert r.blocks_per_sm == 4 and round(r.occupancy, 2) == 0.62  # 48 warps // 10 = 4 blocks -> 40/64 = 62.5%


def test_programming_guide_carveout_rounds_up_to_a_supported_size():
    # Programming Guide, shared memory on 7.x: the preference is a percent of the maximum (96 KB on 7.0) and
    # is rounded up to the next supported capacity: 50% = 48 KB -> 64 KB.
    r = gm.occupancy("7.0", 128, 16, dynamic_shared_bytes=16 * KIB, carveout=50)
    assert r.shared_memory_carveout == 64 * KIB and r.blocks_per_sm == 4  # 64 KiB // 16 KiB
    # 9.0: 25% of 228 KiB = 57 KiB -> 64 KiB; 1 KiB reserved per block: 64 // (8 + 1) = 7
    r = gm.occupancy("9.0", 128, 16, dynamic_shared_bytes=8 * KIB, carveout=25)
    assert r.shared_memory_carveout == 64 * KIB and r.blocks_per_sm == 7


def test_reserved_shared_memory_per_block_from_ampere_on():
    # 8.0+: the driver reserves 1 KiB per block (cudaDeviceProp::reservedSharedMemPerBlock); 7.x: none.
    assert gm.occupancy("8.0", 32, 16).shared_memory_per_block == 1 * KIB
    assert gm.occupancy("7.0", 32, 16).shared_memory_per_block == 0
    # 9.0, 113.5 KiB dynamic: two blocks would fit 228 KiB without the reservation (2 x 113.5 = 227),
    # with it each block takes 114.5 KiB and only one fits
    assert gm.occupancy("9.0", 128, 16, dynamic_shared_bytes=int(113.5 * KIB)).blocks_per_sm == 1


def test_allocation_unit_rounds_each_block():
    # 7.x allocates shared memory in 256 B units, 8.0+ in 128 B (cudaOccSMemAllocationGranularity)
    assert gm.occupancy("7.5", 64, 16, dynamic_shared_bytes=257).shared_memory_per_block == 512
    assert gm.occupancy("8.6", 64, 16, dynamic_shared_bytes=257).shared_memory_per_block == 1024 + 384


def test_block_caps_per_capability():
    # one-warp blocks with few registers: the resident-block cap decides
    expected = {"7.0": 32, "7.5": 16, "8.0": 32, "8.6": 16, "8.7": 16, "8.9": 24, "9.0": 32, "10.0": 32, "12.0": 24}
    for cc, cap in expected.items():
        r = gm.occupancy(cc, 32, 16)
        assert r.blocks_per_sm == cap, cc
        assert r.limiter in ("blocks", "warps"), cc


def test_register_hardware_check_rounds_warps_to_four():
    # 80 regs -> 2560 regs/warp; 25 warps = 64000 registers would fit the 65536 per block, but the launch check
    # rounds warps up to a multiple of 4 (28 x 2560 = 71680 > 65536): the runtime refuses the launch.
    assert gm.occupancy("9.0", 25 * 32, 80).blocks_per_sm == 0
    assert gm.occupancy("9.0", 24 * 32, 80).blocks_per_sm == 1


def test_refused_launches_get_zero_blocks():
    assert gm.occupancy("9.0", 1024, 72).blocks_per_sm == 0  # 32 warps x 2304 registers > 65536
    assert gm.occupancy("9.0", 256, 32, dynamic_shared_bytes=227 * KIB + 1).blocks_per_sm == 0  # above opt-in
    assert gm.occupancy("9.0", 256, 32, dynamic_shared_bytes=227 * KIB).blocks_per_sm == 1
    # the kernel did not opt in beyond 48 KiB: its max-dynamic attribute is the default
    assert gm.occupancy("9.0", 256, 32, 0, 64 * KIB, max_dynamic_shared_bytes=48 * KIB).blocks_per_sm == 0
    assert gm.occupancy("8.6", 256, 32, dynamic_shared_bytes=100 * KIB).blocks_per_sm == 0


def test_limiter_and_per_resource_limits():
    r = gm.occupancy("9.0", 256, 64, dynamic_shared_bytes=100 * KIB)
    assert r.blocks_by_warps == 8
    assert r.blocks_by_registers == 4  # 2048 regs/warp; 8 warps per sub-partition x 4 = 32 warps // 8
    assert r.blocks_by_shared_memory == 2  # 228 KiB // 101 KiB
    assert r.blocks_by_block_cap == 32
    assert r.blocks_per_sm == 2 and r.limiter == "shared_memory"
    no_smem = gm.occupancy("9.0", 256, 0)
    assert no_smem.blocks_by_registers == UNLIMITED
    assert set(r.limits) == {"warps", "registers", "shared_memory", "blocks", "barriers"}


def test_default_carveout_is_the_largest():
    r = gm.occupancy("9.0", 128, 16, dynamic_shared_bytes=20 * KIB)
    assert r.shared_memory_carveout == 228 * KIB and r.blocks_per_sm == 10  # 228 // 21
    # preference below one block's need: the smallest supported size that fits one block
    r = gm.occupancy("9.0", 128, 16, dynamic_shared_bytes=20 * KIB, carveout=0)
    assert r.shared_memory_carveout == 32 * KIB and r.blocks_per_sm == 1


# ---------------------------------------------------------------- NVIDIA's reference calculator (cuda_occupancy.h)
def _header_rows():
    return np.genfromtxt(DATA / "header_reference.csv.gz", delimiter=",", names=True, dtype=None, encoding=None)


def test_agrees_with_cuda_occupancy_header_for_every_capability():
    """54,000 random configurations, 6,000 per capability, answered by cuda_occupancy.h (CUDA 13.0).

    Rows whose max-dynamic attribute is set below the default per-block limit are left out: the header
    refuses launches above that attribute, the driver (measured on sm_90) only above the default limit.
    """
    rows = _header_rows()
    in_header = sorted({f"{c:.1f}" for c in rows["cc"]}, key=float)
    # every capability the header was run for has a record; 10.3 (Blackwell Ultra), added after that run, shares
    # 10.0's limits (the programming guide's one "10.x" column)
    assert set(in_header) <= set(list_archs()) and set(list_archs()) - set(in_header) == {"10.3"}
    assert gm.arch_limits("10.3").model_dump(exclude={"compute_capability", "source", "notes", "examples"}) \
        == gm.arch_limits("10.0").model_dump(exclude={"compute_capability", "source", "notes", "examples"})
    for cc in np.unique(rows["cc"]):
        s = rows[rows["cc"] == cc]
        s = s[s["max_dynamic_smem"] >= 48 * KIB - s["static_smem"]]
        r = gm.occupancy(f"{cc:.1f}", s["threads"], s["regs"], s["static_smem"], s["dynamic_smem"], s["carveout"],
                         max_dynamic_shared_bytes=s["max_dynamic_smem"])
        np.testing.assert_array_equal(r.blocks_per_sm, s["blocks"], err_msg=f"cc {cc}")
        best = gm.max_potential_block_size(f"{cc:.1f}", s["regs"], s["static_smem"], s["dynamic_smem"], 0,
                                           s["carveout"], max_dynamic_shared_bytes=s["max_dynamic_smem"])
        np.testing.assert_array_equal(best.block_size, s["potential_block_size"], err_msg=f"cc {cc}")
        avail = gm.max_dynamic_shared_memory(f"{cc:.1f}", s["num_blocks"], s["threads"], s["regs"], s["static_smem"],
                                             s["carveout"], max_dynamic_shared_bytes=s["max_dynamic_smem"], runtime=True)
        np.testing.assert_array_equal(avail, s["available_dynamic_smem"], err_msg=f"cc {cc}")


# ---------------------------------------------------------------- input checking
@pytest.mark.parametrize("kwargs, name", [
    (dict(threads_per_block=1025, registers_per_thread=32), "threads_per_block"),
    (dict(threads_per_block=0, registers_per_thread=32), "threads_per_block"),
    (dict(threads_per_block=128, registers_per_thread=256), "registers_per_thread"),
    (dict(threads_per_block=128, registers_per_thread=-1), "registers_per_thread"),
    (dict(threads_per_block=128, registers_per_thread=32, static_shared_bytes=-1), "static_shared_bytes"),
    (dict(threads_per_block=128, registers_per_thread=32, dynamic_shared_bytes=-8), "dynamic_shared_bytes"),
    (dict(threads_per_block=float("nan"), registers_per_thread=32), "threads_per_block"),
    (dict(threads_per_block=128.5, registers_per_thread=32), "threads_per_block"),
    (dict(threads_per_block=128, registers_per_thread=32, carveout=101), "carveout"),
    (dict(threads_per_block=np.array([128, 2048]), registers_per_thread=32), "threads_per_block"),
    (dict(threads_per_block="128", registers_per_thread=32), "threads_per_block"),
])
def test_invalid_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gm.occupancy("9.0", **kwargs)


def test_static_shared_memory_above_48_kib_is_refused_naming_dynamic():
    # CUDA caps static shared memory at 48 KiB a block: more is dynamic, after the opt-in attribute
    with pytest.raises(gm.ArgumentError, match="static_shared_bytes = 65536 exceeds the 48 KiB") as info:
        gm.occupancy("a100", 256, 32, static_shared_bytes=64 * KIB)
    assert "dynamic_shared_bytes" in str(info.value)
    assert (info.value.argument, info.value.value) == ("static_shared_bytes", 64 * KIB)
    assert "dynamic_shared_bytes" in info.value.allowed
    with pytest.raises(gm.ArgumentError, match="static_shared_bytes"):
        gm.occupancy("9.0", 256, 32, static_shared_bytes=np.array([0, 48 * KIB, 48 * KIB + 1]))
    # 48 KiB itself compiles; the same 64 KiB as dynamic shared memory is a launch the runtime answers
    assert gm.occupancy("a100", 256, 32, static_shared_bytes=48 * KIB).blocks_per_sm == 3
    assert gm.occupancy("a100", 256, 32, dynamic_shared_bytes=64 * KIB).blocks_per_sm == 2


@pytest.mark.parametrize("call", [
    lambda: gm.occupancy_curves("a100", 256, 32, static_shared_bytes=64 * KIB),
    lambda: gm.max_potential_block_size("a100", 32, static_shared_bytes=64 * KIB),
    lambda: gm.next_occupancy_step("a100", 256, 32, static_shared_bytes=64 * KIB),
    lambda: gm.max_dynamic_shared_memory("a100", 1, 256, 32, static_shared_bytes=64 * KIB),
])
def test_the_helpers_refuse_static_shared_memory_above_48_kib(call):
    with pytest.raises(gm.ArgumentError, match="static_shared_bytes .*dynamic_shared_bytes"):
        call()


@pytest.mark.parametrize("value", [2**63, 2**64 - 1, 2**70, np.uint64(2**63)])
def test_huge_counts_are_out_of_range_never_negative(value):
    for call, name in [(lambda: gm.occupancy("a100", value, 32), "threads_per_block"),
                       (lambda: gm.occupancy("a100", 256, value), "registers_per_thread"),
                       (lambda: gm.occupancy_curves("a100", value, 32), "threads_per_block"),
                       (lambda: gm.next_occupancy_step("a100", 256, value), "registers_per_thread"),
                       (lambda: gm.max_potential_block_size("a100", value), "registers_per_thread")]:
        with pytest.raises(gm.ArgumentError, match=f"{name} = 9223372036854775808|{name} = 18446744073709551615|"
                                                   f"{name} = 1180591620717411303424") as info:
            call()
        assert info.value.argument == name and info.value.value > 0 and "-" not in str(info.value).split(";")[0]


@pytest.mark.parametrize("values", [np.array([128, 2**63], dtype=np.uint64), [128, 2**63], [128, 2**70], 1e30])
def test_huge_counts_in_an_array_or_as_floats_are_out_of_range(values):
    with pytest.raises(gm.ArgumentError, match=r"threads_per_block = (9223372036854775808|9\.22337e\+18|1e\+30|"
                                               r"1180591620717411303424) is out of range; allowed: 1\.\.1024"):
        gm.occupancy("a100", values, 32)


def test_threads_and_registers_name_their_range():
    with pytest.raises(gm.ArgumentError, match=r"threads_per_block = 2048 is out of range; allowed: 1\.\.1024"):
        gm.occupancy("a100", 2048, 32)
    with pytest.raises(gm.ArgumentError, match=r"registers_per_thread = 256 is out of range; allowed: 0\.\.255"):
        gm.occupancy("a100", 256, 256)


def test_unknown_gpu_or_capability():
    with pytest.raises(gm.UnknownGPUError):
        gm.occupancy("h10x", 128, 32)
    with pytest.raises(LookupError):
        gm.occupancy("9.5", 128, 32)
    with pytest.raises(ValueError, match="no CUDA occupancy"):
        gm.occupancy("mi300x", 128, 32)


# ---------------------------------------------------------------- broadcasting and records
def test_scalar_and_array_agree():
    t = np.array([32, 48, 256, 1024])
    r = gm.occupancy("9.0", t, 40)
    assert isinstance(r.blocks_per_sm, np.ndarray) and r.blocks_per_sm.shape == (4,)
    for i, ti in enumerate(t):
        s = gm.occupancy("9.0", int(ti), 40)
        assert s.blocks_per_sm == r.blocks_per_sm[i] and s.limiter == r.limiter[i]
        assert isinstance(s.blocks_per_sm, int)


def test_broadcasting_a_million_configurations_is_fast():
    import time

    rng = np.random.default_rng(0)
    n = 1_000_000
    args = (rng.integers(1, 1025, n), rng.integers(0, 256, n), 0, rng.integers(0, 200_000, n), rng.integers(-1, 101, n))
    start = time.perf_counter()
    r = gm.occupancy("9.0", *args)
    assert time.perf_counter() - start < 5.0
    assert r.blocks_per_sm.shape == (n,)
    grid = gm.occupancy("9.0", np.arange(1, 1025)[:, None], np.arange(0, 256)[None, :])
    assert grid.occupancy.shape == (1024, 256)


def test_gpu_record_name_and_cc_give_the_same_answer():
    a = gm.occupancy(gm.gpu("h100"), 256, 64)
    b = gm.occupancy("h100-sxm", 256, 64)
    c = gm.occupancy("9.0", 256, 64)
    assert a.blocks_per_sm == b.blocks_per_sm == c.blocks_per_sm
    assert a.gpu_name == "h100-sxm" and c.gpu_name is None


def test_repr_says_what_decided():
    r = gm.occupancy("h100", 256, 64)
    text = repr(r)
    assert "registers" in text and "4 blocks/SM" in text and "50%" in text
    assert "<table>" in r._repr_html_() and "registers" in r._repr_html_()
    many = gm.occupancy("9.0", np.arange(1, 1025), 64)
    assert "1024 configurations" in repr(many)
    assert isinstance(r, Occupancy) and r.to_dict()["blocks_per_sm"] == 4


def test_array_carveout_accepts_none_entries():
    r = gm.occupancy("9.0", 128, 16, dynamic_shared_bytes=20 * KIB, carveout=[None, 0, 100])
    assert list(r.blocks_per_sm) == [10, 1, 10]


# ---------------------------------------------------------------- hypothesis properties
CCS = st.sampled_from(["7.0", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "12.0"])
THREADS = st.integers(1, 1024)
REGS = st.integers(0, 254)
SMEM = st.integers(0, 240 * KIB)
CARVE = st.one_of(st.none(), st.integers(0, 100))


@settings(max_examples=300, deadline=None)
@given(CCS, THREADS, REGS, SMEM, SMEM, CARVE)
def test_more_registers_never_raise_blocks(cc, t, r, s, d, c):
    s = s % (48 * KIB + 1)
    a = gm.occupancy(cc, t, r, s, d, c).blocks_per_sm
    b = gm.occupancy(cc, t, r + 1, s, d, c).blocks_per_sm
    assert b <= a


@settings(max_examples=300, deadline=None)
@given(CCS, THREADS, REGS, SMEM, st.integers(1, 64 * KIB), CARVE)
def test_more_shared_memory_never_raises_blocks(cc, t, r, d, extra, c):
    a = gm.occupancy(cc, t, r, 0, d, c).blocks_per_sm
    assert gm.occupancy(cc, t, r, 0, d + extra, c).blocks_per_sm <= a
    assert gm.occupancy(cc, t, r, min(extra, 48 * KIB), d, c).blocks_per_sm <= a


@settings(max_examples=200, deadline=None)
@given(CCS, THREADS, REGS, SMEM, CARVE, st.integers(1, 8 * KIB))
def test_larger_reservation_never_raises_blocks(cc, t, r, d, c, more):
    limits = gm.arch_limits(cc)
    bigger = limits.model_copy(update={"reserved_shared_memory_per_block": limits.reserved_shared_memory_per_block + more})
    assert gm.occupancy(bigger, t, r, 0, d, c).blocks_per_sm <= gm.occupancy(limits, t, r, 0, d, c).blocks_per_sm


@settings(max_examples=300, deadline=None)
@given(CCS, THREADS, REGS, SMEM, SMEM, CARVE)
def test_never_exceeds_the_architecture_caps(cc, t, r, s, d, c):
    s = s % (48 * KIB + 1)
    limits = gm.arch_limits(cc)
    o = gm.occupancy(cc, t, r, s, d, c)
    assert 0 <= o.blocks_per_sm <= limits.max_blocks_per_sm
    assert o.active_warps <= limits.max_warps_per_sm
    assert 0.0 <= o.occupancy <= 1.0
    assert o.blocks_per_sm * o.registers_per_block <= limits.registers_per_sm
    assert o.blocks_per_sm * o.shared_memory_per_block <= o.shared_memory_carveout <= limits.shared_memory_per_sm
    assert o.shared_memory_carveout // KIB in limits.shared_memory_carveouts_kib
    assert o.blocks_per_sm == min(o.limits.values())
    assert o.limits[o.limiter] == o.blocks_per_sm


def test_barriers_limit_from_hopper_on():
    # cuda_occupancy.h: 9.0 has 2 x 32 = 64 barriers per SM; a block using 3 allows 64 // 3 = 21 blocks.
    r = gm.occupancy("9.0", 32, 16, block_barriers=3)
    assert r.blocks_per_sm == 21 and r.limiter == "barriers" and r.blocks_by_barriers == 21
    # with the default single barrier the block cap (32) binds first
    assert gm.occupancy("9.0", 32, 16).blocks_by_barriers == 64
    # before 9.0 the runtime does not count barriers
    assert gm.occupancy("8.0", 32, 16, block_barriers=3).blocks_per_sm == 32
    with pytest.raises(ValueError, match="block_barriers"):
        gm.occupancy("9.0", 32, 16, block_barriers=-1)
