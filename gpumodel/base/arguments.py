"""Generic argument checks: flags, choices, paths, keyword options passed on, deprecated names, result types.

The lowest floor of the argument vocabulary: every layer may use these (records included); the
resolvers that turn names into records live in :mod:`gpumodel.vocabulary`, which re-exports these.

Examples
--------
>>> from gpumodel.base.arguments import flag, format_seconds
>>> flag(True, "sparse"), format_seconds(2.053e-4)
(True, '205.3 us')
"""

from __future__ import annotations

import enum
import functools
import inspect
import os
import warnings
from pathlib import Path
from typing import Any, Mapping, TypeVar

import numpy as np

from .errors import ArgumentError, ArgumentTypeError, GpumodelWarning

__all__ = ["flag", "choice", "scalar_or_array", "format_seconds", "deprecated_alias", "renamed_arguments", "keyword_only_after", "path_argument", "passed_on",
           "within_positions"]

E = TypeVar("E", bound=enum.Enum)


def path_argument(value: Any, name: str = "path"):
    """A file or folder argument as a :class:`pathlib.Path`: a ``str`` or an ``os.PathLike``, not empty."""
    if isinstance(value, str) and not value.strip():
        raise ArgumentError(f"{name} is empty; give the path of a file or folder", argument=name, value=value,
                            allowed="the path of a file or folder")
    if not isinstance(value, (str, os.PathLike)):
        raise ArgumentTypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}",
                                argument=name, value=value, allowed="a path (str or os.PathLike)")
    return Path(value)


def passed_on(options: Mapping, to: Any, caller: str, *, taken: tuple = ()) -> dict:
    """Check the keyword ``options`` that ``caller`` passes on to the function ``to``; returns them.

    An option ``to`` does not take, or one that ``caller`` sets itself (``taken``), is refused naming it.
    """
    params = inspect.signature(to).parameters
    allowed = [p for p, v in params.items() if v.kind in (v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY) and p not in taken
               and p != "model"]
    for key in options:
        if key in taken:
            raise ArgumentTypeError(f"{caller} sets {key} itself; drop the {key}= argument", argument=key,
                                    value=options[key], allowed=", ".join(allowed))
        if key not in allowed:
            raise ArgumentTypeError(f"{caller} got an unexpected option {key}=; it passes options on to "
                                    f"{to.__name__}, which takes: {', '.join(allowed)}", argument=key,
                                    value=options[key], allowed=", ".join(allowed))
    return dict(options)


def within_positions(cfg: Any, seq_len: Any, name: str = "seq_len") -> None:
    """Warn of sequence lengths beyond a model's learned position embeddings (gpt2: 1024 positions).

    Rotary and ALiBi positions extend; a learned table does not: the model as configured cannot run such
    a sequence (its embedding lookup fails), though the memory of one with a longer table is close to the
    answer. A :class:`~gpumodel.base.errors.GpumodelWarning` says so.
    """
    learned = getattr(cfg.position, "value", cfg.position) == "learned"
    if learned and np.any(np.asarray(seq_len) > cfg.max_position_embeddings):
        warnings.warn(f"{name}={np.max(seq_len)} is beyond the {cfg.max_position_embeddings} learned positions of "
                      f"{cfg.name} (max_position_embeddings): the model as configured cannot run it",
                      GpumodelWarning, stacklevel=3)


