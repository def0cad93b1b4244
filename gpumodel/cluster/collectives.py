"""Time of NCCL collectives: ring and tree algorithms, inside a node, across nodes, hierarchically.

Pure, broadcasting functions in the latency-bandwidth (alpha-beta) form NCCL's own tuner uses
(``src/graph/tuning.cc``), with the bandwidth conventions of nccl-tests
(``doc/PERFORMANCE.md``), so that a modelled time converts to the ``algbw``/``busbw`` nccl-tests
prints and compares with it directly:

.. math::

    \\mathrm{algbw} = S / t, \\qquad \\mathrm{busbw} = \\mathrm{algbw} \\cdot f(n),

with ``S`` the message size as nccl-tests counts it (the whole buffer: the all-reduce's input, the
all-gather's output, the reduce-scatter's input) and the bus factor ``f``: ``2(n-1)/n`` for
all-reduce, ``(n-1)/n`` for all-gather, reduce-scatter and all-to-all, 1 for broadcast, reduce
and send/recv. ``f(n) S`` is the traffic each rank sends on its busiest link in the optimal
algorithm (a ring all-reduce moves ``2(n-1)/n`` of the data), so a collective takes

.. math::

    t = \\alpha_0 + k\\,\\alpha + f(n)\\,S / B_\\mathrm{bus},

with ``k`` latency steps (``2(n-1)`` for a ring all-reduce, ``n-1`` for all-gather and
reduce-scatter, ``2 \\lceil \\log_2 n \\rceil`` for a tree), per-step latencies ``alpha`` of the
link kind and ``B_bus`` the bus bandwidth the link sustains. On a system each call takes the fastest
of NCCL's three protocols (LL, LL128, Simple: lower latency for less bandwidth, :data:`PROTOCOLS`). On a system the bus bandwidth of a
group that spans nodes is that of its slowest hop: a ring through ``k`` GPUs of each node can use
``k`` NICs at once, so ``B_bus = min(e_intra B_nvlink, e_net k B_nic)``. An all-to-all has no ring: each rank
sends the ``(n - k) / n`` of its buffer bound for other nodes through its own NIC and ``(k - 1) / n`` over the
node's fabric, whichever takes longer. On NVSwitch systems with NVLink
SHARP (H100 and later) NCCL reduces all-reduces in the switch instead (its NVLS and NVLS_TREE
algorithms, :mod:`gpumodel.cluster.nvls`), and ``"auto"`` takes them where they are faster.

Multi-GPU times are modelled, not measured here.

References
----------
NVIDIA nccl-tests, ``doc/PERFORMANCE.md`` (algbw, busbw and the bus factors).
NVIDIA NCCL, ``src/graph/tuning.cc``: base and per-hop latencies of the Simple protocol.
Thakur, Rabenseifner, Gropp, "Optimization of Collective Communication Operations in MPICH", 2005.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.enums import StrEnum
from ..base.errors import ArgumentError
from ..vocabulary import (broadcastable, choice, nonnegative_number, positive_int, positive_number, resolve_system,
                          scalar_or_array)
from ..records.system import Fabric
from .groups import BUS_EFFICIENCY, Collective, group_layout, link_bus_bandwidth
from .nvls import NVLS_COLLECTIVES, nvls_time

__all__ = ["Collective", "Algorithm", "bus_factor", "latency_steps", "collective_time", "algbw", "busbw",
           "link_bus_bandwidth", "group_bus_bandwidth", "system_collective_time", "BASE_LATENCY_S",
           "STEP_LATENCY_S", "BUS_EFFICIENCY", "PROTOCOLS"]


class Algorithm(StrEnum):
    """NCCL algorithms: ring, (double binary) tree, a hierarchical intra/inter/intra composition, and
    NVLink SHARP (NCCL's NVLS inside a node, NVLS_TREE across nodes: :mod:`gpumodel.cluster.nvls`)."""

    RING = "ring"
    TREE = "tree"
    HIERARCHICAL = "hierarchical"
    NVLS = "nvls"
    AUTO = "auto"


#: Base latency of one collective call, NCCL's Simple protocol (tuning.cc ``baseLat``, ring) [s].
BASE_LATENCY_S = 8.4e-6
#: Latency of one algorithm step per link kind, NCCL's Simple protocol (tuning.cc ``hwLat``, ring) [s].
STEP_LATENCY_S = {"nvlink": 3.4e-6, "pcie": 5.7e-6, "net": 14.0e-6}
#: NCCL's protocols as its tuner sees them (tuning.cc, ring): base latency [s], per-step latency by link
#: kind [s], and the fraction of the Simple protocol's bandwidth they reach (LL sends a 4-byte flag with
#: every 4 bytes of data; LL128 one 8-byte flag per 128-byte line). NCCL picks the fastest per call.
PROTOCOLS = {
    "ll": (6.6e-6, {"nvlink": 0.6e-6, "pcie": 1.0e-6, "net": 2.7e-6}, 0.5),
    "ll128": (14.0e-6, {"nvlink": 1.9e-6, "pcie": 2.5e-6, "net": 4.0e-6}, 120 / 128),
    "simple": (BASE_LATENCY_S, STEP_LATENCY_S, 1.0),
}

_STEP_KIND = {Fabric.NVSWITCH: "nvlink", Fabric.NVLINK: "nvlink", Fabric.INFINITY_FABRIC: "nvlink",
              Fabric.PCIE: "pcie"}


def bus_factor(collective: Any, n: Any) -> Any:
    """nccl-tests' bus factor ``busbw / algbw`` of a collective over ``n`` ranks.

    Parameters
    ----------
    collective : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv"}
        The collective (nccl-tests' names without ``_perf``).
    n : int or array
        Ranks.

    Returns
    -------
    float or ndarray
        ``busbw / algbw`` [1]: ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for all-gather, reduce-scatter and
        all-to-all, 1 for the others (0 for ``n = 1``).

    Examples
    --------
    >>> bus_factor("all_reduce", 8), bus_factor("all_gather", 8), bus_factor("broadcast", 8)
    (1.75, 0.875, 1.0)
    """
    op = choice(Collective, collective, "collective")
    n = np.asarray(positive_int(n, "n"), float)
    if op == Collective.ALL_REDUCE:
        out = 2.0 * (n - 1) / n
    elif op in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL):
        out = (n - 1) / n
    else:
        out = np.where(n > 1, 1.0, 0.0)
    return scalar_or_array(out)


