"""Does it fit: one decision for every memory answer, with the GiB to spare or short and how sure it is.

:func:`fits` and :func:`memory_margin` compare what one GPU needs with what it offers: the allocated peak times
the fixed allocator reserve plus the CUDA context (:attr:`TrainingMemory.total_bytes`) away from the card's capacity;
near it, a one-GPU Hugging Face step replayed through the caching-allocator model
(:func:`~gpumodel.core.step_allocations.simulate_training_step`); with ``expandable_segments=True`` the allocated
peak. The sizing searches (:mod:`~gpumodel.core.sizing`), ``StepTime.fits`` and ``gpumodel memory`` ask it.

Examples
--------
>>> import gpumodel as gm
>>> bool(gm.fits("llama-3.2-1b", "h100", batch_size=4, seq_len=1024))
True
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import numpy as np

from ..base.errors import UnsupportedError
from ..base.reprs import ResultRecord
from .inference import inference_memory
from .memory import CUDA_CONTEXT_BYTES, training_memory
from .allocator import segment_bytes
from .step_allocations import simulate_training_step
from ..vocabulary import flag, passed_on, positive_number, resolve_gpu, resolve_model

__all__ = ["fits", "memory_margin", "MemoryMargin", "required_bytes", "memory_options", "capacity_of", "REPLAY_ERROR",
           "ALLOCATED_ERROR", "DECIDED_BY", "EDGE_BAND", "SIMULATED_OPTIONS"]

#: 80% of the caching-allocator replay's reserved peaks lie within this share of the measured ones: the 80th
#: percentile of ``|replayed / measured - 1|`` over the held-out H100 training steps at the edge of the card that ran
#: with the default allocator and that the replay ran too (``tests/data/memory/edge/h100_heldout`` and
#: ``h100_heldout_forloop``, 18 runs; 0.1% median, 4.0% worst)
REPLAY_ERROR = 0.0115
#: likewise for the allocated peak that decides under ``expandable_segments`` (:func:`~gpumodel.training_memory`'s
#: peak against ``max_memory_allocated``: the held-out sets' 54 runs that ran, either allocator; 0.0% median, 2.0%
#: worst)
ALLOCATED_ERROR = 0.003
#: how each answer of :func:`memory_margin` was decided (``decided_by``), and in words (``MemoryMargin.method``)
DECIDED_BY = {"reserve": "the fixed allocator reserve",
              "allocator": "PyTorch's caching allocator replayed step by step (near the card's capacity)",
              "allocated": "the allocated peak (expandable segments)"}


def memory_options(training, kwargs: dict, caller: str, taken: tuple = ()) -> dict:
    """The options ``caller`` passes on to the memory function of the run (refused when it takes no such option)."""
    target = training_memory if flag(training, "training") else inference_memory
    return passed_on(kwargs, target, caller, taken=("batch_size", "seq_len", *taken))


def capacity_of(g, capacity_bytes) -> float:
    """The memory one GPU offers [B]: ``capacity_bytes`` when given, else the GPU's usable memory."""
    if capacity_bytes is None:
        return g.usable_memory_bytes
    return positive_number(capacity_bytes, "capacity_bytes")


def required_bytes(model, batch_size, seq_len, *, training: bool = True, **kwargs):
    """Bytes one GPU needs in all (allocator reserve and CUDA context included) [B].

    ``kwargs`` go to :func:`~gpumodel.training_memory`, or to :func:`~gpumodel.inference_memory`
    when ``training=False``.
    """
    kwargs = memory_options(training, kwargs, "required_bytes")
    if flag(training, "training"):
        return training_memory(model, batch_size, seq_len, **kwargs).total_bytes
    return inference_memory(model, batch_size, seq_len, **kwargs).total_bytes


