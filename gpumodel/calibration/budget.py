"""A calibration sized to a time budget: which kernels to measure, how long to hold the sustained load, how many host
calls to time (no torch needed).

``gpumodel calibrate --budget 3m`` measures every family the time model prices, in the same proportions whatever
the budget: the kernels of every FIT plan (:func:`~gpumodel.calibration.plan.fit_cases`, the composite and
serving ops of :func:`~gpumodel.calibration.plan.widened_cases`, the strided kernels, the tile and gap plans) are
pooled, split into strata (reporting family, dtype, strided or not, weight format) and each stratum is sampled at
one rate, with a floor of a few kernels, so that a small budget still measures every family and a large one
measures more of each. The strata are interleaved, so a run cut short by its time guard keeps every family too.

The budget [s] is spent, in order, on the sustained-load run (five kernels, :data:`SUSTAINED_S_PER_BUDGET_S` of
the budget each, 3-10 s, plus a pause), the host's per-op costs (:func:`host_calls`), and the kernels with their
fit: a kernel takes about :data:`CASE_S` [s] to measure (``rep_s`` of timed repetitions, a quarter of that of
warm-up, its inputs made) and :data:`FIT_S_PER_CASE` [s] of the fit's time.

Examples
--------
>>> plan = budget_plan(180.0)
>>> plan.kernels > 400, plan.sustained_s, plan.host_calls
(True, 6.0, 2000)
>>> from gpumodel.calibration.points import family_of
>>> len({family_of(c) for c in plan.cases})          # every reporting family, at any budget
19
>>> len({family_of(c) for c in budget_plan(60.0).cases})
19
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

from .cases import Case, case_key
from .plan import fit_cases, gaps_cases, strided_cases, tiles_cases, widened_cases
from .points import family_of

__all__ = ["DEFAULT_BUDGET_S", "MIN_BUDGET_S", "CASE_S", "FIT_S_PER_CASE", "SUSTAINED_S_PER_BUDGET_S", "BudgetPlan", "budget_plan",
           "pool_cases", "sample_cases", "stratum"]

#: the default budget of ``gpumodel calibrate`` [s]: what its measuring run took before it had one (the kernels of the
#: full plan, the host's costs, the sustained load and the fit)
DEFAULT_BUDGET_S = 180.0
#: the smallest budget [s]: the sustained-load run and a few kernels of every stratum take about this
MIN_BUDGET_S = 60.0
#: timed repetitions of one kernel [s] (:func:`gpumodel.calibration.timing.time_events`' ``rep_s``)
REP_S = 0.1
#: time to measure one kernel [s]: its repetitions, a quarter of that of warm-up, and making its inputs
CASE_S = 1.25 * REP_S + 0.015
#: the fit's time per measured kernel [s] (Levenberg-Marquardt over the model's free parameters, on one CPU core;
#: a 3-minute run on an H100 machine took 209 s, about 70 s of it the fit of 422 kernels)
FIT_S_PER_CASE = 0.17
#: length of each sustained-load run per second of budget [s/s], within 3-10 s per kernel
SUSTAINED_S_PER_BUDGET_S = 1.0 / 30.0
#: the sustained-load run's kernels and the idle pause after each [s] (:func:`~gpumodel.calibration.sustained.measure_sustained`)
_SUSTAINED_KERNELS, _SUSTAINED_PAUSE_S = 5, 2.5
#: the power mixes measured after the sustained kernels (:func:`gpumodel.calibration.powermix.measure_power_mixes`) [s]
_POWER_MIXES_S = 12.0
#: fewest kernels a stratum keeps (all of it when it has fewer)
FLOOR = 3


@dataclass(frozen=True)
class BudgetPlan:
    """What a calibration of ``budget_s`` seconds measures.

    Attributes
    ----------
    budget_s : float
        The whole command's budget [s].
    cases : list of dict
        The kernels to measure, in the order to measure them (strata interleaved).
    sustained_s : float
        Back-to-back run of each sustained-load kernel [s].
    host_calls : int
        Calls per host microbenchmark (:func:`gpumodel.training.hostfit.measure_host`'s ``n``).
    kernel_s : float
        Time the kernels should take to measure [s]; the measuring stops at 1.5 times this.
    """

    budget_s: float
    cases: list
    sustained_s: float
    host_calls: int
    kernel_s: float

    @property
    def kernels(self) -> int:
        return len(self.cases)


def pool_cases() -> list[Case]:
    """Every FIT plan's kernels once (the first of each shape kept), in plan order."""
    seen: set = set()
    out = []
    for case in [*fit_cases("full"), *widened_cases(), *strided_cases(), *tiles_cases(), *gaps_cases()]:
        key = case_key(case)
        if key not in seen:
            seen.add(key)
            out.append(case)
    return out


def stratum(case: Case) -> tuple:
    """The stratum of a case: reporting family (:func:`~gpumodel.calibration.points.family_of`), dtype, strided or
    not, weight format.

    >>> from gpumodel.calibration.plan import strided_case
    >>> stratum(strided_case("slice_neg", "bf16", 4096))
    ('elementwise', 'bf16', True, '')
    """
    s = case["shape"]
    return family_of(case), case["dtype"], bool(s.get("strided")), str(s.get("weight_dtype") or "")


def sample_cases(cases: Iterable[Case], count: int, seed: int = 0, floor: int = FLOOR) -> list[Case]:
    """About ``count`` of ``cases``, every stratum (:func:`stratum`) sampled at one rate with at least ``floor``
    kernels, the strata interleaved.

    Parameters
    ----------
    cases : iterable of dict
        The pool.
    count : int
        Kernels wanted (all of them when it is at least the pool's size).
    seed : int
        Seed of the draw within each stratum.
    floor : int
        Fewest kernels a stratum keeps (all of it when smaller).

    Returns
    -------
    list of dict
        The sample: stratum by stratum in turn, so every prefix spans the strata.

    Examples
    --------
    >>> from gpumodel.calibration.plan import fit_cases
    >>> pool = fit_cases("full")
    >>> len(sample_cases(pool, 10_000)) == len(pool), 150 <= len(sample_cases(pool, 160)) <= 170
    (True, True)
    """
    strata: dict[tuple, list] = {}
    for case in cases:
        strata.setdefault(stratum(case), []).append(case)
    rng = random.Random(seed)
    for key in sorted(strata):
        rng.shuffle(strata[key])

    def quotas(rate: float) -> dict[tuple, int]:
        return {k: min(len(v), max(floor, round(rate * len(v)))) for k, v in strata.items()}

    lo, hi = 0.0, 1.0
    for _ in range(40):   # the largest rate whose quotas stay within count
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if sum(quotas(mid).values()) <= count else (lo, mid)
    take = quotas(hi if sum(quotas(hi).values()) <= count else lo)
    picked = {k: strata[k][:take[k]] for k in sorted(strata)}
    out = []
    for i in range(max(take.values(), default=0)):
        out += [v[i] for v in picked.values() if i < len(v)]
    return out


def host_calls(budget_s: float) -> int:
    """Calls per host microbenchmark: 2000 from a budget of 150 s up (about 8 s in all), else 500 (about 3 s)."""
    return 2000 if budget_s >= 150.0 else 500


def budget_plan(budget_s: float = DEFAULT_BUDGET_S, seed: int = 0, fp8: bool = True) -> BudgetPlan:
    """The kernels, sustained-load length and host calls of a calibration that should take about ``budget_s``.

    Parameters
    ----------
    budget_s : float
        The whole run's budget [s] (at least :data:`MIN_BUDGET_S`).
    seed : int
        Seed of the sample within each stratum.
    fp8 : bool
        Whether the GPU runs fp8 GEMMs (compute capability 8.9 and later); without, their cases are left out.

    Returns
    -------
    BudgetPlan
    """
    if not budget_s >= MIN_BUDGET_S:
        raise ValueError(f"budget_s must be at least {MIN_BUDGET_S:g} s, got {budget_s!r}")
    sustained = min(10.0, max(3.0, round(budget_s * SUSTAINED_S_PER_BUDGET_S, 1)))
    calls = host_calls(budget_s)
    fixed = (_SUSTAINED_KERNELS * (sustained + _SUSTAINED_PAUSE_S) + _POWER_MIXES_S
             + (8.0 if calls >= 2000 else 3.0) + 5.0)
    count = max(0, int((budget_s - fixed) / (CASE_S + 0.8 * FIT_S_PER_CASE)))
    pool = [c for c in pool_cases() if fp8 or "fp8" not in (c["dtype"], c["shape"].get("weight_dtype"))]
    cases = sample_cases(pool, count, seed)
    return BudgetPlan(float(budget_s), cases, sustained, calls, len(cases) * CASE_S)
