"""Per-architecture priors: what fraction of each datasheet peak kernels reach, from published measurements.

A prior is one YAML record per architecture (``specs/priors/sm80.yaml`` ...): the fraction of the dense
tensor-core peak that cuBLAS GEMMs reach (per dtype), the fraction of the datasheet memory bandwidth a
streaming copy reaches, and how far the attention kernel of that architecture is trusted to behave like
the reference's. Every value carries its uncertainty and its source. :mod:`gpumodel.calibration.transfer`
uses only *ratios* of priors (target architecture over reference architecture), so a prior shared by
both cancels exactly.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..records.specs import Catalog
from ..vocabulary import resolve_gpu

__all__ = ["PriorValue", "AttentionPrior", "GPUPrior", "ArchPrior", "DATASHEET_KINDS", "PRIORS", "prior_for", "list_priors"]

#: uncertainty factor of a GEMM fraction taken from another dtype of the same architecture
FALLBACK_WIDENING = 1.5


class PriorValue(BaseModel):
    """An achieved fraction of a datasheet figure, its relative uncertainty and where it comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float = Field(gt=0, le=1.2, description="achieved / datasheet [1]")
    uncertainty: float = Field(ge=0, lt=1, description="relative standard uncertainty of value [1]")
    source: str = Field(min_length=10)


class AttentionPrior(BaseModel):
    """Which attention kernel the architecture runs and how much its transferred rate is trusted.

    ``libraries`` holds, for an attention library whose kernels on this architecture are neither the native ones
    the calibration prices nor FlashAttention-2's (which the model prices by mechanism), the fraction of the
    native kernel's FLOP rate it reaches (``gm.ops.attention(..., kernel=)``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kernel: str
    uncertainty: float = Field(ge=0, lt=1)
    source: str = Field(min_length=10)
    libraries: dict[str, PriorValue] = Field(default_factory=dict)

    def library_rate(self, kernel: str) -> float:
        """The fraction of the native attention rate ``kernel`` reaches here (1 where none is recorded).

        >>> prior_for("h100").attention.library_rate("cudnn")
        1.0
        """
        hit = self.libraries.get(kernel)
        return 1.0 if hit is None else hit.value


class GPUPrior(BaseModel):
    """Achieved fractions published for one GPU of an architecture: they take precedence over the
    architecture's (GPUs of one architecture differ: a 150 W A10 reaches half its GEMM peak, a GeForce card
    boosts above the clock its peak is quoted at)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gemm: dict[str, PriorValue] = Field(default_factory=dict)
    bandwidth: PriorValue | None = None
    datasheet: tuple[str, ...] = ()
    datasheet_source: str = ""
    datasheet_error: float | None = Field(default=None, ge=0)
    #: compute-bound kernels' slowdown under seconds of back-to-back work, measured on this GPU
    #: (:func:`gpumodel.calibration.sustained.sustained_slowdown`); replaces the reference's in the transfer
    sustained_slowdown: float | None = Field(default=None, ge=1.0, le=2.0)
    #: the fp8 GEMMs' own (:func:`gpumodel.calibration.loaded.model_slowdowns`), measured in the same run
    sustained_slowdown_fp8: float | None = Field(default=None, ge=1.0, le=2.0)
    sustained_source: str = ""
    #: the share of time in compute-bound kernels up to which a mix of work stays under the power limit at the boost
    #: clock, measured on this GPU (:func:`gpumodel.calibration.sustained.clock_share`'s ``threshold``)
    power_share_threshold: float | None = Field(default=None, ge=0.0, lt=1.0)
    power_share_source: str = ""


#: parameter kinds a prior may hand back to the datasheet's default efficiencies (``datasheet:``)
DATASHEET_KINDS = ("tensor_rate", "bandwidth")


#: 16-bit tensor-core dtypes: one rate on every NVIDIA part, so one's figure stands for the other
_SIXTEEN_BIT = ("bf16", "fp16")