# ---------------------------------------------------------------------------------------------- flags and choices
def flag(value: Any, name: str) -> bool:
    """A real boolean: ``True``/``False`` (or NumPy's). Strings such as ``"no"`` are refused."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ArgumentError(f"{name} must be True or False, got {value!r} ({type(value).__name__})", argument=name,
                        value=value, allowed="True or False")


def choice(kind: type[E], value: Any, name: str) -> E:
    """The member of the enum ``kind`` that ``value`` names (a member, or its value, any case)."""
    if isinstance(value, kind):
        return value
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "_")
        for member in kind:
            if str(member.value).lower().replace("-", "_") == key:
                return member
    allowed = ", ".join(repr(m.value) for m in kind)
    raise ArgumentError(f"{name}={value!r} is not one of {allowed}", argument=name, value=value, allowed=allowed)


# ---------------------------------------------------------------------------------------------- results
def scalar_or_array(x: Any) -> Any:
    """A Python ``float`` for a 0-d value, the array otherwise: the return convention of the pure functions."""
    return float(x) if np.ndim(x) == 0 else np.asarray(x)


def format_seconds(t: float) -> str:
    """A time for people: four significant digits in ns, us, ms, s, min, h or days.

    >>> format_seconds(2.053e-4), format_seconds(3.5), format_seconds(7200), format_seconds(float("nan"))
    ('205.3 us', '3.500 s', '2.000 h', 'nan')
    """
    t = float(t)
    if not np.isfinite(t):
        return "nan" if np.isnan(t) else "inf"
    for unit, scale, above in (("days", 86400.0, 2.0), ("h", 3600.0, 1.5), ("min", 60.0, 1.5)):
        if t >= above * scale:
            return _fixed(t / scale, unit)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return _fixed(t / scale, unit)
    return _fixed(t / 1e-9, "ns")


def _fixed(x: float, unit: str) -> str:
    digits = 3 - min(int(np.floor(np.log10(abs(x)))) if x else 0, 3)
    return f"{x:.{max(digits, 0)}f} {unit}"


def deprecated_alias(old: str, new: str, value: Any, current: Any, default: Any = None) -> Any:
    """Take a renamed keyword: warn once per call when the old name is used, refuse both together."""
    if value is default:
        return current
    if current is not default:
        raise ArgumentError(f"give {new} only; {old} is its old name", argument=old, value=value,
                            allowed=f"{new} alone ({old} is its old name)")
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)
    return value


def renamed_arguments(**renames: str):
    """Decorator: keyword arguments renamed ``old="new"`` still answer for one release.

    A call that passes an old name warns with a :class:`DeprecationWarning` naming the new one and is
    answered as if it had passed the new name; passing both is refused.

    >>> @renamed_arguments(cc_or_gpu="gpu_or_cc")
    ... def limits(gpu_or_cc):
    ...     return gpu_or_cc
    >>> limits(gpu_or_cc="9.0")
    '9.0'
    """
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise ArgumentError(f"give {new} only; {old} is its old name")
                    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        call.__signature__ = inspect.signature(fn)
        return call

    return wrap


def keyword_only_after(n: int, *former: str):
    """Decorator: the arguments after the first ``n`` are keyword-only; positional ones still answer for one release.

    ``former`` names, in their old order, the arguments that a call could pass by position after the
    first ``n``. Such a call warns with a :class:`DeprecationWarning` naming the arguments to pass as
    keywords, and is answered as if it had. The signature :func:`inspect.signature` shows (and
    :func:`passed_on` reads) is the function's own, keyword-only one.

    >>> @keyword_only_after(1, "b", "c")
    ... def f(a, *, c=0, b=0):
    ...     return a, b, c
    >>> f(1, b=2, c=3)
    (1, 2, 3)
    >>> import inspect
    >>> str(inspect.signature(f))
    '(a, *, c=0, b=0)'
    """
    def wrap(fn):
        sig = inspect.signature(fn)
        keyword_only = {p for p, v in sig.parameters.items() if v.kind == v.KEYWORD_ONLY}
        unknown = [name for name in former if name not in keyword_only]
        if unknown:
            raise TypeError(f"{fn.__name__} has no keyword-only argument {', '.join(unknown)}")

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if len(args) > n:
                extra = args[n:]
                if len(extra) > len(former):
                    raise ArgumentTypeError(f"{fn.__name__}() takes {n} positional arguments but {len(args)} were "
                                            f"given; pass {', '.join(former)} as keywords")
                names = former[:len(extra)]
                twice = [name for name in names if name in kwargs]
                if twice:
                    raise ArgumentTypeError(f"{fn.__name__}() got multiple values for {', '.join(twice)}")
                warnings.warn(f"passing {', '.join(names)} of {fn.__name__} by position is deprecated; pass "
                              f"{', '.join(name + '=' for name in names)} as keywords", DeprecationWarning,
                              stacklevel=2)
                kwargs.update(zip(names, extra))
                args = args[:n]
            return fn(*args, **kwargs)

        call.__signature__ = sig
        return call

    return wrap


#: the parallel-degree rules live in :mod:`gpumodel.vocabulary.parallel_rules`; their names are kept here
