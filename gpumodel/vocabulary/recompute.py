"""Megatron-Core's selective recomputation by module: the names ``--recompute-modules`` takes.

With ``--recompute-granularity selective`` Megatron-Core recomputes, in the backward, the submodules named by
``--recompute-modules`` (default ``core_attn``, the attention core of Korthikanti et al. 2022) and drops the
tensors they would have kept for it. ``checkpointing="selective"`` is that granularity; ``recompute_modules``
names the submodules.

References
----------
Megatron-LM ``megatron/core/transformer/transformer_config.py`` (``recompute_modules`` and its checks, Megatron-Core
0.13 and later).

Examples
--------
>>> from gpumodel.vocabulary import Checkpointing, Framework
>>> sorted(m.value for m in recompute_modules(["layernorm", "moe_act"], Checkpointing.SELECTIVE, Framework.MEGATRON))
['layernorm', 'moe_act']
>>> sorted(m.value for m in recompute_modules(None, Checkpointing.SELECTIVE, Framework.MEGATRON))   # the default
['core_attn']
"""

from __future__ import annotations

from typing import Any

from ..base.arguments import choice
from ..base.enums import StrEnum
from ..base.errors import ArgumentError
from .precision import Checkpointing, Framework

__all__ = ["RecomputeModule", "recompute_modules", "DEFAULT_RECOMPUTE_MODULES"]


class RecomputeModule(StrEnum):
    """A submodule Megatron-Core's selective recomputation re-runs in the backward (``--recompute-modules``).

    ``core_attn``: the attention core (scores, softmax, their product with the values). ``layernorm``: the
    norms that are not fused into the linear layer after them (the input norm of multi-latent attention, the
    pre-MLP norm of a mixture-of-experts layer). ``mla_up_proj``: the MLA up-projections and rotary embedding.
    ``mlp``: the MLP of a dense layer. ``moe``: the whole mixture-of-experts layer. ``moe_act``: the routed
    experts' activation function. ``shared_experts``: the shared experts.
    """

    CORE_ATTN = "core_attn"
    LAYERNORM = "layernorm"
    MLA_UP_PROJ = "mla_up_proj"
    MLP = "mlp"
    MOE = "moe"
    MOE_ACT = "moe_act"
    SHARED_EXPERTS = "shared_experts"


#: Megatron-Core's ``recompute_modules`` when selective recomputation names none.
DEFAULT_RECOMPUTE_MODULES = frozenset({RecomputeModule.CORE_ATTN})


def recompute_modules(value: Any, checkpointing: Checkpointing, framework: Any, cfg: Any = None,
                      name: str = "recompute_modules") -> frozenset:
    """The set of :class:`RecomputeModule` a ``recompute_modules`` argument names, checked.

    Parameters
    ----------
    value : None, str or iterable of str
        None: Megatron-Core's default with ``checkpointing="selective"`` (``core_attn``), nothing otherwise. A
        name, names joined by commas, ``+`` or spaces (as on Megatron-LM's command line), or an iterable of names;
        an empty one recomputes nothing.
    checkpointing : Checkpointing
        The recomputation granularity: names are taken with "selective" only.
    framework : Framework
        The training engine: names are taken with "megatron" only.
    cfg : TransformerConfig, optional
        The model: ``mla_up_proj`` is refused without multi-latent attention, as Megatron-Core refuses it.
    name : str
        The argument's name, for the errors.

    Returns
    -------
    frozenset of RecomputeModule
        Empty when nothing is recomputed by module (``checkpointing`` "none" or "full").

    Raises
    ------
    ArgumentError
        An unknown name (the message lists the allowed ones), names with another granularity or framework, or
        ``mla_up_proj`` for a model without MLA; each names ``name``.

    Examples
    --------
    >>> recompute_modules("layernorm,moe_act", Checkpointing.FULL, Framework.MEGATRON)   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpumodel.base.errors.ArgumentError: recompute_modules names what ... give checkpointing='selective' (got 'full')
    >>> recompute_modules(["norm"], Checkpointing.SELECTIVE, Framework.MEGATRON)   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpumodel.base.errors.ArgumentError: recompute_modules='norm' is not one of 'core_attn', 'layernorm', ...
    """
    if value is None:
        return DEFAULT_RECOMPUTE_MODULES if checkpointing == Checkpointing.SELECTIVE else frozenset()
    if framework != Framework.MEGATRON:
        raise ArgumentError(f"{name} are Megatron-Core's --recompute-modules: give framework='megatron' (framework="
                            f"{getattr(framework, 'value', framework)!r} recomputes whole layers or nothing)",
                            argument=name, value=value, allowed="None, or framework='megatron'")
    if checkpointing != Checkpointing.SELECTIVE:
        raise ArgumentError(f"{name} names what selective recomputation re-runs: give checkpointing='selective' "
                            f"(got {getattr(checkpointing, 'value', checkpointing)!r})", argument=name, value=value,
                            allowed="None, or checkpointing='selective'")
    parts = value.replace(",", " ").replace("+", " ").split() if isinstance(value, str) else value
    try:
        names = list(parts)
    except TypeError:
        raise ArgumentError(f"{name} must be module names, got {type(value).__name__}", argument=name, value=value,
                            allowed=", ".join(repr(m.value) for m in RecomputeModule)) from None
    out = frozenset(choice(RecomputeModule, n, name) for n in names)
    if RecomputeModule.MLA_UP_PROJ in out and cfg is not None and not cfg.is_mla:
        raise ArgumentError(f"{name}: 'mla_up_proj' recomputes multi-latent attention's up-projections; {cfg.name} has "
                            "no MLA (Megatron-Core refuses it too)", argument=name, value=value,
                            allowed="the other modules, or a model with kv_lora_rank > 0")
    return out
