"""What :func:`gpumodel.plan_training` returns: the ranked layouts (:class:`TrainingPlan`) and their table.

One table and one legend serve the notebook repr, the HTML repr and ``gpumodel plan``: :data:`COLUMNS`
names each column and says what it means (:func:`legend_lines`).
"""

from __future__ import annotations

import html
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..base.errors import ArgumentError, ArgumentTypeError, UnsupportedError
from ..base.readable import format_count
from ..base.reprs import text_table
from .parallelism import Parallelism
from .planprice import row_overlap

__all__ = ["TrainingPlan", "PlanRow", "COLUMNS", "legend_lines", "layout_label", "table_rows", "pareto_front"]

#: The table's columns and what each means: (header, meaning). One text for the repr and the command line.
COLUMNS = (
    ("#", "rank"),
    ("GPUs", "GPUs of the job"),
    ("layout", "dp, tp, pp, cp, ep = data-, tensor-, pipeline-, context-, expert-parallel degrees (dp x tp x pp x cp "
               "is the GPU count; cp and ep shown above 1); v2 = two virtual pipeline stages per GPU (interleaved "
               "schedule); z1 shards the optimizer states over the data-parallel ranks (ZeRO-1, Megatron's "
               "distributed optimizer), z2 also the gradients, z3 also the weights (FSDP full shard); hsdp8 = FSDP's hybrid "
               "shard, sharded over 8 data-parallel ranks of a node and replicated across the nodes; ov = "
               "communication overlapped with compute (Megatron-Core's --overlap-grad-reduce, --overlap-param-gather, "
               "--tp-comm-overlap); fp8 = Transformer Engine's fp8 GEMMs (fp8-current, fp8-mxfp8, fp8-blockwise: that recipe; else delayed scaling); zb = the zero-bubble pipeline schedule "
               "(ZB-H1), dualpipe = DeepSeek's DualPipe (otherwise 1F1B); a library name (fa3, cudnn, ...) = the "
               "attention kernel, where the plan searched several"),
    ("recompute", "activation recomputation: none, sel (selective: the attention core, or the plan's "
                  "recompute_modules), full (every layer's forward again in the backward)"),
    ("mb x acc", "micro-batch [sequences] x accumulation steps (micro-batches per step)"),
    ("step s", "one optimizer step [s]"),
    ("tok/s/GPU", "tokens per second per GPU"),
    ("TFLOP/s", "model FLOPs per second per GPU [TFLOP/s] (6N per token plus attention, no recomputation)"),
    ("MFU", "model FLOPs utilization: TFLOP/s over the GPU's dense peak"),
    ("HFU", "hardware FLOPs utilization: MFU plus the recomputed forward"),
    ("days", "wall-clock days of the run"),
    ("GPU-h", "GPU-hours of the run"),
    ("MWh", "energy at the system's power per GPU (hosts and network included)"),
    ("cost", "GPU-hours x the price per GPU-hour, in its currency (with a price)"),
    ("free GiB", "memory left on each GPU under the framework's memory model"),
    ("+-", "expected error of the step time: median relative error of the kernel model as the GPU's numbers come "
           "(calibrated, transferred or datasheet) and of the parallel model on published runs, combined"),
    ("bound", "the largest part of the step besides compute where over a fifth of it: comm (exposed "
              "communication), bubble (pipeline), optimizer or recompute; host: the step is what the host needs to "
              "dispatch Hugging Face's eager loop (framework hf), so it depends on the CPU"),
)

HEADERS = [name for name, _ in COLUMNS]
_BOUND = {"communication": "comm", "pipeline bubble": "bubble"}
_CKPT = {"none": "none", "selective": "sel", "full": "full"}
#: A pipeline schedule as the layout names it (1F1B unnamed).
_SCHEDULE = {"zero_bubble": "zb", "dualpipe": "dualpipe"}


def legend_lines(width: int = 110, columns: tuple = COLUMNS, skip: tuple = ("#",)) -> list[str]:
    """The legend of the table, ``header: meaning`` per column, wrapped to ``width`` characters."""
    out = []
    for name, meaning in columns:
        if name in skip:
            continue
        words = f"{name}: {meaning}.".split()
        line = ""
        for w in words:
            if line and len(line) + 1 + len(w) > width:
                out.append(line)
                line = "  "
            line = f"{line} {w}" if line.strip() else line + w
        out.append(line)
    return out


