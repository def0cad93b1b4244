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
    "GPUSpec": "hardware", "UnsupportedDTypeError": "hardware",
    "gpu": "gpus", "list_gpus": "gpus", "load_gpus": "gpus", "all_gpus": "gpus",
    "SpecError": "errors", "UnknownGPUError": "specs", "UnknownNameError": "errors",
    "GpumodelError": "errors", "ArgumentError": "errors", "ArgumentTypeError": "errors", "UnitError": "errors", "UnsupportedError": "errors",
    "GpumodelWarning": "errors", "DoesNotFitWarning": "errors", "Precision": "vocabulary",
    "DType": "dtypes", "dtype": "dtypes", "UnknownDTypeError": "dtypes",
    "compare": "comparison", "Comparison": "comparison",
    "ArchLimits": "arch", "arch_limits": "arch",
    # ops and roofline
    "OpCost": "ops", "arithmetic_intensity": "roofline", "ridge_point": "roofline",
    "RooflineResult": "roofline", "attainable_flops": "roofline",
    "warp_efficiency": "warps", "divergence_efficiency": "warps",
    # transformer memory and sizing
    "TransformerConfig": "transformer", "model": "transformer", "list_models": "transformer",
    "training_memory": "memory", "TrainingMemory": "memory",
    "inference_memory": "inference", "InferenceMemory": "inference",
    "fits": "sizing", "max_batch_size": "sizing", "max_seq_len": "sizing", "min_gpus": "sizing",
    "rank_gpus": "sizing", "plot_memory_breakdown": "plot_memory",
    # occupancy
    "occupancy": "occupancy_model", "Occupancy": "occupancy_model", "max_potential_block_size": "occupancy_helpers",
    "max_dynamic_shared_memory": "occupancy_helpers", "next_occupancy_step": "occupancy_helpers", "occupancy_curves": "occupancy_helpers",
    # time estimates
    "estimate_time": "estimate", "TimeEstimate": "estimate",
    "training_step_time": "steptime", "StepTime": "steptime", "HostCosts": "hostcost",
    # serving
    "prefill_time": "serving", "decode_step_time": "serving", "ServingTime": "serving",
    "generation_time": "serving", "Generation": "serving", "serving_capacity": "serving",
    "ServingCapacity": "serving",
    "Calibration": "calibration.record", "load_calibration": "calibration.record",
    # clusters (multi-GPU times are modelled, not measured)
    "SystemSpec": "cluster.system", "system": "cluster.system", "list_systems": "cluster.system",
    "load_systems": "cluster.system", "Parallelism": "cluster.parallelism",
    "training_time": "cluster.trainingtime", "TrainingTime": "cluster.trainingtime",
    "plan_training": "cluster.plan", "TrainingPlan": "cluster.plan",
}
# ``roofline`` and ``estimate`` are modules that call their main function (see ``_callable``):
# ``gm.roofline(op, gpu)`` and ``gm.roofline.levels(...)`` both work, whatever was imported first.
_SUBMODULES = {"ops", "plot", "units", "dtypes", "calibration", "cli", "errors", "vocabulary", "roofline", "estimate",
               "cluster", "serving"}

__all__ = sorted([*_EXPORTS, *_SUBMODULES, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        module = importlib.import_module(f".{name}", __name__)
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
    from .dtypes import DType, UnknownDTypeError, dtype
    from .gpus import all_gpus, gpu, list_gpus, load_gpus
    from .hardware import GPUSpec, UnsupportedDTypeError
    from .specs import SpecError, UnknownGPUError, UnknownNameError
