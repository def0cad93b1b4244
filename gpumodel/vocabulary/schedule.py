"""Pipeline schedules: the names ``pipeline_schedule`` takes, and the layouts each schedule runs.

* ``"1f1b"``: one forward, one backward (Narayanan et al. 2021), interleaved over ``virtual_stages`` model chunks;
  stage ``i`` of ``pp`` holds ``pp - i`` micro-batches of activations.
* ``"zero_bubble"``: ZB-H1 (Qi et al. 2024), which splits each backward into its input and weight gradients and
  fills 1F1B's bubble with the weight gradients. Its peak activation memory is 1F1B's (``pp`` micro-batches on
  the first stage: section 2.1, the memory-efficient schedule); it is not interleaved.
* ``"dualpipe"``: DeepSeek's DualPipe (DeepSeek-AI 2024, section 3.2.1), which feeds micro-batches from both ends
  of the pipeline: each GPU holds two stages, ``i`` and ``pp - 1 - i`` (two copies of the parameters), and ``pp +
  1`` micro-batches of activations at its peak (Table 2). It pairs the stages from both ends (``pp`` even), is not
  interleaved, and splits the step's micro-batches into two halves, one per direction: the reference
  implementation asserts an even number of micro-batches, at least ``2 pp``.

References
----------
D. Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021.
P. Qi, X. Wan, G. Huang, M. Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024 (arXiv 2401.10241), section 2.1.
DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv 2412.19437 (2024), section 3.2.1 and Table 2; the reference
implementation ``deepseek-ai/DualPipe`` (``DualPipe.step``).

Examples
--------
>>> pipeline_schedule("DualPipe")
<PipelineSchedule.DUALPIPE: 'dualpipe'>
>>> schedule_runs("dualpipe", pp=[2, 3, 4, 4], virtual_stages=1, micro_batches=[8, 8, 8, 6]).tolist()
[True, False, True, False]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.arguments import choice
from ..base.enums import StrEnum
from ..base.errors import ArgumentError
from .precision import Framework

__all__ = ["PipelineSchedule", "pipeline_schedule", "schedule_runs", "check_pipeline_schedule"]


class PipelineSchedule(StrEnum):
    """A pipeline schedule: 1F1B (interleaved with virtual stages), zero-bubble ZB-H1, or DeepSeek's DualPipe."""

    ONE_F_ONE_B = "1f1b"
    ZERO_BUBBLE = "zero_bubble"
    DUALPIPE = "dualpipe"


def pipeline_schedule(value: Any, name: str = "pipeline_schedule") -> PipelineSchedule:
    """The :class:`PipelineSchedule` a ``pipeline_schedule`` argument names (any case, ``-`` or ``_``), or an
    :class:`~gpumodel.base.errors.ArgumentError` naming ``name`` and the allowed names.

    >>> pipeline_schedule("zero-bubble").value
    'zero_bubble'
    """
    return choice(PipelineSchedule, value, name)


def schedule_runs(schedule: Any, pp: Any, virtual_stages: Any = 1, micro_batches: Any = None) -> np.ndarray:
    """Which layouts a schedule runs (broadcast over arrays of the degrees).

    Parameters
    ----------
    schedule : PipelineSchedule or str
    pp, virtual_stages : int or array
        Pipeline stages and model chunks per stage.
    micro_batches : int or array, optional
        Micro-batches per step (DualPipe's two halves: even, at least ``2 pp``); None: not checked.

    Returns
    -------
    ndarray of bool
        1F1B runs every layout; zero-bubble and DualPipe ``virtual_stages == 1`` only; DualPipe an even ``pp``
        and, given ``micro_batches``, an even number of at least ``2 pp``.
    """
    s = pipeline_schedule(schedule)
    pp, v = np.asarray(pp), np.asarray(virtual_stages)
    ok = np.ones(np.broadcast_shapes(pp.shape, v.shape, np.shape(micro_batches)), bool)
    if s == PipelineSchedule.ONE_F_ONE_B:
        return ok
    ok = ok & (v == 1)
    if s == PipelineSchedule.DUALPIPE:
        ok = ok & (pp % 2 == 0)
        if micro_batches is not None:
            ok = ok & _dualpipe_feeds(np.asarray(micro_batches), pp)
    return ok