def latency_steps(collective: Any, n: Any, algorithm: Any = "ring") -> Any:
    """Sequential latency steps of a collective: ``2(n-1)`` for a ring all-reduce, ``n-1`` for ring
    all-gather/reduce-scatter/all-to-all/broadcast, ``2 ceil(log2 n)`` for a tree, 1 for send/recv.

    Parameters
    ----------
    collective : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv"}
        The collective (nccl-tests' names without ``_perf``).
    n : int or array
        Ranks.
    algorithm : {"ring", "tree", "hierarchical"}
        The algorithm ("hierarchical" counts as a ring here; "nvls" has no steps and is refused).

    Returns
    -------
    float or ndarray
        Latency steps [count]; 0 for ``n = 1``.
    """
    op = choice(Collective, collective, "collective")
    alg = choice(Algorithm, algorithm, "algorithm")
    if alg == Algorithm.NVLS:
        raise ArgumentError("algorithm='nvls' reduces in the switch and has no ring steps; give a system to "
                            "system_collective_time, or use 'ring' or 'tree'", argument="algorithm",
                            value=algorithm, allowed="'ring', 'tree' or 'hierarchical'")
    n = np.asarray(positive_int(n, "n"), float)
    if op == Collective.SEND_RECV:
        steps = np.where(n > 1, 1.0, 0.0)
    elif alg == Algorithm.TREE:
        steps = 2.0 * np.ceil(np.log2(n))
    elif op == Collective.ALL_REDUCE:
        steps = 2.0 * (n - 1)
    else:
        steps = n - 1.0
    return scalar_or_array(steps)


