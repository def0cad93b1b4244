"""Data-parallel communication: the gradient reduction and ZeRO's parameter gathers, and how much of it is exposed.

Each data-parallel group (``dp * cp`` ranks, ``tp`` apart) synchronises what its ranks hold of one pipeline stage:

* **ZeRO-0** all-reduces the gradients; **ZeRO-1/2** reduce-scatter them and all-gather the updated
  parameters after the optimizer step (Megatron-Core's distributed optimizer is ZeRO-1).
* **ZeRO-3** (DeepSpeed stage 3, FSDP's full shard) keeps only a shard of the weights: every micro-batch
  all-gathers each layer's weights for its forward and again for its backward, and reduce-scatters its
  gradients. With full recomputation DeepSpeed gathers a third time for the recomputed forward (its hooks
  release the weights after every forward); FSDP recomputes inside the backward's gather. The next
  layer's gather is prefetched under the current layer's compute (FSDP's ``backward_prefetch``, DeepSpeed's
  prefetch bucket), so each layer exposes what its collectives outlast its compute:
  ``max(0, t_gather - t_forward)`` forward, ``max(0, t_gather + t_reduce - t_backward)`` backward.
* **Exposure.** Megatron-LM reduces after the pipeline flush (all exposed) unless ``--overlap-grad-reduce``
  and ``--overlap-param-gather`` (``comm_overlap``) run the buckets under the last micro-batch's backward
  and the first one's forward. PyTorch DDP, FSDP and DeepSpeed bucket the reduction under the last
  backward; the last bucket is always exposed; DeepSpeed's ZeRO-1/2 all-gathers its updated parameters
  after the optimizer step (exposed), FSDP's ZeRO-2 re-gathers layer by layer under the next forward.
* **Gradient precision.** Megatron-LM reduces bf16 gradients in fp32 (``--accumulate-allreduce-grads-in-fp32``
  is forced on with ``--bf16``) and fp16 ones in fp16; DeepSpeed in the 16-bit compute format; PyTorch DDP and FSDP
  in the parameters' format (fp32 master gradients under autocast, ``param_bytes``).

Collective times come from :func:`gpumodel.cluster.collectives.system_collective_time` (NCCL's algorithm and
protocol choice, latency of many-rank rings included). Functions broadcast over numpy arrays of the degrees.

References
----------
S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC 2020.
Y. Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel", VLDB 2023 (prefetching).
Megatron-LM ``megatron/training/arguments.py`` (bf16 gradients reduced in fp32) and
``megatron/core/distributed`` (bucketed, overlapped reduction).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..vocabulary import Framework
from .collectives import system_collective_time

__all__ = ["gradient_bytes", "replica_all_reduce", "zero3_layer_exposed", "zero3_layer_times", "step_sync_exposed",
           "step_sync_times",
           "DDP_BUCKET_BYTES", "MEGATRON_BUCKET_PARAMS"]

#: PyTorch DDP's default gradient bucket (``bucket_cap_mb=25``): the last bucket's reduction is never hidden [B].
DDP_BUCKET_BYTES = 25 * 2**20
#: Megatron-Core's gradient bucket with ``--overlap-grad-reduce`` (``--ddp-bucket-size`` default, 40M parameters).
MEGATRON_BUCKET_PARAMS = 40_000_000


def gradient_bytes(framework: Framework, prec, reduce_dtype: str | None = None) -> int:
    """Bytes per gradient element the data-parallel reduction moves [B].

    Parameters
    ----------
    framework : Framework
        The training engine.
    prec : Precision
        The training precision (:func:`gpumodel.vocabulary.precision`).
    reduce_dtype : {None, "fp32", "bf16", "fp16"}
        Megatron-LM's gradient buffer and reduction format when set (``--grad-reduce-in-bf16``, NeMo's distributed
        Adam ``grad_sync_dtype``); None: the engine's default below.

    Returns
    -------
    int
        Megatron-LM: 4 for bf16 compute (gradients accumulated and reduced in fp32), else the compute format's
        bytes; DeepSpeed: the compute format's (its fp16 and bf16 engines keep 16-bit gradients); PyTorch DDP and
        FSDP: the parameters' format (``prec.param_bytes``: fp32 gradients of fp32 master weights under autocast).

    Examples
    --------
    >>> from gpumodel.vocabulary import precision
    >>> gradient_bytes(Framework.MEGATRON, precision("amp_bf16")), gradient_bytes(Framework.MEGATRON, precision("amp_fp16"))
    (4, 2)
    >>> gradient_bytes(Framework.DEEPSPEED, precision("amp_fp16")), gradient_bytes(Framework.FSDP, precision("amp_bf16"))
    (2, 4)
    """
    if framework == Framework.MEGATRON:
        if reduce_dtype is not None:
            return 4 if reduce_dtype == "fp32" else 2
        return 4 if prec.compute_dtype.value == "bf16" else prec.compute_bytes
    if framework == Framework.DEEPSPEED:
        return prec.compute_bytes
    return prec.param_bytes


def replica_all_reduce(system, shard_bytes: Any, replicas: Any, stride: Any) -> Any:
    """HSDP's all-reduce of a gradient shard across the replicas of the sharding group [s] (0 for one replica).

    Parameters
    ----------
    system : SystemSpec
        The cluster.
    shard_bytes : float or array
        The reduce-scattered gradient shard of one rank [B].
    replicas, stride : int or array
        Replica groups and the distance between their ranks in the global rank order (``tp`` times the sharding
        group: the replicas of a rank sit on other nodes).

    Examples
    --------
    >>> import gpumodel as gm
    >>> round(float(replica_all_reduce(gm.system("dgx-h100"), 1e9, 16, 8)) * 1e3)  # 1 GB over 16 nodes' NICs
    42
    """
    replicas = np.asarray(replicas)
    if not np.any(replicas > 1):        # no replicas anywhere (every layout but HSDP's): nothing to price
        return np.zeros(np.broadcast_shapes(replicas.shape, np.shape(shard_bytes), np.shape(stride)))
    t = np.asarray(system_collective_time("all_reduce", shard_bytes, system, np.maximum(replicas, 1), stride))
    return np.where(replicas > 1, t, 0.0)


def zero3_layer_exposed(framework: Framework, system, layer_params: Any, group: Any, stride: Any, param_bytes: int,
                        grad_bytes: int, forward_s: Any, backward_s: Any, recompute: Any, replicas: Any = 1) -> Any:
    """ZeRO-3's exposed gathers and reduce-scatter of one layer in one micro-batch [s].

    Parameters
    ----------
    framework : Framework
        DeepSpeed gathers again for a recomputed forward; FSDP does not.
    system : SystemSpec
        The cluster.
    layer_params : float or array
        The layer's parameters on one tensor rank [count].
    group, stride : int or array
        Ranks of the sharding group and their distance in the global rank order.
    param_bytes, grad_bytes : int
        Bytes per gathered weight and per reduced gradient element [B].
    forward_s, backward_s : float or array
        The layer's forward and backward compute (the backward with its recomputed forward) [s].
    recompute : bool or array
        Full recomputation.
    replicas : int or array
        HSDP's replicas (FSDP's hybrid shard): ``group`` is then one replica's sharding group, and each layer's
        reduce-scattered gradient shard is all-reduced across the ``replicas`` groups (ranks ``stride * group``
        apart) in the backward, after its reduce-scatter. 1: the sharding group is the whole data-parallel group.

    Returns
    -------
    float or ndarray
        ``max(0, g - t_f) + max(0, k g + r + a - t_b)`` with ``g`` one all-gather, ``r`` the reduce-scatter, ``a``
        HSDP's all-reduce of the shard across replicas (0 for one replica) and ``k`` 2 for DeepSpeed with
        recomputation, else 1 [s].
    """
    return zero3_layer_times(framework, system, layer_params, group, stride, param_bytes, grad_bytes, forward_s,
                             backward_s, recompute, replicas)[0]


def zero3_layer_times(framework: Framework, system, layer_params: Any, group: Any, stride: Any, param_bytes: int,
                      grad_bytes: int, forward_s: Any, backward_s: Any, recompute: Any,
                      replicas: Any = 1) -> tuple[Any, Any]:
    """ZeRO-3's gathers and reduce-scatter of one layer in one micro-batch: (exposed, all of it) [s].

    The arguments are :func:`zero3_layer_exposed`'s; the second value, ``(1 + k) g + r + a``, less the first is the
    time the collectives run under the layer's compute.
    """
    gather = np.asarray(system_collective_time("all_gather", layer_params * param_bytes, system, group, stride))
    reduce = np.asarray(system_collective_time("reduce_scatter", layer_params * grad_bytes, system, group, stride))
    reduce = reduce + replica_all_reduce(system, layer_params * grad_bytes / np.asarray(group), replicas,
                                         np.asarray(stride) * np.asarray(group))
    again = np.where(np.asarray(recompute) & (framework == Framework.DEEPSPEED), 2.0, 1.0)
    exposed = np.maximum(0.0, gather - forward_s) + np.maximum(0.0, again * gather + reduce - backward_s)
    return exposed, (1.0 + again) * gather + reduce


def step_sync_exposed(framework: Framework, system, zero: Any, stage_params: Any, group: Any, stride: Any,
                      param_bytes: int, grad_bytes: int, last_backward_s: Any, first_forward_s: Any,
                      comm_overlap: bool = False, replicas: Any = 1) -> Any:
    """The exposed data-parallel communication of one step, once per step (ZeRO 0-2; ZeRO-3's gathers and
    reduce-scatters run per layer: :func:`zero3_layer_exposed`) [s].

    Parameters
    ----------
    framework : Framework
        The training engine (what overlaps what: see the module's notes).
    system : SystemSpec
        The cluster.
    zero : int or array
        ZeRO stage.
    stage_params : float or array
        Parameters one GPU holds of its pipeline stage before ZeRO [count].
    group, stride : int or array
        Ranks of the data-parallel group and their distance in the global rank order.
    param_bytes, grad_bytes : int
        Bytes per gathered weight and per reduced gradient element [B].
    last_backward_s, first_forward_s : float or array
        The last micro-batch's backward and the first one's forward on the stage [s].
    comm_overlap : bool
        Megatron-Core's ``--overlap-grad-reduce`` and ``--overlap-param-gather``.
    replicas : int or array
        HSDP's replicas (FSDP's hybrid shard with ZeRO-2): ``group`` is one replica's sharding group, and the
        reduce-scattered gradient shard is all-reduced across the replicas (:func:`replica_all_reduce`) with the
        reduction.

    Returns
    -------
    float or ndarray
        Exposed seconds; 0 for a group of one rank or ZeRO-3 (whose step-level share is in the layers).
    """
    return step_sync_times(framework, system, zero, stage_params, group, stride, param_bytes, grad_bytes,
                           last_backward_s, first_forward_s, comm_overlap, replicas)[0]


def step_sync_times(framework: Framework, system, zero: Any, stage_params: Any, group: Any, stride: Any,
                    param_bytes: int, grad_bytes: int, last_backward_s: Any, first_forward_s: Any,
                    comm_overlap: bool = False, replicas: Any = 1) -> tuple[Any, Any]:
    """The data-parallel communication of one step (ZeRO 0-2): (exposed, all of it) [s].

    The arguments are :func:`step_sync_exposed`'s; the second value less the first is the time the reduction and
    gathers run under compute.
    """
    zero, group = np.asarray(zero), np.asarray(group)

    def coll(op, nbytes):
        return np.asarray(system_collective_time(op, nbytes, system, group, stride))

    g_bytes = stage_params * grad_bytes
    red = np.where(zero == 0, coll("all_reduce", g_bytes), coll("reduce_scatter", g_bytes))
    red = red + np.where(zero >= 1, replica_all_reduce(system, g_bytes / group, replicas, np.asarray(stride) * group), 0.0)
    gat = np.where((zero >= 1) & (zero < 3), coll("all_gather", stage_params * param_bytes), 0.0)
    if framework == Framework.MEGATRON and not comm_overlap:
        out = red + gat
    elif framework == Framework.MEGATRON:   # bucket by bucket under the last backward and the first forward
        bucket = np.minimum(MEGATRON_BUCKET_PARAMS, stage_params)
        red_b = np.where(zero == 0, coll("all_reduce", bucket * grad_bytes), coll("reduce_scatter", bucket * grad_bytes))
        gat_b = np.where(gat > 0, coll("all_gather", bucket * param_bytes), 0.0)
        out = np.maximum(red - last_backward_s, red_b) + np.maximum(gat - first_forward_s, gat_b)
    else:   # buckets under the last backward, the last one exposed
        last = coll("all_reduce", np.minimum(DDP_BUCKET_BYTES, g_bytes))
        after = gat if framework == Framework.DEEPSPEED else np.maximum(0.0, gat - first_forward_s)
        out = np.maximum(red - last_backward_s, last) + after
    runs = ((group > 1) | (np.asarray(replicas) > 1)) & (zero < 3)
    return np.where(runs, out, 0.0), np.where(runs, red + gat, 0.0)
