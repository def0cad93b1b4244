"""ZeRO-3 as DeepSpeed gathered before v0.5.5: one synchronous list all-gather per parameter tensor.

The step's ``zero3_gather="per_parameter"`` (:class:`gpumodel.vocabulary.Zero3Gather`). Today's engines (FSDP,
DeepSpeed from v0.5.5 on) gather a layer's weights as one flat buffer and prefetch the
next layer's under the current one's compute (:func:`gpumodel.cluster.dataparallel.zero3_layer_times`).
DeepSpeed v0.3.13-v0.5.4 (March-October 2021, the ZeRO-3 of Narayanan et al.'s SC21 comparison) did not:

* ``partition_parameters.py`` (``_allgather_param``) gathered **each parameter tensor on its own**:
  ``torch.zeros`` of the whole tensor, ``torch.cuda.synchronize()``, a Python loop making one ``narrow()`` view
  per rank, then ``torch.distributed.all_gather`` on that list of ``N`` views. PyTorch's NCCL process group
  gathers a list into a flat buffer of its own and copies it out rank by rank (one ``copy_`` a rank, from C++),
  and ``stage3.py`` synchronised the device again before a sub-module ran ("the async version is not async at
  all", DeepSpeed PR #1188, which moved to a flat ``_all_gather_base`` in v0.5.5). Nothing of it overlaps
  compute, and each tensor costs host work **per rank**: at 1,536 ranks a layer of a 175B GPT (four gathered
  matrices) makes 6,144 views and copies per gather.
* Tensors of fewer than ``stage3_param_persistence_threshold`` elements (default 10^5: biases and norms) stay
  whole on every rank and are never gathered (:data:`PERSISTENCE_THRESHOLD`).
* The gradients were reduce-scattered **each tensor on its own** too (``stage3.py``, ``average_tensor`` with the
  default ``reduce_scatter: true``; ``partition_parameters.py``, ``_reduce_scatter_gradient``): a Python loop of
  one ``narrow()`` view of the 16-bit gradient per rank, then ``torch.distributed.reduce_scatter`` on that list,
  which PyTorch's NCCL process group copies into a flat buffer rank by rank. It runs on a stream of its own from
  the backward's gradient hooks: the host issues it while the device works through the layer's queued backward
  kernels, so it shows only where it outlasts them.

So a layer of one micro-batch exposes, per gather (once in its forward, and in the backward once or, with
full recomputation, twice):

.. math::

    G = \\sum_t \\Big[ T_\\mathrm{AG}(2 n_t) + N\\,(c_\\mathrm{view} + c_\\mathrm{copy})
        + 3 \\cdot 2 n_t / B_\\mathrm{HBM} \\Big],

summed over the tensors of at least :data:`PERSISTENCE_THRESHOLD` elements, with ``n_t`` the elements of tensor
``t``, ``T_AG`` NCCL's all-gather over the ``N`` ranks
(:func:`~gpumodel.cluster.collectives.system_collective_time`, each tensor's ring latency included), the
per-rank view and copy costs of :data:`PER_RANK_S`, and the device memory the zero-fill and the copies move
(write ``2 n_t`` bytes, read and write them again). The gradients' reduce-scatter,
:math:`R = \\sum_t [T_\\mathrm{RS}(2 n_t) + N (c_\\mathrm{view} + c_\\mathrm{copy})]`, exposes
:math:`\\max(0, R - t_\\mathrm{backward})`.

References
----------
deepspeedai/DeepSpeed, ``deepspeed/runtime/zero/partition_parameters.py`` (``_allgather_param``,
``_reduce_scatter_gradient``) and ``stage3.py`` (``average_tensor``, ``reduce_ipg_grads``) at v0.3.13 and v0.4.0
(2021); PR #1188. PyTorch ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`` (``allgather``: flat buffer, then a copy
per rank). D. Narayanan et al., SC 2021, Table 2 (the ZeRO-3 rows these costs are checked on).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..records.transformer import MLPType, TransformerConfig
from .collectives import system_collective_time

__all__ = ["PER_RANK_S", "PERSISTENCE_THRESHOLD", "layer_tensor_elements", "per_parameter_gather_time",
           "per_parameter_layer_times"]

#: Host time per rank of one tensor's gather: a Python ``narrow()`` view and a ``copy_`` of the rank's partition
#: issued from a compiled loop, as PyTorch's process group issues it from C++ [s]. Medians over the SC21 runs' 60
#: (tensor, ranks) cases measured on an H100 machine's host (Intel Xeon, Python 3.12, torch 2.11):
#: ``python bench/measure_gather_host.py``, ``tests/data/cluster/gather_host/h100.jsonl`` (views 1.83-1.97 us,
#: copies 5.1-11.7 us).
PER_RANK_S = {"view": 1.91e-6, "copy": 5.24e-6}


#: DeepSpeed's ``stage3_param_persistence_threshold`` default: tensors of fewer elements are not partitioned
#: (DeepSpeed configuration documentation, "ZeRO optimizations for FP16 training"; ``stage3.py``,
#: ``persistent_parameters``) [count].
PERSISTENCE_THRESHOLD = 100_000


def layer_tensor_elements(cfg: TransformerConfig) -> np.ndarray:
    """Elements of each parameter tensor of one decoder layer as Megatron builds it [count] (a tensor-parallel rank
    holds ``1 / tp`` of each: :func:`per_parameter_gather_time` divides).

    The query, key and value projections are one fused matrix (with its bias when ``qkv_bias``), a gated MLP's
    gate and up projections one matrix; the norms are a weight (and a bias when ``norm_bias``) each. A mixture of
    experts counts each expert's matrices, the router and the shared expert.

    Examples
    --------
    >>> import gpumodel as gm
    >>> gpt = gm.TransformerConfig(name="gpt", hidden_size=12288, num_layers=96, num_heads=96, num_kv_heads=96,
    ...                            intermediate_size=49152, vocab_size=51200, mlp="plain", activation="gelu",
    ...                            norm="layernorm", qkv_bias=True, o_bias=True, mlp_bias=True, norm_bias=True)
    >>> t = layer_tensor_elements(gpt)
    >>> len(t), int(t.sum()) == gpt.layer_parameters()   # QKV, proj, fc1, fc2 with biases; two norms
    (12, True)
    """
    h, q, kv = cfg.hidden_size, cfg.q_dim, cfg.kv_dim
    qkv = q + 2 * kv
    out = [qkv * h, h * q]
    out += [qkv] * bool(cfg.qkv_bias) + [h] * bool(cfg.o_bias)
    gated = cfg.mlp == MLPType.GATED

    def mlp(width: int) -> list[int]:
        up = (2 if gated else 1) * width
        return [up * h, h * width] + ([up, h] if cfg.mlp_bias else [])

    if cfg.is_moe:
        out += [cfg.num_experts * h]
        for _ in range(cfg.num_experts):
            out += mlp(cfg.expert_size)
        if cfg.shared_expert_intermediate_size:
            out += mlp(cfg.shared_expert_intermediate_size)
    else:
        out += mlp(cfg.intermediate_size)
    out += [h] * ((2 + cfg.extra_norms) * (2 if cfg.norm_bias else 1))
    return np.asarray(out, dtype=float)


def per_parameter_gather_time(system, cfg: TransformerConfig, tp: Any, group: Any, stride: Any,
                               param_bytes: int) -> Any:
    """One gather of a layer's tensors the way DeepSpeed gathered them before v0.5.5 [s].

    Parameters
    ----------
    system : SystemSpec
        The cluster.
    cfg : TransformerConfig
        The model (its layer's tensors: :func:`layer_tensor_elements`).
    tp : int or array
        Tensor-parallel degree (each tensor's elements ``/ tp``).
    group, stride : int or array
        Ranks of the sharding group and their distance in the global rank order.
    param_bytes : int
        Bytes per gathered weight [B].

    Returns
    -------
    float or ndarray
        ``G`` of the module's equation, 0 for a group of one rank [s]; broadcast over ``tp``, ``group`` and
        ``stride``.

    Examples
    --------
    >>> import gpumodel as gm
    >>> t = per_parameter_gather_time(gm.system("dgx-a100-80gb"), gm.model("llama-2-70b"), 1, 1024, 1, 2)
    >>> 0.03 < float(t) < 0.1   # 4 NCCL gathers (1.7 GB in all), 4,096 views and copies, 5 GB through HBM
    True
    """
    return _per_tensor(system, cfg, tp, group, stride, param_bytes, "all_gather", hbm_passes=3)


def _per_tensor(system, cfg: TransformerConfig, tp: Any, group: Any, stride: Any, nbytes_per_element: int,
                collective: str, hbm_passes: int) -> Any:
    """One collective a partitioned tensor of a layer, issued with a list of ``group`` views (NCCL's time, the host's
    per-rank view and copy, ``hbm_passes`` passes of the tensor through device memory) [s]; 0 for one rank."""
    tp, group, stride = np.asarray(tp), np.asarray(group), np.asarray(stride)
    shape = np.broadcast(tp, group, stride).shape
    t, g, st = (np.broadcast_to(x, shape)[..., None].astype(float) for x in (tp, group, stride))
    elements = layer_tensor_elements(cfg)
    elements = elements[elements >= PERSISTENCE_THRESHOLD]
    nbytes = elements * nbytes_per_element / t
    nccl = np.asarray(system_collective_time(collective, nbytes, system, g.astype(int), st.astype(int))).sum(axis=-1)
    host = len(elements) * group * (PER_RANK_S["view"] + PER_RANK_S["copy"])
    device = hbm_passes * nbytes.sum(axis=-1) / system.gpu.memory_bandwidth
    return np.where(group > 1, nccl + host + device, 0.0)


def per_parameter_layer_times(system, cfg: TransformerConfig, tp: Any, group: Any, stride: Any, param_bytes: int,
                              grad_bytes: int, backward_s: Any, recompute: Any) -> tuple[Any, Any]:
    """ZeRO-3's gathers and gradient reduce-scatters of one layer in one micro-batch, DeepSpeed before v0.5.5:
    (exposed, all of it) [s].

    The gathers (:func:`per_parameter_gather_time`: once forward, once backward and once more for a fully
    recomputed forward) are all exposed; the gradients' reduce-scatters, a tensor at a time with the same per-rank
    host work and a pass through a flat buffer (read and write), run under the layer's backward (``backward_s``,
    the recomputed forward included) and expose what they outlast it. The arguments are those of
    :func:`per_parameter_gather_time` and :func:`gpumodel.cluster.dataparallel.zero3_layer_times`.
    """
    gather = per_parameter_gather_time(system, cfg, tp, group, stride, param_bytes)
    reduce = _per_tensor(system, cfg, tp, group, stride, grad_bytes, "reduce_scatter", hbm_passes=2)
    gathers = np.where(np.asarray(recompute), 3.0, 2.0) * gather
    return gathers + np.maximum(0.0, reduce - backward_s), gathers + reduce
