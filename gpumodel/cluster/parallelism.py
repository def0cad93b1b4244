"""The parallel layout of a training job: data, tensor, pipeline, context and expert degrees, ZeRO stage.

Ranks are ordered as Megatron-LM orders them, tensor-parallel ranks innermost: ``tp`` (inside a node),
then ``cp``, then ``dp``, then ``pp`` outermost; expert-parallel groups are carved out of the
data- and context-parallel ranks. The job runs on ``dp * tp * pp * cp`` GPUs.

Examples
--------
>>> import gpumodel as gm
>>> par = gm.Parallelism(dp=4, tp=8, pp=2)
>>> par.num_gpus, par.stride("dp")
(64, 8)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..base.errors import ArgumentError
from ..vocabulary.parallel_rules import divides, tensor_parallel
from ..vocabulary import flag, nonnegative_int, positive_int, resolve_model
from ..base.reprs import html_table

__all__ = ["Parallelism", "MAX_DEGREE"]

#: Largest parallel degree, and largest ``dp * tp * pp * cp``, a layout may have [GPUs]: 2**20 (1,048,576),
#: beyond any cluster built; a larger degree is a typo, and would overflow the rank arithmetic.
MAX_DEGREE = 2**20


@dataclass(frozen=True)
class Parallelism:
    """A parallel layout (frozen; validated on creation).

    Attributes
    ----------
    dp : int
        Data-parallel replicas (with ZeRO/FSDP, the sharding group).
    tp : int
        Tensor-parallel degree (Megatron: attention heads and MLP columns split over ``tp`` GPUs).
    pp : int
        Pipeline stages.
    cp : int
        Context-parallel degree (the sequence split over ``cp`` GPUs; ring or all-gather attention).
    ep : int
        Expert-parallel degree (MoE experts split over ``ep`` of the ``dp * cp`` ranks).
    zero : {0, 1, 2, 3}
        ZeRO stage over the data-parallel group: 1 shards optimizer states, 2 also gradients, 3 (FSDP
        full shard) also weights.
    sequence_parallel : bool
        Megatron sequence parallelism: norms and dropout split over ``tp``; all-gather + reduce-scatter
        replace the all-reduces.
    virtual_stages : int
        Model chunks per pipeline stage (interleaved 1F1B schedule); 1 is plain 1F1B.

    Each degree, and the job's GPU count ``dp * tp * pp * cp``, must be from 1 to :data:`MAX_DEGREE`
    (2**20); a larger one is refused with an :class:`~gpumodel.base.errors.ArgumentError` naming it.

    Examples
    --------
    >>> Parallelism(dp=2**63)
    Traceback (most recent call last):
    ...
    gpumodel.base.errors.ArgumentError: dp=9223372036854775808 is too large: each parallel degree is at most 2**20 (1,048,576) GPUs
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0
    sequence_parallel: bool = False
    virtual_stages: int = 1

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "cp", "ep", "virtual_stages"):
            raw = getattr(self, name)
            if not isinstance(raw, str) and np.ndim(raw):
                raise ArgumentError(f"{name} must be one positive integer, got an array", argument=name, value=raw,
                                    allowed="one positive integer")
            number = isinstance(raw, (int, float, np.integer, np.floating)) and not isinstance(raw, bool)
            if number and raw > MAX_DEGREE and raw != float("inf"):   # checked before int64 limits apply
                shown = int(raw) if isinstance(raw, (int, np.integer)) else f"{raw:g}"
                raise ArgumentError(f"{name}={shown} is too large: each parallel degree is at most 2**20 "
                                    f"({MAX_DEGREE:,}) GPUs", argument=name, value=raw,
                                    allowed=f"an integer from 1 to {MAX_DEGREE:,} (2**20)")
            object.__setattr__(self, name, positive_int(raw, name))
        gpus = self.dp * self.tp * self.pp * self.cp
        if gpus > MAX_DEGREE:
            raise ArgumentError(f"dp * tp * pp * cp = {gpus:,} GPUs is too many: a layout has at most 2**20 "
                                f"({MAX_DEGREE:,}) GPUs (dp={self.dp}, tp={self.tp}, pp={self.pp}, cp={self.cp})",
                                argument="dp * tp * pp * cp", value=gpus,
                                allowed=f"a product from 1 to {MAX_DEGREE:,} (2**20)")
        zero = nonnegative_int(self.zero, "zero")
        if not isinstance(zero, int) or zero > 3:
            raise ArgumentError(f"zero must be 0, 1, 2 or 3, got {self.zero!r}", argument="zero", value=self.zero,
                                allowed="0, 1, 2 or 3")
        object.__setattr__(self, "zero", zero)
        object.__setattr__(self, "sequence_parallel", flag(self.sequence_parallel, "sequence_parallel"))
        divides(self.ep, self.dp * self.cp, "ep", "dp * cp")
        if self.zero and self.dp * self.cp == 1:
            raise ArgumentError(f"zero={self.zero} shards over the data-parallel (and context-parallel) ranks and "
                                "needs dp * cp > 1", argument="zero", value=self.zero, allowed="0 when dp * cp = 1")
        if self.virtual_stages > 1 and self.pp == 1:
            raise ArgumentError("virtual_stages > 1 needs pipeline parallelism (pp > 1)", argument="virtual_stages",
                                value=self.virtual_stages, allowed="1 when pp = 1")
        if self.sequence_parallel and self.tp == 1:
            raise ArgumentError("sequence_parallel needs tensor parallelism (tp > 1)", argument="sequence_parallel",
                                value=True, allowed="False when tp = 1")

    @property
    def num_gpus(self) -> int:
        """GPUs of the job, ``dp * tp * pp * cp``."""
        return self.dp * self.tp * self.pp * self.cp

    def stride(self, dim: str) -> int:
        """Distance between consecutive ranks of a ``dim`` group in the global rank order.

        Expert-parallel groups take consecutive data/context ranks (stride ``tp``).
        """
        order = {"tp": 1, "cp": self.tp, "ep": self.tp, "dp": self.tp * self.cp, "pp": self.tp * self.cp * self.dp}
        if dim not in order:
            raise ArgumentError(f"dim={dim!r} is not one of {', '.join(map(repr, order))}")
        return order[dim]

    def check(self, model) -> None:
        """Refuse a layout the model cannot be split into.

        ``tp`` by the rule every function shares (:func:`gpumodel.vocabulary.parallel_rules.tensor_parallel`: it divides the
        heads and the MLP width, and divides the key/value heads or is a multiple of them); ``pp`` times
        ``virtual_stages`` at most the layers; ``ep`` a divisor of a mixture-of-experts model's experts.
        """
        cfg = resolve_model(model)
        tensor_parallel(cfg, self.tp)
        if self.pp * self.virtual_stages > cfg.num_layers:
            raise ArgumentError(f"pp * virtual_stages = {self.pp * self.virtual_stages} exceeds the layers "
                                f"({cfg.num_layers})")
        if self.ep > 1:
            if not cfg.is_moe:
                raise ArgumentError(f"ep={self.ep} needs a mixture-of-experts model; {cfg.name} is dense")
            divides(self.ep, cfg.num_experts, "ep", "the experts")

    def to_dict(self) -> dict:
        """The fields as a plain dict."""
        return asdict(self)

    def __repr__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.to_dict().items()
                 if v != {"sequence_parallel": False, "zero": 0}.get(k, 1) or k in ("dp", "tp", "pp")]
        return f"Parallelism({', '.join(parts)}; {self.num_gpus} GPUs)"

    def _repr_html_(self) -> str:
        return html_table(f"Parallelism on {self.num_gpus} GPUs", [(k, str(v)) for k, v in self.to_dict().items()])
