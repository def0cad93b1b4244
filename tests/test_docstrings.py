"""Every public function documents its parameters and its result (numpydoc ``Parameters`` and ``Returns``).

The functions checked are those users reach: the plain functions of ``gpumodel.__all__`` (and the functions
behind the callable modules ``gm.roofline`` and ``gm.estimate``), the op costs of ``gm.ops``, the charts of
``gm.plot``, and the public functions of :mod:`gpumodel.serving`, :mod:`gpumodel.cluster.collectives` and
:mod:`gpumodel.calibration`.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any, Callable

import pytest

import gpumodel as gm

# public calibration entry points (``gpumodel.calibration.__all__`` also lists classes and submodules)
_CALIBRATION = ("calibrate", "fit_calibration", "load_calibration", "calibration_for", "list_calibrations")


def _function(obj: Any) -> Callable | None:
    """The function behind a public name: a plain function, or the one a callable module calls; else None."""
    if inspect.isfunction(obj):
        return obj
    if inspect.ismodule(obj) and callable(obj) and inspect.isfunction(getattr(obj, "__wrapped__", None)):
        return obj.__wrapped__
    return None


def _public_functions() -> dict[str, Callable]:
    """Dotted public name -> function, each function once (under the first name that reaches it)."""
    sources: list[tuple[str, Any, list[str]]] = [("gm", gm, list(gm.__all__))]
    for prefix, module in (("gm.ops", "gpumodel.core.ops"), ("gm.ops", "gpumodel.core.step_ops"),
                           ("gm.plot", "gpumodel.plots"), ("gpumodel.serving", "gpumodel.serving"),
                           ("gpumodel.cluster.collectives", "gpumodel.cluster.collectives")):
        mod = importlib.import_module(module)
        sources.append((prefix, mod, list(mod.__all__)))
    sources.append(("gpumodel.calibration", importlib.import_module("gpumodel.calibration"), list(_CALIBRATION)))
    found: dict[str, Callable] = {}
    seen: set[int] = set()
    for prefix, module, names in sources:
        for name in names:
            func = _function(getattr(module, name))
            if func is not None and id(func) not in seen:
                seen.add(id(func))
                found[f"{prefix}.{name}"] = func
    return found


FUNCTIONS = _public_functions()

_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")


def _sections(doc: str) -> dict[str, list[str]]:
    """numpydoc section title -> its lines (a title is a line followed by a line of dashes)."""
    lines = doc.splitlines()
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and lines[i].strip() and _UNDERLINE.match(lines[i + 1]):
            current = sections.setdefault(lines[i].strip(), [])
            i += 2
            continue
        if current is not None:
            current.append(lines[i])
        i += 1
    return sections


def _documented_names(lines: list[str]) -> set[str]:
    """Parameter names of a ``Parameters`` section: ``name : type``, ``a, b : type``, ``name :`` or ``name``."""
    body = [line for line in lines if line.strip()]
    if not body:
        return set()
    indent = min(len(line) - len(line.lstrip()) for line in body)
    names: set[str] = set()
    for line in body:
        if len(line) - len(line.lstrip()) != indent:
            continue  # a description line
        head = line.strip().split(" :", 1)[0].split(":", 1)[0]
        for name in head.split(","):
            names.add(name.strip().lstrip("*"))
    return names


def _expected_names(func: Callable) -> list[str]:
    return [name for name in inspect.signature(func).parameters if name != "self"]


def test_the_list_is_not_empty() -> None:
    assert len(FUNCTIONS) >= 70
    assert "gm.roofline" in FUNCTIONS and "gm.estimate" in FUNCTIONS and "gm.ops.matmul" in FUNCTIONS


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_docstring_has_parameters_and_returns(name: str) -> None:
    func = FUNCTIONS[name]
    where = f"{name} ({func.__module__}.{func.__qualname__})"
    doc = inspect.getdoc(func)
    assert doc, f"{where}: no docstring"
    sections = _sections(doc)
    problems = []
    expected = _expected_names(func)
    if expected:
        if "Parameters" not in sections:
            problems.append(f"no 'Parameters' section (parameters: {', '.join(expected)})")
        else:
            missing = [n for n in expected if n not in _documented_names(sections["Parameters"])]
            if missing:
                problems.append(f"'Parameters' does not describe {', '.join(missing)}")
    results = sections.get("Returns", sections.get("Yields"))
    if results is None:
        problems.append("no 'Returns' (or 'Yields') section")
    elif not any(line.strip() for line in results):
        problems.append("empty 'Returns' section")
    assert not problems, f"{where}: " + "; ".join(problems)
