"""Modules that are also their main function: ``gm.roofline(op, gpu)`` and ``gm.roofline.levels(...)``.

``gpumodel.core.roofline`` is both a module (``levels``, ``ridge_point``...) and the name of its main function.
A plain function bound on the package would hide the module from ``import gpumodel.core.roofline``; a module
alone could not be called. So the module's class becomes one whose instances call the function.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable

__all__ = ["make_callable"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)


def make_callable(module_name: str, function: Callable) -> None:
    """Make the module ``module_name`` callable as ``function`` (``inspect.signature`` follows it too)."""
    module = sys.modules[module_name]
    module.__class__ = _CallableModule
    module.__wrapped__ = function
