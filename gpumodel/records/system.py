"""System records: GPUs per node, the fabric inside a node, the network between nodes, node power.

A :class:`SystemSpec` says what a cluster of one kind of node offers a parallel training job:
how many GPUs share the scale-up fabric (NVLink through NVSwitch, Infinity Fabric or PCIe), the
bandwidth of that fabric per GPU and direction, the scale-out network per GPU and direction
(InfiniBand, RoCE, EFA...), and the power a node draws. Records live in ``specs/systems/*.yaml``,
each value with its source; users add their own with :func:`load_systems`.

Bandwidths are per GPU and per direction [bytes/s]: NVIDIA quotes NVLink as bidirectional
("900 GB/s" on an H100 is 450 GB/s each way), and network links in bits per second per port
("400 Gb/s" is 50 GB/s each way). YAML may write either ``"450 GB/s"`` or ``"400 Gb/s"``.

Examples
--------
>>> import gpumodel as gm
>>> s = gm.system("dgx-h100")
>>> s.gpus_per_node, s.gpu.name, s.intra_node.bandwidth / 1e9, s.inter_node.bandwidth / 1e9
(8, 'h100-sxm', 450.0, 50.0)
"""

from __future__ import annotations

import os
import re
from typing import Annotated

from pydantic import BeforeValidator, ConfigDict, Field, field_validator, model_validator

from ..base.enums import StrEnum
from ..base.errors import UnknownNameError
from .gpu import GPU_CATALOG
from .specs import Catalog, Record
from ..base.units import parse_quantity
from ..base.reprs import html_table

__all__ = ["SystemSpec", "Fabric", "Link", "system", "list_systems", "load_systems", "all_systems",
           "UnknownSystemError", "SYSTEM_CATALOG", "node_system"]


class UnknownSystemError(UnknownNameError):
    """No system of that name."""


_BITS = re.compile(r"^\s*([-+]?\d+\.?\d*(?:[eE][-+]?\d+)?)\s*([kMGT]?)b(?:it)?/s\s*$")
_PREFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def _bandwidth(value: object) -> float:
    """``"400 Gb/s"`` (bits) or ``"50 GB/s"`` (bytes) -> bytes/s."""
    if isinstance(value, str):
        m = _BITS.match(value)
        if m:
            return float(m.group(1)) * _PREFIX[m.group(2)] / 8.0
    return parse_quantity(value, "bytes/s")


BytesPerSecond = Annotated[float, BeforeValidator(_bandwidth), Field(gt=0)]
Watts = Annotated[float, BeforeValidator(lambda v: parse_quantity(v, "W")), Field(gt=0)]


class Fabric(StrEnum):
    """Kinds of link: scale-up fabrics inside a node, scale-out networks between nodes."""

    NVSWITCH = "nvswitch"
    NVLINK = "nvlink"
    INFINITY_FABRIC = "infinity-fabric"
    PCIE = "pcie"
    INFINIBAND = "infiniband"
    ROCE = "roce"
    EFA = "efa"
    ETHERNET = "ethernet"


class _Record(Record):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)


class Link(_Record):
    """One level of the interconnect, as one GPU sees it.

    Attributes
    ----------
    fabric : Fabric
    bandwidth : float
        Per GPU, per direction [bytes/s].
    generation : str
        "NVLink 4", "PCIe 4.0", "NDR", ... (descriptive).
    source : str
    """

    fabric: Fabric
    bandwidth: BytesPerSecond
    generation: str = ""
    source: str = Field(min_length=3)