def fits(model, gpu, batch_size, seq_len, *, training: bool = True, capacity_bytes=None, **kwargs):
    """Whether the run fits in one GPU's memory (broadcasts over batch_size and seq_len).

    ``kwargs`` go to :func:`~gpumodel.training_memory` (or :func:`~gpumodel.inference_memory`
    when ``training=False``). ``capacity_bytes`` [B] replaces the GPU's ``usable_memory_bytes``
    (e.g. with what ``torch.cuda.mem_get_info`` reports, or less to keep a margin); the other
    sizing functions pass it on too.

    Parameters
    ----------
    model : TransformerConfig, str or dict
        A config, a preset name (``gm.model``) or a Hugging Face config dict.
    gpu : GPUSpec or str
        A GPU record or name (``gm.gpu``).
    batch_size, seq_len : int or array_like
        Sequences per GPU [sequences] and sequence length [tokens]; arrays broadcast.
    training : bool
        Size a training run (:func:`~gpumodel.training_memory`) or, when False, serving
        (:func:`~gpumodel.inference_memory`).
    capacity_bytes : float, optional
        Memory one GPU offers [bytes], in place of the GPU's ``usable_memory_bytes`` (e.g. what
        ``torch.cuda.mem_get_info`` reports, or less to keep a margin).
    **kwargs
        Options of the memory function (``precision``, ``optimizer``, ``dp``, ``tp``, ``zero``... for
        training; ``dtype``, ``kv_dtype``, ``tp``... for serving); an option it does not take is an error.

    Returns
    -------
    numpy.bool_ or ndarray of bool
        True where the memory one GPU needs (allocator reserve and CUDA context included) is at most its
        capacity.

    Notes
    -----
    Far from the card's capacity a fixed allocator reserve (:data:`~gpumodel.core.memory.RESERVE_FACTOR`) decides.
    Within :data:`EDGE_BAND` of it, where fragmentation decides, a one-GPU Hugging Face training step with PyTorch's
    default allocator is replayed, tensor by tensor, through a model of its caching allocator
    (:func:`~gpumodel.core.step_allocations.simulate_training_step`: three steps on the capacity less the CUDA
    context); with ``expandable_segments=True`` there is no fragmentation and the allocated peak decides. Measured on
    83 training steps at the edge of an H100 (``bench/edge_accuracy.py``): 80 called right with the replay (the 3
    others :func:`memory_margin` marks ``uncertain``), 59 of 80 with the fixed reserve alone; with expandable
    segments 76 of 76. On 90 runs of two plans measured before the replay's last changes (the LM head's weight freed
    at the model's build, the cuBLAS workspaces' timing, segments laid out downwards, read from allocator traces of
    other runs): 45 of 46 (the miss marked ``uncertain``) and 44 of 44. The misses are runs late in a process: with
    the default allocator the same step can fail as a process's first run and run when repeated at its end
    (``tests/data/memory/edge/h100_sgd_traces``), or run first and fail when repeated (``h100_amp_traces``): at the
    edge the answer is a margin, not a certainty.
    """
    out = _decide(model, gpu, batch_size, seq_len, training, capacity_bytes, kwargs, "fits")[0]
    return out if out.ndim else np.bool_(out)


def _decide(model, gpu, batch_size, seq_len, training, capacity_bytes, kwargs, caller):
    """(fits, bytes needed, how it was decided as an index of :data:`DECIDED_BY`, capacity, the allocated need where
    the allocator replay failed, the need with a segment for the largest request more where it ran): the one decision
    behind :func:`fits` and :func:`memory_margin`."""
    cfg, g = resolve_model(model), resolve_gpu(gpu)
    capacity = capacity_of(g, capacity_bytes)
    kwargs = memory_options(training, kwargs, caller)
    need = np.asarray(required_bytes(cfg, batch_size, seq_len, training=training, **kwargs), dtype=float)
    out = need <= capacity
    how, floor, ceiling = np.zeros(need.shape, dtype=int), np.full(need.shape, np.nan), np.full(need.shape, np.nan)
    if flag(training, "training") and kwargs.get("expandable_segments"):
        how[...] = 2
    elif flag(training, "training") and set(_given(kwargs)) <= SIMULATED_OPTIONS:
        out, need, how, floor, ceiling = _at_the_edge(out, need, capacity, cfg, g, batch_size, seq_len, kwargs)
    return out, need, how, capacity, floor, ceiling


@dataclass(frozen=True, repr=False)
class MemoryMargin(ResultRecord):
    """Whether a run fits in one GPU, by how much, and how sure that is.

    Attributes
    ----------
    fits : bool or ndarray
        As :func:`fits` answers.
    needed_bytes : float or ndarray
        What the answer compared with the capacity [B]: the reserved peak plus the CUDA context (see ``decided_by``).
    capacity_bytes : float
        The memory one GPU offers [B].
    spare_bytes : float or ndarray
        ``capacity_bytes - needed_bytes`` [B]: to spare where positive, short by where negative.
    decided_by : str or ndarray of str
        "reserve": the allocated peak times the fixed allocator reserve (more than :data:`EDGE_BAND` from the
        capacity); "allocator": the one-GPU step replayed through the caching-allocator model (within it); "allocated":
        the allocated peak, no reserve (``expandable_segments=True``).
    band_bytes : tuple of (float or ndarray) or None
        80% band of ``needed_bytes`` [B] where the deciding method's error was measured on held-out runs
        (:data:`REPLAY_ERROR`, :data:`ALLOCATED_ERROR`), down to the allocated peak plus the CUDA context where the
        replay ran out of memory; nan for the fixed reserve, measured on none at this distance.
    uncertain : bool or ndarray
        The capacity lies inside the band: the answer could go either way (the caching allocator's placement of
        blocks, or the allocated peak, within its measured error).
    """

    fits: object
    needed_bytes: object
    capacity_bytes: float
    spare_bytes: object
    decided_by: object
    band_bytes: object
    uncertain: object

    @property
    def method(self) -> str | list:
        """How the answer was decided, in words (:data:`DECIDED_BY`); a list for an array of answers."""
        if np.ndim(self.decided_by) == 0:
            return DECIDED_BY[str(self.decided_by)]
        return [DECIDED_BY[d] for d in np.ravel(self.decided_by)]

    def __repr__(self) -> str:
        if np.ndim(self.spare_bytes):
            return (f"MemoryMargin({np.size(self.spare_bytes)} configurations, {int(np.sum(self.fits))} fit, "
                    f"{int(np.sum(self.uncertain))} uncertain)")
        gib = 2**30
        verdict = (f"fits, {self.spare_bytes / gib:.2f} GiB to spare" if self.fits
                   else f"does not fit, short by {-self.spare_bytes / gib:.2f} GiB")
        sure = "; inside the answer's band: could go either way" if self.uncertain else ""
        return (f"MemoryMargin({verdict} of {self.capacity_bytes / gib:.2f} GiB; needs {self.needed_bytes / gib:.2f} "
                f"GiB by {self.method}{sure})")