class ArchPrior(BaseModel):
    """Achieved fractions of datasheet peaks on one GPU architecture (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^sm\d+$")
    architecture: str
    compute_capabilities: tuple[str, ...] = Field(min_length=1)
    examples: str = ""
    gemm: dict[str, PriorValue] = Field(min_length=1)
    bandwidth: PriorValue
    attention: AttentionPrior
    clock_note: str = ""
    source: str = Field(min_length=3)
    notes: str = ""
    gpus: dict[str, GPUPrior] = Field(default_factory=dict)
    #: parameter kinds (``"tensor_rate"``: GEMM rates, ``"bandwidth"``: memory streams) whose transferred values do
    #: not beat the datasheet's default efficiencies on this architecture's published figures
    #: (``bench/published_kernels.py``): the transfer takes the datasheet's for them
    datasheet: tuple[str, ...] = ()
    datasheet_source: str = ""
    #: the datasheet estimate's median error on those published figures [1]
    datasheet_error: float | None = Field(default=None, ge=0)

    @field_validator("datasheet")
    @classmethod
    def _known_kinds(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [k for k in v if k not in DATASHEET_KINDS]
        if bad:
            raise ValueError(f"datasheet kinds must be among {DATASHEET_KINDS}, got {bad}")
        return v

    def datasheet_kinds(self, gpu: str | None = None) -> tuple[str, ...]:
        """The parameter kinds the transfer to ``gpu`` takes from the datasheet (the architecture's and the GPU's).

        >>> prior_for("h100").datasheet_kinds("h100-sxm")
        ()
        """
        own = self.gpus.get(gpu or "")
        return tuple(dict.fromkeys(self.datasheet + (own.datasheet if own is not None else ())))

    def datasheet_error_for(self, kind: str, gpu: str | None = None) -> float | None:
        """The measured median error of the datasheet estimate where ``kind`` is handed to it (GPU's, else the
        architecture's), or None."""
        own = self.gpus.get(gpu or "")
        if own is not None and kind in own.datasheet:
            return own.datasheet_error
        return self.datasheet_error if kind in self.datasheet else None

    def gemm_fraction(self, dtype: str, gpu: str | None = None) -> tuple[float, float]:
        """``(fraction, uncertainty)`` of the dense peak a GEMM of ``dtype`` reaches (on ``gpu``, by name).

        The GPU's own figure for the dtype (or, for bf16 and fp16, for the other) first, then the architecture's;
        a dtype without a figure takes bf16's (else fp16's), its uncertainty widened by :data:`FALLBACK_WIDENING`.

        Examples
        --------
        >>> p = prior_for("a100")
        >>> p.gemm_fraction("bf16")
        (0.848, 0.06)
        >>> p.gemm_fraction("tf32")          # not published separately: bf16's, uncertainty x1.5
        (0.848, 0.09)
        >>> p.gemm_fraction("bf16", "a100-sxm4-40gb")     # that GPU's own figure
        (0.79, 0.05)
        """
        own = self.gpus.get(gpu or "")
        if own is not None:
            for d in ((dtype, *_SIXTEEN_BIT) if dtype in _SIXTEEN_BIT else (dtype,)):
                if d in own.gemm:
                    return own.gemm[d].value, own.gemm[d].uncertainty
        if dtype in self.gemm:
            v = self.gemm[dtype]
            return v.value, v.uncertainty
        for other in ("bf16", "fp16"):
            if other in self.gemm:
                v = self.gemm[other]
                return v.value, round(v.uncertainty * FALLBACK_WIDENING, 6)
        v = next(iter(self.gemm.values()))  # pragma: no cover - every shipped prior has bf16 or fp16
        return v.value, round(v.uncertainty * FALLBACK_WIDENING, 6)


    def bandwidth_fraction(self, gpu: str | None = None) -> tuple[float, float]:
        """``(fraction, uncertainty)`` of the datasheet bandwidth a device-memory copy reaches (on ``gpu``).

        >>> prior_for("h100").bandwidth_fraction() == (prior_for("h100").bandwidth.value,
        ...                                           prior_for("h100").bandwidth.uncertainty)
        True
        """
        own = self.gpus.get(gpu or "")
        v = own.bandwidth if own is not None and own.bandwidth is not None else self.bandwidth
        return v.value, v.uncertainty


PRIORS: Catalog[ArchPrior] = Catalog("priors", ArchPrior, key=lambda r: r.name, aliases=lambda r: ())


def list_priors() -> list[str]:
    """Names of the architectures with a prior (``"sm80"``, ``"sm90"`` ...)."""
    return PRIORS.names()


def prior_for(gpu: Any) -> ArchPrior | None:
    """The prior of a GPU's architecture (a :class:`~gpumodel.records.gpu.GPUSpec` or name), or ``None``.

    Examples
    --------
    >>> prior_for("rtx-4090").name, prior_for("h100").architecture
    ('sm89', 'hopper')
    >>> prior_for("mi300x") is None        # no prior for that vendor's parts
    True
    """
    g = resolve_gpu(gpu)
    cc = g.compute_capability
    if cc is None:
        return None
    for record in PRIORS.records():
        if cc in record.compute_capabilities:
            return record
    return None
