"""The GPU catalog: look up shipped and user GPU records by name or alias.

Examples
--------
>>> import gpumodel as gm
>>> gm.gpu("H100 SXM5 80GB").name
'h100-sxm'
>>> gm.gpu("h100").memory_bandwidth / 1e12   # TB/s
3.35
"""

from __future__ import annotations

import os

from ..base.arguments import choice
from ..records.gpu import GPU_CATALOG, GPUSpec, Vendor

__all__ = ["gpu", "list_gpus", "load_gpus", "all_gpus", "GPU_CATALOG"]

def gpu(name: str | GPUSpec) -> GPUSpec:
    """The GPU record called ``name`` (case-insensitive; aliases such as "h100", "4090", "a100").

    Parameters
    ----------
    name : str or GPUSpec
        A canonical name or alias (``list_gpus()`` lists the names); a record is returned as it is.

    Returns
    -------
    GPUSpec
        The GPU's record: peak throughputs [FLOP/s], memory size [bytes], bandwidths [bytes/s], limits.

    Raises
    ------
    UnknownGPUError
        No GPU of that name; the message lists the closest names.
    """
    return GPU_CATALOG.get(name)


def list_gpus(vendor: str | None = None) -> list[str]:
    """Canonical names of all known GPUs, sorted; optionally only one vendor's ("nvidia", "amd").

    Parameters
    ----------
    vendor : {"nvidia", "amd"} or None
        Only that vendor's GPUs; None lists all.

    Returns
    -------
    list of str
        Canonical GPU names (what :func:`gpu` accepts), sorted.
    """
    if vendor is not None:
        vendor = choice(Vendor, vendor, "vendor")
    return [g.name for g in all_gpus() if vendor is None or g.vendor == vendor]


def all_gpus() -> list[GPUSpec]:
    """Every known GPU record, sorted by name.

    Returns
    -------
    list of GPUSpec
        The shipped records and those added by :func:`load_gpus`, sorted by name.
    """
    return GPU_CATALOG.records()


def load_gpus(path: str | os.PathLike, *, replace: bool = False) -> list[GPUSpec]:
    """Validate the GPU records in a YAML file or folder and make them known to :func:`gpu`.

    Parameters
    ----------
    path : path-like
        A ``.yaml`` file holding one record (or a list of records), or a folder of such files.
    replace : bool
        Let a record replace a known GPU of the same name (otherwise that is an error).

    Returns
    -------
    list of GPUSpec
        The records read (all of them or none: nothing is added when one is invalid).

    Raises
    ------
    SpecError
        A file is not valid YAML, or a record is invalid; the message names file, record and field.
    """
    return GPU_CATALOG.load(path, replace=replace)
