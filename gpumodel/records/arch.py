"""Per-compute-capability limits of NVIDIA streaming multiprocessors (what occupancy is made of).

An :class:`ArchLimits` record holds what the CUDA runtime's occupancy calculator knows about one
compute capability: thread, warp and block caps per SM, the register file and how it is handed out
(256 registers per warp), shared memory per SM and per block (default, opt-in and the driver's
per-block reservation), the shared-memory allocation unit and the carveouts the SM can be set to.
The data live in ``specs/arch/*.yaml``, one file per compute capability, each with its sources; a
GPU record links to its limits through ``compute_capability``.

Examples
--------
>>> import gpumodel as gm
>>> a = gm.arch_limits("9.0")
>>> a.max_warps_per_sm, a.max_blocks_per_sm, a.registers_per_sm
(64, 32, 65536)
>>> a.shared_memory_carveouts_kib[-3:]
(164, 196, 228)
>>> gm.arch_limits("h100").compute_capability      # a GPU name works too
'9.0'
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import numpy as np
from pydantic import BeforeValidator, ConfigDict, Field, field_validator, model_validator

from ..base.arguments import renamed_arguments
from ..base.errors import ArgumentTypeError, UnsupportedError
from ..base.numeric import bounded_int
from .gpu import GPU_CATALOG
from .specs import Catalog, Record, UnknownNameError
from ..base.units import parse_quantity

__all__ = ["ArchLimits", "arch_limits", "list_archs", "load_archs", "ARCH_CATALOG", "UnknownArchError",
           "compute_capability_of"]


#: A compute capability as written: "9.0", "sm_90", "sm90", "compute_90", with the architecture-specific ("a")
#: or family-specific ("f") suffix of nvcc's targets ("sm_90a", "sm_100f", "compute_120a") allowed.
_CC_PATTERN = re.compile(r"^(?:(\d+)\.(\d+)|(?:sm|compute)_?(\d+?)(\d))[af]?$")
#: What looks like a compute capability but is none of the forms above ("sm_9", "sm_90x", "cc9.0").
_CC_LIKE = re.compile(r"^(?:sm|compute|cc)[_-]?\d|^\d+\.\d+[a-z]?$|^\d{1,2}$")


class UnknownArchError(UnknownNameError):
    """No per-architecture limits for that compute capability."""


def _bytes(value: object) -> int:
    number = parse_quantity(value, "bytes")
    if number != int(number):
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return int(number)


IntBytes = Annotated[int, BeforeValidator(_bytes), Field(ge=0)]


class ArchLimits(Record):
    """Occupancy-relevant limits of one compute capability (sizes in [bytes], counts per SM).

    Attributes mirror ``cudaDeviceProp`` and the tables in ``cuda_occupancy.h``:
    ``shared_memory_per_sm`` is ``sharedMemPerMultiprocessor`` (the largest carveout),
    ``shared_memory_per_block`` the default per-block limit (``sharedMemPerBlock``),
    ``shared_memory_per_block_optin`` the opt-in maximum (``sharedMemPerBlockOptin``) and
    ``reserved_shared_memory_per_block`` the driver's reservation (``reservedSharedMemPerBlock``).
    ``barriers_per_sm`` and ``virtual_resources_per_sm`` are ``None`` where the runtime does not
    count them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)

    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    architecture: str
    examples: str = ""
    warp_size: int = Field(32, gt=0)
    max_threads_per_block: int = Field(gt=0)
    max_threads_per_sm: int = Field(gt=0)
    max_warps_per_sm: int = Field(gt=0)
    max_blocks_per_sm: int = Field(gt=0)
    registers_per_sm: int = Field(gt=0)
    registers_per_block: int = Field(gt=0)
    max_registers_per_thread: int = Field(gt=0, le=256)
    register_allocation_unit: int = Field(gt=0, description="registers per allocation unit")
    register_allocation_granularity: Literal["warp", "block"] = "warp"
    warp_allocation_granularity: int = Field(gt=0, description="warps rounded up to this for the per-block register check")
    sub_partitions_per_sm: int = Field(gt=0, description="SM sub-partitions (warp schedulers) sharing the register file")
    shared_memory_per_sm: IntBytes
    shared_memory_per_block: IntBytes
    shared_memory_per_block_optin: IntBytes
    max_static_shared_memory_per_block: IntBytes
    reserved_shared_memory_per_block: IntBytes
    shared_memory_allocation_unit: int = Field(gt=0)
    shared_memory_carveouts_kib: tuple[int, ...] = Field(min_length=1)
    barriers_per_sm: int | None = Field(None, gt=0)
    virtual_resources_per_sm: int | None = Field(None, gt=0)
    source: str = Field(min_length=3)
    notes: str = ""

    @field_validator("shared_memory_carveouts_kib")
    @classmethod
    def _sorted(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if list(value) != sorted(set(value)) or value[0] < 0:
            raise ValueError("carveouts must be distinct, non-negative and ascending")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "ArchLimits":
        problems = []
        if self.max_warps_per_sm * self.warp_size != self.max_threads_per_sm:
            problems.append(f"max_warps_per_sm {self.max_warps_per_sm} x warp_size {self.warp_size} "
                            f"!= max_threads_per_sm {self.max_threads_per_sm}")
        if self.shared_memory_carveouts_kib[-1] * 1024 != self.shared_memory_per_sm:
            problems.append(f"largest carveout {self.shared_memory_carveouts_kib[-1]} KiB != shared_memory_per_sm "
                            f"{self.shared_memory_per_sm} bytes")
        if not self.shared_memory_per_block <= self.shared_memory_per_block_optin <= self.shared_memory_per_sm:
            problems.append("need shared_memory_per_block <= shared_memory_per_block_optin <= shared_memory_per_sm")
        if self.registers_per_block > self.registers_per_sm:
            problems.append("registers_per_block exceeds registers_per_sm")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def shared_memory_carveouts(self) -> tuple[int, ...]:
        """Supported shared-memory carveouts [bytes], ascending."""
        return tuple(k * 1024 for k in self.shared_memory_carveouts_kib)

    @property
    def major(self) -> int:
        return int(self.compute_capability.split(".")[0])

    @property
    def minor(self) -> int:
        return int(self.compute_capability.split(".")[1])

    def __repr__(self) -> str:
        return (f"ArchLimits({self.compute_capability} {self.architecture}: {self.max_warps_per_sm} warps, "
                f"{self.max_blocks_per_sm} blocks, {self.registers_per_sm} regs, "
                f"{self.shared_memory_per_sm // 1024} KiB smem/SM ({self.shared_memory_per_block_optin // 1024} KiB/block opt-in))")

    __str__ = __repr__


#: Shipped per-compute-capability limits plus those from ``GPUMODEL_SPEC_PATH`` and :func:`load_archs`.
ARCH_CATALOG: Catalog[ArchLimits] = Catalog(
    "arch", ArchLimits, key=lambda r: r.compute_capability,
    aliases=lambda r: (f"sm_{r.compute_capability.replace('.', '')}", f"sm{r.compute_capability.replace('.', '')}"),
    error=UnknownArchError, label="compute capability",
)


@renamed_arguments(cc_or_gpu="gpu_or_cc")
def arch_limits(gpu_or_cc: object) -> ArchLimits:
    """The :class:`ArchLimits` of a compute capability ("9.0", "sm_90", ``(9, 0)``), a GPU name or a GPUSpec.

    Parameters
    ----------
    gpu_or_cc : str, float, tuple of int, GPUSpec or ArchLimits
        A compute capability ("9.0", "sm_90", ``9.0`` or ``(9, 0)``; nvcc's targets with the
        architecture- or family-specific suffix, "sm_90a", "sm_100f", "compute_120a", name their base
        capability), a GPU name or record; an :class:`ArchLimits` is returned as it is. ``cc_or_gpu``
        is its former name (deprecated).

    Returns
    -------
    ArchLimits
        The per-SM limits of that compute capability: threads, warps and blocks [count], registers
        [32-bit registers] and shared memory [bytes].

    Raises
    ------
    UnknownArchError
        No limits for that compute capability, or a string that looks like one in no known form (the
        message lists the known compute capabilities).
    UnknownGPUError
        Neither a compute capability nor a known GPU name.
    ValueError
        The GPU has no compute capability (e.g. an AMD part).
    """
    if isinstance(gpu_or_cc, ArchLimits):
        return gpu_or_cc
    if isinstance(gpu_or_cc, tuple) and len(gpu_or_cc) == 2:
        major, minor = (bounded_int(int(p) if isinstance(p, str) and p.isdigit() else p, "compute capability", 0,
                                    allowed="a whole MAJOR, MINOR pair such as (9, 0)") for p in gpu_or_cc)
        if np.ndim(major) or np.ndim(minor):
            raise ArgumentTypeError(f"compute capability must be a (MAJOR, MINOR) pair such as (9, 0), "
                                    f"got {gpu_or_cc!r}")
        gpu_or_cc = f"{int(major)}.{int(minor)}"
    if isinstance(gpu_or_cc, (int, float)) and not isinstance(gpu_or_cc, bool):
        gpu_or_cc = f"{float(gpu_or_cc):.1f}"
    if isinstance(gpu_or_cc, str):
        text = gpu_or_cc.strip().lower()
        cc = compute_capability_of(text)
        if cc is not None:
            return _limits_of(cc, gpu_or_cc)
        try:
            gpu_or_cc = GPU_CATALOG.get(gpu_or_cc)
        except UnknownNameError:
            if _CC_LIKE.match(text):  # a compute capability written in a form not known: say which forms are
                known = ", ".join(list_archs())
                raise UnknownArchError(f"{gpu_or_cc!r} is neither a GPU name nor a compute capability in a known "
                                       f"form ('9.0', 'sm_90', 'sm_90a', 'compute_90'); known compute capabilities: "
                                       f"{known}", argument="compute capability", value=gpu_or_cc,
                                       allowed=known) from None
            raise
    cc = getattr(gpu_or_cc, "compute_capability", "missing")
    if cc == "missing":
        raise ArgumentTypeError(f"expected a compute capability such as '9.0', a GPU name or a GPUSpec, got {gpu_or_cc!r}")
    if cc is None:
        note = getattr(gpu_or_cc, "occupancy_note", None) or "no CUDA compute capability"
        raise UnsupportedError(f"{gpu_or_cc.name} has no CUDA occupancy limits: {note}")
    return ARCH_CATALOG.get(cc)


def compute_capability_of(text: str) -> str | None:
    """The compute capability ("9.0") a string names ("9.0", "sm_90", "sm_90a", "compute_100f"), or None.

    >>> compute_capability_of("sm_100a"), compute_capability_of("compute_86"), compute_capability_of("h100")
    ('10.0', '8.6', None)
    """
    cc = _CC_PATTERN.match(str(text).strip().lower())
    if cc is None:
        return None
    major, minor = (cc[1], cc[2]) if cc[1] is not None else (cc[3], cc[4])
    return f"{int(major)}.{int(minor)}"


def _limits_of(cc: str, given: str) -> ArchLimits:
    """The limits of compute capability ``cc`` ("9.0"), read from ``given``; an unknown one lists the known ones."""
    try:
        return ARCH_CATALOG.get(cc)
    except UnknownArchError:
        known = ", ".join(list_archs())
        raise UnknownArchError(f"no limits for compute capability {cc} ({given!r}); known compute capabilities: "
                               f"{known}", argument="compute capability", value=given, allowed=known) from None


def list_archs() -> list[str]:
    """Compute capabilities with known limits, ascending ("7.0", ..., "12.0")."""
    return sorted(ARCH_CATALOG.names(), key=lambda s: tuple(int(p) for p in s.split(".")))


def load_archs(path, replace: bool = False) -> list[ArchLimits]:
    """Validate the ArchLimits records in a YAML file or folder and make them known to :func:`arch_limits`."""
    return ARCH_CATALOG.load(path, replace=replace)