def layout_label(r: dict, kernel: bool = False) -> str:
    """``dp8 tp8 pp2 v4 z1 ov fp8``: the degrees and settings of a row (see :data:`COLUMNS`), with its pipeline
    schedule where not 1F1B (``zb``, ``dualpipe``); ``kernel``: with its attention library.

    >>> layout_label(dict(dp=8, tp=1, pp=16, cp=1, ep=64, virtual_stages=1, zero=1, comm_overlap=True, fp8=True,
    ...                   pipeline_schedule="dualpipe"))
    'dp8 tp1 pp16 ep64 z1 ov fp8 dualpipe'
    """
    parts = [f"dp{r['dp']}", f"tp{r['tp']}", f"pp{r['pp']}"]
    parts += [f"cp{r['cp']}"] if r["cp"] > 1 else []
    parts += [f"ep{r['ep']}"] if r.get("ep", 1) > 1 else []
    parts += [f"v{r['virtual_stages']}"] if r["virtual_stages"] > 1 else []
    parts += [f"z{r['zero']}"]
    parts += [f"hsdp{r['shard_group']}"] if r.get("shard_group") else []
    parts += ["ov"] if r.get("comm_overlap") else []
    f8 = r.get("fp8")
    parts += ([] if not f8 else ["fp8"] if isinstance(f8, (bool, np.bool_)) else [f"fp8-{f8}"])
    parts += [_SCHEDULE[r["pipeline_schedule"]]] if r.get("pipeline_schedule", "1f1b") != "1f1b" else []
    parts += [str(r["attention_kernel"])] if kernel and r.get("attention_kernel") else []
    return " ".join(parts)


def table_rows(rows: list, top: int | None = None, kernel: bool = False) -> list[list[str]]:
    """The table's cells for the first ``top`` rows (all when None); ``kernel``: the layout names its attention
    library (a plan that searched several)."""
    out = []
    for i, r in enumerate(rows[:top]):
        err = r.get("expected_error")
        out.append([str(i + 1), str(r["num_gpus"]), layout_label(r, kernel), _CKPT[r["checkpointing"]],
                    f"{r['micro_batch']}x{r['gradient_accumulation_steps']}", f"{r['seconds']:.3f}",
                    f"{r['tokens_per_s_per_gpu']:,.0f}", f"{r['tflops_per_gpu']:.0f}", f"{r['mfu']:.1%}",
                    f"{r['hfu']:.1%}", f"{r['days']:.2f}" if r["days"] < 100 else f"{r['days']:,.0f}",
                    f"{r['gpu_hours']:,.0f}", f"{r['energy_kwh'] / 1e3:,.1f}",
                    "-" if r["cost"] is None else f"{r['cost']:,.0f}", f"{r['headroom_bytes'] / 2**30:.1f}",
                    "?" if err is None else f"{err:.0%}", _BOUND.get(r["bound"], r["bound"])])
    return out


