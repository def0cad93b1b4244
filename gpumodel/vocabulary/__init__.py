"""One resolver per argument kind: every public function enters through these.

A GPU, a model, a precision, a count, a flag: each kind of argument is read and checked here, once,
so that ``"h100"``, ``gm.gpu("h100")`` and a user's record mean the same thing everywhere and a bad
value always ends in the same typed error naming the argument and what is allowed
(:class:`~gpumodel.base.errors.ArgumentError`). The names and units of the arguments are listed in
``docs/nomenclature.md``. The checks of numeric arguments live in :mod:`gpumodel.base.numeric` and the
parallel-degree rules in :mod:`gpumodel.vocabulary.parallel_rules`; both are importable from here too.

Examples
--------
>>> from gpumodel.vocabulary import precision, positive_int, flag
>>> p = precision("amp_bf16")
>>> p.param_dtype.value, p.compute_dtype.value, p.is_amp
('fp32', 'bf16', True)
>>> positive_int(8, "batch_size")
8
>>> positive_int([1, 2, 4], "batch_size")
array([1, 2, 4])
>>> flag("no", "sparse")
Traceback (most recent call last):
...
gpumodel.base.errors.ArgumentError: sparse must be True or False, got 'no' (str)
"""


from __future__ import annotations

from ..base.arguments import (choice, deprecated_alias, flag, format_seconds, passed_on, path_argument,
                              scalar_or_array, within_positions)
from ..base.numeric import (bounded_int, broadcastable, nonnegative_int, nonnegative_number, positive_int,
                            positive_number)
from ..base.readable import duration, token_count
from .parallel_rules import divides, parallel_degrees, splits_model, tensor_parallel
from .precision import (KV_DTYPES, PRECISIONS, TIMED_KV_DTYPES, WEIGHT_DTYPES, Checkpointing, ExpertsImplementation,
                        FP8Recipe, FP8_SEARCH, Framework, GradReduce, Optimizer, Precision, checkpointing_mode, fp8_recipe, fp8_training,
                        grad_reduce_dtype, kv_cache_dtype, precision, precision_on,
                        weight_dtype, Zero3Gather, zero3_gather, shard_group)
from .recompute import DEFAULT_RECOMPUTE_MODULES, RecomputeModule, recompute_modules
from .schedule import PipelineSchedule, check_pipeline_schedule, pipeline_schedule, schedule_runs
from .resolvers import resolve_gpu, resolve_gpu_or_cc, resolve_gpus, resolve_model, resolve_system

__all__ = [
    "Precision", "PRECISIONS", "precision", "precision_on", "weight_dtype", "WEIGHT_DTYPES", "kv_cache_dtype", "KV_DTYPES",
    "TIMED_KV_DTYPES", "resolve_gpu", "resolve_model", "resolve_gpu_or_cc", "resolve_system", "resolve_gpus",
    "bounded_int", "positive_int", "nonnegative_int", "positive_number", "nonnegative_number", "broadcastable",
    "flag", "choice", "scalar_or_array", "Optimizer", "Checkpointing", "ExpertsImplementation", "Framework", "GradReduce", "grad_reduce_dtype", "fp8_training", "fp8_recipe", "FP8Recipe", "FP8_SEARCH",
    "Zero3Gather", "zero3_gather", "shard_group",
    "checkpointing_mode",
    "RecomputeModule", "recompute_modules", "DEFAULT_RECOMPUTE_MODULES",
    "PipelineSchedule", "pipeline_schedule", "schedule_runs", "check_pipeline_schedule",
    "format_seconds", "deprecated_alias", "duration", "token_count", "path_argument", "passed_on", "within_positions",
    "divides", "parallel_degrees", "tensor_parallel", "splits_model",
]
