"""Groups of GPUs on a system: the collectives NCCL runs over them, how a group lies across nodes, and the bus
bandwidth each link sustains (shared by :mod:`~gpumodel.cluster.collectives` and :mod:`~gpumodel.cluster.nvls`).

Examples
--------
>>> import gpumodel as gm
>>> k, nodes = group_layout(gm.system("dgx-h100"), 16, 8)   # 16 ranks 8 apart: one a node
>>> float(k), float(nodes)
(1.0, 16.0)
"""

from __future__ import annotations

import numpy as np

from ..base.enums import StrEnum
from ..records.system import Fabric, SystemSpec

__all__ = ["Collective", "BUS_EFFICIENCY", "link_bus_bandwidth", "group_layout"]


class Collective(StrEnum):
    """The collectives, valued by nccl-tests' names without ``_perf``."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SEND_RECV = "send_recv"


#: Bus bandwidth a link sustains in nccl-tests, over its per-direction rate. NVLink/NVSwitch: NCCL's
#: protocol overhead is ~20 %, so an H100's 450 GB/s line rate gives ~370 GB/s busbw with the ring
#: algorithm (NCCL maintainer, NVIDIA/nccl-tests issue #212, 2024); the same fraction is used for other
#: NVLink generations. NVLink SHARP (NVLS, ~480 GB/s all-reduce busbw on 8 H100s, same source) reduces in
#: the switch and is modelled apart (:mod:`gpumodel.cluster.nvls`). Networks: ~90 % of
#: line rate (InfiniBand), a little less for RoCE and EFA; PCIe without peer-to-peer goes through host memory.
BUS_EFFICIENCY = {
    Fabric.NVSWITCH: 0.80, Fabric.NVLINK: 0.80, Fabric.INFINITY_FABRIC: 0.70, Fabric.PCIE: 0.60,
    Fabric.INFINIBAND: 0.90, Fabric.ROCE: 0.88, Fabric.EFA: 0.85, Fabric.ETHERNET: 0.80,
}


def link_bus_bandwidth(link) -> float:
    """Bus bandwidth a :class:`~gpumodel.records.system.Link` sustains: its rate times :data:`BUS_EFFICIENCY` [B/s].

    Parameters
    ----------
    link : Link
        One level of a system's interconnect (``system.intra_node`` or ``system.inter_node``): its fabric
        and its per-GPU, per-direction bandwidth [B/s].

    Returns
    -------
    float
        The bus bandwidth nccl-tests would report for large messages over that link [B/s].
    """
    return float(link.bandwidth) * BUS_EFFICIENCY[link.fabric]


def group_layout(system: SystemSpec, n, stride):
    """(ranks per node k, nodes) of groups of ``n`` ranks ``stride`` apart, ranks numbered node by node."""
    g = system.gpus_per_node
    n, stride = np.asarray(n, float), np.asarray(stride, float)
    span = n * stride
    k = np.where(span <= g, n, np.maximum(1.0, np.floor(g / np.minimum(stride, g))))
    k = np.minimum(k, n)
    return k, np.ceil(n / k)