def pareto_front(x, y) -> np.ndarray:
    """Indices of the points that no other point beats on both ``x`` and ``y`` (smaller is better), by ``x``.

    Parameters
    ----------
    x, y : sequence of float
        The two objectives of each point (e.g. days and cost), of equal length.

    Returns
    -------
    numpy.ndarray of int
        The non-dominated points' indices, by increasing ``x`` (of points equal on both, the first).

    Examples
    --------
    >>> pareto_front([1, 2, 3, 4], [9, 5, 7, 1]).tolist()
    [0, 1, 3]
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep, best = [], np.inf
    for i in np.lexsort((y, x)):
        if y[i] < best:
            keep.append(int(i))
            best = y[i]
    return np.asarray(keep, dtype=int)


class PlanRow(dict):
    """One ranked layout of a :class:`TrainingPlan`: a plain ``dict`` of its fields.

    Its former key ``step_s`` (now ``seconds``) still answers for one release, with a ``DeprecationWarning``.
    """

    _renamed = {"step_s": "seconds"}

    def __missing__(self, key: str) -> Any:
        new = self._renamed.get(key)
        if new is None:
            raise KeyError(key)
        warnings.warn(f"the plan row key {key!r} is deprecated; use {new!r}", DeprecationWarning, stacklevel=2)
        return self[new]


@dataclass(frozen=True)
class TrainingPlan:
    """Ranked layouts of one training job (best first).

    Attributes
    ----------
    rows : list of dict
        One per layout (a :class:`PlanRow`): ``num_gpus, dp, tp, pp, cp, ep, zero, checkpointing, micro_batch,
        virtual_stages, gradient_accumulation_steps, comm_overlap, seconds`` (of one step [s]; ``step_s`` is its
        former key, deprecated), ``tokens_per_s_per_gpu, tflops_per_gpu`` [TFLOP/s], ``mfu, hfu, days, gpu_hours,
        energy_kwh, cost`` (in ``currency``; None without a price), ``power_kw`` (the job's draw [kW]),
        ``peak_bytes, headroom_bytes`` [B],
        ``expected_error`` (of the step time [1], None where nothing measured backs one), ``band_s`` (the step's
        80% band ``(low, high)`` [s] from the ``step-parallel`` regime of published runs), ``bound``, ``host_s``
        (``framework="hf"``: what the host needs to dispatch the step [s]; else None), ``host_bound`` (the step is
        that: it depends on the CPU), ``collapsed``
        (the settings of near-duplicate rows folded into this one), ``attention_kernel``, ``fp8`` and
        ``pipeline_schedule`` (the attention library, fp8 setting and pipeline schedule the row runs),
        ``recompute_modules`` (Megatron-Core's recomputed modules of a selective row, comma-separated, where the plan
        was given them; else None) plus the breakdown [s] by phase.
    attention_kernel, fp8, pipeline_schedule :
        What the plan searched: a library name (or several, comma-separated), True, False or "False,True", and a
        schedule (or several, comma-separated).
    recompute_modules : str or None
        The modules the selective rows recompute (comma-separated), None: Megatron-Core's default.
    grad_reduce_dtype : str or None
        Megatron-LM's gradient reduction format the plan was given (None: the framework's default).
    candidates : int
        Layouts priced (every one the framework runs and that divides the model, the GPUs and the batch);
        ``feasible`` those that fit in memory (and meet ``max_days`` and ``budget``).
    collapsed : int
        Rows folded into another of the same layout within :data:`~gpumodel.cluster.plan.NEAR_DUPLICATE` of its
        step time (the simplest setting kept: lower ZeRO stage, less recomputation, no overlap).
    source : str
        Where the GPU's kernel numbers come from: "calibrated", "transferred" or "datasheet".
    expected_error : float or None
        The best row's expected error of the step time [1].
    searched : dict
        The values searched along each dimension.
    """

    model: str
    system: str
    tokens: float
    global_batch: int
    seq_len: int
    objective: str
    rows: list = field(default_factory=list)
    candidates: int = 0
    feasible: int = 0
    search_s: float = 0.0
    attention_kernel: str = "sdpa"
    fp8: Any = False
    pipeline_schedule: str = "1f1b"
    recompute_modules: str | None = None
    grad_reduce_dtype: str | None = None
    gpu: str = ""
    framework: str = "megatron"
    precision: str = "amp_bf16"
    optimizer: str = "adamw"
    price_per_gpu_hour: float | None = None
    currency: str = "USD"
    max_days: float | None = None
    budget: float | None = None
    max_power_kw: float | None = None
    source: str = ""
    source_detail: str = ""
    expected_error: float | None = None
    collapsed: int = 0
    gpu_counts: list = field(default_factory=list)
    searched: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    HEADERS = HEADERS
    #: What the columns of :attr:`HEADERS` mean, ``"header: meaning"`` (printed under the table).
    LEGEND = tuple(f"{name}: {meaning}" for name, meaning in COLUMNS[1:])

    @property
    def best(self) -> dict:
        """The first-ranked layout."""
        if not self.rows:
            raise UnsupportedError(f"no layout of {self.model} fits on {self.system}")
        return self.rows[0]

    def parallelism(self, rank: int = 0):
        """The :class:`~gpumodel.cluster.parallelism.Parallelism` of a ranked layout.

        Parameters
        ----------
        rank : int
            Index of the layout in :attr:`rows`: ``0`` (the best) to ``len(rows) - 1``; anything else is
            refused with an :class:`~gpumodel.base.errors.ArgumentError` naming ``rank`` and the row count.
        """
        n = len(self.rows)
        allowed = f"an int from 0 to {n - 1} ({n} rows)" if n else "none: the plan has no rows"
        if isinstance(rank, (bool, np.bool_)) or not isinstance(rank, (int, np.integer)):
            raise ArgumentTypeError(f"rank must be an int (the index of a row: {allowed}), got {rank!r} "
                                    f"({type(rank).__name__})", argument="rank", value=rank, allowed=allowed)
        if not 0 <= rank < n:
            raise ArgumentError(f"rank={rank} is out of range: the plan has {n} rows, so rank is 0 to {n - 1}"
                                if n else f"rank={rank}: the plan has no rows (no layout fits)",
                                argument="rank", value=rank, allowed=allowed)
        r = self.rows[int(rank)]   # an HSDP row's sharding group is its "shard_group", beside the layout
        return Parallelism(dp=r["dp"], tp=r["tp"], pp=r["pp"], cp=r["cp"], ep=r.get("ep", 1), zero=r["zero"],
                           sequence_parallel=r["tp"] > 1, virtual_stages=r["virtual_stages"])

    def step_arguments(self, rank: int = 0) -> dict:
        """The keyword arguments with which :func:`gpumodel.training_step_time` prices a ranked layout as the plan did.

        ``gm.training_step_time(model, plan.system, **plan.step_arguments(rank))`` gives the row's step time, memory
        peak and MFU (with the ``calibration`` and ``host`` the plan was given, passed again): its micro-batch,
        accumulation, recomputation (and recomputed modules), :meth:`parallelism`, HSDP's ``shard_group``, fp8
        setting, attention library, pipeline schedule, and the communication its overlap setting and its schedule
        hide (DualPipe hides its all-to-alls and pipeline sends whatever the row's ``comm_overlap``:
        :data:`~gpumodel.cluster.planprice.SCHEDULE_OVERLAP`).

        Parameters
        ----------
        rank : int
            Index of the layout in :attr:`rows`, as :meth:`parallelism` takes it.

        Returns
        -------
        dict
            ``batch_size, seq_len, precision, optimizer, checkpointing, gradient_accumulation_steps, parallelism,
            framework, attention_kernel, fp8, pipeline_schedule, comm_overlap`` and, where the row has them,
            ``recompute_modules``, ``shard_group`` and ``grad_reduce_dtype``.
        """
        par = self.parallelism(rank)
        r = self.rows[int(rank)]
        hide = row_overlap(r["pipeline_schedule"], r["comm_overlap"])   # as the plan priced it
        out = dict(batch_size=r["micro_batch"], seq_len=self.seq_len, precision=self.precision,
                   optimizer=self.optimizer, checkpointing=r["checkpointing"],
                   gradient_accumulation_steps=r["gradient_accumulation_steps"], parallelism=par,
                   framework=self.framework, attention_kernel=r["attention_kernel"], fp8=r["fp8"],
                   pipeline_schedule=r["pipeline_schedule"], comm_overlap=",".join(sorted(hide)) if hide else False)
        extra = dict(recompute_modules=r.get("recompute_modules") if r["checkpointing"] == "selective" else None,
                     shard_group=r.get("shard_group"), grad_reduce_dtype=self.grad_reduce_dtype)
        return {**out, **{k: v for k, v in extra.items() if v is not None}}

    def cost_key(self) -> tuple[str, str]:
        """The row key that measures a run's cost and its label: ``("cost", "cost [USD]")`` with a price, else
        ``("gpu_hours", "GPU-hours")`` (the same order: the cost is the GPU-hours times the price)."""
        if self.price_per_gpu_hour is None:
            return "gpu_hours", "GPU-hours"
        return "cost", f"cost [{self.currency}]"

    def pareto(self, cost: str | None = None) -> list:
        """The rows no other row beats on both the days and the cost: the fastest run for its cost, by days.

        Parameters
        ----------
        cost : {"cost", "gpu_hours", "energy_kwh"} or None
            The row key to minimise beside ``days``; None: the cost with a price, else the GPU-hours (the same
            order at any price).

        Returns
        -------
        list of dict
            The non-dominated rows of :attr:`rows` (the ranked rows the plan kept: ask ``plan_training`` for
            more with ``top``), by increasing days, so by decreasing cost: the first is the fastest run, the
            last the cheapest.
        """
        allowed = ("cost", "gpu_hours", "energy_kwh")
        key = self.cost_key()[0] if cost is None else cost
        if key not in allowed:
            raise ArgumentError(f"cost={cost!r} is not one of {', '.join(allowed)}", argument="cost", value=cost,
                                allowed=", ".join(allowed))
        if key == "cost" and self.price_per_gpu_hour is None:
            raise ArgumentError("cost='cost' needs a price per GPU-hour; use 'gpu_hours' (the same order)",
                                argument="cost", value=cost, allowed="gpu_hours, energy_kwh")
        if not self.rows:
            return []
        front = pareto_front([r["days"] for r in self.rows], [r[key] for r in self.rows])
        return [self.rows[i] for i in front]

    def to_dict(self) -> dict:
        """Every input and result field (the rows as plain dicts), as ``--json`` prints it."""
        keys = ("model", "system", "gpu", "tokens", "global_batch", "seq_len", "objective", "framework", "precision",
                "optimizer", "attention_kernel", "fp8", "pipeline_schedule", "recompute_modules", "price_per_gpu_hour",
                "currency", "max_days", "budget",
                "max_power_kw", "gpu_counts", "searched", "source", "source_detail", "expected_error", "candidates", "feasible",
                "collapsed", "search_s", "notes")
        return {**{k: getattr(self, k) for k in keys}, "rows": [dict(r) for r in self.rows]}

    def to_pandas(self):
        """The ranked layouts as a ``pandas.DataFrame`` (pandas is an optional dependency)."""
        import pandas as pd

        return pd.DataFrame(self.rows)

    def fp8_text(self) -> str:
        """What the plan searched of fp8, as its headline says it: ``", fp8 GEMMs"``, ``""`` or both."""
        return {True: ", fp8 GEMMs", False: ""}.get(self.fp8, ", with and without fp8 GEMMs")

    def options_text(self) -> str:
        """The searched options besides the attention library, as the headline says them: :meth:`fp8_text`, the
        pipeline schedules where not 1F1B alone, the recomputed modules where given."""
        out = self.fp8_text()
        if self.pipeline_schedule != "1f1b":
            out += f", pipeline schedule {self.pipeline_schedule.replace(',', ' or ')}"
        if self.recompute_modules is not None:
            out += f", selective recomputation of {self.recompute_modules.replace(',', ', ') or 'nothing'}"
        return out

    def headline(self) -> str:
        """One line: the job, how many layouts were priced and fit, what ranks them."""
        kernel = f", attention {self.attention_kernel.replace(',', ' or ')}" if self.attention_kernel != "sdpa" else ""
        kernel += self.options_text()
        return (f"{self.model} on {self.system} ({self.framework}), {format_count(self.tokens)} tokens, batch "
                f"{self.global_batch} x {self.seq_len} tokens{kernel}; {self.feasible:,} of {self.candidates:,} "
                f"layouts fit, ranked by {self.objective}")

    def __repr__(self) -> str:
        head = f"TrainingPlan({self.headline()})"
        if not self.rows:
            return head
        table = text_table(self.headers(), self.table(5))
        more = f"\n  ... {len(self.rows) - 5:,} more rows" if len(self.rows) > 5 else ""
        legend = self.legend()
        return "\n".join([head] + ["  " + line for line in table.splitlines()]) + more + "".join(
            "\n  " + line for line in legend)

    def _columns(self) -> tuple:
        """The columns shown: the cost only with a price (in its currency)."""
        if self.price_per_gpu_hour is None:
            return tuple((n, m) for n, m in COLUMNS if n != "cost")
        price = f"{self.price_per_gpu_hour:g} {self.currency}"
        return tuple((n, m.replace("the price per GPU-hour, in its currency (with a price)", price)) for n, m in COLUMNS)

    def headers(self) -> list[str]:
        """The table's headers (``cost <currency>`` with a price, no cost column without)."""
        return [f"cost {self.currency}" if n == "cost" else n for n, _ in self._columns()]

    def legend(self, width: int = 106) -> list[str]:
        """What the shown columns mean, ``header: meaning`` wrapped to ``width`` (:func:`legend_lines`)."""
        return legend_lines(width, self._columns())

    def table(self, top: int | None = None) -> list[list[str]]:
        """The cells of the first ``top`` rows (all when None), under :meth:`headers`."""
        cost = HEADERS.index("cost")
        rows = table_rows(self.rows, top, kernel="," in self.attention_kernel)
        return rows if self.price_per_gpu_hour is not None else [r[:cost] + r[cost + 1:] for r in rows]

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers())
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.table(10))
        legend = "; ".join(f"{n}: {m}" for n, m in self._columns()[1:])
        return (f"<b>{html.escape(self.model)} on {html.escape(self.system)}</b>: {self.feasible:,} of "
                f"{self.candidates:,} layouts fit, ranked by {html.escape(self.objective)}"
                f"<table><tr>{head}</tr>{body}</table><small>{html.escape(legend)}</small>")
