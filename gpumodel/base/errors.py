"""The exceptions and warnings gpumodel raises.

Every error derives from :class:`GpumodelError`, and also from the builtin a Python user would
catch for it (``ValueError`` for a bad value, ``LookupError`` for an unknown name), as pint
derives its errors from ``PintError``. A program can catch ``GpumodelError`` to handle anything
the library refuses, or the builtin it already catches. The command line catches the base class
and prints one line.

Examples
--------
>>> import gpumodel as gm
>>> try:
...     gm.gpu("h10")
... except gm.GpumodelError as exc:
...     print(type(exc).__name__, isinstance(exc, LookupError))
UnknownGPUError True
"""

from __future__ import annotations

__all__ = [
    "GpumodelError", "ArgumentError", "ArgumentTypeError", "UnknownNameError", "SpecError", "UnitError",
    "UnsupportedError", "GpumodelWarning", "DoesNotFitWarning",
]


class GpumodelError(Exception):
    """Base class of every error gpumodel raises on purpose."""


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


class UnitError(GpumodelError, ValueError):
    """A quantity string cannot be parsed, or its unit does not fit the field."""


class UnsupportedError(GpumodelError, ValueError):
    """The request is well formed but outside what the model or the hardware covers."""


class GpumodelWarning(UserWarning):
    """Base class of gpumodel's warnings: the answer is still given, with a caveat."""


class DoesNotFitWarning(GpumodelWarning):
    """A time or throughput was asked for a run that does not fit in the GPU's memory."""