def _dualpipe_feeds(micro_batches: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """Whether DualPipe can split ``micro_batches`` into its two halves, one from each end: an even number of at
    least ``2 pp``."""
    return (micro_batches % 2 == 0) & (micro_batches >= 2 * pp)


def check_pipeline_schedule(value: Any, pp: Any = None, virtual_stages: Any = None, micro_batches: Any = None,
                            framework: Any = None, name: str = "pipeline_schedule") -> PipelineSchedule:
    """The schedule ``value`` names, refused (naming ``name``) where a layout cannot run it.

    Parameters
    ----------
    value : PipelineSchedule or str
    pp, virtual_stages : int or array, optional
        Pipeline stages and model chunks per stage (each checked when given).
    micro_batches : int or array, optional
        Micro-batches per step (checked for DualPipe when given, with ``pp``).
    framework : Framework, optional
        The training engine, when its memory is modelled: DualPipe's (two stages a GPU) is modelled for
        Megatron-Core's alone (:mod:`gpumodel.core.framework_memory`).
    name : str
        The argument's name, for the errors.

    Returns
    -------
    PipelineSchedule

    Raises
    ------
    ArgumentError
        An unknown name; zero-bubble or DualPipe with ``virtual_stages > 1`` (they are not interleaved); DualPipe
        with an odd ``pp``, with fewer than ``2 pp`` or an odd number of micro-batches, or with another framework
        than "megatron".

    Examples
    --------
    >>> check_pipeline_schedule("dualpipe", pp=16, micro_batches=120).value
    'dualpipe'
    >>> check_pipeline_schedule("dualpipe", pp=16, micro_batches=16)   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpumodel.base.errors.ArgumentError: pipeline_schedule='dualpipe' splits the micro-batches ... got 16 for pp=16
    """
    s = pipeline_schedule(value, name)
    if s == PipelineSchedule.ONE_F_ONE_B:
        return s
    v = np.asarray(1 if virtual_stages is None else virtual_stages)
    if np.any(v > 1):
        raise ArgumentError(f"{name}={s.value!r} is not interleaved: it takes virtual_stages=1, got "
                            f"{_shown(v)}", argument=name, value=value, allowed="'1f1b' with virtual_stages > 1")
    if s != PipelineSchedule.DUALPIPE:
        return s
    p = np.asarray(2 if pp is None else pp)
    if np.any(p % 2):
        raise ArgumentError(f"{name}='dualpipe' pairs stages from both ends and needs an even pp, got {_shown(p)}",
                            argument=name, value=value, allowed="an even pp")
    if micro_batches is not None and pp is not None:
        m = np.asarray(micro_batches)
        if not np.all(_dualpipe_feeds(m, p)):
            raise ArgumentError(f"{name}='dualpipe' splits the micro-batches into two halves, one from each end: it "
                                f"needs an even number of at least 2 pp, got {_shown(m)} for pp={_shown(p)}",
                                argument=name, value=value, allowed="an even gradient_accumulation_steps >= 2 pp")
    if framework is not None and framework != Framework.MEGATRON:
        raise ArgumentError(f"{name}='dualpipe' (two stages a GPU, pp + 1 micro-batches in flight) is modelled with "
                            f"framework='megatron' only, got {getattr(framework, 'value', framework)!r}",
                            argument=name, value=value, allowed="'1f1b' or 'zero_bubble', or framework='megatron'")
    return s


def _shown(x: np.ndarray) -> str:
    """A degree in a message: the value, or the array's values."""
    return str(x.item()) if x.ndim == 0 else str(x.tolist())