def memory_margin(model, gpu, batch_size, seq_len, *, training: bool = True, capacity_bytes=None,
                  **kwargs) -> MemoryMargin:
    """Whether the run fits in one GPU's memory, with the GiB to spare or short and how sure the answer is.

    The same decision as :func:`fits` (broadcasts over ``batch_size`` and ``seq_len``; arguments as there), with the
    need it compared: the fixed allocator reserve away from the card's capacity, the caching-allocator replay near
    it, the allocated peak with ``expandable_segments=True``.

    Parameters
    ----------
    model : TransformerConfig, str or dict
        A config, a preset name (``gm.model``) or a Hugging Face config dict.
    gpu : GPUSpec or str
        A GPU record or name (``gm.gpu``).
    batch_size, seq_len : int or array_like
        Sequences per GPU [sequences] and sequence length [tokens]; arrays broadcast.
    training : bool
        A training run (:func:`~gpumodel.training_memory`) or, when False, serving
        (:func:`~gpumodel.inference_memory`; the fixed reserve decides).
    capacity_bytes : float, optional
        Memory one GPU offers [B], in place of the GPU's ``usable_memory_bytes``.
    **kwargs
        Options of the memory function, as :func:`fits` takes them.

    Returns
    -------
    MemoryMargin
        ``fits``, ``needed_bytes``, ``spare_bytes`` (negative: short by), ``decided_by``, ``band_bytes`` and
        ``uncertain``, arrays where the sizes were.

    Notes
    -----
    Near the capacity, where the caching allocator's fragmentation decides, the replay's reserved peak came within
    :data:`REPLAY_ERROR` (1.15%) of the measured one on 80% of the held-out H100 runs that ran; a margin inside that
    band is marked ``uncertain``. The replay places blocks as a fresh process does; one whose earlier work holds
    blocks (cuBLAS keeps its workspaces for the process) or cut its segments otherwise can find no free block for
    the step's largest request and give it a segment of its own, so where the replay runs the band reaches up by
    that segment (with a 128k vocabulary, the fp32 logits). The replay runs on the card's capacity: a step that ran
    short returned its cached blocks and tried again, so its reserved peak (what ``torch.cuda.max_memory_reserved``
    would show) lies just under the capacity, little to spare; where it failed, the need is the reserved memory then
    plus the request that failed, and the band reaches down to the allocated peak plus the CUDA context: whether the
    real allocator finds room for that request depends on where the program's earlier blocks fell, which its history
    moves (on an H100, Llama-3.2-1B's amp step at 32 x 1024 with checkpointing ran at 68.1 GiB reserved as a
    process's first run, and failed when repeated at its end, asking for 15.7 GiB at 67.7 GiB;
    ``tests/data/memory/edge/h100_amp_traces``), so where the allocated peak fits such an answer is ``uncertain``.

    Examples
    --------
    >>> import gpumodel as gm
    >>> m = gm.memory_margin("llama-3.2-1b", "h100", batch_size=4, seq_len=1024)
    >>> bool(m.fits), str(m.decided_by), bool(m.spare_bytes > 0)
    (True, 'reserve', True)
    >>> m = gm.memory_margin("llama-3.2-1b", "h100", batch_size=18, seq_len=1024, expandable_segments=True)
    >>> str(m.decided_by), round(float(m.band_bytes[1] / m.needed_bytes - 1), 3)
    ('allocated', 0.003)
    """
    fit, need, how, capacity, floor, ceiling = _decide(model, gpu, batch_size, seq_len, training, capacity_bytes,
                                                       kwargs, "memory_margin")
    context = CUDA_CONTEXT_BYTES if flag(training, "training") else 0.0
    err = np.array([np.nan, REPLAY_ERROR, ALLOCATED_ERROR])[how]
    spread = (need - context) * err                  # the error applies to the allocator's bytes, not the context
    low, high = need - spread, need + spread
    # a replay that ran out of memory failed on where its blocks fell, which the real program's history moves (the
    # same step ran, then failed when repeated in one process): down to the allocated peak it could go either way
    low = np.where(np.isfinite(floor), np.minimum(low, floor), low)
    # a replay that ran placed its blocks as a fresh process does; a process that ran other work first can find no
    # free block for the step's largest request and give it a segment of its own (the step that ran first failed
    # when repeated): up to that much more it could go either way
    high = np.where(np.isfinite(ceiling), np.maximum(high, ceiling), high)
    uncertain = (low <= capacity) & (capacity <= high)
    names = np.array(list(DECIDED_BY))[how]

    def out(x):
        return x if np.ndim(x) else x.item() if isinstance(x, np.ndarray) else x

    return MemoryMargin(fits=out(np.asarray(fit)), needed_bytes=out(need), capacity_bytes=float(capacity),
                        spare_bytes=out(capacity - need), decided_by=out(names), band_bytes=(out(low), out(high)),
                        uncertain=out(np.asarray(uncertain)))


