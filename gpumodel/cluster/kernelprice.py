"""Price many kernels at once: one time estimate per op family instead of one per kernel.

A shard's step holds a few hundred kernels of a dozen families (matmul, elementwise, attention...), and
a layout search asks for the shards of several tensor-, context-parallel degrees and micro-batches. The
kernel model (:func:`gpumodel.calibration.estimate.estimate`) broadcasts over array-valued op sizes, and
most of its cost is per call (the GEMM model tries every tile, split and kernel family); so the distinct
kernels are grouped by what the model branches on (name, dtype, unit, flags), each group stacked into
one op whose sizes are arrays, priced in one call, and the times handed back per kernel.

The result equals pricing each kernel on its own (``tests/test_plan_speed.py`` checks it); a group the
model refuses to broadcast is priced kernel by kernel.

Examples
--------
>>> import gpumodel as gm
>>> ops = [gm.ops.matmul(1024, 1024, 1024), gm.ops.matmul(2048, 1024, 1024), gm.ops.elementwise(2**20)]
>>> prices = price_kernels(ops, gm.gpu("h100"))
>>> [bool(p.seconds > 0) for p in prices], prices[0].source
([True, True, True], 'transferred')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..calibration.estimate import estimate
from ..core.opcost import OpCost

__all__ = ["KernelPrice", "price_kernels", "kernel_key"]

_NUMBER = (int, float, np.integer, np.floating, np.ndarray)


@dataclass(frozen=True)
class KernelPrice:
    """The estimate of one kernel: ``seconds`` [s] (an array where its sizes were arrays), whether the
    calibration measured its family (``calibrated``), where the parameters came from (``source``:
    "calibrated", "transferred" or "datasheet") and its expected median relative error [1] (None: unknown)."""

    seconds: Any
    calibrated: bool
    source: str
    expected_error: Any


def _numeric(value: Any) -> bool:
    return isinstance(value, _NUMBER) and not isinstance(value, (bool, np.bool_))


def kernel_key(op: OpCost) -> tuple:
    """A hashable key of what prices ``op``: its family, dtype, unit and arguments (arrays by their values).

    Two kernels with equal keys get equal estimates (the cost formulas derive FLOPs and bytes from the
    arguments); cheaper than the op's text, which the layout search would otherwise build ~100,000 times.
    """
    items = []
    for k, v in op.shape.items():
        if isinstance(v, np.ndarray):
            v = (v.shape, v.tobytes())
        items.append((k, v))
    return (op.name, op.dtype.value, op.unit, len(op.parts), tuple(items))


def _signature(op: OpCost) -> tuple:
    """What must agree for kernels to share one call: everything but the numeric sizes."""
    flags = tuple((k, v) for k, v in op.shape.items() if not _numeric(v))
    sizes = tuple(k for k, v in op.shape.items() if _numeric(v))
    return op.name, op.dtype.value, op.unit, flags, sizes, tuple(sorted(op.breakdown))


def _shape(op: OpCost) -> tuple:
    """The broadcast shape of an op's amounts and sizes."""
    return np.broadcast_shapes(*(np.shape(v) for v in (op.flops, op.bytes_read, op.bytes_written, *op.shape.values())
                                 if _numeric(v)))


def _stack(group: Sequence[OpCost], shapes: Sequence[tuple]) -> OpCost:
    """One op whose every size is the concatenation of the group's (each broadcast to its op's shape)."""
    def cat(values):
        return np.concatenate([np.broadcast_to(np.asarray(v, dtype=float), s).ravel() for v, s in zip(values, shapes)])

    first = group[0]
    shape = {k: cat([op.shape[k] for op in group]) if _numeric(v) else v for k, v in first.shape.items()}
    breakdown = {k: cat([op.breakdown[k] for op in group]) for k in first.breakdown}
    return OpCost(first.name, first.dtype, cat([op.flops for op in group]), cat([op.bytes_read for op in group]),
                  cat([op.bytes_written for op in group]), first.unit, shape, breakdown)


def _price_one(op: OpCost, gpu: Any, calibrated: bool, calibration: Any) -> KernelPrice:
    est = estimate(op, gpu, calibrated=calibrated, calibration=calibration, sustained=True)
    return KernelPrice(est.seconds, bool(est.calibrated), est.source, est.expected_error)


def price_kernels(ops: Sequence[OpCost], gpu: Any, *, calibrated: bool = True,
                  calibration: Any = None) -> list[KernelPrice]:
    """Estimate every kernel of ``ops`` (at the sustained clock of back-to-back work), grouped into few calls.

    Parameters
    ----------
    ops : sequence of OpCost
        Kernels, scalar or with array sizes (one flat shape per kernel); repeats are priced once.
    gpu : GPUSpec or str
    calibrated, calibration :
        As in :func:`gpumodel.calibration.estimate.estimate`.

    Returns
    -------
    list of KernelPrice
        One per op, in order: ``seconds`` shaped like the op's sizes.
    """
    keys = [kernel_key(op) for op in ops]
    distinct: dict[tuple, OpCost] = {}
    for key, op in zip(keys, ops):
        distinct.setdefault(key, op)
    groups: dict[tuple, list[tuple]] = {}
    for key, op in distinct.items():
        if op.parts or len(_shape(op)) > 1:
            groups[("single", key)] = [key]
        else:
            groups.setdefault(_signature(op), []).append(key)
    priced: dict[tuple, KernelPrice] = {}
    for members in groups.values():
        group = [distinct[k] for k in members]
        if len(group) == 1:
            priced[members[0]] = _price_one(group[0], gpu, calibrated, calibration)
            continue
        shapes = [_shape(op) for op in group]
        sizes = [int(np.prod(sh)) for sh in shapes]
        try:
            est = estimate(_stack(group, shapes), gpu, calibrated=calibrated, calibration=calibration, sustained=True)
        except (ValueError, TypeError):   # a family whose model does not broadcast: one call a kernel
            est = None
        if est is None:   # (outside the handler: an error of a kernel of its own is raised alone)
            priced.update((k, _price_one(op, gpu, calibrated, calibration)) for k, op in zip(members, group))
            continue
        seconds = np.broadcast_to(np.asarray(est.seconds, dtype=float), (sum(sizes),))
        start = 0
        for k, sh, n in zip(members, shapes, sizes):
            part = seconds[start:start + n]
            start += n
            priced[k] = KernelPrice(float(part[0]) if sh == () else part.reshape(sh).copy(), bool(est.calibrated),
                                    est.source, est.expected_error)
    return [priced[k] for k in keys]
