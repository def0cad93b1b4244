"""Inputs the pages share: the model (a preset or an uploaded Hugging Face config) and the names proposed.

The catalogs are read when a page first draws its form, not at import.
"""

from __future__ import annotations

import gpumodel as gm
from ..vocabulary import resolve_model
from .forms import Field, blame

__all__ = ["model_field", "model_argument", "model_names", "gpu_names", "system_names"]


def model_names() -> tuple[str, ...]:
    """The model presets (``gm.list_models()``)."""
    return tuple(gm.list_models())


def gpu_names() -> tuple[str, ...]:
    """The GPUs (``gm.list_gpus()``)."""
    return tuple(gm.list_gpus())


def system_names() -> tuple[str, ...]:
    """The systems, then the GPUs (a GPU means nodes of it)."""
    return tuple(gm.list_systems()) + gpu_names()


def model_field(default: str) -> Field:
    """The model input: a preset name, proposed from the presets."""
    return Field("model", "model", default, "a preset, or upload a config.json below", suggestions=model_names(),
                 arguments=("model", "config"))


def model_argument(values: dict[str, str], config: dict | None):
    """The :class:`~gpumodel.TransformerConfig` of the form: the uploaded config if any, else the preset named.

    Any error resolving it is shown beside the model field.
    """
    with blame("model"):
        return resolve_model(config if config is not None else values["model"], "model")