def collective_time(collective: Any, nbytes: Any, n: Any, bus_bandwidth: Any, step_latency: Any = 3.4e-6,
                    algorithm: Any = "ring", base_latency: Any = BASE_LATENCY_S) -> Any:
    """Time of one collective over ``n`` ranks joined by links of one kind [s].

    Parameters
    ----------
    collective : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv"}
    nbytes : float or array
        Message size as nccl-tests counts it (the whole buffer) [B].
    n : int or array
        Ranks.
    bus_bandwidth : float or array
        Bus bandwidth the links sustain [B/s] (what nccl-tests reports as busbw for large messages).
    step_latency, base_latency : float
        Latency per algorithm step and per call [s].
    algorithm : {"ring", "tree"}

    Returns
    -------
    float or ndarray
        ``base + steps * step_latency + bus_factor * nbytes / bus_bandwidth`` [s]; 0 for ``n = 1``. Array
        arguments broadcast together; shapes that do not broadcast are refused with an
        :class:`~gpumodel.base.errors.ArgumentError` naming them.

    Examples
    --------
    A 1 GB all-reduce over 8 GPUs at 360 GB/s bus bandwidth moves 1.75 GB per GPU:

    >>> t = collective_time("all_reduce", 1e9, 8, 360e9)
    >>> round(t * 1e3, 3)   # 8.4 us + 14 x 3.4 us + 1.75e9 / 360e9 s
    4.917
    """
    nbytes = nonnegative_number(nbytes, "nbytes")
    bw = positive_number(bus_bandwidth, "bus_bandwidth")
    alpha = nonnegative_number(step_latency, "step_latency")
    base = nonnegative_number(base_latency, "base_latency")
    n = positive_int(n, "n")
    broadcastable(nbytes=nbytes, n=n, bus_bandwidth=bw, step_latency=alpha, base_latency=base)
    f = np.asarray(bus_factor(collective, n))
    steps = np.asarray(latency_steps(collective, n, algorithm))
    t = np.where(f > 0, base + steps * alpha + f * np.asarray(nbytes) / bw, 0.0)
    return scalar_or_array(t)


def algbw(nbytes: Any, seconds: Any) -> Any:
    """nccl-tests' algorithm bandwidth ``S / t`` [B/s].

    Parameters
    ----------
    nbytes : float or array
        Message size as nccl-tests counts it (the whole buffer) [B].
    seconds : float or array
        Time of the collective [s]; a positive number (0, a negative time or NaN is refused with an
        :class:`~gpumodel.base.errors.ArgumentError` naming ``seconds``).

    Returns
    -------
    float or ndarray
        ``nbytes / seconds`` [B/s].

    Examples
    --------
    >>> algbw(1e9, 1e-2) / 1e9   # 1 GB in 10 ms [GB/s]
    100.0
    >>> algbw(1e9, 0)
    Traceback (most recent call last):
    ...
    gpumodel.base.errors.ArgumentError: seconds must be a positive number, got 0
    """
    nbytes = nonnegative_number(nbytes, "nbytes")
    seconds = positive_number(seconds, "seconds")
    broadcastable(nbytes=nbytes, seconds=seconds)
    return scalar_or_array(np.asarray(nbytes, float) / np.asarray(seconds, float))


