"""NVLink SHARP (NCCL's NVLS algorithms): collectives reduced inside the NVSwitch.

Third-generation NVSwitch (H100/H200 boards) and later (B200 boards, GB200 NVL72) can reduce and
multicast in the switch: a load through a multicast address returns the sum of that address on every
GPU of the group, a store writes it to all of them. NCCL builds three collectives on it:

* **All-reduce, one node (NVLS).** The buffer is split among ``h = min(k, 32)`` head GPUs
  (``k`` ranks of the group in the node). Each head load-reduces its share from all GPUs through the
  switch and multicast-stores the result back. A GPU's link therefore carries, each way, its whole
  buffer ``S`` (read by the switch, out) or the whole result ``S`` (written by the multicast, in),
  plus its own share ``S/h`` once more as a head. NCCL's graph search reserves exactly that, one
  bandwidth share per GPU and two for the head, per channel (``ncclTopoSearchTryNvls``).
  The algorithm bandwidth is then

  .. math::

      \\mathrm{algbw} = e_\\mathrm{NVLS}\\, B \\, \\frac{h}{h + 1}, \\qquad
      \\mathrm{busbw} = \\mathrm{algbw}\\, \\frac{2 (n - 1)}{n},

  with ``B`` the NVLink bandwidth per GPU and direction NCCL sustains (the ring's,
  :func:`~gpumodel.cluster.collectives.link_bus_bandwidth`) and ``e_NVLS`` NCCL's NVLS efficiency:
  0.85 on Hopper, 0.74 on Blackwell. An in-switch all-reduce moves each byte over a GPU's link once
  each way, where a ring moves ``2 (n-1)/n`` of it, so its nccl-tests busbw exceeds the link rate:
  8 H100s reach ``0.85 x 360 x 8/9 = 272`` GB/s algbw, 476 GB/s busbw.
* **All-gather and reduce-scatter, one node (NVLS, NCCL >= 2.19).** Each GPU multicast-stores its
  ``S/n`` (all-gather; the whole ``S`` comes in) or the switch load-reduces its whole buffer
  (reduce-scatter; ``S`` goes out): ``algbw = e_NVLS B``, below the ring's ``B n/(n-1)``, so NCCL's
  tuner, and ``"auto"`` here, keep the ring for them.
* **All-reduce across nodes (NVLS_TREE, NCCL >= 2.18).** NVLS inside each node, and a tree between
  nodes over the ``k`` NICs of the node's ranks: two nodes swap their partial sums
  (``algbw <= k B_net``), more nodes reduce and broadcast along a double binary tree, where each
  node sends and receives ``2 S`` in all (``algbw <= k B_net / 2``). NCCL's tuner further caps each
  NIC's channel at a busbw of ``c`` (Hopper 57.7 GB/s on two nodes, 45.5 GB/s on more; Blackwell
  96.0 and 80.0): ``algbw <= k c n / (2 (n - 1))``. NVLS across nodes without the tree needs IB SHARP
  (NCCL's CollNet), not modelled.

NVLS needs at least two GPUs of the group in a node (a group with one GPU per node cannot use
it) and runs the Simple protocol only. Latency (NCCL's tuner): 25 us inside a node, plus
``2 floor(log2 nodes)`` network hops of 20.9 us for NVLS_TREE; the time is
``latency + S / algbw``.

These figures follow NCCL's mechanism and tuning constants; none is fitted to measured
bandwidths. ``python bench/collectives_accuracy.py --published`` compares them with published
nccl-tests runs.

References
----------
NVIDIA NCCL 2.30.7 (github.com/NVIDIA/nccl, 2026): ``src/graph/tuning.cc`` (``nvlsEfficiency``:
0.85 Hopper, 0.74 Blackwell, since 2.28.3; NVLS/NVLS_TREE latencies 25 us NVLink, 20.9 us network;
``perChMaxNVLSTreeBws``; which collectives may use NVLS), ``src/graph/search.cc``
(``ncclTopoSearchTryNvls``: head counted twice; NVLS only with NVSwitches and compute capability >= 9.0;
at most ``NCCL_MAX_NVLS_ARITY`` = 32 heads, ``src/include/device.h``), ``src/device/all_reduce.h``
(the NVLS and NVLS_TREE kernels: scatter, multimem load-reduce and store, gather),
``src/transport/nvls.cc`` (NVLS needs two GPUs or more). NVLS first appeared in NCCL 2.17.1 (2023).
NVIDIA/nccl-tests issue #212 (NCCL maintainer, 2024): ~480 GB/s all-reduce busbw on 8 H100s with NVLS.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.errors import ArgumentError
from ..vocabulary import broadcastable, choice, nonnegative_number, positive_int, resolve_system, scalar_or_array
from .groups import Collective, group_layout, link_bus_bandwidth

__all__ = ["NVLS_EFFICIENCY", "NVLS_LATENCY_S", "NVLS_TREE_HOP_LATENCY_S", "NVLS_TREE_RAIL_CAP",
           "NVLS_MAX_HEADS", "NVLS_COLLECTIVES", "nvls_efficiency", "nvls_available", "nvls_time"]

#: NCCL's NVLS efficiency by GPU generation (``nvlsEfficiency``, tuning.cc; compute capability major 9, >= 10).
NVLS_EFFICIENCY = {9: 0.85, 10: 0.74}
#: Latency of an NVLS collective inside a node (tuning.cc ``hwLat`` NVLink, NVLS, Simple; base 0) [s].
NVLS_LATENCY_S = 25e-6
#: Latency per network hop of NVLS_TREE (tuning.cc ``hwLat`` network, NVLS_TREE, Simple) [s].
NVLS_TREE_HOP_LATENCY_S = 20.9e-6
#: NCCL's cap on NVLS_TREE busbw per NIC channel (``perChMaxNVLSTreeBws``) [B/s]: (two nodes, more).
NVLS_TREE_RAIL_CAP = {9: (57.7e9, 45.5e9), 10: (96.0e9, 80.0e9)}
#: Most heads of an NVLS group (``NCCL_MAX_NVLS_ARITY``).
NVLS_MAX_HEADS = 32
#: Collectives NCCL runs with NVLS (all-gather and reduce-scatter inside a node only).
NVLS_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def _generation(system) -> int:
    cc = system.gpu.compute_capability
    return 10 if float(cc) >= 10.0 else 9


def nvls_efficiency(system: Any) -> float:
    """NCCL's NVLS efficiency for the GPUs of ``system`` (0 where it has no NVLink SHARP).

    >>> nvls_efficiency("dgx-h100"), nvls_efficiency("dgx-b200"), nvls_efficiency("dgx-a100-80gb")
    (0.85, 0.74, 0.0)
    """
    s = resolve_system(system)
    return NVLS_EFFICIENCY[_generation(s)] if s.nvlink_sharp else 0.0


def _layout(s, n, stride, **others):
    """(ranks per node, nodes) of the groups; ``n``, ``stride`` and the ``others`` must broadcast together."""
    n, stride = positive_int(n, "n"), positive_int(stride, "stride")
    broadcastable(**others, n=n, stride=stride)
    return group_layout(s, n, stride)


def nvls_available(collective: Any, system: Any, n: Any, stride: Any = 1) -> Any:
    """Whether NCCL can run ``collective`` over ``n`` GPUs of ``system`` (ranks ``stride`` apart) with NVLS.

    True where the system has NVLink SHARP, the group has at least two GPUs in each node, and, for
    all-gather and reduce-scatter, stays inside one node (all-reduce spans nodes as NVLS_TREE).

    >>> nvls_available("all_reduce", "dgx-h100", 8), nvls_available("all_reduce", "dgx-a100-80gb", 8)
    (True, False)
    >>> nvls_available("all_reduce", "dgx-h100", 16, stride=8)   # one GPU per node
    False
    """
    op = choice(Collective, collective, "collective")
    s = resolve_system(system)
    k, nodes = _layout(s, n, stride)
    ok = (k >= 2) & bool(s.nvlink_sharp) & (op.value in NVLS_COLLECTIVES)
    if op != Collective.ALL_REDUCE:
        ok = ok & (nodes == 1)
    else:
        ok = ok & ((nodes == 1) | (s.inter_node is not None))
    ok = np.asarray(ok, bool)
    return bool(ok) if ok.ndim == 0 else ok


def nvls_time(collective: Any, nbytes: Any, system: Any, n: Any, stride: Any = 1, *, strict: bool = True) -> Any:
    """Time of a collective with NCCL's NVLS (one node) or NVLS_TREE (across nodes) algorithm [s].

    Parameters
    ----------
    collective : {"all_reduce", "all_gather", "reduce_scatter"}
    nbytes : float or array
        Message size as nccl-tests counts it [B].
    system : SystemSpec, str or GPU
    n, stride : int or array
        Group size, and the distance between its consecutive ranks (as
        :func:`~gpumodel.cluster.collectives.system_collective_time`).
    strict : bool
        Raise :class:`~gpumodel.base.errors.ArgumentError` where NVLS is unavailable (default); when False,
        those entries are ``inf``.

    Returns
    -------
    float or ndarray
        ``latency + nbytes / algbw`` [s] (module docstring); 0 for ``n = 1``.

    Examples
    --------
    8 GB all-reduced over the 8 H100s of a DGX H100 (``B = 0.8 x 450`` GB/s):

    >>> t = nvls_time("all_reduce", 8e9, "dgx-h100", 8)
    >>> round(8e9 / t / 1e9, 1), round(8e9 / t * 2 * 7 / 8 / 1e9)   # algbw, busbw [GB/s]
    (271.8, 476)
    """
    op = choice(Collective, collective, "collective")
    s = resolve_system(system)
    nbytes = np.asarray(nonnegative_number(nbytes, "nbytes"), float)
    k, nodes = _layout(s, n, stride, nbytes=nbytes)
    ok = np.asarray(nvls_available(op, s, n, stride), bool)
    if strict and not np.all(ok | (np.asarray(n) == 1)):
        why = ("the system has no NVLink SHARP (nvlink_sharp: false)" if not s.nvlink_sharp else
               "NCCL runs NVLS on all-reduce, all-gather and reduce-scatter only" if op.value not in NVLS_COLLECTIVES
               else "NVLS needs two or more GPUs of the group in each node, and all-gather and reduce-scatter "
                    "inside one node (across nodes they need IB SHARP)")
        raise ArgumentError(f"algorithm='nvls' is not available for {op.value} on {s.name} with n={n}, "
                            f"stride={stride}: {why}; use 'ring', 'tree' or 'auto'", argument="algorithm",
                            value="nvls", allowed="'ring', 'tree' or 'auto'")
    nn = np.asarray(n, float)
    if not s.nvlink_sharp:
        return scalar_or_array(np.where(nn > 1, np.inf, 0.0) + 0 * nbytes)
    gen = _generation(s)
    e = NVLS_EFFICIENCY[gen]
    bw = link_bus_bandwidth(s.intra_node)
    h = np.minimum(k, NVLS_MAX_HEADS)
    if op == Collective.ALL_REDUCE:
        alg = e * bw * h / (h + 1)
        multi = nodes > 1
        if s.inter_node is not None:
            net = link_bus_bandwidth(s.inter_node)
            two = nodes == 2
            tree = k * net * np.where(two, 1.0, 0.5)
            cap2, cap = NVLS_TREE_RAIL_CAP[gen]
            rail = k * np.where(two, cap2, cap) * nn / (2 * np.maximum(nn - 1, 1))
            alg = np.where(multi, np.minimum(alg, np.minimum(tree, rail)), alg)
        hops = 2 * np.floor(np.log2(np.maximum(nodes, 1)))
        lat = NVLS_LATENCY_S + np.where(multi, hops * NVLS_TREE_HOP_LATENCY_S, 0.0)
    else:
        alg = e * bw * np.ones_like(k)
        lat = NVLS_LATENCY_S
    t = np.where(ok, lat + nbytes / alg, np.inf)
    return scalar_or_array(np.where(nn > 1, t, 0.0))
