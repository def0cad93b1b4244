"""Numeric arguments: whole numbers, positive numbers and the shapes that arrays of them broadcast to.

The one check of each numeric argument kind; every function that takes a size, a count, a degree or
a quantity enters through these (re-exported by :mod:`gpumodel.vocabulary`, the resolvers of every
argument kind). Scalars come back as Python numbers, arrays as numpy arrays; a bad value ends in an
:class:`~gpumodel.base.errors.ArgumentError` naming the argument and what is allowed.

Examples
--------
>>> from gpumodel.base.numeric import positive_int, positive_number
>>> positive_int(8, "batch_size"), positive_int([1, 2, 4], "batch_size")
(8, array([1, 2, 4]))
>>> positive_number(0, "bandwidth")
Traceback (most recent call last):
...
gpumodel.base.errors.ArgumentError: bandwidth must be a positive number, got 0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ArgumentError

__all__ = ["bounded_int", "positive_int", "nonnegative_int", "positive_number", "nonnegative_number", "broadcastable"]


def _numeric_array(value: Any, name: str, what: str, allow_empty: bool = False) -> np.ndarray:
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (str, bytes)):
        raise ArgumentError(f"{name} must be {what}, got {value!r} ({type(value).__name__})", argument=name,
                            value=value, allowed=what)
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        arr = None
    if arr is None or (arr.size == 0 and not allow_empty) or (arr.size and arr.dtype.kind not in "iuf"):
        raise ArgumentError(f"{name} must be {what}, got {value!r} ({type(value).__name__})", argument=name,
                            value=value, allowed=what)
    return arr


_INT64_LIMIT = 2.0**63  # a float at or beyond this is no int64


def _integers(value: Any, name: str, lowest: int, what: str):
    arr = _numeric_array(value, name, what)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ArgumentError(f"{name} must be {what}, got {value!r}", argument=name, value=value, allowed=what)
        if np.any(np.abs(arr) >= _INT64_LIMIT):
            raise ArgumentError(f"{name} must be {what} below 2**63, got {value!r}", argument=name, value=value,
                                allowed=f"{what} below 2**63")
    if np.any(arr < lowest):
        bad = arr.min().item() if np.ndim(value) else value
        raise ArgumentError(f"{name} must be {what}, got {bad!r}", argument=name, value=bad, allowed=what)
    if arr.ndim == 0:
        return int(arr)
    return arr.astype(np.int64)


def _beyond_int64(value: Any) -> int | None:
    """The first Python or numpy integer of ``value`` (a scalar or an array of them) that no int64 holds, or None."""
    if isinstance(value, (str, bytes, bool, np.bool_)):
        return None
    try:
        items = np.asarray(value)
    except (TypeError, ValueError):
        return None
    if items.dtype.kind not in "uO":  # signed integers and floats hold no such value (floats are checked apart)
        return None
    for item in items.flat:
        if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)) \
                and not -_INT64_LIMIT <= item < _INT64_LIMIT:
            return int(item)
    return None


def bounded_int(value: Any, name: str, low: int, high: int | None = None, allowed: str | None = None) -> np.ndarray:
    """Whole numbers in ``[low, high]`` as an ``int64`` array (0-d for a scalar); ``allowed`` describes the range.

    >>> int(bounded_int(64, "registers_per_thread", 0, 255))
    64
    """
    allowed = allowed or (f">= {low}" if high is None else f"{low}..{high}")
    big = _beyond_int64(value)
    if big is not None:  # a whole number no int64 holds: out of any range here
        raise ArgumentError(f"{name} = {big} is out of range; allowed: {allowed}", argument=name, value=big,
                            allowed=allowed)
    arr = _numeric_array(value, name, f"whole numbers ({allowed})", allow_empty=True)
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind == "f":
        if np.isnan(arr).any():
            raise ArgumentError(f"{name} is NaN; allowed: {allowed}", argument=name, value=value, allowed=allowed)
        if np.isinf(arr).any() or (arr != np.floor(arr)).any():
            raise ArgumentError(f"{name} must be whole numbers ({allowed}), got {value!r}", argument=name, value=value,
                                allowed=allowed)
        if (np.abs(arr) >= _INT64_LIMIT).any():  # whole, but beyond int64: out of any range here
            first = arr[np.abs(arr) >= _INT64_LIMIT].flat[0].item()
            raise ArgumentError(f"{name} = {first:g} is out of range; allowed: {allowed}", argument=name, value=first,
                                allowed=allowed)
    arr = arr.astype(np.int64)
    bad = arr < low if high is None else (arr < low) | (arr > high)
    if bad.any():
        first = arr[bad].flat[0].item()
        raise ArgumentError(f"{name} = {first} is out of range; allowed: {allowed}", argument=name, value=first,
                            allowed=allowed)
    return arr


def positive_int(value: Any, name: str):
    """An integer >= 1, or an integer array of them (floats with integral values are accepted).

    Returns a Python ``int`` for a scalar, an ``int64`` array otherwise.
    """
    return _integers(value, name, 1, "a positive integer (or an array of them)")


def nonnegative_int(value: Any, name: str):
    """An integer >= 0, or an integer array of them."""
    return _integers(value, name, 0, "an integer >= 0 (or an array of them)")


def _reals(value: Any, name: str, strict: bool):
    what = "a positive number" if strict else "a number >= 0"
    arr = _numeric_array(value, name, what + " (or an array of them)").astype(float)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0 if strict else arr < 0):
        raise ArgumentError(f"{name} must be {what}, got {value!r}", argument=name, value=value, allowed=what)
    return float(arr) if arr.ndim == 0 else arr


def positive_number(value: Any, name: str):
    """A finite number > 0, or an array of them (a float for a scalar)."""
    return _reals(value, name, strict=True)


def nonnegative_number(value: Any, name: str):
    """A finite number >= 0, or an array of them (a float for a scalar)."""
    return _reals(value, name, strict=False)


def broadcastable(**values: Any) -> tuple:
    """The shape that array arguments broadcast to; refuse arguments whose shapes do not broadcast.

    >>> broadcastable(batch_size=[1, 2], seq_len=128)
    (2,)
    >>> broadcastable(batch_size=[1, 2], seq_len=[128, 256, 512])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpumodel.base.errors.ArgumentError: batch_size (shape (2,)) and seq_len (shape (3,)) do not broadcast together: ...
    """
    shapes = {k: np.shape(v) for k, v in values.items()}
    try:
        return np.broadcast_shapes(*shapes.values())
    except ValueError:
        arrays = [(k, s) for k, s in shapes.items() if s]
        raise ArgumentError(f"{' and '.join(f'{k} (shape {s})' for k, s in arrays)} do not broadcast together: give "
                            f"arrays of one shape, or a grid such as a[:, None] and b[None, :]",
                            argument=", ".join(k for k, _ in arrays), value={k: s for k, s in arrays},
                            allowed="arrays of shapes that broadcast together") from None