def busbw(collective: Any, nbytes: Any, seconds: Any, n: Any) -> Any:
    """nccl-tests' bus bandwidth ``algbw * bus_factor`` [B/s].

    Parameters
    ----------
    collective : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv"}
        The collective (nccl-tests' names without ``_perf``).
    nbytes : float or array
        Message size as nccl-tests counts it (the whole buffer) [B].
    seconds : float or array
        Time of the collective [s]; a positive number.
    n : int or array
        Ranks.

    Returns
    -------
    float or ndarray
        ``nbytes / seconds * bus_factor(collective, n)`` [B/s].

    Raises
    ------
    ArgumentError
        ``seconds`` <= 0 or NaN, ``nbytes`` < 0, ``n`` < 1, or array arguments whose shapes do not broadcast.

    Examples
    --------
    >>> busbw("all_reduce", 1e9, 1.75e-2, 8) / 1e9   # 1 GB in 17.5 ms over 8 ranks
    100.0
    """
    op = choice(Collective, collective, "collective")
    nbytes = nonnegative_number(nbytes, "nbytes")
    seconds = positive_number(seconds, "seconds")
    n = positive_int(n, "n")
    broadcastable(nbytes=nbytes, seconds=seconds, n=n)
    return scalar_or_array(np.asarray(algbw(nbytes, seconds)) * np.asarray(bus_factor(op, n)))


def group_bus_bandwidth(system: Any, n: Any, stride: Any = 1) -> Any:
    """Bus bandwidth of a ring over ``n`` ranks placed ``stride`` apart on ``system`` [B/s].

    Inside a node: the fabric's. Across nodes: ``min(intra, e_net * k * B_nic)`` with ``k`` ranks per
    node (a ring through ``k`` GPUs of a node uses ``k`` NICs at once).

    Parameters
    ----------
    system : SystemSpec, str or GPU
        The cluster (``gm.system``); a GPU means one node of it.
    n : int or array
        Ranks in the group.
    stride : int or array
        Distance between consecutive ranks of the group in the global rank order (ranks fill a node
        before the next).

    Returns
    -------
    float or ndarray
        Bus bandwidth of the group's slowest hop [B/s]; ``inf`` for a group of one rank, NaN when the group
        spans nodes of a system without a network.
    """
    s = resolve_system(system)
    n, stride = positive_int(n, "n"), positive_int(stride, "stride")
    broadcastable(n=n, stride=stride)
    k, nodes = group_layout(s, n, stride)
    intra = link_bus_bandwidth(s.intra_node)
    if s.inter_node is None:
        net = np.where(nodes > 1, np.nan, np.inf)
    else:
        net = np.where(nodes > 1, link_bus_bandwidth(s.inter_node) * k, np.inf)
    return scalar_or_array(np.minimum(np.where(k > 1, intra, np.inf), net))


