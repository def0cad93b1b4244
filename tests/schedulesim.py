"""Megatron-Core's 1F1B pipeline schedules played out op by op: the reference the closed forms are checked against.

:func:`gpumodel.cluster.pipeline.pipeline_bubble` prices the bubble as ``(pp - 1) / v (F + B)`` and
:mod:`gpumodel.core.framework_memory` counts ``min(v pp + pp - 1 - 2 r, m v)`` forward chunks in flight on rank
``r`` (all ``m v`` when ``m = pp``). This module derives both from the schedule itself: each pipeline rank
executes its forward and backward chunks in Megatron-Core's order, each as soon as the rank is free and its input
has arrived; the makespan less the ranks' busy time is the bubble, and the most forward chunks a rank holds before
their backward is its activation memory (``tests/test_schedulesim.py``).

**Megatron-Core's order** (``megatron/core/pipeline_parallel/schedules.py``,
``forward_backward_pipelining_with_interleaving``): the ``m`` micro-batches are taken in groups of ``N``
(``--microbatch-group-size-per-virtual-pipeline-stage``, default ``pp``); within a group every model chunk
``c = 0 .. v - 1`` runs the group's micro-batches in turn. The forwards follow this table, the backwards the same
table with the chunks reversed. Rank ``r`` first runs ``w_r = 2 (pp - r - 1) + (v - 1) N`` forwards (all ``m v``
if that many or more; with one group, ``m = N``, every rank runs all its forwards first, as Megatron-LM did when
``m = pp`` and as the memory model counts it: today's Megatron-Core lets the last ranks start their backwards
earlier there), then alternates one forward and one backward, then runs the backwards left. Without interleaving (``v = 1``) the warm-up is ``pp - r - 1``. Checked here for the default ``N = pp`` with
``m`` a multiple of ``pp`` (Megatron-LM's interleaved schedule asserts it) and for plain 1F1B with any ``m``; other
group sizes and remainders follow rules this order does not capture (it can deadlock there).

**Dependencies.** Model chunk ``c`` of rank ``r`` is global stage ``c pp + r``. A forward needs the previous
global stage's forward of that micro-batch; a backward needs the next global stage's backward, and the last
stage's backward its own forward. Sends are not timed.

References
----------
D. Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021,
section 2.2 (1F1B and its interleaved schedule). NVIDIA Megatron-LM, ``megatron/core/pipeline_parallel/
schedules.py`` (the warm-up count).
"""

from __future__ import annotations

import functools

__all__ = ["schedule_table", "rank_order", "play"]


def schedule_table(micro_batches: int, virtual_stages: int, group: int) -> list[tuple[int, int]]:
    """The (micro-batch, model chunk) order of the forwards: groups of ``group`` micro-batches, each through every
    chunk in turn; the last group holds the micro-batches left.

    >>> schedule_table(4, 2, 2)
    [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1)]
    """
    out = []
    for first in range(0, micro_batches, group):
        last = micro_batches if first + group >= micro_batches else first + group
        out += [(mb, c) for c in range(virtual_stages) for mb in range(first, last)]
    return out


def rank_order(rank: int, pp: int, virtual_stages: int, micro_batches: int, group: int) -> list[tuple[str, int, int]]:
    """Rank ``rank``'s ops in the order it runs them: ``("F" or "B", micro-batch, model chunk)``.

    >>> [op[0] for op in rank_order(0, 2, 1, 3, 2)]      # plain 1F1B, first of two stages: one forward ahead
    ['F', 'F', 'B', 'F', 'B', 'B']
    """
    v, m = virtual_stages, micro_batches
    table = schedule_table(m, v, group)
    total = m * v
    warmup = pp - rank - 1 if v == 1 else 2 * (pp - rank - 1) + (v - 1) * group
    if v > 1 and micro_batches == group:      # one group: every forward first, on every rank
        warmup = total
    warmup = min(warmup, total)
    fwd = [("F", mb, c) for mb, c in table]
    bwd = [("B", mb, v - 1 - c) for mb, c in table]
    order = fwd[:warmup]
    for i in range(total - warmup):
        order += [fwd[warmup + i], bwd[i]]
    return order + bwd[total - warmup:]


@functools.lru_cache(maxsize=4096)
def play(pp: int, virtual_stages: int, micro_batches: int, group: int, backward_ratio: float) -> tuple[float, tuple]:
    """Run the schedule with one chunk's forward taking 1 and its backward ``backward_ratio``.

    Parameters
    ----------
    pp, virtual_stages, micro_batches : int
        Pipeline stages, model chunks per stage, micro-batches a step.
    group : int
        Micro-batches a group (Megatron-Core's ``microbatch_group_size_per_vp_stage``; ``pp`` by default).
    backward_ratio : float
        A chunk's backward over its forward (the recomputed forward included).

    Returns
    -------
    tuple
        ``(makespan, peak)``: the step's time in units of one chunk's forward, and for each rank the most forward
        chunks it holds whose backward has not run (its activations in flight) [chunks].

    Examples
    --------
    >>> play(4, 1, 8, 4, 2.0)[0]          # plain 1F1B: (m + pp - 1) (F + B) = 11 x 3
    33.0
    >>> play(4, 1, 8, 4, 2.0)[1]          # the first stage holds pp micro-batches, the last one
    (4, 3, 2, 1)
    """
    v, m = virtual_stages, micro_batches
    orders = [rank_order(r, pp, v, m, group) for r in range(pp)]
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * pp
    nxt = [0] * pp
    held, peak = [0] * pp, [0] * pp
    last = v * pp - 1
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(pp):
            while nxt[r] < len(orders[r]):
                kind, mb, c = orders[r][nxt[r]]
                stage = c * pp + r
                if kind == "F":
                    dep = None if stage == 0 else ("F", mb, stage - 1)
                else:
                    dep = ("F", mb, stage) if stage == last else ("B", mb, stage + 1)
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done[dep] if dep is not None else 0.0)
                free[r] = start + (1.0 if kind == "F" else backward_ratio)
                done[(kind, mb, stage)] = free[r]
                held[r] += 1 if kind == "F" else -1
                peak[r] = max(peak[r], held[r])
                nxt[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"the schedule deadlocks: pp={pp}, v={v}, m={m}, group={group}")
    return max(free), tuple(peak)
