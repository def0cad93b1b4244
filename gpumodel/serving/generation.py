"""Time to generate ``new_tokens`` tokens for a batch of prompts: one prefill, then decode steps.

The prefill produces the first token (time to first token, TTFT); each of the ``new_tokens - 1``
decode steps that follow produces one more, attending over a cache that grows by one token a step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..base.arguments import keyword_only_after, renamed_arguments
from ..base.reprs import html_table
from ..base.errors import ArgumentError
from ..calibration.bands import Interval
from ..vocabulary import format_seconds, positive_int
from .timing import ServingTime, memory_check, resolve_serving_args, step_time, warn_unfit

__all__ = ["Generation", "generation_time", "decode_total"]

#: Decode steps summed one by one up to this many; beyond, the sum is taken over evenly spaced
#: context lengths (the step time is close to linear in the context) and scaled.
EXACT_STEPS = 32


@dataclass(frozen=True)
class Generation(Interval):
    """Estimated latency and throughput of generating ``new_tokens`` tokens for ``batch_size`` prompts.

    Attributes
    ----------
    ttft_s : float
        Time to first token: the prefill [s].
    tpot_s : float
        Time per output token after the first: mean decode-step time [s] (nan for one new token).
    seconds : float
        Whole generation, ``ttft_s + (new_tokens - 1) * tpot_s`` [s]; ``float(g)`` gives it.
    tokens_per_s : float
        Generated tokens of the whole batch over ``seconds`` [token/s].
    prefill : ServingTime
        The prefill step.
    first_decode, last_decode : ServingTime or None
        The first and last decode steps (None for one new token).
    fits : bool or None
        Whether the generation fits in each GPU's memory: the prefill's and the last decode step's
        ``fits`` (the cache is largest at the last step); None where not checked.
    peak_bytes : float
        The larger of the prefill's and the last decode step's peak allocated bytes per GPU [B].

    The 80% bands (``ttft_band``, ``tpot_band``, and ``band`` with ``interval(0.8)`` for the whole generation) are the
    steps' (:attr:`ServingTime.band`); the whole generation's adds the prefill's and the decode's edges, as if their
    errors went the same way (they share the kernels' model). ``source`` and ``expected_error`` likewise.
    """

    ttft_s: float
    tpot_s: float
    seconds: float
    tokens_per_s: float
    batch_size: int
    prompt_len: int
    new_tokens: int
    prefill: ServingTime
    first_decode: ServingTime | None
    last_decode: ServingTime | None
    fits: bool | None = None
    peak_bytes: float = float("nan")

    def __float__(self) -> float:
        return float(self.seconds)

    @property
    def source(self) -> str:
        """Where the steps' kernel times come from (the prefill's :attr:`ServingTime.source`)."""
        return self.prefill.source

    @property
    def ttft_band(self) -> tuple[float, float] | None:
        """The 80% band of the time to first token [s] (the prefill's); None for datasheet kernels."""
        return self.prefill.band

    @property
    def tpot_band(self) -> tuple[float, float] | None:
        """The 80% band of the time per output token [s]: the decode steps' band, scaled to their mean; None for one
        new token or datasheet kernels."""
        d = self.first_decode
        if d is None or d.band is None:
            return None
        return (self.tpot_s * float(d.band[0]) / float(d.seconds), self.tpot_s * float(d.band[1]) / float(d.seconds))

    @property
    def band(self) -> tuple[float, float] | None:
        """The 80% band of the whole generation [s]: the prefill's band plus ``new_tokens - 1`` times the decode's."""
        if self.ttft_band is None:
            return None
        tpot = self.tpot_band or (0.0, 0.0)
        n = self.new_tokens - 1
        return (self.ttft_band[0] + n * tpot[0], self.ttft_band[1] + n * tpot[1])

    @property
    def expected_error(self) -> float | None:
        """The steps' expected relative errors weighted by their share of the generation's time [1]."""
        p = self.prefill.expected_error
        d = None if self.first_decode is None else self.first_decode.expected_error
        if p is None or (self.first_decode is not None and d is None):
            return None
        decode_s = self.seconds - self.ttft_s
        return (self.ttft_s * p + decode_s * (d or 0.0)) / self.seconds

    @property
    def tokens_per_s_per_sequence(self) -> float:
        """Generated tokens per second one sequence sees [token/s]."""
        return self.tokens_per_s / self.batch_size

    def to_dict(self) -> dict:
        """Plain fields (SI units); the step records as their own ``to_dict()``."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("prefill", "first_decode", "last_decode"):
            out[key] = out[key].to_dict() if out[key] is not None else None
        out["tokens_per_s_per_sequence"] = self.tokens_per_s_per_sequence
        out.update(source=self.source, band=self.band, ttft_band=self.ttft_band, tpot_band=self.tpot_band,
                   expected_error=self.expected_error)
        return out

    def __repr__(self) -> str:
        p = self.prefill
        tp = f" x tp={p.tp}" if p.tp > 1 else ""
        return (f"Generation({p.model} on {p.gpu}{tp}, batch {self.batch_size}, prompt {self.prompt_len}, "
                f"{self.new_tokens} new tokens: TTFT {format_seconds(self.ttft_s)}, TPOT "
                f"{format_seconds(self.tpot_s)}, total {format_seconds(self.seconds)}, "
                f"{self.tokens_per_s:,.1f} tokens/s{self._unfit()})")

    def _unfit(self) -> str:
        if self.fits is None or self.fits:
            return ""
        return f", DOES NOT FIT in memory (peak {self.peak_bytes / 2**30:,.1f} GiB per GPU)"

    def _repr_html_(self) -> str:
        p = self.prefill
        rows = [("time to first token", format_seconds(self.ttft_s)),
                ("time per output token", format_seconds(self.tpot_s)),
                ("total", format_seconds(self.seconds)), ("tokens/s", f"{self.tokens_per_s:,.1f}"),
                ("tokens/s per sequence", f"{self.tokens_per_s_per_sequence:,.1f}"),
                ("engine", f"{p.engine}, {p.dtype} weights, {p.kv_dtype} KV cache, tp={p.tp}, "
                           f"{p.attention_kernel} attention")]
        if self.fits is not None:
            rows.append(("fits in memory", "yes" if self.fits else self._unfit().lstrip(", ")))
        return html_table(f"Generation: {p.model} on {p.gpu}, batch {self.batch_size}, prompt {self.prompt_len}",
                          rows)


@renamed_arguments(batch="batch_size")
def decode_total(setup, batch_size, first_context: int, steps: int) -> tuple[float, Any, Any]:
    """Sum of ``steps`` decode-step times at contexts ``first_context, first_context + 1, ...`` [s],
    with the first and last steps' records (``batch`` is the former name of ``batch_size``, deprecated)."""
    if steps <= EXACT_STEPS:
        ctx = first_context + np.arange(steps)
        weights = np.ones(steps)
    else:
        ctx = np.unique(np.linspace(first_context, first_context + steps - 1, 17).round().astype(int))
        weights = np.full(ctx.size, steps / ctx.size)
    t = step_time(setup, batch_size, 1, ctx, "decode")
    return float(np.sum(np.asarray(t.seconds) * weights)), t.pick(0), t.pick(-1)


@keyword_only_after(2, "batch_size", "prompt_len", "new_tokens", "dtype", "kv_dtype", "tp", "engine")
def generation_time(model: Any, gpu: Any, *, batch_size: int = 1, prompt_len: int = 512, new_tokens: int = 128,
                    dtype: str = "bf16", kv_dtype: Any = None, tp: int = 1, engine: str = "graph",
                    group_size: int = 128, calibrated: bool = True, calibration: Any = None,
                    host: Any = None, attention_kernel: str = "sdpa") -> Generation:
    """Time to generate ``new_tokens`` tokens for ``batch_size`` prompts of ``prompt_len`` tokens.

    Parameters
    ----------
    model, gpu, dtype, kv_dtype, tp, engine, group_size :
        As for :func:`gpumodel.serving.decode_step_time`.
    calibrated, calibration, host :
        As for :func:`gpumodel.serving.prefill_time`: your own calibration of the GPU (record or YAML path, read
        once; another GPU's refused with an ``ArgumentError`` naming ``calibration``) prices the prefill's and
        every decode step's kernels; ``host`` (host costs) is taken by ``engine="hf"`` only.
    attention_kernel : {"sdpa", "cudnn", "fa2", "fa3", "flashinfer", "triton"}
        The library whose flash kernels run the prefill's and the decode steps' attention, as in
        :func:`gpumodel.serving.prefill_time`.
    batch_size : int
        Sequences generated together (static batch).
    prompt_len : int
        Prompt length [token].
    new_tokens : int
        Tokens generated per sequence, the first by the prefill [token].

    Returns
    -------
    Generation
        ``.fits`` and ``.peak_bytes`` [B] say whether the prefill and the last decode step fit in each
        GPU's memory (:func:`gpumodel.serving.timing.memory_check`).

    Warns
    -----
    DoesNotFitWarning
        When the prefill or the last decode step does not fit: the times are still given.

    Notes
    -----
    .. math:: T = t_{prefill}(b, s) + \\sum_{j=1}^{n-1} t_{decode}(b, s + j - 1)

    Examples
    --------
    >>> import gpumodel as gm
    >>> g = gm.generation_time("llama-3-8b", "h200", batch_size=1, prompt_len=128, new_tokens=256)
    >>> 100 < g.tokens_per_s < 300, g.ttft_s < g.seconds
    (True, True)
    """
    setup = resolve_serving_args(model, gpu, dtype, kv_dtype, tp, engine, group_size, calibrated=calibrated,
                                 calibration=calibration, host=host, attention_kernel=attention_kernel)
    b, s, n = (positive_int(v, name) for v, name in ((batch_size, "batch_size"), (prompt_len, "prompt_len"),
                                                       (new_tokens, "new_tokens")))
    if np.ndim(b) or np.ndim(s) or np.ndim(n):
        raise ArgumentError("batch_size, prompt_len and new_tokens must be scalars here; loop over a sweep")
    prefill, need = _checked(setup, step_time(setup, b, s, 0, "prefill"), b, s, 0)
    worst = ("the prefill", need)
    if n > 1:
        decode_s, first, last = decode_total(setup, b, s, n - 1)
        first, _ = _checked(setup, first, b, 1, s)
        last, need = _checked(setup, last, b, 1, s + n - 2)     # the cache is largest at the last step
        worst = max(worst, ("the last decode step", need), key=lambda x: x[1])
        tpot = decode_s / (n - 1)
    else:
        decode_s, first, last, tpot = 0.0, None, None, float("nan")
    fits = bool(prefill.fits and (last is None or last.fits))
    warn_unfit(setup, fits, worst[1], f"the generation at batch_size={b}, prompt_len={s}, new_tokens={n} "
               f"({worst[0]})", stacklevel=3)
    total = float(prefill.seconds) + decode_s
    return Generation(ttft_s=float(prefill.seconds), tpot_s=tpot, seconds=total, tokens_per_s=b * n / total,
                      batch_size=b, prompt_len=s, new_tokens=n, prefill=prefill, first_decode=first,
                      last_decode=last, fits=fits,
                      peak_bytes=max(float(prefill.peak_bytes), float(last.peak_bytes) if last else 0.0))


def _checked(setup, step: ServingTime, batch_size: int, seq_len: int, new_tokens: int) -> tuple[ServingTime, float]:
    """``step`` with its memory checked (:func:`~gpumodel.serving.timing.memory_check`), without a warning,
    and the bytes one GPU needs for it [B]."""
    fits, peak, need = memory_check(setup, batch_size, seq_len, new_tokens)
    return dataclasses.replace(step, fits=fits, peak_bytes=peak), need
