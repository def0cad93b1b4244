"""Structural rules of the package, checked on its source with ``ast``: no private name imported from another
module, imports inside functions only for the optional extras, no module over 450 lines.

Each failure lists the offending places as ``gpumodel/<path>:<line>``.
"""

import ast
import sys
from pathlib import Path

import gpumodel

PACKAGE = Path(gpumodel.__file__).resolve().parent
ROOT = PACKAGE.parent

#: the core dependencies (``[project] dependencies`` of pyproject.toml, by import name): imported at the top of a
#: module like the standard library; any other third-party package is an optional extra (torch, matplotlib,
#: pandas, tqdm...), imported inside the function that needs it so that the core runs without it
CORE_DEPENDENCIES = frozenset({"numpy", "pydantic", "yaml"})

#: the command line keeps each sub-command's machinery (the calibration fit, the plots, the sizing and occupancy
#: models, the roofline and GPU comparison) imported inside its handler, for the startup time of the command:
#: importing it at the top of the sub-command modules made ``python -m gpumodel --help`` load 84 of the
#: package's modules instead of 30 and take about 150 ms more CPU time (531 ms against 381 ms, medians of 25
#: runs each, +39%), while a command uses one of them. Shared helpers (errors, units, GPU names) are at the top.
LAZY_INTERNAL_IMPORTS = ("cli",)

MAX_LINES = 450


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _where(path: Path, line: int | None = None) -> str:
    rel = path.relative_to(ROOT).as_posix()
    return rel if line is None else f"{rel}:{line}"


def _imported_root(node: ast.Import | ast.ImportFrom) -> str:
    """The top-level package an import statement reads: ``"gpumodel"`` for a relative import."""
    if isinstance(node, ast.ImportFrom):
        return "gpumodel" if node.level else (node.module or "").split(".")[0]
    return node.names[0].name.split(".")[0]


def _function_level_imports(tree: ast.Module):
    seen = set()
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in seen:
                    seen.add(id(node))
                    yield node


def test_no_private_name_is_imported_from_another_module():
    offending = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _imported_root(node) == "gpumodel":
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        offending.append(f"{_where(path, node.lineno)} imports {alias.name} "
                                         f"from {'.' * node.level}{node.module or ''}")
    assert not offending, ("private names imported from another module (make the name public, or move it to "
                           "where it is used):\n  " + "\n  ".join(offending))


def test_imports_inside_functions_are_only_for_the_optional_extras():
    offending = []
    for path, tree in _modules():
        lazy_internal = path.relative_to(PACKAGE).parts[0] in LAZY_INTERNAL_IMPORTS
        for node in _function_level_imports(tree):
            root = _imported_root(node)
            if root == "gpumodel":
                if lazy_internal:
                    continue
                kind = "the package's own module"
            elif root in sys.stdlib_module_names:
                kind = "the standard library"
            elif root in CORE_DEPENDENCIES:
                kind = "a core dependency"
            else:
                continue  # an optional extra
            names = ", ".join(a.name for a in node.names)
            what = f"from {'.' * getattr(node, 'level', 0)}{node.module or ''} import {names}" \
                if isinstance(node, ast.ImportFrom) else f"import {names}"
            offending.append(f"{_where(path, node.lineno)} {what} ({kind})")
    assert not offending, ("imports inside functions that belong at the top of the module (only the optional "
                           "extras are imported where they are used):\n  " + "\n  ".join(offending))


def test_no_module_is_over_450_lines():
    offending = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            offending.append(f"{_where(path, lines)} ({lines} lines)")
    assert not offending, (f"modules over {MAX_LINES} lines (split them along a concept):\n  "
                           + "\n  ".join(offending))
