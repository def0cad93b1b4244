"""Device memory that NCCL's communicators hold outside PyTorch's allocator, per GPU of a parallel job.

Every process group a training engine communicates on is an NCCL communicator, and each one keeps its own
channel buffers (FIFOs of ``NCCL_BUFFSIZE`` per channel and peer, for each protocol) for as long as the job
runs, allocated when the group first communicates. They sit outside ``torch.cuda.memory_reserved`` beside the
CUDA context, so a layout whose allocator peak fits the card by a GiB or two can still run out of memory.
What a communicator holds depends on its connections, not its message sizes:

* **Collectives** (all-reduce, all-gather, reduce-scatter; rings and trees): two neighbours a channel, whatever
  the group's size ("Ring uses a limited amount of memory as it only has 2 connections regardless of the
  scale"): :data:`COLLECTIVE_BYTES`, :data:`PAIR_BYTES` for a group of two.
* **Point-to-point** (pipeline stages' sends, ring attention's): a pair communicator's buffers
  (:data:`PAIR_BYTES`).
* **All-to-all** (expert parallelism's dispatch and combine): a connection to every peer inside a node, each with
  all the channels (:data:`ALLTOALL_PEER_BYTES` a peer); peers across nodes share one pool of network buffers
  (``NCCL_NET_SHARED_BUFFERS``, on by default: :data:`NET_SHARED_BYTES`).

The groups each engine communicates on (ranks > 1 only; one GPU holds none):

* every engine: the default group (its barriers);
* ``"megatron"``: tensor, data x context (gradients and the distributed optimizer's gathers), context (ring
  attention's sends), pipeline (sends to the next and previous stage), model-parallel (tensor x pipeline: the
  gradient norm), and with experts the expert (all-to-all) and expert data-parallel groups;
* ``"deepspeed"``: data x context, tensor, pipeline (a pair communicator to each neighbouring stage), expert;
* ``"fsdp"``: the sharding group, the replicating group of HSDP, tensor, pipeline, expert;
* ``"hf"``: DDP reduces on the default group (a data-parallel group of its own only beside other degrees), and a
  tensor-parallel mesh's group and pipeline sends where the job splits the model.

The sizes are those measured on A100 and H100 nodes and reported to NCCL's maintainers; NCCL's memory grows
with its channel count, which is larger on H100 (32 channels a pair) than on A100 (24), so on Hopper and later
the figures are low rather than high. The estimate counts what a step needs; NCCL versions, ``NCCL_BUFFSIZE``,
NVLink SHARP and user-buffer registration move it by hundreds of MiB a communicator.

References
----------
NVIDIA/nccl issue #964 (2023): one communicator after a 4 MB all-reduce on four A100s with NVLink, measured from
PyTorch: 544 MB for a group of two, 688 MB for larger groups.
NVIDIA/nccl issue #864 and the maintainer's answer quoted in issue #986 (2023): memory is per communicator,
linear in the channel count, two connections a ring regardless of scale, more for send/receive and all-to-all.
NVIDIA/nccl issue #1685 (2025): the first ``all_to_all_single`` among eight H100s of one node raised NCCL's
memory from 1.06 GB to 4.34 GB (32 channels to each peer).
NVIDIA/nccl issue #2363 (2026): the shared network point-to-point buffer, 536,870,912 B (NCCL 2.28).

Examples
--------
>>> import numpy as np
>>> round(communicator_bytes("megatron", dp=4, tp=8, pp=12) / 2**30, 2)   # default, tp, dp, pp, tp x pp
3.22
>>> communicator_bytes("hf")                                              # one GPU
0.0
>>> np.round(communicator_bytes("fsdp", dp=np.array([1, 2, 64])) / 2**30, 2)
array([0.  , 1.06, 1.34])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..vocabulary import Framework, choice

__all__ = ["communicator_bytes", "COLLECTIVE_BYTES", "PAIR_BYTES", "ALLTOALL_PEER_BYTES", "NODE_GPUS",
           "NET_SHARED_BYTES"]

MiB = 2 ** 20
#: A communicator that has run a collective among more than two ranks (NVIDIA/nccl issue #964: 688 MB) [B].
COLLECTIVE_BYTES = 688 * MiB
#: A communicator of two ranks, or one rank's point-to-point connections to its neighbours (issue #964: 544 MB) [B].
PAIR_BYTES = 544 * MiB
#: One all-to-all peer inside a node: (4.34 GB - 1.06 GB) / 7 peers on eight H100s (NVIDIA/nccl issue #1685) [B].
ALLTOALL_PEER_BYTES = (4.34e9 - 1.06e9) / 7
#: GPUs of a node the all-to-all reaches over NVLink (HGX and DGX nodes of eight).
NODE_GPUS = 8
#: The network buffers an all-to-all's peers in other nodes share (NVIDIA/nccl issue #2363: 536,870,912 B) [B].
NET_SHARED_BYTES = 512 * MiB


def _group(n) -> np.ndarray:
    """A collective communicator of ``n`` ranks [B]: none for one rank."""
    n = np.asarray(n)
    return np.where(n > 2, COLLECTIVE_BYTES, np.where(n == 2, PAIR_BYTES, 0.0))


def _pair(n) -> np.ndarray:
    """Point-to-point connections within a group of ``n`` ranks [B]."""
    return np.where(np.asarray(n) > 1, PAIR_BYTES, 0.0)


def communicator_bytes(framework: Any = "hf", *, dp: Any = 1, tp: Any = 1, pp: Any = 1, cp: Any = 1, ep: Any = 1,
                       shard_group: Any = None) -> Any:
    """Device memory of the NCCL communicators one GPU of a job holds outside the caching allocator [B].

    Parameters
    ----------
    framework : {"hf", "megatron", "deepspeed", "fsdp"}
        The engine: which process groups communicate (see the module notes).
    dp, tp, pp, cp, ep : int or array
        Data-, tensor-, pipeline-, context- and expert-parallel degrees (``ep`` divides ``dp * cp``).
    shard_group : int or array, optional
        FSDP's sharding group under HSDP (``dp * cp`` when None): the rest replicate over a second group.

    Returns
    -------
    float or ndarray
        ``sum`` over the groups of more than one rank of :data:`COLLECTIVE_BYTES` (:data:`PAIR_BYTES` for two
        ranks and for point-to-point), plus for ``ep > 1`` ``ALLTOALL_PEER_BYTES * (k - 1 + (ep - k) * 2 / 32)``
        with ``k = min(ep, 8)`` peers inside the node [B]; 0 for one GPU.

    Examples
    --------
    A mixture of experts on 64 GPUs: the default group, pipeline sends, data-parallel, model-parallel (tensor x
    pipeline) and expert data-parallel groups (688 + 544 + 688 + 688 + 544 MiB), and an all-to-all with 7 peers
    in the node (3.28 GB):

    >>> round(communicator_bytes("megatron", dp=16, pp=4, ep=8) / 2**30, 2)
    6.13
    """
    fw = choice(Framework, framework, "framework")
    dp, tp, pp, cp, ep = (np.asarray(x) for x in (dp, tp, pp, cp, ep))
    group = dp * cp
    world = group * tp * pp
    total = _group(world)
    if fw == Framework.HF:   # DDP reduces on the default group; a tensor or pipeline split opens its own
        total = total + np.where((dp > 1) & (dp < world), _group(dp), 0.0) \
            + np.where((tp > 1) & (tp < world), _group(tp), 0.0) + _pair(pp)
    else:
        total = total + _group(tp) + _pair(pp)
        if fw == Framework.FSDP:
            shard = group if shard_group is None else np.asarray(shard_group)
            total = total + _group(shard) + _group(group // shard)
        else:
            total = total + _group(group)
        if fw == Framework.MEGATRON:
            total = total + _pair(cp) + _group(tp * pp) + np.where(ep > 1, _group(group // ep), 0.0)
        elif fw == Framework.DEEPSPEED:
            total = total + _pair(pp)      # one pair communicator to each neighbouring stage
        k = np.minimum(ep, NODE_GPUS)
        total = total + ALLTOALL_PEER_BYTES * (k - 1) + np.where(ep > k, NET_SHARED_BYTES, 0.0)
    out = np.where(world > 1, total, 0.0)
    return float(out) if out.ndim == 0 else out
