"""The exceptions and warnings gpumodel raises.

Every error derives from :class:`GpumodelError`, and also from the builtin a Python user would
catch for it (``ValueError`` for a bad value, ``LookupError`` for an unknown name), as pint
derives its errors from ``PintError``. A program can catch ``GpumodelError`` to handle anything
the library refuses, or the builtin it already catches. The command line catches the base class
and prints one line.

Each error also says what went wrong in fields a program can read, as pint's errors do:
``argument`` (the argument or record field at fault), ``value`` (the value refused) and ``allowed``
(a short text of what is allowed); each is None where the error does not concern one argument.
Errors survive pickling (to and from worker processes) with their message and these fields.

Examples
--------
>>> import gpumodel as gm
>>> try:
...     gm.gpu("h10")
... except gm.GpumodelError as exc:
...     print(type(exc).__name__, isinstance(exc, LookupError))
UnknownGPUError True
>>> try:
...     gm.training_memory("llama-3-8b", batch_size=0, seq_len=128)
... except gm.ArgumentError as exc:
...     print(exc.argument, exc.value)
batch_size 0
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GpumodelError", "ArgumentError", "ArgumentTypeError", "UnknownNameError", "SpecError", "RecordError",
    "UnitError", "UnsupportedError", "GpumodelWarning", "DoesNotFitWarning",
]


class GpumodelError(Exception):
    """Base class of every error gpumodel raises on purpose.

    Parameters
    ----------
    message : str
        What went wrong and what to do instead; ``str(exc)`` is this text.
    argument : str, optional
        The argument or record field at fault (``"batch_size"``, ``"peaks.fp32"``); for an unknown
        name, what kind of name it is (``"gpu"``, ``"model"``).
    value : object, optional
        The value refused, as given.
    allowed : str, optional
        A short text of what is allowed (``"a positive integer"``, the close or known names).

    Attributes
    ----------
    argument, value, allowed
        As given; None where the error does not concern one argument.
    """

    def __init__(self, *args: Any, argument: str | None = None, value: Any = None, allowed: str | None = None):
        super().__init__(*args)
        self.argument = argument
        self.value = value
        self.allowed = allowed

    def __reduce__(self):
        # rebuilt without calling __init__ (whose signature a subclass may change), with every attribute
        return _rebuild, (type(self), self.args, dict(self.__dict__))


def _rebuild(cls: type, args: tuple, state: dict) -> GpumodelError:
    """Unpickle a :class:`GpumodelError`: its class, message arguments and attributes."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class ArgumentError(GpumodelError, ValueError):
    """An argument's value is out of range, of the wrong kind or not one of the allowed names.

    The message names the argument and what is allowed.
    """


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument is of a kind the function does not take (a number where a name is needed...)."""


class UnknownNameError(GpumodelError, KeyError, LookupError):
    """No record (GPU, model, system, op...) of that name; the message lists the closest names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SpecError(GpumodelError, ValueError):
    """A spec file is unreadable or a record in it is invalid; the message names file, record and field."""


class RecordError(GpumodelError, ValueError):
    """A record built in code (``TransformerConfig(...)``, ``GPUSpec(...)``...) has an invalid or missing field.

    The message names each bad field and its problem; ``argument`` is the first bad field.
    """


class UnitError(GpumodelError, ValueError):
    """A quantity string cannot be parsed, or its unit does not fit the field."""


class UnsupportedError(GpumodelError, ValueError):
    """The request is well formed but outside what the model or the hardware covers."""


class GpumodelWarning(UserWarning):
    """Base class of gpumodel's warnings: the answer is still given, with a caveat."""


class DoesNotFitWarning(GpumodelWarning):
    """A time or throughput was asked for a run that does not fit in the GPU's memory."""
