"""The parallel-degree rules: which tensor-, pipeline-, expert- and data-parallel degrees a model takes.

One rule per degree, shared by every function that takes one (training memory and step time, inference
memory, serving, the planners), so that ``tp=3`` on a model with 32 heads is refused everywhere with the
same message. The names are also importable from :mod:`gpumodel.vocabulary`, where they were first defined.

Examples
--------
>>> import gpumodel as gm
>>> from gpumodel.vocabulary.parallel_rules import splits_model
>>> splits_model(gm.model("llama-3-8b"), [1, 2, 3, 4])
array([ True,  True, False,  True])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.errors import ArgumentError
from ..base.arguments import deprecated_alias
from ..base.numeric import nonnegative_int, positive_int

__all__ = ["divides", "tensor_parallel", "splits_model", "parallel_degrees"]


def divides(degree: Any, total: int, name: str, what: str) -> None:
    """Refuse a parallel degree (or array of them) that does not divide what it splits."""
    bad = np.asarray(total) % np.asarray(degree) != 0
    if np.any(bad):
        first = np.asarray(degree)[bad].flat[0].item() if np.ndim(degree) else degree
        raise ArgumentError(f"{name}={first} must divide {what} ({total})", argument=name, value=first,
                            allowed=f"a divisor of {what} ({total})")


def tensor_parallel(cfg: Any, tp: Any, name: str = "tp"):
    """Refuse a tensor-parallel degree that cannot split model ``cfg``; returns it (an ``int`` or an array).

    The one rule of every function that takes ``tp`` (training memory and step time, inference memory,
    serving): as Megatron-LM splits a layer, ``tp`` must divide the attention heads and the MLP width;
    it must divide the key/value heads or be a multiple of them, in which case each rank holds a copy of
    one key/value head (grouped-query attention with more ranks than KV heads, as vLLM and
    TensorRT-LLM run it). :func:`splits_model` is the same rule as a mask.

    >>> import gpumodel as gm
    >>> cfg = gm.model("llama-3-70b")          # 64 heads, 8 key/value heads, MLP width 28672
    >>> tensor_parallel(cfg, 8), tensor_parallel(cfg, 16)
    (8, 16)
    >>> tensor_parallel(cfg, 3)
    Traceback (most recent call last):
    ...
    gpumodel.base.errors.ArgumentError: tp=3 must divide the attention heads (num_heads=64)
    """
    tp = positive_int(tp, name)
    t = np.asarray(tp)
    for total, what in ((cfg.num_heads, "the attention heads (num_heads={})"),
                        (cfg.intermediate_size, "the MLP width (intermediate_size={})")):
        bad = total % t != 0
        if np.any(bad):
            first = t[bad].flat[0].item() if t.ndim else tp
            raise ArgumentError(f"{name}={first} must divide {what.format(total)}", argument=name, value=first,
                                allowed=f"a divisor of {what.format(total)}")
    kv = cfg.num_kv_heads
    bad = (kv % t != 0) & (t % kv != 0)
    if np.any(bad):
        first = t[bad].flat[0].item() if t.ndim else tp
        raise ArgumentError(f"{name}={first} must divide the key/value heads "
                            f"(num_kv_heads={kv}) or be a multiple of them", argument=name, value=first,
                            allowed=f"a divisor or a multiple of the key/value heads (num_kv_heads={kv})")
    return tp


def splits_model(cfg: Any, tp: Any) -> Any:
    """Where the tensor-parallel degree(s) ``tp`` split ``cfg`` by the rule of :func:`tensor_parallel` (a bool mask)."""
    t, kv = np.asarray(tp), cfg.num_kv_heads
    ok = (cfg.num_heads % t == 0) & (cfg.intermediate_size % t == 0) & ((kv % t == 0) | (t % kv == 0))
    return bool(ok) if ok.ndim == 0 else ok


def parallel_degrees(cfg: Any, *, dp: Any = 1, tp: Any = 1, pp: Any = 1, zero: Any = 0, cp: Any = 1,
                     ep: Any = 1, zero_stage: Any = None) -> tuple:
    """Check the parallel degrees of a run of model ``cfg``; returns ``(dp, tp, pp, zero)``.

    The degrees are named as in :class:`gpumodel.Parallelism`; ``zero`` is the ZeRO stage (0-3, and
    ``zero_stage`` its deprecated name). ``tp`` must split the model (:func:`tensor_parallel`); ``pp`` may
    not exceed the layers; ``cp`` must be positive; ``ep`` must divide the experts; a ZeRO stage shards
    over ``dp * cp`` ranks and so needs ``dp * cp > 1``. Each may be an integer array (a sweep); scalars come back as ``int``.

    >>> import gpumodel as gm
    >>> parallel_degrees(gm.model("llama-3-8b"), dp=8, tp=2, zero=3)
    (8, 2, 1, 3)
    """
    if zero_stage is not None:
        zero = deprecated_alias("zero_stage", "zero", zero_stage, None if np.ndim(zero) == 0 and zero == 0 else zero)
    dp, tp, pp = positive_int(dp, "dp"), positive_int(tp, "tp"), positive_int(pp, "pp")
    positive_int(cp, "cp")
    ep = positive_int(ep, "ep")
    zero = nonnegative_int(zero, "zero")
    if np.any(np.asarray(zero) > 3):
        raise ArgumentError(f"zero (the ZeRO stage) must be 0, 1, 2 or 3, got {zero!r}", argument="zero", value=zero,
                            allowed="0, 1, 2 or 3")
    tensor_parallel(cfg, tp)
    if np.any(np.asarray(pp) > cfg.num_layers):
        raise ArgumentError(f"pp={np.max(pp)} exceeds the model's {cfg.num_layers} layers", argument="pp",
                            value=np.max(pp).item(), allowed=f"1..{cfg.num_layers} (the model's layers)")
    if cfg.num_experts:
        divides(ep, cfg.num_experts, "ep", "num_experts")
    elif np.any(np.asarray(ep) > 1):
        raise ArgumentError(f"ep={ep} needs a mixture-of-experts model; {cfg.name} has no experts", argument="ep",
                            value=ep, allowed=f"1 ({cfg.name} has no experts)")
    if np.any((np.asarray(zero) > 0) & (np.asarray(dp) * np.asarray(cp) == 1)):   # as gm.Parallelism: over dp * cp
        raise ArgumentError("zero > 0 (a ZeRO stage) shards over data-parallel ranks and needs dp > 1 (dp * cp > 1 "
                            "with context parallelism)", argument="zero", value=zero, allowed="0 where dp * cp == 1")
    return dp, tp, pp, zero
