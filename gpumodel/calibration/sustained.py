"""Sustained load: how much slower compute-bound kernels run after seconds of back-to-back work.

A calibration times each kernel for about 0.1 s at a time, after a pause: the GPU runs at the clock its
power and temperature allow then. A training step keeps the tensor cores busy for seconds, the board
reaches its power limit and the SM clock drops (on an H200 SXM at 700 W: 1980 MHz isolated, 1440-1470
MHz after 10 s of bf16 GEMMs at 685-692 W). Memory-bound kernels barely notice (a 512 MiB copy: 0.99).

``bench/measure_sustained.py`` measures both timings of a few compute-bound kernels (GEMMs, fp8 GEMM,
flash-attention backward) and a copy; :func:`sustained_slowdown` reduces the file to one factor, the
median over the compute-bound kernels of (time per call over the last two seconds of ten) / (isolated
time). The calibration record keeps it as the parameter ``sustained_slowdown``, and
:meth:`~gpumodel.calibration.model.CalibrationModel.sustained` divides the compute rates by it for
estimates of sustained work (training steps: ``estimate(..., sustained=True)``).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

__all__ = ["sustained_slowdown", "COMPUTE_RATE_PREFIXES"]

#: parameters that are rates of the SMs' math units (tensor cores; CUDA-core GEMMs), which follow the SM clock
COMPUTE_RATE_PREFIXES = ("flops_", "attn_flops_", "unaligned_flops")
#: the calls the power limit slows: tensor-core work (elementwise copies are bound by the memory's clock)
_COMPUTE_OPS = ("matmul", "bmm", "attention")


def sustained_slowdown(path: str | Path, last_windows: int = 8) -> float:
    """The median slowdown of the compute-bound kernels of a ``measure_sustained.py`` file.

    For each kernel: the median time per call over its last ``last_windows`` windows (0.25 s each) of
    back-to-back calls, over its isolated (calibration-style) time.

    >>> import json, tempfile, os
    >>> rows = [{"op": "matmul", "isolated_s": 1.0, "sustained": [{"per_call_s": 1.2}] * 8},
    ...         {"op": "elementwise", "isolated_s": 1.0, "sustained": [{"per_call_s": 1.0}] * 8}]
    >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
    ...     _ = fh.write("\\n".join(json.dumps(r) for r in rows))
    >>> round(sustained_slowdown(fh.name), 6); os.remove(fh.name)
    1.2
    """
    ratios = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            row: dict[str, Any] = json.loads(line) if line.strip() else {}
            if row.get("op") in _COMPUTE_OPS and row.get("sustained") and row.get("isolated_s"):
                tail = [w["per_call_s"] for w in row["sustained"][-last_windows:]]
                ratios.append(statistics.median(tail) / row["isolated_s"])
    if not ratios:
        raise ValueError(f"{path}: no compute-bound kernel with sustained timings")
    return float(statistics.median(ratios))