def system_collective_time(collective: Any, nbytes: Any, system: Any, n: Any, stride: Any = 1,
                           algorithm: Any = "auto") -> Any:
    """Time of a collective over ``n`` GPUs of ``system``, ranks ``stride`` apart [s].

    Parameters
    ----------
    collective, nbytes :
        As :func:`collective_time`.
    system : SystemSpec, str or GPU
        The cluster (``gm.system``); a GPU means one node of it.
    n, stride : int or array
        Group size and the distance between consecutive ranks of the group in the global rank order
        (ranks fill a node before the next): a tensor-parallel group has stride 1, a data-parallel group
        stride ``tp * cp``.
    algorithm : {"auto", "ring", "tree", "hierarchical", "nvls"}
        ``"auto"`` (default): the fastest of ring, tree and, where the system has NVLink SHARP, NVLS, as
        NCCL's tuner picks. ``"nvls"``: NVLink SHARP (NCCL's NVLS inside a node, NVLS_TREE across nodes,
        :func:`~gpumodel.cluster.nvls.nvls_time`); an :class:`~gpumodel.base.errors.ArgumentError` where NCCL
        could not run it. ``"ring"``: one ring through all ranks, at the bus bandwidth of its slowest hop
        (:func:`group_bus_bandwidth`). ``"tree"``: the same bandwidth with ``2 ceil(log2 nodes)`` network
        steps (NCCL's tree across nodes, a chain inside). ``"hierarchical"``: reduce-scatter inside each
        node, the collective on ``1/k`` of the data across nodes, all-gather inside (all-reduce; other
        collectives fall back to the ring).

    Returns
    -------
    float or ndarray
        [s]. NaN when the group spans nodes of a system without a network.

    Examples
    --------
    >>> from gpumodel.cluster.collectives import system_collective_time
    >>> t = system_collective_time("all_reduce", 1e9, "dgx-h100", 8, algorithm="ring")
    >>> round(1e9 * 1.75 / t / 1e9)   # ring busbw [GB/s] inside one DGX H100
    356
    >>> t = system_collective_time("all_reduce", 1e9, "dgx-h100", 8)   # NCCL's pick: NVLink SHARP
    >>> round(1e9 * 1.75 / t / 1e9)
    473
    """
    s = resolve_system(system)
    alg = choice(Algorithm, algorithm, "algorithm")
    op = choice(Collective, collective, "collective")
    nbytes = nonnegative_number(nbytes, "nbytes")
    n, stride = positive_int(n, "n"), positive_int(stride, "stride")
    broadcastable(nbytes=nbytes, n=n, stride=stride)
    if alg == Algorithm.NVLS:
        return nvls_time(op, nbytes, s, n, stride)
    if alg == Algorithm.AUTO:
        best = system_collective_time(op, nbytes, s, n, stride, Algorithm.RING)
        if op == Collective.ALL_REDUCE:
            best = np.fmin(best, system_collective_time(op, nbytes, s, n, stride, Algorithm.TREE))
        if s.nvlink_sharp and op.value in NVLS_COLLECTIVES:  # inf where NCCL could not run NVLS
            best = np.fmin(best, nvls_time(op, nbytes, s, n, stride, strict=False))
        return scalar_or_array(best)
    n = positive_int(n, "n")
    stride = positive_int(stride, "stride")
    k, nodes = group_layout(s, n, stride)
    nbytes = np.asarray(nonnegative_number(nbytes, "nbytes"), float)
    intra_bw = link_bus_bandwidth(s.intra_node)
    kind = _STEP_KIND.get(s.intra_node.fabric, "nvlink")
    if s.inter_node is None:
        net_bw = np.nan
    else:
        net_bw = link_bus_bandwidth(s.inter_node)
    multi = nodes > 1
    nn = np.asarray(n, float)
    f = np.asarray(bus_factor(op, np.asarray(n)), float)
    best = np.inf
    for base, alphas, share in PROTOCOLS.values():  # NCCL's tuner takes the fastest protocol
        intra_alpha, net_alpha = alphas[kind], alphas["net"]
        ib, nb = intra_bw * share, net_bw * share
        if alg == Algorithm.HIERARCHICAL and op == Collective.ALL_REDUCE:
            inner = np.where(k > 1, (k - 1) / k * nbytes / ib + (k - 1) * intra_alpha, 0.0)
            outer = np.where(multi, 2 * (nodes - 1) / nodes * nbytes / k / nb + 2 * (nodes - 1) * net_alpha, 0.0)
            t = base + 2 * inner + outer
        else:
            bw = np.minimum(np.where(k > 1, ib, np.inf), np.where(multi, k * nb, np.inf))
            if alg == Algorithm.TREE and op == Collective.ALL_REDUCE:
                steps_net = 2 * np.ceil(np.log2(np.maximum(nodes, 1)))
                steps_intra = 2 * (k - 1)
            else:
                steps = np.asarray(latency_steps(op, np.asarray(n)), float)
                frac_net = np.where(multi, nodes / np.maximum(nn, 1), 0.0)  # hops of the ring that leave a node
                steps_net = steps * frac_net
                steps_intra = steps - steps_net
            move = f * nbytes / bw
            if op == Collective.ALL_TO_ALL:  # no ring: each rank sends (n - k) / n of its buffer off its node
                off = np.where(multi, (nn - k) / np.maximum(nn, 1) * nbytes / nb, 0.0)
                on = np.where(k > 1, (k - 1) / np.maximum(nn, 1) * nbytes / ib, 0.0)
                move = np.maximum(off, on)
            t = base + steps_intra * intra_alpha + steps_net * net_alpha + move
        best = np.minimum(best, t)  # NaN (no network) propagates
    t = best
    t = np.where(f > 0, t, 0.0)
    return scalar_or_array(t)
