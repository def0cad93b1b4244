"""Serving: how fast a decoder-only transformer serves, on top of whether it fits.

:func:`prefill_time` and :func:`decode_step_time` time one step from its kernels
(:mod:`gpumodel.serving.steps`, :mod:`gpumodel.serving.kernels`); :func:`generation_time` strings a
prefill and its decode steps into time to first token and time per output token;
:func:`serving_capacity` finds how many sequences the KV memory holds and what a replica delivers under
continuous batching within latency targets.
"""

from __future__ import annotations

from .capacity import ServingCapacity, serving_capacity
from .generation import Generation, generation_time
from .timing import Engine, ServingTime, decode_step_time, prefill_time

__all__ = ["Engine", "ServingTime", "prefill_time", "decode_step_time", "Generation", "generation_time",
           "ServingCapacity", "serving_capacity"]