#: the options of a one-GPU Hugging Face training step the caching-allocator model replays
SIMULATED_OPTIONS = frozenset({"precision", "optimizer", "checkpointing", "attention", "foreach", "fused", "use_cache",
                               "expandable_segments"})
#: within this fraction of the card, the fixed allocator reserve cannot tell (fragmentation decides): the steps are
#: replayed through the allocator model (:func:`gpumodel.core.step_allocations.simulate_training_step`)
EDGE_BAND = 0.12
#: most configurations of one broadcast call replayed (each takes about 0.1-0.3 s); beyond, the reserve decides
MAX_REPLAYS = 16


def _given(kwargs: dict) -> dict:
    """The options of ``kwargs`` that differ from :func:`~gpumodel.training_memory`'s defaults (``dp=1``,
    ``zero=0`` ... name the one-GPU step the replay covers)."""
    defaults = _training_defaults()
    return {k: v for k, v in kwargs.items()
            if not (k in defaults and isinstance(v, (bool, int, float, str, type(None))) and v == defaults[k])}


@functools.lru_cache(maxsize=1)
def _training_defaults() -> dict:
    return {k: p.default for k, p in inspect.signature(training_memory).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _at_the_edge(out, need, capacity, cfg, g, batch_size, seq_len, kwargs) -> tuple:
    """``(out, need, how, floor, ceiling)`` with the configurations whose need lies within :data:`EDGE_BAND` of the
    capacity decided by the caching-allocator model (PyTorch's default allocator), where it can replay them (``need``:
    its reserved peak plus the CUDA context; where a step fails, the reserved memory then plus the failing request;
    ``how`` 1); the others as they were (``how`` 0). ``floor`` is, where the replay failed, the allocated peak plus the CUDA
    context (what a placement that leaves no hole needs), else nan; ``ceiling``, where it ran, the need plus a segment
    for the step's largest request (what a process whose earlier work left no free block that large needs), else
    nan."""
    need, out = np.broadcast_arrays(np.asarray(need, dtype=float), np.asarray(out))
    b, s = (np.broadcast_to(np.asarray(x), need.shape) for x in (batch_size, seq_len))
    out, need, how = np.array(out), np.array(need), np.zeros(need.shape, dtype=int)
    floor, ceiling = np.full(need.shape, np.nan), np.full(need.shape, np.nan)
    edge = np.flatnonzero(np.abs(need / capacity - 1.0).ravel() <= EDGE_BAND)
    opts = _given(kwargs)    # expandable segments never get here: the allocated peak decides them (_decide)
    for i in edge[:MAX_REPLAYS]:
        try:
            sim = simulate_training_step(cfg, int(b.ravel()[i]), int(s.ravel()[i]), **opts,
                                         capacity_bytes=capacity - CUDA_CONTEXT_BYTES, sm_count=g.sm_count)
        except UnsupportedError:   # a family or option the replay does not cover: the fixed reserve decides
            continue
        out.ravel()[i] = sim.fits
        need.ravel()[i] = CUDA_CONTEXT_BYTES + sim.peak_reserved_bytes + (0 if sim.fits else sim.failed_request_bytes)
        how.ravel()[i] = 1
        if not sim.fits:
            peak = training_memory(cfg, int(b.ravel()[i]), int(s.ravel()[i]), **kwargs).peak_bytes
            floor.ravel()[i] = CUDA_CONTEXT_BYTES + float(peak)
        else:
            ceiling.ravel()[i] = need.ravel()[i] + segment_bytes(sim.largest_request_bytes)
    return out, need, how, floor, ceiling
