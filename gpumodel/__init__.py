"""gpumodel: analytical GPU performance modeling.

Typed GPU spec records loaded from YAML, pure functions for arithmetic intensity,
rooflines, memory budgets and occupancy, and calibrated time estimates.

>>> import gpumodel as gm
>>> round(gm.gpu("h100").peak_flops("bf16") / gm.gpu("h100").memory_bandwidth)
295

Names are imported on first use (PEP 562), so ``import gpumodel`` reads no files and
pulls in no optional dependency.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it (relative to this package)
_EXPORTS: dict[str, str] = {
    # records and catalogs
    "GPUSpec": "records.gpu", "UnsupportedDTypeError": "records.gpu",
    "gpu": "vocabulary.gpus", "list_gpus": "vocabulary.gpus", "load_gpus": "vocabulary.gpus", "all_gpus": "vocabulary.gpus",
    "SpecError": "base.errors", "RecordError": "base.errors", "UnknownGPUError": "records.specs", "UnknownNameError": "base.errors",
    "GpumodelError": "base.errors", "ArgumentError": "base.errors", "ArgumentTypeError": "base.errors", "UnitError": "base.errors", "UnsupportedError": "base.errors",
    "GpumodelWarning": "base.errors", "DoesNotFitWarning": "base.errors", "Precision": "vocabulary",
    "DType": "records.dtypes", "dtype": "records.dtypes", "UnknownDTypeError": "records.dtypes",
    "compare": "core.comparison", "Comparison": "core.comparison",
    "ArchLimits": "records.arch", "arch_limits": "records.arch",
    # ops and roofline
    "OpCost": "core.ops", "arithmetic_intensity": "core.roofline", "ridge_point": "core.roofline",
    "RooflineResult": "core.roofline", "attainable_flops": "core.roofline",
    "warp_efficiency": "core.warps", "divergence_efficiency": "core.warps",
    # transformer memory and sizing
    "TransformerConfig": "records.transformer", "model": "records.transformer", "list_models": "records.transformer",
    "training_memory": "core.memory", "TrainingMemory": "core.memory",
    "inference_memory": "core.inference", "InferenceMemory": "core.inference",
    "fits": "core.margin", "memory_margin": "core.margin", "MemoryMargin": "core.margin", "max_batch_size": "core.sizing", "max_seq_len": "core.sizing", "min_gpus": "core.sizing",
    "rank_gpus": "core.sizing", "plot_memory_breakdown": "plots.memory",
    # occupancy
    "occupancy": "core.occupancy", "Occupancy": "core.occupancy", "max_potential_block_size": "core.occupancy_helpers",
    "max_dynamic_shared_memory": "core.occupancy_helpers", "next_occupancy_step": "core.occupancy_helpers", "occupancy_curves": "core.occupancy_helpers",
    # time estimates
    "estimate_time": "calibration.estimate", "TimeEstimate": "calibration.estimate",
    "training_step_time": "cluster.step", "StepTime": "training.steptime", "HostCosts": "training.hostcost",
    # serving
    "prefill_time": "serving", "decode_step_time": "serving", "ServingTime": "serving",
    "generation_time": "serving", "Generation": "serving", "serving_capacity": "serving",
    "ServingCapacity": "serving",
    "Calibration": "calibration.record", "load_calibration": "calibration.record",
    # clusters (multi-GPU times are modelled, not measured)
    "SystemSpec": "records.system", "system": "records.system", "list_systems": "records.system",
    "load_systems": "records.system", "Parallelism": "cluster.parallelism",
    "training_time": "cluster.trainingtime", "TrainingTime": "cluster.trainingtime",
    "plan_training": "cluster.plan", "TrainingPlan": "cluster.plan",
}
# ``roofline`` and ``estimate`` are modules that call their main function (see ``_callable``):
# ``gm.roofline(op, gpu)`` and ``gm.roofline.levels(...)`` both work, whatever was imported first.
_SUBMODULES = {"ops": "core.ops", "plot": "plots", "units": "base.units", "dtypes": "records.dtypes",
               "calibration": "calibration", "cli": "cli", "errors": "base.errors", "vocabulary": "vocabulary",
               "roofline": "core.roofline", "estimate": "calibration.estimate", "cluster": "cluster",
               "serving": "serving", "training": "training", "core": "core", "records": "records", "base": "base",
               "plots": "plots"}

__all__ = sorted([*_EXPORTS, *_SUBMODULES, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        module = importlib.import_module(f".{_SUBMODULES[name]}", __name__)
        globals()[name] = module
        return module
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpumodel' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__




if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .records.dtypes import DType, UnknownDTypeError, dtype
    from .vocabulary.gpus import all_gpus, gpu, list_gpus, load_gpus
    from .records.gpu import GPUSpec, UnsupportedDTypeError
    from .records.specs import SpecError, UnknownGPUError, UnknownNameError
    from .base.errors import RecordError
