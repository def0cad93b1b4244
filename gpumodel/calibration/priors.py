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

from pydantic import BaseModel, ConfigDict, Field

from ..records.specs import Catalog
from ..vocabulary import resolve_gpu

__all__ = ["PriorValue", "AttentionPrior", "ArchPrior", "PRIORS", "prior_for", "list_priors"]

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

    def gemm_fraction(self, dtype: str) -> tuple[float, float]:
        """``(fraction, uncertainty)`` of the dense peak a GEMM of ``dtype`` reaches.

        A dtype without its own figure takes bf16's (else fp16's), its uncertainty widened by
        :data:`FALLBACK_WIDENING`.

        Examples
        --------
        >>> p = prior_for("a100")
        >>> p.gemm_fraction("bf16")
        (0.869, 0.04)
        >>> p.gemm_fraction("tf32")          # not published separately: bf16's, uncertainty x1.5
        (0.869, 0.06)
        """
        if dtype in self.gemm:
            v = self.gemm[dtype]
            return v.value, v.uncertainty
        for other in ("bf16", "fp16"):
            if other in self.gemm:
                v = self.gemm[other]
                return v.value, round(v.uncertainty * FALLBACK_WIDENING, 6)
        v = next(iter(self.gemm.values()))  # pragma: no cover - every shipped prior has bf16 or fp16
        return v.value, round(v.uncertainty * FALLBACK_WIDENING, 6)


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
