"""What a calibration case is: the record of one kernel to measure, its keys, and the draws plans make of sizes.

A case is a plain ``dict`` ``{"op", "kernel", "dtype", "shape"}``: ``op``, ``shape`` and ``dtype``
are the arguments of the :mod:`gpumodel.core.ops` constructor named ``op``; ``kernel`` names the
PyTorch call that runs it (``mm``, ``linear``, ``bmm``, ``copy``, ``add``, ``sdpa``...). The plans
(:mod:`gpumodel.calibration.plan`, which re-exports these names) build them with :func:`make_case`.
"""

from __future__ import annotations

import math
import random
from typing import Any

__all__ = ["Case", "make_case", "case_key", "call_key", "loguniform_int"]


Case = dict  # {"op": str, "kernel": str, "dtype": str, "shape": {str: number}}


def make_case(op: str, kernel: str, dtype: str, **shape: Any) -> Case:
    """A case: ``op``'s constructor arguments ``shape`` in ``dtype``, run by the PyTorch call ``kernel``."""
    return {"op": op, "kernel": kernel, "dtype": dtype, "shape": shape}


def case_key(case: Case) -> tuple:
    """What the time model sees of a case or measured point: op, dtype and shape (not the PyTorch call).

    Two cases with one key are the same shape for the model: FIT and VALIDATION sets must not share one.

    >>> a, b = make_case("matmul", "mm", "bf16", m=1, n=2, k=3), make_case("matmul", "linear", "bf16", k=3, n=2, m=1)
    >>> case_key(a) == case_key(b)
    True
    """
    return case["op"], case["dtype"], tuple(sorted(case["shape"].items()))


def call_key(case: Case) -> tuple:
    """What a measurement of a case repeats: the PyTorch call (``kernel``) on the op, dtype and shape of
    :func:`case_key`. Two runs' points with one key time the same call."""
    return (case.get("kernel"), *case_key(case))


def loguniform_int(rng: random.Random, lo: int, hi: int, multiple: int = 1) -> int:
    """A size drawn log-uniformly from ``[lo, hi]``, rounded to a multiple of ``multiple`` (at least one)."""
    v = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return max(multiple, int(round(v / multiple)) * multiple)