class SystemSpec(_Record):
    """A node type (and the cluster built from it), validated and in SI units.

    Attributes
    ----------
    name : str
        Canonical name, e.g. ``"dgx-h100"``.
    gpu_name : str
        The GPU record (``gm.gpu``) of each GPU; :attr:`gpu` resolves it.
    gpus_per_node : int
        GPUs sharing :attr:`intra_node` (for GB200 NVL72 the 72 GPUs of the NVLink domain).
    intra_node : Link
        The scale-up fabric.
    inter_node : Link or None
        The scale-out network; None for a machine that is not networked for training.
    node_power_watts : float
        The node's maximum power [W] as its maker states it (GPUs, CPUs, NICs, fans).
    nvlink_sharp : bool
        Whether the NVSwitch fabric reduces in the switch (NVLink SHARP, third-generation NVSwitch and
        later: H100/H200/B200 boards, GB200 NVL72), which NCCL uses as its NVLS algorithms
        (:mod:`gpumodel.cluster.nvls`). Needs an NVSwitch fabric and a GPU of compute capability 9.0 or more.
    nvlink_sharp_source : str
        Where :attr:`nvlink_sharp` is stated (required when it is true).
    cloud : str
        Cloud provider and instance type, where the record is a cloud instance.
    """

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    display_name: str
    aliases: tuple[str, ...] = ()
    gpu_name: str = Field(alias="gpu")
    gpus_per_node: int = Field(gt=0)
    intra_node: Link
    inter_node: Link | None = None
    node_power_watts: Watts = Field(alias="node_power")
    nvlink_sharp: bool = False
    nvlink_sharp_source: str = ""
    cloud: str = ""
    source: str = Field(min_length=3)
    notes: str = ""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True, populate_by_name=True)

    @field_validator("source")
    @classmethod
    def _not_placeholder(cls, value: str) -> str:
        if value.strip().lower() in {"todo", "tbd", "unknown", "n/a"}:
            raise ValueError("source must name a document or URL")
        return value

    @model_validator(mode="after")
    def _gpu_known(self) -> "SystemSpec":
        if self.gpu_name not in GPU_CATALOG:
            raise ValueError(f"gpu {self.gpu_name!r} is not a known GPU (gm.list_gpus())")
        if self.nvlink_sharp:
            cc = GPU_CATALOG.get(self.gpu_name).compute_capability
            if self.intra_node.fabric is not Fabric.NVSWITCH or cc is None or float(cc) < 9.0:
                raise ValueError("nvlink_sharp needs an NVSwitch fabric (intra_node.fabric: nvswitch) and a GPU of "
                                 "compute capability 9.0 or more (third-generation NVSwitch and later)")
            if len(self.nvlink_sharp_source.strip()) < 3:
                raise ValueError("nvlink_sharp: true needs nvlink_sharp_source (a document or URL)")
        return self

    @property
    def gpu(self):
        """The :class:`~gpumodel.records.gpu.GPUSpec` of each GPU."""
        return GPU_CATALOG.get(self.gpu_name)

    @property
    def gpu_power_watts(self) -> float:
        """Node power per GPU [W]: what one GPU of a job costs in energy, hosts and network included."""
        return self.node_power_watts / self.gpus_per_node

    def to_dict(self) -> dict:
        """Plain fields in SI units (bytes/s, W)."""
        return self.model_dump(mode="json")

    def _repr_html_(self) -> str:
        rows = [("GPUs per node", f"{self.gpus_per_node} x {self.gpu_name}"),
                ("intra-node", f"{self.intra_node.fabric}, {self.intra_node.bandwidth / 1e9:g} GB/s per GPU each way"),
                ("network", f"{self.inter_node.fabric}, {self.inter_node.bandwidth * 8 / 1e9:g} Gb/s per GPU each way"
                 if self.inter_node else "none"),
                ("NVLink SHARP", "yes" if self.nvlink_sharp else "no"),
                ("node power", f"{self.node_power_watts / 1e3:g} kW"), ("source", self.source)]
        return html_table(self.display_name, rows)

    def __repr__(self) -> str:
        net = (f"{self.inter_node.fabric} {self.inter_node.bandwidth * 8 / 1e9:.0f} Gb/s per GPU"
               if self.inter_node else "no network")
        return (f"SystemSpec({self.name}: {self.gpus_per_node} x {self.gpu_name}, {self.intra_node.fabric} "
                f"{self.intra_node.bandwidth / 1e9:.0f} GB/s per GPU each way, {net}, "
                f"{self.node_power_watts / 1e3:.1f} kW per node)")


