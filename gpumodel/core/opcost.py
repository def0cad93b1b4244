"""The op-cost record: FLOPs and minimal device-memory traffic, and the registry of cost formulas.

:class:`OpCost` is what every cost formula in :mod:`gpumodel.core.ops` returns and what
:mod:`gpumodel.core.roofline` and the time estimates consume. Formulas register once under their
name with :func:`register`, which refuses a second formula under a name already taken.

Examples
--------
>>> op = OpCost("optimizer_step", "fp32", flops=1e9, bytes_read=16e9, bytes_written=12e9)
>>> op.bytes / 1e9
28.0
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..base.reprs import ResultRecord, html_table
from ..base.enums import StrEnum
from ..records.dtypes import DType, dtype as _dtype
from ..base.errors import ArgumentError, ArgumentTypeError, GpumodelError, UnknownNameError
from ..base.numeric import broadcastable, nonnegative_number, positive_int
from ..base.units import format_quantity as fq

__all__ = ["OpCost", "OpName", "OpArgumentError", "UnknownOpError", "DuplicateOpError", "register", "cost", "list_ops",
           "size_arguments", "resolve_op", "lookup_formula", "op_argument", "op_size", "op_amount", "check_broadcast",
           "make_op_cost"]


class OpArgumentError(ArgumentError):
    """An op argument is out of range (negative, NaN, infinite) or of the wrong kind."""


class UnknownOpError(UnknownNameError, ValueError):
    """No cost formula is registered under this name."""


class DuplicateOpError(GpumodelError, ValueError):
    """A second cost formula tried to register under a name already taken."""


class OpName(StrEnum):
    """Op families, valued by the names used on the command line and in :func:`gpumodel.core.ops.cost`."""

    MATMUL = "matmul"
    BMM = "bmm"
    ELEMENTWISE = "elementwise"
    SOFTMAX = "softmax"
    LAYER_NORM = "layer_norm"
    RMS_NORM = "rms_norm"
    REDUCE_SUM = "reduce_sum"
    EMBEDDING = "embedding"
    CROSS_ENTROPY = "cross_entropy"
    ATTENTION = "attention"
    ADAMW_STEP = "adamw_step"
    KV_CACHE_WRITE = "kv_cache_write"
    FUSED = "fused"


_UNITS = ("tensor", "vector")


def _check_amount(value: Any, name: str) -> Any:
    if type(value) is float:  # the scalar fast path
        if not value >= 0:
            raise OpArgumentError(f"OpCost.{name} must be >= 0 and not NaN", argument=name, value=value,
                                  allowed="a number >= 0 (not NaN)")
        return value
    arr = np.asarray(value, dtype=float)
    if np.isnan(arr).any() or (arr < 0).any():
        raise OpArgumentError(f"OpCost.{name} must be >= 0 and not NaN", argument=name, value=value,
                              allowed="numbers >= 0 (not NaN)")
    return value


@dataclass(frozen=True, repr=False, eq=False)
class OpCost(ResultRecord):
    """Work and minimal device-memory traffic of one op (or a broadcast array of ops).

    Attributes
    ----------
    name : str
        Op family (an :class:`OpName` value for the ops of :mod:`gpumodel.core.ops`; any name for others).
    dtype : DType
        Data format; ``"tf32"`` means fp32 data on tensor cores.
    flops : float or ndarray
        Useful floating-point operations [FLOP] (a multiply-add counts 2).
    bytes_read, bytes_written : float or ndarray
        Minimal device-memory reads and writes [byte]: each input read once, each output written once.
    unit : {"tensor", "vector"}
        Execution unit: tensor cores (matmul, bmm, attention) or CUDA cores.
    shape : mapping
        The op's arguments as passed (sizes as floats or arrays; flags and names as given).
    breakdown : mapping
        Bytes of traffic by component (e.g. ``"a"``, ``"b"``, ``"out"`` for a matmul) [byte].
    parts : tuple of OpCost
        For ``"fused"``: the ops fused, in order.

    Records compare by identity (their amounts may be arrays).
    """

    name: str
    dtype: DType
    flops: Any
    bytes_read: Any
    bytes_written: Any
    unit: str = "vector"
    shape: Mapping[str, Any] = field(default_factory=dict)
    breakdown: Mapping[str, Any] = field(default_factory=dict)
    parts: tuple["OpCost", ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise OpArgumentError(f"OpCost.name must be a non-empty string, got {self.name!r}", argument="name",
                                  value=self.name, allowed="a non-empty string")
        object.__setattr__(self, "dtype", _dtype(self.dtype))
        if self.unit not in _UNITS:
            raise OpArgumentError(f"OpCost.unit must be one of {_UNITS}, got {self.unit!r}", argument="unit",
                                  value=self.unit, allowed=", ".join(map(repr, _UNITS)))
        for attr in ("flops", "bytes_read", "bytes_written"):
            _check_amount(getattr(self, attr), attr)

    @property
    def bytes(self) -> Any:
        """Total minimal device-memory traffic, ``bytes_read + bytes_written`` [byte]."""
        return self.bytes_read + self.bytes_written

    @property
    def size(self) -> int:
        """Number of configurations (1 for a scalar op)."""
        return int(np.size(self.flops + self.bytes))

    @property
    def is_scalar(self) -> bool:
        """Whether the amounts are single numbers rather than arrays."""
        return np.ndim(self.flops + self.bytes) == 0

    @property
    def label(self) -> str:
        """The op and its sizes, e.g. ``'matmul m=4096 n=4096 k=4096'``."""
        return f"{self.name} {self._shape_text()}".strip()

    def _shape_text(self) -> str:
        bits = []
        for key, value in self.shape.items():
            if np.ndim(value) == 0:
                v = value.item() if hasattr(value, "item") else value
                bits.append(f"{key}={int(v) if isinstance(v, float) and v.is_integer() else v}")
            else:
                bits.append(f"{key}=<{np.size(value)} values>")
        return " ".join(bits)

    def _summary(self) -> tuple[str, list[tuple[str, str]]]:
        head = f"{self.name} {self.dtype.value} [{self.unit}]"
        shape = self._shape_text()
        if shape:
            head += f" {shape}"
        if self.parts:
            head += " = " + " -> ".join(p.name for p in self.parts)
        if self.is_scalar:
            with np.errstate(divide="ignore", invalid="ignore"):
                ai = float(np.divide(self.flops, self.bytes))
            rows = [("flops", fq(float(self.flops), "FLOP")), ("read", fq(float(self.bytes_read), "B")),
                    ("written", fq(float(self.bytes_written), "B")), ("intensity", f"{ai:.4g} FLOP/B")]
        else:
            def rng(x, unit):
                x = np.asarray(x, dtype=float)
                return f"{fq(float(x.min()), unit)} .. {fq(float(x.max()), unit)}"
            rows = [("configs", str(self.size)), ("flops", rng(self.flops, "FLOP")),
                    ("bytes", rng(self.bytes, "B"))]
        return head, rows

    def __repr__(self) -> str:
        head, rows = self._summary()
        return f"OpCost({head}: " + ", ".join(f"{k} {v}" for k, v in rows) + ")"

    def _repr_html_(self) -> str:
        head, rows = self._summary()
        return html_table(f"OpCost: {head}", rows)


# ---------------------------------------------------------------------------- registry
_REGISTRY: dict[str, Callable[..., OpCost]] = {}


def register(name: str) -> Callable[[Callable[..., OpCost]], Callable[..., OpCost]]:
    """Decorator: register a cost formula under ``name``; a second registration is an error.

    Parameters
    ----------
    name : str
        The op's name, as :func:`cost` and :func:`list_ops` know it (e.g. "matmul").

    Returns
    -------
    callable
        A decorator that registers the formula (a function returning an :class:`OpCost`) and returns it
        unchanged.

    Raises
    ------
    DuplicateOpError
        ``name`` is already registered.
    """

    def deco(func: Callable[..., OpCost]) -> Callable[..., OpCost]:
        if name in _REGISTRY:
            raise DuplicateOpError(f"an op cost formula named {name!r} is already registered "
                                   f"({_REGISTRY[name].__module__}.{_REGISTRY[name].__qualname__})", argument="name",
                                   value=name, allowed="a name not yet registered")
        _REGISTRY[name] = func
        return func

    return deco


# ---------------------------------------------------------------------------- helpers
def op_argument(resolver: Callable[..., Any], *args: Any) -> Any:
    """Call a :mod:`gpumodel.vocabulary` resolver; its error is raised as an :class:`OpArgumentError`."""
    try:
        return resolver(*args)
    except ArgumentError as exc:
        raise OpArgumentError(str(exc), argument=exc.argument, value=exc.value, allowed=exc.allowed) from None


def op_size(value: Any, name: str) -> Any:
    """A size argument (a positive integer or integer array, :func:`~gpumodel.vocabulary.positive_int`) as floats."""
    v = op_argument(positive_int, value, name)
    return float(v) if np.ndim(v) == 0 else np.asarray(v, dtype=float)


def check_broadcast(**values: Any) -> None:
    """Refuse sizes whose array shapes do not broadcast together (:func:`~gpumodel.base.numeric.broadcastable`)."""
    if sum(np.ndim(v) > 0 for v in values.values()) > 1:
        op_argument(lambda: broadcastable(**values))


def op_amount(value: Any, name: str) -> Any:
    """A count that may be fractional or zero (:func:`~gpumodel.vocabulary.nonnegative_number`)."""
    return op_argument(nonnegative_number, value, name)


def make_op_cost(name: OpName, dt: DType, flops: Any, read: Any, written: Any, unit: str,
                 shape: dict, breakdown: dict | None = None, parts: tuple = ()) -> OpCost:
    """Broadcast the amounts to one shape (floats when every input is a scalar) and build the OpCost."""
    sizes = [v for v in shape.values() if isinstance(v, np.ndarray)]
    out_shape = np.broadcast_shapes(*(v.shape for v in sizes), np.shape(flops), np.shape(read), np.shape(written))

    def fit(x: Any) -> Any:
        if out_shape == ():
            return float(x)
        return np.broadcast_to(np.asarray(x, dtype=float), out_shape)

    bd = {k: fit(v) for k, v in (breakdown or {}).items()}
    return OpCost(name.value, dt, fit(flops), fit(read), fit(written), unit, shape, bd, parts)


def list_ops() -> list[str]:
    """Names of the registered op cost formulas.

    Returns
    -------
    list of str
        The names :func:`cost` accepts, sorted.

    Examples
    --------
    >>> list_ops()[:3]
    ['adamw_step', 'attention', 'bmm']
    """
    return sorted(_REGISTRY)


def lookup_formula(name: str) -> Callable[..., OpCost]:
    """The cost formula registered as ``name`` (case and ``-``/``_`` insensitive); an unknown name is refused."""
    if not isinstance(name, str):
        raise ArgumentTypeError(f"name must be an op name such as 'matmul', got {type(name).__name__}", argument="name",
                                value=name, allowed="an op name such as 'matmul'")
    key = str(getattr(name, "value", name)).strip().lower().replace("-", "_")
    if key not in _REGISTRY:
        raise UnknownOpError(f"unknown op {name!r}; known ops: {', '.join(list_ops())}", argument="op", value=name,
                             allowed=", ".join(list_ops()))
    return _REGISTRY[key]


def cost(name: str, *args: Any, **kwargs: Any) -> OpCost:
    """Call the cost formula registered as ``name``: ``cost("matmul", 8, 8, 8)``.

    Parameters
    ----------
    name : str
        A registered op name (:func:`list_ops`; case-insensitive, "-" read as "_").
    *args, **kwargs
        The op's arguments, as its function takes them (sizes first: :func:`size_arguments`).

    Returns
    -------
    OpCost
        The op's FLOPs [FLOP] and minimal device-memory traffic (``bytes_read``, ``bytes_written`` [bytes]).

    Raises
    ------
    UnknownOpError
        No op of that name.
    OpArgumentError
        The arguments do not fit the op's signature, or a value is refused.

    Examples
    --------
    >>> cost("softmax", 4, 8, dtype="fp32").bytes   # 4*8 read + 4*8 written, 4 bytes each
    256.0
    """
    formula = lookup_formula(name)
    try:
        inspect.signature(formula).bind(*args, **kwargs)
    except TypeError as exc:
        raise OpArgumentError(f"cost({name!r}, ...): {exc}; the op takes {', '.join(size_arguments(name))}",
                              allowed=", ".join(size_arguments(name))) from None
    return formula(*args, **kwargs)


def size_arguments(name: str) -> list[str]:
    """The positional size arguments of a registered op, in order.

    Parameters
    ----------
    name : str
        A registered op name (:func:`list_ops`).

    Returns
    -------
    list of str
        The names of the op's required positional arguments (its sizes), in order.

    Examples
    --------
    >>> size_arguments("attention")
    ['batch', 'heads', 'seq', 'head_dim']
    """
    params = inspect.signature(lookup_formula(name)).parameters.values()
    return [p.name for p in params if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD]


def resolve_op(op: Any, name: str = "op"):
    """An :class:`~gpumodel.core.opcost.OpCost` (the record ``gm.ops.<op>(...)`` returns); anything else is refused."""
    if isinstance(op, OpCost):
        return op
    hint = f"; build one with gm.ops.{op}(...)" if isinstance(op, str) else ""
    raise ArgumentTypeError(f"{name} must be an OpCost from gm.ops, e.g. gm.ops.matmul(4096, 4096, 4096), "
                            f"got {type(op).__name__}{hint}", argument=name, value=op, allowed="an OpCost from gm.ops")
