"""GPU spec records: what a datasheet says about one GPU, validated and in SI units.

A :class:`GPUSpec` is built from one YAML file in ``specs/gpus/`` (see
:mod:`gpumodel.records.specs` for loading). Readable units in the YAML (``"3.35 TB/s"``,
``"80 GB"``) are parsed exactly at this boundary; every attribute is in SI base units.
Tensor-core peaks are DENSE; 2:4 structured sparsity is a separate factor
(:meth:`GPUSpec.peak_flops` with ``sparse=True``).

The record checks itself against the arithmetic a datasheet implies:

* FP32 peak = SM count x FP32 lanes per SM x 2 FLOP per FMA x boost clock
  (Brenndoerfer's H100 SXM example: 132 x 128 x 2 x 1.98 GHz = 66.9 TFLOP/s);
* bf16 = fp16 (with fp32 accumulate), tf32 = bf16 / 2, fp8 = 2 x bf16, fp4 = 2 x fp8,
  int8 in {2, 4} x bf16: the ratios NVIDIA's and AMD's whitepapers publish for every
  tensor-core generation since Ampere.

A record that breaks one of these by more than :data:`PEAK_TOLERANCE` fails validation
with the numbers shown.

References
----------
NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022); NVIDIA A100 Tensor Core GPU
Architecture whitepaper (2020); NVIDIA Ada GPU Architecture whitepaper (2023).

M. Brenndoerfer, "GPU Architecture: Memory Hierarchy, CUDA and Tensor Cores", 2026,
https://mbrenndoerfer.com/writing/gpu-architecture-memory-hierarchy-cuda-tensor-cores.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..base.enums import StrEnum
from .dtypes import DType, UnknownDTypeError, dtype as _dtype
from ..base.arguments import flag
from ..base.errors import ArgumentError, UnitError, UnsupportedError
from ..base.units import format_quantity, parse_quantity
from .specs import Catalog, Record, UnknownGPUError

__all__ = [
    "GPUSpec", "Peaks", "MemoryLevel", "NVLink", "Vendor", "Bytes", "BytesPerSecond", "FlopsPerSecond",
    "Hertz", "Watts", "PEAK_TOLERANCE", "UnsupportedDTypeError",
]

#: Relative tolerance of the datasheet cross-checks (rounding in published figures is ~1%).
PEAK_TOLERANCE = 0.03


class UnsupportedDTypeError(UnsupportedError):
    """The GPU has no execution path (or no published peak) for this number format."""


#: Validation context under which a bare number for a dimensional field is refused (spec files).
UNITS_REQUIRED = "units_required"


def _quantity(dimension: str):
    """Parse a dimensional field. In code a bare number is SI; in a spec file (validation context
    ``{UNITS_REQUIRED: True}``) it must carry its unit, so that ``3.35`` is never read as 3.35 B/s."""
    example = {"bytes": "80 GiB", "bytes/s": "3.35 TB/s", "FLOP/s": "989.4 TFLOP/s", "Hz": "1.98 GHz",
               "W": "700 W", "s": "5 us"}[dimension]

    def parse(value: object, info: ValidationInfo) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (info.context or {}).get(UNITS_REQUIRED):
            raise UnitError(f"{value!r} has no unit; write it with one, e.g. '{example}'")
        return parse_quantity(value, dimension)

    return BeforeValidator(parse)


Bytes = Annotated[float, _quantity("bytes"), Field(ge=0)]
BytesPerSecond = Annotated[float, _quantity("bytes/s"), Field(gt=0)]
FlopsPerSecond = Annotated[float, _quantity("FLOP/s"), Field(gt=0)]
Hertz = Annotated[float, _quantity("Hz"), Field(gt=0)]
Watts = Annotated[float, _quantity("W"), Field(gt=0)]


class Vendor(StrEnum):
    NVIDIA = "nvidia"
    AMD = "amd"


class _Record(Record):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)


class Peaks(_Record):
    """Dense peak throughput per number format [FLOP/s, or OP/s for integers].

    ``fp16`` is the fp16 tensor-core rate with fp32 accumulation; ``fp16_fp16acc`` is given only
    where fp16 accumulation is faster (GeForce parts). ``fp8`` and ``fp4`` are likewise with fp32
    accumulation. ``fp64`` and ``fp32`` are the non-tensor (CUDA core / vector) rates;
    ``fp64_tensor`` the FP64 tensor-core (matrix) rate.
    """

    fp64: FlopsPerSecond | None = None
    fp64_tensor: FlopsPerSecond | None = None
    fp32: FlopsPerSecond
    tf32: FlopsPerSecond | None = None
    fp16: FlopsPerSecond | None = None
    fp16_fp16acc: FlopsPerSecond | None = None
    bf16: FlopsPerSecond | None = None
    fp8: FlopsPerSecond | None = None
    fp6: FlopsPerSecond | None = None
    fp4: FlopsPerSecond | None = None
    int8: FlopsPerSecond | None = None
    int4: FlopsPerSecond | None = None


class MemoryLevel(_Record):
    """One level of the memory hierarchy, from registers down to device memory.

    ``capacity`` is chip-wide unless ``per_sm`` is true; ``bandwidth`` is chip-wide [bytes/s].
    """

    level: Literal["registers", "shared", "l1", "l2", "hbm", "device"]
    capacity: Bytes | None = None
    per_sm: bool = False
    bandwidth: BytesPerSecond | None = None
    basis: Literal["published", "measured", "derived"]
    source: str = Field(min_length=3)


class NVLink(_Record):
    generation: int = Field(ge=1, le=6)
    bandwidth: BytesPerSecond = Field(description="per-GPU bidirectional bandwidth [bytes/s]")


_DTYPE_TO_FIELD = {
    DType.FP64: "fp64", DType.FP32: "fp32", DType.TF32: "tf32", DType.FP16: "fp16", DType.BF16: "bf16",
    DType.FP8: "fp8", DType.FP8_E4M3: "fp8", DType.FP8_E5M2: "fp8", DType.FP6: "fp6", DType.FP4: "fp4",
    DType.INT8: "int8", DType.INT4: "int4",
}
_EXTRA_PEAKS = {"fp64_tensor": "fp64_tensor", "fp16_fp16acc": "fp16_fp16acc"}
#: Formats to use instead of one a GPU has no peak for, nearest first: the same width, then wider.
_INSTEAD = {"bf16": ("fp16",), "fp16": ("bf16",), "fp8": ("bf16", "fp16"), "fp6": ("fp8", "bf16", "fp16"),
            "fp4": ("fp8", "bf16", "fp16"), "int8": ("fp16", "bf16"), "int4": ("int8", "fp16", "bf16"),
            "tf32": ("fp32",), "fp64_tensor": ("fp64",), "fp64": ("fp32",)}
_TENSOR_FIELDS = frozenset({"fp64_tensor", "tf32", "fp16", "fp16_fp16acc", "bf16", "fp8", "fp6", "fp4", "int8", "int4"})


class GPUSpec(_Record):
    """One GPU's datasheet, validated and in SI units.

    Attributes are in SI base units: ``memory_bytes`` [byte], ``memory_bandwidth`` [byte/s],
    ``boost_clock`` [Hz], peaks [FLOP/s], ``tdp_watts`` [W].
    """

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$", description="canonical name, e.g. 'h100-sxm'")
    display_name: str
    aliases: tuple[str, ...] = ()
    vendor: Vendor
    architecture: str
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    occupancy_note: str | None = None
    form_factor: str
    sm_count: int = Field(gt=0, description="streaming multiprocessors (NVIDIA) or compute units (AMD)")
    fp32_cores_per_sm: int = Field(gt=0)
    tensor_cores_per_sm: int = Field(ge=0)
    boost_clock: Hertz
    memory_bytes: Bytes = Field(description="device memory capacity as the datasheet states it [byte]")
    memory_bytes_visible: Bytes | None = Field(
        default=None, description="device memory the CUDA runtime reports as total (cudaMemGetInfo; else nvidia-smi memory.total) [byte], where known")
    memory_type: str
    memory_bandwidth: BytesPerSecond
    l2_bytes: Bytes
    shared_memory_per_sm: Bytes
    max_shared_memory_per_block: Bytes = Field(description="opt-in maximum per block [byte]")
    register_file_per_sm: Bytes
    max_threads_per_sm: int = Field(gt=0)
    peaks: Peaks
    sparsity: Literal["2:4"] | None = None
    nvlink: NVLink | None = None
    pcie_generation: int = Field(ge=3, le=6)
    tdp_watts: Watts
    memory_hierarchy: tuple[MemoryLevel, ...] = ()
    release_year: int | None = Field(default=None, ge=2010, le=2030)
    source: str = Field(min_length=3)
    notes: str = ""

    @field_validator("memory_bytes_visible")
    @classmethod
    def _visible_within_installed(cls, value: float | None, info: ValidationInfo) -> float | None:
        """Refuse visible memory above the installed memory (the driver shows at most what is installed).

        A datasheet's "GB" is often binary (A100 40GB: the driver shows 40960 MiB), so a ``memory_bytes`` that is
        a whole number of decimal megabytes may be exceeded up to its binary reading (x 2**30 / 1e9), never more;
        one written in binary units or bytes may not be exceeded at all.
        """
        memory = info.data.get("memory_bytes")
        if value is None or memory is None:
            return value
        decimal = memory > 0 and float(memory) % 1e6 == 0
        ceiling = memory * 2**30 / 1e9 if decimal else memory
        if value > ceiling:
            read = f" even read as {memory / 1e9:g} GiB (a datasheet's GB may be binary)" if decimal else ""
            raise ArgumentError(f"memory_bytes_visible ({value:,.0f} B = {value / 2**30:.2f} GiB) exceeds memory_bytes "
                                f"({memory:,.0f} B = {memory / 2**30:.2f} GiB){read}: the driver shows at most what "
                                "is installed", argument="memory_bytes_visible", value=value,
                                allowed=f"at most {ceiling:,.0f} B (memory_bytes{read and ' read as GiB'})")
        return value

    @field_validator("source")
    @classmethod
    def _source_not_placeholder(cls, value: str) -> str:
        if value.strip().lower() in {"todo", "tbd", "unknown", "n/a"}:
            raise ValueError("source must name a document or URL")
        return value

    @model_validator(mode="after")
    def _cross_check(self) -> "GPUSpec":
        problems = list(_peak_problems(self))
        if self.vendor is Vendor.NVIDIA and self.compute_capability is None:
            problems.append("an NVIDIA GPU needs compute_capability")
        if self.vendor is not Vendor.NVIDIA and self.occupancy_note is None:
            problems.append("a non-NVIDIA GPU needs occupancy_note saying why CUDA occupancy does not apply")
        if self.max_shared_memory_per_block > self.shared_memory_per_sm:
            problems.append("max_shared_memory_per_block exceeds shared_memory_per_sm")
        problems += list(_plausibility(self))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    # ------------------------------------------------------------------ derived values
    def peak_flops(self, dtype: DType | str = "bf16", *, sparse: bool = False, accumulate: str | None = None) -> float:
        """Dense peak throughput for a number format [FLOP/s, OP/s for integers].

        Parameters
        ----------
        dtype : str or DType
            "fp64", "fp64_tensor", "fp32", "tf32", "fp16", "bf16", "fp8", "fp6", "fp4", "int8", "int4".
            "fp32" is the CUDA-core rate; "tf32" the tensor-core rate for fp32 data.
        sparse : bool
            Apply 2:4 structured sparsity (x2) to a tensor-core format; an error on GPUs without it.
        accumulate : {"fp32", "fp16"}, optional
            For fp16 on GPUs whose fp16-accumulate rate differs (GeForce), ``"fp16"`` picks it.

        Raises
        ------
        UnsupportedDTypeError
            The GPU has no published peak for this format (e.g. fp8 on an A100).
        """
        sparse = flag(sparse, "sparse")
        if accumulate not in (None, "fp32", "fp16"):
            raise ArgumentError(f"accumulate={accumulate!r} is not one of None, 'fp32', 'fp16'")
        key = self._peak_field(dtype)
        if key == "fp16" and accumulate == "fp16" and self.peaks.fp16_fp16acc is not None:
            key = "fp16_fp16acc"
        value = getattr(self.peaks, key)
        if value is None:
            have = ", ".join(k for k, v in self.peaks.model_dump().items() if v is not None)
            alt = self.instead_of(key)
            raise UnsupportedDTypeError(
                f"{self.name} has no {key} execution path with a published peak"
                + (f" (use {alt} instead)" if alt else "") + f"; it has: {have}",
                argument="dtype", value=dtype, allowed=have)
        if sparse:
            if key not in _TENSOR_FIELDS or self.sparsity is None or key == "fp64_tensor":
                raise UnsupportedDTypeError(f"{self.name} has no 2:4 sparse path for {key}")
            value *= 2.0
        return value

    def instead_of(self, dtype: DType | str) -> str | None:
        """The nearest number format with a peak on this GPU to use instead of ``dtype`` (None: none needed or known).

        The same width first (fp16 for bf16 on a V100), then wider (bf16 for fp8 on an A100).

        >>> import gpumodel as gm
        >>> gm.gpu("v100").instead_of("bf16"), gm.gpu("a100").instead_of("fp8"), gm.gpu("h100").instead_of("fp8")
        ('fp16', 'bf16', None)
        """
        try:
            key = self._peak_field(dtype)
        except (UnknownDTypeError, UnsupportedDTypeError):
            return None
        if getattr(self.peaks, key) is not None:
            return None
        return next((alt for alt in _INSTEAD.get(key, ()) if getattr(self.peaks, alt) is not None), None)

    def supports(self, dtype: DType | str) -> bool:
        """Whether :meth:`peak_flops` has a value for ``dtype``."""
        try:
            return getattr(self.peaks, self._peak_field(dtype)) is not None
        except (UnknownDTypeError, UnsupportedDTypeError):
            return False

    @staticmethod
    def _peak_field(dtype: DType | str) -> str:
        if isinstance(dtype, str) and dtype.lower() in _EXTRA_PEAKS:
            return _EXTRA_PEAKS[dtype.lower()]
        dt = _dtype(dtype)
        if dt not in _DTYPE_TO_FIELD:
            raise UnsupportedDTypeError(f"no peak throughput is defined for {dt.value}")
        return _DTYPE_TO_FIELD[dt]

    @property
    def fp32_peak_from_cores(self) -> float:
        """SM count x FP32 lanes x 2 FLOP/FMA x boost clock [FLOP/s]."""
        return self.sm_count * self.fp32_cores_per_sm * 2.0 * self.boost_clock

    @property
    def usable_memory_bytes(self) -> float:
        """Device memory a process can see [byte]: the driver's figure where known, else the datasheet's.

        Datasheets round (the H200's "141 GB" is 150.1e9 B to the CUDA runtime), so fits-or-not answers
        use this figure.
        """
        return self.memory_bytes_visible if self.memory_bytes_visible is not None else self.memory_bytes

    @property
    def nvlink_bandwidth(self) -> float:
        """Per-GPU bidirectional NVLink bandwidth [bytes/s]; 0 where the GPU has none."""
        return self.nvlink.bandwidth if self.nvlink is not None else 0.0

    def level(self, name: str) -> MemoryLevel | None:
        """The memory-hierarchy entry called ``name`` ("registers", "shared", "l2", "hbm"), if any."""
        aliases = {"device": "hbm", "hbm": "device", "l1": "shared", "shared": "l1"}
        for lvl in self.memory_hierarchy:
            if lvl.level == name:
                return lvl
        for lvl in self.memory_hierarchy:
            if lvl.level == aliases.get(name):
                return lvl
        return None

    def bandwidth(self, level: str = "hbm") -> float:
        """Chip-wide bandwidth of a memory level [bytes/s] ("hbm"/"device", "l2", "shared", "registers")."""
        if level in ("hbm", "device", "dram", "memory"):
            return self.memory_bandwidth
        lvl = self.level(level)
        if lvl is None or lvl.bandwidth is None:
            known = ["hbm"] + [m.level for m in self.memory_hierarchy if m.bandwidth is not None]
            raise UnsupportedError(f"{self.name} has no published bandwidth for level={level!r}; levels with one: {known}")
        return lvl.bandwidth

    def __repr__(self) -> str:
        bf16 = self.peaks.bf16 or self.peaks.fp16
        bits = [
            f"GPUSpec({self.name!r}: {self.display_name}",
            f"{format_quantity(self.memory_bytes, 'B')} {self.memory_type}",
            f"{format_quantity(self.memory_bandwidth, 'B/s')}",
            f"bf16 {format_quantity(bf16, 'FLOP/s')}" if bf16 else "no bf16",
            f"fp32 {format_quantity(self.peaks.fp32, 'FLOP/s')}",
            f"{self.tdp_watts:.0f} W)",
        ]
        return ", ".join(bits)

    __str__ = __repr__


#: Ranges outside which a value is a unit slip, not a GPU: (field, low, high, unit, example).
_PLAUSIBLE = (("memory_bytes", 2**30, 2**41, "bytes", "80 GiB"),
              ("memory_bandwidth", 1e10, 1e14, "bytes/s", "3.35 TB/s"),
              ("boost_clock", 1e8, 1e10, "Hz", "1.98 GHz"))


def _plausibility(spec: "GPUSpec"):
    """Yield a message for a value far outside any GPU's range (e.g. ``memory_bytes: 80`` read as 80 bytes)."""
    for name, low, high, unit, example in _PLAUSIBLE:
        value = getattr(spec, name)
        if not low <= value <= high:
            yield (f"{name} = {value:g} {unit} is outside the range of any GPU ({low:g}..{high:g} {unit}); "
                   f"was a unit left out? Write it as e.g. '{example}'")


def _close(a: float, b: float, tol: float = PEAK_TOLERANCE) -> bool:
    return math.isclose(a, b, rel_tol=tol)


def _peak_problems(spec: GPUSpec):
    """Yield a message for every datasheet cross-check the record breaks (empty when consistent).

    Checks, each within :data:`PEAK_TOLERANCE` (relative), and the published ratios they allow:

    * ``fp32 = sm_count x fp32_cores_per_sm x 2 x boost_clock`` (one FMA = 2 FLOP per lane per clock).
      NVIDIA counts CUDA cores (H100 SXM5: 132 x 128 x 2 x 1.98 GHz = 66.9 TFLOP/s, H100 whitepaper Table 3);
      AMD's MI300X FP32 vector peak counts packed FP32 (two FP32 FMAs per stream processor per clock,
      AMD CDNA 3 whitepaper), so its record holds 128 FP32 lanes per CU: 304 x 128 x 2 x 2.1 GHz = 163.4 TFLOP/s.
    * ``bf16 = fp16`` (fp32 accumulate): equal on every tensor-core generation that has bf16 (A100, GA102, Ada,
      H100 and RTX Blackwell whitepapers; MI300X data sheet).
    * ``tf32 = bf16 / 2``: A100 whitepaper Table 3 (156 vs 312), H100 (494.7 vs 989.4), MI300X (653.7 vs 1307.4).
      On GeForce parts tf32 is half of the fp32-ACCUMULATE bf16 rate too (RTX 4090: 82.6 vs 165.2, Ada whitepaper).
    * ``fp8 = 2 x bf16``: H100 whitepaper (1978.9 vs 989.4), MI300X, B200. On GeForce parts both are the
      fp32-accumulate rates (RTX 4090: 330.3 vs 165.2, Ada whitepaper Appendix A; RTX 5090: 419 vs 209.5).
    * ``fp4 = 2 x fp8``: HGX B200 datasheet (9 vs 4.5 PFLOP/s dense). Exception, allowed only on records that
      carry a separate ``fp16_fp16acc`` rate (GeForce): fp4 = 4 x fp8, because GeForce Blackwell halves fp8 with
      fp32 accumulate but runs fp4 with fp32 accumulate at full rate (RTX Blackwell whitepaper, RTX 5090:
      FP8/FP32-acc 419, FP4/FP32-acc 1676 TFLOP/s dense).
      Exception for Blackwell Ultra (compute capability 10.3): fp4 = 3 x fp8, the NVFP4 tensor cores of B300/GB300
      (HGX B300 specifications: FP4 108 vs FP8/FP6 36 PFLOP/s dense over 8 GPUs; GB300 NVL72: 1,080 vs 360 PFLOP/s
      dense over 72 GPUs).
    * ``int8 = 2 x bf16`` (data-center parts: A100 624 vs 312, H100, A10, L4, L40S, MI300X, B200) or ``4 x bf16``
      on GeForce parts, whose int8 runs at full rate while bf16 with fp32 accumulate runs at half (RTX 3090
      284 vs 71, GA102 whitepaper; RTX 4090 660.6 vs 165.2; RTX 5090 838 vs 209.5). Only checked where bf16 exists
      (Volta/Turing define no bf16 ratio).
    * ``fp16_fp16acc = 2 x fp16`` where given (GeForce: RTX 3090 142 vs 71, RTX 4090 330.3 vs 165.2,
      RTX 5090 419 vs 209.5).
    * ``fp64_tensor = 2 x fp64`` (A100 19.5 vs 9.7, H100 66.9 vs 33.5, MI300X 163.4 vs 81.7) or ``1 x fp64``
      (HGX B200: FP64 and FP64 tensor both 37 TFLOP/s).
    """
    p = spec.peaks
    derived = spec.fp32_peak_from_cores
    if not _close(p.fp32, derived):
        yield (
            f"fp32 peak {p.fp32 / 1e12:.2f} TFLOP/s disagrees with sm_count x fp32_cores_per_sm x 2 x boost_clock = "
            f"{spec.sm_count} x {spec.fp32_cores_per_sm} x 2 x {spec.boost_clock / 1e9:.3f} GHz = {derived / 1e12:.2f} TFLOP/s"
        )
    if p.bf16 is not None and p.fp16 is not None and not _close(p.bf16, p.fp16):
        yield f"bf16 {p.bf16 / 1e12:.1f} != fp16 {p.fp16 / 1e12:.1f} TFLOP/s (same tensor-core rate on every generation)"
    base = p.bf16 or p.fp16
    geforce = p.fp16_fp16acc is not None  # separate (faster) fp16-accumulate rate: GeForce tensor cores
    ultra = spec.compute_capability == "10.3"  # Blackwell Ultra (B300/GB300): NVFP4 at 3 x the fp8 rate
    ratios = [("tf32", p.tf32, "16-bit tensor", base, (0.5,)),
              ("fp8", p.fp8, "16-bit tensor", base, (2.0,)),
              ("fp4", p.fp4, "fp8", p.fp8, (2.0, 4.0) if geforce else (2.0, 3.0) if ultra else (2.0,)),
              ("fp16_fp16acc", p.fp16_fp16acc, "fp16 (fp32 accumulate)", p.fp16, (2.0,)),
              ("fp64_tensor", p.fp64_tensor, "fp64", p.fp64, (1.0, 2.0))]
    if p.bf16 is not None:  # Volta/Turing: int8 is only compared where a bf16 path defines the ratio
        ratios.append(("int8", p.int8, "16-bit tensor", base, (2.0, 4.0)))
    for name, value, ref_name, ref, allowed in ratios:
        if value is None or ref is None:
            continue
        if not any(_close(value, r * ref) for r in allowed):
            shown = " or ".join(f"{r:g}" for r in allowed)
            yield (f"{name} peak {value / 1e12:.1f} is not {shown} x the {ref_name} peak {ref / 1e12:.1f} TFLOP/s "
                   f"(ratio {value / ref:.3g}; the published ratio is {shown}); check dense vs sparse")


#: Shipped GPUs plus those from ``GPUMODEL_SPEC_PATH`` and :func:`gpumodel.vocabulary.gpus.load_gpus`.
GPU_CATALOG: Catalog[GPUSpec] = Catalog("gpus", GPUSpec, error=UnknownGPUError)