#: Shipped systems plus those from ``GPUMODEL_SPEC_PATH`` and :func:`load_systems`.
SYSTEM_CATALOG: Catalog[SystemSpec] = Catalog("systems", SystemSpec, error=UnknownSystemError)


def system(name: str | SystemSpec) -> SystemSpec:
    """The system record called ``name`` (case-insensitive; aliases such as "p5.48xlarge").

    Parameters
    ----------
    name : str or SystemSpec
        A canonical name or alias (``list_systems()`` lists the names); a record is returned as it is.

    Returns
    -------
    SystemSpec
        The system's record: its GPU, GPUs per node [count], intra- and inter-node links (bandwidths
        [bytes/s]) and node power [W].

    Raises
    ------
    UnknownSystemError
        No system of that name; the message lists the closest names.
    """
    return SYSTEM_CATALOG.get(name)


def list_systems(gpu: str | None = None) -> list[str]:
    """Canonical names of all known systems, sorted; optionally only those built on one GPU.

    Parameters
    ----------
    gpu : str or GPUSpec, optional
        Only the systems built on this GPU (a name or record, as :func:`gpumodel.gpu` takes); None lists all.

    Returns
    -------
    list of str
        Canonical system names (what :func:`system` accepts), sorted.
    """
    if gpu is None:
        return SYSTEM_CATALOG.names()
    g = GPU_CATALOG.get(gpu).name
    return [s.name for s in SYSTEM_CATALOG.records() if s.gpu_name == g]


def all_systems() -> list[SystemSpec]:
    """Every known system record, sorted by name."""
    return SYSTEM_CATALOG.records()


def load_systems(path: str | os.PathLike, *, replace: bool = False) -> list[SystemSpec]:
    """Validate the system records in a YAML file or folder and make them known to :func:`system`.

    Parameters
    ----------
    path : path-like
        A ``.yaml`` file holding one record (or a list of records), or a folder of such files.
    replace : bool
        Let a record replace a known system of the same name (otherwise that is an error).

    Returns
    -------
    list of SystemSpec
        The records read (all of them or none: nothing is added when one is invalid).

    Raises
    ------
    SpecError
        A file is not valid YAML, or a record is invalid; the message names file, record and field.
    """
    return SYSTEM_CATALOG.load(path, replace=replace)


#: Assumed node power over the GPUs' board power for a GPU given without a system [ratio]: a DGX H100
#: draws 10.2 kW for 8 x 700 W GPUs (1.82); a DGX A100 6.5 kW for 8 x 400 W (2.03).
NODE_POWER_OVER_GPUS = 1.8


def node_system(gpu, gpus_per_node: int = 8) -> SystemSpec:
    """A one-node system of a bare GPU: the shipped system built on it when there is one, else a record
    with the GPU's NVLink (or PCIe) and no network, node power ``1.8 x`` the GPUs' board power."""
    g = GPU_CATALOG.get(gpu)
    known = [s for s in SYSTEM_CATALOG.records() if s.gpu_name == g.name and not s.cloud]
    if known:
        return min(known, key=lambda s: (s.gpus_per_node != 8, s.name))
    if g.nvlink is not None:
        intra = Link(fabric=Fabric.NVLINK, bandwidth=g.nvlink.bandwidth / 2, generation=f"NVLink {g.nvlink.generation}",
                     source=f"{g.name} record: NVLink bandwidth (bidirectional) halved")
    else:
        lanes = {3: 16e9, 4: 32e9, 5: 64e9, 6: 128e9}[g.pcie_generation] / 2  # x16, per direction
        intra = Link(fabric=Fabric.PCIE, bandwidth=lanes, generation=f"PCIe {g.pcie_generation}.0 x16",
                     source="PCI-SIG: x16 link rate per direction")
    return SystemSpec(name=f"{g.name}-node", display_name=f"one node of {g.display_name}", gpu=g.name,
                      gpus_per_node=gpus_per_node, intra_node=intra, inter_node=None,
                      node_power=NODE_POWER_OVER_GPUS * gpus_per_node * g.tdp_watts,
                      source=f"derived from the {g.name} record", notes="a bare GPU: one node, no network")
