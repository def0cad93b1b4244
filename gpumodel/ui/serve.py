"""The Serve page: one replica's throughput within latency targets (:func:`gpumodel.serving_capacity`), its
curve against concurrency, and the GPUs a traffic level needs (:meth:`gpumodel.ServingCapacity.gpus_for`)."""

from __future__ import annotations

import functools
from typing import Any

import gpumodel as gm
from ..vocabulary import format_seconds, resolve_gpu
from . import charts
from .forms import Field, Form, blame, count, number, optional, seconds
from .inputs import gpu_names, model_argument, model_field
from .page import facts, message, section

__all__ = ["form", "answer"]

#: What stopped a larger batch, in words (:attr:`gpumodel.ServingCapacity.limiter`).
LIMITERS = {"memory": "the KV cache is full", "tpot_slo": "the time-per-output-token target",
            "ttft_slo": "the time-to-first-token target", "max_batch_size": "the engine's largest batch",
            "slo_unreachable": "even one request misses the targets", "throughput": "throughput stops growing"}


@functools.lru_cache(maxsize=1)
def form() -> Form:
    """The Serve page's inputs."""
    return Form("serve", (
        model_field("llama-3-8b"),
        Field("gpu", "GPU", "h100", suggestions=gpu_names()),
        Field("tp", "tensor parallel", "1", "GPUs per replica"),
        Field("prompt", "prompt", "1024", "tokens in per request", arguments=("prompt_len",)),
        Field("output", "output", "256", "tokens out per request", arguments=("output_len",)),
        Field("ttft", "TTFT target", "1s", "time to first token; empty: none", arguments=("ttft_slo",)),
        Field("tpot", "TPOT target", "50ms", "time per output token; empty: none", arguments=("tpot_slo",)),
        Field("dtype", "weights", "bf16", choices=("bf16", "fp16", "fp8", "int8", "int4")),
        Field("engine", "engine", "graph", "graph: vLLM-like; compiled: TensorRT-LLM-like; hf: eager",
              choices=("graph", "compiled", "hf")),
        Field("rate", "traffic [requests/s]", "100", "the GPUs this needs", arguments=("requests_per_s",)),
    ))


def answer(values: dict[str, str], config: dict | None) -> tuple[str, dict[str, Any]]:
    """The answer's HTML and its numbers (``capacity``: the ServingCapacity, ``gpus``: for the traffic or None)."""
    cfg = model_argument(values, config)
    with blame("gpu"):
        g = resolve_gpu(values["gpu"], "gpu")
    ttft = None if optional(values, "ttft") is None else seconds(values, "ttft")
    tpot = None if optional(values, "tpot") is None else seconds(values, "tpot")
    rate = number(values, "rate")
    cap = gm.serving_capacity(cfg, g, prompt_len=count(values, "prompt"), output_len=count(values, "output"),
                              dtype=values["dtype"], tp=count(values, "tp"), ttft_slo=ttft, tpot_slo=tpot,
                              engine=values["engine"])
    gpus = None
    if cap.requests_per_s > 0 and rate > 0:
        with blame("rate"):
            gpus = cap.gpus_for(rate)
    replica = f"{cap.tp} x {cap.gpu}"
    lines = [("GPUs for the traffic", f"{gpus:,} for {rate:g} requests/s: {_replicas(gpus // cap.tp)} of {replica}"
              if gpus is not None else "none: no replica meets the targets" if rate > 0 else "give a traffic level"),
             ("one replica", f"{cap.output_tokens_per_s:,.0f} output tokens/s ({cap.output_tokens_per_s_per_gpu:,.0f} "
                             f"per GPU), {cap.requests_per_s:,.2f} requests/s"),
             ("operating point", f"{cap.concurrency:,} requests in flight, limited by "
                                 f"{LIMITERS.get(cap.limiter, cap.limiter)}"),
             ("latency there", f"TTFT {_time(cap.ttft_s)}, TPOT {_time(cap.tpot_s)}"),
             ("KV cache", f"room for {cap.max_concurrency:,} requests of {cap.prompt_len + cap.output_len:,} tokens"),
             ("replica", f"{replica}, {cap.dtype} weights, {cap.kv_dtype} KV cache, {cap.engine} engine")]
    parts = [section("Answer", facts(lines), "answer")]
    if not cap.concurrency:
        parts.append(message(f"No request can be served: {LIMITERS.get(cap.limiter, cap.limiter)} (a larger tensor "
                             "parallel degree, a GPU with more memory, smaller weights, a shorter prompt or looser "
                             "targets).", "bad", "no-serve"))
    if len(cap.curve.get("concurrency", ())):
        parts.append(section("Throughput and latency against concurrency",
                             '<div class="chart">' + charts.serve_chart(cap) + "</div>", "chart"))
    return "".join(parts), {"capacity": cap, "gpus": gpus, "model_name": cap.model}


def _replicas(n: int) -> str:
    return f"{n:,} replica" + ("" if n == 1 else "s")


def _time(t: float) -> str:
    return "-" if t != t else format_seconds(t)
