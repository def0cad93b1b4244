"""Pipeline parallelism: how the layers are cut into stages, the schedule's bubble, the sends between stages.

* **Stages.** Megatron-LM cuts ``L`` layers into ``pp`` stages of ``L / pp`` (``ceil`` here where ``pp`` does not
  divide ``L``), the embedding on the first stage and the final norm, LM head and loss on the last, which
  is then the slowest. Megatron-Core's ``--decoder-first-pipeline-num-layers`` and
  ``--decoder-last-pipeline-num-layers`` give the first and last stages fewer layers, the rest spread
  evenly over the middle stages: Llama 3 405B runs 126 layers on 16 stages with one layer fewer on the
  first and the last ("the first model chunk on the first stage has only the embedding, and the last
  model chunk on the last stage has only output projection and loss calculation", Dubey et al. 2024,
  section 3.3.2). The schedule runs at the pace of the slowest stage (:func:`slowest_stage`).
* **Bubble.** ``m`` micro-batches through ``pp`` stages of ``v`` model chunks each take
  ``(m + (pp - 1) / v) t_stage`` (1F1B, interleaved when ``v > 1``; Narayanan et al. 2021, eq. 1-2); the
  zero-bubble schedule fills the bubble with weight gradients (Qi et al. 2024) and DualPipe feeds the pipeline
  from both ends (DeepSeek-AI 2024): :func:`pipeline_bubble`.
* **Sends.** Each micro-batch sends its ``b s h`` activations to the next stage and their gradients back,
  once per model chunk (``v`` times when interleaved). With tensor parallelism Megatron-LM's
  scatter/gather optimization (Narayanan et al. 2021, section 4.1), and DeepSpeed's pipeline engine
  with its partitioned activations and gradients, send ``1 / tp`` of the tensor from each tensor rank over
  its own NIC and all-gather it over NVLink at the receiver; with sequence parallelism the activations
  are split over the tensor ranks already and no all-gather follows (:func:`p2p_time`).

All functions broadcast over numpy arrays of the degrees (the planner's candidates).

References
----------
D. Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021.
A. Dubey et al., "The Llama 3 Herd of Models", 2024, section 3.3.2.
P. Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024.
DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024, section 3.2.1 (DualPipe) and Table 2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.memory_parts import stage_layers  # noqa: F401  (re-exported: the step's stages are the memory's)
from ..vocabulary import PipelineSchedule, check_pipeline_schedule
from .collectives import system_collective_time

__all__ = ["SCHEDULES", "stage_layers", "slowest_stage", "pipeline_bubble", "check_schedule", "p2p_time"]

#: Named pipeline schedules: 1F1B (interleaved over ``virtual_stages``), zero-bubble ZB-H1, DeepSeek's DualPipe.
SCHEDULES = tuple(s.value for s in PipelineSchedule)


def slowest_stage(layer_s: Any, head_s: Any, layers: tuple[Any, Any, Any], pp: Any) -> tuple[Any, Any]:
    """The pipeline stage that sets the schedule's pace: its decoder layers, and whether it holds the head.

    Parameters
    ----------
    layer_s : float or array
        One decoder layer's forward and backward (with recomputation and exposed communication) [s].
    head_s : float or array
        The final norm, LM head and loss [s] (on the last stage; the first stage's embedding lookup is cheap).
    layers : tuple
        ``(first, middle, last)`` layers from :func:`stage_layers`.
    pp : int or array
        Pipeline stages.

    Returns
    -------
    tuple of (float or ndarray)
        ``(layers, head)``: the slowest stage's layers [count] and 1.0 where it holds the head, else 0.0;
        its time is ``layers * layer_s + head * head_s``.

    Examples
    --------
    >>> [float(x) for x in slowest_stage(1.0, 0.6, stage_layers(126, 16, 7, 7), 16)]   # a middle stage
    [8.0, 0.0]
    >>> [float(x) for x in slowest_stage(1.0, 0.6, stage_layers(128, 16), 16)]         # the last
    [8.0, 1.0]
    """
    first, middle, last = (np.asarray(x, float) for x in layers)
    inner = np.where(np.asarray(pp) > 2, np.maximum(first, middle), first)
    last_wins = last * layer_s + head_s >= inner * layer_s
    return np.where(last_wins, last, inner), np.where(last_wins, 1.0, 0.0)


def pipeline_bubble(forward_s: Any, backward_s: Any, pp: Any, virtual_stages: Any = 1,
                    schedule: str = "1f1b") -> Any:
    """Idle time of a pipeline schedule over one step [s].

    Parameters
    ----------
    forward_s, backward_s : float or array
        One micro-batch's forward and backward (with recomputation and the exposed communication) on the
        slowest stage [s].
    pp : int or array
        Pipeline stages.
    virtual_stages : int or array
        Model chunks per stage of the interleaved 1F1B schedule (1: plain 1F1B).
    schedule : {"1f1b", "zero_bubble", "dualpipe"}
        The schedule (:data:`SCHEDULES`).

    Returns
    -------
    float or ndarray
        With ``F``, ``B`` the forward and backward and ``W = B / 2`` the weight-gradient half of the backward:

        * ``"1f1b"``: ``(pp - 1) / v (F + B)`` (Narayanan et al. 2021, eq. 1 and 2): exact for plain 1F1B with any
          number of micro-batches, fewer than ``pp`` included, and for the interleaved schedule fed a multiple of
          ``pp`` (the only case Megatron-LM runs; :func:`~gpumodel.cluster.step.parallel_training_step_time` refuses
          the others), as Megatron-Core's order played op by op shows (``tests/schedulesim.py``);
        * ``"zero_bubble"``: ``(pp - 1)(F + B - 2 W)``, the weight gradients filling the bubble (ZB-H1, Qi et al. 2024);
        * ``"dualpipe"``: ``(pp / 2 - 1)(F&B + B - 3 W)`` with ``F&B = F + B`` the overlapped forward and backward
          chunks (DeepSeek-AI 2024, Table 2; ``pp`` even).

    Examples
    --------
    >>> float(pipeline_bubble(1.0, 2.0, 16, 4))
    11.25
    >>> float(pipeline_bubble(1.0, 2.0, 16, schedule="zero_bubble")), float(pipeline_bubble(1.0, 2.0, 16, schedule="dualpipe"))
    (15.0, 14.0)
    """
    pp, v = np.asarray(pp), np.asarray(virtual_stages)
    f, b = np.asarray(forward_s), np.asarray(backward_s)
    if schedule == "dualpipe":
        return np.maximum(pp / 2 - 1, 0) * (f + b / 2)
    if schedule == "zero_bubble":
        return (pp - 1) * f
    return (pp - 1) / v * (f + b)


def check_schedule(schedule: Any, pp: int, virtual_stages: int, micro_batches: int | None = None,
                   framework: Any = None) -> str:
    """The pipeline schedule a ``pipeline_schedule`` argument names, refused where the layout cannot run it.

    Parameters
    ----------
    schedule : str
        One of :data:`SCHEDULES`.
    pp, virtual_stages : int
        Pipeline stages and model chunks per stage.
    micro_batches : int, optional
        Micro-batches per step: DualPipe feeds half from each end (an even number, at least ``2 pp``).
    framework : Framework, optional
        The training engine: DualPipe's memory is modelled for "megatron" alone.

    Returns
    -------
    str
        The schedule; an :class:`~gpumodel.base.errors.ArgumentError` naming ``pipeline_schedule`` where it is
        unknown, where a named schedule meets ``virtual_stages > 1`` (they are not interleaved), or where
        DualPipe gets an odd ``pp`` (it pairs the stages from both ends), too few or an odd number of
        micro-batches, or another framework (:func:`gpumodel.vocabulary.check_pipeline_schedule`).

    Examples
    --------
    >>> check_schedule("dualpipe", 16, 1)
    'dualpipe'
    """
    return check_pipeline_schedule(schedule, pp, virtual_stages, micro_batches, framework).value


def p2p_time(act_bytes: Any, system: Any, tp: Any, stride: Any, virtual_stages: Any, pp: Any,
             sequence_parallel: Any, scatter_gather: bool) -> Any:
    """Stage-to-stage sends of one micro-batch on the critical path [s].

    Parameters
    ----------
    act_bytes : float or array
        The activations one stage hands the next, ``b s h`` elements [B].
    system : SystemSpec
        The cluster.
    tp : int or array
        Tensor-parallel degree.
    stride : int or array
        Distance between consecutive pipeline ranks in the global rank order (``tp * cp * dp``).
    virtual_stages, pp : int or array
        Model chunks per stage; pipeline stages.
    sequence_parallel : bool or array
        The activations are split over the tensor ranks already.
    scatter_gather : bool
        Each tensor rank sends ``1 / tp`` over its own NIC and the receiver all-gathers the rest over the
        node's fabric (Megatron-LM's scatter/gather optimization; DeepSpeed's partitioned activations).

    Returns
    -------
    float or ndarray
        ``2 v`` sends (activations forward, gradients back) [s]; 0 without pipeline parallelism.

    Examples
    --------
    >>> import gpumodel as gm
    >>> s = gm.system("dgx-a100-80gb")
    >>> full = p2p_time(84e6, s, 8, 64, 1, 35, False, False)
    >>> split = p2p_time(84e6, s, 8, 64, 1, 35, False, True)
    >>> round(float(full) * 1e3, 1), round(float(split) * 1e3, 1)   # two 84 MB sends over one 200 Gb/s NIC, or an eighth
    (7.5, 1.7)
    """
    tp, sp = np.asarray(tp), np.asarray(sequence_parallel)
    split = sp | (bool(scatter_gather) & (tp > 1))
    part = act_bytes / np.where(split, tp, 1)
    send = np.asarray(system_collective_time("send_recv", part, system, 2, stride))
    gather = np.where(split & ~sp, np.asarray(system_collective_time("all_gather", act_bytes, system, tp, 1)), 0.0)
    return np.where(np.asarray(pp) > 1, 2 * np.asarray(virtual_stages) * (send + gather), 0.0)
